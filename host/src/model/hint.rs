//! "Did you mean" hints: the edit distance, shared by the task reader
//! (field and param names) and the schedule (time zone names).

/// Edit distance (Levenshtein, by characters) between `a` and `b`.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The candidate closest to `word`, if it is close enough to be a likely
/// typo: at most 2 edits, or a third of the candidate's length for long ones.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (distance(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_candidate_within_reach_is_suggested() {
        assert_eq!(distance("Europe/Pariss", "Europe/Paris"), 1);
        assert_eq!(closest("fule", ["fuel", "memory_mb"]), Some("fuel"));
        assert_eq!(closest("zzzzzz", ["fuel", "memory_mb"]), None);
    }
}

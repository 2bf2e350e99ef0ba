//! [`CronSchedule`]: a Quartz cron expression in an IANA zone, and the fire
//! instants (UTC) it yields, with ax's daylight-saving rules.
//!
//! croner does the calendar work: it decides which local wall-clock times
//! match (ranges, `L`, `W`, `#`, years), asked about zone-less
//! [`NaiveDateTime`]s. Turning wall-clock times into instants is done here,
//! because croner's own zone handling classifies expressions differently from
//! ax's rule (it treats `0 30 1,13 * * ?` as an interval job, so it fires 01:30
//! twice on a fall-back night and skips 02:30 on a spring-forward day) and
//! gives up on gaps longer than two hours. The rule (docs/CRON.md):
//!
//! - *fixed-time* expressions — one second value, one minute value and not
//!   every hour — fire once per matching local time: a repeated time on its
//!   first pass only; a time inside a gap at the first instant after the gap
//!   (several such times collapse into one fire);
//! - every other expression (*interval*) fires at each real instant whose local
//!   time matches: on both passes of a repeated hour, never inside a gap, so
//!   its real spacing is kept.
//!
//! Instants are whole seconds. The zone's offset changes are found by probing
//! chrono-tz (it has no public transition list), which is cheap: a probe is a
//! binary search over the zone's table.

use std::sync::Arc;

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::{GapInfo, Tz};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use super::{Error, MAX_UPCOMING, Result, quartz};

/// Seconds in a day.
const DAY: i64 = 86_400;
/// Offset changes are looked for at this spacing; two changes closer than
/// this (none exist in the tz database since 1970) could be missed.
const PROBE: i64 = 6 * 3_600;
/// Safety bound on wall-clock matches examined by one `next_after`: a fold is
/// crossed in at most one or two hours of matches (3,600 per hour for a
/// one-second expression).
const MAX_SCAN: usize = 200_000;
/// `due` enumerates this many instants before switching to counting.
const ENUMERATE_LIMIT: usize = 1_000;

/// A compiled cron expression and its time zone.
#[derive(Clone, Debug, PartialEq)]
pub struct CronSchedule {
    /// The expression as written (trimmed), for messages and display.
    expr: String,
    /// Zone whose wall clock the expression reads.
    tz: Tz,
    /// Fixed-time vs interval, for the daylight-saving rule.
    fixed_time: bool,
    /// The compiled pattern, shared: clones are cheap and a [`super::Trigger`]
    /// holding a schedule stays small.
    compiled: Arc<Compiled>,
}

/// The parts of a [`CronSchedule`] built once at parse time.
#[derive(Debug, PartialEq)]
struct Compiled {
    /// croner pattern deciding which wall-clock times match.
    matcher: Cron,
    /// Matching times of day, for counting without enumerating.
    day_clock: DayClock,
}

/// Patterns compiled lately, by expression (they do not depend on the
/// zone), shared by every schedule parsed from the same text. Many tasks
/// share a few expressions (`0 0 * * * ?`), and croner's parse was the
/// largest single cost of a bulk apply (14 % of the server's CPU). Bounded:
/// a full cache is emptied, so any mix of expressions holds at most `bound`
/// patterns.
struct PatternCache {
    bound: usize,
    patterns: std::sync::Mutex<std::collections::HashMap<String, Arc<Compiled>>>,
}

impl PatternCache {
    fn new(bound: usize) -> Self {
        Self {
            bound,
            patterns: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The compiled pattern of `expr` (trimmed), from the cache or parsed
    /// (an expression that does not parse is not kept).
    fn get(&self, expr: &str) -> Result<Arc<Compiled>> {
        let patterns = || {
            self.patterns
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(compiled) = patterns().get(expr) {
            return Ok(compiled.clone());
        }
        let compiled = Arc::new(Compiled::parse(expr)?);
        let mut patterns = patterns();
        if patterns.len() >= self.bound {
            patterns.clear();
        }
        patterns.insert(expr.to_owned(), compiled.clone());
        Ok(compiled)
    }
}

/// The process's [`PatternCache`].
static PATTERNS: std::sync::LazyLock<PatternCache> =
    std::sync::LazyLock::new(|| PatternCache::new(4_096));

impl Compiled {
    /// The compiled pattern of `expr`, shared ([`PATTERNS`]).
    fn shared(expr: &str) -> Result<Arc<Compiled>> {
        PATTERNS.get(expr)
    }

    fn parse(expr: &str) -> Result<Compiled> {
        let pattern = quartz::translate(expr)?;
        let matcher = CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Required)
            .build()
            .parse(&pattern)
            .map_err(|e| Error::InvalidField {
                expr: expr.to_owned(),
                field: "expression",
                reason: e.to_string(),
            })?;
        let values = |c: &croner::CronComponent| c.values().into_iter().map(usize::from).collect();
        let day_clock = DayClock::new(
            values(&matcher.pattern.hours),
            values(&matcher.pattern.minutes),
            values(&matcher.pattern.seconds),
        );
        // The year field is limited to 1970–2099, so a search from 1970 that
        // finds nothing proves no date ever matches (31 February).
        let epoch = DateTime::UNIX_EPOCH.naive_utc();
        if matcher.find_next_occurrence(&epoch, true).is_err() {
            return Err(Error::NeverFires {
                expr: expr.to_owned(),
            });
        }
        Ok(Compiled { matcher, day_clock })
    }
}

impl CronSchedule {
    /// Parses a Quartz expression (6 or 7 fields, seconds first) in `timezone`
    /// (`""` or `"UTC"` = UTC, otherwise an IANA name).
    pub fn parse(expr: &str, timezone: &str) -> Result<Self> {
        let tz = parse_timezone(timezone)?;
        let expr = expr.trim();
        let compiled = Compiled::shared(expr)?;
        let clock = &compiled.day_clock;
        let fixed_time =
            clock.seconds.len() == 1 && clock.minutes.len() == 1 && clock.hours.len() < 24;
        Ok(Self {
            expr: expr.to_owned(),
            tz,
            fixed_time,
            compiled,
        })
    }

    /// The first fire instant strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.next_after_secs(after.timestamp()).and_then(instant)
    }

    /// The first `count` fire instants strictly after `from` (at most
    /// [`MAX_UPCOMING`]; fewer when the schedule ends).
    pub fn upcoming(&self, from: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        let mut t = from.timestamp();
        while out.len() < count.min(MAX_UPCOMING) {
            let Some(next) = self.next_after_secs(t) else {
                break;
            };
            let Some(at) = instant(next) else { break };
            out.push(at);
            t = next;
        }
        out
    }

    /// The zone the expression is read in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The expression as written (trimmed).
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// Whether the expression is fixed-time (one local time per matching hour,
    /// fired once across daylight-saving changes) rather than interval.
    pub fn is_fixed_time(&self) -> bool {
        self.fixed_time
    }

    /// How many instants lie in `[from, until]`, and the latest `keep` of them
    /// in ascending order. Bounded work however long the range.
    pub(super) fn tail(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        keep: usize,
    ) -> (usize, Vec<DateTime<Utc>>) {
        // Instants are whole seconds: [from, until] = (ceil(from) - 1, floor(until)].
        let keep = keep.min(ENUMERATE_LIMIT);
        let start = from.timestamp() - i64::from(from.timestamp_subsec_nanos() == 0);
        let end = until.timestamp();
        let mut seen = Vec::new();
        let mut t = start;
        while seen.len() < ENUMERATE_LIMIT {
            match self.next_after_secs(t) {
                Some(next) if next <= end => {
                    seen.push(next);
                    t = next;
                }
                _ => {
                    let kept = seen[seen.len().saturating_sub(keep)..].iter();
                    return (seen.len(), kept.filter_map(|&s| instant(s)).collect());
                }
            }
        }
        // Too many to list: count them, then find where the last `keep` start.
        let total = self.count_between(start, end);
        if keep == 0 {
            return (saturate(total), Vec::new());
        }
        let wanted = keep as u64;
        // The latest second `x` with at least `keep` instants in [x, end]; it
        // is itself an instant (the count only changes at instants).
        let (mut lo, mut hi) = (start + 1, end);
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if self.count_between(mid - 1, end) >= wanted {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let mut kept = Vec::with_capacity(keep);
        let mut t = lo - 1;
        while kept.len() < keep {
            match self.next_after_secs(t) {
                Some(next) if next <= end => {
                    kept.extend(instant(next));
                    t = next;
                }
                _ => break,
            }
        }
        (saturate(total), kept)
    }

    /// First fire instant strictly after `t` (Unix seconds).
    fn next_after_secs(&self, t: i64) -> Option<i64> {
        let offset_now = self.offset_at(t);
        // A coming fall-back repeats wall-clock times we are past: if the
        // clock goes back within `drop` seconds, start that much earlier so the
        // second pass of the repeated times is seen.
        let drop = offset_now - self.offset_at(t.checked_add(DAY + 2 * 3_600)?);
        let drop = if drop > 0 && self.offset_at(t + drop) < offset_now {
            drop
        } else {
            0
        };
        let mut cursor = wall(t + offset_now - drop)?;
        let mut inclusive = true;
        let mut best: Option<i64> = None;
        let better = |best: Option<i64>, c: i64| Some(best.map_or(c, |b| b.min(c)));
        for _ in 0..MAX_SCAN {
            let Ok(w) = self
                .compiled
                .matcher
                .find_next_occurrence(&cursor, inclusive)
            else {
                return best;
            };
            cursor = w;
            inclusive = false;
            // Walls are scanned in order; instants follow that order except
            // inside a fold, so the first candidate from a single or earlier
            // instant (or a gap) ends the scan.
            match self.tz.from_local_datetime(&w) {
                LocalResult::Single(i) if i.timestamp() > t => return better(best, i.timestamp()),
                LocalResult::Single(_) => {}
                LocalResult::Ambiguous(earlier, later) => {
                    if earlier.timestamp() > t {
                        return better(best, earlier.timestamp());
                    }
                    // Interval expressions also fire on the second pass; later
                    // walls of the same fold may still come first.
                    if !self.fixed_time && later.timestamp() > t {
                        best = better(best, later.timestamp());
                    }
                }
                LocalResult::None => {
                    if self.fixed_time
                        && let Some(end) = GapInfo::new(&w, &self.tz).and_then(|g| g.end)
                        && end.timestamp() > t
                    {
                        return better(best, end.timestamp());
                    }
                }
            }
        }
        best
    }

    /// Number of instants in `(t0, t1]` (Unix seconds), computed segment by
    /// segment of constant offset, each by calendar arithmetic.
    pub(super) fn count_between(&self, t0: i64, t1: i64) -> u64 {
        if t1 <= t0 {
            return 0;
        }
        let (lo, hi) = (t0 + 1, t1 + 1);
        // Start two days early so the segment covering `lo` is entered at its
        // offset change when that change is recent enough to matter.
        let mut start = lo - 2 * DAY;
        let mut offset = self.offset_at(start);
        let mut before = self.offset_at(start - 1);
        let mut total = 0;
        loop {
            let end = self.next_change(start, offset, hi);
            total += self.segment_count(start, end, offset, before, lo, hi);
            if end >= hi {
                return total;
            }
            before = offset;
            offset = self.offset_at(end);
            start = end;
        }
    }

    /// Instants in `[lo, hi)` of the constant-offset segment `[start, end)`;
    /// `before` is the offset just before `start`.
    fn segment_count(
        &self,
        start: i64,
        end: i64,
        offset: i64,
        before: i64,
        lo: i64,
        hi: i64,
    ) -> u64 {
        let changed = before != offset;
        let mut count = 0;
        let (a, b) = (lo.max(start), hi.min(end));
        if a < b {
            let mut wall_lo = a + offset;
            if self.fixed_time && changed && offset < before {
                // Second pass of a fold: fixed-time expressions already fired.
                wall_lo = wall_lo.max(start + before);
            }
            count += self.wall_count(wall_lo, b + offset);
        }
        // A gap: fixed-time matches inside it fire once, at `start`, unless
        // the first wall time after the gap matches anyway.
        if self.fixed_time
            && changed
            && offset > before
            && (lo..hi).contains(&start)
            && !self.wall_matches(start + offset)
            && self.wall_count(start + before, start + offset) > 0
        {
            count += 1;
        }
        count
    }

    /// First second in `(start, limit]` whose offset is not `offset`, or `limit`.
    fn next_change(&self, start: i64, offset: i64, limit: i64) -> i64 {
        let mut lo = start;
        loop {
            let hi = (lo + PROBE).min(limit);
            if self.offset_at(hi) != offset {
                // Invariant: offset_at(lo) == offset, offset_at(hi) != offset.
                let mut hi = hi;
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if self.offset_at(mid) == offset {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                return hi;
            }
            if hi >= limit {
                return limit;
            }
            lo = hi;
        }
    }

    /// Matching wall-clock seconds in `[from, to)` (wall seconds since the epoch).
    fn wall_count(&self, from: i64, to: i64) -> u64 {
        let (Some(from), Some(to)) = (wall(from), wall(to)) else {
            return 0;
        };
        if to <= from {
            return 0;
        }
        let mut total = 0;
        let mut day = from.date();
        let last = to.date();
        loop {
            if self.day_matches(day) {
                let lo = if day == from.date() {
                    seconds_of_day(from)
                } else {
                    0
                };
                let hi = if day == last {
                    seconds_of_day(to)
                } else {
                    DAY as usize
                };
                total += self.compiled.day_clock.between(lo, hi);
            }
            if day >= last {
                return total;
            }
            let Some(next) = day.succ_opt() else {
                return total;
            };
            day = next;
        }
    }

    fn day_matches(&self, day: chrono::NaiveDate) -> bool {
        use chrono::Datelike;
        let p = &self.compiled.matcher.pattern;
        let weekday = croner::Weekday::from_days_from_sunday(day.weekday().num_days_from_sunday());
        p.year_match(day.year()).unwrap_or(false)
            && p.month_match(day.month()).unwrap_or(false)
            && p.day_match(day.year(), day.month(), day.day(), weekday)
                .unwrap_or(false)
    }

    fn wall_matches(&self, wall_secs: i64) -> bool {
        wall(wall_secs).is_some_and(|w| self.compiled.matcher.is_time_matching(&w).unwrap_or(false))
    }

    /// UTC offset in seconds at instant `t`.
    fn offset_at(&self, t: i64) -> i64 {
        let at = DateTime::from_timestamp(t, 0).unwrap_or(DateTime::UNIX_EPOCH);
        i64::from(
            self.tz
                .offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    }
}

impl std::fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.expr, self.tz)
    }
}

/// Times of day that match, as counts, so a day's matches in any span of
/// seconds are computed without listing them.
#[derive(Clone, Debug, PartialEq)]
struct DayClock {
    hours: Vec<usize>,
    minutes: Vec<usize>,
    seconds: Vec<usize>,
}

impl DayClock {
    fn new(hours: Vec<usize>, minutes: Vec<usize>, seconds: Vec<usize>) -> Self {
        Self {
            hours,
            minutes,
            seconds,
        }
    }

    /// Matching times of day in `[lo, hi)` seconds after midnight.
    fn between(&self, lo: usize, hi: usize) -> u64 {
        if hi <= lo {
            0
        } else {
            self.before(hi) - self.before(lo)
        }
    }

    /// Matching times of day earlier than `x` seconds after midnight (0..=86400).
    fn before(&self, x: usize) -> u64 {
        let (h, m, s) = (x / 3_600, x % 3_600 / 60, x % 60);
        let below = |values: &[usize], v: usize| values.iter().filter(|&&x| x < v).count() as u64;
        let per_minute = self.seconds.len() as u64;
        let per_hour = self.minutes.len() as u64 * per_minute;
        let mut count = below(&self.hours, h) * per_hour;
        if self.hours.contains(&h) {
            count += below(&self.minutes, m) * per_minute;
            if self.minutes.contains(&m) {
                count += below(&self.seconds, s);
            }
        }
        count
    }
}

/// Reads a zone name as triggers do: `""` and `"UTC"` are UTC; anything else
/// must be an IANA zone name (an unknown one is an error naming it).
pub fn parse_timezone(name: &str) -> Result<Tz> {
    let name = name.trim();
    if name.is_empty() || name == "UTC" {
        return Ok(Tz::UTC);
    }
    name.parse::<Tz>().map_err(|_| {
        // The letter case wrong, else a likely typo (`Europe/Pariss`).
        let names = || chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
        let suggestion = names()
            .find(|tz| tz.eq_ignore_ascii_case(name))
            .or_else(|| crate::model::hint::closest(name, names()))
            .map(|tz| format!(" (did you mean `{tz}`?)"))
            .unwrap_or_default();
        Error::UnknownTimezone {
            name: name.to_owned(),
            suggestion,
        }
    })
}

/// Wall-clock seconds since the epoch as a zone-less date-time.
fn wall(secs: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp(secs, 0).map(|d| d.naive_utc())
}

fn instant(secs: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(secs, 0)
}

fn seconds_of_day(w: NaiveDateTime) -> usize {
    use chrono::Timelike;
    w.num_seconds_from_midnight() as usize
}

fn saturate(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_zone_suggests_the_closest_name() {
        let e = parse_timezone("Europe/Pariss").unwrap_err().to_string();
        assert!(e.contains("(did you mean `Europe/Paris`?)"), "{e}");
        let e = parse_timezone("europe/berlin").unwrap_err().to_string();
        assert!(e.contains("(did you mean `Europe/Berlin`?)"), "{e}");
        let e = parse_timezone("Nowhere/Atall_Really")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("did you mean"), "{e}");
    }

    /// One pattern per expression, whatever the zone or spacing around it;
    /// a bad expression is refused every time and not kept; a full cache
    /// starts over rather than grow.
    #[test]
    fn the_pattern_cache_shares_one_pattern_per_expression_and_stays_bounded() {
        let cache = PatternCache::new(3);
        let hourly = cache.get("0 0 * * * ?").unwrap();
        assert!(Arc::ptr_eq(&hourly, &cache.get("0 0 * * * ?").unwrap()));
        for bad in ["0 0 * * *", "0 0 0 31 2 ?"] {
            assert!(cache.get(bad).is_err());
            assert!(cache.get(bad).is_err());
        }
        assert_eq!(cache.patterns.lock().unwrap().len(), 1);
        for expr in ["1 * * * * ?", "2 * * * * ?", "3 * * * * ?", "4 * * * * ?"] {
            cache.get(expr).unwrap();
            assert!(cache.patterns.lock().unwrap().len() <= 3);
        }
        let again = cache.get("0 0 * * * ?").unwrap();
        assert!(
            !Arc::ptr_eq(&hourly, &again),
            "parsed again after the reset"
        );
        assert_eq!(*hourly, *again);

        // Schedules in two zones share the process's pattern, not the zone.
        let utc = CronSchedule::parse(" 0 15 10 * * ? ", "UTC").unwrap();
        let paris = CronSchedule::parse("0 15 10 * * ?", "Europe/Paris").unwrap();
        assert_eq!(utc.compiled.day_clock, paris.compiled.day_clock);
        assert_ne!(utc.tz, paris.tz);
    }
}

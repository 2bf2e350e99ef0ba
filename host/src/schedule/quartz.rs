//! Quartz cron syntax → the pattern croner evaluates.
//!
//! ax cron is Quartz style: seconds first, an optional year last, day-of-week
//! numbered 1 = SUN … 7 = SAT, `?` in one of the two day fields. croner reads
//! a Vixie-style dialect (0 = SUN, day fields ORed). Rather than patching
//! croner's text in place, every field is parsed here, checked with a message
//! that names the field, and written back out in the plainest croner form:
//! explicit value lists (no ranges or steps, so croner's own range rules never
//! apply), `L`/`LW`/`nW` in day-of-month, and `d`, `d#n`, `dL` in day-of-week
//! with croner's numbering. Day names and month names never reach croner.
//!
//! This module only translates text; it knows nothing about time zones.

use super::{Error, Result};

/// One cron field: its name in messages, its range, and its names if any.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// Names for `min`, `min + 1`, … (months and days of week).
    names: &'static [&'static str],
    /// Whether a range may run past the maximum and wrap to the minimum
    /// (`22-2` hours, `FRI-MON`), as Quartz allows for cyclic fields.
    cyclic: bool,
}

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
    cyclic: true,
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    cyclic: true,
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    cyclic: true,
};
const DAY_OF_MONTH: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
    cyclic: false,
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    cyclic: true,
};
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    min: 1,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    cyclic: true,
};
/// Quartz's year range; also what makes "never fires" decidable.
const YEAR: Field = Field {
    name: "year",
    min: 1970,
    max: 2099,
    names: &[],
    cyclic: false,
};

/// Translates a Quartz expression into a 7-field croner pattern
/// (`sec min hour dom month dow year`).
pub(super) fn translate(expr: &str) -> Result<String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    match fields.len() {
        0 => return Err(Error::EmptyCron),
        5 => {
            return Err(Error::FiveFieldCron {
                expr: expr.to_owned(),
                suggestion: format!("0 {}", fields.join(" ")),
            });
        }
        6 | 7 => {}
        count => {
            return Err(Error::FieldCount {
                expr: expr.to_owned(),
                count,
            });
        }
    }
    let upper: Vec<String> = fields.iter().map(|f| f.to_ascii_uppercase()).collect();
    let invalid = |field: Field, reason: String| Error::InvalidField {
        expr: expr.to_owned(),
        field: field.name,
        reason,
    };

    let mut out = Vec::with_capacity(7);
    for (text, field) in upper.iter().zip([SECOND, MINUTE, HOUR]) {
        out.push(plain_field(field, text).map_err(|r| invalid(field, r))?);
    }
    let dom = day_of_month(&upper[3]).map_err(|r| invalid(DAY_OF_MONTH, r))?;
    let month = plain_field(MONTH, &upper[4]).map_err(|r| invalid(MONTH, r))?;
    let dow = day_of_week(&upper[5]).map_err(|r| invalid(DAY_OF_WEEK, r))?;
    let year = match upper.get(6) {
        Some(text) => plain_field(YEAR, text).map_err(|r| invalid(YEAR, r))?,
        None => "*".to_owned(),
    };
    // Quartz cannot say "the 15th and also every Monday": one day field must
    // be left open. croner would OR them (Vixie); refuse instead of guessing.
    if let (Some(_), Some(_)) = (&dom, &dow) {
        return Err(Error::DayOfMonthAndWeek {
            expr: expr.to_owned(),
            day_of_month: fields[3].to_owned(),
            day_of_week: fields[5].to_owned(),
        });
    }
    out.push(dom.unwrap_or_else(|| "*".to_owned()));
    out.push(month);
    out.push(dow.unwrap_or_else(|| "*".to_owned()));
    out.push(year);
    Ok(out.join(" "))
}

/// A field of numbers, ranges, steps and lists (and names for months):
/// second, minute, hour, month, year, and plain day-of-month lists.
fn plain_field(field: Field, text: &str) -> Result<String, String> {
    if text == "?" {
        return Err("cannot be `?`: `?` is only for day-of-month or day-of-week".to_owned());
    }
    Ok(render(field, &value_set(field, text)?))
}

/// Writes a set as croner reads it: `*` when every value is in, else a list.
fn render(field: Field, set: &[bool]) -> String {
    if set.iter().all(|&on| on) {
        return "*".to_owned();
    }
    let values: Vec<String> = set
        .iter()
        .enumerate()
        .filter(|(_, on)| **on)
        .map(|(i, _)| (field.min as usize + i).to_string())
        .collect();
    values.join(",")
}

/// Parses a comma list of `*`, `v`, `a-b`, with optional `/step`, into the set
/// of values it selects (index 0 = `field.min`).
fn value_set(field: Field, text: &str) -> Result<Vec<bool>, String> {
    let span = field.max - field.min + 1;
    let mut set = vec![false; span as usize];
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("`{text}` has an empty list item"));
        }
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(parse_step(field, item, step)?)),
            None => (item, None),
        };
        let (from, to) = if base == "*" {
            (field.min, field.max)
        } else if let Some((a, b)) = base.split_once('-') {
            (value(field, a)?, value(field, b)?)
        } else if base.is_empty() {
            return Err(format!(
                "`{item}` needs a start before `/`, like `*/{}` or `0/{}`",
                step.unwrap_or(1),
                step.unwrap_or(1)
            ));
        } else {
            let v = value(field, base)?;
            // Quartz: `v/step` runs from v to the end of the range.
            (v, if step.is_some() { field.max } else { v })
        };
        if from > to && !field.cyclic {
            return Err(format!("range `{base}` runs backwards"));
        }
        // Positions from `from` to `to`, wrapping past the maximum for cyclic
        // fields (`22-2` = 22, 23, 0, 1, 2).
        let len = (to + span - from) % span + 1;
        for i in (0..len).step_by(step.unwrap_or(1) as usize) {
            set[((from - field.min + i) % span) as usize] = true;
        }
    }
    Ok(set)
}

fn parse_step(field: Field, item: &str, step: &str) -> Result<u32, String> {
    let span = field.max - field.min + 1;
    match step.parse::<u32>() {
        Ok(s) if (1..=span).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{item}` has step `{step}`; a step must be a whole number from 1 to {span}"
        )),
    }
}

/// One value: a number in range or, where the field has them, a name.
fn value(field: Field, token: &str) -> Result<u32, String> {
    if token.is_empty() {
        return Err(format!(
            "a value is missing (expected {}–{})",
            field.min, field.max
        ));
    }
    if token.bytes().all(|b| b.is_ascii_digit()) {
        let n = token.parse::<u32>().unwrap_or(u32::MAX);
        if (field.min..=field.max).contains(&n) {
            return Ok(n);
        }
        if field.name == DAY_OF_WEEK.name {
            return Err(format!(
                "value `{token}` is out of range: ax numbers days the Quartz way, \
                 1 = SUN … 7 = SAT (there is no {token}); write a name such as SUN or MON"
            ));
        }
        return Err(format!(
            "value `{token}` is out of range {}–{}",
            field.min, field.max
        ));
    }
    if let Some(i) = field.names.iter().position(|n| *n == token) {
        return Ok(field.min + i as u32);
    }
    let names = if field.names.is_empty() {
        String::new()
    } else {
        format!(
            " or {}–{}",
            field.names[0],
            field.names[field.names.len() - 1]
        )
    };
    Err(format!(
        "`{token}` is not a {} (expected {}–{}{names})",
        field.name, field.min, field.max
    ))
}

/// Day-of-month: `?`/`*` (open, `None`), `L`, `LW`, `nW`, or a plain list.
fn day_of_month(text: &str) -> Result<Option<String>, String> {
    match text {
        "?" | "*" => return Ok(None),
        "L" | "LW" => return Ok(Some(text.to_owned())),
        _ => {}
    }
    if text.starts_with("L-") {
        return Err(format!(
            "`{text}` (an offset from the last day) is not supported; use `L` or `LW`"
        ));
    }
    if text.contains(['L', 'W', '?']) {
        if let Some(day) = text.strip_suffix('W')
            && !day.contains([',', '-', '/', 'L', 'W', '?'])
        {
            let d = value(DAY_OF_MONTH, day)?;
            return Ok(Some(format!("{d}W")));
        }
        return Err(format!(
            "`{text}`: `L`, `LW`, `nW` and `?` must stand alone in day-of-month (not in lists, ranges or steps)"
        ));
    }
    plain_field(DAY_OF_MONTH, text).map(Some)
}

/// Day-of-week: `?`/`*` (open, `None`), or a list of Quartz days (1 = SUN),
/// ranges and steps, `d#n` (nth d of the month), `dL` (last d of the month)
/// and `L` (= SAT), written back with croner's numbering (0 = SUN).
fn day_of_week(text: &str) -> Result<Option<String>, String> {
    if text == "?" || text == "*" {
        return Ok(None);
    }
    let croner_day = |quartz: u32| quartz - 1;
    let mut plain = [false; 7];
    let mut special = Vec::new();
    for item in text.split(',') {
        if item == "L" {
            plain[6] = true; // Quartz: `L` alone in day-of-week is 7 = SAT.
        } else if let Some((day, nth)) = item.split_once('#') {
            let d = value(DAY_OF_WEEK, day)
                .map_err(|e| format!("{e} (in `{item}`: `#` takes a single day)"))?;
            let n = match nth.parse::<u32>() {
                Ok(n) if (1..=5).contains(&n) => n,
                _ => {
                    return Err(format!(
                        "`{item}`: the number after `#` must be 1–5 (the nth such day of the month)"
                    ));
                }
            };
            special.push(format!("{}#{n}", croner_day(d)));
        } else if let Some(day) = item.strip_suffix('L') {
            let d = value(DAY_OF_WEEK, day)
                .map_err(|e| format!("{e} (in `{item}`: `L` follows a single day, like `6L`)"))?;
            special.push(format!("{}L", croner_day(d)));
        } else if item.contains('?') {
            return Err("`?` must stand alone in day-of-week".to_owned());
        } else {
            for (i, on) in value_set(DAY_OF_WEEK, item)?.into_iter().enumerate() {
                plain[i] |= on;
            }
        }
    }
    let mut out: Vec<String> = plain
        .iter()
        .enumerate()
        .filter(|(_, on)| **on)
        .map(|(i, _)| croner_day(i as u32 + 1).to_string())
        .collect();
    out.extend(special);
    Ok(Some(out.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(expr: &str) -> String {
        translate(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    fn reason(expr: &str) -> String {
        translate(expr).expect_err(expr).to_string()
    }

    #[test]
    fn six_fields_get_an_open_year() {
        assert_eq!(ok("0 30 1 * * ?"), "0 30 1 * * * *");
    }

    #[test]
    fn day_of_week_numbers_shift_to_croner_numbering() {
        // Quartz 1 = SUN → croner 0; 7 = SAT → croner 6.
        assert_eq!(ok("0 0 0 ? * 1"), "0 0 0 * * 0 *");
        assert_eq!(ok("0 0 0 ? * 7"), "0 0 0 * * 6 *");
        assert_eq!(ok("0 0 0 ? * 2-6"), "0 0 0 * * 1,2,3,4,5 *");
        assert_eq!(ok("0 0 0 ? * 1,7"), "0 0 0 * * 0,6 *");
        assert_eq!(ok("0 0 0 ? * */2"), "0 0 0 * * 0,2,4,6 *");
        assert_eq!(ok("0 0 0 ? * 2/2"), "0 0 0 * * 1,3,5 *");
        assert_eq!(ok("0 0 0 ? * 6#3"), "0 0 0 * * 5#3 *");
        assert_eq!(ok("0 0 0 ? * 6L"), "0 0 0 * * 5L *");
        assert_eq!(ok("0 0 0 ? * L"), "0 0 0 * * 6 *");
    }

    #[test]
    fn day_names_translate_like_numbers() {
        assert_eq!(ok("0 0 0 ? * MON-FRI"), ok("0 0 0 ? * 2-6"));
        assert_eq!(ok("0 0 0 ? * sun,sat"), ok("0 0 0 ? * 1,7"));
        assert_eq!(ok("0 0 0 ? * FRI#2"), ok("0 0 0 ? * 6#2"));
        assert_eq!(ok("0 0 0 ? * FRIL"), ok("0 0 0 ? * 6L"));
        // Wrapping range, as Quartz allows.
        assert_eq!(ok("0 0 0 ? * FRI-MON"), "0 0 0 * * 0,1,5,6 *");
    }

    #[test]
    fn month_names_and_steps_expand() {
        assert_eq!(ok("0 0 0 1 JAN,jul ?"), "0 0 0 1 1,7 * *");
        assert_eq!(ok("0 0 0 1 1/3 ?"), "0 0 0 1 1,4,7,10 * *");
        assert_eq!(ok("0 0 0 1 NOV-FEB ?"), "0 0 0 1 1,2,11,12 * *");
    }

    #[test]
    fn time_fields_expand_ranges_steps_and_wraps() {
        assert_eq!(ok("0/15 * * * * ?"), "0,15,30,45 * * * * * *");
        assert_eq!(ok("5/20 * * * * ?"), "5,25,45 * * * * * *");
        assert_eq!(ok("0 50-10/5 * * * ?"), "0 0,5,10,50,55 * * * * *");
        assert_eq!(ok("0 0 22-2 * * ?"), "0 0 0,1,2,22,23 * * * *");
        assert_eq!(ok("0 0 0-23 * * ?"), "0 0 * * * * *");
    }

    #[test]
    fn day_of_month_special_forms_pass_through() {
        assert_eq!(ok("0 0 0 L * ?"), "0 0 0 L * * *");
        assert_eq!(ok("0 0 0 LW * ?"), "0 0 0 LW * * *");
        assert_eq!(ok("0 0 0 15W * ?"), "0 0 0 15W * * *");
        assert_eq!(ok("0 0 0 1,15 * ?"), "0 0 0 1,15 * * *");
        assert_eq!(ok("0 0 0 1/10 * ?"), "0 0 0 1,11,21,31 * * *");
    }

    #[test]
    fn year_field_is_kept() {
        assert_eq!(ok("0 0 0 1 1 ? 2027"), "0 0 0 1 1 * 2027");
        assert_eq!(ok("0 0 0 1 1 ? 2027-2029"), "0 0 0 1 1 * 2027,2028,2029");
        assert!(reason("0 0 0 1 1 ? 1969").contains("out of range 1970–2099"));
    }

    #[test]
    fn bad_fields_are_named_in_the_message() {
        assert!(reason("60 * * * * ?").contains("second"));
        assert!(reason("0 60 * * * ?").contains("minute"));
        assert!(reason("0 0 24 * * ?").contains("hour"));
        assert!(reason("0 0 0 32 * ?").contains("day-of-month"));
        assert!(reason("0 0 0 1 13 ?").contains("month"));
        assert!(reason("0 0 0 1 FOO ?").contains("`FOO` is not a month"));
        assert!(reason("0 0 0 ? * MONDAY").contains("`MONDAY` is not a day-of-week"));
        assert!(reason("0 */0 * * * ?").contains("step"));
        assert!(reason("0 1,,2 * * * ?").contains("empty list item"));
        assert!(reason("0 1- * * * ?").contains("a value is missing"));
        assert!(reason("0 0 0 W * ?").contains("a value is missing"));
        assert!(reason("? * * * * ?").contains("`?` is only for"));
        assert!(reason("0 0 0 L-3 * ?").contains("not supported"));
        assert!(reason("0 0 0 1,L * ?").contains("must stand alone"));
        assert!(reason("0 0 0 ? * 2#6").contains("1–5"));
        assert!(reason("0 0 0 ? * 1-3#2").contains("single day"));
        assert!(reason("0 0 0 10-5 * ?").contains("backwards"));
    }

    #[test]
    fn day_of_week_zero_and_eight_are_rejected_with_quartz_numbering() {
        let zero = reason("0 0 0 ? * 0");
        assert!(
            zero.contains("1 = SUN … 7 = SAT") && zero.contains("there is no 0"),
            "{zero}"
        );
        let eight = reason("0 0 0 ? * 8");
        assert!(eight.contains("1 = SUN … 7 = SAT"), "{eight}");
        assert!(reason("0 0 0 ? * 0-4").contains("there is no 0"));
        assert!(reason("0 0 0 ? * 0#2").contains("there is no 0"));
        assert!(reason("0 0 0 ? * 0L").contains("there is no 0"));
    }

    #[test]
    fn both_day_fields_set_is_rejected() {
        let e = reason("0 0 0 15 * MON");
        assert!(
            e.contains("both day-of-month (`15`) and day-of-week (`MON`)"),
            "{e}"
        );
        assert!(e.contains("`?`"), "{e}");
        // `*` leaves a field open, like `?`.
        assert_eq!(ok("0 0 0 15 * *"), ok("0 0 0 15 * ?"));
        assert_eq!(ok("0 0 0 * * MON"), ok("0 0 0 ? * MON"));
        assert_eq!(ok("0 0 0 ? * ?"), ok("0 0 0 * * *"));
    }
}

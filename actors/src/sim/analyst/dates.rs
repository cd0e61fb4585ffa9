//! Dates as the sim analyst reads them: a day, month and year in words or digits, a date said
//! without its year taken as the next such day from today (UTC).

use std::time::{SystemTime, UNIX_EPOCH};

use super::words::words;

/// A calendar day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ymd {
    pub(super) year: u32,
    pub(super) month: u32,
    pub(super) day: u32,
}

/// Today in UTC, the reference for a date said without its year.
pub(super) fn today_utc() -> Ymd {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    civil_from_days(days)
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub(super) fn civil_from_days(days: u64) -> Ymd {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    Ymd {
        year: u32::try_from(year).unwrap_or(u32::MAX),
        month: month as u32,
        day: day as u32,
    }
}

pub(super) const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The month `word` names, in full or as its first three letters (`mar`, also `sept`), 1–12.
pub(super) fn month_of(word: &str) -> Option<u32> {
    let word = if word == "sept" { "sep" } else { word };
    MONTHS
        .iter()
        .position(|m| *m == word || (word.len() == 3 && m.starts_with(word)))
        .and_then(|m| u32::try_from(m + 1).ok())
}

pub(super) const ORDINALS: [&str; 20] = [
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
    "twentieth",
];

/// A day of the month in one word: `15`, `15th`, `3rd`, `fifteenth`, `twenty-first`.
pub(super) fn day_of(word: &str) -> Option<u32> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &word[digits.len()..];
    let day = if !digits.is_empty() && digits.len() <= 2 {
        if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
            return None;
        }
        digits.parse::<u32>().ok()?
    } else if let Some(at) = ORDINALS.iter().position(|o| *o == word) {
        u32::try_from(at + 1).ok()?
    } else if word == "thirtieth" {
        30
    } else {
        let (tens, unit) = word.split_once('-')?;
        let tens = match tens {
            "twenty" => 20,
            "thirty" => 30,
            _ => return None,
        };
        tens + u32::try_from(ORDINALS.iter().position(|o| *o == unit)? + 1).ok()?
    };
    (1..=31).contains(&day).then_some(day)
}

/// A year said as four digits, 1900–2200.
pub(super) fn year_of(word: &str) -> Option<u32> {
    (word.len() == 4)
        .then(|| word.parse::<u32>().ok())
        .flatten()
        .filter(|y| (1900..=2200).contains(y))
}

pub(super) fn ymd(year: u32, month: u32, day: u32) -> Option<String> {
    valid_date(year, month, day).then(|| format!("{year:04}-{month:02}-{day:02}"))
}

/// A date said in `text`, as `YYYY-MM-DD`: `2027-03-15`, `15/03/2027` (when the day cannot
/// be the month), `15 March 2027`, `the 15th of March, 2027`, `March 15th 2027`, or without
/// a year (`March 15`, `15th of March`): the next such day on or after `today`.
pub(super) fn first_date(text: &str, today: Ymd) -> Option<String> {
    for token in text.split(|c: char| c.is_whitespace() || c == ',') {
        let token = token.trim_matches(|c: char| !c.is_ascii_digit());
        let parts: Vec<&str> = token.split(['-', '/', '.']).collect();
        let [a, b, c] = parts[..] else { continue };
        let (Ok(x), Ok(y), Ok(z)) = (a.parse::<u32>(), b.parse::<u32>(), c.parse::<u32>()) else {
            continue;
        };
        let date = if a.len() == 4 {
            ymd(x, y, z)
        } else if c.len() == 4 && (x > 12 || x == y) {
            ymd(z, y, x)
        } else if c.len() == 4 && y > 12 {
            ymd(z, x, y)
        } else {
            None
        };
        if date.is_some() {
            return date;
        }
    }
    let tokens = words(text);
    for (at, token) in tokens.iter().enumerate() {
        let Some(month) = month_of(token) else {
            continue;
        };
        // "15 March", "the 15th of March", "twenty first of March"
        let end = if at > 0 && tokens[at - 1] == "of" {
            at - 1
        } else {
            at
        };
        let before = end.checked_sub(1).and_then(|b| {
            let joined = b
                .checked_sub(1)
                .map(|a| format!("{}-{}", tokens[a], tokens[b]));
            joined
                .and_then(|j| day_of(&j))
                .or_else(|| day_of(&tokens[b]))
        });
        // "March 15", "March the 15th"
        let start = if tokens.get(at + 1).is_some_and(|t| t == "the") {
            at + 2
        } else {
            at + 1
        };
        let after = tokens.get(start).and_then(|t| {
            let two = tokens
                .get(start + 1)
                .and_then(|u| day_of(&format!("{t}-{u}")));
            two.map(|d| (d, 2)).or_else(|| day_of(t).map(|d| (d, 1)))
        });
        let (day, year_at) = match (before, after) {
            (Some(day), _) => (day, at + 1),
            (None, Some((day, used))) => (day, start + used),
            (None, None) => continue,
        };
        let year_at = if tokens.get(year_at).is_some_and(|t| t == "of") {
            year_at + 1
        } else {
            year_at
        };
        if let Some(year) = tokens.get(year_at).and_then(|t| year_of(t)) {
            if let Some(date) = ymd(year, month, day) {
                return Some(date);
            }
            continue;
        }
        let this_year = Ymd {
            year: today.year,
            month,
            day,
        };
        let year = if this_year >= today {
            today.year
        } else {
            today.year + 1
        };
        // 29 February said in a year without one: the next year that has it.
        if let Some(date) = (year..year + 8).find_map(|y| ymd(y, month, day)) {
            return Some(date);
        }
    }
    None
}

pub(super) fn valid_date(year: u32, month: u32, day: u32) -> bool {
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        _ => return false,
    };
    (1900..=2200).contains(&year) && (1..=days).contains(&day)
}

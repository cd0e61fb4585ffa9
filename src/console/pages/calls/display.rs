//! How call values read on the console's pages: money in rupees, durations,
//! times in IST, statuses with their badge class. Pure functions, so the
//! list, the call page and the overview agree.

use crate::domain::Paise;
use crate::domain::clock::IST;
use chrono::{DateTime, Utc};
use voxline_actors::engine::CallStatus;

/// Paise as rupees with two decimals: `₹12.05`, `-₹0.50`.
pub fn rupees(paise: Paise) -> String {
    let value = paise.get();
    let sign = if value < 0 { "-" } else { "" };
    let abs = value.unsigned_abs();
    format!("{sign}₹{}.{:02}", group_thousands(abs / 100), abs % 100)
}

/// An integer with commas between thousands: `1,234,567`.
pub fn group_thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A count with thousands grouped; negative counts read as 0.
pub fn count(value: i64) -> String {
    group_thousands(u64::try_from(value).unwrap_or(0))
}

/// Talk time: `0s`, `45s`, `2m 05s`, `1h 02m 05s`, as the API's call rows read.
pub use crate::domain::clock::display_duration as duration;

/// A Unix-ms instant in IST: `2026-11-26 14:05:09`.
pub fn ist_time(at_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(at_ms)
        .unwrap_or_default()
        .with_timezone(&IST)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// How long before `now_ms` the instant `at_ms` was: `just now`, `5 min ago`,
/// `2 h ago`, `3 d ago`, and the IST date past a month.
pub fn ago(at_ms: i64, now_ms: i64) -> String {
    let seconds = (now_ms - at_ms).max(0) / 1000;
    match seconds {
        s if s < 60 => "just now".to_string(),
        s if s < 3_600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3_600),
        s if s < 30 * 86_400 => format!("{} d ago", s / 86_400),
        _ => ist_time(at_ms).chars().take(10).collect(),
    }
}

/// The display form of a raw status (`No Answer`); unknown values pass through.
pub fn status_label(raw: &str) -> String {
    CallStatus::parse(raw).map_or_else(|| raw.to_string(), |s| s.display().to_string())
}

/// The CSS class suffix of a raw status' badge (`status-<x>`): the raw
/// status when known, `unknown` otherwise (a stored value never reaches a
/// class name unchecked).
pub fn status_class(raw: &str) -> &'static str {
    CallStatus::parse(raw).map_or("unknown", CallStatus::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_and_counts_read_like_people_write_them() {
        assert_eq!(rupees(Paise(0)), "₹0.00");
        assert_eq!(rupees(Paise(1205)), "₹12.05");
        assert_eq!(rupees(Paise(123_456_789)), "₹1,234,567.89");
        assert_eq!(rupees(Paise(-50)), "-₹0.50");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(-4), "0");
    }

    #[test]
    fn durations_and_times() {
        assert_eq!(duration(-1), "0s");
        assert_eq!(duration(125), "2m 05s");
        assert_eq!(duration(3_725), "1h 02m 05s");
        // 2025-11-21T18:30:00Z is midnight of the 22nd in IST.
        assert_eq!(ist_time(1_763_749_800_000), "2025-11-22 00:00:00");
        assert_eq!(ago(0, 59_000), "just now");
        assert_eq!(ago(0, 5 * 60_000), "5 min ago");
        assert_eq!(ago(0, 3 * 86_400_000), "3 d ago");
    }

    #[test]
    fn statuses_have_labels_and_safe_classes() {
        assert_eq!(status_label("no-answer"), "No Answer");
        assert_eq!(status_class("no-answer"), "no-answer");
        assert_eq!(status_class("\" onclick=\"x"), "unknown");
        assert_eq!(status_label("mystery"), "mystery");
    }
}

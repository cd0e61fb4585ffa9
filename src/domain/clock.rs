//! Time source for everything that depends on "now": rate-limit windows,
//! number renewals, schedules. Tests swap in [`ManualClock`].

use chrono::{DateTime, Datelike, Duration, FixedOffset, NaiveDate, TimeZone, Utc};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of the current UTC time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// Shared handle to the process clock.
pub type SharedClock = Arc<dyn Clock>;

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to; used by tests of time windows.
#[derive(Debug)]
pub struct ManualClock {
    millis: AtomicI64,
}

impl ManualClock {
    /// A manual clock reading `start`.
    pub fn new(start: DateTime<Utc>) -> Arc<Self> {
        Arc::new(Self {
            millis: AtomicI64::new(start.timestamp_millis()),
        })
    }

    /// Moves the clock to `to`.
    pub fn set(&self, to: DateTime<Utc>) {
        self.millis.store(to.timestamp_millis(), Ordering::SeqCst);
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.millis
            .fetch_add(by.num_milliseconds(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.millis.load(Ordering::SeqCst)).unwrap_or_default()
    }
}

/// India Standard Time, UTC+05:30, which has no daylight saving.
pub const IST: FixedOffset = match FixedOffset::east_opt(5 * 3600 + 30 * 60) {
    Some(offset) => offset,
    None => panic!("IST offset out of range"),
};

fn ist() -> FixedOffset {
    IST
}

/// The IST calendar day containing `at`.
pub fn ist_day(at: DateTime<Utc>) -> NaiveDate {
    at.with_timezone(&ist()).date_naive()
}

/// The first instant of the IST day after the one containing `at`.
pub fn next_ist_midnight(at: DateTime<Utc>) -> DateTime<Utc> {
    let next = ist_day(at).succ_opt().unwrap_or(NaiveDate::MAX);
    ist_midnight(next)
}

/// The first instant of the next IST calendar month after the one containing `at`.
pub fn next_ist_month_start(at: DateTime<Utc>) -> DateTime<Utc> {
    let day = ist_day(at);
    let (y, m) = if day.month() == 12 {
        (day.year() + 1, 1)
    } else {
        (day.year(), day.month() + 1)
    };
    ist_midnight(NaiveDate::from_ymd_opt(y, m, 1).unwrap_or(NaiveDate::MAX))
}

/// The IST month key `YYYY-MM` for `at`.
pub fn ist_month_key(at: DateTime<Utc>) -> String {
    ist_day(at).format("%Y-%m").to_string()
}

fn ist_midnight(day: NaiveDate) -> DateTime<Utc> {
    let naive = day.and_hms_opt(0, 0, 0).unwrap_or_default();
    ist()
        .from_local_datetime(&naive)
        .single()
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// Milliseconds since the Unix epoch, as stored in the database.
pub fn to_millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

/// The instant for a stored millisecond timestamp.
pub fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// ISO 8601 UTC text for a stored millisecond timestamp.
pub fn iso(ms: i64) -> String {
    from_millis(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A duration for display: `0s`, `45s`, `2m 05s`, `1h 02m 05s`.
pub fn display_duration(seconds: i64) -> String {
    let seconds = seconds.max(0);
    let (hours, minutes, secs) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if hours > 0 {
        format!("{hours}h {minutes:02}m {secs:02}s")
    } else if minutes > 0 {
        format!("{minutes}m {secs:02}s")
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn ist_day_turns_at_1830_utc() {
        assert_eq!(
            ist_day(utc("2026-11-21T18:29:59Z")).to_string(),
            "2026-11-21"
        );
        assert_eq!(
            ist_day(utc("2026-11-21T18:30:00Z")).to_string(),
            "2026-11-22"
        );
        assert_eq!(
            next_ist_midnight(utc("2026-11-21T18:29:59Z")),
            utc("2026-11-21T18:30:00Z")
        );
    }

    #[test]
    fn month_rolls_on_the_first_ist() {
        assert_eq!(ist_month_key(utc("2026-11-30T18:29:00Z")), "2026-11");
        assert_eq!(ist_month_key(utc("2026-11-30T18:30:00Z")), "2026-12");
        assert_eq!(
            next_ist_month_start(utc("2026-12-31T18:30:00Z")),
            utc("2027-01-31T18:30:00Z")
        );
    }
}

//! Calling hours: the local times and weekdays a call may start, read on the callee's clock
//! (the zones of the number's prefix) or on one named zone, and checked once per dial.

use super::phone_zones;
use chrono::{
    DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc,
    Weekday,
};
use chrono_tz::Tz;
use serde_json::{Value, json};
use std::fmt;

/// Minutes in a day; as an end, "24:00", the midnight that ends the day.
const DAY_MINUTES: u16 = 1440;

/// The JSON form's keys; any other is refused, so a misspelt key is not silently ignored.
const KEYS: [&str; 4] = ["start", "end", "days", "timeZone"];

/// Monday first, as `DaySet`'s bits and the JSON form's names.
const WEEKDAYS: [Weekday; 7] = [
    Weekday::Mon,
    Weekday::Tue,
    Weekday::Wed,
    Weekday::Thu,
    Weekday::Fri,
    Weekday::Sat,
    Weekday::Sun,
];
const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// The local days, relative to the local date of the instant checked, whose windows are
/// looked at: the day before (harmless, and safe at a zone's date line) through a week and a
/// day ahead, so every weekday's window is seen at least once.
const HORIZON_DAYS: std::ops::RangeInclusive<i64> = -1..=8;

/// Where a window's clock is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowZone {
    /// The callee's: the time zones of the number's prefix (see [`CallingHours::check`]).
    Callee,
    /// One zone for every callee.
    Named(Tz),
}

/// A set of weekdays, a bit per [`Weekday`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DaySet(u8);

impl DaySet {
    /// Monday to Sunday.
    pub const fn every_day() -> Self {
        Self(0x7f)
    }

    /// Whether `day` is in the set.
    pub const fn contains(self, day: Weekday) -> bool {
        self.0 & bit(day) != 0
    }

    /// Whether the set holds no day (a window on no day never opens).
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Collects weekdays; repeats count once, and no day at all gives the empty set.
impl FromIterator<Weekday> for DaySet {
    fn from_iter<I: IntoIterator<Item = Weekday>>(days: I) -> Self {
        Self(days.into_iter().fold(0, |set, day| set | bit(day)))
    }
}

const fn bit(day: Weekday) -> u8 {
    1 << day.num_days_from_monday()
}

/// A calling window: local start (inclusive) and end (exclusive), minutes since midnight, the
/// weekdays it applies to, and the zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallingHours {
    /// Local start, minutes since midnight (0..=1439).
    pub start: u16,
    /// Local end, minutes since midnight (1..=1440, later than `start`); 1440 is the midnight
    /// ending the day. A window cannot cross midnight.
    pub end: u16,
    /// The weekdays the window opens on, by the local date.
    pub days: DaySet,
    /// Whose clock the times are read on.
    pub zone: WindowZone,
}

/// Whether a call may start at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowCheck {
    /// Inside the window in every candidate zone.
    Open,
    /// Closed now; the window next opens in every candidate zone at once at this instant.
    ClosedUntil(DateTime<Utc>),
    /// The candidate zones' windows do not overlap in the coming week (or the window is on no
    /// day): waiting will not open it.
    Never,
}

/// A calling window that does not parse; the message names the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallingHoursError(String);

impl CallingHours {
    /// 09:00-21:00 every day, on the callee's clock.
    pub const fn workspace_default() -> Self {
        Self {
            start: 9 * 60,
            end: 21 * 60,
            days: DaySet::every_day(),
            zone: WindowZone::Callee,
        }
    }

    /// 00:00-24:00 every day: no limit (the test harness, and a workspace that sets none).
    pub const fn always() -> Self {
        Self {
            start: 0,
            end: DAY_MINUTES,
            days: DaySet::every_day(),
            zone: WindowZone::Callee,
        }
    }

    /// Reads the JSON form, `{"start": "09:00", "end": "21:00", "days": ["mon", ...],
    /// "timeZone": "callee"}` (`days` defaults to every day, `timeZone` to `"callee"`, else an
    /// IANA name), from an object only. `field` is the path the messages name, such as
    /// `callingHours` or `compliance.callingHours`.
    pub fn from_json(value: &Value, field: &str) -> Result<Self, CallingHoursError> {
        let fail = |message: String| Err(CallingHoursError(message));
        let Some(object) = value.as_object() else {
            return fail(format!(
                "{field} must be an object with start, end and optionally days and timeZone"
            ));
        };
        if let Some(key) = object.keys().find(|key| !KEYS.contains(&key.as_str())) {
            return fail(format!(
                "{field} has an unknown field {} (allowed: start, end, days, timeZone)",
                shown(key)
            ));
        }
        let Some(start) = object
            .get("start")
            .and_then(Value::as_str)
            .and_then(|text| parse_time(text, false))
        else {
            return fail(format!(
                "{field}.start must be a time \"HH:MM\" (00:00-23:59)"
            ));
        };
        let Some(end) = object
            .get("end")
            .and_then(Value::as_str)
            .and_then(|text| parse_time(text, true))
        else {
            return fail(format!(
                "{field}.end must be a time \"HH:MM\" (00:00-24:00)"
            ));
        };
        if end <= start {
            return fail(format!("{field}.end must be later than {field}.start"));
        }
        let days = match object.get("days") {
            None | Some(Value::Null) => DaySet::every_day(),
            Some(days) => match parse_days(days) {
                Some(days) => days,
                None => {
                    return fail(format!(
                        "{field}.days must be a non-empty array of {}",
                        DAY_NAMES.join(", ")
                    ));
                }
            },
        };
        let zone = match object.get("timeZone") {
            None | Some(Value::Null) => WindowZone::Callee,
            Some(Value::String(name)) if name == "callee" => WindowZone::Callee,
            Some(Value::String(name)) => match name.parse::<Tz>() {
                Ok(tz) => WindowZone::Named(tz),
                Err(_) => {
                    return fail(format!(
                        "{field}.timeZone {} is not an IANA time zone name",
                        shown(name)
                    ));
                }
            },
            Some(_) => {
                return fail(format!(
                    "{field}.timeZone must be \"callee\" or an IANA time zone name"
                ));
            }
        };
        Ok(Self {
            start,
            end,
            days,
            zone,
        })
    }

    /// The JSON form `from_json` reads, every key written.
    pub fn to_json(&self) -> Value {
        let days: Vec<&str> = WEEKDAYS
            .iter()
            .zip(DAY_NAMES)
            .filter(|(day, _)| self.days.contains(**day))
            .map(|(_, name)| name)
            .collect();
        let zone = match self.zone {
            WindowZone::Callee => "callee",
            WindowZone::Named(tz) => tz.name(),
        };
        json!({
            "start": hh_mm(self.start),
            "end": hh_mm(self.end),
            "days": days,
            "timeZone": zone,
        })
    }

    /// Whether a call to `phone` (E.164) may start at `at`. The clock is the named zone's, or
    /// else every zone the number's prefix may ring in; a number no prefix places is read on
    /// UTC. With several zones (a prefix that spans them) the call must fall in the window on
    /// every one of them, so a callee is never rung outside their hours whichever zone they
    /// are in.
    pub fn check(&self, phone: &str, at: DateTime<Utc>) -> WindowCheck {
        match self.zone {
            WindowZone::Named(tz) => self.check_in(&[tz], at),
            WindowZone::Callee => self.check_in(phone_zones::time_zones(phone), at),
        }
    }

    /// `check` on the given zones (UTC when none).
    fn check_in(&self, zones: &[Tz], at: DateTime<Utc>) -> WindowCheck {
        if self.days == DaySet::every_day() && self.start == 0 && self.end >= DAY_MINUTES {
            // Open around the clock in any zone: skip the zone arithmetic.
            return WindowCheck::Open;
        }
        let (first, rest) = zones.split_first().unwrap_or((&chrono_tz::UTC, &[]));
        let mut open = self.spans(*first, at);
        for tz in rest {
            if open.is_empty() {
                break;
            }
            open = intersect(&open, &self.spans(*tz, at));
        }
        match open.iter().find(|span| span.end > at) {
            Some(span) if span.start <= at => WindowCheck::Open,
            Some(span) => WindowCheck::ClosedUntil(span.start),
            None => WindowCheck::Never,
        }
    }

    /// The window's instants in `tz` over the horizon around `at`, in order and disjoint
    /// (since local time maps to UTC without going back, they may only touch).
    fn spans(&self, tz: Tz, at: DateTime<Utc>) -> Vec<Span> {
        let end = self.end.min(DAY_MINUTES);
        // At most one span per horizon day.
        let mut spans = Vec::with_capacity(10);
        if self.start >= end {
            return spans;
        }
        let today = at.with_timezone(&tz).date_naive();
        for offset in HORIZON_DAYS {
            let Some(day) = today.checked_add_signed(TimeDelta::days(offset)) else {
                continue;
            };
            if !self.days.contains(day.weekday()) {
                continue;
            }
            if let (Some(start), Some(end)) = (instant(tz, day, self.start), instant(tz, day, end))
            {
                // A window wholly inside a skipped hour is empty that day.
                if start < end {
                    spans.push(Span { start, end });
                }
            }
        }
        spans
    }
}

impl fmt::Display for CallingHours {
    /// `09:00-21:00 mon-sun, callee's time zone`, for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{} ", hh_mm(self.start), hh_mm(self.end))?;
        let mut any = false;
        let mut i = 0;
        while i < WEEKDAYS.len() {
            if !self.days.contains(WEEKDAYS[i]) {
                i += 1;
                continue;
            }
            let mut last = i;
            while last + 1 < WEEKDAYS.len() && self.days.contains(WEEKDAYS[last + 1]) {
                last += 1;
            }
            if any {
                f.write_str(", ")?;
            }
            any = true;
            if last == i {
                f.write_str(DAY_NAMES[i])?;
            } else {
                write!(f, "{}-{}", DAY_NAMES[i], DAY_NAMES[last])?;
            }
            i = last + 1;
        }
        if !any {
            f.write_str("no day")?;
        }
        match self.zone {
            WindowZone::Callee => f.write_str(", callee's time zone"),
            WindowZone::Named(tz) => write!(f, ", {}", tz.name()),
        }
    }
}

/// A half-open span of instants, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

/// The instants in both lists (each ordered and disjoint), ordered.
fn intersect(a: &[Span], b: &[Span]) -> Vec<Span> {
    let mut both = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        let start = x.start.max(y.start);
        let end = x.end.min(y.end);
        if start < end {
            both.push(Span { start, end });
        }
        // The span that ends first can meet nothing further in the other list.
        if x.end <= y.end {
            i += 1;
        } else {
            j += 1;
        }
    }
    both
}

/// The instant of `minutes` past midnight of `day` in `tz` (1440: the next midnight). A local
/// time the clocks skipped is the first instant after the gap, and one they showed twice the
/// earlier, so a window shortened or lengthened by a clock change still opens and closes once.
fn instant(tz: Tz, day: NaiveDate, minutes: u16) -> Option<DateTime<Utc>> {
    let (day, minutes) = if minutes >= DAY_MINUTES {
        (day.succ_opt()?, minutes - DAY_MINUTES)
    } else {
        (day, minutes)
    };
    let local = day.and_hms_opt(u32::from(minutes / 60), u32::from(minutes % 60), 0)?;
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => Some(a.min(b).with_timezone(&Utc)),
        LocalResult::None => after_gap(tz, local),
    }
}

/// The instant the clocks jumped over `local`. It lies between `local` read with the offset
/// after the jump and `local` read with the offset before it; halving that range to the second
/// finds it without chrono-tz exposing its transitions.
fn after_gap(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    const DAY_SECONDS: i64 = 86_400;
    let offset_at = |secs: i64| {
        DateTime::from_timestamp(secs, 0).map(|t| {
            i64::from(
                tz.offset_from_utc_datetime(&t.naive_utc())
                    .fix()
                    .local_minus_utc(),
            )
        })
    };
    let wall = local.and_utc().timestamp();
    // No zone is more than a day from UTC, so a day either side of the wall time is either
    // side of the jump.
    let before = offset_at(wall - DAY_SECONDS)?;
    let after = offset_at(wall + DAY_SECONDS)?;
    let (mut lo, mut hi) = (wall - after, wall - before);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if offset_at(mid)? == after {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0)
}

/// `HH:MM` to minutes since midnight; `24:00` only where `end_of_day` allows it.
fn parse_time(text: &str, end_of_day: bool) -> Option<u16> {
    let &[h1, h2, b':', m1, m2] = text.as_bytes() else {
        return None;
    };
    let digit = |b: u8| b.is_ascii_digit().then(|| u16::from(b - b'0'));
    let hours = digit(h1)? * 10 + digit(h2)?;
    let minutes = digit(m1)? * 10 + digit(m2)?;
    let time = hours * 60 + minutes;
    let in_range = minutes < 60 && (hours < 24 || (end_of_day && time == DAY_MINUTES));
    in_range.then_some(time)
}

/// A non-empty array of day names; repeats count once.
fn parse_days(value: &Value) -> Option<DaySet> {
    let names = value.as_array().filter(|names| !names.is_empty())?;
    names
        .iter()
        .map(|name| {
            let name = name.as_str()?;
            let i = DAY_NAMES.iter().position(|known| *known == name)?;
            WEEKDAYS.get(i).copied()
        })
        .collect::<Option<DaySet>>()
}

fn hh_mm(minutes: u16) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// A caller's text quoted for a message, cut short so a huge value cannot swell it.
fn shown(text: &str) -> String {
    const MAX_CHARS: usize = 64;
    if text.chars().count() <= MAX_CHARS {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(MAX_CHARS).collect();
        format!("{head:?}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono_tz::{America, Asia};

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    fn hours(start: &str, end: &str, zone: WindowZone) -> CallingHours {
        CallingHours {
            start: parse_time(start, false).unwrap(),
            end: parse_time(end, true).unwrap(),
            days: DaySet::every_day(),
            zone,
        }
    }

    fn closed_until(text: &str) -> WindowCheck {
        WindowCheck::ClosedUntil(utc(text))
    }

    const NEW_YORK: &str = "+12125551234";
    const INDIA: &str = "+919812345678";
    const IDAHO: &str = "+12085550100";

    #[test]
    fn new_york_reopens_at_nine_daylight_time_on_the_spring_forward_day() {
        let hours = CallingHours::workspace_default();
        // Saturday 2026-03-07 21:30 EST; the clocks go forward at 02:00 on Sunday.
        assert_eq!(
            hours.check(NEW_YORK, utc("2026-03-08T02:30:00Z")),
            closed_until("2026-03-08T13:00:00Z")
        );
        assert_eq!(
            hours.check(NEW_YORK, utc("2026-03-08T13:00:00Z")),
            WindowCheck::Open
        );
        // 20:59 EDT on the Sunday is still inside, 21:00 is not.
        assert_eq!(
            hours.check(NEW_YORK, utc("2026-03-09T00:59:00Z")),
            WindowCheck::Open
        );
        assert_eq!(
            hours.check(NEW_YORK, utc("2026-03-09T01:00:00Z")),
            closed_until("2026-03-09T13:00:00Z")
        );
    }

    #[test]
    fn new_york_reopens_at_nine_standard_time_on_the_fall_back_day() {
        let hours = CallingHours::workspace_default();
        // Saturday 2026-10-31 21:30 EDT; the clocks go back at 02:00 on Sunday 1 November.
        assert_eq!(
            hours.check(NEW_YORK, utc("2026-11-01T01:30:00Z")),
            closed_until("2026-11-01T14:00:00Z")
        );
        assert_eq!(
            hours.check(NEW_YORK, utc("2026-11-01T13:59:59Z")),
            closed_until("2026-11-01T14:00:00Z")
        );
        assert_eq!(
            hours.check(NEW_YORK, utc("2026-11-01T14:00:00Z")),
            WindowCheck::Open
        );
    }

    #[test]
    fn india_closes_at_nine_in_the_evening_until_nine_the_next_morning() {
        let hours = CallingHours::workspace_default();
        // 20:55 IST.
        assert_eq!(
            hours.check(INDIA, utc("2026-03-06T15:25:00Z")),
            WindowCheck::Open
        );
        // 21:00 IST: closed until 09:00 IST on the Saturday.
        assert_eq!(
            hours.check(INDIA, utc("2026-03-06T15:30:00Z")),
            closed_until("2026-03-07T03:30:00Z")
        );
        // 08:59 IST.
        assert_eq!(
            hours.check(INDIA, utc("2026-03-07T03:29:00Z")),
            closed_until("2026-03-07T03:30:00Z")
        );
    }

    #[test]
    fn a_named_zone_overrides_the_number() {
        let hours = hours("09:00", "21:00", WindowZone::Named(America::New_York));
        // 21:00 IST on Friday 2026-03-06 is 10:30 EST.
        assert_eq!(
            hours.check(INDIA, utc("2026-03-06T15:30:00Z")),
            WindowCheck::Open
        );
        // 08:00 EST.
        assert_eq!(
            hours.check(INDIA, utc("2026-03-06T13:00:00Z")),
            closed_until("2026-03-06T14:00:00Z")
        );
    }

    #[test]
    fn weekdays_only_skip_the_weekend() {
        let hours = CallingHours {
            days: [
                Weekday::Mon,
                Weekday::Tue,
                Weekday::Wed,
                Weekday::Thu,
                Weekday::Fri,
            ]
            .into_iter()
            .collect(),
            ..CallingHours::workspace_default()
        };
        let monday_nine_ist = closed_until("2026-03-09T03:30:00Z");
        // Friday 21:00 IST, Saturday noon, Sunday 20:00.
        assert_eq!(
            hours.check(INDIA, utc("2026-03-06T15:30:00Z")),
            monday_nine_ist
        );
        assert_eq!(
            hours.check(INDIA, utc("2026-03-07T06:30:00Z")),
            monday_nine_ist
        );
        assert_eq!(
            hours.check(INDIA, utc("2026-03-08T14:30:00Z")),
            monday_nine_ist
        );
        assert_eq!(
            hours.check(INDIA, utc("2026-03-09T03:30:00Z")),
            WindowCheck::Open
        );
    }

    #[test]
    fn a_number_in_two_zones_gets_the_hours_both_allow() {
        assert_eq!(
            phone_zones::time_zones(IDAHO),
            [America::Boise, America::Los_Angeles]
        );
        let hours = CallingHours::workspace_default();
        // Wednesday 2026-07-01: 09:00 MDT is 15:00Z, 09:00 PDT 16:00Z; 21:00 MDT is 03:00Z,
        // 21:00 PDT 04:00Z. Both allow 16:00Z-03:00Z.
        assert_eq!(
            hours.check(IDAHO, utc("2026-07-01T15:30:00Z")),
            closed_until("2026-07-01T16:00:00Z")
        );
        assert_eq!(
            hours.check(IDAHO, utc("2026-07-01T16:00:00Z")),
            WindowCheck::Open
        );
        assert_eq!(
            hours.check(IDAHO, utc("2026-07-02T02:59:00Z")),
            WindowCheck::Open
        );
        assert_eq!(
            hours.check(IDAHO, utc("2026-07-02T03:00:00Z")),
            closed_until("2026-07-02T16:00:00Z")
        );
        // Los Angeles alone would be open then.
        let pacific = hours.check_in(&[America::Los_Angeles], utc("2026-07-02T03:00:00Z"));
        assert_eq!(pacific, WindowCheck::Open);
    }

    #[test]
    fn zones_whose_windows_never_meet_never_open() {
        // 09:00-12:00 in Tokyo is 00:00Z-03:00Z; in New York (EST) 14:00Z-17:00Z.
        let hours = hours("09:00", "12:00", WindowZone::Callee);
        assert_eq!(
            hours.check_in(
                &[Asia::Tokyo, America::New_York],
                utc("2026-01-15T12:00:00Z")
            ),
            WindowCheck::Never
        );
        // Each alone opens.
        assert_eq!(
            hours.check_in(&[Asia::Tokyo], utc("2026-01-15T12:00:00Z")),
            closed_until("2026-01-16T00:00:00Z")
        );
    }

    #[test]
    fn a_window_on_no_day_never_opens() {
        let hours = CallingHours {
            days: DaySet::from_iter([]),
            ..CallingHours::workspace_default()
        };
        assert!(hours.days.is_empty());
        assert_eq!(
            hours.check(INDIA, utc("2026-03-06T06:00:00Z")),
            WindowCheck::Never
        );
    }

    #[test]
    fn a_number_no_prefix_places_is_read_on_utc() {
        let hours = CallingHours::workspace_default();
        assert_eq!(
            hours.check("+80012345678", utc("2026-03-06T08:59:00Z")),
            closed_until("2026-03-06T09:00:00Z")
        );
        assert_eq!(
            hours.check("+80012345678", utc("2026-03-06T20:59:00Z")),
            WindowCheck::Open
        );
    }

    #[test]
    fn always_is_open_at_any_time_anywhere() {
        let always = CallingHours::always();
        for at in [
            "2026-03-08T07:00:00Z",
            "2026-11-01T06:30:00Z",
            "2026-12-31T23:59:59Z",
        ] {
            assert_eq!(always.check(IDAHO, utc(at)), WindowCheck::Open);
            assert_eq!(always.check("+1", utc(at)), WindowCheck::Open);
        }
        // The same through the zone arithmetic the shortcut skips.
        assert_eq!(
            hours("00:00", "24:00", WindowZone::Callee)
                .check_in(&[America::New_York], utc("2026-03-08T07:00:00Z")),
            WindowCheck::Open
        );
    }

    #[test]
    fn a_start_the_clocks_skip_opens_when_they_land() {
        // 02:30 on 2026-03-08 does not exist in New York: 02:00 EST became 03:00 EDT (07:00Z).
        let hours = hours("02:30", "04:00", WindowZone::Named(America::New_York));
        assert_eq!(
            hours.check("", utc("2026-03-08T06:00:00Z")),
            closed_until("2026-03-08T07:00:00Z")
        );
        // 03:59 EDT is inside, 04:00 EDT (08:00Z) is not.
        assert_eq!(
            hours.check("", utc("2026-03-08T07:59:00Z")),
            WindowCheck::Open
        );
        assert_eq!(
            hours.check("", utc("2026-03-08T08:00:00Z")),
            closed_until("2026-03-09T06:30:00Z")
        );
        // A window wholly inside the skipped hour has no instant that day.
        let skipped = CallingHours {
            start: 2 * 60 + 10,
            end: 2 * 60 + 50,
            ..hours
        };
        assert_eq!(
            skipped.check("", utc("2026-03-08T06:00:00Z")),
            closed_until("2026-03-09T06:10:00Z")
        );
        // Lord Howe skips half an hour: 02:00 (+10:30) became 02:30 (+11) on 2026-10-04,
        // 15:30Z the day before.
        let lord_howe = CallingHours {
            start: 2 * 60 + 15,
            end: 3 * 60,
            days: DaySet::every_day(),
            zone: WindowZone::Named(chrono_tz::Australia::Lord_Howe),
        };
        assert_eq!(
            lord_howe.check("", utc("2026-10-03T15:00:00Z")),
            closed_until("2026-10-03T15:30:00Z")
        );
    }

    #[test]
    fn a_start_the_clocks_show_twice_opens_the_first_time() {
        // 01:30 on 2026-11-01 in New York is 05:30Z (EDT), then again 06:30Z (EST).
        let hours = hours("01:30", "03:00", WindowZone::Named(America::New_York));
        assert_eq!(
            hours.check("", utc("2026-11-01T05:00:00Z")),
            closed_until("2026-11-01T05:30:00Z")
        );
        // 03:00 EST is 08:00Z.
        assert_eq!(
            hours.check("", utc("2026-11-01T07:59:00Z")),
            WindowCheck::Open
        );
        assert_eq!(
            hours.check("", utc("2026-11-01T08:00:00Z")),
            closed_until("2026-11-02T06:30:00Z")
        );
    }

    #[test]
    fn an_end_of_24_00_is_the_next_midnight() {
        let hours = hours("21:00", "24:00", WindowZone::Named(Asia::Calcutta));
        // 23:59 IST is open; 00:00 IST (18:30Z) closes until 21:00 IST (15:30Z).
        assert_eq!(
            hours.check("", utc("2026-03-06T18:29:00Z")),
            WindowCheck::Open
        );
        assert_eq!(
            hours.check("", utc("2026-03-06T18:30:00Z")),
            closed_until("2026-03-07T15:30:00Z")
        );
    }

    #[test]
    fn the_json_form_round_trips_and_fills_defaults() {
        let value = json!({
            "start": "08:30",
            "end": "24:00",
            "days": ["fri", "mon", "mon"],
            "timeZone": "Asia/Calcutta",
        });
        let hours = CallingHours::from_json(&value, "callingHours").unwrap();
        assert_eq!(
            hours,
            CallingHours {
                start: 8 * 60 + 30,
                end: DAY_MINUTES,
                days: [Weekday::Mon, Weekday::Fri].into_iter().collect(),
                zone: WindowZone::Named(Asia::Calcutta),
            }
        );
        assert_eq!(
            hours.to_json(),
            json!({
                "start": "08:30",
                "end": "24:00",
                "days": ["mon", "fri"],
                "timeZone": "Asia/Calcutta",
            })
        );
        assert_eq!(
            CallingHours::from_json(&hours.to_json(), "callingHours").unwrap(),
            hours
        );

        let defaults = json!({"start": "09:00", "end": "21:00"});
        let hours = CallingHours::from_json(&defaults, "callingHours").unwrap();
        assert_eq!(hours, CallingHours::workspace_default());
        let nulls = json!({"start": "09:00", "end": "21:00", "days": null, "timeZone": null});
        assert_eq!(CallingHours::from_json(&nulls, "x").unwrap(), hours);
        let callee = json!({"start": "09:00", "end": "21:00", "timeZone": "callee"});
        assert_eq!(CallingHours::from_json(&callee, "x").unwrap(), hours);
        assert_eq!(
            hours.to_json(),
            json!({
                "start": "09:00",
                "end": "21:00",
                "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                "timeZone": "callee",
            })
        );
    }

    fn error(value: Value) -> String {
        CallingHours::from_json(&value, "compliance.callingHours")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn every_json_error_names_the_field() {
        let start = "compliance.callingHours.start must be a time \"HH:MM\" (00:00-23:59)";
        let end = "compliance.callingHours.end must be a time \"HH:MM\" (00:00-24:00)";
        for bad in [
            json!(null),
            json!(9),
            json!("24:00"),
            json!("9:00"),
            json!("09:60"),
            json!("09-00"),
            json!("٠٩:٠٠"),
        ] {
            assert_eq!(error(json!({"start": bad, "end": "21:00"})), start);
        }
        assert_eq!(error(json!({"end": "21:00"})), start);
        for bad in [json!("24:01"), json!("25:00"), json!(""), json!(2100)] {
            assert_eq!(error(json!({"start": "09:00", "end": bad})), end);
        }
        assert_eq!(error(json!({"start": "09:00"})), end);
        for (start, end) in [("21:00", "09:00"), ("09:00", "09:00"), ("09:00", "00:00")] {
            assert_eq!(
                error(json!({"start": start, "end": end})),
                "compliance.callingHours.end must be later than compliance.callingHours.start"
            );
        }
        let days = "compliance.callingHours.days must be a non-empty array of mon, tue, wed, \
                    thu, fri, sat, sun";
        for bad in [
            json!([]),
            json!("mon"),
            json!(["mon", "funday"]),
            json!(["Mon"]),
            json!([1]),
            json!({"mon": true}),
        ] {
            assert_eq!(
                error(json!({"start": "09:00", "end": "21:00", "days": bad})),
                days
            );
        }
        assert_eq!(
            error(json!({"start": "09:00", "end": "21:00", "timeZone": "Mars/Base"})),
            "compliance.callingHours.timeZone \"Mars/Base\" is not an IANA time zone name"
        );
        assert_eq!(
            error(json!({"start": "09:00", "end": "21:00", "timeZone": 5})),
            "compliance.callingHours.timeZone must be \"callee\" or an IANA time zone name"
        );
        let long = "x".repeat(1000);
        let message = error(json!({"start": "09:00", "end": "21:00", "timeZone": long}));
        assert!(message.len() < 200, "{message}");
        assert_eq!(
            error(json!({"start": "09:00", "end": "21:00", "timezone": "UTC"})),
            "compliance.callingHours has an unknown field \"timezone\" (allowed: start, end, \
             days, timeZone)"
        );
        for bad in [
            json!([]),
            json!(["09:00", "21:00"]),
            json!("09:00-21:00"),
            json!(null),
        ] {
            assert_eq!(
                error(bad),
                "compliance.callingHours must be an object with start, end and optionally days \
                 and timeZone"
            );
        }
    }

    #[test]
    fn display_reads_as_a_sentence_part() {
        assert_eq!(
            CallingHours::workspace_default().to_string(),
            "09:00-21:00 mon-sun, callee's time zone"
        );
        let hours = CallingHours {
            days: [Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Sat]
                .into_iter()
                .collect(),
            zone: WindowZone::Named(Asia::Calcutta),
            ..CallingHours::always()
        };
        assert_eq!(hours.to_string(), "00:00-24:00 mon-wed, sat, Asia/Calcutta");
        let sunday = CallingHours {
            days: DaySet::from_iter([Weekday::Sun]),
            ..CallingHours::workspace_default()
        };
        assert_eq!(sunday.to_string(), "09:00-21:00 sun, callee's time zone");
    }
}

//! The console's overview (`/`): calls, statuses, minutes, spend and
//! success by IST day over a chosen range (7, 30 or 90 days, or from–to),
//! from the same store aggregates the dashboard and analytics endpoints
//! read, with the live and queued calls and the wallet.

use super::calls::display::{count, rupees, status_class};
use super::calls::filter::ist_midnight_ms;
use super::calls::{CallRow, SelectOption};
use crate::console::chrome::{Chrome, Nav};
use crate::console::error::ConsoleError;
use crate::console::render::render;
use crate::console::session::ConsoleUser;
use crate::domain::Paise;
use crate::domain::clock::{SharedClock, ist_day};
use crate::http::state::AppState;
use crate::store::{CallDayStatusRow, CallFilter, Store};
use askama::Template;
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{Days, NaiveDate};
use serde_json::json;
use voxline_actors::engine::CallStatus;

/// The range picker's presets, in days.
pub const PRESET_DAYS: [u32; 3] = [7, 30, 90];
/// The default range.
pub const DEFAULT_DAYS: u32 = 30;
/// The longest from–to range.
pub const MAX_DAYS: i64 = 366;
/// Recent calls listed under the charts.
pub const RECENT_CALLS: i64 = 10;

/// The overview's routes.
pub fn routes() -> Router<AppState> {
    Router::new().route("/", get(overview))
}

/// The IST days an overview covers, first and last inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayRange {
    /// First day.
    pub first: NaiveDate,
    /// Last day.
    pub last: NaiveDate,
}

/// The range picker as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeForm {
    /// `7`, `30` or `90`.
    pub days: String,
    /// First day, `YYYY-MM-DD`.
    pub from: String,
    /// Last day, `YYYY-MM-DD`.
    pub to: String,
}

impl RangeForm {
    /// The form from a raw query string.
    pub fn from_query(query: &str) -> Self {
        let mut form = Self::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.trim().to_string();
            match key.as_ref() {
                "days" => form.days = value,
                "from" => form.from = value,
                "to" => form.to = value,
                _ => {}
            }
        }
        form
    }

    /// The days covered, ending `today` for a preset; a from–to range wins
    /// over a preset. The message says what is wrong.
    pub fn parse(&self, today: NaiveDate) -> Result<DayRange, String> {
        let day = |raw: &str| NaiveDate::parse_from_str(raw, "%Y-%m-%d").ok();
        if !self.from.is_empty() || !self.to.is_empty() {
            let first = day(&self.from).ok_or("Use a first day such as 2026-11-01")?;
            let last = match self.to.as_str() {
                "" => today,
                raw => day(raw).ok_or("Use a last day such as 2026-11-30")?,
            };
            if last < first {
                return Err("The last day is before the first".into());
            }
            if (last - first).num_days() >= MAX_DAYS {
                return Err(format!("Choose at most {MAX_DAYS} days"));
            }
            return Ok(DayRange { first, last });
        }
        let days = match self.days.as_str() {
            "" => DEFAULT_DAYS,
            raw => raw
                .parse::<u32>()
                .ok()
                .filter(|d| PRESET_DAYS.contains(d))
                .ok_or("Choose 7, 30 or 90 days")?,
        };
        let first = today
            .checked_sub_days(Days::new(u64::from(days - 1)))
            .unwrap_or(today);
        Ok(DayRange { first, last: today })
    }
}

/// One status over the range.
#[derive(Debug, Clone)]
pub struct StatusShare {
    /// Display status.
    pub label: String,
    /// Raw status, for the list link.
    pub raw: String,
    /// Badge class suffix.
    pub class: &'static str,
    /// Calls.
    pub calls: String,
    /// Share of all calls, percent with one decimal (a bar width).
    pub percent: String,
}

/// The totals over the range.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeTotals {
    /// Calls.
    pub calls: i64,
    /// Completed.
    pub completed: i64,
    /// Talk seconds.
    pub talk_seconds: i64,
    /// Charges.
    pub spend_paise: i64,
    /// Analyses judged a success.
    pub passed: i64,
    /// Analyses judged not a success.
    pub not_passed: i64,
}

/// The series the charts draw: one entry per day of the range.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaySeries {
    /// Each day's IST midnight, Unix seconds (the x axis).
    pub x: Vec<i64>,
    /// Calls created.
    pub calls: Vec<i64>,
    /// Of which completed.
    pub completed: Vec<i64>,
    /// Of which failed, unanswered or busy.
    pub unsuccessful: Vec<i64>,
    /// Talk minutes, one decimal.
    pub minutes: Vec<f64>,
    /// Charges, rupees.
    pub spend: Vec<f64>,
    /// Passed ÷ judged, percent; `None` on a day nothing was judged.
    pub success: Vec<Option<f64>>,
}

/// Days since 1970-01-01.
fn day_number(day: NaiveDate) -> i64 {
    (day - NaiveDate::default()).num_days()
}

/// Sums the per-day, per-status rows and per-day analysis outcomes
/// (`(ist_day, passed, not_passed)`) into the range's series, totals and
/// per-status counts.
pub fn summarize(
    range: DayRange,
    rows: &[CallDayStatusRow],
    outcomes: &[(i64, i64, i64)],
) -> (DaySeries, RangeTotals, Vec<(String, i64)>) {
    let mut series = DaySeries::default();
    let mut totals = RangeTotals::default();
    let mut per_status: Vec<(String, i64)> = CallStatus::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    for day in range.first.iter_days().take_while(|d| *d <= range.last) {
        let number = day_number(day);
        let (mut calls, mut completed, mut unsuccessful, mut talk, mut spend) = (0, 0, 0, 0, 0);
        for row in rows.iter().filter(|r| r.ist_day == number) {
            calls += row.calls;
            talk += row.talk_seconds;
            spend += row.spend_paise.get();
            match row.status.as_str() {
                "completed" => completed += row.calls,
                "failed" | "no-answer" | "busy" => unsuccessful += row.calls,
                _ => {}
            }
            match per_status.iter_mut().find(|(s, _)| *s == row.status) {
                Some(entry) => entry.1 += row.calls,
                None => per_status.push((row.status.clone(), row.calls)),
            }
        }
        let (mut passed, mut not_passed) = (0, 0);
        for (_, p, n) in outcomes.iter().filter(|(d, _, _)| *d == number) {
            passed += p;
            not_passed += n;
        }
        series.x.push(ist_midnight_ms(day) / 1000);
        series.calls.push(calls);
        series.completed.push(completed);
        series.unsuccessful.push(unsuccessful);
        series.minutes.push((talk as f64 / 6.0).round() / 10.0);
        series.spend.push(spend as f64 / 100.0);
        series.success.push(
            (passed + not_passed > 0)
                .then(|| (passed as f64 * 1000.0 / (passed + not_passed) as f64).round() / 10.0),
        );
        totals.calls += calls;
        totals.completed += completed;
        totals.talk_seconds += talk;
        totals.spend_paise += spend;
        totals.passed += passed;
        totals.not_passed += not_passed;
    }
    (series, totals, per_status)
}

/// One chart's `data-series`: x and named series as JSON.
fn chart_json(x: &[i64], series: &[(&str, serde_json::Value)]) -> String {
    json!({
        "x": x,
        "series": series
            .iter()
            .map(|(label, values)| json!({"label": label, "values": values}))
            .collect::<Vec<_>>(),
    })
    .to_string()
}

/// `/`.
#[derive(Template)]
#[template(path = "console/overview.html")]
pub struct OverviewPage {
    /// The layout's needs.
    pub chrome: Chrome,
    /// The picker as typed.
    pub form: RangeForm,
    /// Presets: (days, label, chosen).
    pub presets: Vec<SelectOption>,
    /// What is wrong with the range.
    pub error: Option<String>,
    /// The range for display.
    pub range_label: String,
    /// Headline cards: (label, value, note).
    pub cards: Vec<(String, String, String)>,
    /// Status shares.
    pub statuses: Vec<StatusShare>,
    /// Chart data, JSON.
    pub volume_chart: String,
    /// Chart data, JSON.
    pub minutes_chart: String,
    /// Chart data, JSON.
    pub spend_chart: String,
    /// Chart data, JSON.
    pub success_chart: String,
    /// The newest calls.
    pub recent: Vec<CallRow>,
    /// The list link for the range.
    pub calls_link: String,
    /// First day, `YYYY-MM-DD`, for status links.
    pub range_first: String,
    /// Last day, `YYYY-MM-DD`, for status links.
    pub range_last: String,
}

/// `GET /`: the overview for the range the query picks.
async fn overview(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    RawQuery(query): RawQuery,
) -> Result<Response, ConsoleError> {
    let form = RangeForm::from_query(query.as_deref().unwrap_or_default());
    let now = clock.now();
    let today = ist_day(now);
    let (range, error) = match form.parse(today) {
        Ok(range) => (range, None),
        Err(message) => (
            RangeForm::default()
                .parse(today)
                .map_err(ConsoleError::BadRequest)?,
            Some(message),
        ),
    };
    let org_id = user.org_id;
    let since = ist_midnight_ms(range.first);
    let until = range.last.succ_opt().map_or(i64::MAX, ist_midnight_ms);
    let every_call = CallFilter::default();
    let (rows, analyses, org, live_counts, recent) = tokio::try_join!(
        store.calls_per_ist_day_and_status(org_id, since, until),
        store.analysis_per_agent_day(org_id, since),
        store.org(org_id),
        store.call_status_counts(org_id, None),
        store.list_calls(org_id, &every_call, RECENT_CALLS, 0),
    )?;
    let outcomes: Vec<(i64, i64, i64)> = analyses
        .iter()
        .map(|a| (a.ist_day, a.passed, a.not_passed))
        .collect();
    let (series, totals, per_status) = summarize(range, &rows, &outcomes);
    let live_of = |wanted: &[&str]| -> i64 {
        live_counts
            .iter()
            .filter(|(s, _)| wanted.contains(&s.as_str()))
            .map(|(_, n)| n)
            .sum()
    };
    let success = if totals.passed + totals.not_passed > 0 {
        format!(
            "{:.0}%",
            totals.passed as f64 * 100.0 / (totals.passed + totals.not_passed) as f64
        )
    } else {
        "—".into()
    };
    let cards = vec![
        (
            "Calls".to_string(),
            count(totals.calls),
            format!("{} completed", count(totals.completed)),
        ),
        (
            "Minutes".to_string(),
            count((totals.talk_seconds + 59) / 60),
            "talk time".to_string(),
        ),
        (
            "Spend".to_string(),
            rupees(Paise(totals.spend_paise)),
            "charged to the wallet".to_string(),
        ),
        (
            "Success".to_string(),
            success,
            format!(
                "{} of {} judged",
                count(totals.passed),
                count(totals.passed + totals.not_passed)
            ),
        ),
        (
            "Live now".to_string(),
            count(live_of(&["ringing", "in-progress"])),
            format!("{} queued", count(live_of(&["queued"]))),
        ),
        (
            "Wallet".to_string(),
            org.map(|o| rupees(o.wallet_paise)).unwrap_or_default(),
            "balance".to_string(),
        ),
    ];
    let all = totals.calls.max(1) as f64;
    let statuses = per_status
        .iter()
        .map(|(raw, calls)| StatusShare {
            label: super::calls::display::status_label(raw),
            raw: raw.clone(),
            class: status_class(raw),
            calls: count(*calls),
            percent: format!("{:.1}", *calls as f64 * 100.0 / all),
        })
        .collect();
    let presets = PRESET_DAYS
        .iter()
        .map(|d| {
            let chosen = form.from.is_empty()
                && form.to.is_empty()
                && (form.days == d.to_string() || (form.days.is_empty() && *d == DEFAULT_DAYS));
            (d.to_string(), format!("{d} days"), chosen)
        })
        .collect();
    let now_ms = now.timestamp_millis();
    let page = OverviewPage {
        chrome: Chrome::new(&user, Nav::Overview),
        presets,
        error,
        range_label: format!("{} – {} (IST)", range.first, range.last),
        cards,
        statuses,
        volume_chart: chart_json(
            &series.x,
            &[
                ("Calls", json!(series.calls)),
                ("Completed", json!(series.completed)),
                ("Unsuccessful", json!(series.unsuccessful)),
            ],
        ),
        minutes_chart: chart_json(&series.x, &[("Minutes", json!(series.minutes))]),
        spend_chart: chart_json(&series.x, &[("Spend (₹)", json!(series.spend))]),
        success_chart: chart_json(&series.x, &[("Success %", json!(series.success))]),
        recent: recent.iter().map(|row| CallRow::of(row, now_ms)).collect(),
        calls_link: format!("/calls?from={}&to={}", range.first, range.last),
        range_first: range.first.to_string(),
        range_last: range.last.to_string(),
        form,
    };
    let status = if page.error.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok((status, render(&page)?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn ranges_come_from_presets_or_from_to() {
        let today = day("2026-11-26");
        let preset = RangeForm::from_query("days=7").parse(today).unwrap();
        assert_eq!((preset.first, preset.last), (day("2026-11-20"), today));
        let default = RangeForm::from_query("").parse(today).unwrap();
        assert_eq!(default.first, day("2026-10-28"));
        let custom = RangeForm::from_query("days=7&from=2026-01-01&to=2026-01-31")
            .parse(today)
            .unwrap();
        assert_eq!(
            (custom.first, custom.last),
            (day("2026-01-01"), day("2026-01-31"))
        );
        assert!(RangeForm::from_query("days=8").parse(today).is_err());
        assert!(
            RangeForm::from_query("from=2026-02-01&to=2026-01-01")
                .parse(today)
                .is_err()
        );
        assert!(
            RangeForm::from_query("from=2024-01-01&to=2026-01-01")
                .parse(today)
                .is_err()
        );
    }

    #[test]
    fn days_sum_statuses_minutes_spend_and_success() {
        let range = DayRange {
            first: day("2026-11-01"),
            last: day("2026-11-03"),
        };
        let second = day_number(day("2026-11-02"));
        let row = |status: &str, calls, talk, spend| CallDayStatusRow {
            ist_day: second,
            status: status.into(),
            calls,
            talk_seconds: talk,
            spend_paise: Paise(spend),
        };
        let rows = [row("completed", 3, 600, 1_500), row("no-answer", 2, 0, 0)];
        let (series, totals, per_status) = summarize(range, &rows, &[(second, 3, 1)]);
        assert_eq!(series.calls, [0, 5, 0]);
        assert_eq!(series.completed, [0, 3, 0]);
        assert_eq!(series.unsuccessful, [0, 2, 0]);
        assert_eq!(series.minutes, [0.0, 10.0, 0.0]);
        assert_eq!(series.spend, [0.0, 15.0, 0.0]);
        assert_eq!(series.success, [None, Some(75.0), None]);
        assert_eq!(series.x[1] - series.x[0], 86_400);
        assert_eq!(totals.calls, 5);
        assert_eq!(totals.passed, 3);
        assert!(per_status.contains(&("no-answer".to_string(), 2)));
    }
}

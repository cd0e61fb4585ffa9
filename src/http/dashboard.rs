//! `/api/dashboard/*` and `/api/analytics/overview`: aggregates over the
//! caller's calls and their post-call analyses. Days and months are IST
//! (decisions §4).

use super::MessageBody;
use super::auth::Caller;
use super::call_reads::{CallRowView, call_list};
use super::error::{ApiError, ApiResult};
use super::extract::ApiQuery;
use crate::domain::clock::SharedClock;
use crate::domain::clock::{IST, ist_day, ist_month_key};
use crate::domain::page::PageRequest;
use crate::http::state::AppState;
use crate::store::Store;
use crate::store::{CallAggregateRow, CallFilter, CallGrouping};
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Datelike, Days, NaiveDate, TimeZone, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use voxline_actors::engine::CallStatus;

/// Days the call-volume chart covers by default.
pub const DEFAULT_VOLUME_DAYS: u32 = 14;
/// The longest call-volume chart.
pub const MAX_VOLUME_DAYS: u32 = 90;
/// Days the analytics overview covers by default.
pub const DEFAULT_ANALYTICS_DAYS: u32 = 30;
/// The longest analytics window.
pub const MAX_ANALYTICS_DAYS: u32 = 365;
/// Rows of the recent-calls read.
pub const RECENT_CALLS: u32 = 10;

/// The dashboard and analytics routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(dashboard_overview))
        .routes(routes!(call_volume))
        .routes(routes!(status_breakdown))
        .routes(routes!(recent_calls))
        .routes(routes!(analytics_overview))
        .routes(routes!(analysis_outcomes))
}

/// The first instant (UTC) of an IST calendar day.
fn ist_midnight(day: NaiveDate) -> DateTime<Utc> {
    IST.from_local_datetime(&day.and_time(chrono::NaiveTime::MIN))
        .single()
        .map(|at| at.with_timezone(&Utc))
        .unwrap_or_default()
}

/// A `?days=` window of 1 to `MAX` days, `DEFAULT` when absent; a blank
/// value is refused like any other non-number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayWindow<const DEFAULT: u32, const MAX: u32>(pub u32);

impl<const DEFAULT: u32, const MAX: u32> Default for DayWindow<DEFAULT, MAX> {
    fn default() -> Self {
        Self(DEFAULT)
    }
}

impl<'de, const DEFAULT: u32, const MAX: u32> Deserialize<'de> for DayWindow<DEFAULT, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        raw.parse::<u32>()
            .ok()
            .filter(|days| (1..=MAX).contains(days))
            .map(Self)
            .ok_or_else(|| D::Error::custom(format!("must be an integer from 1 to {MAX}")))
    }
}

/// The call-volume chart's query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallVolumeQuery {
    /// Days charted, ending today: 1 to 90, default 14.
    #[serde(default)]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 90)]
    pub days: DayWindow<DEFAULT_VOLUME_DAYS, MAX_VOLUME_DAYS>,
}

/// The analytics overview's query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AnalyticsQuery {
    /// Days covered, ending today: 1 to 365, default 30.
    #[serde(default)]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 365)]
    pub days: DayWindow<DEFAULT_ANALYTICS_DAYS, MAX_ANALYTICS_DAYS>,
}

/// Answered ÷ finished, 0 when nothing finished.
fn answer_rate(answered: i64, finished: i64) -> f64 {
    if finished > 0 {
        answered as f64 / finished as f64
    } else {
        0.0
    }
}

/// Passed ÷ judged (passed + not passed), `None` when none was judged.
fn success_rate(passed: i64, not_passed: i64) -> Option<f64> {
    let judged = passed + not_passed;
    (judged > 0).then(|| passed as f64 / judged as f64)
}

/// Talk seconds ÷ answered calls, 0 when none was answered.
fn average_seconds(talk_seconds: i64, answered: i64) -> f64 {
    if answered > 0 {
        talk_seconds as f64 / answered as f64
    } else {
        0.0
    }
}

/// The dashboard's headline numbers.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DashboardOverview {
    /// Calls created since midnight IST.
    pub calls_today: i64,
    /// Calls created since the 1st of the month, IST.
    pub calls_this_month: i64,
    /// Of this month's calls, completed.
    pub completed_this_month: i64,
    /// Of this month's calls, failed, unanswered or busy.
    pub unsuccessful_this_month: i64,
    /// This month: answered ÷ finished calls, 0 to 1.
    pub answer_rate: f64,
    /// Minutes billed this month (the minute quota's usage).
    pub minutes_this_month: i64,
    /// Minute quota per month.
    pub minute_quota: i64,
    /// Talk time of this month's calls, seconds.
    pub talk_seconds_this_month: i64,
    /// Charges of this month's calls, paise.
    pub spend_paise_this_month: i64,
    /// Calls ringing or in progress now.
    pub live_calls: i64,
    /// Calls waiting for a slot now.
    pub queued_calls: i64,
    /// Wallet balance, paise.
    pub wallet_paise: i64,
    /// The IST month covered, `YYYY-MM`.
    pub month: String,
}

/// Dashboard headline metrics: today, this month, live calls and wallet.
#[utoipa::path(get, path = "/api/dashboard/overview", tag = "dashboard",
    responses((status = 200, body = DashboardOverview)))]
async fn dashboard_overview(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
) -> ApiResult<Json<DashboardOverview>> {
    let org_id = caller.org_id;
    let now = clock.now();
    let today = ist_day(now);
    let month_start = ist_midnight(today.with_day(1).unwrap_or(today));
    let month = ist_month_key(now);
    let (org, totals, per_status, minutes) = tokio::try_join!(
        store.org(org_id),
        store.call_aggregates(
            org_id,
            month_start.timestamp_millis(),
            ist_midnight(today).timestamp_millis(),
            CallGrouping::Total,
        ),
        store.call_status_counts(org_id, None),
        store.minutes_used(org_id, &month),
    )?;
    let org = org.ok_or_else(|| ApiError::NotFound("Workspace not found".into()))?;
    let totals = totals.into_iter().next().unwrap_or_default();
    let count_of = |wanted: &[&str]| -> i64 {
        per_status
            .iter()
            .filter(|(status, _)| wanted.contains(&status.as_str()))
            .map(|(_, calls)| calls)
            .sum()
    };
    Ok(Json(DashboardOverview {
        calls_today: totals.calls_today,
        calls_this_month: totals.calls,
        completed_this_month: totals.completed,
        unsuccessful_this_month: totals.failed + totals.no_answer + totals.busy,
        answer_rate: answer_rate(totals.answered, totals.finished),
        minutes_this_month: minutes,
        minute_quota: org.minute_quota,
        talk_seconds_this_month: totals.talk_seconds,
        spend_paise_this_month: totals.spend_paise.get(),
        live_calls: count_of(&["ringing", "in-progress"]),
        queued_calls: count_of(&["queued"]),
        wallet_paise: org.wallet_paise.get(),
        month,
    }))
}

/// Calls of one IST day.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallVolumeDay {
    /// The IST date, `YYYY-MM-DD`.
    pub date: String,
    /// Calls created that day.
    pub calls: i64,
    /// Of which completed.
    pub completed: i64,
    /// Of which failed, unanswered or busy.
    pub unsuccessful: i64,
}

/// Per-day call counts, oldest day first, every day present.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallVolume {
    /// Days covered, today included.
    pub days: u32,
    /// Always `Asia/Kolkata`.
    pub time_zone: &'static str,
    /// One entry per day.
    pub series: Vec<CallVolumeDay>,
}

/// Call counts per IST day for the last `days` days (1–90, default 14), today included.
#[utoipa::path(get, path = "/api/dashboard/call-volume", tag = "dashboard",
    params(CallVolumeQuery),
    responses((status = 200, body = CallVolume), (status = 400, body = MessageBody)))]
async fn call_volume(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiQuery(query): ApiQuery<CallVolumeQuery>,
) -> ApiResult<Json<CallVolume>> {
    let DayWindow(days) = query.days;
    let today = ist_day(clock.now());
    let first = today
        .checked_sub_days(Days::new(u64::from(days - 1)))
        .unwrap_or(today);
    let rows = store
        .calls_per_ist_day(caller.org_id, ist_midnight(first).timestamp_millis())
        .await?;
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    let series = first
        .iter_days()
        .take_while(|day| *day <= today)
        .map(|day| {
            let number = (day - epoch).num_days();
            let found = rows.iter().find(|row| row.ist_day == number);
            CallVolumeDay {
                date: day.format("%Y-%m-%d").to_string(),
                calls: found.map_or(0, |row| row.calls),
                completed: found.map_or(0, |row| row.completed),
                unsuccessful: found.map_or(0, |row| row.unsuccessful),
            }
        })
        .collect();
    Ok(Json(CallVolume {
        days,
        time_zone: "Asia/Kolkata",
        series,
    }))
}

/// Calls in one status.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCount {
    /// Raw status (the list filter's form).
    pub status: String,
    /// Display form.
    pub label: String,
    /// Calls in it now.
    pub count: i64,
}

/// Every status with its count.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusBreakdown {
    /// All calls of the workspace.
    pub total: i64,
    /// One entry per status, in lifecycle order, zeros included.
    pub statuses: Vec<StatusCount>,
}

/// How the workspace's calls divide across statuses.
#[utoipa::path(get, path = "/api/dashboard/status-breakdown", tag = "dashboard",
    responses((status = 200, body = StatusBreakdown)))]
async fn status_breakdown(
    State(store): State<Store>,
    caller: Caller,
) -> ApiResult<Json<StatusBreakdown>> {
    let per_status = store.call_status_counts(caller.org_id, None).await?;
    let statuses: Vec<StatusCount> = CallStatus::ALL
        .iter()
        .map(|status| StatusCount {
            status: status.as_str().to_string(),
            label: status.display().to_string(),
            count: per_status
                .iter()
                .filter(|(raw, _)| raw == status.as_str())
                .map(|(_, calls)| calls)
                .sum(),
        })
        .collect();
    Ok(Json(StatusBreakdown {
        total: statuses.iter().map(|s| s.count).sum(),
        statuses,
    }))
}

/// The latest calls in the list-row shape.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecentCalls {
    /// Up to 10 calls, newest first.
    pub rows: Vec<CallRowView>,
}

/// The 10 most recent calls.
#[utoipa::path(get, path = "/api/dashboard/recent-calls", tag = "dashboard",
    responses((status = 200, body = RecentCalls)))]
async fn recent_calls(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
) -> ApiResult<Json<RecentCalls>> {
    let page = PageRequest {
        page: 1,
        limit: RECENT_CALLS,
    };
    let list = call_list(&store, &clock, caller.org_id, &CallFilter::default(), page).await?;
    Ok(Json(RecentCalls { rows: list.rows }))
}

/// Totals over a set of calls.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallTotals {
    /// Calls placed.
    pub calls: i64,
    /// Completed.
    pub completed: i64,
    /// Failed.
    pub failed: i64,
    /// Not answered.
    pub no_answer: i64,
    /// Busy.
    pub busy: i64,
    /// Canceled.
    pub canceled: i64,
    /// Finished calls that were answered.
    pub answered: i64,
    /// Answered ÷ finished, 0 to 1.
    pub answer_rate: f64,
    /// Talk time, seconds.
    pub talk_seconds: i64,
    /// Mean talk time of answered calls, seconds.
    pub average_duration_seconds: f64,
    /// Charges, paise.
    pub spend_paise: i64,
}

impl CallTotals {
    fn from_row(row: &CallAggregateRow) -> Self {
        Self {
            calls: row.calls,
            completed: row.completed,
            failed: row.failed,
            no_answer: row.no_answer,
            busy: row.busy,
            canceled: row.canceled,
            answered: row.answered,
            answer_rate: answer_rate(row.answered, row.finished),
            talk_seconds: row.talk_seconds,
            average_duration_seconds: average_seconds(row.talk_seconds, row.answered),
            spend_paise: row.spend_paise.get(),
        }
    }
}

/// Totals for one agent.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentTotals {
    /// Agent id.
    pub agent_id: String,
    /// Agent name on its latest call.
    pub agent_name: String,
    /// The totals.
    #[serde(flatten)]
    pub totals: CallTotals,
}

/// Totals for one telephony provider.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderTotals {
    /// Provider.
    pub provider: String,
    /// The totals.
    #[serde(flatten)]
    pub totals: CallTotals,
}

/// Calls that ended for one reason.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndedReasonCount {
    /// `caller-hangup`, `agent-hangup`, `max-duration`, …
    pub ended_reason: String,
    /// Calls.
    pub count: i64,
}

/// The analytics summary over a window of days.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalyticsOverview {
    /// Days covered, today (IST) included.
    pub days: u32,
    /// First instant covered, ISO 8601.
    pub since: String,
    /// Totals over every call in the window.
    pub totals: CallTotals,
    /// Per agent, most calls first.
    pub by_agent: Vec<AgentTotals>,
    /// Per provider, most calls first.
    pub by_provider: Vec<ProviderTotals>,
    /// Ended-reason counts, most frequent first.
    pub ended_reasons: Vec<EndedReasonCount>,
}

/// Totals, answer rate, average duration, and per-agent, per-provider and ended-reason breakdowns for the last `days` IST days (1–365, default 30).
#[utoipa::path(get, path = "/api/analytics/overview", tag = "analytics",
    params(AnalyticsQuery),
    responses((status = 200, body = AnalyticsOverview), (status = 400, body = MessageBody)))]
async fn analytics_overview(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiQuery(query): ApiQuery<AnalyticsQuery>,
) -> ApiResult<Json<AnalyticsOverview>> {
    let DayWindow(days) = query.days;
    let today = ist_day(clock.now());
    let first = today
        .checked_sub_days(Days::new(u64::from(days - 1)))
        .unwrap_or(today);
    let since = ist_midnight(first).timestamp_millis();
    let today_ms = ist_midnight(today).timestamp_millis();
    let org_id = caller.org_id;
    let (totals, agents, providers, reasons) = tokio::try_join!(
        store.call_aggregates(org_id, since, today_ms, CallGrouping::Total),
        store.call_aggregates(org_id, since, today_ms, CallGrouping::Agent),
        store.call_aggregates(org_id, since, today_ms, CallGrouping::Provider),
        store.call_aggregates(org_id, since, today_ms, CallGrouping::EndedReason),
    )?;
    let totals = totals.into_iter().next().unwrap_or_default();
    Ok(Json(AnalyticsOverview {
        days,
        since: crate::domain::clock::iso(since),
        totals: CallTotals::from_row(&totals),
        by_agent: agents
            .iter()
            .map(|row| AgentTotals {
                agent_id: row.group_key.clone(),
                agent_name: row.group_name.clone(),
                totals: CallTotals::from_row(row),
            })
            .collect(),
        by_provider: providers
            .iter()
            .map(|row| ProviderTotals {
                provider: row.group_key.clone(),
                totals: CallTotals::from_row(row),
            })
            .collect(),
        ended_reasons: reasons
            .iter()
            .map(|row| EndedReasonCount {
                ended_reason: row.group_key.clone(),
                count: row.calls,
            })
            .collect(),
    }))
}

/// Post-call analysis outcomes over a set of calls.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisOutcomes {
    /// Analyses done.
    pub analyzed: i64,
    /// Of which judged a success.
    pub passed: i64,
    /// Of which judged not a success (the rest of `analyzed` was not judged:
    /// the plan has no success rubric).
    pub not_passed: i64,
    /// Analyses that failed (see a call's `analysis.error`; re-run to retry).
    pub failed: i64,
    /// passed ÷ (passed + notPassed), 0 to 1; null when none was judged.
    pub success_rate: Option<f64>,
}

impl AnalysisOutcomes {
    fn add(&mut self, analyzed: i64, passed: i64, not_passed: i64, failed: i64) {
        self.analyzed += analyzed;
        self.passed += passed;
        self.not_passed += not_passed;
        self.failed += failed;
        self.success_rate = success_rate(self.passed, self.not_passed);
    }
}

/// One agent's analysis outcomes over the window.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentAnalysisOutcomes {
    /// Agent id.
    pub agent_id: String,
    /// Agent name on its latest analyzed call.
    pub agent_name: String,
    /// The outcomes.
    #[serde(flatten)]
    pub outcomes: AnalysisOutcomes,
}

/// One agent's analysis outcomes on one IST day.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentDayAnalysisOutcomes {
    /// The IST date of the calls' creation, `YYYY-MM-DD`.
    pub date: String,
    /// Agent id.
    pub agent_id: String,
    /// Agent name on its latest analyzed call that day.
    pub agent_name: String,
    /// The outcomes.
    #[serde(flatten)]
    pub outcomes: AnalysisOutcomes,
}

/// Success rate and analysis failures over a window of IST days.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisOverview {
    /// Days covered, today (IST) included.
    pub days: u32,
    /// First instant covered, ISO 8601.
    pub since: String,
    /// Always `Asia/Kolkata`.
    pub time_zone: &'static str,
    /// Over every call in the window.
    pub totals: AnalysisOutcomes,
    /// Per agent with analyses in the window, most analyzed first.
    pub by_agent: Vec<AgentAnalysisOutcomes>,
    /// Per IST day and agent, oldest day first (then by agent id); a day or
    /// agent without analyses is absent.
    pub by_day: Vec<AgentDayAnalysisOutcomes>,
}

/// Post-call analysis outcomes of the calls created in the last `days` IST
/// days (1–365, default 30), today included: analyzed, passed, not passed,
/// failed and success rate (passed ÷ judged, null when none was judged), in
/// total, per agent and per agent and day. Counted by the day the call was
/// created; pending and skipped analyses count nowhere.
#[utoipa::path(get, path = "/api/dashboard/analysis", tag = "dashboard",
    params(AnalyticsQuery),
    responses((status = 200, body = AnalysisOverview), (status = 400, body = MessageBody)))]
async fn analysis_outcomes(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiQuery(query): ApiQuery<AnalyticsQuery>,
) -> ApiResult<Json<AnalysisOverview>> {
    let DayWindow(days) = query.days;
    let today = ist_day(clock.now());
    let first = today
        .checked_sub_days(Days::new(u64::from(days - 1)))
        .unwrap_or(today);
    let since = ist_midnight(first).timestamp_millis();
    let rows = store.analysis_per_agent_day(caller.org_id, since).await?;
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    let mut totals = AnalysisOutcomes::default();
    let mut by_agent: Vec<AgentAnalysisOutcomes> = Vec::new();
    let mut by_day = Vec::with_capacity(rows.len());
    for row in rows {
        totals.add(row.analyzed, row.passed, row.not_passed, row.failed);
        let index = match by_agent.iter().position(|a| a.agent_id == row.agent_id) {
            Some(index) => index,
            None => {
                by_agent.push(AgentAnalysisOutcomes {
                    agent_id: row.agent_id.clone(),
                    agent_name: String::new(),
                    outcomes: AnalysisOutcomes::default(),
                });
                by_agent.len() - 1
            }
        };
        let agent = &mut by_agent[index];
        agent
            .outcomes
            .add(row.analyzed, row.passed, row.not_passed, row.failed);
        // Rows come oldest day first: the last name seen is the latest.
        agent.agent_name.clone_from(&row.agent_name);
        let mut outcomes = AnalysisOutcomes::default();
        outcomes.add(row.analyzed, row.passed, row.not_passed, row.failed);
        by_day.push(AgentDayAnalysisOutcomes {
            date: epoch
                .checked_add_days(Days::new(u64::try_from(row.ist_day).unwrap_or_default()))
                .unwrap_or(epoch)
                .format("%Y-%m-%d")
                .to_string(),
            agent_id: row.agent_id,
            agent_name: row.agent_name,
            outcomes,
        });
    }
    by_agent.sort_by(|a, b| {
        b.outcomes
            .analyzed
            .cmp(&a.outcomes.analyzed)
            .then_with(|| a.agent_id.cmp(&b.agent_id))
    });
    Ok(Json(AnalysisOverview {
        days,
        since: crate::domain::clock::iso(since),
        time_zone: "Asia/Kolkata",
        totals,
        by_agent,
        by_day,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ist_midnight_is_1830_utc_the_day_before() {
        let day = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
        assert_eq!(ist_midnight(day).to_rfc3339(), "2026-11-21T18:30:00+00:00");
    }

    #[test]
    fn rates_do_not_divide_by_zero() {
        assert_eq!(answer_rate(0, 0), 0.0);
        assert_eq!(answer_rate(1, 4), 0.25);
        assert_eq!(average_seconds(90, 2), 45.0);
        assert_eq!(success_rate(0, 0), None);
        assert_eq!(success_rate(3, 1), Some(0.75));
    }
}

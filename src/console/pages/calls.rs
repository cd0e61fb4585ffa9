//! The console's calls: the filtered list (`/calls`), one call's page
//! (`/calls/{id}`: transcript beside the recording, latency, history,
//! analysis, scorecard, tools, webhook deliveries), its live view over
//! server-sent events (`/calls/{id}/events`), its recording for the player
//! (`/calls/{id}/recording`) and the webhook redelivery
//! (`POST /calls/{id}/redeliver`). Reads go to the store the API reads;
//! redelivery and the recording use the same service code as the API.

pub mod detail;
pub mod display;
pub mod filter;

use crate::console::chrome::{Chrome, Nav};
use crate::console::error::ConsoleError;
use crate::console::render::render;
use crate::console::session::ConsoleUser;
use crate::domain::Role;
use crate::domain::clock::SharedClock;
use crate::domain::{CallId, OrgId};
use crate::http::state::AppState;
use crate::recordings::RecordingStore;
use crate::recordings::serve::{ServeRecordingError, serve_recording};
use crate::store::{CallReadRow, Store, StoreError};
use askama::Template;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use detail::{
    AnalysisPanel, CallHeader, DeliveryView, HistoryView, LatencyView, ScorecardPanel, ToolView,
    TurnView,
};
use display::{ago, count, duration, rupees, status_class, status_label};
use filter::{CallsForm, FieldError, PAGE_ROWS};
use futures::Stream;
use std::convert::Infallible;
use std::time::Duration;
use voxline_actors::engine::CallStatus;

/// How often the live view looks at the call.
pub const LIVE_POLL: Duration = Duration::from_millis(500);
/// The longest a live view stays open; the page reconnects after.
pub const LIVE_MAX: Duration = Duration::from_secs(30 * 60);

/// The calls pages' routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/calls", get(list_page))
        .route("/calls/{id}", get(call_page))
        .route("/calls/{id}/events", get(live_events))
        .route("/calls/{id}/recording", get(recording))
        .route("/calls/{id}/redeliver", post(redeliver))
}

/// One row of the list.
#[derive(Debug, Clone)]
pub struct CallRow {
    /// Call id.
    pub id: String,
    /// Person called.
    pub name: String,
    /// Number dialed.
    pub phone: String,
    /// Agent name.
    pub agent: String,
    /// Display status.
    pub status: String,
    /// Badge class suffix.
    pub status_class: &'static str,
    /// Talk time.
    pub duration: String,
    /// Charge.
    pub cost: String,
    /// Created, relative.
    pub created_ago: String,
    /// Created, IST.
    pub created: String,
    /// Summary.
    pub summary: String,
    /// `outbound` or `inbound`.
    pub direction: &'static str,
}

impl CallRow {
    /// The list row of a stored call.
    pub fn of(row: &CallReadRow, now_ms: i64) -> Self {
        Self {
            id: row.id.to_string(),
            name: row.target_name.clone(),
            phone: row.phone.clone(),
            agent: row.agent_name.clone(),
            status: status_label(&row.status),
            status_class: status_class(&row.status),
            duration: duration(row.duration_seconds),
            cost: rupees(row.cost_paise),
            created_ago: ago(row.created_at, now_ms),
            created: display::ist_time(row.created_at),
            summary: row.summary.clone(),
            direction: row.direction.as_str(),
        }
    }
}

/// An option of a select: (value, label, selected).
pub type SelectOption = (String, String, bool);

/// `/calls`.
#[derive(Template)]
#[template(path = "console/calls.html")]
pub struct CallsPage {
    /// The layout's needs.
    pub chrome: Chrome,
    /// The form as typed.
    pub form: CallsForm,
    /// Complaints per field.
    pub errors: Vec<FieldError>,
    /// Status boxes: (raw, label, ticked).
    pub statuses: Vec<SelectOption>,
    /// Agent options.
    pub agents: Vec<SelectOption>,
    /// Batch options.
    pub batches: Vec<SelectOption>,
    /// This page's rows.
    pub rows: Vec<CallRow>,
    /// Calls matching, for display (`1,000+` when capped).
    pub total: String,
    /// Of which completed.
    pub completed: String,
    /// Of which failed.
    pub failed: String,
    /// This page.
    pub page: u32,
    /// Pages, when known.
    pub pages: u32,
    /// Link to the page before, when there is one.
    pub prev: Option<String>,
    /// Link to the page after, when there is one.
    pub next: Option<String>,
}

impl CallsPage {
    /// The complaint about `field`, if any.
    pub fn error_for(&self, field: &str) -> Option<&str> {
        self.errors
            .iter()
            .find(|e| e.field == field)
            .map(|e| e.message.as_str())
    }
}

/// The agents of a workspace as select options, `selected` marked; an id
/// that is no agent still shows (as itself), so the filter stays visible.
async fn agent_options(
    store: &Store,
    org_id: OrgId,
    selected: &str,
) -> Result<Vec<SelectOption>, ConsoleError> {
    let mut options: Vec<SelectOption> = store
        .agents(org_id)
        .await?
        .iter()
        .map(|agent| {
            let id = agent.id.to_string();
            let name = agent.spec()?.name;
            let chosen = id == selected;
            Ok((id, name, chosen))
        })
        .collect::<Result<_, StoreError>>()?;
    options.sort_by_key(|option| option.1.to_lowercase());
    if !selected.is_empty() && !options.iter().any(|o| o.2) {
        options.push((selected.to_string(), selected.to_string(), true));
    }
    Ok(options)
}

/// The newest batches and campaigns as select options.
async fn batch_options(
    store: &Store,
    org_id: OrgId,
    selected: &str,
) -> Result<Vec<SelectOption>, ConsoleError> {
    let mut options = Vec::new();
    for kind in ["batch", "campaign"] {
        let (rows, _) = store.list_batches(org_id, kind, 50, 0).await?;
        options.extend(rows.into_iter().map(|batch| {
            let id = batch.id.to_string();
            let chosen = id == selected;
            (id, format!("{} ({kind})", batch.name), chosen)
        }));
    }
    if !selected.is_empty() && !options.iter().any(|o| o.2) {
        options.push((selected.to_string(), selected.to_string(), true));
    }
    Ok(options)
}

/// `GET /calls`: the list with every filter, paged; a bad filter is shown at
/// its field with a 422.
async fn list_page(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    RawQuery(query): RawQuery,
) -> Result<Response, ConsoleError> {
    let form = CallsForm::from_query(query.as_deref().unwrap_or_default());
    let now = clock.now();
    let org_id = user.org_id;
    let (agents, batches) = tokio::try_join!(
        agent_options(&store, org_id, &form.agent),
        batch_options(&store, org_id, &form.batch),
    )?;
    let statuses = CallStatus::ALL
        .iter()
        .map(|s| {
            (
                s.as_str().to_string(),
                s.display().to_string(),
                form.has_status(s.as_str()),
            )
        })
        .collect();
    let mut page = CallsPage {
        chrome: Chrome::new(&user, Nav::Calls),
        form,
        errors: Vec::new(),
        statuses,
        agents,
        batches,
        rows: Vec::new(),
        total: "0".into(),
        completed: "0".into(),
        failed: "0".into(),
        page: 1,
        pages: 1,
        prev: None,
        next: None,
    };
    let request = match page.form.parse(now) {
        Ok(request) => request,
        Err(errors) => {
            page.errors = errors;
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response());
        }
    };
    let (rows, counts) = store
        .list_calls_counted(
            org_id,
            &request.filter,
            i64::from(request.page.limit),
            request.page.offset(),
        )
        .await?;
    let now_ms = now.timestamp_millis();
    page.rows = rows.iter().map(|row| CallRow::of(row, now_ms)).collect();
    page.total = if counts.capped {
        format!("{}+", count(counts.total))
    } else {
        count(counts.total)
    };
    page.completed = count(counts.completed);
    page.failed = count(counts.failed);
    page.page = request.page.page;
    let limit = i64::from(PAGE_ROWS);
    page.pages = u32::try_from(((counts.total + limit - 1) / limit).max(1)).unwrap_or(u32::MAX);
    let has_more = page.rows.len() == PAGE_ROWS as usize
        && (counts.capped || i64::from(page.page) * limit < counts.total);
    if page.page > 1 {
        page.prev = Some(format!("/calls?{}", page.form.query_at(page.page - 1)));
    }
    if has_more {
        page.next = Some(format!("/calls?{}", page.form.query_at(page.page + 1)));
    }
    Ok(render(&page)?.into_response())
}

/// The call a path names; an id that parses to nothing is a 404 like a missing call.
fn call_id(raw: &str) -> Result<CallId, ConsoleError> {
    raw.parse::<CallId>().map_err(|_| ConsoleError::NotFound)
}

/// The live part of the call page: status and turns so far.
#[derive(Template)]
#[template(path = "console/call_live.html")]
pub struct LiveFragment {
    /// Call id.
    pub id: String,
    /// Display status.
    pub status: String,
    /// Badge class suffix.
    pub status_class: &'static str,
    /// Seconds since it was answered (or created), for display.
    pub elapsed: String,
    /// Turns so far.
    pub turns: Vec<TurnView>,
    /// Whether it has ended.
    pub finished: bool,
}

/// `/calls/{id}`.
#[derive(Template)]
#[template(path = "console/call.html")]
pub struct CallPage {
    /// The layout's needs.
    pub chrome: Chrome,
    /// Header facts.
    pub call: CallHeader,
    /// The rendered live view, while the call is still going.
    pub live_html: Option<String>,
    /// Transcript turns.
    pub turns: Vec<TurnView>,
    /// The player's source, when a recording is kept.
    pub recording_src: Option<String>,
    /// The recording's length, seconds, for display.
    pub recording_seconds: String,
    /// Latency bars.
    pub latencies: Vec<LatencyView>,
    /// Status history.
    pub history: Vec<HistoryView>,
    /// The analysis.
    pub analysis: Option<AnalysisPanel>,
    /// The scorecard.
    pub scorecard: Option<ScorecardPanel>,
    /// Tool calls.
    pub tools: Vec<ToolView>,
    /// The rendered webhook deliveries card, with the redelivery form.
    pub deliveries_html: String,
}

/// The webhook deliveries card (swapped after a redelivery).
#[derive(Template)]
#[template(path = "console/call_deliveries.html")]
pub struct DeliveriesFragment {
    /// Call id.
    pub id: String,
    /// The deliveries, newest first.
    pub rows: Vec<DeliveryView>,
    /// Whether this person may redeliver (admin and up) and the call has ended.
    pub can_redeliver: bool,
    /// The CSRF token for the form.
    pub csrf: String,
    /// What the last redelivery queued.
    pub flash: Option<String>,
}

/// The live fragment of a call now.
async fn live_fragment(
    store: &Store,
    clock: &SharedClock,
    org_id: OrgId,
    id: CallId,
) -> Result<Option<LiveFragment>, ConsoleError> {
    let Some(detail) = store.call_detail(org_id, id).await? else {
        return Ok(None);
    };
    let turns = store.call_turns(org_id, id).await?;
    let call = &detail.call;
    let finished = CallStatus::parse(&call.status).is_some_and(CallStatus::is_terminal);
    let since = call.answered_at.unwrap_or(call.created_at);
    let end = call
        .ended_at
        .unwrap_or_else(|| clock.now().timestamp_millis());
    Ok(Some(LiveFragment {
        id: id.to_string(),
        status: status_label(&call.status),
        status_class: status_class(&call.status),
        elapsed: duration((end - since) / 1000),
        turns: detail::turns(&turns, call.answered_at, &[]),
        finished,
    }))
}

/// `GET /calls/{id}`: the finished call's page, or its live view while it runs.
async fn call_page(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Path(raw_id): Path<String>,
) -> Result<Response, ConsoleError> {
    let id = call_id(&raw_id)?;
    let org = user.org_id;
    let detail = store
        .call_detail(org, id)
        .await?
        .ok_or(ConsoleError::NotFound)?;
    let (turns, events, analysis, tool_calls, rating, recording, deliveries) = tokio::try_join!(
        store.call_turns(org, id),
        store.call_events(id),
        store.analysis(org, id),
        store.tool_calls(id),
        store.rating(org, id),
        store.recording_file(org, id),
        store.call_delivery_log(org, id),
    )?;
    let now_ms = clock.now().timestamp_millis();
    let finished = CallStatus::parse(&detail.call.status).is_some_and(CallStatus::is_terminal);
    let live_html = if finished {
        None
    } else {
        live_fragment(&store, &clock, org, id)
            .await?
            .map(|fragment| fragment.render())
            .transpose()?
    };
    let deliveries_html = DeliveriesFragment {
        id: id.to_string(),
        rows: detail::deliveries(&deliveries),
        can_redeliver: finished && user.role >= Role::Admin,
        csrf: user.csrf.clone(),
        flash: None,
    }
    .render()?;
    let page = CallPage {
        chrome: Chrome::new(&user, Nav::Calls),
        call: detail::header(&detail, now_ms),
        live_html,
        turns: detail::turns(&turns, detail.call.answered_at, &tool_calls),
        recording_src: recording.as_ref().map(|_| format!("/calls/{id}/recording")),
        recording_seconds: recording
            .as_ref()
            .map(|file| format!("{:.1}", detail::recording_seconds(file)))
            .unwrap_or_default(),
        latencies: detail::latencies(id, &detail.latencies)?,
        history: detail::history(&events),
        analysis: analysis
            .as_ref()
            .map(|row| detail::analysis(row, &detail.extracted))
            .transpose()?,
        scorecard: rating.as_ref().map(detail::scorecard).transpose()?,
        tools: detail::tools(id, &tool_calls)?,
        deliveries_html,
    };
    Ok(render(&page)?.into_response())
}

/// `GET /calls/{id}/events`: the live fragment each time the call's status
/// or turns change (polled), then a `done` event (the finished fragment) when it has ended.
async fn live_events(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Path(raw_id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ConsoleError> {
    let id = call_id(&raw_id)?;
    let org = user.org_id;
    if !store.call_exists(org, id).await? {
        return Err(ConsoleError::NotFound);
    }
    let started = tokio::time::Instant::now();
    // ((store, clock), last html sent, done)
    let stream = futures::stream::unfold(
        ((store, clock), None::<String>, false),
        move |(parts, last, done)| async move {
            if done {
                return None;
            }
            loop {
                if last.is_some() {
                    tokio::time::sleep(LIVE_POLL).await;
                }
                let (store, clock) = &parts;
                let fragment = match live_fragment(store, clock, org, id).await {
                    Ok(Some(fragment)) => fragment,
                    Ok(None) => return None,
                    Err(err) => {
                        tracing::warn!(call = %id, error = %err, "live view stopped");
                        return None;
                    }
                };
                let finished = fragment.finished;
                let html = match fragment.render() {
                    Ok(html) => html,
                    Err(err) => {
                        tracing::warn!(call = %id, error = %err, "live view could not render");
                        return None;
                    }
                };
                if finished {
                    let event = Event::default().event("done").data(html);
                    return Some((Ok(event), (parts, None, true)));
                }
                if started.elapsed() > LIVE_MAX {
                    return None;
                }
                if last.as_deref() != Some(html.as_str()) {
                    let event = Event::default().data(html.clone());
                    return Some((Ok(event), (parts, Some(html), false)));
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// `GET /calls/{id}/recording`: the recording for the player, to a signed-in
/// person of the call's workspace (any role), honouring `Range`.
async fn recording(
    State(store): State<Store>,
    State(recordings): State<RecordingStore>,
    user: ConsoleUser,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let id = call_id(&raw_id)?;
    let file = store
        .recording_file(user.org_id, id)
        .await?
        .ok_or(ConsoleError::NotFound)?;
    let format = file.format.clone();
    match serve_recording(&recordings, &file, &format, headers.get(header::RANGE)).await {
        Ok(mut response) => {
            // Private: the audio is the workspace's, never a shared cache's.
            response.headers_mut().insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("private, max-age=300"),
            );
            Ok(response)
        }
        Err(ServeRecordingError::Missing) => Err(ConsoleError::NotFound),
        Err(ServeRecordingError::Unsatisfiable { len }) => Ok((
            StatusCode::RANGE_NOT_SATISFIABLE,
            [(header::CONTENT_RANGE, format!("bytes */{len}"))],
        )
            .into_response()),
        Err(err) => Err(ConsoleError::Internal(err.to_string())),
    }
}

/// `POST /calls/{id}/redeliver`: queue every event of an ended call again
/// (the API's redelivery, same store operation); admins and owners only.
async fn redeliver(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let id = call_id(&raw_id)?;
    let org = user.org_id;
    let status = store
        .call_status(org, id)
        .await?
        .ok_or(ConsoleError::NotFound)?;
    if !CallStatus::parse(&status).is_some_and(CallStatus::is_terminal) {
        return Err(ConsoleError::BadRequest(
            "The call has not ended yet; its events are sent when it does".into(),
        ));
    }
    let queued = store
        .redeliver_call_events(org, id, clock.now().timestamp_millis())
        .await?;
    if headers.get("hx-request").is_none() {
        return Ok(Redirect::to(&format!("/calls/{id}")).into_response());
    }
    let rows = store.call_delivery_log(org, id).await?;
    let parts: Vec<String> = queued
        .iter()
        .map(|q| format!("{} for {} subscription(s)", q.event, q.subscriptions))
        .collect();
    let fragment = DeliveriesFragment {
        id: id.to_string(),
        rows: detail::deliveries(&rows),
        can_redeliver: true,
        csrf: user.csrf.clone(),
        flash: Some(if parts.is_empty() {
            "Nothing to redeliver: the call produced no events".into()
        } else {
            format!("Queued {}", parts.join(", "))
        }),
    };
    Ok(Html(fragment.render()?).into_response())
}

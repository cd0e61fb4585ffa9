//! The Batches and campaigns pages: the list with progress, a new batch from
//! an uploaded CSV (previewed row by row with each row's error before
//! anything is stored), a batch's page with live progress over server-sent
//! events, its actions (start, pause, resume, stop, retry, schedule) and its
//! CSV export. Every step goes through `batches::service`, as the API does.

use crate::batches::service::{self, BatchError, BatchService, NewBatchInput};
use crate::batches::student_sheet::{ReadSheet, RejectedRow, SheetError, StudentSheet};
use crate::batches::{BatchAction, BatchKind, BatchStatus, Progress};
use crate::calls::placement::PlacementError;
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render, session};
use crate::domain::agent::AgentStatus;
use crate::domain::clock::{SharedClock, iso};
use crate::domain::text::{self, Lines};
use crate::domain::{BatchId, OrgId, Role};
use crate::http::state::AppState;
use crate::store::batches::{BatchRow, ItemRow};
use crate::store::{Store, StoreError};
use askama::Template;
use axum::Router;
use axum::extract::multipart::{Multipart, MultipartError};
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, NaiveDateTime, Utc};
use futures::Stream;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::time::{Duration, Instant};

/// Batches per page of the list, and items per page of a batch's page.
const PAGE_ROWS: i64 = 20;

/// Accepted rows the preview shows (all are counted).
const PREVIEW_ROWS: usize = 50;

/// Rejected rows the preview and the create form list (all are counted).
const LISTED_REJECTIONS: usize = 100;

/// How often the live view looks at the batch again.
const POLL_EVERY: Duration = Duration::from_millis(700);

/// How long one live stream lasts; the browser's `EventSource` reconnects
/// by itself, so a forgotten tab does not poll the store forever on one
/// connection.
const STREAM_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// How many polls pass between checks that the session still lives, so a
/// sign-out, a removal or a role change also reaches an open live view.
const SESSION_CHECK_EVERY: u32 = 15;

/// Longest batch name, as the API allows.
const MAX_NAME: usize = 200;

/// The page family's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/batches", get(list_page).post(create))
        .route("/batches/new", get(new_page))
        .route("/batches/preview", post(preview))
        .route("/batches/{id}", get(batch_page))
        .route("/batches/{id}/events", get(events))
        .route("/batches/{id}/export", get(export))
        .route("/batches/{id}/schedule", post(schedule))
        .route("/batches/{id}/{action}", post(act))
}

impl From<BatchError> for ConsoleError {
    fn from(err: BatchError) -> Self {
        use BatchError as E;
        match err {
            E::NotFound { .. } => Self::NotFound,
            E::Store(err) => Self::Store(err),
            E::Placement(PlacementError::Store(err)) => Self::Store(err),
            E::Vanished(_) | E::Ledger(_) => Self::Internal(err.to_string()),
            E::ItemsAfterStart { .. }
            | E::StartedWhileAdding(_)
            | E::Refused { .. }
            | E::NothingToDial(_)
            | E::ScheduleAfterStart { .. }
            | E::DeleteRunning(_) => Self::Conflict(err.to_string()),
            other => Self::BadRequest(other.to_string()),
        }
    }
}

/// Batch or campaign, as a form field and a query parameter spell it.
fn parse_kind(raw: &str) -> Option<BatchKind> {
    match raw {
        "batch" => Some(BatchKind::Batch),
        "campaign" => Some(BatchKind::Campaign),
        _ => None,
    }
}

/// The batch `raw` names in the person's workspace, of either kind; any
/// other text, or another workspace's batch, is a 404.
async fn load(store: &Store, org_id: OrgId, raw: &str) -> Result<BatchRow, ConsoleError> {
    let id: BatchId = raw.parse().map_err(|_| ConsoleError::NotFound)?;
    store
        .batch_by_id(id)
        .await?
        .filter(|row| row.org_id == org_id)
        .ok_or(ConsoleError::NotFound)
}

/// The kind of a stored batch.
fn kind_of(row: &BatchRow) -> BatchKind {
    parse_kind(&row.kind).unwrap_or(BatchKind::Batch)
}

/// A time for people: `2026-12-01 09:30 UTC`.
fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| iso(ms))
}

// ---------------------------------------------------------------- list

/// `?kind=&page=` of the list.
#[derive(Debug, Deserialize)]
struct ListQuery {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    page: Option<String>,
}

/// One row of the list.
struct BatchLine {
    id: String,
    name: String,
    agent_name: String,
    status: String,
    progress: Progress,
    done: i64,
    percent: i64,
    created: String,
}

impl BatchLine {
    fn new(row: BatchRow, progress: Progress) -> Self {
        let done = progress.completed + progress.failed;
        Self {
            id: row.id.to_string(),
            name: row.name,
            agent_name: row.agent_name,
            status: row.status,
            progress,
            done,
            percent: percent(done, progress.total),
            created: when(row.created_at),
        }
    }
}

/// Finished items as a whole percentage of all items.
fn percent(done: i64, total: i64) -> i64 {
    if total <= 0 { 0 } else { done * 100 / total }
}

#[derive(Template)]
#[template(path = "console/batches.html")]
struct ListPage {
    chrome: Chrome,
    kind: &'static str,
    rows: Vec<BatchLine>,
    page: i64,
    pages: i64,
    total: i64,
    can_create: bool,
}

/// A 1-based page number from the query; anything else reads as page 1.
fn page_number(raw: Option<&str>) -> i64 {
    raw.and_then(|p| p.trim().parse::<i64>().ok())
        .filter(|p| *p >= 1 && *p <= i64::from(i32::MAX))
        .unwrap_or(1)
}

async fn list_page(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    user: ConsoleUser,
    Query(query): Query<ListQuery>,
) -> Result<Html<String>, ConsoleError> {
    let kind = query
        .kind
        .as_deref()
        .and_then(parse_kind)
        .unwrap_or(BatchKind::Batch);
    let page = page_number(query.page.as_deref());
    let (rows, total) = store
        .list_batches(
            user.org_id,
            kind.as_str(),
            PAGE_ROWS,
            (page - 1) * PAGE_ROWS,
        )
        .await?;
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows {
        let progress = batches.progress(row.id).await?;
        lines.push(BatchLine::new(row, progress));
    }
    render(&ListPage {
        chrome: Chrome::new(&user, Nav::Batches),
        kind: kind.as_str(),
        rows: lines,
        page,
        pages: ((total + PAGE_ROWS - 1) / PAGE_ROWS).max(1),
        total,
        can_create: user.can(Role::Member),
    })
}

// ---------------------------------------------------------------- new

/// An agent the form offers.
struct AgentChoice {
    id: String,
    name: String,
}

/// What the person typed, kept when the form is shown again.
#[derive(Debug, Default, Clone)]
struct FormValues {
    kind: String,
    name: String,
    agent_id: String,
    from_number: String,
    scheduled_start_at: String,
}

/// Errors beside the form's fields.
#[derive(Debug, Default)]
struct FieldErrors {
    kind: Option<String>,
    name: Option<String>,
    agent_id: Option<String>,
    from_number: Option<String>,
    scheduled_start_at: Option<String>,
    file: Option<String>,
    /// A refusal that belongs to no one field.
    form: Option<String>,
}

impl FieldErrors {
    fn any(&self) -> bool {
        self.kind.is_some()
            || self.name.is_some()
            || self.agent_id.is_some()
            || self.from_number.is_some()
            || self.scheduled_start_at.is_some()
            || self.file.is_some()
            || self.form.is_some()
    }
}

#[derive(Template)]
#[template(path = "console/batch_new.html")]
struct NewPage {
    chrome: Chrome,
    agents: Vec<AgentChoice>,
    values: FormValues,
    errors: FieldErrors,
}

/// The fields part of the new-batch form alone: what a refused create swaps in.
#[derive(Template)]
#[template(path = "console/batch_fields.html")]
struct FieldsFragment {
    agents: Vec<AgentChoice>,
    values: FormValues,
    errors: FieldErrors,
}

/// The workspace's agents a batch may use (not deleted), by name.
async fn agent_choices(store: &Store, org_id: OrgId) -> Result<Vec<AgentChoice>, ConsoleError> {
    let mut agents: Vec<AgentChoice> = store
        .agents(org_id)
        .await?
        .into_iter()
        .filter(|a| a.status() != AgentStatus::Deleted)
        .map(|a| {
            Ok(AgentChoice {
                id: a.id.to_string(),
                name: a.spec()?.name,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    agents.sort_by_key(|a| a.name.to_lowercase());
    Ok(agents)
}

#[derive(Debug, Deserialize)]
struct NewQuery {
    #[serde(default)]
    kind: Option<String>,
}

async fn new_page(
    State(store): State<Store>,
    user: ConsoleUser,
    Query(query): Query<NewQuery>,
) -> Result<Html<String>, ConsoleError> {
    user.require(Role::Member)?;
    let kind = query
        .kind
        .as_deref()
        .and_then(parse_kind)
        .unwrap_or(BatchKind::Batch);
    render(&NewPage {
        chrome: Chrome::new(&user, Nav::Batches),
        agents: agent_choices(&store, user.org_id).await?,
        values: FormValues {
            kind: kind.as_str().to_string(),
            ..FormValues::default()
        },
        errors: FieldErrors::default(),
    })
}

/// The multipart form of the preview and the create: its text fields and the
/// file, read as it arrives (never held whole).
struct UploadForm {
    values: FormValues,
    /// None when no file was chosen.
    sheet: Option<Result<ReadSheet, SheetError>>,
}

/// Why the multipart body itself could not be read.
fn bad_multipart(err: MultipartError) -> ConsoleError {
    if err.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ConsoleError::BadRequest(format!(
            "The file is larger than {} MiB; split it into smaller files.",
            crate::console::MAX_FORM_BODY / 1024 / 1024
        ))
    } else {
        ConsoleError::BadRequest(format!("The form could not be read ({err})."))
    }
}

/// Reads the form; the file goes through the same sheet reader as the
/// API's campaign upload, with no numbers already taken (a new batch).
async fn read_upload(mut multipart: Multipart) -> Result<UploadForm, ConsoleError> {
    let mut fields: HashMap<String, String> = HashMap::new();
    let mut sheet = None;
    while let Some(mut field) = multipart.next_field().await.map_err(bad_multipart)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            if field.file_name().is_none_or(str::is_empty) {
                // A browser sends an empty part when no file was chosen.
                continue;
            }
            let mut reader = StudentSheet::new(HashSet::new(), LISTED_REJECTIONS);
            let mut refused = None;
            while let Some(chunk) = field.chunk().await.map_err(bad_multipart)? {
                if refused.is_none() {
                    refused = reader.push(&chunk).err();
                }
            }
            sheet = Some(match refused {
                Some(err) => Err(err),
                None => reader.finish(),
            });
        } else if fields.len() < 16 {
            let value = field.text().await.map_err(bad_multipart)?;
            fields.insert(name, value);
        }
    }
    let mut take = |key: &str| fields.remove(key).unwrap_or_default();
    Ok(UploadForm {
        values: FormValues {
            kind: take("kind"),
            name: take("name"),
            agent_id: take("agent_id"),
            from_number: take("from_number"),
            scheduled_start_at: take("scheduled_start_at"),
        },
        sheet,
    })
}

/// One accepted row as the preview shows it.
struct PreviewRow {
    row: usize,
    name: String,
    phone: String,
    email: String,
    variables: String,
}

#[derive(Template)]
#[template(path = "console/batch_preview.html")]
struct PreviewFragment {
    error: Option<String>,
    accepted: usize,
    rejected: usize,
    rows: Vec<PreviewRow>,
    rejected_rows: Vec<RejectedRow>,
    more_rows: usize,
    more_rejected: usize,
}

impl PreviewFragment {
    fn refused(message: String) -> Self {
        Self {
            error: Some(message),
            accepted: 0,
            rejected: 0,
            rows: Vec::new(),
            rejected_rows: Vec::new(),
            more_rows: 0,
            more_rejected: 0,
        }
    }

    fn of(sheet: &ReadSheet) -> Self {
        let rows: Vec<PreviewRow> = sheet
            .items
            .iter()
            .take(PREVIEW_ROWS)
            .map(|i| PreviewRow {
                row: i.row,
                name: i.item.name.clone(),
                phone: i.item.phone.clone(),
                email: i.item.email.clone().unwrap_or_default(),
                variables: variables_text(&i.item.variables),
            })
            .collect();
        Self {
            error: None,
            accepted: sheet.accepted(),
            rejected: sheet.rejected,
            more_rows: sheet.accepted() - rows.len(),
            more_rejected: sheet.rejected - sheet.rejected_rows.len(),
            rows,
            rejected_rows: sheet.rejected_rows.clone(),
        }
    }
}

/// An item's variables as `key: value` pairs, without the `name` the
/// service adds (the preview shows it in its own column).
fn variables_text(stored: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(stored) {
        Ok(serde_json::Value::Object(map)) => map
            .iter()
            .filter(|(k, _)| k.as_str() != "name")
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}: {s}"),
                other => format!("{k}: {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    }
}

/// `POST /batches/preview`: the rows the file holds and each rejected row's
/// reason. Stores nothing and dials nothing.
async fn preview(user: ConsoleUser, multipart: Multipart) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let form = read_upload(multipart).await?;
    let (status, fragment) = match form.sheet {
        None => (
            StatusCode::UNPROCESSABLE_ENTITY,
            PreviewFragment::refused("Choose a CSV file to preview.".into()),
        ),
        Some(Err(err)) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            PreviewFragment::refused(err.to_string()),
        ),
        Some(Ok(sheet)) => (StatusCode::OK, PreviewFragment::of(&sheet)),
    };
    Ok((status, render(&fragment)?).into_response())
}

/// A `datetime-local` value (read as UTC), which must lie in the future.
fn parse_local_schedule(raw: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let raw = raw.trim();
    let at = NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M")
        .or_else(|_| NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S"))
        .map_err(|_| "Enter a date and time, such as 2026-12-01 09:30.".to_string())?
        .and_utc();
    service::parse_schedule(&at.to_rfc3339(), now)
        .map_err(|_| "Pick a time in the future (times are UTC).".to_string())
}

/// The create form's fields checked one by one.
struct CheckedForm {
    kind: BatchKind,
    name: String,
    schedule: Option<DateTime<Utc>>,
}

fn check_fields(
    values: &FormValues,
    now: DateTime<Utc>,
    errors: &mut FieldErrors,
) -> Option<CheckedForm> {
    let kind = parse_kind(&values.kind);
    if kind.is_none() {
        errors.kind = Some("Choose batch or campaign.".into());
    }
    let name = match text::parse(&values.name, Lines::One, MAX_NAME) {
        Ok(name) if name.is_empty() => {
            errors.name = Some("Give it a name.".into());
            None
        }
        Ok(name) => Some(name),
        Err(err) => {
            errors.name = Some(format!("The name {err}."));
            None
        }
    };
    if values.agent_id.trim().is_empty() {
        errors.agent_id = Some("Choose the agent that places the calls.".into());
    }
    let schedule = match values.scheduled_start_at.trim() {
        "" => Some(None),
        raw => match parse_local_schedule(raw, now) {
            Ok(at) => Some(Some(at)),
            Err(message) => {
                errors.scheduled_start_at = Some(message);
                None
            }
        },
    };
    Some(CheckedForm {
        kind: kind?,
        name: name?,
        schedule: schedule?,
    })
}

/// Puts a refusal of `service::create` beside the field it is about.
fn place_create_error(err: BatchError, errors: &mut FieldErrors) -> Result<(), ConsoleError> {
    use BatchError as E;
    match err {
        E::AgentNotFound(_) => {
            errors.agent_id = Some("That agent is not in your workspace (or was deleted).".into())
        }
        E::NameEmpty => errors.name = Some("Give it a name.".into()),
        E::FromMalformed(e) => errors.from_number = Some(format!("The caller ID {e}.")),
        E::ScheduleMalformed(_) | E::ScheduleInPast(_) => {
            errors.scheduled_start_at = Some("Pick a time in the future (times are UTC).".into())
        }
        E::Store(err) => return Err(ConsoleError::Store(err)),
        other => errors.form = Some(other.to_string()),
    }
    Ok(())
}

/// The form's fields again, with the reasons beside them (422).
async fn refused_form(
    store: &Store,
    org_id: OrgId,
    errors: FieldErrors,
    values: FormValues,
) -> Result<Response, ConsoleError> {
    let fragment = FieldsFragment {
        agents: agent_choices(store, org_id).await?,
        values,
        errors,
    };
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&fragment)?).into_response())
}

/// `POST /batches`: creates the batch (draft, or scheduled) with the rows the
/// file accepted, then sends the browser to its page. Nothing is created
/// when a field or the file is refused: the fields come back with the
/// reasons beside them (422).
async fn create(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(batches): State<BatchService>,
    user: ConsoleUser,
    multipart: Multipart,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let form = read_upload(multipart).await?;
    let mut errors = FieldErrors::default();
    let checked = check_fields(&form.values, clock.now(), &mut errors);
    let sheet = match form.sheet {
        None => {
            errors.file = Some("Choose a CSV file with name and phone columns.".into());
            None
        }
        Some(Err(err)) => {
            errors.file = Some(err.to_string());
            None
        }
        Some(Ok(sheet)) if sheet.accepted() == 0 => {
            errors.file = Some(format!(
                "No row of the file can be dialed ({} rejected); preview it to see why.",
                sheet.rejected
            ));
            None
        }
        Some(Ok(sheet)) => Some(sheet),
    };
    let (Some(checked), Some(sheet)) = (checked, sheet) else {
        return refused_form(&store, user.org_id, errors, form.values).await;
    };
    if errors.any() {
        return refused_form(&store, user.org_id, errors, form.values).await;
    }
    let created = batches
        .create(
            user.org_id,
            checked.kind,
            NewBatchInput {
                name: checked.name,
                agent_id: form.values.agent_id.trim().to_string(),
                from_number: Some(form.values.from_number.clone()),
                scheduled_start_at: checked.schedule,
                calling_hours: None,
            },
        )
        .await;
    let batch = match created {
        Ok(batch) => batch,
        Err(err) => {
            place_create_error(err, &mut errors)?;
            return refused_form(&store, user.org_id, errors, form.values).await;
        }
    };
    batches
        .append_checked(checked.kind, &batch, sheet.into_items())
        .await?;
    let location = format!("/batches/{}", batch.id);
    let mut response = (
        StatusCode::OK,
        Html(format!(
            "<p class=\"flash ok\" role=\"status\">Created. <a href=\"{location}\">Open it</a>.</p>"
        )),
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert("hx-redirect", value);
    }
    Ok(response)
}

// ---------------------------------------------------------------- one batch

/// A state-machine button.
struct ActionButton {
    verb: &'static str,
    label: &'static str,
    danger: bool,
}

/// The live part of a batch's page: status, progress, counts and the
/// buttons the status allows. Rendered into the page and sent by the stream.
struct ProgressPanel {
    id: String,
    status: String,
    status_reason: Option<String>,
    scheduled: Option<String>,
    started: Option<String>,
    finished: Option<String>,
    /// Whether the schedule form shows: before the start, for a member.
    can_schedule: bool,
    p: Progress,
    done: i64,
    percent: i64,
    bar_max: i64,
    actions: Vec<ActionButton>,
}

/// Whether the batch will change no more by itself.
fn is_finished(status: BatchStatus) -> bool {
    matches!(status, BatchStatus::Completed | BatchStatus::Stopped)
}

impl ProgressPanel {
    fn new(row: &BatchRow, p: Progress, can_act: bool) -> Self {
        let status = BatchStatus::from_stored(&row.status);
        let done = p.completed + p.failed;
        let buttons = [
            (BatchAction::Start, "start", "Start", false),
            (BatchAction::Pause, "pause", "Pause", false),
            (BatchAction::Resume, "resume", "Resume", false),
            (BatchAction::Retry, "retry", "Retry failed", false),
            (BatchAction::Stop, "stop", "Stop", true),
        ];
        // Retry re-dials failed, unanswered and busy items; skipped ones never.
        let retriable = p.failed - p.skipped > 0;
        let actions = if can_act {
            buttons
                .into_iter()
                .filter(|(action, ..)| action.allowed(status))
                .filter(|(action, ..)| *action != BatchAction::Retry || retriable)
                .map(|(_, verb, label, danger)| ActionButton {
                    verb,
                    label,
                    danger,
                })
                .collect()
        } else {
            Vec::new()
        };
        Self {
            id: row.id.to_string(),
            status: status.as_str().to_string(),
            status_reason: row.status_reason.clone(),
            scheduled: row.scheduled_start_at.map(when),
            started: row.started_at.map(when),
            finished: row.finished_at.map(when),
            can_schedule: can_act && status.is_unstarted(),
            p,
            done,
            percent: percent(done, p.total),
            bar_max: p.total.max(1),
            actions,
        }
    }
}

#[derive(Template)]
#[template(path = "console/batch_progress.html")]
struct ProgressFragment {
    panel: ProgressPanel,
}

/// One item as the batch's page lists it.
struct ItemLine {
    index: i64,
    name: String,
    phone: String,
    status: String,
    call_id: Option<String>,
    attempts: i64,
    reason: Option<String>,
    /// The rule that skipped it (`do-not-call`), when one did.
    skip_reason: Option<String>,
    /// While waiting for its calling hours: when they open, UTC.
    opens: Option<String>,
}

impl From<ItemRow> for ItemLine {
    fn from(row: ItemRow) -> Self {
        let opens = (row.status == "waiting")
            .then(|| row.next_attempt_at.map(crate::domain::clock::iso))
            .flatten();
        Self {
            index: row.seq,
            name: row.name,
            phone: row.phone,
            status: row.status,
            call_id: row.call_id.map(|id| id.to_string()),
            attempts: row.attempts,
            reason: row.reason,
            skip_reason: row.skip_reason,
            opens,
        }
    }
}

#[derive(Template)]
#[template(path = "console/batch.html")]
struct BatchPage {
    chrome: Chrome,
    id: String,
    name: String,
    kind: &'static str,
    agent_id: String,
    agent_name: String,
    from_number: Option<String>,
    created: String,
    live: bool,
    /// [`fingerprint`] of the panel as rendered here, in hex.
    seen: String,
    panel: ProgressPanel,
    items: Vec<ItemLine>,
    /// Skipped items counted by rule, most first.
    skipped_by: Vec<SkipCount>,
    page: i64,
    pages: i64,
}

/// How many items one rule skipped.
struct SkipCount {
    /// The rule (`do-not-call`), or `invalid number` for a malformed or
    /// repeated one.
    reason: String,
    count: i64,
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    #[serde(default)]
    page: Option<String>,
}

async fn batch_page(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Query(query): Query<PageQuery>,
) -> Result<Html<String>, ConsoleError> {
    let row = load(&store, user.org_id, &id).await?;
    let progress = batches.progress(row.id).await?;
    let status = BatchStatus::from_stored(&row.status);
    let page = page_number(query.page.as_deref());
    let (items, total) = store
        .batch_items_page(row.id, None, PAGE_ROWS, (page - 1) * PAGE_ROWS)
        .await?;
    let skipped_by = if progress.skipped > 0 {
        store
            .batch_skip_counts(row.id)
            .await?
            .into_iter()
            .map(|(reason, count)| SkipCount {
                reason: reason.unwrap_or_else(|| "invalid number".to_string()),
                count,
            })
            .collect()
    } else {
        Vec::new()
    };
    let fragment = ProgressFragment {
        panel: ProgressPanel::new(&row, progress, user.can(Role::Member)),
    };
    let seen = format!("{:x}", fingerprint(&fragment.render()?));
    render(&BatchPage {
        chrome: Chrome::new(&user, Nav::Batches),
        id: row.id.to_string(),
        kind: kind_of(&row).as_str(),
        agent_id: row.agent_id.to_string(),
        agent_name: row.agent_name.clone(),
        from_number: row.from_number.clone(),
        created: when(row.created_at),
        live: !is_finished(status),
        seen,
        panel: fragment.panel,
        name: row.name,
        items: items.into_iter().map(ItemLine::from).collect(),
        skipped_by,
        page,
        pages: ((total + PAGE_ROWS - 1) / PAGE_ROWS).max(1),
    })
}

/// Where a live stream is.
struct LiveCursor {
    /// Where the batch and the session are read.
    store: Store,
    /// Dates the session lookups.
    clock: SharedClock,
    /// Counts the batch's progress.
    batches: BatchService,
    /// The request's cookie header, to look the session up again.
    cookies: HeaderMap,
    org_id: OrgId,
    id: BatchId,
    can_act: bool,
    polls: u32,
    /// [`fingerprint`] of the panel the browser shows.
    last: Option<u64>,
    first: bool,
    finished: bool,
    opened: Instant,
}

/// The next event of a live stream: the panel when it changed, `done` with
/// the final panel once the batch finished, then the end.
async fn next_event(mut cursor: LiveCursor) -> Option<(Result<Event, Infallible>, LiveCursor)> {
    loop {
        if cursor.finished || cursor.opened.elapsed() > STREAM_LIFETIME {
            return None;
        }
        if !cursor.first {
            tokio::time::sleep(POLL_EVERY).await;
        }
        cursor.first = false;
        cursor.polls = cursor.polls.wrapping_add(1);
        if cursor.polls.is_multiple_of(SESSION_CHECK_EVERY) {
            match session::lookup(&cursor.cookies, &cursor.store, &cursor.clock).await {
                Ok(Some(user)) if user.org_id == cursor.org_id => {
                    cursor.can_act = user.can(Role::Member);
                }
                // Signed out, removed or moved: the stream ends and the
                // browser's reconnect meets the sign-in page.
                Ok(_) => return None,
                Err(err) => {
                    tracing::warn!(batch = %cursor.id, error = %err, "batch live view stopped");
                    return None;
                }
            }
        }
        let row = match cursor.store.batch_by_id(cursor.id).await {
            Ok(Some(row)) if row.org_id == cursor.org_id => row,
            Ok(_) => return None,
            Err(err) => {
                tracing::warn!(batch = %cursor.id, error = %err, "batch live view stopped");
                return None;
            }
        };
        let progress = match cursor.batches.progress(row.id).await {
            Ok(p) => p,
            Err(err) => {
                tracing::warn!(batch = %cursor.id, error = %err, "batch live view stopped");
                return None;
            }
        };
        let fragment = ProgressFragment {
            panel: ProgressPanel::new(&row, progress, cursor.can_act),
        };
        let html = match fragment.render() {
            Ok(html) => html,
            Err(err) => {
                tracing::error!(error = %err, "batch live view failed to render");
                return None;
            }
        };
        if is_finished(BatchStatus::from_stored(&row.status)) {
            cursor.finished = true;
            return Some((Ok(Event::default().event("done").data(html)), cursor));
        }
        let seen = fingerprint(&html);
        if cursor.last != Some(seen) {
            cursor.last = Some(seen);
            return Some((Ok(Event::default().event("update").data(html)), cursor));
        }
    }
}

/// A panel's fingerprint: the page hands the one it rendered to the stream
/// (`?seen=`), which sends nothing until the panel differs, so the buttons
/// are not swapped under a person's pointer for no change. `DefaultHasher::new`
/// has fixed keys: every node of one build computes the same value.
fn fingerprint(html: &str) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    html.hash(&mut hasher);
    hasher.finish()
}

/// `?seen=` of the live stream.
#[derive(Debug, Deserialize)]
struct EventsQuery {
    #[serde(default)]
    seen: Option<String>,
}

/// `GET /batches/{id}/events`: the live panel as server-sent events.
async fn events(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(batches): State<BatchService>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ConsoleError> {
    let row = load(&store, user.org_id, &id).await?;
    let mut cookies = HeaderMap::new();
    if let Some(cookie) = headers.get(header::COOKIE) {
        cookies.insert(header::COOKIE, cookie.clone());
    }
    let cursor = LiveCursor {
        cookies,
        polls: 0,
        org_id: user.org_id,
        id: row.id,
        can_act: user.can(Role::Member),
        store,
        clock,
        batches,
        last: query
            .seen
            .as_deref()
            .and_then(|hex| u64::from_str_radix(hex, 16).ok()),
        first: true,
        finished: false,
        opened: Instant::now(),
    };
    Ok(Sse::new(futures::stream::unfold(cursor, next_event)).keep_alive(KeepAlive::default()))
}

#[derive(Template)]
#[template(path = "console/batch_flash.html")]
struct FlashFragment {
    ok: bool,
    message: String,
}

/// A flash message answer with `status`.
fn flash(status: StatusCode, ok: bool, message: String) -> Result<Response, ConsoleError> {
    Ok((status, render(&FlashFragment { ok, message })?).into_response())
}

/// The status a refused action answers with: 409 for the state machine,
/// 422 for what the workspace must fix first (wallet, caller ID, quota).
fn refusal(err: BatchError) -> Result<Response, ConsoleError> {
    match err {
        BatchError::Store(err) | BatchError::Placement(PlacementError::Store(err)) => {
            Err(ConsoleError::Store(err))
        }
        BatchError::Vanished(_) | BatchError::Ledger(_) => {
            Err(ConsoleError::Internal(err.to_string()))
        }
        BatchError::NotFound { .. } => Err(ConsoleError::NotFound),
        BatchError::Placement(err) => {
            flash(StatusCode::UNPROCESSABLE_ENTITY, false, err.to_string())
        }
        other => flash(StatusCode::CONFLICT, false, other.to_string()),
    }
}

/// `POST /batches/{id}/{start|pause|resume|stop|retry}`: the service's
/// action; the answer is a flash message (the live panel shows the new
/// status). A batch that was finished and runs again reloads the page, so
/// its live view starts again.
async fn act(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    user: ConsoleUser,
    Path((id, verb)): Path<(String, String)>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let action = match verb.as_str() {
        "start" => BatchAction::Start,
        "pause" => BatchAction::Pause,
        "resume" => BatchAction::Resume,
        "stop" => BatchAction::Stop,
        "retry" => BatchAction::Retry,
        _ => return Err(ConsoleError::NotFound),
    };
    let row = load(&store, user.org_id, &id).await?;
    let was_finished = is_finished(BatchStatus::from_stored(&row.status));
    match batches.act(kind_of(&row), &row, action).await {
        Ok(message) => {
            let mut response = flash(StatusCode::OK, true, message)?;
            if was_finished {
                response
                    .headers_mut()
                    .insert("hx-refresh", HeaderValue::from_static("true"));
            }
            Ok(response)
        }
        Err(err) => refusal(err),
    }
}

/// The schedule form.
#[derive(Debug, Deserialize)]
struct ScheduleForm {
    #[serde(default)]
    scheduled_start_at: Option<String>,
    #[serde(default)]
    clear: Option<String>,
}

/// `POST /batches/{id}/schedule`: sets (or with `clear`, removes) the
/// automatic start of a batch that has not started; the page reloads.
async fn schedule(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(batches): State<BatchService>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Form(form): Form<ScheduleForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let row = load(&store, user.org_id, &id).await?;
    let change = if form.clear.is_some() {
        None
    } else {
        let raw = form.scheduled_start_at.unwrap_or_default();
        match parse_local_schedule(&raw, clock.now()) {
            Ok(at) => Some(at.to_rfc3339()),
            Err(message) => return flash(StatusCode::UNPROCESSABLE_ENTITY, false, message),
        }
    };
    match batches
        .update(kind_of(&row), &row, None, Some(change), None)
        .await
    {
        Ok(_) => {
            let mut response = flash(StatusCode::OK, true, "Schedule saved.".into())?;
            response
                .headers_mut()
                .insert("hx-refresh", HeaderValue::from_static("true"));
            Ok(response)
        }
        Err(err) => refusal(err),
    }
}

/// `GET /batches/{id}/export`: the API's streamed CSV export of the batch.
async fn export(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let row = load(&store, user.org_id, &id).await?;
    crate::http::batches::export(&store, &batches, user.org_id, kind_of(&row), &id)
        .await
        .map_err(|err| ConsoleError::Internal(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_local_schedule_is_read_as_utc_and_must_be_ahead() {
        let now = Utc.with_ymd_and_hms(2026, 11, 26, 8, 0, 0).unwrap();
        let at = parse_local_schedule("2026-12-01T09:30", now).unwrap();
        assert_eq!(at, Utc.with_ymd_and_hms(2026, 12, 1, 9, 30, 0).unwrap());
        assert!(parse_local_schedule("2026-11-26T07:59", now).is_err());
        assert!(parse_local_schedule("tomorrow", now).is_err());
    }

    #[test]
    fn percent_of_nothing_is_zero() {
        assert_eq!(percent(0, 0), 0);
        assert_eq!(percent(3, 4), 75);
        assert_eq!(percent(4, 4), 100);
    }
}

//! `/do-not-call`: the workspace's do-not-call list, the numbers no path
//! dials. Everyone signed in sees it (searched and paged) and can export it;
//! a member or higher adds a number (source `console`) and imports a CSV
//! (source `import`); taking a number off the list, which lets every path
//! dial it again, needs an admin. Every change goes through
//! `calls::do_not_call`, as the API's do, so the rules and messages are the
//! API's. The page also shows the workspace's dialing rules (attempt caps and
//! calling hours, as `/api/numbers/dialing-settings` holds them), which an
//! admin changes.

use super::timestamps::utc_minute;
use crate::calls::do_not_call::{self as dnc, DncError, ImportReport, InvalidRow};
use crate::calls::service::CallService;
use crate::console::{Chrome, ConsoleError, ConsoleUser, MAX_FORM_BODY, Nav, render};
use crate::domain::Role;
use crate::domain::calling_hours::CallingHours;
use crate::domain::clock::SharedClock;
use crate::domain::do_not_call::DncSource;
use crate::http::do_not_call::MAX_IMPORT_BYTES;
use crate::http::state::AppState;
use crate::store::Store;
use crate::store::attempt_caps::{AttemptCaps, checked_cap_text};
use crate::store::do_not_call::DncRow;
use askama::Template;
use axum::Router;
use axum::extract::multipart::{Multipart, MultipartError};
use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

/// Entries per page.
const PAGE_ROWS: i64 = 50;

/// Longest search kept, as the API allows.
const MAX_SEARCH: usize = 200;

/// The page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/do-not-call", get(list_page).post(add))
        .route("/do-not-call/remove", post(remove))
        .route("/do-not-call/import", post(import))
        .route("/do-not-call/export", get(export))
        .route("/do-not-call/rules", post(save_rules))
}

/// The weekdays as the API names them, in order.
const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// The dialing-rules form, as shown and as typed back.
#[derive(Debug, Default, Deserialize)]
struct RulesForm {
    #[serde(default)]
    cap_per_day: String,
    #[serde(default)]
    cap_per_week: String,
    #[serde(default)]
    start: String,
    #[serde(default)]
    end: String,
    #[serde(default)]
    time_zone: String,
    /// "on" keeps the server's default hours.
    #[serde(default)]
    server_default: Option<String>,
    #[serde(default)]
    mon: Option<String>,
    #[serde(default)]
    tue: Option<String>,
    #[serde(default)]
    wed: Option<String>,
    #[serde(default)]
    thu: Option<String>,
    #[serde(default)]
    fri: Option<String>,
    #[serde(default)]
    sat: Option<String>,
    #[serde(default)]
    sun: Option<String>,
}

impl RulesForm {
    /// The stored rules as the form shows them.
    fn of(caps: AttemptCaps, hours: &CallingHours, is_default: bool) -> Self {
        let json = hours.to_json();
        let text = |key: &str| json[key].as_str().unwrap_or_default().to_string();
        let days: Vec<&str> = json["days"]
            .as_array()
            .map(|d| d.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let on = |day: &str| days.contains(&day).then(|| "on".to_string());
        Self {
            cap_per_day: caps.per_day.to_string(),
            cap_per_week: caps.per_week.to_string(),
            start: text("start"),
            end: text("end"),
            time_zone: text("timeZone"),
            server_default: is_default.then(|| "on".to_string()),
            mon: on("mon"),
            tue: on("tue"),
            wed: on("wed"),
            thu: on("thu"),
            fri: on("fri"),
            sat: on("sat"),
            sun: on("sun"),
        }
    }

    /// The weekday boxes: (name, ticked).
    fn days(&self) -> [(&'static str, bool); 7] {
        let ticked = [
            &self.mon, &self.tue, &self.wed, &self.thu, &self.fri, &self.sat, &self.sun,
        ];
        let mut out = [("", false); 7];
        for (slot, (name, tick)) in out.iter_mut().zip(WEEKDAYS.iter().zip(ticked)) {
            *slot = (name, tick.is_some());
        }
        out
    }

    /// The hours the form asks for, as the API's JSON form.
    fn hours_json(&self) -> serde_json::Value {
        let days: Vec<&str> = self
            .days()
            .iter()
            .filter(|(_, on)| *on)
            .map(|(name, _)| *name)
            .collect();
        let zone = self.time_zone.trim();
        serde_json::json!({
            "start": self.start.trim(),
            "end": self.end.trim(),
            "days": days,
            "timeZone": if zone.is_empty() { "callee" } else { zone },
        })
    }
}

/// Errors beside the dialing-rules form's fields.
#[derive(Debug, Default)]
struct RulesErrors {
    caps: Option<String>,
    hours: Option<String>,
}

impl RulesErrors {
    fn any(&self) -> bool {
        self.caps.is_some() || self.hours.is_some()
    }
}

/// One entry as shown.
struct EntryLine {
    phone: String,
    reason: String,
    source: &'static str,
    when: String,
}

impl From<DncRow> for EntryLine {
    fn from(row: DncRow) -> Self {
        Self {
            phone: row.phone,
            reason: row.reason,
            source: row.source.as_str(),
            when: utc_minute(row.created_at),
        }
    }
}

/// The add form as typed.
#[derive(Debug, Default, Deserialize)]
struct AddForm {
    #[serde(default)]
    phone: String,
    #[serde(default)]
    reason: String,
}

/// Errors beside the add form's fields.
#[derive(Debug, Default)]
struct AddErrors {
    phone: Option<String>,
    reason: Option<String>,
}

#[derive(Template)]
#[template(path = "console/do_not_call.html")]
struct ListPage {
    chrome: Chrome,
    entries: Vec<EntryLine>,
    /// Entries matching the search.
    total: i64,
    search: String,
    page: i64,
    pages: i64,
    /// `?q=…&` for the pager's links, URL-encoded (empty without a search).
    search_query: String,
    add: AddForm,
    errors: AddErrors,
    notice: Option<&'static str>,
    can_add: bool,
    can_remove: bool,
    rules: RulesForm,
    rules_errors: RulesErrors,
    /// Whether the rules shown are the server's default hours.
    rules_default: bool,
    can_edit_rules: bool,
}

/// The list's query.
#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    page: Option<String>,
    #[serde(default)]
    done: Option<String>,
}

fn page_number(raw: Option<&str>) -> i64 {
    raw.and_then(|p| p.trim().parse::<i64>().ok())
        .filter(|p| *p >= 1 && *p <= i64::from(i32::MAX))
        .unwrap_or(1)
}

async fn page_of(
    store: &Store,
    calls: &CallService,
    user: &ConsoleUser,
    query: &ListQuery,
    add: AddForm,
    errors: AddErrors,
) -> Result<ListPage, ConsoleError> {
    let caps = store.attempt_caps(user.org_id).await?;
    let own = store.org_calling_hours(user.org_id).await?;
    let rules_default = own.is_none();
    let rules = RulesForm::of(
        caps,
        &own.unwrap_or(calls.default_calling_hours),
        rules_default,
    );
    let search: String = query
        .q
        .as_deref()
        .unwrap_or_default()
        .trim()
        .chars()
        .take(MAX_SEARCH)
        .collect();
    let page = page_number(query.page.as_deref());
    let (rows, total) = store
        .do_not_call_page(
            user.org_id,
            (!search.is_empty()).then_some(search.as_str()),
            PAGE_ROWS,
            (page - 1) * PAGE_ROWS,
        )
        .await?;
    let search_query = if search.is_empty() {
        String::new()
    } else {
        let encoded: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("q", &search)
            .finish();
        format!("{encoded}&")
    };
    Ok(ListPage {
        chrome: Chrome::new(user, Nav::DoNotCall),
        entries: rows.into_iter().map(EntryLine::from).collect(),
        total,
        search,
        page,
        pages: ((total + PAGE_ROWS - 1) / PAGE_ROWS).max(1),
        search_query,
        add,
        errors,
        notice: None,
        can_add: user.can(Role::Member),
        can_remove: user.can(Role::Admin),
        rules,
        rules_errors: RulesErrors::default(),
        rules_default,
        can_edit_rules: user.can(Role::Admin),
    })
}

/// `GET /do-not-call`: the list, newest first.
async fn list_page(
    State(store): State<Store>,
    State(calls): State<CallService>,
    user: ConsoleUser,
    Query(query): Query<ListQuery>,
) -> Result<Response, ConsoleError> {
    let mut page = page_of(
        &store,
        &calls,
        &user,
        &query,
        AddForm::default(),
        AddErrors::default(),
    )
    .await?;
    // Only fixed texts go on the page.
    page.notice = match query.done.as_deref() {
        Some("added") => Some("The number is on the list: no path dials it from now on."),
        Some("already") => Some("The number was already on the list; its entry is unchanged."),
        Some("removed") => Some("The number is off the list and may be dialed again."),
        Some("rules") => Some("The dialing rules are saved: every path dials by them from now on."),
        _ => None,
    };
    Ok(render(&page)?.into_response())
}

/// `POST /do-not-call`: lists a number (source `console`).
async fn add(
    State(store): State<Store>,
    State(calls): State<CallService>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Form(form): Form<AddForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let added = dnc::add(
        &store,
        user.org_id,
        &form.phone,
        &form.reason,
        DncSource::Console,
        clock.now().timestamp_millis(),
    )
    .await;
    let mut errors = AddErrors::default();
    match added {
        Ok((_, true)) => return Ok(Redirect::to("/do-not-call?done=added").into_response()),
        Ok((_, false)) => return Ok(Redirect::to("/do-not-call?done=already").into_response()),
        Err(DncError::Store(e)) => return Err(e.into()),
        // The API's messages, word for word.
        Err(e @ DncError::Phone(_)) => errors.phone = Some(e.to_string()),
        Err(e @ DncError::Reason(_)) => errors.reason = Some(e.to_string()),
        Err(other) => return Err(ConsoleError::Internal(other.to_string())),
    }
    let page = page_of(&store, &calls, &user, &ListQuery::default(), form, errors).await?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
}

/// `POST /do-not-call/rules`: sets the workspace's attempt caps and calling
/// hours (admins), checked by the API's rules with its messages.
async fn save_rules(
    State(store): State<Store>,
    State(calls): State<CallService>,
    user: ConsoleUser,
    Form(form): Form<RulesForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let mut errors = RulesErrors::default();
    let per_day = checked_cap_text("attemptCapPerDay", &form.cap_per_day);
    let per_week = checked_cap_text("attemptCapPerWeek", &form.cap_per_week);
    if let Err(e) = per_day.as_ref().and(per_week.as_ref()) {
        errors.caps = Some(e.clone());
    }
    let hours = if form.server_default.is_some() {
        None
    } else {
        match CallingHours::from_json(&form.hours_json(), "callingHours") {
            Ok(hours) => Some(hours),
            Err(e) => {
                errors.hours = Some(e.to_string());
                None
            }
        }
    };
    if let (false, Ok(per_day), Ok(per_week)) = (errors.any(), per_day, per_week) {
        store
            .set_attempt_caps(user.org_id, AttemptCaps { per_day, per_week })
            .await?;
        store
            .set_org_calling_hours(user.org_id, hours.as_ref())
            .await?;
        return Ok(Redirect::to("/do-not-call?done=rules").into_response());
    }
    let mut page = page_of(
        &store,
        &calls,
        &user,
        &ListQuery::default(),
        AddForm::default(),
        AddErrors::default(),
    )
    .await?;
    page.rules = form;
    page.rules_errors = errors;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
}

/// The remove button's form.
#[derive(Debug, Deserialize)]
struct RemoveForm {
    #[serde(default)]
    phone: String,
}

/// `POST /do-not-call/remove`: takes a number off the list (admins).
async fn remove(
    State(store): State<Store>,
    user: ConsoleUser,
    Form(form): Form<RemoveForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    if !dnc::remove(&store, user.org_id, &form.phone).await? {
        return Err(ConsoleError::NotFound);
    }
    Ok(Redirect::to("/do-not-call?done=removed").into_response())
}

#[derive(Template)]
#[template(path = "console/do_not_call_import.html")]
struct ImportFragment {
    ok: bool,
    message: String,
    invalid_rows: Vec<InvalidRow>,
    /// Invalid rows not listed.
    more_invalid: usize,
}

impl ImportFragment {
    fn refused(message: String) -> Self {
        Self {
            ok: false,
            message,
            invalid_rows: Vec::new(),
            more_invalid: 0,
        }
    }

    fn of(report: ImportReport) -> Self {
        Self {
            ok: true,
            message: report.summary(),
            more_invalid: report.invalid - report.invalid_rows.len(),
            invalid_rows: report.invalid_rows,
        }
    }
}

/// Why the multipart body itself could not be read.
fn bad_multipart(err: MultipartError) -> ConsoleError {
    if err.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ConsoleError::BadRequest(too_large())
    } else {
        ConsoleError::BadRequest(format!("The form could not be read ({err})."))
    }
}

/// The API's refusal of a file over the import's limit.
fn too_large() -> String {
    format!(
        "file is larger than {} MiB",
        MAX_IMPORT_BYTES.min(MAX_FORM_BODY) / 1024 / 1024
    )
}

/// The uploaded file's bytes; None when no file was chosen, Err when it is
/// over the import's limit.
async fn read_file(mut multipart: Multipart) -> Result<Option<Result<Vec<u8>, ()>>, ConsoleError> {
    let mut file = None;
    while let Some(mut field) = multipart.next_field().await.map_err(bad_multipart)? {
        if field.name() != Some("file") || field.file_name().is_none_or(str::is_empty) {
            // A browser sends an empty part when no file was chosen.
            continue;
        }
        let mut bytes = Vec::new();
        let mut over = false;
        while let Some(chunk) = field.chunk().await.map_err(bad_multipart)? {
            if over || bytes.len() + chunk.len() > MAX_IMPORT_BYTES {
                over = true;
                continue;
            }
            bytes.extend_from_slice(&chunk);
        }
        file = Some(if over { Err(()) } else { Ok(bytes) });
    }
    Ok(file)
}

/// `POST /do-not-call/import` (htmx, multipart): lists every valid number
/// of a CSV file (a `phone` column, an optional `reason`) with source
/// `import`; answers what it did, or 422 with why the file was refused.
async fn import(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    multipart: Multipart,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let refused = |message: String| -> Result<Response, ConsoleError> {
        Ok((
            StatusCode::UNPROCESSABLE_ENTITY,
            render(&ImportFragment::refused(message))?,
        )
            .into_response())
    };
    let bytes = match read_file(multipart).await? {
        None => return refused("Choose a CSV file with a phone column.".into()),
        Some(Err(())) => return refused(too_large()),
        Some(Ok(bytes)) => bytes,
    };
    match dnc::import(&store, user.org_id, &bytes, clock.now().timestamp_millis()).await {
        Ok(report) => Ok(render(&ImportFragment::of(report))?.into_response()),
        Err(DncError::Store(e)) => Err(e.into()),
        Err(e) => refused(e.to_string()),
    }
}

/// `GET /do-not-call/export`: the API's streamed CSV of the whole list.
async fn export(State(store): State<Store>, user: ConsoleUser) -> Response {
    crate::http::do_not_call::export(store, user.org_id)
}

//! The Ratings page: each agent's scorecard template (its own columns or the
//! default ones, edited through the agent service like any agent change), the
//! scorecards with the API's filters, regenerate one, and the CSV export
//! streamed by the same code as `GET /api/ratings/export-all`.

use crate::agents::service::{AgentError, AgentService};
use crate::console::chrome::{Chrome, Nav};
use crate::console::error::ConsoleError;
use crate::console::pages::agents::shown_time;
use crate::console::render::render;
use crate::console::session::ConsoleUser;
use crate::domain::CallId;
use crate::domain::Role;
use crate::domain::agent::AgentInput;
use crate::http::csv_download::csv_export;
use crate::http::ratings::RatingsExport;
use crate::http::state::AppState;
use crate::postcall::ratings::filter::{FilterError, RatingFilterText};
use crate::postcall::ratings::regenerate::RescoreError;
use crate::postcall::ratings::template::effective_template;
use crate::postcall::service::PostcallService;
use crate::store::{RatingRow, Store, StoreResult, decode_json};
use askama::Template;
use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

/// Scorecards shown per page.
const PAGE_ROWS: i64 = 50;
/// Column rows the template form offers beyond the ones in use.
const SPARE_COLUMNS: usize = 3;

/// The Ratings routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ratings", get(ratings))
        .route("/ratings/export.csv", get(export))
        .route(
            "/ratings/templates/{agent_id}",
            get(template_form).post(save_template),
        )
        .route("/ratings/{call_id}/regenerate", post(regenerate))
}

impl From<FilterError> for ConsoleError {
    fn from(err: FilterError) -> Self {
        Self::BadRequest(err.0)
    }
}

/// The filters as the page's form sends them (the API's names).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FilterQuery {
    status: Option<String>,
    agent_id: Option<String>,
    from: Option<String>,
    to: Option<String>,
    min_score: Option<String>,
    max_score: Option<String>,
    page: Option<String>,
}

/// A blank score box is no bound here (the API refuses a blank score; a form
/// always sends both boxes).
fn score_bound(raw: Option<&str>) -> Option<&str> {
    raw.filter(|s| !s.trim().is_empty())
}

impl FilterQuery {
    fn text(&self) -> RatingFilterText<'_> {
        RatingFilterText {
            status: self.status.as_deref(),
            agent_id: self.agent_id.as_deref(),
            from: self.from.as_deref(),
            to: self.to.as_deref(),
            min_score: score_bound(self.min_score.as_deref()),
            max_score: score_bound(self.max_score.as_deref()),
        }
    }

    /// The filters again as a query string (for the export link and the pager).
    fn query_string(&self) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("status", &self.status),
            ("agentId", &self.agent_id),
            ("from", &self.from),
            ("to", &self.to),
            ("minScore", &self.min_score),
            ("maxScore", &self.max_score),
        ] {
            if let Some(value) = value.as_deref().filter(|v| !v.trim().is_empty()) {
                out.append_pair(name, value);
            }
        }
        out.finish()
    }
}

/// One scored column as stored.
#[derive(Debug, Clone, Deserialize)]
struct ColumnScore {
    name: String,
    score: f64,
    #[serde(default)]
    reason: String,
}

/// One scored column as shown.
#[derive(Debug, Clone)]
struct ColumnShown {
    name: String,
    score: String,
    reason: String,
}

/// One scorecard as a row.
#[derive(Debug, Clone)]
struct ScorecardItem {
    call_id: String,
    candidate: String,
    phone: String,
    agent: String,
    status: String,
    overall: String,
    columns: Vec<ColumnShown>,
    rated: String,
    error: Option<String>,
    /// What a regenerate just did.
    notice: Option<String>,
}

impl ScorecardItem {
    fn from_row(row: RatingRow) -> StoreResult<Self> {
        let columns: Vec<ColumnScore> =
            decode_json("ratings", "columns", row.call_id, &row.columns)?;
        Ok(Self {
            call_id: row.call_id.to_string(),
            candidate: row.target_name,
            phone: row.phone,
            agent: row.agent_name,
            overall: row.overall.map(|o| format!("{o:.1}")).unwrap_or_default(),
            columns: columns
                .into_iter()
                .map(|c| ColumnShown {
                    name: c.name,
                    score: format!("{:.1}", c.score),
                    reason: c.reason,
                })
                .collect(),
            rated: row.rated_at.map(shown_time).unwrap_or_default(),
            error: (row.status == "failed").then_some(row.last_error).flatten(),
            status: row.status,
            notice: None,
        })
    }
}

/// An agent's template as listed.
#[derive(Debug, Clone)]
struct TemplateItem {
    agent_id: String,
    agent: String,
    own: bool,
    columns: Vec<String>,
}

/// One choice of the agent filter.
#[derive(Debug, Clone)]
struct AgentChoice {
    id: String,
    name: String,
    selected: bool,
}

#[derive(Template)]
#[template(path = "console/ratings.html")]
struct RatingsPage {
    chrome: Chrome,
    templates: Vec<TemplateItem>,
    agents: Vec<AgentChoice>,
    status: String,
    from: String,
    to: String,
    min_score: String,
    max_score: String,
    filter_error: Option<String>,
    rows: Vec<ScorecardItem>,
    total: i64,
    page: i64,
    pages: i64,
    query: String,
    can_edit: bool,
}

#[derive(Template)]
#[template(path = "console/rating_row.html")]
struct ScorecardFragment {
    row: ScorecardItem,
    can_edit: bool,
}

async fn ratings(
    State(store): State<Store>,
    user: ConsoleUser,
    Query(query): Query<FilterQuery>,
) -> Result<Response, ConsoleError> {
    let org = user.org_id;
    let agents = store.agents(org).await?;
    let mut templates = Vec::with_capacity(agents.len());
    let mut choices = Vec::with_capacity(agents.len());
    let chosen = query.agent_id.as_deref().unwrap_or_default();
    for row in &agents {
        let spec = row.spec()?;
        let own = spec
            .rating_template
            .as_ref()
            .is_some_and(|t| !t.columns.is_empty());
        let template = effective_template(spec.rating_template.as_ref());
        templates.push(TemplateItem {
            agent_id: row.id.to_string(),
            agent: spec.name.clone(),
            own,
            columns: template.columns.into_iter().map(|c| c.name).collect(),
        });
        choices.push(AgentChoice {
            id: row.id.to_string(),
            selected: row.id.to_string() == chosen,
            name: spec.name,
        });
    }
    let page = query
        .page
        .as_deref()
        .and_then(|p| p.parse::<i64>().ok())
        .filter(|p| *p >= 1)
        .unwrap_or(1);
    let (rows, total, filter_error) = match query.text().parse("done") {
        Ok(filter) => {
            let offset = (page - 1).saturating_mul(PAGE_ROWS);
            let (rows, total) = store.list_ratings(org, &filter, PAGE_ROWS, offset).await?;
            (rows, total, None)
        }
        Err(err) => (Vec::new(), 0, Some(err.0)),
    };
    let status_code = if filter_error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let page_view = RatingsPage {
        chrome: Chrome::new(&user, Nav::Ratings),
        templates,
        agents: choices,
        status: query
            .status
            .clone()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "done".into()),
        from: text(&query.from),
        to: text(&query.to),
        min_score: text(&query.min_score),
        max_score: text(&query.max_score),
        filter_error,
        rows: rows
            .into_iter()
            .map(ScorecardItem::from_row)
            .collect::<StoreResult<_>>()?,
        total,
        page,
        pages: ((total + PAGE_ROWS - 1) / PAGE_ROWS).max(1),
        query: query.query_string(),
        can_edit: user.role >= Role::Member,
    };
    Ok((status_code, render(&page_view)?).into_response())
}

async fn export(
    State(store): State<Store>,
    user: ConsoleUser,
    Query(query): Query<FilterQuery>,
) -> Result<Response, ConsoleError> {
    let filter = query.text().parse("all")?;
    let export = RatingsExport {
        store,
        org_id: user.org_id,
        filter,
    };
    Ok(csv_export("ratings.csv", export))
}

async fn regenerate(
    State(store): State<Store>,
    State(postcall): State<PostcallService>,
    user: ConsoleUser,
    Path(raw): Path<String>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let call_id: CallId = raw.parse().map_err(|_| ConsoleError::NotFound)?;
    let org = user.org_id;
    let (notice, status) = match postcall.regenerate(org, call_id).await {
        Ok(overall) => (format!("Regenerated: overall {overall:.1}"), StatusCode::OK),
        Err(RescoreError::Store(err)) => return Err(ConsoleError::Store(err)),
        Err(RescoreError::CallNotFound(_) | RescoreError::NoRating(_)) => {
            return Err(ConsoleError::NotFound);
        }
        Err(err) => (err.to_string(), StatusCode::OK),
    };
    let row = store
        .rating(org, call_id)
        .await?
        .ok_or(ConsoleError::NotFound)?;
    let mut row = ScorecardItem::from_row(row)?;
    row.notice = Some(notice);
    let fragment = render(&ScorecardFragment {
        row,
        can_edit: true,
    })?;
    Ok((status, fragment).into_response())
}

/// One column row of the template form.
#[derive(Debug, Clone, Default)]
struct ColumnInput {
    name: String,
    description: String,
}

#[derive(Template)]
#[template(path = "console/rating_template.html")]
struct TemplatePage {
    chrome: Chrome,
    agent_id: String,
    agent: String,
    own: bool,
    columns: Vec<ColumnInput>,
    error: Option<String>,
    can_edit: bool,
}

fn with_spares(mut columns: Vec<ColumnInput>) -> Vec<ColumnInput> {
    columns.extend(std::iter::repeat_with(ColumnInput::default).take(SPARE_COLUMNS));
    columns
}

async fn template_form(
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Path(agent_id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    let row = agents.load_live(user.org_id, &agent_id).await?;
    let spec = row.spec()?;
    let own = spec
        .rating_template
        .as_ref()
        .is_some_and(|t| !t.columns.is_empty());
    let columns = effective_template(spec.rating_template.as_ref())
        .columns
        .into_iter()
        .map(|c| ColumnInput {
            name: c.name,
            description: c.description,
        })
        .collect();
    render(&TemplatePage {
        chrome: Chrome::new(&user, Nav::Ratings),
        agent_id: row.id.to_string(),
        agent: spec.name,
        own,
        columns: with_spares(columns),
        error: None,
        can_edit: user.role >= Role::Member,
    })
}

/// The columns as posted: `name` and `description` repeat once per row;
/// rows left wholly blank are dropped.
fn posted_columns(pairs: &[(String, String)]) -> Vec<ColumnInput> {
    let names = pairs.iter().filter(|(k, _)| k == "name").map(|(_, v)| v);
    let descriptions = pairs
        .iter()
        .filter(|(k, _)| k == "description")
        .map(|(_, v)| v);
    names
        .zip(descriptions)
        .filter(|(name, description)| !name.trim().is_empty() || !description.trim().is_empty())
        .map(|(name, description)| ColumnInput {
            name: name.clone(),
            description: description.clone(),
        })
        .collect()
}

/// The agent patch a template form asks for: its columns, or none (back to the default).
fn template_patch(columns: &[ColumnInput], use_default: bool) -> Value {
    if use_default || columns.is_empty() {
        return json!({ "ratingTemplate": null });
    }
    let columns: Vec<Value> = columns
        .iter()
        .map(|c| json!({ "name": c.name.trim(), "description": c.description.trim() }))
        .collect();
    json!({ "ratingTemplate": { "columns": columns } })
}

async fn save_template(
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Path(agent_id): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let row = agents.load_live(user.org_id, &agent_id).await?;
    let spec = row.spec()?;
    let columns = posted_columns(&pairs);
    let use_default = pairs.iter().any(|(k, _)| k == "useDefault");
    let refused = |message: String, columns: Vec<ColumnInput>| -> Result<Response, ConsoleError> {
        let page = TemplatePage {
            chrome: Chrome::new(&user, Nav::Ratings),
            agent_id: row.id.to_string(),
            agent: spec.name.clone(),
            own: spec.rating_template.is_some(),
            columns: with_spares(columns),
            error: Some(message),
            can_edit: true,
        };
        Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
    };
    let patch = template_patch(&columns, use_default);
    let input: AgentInput = match serde_path_to_error::deserialize(patch) {
        Ok(input) => input,
        Err(err) => return refused(format!("{}: {}", err.path(), err.inner()), columns),
    };
    match agents.update(user.org_id, &agent_id, input).await {
        Ok(_) => Ok(Redirect::to("/ratings").into_response()),
        Err(AgentError::Spec(err)) => refused(err.to_string(), columns),
        Err(err) => Err(err.into()),
    }
}

/// The template a posted form describes, for tests of the form's reading.
#[cfg(test)]
fn posted_template(pairs: &[(String, String)]) -> Option<crate::domain::agent::RatingTemplate> {
    let patch = template_patch(&posted_columns(pairs), false);
    serde_json::from_value(patch["ratingTemplate"].clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn blank_rows_are_dropped_and_half_filled_ones_kept() {
        let pairs = [
            pair("name", "Clarity"),
            pair("description", "How clear"),
            pair("name", ""),
            pair("description", ""),
            pair("name", ""),
            pair("description", "orphan"),
        ];
        let template = posted_template(&pairs).unwrap();
        assert_eq!(template.columns.len(), 2);
        assert_eq!(template.columns[0].name, "Clarity");
        assert_eq!(template.columns[1].name, "");
        assert!(posted_template(&[pair("name", ""), pair("description", "")]).is_none());
    }

    #[test]
    fn the_filter_form_reads_blank_scores_as_no_bound() {
        let query = FilterQuery {
            min_score: Some(String::new()),
            max_score: Some("7".into()),
            ..FilterQuery::default()
        };
        let filter = query.text().parse("done").unwrap();
        assert_eq!((filter.min_score, filter.max_score), (None, Some(7.0)));
        assert_eq!(query.query_string(), "maxScore=7");
    }
}

//! The Agents pages: the list with its lifecycle buttons, the create and edit
//! form (the API's parser and validation, each refusal beside its input), a
//! test call that opens the live call view, and a chat with the agent. Every
//! change goes through `agents::service`, `agents::chat` or
//! `calls::test_call`, the same services the API calls.

pub mod form;

use self::form::{AgentForm, SectionView, spec_refusal};
use crate::agents::chat::{ChatError, ChatTurn};
use crate::agents::service::{AgentError, AgentService};
use crate::calls::service::CallService;
use crate::calls::test_call::TestCallError;
use crate::console::chrome::{Chrome, Nav};
use crate::console::error::ConsoleError;
use crate::console::render::render;
use crate::console::session::ConsoleUser;
use crate::domain::Role;
use crate::domain::clock::IST;
use crate::domain::{AgentId, ChatSessionId, OrgId, PhoneNumber};
use crate::http::state::AppState;
use crate::store::{AgentRow, Store};
use askama::Template;
use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use voxline_actors::providers::{ChatMessage, ChatRole};

/// The Agents routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/agents", get(list))
        .route("/agents/new", get(new_form).post(create))
        .route("/agents/{id}", get(show))
        .route("/agents/{id}/edit", get(edit_form).post(update))
        .route("/agents/{id}/delete", post(delete))
        .route("/agents/{id}/restore", post(restore))
        .route("/agents/{id}/activate", post(activate))
        .route("/agents/{id}/deactivate", post(deactivate))
        .route("/agents/{id}/test-call", post(test_call))
        .route("/agents/{id}/chat", post(chat))
}

impl From<AgentError> for ConsoleError {
    fn from(err: AgentError) -> Self {
        match err {
            AgentError::NotFound(_) => Self::NotFound,
            AgentError::NotDeleted(_) => Self::Conflict(err.to_string()),
            AgentError::Spec(_) => Self::BadRequest(err.to_string()),
            AgentError::Store(err) => Self::Store(err),
        }
    }
}

/// A time as the console shows it: the IST minute.
pub fn shown_time(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|at| at.with_timezone(&IST).format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_default()
}

/// One agent as a row of the list.
#[derive(Debug, Clone)]
pub struct AgentItem {
    /// Agent id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// active, inactive or deleted.
    pub status: &'static str,
    /// Idle past the inactivity window.
    pub dormant: bool,
    /// The conversation engine.
    pub kind: &'static str,
    /// Last change, shown.
    pub updated: String,
}

impl AgentItem {
    /// The row as the console shows it.
    pub fn from_row(row: &AgentRow) -> Result<Self, ConsoleError> {
        let spec = row.spec()?;
        Ok(Self {
            id: row.id.to_string(),
            name: spec.name,
            status: row.status().as_str(),
            dormant: row.dormant,
            kind: spec.conversation_engine.as_str(),
            updated: shown_time(row.updated_at),
        })
    }
}

/// An agent the form offers.
pub struct AgentChoice {
    /// Agent id.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// The workspace's agents that can answer a number (not deleted), newest first.
pub async fn agent_choices(store: &Store, org_id: OrgId) -> Result<Vec<AgentChoice>, ConsoleError> {
    store
        .agents(org_id)
        .await?
        .iter()
        .map(|row| {
            AgentItem::from_row(row).map(|a| AgentChoice {
                id: a.id,
                name: a.name,
            })
        })
        .collect()
}

/// `/agents`.
#[derive(Template)]
#[template(path = "console/agents.html")]
struct AgentsPage {
    chrome: Chrome,
    rows: Vec<AgentItem>,
    deleted: Vec<AgentItem>,
    can_edit: bool,
}

/// One row of the list, answered to the lifecycle buttons.
#[derive(Template)]
#[template(path = "console/agent_row.html")]
struct AgentRowFragment {
    row: AgentItem,
    can_edit: bool,
}

/// `/agents/new` and `/agents/{id}/edit`.
#[derive(Template)]
#[template(path = "console/agent_form.html")]
struct AgentFormPage {
    chrome: Chrome,
    /// None for a new agent.
    agent: Option<AgentItem>,
    action: String,
    sections: Vec<SectionView>,
    form_error: Option<String>,
    can_edit: bool,
    test_call: TestCallCard,
    chat: ChatCard,
    /// The numbers this agent answers: (number id, phone).
    numbers: Vec<(String, String)>,
}

/// The test-call card.
#[derive(Debug, Clone, Default)]
struct TestCallCard {
    agent_id: String,
    phone: String,
    error: Option<String>,
    /// The call already in flight to that number, to open instead.
    live_call: Option<String>,
}

#[derive(Template)]
#[template(path = "console/agent_test_call.html")]
struct TestCallFragment {
    test_call: TestCallCard,
}

/// One turn of the chat.
#[derive(Debug, Clone)]
struct ChatLine {
    /// "agent" or "you".
    who: &'static str,
    text: String,
}

/// The chat card.
#[derive(Debug, Clone, Default)]
struct ChatCard {
    agent_id: String,
    session_id: String,
    lines: Vec<ChatLine>,
    ended: bool,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "console/agent_chat.html")]
struct ChatFragment {
    chat: ChatCard,
}

async fn list(State(store): State<Store>, user: ConsoleUser) -> Result<Html<String>, ConsoleError> {
    let rows = store
        .agents(user.org_id)
        .await?
        .iter()
        .map(AgentItem::from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let deleted = store
        .deleted_agents(user.org_id)
        .await?
        .iter()
        .map(AgentItem::from_row)
        .collect::<Result<Vec<_>, _>>()?;
    render(&AgentsPage {
        chrome: Chrome::new(&user, Nav::Agents),
        rows,
        deleted,
        can_edit: user.role >= Role::Member,
    })
}

fn form_page(user: &ConsoleUser, agent: Option<AgentItem>, form: &AgentForm) -> AgentFormPage {
    let agent_id = agent.as_ref().map(|a| a.id.clone()).unwrap_or_default();
    let action = match &agent {
        Some(agent) => format!("/agents/{}/edit", agent.id),
        None => "/agents/new".to_string(),
    };
    AgentFormPage {
        chrome: Chrome::new(user, Nav::Agents),
        agent,
        action,
        sections: form.sections(),
        form_error: form.form_error.clone(),
        can_edit: user.role >= Role::Member,
        test_call: TestCallCard {
            agent_id: agent_id.clone(),
            ..TestCallCard::default()
        },
        chat: ChatCard {
            agent_id,
            ..ChatCard::default()
        },
        numbers: Vec::new(),
    }
}

/// The numbers the agent answers, for its page.
async fn numbers_answered_by(
    store: &Store,
    org_id: OrgId,
    agent_id: AgentId,
) -> Result<Vec<(String, String)>, ConsoleError> {
    Ok(store
        .numbers_answered_by(org_id, agent_id)
        .await?
        .into_iter()
        .map(|n| (n.id.to_string(), n.phone))
        .collect())
}

/// The form again with its refusals, answered 422 so the input is kept.
fn refused(page: &AgentFormPage) -> Result<Response, ConsoleError> {
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(page)?).into_response())
}

async fn new_form(user: ConsoleUser) -> Result<Html<String>, ConsoleError> {
    user.require(Role::Member)?;
    render(&form_page(&user, None, &AgentForm::blank()))
}

async fn create(
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let mut form = AgentForm::from_pairs(&pairs);
    let input = match form.to_input() {
        Ok(input) => input,
        Err(refusal) => {
            form.refuse(refusal);
            return refused(&form_page(&user, None, &form));
        }
    };
    match agents.create(user.org_id, input).await {
        Ok(_) => Ok(Redirect::to("/agents").into_response()),
        Err(AgentError::Spec(err)) => {
            form.refuse(spec_refusal(&err));
            refused(&form_page(&user, None, &form))
        }
        Err(err) => Err(err.into()),
    }
}

async fn show(Path(id): Path<String>, _user: ConsoleUser) -> Redirect {
    Redirect::to(&format!("/agents/{}/edit", urlencode(&id)))
}

/// A path segment as typed, made safe to put back in a URL.
fn urlencode(raw: &str) -> String {
    form_urlencoded::byte_serialize(raw.as_bytes()).collect()
}

async fn edit_form(
    State(agents): State<AgentService>,
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    let row = agents.load_live(user.org_id, &id).await?;
    let form = AgentForm::from_spec(&row.spec()?);
    let mut page = form_page(&user, Some(AgentItem::from_row(&row)?), &form);
    page.numbers = numbers_answered_by(&store, user.org_id, row.id).await?;
    render(&page)
}

async fn update(
    State(agents): State<AgentService>,
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let row = agents.load_live(user.org_id, &id).await?;
    let agent = AgentItem::from_row(&row)?;
    let mut form = AgentForm::from_pairs(&pairs);
    let refusal = match form.to_input() {
        Ok(input) => match agents.update(user.org_id, &id, input).await {
            Ok(_) => return Ok(Redirect::to("/agents").into_response()),
            Err(AgentError::Spec(err)) => spec_refusal(&err),
            Err(err) => return Err(err.into()),
        },
        Err(refusal) => refusal,
    };
    form.refuse(refusal);
    // The refused page lists the agent's numbers as the edit page does.
    let mut page = form_page(&user, Some(agent), &form);
    page.numbers = numbers_answered_by(&store, user.org_id, row.id).await?;
    refused(&page)
}

/// The row of an agent after a lifecycle change, deleted ones included.
async fn row_after(
    agents: &AgentService,
    user: &ConsoleUser,
    id: &str,
) -> Result<Html<String>, ConsoleError> {
    let row = agents.load_any(user.org_id, id).await?;
    render(&AgentRowFragment {
        row: AgentItem::from_row(&row)?,
        can_edit: true,
    })
}

async fn delete(
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    user.require(Role::Member)?;
    agents.delete(user.org_id, &id).await?;
    row_after(&agents, &user, &id).await
}

async fn restore(
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    user.require(Role::Member)?;
    agents.restore(user.org_id, &id).await?;
    row_after(&agents, &user, &id).await
}

async fn activate(
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    user.require(Role::Member)?;
    agents.activate(user.org_id, &id).await?;
    row_after(&agents, &user, &id).await
}

async fn deactivate(
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    user.require(Role::Member)?;
    agents.deactivate(user.org_id, &id).await?;
    row_after(&agents, &user, &id).await
}

/// The test-call form.
#[derive(Debug, Deserialize)]
struct TestCallForm {
    #[serde(rename = "phoneNumber", default)]
    phone_number: String,
}

fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

async fn test_call(
    State(calls): State<CallService>,
    user: ConsoleUser,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(body): Form<TestCallForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let mut card = TestCallCard {
        agent_id: id.clone(),
        phone: body.phone_number.clone(),
        ..TestCallCard::default()
    };
    let placed = match PhoneNumber::parse(body.phone_number.trim()) {
        Err(err) => Err(format!("phoneNumber {err}")),
        Ok(phone) => match calls.place_test_call(user.org_id, &id, phone, None).await {
            Ok((call_id, _)) => Ok(call_id),
            Err(TestCallError::Placement(crate::calls::placement::PlacementError::Store(err))) => {
                return Err(ConsoleError::Store(err));
            }
            Err(TestCallError::NotPlaced) => {
                return Err(ConsoleError::Internal("no call was placed".into()));
            }
            Err(TestCallError::InFlight { phone, live }) => {
                card.live_call = Some(live.to_string());
                Err(TestCallError::InFlight { phone, live }.to_string())
            }
            Err(err) => Err(err.to_string()),
        },
    };
    match placed {
        Ok(call_id) => {
            let to = format!("/calls/{call_id}");
            if is_htmx(&headers) {
                let mut response = StatusCode::NO_CONTENT.into_response();
                if let Ok(value) = HeaderValue::from_str(&to) {
                    response.headers_mut().insert("hx-redirect", value);
                }
                Ok(response)
            } else {
                Ok(Redirect::to(&to).into_response())
            }
        }
        Err(message) => {
            card.error = Some(message);
            let fragment = render(&TestCallFragment { test_call: card })?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, fragment).into_response())
        }
    }
}

/// The chat form.
#[derive(Debug, Deserialize)]
struct ChatForm {
    #[serde(default)]
    message: String,
    #[serde(rename = "sessionId", default)]
    session_id: String,
}

/// The turns of a stored session as the card shows them (tool traffic left out).
async fn chat_lines(
    store: &Store,
    org: OrgId,
    session: ChatSessionId,
) -> Result<Vec<ChatLine>, ConsoleError> {
    let Some(row) = store.chat_session(org, session).await? else {
        return Ok(Vec::new());
    };
    let messages: Vec<ChatMessage> =
        crate::store::decode_json("chat_sessions", "messages", row.id, &row.messages)?;
    Ok(messages
        .into_iter()
        .filter_map(|message| {
            let who = match message.role {
                ChatRole::Assistant => "agent",
                ChatRole::User => "you",
                ChatRole::System | ChatRole::Tool => return None,
            };
            (!message.content.trim().is_empty()).then_some(ChatLine {
                who,
                text: message.content,
            })
        })
        .collect())
}

async fn chat(
    State(store): State<Store>,
    State(agents): State<AgentService>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Form(body): Form<ChatForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Member)?;
    let session_id = Some(body.session_id.trim().to_string()).filter(|s| !s.is_empty());
    let turn = ChatTurn {
        message: body.message,
        session_id: session_id.clone(),
        variables: None,
    };
    let mut card = ChatCard {
        agent_id: id.clone(),
        session_id: session_id.clone().unwrap_or_default(),
        ..ChatCard::default()
    };
    let status = match agents.chat(user.org_id, &id, turn).await {
        Ok(answer) => {
            card.session_id = answer.session_id.to_string();
            card.ended = answer.ended;
            card.lines = chat_lines(&store, user.org_id, answer.session_id).await?;
            StatusCode::OK
        }
        Err(ChatError::Store(err)) => return Err(ConsoleError::Store(err)),
        Err(ChatError::Corrupt(err)) => {
            return Err(ConsoleError::Internal(format!("chat session: {err}")));
        }
        Err(ChatError::Agent(AgentError::NotFound(_))) => return Err(ConsoleError::NotFound),
        Err(err) => {
            if let Some(session) = session_id.and_then(|raw| raw.parse().ok()) {
                card.lines = chat_lines(&store, user.org_id, session).await?;
            }
            card.error = Some(err.to_string());
            StatusCode::UNPROCESSABLE_ENTITY
        }
    };
    Ok((status, render(&ChatFragment { chat: card })?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_show_the_ist_minute() {
        assert_eq!(shown_time(0), "1970-01-01 05:30");
    }
}

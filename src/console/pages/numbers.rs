//! One rented number's page (`/numbers/{id}`): the agent that answers it and
//! its inbound settings, and for admins and owners the form that changes
//! them through `inbound::routing::set_routing`, the rules the API keeps.
//! The wallet page lists the numbers and links here.

use super::agents::{AgentChoice, agent_choices};
use super::wallet::rupees;
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render};
use crate::domain::Role;
use crate::domain::inbound::{self, DEFAULT_HOLD_MESSAGE, MAX_QUEUE_SECONDS, MIN_QUEUE_SECONDS};
use crate::domain::inbound::{InboundSettings, WhenBusy};
use crate::domain::{NumberId, OrgId};
use crate::http::state::AppState;
use crate::inbound::routing::{RoutingChange, RoutingError, parse_hold_message, set_routing};
use crate::store::{NumberRow, Store};
use askama::Template;
use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

/// The page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/numbers/{id}", get(number_page))
        .route("/numbers/{id}/inbound", post(save_inbound))
}

/// The inbound form as typed, or as stored when the page opens.
#[derive(Debug, Default, Deserialize)]
struct InboundForm {
    /// Agent id; empty takes the agent off.
    #[serde(default)]
    agent: String,
    /// Present when ticked.
    #[serde(default)]
    enabled: Option<String>,
    #[serde(default)]
    when_busy: String,
    #[serde(default)]
    queue_seconds: String,
    /// Empty: the default message.
    #[serde(default)]
    hold_message: String,
}

impl InboundForm {
    fn from_row(n: &NumberRow) -> Self {
        let settings = n.inbound();
        Self {
            agent: n
                .inbound_agent_id
                .map(|a| a.to_string())
                .unwrap_or_default(),
            enabled: settings.enabled.then(|| "1".to_string()),
            when_busy: settings.when_busy.as_str().to_string(),
            queue_seconds: settings.queue_seconds.to_string(),
            hold_message: settings.hold_message.unwrap_or_default(),
        }
    }

    /// The change the form asks for, or each bad field's complaint.
    fn to_change(&self) -> Result<RoutingChange, InboundErrors> {
        let mut errors = InboundErrors::default();
        let when_busy = self
            .when_busy
            .parse::<WhenBusy>()
            .map_err(|_| errors.when_busy = Some("Choose reject or queue.".into()))
            .ok();
        let queue_seconds = self
            .queue_seconds
            .trim()
            .parse::<i64>()
            .ok()
            .and_then(|s| inbound::queue_seconds(s).ok());
        if queue_seconds.is_none() {
            errors.queue_seconds = Some(format!(
                "Enter whole seconds between {MIN_QUEUE_SECONDS} and {MAX_QUEUE_SECONDS}."
            ));
        }
        let hold_message = parse_hold_message(&self.hold_message)
            .map_err(|e| errors.hold_message = Some(format!("The hold message {e}.")))
            .ok();
        match (when_busy, queue_seconds, hold_message) {
            (Some(when_busy), Some(queue_seconds), Some(hold_message)) => Ok(RoutingChange {
                agent_id: Some(Some(self.agent.trim().to_string()).filter(|a| !a.is_empty())),
                enabled: Some(self.enabled.is_some()),
                when_busy: Some(when_busy),
                queue_seconds: Some(queue_seconds),
                hold_message: Some(hold_message),
            }),
            _ => Err(errors),
        }
    }
}

/// Errors beside the inbound form's fields.
#[derive(Debug, Default)]
struct InboundErrors {
    agent: Option<String>,
    enabled: Option<String>,
    when_busy: Option<String>,
    queue_seconds: Option<String>,
    hold_message: Option<String>,
}

#[derive(Template)]
#[template(path = "console/number.html")]
struct NumberPage {
    chrome: Chrome,
    id: String,
    phone: String,
    provider: String,
    status: String,
    is_default: bool,
    rent: String,
    /// The answering agent's name (or id, when it is gone).
    agent_name: Option<String>,
    agent_id: Option<String>,
    settings: InboundSettings,
    agents: Vec<AgentChoice>,
    can_edit: bool,
    saved: bool,
    form: InboundForm,
    errors: InboundErrors,
    default_hold_message: &'static str,
    min_queue_seconds: u32,
    max_queue_seconds: u32,
}

/// The workspace's number `raw_id`, or not found.
async fn number_of(store: &Store, org_id: OrgId, raw_id: &str) -> Result<NumberRow, ConsoleError> {
    let id: NumberId = raw_id.parse().map_err(|_| ConsoleError::NotFound)?;
    store
        .number(org_id, id)
        .await?
        .ok_or(ConsoleError::NotFound)
}

async fn page_of(
    store: &Store,
    user: &ConsoleUser,
    number: NumberRow,
    saved: bool,
    form: Option<InboundForm>,
    errors: InboundErrors,
) -> Result<NumberPage, ConsoleError> {
    let agents = agent_choices(store, user.org_id).await?;
    let agent_id = number.inbound_agent_id.map(|a| a.to_string());
    let agent_name = agent_id.as_ref().map(|id| {
        agents
            .iter()
            .find(|a| &a.id == id)
            .map(|a| a.name.clone())
            .unwrap_or_else(|| id.clone())
    });
    Ok(NumberPage {
        chrome: Chrome::new(user, Nav::Wallet),
        form: form.unwrap_or_else(|| InboundForm::from_row(&number)),
        settings: number.inbound(),
        id: number.id.to_string(),
        phone: number.phone,
        provider: number.provider,
        status: number.status,
        is_default: number.is_default,
        rent: rupees(number.monthly_rent_paise),
        agent_name,
        agent_id,
        agents,
        can_edit: user.can(Role::Admin),
        saved,
        errors,
        default_hold_message: DEFAULT_HOLD_MESSAGE,
        min_queue_seconds: MIN_QUEUE_SECONDS,
        max_queue_seconds: MAX_QUEUE_SECONDS,
    })
}

#[derive(Debug, Deserialize)]
struct SavedQuery {
    #[serde(default)]
    saved: Option<String>,
}

async fn number_page(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Query(query): Query<SavedQuery>,
) -> Result<Html<String>, ConsoleError> {
    let number = number_of(&store, user.org_id, &id).await?;
    render(
        &page_of(
            &store,
            &user,
            number,
            query.saved.is_some(),
            None,
            InboundErrors::default(),
        )
        .await?,
    )
}

/// `POST /numbers/{id}/inbound` (admin): the form's settings, written whole.
async fn save_inbound(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Form(form): Form<InboundForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let number = number_of(&store, user.org_id, &id).await?;
    let errors = match form.to_change() {
        Ok(change) => match set_routing(&store, user.org_id, &id, change).await {
            Ok(saved) => {
                tracing::info!(number = %saved.id, by = %user.user_id, "inbound routing saved in the console");
                return Ok(Redirect::to(&format!("/numbers/{}?saved=1", saved.id)).into_response());
            }
            Err(RoutingError::NumberNotFound(_)) => return Err(ConsoleError::NotFound),
            Err(RoutingError::Store(e)) => return Err(e.into()),
            Err(RoutingError::AgentNotFound(_)) => InboundErrors {
                agent: Some("Choose one of the workspace's agents.".into()),
                ..InboundErrors::default()
            },
            Err(RoutingError::EnabledWithoutAgent) => InboundErrors {
                enabled: Some(
                    "Choose the agent that answers before turning inbound calls on.".into(),
                ),
                ..InboundErrors::default()
            },
        },
        Err(errors) => errors,
    };
    let page = page_of(&store, &user, number, false, Some(form), errors).await?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(when_busy: &str, queue_seconds: &str, hold: &str) -> InboundForm {
        InboundForm {
            agent: String::new(),
            enabled: None,
            when_busy: when_busy.into(),
            queue_seconds: queue_seconds.into(),
            hold_message: hold.into(),
        }
    }

    #[test]
    fn the_form_is_read_whole_and_bad_fields_are_named() {
        let change = form("queue", " 30 ", "  ").to_change().unwrap();
        assert_eq!(change.agent_id, Some(None));
        assert_eq!(change.enabled, Some(false));
        assert_eq!(change.when_busy, Some(WhenBusy::Queue));
        assert_eq!(change.queue_seconds, Some(30));
        assert_eq!(change.hold_message, Some(None));

        let errors = form("wait", "4", "\0").to_change().unwrap_err();
        assert!(errors.when_busy.is_some());
        assert!(errors.queue_seconds.is_some());
        assert!(errors.hold_message.is_some());
        assert!(errors.agent.is_none() && errors.enabled.is_none());
    }
}

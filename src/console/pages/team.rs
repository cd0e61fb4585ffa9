//! `/team` (owners only): the workspace's people. Add one (email and role;
//! their one-time password shown once), change a role, remove one. Nobody
//! removes themselves, and the workspace keeps at least one owner. The same
//! service as `voxline admin user`.

use super::timestamps::utc_minute;
use crate::admin::people::{self, PeopleError};
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render};
use crate::domain::clock::SharedClock;
use crate::domain::{Email, Role};
use crate::http::state::AppState;
use crate::store::Store;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

/// The team page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/team", get(team_page).post(add_person))
        .route("/team/{id}/role", post(change_role))
        .route("/team/{id}/remove", post(remove_person))
}

/// One person as the list shows them.
#[derive(Debug, Clone)]
pub struct PersonLine {
    /// Person id.
    pub id: String,
    /// Sign-in address.
    pub email: String,
    /// Their role's name.
    pub role: &'static str,
    /// When they were added.
    pub added: String,
    /// Whether this is the person looking at the page.
    pub is_you: bool,
}

/// A person just added with their one-time password (shown once).
#[derive(Debug, Clone)]
pub struct AddedLine {
    /// Sign-in address.
    pub email: String,
    /// Their role's name.
    pub role: &'static str,
    /// The one-time password.
    pub password: String,
}

#[derive(Template)]
#[template(path = "console/team.html")]
struct TeamPage {
    chrome: Chrome,
    people: Vec<PersonLine>,
    roles: Vec<&'static str>,
    added: Option<AddedLine>,
    notice: Option<String>,
    error: Option<String>,
    email: String,
    email_error: Option<String>,
    role: String,
}

/// The page for `user` with nothing typed.
async fn page_for(store: &Store, user: &ConsoleUser) -> Result<TeamPage, ConsoleError> {
    let people = store
        .users(user.org_id)
        .await?
        .into_iter()
        .map(|p| PersonLine {
            is_you: p.id == user.user_id,
            id: p.id.to_string(),
            email: p.email,
            role: p.role.as_str(),
            added: utc_minute(p.created_at),
        })
        .collect();
    Ok(TeamPage {
        chrome: Chrome::new(user, Nav::Team),
        people,
        roles: Role::ALL.iter().rev().map(|r| r.as_str()).collect(),
        added: None,
        notice: None,
        error: None,
        email: String::new(),
        email_error: None,
        role: Role::Member.as_str().to_string(),
    })
}

#[derive(Debug, Deserialize)]
struct NoticeQuery {
    done: Option<String>,
}

/// What a finished change says on the page it redirects to; only these
/// fixed texts, so a crafted link cannot put words on the page.
fn notice_text(done: Option<&str>) -> Option<String> {
    match done? {
        "role" => Some("The role is changed; it applies from the person's next request.".into()),
        "removed" => Some("The person is removed and their sessions are ended.".into()),
        _ => None,
    }
}

async fn team_page(
    State(store): State<Store>,
    user: ConsoleUser,
    Query(q): Query<NoticeQuery>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Owner)?;
    let mut page = page_for(&store, &user).await?;
    page.notice = notice_text(q.done.as_deref());
    Ok(render(&page)?.into_response())
}

#[derive(Debug, Deserialize)]
struct AddForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
}

async fn add_person(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Form(form): Form<AddForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Owner)?;
    let refused = |mut page: TeamPage, why: String| {
        page.email = form.email.clone();
        page.role = form.role.clone();
        page.email_error = Some(why);
        Ok::<_, ConsoleError>((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
    };
    let role: Role = form
        .role
        .parse()
        .map_err(|e| ConsoleError::BadRequest(format!("Role {e}")))?;
    let email = match Email::parse(&form.email) {
        Ok(email) => email,
        Err(e) => return refused(page_for(&store, &user).await?, format!("Email {e}")),
    };
    let added = people::add_person(
        &store,
        user.org_id,
        &email,
        role,
        clock.now().timestamp_millis(),
    )
    .await;
    let added = match added {
        Ok(added) => added,
        Err(e @ PeopleError::EmailTaken(_)) => {
            return refused(page_for(&store, &user).await?, e.to_string());
        }
        Err(other) => return Err(people_error(other)),
    };
    tracing::info!(person = %added.person.id, role = %role, by = %user.user_id, "person added in the console");
    let mut page = page_for(&store, &user).await?;
    page.added = Some(AddedLine {
        email: added.person.email,
        role: added.person.role.as_str(),
        password: added.one_time_password,
    });
    // The password is in this answer only: no cache keeps it.
    Ok(([(header::CACHE_CONTROL, "no-store")], render(&page)?).into_response())
}

/// A refused change as the console answers it.
fn people_error(err: PeopleError) -> ConsoleError {
    match err {
        PeopleError::NotFound(_) => ConsoleError::NotFound,
        PeopleError::LastOwner | PeopleError::Yourself | PeopleError::EmailTaken(_) => {
            ConsoleError::Conflict(err.to_string())
        }
        PeopleError::Store(e) => ConsoleError::Store(e),
        PeopleError::Hash(e) => ConsoleError::Internal(e.to_string()),
    }
}

/// The team page with `err` at its top, answered 409, for a refused change.
async fn refused_change(
    store: &Store,
    user: &ConsoleUser,
    err: PeopleError,
) -> Result<Response, ConsoleError> {
    match err {
        PeopleError::LastOwner | PeopleError::Yourself => {
            let mut page = page_for(store, user).await?;
            page.error = Some(format!("Not changed: {err}."));
            Ok((StatusCode::CONFLICT, render(&page)?).into_response())
        }
        other => Err(people_error(other)),
    }
}

#[derive(Debug, Deserialize)]
struct RoleForm {
    #[serde(default)]
    role: String,
}

async fn change_role(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Form(form): Form<RoleForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Owner)?;
    let role: Role = form
        .role
        .parse()
        .map_err(|e| ConsoleError::BadRequest(format!("Role {e}")))?;
    let person = people::person(&store, user.org_id, &id)
        .await
        .map_err(people_error)?;
    match people::change_role(&store, user.org_id, person.id, role).await {
        Ok(()) => {
            tracing::info!(person = %person.id, role = %role, by = %user.user_id, "role changed in the console");
            Ok(Redirect::to("/team?done=role").into_response())
        }
        Err(err) => refused_change(&store, &user, err).await,
    }
}

async fn remove_person(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Owner)?;
    let person = people::person(&store, user.org_id, &id)
        .await
        .map_err(people_error)?;
    match people::remove_person(&store, user.org_id, person.id, Some(user.user_id)).await {
        Ok(()) => {
            tracing::info!(person = %person.id, by = %user.user_id, "person removed in the console");
            Ok(Redirect::to("/team?done=removed").into_response())
        }
        Err(err) => refused_change(&store, &user, err).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_fixed_texts() {
        assert!(notice_text(Some("removed")).is_some());
        assert_eq!(notice_text(Some("<b>hi</b>")), None);
    }
}

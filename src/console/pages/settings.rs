//! `/settings` (admin and owner): the workspace's provider credentials,
//! write-only. The page shows which vendors are configured and which fields
//! each holds, never a stored value; saving replaces the vendor's credential
//! whole, through the same service as `voxline admin credential set`.

use super::timestamps::utc_minute;
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render};
use crate::domain::Role;
use crate::domain::clock::SharedClock;
use crate::http::state::AppState;
use crate::secrets::credentials::{CredentialCipher, CredentialKind};
use crate::secrets::server_secret::ServerSecret;
use crate::secrets::workspace_credentials::{self, StoreCredentialError};
use crate::store::Store;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use std::collections::HashMap;

/// Most characters one credential field may have (a PEM key fits).
pub const MAX_FIELD_CHARS: usize = 8_192;

/// Fields that name an account or a server rather than prove who one is:
/// a refused form shows them again as typed. Every other field is a
/// secret and is never put back on a page.
const NOT_SECRET: &[&str] = &[
    "baseUrl",
    "subdomain",
    "connectionId",
    "accountSid",
    "authId",
    "applicationId",
    "publicKey",
];

/// The settings page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/settings", get(settings_page))
        .route("/settings/credentials/{kind}", post(save_credential))
        .route(
            "/settings/credentials/{kind}/remove",
            post(remove_credential),
        )
}

/// One input of a vendor's form.
#[derive(Debug, Clone)]
pub struct FieldInput {
    /// The JSON field's name.
    pub name: &'static str,
    /// Whether the vendor needs it.
    pub required: bool,
    /// Whether it is a secret (a password input, never refilled).
    pub secret: bool,
    /// Whether it takes several lines (a PEM key).
    pub multiline: bool,
    /// What the form shows in it: empty, or what was typed in a field
    /// that is not a secret when the form was refused.
    pub value: String,
}

/// One vendor's row: whether it is configured, and its form.
#[derive(Debug, Clone)]
pub struct VendorSection {
    /// The stored name, e.g. `openai`.
    pub kind: &'static str,
    /// Whether a credential is stored.
    pub configured: bool,
    /// The names of the fields stored (values never leave the server).
    pub fields_set: String,
    /// Whether the stored credential does not open with this server's secret.
    pub unreadable: bool,
    /// When it was last replaced.
    pub updated: String,
    /// The form's inputs.
    pub inputs: Vec<FieldInput>,
    /// Why the last save of this vendor was refused.
    pub error: Option<String>,
}

#[derive(Template)]
#[template(path = "console/settings.html")]
struct SettingsPage {
    chrome: Chrome,
    vendors: Vec<VendorSection>,
    notice: Option<String>,
}

/// The inputs of `kind`'s form, refilled from `typed` where that is safe.
fn inputs_for(kind: CredentialKind, typed: &HashMap<String, String>) -> Vec<FieldInput> {
    kind.fields()
        .map(|(name, required)| {
            let secret = !NOT_SECRET.contains(&name);
            FieldInput {
                name,
                required,
                secret,
                multiline: name == "privateKey",
                value: if secret {
                    String::new()
                } else {
                    typed.get(name).cloned().unwrap_or_default()
                },
            }
        })
        .collect()
}

/// The page for `user`, with `refused` (a vendor, what was typed, why)
/// shown at that vendor's form.
async fn page_for(
    store: &Store,
    secret: &ServerSecret,
    user: &ConsoleUser,
    refused: Option<(CredentialKind, &HashMap<String, String>, String)>,
) -> Result<SettingsPage, ConsoleError> {
    let cipher = CredentialCipher::new(secret);
    let stored = workspace_credentials::summaries(store, &cipher, user.org_id).await?;
    let empty = HashMap::new();
    let vendors = CredentialKind::ALL
        .into_iter()
        .map(|kind| {
            let summary = stored.iter().find(|s| s.kind == kind);
            let (typed, error) = match &refused {
                Some((k, typed, why)) if *k == kind => (*typed, Some(why.clone())),
                _ => (&empty, None),
            };
            VendorSection {
                kind: kind.as_str(),
                configured: summary.is_some(),
                fields_set: summary
                    .and_then(|s| s.fields.as_ref())
                    .map(|f| f.join(", "))
                    .unwrap_or_default(),
                unreadable: summary.is_some_and(|s| s.fields.is_none()),
                updated: summary
                    .map(|s| utc_minute(s.updated_at))
                    .unwrap_or_default(),
                inputs: inputs_for(kind, typed),
                error,
            }
        })
        .collect();
    Ok(SettingsPage {
        chrome: Chrome::new(user, Nav::Settings),
        vendors,
        notice: None,
    })
}

#[derive(Debug, Deserialize)]
struct SavedQuery {
    saved: Option<String>,
    removed: Option<String>,
}

async fn settings_page(
    State(store): State<Store>,
    State(secret): State<ServerSecret>,
    user: ConsoleUser,
    Query(q): Query<SavedQuery>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let mut page = page_for(&store, &secret, &user, None).await?;
    // Only a known vendor's name goes on the page.
    page.notice = match (q.saved, q.removed) {
        (Some(k), _) => k
            .parse::<CredentialKind>()
            .ok()
            .map(|k| format!("The {k} credential is saved. Stored values are never shown again.")),
        (None, Some(k)) => k
            .parse::<CredentialKind>()
            .ok()
            .map(|k| format!("The {k} credential is removed.")),
        (None, None) => None,
    };
    Ok(render(&page)?.into_response())
}

/// The credential JSON a vendor's form makes: its known fields that were
/// filled in, trimmed (a PEM key keeps its lines).
fn credential_json(
    kind: CredentialKind,
    typed: &HashMap<String, String>,
) -> Result<serde_json::Value, String> {
    let mut object = serde_json::Map::new();
    for (name, _) in kind.fields() {
        let Some(value) = typed.get(name).map(|v| v.trim()) else {
            continue;
        };
        if value.is_empty() {
            continue;
        }
        if value.chars().count() > MAX_FIELD_CHARS {
            return Err(format!(
                "{name} must be at most {MAX_FIELD_CHARS} characters"
            ));
        }
        if value.chars().any(|c| c == '\0') {
            return Err(format!("{name} must not contain NUL"));
        }
        object.insert(
            name.to_string(),
            serde_json::Value::String(value.to_string()),
        );
    }
    Ok(serde_json::Value::Object(object))
}

/// The settings page answered 422 with `why` at `kind`'s form.
async fn refused(
    store: &Store,
    secret: &ServerSecret,
    user: &ConsoleUser,
    kind: CredentialKind,
    typed: &HashMap<String, String>,
    why: String,
) -> Result<Response, ConsoleError> {
    let page = page_for(store, secret, user, Some((kind, typed, why))).await?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
}

async fn save_credential(
    State(store): State<Store>,
    State(secret): State<ServerSecret>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Path(kind): Path<String>,
    Form(typed): Form<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let kind: CredentialKind = kind.parse().map_err(|_| ConsoleError::NotFound)?;
    let value = match credential_json(kind, &typed) {
        Ok(value) => value,
        Err(why) => return refused(&store, &secret, &user, kind, &typed, why).await,
    };
    let cipher = CredentialCipher::new(&secret);
    let saved = workspace_credentials::store_credential(
        &store,
        &cipher,
        user.org_id,
        kind,
        &value,
        clock.now().timestamp_millis(),
    )
    .await;
    match saved {
        Ok(()) => {
            tracing::info!(kind = %kind, by = %user.user_id, "credential saved in the console");
            Ok(Redirect::to(&format!("/settings?saved={kind}")).into_response())
        }
        Err(StoreCredentialError::Invalid(why)) => {
            refused(&store, &secret, &user, kind, &typed, why.to_string()).await
        }
        Err(StoreCredentialError::Store(e)) => Err(e.into()),
    }
}

async fn remove_credential(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(kind): Path<String>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let kind: CredentialKind = kind.parse().map_err(|_| ConsoleError::NotFound)?;
    if !workspace_credentials::remove_credential(&store, user.org_id, kind).await? {
        return Err(ConsoleError::NotFound);
    }
    tracing::info!(kind = %kind, by = %user.user_id, "credential removed in the console");
    Ok(Redirect::to(&format!("/settings?removed={kind}")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_form_never_refills_a_secret() {
        let typed: HashMap<String, String> =
            [("accountSid", "AC123"), ("authToken", "tok-very-secret")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let inputs = inputs_for(CredentialKind::Twilio, &typed);
        let sid = inputs.iter().find(|i| i.name == "accountSid").unwrap();
        assert_eq!(sid.value, "AC123");
        let token = inputs.iter().find(|i| i.name == "authToken").unwrap();
        assert!(token.secret && token.value.is_empty());
    }

    #[test]
    fn the_json_holds_only_known_filled_fields() {
        let typed: HashMap<String, String> = [
            ("apiKey", " sk-1 "),
            ("baseUrl", ""),
            ("_csrf", "token"),
            ("extra", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let json = credential_json(CredentialKind::OpenAi, &typed).unwrap();
        assert_eq!(json, serde_json::json!({"apiKey": "sk-1"}));
    }
}

//! A workspace's stored provider credentials as the people who manage them
//! see them: written whole (validated, then sealed), and read back only as
//! which fields are set, never their values. Shared by the admin CLI and the
//! console's settings page.

use super::credentials::{self, CredentialCipher, CredentialError, CredentialKind};
use crate::domain::OrgId;
use crate::store::{Store, StoreError};
use serde_json::Value;

/// Why a credential could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreCredentialError {
    /// The kind is unknown or the JSON lacks what the vendor needs.
    #[error(transparent)]
    Invalid(#[from] CredentialError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What may be shown of a stored credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialSummary {
    /// The vendor.
    pub kind: CredentialKind,
    /// Names of the fields it holds (sorted), or `None` when it does not open
    /// with this server's secret (stored under another one).
    pub fields: Option<Vec<String>>,
    /// When it was last replaced, Unix ms.
    pub updated_at: i64,
}

/// Validates `value` as a `kind` credential and stores it sealed, replacing
/// the workspace's previous one of that kind.
pub async fn store_credential(
    store: &Store,
    cipher: &CredentialCipher,
    org_id: OrgId,
    kind: CredentialKind,
    value: &Value,
    now_ms: i64,
) -> Result<(), StoreCredentialError> {
    credentials::validate(kind.as_str(), value)?;
    let plaintext = value.to_string();
    let (nonce, sealed) = cipher.seal(plaintext.as_bytes());
    store
        .upsert_credential(org_id, kind.as_str(), &nonce, &sealed, now_ms)
        .await?;
    Ok(())
}

/// Deletes the workspace's `kind` credential, so calls fall back to the
/// service's own account; false when none was stored.
pub async fn remove_credential(
    store: &Store,
    org_id: OrgId,
    kind: CredentialKind,
) -> Result<bool, StoreError> {
    store.delete_credential(org_id, kind.as_str()).await
}

/// The workspace's stored credentials, each with the names of its fields:
/// enough to tell what is configured without showing any value.
pub async fn summaries(
    store: &Store,
    cipher: &CredentialCipher,
    org_id: OrgId,
) -> Result<Vec<CredentialSummary>, StoreError> {
    let mut out = Vec::new();
    for (kind_name, updated_at) in store.credential_kinds(org_id).await? {
        // A kind this build no longer knows is not the settings page's to show.
        let Ok(kind) = kind_name.parse::<CredentialKind>() else {
            continue;
        };
        let fields = match store.credential(org_id, &kind_name).await? {
            Some((nonce, sealed)) => field_names(cipher, &nonce, &sealed),
            None => continue,
        };
        out.push(CredentialSummary {
            kind,
            fields,
            updated_at,
        });
    }
    Ok(out)
}

/// The names of the non-empty fields of a sealed credential; `None` when it
/// does not open or is not a JSON object.
fn field_names(cipher: &CredentialCipher, nonce: &str, sealed: &str) -> Option<Vec<String>> {
    let plaintext = cipher.open(nonce, sealed).ok()?;
    let value: Value = serde_json::from_slice(&plaintext).ok()?;
    let mut names: Vec<String> = value
        .as_object()?
        .iter()
        .filter(|(_, v)| !v.is_null() && v.as_str() != Some(""))
        .map(|(k, _)| k.clone())
        .collect();
    names.sort();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_never_carry_values() {
        let cipher = CredentialCipher::new(b"s");
        let (nonce, sealed) =
            cipher.seal(br#"{"accountSid":"AC1","authToken":"tok-secret","baseUrl":""}"#);
        let names = field_names(&cipher, &nonce, &sealed).unwrap();
        assert_eq!(names, ["accountSid", "authToken"]);
        assert!(!names.iter().any(|n| n.contains("secret")));
        let other = CredentialCipher::new(b"t");
        assert_eq!(field_names(&other, &nonce, &sealed), None);
    }
}

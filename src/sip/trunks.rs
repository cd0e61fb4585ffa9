//! Where the SIP carrier finds a workspace's trunk.

use crate::carriers::store_wiring::StoreCredentials;
use crate::domain::sip_trunk::SipTrunk;
use crate::secrets::credentials::CredentialKind;
use async_trait::async_trait;

/// A workspace's SIP trunk, looked up per call so a changed credential applies
/// to the next call without a restart.
#[async_trait]
pub trait SipTrunks: Send + Sync + 'static {
    /// The trunk of `org_id`, or `None` when it has none (or it no longer parses).
    async fn trunk(&self, org_id: &str) -> Option<SipTrunk>;
}

#[async_trait]
impl SipTrunks for StoreCredentials {
    async fn trunk(&self, org_id: &str) -> Option<SipTrunk> {
        let json = self
            .load(org_id.parse().ok()?, CredentialKind::Sip.as_str())
            .await?;
        match SipTrunk::from_json(&json) {
            Ok(trunk) => Some(trunk),
            Err(err) => {
                // Stored credentials were checked when saved; one that no longer parses
                // (an older shape) is treated as absent, and said so.
                tracing::warn!(org_id, error = %err, "a stored sip trunk does not parse");
                None
            }
        }
    }
}

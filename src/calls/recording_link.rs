//! Signed links to a call's recording (decisions §9): the service's own
//! `/recordings/{org}/{call}.{format}` path with an expiry and an HMAC, usable
//! without an API key. Handed out by `recording-url` and in webhooks.

use crate::domain::{CallId, OrgId};
use voxline_actors::signing::Signer;

/// How long a signed recording link stays valid.
pub const LINK_LIFETIME_SECONDS: i64 = 15 * 60;

/// Signs and checks recording links with a key derived from the server secret.
pub struct LinkSigner {
    signer: Signer,
}

impl LinkSigner {
    /// A signer keyed by the server secret.
    pub fn new(server_secret: &[u8]) -> Self {
        Self {
            signer: Signer::derived("voxline/recording-link/v1", server_secret),
        }
    }

    /// The signature of a link to `org_id/call_id` expiring at `expires` (Unix s).
    pub fn sign(&self, org_id: &str, call_id: &str, expires: i64) -> String {
        self.signer
            .sign_hex(&[format!("{org_id}/{call_id}.{expires}").as_bytes()])
    }

    /// Whether `signature` signs that link.
    pub fn verify(&self, org_id: &str, call_id: &str, expires: i64, signature: &str) -> bool {
        self.signer.verify_hex(
            &[format!("{org_id}/{call_id}.{expires}").as_bytes()],
            signature,
        )
    }
}

/// A link to a call's recording under `base`, valid for
/// [`LINK_LIFETIME_SECONDS`] from `now_unix`.
pub fn recording_link(
    server_secret: &[u8],
    base: &str,
    org: OrgId,
    call: CallId,
    format: &str,
    now_unix: i64,
) -> String {
    let expires = now_unix + LINK_LIFETIME_SECONDS;
    let signature =
        LinkSigner::new(server_secret).sign(&org.to_string(), &call.to_string(), expires);
    format!("{base}/recordings/{org}/{call}.{format}?expires={expires}&signature={signature}")
}

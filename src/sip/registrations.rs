//! REGISTER with the trunks that want it (`register: true`): each such
//! workspace's trunk learns our Contact, so it can send calls for its numbers
//! here, and the registration is refreshed before it expires.
//!
//! One task per node looks at the workspaces holding a `sip` credential every
//! [`SWEEP`]: a trunk not yet registered, changed since, or halfway to its
//! granted expiry is (re-)registered through rsipstack's `Registration`, which
//! answers the registrar's 401/407 with digest auth. A failure is logged and
//! retried after [`RETRY`]. Unregistering a removed trunk is left to the
//! registration's expiry.

use parking_lot::Mutex;
use rsipstack::dialog::authenticate::Credential;
use rsipstack::dialog::registration::Registration;
use rsipstack::sip::Uri;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::carrier::{host_port, transport_param};
use super::trunks::SipTrunks;
use super::user_agent::SipUserAgent;
use crate::domain::OrgId;
use crate::domain::sip_trunk::SipTrunk;
use crate::store::Store;

/// How often the workspaces' trunks are looked at.
pub const SWEEP: Duration = Duration::from_secs(15);
/// How soon a failed registration is tried again.
pub const RETRY: Duration = Duration::from_secs(60);

/// One workspace's registration as this node keeps it.
#[derive(Debug, Clone)]
pub struct RegistrationState {
    /// The credential's `updated_at` it was made for (a change re-registers).
    pub credential_at: i64,
    /// When to register again.
    pub next: Instant,
    /// The registrar's last answer (`200`, `403`, …), or the error.
    pub last: Result<u16, String>,
}

/// The node's registrations, by workspace.
#[derive(Default)]
pub struct Registrations {
    states: Mutex<HashMap<OrgId, RegistrationState>>,
}

impl Registrations {
    /// The state of `org_id`'s registration, if it has one.
    pub fn state(&self, org_id: OrgId) -> Option<RegistrationState> {
        self.states.lock().get(&org_id).cloned()
    }

    /// Runs the sweep until `stop`.
    pub async fn run(
        self: Arc<Self>,
        agent: Arc<SipUserAgent>,
        store: Store,
        trunks: Arc<dyn SipTrunks>,
        stop: CancellationToken,
    ) {
        loop {
            self.sweep(&agent, &store, trunks.as_ref()).await;
            // The next sweep, or sooner when a registration is due before it.
            let sweep = Instant::now() + SWEEP;
            let wake = self
                .states
                .lock()
                .values()
                .map(|s| s.next)
                .min()
                .map_or(sweep, |next| next.min(sweep));
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Registers every trunk that is due.
    pub async fn sweep(&self, agent: &SipUserAgent, store: &Store, trunks: &dyn SipTrunks) {
        let holders = match store.credential_holders("sip").await {
            Ok(holders) => holders,
            Err(err) => {
                tracing::warn!(error = %err, "listing SIP trunks failed");
                return;
            }
        };
        let now = Instant::now();
        for (org_id, credential_at) in holders {
            let due = self
                .states
                .lock()
                .get(&org_id)
                .is_none_or(|s| s.credential_at != credential_at || s.next <= now);
            if !due {
                continue;
            }
            let Some(trunk) = trunks.trunk(&org_id.to_string()).await else {
                continue;
            };
            if !trunk.register {
                self.states.lock().remove(&org_id);
                continue;
            }
            let (next, last) = match register(agent, &trunk).await {
                Ok((code, expires)) if (200..300).contains(&code) => {
                    tracing::info!(%org_id, registrar = %trunk.host, expires, "registered with the SIP trunk");
                    // Halfway to the granted expiry, as RFC 3261 §10.2.4 suggests refreshing early.
                    let refresh = Duration::from_secs(u64::from(expires.max(2) / 2));
                    (now + refresh, Ok(code))
                }
                Ok((code, _)) => {
                    tracing::warn!(%org_id, registrar = %trunk.host, code, "the SIP trunk refused our REGISTER");
                    (now + RETRY, Ok(code))
                }
                Err(err) => {
                    tracing::warn!(%org_id, registrar = %trunk.host, error = %err, "REGISTER failed");
                    (now + RETRY, Err(err))
                }
            };
            self.states.lock().insert(
                org_id,
                RegistrationState {
                    credential_at,
                    next,
                    last,
                },
            );
        }
    }
}

/// One REGISTER to `trunk`: the final code and the expiry the registrar granted.
async fn register(agent: &SipUserAgent, trunk: &SipTrunk) -> Result<(u16, u32), String> {
    let username = trunk.username.clone().unwrap_or_default();
    let transport = transport_param(trunk.transport);
    let host = host_port(&trunk.host, trunk.port);
    let server = Uri::try_from(format!("sip:{host}{transport}").as_str())
        .map_err(|e| format!("bad registrar address {host}: {e}"))?;
    let credential = Credential {
        username,
        password: trunk.password.clone().unwrap_or_default(),
        realm: None,
        auth_username: None,
    };
    let mut registration = Registration::new(agent.endpoint_inner(), Some(credential));
    let response = registration
        .register(server, Some(trunk.register_expires))
        .await
        .map_err(|e| e.to_string())?;
    Ok((response.status_code.code(), registration.expires()))
}

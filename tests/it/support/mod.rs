//! What the tests that need the app share: the one harness that runs the real
//! server on port 0 over a throwaway database (SQLite in a temp dir, or a fresh
//! Postgres database when `VOXLINE_TEST_DATABASE_URL` is set), its HTTP
//! replies, the process's one log subscriber, polling, and the one fake
//! carrier REST API the carrier tests dial through.

mod app;
mod baresip;
mod fake_carrier;
mod log_capture;
mod media_leg;
mod postgres;
mod reply;
mod serve;
mod sip_peer;
mod sip_setup;

pub use app::{TestApp, Workspace};
pub use baresip::{Baresip, baresip_installed};
pub use fake_carrier::{Answer, CarrierRequest, FakeCarrier};
pub use log_capture::logs;
pub use media_leg::{Kind, Leg, WAIT};
pub use postgres::PG_ENV;
pub use reply::{Reply, reply};
pub use serve::ServeProcess;
pub use sip_peer::{Answer as SipAnswer, DigestAuth, SipPeer, digest_params};
pub use sip_setup::{
    SIP_WELCOME, call_detail, call_ended, set_sip_trunk, sip_agent, sip_trunk_workspace,
};

use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;

/// The `voxline` binary cargo built beside these tests (admin CLI, loadgen).
pub const VOXLINE_BIN: &str = env!("CARGO_BIN_EXE_voxline");

/// Polls `check` every 20 ms until it yields `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Parses an RFC 3339 instant.
pub fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

//! The engine's [`CallLedger`] on top of the store: transitions, the billed
//! terminal outcome, and scheduling of retries by the agent's policy.

use crate::domain::clock::{SharedClock, ist_month_key};
use crate::domain::{CallId, OrgId};
use crate::store::Store;
use crate::store::calls::{CallOutcome, NewCall};
use async_trait::async_trait;
use voxline_actors::engine::{CallEnd, CallLedger, CallStatus, LedgerError};

/// Persists what the engine reports.
pub struct StoreLedger {
    store: Store,
    clock: SharedClock,
    rating_wait_ms: i64,
}

impl StoreLedger {
    /// A ledger writing to `store`; `rating_wait` is how long a rated call's
    /// `call.completed` waits for its scorecard.
    pub fn new(store: Store, clock: SharedClock, rating_wait: std::time::Duration) -> Self {
        Self {
            store,
            clock,
            rating_wait_ms: i64::try_from(rating_wait.as_millis()).unwrap_or(i64::MAX),
        }
    }
}

fn err(e: impl std::fmt::Display) -> LedgerError {
    LedgerError(e.to_string())
}

/// The call the engine names by `raw`. The engine only knows ids the service
/// gave it, so a text that is no call id names no stored call: the report is
/// ignored, as one about an unknown call is.
fn stored_call(raw: &str) -> Option<CallId> {
    raw.parse().ok()
}

#[async_trait]
impl CallLedger for StoreLedger {
    async fn transition(
        &self,
        call_id: &str,
        status: CallStatus,
        at_ms: i64,
    ) -> Result<(), LedgerError> {
        let Some(call_id) = stored_call(call_id) else {
            return Ok(());
        };
        self.store
            .call_transition(call_id, status.as_str(), at_ms)
            .await
            .map(|_| ())
            .map_err(err)
    }

    async fn carrier_call_id(
        &self,
        call_id: &str,
        carrier_call_id: &str,
    ) -> Result<(), LedgerError> {
        let Some(call_id) = stored_call(call_id) else {
            return Ok(());
        };
        self.store
            .set_carrier_call_id(call_id, carrier_call_id)
            .await
            .map_err(err)
    }

    async fn finish(&self, end: CallEnd) -> Result<(), LedgerError> {
        let Some(call_id) = stored_call(&end.call_id) else {
            return Ok(());
        };
        let month = ist_month_key(self.clock.now());
        let outcome = CallOutcome {
            call_id,
            status: end.status.as_str(),
            ended_reason: &end.ended_reason,
            answered_at: end.answered_at,
            ended_at: end.ended_at,
            month: &month,
            rating_wait_ms: self.rating_wait_ms,
        };
        let Some(done) = self.store.finish_call(&outcome).await.map_err(err)? else {
            return Ok(());
        };
        metrics::counter!("voxline_calls_finished_total", "status" => end.status.as_str())
            .increment(1);
        // Retries: unanswered outcomes are re-dialed by the engine itself, later.
        let Some(agent) = self
            .store
            .agent(done.org_id, done.agent_id)
            .await
            .map_err(err)?
        else {
            return Ok(());
        };
        let Ok(spec) = agent.spec() else {
            return Ok(());
        };
        let policy = &spec.retry_policy;
        let retry = policy.retry_on.iter().any(|s| s == end.status.as_str())
            && done.attempt < i64::from(policy.max_attempts)
            && end.ended_reason != "canceled";
        if retry {
            let not_before = end.ended_at + i64::from(policy.retry_after_seconds) * 1000;
            let now_ms = self.clock.now().timestamp_millis();
            let next = NewCall {
                id: CallId::new(),
                org_id: done.org_id,
                agent_id: done.agent_id,
                agent_name: done.agent_name,
                engine: done.engine,
                phone: done.phone,
                target_name: done.target_name,
                email: done.email,
                from_number: done.from_number,
                provider: done.provider,
                variables: done.variables,
                source: done.source,
                attempt: done.attempt + 1,
                retry_of: Some(done.retry_of.unwrap_or(call_id)),
                batch_id: done.batch_id,
                campaign_id: done.campaign_id,
                campaign_name: done.campaign_name,
                rate_paise: done.rate_paise,
                not_before,
                dispatched: false,
                now_ms,
            };
            self.store.insert_calls(&[next]).await.map_err(err)?;
        }
        Ok(())
    }

    async fn release_queued(&self, org_id: &str) -> Result<(), LedgerError> {
        // Like a call id, a text that is no workspace id has no queued calls.
        let Ok(org_id) = org_id.parse::<OrgId>() else {
            return Ok(());
        };
        self.store
            .release_queued_calls(Some(org_id))
            .await
            .map(|_| ())
            .map_err(err)
    }
}

//! The engine's [`CallLedger`] on top of the store: transitions, the billed
//! terminal outcome, and scheduling of retries by the agent's policy.

use crate::calls::progress_writer::ProgressWriter;
use crate::domain::clock::{SharedClock, ist_month_key};
use crate::domain::{CallId, OrgId};
use crate::store::Store;
use crate::store::calls::{CallOutcome, CallProgress, NewCall, ProgressStatus};
use async_trait::async_trait;
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{CallEnd, CallLedger, CallStatus, LedgerError};
use voxline_actors::ids::{CallId as EngineCallId, OrgId as EngineOrgId};

/// The `source` of calls a person placed to one of the workspace's numbers.
pub const INBOUND_SOURCE: &str = "inbound";

/// Persists what the engine reports.
pub struct StoreLedger {
    store: Store,
    clock: SharedClock,
    rating_wait_ms: i64,
    progress: ProgressWriter,
}

impl StoreLedger {
    /// A ledger writing to `store`; `rating_wait` is how long a rated call's
    /// `call.completed` waits for its scorecard.
    /// Its progress writer starts on the current runtime.
    pub fn new(store: Store, clock: SharedClock, rating_wait: std::time::Duration) -> Self {
        Self {
            progress: ProgressWriter::start(store.clone()),
            store,
            clock,
            rating_wait_ms: i64::try_from(rating_wait.as_millis()).unwrap_or(i64::MAX),
        }
    }
}

impl StoreLedger {
    /// Hands `report` to the progress writer.
    fn queue(&self, report: CallProgress) -> Result<(), LedgerError> {
        if self.progress.write(report) {
            Ok(())
        } else {
            Err(err("the progress writer has stopped"))
        }
    }
}

fn err(e: impl std::fmt::Display) -> LedgerError {
    LedgerError(e.to_string())
}

#[async_trait]
impl CallLedger for StoreLedger {
    /// Queues the transition for the progress writer. Ringing is stored
    /// before this returns, so the call reads as ringing before its carrier
    /// is asked to dial; the answer is not waited for, since it stands
    /// between the callee's "hello" and the agent's greeting.
    async fn transition(
        &self,
        call_id: EngineCallId,
        status: CallStatus,
        at_ms: i64,
    ) -> Result<(), LedgerError> {
        let progress = match status {
            CallStatus::Ringing => ProgressStatus::Ringing,
            CallStatus::InProgress => ProgressStatus::InProgress,
            // Ends are recorded by `finish`; a call is never moved back to queued.
            _ => return Ok(()),
        };
        self.queue(CallProgress::Status {
            call_id: CallId::from(call_id),
            status: progress,
            at_ms,
        })?;
        if progress == ProgressStatus::Ringing {
            self.progress.flush().await;
        }
        Ok(())
    }

    /// Queues the carrier's id for the progress writer, without waiting.
    async fn carrier_call_id(
        &self,
        call_id: EngineCallId,
        carrier_call_id: &str,
    ) -> Result<(), LedgerError> {
        self.queue(CallProgress::CarrierCallId {
            call_id: CallId::from(call_id),
            carrier_call_id: carrier_call_id.to_owned(),
        })
    }

    async fn finish(&self, end: CallEnd) -> Result<(), LedgerError> {
        // The call's history reads in order: its progress first, then its end.
        self.progress.flush().await;
        let call_id = CallId::from(end.call_id);
        let month = ist_month_key(self.clock.now());
        let outcome = CallOutcome {
            call_id,
            status: end.status.as_str(),
            ended_reason: end.ended_reason.as_str(),
            answered_at: end.answered_at,
            ended_at: end.ended_at,
            month: &month,
            rating_wait_ms: self.rating_wait_ms,
            opted_out: end.ended_reason == EndedReason::OptOut,
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
            && end.ended_reason != EndedReason::Canceled
            // A missed inbound call is the caller's to repeat, not ours to dial.
            && done.source != INBOUND_SOURCE;
        // A number on the do-not-call list (its callee opted out in this very
        // call, or it was listed meanwhile) is not dialed again.
        let retry = retry
            && end.ended_reason != EndedReason::OptOut
            && !self
                .store
                .is_do_not_call(done.org_id, &done.phone)
                .await
                .map_err(err)?;
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
                calling_hours_override: None,
            };
            self.store.insert_calls(&[next]).await.map_err(err)?;
        }
        Ok(())
    }

    async fn release_queued(&self, org_id: EngineOrgId) -> Result<(), LedgerError> {
        self.store
            .release_queued_calls(Some(OrgId::from(org_id)))
            .await
            .map(|_| ())
            .map_err(err)
    }
}

//! The durable dispatch queue: stored calls that no engine holds (scheduled
//! retries, calls queued before a restart) are claimed and enqueued here.

use super::calling_hours::DueCall;
use super::job::{job_for, stored_variables};
use super::service::CallService;
use crate::domain::CallId;
use crate::domain::agent::AgentSpec;
use crate::domain::do_not_call::SKIP_REASON;
use crate::store::attempt_caps::SKIP_REASON as ATTEMPT_CAP;
use crate::store::calls::DispatchRow;
use crate::store::nodes::LiveCallRow;
use crate::store::{OrgRow, StoreError};
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{CallEnd, CallLedger, CallStatus};

impl CallService {
    /// Claims and enqueues every due call; returns how many were handed over.
    pub async fn dispatch_due(&self) -> Result<usize, StoreError> {
        let now = self.clock.now().timestamp_millis();
        let mut handed = 0;
        for row in self.store.due_calls(now, 500).await? {
            if !self.store.claim_call(row.id).await? {
                continue;
            }
            if !self.rules_allow(&row, now).await? {
                continue;
            }
            let (Some(org), Some(agent)) = (
                self.store.org(row.org_id).await?,
                self.store.agent(row.org_id, row.agent_id).await?,
            ) else {
                self.fail(row.id, EndedReason::AgentUnavailable).await;
                continue;
            };
            let spec = match agent.spec() {
                Ok(spec) if agent.status() == crate::domain::agent::AgentStatus::Active => spec,
                _ => {
                    self.fail(row.id, EndedReason::AgentUnavailable).await;
                    continue;
                }
            };
            if !self.within_calling_hours(&row, &org, &spec).await? {
                continue;
            }
            let Ok(variables) = stored_variables(row.id, &row.variables) else {
                self.fail(row.id, EndedReason::EngineError).await;
                continue;
            };
            let job = job_for(
                row.id,
                row.org_id,
                org.concurrency,
                &row.phone,
                &row.from_number,
                &row.provider,
                &spec,
                &variables,
                self.ring_seconds,
            );
            if let Err(err) = self.engine.enqueue(job) {
                tracing::error!(call = %row.id, error = %err, "engine refused a due call");
                self.store.release_queued_calls(Some(row.org_id)).await?;
                break;
            }
            handed += 1;
        }
        Ok(handed)
    }

    /// Whether a claimed due call's number may still be dialed: one listed
    /// do-not-call since the call was stored, or over the workspace's attempt
    /// cap, is canceled with the rule (its item records it) and never dialed.
    /// (The call itself was counted by every placement since it was stored,
    /// so reading the cap suffices.)
    pub async fn rules_allow(&self, row: &DispatchRow, now: i64) -> Result<bool, StoreError> {
        if !self
            .listed_numbers(row.org_id, [row.phone.as_str()])
            .await?
            .is_empty()
        {
            self.cancel_by_rule(row.id, EndedReason::DoNotCall, SKIP_REASON, None)
                .await;
            return Ok(false);
        }
        if let Some(hit) = self
            .store
            .attempt_cap_hit(row.org_id, &row.phone, row.id, now)
            .await?
        {
            self.cancel_by_rule(
                row.id,
                EndedReason::AttemptCap,
                ATTEMPT_CAP,
                Some(hit.message(&row.phone)),
            )
            .await;
            return Ok(false);
        }
        Ok(true)
    }

    /// Whether a claimed due call may be dialed now under its calling hours
    /// (see [`CallService::due_call_hours`]); a call whose batch's stored
    /// hours no longer parse fails rather than blocking every later pass.
    pub async fn within_calling_hours(
        &self,
        row: &DispatchRow,
        org: &OrgRow,
        spec: &AgentSpec,
    ) -> Result<bool, StoreError> {
        let checked = match self.batch_calling_hours(row).await {
            Ok(batch) => self.due_call_hours(row, org, spec, batch).await,
            Err(err) => Err(err),
        };
        match checked {
            Ok(due) => Ok(due == DueCall::Dial),
            Err(StoreError::CorruptColumn { .. }) => {
                self.fail(row.id, EndedReason::EngineError).await;
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Ends a queued call that can never be dialed (its agent is gone, its stored
    /// variables do not parse) as failed with `reason`, through the ledger.
    pub async fn fail(&self, call_id: CallId, reason: EndedReason) {
        let end = CallEnd {
            call_id: call_id.into(),
            status: CallStatus::Failed,
            ended_reason: reason,
            answered_at: None,
            ended_at: self.clock.now().timestamp_millis(),
        };
        if let Err(err) = self.ledger.finish(end).await {
            tracing::error!(call = %call_id, error = %err, "could not fail an undispatchable call");
        }
    }

    /// Ends a queued call a rule stops (its number is on the do-not-call
    /// list, or at its attempt cap) as canceled with the rule as its
    /// `endedReason`, its batch item skipped with `skip_reason` (and `note`).
    pub async fn cancel_by_rule(
        &self,
        call_id: CallId,
        reason: EndedReason,
        skip_reason: &'static str,
        note: Option<String>,
    ) {
        let end = CallEnd {
            call_id: call_id.into(),
            status: CallStatus::Canceled,
            ended_reason: reason,
            answered_at: None,
            ended_at: self.clock.now().timestamp_millis(),
        };
        if let Err(err) = self.ledger.finish(end).await {
            tracing::error!(call = %call_id, error = %err, "could not cancel a call a rule stops");
            return;
        }
        if let Err(err) = self
            .store
            .skip_item_of_call(call_id, skip_reason, note.as_deref())
            .await
        {
            tracing::error!(call = %call_id, error = %err, "could not skip the item of a call a rule stops");
        }
    }

    /// After a restart: live calls this node's previous process left end with
    /// `service-restart` (the sim carrier's legs died with it), and the queued
    /// calls it held go back to the dispatcher. A node touches only its own calls
    /// and those no node owns, never a live peer's; on one node (SQLite) calls
    /// never get an owner, so that is every live and queued call.
    pub async fn recover_after_restart(&self) -> Result<(usize, u64), StoreError> {
        let store = &self.store;
        let mut orphans = store.live_calls_of_node(Some(&self.node_id)).await?;
        orphans.extend(store.live_calls_of_node(None).await?);
        self.end_orphans(&orphans, EndedReason::ServiceRestart)
            .await;
        let released = store
            .release_queued_calls_of_node(Some(&self.node_id))
            .await?
            + store.release_queued_calls_of_node(None).await?;
        Ok((orphans.len(), released))
    }

    /// Ends calls whose process is gone with `reason`: answered ones completed
    /// and billed up to their last sign of life (not the downtime), the others failed.
    pub async fn end_orphans(&self, orphans: &[LiveCallRow], reason: EndedReason) {
        let now = self.clock.now().timestamp_millis();
        for (id, status, answered_at, last_activity) in orphans {
            let answered = status == "in-progress";
            let end = CallEnd {
                call_id: (*id).into(),
                status: if answered {
                    CallStatus::Completed
                } else {
                    CallStatus::Failed
                },
                ended_reason: reason,
                answered_at: *answered_at,
                ended_at: last_activity.or(*answered_at).unwrap_or(now),
            };
            if let Err(err) = self.ledger.finish(end).await {
                tracing::error!(call = %id, error = %err, "could not end an orphaned call");
            }
        }
    }
}

//! The engine's [`BatchFeed`] on top of the store: each pull claims one
//! pending item and stores its call through the same dial plan as every other
//! call (agent, wallet, minute quota, caller ID), then hands the job over.

use super::{BatchKind, BatchStatus};
use crate::calls::job::{job_for, stored_variables};
use crate::calls::placement::{DialPlan, PlacementError};
use crate::calls::service::CallService;
use crate::domain::calling_hours::CallingHours;
use crate::domain::{BatchId, CallId};
use crate::store::batches::{BatchRow, ItemCall, ItemClaim};
use crate::store::calls::NewCall;
use async_trait::async_trait;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{BatchFeed, CallJob, LedgerError};
use voxline_actors::ids::BatchId as EngineBatchId;

/// How long a dial plan (agent, wallet, quota, caller ID) is reused between pulls.
const PLAN_TTL: Duration = Duration::from_secs(1);

/// Feeds one batch's items to the engine.
pub struct StoreBatchFeed {
    calls: CallService,
    cached: Mutex<Option<(Instant, BatchRow, DialPlan, CallingHours)>>,
}

impl StoreBatchFeed {
    /// A feed reading and writing through the calls room.
    pub fn new(calls: CallService) -> Arc<Self> {
        Arc::new(Self {
            calls,
            cached: Mutex::new(None),
        })
    }

    /// The batch, its dial plan and the calling hours its items keep,
    /// refreshed at most every [`PLAN_TTL`]; None when the batch is gone or
    /// not running.
    async fn plan(
        &self,
        batch_id: BatchId,
    ) -> Result<Option<(BatchRow, DialPlan, CallingHours)>, PlacementError> {
        if let Some((at, batch, plan, hours)) = self.cached.lock().as_ref()
            && at.elapsed() < PLAN_TTL
        {
            return Ok(Some((batch.clone(), plan.clone(), *hours)));
        }
        let Some(batch) = self.calls.store.batch_by_id(batch_id).await? else {
            return Ok(None);
        };
        if BatchStatus::from_stored(&batch.status) != BatchStatus::Running {
            return Ok(None);
        }
        let plan = self
            .calls
            .plan(batch.org_id, batch.agent_id, batch.from_number.as_deref())
            .await?;
        let hours = self
            .calls
            .calling_hours_for(&plan.org, &plan.spec, batch.calling_hours()?)?;
        *self.cached.lock() = Some((Instant::now(), batch.clone(), plan.clone(), hours));
        Ok(Some((batch, plan, hours)))
    }
}

fn ledger_err(e: impl std::fmt::Display) -> LedgerError {
    LedgerError(e.to_string())
}

/// The stored call an item of `batch` is dialed with, before the item fills in the person.
pub fn item_call(batch: &BatchRow, plan: &DialPlan, now_ms: i64) -> ItemCall {
    item_call_for(batch, plan, now_ms, true)
}

/// [`item_call`], handed to this node's engine at once (`dispatched`) or
/// left queued for whichever node's dispatcher claims it first.
fn item_call_for(batch: &BatchRow, plan: &DialPlan, now_ms: i64, dispatched: bool) -> ItemCall {
    let campaign = batch.kind == BatchKind::Campaign.as_str();
    let call_id = CallId::new();
    ItemCall {
        call: NewCall {
            id: call_id,
            org_id: plan.org.id,
            agent_id: plan.agent.id,
            agent_name: plan.spec.name.clone(),
            engine: plan.spec.conversation_engine.as_str().to_string(),
            phone: String::new(),
            target_name: String::new(),
            email: None,
            from_number: plan.from.phone.clone(),
            provider: plan.from.provider.clone(),
            variables: "{}".into(),
            source: batch.kind.clone(),
            attempt: 1,
            retry_of: None,
            batch_id: Some(batch.id),
            campaign_id: campaign.then_some(batch.id),
            campaign_name: campaign.then(|| batch.name.clone()),
            rate_paise: plan.rate_paise,
            not_before: now_ms,
            dispatched,
            now_ms,
            calling_hours_override: None,
        },
        call_id,
    }
}

impl StoreBatchFeed {
    /// Claims the batch's next pending item and stores its call, handed to
    /// this node (`dispatched`) or left queued for any node. None when there
    /// is nothing to dial now; a refused plan (wallet, quota, agent) pauses
    /// the batch and says why.
    async fn claim(
        &self,
        batch_id: BatchId,
        dispatched: bool,
    ) -> Result<Option<(NewCall, DialPlan)>, LedgerError> {
        let (batch, plan, hours) = match self.plan(batch_id).await {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None),
            Err(PlacementError::Store(err)) => return Err(ledger_err(err)),
            Err(refusal) => {
                // Wallet empty, quota spent, agent gone: stop dialing and say why;
                // the pending items wait for a resume.
                let reason = refusal.to_string();
                tracing::warn!(batch = %batch_id, %reason, "batch paused: calls are refused");
                self.calls
                    .store
                    .transition_batch(
                        batch_id,
                        &[BatchStatus::Running.as_str()],
                        BatchStatus::Paused.as_str(),
                        Some(&reason),
                        false,
                        false,
                        self.calls.clock.now().timestamp_millis(),
                    )
                    .await
                    .map_err(ledger_err)?;
                return Ok(None);
            }
        };
        let now = self.calls.clock.now();
        let open = move |phone: &str| hours.check(phone, now);
        loop {
            let template = item_call_for(&batch, &plan, now.timestamp_millis(), dispatched);
            match self
                .calls
                .store
                .claim_next_item(batch_id, &template, &open)
                .await
                .map_err(ledger_err)?
            {
                ItemClaim::Claimed(claimed) => {
                    let (_, call) = *claimed;
                    return Ok(Some((call, plan)));
                }
                // Items closed for their calling hours were set waiting; look on.
                ItemClaim::Deferred => continue,
                ItemClaim::Nothing => return Ok(None),
            }
        }
    }

    /// Queues the batch's next pending item for whichever node claims it
    /// first (nodes sharing a database); false when nothing is to be dialed now.
    pub async fn queue_next(&self, batch_id: BatchId) -> Result<bool, LedgerError> {
        Ok(self.claim(batch_id, false).await?.is_some())
    }
}

#[async_trait]
impl BatchFeed for StoreBatchFeed {
    async fn next_call(&self, batch_id: EngineBatchId) -> Result<Option<CallJob>, LedgerError> {
        let Some((call, plan)) = self.claim(BatchId::from(batch_id), true).await? else {
            return Ok(None);
        };
        // The item's variables came from its upload; a row that no longer parses fails
        // its call (logged with the id) rather than dialing it with blanks.
        let variables = match stored_variables(call.id, &call.variables) {
            Ok(variables) => variables,
            Err(corrupt) => {
                self.calls.fail(call.id, EndedReason::EngineError).await;
                return Err(ledger_err(corrupt));
            }
        };
        Ok(Some(job_for(
            call.id,
            call.org_id,
            plan.org.concurrency,
            &call.phone,
            &call.from_number,
            &call.provider,
            &plan.spec,
            &variables,
            self.calls.ring_seconds,
        )))
    }
}

//! One actor per workspace: owns its concurrency slots and the FIFO queue of
//! calls waiting for one, and supervises the workspace's call actors so a
//! failed call never leaks a slot or stays non-terminal.
//!
//! Started batches are not queued here. Each has a batch actor in a
//! round-robin; when a slot frees and the FIFO (test calls, API calls, alert
//! dials, retries) is empty, the next batch in turn is asked for one call.

use super::batch_actor::{BatchActor, BatchMsg};
use super::call_actor::{CallActor, CallMsg};
use super::{
    Admission, BatchRegistration, CallEnd, CallJob, CallStatus, CancelOutcome, EngineShared,
    InboundWait, OrgSnapshot,
};
use crate::ended_reason::EndedReason;
use crate::ids::{BatchId, CallId, OrgId};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::Arc;

/// How long a batch may take to hand over its next call before it loses its turn.
const BATCH_PULL_TIMEOUT_MS: u64 = 10_000;

/// Messages of an org actor.
pub(crate) enum OrgMsg {
    /// Start the call when a slot is free, else queue it.
    Enqueue(CallJob),
    /// Start an inbound call now if a slot is free (or it bypasses them),
    /// else answer busy or hold it; never queued behind outbound calls.
    Admit(CallJob, InboundWait, RpcReplyPort<Admission>),
    /// Whether an inbound call is holding for a slot.
    IsHolding(CallId, RpcReplyPort<bool>),
    /// A held inbound call's wait is over: it ends `queue-timeout` unless it started.
    HoldOver(CallId),
    /// Cancel a queued or live call.
    Cancel(CallId, RpcReplyPort<CancelOutcome>),
    /// Current slot usage.
    Snapshot(RpcReplyPort<OrgSnapshot>),
    /// Add a started batch to the round-robin (no-op while it is in it).
    FeedBatch(BatchRegistration),
    /// Ids of the batches in the round-robin, next turn first.
    FedBatches(RpcReplyPort<Vec<BatchId>>),
    /// Fill free slots (calls may start again after a pause).
    Pump,
}

/// A batch in the round-robin.
struct FedBatch {
    batch_id: BatchId,
    actor: ActorRef<BatchMsg>,
}

/// The org actor of an engine whose calls run on media `M`.
pub(crate) struct OrgActor<M>(PhantomData<fn() -> M>);

impl<M> Default for OrgActor<M> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

struct Running {
    call_id: CallId,
    bypass: bool,
}

pub(crate) struct OrgState<M: Send + 'static> {
    org_id: OrgId,
    shared: Arc<EngineShared<M>>,
    concurrency: u32,
    queue: VecDeque<CallJob>,
    /// Inbound callers holding for a slot, first come first served, before `queue`.
    holding: VecDeque<CallJob>,
    running: HashMap<ActorId, Running>,
    /// Batches being fed, next turn first.
    batches: VecDeque<FedBatch>,
}

impl<M: Send + 'static> OrgState<M> {
    fn slots_used(&self) -> usize {
        self.running.values().filter(|r| !r.bypass).count()
    }

    async fn start(&mut self, myself: &ActorRef<OrgMsg>, job: CallJob) {
        let call_id = job.call_id;
        let bypass = job.bypass_slots;
        match Actor::spawn_linked(
            None,
            CallActor::<M>::default(),
            (job, Arc::clone(&self.shared)),
            myself.get_cell(),
        )
        .await
        {
            Ok((actor, _)) => {
                self.running
                    .insert(actor.get_id(), Running { call_id, bypass });
            }
            Err(err) => {
                tracing::error!(call = %call_id, error = %err, "call actor failed to start");
                self.fail(call_id, EndedReason::EngineError).await;
            }
        }
    }

    async fn fail(&self, call_id: CallId, reason: EndedReason) {
        let end = CallEnd {
            call_id,
            status: CallStatus::Failed,
            ended_reason: reason,
            answered_at: None,
            ended_at: self.shared.now_ms(),
        };
        if let Err(err) = self.shared.config.ledger.finish(end).await {
            tracing::error!(call = %call_id, error = %err, "could not record failed call");
        }
    }

    /// Fills free slots: queued calls first, then one call per batch in turn.
    async fn pump(&mut self, myself: &ActorRef<OrgMsg>) {
        if self.shared.starts_held() {
            return;
        }
        while self.slots_used() < self.concurrency as usize {
            let job = match self.holding.pop_front().or_else(|| self.queue.pop_front()) {
                Some(job) => job,
                None => match self.next_batch_call().await {
                    Some(job) => job,
                    None => break,
                },
            };
            self.start(myself, job).await;
        }
    }

    /// Asks the batches in turn for one call; a batch with nothing to dial
    /// now leaves the round-robin (the service feeds it again on resume or retry).
    async fn next_batch_call(&mut self) -> Option<CallJob> {
        for _ in 0..self.batches.len() {
            let batch = self.batches.pop_front()?;
            match ractor::call_t!(batch.actor, BatchMsg::Next, BATCH_PULL_TIMEOUT_MS) {
                Ok(Some(mut job)) => {
                    // Batch calls always take a slot, announcements included:
                    // pacing is what a batch is for.
                    job.bypass_slots = false;
                    self.batches.push_back(batch);
                    return Some(job);
                }
                Ok(None) => batch.actor.stop(None),
                Err(err) => {
                    tracing::error!(org = %self.org_id, batch = %batch.batch_id, error = %err, "batch did not hand over a call");
                    batch.actor.stop(None);
                }
            }
        }
        None
    }

    /// Adds a batch to the round-robin; a newcomer takes the next turn.
    async fn feed_batch(&mut self, myself: &ActorRef<OrgMsg>, registration: BatchRegistration) {
        if self
            .batches
            .iter()
            .any(|b| b.batch_id == registration.batch_id)
        {
            return;
        }
        match Actor::spawn_linked(
            None,
            BatchActor,
            (registration.batch_id, registration.feed),
            myself.get_cell(),
        )
        .await
        {
            Ok((actor, _)) => self.batches.push_front(FedBatch {
                batch_id: registration.batch_id,
                actor,
            }),
            Err(err) => {
                tracing::error!(org = %self.org_id, batch = %registration.batch_id, error = %err, "batch actor failed to start");
            }
        }
    }
}

#[ractor::async_trait]
impl<M: Send + 'static> Actor for OrgActor<M> {
    type Msg = OrgMsg;
    type State = OrgState<M>;
    type Arguments = (OrgId, Arc<EngineShared<M>>);

    async fn pre_start(
        &self,
        _myself: ActorRef<OrgMsg>,
        (org_id, shared): (OrgId, Arc<EngineShared<M>>),
    ) -> Result<OrgState<M>, ActorProcessingErr> {
        Ok(OrgState {
            org_id,
            shared,
            concurrency: 1,
            queue: VecDeque::new(),
            holding: VecDeque::new(),
            running: HashMap::new(),
            batches: VecDeque::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<OrgMsg>,
        msg: OrgMsg,
        state: &mut OrgState<M>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            OrgMsg::Enqueue(job) => {
                state.concurrency = job.org_concurrency.max(1);
                if job.bypass_slots && !state.shared.starts_held() {
                    state.start(&myself, job).await;
                } else {
                    state.queue.push_back(job);
                }
                state.pump(&myself).await;
            }
            OrgMsg::Admit(job, wait, reply) => {
                state.concurrency = job.org_concurrency.max(1);
                let free = job.bypass_slots || state.slots_used() < state.concurrency as usize;
                let admission = match wait {
                    _ if state.shared.starts_held() => Admission::Busy,
                    // Earlier holders go first.
                    _ if free && (job.bypass_slots || state.holding.is_empty()) => {
                        state.start(&myself, job).await;
                        Admission::Started
                    }
                    InboundWait::Reject => Admission::Busy,
                    InboundWait::Hold(limit) => {
                        let call_id = job.call_id;
                        state.holding.push_back(job);
                        let me = myself.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(limit).await;
                            let _ = me.send_message(OrgMsg::HoldOver(call_id));
                        });
                        Admission::Holding
                    }
                };
                let _ = reply.send(admission);
                state.pump(&myself).await;
            }
            OrgMsg::IsHolding(call_id, reply) => {
                let _ = reply.send(state.holding.iter().any(|j| j.call_id == call_id));
            }
            OrgMsg::HoldOver(call_id) => {
                if let Some(pos) = state.holding.iter().position(|j| j.call_id == call_id) {
                    state.holding.remove(pos);
                    let end = CallEnd {
                        call_id,
                        status: CallStatus::Busy,
                        ended_reason: EndedReason::QueueTimeout,
                        answered_at: None,
                        ended_at: state.shared.now_ms(),
                    };
                    if let Err(err) = state.shared.config.ledger.finish(end).await {
                        tracing::error!(call = %call_id, error = %err, "could not record a held call's end");
                    }
                }
            }
            OrgMsg::Cancel(call_id, reply) => {
                let in_queue = state.queue.iter().position(|j| j.call_id == call_id);
                let holding = state.holding.iter().position(|j| j.call_id == call_id);
                let queued = match (in_queue, holding) {
                    (Some(pos), _) => state.queue.remove(pos),
                    (None, Some(pos)) => state.holding.remove(pos),
                    (None, None) => None,
                };
                let outcome = if queued.is_some() {
                    let end = CallEnd {
                        call_id,
                        status: CallStatus::Canceled,
                        ended_reason: EndedReason::Canceled,
                        answered_at: None,
                        ended_at: state.shared.now_ms(),
                    };
                    if let Err(err) = state.shared.config.ledger.finish(end).await {
                        tracing::error!(call = %call_id, error = %err, "could not record canceled call");
                    }
                    CancelOutcome::Dequeued
                } else if let Some(actor) = state.shared.live_call(call_id) {
                    match actor.send_message(CallMsg::Cancel) {
                        Ok(()) => CancelOutcome::HangingUp,
                        Err(_) => CancelOutcome::NotFound,
                    }
                } else {
                    CancelOutcome::NotFound
                };
                let _ = reply.send(outcome);
            }
            OrgMsg::Snapshot(reply) => {
                let bypassing = state.running.values().filter(|r| r.bypass).count();
                let _ = reply.send(OrgSnapshot {
                    active: state.running.len() - bypassing,
                    bypassing,
                    queued: state.queue.len() + state.holding.len(),
                });
            }
            OrgMsg::FeedBatch(registration) => {
                state.concurrency = registration.org_concurrency.max(1);
                state.feed_batch(&myself, registration).await;
                state.pump(&myself).await;
            }
            OrgMsg::FedBatches(reply) => {
                let _ = reply.send(state.batches.iter().map(|b| b.batch_id).collect());
            }
            OrgMsg::Pump => state.pump(&myself).await,
        }
        Ok(())
    }

    /// A call actor that ends frees its slot; one that failed (panicked) is
    /// also recorded as failed here, because its own cleanup never ran.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<OrgMsg>,
        event: SupervisionEvent,
        state: &mut OrgState<M>,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.running.remove(&cell.get_id());
                state.batches.retain(|b| b.actor.get_id() != cell.get_id());
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                state.batches.retain(|b| b.actor.get_id() != cell.get_id());
                if let Some(run) = state.running.remove(&cell.get_id()) {
                    tracing::error!(org = %state.org_id, call = %run.call_id, error = %err, "call actor failed");
                    if let Ok(mut calls) = state.shared.calls.lock() {
                        calls.remove(&run.call_id);
                    }
                    state.fail(run.call_id, EndedReason::EngineError).await;
                }
            }
            _ => return Ok(()),
        }
        state.pump(&myself).await;
        Ok(())
    }
}

//! One actor per workspace: owns its concurrency slots and the FIFO queue of
//! calls waiting for one, and supervises the workspace's call actors so a
//! failed call never leaks a slot or stays non-terminal.

use super::call_actor::{CallActor, CallMsg};
use super::{CallEnd, CallJob, CallStatus, CancelOutcome, EngineShared, OrgSnapshot};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Messages of an org actor.
pub(crate) enum OrgMsg {
    /// Start the call when a slot is free, else queue it.
    Enqueue(CallJob),
    /// Cancel a queued or live call.
    Cancel(String, RpcReplyPort<CancelOutcome>),
    /// Current slot usage.
    Snapshot(RpcReplyPort<OrgSnapshot>),
}

pub(crate) struct OrgActor;

struct Running {
    call_id: String,
    bypass: bool,
}

pub(crate) struct OrgState {
    org_id: String,
    shared: Arc<EngineShared>,
    concurrency: u32,
    queue: VecDeque<CallJob>,
    running: HashMap<ActorId, Running>,
}

impl OrgState {
    fn slots_used(&self) -> usize {
        self.running.values().filter(|r| !r.bypass).count()
    }

    async fn start(&mut self, myself: &ActorRef<OrgMsg>, job: CallJob) {
        let call_id = job.call_id.clone();
        let bypass = job.bypass_slots;
        match Actor::spawn_linked(
            None,
            CallActor,
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
                self.fail(&call_id, "engine-error").await;
            }
        }
    }

    async fn fail(&self, call_id: &str, reason: &str) {
        let end = CallEnd {
            call_id: call_id.to_string(),
            status: CallStatus::Failed,
            ended_reason: reason.to_string(),
            answered_at: None,
            ended_at: self.shared.now_ms(),
        };
        if let Err(err) = self.shared.config.ledger.finish(end).await {
            tracing::error!(call = %call_id, error = %err, "could not record failed call");
        }
    }

    async fn pump(&mut self, myself: &ActorRef<OrgMsg>) {
        if self.shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        while self.slots_used() < self.concurrency as usize {
            let Some(job) = self.queue.pop_front() else {
                break;
            };
            self.start(myself, job).await;
        }
    }
}

#[ractor::async_trait]
impl Actor for OrgActor {
    type Msg = OrgMsg;
    type State = OrgState;
    type Arguments = (String, Arc<EngineShared>);

    async fn pre_start(
        &self,
        _myself: ActorRef<OrgMsg>,
        (org_id, shared): (String, Arc<EngineShared>),
    ) -> Result<OrgState, ActorProcessingErr> {
        Ok(OrgState {
            org_id,
            shared,
            concurrency: 1,
            queue: VecDeque::new(),
            running: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<OrgMsg>,
        msg: OrgMsg,
        state: &mut OrgState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            OrgMsg::Enqueue(job) => {
                state.concurrency = job.org_concurrency.max(1);
                if job.bypass_slots && !state.shared.stopping.load(Ordering::SeqCst) {
                    state.start(&myself, job).await;
                } else {
                    state.queue.push_back(job);
                }
                state.pump(&myself).await;
            }
            OrgMsg::Cancel(call_id, reply) => {
                let outcome = if let Some(pos) =
                    state.queue.iter().position(|j| j.call_id == call_id)
                {
                    state.queue.remove(pos);
                    let end = CallEnd {
                        call_id: call_id.clone(),
                        status: CallStatus::Canceled,
                        ended_reason: "canceled".into(),
                        answered_at: None,
                        ended_at: state.shared.now_ms(),
                    };
                    if let Err(err) = state.shared.config.ledger.finish(end).await {
                        tracing::error!(call = %call_id, error = %err, "could not record canceled call");
                    }
                    CancelOutcome::Dequeued
                } else if let Some(actor) = state.shared.live_call(&call_id) {
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
                    queued: state.queue.len(),
                });
            }
        }
        Ok(())
    }

    /// A call actor that ends frees its slot; one that failed (panicked) is
    /// also recorded as failed here, because its own cleanup never ran.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<OrgMsg>,
        event: SupervisionEvent,
        state: &mut OrgState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.running.remove(&cell.get_id());
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(run) = state.running.remove(&cell.get_id()) {
                    tracing::error!(org = %state.org_id, call = %run.call_id, error = %err, "call actor failed");
                    if let Ok(mut calls) = state.shared.calls.lock() {
                        calls.remove(&run.call_id);
                    }
                    state.fail(&run.call_id, "engine-error").await;
                }
            }
            _ => return Ok(()),
        }
        state.pump(&myself).await;
        Ok(())
    }
}

//! The root supervisor: spawns one org actor per workspace on first use and
//! outlives their failures.

use super::org_actor::{OrgActor, OrgMsg};
use super::{
    Admission, BatchRegistration, CallJob, CancelOutcome, EngineShared, InboundWait, OrgSnapshot,
};
use crate::ids::{BatchId, CallId, OrgId};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

/// Messages of the root actor.
pub(crate) enum RootMsg {
    /// Route a call to its org actor.
    Enqueue(CallJob),
    /// Route an inbound call to its org actor, which answers whether it started.
    Admit(CallJob, InboundWait, RpcReplyPort<Admission>),
    /// Whether an inbound call of an org is holding for a slot.
    IsHolding(OrgId, CallId, RpcReplyPort<bool>),
    /// Cancel a call of an org.
    Cancel(OrgId, CallId, RpcReplyPort<CancelOutcome>),
    /// Slot usage of an org.
    Snapshot(OrgId, RpcReplyPort<OrgSnapshot>),
    /// Route a started batch to its org actor's round-robin.
    FeedBatch(BatchRegistration),
    /// The batches an org is pulling from.
    FedBatches(OrgId, RpcReplyPort<Vec<BatchId>>),
    /// Every org fills its free slots (calls may start again after a pause).
    Pump,
}

/// The root actor of an engine whose calls run on media `M`.
pub(crate) struct RootActor<M>(PhantomData<fn() -> M>);

impl<M> Default for RootActor<M> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

pub(crate) struct RootState<M: Send + 'static> {
    shared: Arc<EngineShared<M>>,
    orgs: HashMap<OrgId, ActorRef<OrgMsg>>,
}

impl<M: Send + 'static> RootState<M> {
    async fn org(
        &mut self,
        myself: &ActorRef<RootMsg>,
        org_id: OrgId,
    ) -> Result<ActorRef<OrgMsg>, ActorProcessingErr> {
        if let Some(org) = self.orgs.get(&org_id) {
            return Ok(org.clone());
        }
        let (org, _) = Actor::spawn_linked(
            None,
            OrgActor::<M>::default(),
            (org_id, Arc::clone(&self.shared)),
            myself.get_cell(),
        )
        .await?;
        self.orgs.insert(org_id, org.clone());
        Ok(org)
    }
}

#[ractor::async_trait]
impl<M: Send + 'static> Actor for RootActor<M> {
    type Msg = RootMsg;
    type State = RootState<M>;
    type Arguments = Arc<EngineShared<M>>;

    async fn pre_start(
        &self,
        _myself: ActorRef<RootMsg>,
        shared: Arc<EngineShared<M>>,
    ) -> Result<RootState<M>, ActorProcessingErr> {
        Ok(RootState {
            shared,
            orgs: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<RootMsg>,
        msg: RootMsg,
        state: &mut RootState<M>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RootMsg::Enqueue(job) => {
                let org = state.org(&myself, job.org_id).await?;
                org.send_message(OrgMsg::Enqueue(job))?;
            }
            RootMsg::Admit(job, wait, reply) => {
                let org = state.org(&myself, job.org_id).await?;
                // The org actor answers the caller's port itself, so the root never waits on it.
                org.send_message(OrgMsg::Admit(job, wait, reply))?;
            }
            RootMsg::IsHolding(org_id, call_id, reply) => match state.orgs.get(&org_id) {
                Some(org) => org.send_message(OrgMsg::IsHolding(call_id, reply))?,
                None => {
                    let _ = reply.send(false);
                }
            },
            RootMsg::Cancel(org_id, call_id, reply) => match state.orgs.get(&org_id) {
                Some(org) => {
                    let outcome = ractor::call!(org, OrgMsg::Cancel, call_id)
                        .unwrap_or(CancelOutcome::NotFound);
                    let _ = reply.send(outcome);
                }
                None => {
                    let _ = reply.send(CancelOutcome::NotFound);
                }
            },
            RootMsg::Snapshot(org_id, reply) => {
                let snapshot = match state.orgs.get(&org_id) {
                    Some(org) => ractor::call!(org, OrgMsg::Snapshot).unwrap_or_default(),
                    None => OrgSnapshot::default(),
                };
                let _ = reply.send(snapshot);
            }
            RootMsg::FeedBatch(registration) => {
                let org = state.org(&myself, registration.org_id).await?;
                org.send_message(OrgMsg::FeedBatch(registration))?;
            }
            RootMsg::FedBatches(org_id, reply) => {
                let batches = match state.orgs.get(&org_id) {
                    Some(org) => ractor::call!(org, OrgMsg::FedBatches).unwrap_or_default(),
                    None => Vec::new(),
                };
                let _ = reply.send(batches);
            }
            RootMsg::Pump => {
                for org in state.orgs.values() {
                    org.send_message(OrgMsg::Pump)?;
                }
            }
        }
        Ok(())
    }

    /// An org actor that dies is forgotten and its queued calls handed back for
    /// re-dispatch; the root itself never stops because a child did.
    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<RootMsg>,
        event: SupervisionEvent,
        state: &mut RootState<M>,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => (cell, reason),
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string())),
            _ => return Ok(()),
        };
        let id = cell.get_id();
        let dead: Vec<OrgId> = state
            .orgs
            .iter()
            .filter(|(_, r)| r.get_id() == id)
            .map(|(k, _)| *k)
            .collect();
        for org_id in dead {
            state.orgs.remove(&org_id);
            tracing::error!(org = %org_id, reason = ?failure, "org actor stopped; re-dispatching its queue");
            if let Err(err) = state.shared.config.ledger.release_queued(org_id).await {
                tracing::error!(org = %org_id, error = %err, "could not release queued calls");
            }
        }
        Ok(())
    }
}

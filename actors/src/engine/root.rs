//! The root supervisor: spawns one org actor per workspace on first use and
//! outlives their failures.

use super::org_actor::{OrgActor, OrgMsg};
use super::{BatchRegistration, CallJob, CancelOutcome, EngineShared, OrgSnapshot};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::sync::Arc;

/// Messages of the root actor.
pub(crate) enum RootMsg {
    /// Route a call to its org actor.
    Enqueue(CallJob),
    /// Cancel a call of an org.
    Cancel(String, String, RpcReplyPort<CancelOutcome>),
    /// Slot usage of an org.
    Snapshot(String, RpcReplyPort<OrgSnapshot>),
    /// Route a started batch to its org actor's round-robin.
    FeedBatch(BatchRegistration),
    /// The batches an org is pulling from.
    FedBatches(String, RpcReplyPort<Vec<String>>),
    /// Every org fills its free slots (calls may start again after a pause).
    Pump,
}

pub(crate) struct RootActor;

pub(crate) struct RootState {
    shared: Arc<EngineShared>,
    orgs: HashMap<String, ActorRef<OrgMsg>>,
}

impl RootState {
    async fn org(
        &mut self,
        myself: &ActorRef<RootMsg>,
        org_id: &str,
    ) -> Result<ActorRef<OrgMsg>, ActorProcessingErr> {
        if let Some(org) = self.orgs.get(org_id) {
            return Ok(org.clone());
        }
        let (org, _) = Actor::spawn_linked(
            None,
            OrgActor,
            (org_id.to_string(), Arc::clone(&self.shared)),
            myself.get_cell(),
        )
        .await?;
        self.orgs.insert(org_id.to_string(), org.clone());
        Ok(org)
    }
}

#[ractor::async_trait]
impl Actor for RootActor {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = Arc<EngineShared>;

    async fn pre_start(
        &self,
        _myself: ActorRef<RootMsg>,
        shared: Arc<EngineShared>,
    ) -> Result<RootState, ActorProcessingErr> {
        Ok(RootState {
            shared,
            orgs: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<RootMsg>,
        msg: RootMsg,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RootMsg::Enqueue(job) => {
                let org = state.org(&myself, &job.org_id).await?;
                org.send_message(OrgMsg::Enqueue(job))?;
            }
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
                let org = state.org(&myself, &registration.org_id).await?;
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
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => (cell, reason),
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string())),
            _ => return Ok(()),
        };
        let id = cell.get_id();
        let dead: Vec<String> = state
            .orgs
            .iter()
            .filter(|(_, r)| r.get_id() == id)
            .map(|(k, _)| k.clone())
            .collect();
        for org_id in dead {
            state.orgs.remove(&org_id);
            tracing::error!(org = %org_id, reason = ?failure, "org actor stopped; re-dispatching its queue");
            if let Err(err) = state.shared.config.ledger.release_queued(&org_id).await {
                tracing::error!(org = %org_id, error = %err, "could not release queued calls");
            }
        }
        Ok(())
    }
}

//! The dispatcher of a node sharing a Postgres database: claims queued calls
//! within each workspace's slots counted across every node, and feeds the
//! running batches this node holds the lease of into the queue.
//!
//! It wakes when a call is queued or ends anywhere (a trigger sends
//! [`DISPATCH_CHANNEL`]) and on every dispatch interval, so a lost
//! notification delays a call by one interval at most. One pass runs at a
//! time per node; across nodes the per-workspace advisory lock of
//! [`Store::claim_calls_for_node`](crate::store::Store::claim_calls_for_node)
//! orders the claims. A claimed call already holds its slot, so the engine
//! starts it at once: the org actor owns this node's share of the slots.

use super::service::ClusterService;
use crate::batches::feed::StoreBatchFeed;
use crate::calls::job::{job_for, stored_variables};
use crate::domain::agent::AgentStatus;
use crate::domain::{AgentId, BatchId, OrgId};
use crate::store::calls::DispatchRow;
use crate::store::nodes::DISPATCH_CHANNEL;
use crate::store::slots::Share;
use crate::store::{OrgRow, StoreError};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::broadcast::error::TryRecvError;
use tokio_util::sync::CancellationToken;
use voxline_actors::ended_reason::EndedReason;

/// Workspaces looked at per pass.
const ORGS_PER_PASS: i64 = 200;

impl ClusterService {
    /// Runs passes until `stop` fires: on a notification and on every `period`.
    pub async fn run_dispatcher(&self, period: Duration, stop: CancellationToken) {
        let mut wakes = self
            .bus
            .as_ref()
            .and_then(|bus| bus.subscribe(DISPATCH_CHANNEL));
        let mut turns = BatchTurns::default();
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let share = tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticker.tick() => Share::Any,
                woke = async {
                    match wakes.as_mut() {
                        Some(rx) => rx.recv().await.is_ok(),
                        None => std::future::pending().await,
                    }
                } => {
                    if !woke {
                        // Lagged or closed: a pass covers whatever was missed.
                        wakes = self.bus.as_ref().and_then(|bus| bus.subscribe(DISPATCH_CHANNEL));
                    }
                    Share::Fair
                }
            };
            // Many wakes arrive in bursts (a batch of inserts); one pass serves them all.
            if let Some(rx) = wakes.as_mut() {
                while let Ok(_) | Err(TryRecvError::Lagged(_)) = rx.try_recv() {}
            }
            if let Err(err) = self.dispatch_pass(share, &mut turns).await {
                tracing::warn!(error = %err, "cluster dispatch pass failed");
            }
        }
    }

    /// One pass: feeds leased batches into the queue, then claims what this
    /// node may start: on a notification its fair part of each workspace's
    /// slots, on the periodic tick whatever part of the free slots is left.
    /// Returns the calls it started.
    pub async fn dispatch_pass(
        &self,
        share: Share,
        turns: &mut BatchTurns,
    ) -> Result<usize, StoreError> {
        if self.engine.is_draining() {
            return Ok(0);
        }
        let now = self.clock.now().timestamp_millis();
        let lease_ms = self.node.lease_ms();
        self.feed_batches(now, lease_ms, turns).await?;
        if !self.node_status.takes_calls() {
            return Ok(0);
        }
        let mut room = match self.node.max_live_calls {
            Some(max) => {
                i64::from(max) - i64::try_from(self.engine.live_calls()).unwrap_or(i64::MAX)
            }
            None => i64::MAX,
        };
        let nodes = self.store.nodes_taking_calls(now, lease_ms).await?;
        let mut agents = HashMap::new();
        let mut started = 0;
        for org_id in self
            .store
            .orgs_with_unclaimed_calls(now, ORGS_PER_PASS)
            .await?
        {
            if room <= 0 {
                break;
            }
            let claimed = self
                .store
                .claim_calls_for_node(org_id, &self.node_id, now, nodes, share, room)
                .await?;
            for row in claimed.calls {
                room -= 1;
                if self.start_claimed(&mut agents, row).await? {
                    started += 1;
                }
            }
        }
        Ok(started)
    }

    /// Hands a claimed call to the local engine; fails it when its agent cannot run it.
    async fn start_claimed(
        &self,
        agents: &mut HashMap<AgentId, Option<(OrgRow, crate::domain::agent::AgentSpec)>>,
        row: DispatchRow,
    ) -> Result<bool, StoreError> {
        if let std::collections::hash_map::Entry::Vacant(slot) = agents.entry(row.agent_id) {
            let found = match (
                self.store.org(row.org_id).await?,
                self.store.agent(row.org_id, row.agent_id).await?,
            ) {
                (Some(org), Some(agent)) if agent.status() == AgentStatus::Active => {
                    agent.spec().ok().map(|spec| (org, spec))
                }
                _ => None,
            };
            slot.insert(found);
        }
        let Some(Some((org, spec))) = agents.get(&row.agent_id) else {
            self.calls.fail(row.id, EndedReason::AgentUnavailable).await;
            return Ok(false);
        };
        // A scheduled retry is checked again at dial time: a number listed
        // or capped meanwhile is not dialed, and outside its calling hours it
        // goes back to the queue. (Batch items were checked when queued, which
        // happens only when a slot is free; single calls when placed.)
        if row.attempt > 1 {
            let now = self.clock.now().timestamp_millis();
            if !self.calls.rules_allow(&row, now).await?
                || !self.calls.within_calling_hours(&row, org, spec).await?
            {
                return Ok(false);
            }
        }
        let concurrency = org.concurrency;
        let Ok(variables) = stored_variables(row.id, &row.variables) else {
            self.calls.fail(row.id, EndedReason::EngineError).await;
            return Ok(false);
        };
        let mut job = job_for(
            row.id,
            row.org_id,
            concurrency,
            &row.phone,
            &row.from_number,
            &row.provider,
            spec,
            &variables,
            self.calls.ring_seconds,
        );
        // The slot is held in the database since the claim: start at once.
        job.bypass_slots = true;
        if let Err(err) = self.engine.enqueue(job) {
            tracing::error!(call = %row.id, error = %err, "engine refused a claimed call; handing it back");
            self.store
                .release_queued_calls_of_node(Some(&self.node_id))
                .await?;
            return Ok(false);
        }
        Ok(true)
    }
}

/// Whose turn it is among each workspace's running batches on this node.
///
/// Kept per workspace: a turn shared by all workspaces would move with every
/// other workspace's items, and one workspace's batches would then be fed in
/// an order other workspaces' traffic picks, not alternately.
#[derive(Debug, Default)]
pub struct BatchTurns(HashMap<OrgId, usize>);

impl ClusterService {
    /// Takes or renews the leases of running batches and queues as many of
    /// their items as their workspace has room for: a batch never floods the
    /// queue, and test calls queued meanwhile keep their turn. A workspace's
    /// batches take turns, one item each, carrying the turn from pass to pass,
    /// so none waits behind another.
    async fn feed_batches(
        &self,
        now: i64,
        lease_ms: i64,
        turns: &mut BatchTurns,
    ) -> Result<(), StoreError> {
        let mut by_org: HashMap<OrgId, Vec<BatchId>> = HashMap::new();
        for (batch_id, org_id) in self
            .store
            .lease_running_batches(&self.node_id, now, lease_ms)
            .await?
        {
            by_org.entry(org_id).or_default().push(batch_id);
        }
        // Workspaces with no running batch here start afresh next time.
        turns.0.retain(|org_id, _| by_org.contains_key(org_id));
        for (org_id, mut batches) in by_org {
            // The turn moves on with every item queued, so on one node the
            // batches alternate strictly however few slots free at a time.
            let turn = turns.0.entry(org_id).or_default();
            batches.sort();
            let len = batches.len();
            batches.rotate_left(*turn % len);
            let mut room = self.store.org_room_for_batch_calls(org_id).await?;
            // One feed per batch: a feed caches its batch's dial plan.
            let feeds: HashMap<BatchId, _> = batches
                .iter()
                .map(|b| (*b, StoreBatchFeed::new(self.calls.clone())))
                .collect();
            while room > 0 && !batches.is_empty() {
                let mut drained = Vec::new();
                for batch_id in &batches {
                    if room == 0 {
                        break;
                    }
                    let Some(feed) = feeds.get(batch_id) else {
                        continue;
                    };
                    match feed.queue_next(*batch_id).await {
                        Ok(true) => {
                            room -= 1;
                            *turn = turn.wrapping_add(1);
                        }
                        Ok(false) => drained.push(*batch_id),
                        Err(err) => {
                            tracing::warn!(batch = %batch_id, error = %err, "could not queue a batch item");
                            drained.push(*batch_id);
                        }
                    }
                }
                batches.retain(|b| !drained.contains(b));
            }
        }
        Ok(())
    }
}

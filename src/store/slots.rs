//! A workspace's concurrency slots counted across every node of a shared
//! (Postgres) database, and the claims that take them.
//!
//! A call holds a slot from the moment a node claims it from the queue until
//! it ends. The count and the claim happen in one transaction under a
//! per-workspace advisory lock, so two nodes claiming at once never exceed
//! the workspace's concurrency; `FOR UPDATE SKIP LOCKED` keeps the claims of
//! one workspace's rows from blocking each other. Announcements outside a
//! batch do not hold a slot (spec, Alert rule 5), as on one node.

use super::calls::DispatchRow;
use super::{Db, Store, StoreResult};
use crate::domain::{BatchId, NodeId, OrgId};

/// How much of a workspace's free slots one node's claim may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// Up to the node's fair part of the workspace's concurrency.
    Fair,
    /// A part of the free slots, at least one.
    Any,
}

/// What one claim took for a node.
#[derive(Debug, Default)]
pub struct Claimed {
    /// Calls now owned by the node, in queue order.
    pub calls: Vec<DispatchRow>,
    /// Slots still free after the claim.
    pub free_after: i64,
}

impl Store {
    /// Workspaces with queued calls due at `now_ms` that no node claimed, oldest first.
    pub async fn orgs_with_unclaimed_calls(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<OrgId>> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(Vec::new());
        };
        let ids = sqlx::query_scalar::<_, OrgId>(
            "SELECT org_id FROM calls WHERE status = 'queued' AND dispatched = FALSE AND not_before <= $1
             GROUP BY org_id ORDER BY MIN(not_before) LIMIT $2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(pool)
        .await?;
        Ok(ids)
    }

    /// Claims for `node` the workspace's due queued calls, oldest first:
    /// every announcement outside a batch, and slot-holding calls within the
    /// free slots and at most `max_slot_calls`. With [`Share::Fair`] the node
    /// takes no more than brings it to its fair part of the workspace's
    /// concurrency (`1/nodes`, rounded up), so the nodes a notification
    /// wakes together spread the calls; with [`Share::Any`] (a periodic pass)
    /// it takes a `1/nodes` part of the free slots, at least one, so slots
    /// never stay idle behind a node that is slow to claim.
    pub async fn claim_calls_for_node(
        &self,
        org_id: OrgId,
        node: &NodeId,
        now_ms: i64,
        nodes: i64,
        share: Share,
        max_slot_calls: i64,
    ) -> StoreResult<Claimed> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(Claimed::default());
        };
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('voxline-slots:' || $1, 0))")
            .bind(org_id)
            .execute(&mut *tx)
            .await?;
        let concurrency: i64 = sqlx::query_scalar("SELECT concurrency FROM orgs WHERE id = $1")
            .bind(org_id)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or(1);
        let (taken, mine): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE node_id = $2) FROM calls
             WHERE org_id = $1 AND node_id IS NOT NULL AND holds_slot
               AND status IN ('queued', 'ringing', 'in-progress')",
        )
        .bind(org_id)
        .bind(node)
        .fetch_one(&mut *tx)
        .await?;
        let mut calls: Vec<DispatchRow> = sqlx::query_as::<_, ClaimedRow>(
            "UPDATE calls SET dispatched = TRUE, node_id = $2, holds_slot = FALSE
             WHERE id IN (SELECT id FROM calls
               WHERE org_id = $1 AND status = 'queued' AND dispatched = FALSE AND not_before <= $3
                 AND engine = 'announcement' AND batch_id IS NULL
               ORDER BY not_before, created_at, id LIMIT 500 FOR UPDATE SKIP LOCKED)
             RETURNING id, org_id, agent_id, engine, phone, from_number, provider, variables,
               attempt, batch_id, calling_hours_override, not_before, created_at",
        )
        .bind(org_id)
        .bind(node)
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await
        .map(strip_order)?;
        // Inbound callers holding for a slot (on any node) come before every
        // queued outbound call: their nodes claim the slots as they free.
        let holding: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM calls WHERE org_id = $1 AND status = 'queued'
               AND direction = 'inbound' AND NOT holds_slot",
        )
        .bind(org_id)
        .fetch_one(&mut *tx)
        .await?;
        let free = (concurrency.max(1) - taken - holding).max(0);
        let nodes = nodes.max(1);
        let concurrency = concurrency.max(1);
        let part = match share {
            Share::Fair => ((concurrency + nodes - 1) / nodes - mine).max(0),
            Share::Any => (free + nodes - 1) / nodes,
        };
        let take = part.min(free).min(max_slot_calls.max(0));
        let mut took = 0;
        if take > 0 {
            let slot_calls: Vec<DispatchRow> = sqlx::query_as::<_, ClaimedRow>(
                "UPDATE calls SET dispatched = TRUE, node_id = $2, holds_slot = TRUE
                 WHERE id IN (SELECT id FROM calls
                   WHERE org_id = $1 AND status = 'queued' AND dispatched = FALSE AND not_before <= $3
                     AND NOT (engine = 'announcement' AND batch_id IS NULL)
                   ORDER BY not_before, created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)
                 RETURNING id, org_id, agent_id, engine, phone, from_number, provider, variables,
                   attempt, batch_id, calling_hours_override, not_before, created_at",
            )
            .bind(org_id)
            .bind(node)
            .bind(now_ms)
            .bind(take)
            .fetch_all(&mut *tx)
            .await
            .map(strip_order)?;
            took = i64::try_from(slot_calls.len()).unwrap_or(i64::MAX);
            calls.extend(slot_calls);
        }
        tx.commit().await?;
        Ok(Claimed {
            calls,
            free_after: free - took,
        })
    }

    /// Slots of a workspace neither held nor promised: its concurrency, less
    /// the calls holding a slot and the queued calls no node claimed yet.
    /// What a batch may add to the queue without flooding it.
    pub async fn org_room_for_batch_calls(&self, org_id: OrgId) -> StoreResult<i64> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(0);
        };
        let room: Option<i64> = sqlx::query_scalar(
            "SELECT o.concurrency - (SELECT COUNT(*) FROM calls c WHERE c.org_id = o.id
                 AND c.status IN ('queued', 'ringing', 'in-progress')
                 AND ((c.node_id IS NOT NULL AND c.holds_slot) OR c.dispatched = FALSE))
             FROM orgs o WHERE o.id = $1",
        )
        .bind(org_id)
        .fetch_optional(pool)
        .await?;
        Ok(room.unwrap_or(0).max(0))
    }

    /// Takes or renews this node's lease on running batches with items to
    /// dial: those it holds, those nobody holds, and those whose holder let
    /// the lease run out (a dead node's). Returns them with their workspace.
    pub async fn lease_running_batches(
        &self,
        node: &NodeId,
        now_ms: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<(BatchId, OrgId)>> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query_as::<_, (BatchId, OrgId)>(
            "UPDATE batches SET lease_node = $1, lease_until = $2
             WHERE status = 'running'
               AND (lease_node IS NULL OR lease_node = $1 OR lease_until < $3)
               AND EXISTS (SELECT 1 FROM batch_items i WHERE i.batch_id = batches.id AND i.status = 'pending')
             RETURNING id, org_id",
        )
        .bind(node)
        .bind(now_ms + lease_ms)
        .bind(now_ms)
        .fetch_all(pool)
        .await?;
        Ok(rows)
    }
}

/// Drops the ordering columns a claim returns alongside the row.
fn strip_order(rows: Vec<ClaimedRow>) -> Vec<DispatchRow> {
    let mut rows = rows;
    rows.sort_by_key(|r| (r.not_before, r.created_at));
    rows.into_iter().map(|r| r.row).collect()
}

/// A claimed row with what orders it (`RETURNING` gives no order).
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    row: DispatchRow,
    not_before: i64,
    created_at: i64,
}

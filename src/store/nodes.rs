//! Nodes sharing one database: their heartbeats, the calls they own, the
//! recovery of a dead node's work, and the channel they talk on.
//!
//! On SQLite there is one node; the rows exist so reads and the admin CLI are
//! the same on both databases, and nothing here is called on the hot path.

use super::{Db, Store, StoreResult, with_pool, with_writer};
use crate::domain::{CallId, NodeId, OrgId};

/// One node as stored.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    /// The node's id.
    pub id: NodeId,
    /// Base URL carriers reach it on.
    pub public_url: String,
    /// When it started, Unix ms.
    pub started_at: i64,
    /// Its last heartbeat, Unix ms.
    pub heartbeat_at: i64,
    /// Whether it takes no new calls.
    pub draining: bool,
    /// Live calls at the last heartbeat.
    pub live_calls: i64,
    /// CPU use at the last heartbeat, per mille of one core.
    pub cpu_permille: i64,
    /// Whether it was above its load threshold at the last heartbeat.
    pub overloaded: bool,
    /// When a survivor recovered its work (or it stopped cleanly), Unix ms.
    pub lost_at: Option<i64>,
}

/// What a heartbeat reports.
#[derive(Debug, Clone, Copy)]
pub struct NodeLoad {
    /// Live call actors on the node.
    pub live_calls: i64,
    /// CPU use, per mille of one core.
    pub cpu_permille: i64,
    /// Above the configured threshold.
    pub overloaded: bool,
}

/// What the database says back to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeOrders {
    /// An operator asked the node to drain.
    pub draining: bool,
    /// A peer took the node for dead and recovered its work.
    pub lost: bool,
}

/// A live call of a node: `(id, status, answered_at, last sign of life)`.
pub type LiveCallRow = (CallId, String, Option<i64>, Option<i64>);

/// The Postgres channel dispatchers listen on; the payload is an org id
/// (sent by triggers when a call is queued or ends).
pub const DISPATCH_CHANNEL: &str = "voxline_dispatch";
/// The channel of orders to a call's owner node (carrier statuses and
/// cancels that reached another node); the payload is JSON.
pub const CALLS_CHANNEL: &str = "voxline_calls";
/// The channel of API key changes (revocations, caps); the payload is the key's hash.
pub const KEYS_CHANNEL: &str = "voxline_keys";
/// The channel of agent changes; the payload is the agent's id.
pub const AGENTS_CHANNEL: &str = "voxline_agents";
/// The channel of workspace credential changes; the payload is the workspace's id.
pub const CREDENTIALS_CHANNEL: &str = "voxline_credentials";
/// Every channel a node listens on.
pub const ALL_CHANNELS: [&str; 5] = [
    DISPATCH_CHANNEL,
    CALLS_CHANNEL,
    KEYS_CHANNEL,
    AGENTS_CHANNEL,
    CREDENTIALS_CHANNEL,
];

impl Store {
    /// Registers (or re-registers after a restart) a node as alive and not draining.
    pub async fn register_node(
        &self,
        id: &NodeId,
        public_url: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO nodes (id, public_url, started_at, heartbeat_at) VALUES ($1, $2, $3, $3)
                 ON CONFLICT (id) DO UPDATE SET public_url = $2, started_at = $3, heartbeat_at = $3,
                   draining = FALSE, live_calls = 0, cpu_permille = 0, overloaded = FALSE, lost_at = NULL",
            )
            .bind(id)
            .bind(public_url)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Stamps a node's heartbeat and load; returns what operators and peers decided.
    pub async fn node_heartbeat(
        &self,
        id: &NodeId,
        load: NodeLoad,
        now_ms: i64,
    ) -> StoreResult<NodeOrders> {
        let row = with_writer!(self, pool => {
            sqlx::query_as::<_, (bool, Option<i64>)>(
                "UPDATE nodes SET heartbeat_at = $2, live_calls = $3, cpu_permille = $4, overloaded = $5
                 WHERE id = $1 RETURNING draining, lost_at",
            )
            .bind(id)
            .bind(now_ms)
            .bind(load.live_calls)
            .bind(load.cpu_permille)
            .bind(load.overloaded)
            .fetch_optional(pool)
            .await?
        });
        Ok(match row {
            Some((draining, lost_at)) => NodeOrders {
                draining,
                lost: lost_at.is_some(),
            },
            // A row deleted by hand: the node is as good as lost.
            None => NodeOrders {
                draining: false,
                lost: true,
            },
        })
    }

    /// Marks a node gone (a clean stop): peers need not wait for its lease.
    pub async fn node_stopped(&self, id: &NodeId, now_ms: i64) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query("UPDATE nodes SET lost_at = $2, live_calls = 0 WHERE id = $1")
                .bind(id)
                .bind(now_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Every node ever registered, alive first, then by id.
    pub async fn nodes(&self) -> StoreResult<Vec<NodeRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, NodeRow>(
                "SELECT id, public_url, started_at, heartbeat_at, draining, live_calls, cpu_permille,
                   overloaded, lost_at FROM nodes ORDER BY (lost_at IS NOT NULL), id",
            )
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Sets or clears a node's draining flag; false when no such node.
    pub async fn set_node_draining(&self, id: &NodeId, draining: bool) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query("UPDATE nodes SET draining = $2 WHERE id = $1")
                .bind(id)
                .bind(draining)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Nodes alive at `now_ms` (heartbeat within the lease) that take calls:
    /// not draining, not overloaded. At least one is counted.
    pub async fn nodes_taking_calls(&self, now_ms: i64, lease_ms: i64) -> StoreResult<i64> {
        let n = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM nodes
                 WHERE lost_at IS NULL AND heartbeat_at >= $1 AND NOT draining AND NOT overloaded",
            )
            .bind(now_ms - lease_ms)
            .fetch_one(pool)
            .await?
        });
        Ok(n.max(1))
    }

    /// Claims a dead peer for recovery: true for exactly one survivor, and
    /// only while the peer's heartbeat is still older than the lease.
    pub async fn claim_dead_node(
        &self,
        id: &NodeId,
        now_ms: i64,
        lease_ms: i64,
    ) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query("UPDATE nodes SET lost_at = $2 WHERE id = $1 AND lost_at IS NULL AND heartbeat_at < $3")
                .bind(id)
                .bind(now_ms)
                .bind(now_ms - lease_ms)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Peers whose heartbeat is older than the lease and whose work nobody recovered yet.
    pub async fn expired_nodes(
        &self,
        me: &NodeId,
        now_ms: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<NodeId>> {
        let ids = with_pool!(self, pool => {
            sqlx::query_scalar::<_, NodeId>(
                "SELECT id FROM nodes WHERE lost_at IS NULL AND heartbeat_at < $1 AND id <> $2",
            )
            .bind(now_ms - lease_ms)
            .bind(me)
            .fetch_all(pool)
            .await?
        });
        Ok(ids)
    }

    /// Ringing or answered calls owned by `node` (None: by no node, calls
    /// from before nodes existed), with the last sign of life of each.
    pub async fn live_calls_of_node(&self, node: Option<&NodeId>) -> StoreResult<Vec<LiveCallRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (CallId, String, Option<i64>, Option<i64>, Option<i64>)>(
                "SELECT c.id, c.status, c.answered_at, c.last_seen_at,
                   (SELECT MAX(t.created_at) FROM call_turns t WHERE t.call_id = c.id)
                 FROM calls c WHERE (c.status IN ('ringing', 'in-progress')
                     OR (c.status = 'queued' AND c.direction = 'inbound'))
                   AND (c.node_id = $1 OR ($1 IS NULL AND c.node_id IS NULL))",
            )
            .bind(node)
            .fetch_all(pool)
            .await?
        });
        // The later of the heartbeat and the last stored turn: a turn can
        // land just after the last heartbeat. (`None` orders before `Some`.)
        Ok(rows
            .into_iter()
            .map(|(id, status, answered, seen, turn)| (id, status, answered, seen.max(turn)))
            .collect())
    }

    /// Hands the queued calls a node had claimed (and not dialed yet) back
    /// to every node's dispatcher; None: those claimed by no node. Inbound
    /// callers holding for a slot are never handed on: nobody dials a caller
    /// (they are among [`Store::live_calls_of_node`] and end with the node).
    pub async fn release_queued_calls_of_node(&self, node: Option<&NodeId>) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE calls SET dispatched = FALSE, node_id = NULL
                 WHERE status = 'queued' AND direction = 'outbound'
                   AND (node_id = $1 OR ($1 IS NULL AND node_id IS NULL))",
            )
            .bind(node)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Gives up a node's batch leases, so the next node takes the batches over at once.
    pub async fn release_batch_leases_of_node(&self, node: &NodeId) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query("UPDATE batches SET lease_node = NULL, lease_until = NULL WHERE lease_node = $1")
                .bind(node)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n)
    }

    /// The signing secret every node shares: the stored one, or `fresh`
    /// stored now when there is none yet (the first node to start wins).
    pub async fn shared_secret(&self, fresh: &str) -> StoreResult<String> {
        let secret = with_writer!(self, pool => {
            sqlx::query("INSERT INTO cluster_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING")
                .bind(fresh)
                .execute(pool)
                .await?;
            sqlx::query_scalar::<_, String>("SELECT secret FROM cluster_secret WHERE id = 1")
                .fetch_one(pool)
                .await?
        });
        Ok(secret)
    }

    /// Live calls of a workspace's slots across every node: claimed by a
    /// node and not ended, announcements outside the slots not counted.
    pub async fn org_slots_taken(&self, org_id: OrgId) -> StoreResult<i64> {
        let n = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM calls WHERE org_id = $1 AND node_id IS NOT NULL AND holds_slot
                   AND status IN ('queued', 'ringing', 'in-progress')",
            )
            .bind(org_id)
            .fetch_one(pool)
            .await?
        });
        Ok(n)
    }

    /// Sends `payload` on a Postgres channel; nothing on SQLite (one node).
    pub async fn notify(&self, channel: &str, payload: &str) -> StoreResult<()> {
        if let Db::Postgres(pool) = &self.db {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(channel)
                .bind(payload)
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    /// A listener on `channels` (Postgres only; None on SQLite).
    pub async fn listen(
        &self,
        channels: &[&str],
    ) -> StoreResult<Option<sqlx::postgres::PgListener>> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(None);
        };
        let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(Some(listener))
    }

    /// Resolves once [`Store::close`] was called: a task holding one of the
    /// pool's connections for good (the bus's listener) must give it back,
    /// or the close waits forever.
    pub async fn closed(&self) {
        with_pool!(self, pool => pool.close_event().await);
    }

    /// Whether several nodes may share this database (Postgres).
    pub fn is_shared(&self) -> bool {
        matches!(self.db, Db::Postgres(_))
    }
}

impl Store {
    /// Peers marked lost that still own live or claimed calls: a survivor
    /// that claimed them died before it finished, or they came back and
    /// went again; every pass finishes their recovery.
    pub async fn lost_nodes_with_calls(&self, me: &NodeId) -> StoreResult<Vec<NodeId>> {
        let ids = with_pool!(self, pool => {
            sqlx::query_scalar::<_, NodeId>(
                "SELECT n.id FROM nodes n WHERE n.lost_at IS NOT NULL AND n.id <> $1 AND EXISTS (
                   SELECT 1 FROM calls c WHERE c.node_id = n.id AND c.status IN ('queued', 'ringing', 'in-progress'))",
            )
            .bind(me)
            .fetch_all(pool)
            .await?
        });
        Ok(ids)
    }

    /// The node that owns a call, if a node claimed it.
    pub async fn call_node(&self, call_id: CallId) -> StoreResult<Option<NodeId>> {
        let node = with_pool!(self, pool => {
            sqlx::query_scalar::<_, Option<NodeId>>("SELECT node_id FROM calls WHERE id = $1")
                .bind(call_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(node.flatten())
    }

    /// Whether a node's heartbeat is within the lease and nobody took it for lost.
    pub async fn node_is_alive(
        &self,
        id: &NodeId,
        now_ms: i64,
        lease_ms: i64,
    ) -> StoreResult<bool> {
        let alive = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM nodes WHERE id = $1 AND lost_at IS NULL AND heartbeat_at >= $2",
            )
            .bind(id)
            .bind(now_ms - lease_ms)
            .fetch_one(pool)
            .await?
        });
        Ok(alive > 0)
    }
}

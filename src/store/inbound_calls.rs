//! Storing a call a person placed to one of the workspace's numbers, and, on
//! a shared (Postgres) database, taking its slot in the same transaction.

use super::calls::{NewCall, insert_calls_in};
use super::{Db, Store, StoreResult, with_pool};
use crate::domain::inbound::CallDirection;
use crate::domain::{CallId, NodeId, OrgId};
use crate::store::BeginWrite;

/// Whether a stored inbound call holds one of its workspace's slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundSlot {
    /// One node on SQLite: the engine's org actor counts the slots.
    ForEngine,
    /// Shared database: the call holds a slot counted across every node, owned by this node.
    Taken,
    /// Shared database: every slot is held; the call is stored, not yet ended.
    Full,
}

impl Store {
    /// Stores `call` as an inbound call to `to_number` (`dispatched`, since
    /// the node that answered the carrier runs it). On a shared database the
    /// count of the workspace's held slots and the claim of one happen under
    /// the workspace's slot lock, as the dispatcher's claims do, so inbound
    /// and outbound calls together never exceed its concurrency on any node.
    pub async fn insert_inbound_call(
        &self,
        call: &NewCall,
        to_number: &str,
        node: &NodeId,
    ) -> StoreResult<InboundSlot> {
        let direction = CallDirection::Inbound;
        match &self.write_db {
            Db::Sqlite(pool) => {
                let mut tx = pool.begin_write().await?;
                insert_calls_in(&mut tx, std::slice::from_ref(call)).await?;
                sqlx::query("UPDATE calls SET direction = $1, to_number = $2 WHERE id = $3")
                    .bind(direction)
                    .bind(to_number)
                    .bind(call.id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(InboundSlot::ForEngine)
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "SELECT pg_advisory_xact_lock(hashtextextended('voxline-slots:' || $1, 0))",
                )
                .bind(call.org_id)
                .execute(&mut *tx)
                .await?;
                let concurrency: i64 =
                    sqlx::query_scalar("SELECT concurrency FROM orgs WHERE id = $1")
                        .bind(call.org_id)
                        .fetch_optional(&mut *tx)
                        .await?
                        .unwrap_or(1);
                let taken: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM calls
                     WHERE org_id = $1 AND node_id IS NOT NULL AND holds_slot
                       AND status IN ('queued', 'ringing', 'in-progress')",
                )
                .bind(call.org_id)
                .fetch_one(&mut *tx)
                .await?;
                let free = taken < concurrency.max(1);
                insert_calls_in(&mut tx, std::slice::from_ref(call)).await?;
                sqlx::query(
                    "UPDATE calls SET direction = $1, to_number = $2, node_id = $3, holds_slot = $4,
                       dispatched = TRUE
                     WHERE id = $5",
                )
                .bind(direction)
                .bind(to_number)
                .bind(node)
                .bind(free)
                .bind(call.id)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(if free {
                    InboundSlot::Taken
                } else {
                    InboundSlot::Full
                })
            }
        }
    }

    /// The hold message of the number an inbound call rang (`None`: the default).
    pub async fn inbound_hold_message(&self, call_id: CallId) -> StoreResult<Option<String>> {
        let message = with_pool!(self, pool => {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT n.inbound_hold_message FROM calls c JOIN phone_numbers n ON n.phone = c.to_number
                 WHERE c.id = $1",
            )
            .bind(call_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(message.flatten())
    }

    /// Shared database: claims a slot for an inbound caller held on this node,
    /// if one is free and no caller who rang the workspace earlier still holds.
    /// `false` also when the call is no longer held (it ended).
    pub async fn claim_held_inbound_slot(&self, call_id: CallId) -> StoreResult<bool> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(false);
        };
        let mut tx = pool.begin().await?;
        let Some((org_id, created_at)) = sqlx::query_as::<_, (OrgId, i64)>(
            "SELECT org_id, created_at FROM calls WHERE id = $1 AND status = 'queued' AND NOT holds_slot",
        )
        .bind(call_id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(false);
        };
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('voxline-slots:' || $1, 0))")
            .bind(org_id)
            .execute(&mut *tx)
            .await?;
        let (concurrency, taken, earlier): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT concurrency FROM orgs WHERE id = $1),
               (SELECT COUNT(*) FROM calls WHERE org_id = $1 AND node_id IS NOT NULL AND holds_slot
                  AND status IN ('queued', 'ringing', 'in-progress')),
               (SELECT COUNT(*) FROM calls WHERE org_id = $1 AND status = 'queued'
                  AND direction = 'inbound' AND NOT holds_slot AND (created_at, id) < ($2, $3))",
        )
        .bind(org_id)
        .bind(created_at)
        .bind(call_id)
        .fetch_one(&mut *tx)
        .await?;
        if taken + earlier >= concurrency.max(1) {
            return Ok(false);
        }
        let claimed = sqlx::query(
            "UPDATE calls SET holds_slot = TRUE WHERE id = $1 AND status = 'queued' AND NOT holds_slot",
        )
        .bind(call_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(claimed == 1)
    }
}

//! The wallet ledger and the recordings list.

use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::{CallId, NumberId, OrgId, Paise, WalletTxId};
use crate::store::BeginWrite;

/// One wallet movement.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WalletTxRow {
    /// Transaction id.
    pub id: WalletTxId,
    /// credit, call-charge or number-renewal.
    pub kind: String,
    /// Signed amount; debits are negative.
    pub amount_paise: Paise,
    /// Balance right after this movement.
    pub balance_after_paise: Paise,
    /// The call charged, if any.
    pub call_id: Option<CallId>,
    /// The number renewed, if any.
    pub number_id: Option<NumberId>,
    /// Time, Unix ms.
    pub created_at: i64,
}

/// A stored call recording.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RecordingRow {
    /// The recorded call.
    pub call_id: CallId,
    /// wav or ogg.
    pub format: String,
    /// Length in milliseconds.
    pub duration_ms: i64,
    /// File size.
    pub bytes: i64,
    /// Time written, Unix ms.
    pub created_at: i64,
}

impl Store {
    /// Adds `paise` to a workspace's wallet; returns the new balance, or None
    /// when the workspace does not exist.
    pub async fn credit_wallet(
        &self,
        org_id: OrgId,
        paise: Paise,
        now_ms: i64,
    ) -> StoreResult<Option<Paise>> {
        let id = WalletTxId::new();
        let balance = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let balance: Option<Paise> = sqlx::query_scalar(
                "UPDATE orgs SET wallet_paise = wallet_paise + $1 WHERE id = $2 RETURNING wallet_paise",
            )
            .bind(paise)
            .bind(org_id)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(after) = balance {
                sqlx::query(
                    "INSERT INTO wallet_transactions (id, org_id, kind, amount_paise, balance_after_paise, created_at)
                     VALUES ($1, $2, 'credit', $3, $4, $5)",
                )
                .bind(id)
                .bind(org_id)
                .bind(paise)
                .bind(after)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            balance
        });
        Ok(balance)
    }

    /// One page of a workspace's wallet movements, newest first, and the total.
    pub async fn wallet_transactions(
        &self,
        org_id: OrgId,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<WalletTxRow>, i64)> {
        let result = with_pool!(self, pool => {
            let rows = sqlx::query_as::<_, WalletTxRow>(
                "SELECT id, kind, amount_paise, balance_after_paise, call_id, number_id, created_at
                 FROM wallet_transactions WHERE org_id = $1
                 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3",
            )
            .bind(org_id)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM wallet_transactions WHERE org_id = $1")
                .bind(org_id)
                .fetch_one(pool)
                .await?;
            (rows, total)
        });
        Ok(result)
    }

    /// One page of a workspace's retained recordings, newest first, and the total.
    pub async fn recordings(
        &self,
        org_id: OrgId,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<RecordingRow>, i64)> {
        let result = with_pool!(self, pool => {
            let rows = sqlx::query_as::<_, RecordingRow>(
                "SELECT call_id, format, duration_ms, bytes, created_at FROM recordings
                 WHERE org_id = $1 AND deleted_at IS NULL
                 ORDER BY created_at DESC, call_id DESC LIMIT $2 OFFSET $3",
            )
            .bind(org_id)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let total: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM recordings WHERE org_id = $1 AND deleted_at IS NULL",
            )
            .bind(org_id)
            .fetch_one(pool)
            .await?;
            (rows, total)
        });
        Ok(result)
    }
}

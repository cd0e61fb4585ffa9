//! Rented phone numbers and their monthly renewal from the wallet.

use super::{Store, StoreResult, conflict_or, with_pool};
use crate::domain::{NumberId, OrgId, Paise, WalletTxId};
use crate::store::BeginWrite;

/// A rented number as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NumberRow {
    /// Number id.
    pub id: NumberId,
    /// Owning workspace.
    pub org_id: OrgId,
    /// E.164 number.
    pub phone: String,
    /// Carrier: sim, twilio, plivo, exotel, vonage or telnyx.
    pub provider: String,
    /// active or suspended.
    pub status: String,
    /// The workspace's default caller ID.
    pub is_default: bool,
    /// Rent taken from the wallet each month.
    pub monthly_rent_paise: Paise,
    /// First rented, Unix ms.
    pub rented_at: i64,
    /// Next renewal, Unix ms.
    pub renews_at: i64,
}

/// Fields of a newly rented number.
#[derive(Debug, Clone)]
pub struct NewNumber<'a> {
    /// Owning workspace.
    pub org_id: OrgId,
    /// E.164 number.
    pub phone: &'a str,
    /// Carrier.
    pub provider: &'a str,
    /// Make it the default caller ID.
    pub is_default: bool,
    /// Monthly rent.
    pub monthly_rent_paise: Paise,
    /// Rental time, Unix ms.
    pub now_ms: i64,
    /// First renewal, Unix ms.
    pub renews_at: i64,
}

/// What a renewal attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalOutcome {
    /// Rent taken; the number runs another month.
    Renewed,
    /// The wallet was short; the number is suspended.
    Suspended,
    /// Another pass renewed it first.
    AlreadyRenewed,
}

impl Store {
    /// Records a rented number; the first month counts as paid.
    pub async fn insert_number(&self, n: &NewNumber<'_>) -> StoreResult<NumberRow> {
        let id = NumberId::new();
        with_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            if n.is_default {
                sqlx::query("UPDATE phone_numbers SET is_default = FALSE WHERE org_id = $1")
                    .bind(n.org_id)
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query(
                "INSERT INTO phone_numbers (id, org_id, phone, provider, status, is_default, monthly_rent_paise, rented_at, renews_at, created_at)
                 VALUES ($1, $2, $3, $4, 'active', $5, $6, $7, $8, $7)",
            )
            .bind(id)
            .bind(n.org_id)
            .bind(n.phone)
            .bind(n.provider)
            .bind(n.is_default)
            .bind(n.monthly_rent_paise)
            .bind(n.now_ms)
            .bind(n.renews_at)
            .execute(&mut *tx)
            .await
            .map_err(|e| conflict_or(e, "phone number is already rented"))?;
            tx.commit().await?;
        });
        Ok(NumberRow {
            id,
            org_id: n.org_id,
            phone: n.phone.to_string(),
            provider: n.provider.to_string(),
            status: "active".into(),
            is_default: n.is_default,
            monthly_rent_paise: n.monthly_rent_paise,
            rented_at: n.now_ms,
            renews_at: n.renews_at,
        })
    }

    /// A workspace's numbers, default first.
    pub async fn numbers(&self, org_id: OrgId) -> StoreResult<Vec<NumberRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, NumberRow>(
                "SELECT id, org_id, phone, provider, status, is_default, monthly_rent_paise, rented_at, renews_at
                 FROM phone_numbers WHERE org_id = $1 ORDER BY is_default DESC, created_at, id",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Numbers whose renewal date has come, active or suspended.
    pub async fn numbers_due(&self, now_ms: i64) -> StoreResult<Vec<NumberRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, NumberRow>(
                "SELECT id, org_id, phone, provider, status, is_default, monthly_rent_paise, rented_at, renews_at
                 FROM phone_numbers WHERE renews_at <= $1 ORDER BY renews_at LIMIT 500",
            )
            .bind(now_ms)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Takes one month's rent for `number` from its wallet, or suspends it.
    /// The number row is claimed first, so two concurrent passes never charge twice.
    pub async fn renew_number(
        &self,
        number: &NumberRow,
        next_renewal_ms: i64,
        now_ms: i64,
    ) -> StoreResult<RenewalOutcome> {
        let tx_id = WalletTxId::new();
        let outcome = with_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let claimed = sqlx::query(
                "UPDATE phone_numbers SET status = 'active', renews_at = $1 WHERE id = $2 AND renews_at = $3",
            )
            .bind(next_renewal_ms)
            .bind(number.id)
            .bind(number.renews_at)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if claimed == 0 {
                tx.rollback().await?;
                return Ok(RenewalOutcome::AlreadyRenewed);
            }
            let balance: Option<Paise> = sqlx::query_scalar(
                "UPDATE orgs SET wallet_paise = wallet_paise - $1
                 WHERE id = $2 AND wallet_paise >= $1 RETURNING wallet_paise",
            )
            .bind(number.monthly_rent_paise)
            .bind(number.org_id)
            .fetch_optional(&mut *tx)
            .await?;
            match balance {
                Some(balance_after) => {
                    sqlx::query(
                        "INSERT INTO wallet_transactions (id, org_id, kind, amount_paise, balance_after_paise, number_id, created_at)
                         VALUES ($1, $2, 'number-renewal', $3, $4, $5, $6)",
                    )
                    .bind(tx_id)
                    .bind(number.org_id)
                    .bind(-number.monthly_rent_paise)
                    .bind(balance_after)
                    .bind(number.id)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    RenewalOutcome::Renewed
                }
                None => {
                    tx.rollback().await?;
                    sqlx::query("UPDATE phone_numbers SET status = 'suspended' WHERE id = $1 AND renews_at = $2")
                        .bind(number.id)
                        .bind(number.renews_at)
                        .execute(pool)
                        .await?;
                    RenewalOutcome::Suspended
                }
            }
        });
        Ok(outcome)
    }
}

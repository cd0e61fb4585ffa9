//! Rented phone numbers and their monthly renewal from the wallet.

use super::{Store, StoreResult, conflict_or, with_pool, with_writer};
use crate::domain::inbound::{InboundSettings, WhenBusy};
use crate::domain::{AgentId, NumberId, OrgId, Paise, WalletTxId};
use crate::store::BeginWrite;
use sqlx::AssertSqlSafe;

/// The columns a [`NumberRow`] reads, in its order.
const NUMBER_COLUMNS: &str = "id, org_id, phone, provider, status, is_default, monthly_rent_paise, rented_at, renews_at,
     inbound_agent_id, inbound_enabled, inbound_when_busy, inbound_queue_seconds, inbound_hold_message";

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
    /// The agent that answers calls to the number.
    pub inbound_agent_id: Option<AgentId>,
    /// Whether the number answers calls.
    pub inbound_enabled: bool,
    /// What a caller gets when the workspace's slots are full.
    pub inbound_when_busy: WhenBusy,
    /// How long a held caller waits for a slot.
    pub inbound_queue_seconds: i64,
    /// What a held caller hears (`None`: the default message).
    pub inbound_hold_message: Option<String>,
}

impl NumberRow {
    /// The number's inbound settings.
    pub fn inbound(&self) -> InboundSettings {
        InboundSettings {
            enabled: self.inbound_enabled,
            when_busy: self.inbound_when_busy,
            queue_seconds: u32::try_from(self.inbound_queue_seconds).unwrap_or(60),
            hold_message: self.inbound_hold_message.clone(),
        }
    }
}

/// A number's new inbound routing, written whole.
#[derive(Debug, Clone)]
pub struct InboundRouting {
    /// The agent that answers, or none.
    pub agent_id: Option<AgentId>,
    /// The settings.
    pub settings: InboundSettings,
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
        with_writer!(self, pool => {
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
            inbound_agent_id: None,
            inbound_enabled: false,
            inbound_when_busy: WhenBusy::Reject,
            inbound_queue_seconds: i64::from(InboundSettings::default().queue_seconds),
            inbound_hold_message: None,
        })
    }

    /// A workspace's numbers, default first.
    pub async fn numbers(&self, org_id: OrgId) -> StoreResult<Vec<NumberRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, NumberRow>(AssertSqlSafe(format!(
                "SELECT {NUMBER_COLUMNS} FROM phone_numbers WHERE org_id = $1 ORDER BY is_default DESC, created_at, id"
            )))
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Numbers whose renewal date has come, active or suspended.
    pub async fn numbers_due(&self, now_ms: i64) -> StoreResult<Vec<NumberRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, NumberRow>(AssertSqlSafe(format!(
                "SELECT {NUMBER_COLUMNS} FROM phone_numbers WHERE renews_at <= $1 ORDER BY renews_at LIMIT 500"
            )))
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
        let outcome = with_writer!(self, pool => {
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

    /// The rented number `phone` (E.164), whichever workspace rents it: where
    /// a carrier's inbound webhook finds the number it rang.
    pub async fn number_by_phone(&self, phone: &str) -> StoreResult<Option<NumberRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, NumberRow>(AssertSqlSafe(format!(
                "SELECT {NUMBER_COLUMNS} FROM phone_numbers WHERE phone = $1"
            )))
            .bind(phone)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// One of a workspace's numbers.
    pub async fn number(&self, org_id: OrgId, id: NumberId) -> StoreResult<Option<NumberRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, NumberRow>(AssertSqlSafe(format!(
                "SELECT {NUMBER_COLUMNS} FROM phone_numbers WHERE id = $1 AND org_id = $2"
            )))
            .bind(id)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// The workspace's numbers whose calls `agent_id` answers.
    pub async fn numbers_answered_by(
        &self,
        org_id: OrgId,
        agent_id: AgentId,
    ) -> StoreResult<Vec<NumberRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, NumberRow>(AssertSqlSafe(format!(
                "SELECT {NUMBER_COLUMNS} FROM phone_numbers WHERE org_id = $1 AND inbound_agent_id = $2
                 ORDER BY created_at, id"
            )))
            .bind(org_id)
            .bind(agent_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Writes a number's inbound routing; `None` when the workspace has no such number.
    pub async fn set_inbound_routing(
        &self,
        org_id: OrgId,
        id: NumberId,
        routing: &InboundRouting,
    ) -> StoreResult<Option<NumberRow>> {
        let changed = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE phone_numbers SET inbound_agent_id = $1, inbound_enabled = $2, inbound_when_busy = $3,
                   inbound_queue_seconds = $4, inbound_hold_message = $5
                 WHERE id = $6 AND org_id = $7",
            )
            .bind(routing.agent_id)
            .bind(routing.settings.enabled)
            .bind(routing.settings.when_busy)
            .bind(i64::from(routing.settings.queue_seconds))
            .bind(routing.settings.hold_message.as_deref())
            .bind(id)
            .bind(org_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if changed == 0 {
            return Ok(None);
        }
        self.number(org_id, id).await
    }
}

//! Periodic upkeep: number renewals from the wallet and agent dormancy.

use crate::clock::{SharedClock, from_millis};
use crate::store::numbers::RenewalOutcome;
use crate::store::{Store, StoreError};
use chrono::Months;
use std::time::Duration;

/// What one janitor pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JanitorReport {
    /// Numbers renewed from the wallet.
    pub renewed: u32,
    /// Numbers suspended for want of balance.
    pub suspended: u32,
    /// Agents newly marked dormant.
    pub dormant: u64,
}

/// Runs one pass at the clock's current time.
pub async fn run_once(
    store: &Store,
    clock: &SharedClock,
    dormant_after: Duration,
) -> Result<JanitorReport, StoreError> {
    let now = clock.now();
    let now_ms = now.timestamp_millis();
    let mut report = JanitorReport::default();
    for number in store.numbers_due(now_ms).await? {
        // Renew one month at a time from the scheduled date, so a late pass
        // does not shift the billing day.
        let due = from_millis(number.renews_at);
        let next = due.checked_add_months(Months::new(1)).unwrap_or(due);
        match store
            .renew_number(&number, next.timestamp_millis(), now_ms)
            .await?
        {
            RenewalOutcome::Renewed => report.renewed += 1,
            RenewalOutcome::AlreadyRenewed => {}
            RenewalOutcome::Suspended => {
                if number.status != "suspended" {
                    tracing::warn!(number = %number.phone, org = %number.org_id, "number suspended: wallet balance below rent");
                }
                report.suspended += 1;
            }
        }
    }
    let cutoff = now_ms - i64::try_from(dormant_after.as_millis()).unwrap_or(i64::MAX);
    report.dormant = store.mark_dormant_agents(cutoff).await?;
    Ok(report)
}

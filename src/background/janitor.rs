//! Periodic upkeep: number renewals from the wallet, agent dormancy (and the
//! welcome audio dormant agents stop having kept warm), and retention:
//! recordings past their window are deleted and turn rows older than 90 days
//! are pruned, while calls keep `transcript_text`.
//!
//! Nodes sharing a database all run the pass, but the upkeep of the shared
//! rows runs on one node at a time ([`Singleton::Janitor`]); every node drops
//! the warm welcome audio it keeps itself.

use crate::calls::welcome_cache::WelcomeCache;
use crate::config::Settings;
use crate::domain::clock::{SharedClock, from_millis};
use crate::recordings::{RecordingKey, RecordingStore};
use crate::store::numbers::RenewalOutcome;
use crate::store::singletons::Singleton;
use crate::store::{Store, StoreError};
use chrono::Months;
use std::time::Duration;

/// Turn-level transcript rows are kept this long (spec Limits).
pub const TURN_RETENTION: Duration = Duration::from_secs(90 * 86_400);
/// Recordings deleted per pass, so one pass stays short after a long outage.
const RECORDINGS_PER_PASS: i64 = 500;

/// What one janitor pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JanitorReport {
    /// Numbers renewed from the wallet.
    pub renewed: u32,
    /// Numbers suspended for want of balance.
    pub suspended: u32,
    /// Agents newly marked dormant.
    pub dormant: u64,
    /// Warm welcome audio dropped (dormant, deactivated or deleted agents).
    pub welcomes_dropped: usize,
    /// Recordings deleted after their retention window.
    pub recordings_deleted: u32,
    /// Transcript turn rows pruned.
    pub turns_pruned: u64,
}

/// The windows a pass applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Idle time after which an agent turns dormant.
    pub dormant_after: Duration,
    /// How long recordings are kept.
    pub recording_retention: Duration,
    /// How long turn rows are kept.
    pub turn_retention: Duration,
}

impl Policy {
    /// The windows configured in `settings`.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            dormant_after: settings.dormant_after,
            recording_retention: settings.recording_retention,
            turn_retention: TURN_RETENTION,
        }
    }
}

/// `now_ms` minus `window`, saturating.
fn cutoff(now_ms: i64, window: Duration) -> i64 {
    now_ms.saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
}

/// Runs one pass at the clock's current time: the shared upkeep if no other
/// node is running it (its counts stay zero otherwise), then this node's
/// welcome audio.
pub async fn run_once(
    store: &Store,
    clock: &SharedClock,
    policy: &Policy,
    welcome_cache: &WelcomeCache,
    recordings: &RecordingStore,
) -> Result<JanitorReport, StoreError> {
    let mut report = store
        .run_singleton(
            Singleton::Janitor,
            shared_upkeep(store, clock, policy, recordings),
        )
        .await?
        .transpose()?
        .unwrap_or_default();
    report.welcomes_dropped = welcome_cache.drop_sleeping(store).await?;
    Ok(report)
}

/// Renewals, dormancy and retention: rows every node shares, so one node at
/// a time does them.
async fn shared_upkeep(
    store: &Store,
    clock: &SharedClock,
    policy: &Policy,
    recordings: &RecordingStore,
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
    report.dormant = store
        .mark_dormant_agents(cutoff(now_ms, policy.dormant_after))
        .await?;
    report.recordings_deleted = delete_old_recordings(
        store,
        recordings,
        cutoff(now_ms, policy.recording_retention),
        now_ms,
    )
    .await?;
    report.turns_pruned = store
        .prune_turns_before(cutoff(now_ms, policy.turn_retention))
        .await?;
    Ok(report)
}

/// Deletes the objects of recordings written before `cutoff_ms` (every format
/// each was kept in) from the recordings store and marks them deleted, so their `url` reads null.
async fn delete_old_recordings(
    store: &Store,
    recordings: &RecordingStore,
    cutoff_ms: i64,
    now_ms: i64,
) -> Result<u32, StoreError> {
    let mut deleted = 0;
    for recording in store
        .recordings_written_before(cutoff_ms, RECORDINGS_PER_PASS)
        .await?
    {
        // The WAV and, when one was written, its Ogg Opus copy.
        let mut gone = Ok(());
        for object_key in recording.object_keys() {
            if let Ok(key) = RecordingKey::stored(object_key) {
                gone = gone.and(recordings.delete(&key).await);
            }
            // No object can have a key that does not parse; only the row goes.
        }
        if let Err(err) = gone {
            // Left for the next pass; the row stays so the object is not orphaned.
            tracing::warn!(call = %recording.call_id, key = %recording.object_key, error = %err, "could not delete an expired recording");
            continue;
        }
        if store
            .mark_recording_deleted(recording.call_id, now_ms)
            .await?
        {
            deleted += 1;
        }
    }
    Ok(deleted)
}

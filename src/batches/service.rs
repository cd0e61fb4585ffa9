//! The batch and campaign operations behind both HTTP surfaces: create, add
//! items, the state machine's actions, rename/reschedule, delete, and the
//! scheduler pass.

use super::feed::StoreBatchFeed;
use super::{BatchAction, BatchKind, BatchStatus, Progress, stored};
use crate::calls::ledger::StoreLedger;
use crate::calls::media_stream::CallEngine;
use crate::calls::placement::PlacementError;
use crate::calls::service::CallService;
use crate::domain::calling_hours::CallingHours;
use crate::domain::clock::SharedClock;
use crate::domain::do_not_call::SKIP_REASON;
use crate::domain::phone::PhoneError;
use crate::domain::{AgentId, BatchId, Email, OrgId, PhoneNumber};
use crate::store::Store;
use crate::store::StoreError;
use crate::store::batches::{BatchRow, DO_NOT_CALL_ITEM_REASON, NewBatch, NewItem};
use crate::store::singletons::Singleton;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fmt::Display;
use std::sync::Arc;
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{CallEnd, CallLedger, CallStatus, LedgerError};

/// The batches room's dependencies, built once at start; cheap to clone.
#[derive(Clone)]
pub struct BatchService {
    /// Where batches, items and their calls are stored.
    store: Store,
    /// Time source for schedules and stamps.
    clock: SharedClock,
    /// The engine that paces batches on one node.
    engine: CallEngine,
    /// Ends the undialed calls of a cancelled batch.
    ledger: Arc<StoreLedger>,
    /// Placing calls: the dial plan a batch is checked against, and its feed.
    calls: CallService,
}

impl BatchService {
    /// The service sharing the calls room's store, clock, engine and ledger.
    pub fn new(calls: CallService) -> Self {
        Self {
            store: calls.store.clone(),
            clock: calls.clock.clone(),
            engine: calls.engine.clone(),
            ledger: calls.ledger.clone(),
            calls,
        }
    }
}

/// Most items one request may add.
pub const MAX_ITEMS_PER_REQUEST: usize = 10_000;

/// Most skipped items listed in an answer.
pub const MAX_LISTED_SKIPS: usize = 20;

/// What creating a batch needs.
#[derive(Debug, Clone)]
pub struct NewBatchInput {
    /// Display name.
    pub name: String,
    /// Agent placing the calls, as the client gave it (checked by [`create`]
    /// after the name, so a request with both wrong answers about the name).
    pub agent_id: String,
    /// Caller ID override.
    pub from_number: Option<String>,
    /// Automatic start.
    pub scheduled_start_at: Option<DateTime<Utc>>,
    /// The batch's own calling hours (None: the agent's, else the workspace's).
    pub calling_hours: Option<CallingHours>,
}

/// One person to add.
#[derive(Debug, Clone)]
pub struct ItemInput {
    /// Their name.
    pub name: String,
    /// Their number as given.
    pub phone: String,
    /// Their variables.
    pub variables: Map<String, Value>,
    /// Their email address.
    pub email: Option<Email>,
}

/// An item that will not be dialed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedItem {
    /// 0-based position in the request.
    pub index: usize,
    /// The number as given.
    pub phone: String,
    /// Why.
    pub reason: String,
    /// The rule that skipped it (`do-not-call`), when one did.
    pub skip_reason: Option<&'static str>,
}

/// The outcome of adding items.
#[derive(Debug, Clone, Default)]
pub struct AddReport {
    /// Items that will be dialed.
    pub added: usize,
    /// Items stored as skipped.
    pub skipped: usize,
    /// The first skipped items with reasons.
    pub skipped_items: Vec<SkippedItem>,
}

/// Why a batch operation is refused; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// No batch of this kind and id in the workspace.
    #[error("{} {id} not found", .kind.noun())]
    NotFound {
        /// Batch or campaign.
        kind: BatchKind,
        /// The id asked for.
        id: String,
    },
    /// No such agent in the workspace, or it is deleted.
    #[error("Agent {0} not found")]
    AgentNotFound(String),
    /// A blank name.
    #[error("name must not be empty")]
    NameEmpty,
    /// The fromNumber is not a phone number.
    #[error("fromNumber {0}")]
    FromMalformed(PhoneError),
    /// `scheduledStartAt` is not a timestamp.
    #[error(
        "scheduledStartAt must be an ISO 8601 timestamp such as 2026-12-01T09:30:00Z, not \"{0}\""
    )]
    ScheduleMalformed(String),
    /// `scheduledStartAt` is not in the future.
    #[error("scheduledStartAt {0} is in the past; give a future time or omit it")]
    ScheduleInPast(String),
    /// An add-items request without items.
    #[error("items must hold at least one item")]
    NoItems,
    /// An add-items request over [`MAX_ITEMS_PER_REQUEST`].
    #[error(
        "items holds {0} entries; at most {MAX_ITEMS_PER_REQUEST} per request (send more requests)"
    )]
    TooManyItems(usize),
    /// Items added after the start.
    #[error("{} is {status}; items can be added only before it starts", .kind.noun())]
    ItemsAfterStart {
        /// Batch or campaign.
        kind: BatchKind,
        /// Its status.
        status: BatchStatus,
    },
    /// The batch started while items were being added.
    #[error("{} has started; items can be added only before it starts", .0.noun())]
    StartedWhileAdding(BatchKind),
    /// The state machine does not allow the action from this status.
    #[error(
        "{} is {status}; it can be {} only when {}",
        .kind.noun(),
        .action.verb(),
        allowed_from(.action)
    )]
    Refused {
        /// Batch or campaign.
        kind: BatchKind,
        /// The action asked for.
        action: BatchAction,
        /// The current status.
        status: BatchStatus,
    },
    /// A start with nothing pending.
    #[error("{} has no items to dial; add items before starting it", .0.noun())]
    NothingToDial(BatchKind),
    /// A schedule change after the start.
    #[error("{} is {status}; scheduledStartAt can change only before it starts", .kind.noun())]
    ScheduleAfterStart {
        /// Batch or campaign.
        kind: BatchKind,
        /// Its status.
        status: BatchStatus,
    },
    /// A delete while running.
    #[error("{} is running; pause or stop it before deleting it", .0.noun())]
    DeleteRunning(BatchKind),
    /// The dial plan refuses the calls (agent, wallet, quota, caller ID).
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The batch just inserted cannot be read back.
    #[error("batch {0} vanished after insert")]
    Vanished(BatchId),
    /// The ledger could not cancel an undispatched call.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The statuses an action is allowed from, for messages: "draft or scheduled".
fn allowed_from(action: &BatchAction) -> String {
    let allowed: Vec<&str> = action.allowed_from().iter().map(|s| s.as_str()).collect();
    allowed.join(" or ")
}

/// A batch of another kind, workspace, or none at all.
fn not_found(kind: BatchKind, id: impl Display) -> BatchError {
    BatchError::NotFound {
        kind,
        id: id.to_string(),
    }
}

/// The batch of `kind` a request names by `raw`: a text that is no batch id
/// is a 404, like a batch the workspace does not have.
pub fn parse_id(kind: BatchKind, raw: &str) -> Result<BatchId, BatchError> {
    raw.parse().map_err(|_| not_found(kind, raw))
}

/// Parses `scheduledStartAt`; it must lie in the future.
pub fn parse_schedule(raw: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, BatchError> {
    let at = DateTime::parse_from_rfc3339(raw.trim())
        .map_err(|_| BatchError::ScheduleMalformed(raw.to_string()))?
        .with_timezone(&Utc);
    if at <= now {
        return Err(BatchError::ScheduleInPast(raw.to_string()));
    }
    Ok(at)
}

impl BatchService {
    /// The batch `id` of `kind` in the workspace, or 404.
    pub async fn load(
        &self,
        org_id: OrgId,
        kind: BatchKind,
        id: BatchId,
    ) -> Result<BatchRow, BatchError> {
        self.store
            .batch(org_id, kind.as_str(), id)
            .await?
            .ok_or_else(|| not_found(kind, id))
    }

    /// Progress of a batch.
    pub async fn progress(&self, batch_id: BatchId) -> Result<Progress, BatchError> {
        Ok(Progress::from_counts(
            &self.store.batch_item_counts(batch_id).await?,
        ))
    }

    /// Creates a draft (or scheduled) batch for an agent of the workspace.
    pub async fn create(
        &self,
        org_id: OrgId,
        kind: BatchKind,
        input: NewBatchInput,
    ) -> Result<BatchRow, BatchError> {
        let name = input.name.trim();
        if name.is_empty() {
            return Err(BatchError::NameEmpty);
        }
        let agent_missing = || BatchError::AgentNotFound(input.agent_id.clone());
        let agent_id: AgentId = input.agent_id.parse().map_err(|_| agent_missing())?;
        let agent = self
            .store
            .agent(org_id, agent_id)
            .await?
            .filter(|a| a.status() != crate::domain::agent::AgentStatus::Deleted)
            .ok_or_else(agent_missing)?;
        let spec = agent.spec()?;
        let from_number = match input.from_number.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(raw) => Some(
                PhoneNumber::parse(raw)
                    .map_err(BatchError::FromMalformed)?
                    .as_str()
                    .to_string(),
            ),
        };
        let id = BatchId::new();
        let status = if input.scheduled_start_at.is_some() {
            BatchStatus::Scheduled
        } else {
            BatchStatus::Draft
        };
        let now_ms = self.clock.now().timestamp_millis();
        self.store
            .insert_batch(&NewBatch {
                id,
                org_id,
                kind: kind.as_str(),
                name,
                agent_id: agent.id,
                agent_name: &spec.name,
                from_number: from_number.as_deref(),
                status: status.as_str(),
                scheduled_start_at: input.scheduled_start_at.map(|t| t.timestamp_millis()),
                calling_hours: input.calling_hours.as_ref(),
                now_ms,
            })
            .await?;
        self.store
            .batch(org_id, kind.as_str(), id)
            .await?
            .ok_or(BatchError::Vanished(id))
    }
}

/// Why a number cannot be dialed as part of this batch, if it cannot.
pub fn check_phone(raw: &str, seen: &mut HashSet<String>) -> Result<PhoneNumber, String> {
    let phone = PhoneNumber::parse(raw).map_err(|e| format!("phone {e}"))?;
    if !seen.insert(phone.as_str().to_string()) {
        return Err(format!("phone {phone} is already in the list"));
    }
    Ok(phone)
}

/// The stored variables of an item: `name` joins them unless given, so `{name}` fills.
pub fn item_variables(name: &str, mut variables: Map<String, Value>) -> String {
    if !name.is_empty() && !variables.contains_key("name") {
        variables.insert("name".into(), Value::String(name.to_string()));
    }
    Value::Object(variables).to_string()
}

impl BatchService {
    /// Appends items before the batch starts; malformed and repeated numbers are
    /// stored as skipped and reported.
    pub async fn add_items(
        &self,
        kind: BatchKind,
        batch: &BatchRow,
        items: Vec<ItemInput>,
    ) -> Result<AddReport, BatchError> {
        if items.is_empty() {
            return Err(BatchError::NoItems);
        }
        if items.len() > MAX_ITEMS_PER_REQUEST {
            return Err(BatchError::TooManyItems(items.len()));
        }
        let status = BatchStatus::from_stored(&batch.status);
        if !status.is_unstarted() {
            return Err(BatchError::ItemsAfterStart { kind, status });
        }
        let mut seen: HashSet<String> = self
            .store
            .batch_phones(batch.id)
            .await?
            .into_iter()
            .collect();
        let mut report = AddReport::default();
        let mut rows = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let name = item.name.trim().to_string();
            match check_phone(&item.phone, &mut seen) {
                Ok(phone) => {
                    report.added += 1;
                    rows.push(NewItem {
                        variables: item_variables(&name, item.variables),
                        email: item.email.map(Email::into_string),
                        name,
                        phone: phone.as_str().to_string(),
                        status: "pending",
                        reason: None,
                        skip_reason: None,
                    });
                }
                Err(reason) => {
                    report.skipped += 1;
                    if report.skipped_items.len() < MAX_LISTED_SKIPS {
                        report.skipped_items.push(SkippedItem {
                            index,
                            phone: item.phone.clone(),
                            reason: reason.clone(),
                            skip_reason: None,
                        });
                    }
                    rows.push(NewItem {
                        variables: item_variables(&name, item.variables),
                        email: item.email.map(Email::into_string),
                        name,
                        phone: item.phone,
                        status: "skipped",
                        reason: Some(reason),
                        skip_reason: None,
                    });
                }
            }
        }
        for index in self.screen_do_not_call(batch, &mut rows).await? {
            report.added -= 1;
            report.skipped += 1;
            if report.skipped_items.len() < MAX_LISTED_SKIPS {
                report.skipped_items.push(SkippedItem {
                    index,
                    phone: rows[index].phone.clone(),
                    reason: DO_NOT_CALL_ITEM_REASON.to_string(),
                    skip_reason: Some(SKIP_REASON),
                });
            }
        }
        let appended = self
            .store
            .append_items(
                batch.id,
                &stored(&[BatchStatus::Draft, BatchStatus::Scheduled]),
                &rows,
                self.clock.now().timestamp_millis(),
            )
            .await?;
        if !appended {
            return Err(BatchError::StartedWhileAdding(kind));
        }
        Ok(report)
    }

    /// Appends items already checked (a read sheet's accepted rows) before the
    /// batch starts, in one transaction; nothing is appended once it started.
    /// Items whose numbers the workspace listed as do-not-call are stored
    /// skipped (`skipReason: do-not-call`); returns how many.
    pub async fn append_checked(
        &self,
        kind: BatchKind,
        batch: &BatchRow,
        mut items: Vec<NewItem>,
    ) -> Result<usize, BatchError> {
        if items.is_empty() {
            return Ok(0);
        }
        let listed = self.screen_do_not_call(batch, &mut items).await?.len();
        let open = stored(&[BatchStatus::Draft, BatchStatus::Scheduled]);
        let now_ms = self.clock.now().timestamp_millis();
        if !self
            .store
            .append_items(batch.id, &open, &items, now_ms)
            .await?
        {
            return Err(BatchError::StartedWhileAdding(kind));
        }
        Ok(listed)
    }

    /// Marks the pending `items` whose numbers the batch's workspace listed as
    /// do-not-call skipped (the check at upload; the pull checks again at dial
    /// time); returns their positions.
    async fn screen_do_not_call(
        &self,
        batch: &BatchRow,
        items: &mut [NewItem],
    ) -> Result<Vec<usize>, StoreError> {
        let listed = self
            .calls
            .listed_numbers(
                batch.org_id,
                items
                    .iter()
                    .filter(|i| i.status == "pending")
                    .map(|i| i.phone.as_str()),
            )
            .await?;
        let mut positions = Vec::new();
        for (index, item) in items.iter_mut().enumerate() {
            if item.status == "pending" && listed.contains(&item.phone) {
                item.status = "skipped";
                item.reason = Some(DO_NOT_CALL_ITEM_REASON.to_string());
                item.skip_reason = Some(SKIP_REASON);
                positions.push(index);
            }
        }
        Ok(positions)
    }

    /// Runs one action of the state machine; returns the answer's message.
    pub async fn act(
        &self,
        kind: BatchKind,
        batch: &BatchRow,
        action: BatchAction,
    ) -> Result<String, BatchError> {
        let status = BatchStatus::from_stored(&batch.status);
        if !action.allowed(status) {
            return Err(BatchError::Refused {
                kind,
                action,
                status,
            });
        }
        let now_ms = self.clock.now().timestamp_millis();
        let noun = kind.noun();
        let from = stored(action.allowed_from());
        let moved = |to: BatchStatus, started: bool, finished: bool| {
            let from = from.clone();
            async move {
                self.store
                    .transition_batch(
                        batch.id,
                        &from,
                        to.as_str(),
                        None,
                        started,
                        finished,
                        now_ms,
                    )
                    .await
            }
        };
        let message = match action {
            BatchAction::Start => {
                let p = self.progress(batch.id).await?;
                if p.pending == 0 {
                    return Err(BatchError::NothingToDial(kind));
                }
                self.calls
                    .plan(batch.org_id, batch.agent_id, batch.from_number.as_deref())
                    .await?;
                if !moved(BatchStatus::Running, true, false).await? {
                    return Err(self.raced(kind, batch, action).await);
                }
                self.feed(batch.id, batch.org_id).await?;
                format!("{noun} started: {} item(s) to dial", p.pending)
            }
            BatchAction::Pause => {
                if !moved(BatchStatus::Paused, false, false).await? {
                    return Err(self.raced(kind, batch, action).await);
                }
                format!("{noun} paused; live calls finish and the remaining items wait for resume")
            }
            BatchAction::Resume => {
                self.calls
                    .plan(batch.org_id, batch.agent_id, batch.from_number.as_deref())
                    .await?;
                if !moved(BatchStatus::Running, true, false).await? {
                    return Err(self.raced(kind, batch, action).await);
                }
                self.feed(batch.id, batch.org_id).await?;
                format!("{noun} resumed")
            }
            BatchAction::Stop => {
                if !moved(BatchStatus::Stopped, false, true).await? {
                    return Err(self.raced(kind, batch, action).await);
                }
                let mut dropped = self.store.drop_pending_items(batch.id).await?;
                // On Postgres an item may already be a queued call no node has
                // claimed: it was never dialed either, so it counts as dropped.
                let undialed = self.store.undispatched_batch_calls(batch.id).await?;
                dropped += undialed.len() as u64;
                for call_id in undialed {
                    let end = CallEnd {
                        call_id: call_id.into(),
                        status: CallStatus::Canceled,
                        ended_reason: EndedReason::Canceled,
                        answered_at: None,
                        ended_at: now_ms,
                    };
                    self.ledger.finish(end).await?;
                }
                format!("{noun} stopped: {dropped} pending item(s) dropped; live calls finish")
            }
            BatchAction::Retry => {
                let reset = self.store.reset_failed_items(batch.id).await?;
                if reset == 0 {
                    return Ok(format!(
                        "{noun} has no failed, unanswered or busy items to re-dial"
                    ));
                }
                match status {
                    BatchStatus::Paused => {
                        return Ok(format!(
                            "{reset} item(s) will be re-dialed when the {} is resumed",
                            noun.to_lowercase()
                        ));
                    }
                    BatchStatus::Completed | BatchStatus::Stopped => {
                        self.store
                            .transition_batch(
                                batch.id,
                                &stored(&[BatchStatus::Completed, BatchStatus::Stopped]),
                                BatchStatus::Running.as_str(),
                                None,
                                true,
                                false,
                                now_ms,
                            )
                            .await?;
                    }
                    _ => {}
                }
                self.feed(batch.id, batch.org_id).await?;
                format!("{reset} item(s) will be re-dialed")
            }
        };
        Ok(message)
    }

    /// The refusal for a batch whose status changed under the request.
    async fn raced(&self, kind: BatchKind, batch: &BatchRow, action: BatchAction) -> BatchError {
        match self.store.batch_by_id(batch.id).await {
            Ok(Some(now)) => BatchError::Refused {
                kind,
                action,
                status: BatchStatus::from_stored(&now.status),
            },
            Ok(None) => not_found(kind, batch.id),
            Err(err) => err.into(),
        }
    }

    /// Renames, reschedules (`Some(None)` clears the schedule) and/or sets
    /// the batch's own calling hours (`Some(None)` returns to the agent's or
    /// the workspace's; at any status, and waiting items are checked afresh).
    pub async fn update(
        &self,
        kind: BatchKind,
        batch: &BatchRow,
        name: Option<String>,
        schedule: Option<Option<String>>,
        calling_hours: Option<Option<CallingHours>>,
    ) -> Result<BatchRow, BatchError> {
        let name = match name {
            Some(n) if n.trim().is_empty() => {
                return Err(BatchError::NameEmpty);
            }
            Some(n) => n.trim().to_string(),
            None => batch.name.clone(),
        };
        let current = BatchStatus::from_stored(&batch.status);
        let (status, scheduled) = match schedule {
            None => (current, batch.scheduled_start_at),
            Some(_) if !current.is_unstarted() => {
                return Err(BatchError::ScheduleAfterStart {
                    kind,
                    status: current,
                });
            }
            Some(None) => (BatchStatus::Draft, None),
            Some(Some(raw)) => {
                let at = parse_schedule(&raw, self.clock.now())?;
                (BatchStatus::Scheduled, Some(at.timestamp_millis()))
            }
        };
        let hours_changed = calling_hours.is_some();
        let hours = match calling_hours {
            Some(given) => given,
            None => batch.calling_hours()?,
        };
        self.store
            .update_batch(
                batch.id,
                &name,
                status.as_str(),
                scheduled,
                hours.as_ref(),
                self.clock.now().timestamp_millis(),
            )
            .await?;
        if hours_changed && self.store.recheck_waiting_items(batch.id).await? > 0 {
            self.feed(batch.id, batch.org_id).await?;
        }
        self.store
            .batch_by_id(batch.id)
            .await?
            .ok_or_else(|| not_found(kind, batch.id))
    }

    /// Deletes a batch that is not running.
    pub async fn delete(&self, kind: BatchKind, batch: &BatchRow) -> Result<(), BatchError> {
        if !self
            .store
            .delete_batch(batch.id, &[BatchStatus::Running.as_str()])
            .await?
        {
            return Err(BatchError::DeleteRunning(kind));
        }
        Ok(())
    }

    /// Puts a running batch into its workspace's round-robin. On a shared
    /// database the node holding the batch's lease feeds it instead
    /// ([`crate::cluster::dispatcher`]); this wakes the dispatchers.
    pub async fn feed(&self, batch_id: BatchId, org_id: OrgId) -> Result<(), StoreError> {
        if self.store.is_shared() {
            return self
                .store
                .notify(crate::store::nodes::DISPATCH_CHANNEL, &org_id.to_string())
                .await;
        }
        let concurrency = self.store.org(org_id).await?.map_or(1, |org| {
            u32::try_from(org.concurrency.max(1)).unwrap_or(u32::MAX)
        });
        if let Err(err) = self.engine.feed_batch(
            org_id.into(),
            batch_id.into(),
            concurrency,
            StoreBatchFeed::new(self.calls.clone()),
        ) {
            // The next scheduler pass feeds it again.
            tracing::error!(batch = %batch_id, error = %err, "engine refused a batch");
        }
        Ok(())
    }

    /// One scheduler pass: folds Postgres item count deltas, starts due
    /// scheduled batches, marks finished ones completed, and (re)feeds every running batch with items waiting — which
    /// is also how running batches continue after a restart.
    ///
    /// Nodes sharing a database run it one at a time, under the batch
    /// scheduler's advisory lock: the count folds must not run twice.
    pub async fn tick(&self) -> Result<(), StoreError> {
        self.store
            .run_singleton(Singleton::BatchScheduler, self.tick_once())
            .await?
            .unwrap_or(Ok(()))
    }

    async fn tick_once(&self) -> Result<(), StoreError> {
        let now_ms = self.clock.now().timestamp_millis();
        self.store.fold_batch_item_counts().await?;
        for batch in self.store.start_due_batches(now_ms).await? {
            tracing::info!(batch = %batch.id, kind = %batch.kind, "scheduled batch started");
        }
        // Items whose calling hours opened are dialable again; the feed
        // below picks them up.
        let released = self.store.release_waiting_items(now_ms).await?;
        if !released.is_empty() {
            tracing::info!(
                batches = released.len(),
                "calling hours opened for waiting items"
            );
        }
        for id in self.store.complete_finished_batches(now_ms).await? {
            tracing::info!(batch = %id, "batch completed");
        }
        for (batch_id, org_id) in self.store.running_batches_with_pending().await? {
            self.feed(batch_id, org_id).await?;
        }
        Ok(())
    }
}

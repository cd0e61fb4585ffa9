//! The supervision tree: a root actor, one org actor per workspace (slots and
//! FIFO queue), one call actor per live call.
//!
//! The engine knows nothing about storage or HTTP. The service gives it a
//! [`CallLedger`] to persist outcomes, a [`ConversationRunner`] to run an
//! answered call's media, and the carriers; it gets back an [`Engine`] handle.

mod batch_actor;
mod call_actor;
mod org_actor;
mod root;

use crate::carrier::{Carrier, CarrierStatus};
use crate::ended_reason::EndedReason;
use crate::ids::{BatchId, CallId, OrgId};
use crate::media_token::MediaTokens;
use async_trait::async_trait;
use ractor::{Actor, ActorRef};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use call_actor::CallMsg;
use root::{RootActor, RootMsg};

/// A call's raw status (decisions §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallStatus {
    /// Waiting for a slot.
    Queued,
    /// Dialed; ringing.
    Ringing,
    /// Answered; conversation running.
    InProgress,
    /// Answered and ended.
    Completed,
    /// The carrier or the engine failed.
    Failed,
    /// Nobody answered.
    NoAnswer,
    /// The line was busy.
    Busy,
    /// Canceled before it was answered.
    Canceled,
    /// An answering machine took the call (the agent hung up or left a message); billed as
    /// answered.
    Voicemail,
}

impl CallStatus {
    /// The raw form used in storage, filters and webhooks.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Ringing => "ringing",
            Self::InProgress => "in-progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::NoAnswer => "no-answer",
            Self::Busy => "busy",
            Self::Canceled => "canceled",
            Self::Voicemail => "voicemail",
        }
    }

    /// The display form used in responses.
    pub fn display(self) -> &'static str {
        match self {
            Self::Queued => "Queued",
            Self::Ringing => "Ringing",
            Self::InProgress => "In Progress",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::NoAnswer => "No Answer",
            Self::Busy => "Busy",
            Self::Canceled => "Canceled",
            Self::Voicemail => "Voicemail",
        }
    }

    /// Parses the raw form.
    pub fn parse(raw: &str) -> Option<Self> {
        Some(match raw {
            "queued" => Self::Queued,
            "ringing" => Self::Ringing,
            "in-progress" => Self::InProgress,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "no-answer" => Self::NoAnswer,
            "busy" => Self::Busy,
            "canceled" => Self::Canceled,
            "voicemail" => Self::Voicemail,
            _ => return None,
        })
    }

    /// Whether the call is over.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Failed
                | Self::NoAnswer
                | Self::Busy
                | Self::Canceled
                | Self::Voicemail
        )
    }

    /// Every raw status.
    pub const ALL: [CallStatus; 9] = [
        Self::Queued,
        Self::Ringing,
        Self::InProgress,
        Self::Completed,
        Self::Failed,
        Self::NoAnswer,
        Self::Busy,
        Self::Canceled,
        Self::Voicemail,
    ];
}

/// One call to place, as handed to the engine.
#[derive(Debug, Clone)]
pub struct CallJob {
    /// Call id.
    pub call_id: CallId,
    /// Workspace id.
    pub org_id: OrgId,
    /// The workspace's concurrency limit at enqueue time.
    pub org_concurrency: u32,
    /// Number dialed.
    pub to: String,
    /// Caller ID.
    pub from: String,
    /// Carrier name (sim, twilio, …).
    pub provider: String,
    /// Announcement calls do not take a slot (spec Alert rule 5).
    pub bypass_slots: bool,
    /// Seconds to ring.
    pub ring_timeout_seconds: u32,
    /// The agent's maximum call length.
    pub max_duration_seconds: u32,
    /// Caller script for the sim callee.
    pub sim_script: Option<serde_json::Value>,
    /// A sim-only fault to inject (`"engine-panic"`), for resilience tests.
    pub sim_fault: Option<String>,
    /// The agent wants answering machines detected (asks the carrier too).
    pub detect_machine: bool,
    /// Set when the person called us: the carrier already answered, so the
    /// call actor adopts the carrier's call instead of dialing.
    pub inbound: Option<InboundLeg>,
}

/// The carrier's side of a call a person placed to one of the workspace's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundLeg {
    /// The carrier's id of the call (Twilio's `CallSid`, …), for hang-up and transfer.
    pub carrier_call_id: String,
}

/// What a workspace's org actor did with an inbound call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A slot was free (or the store gave one): the call actor runs and waits for media.
    Started,
    /// Every slot is taken: the caller is to hear busy.
    Busy,
    /// Every slot is taken: the caller holds, first in line for the next free
    /// slot; the call starts then, or ends `queue-timeout` when the wait is over.
    Holding,
}

/// What an inbound call does when every slot of its workspace is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundWait {
    /// Answer busy.
    Reject,
    /// Hold for a slot, at most this long.
    Hold(Duration),
}

/// How a call ended, as the engine reports it to the ledger.
#[derive(Debug, Clone)]
pub struct CallEnd {
    /// Call id.
    pub call_id: CallId,
    /// Terminal status.
    pub status: CallStatus,
    /// Why it ended.
    pub ended_reason: EndedReason,
    /// When it was answered, Unix ms.
    pub answered_at: Option<i64>,
    /// When it ended, Unix ms.
    pub ended_at: i64,
}

/// Why the ledger could not record something.
#[derive(Debug, thiserror::Error)]
#[error("ledger: {0}")]
pub struct LedgerError(pub String);

/// Where the engine persists call progress; implemented by the service.
#[async_trait]
pub trait CallLedger: Send + Sync + 'static {
    /// Records a non-terminal transition (ringing, in-progress).
    async fn transition(
        &self,
        call_id: CallId,
        status: CallStatus,
        at_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Records the carrier's id for the call.
    async fn carrier_call_id(
        &self,
        call_id: CallId,
        carrier_call_id: &str,
    ) -> Result<(), LedgerError>;
    /// Records the terminal outcome; must be idempotent (bills at most once).
    async fn finish(&self, end: CallEnd) -> Result<(), LedgerError>;
    /// Hands queued calls of an org back for re-dispatch after its actor failed.
    async fn release_queued(&self, org_id: OrgId) -> Result<(), LedgerError>;
}

/// Where a started batch's calls come from; implemented by the service.
///
/// The engine pulls one call at a time, only when a slot of the workspace is
/// free, so a batch never floods its workspace's queue.
#[async_trait]
pub trait BatchFeed: Send + Sync + 'static {
    /// Claims the batch's next pending item and returns its stored call, or
    /// None when nothing is to be dialed now (paused, stopped, drained).
    async fn next_call(&self, batch_id: BatchId) -> Result<Option<CallJob>, LedgerError>;
}

/// The carrier's answering-machine verdicts for one call, as they arrive (buffered from the
/// dial on, so a verdict that comes before the media stream is not lost).
pub type MachineVerdicts = tokio::sync::mpsc::UnboundedReceiver<crate::carrier::AnsweredBy>;

/// Runs an answered call's conversation; implemented by the service.
///
/// The engine hands the call's media stream from [`Engine::attach_media`] to
/// [`ConversationRunner::run`] without looking inside it: `Media` is the service's own
/// type, so the handoff is checked by the compiler rather than downcast at run time.
#[async_trait]
pub trait ConversationRunner: Send + Sync + 'static {
    /// The media stream of an answered call, as the service accepted it.
    type Media: Send + 'static;

    /// Runs until the conversation ends or `cancel` fires; returns the ended reason.
    /// `machine` carries the carrier's answering-machine verdicts for the call, in order.
    async fn run(
        &self,
        job: CallJob,
        media: Self::Media,
        answered_at_ms: i64,
        machine: MachineVerdicts,
        cancel: CancellationToken,
    ) -> EndedReason;
}

/// Why an engine request failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The actor system is not running.
    #[error("call engine is not running: {0}")]
    Stopped(String),
    /// The call is not known to the engine.
    #[error("call is not live")]
    NotLive,
}

/// What a cancel request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The call was waiting in the queue and is now canceled.
    Dequeued,
    /// The call was live; it is being hung up.
    HangingUp,
    /// The engine does not hold the call (already ended or not yet dispatched).
    NotFound,
}

/// A workspace's slot usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrgSnapshot {
    /// Calls holding a slot.
    pub active: usize,
    /// Announcement calls running outside the slots.
    pub bypassing: usize,
    /// Calls waiting for a slot.
    pub queued: usize,
}

/// A batch handed to its workspace's org actor.
pub(crate) struct BatchRegistration {
    pub org_id: OrgId,
    pub batch_id: BatchId,
    pub org_concurrency: u32,
    pub feed: Arc<dyn BatchFeed>,
}

/// Fixed configuration of the engine; `M` is the media stream its runner takes.
pub struct EngineConfig<M> {
    /// Persists progress.
    pub ledger: Arc<dyn CallLedger>,
    /// Runs conversations.
    pub runner: Arc<dyn ConversationRunner<Media = M>>,
    /// Carriers by name.
    pub carriers: HashMap<String, Arc<dyn Carrier>>,
    /// Signs media tokens.
    pub tokens: MediaTokens,
    /// Base websocket URL of the media endpoints, e.g. `ws://127.0.0.1:8080/media`.
    pub media_base_url: String,
    /// Base URL of carrier status callbacks, e.g. `http://127.0.0.1:8080/carrier`.
    pub callback_base_url: String,
    /// How long an answered call may wait for its media stream.
    pub media_wait: Duration,
    /// Wall-clock milliseconds (replaceable in tests).
    pub now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
}

/// A call live on this engine: its actor, and the workspace it belongs to.
pub(crate) struct LiveCall<M: Send + 'static> {
    pub actor: ActorRef<CallMsg<M>>,
    pub org_id: OrgId,
}

/// Shared by every actor of the tree.
pub(crate) struct EngineShared<M: Send + 'static> {
    pub config: EngineConfig<M>,
    pub calls: Mutex<HashMap<CallId, LiveCall<M>>>,
    /// Set once shutdown began: queued calls stay queued (in the store) for
    /// the next run instead of starting only to be ended by the shutdown.
    pub stopping: std::sync::atomic::AtomicBool,
    /// Set while an operator drains the node: like `stopping`, but undone by
    /// [`Engine::resume_new_calls`].
    pub paused: std::sync::atomic::AtomicBool,
}

impl<M: Send + 'static> EngineShared<M> {
    pub fn now_ms(&self) -> i64 {
        (self.config.now_ms)()
    }

    pub fn live_call(&self, call_id: CallId) -> Option<ActorRef<CallMsg<M>>> {
        Some(self.calls.lock().ok()?.get(&call_id)?.actor.clone())
    }

    /// Whether no call may start now (shutdown or an operator's drain).
    pub fn starts_held(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.stopping.load(SeqCst) || self.paused.load(SeqCst)
    }
}

/// How long ending a live call at shutdown may take: the conversation winds
/// down and the runner stores its results before the end is recorded.
pub const END_WAIT: Duration = Duration::from_secs(20);

/// Handle to the running engine; cheap to clone. `M` is the media stream its
/// conversations run on.
pub struct Engine<M: Send + 'static> {
    root: ActorRef<RootMsg>,
    shared: Arc<EngineShared<M>>,
}

impl<M: Send + 'static> Clone for Engine<M> {
    fn clone(&self) -> Self {
        Self {
            root: self.root.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<M: Send + 'static> Engine<M> {
    /// Starts the root supervisor.
    pub async fn start(config: EngineConfig<M>) -> Result<Self, EngineError> {
        let shared = Arc::new(EngineShared {
            config,
            calls: Mutex::new(HashMap::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
            paused: std::sync::atomic::AtomicBool::new(false),
        });
        let (root, _) = Actor::spawn(None, RootActor::default(), Arc::clone(&shared))
            .await
            .map_err(|e| EngineError::Stopped(e.to_string()))?;
        Ok(Self { root, shared })
    }

    /// Queues a call behind its workspace's slots (or starts it at once).
    pub fn enqueue(&self, job: CallJob) -> Result<(), EngineError> {
        self.root
            .send_message(RootMsg::Enqueue(job))
            .map_err(|e| EngineError::Stopped(e.to_string()))
    }

    /// Puts a started batch into its workspace's round-robin: its items are
    /// pulled from `feed` one by one as slots free up. Idempotent while the
    /// batch is being fed; call again after a pause or when items were added.
    pub fn feed_batch(
        &self,
        org_id: OrgId,
        batch_id: BatchId,
        org_concurrency: u32,
        feed: Arc<dyn BatchFeed>,
    ) -> Result<(), EngineError> {
        self.root
            .send_message(RootMsg::FeedBatch(BatchRegistration {
                org_id,
                batch_id,
                org_concurrency,
                feed,
            }))
            .map_err(|e| EngineError::Stopped(e.to_string()))
    }

    /// Ids of the batches a workspace is currently pulling from, in turn order.
    pub async fn fed_batches(&self, org_id: OrgId) -> Result<Vec<BatchId>, EngineError> {
        ractor::call!(self.root, RootMsg::FedBatches, org_id)
            .map_err(|e| EngineError::Stopped(e.to_string()))
    }

    /// Starts an inbound call at once if its workspace has a free slot (or it
    /// bypasses the slots: the store counted them on a shared database);
    /// otherwise answers [`Admission::Busy`], or holds it ahead of every queued
    /// outbound call for at most the [`InboundWait::Hold`] given.
    pub async fn admit(&self, job: CallJob, wait: InboundWait) -> Result<Admission, EngineError> {
        ractor::call!(self.root, RootMsg::Admit, job, wait)
            .map_err(|e| EngineError::Stopped(e.to_string()))
    }

    /// Whether an inbound call is holding for a slot of its workspace.
    pub async fn is_holding(&self, org_id: OrgId, call_id: CallId) -> Result<bool, EngineError> {
        ractor::call!(self.root, RootMsg::IsHolding, org_id, call_id)
            .map_err(|e| EngineError::Stopped(e.to_string()))
    }

    /// Cancels a queued call or hangs up a live one.
    pub async fn cancel(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> Result<CancelOutcome, EngineError> {
        let reply = ractor::call!(self.root, RootMsg::Cancel, org_id, call_id)
            .map_err(|e| EngineError::Stopped(e.to_string()))?;
        Ok(reply)
    }

    /// Hands an answered call's media stream to its call actor; gives it back
    /// when no live call is waiting for it.
    pub fn attach_media(&self, call_id: CallId, media: M) -> Result<(), Option<M>> {
        match self.shared.live_call(call_id) {
            // An actor that stopped meanwhile gives the message back; any other send
            // failure loses it with the actor.
            Some(actor) => actor
                .send_message(CallMsg::Media(media))
                .map_err(|e| match e {
                    ractor::MessagingErr::SendErr(CallMsg::Media(m)) => Some(m),
                    _ => None,
                }),
            None => Err(Some(media)),
        }
    }

    /// The workspace of a call live on this engine, or `None` when it is not
    /// live here; answers without a database read (carrier callbacks look up
    /// the account of the call's workspace).
    pub fn live_call_org(&self, call_id: CallId) -> Option<OrgId> {
        Some(self.shared.calls.lock().ok()?.get(&call_id)?.org_id)
    }

    /// Whether the engine holds a live actor for the call.
    pub fn is_live(&self, call_id: CallId) -> bool {
        self.shared.live_call(call_id).is_some()
    }

    /// Routes a carrier status callback to the call's actor.
    pub fn carrier_status(
        &self,
        call_id: CallId,
        status: CarrierStatus,
    ) -> Result<(), EngineError> {
        let actor = self.shared.live_call(call_id).ok_or(EngineError::NotLive)?;
        actor
            .send_message(CallMsg::Carrier(status))
            .map_err(|e| EngineError::Stopped(e.to_string()))
    }

    /// Slot usage of a workspace.
    pub async fn org_snapshot(&self, org_id: OrgId) -> Result<OrgSnapshot, EngineError> {
        ractor::call!(self.root, RootMsg::Snapshot, org_id)
            .map_err(|e| EngineError::Stopped(e.to_string()))
    }

    /// Number of live call actors across all workspaces.
    pub fn live_calls(&self) -> usize {
        self.shared.calls.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// The ids of the calls live on this engine (dialing, ringing or talking), as the
    /// service gave them.
    pub fn live_call_ids(&self) -> Vec<CallId> {
        self.shared
            .calls
            .lock()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Starts draining: no call starts any more (queued ones stay queued,
    /// in the store, for the next run); live calls go on.
    pub fn begin_drain(&self) {
        self.shared
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Holds new calls (an operator drained the node): queued calls and
    /// batches wait in the engine, live calls go on. Undone by
    /// [`Engine::resume_new_calls`], unlike [`Engine::begin_drain`].
    pub fn pause_new_calls(&self) {
        self.shared
            .paused
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets calls start again after [`Engine::pause_new_calls`]: every
    /// workspace fills its free slots from its queue and batches.
    pub fn resume_new_calls(&self) -> Result<(), EngineError> {
        let was_paused = self
            .shared
            .paused
            .swap(false, std::sync::atomic::Ordering::SeqCst);
        if was_paused {
            self.root
                .send_message(RootMsg::Pump)
                .map_err(|e| EngineError::Stopped(e.to_string()))?;
        }
        Ok(())
    }

    /// Whether [`Engine::pause_new_calls`] holds new calls.
    pub fn is_paused(&self) -> bool {
        self.shared.paused.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether [`Engine::begin_drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.shared
            .stopping
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Ends every live call with `reason` (hung up; answered ones completed
    /// and billed to now, unanswered ones failed), all at once, and returns
    /// when each has stored its results and recording and recorded its end,
    /// or after [`END_WAIT`] for one that does not.
    pub async fn end_live_calls(&self, reason: EndedReason) {
        let live: Vec<ActorRef<CallMsg<M>>> = self
            .shared
            .calls
            .lock()
            .map(|c| c.values().map(|live| live.actor.clone()).collect())
            .unwrap_or_default();
        let wait_ms = u64::try_from(END_WAIT.as_millis()).unwrap_or(u64::MAX);
        let ends = live.iter().map(|actor| async move {
            // An actor that ended meanwhile drops the port: nothing to wait for.
            let _ = ractor::call_t!(actor, CallMsg::Shutdown, wait_ms, reason);
        });
        futures::future::join_all(ends).await;
    }

    /// Stops the tree: no call starts any more, live calls are hung up and
    /// ended with `reason` once their results are stored, then the actors stop.
    pub async fn shutdown_with(&self, reason: EndedReason) {
        self.begin_drain();
        self.end_live_calls(reason).await;
        self.root.stop(None);
    }

    /// [`Engine::shutdown_with`] `service-restart`: what an in-process stop
    /// (tests, the load generator) leaves for the next start to find.
    pub async fn shutdown(&self) {
        self.shutdown_with(EndedReason::ServiceRestart).await;
    }
}

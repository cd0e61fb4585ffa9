//! One actor per live call: dials through the carrier, follows its status,
//! takes the media stream when the call is answered, runs the conversation,
//! and records exactly one terminal outcome.

use super::{CallEnd, CallJob, CallStatus, EngineShared, LiveCall, MachineVerdicts};
use crate::carrier::{AnsweredBy, Carrier, CarrierStatus, DialRequest, StatusSink};
use crate::ended_reason::EndedReason;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Messages of a call actor whose conversation runs on media `M`.
pub(crate) enum CallMsg<M> {
    /// Place the call (sent to itself on start).
    Dial,
    /// Progress reported by the carrier.
    Carrier(CarrierStatus),
    /// The answered call's media stream arrived.
    Media(M),
    /// Cancel requested through the API.
    Cancel,
    /// The conversation ended with this reason.
    ConversationDone(EndedReason),
    /// A guard timer fired.
    Timeout(TimeoutKind),
    /// The service is stopping: end the call with this reason, answering
    /// once its results are stored and its end recorded.
    Shutdown(EndedReason, RpcReplyPort<()>),
}

/// Guard timers of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeoutKind {
    /// Rang far longer than the ring timeout.
    Ring,
    /// Answered, but no media stream arrived.
    Media,
    /// Past the agent's maximum duration.
    MaxDuration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd)]
enum Phase {
    Dialing,
    Answered,
    Conversing,
}

/// The call actor of an engine whose calls run on media `M`.
pub(crate) struct CallActor<M>(PhantomData<fn() -> M>);

impl<M> Default for CallActor<M> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

pub(crate) struct CallState<M: Send + 'static> {
    job: CallJob,
    shared: Arc<EngineShared<M>>,
    phase: Phase,
    carrier: Option<Arc<dyn Carrier>>,
    carrier_call_id: Option<String>,
    answered_at: Option<i64>,
    conversation: CancellationToken,
    /// Cancels the conversation if this actor dies, however it dies.
    _guard: DropGuard,
    stop_reason: Option<EndedReason>,
    finished: bool,
    /// Shutdown requests waiting for the conversation to wind down (its
    /// results and recording stored) and the end to be recorded.
    shutdown_waiters: Vec<RpcReplyPort<()>>,
    /// Where the carrier's answering-machine verdicts go; the conversation reads them.
    machine_tx: mpsc::UnboundedSender<AnsweredBy>,
    /// Taken by the conversation when the media stream arrives.
    machine_rx: Option<MachineVerdicts>,
}

fn timer<M: Send + 'static>(myself: &ActorRef<CallMsg<M>>, after: Duration, kind: TimeoutKind) {
    let me = myself.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = me.send_message(CallMsg::Timeout(kind));
    });
}

impl<M: Send + 'static> CallState<M> {
    async fn finish(
        &mut self,
        myself: &ActorRef<CallMsg<M>>,
        status: CallStatus,
        reason: EndedReason,
    ) {
        if self.finished {
            return;
        }
        self.finished = true;
        let end = CallEnd {
            call_id: self.job.call_id,
            status,
            ended_reason: reason,
            answered_at: self.answered_at,
            ended_at: self.shared.now_ms(),
        };
        if let Err(err) = self.shared.config.ledger.finish(end).await {
            tracing::error!(call = %self.job.call_id, error = %err, "could not record call end");
        }
        myself.stop(None);
    }

    async fn hangup(&self) {
        if let (Some(carrier), Some(id)) = (&self.carrier, &self.carrier_call_id)
            && let Err(err) = carrier.hangup(id).await
        {
            tracing::warn!(call = %self.job.call_id, error = %err, "carrier hangup failed");
        }
    }

    async fn answered(&mut self, myself: &ActorRef<CallMsg<M>>) {
        if self.phase >= Phase::Answered {
            return;
        }
        self.phase = Phase::Answered;
        let now = self.shared.now_ms();
        self.answered_at = Some(now);
        if let Err(err) = self
            .shared
            .config
            .ledger
            .transition(self.job.call_id, CallStatus::InProgress, now)
            .await
        {
            tracing::warn!(call = %self.job.call_id, error = %err, "could not record answer");
        }
        timer(myself, self.shared.config.media_wait, TimeoutKind::Media);
        let limit = Duration::from_secs(u64::from(self.job.max_duration_seconds) + 5);
        timer(myself, limit, TimeoutKind::MaxDuration);
    }

    /// Ends the conversation early; the reason wins over what the runner reports.
    fn stop_conversation(&mut self, reason: EndedReason) {
        self.stop_reason.get_or_insert(reason);
        self.conversation.cancel();
    }
}

#[ractor::async_trait]
impl<M: Send + 'static> Actor for CallActor<M> {
    type Msg = CallMsg<M>;
    type State = CallState<M>;
    type Arguments = (CallJob, Arc<EngineShared<M>>);

    async fn pre_start(
        &self,
        myself: ActorRef<CallMsg<M>>,
        (job, shared): (CallJob, Arc<EngineShared<M>>),
    ) -> Result<CallState<M>, ActorProcessingErr> {
        if let Ok(mut calls) = shared.calls.lock() {
            calls.insert(
                job.call_id,
                LiveCall {
                    actor: myself.clone(),
                    org_id: job.org_id,
                },
            );
        }
        myself.send_message(CallMsg::Dial)?;
        let conversation = CancellationToken::new();
        let (machine_tx, machine_rx) = mpsc::unbounded_channel();
        Ok(CallState {
            machine_tx,
            machine_rx: Some(machine_rx),
            _guard: conversation.clone().drop_guard(),
            conversation,
            job,
            shared,
            phase: Phase::Dialing,
            carrier: None,
            carrier_call_id: None,
            answered_at: None,
            stop_reason: None,
            finished: false,
            shutdown_waiters: Vec::new(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<CallMsg<M>>,
        state: &mut CallState<M>,
    ) -> Result<(), ActorProcessingErr> {
        if let Ok(mut calls) = state.shared.calls.lock() {
            calls.remove(&state.job.call_id);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<CallMsg<M>>,
        msg: CallMsg<M>,
        state: &mut CallState<M>,
    ) -> Result<(), ActorProcessingErr> {
        if state.finished {
            return Ok(());
        }
        match msg {
            CallMsg::Dial => {
                let Some(carrier) = state
                    .shared
                    .config
                    .carriers
                    .get(&state.job.provider)
                    .cloned()
                else {
                    tracing::error!(call = %state.job.call_id, provider = %state.job.provider, "no such carrier");
                    state
                        .finish(&myself, CallStatus::Failed, EndedReason::CarrierError)
                        .await;
                    return Ok(());
                };
                state.carrier = Some(Arc::clone(&carrier));
                if let Some(leg) = state.job.inbound.clone() {
                    // The person called us and the carrier has answered: nothing to dial.
                    carrier.adopt(
                        &leg.carrier_call_id,
                        &state.job.org_id.to_string(),
                        state.job.max_duration_seconds,
                    );
                    if let Err(err) = state
                        .shared
                        .config
                        .ledger
                        .carrier_call_id(state.job.call_id, &leg.carrier_call_id)
                        .await
                    {
                        tracing::warn!(call = %state.job.call_id, error = %err, "could not record carrier id");
                    }
                    state.carrier_call_id = Some(leg.carrier_call_id);
                    state.answered(&myself).await;
                    return Ok(());
                }
                let config = &state.shared.config;
                let now = state.shared.now_ms();
                let ring = u64::from(state.job.ring_timeout_seconds);
                let expires = now / 1000 + i64::try_from(ring).unwrap_or(60) + 3600;
                let token = config.tokens.issue(state.job.call_id, expires);
                let provider = if state.job.provider == "sim" {
                    "twilio"
                } else {
                    state.job.provider.as_str()
                };
                let req = DialRequest {
                    call_id: state.job.call_id.to_string(),
                    org_id: state.job.org_id.to_string(),
                    to: state.job.to.clone(),
                    from: state.job.from.clone(),
                    media_url: format!("{}/{}", config.media_base_url, provider),
                    media_token: token,
                    status_url: format!(
                        "{}/{}/status/{}",
                        config.callback_base_url, state.job.provider, state.job.call_id
                    ),
                    ring_timeout_seconds: state.job.ring_timeout_seconds,
                    time_limit_seconds: state.job.max_duration_seconds,
                    sim_script: state.job.sim_script.clone(),
                    detect_machine: state.job.detect_machine,
                };
                if let Err(err) = config
                    .ledger
                    .transition(state.job.call_id, CallStatus::Ringing, now)
                    .await
                {
                    tracing::warn!(call = %state.job.call_id, error = %err, "could not record ringing");
                }
                let me = myself.clone();
                let sink = StatusSink::new(move |status| {
                    let _ = me.send_message(CallMsg::Carrier(status));
                });
                match carrier.place(req, sink).await {
                    Ok(id) => {
                        if let Err(err) =
                            config.ledger.carrier_call_id(state.job.call_id, &id).await
                        {
                            tracing::warn!(call = %state.job.call_id, error = %err, "could not record carrier id");
                        }
                        state.carrier_call_id = Some(id);
                        timer(&myself, Duration::from_secs(ring + 30), TimeoutKind::Ring);
                    }
                    Err(err) => {
                        tracing::warn!(call = %state.job.call_id, error = %err, "carrier refused the call");
                        state
                            .finish(&myself, CallStatus::Failed, EndedReason::CarrierError)
                            .await;
                    }
                }
            }
            CallMsg::Carrier(status) => match status {
                CarrierStatus::Ringing => {}
                CarrierStatus::Answered => {
                    state.answered(&myself).await;
                    let fault = state.job.provider == "sim"
                        && state.job.sim_fault.as_deref() == Some("engine-panic");
                    if fault {
                        panic!("sim fault injected: engine-panic after answer");
                    }
                }
                CarrierStatus::NoAnswer | CarrierStatus::Busy | CarrierStatus::Failed(_)
                    if state.phase == Phase::Dialing =>
                {
                    let (status, reason) = match status {
                        CarrierStatus::NoAnswer => (CallStatus::NoAnswer, EndedReason::NoAnswer),
                        CarrierStatus::Busy => (CallStatus::Busy, EndedReason::Busy),
                        _ => (CallStatus::Failed, EndedReason::CarrierError),
                    };
                    state.finish(&myself, status, reason).await;
                }
                CarrierStatus::NoAnswer | CarrierStatus::Busy | CarrierStatus::Failed(_) => {}
                CarrierStatus::AnsweredBy(verdict) => {
                    // Buffered until the conversation starts; dropped once it has ended.
                    let _ = state.machine_tx.send(verdict);
                }
                CarrierStatus::Completed => match state.phase {
                    Phase::Conversing => state.stop_conversation(EndedReason::CallerHangup),
                    Phase::Answered => {
                        state
                            .finish(&myself, CallStatus::Completed, EndedReason::CallerHangup)
                            .await
                    }
                    Phase::Dialing => {
                        state
                            .finish(&myself, CallStatus::NoAnswer, EndedReason::NoAnswer)
                            .await
                    }
                },
            },
            CallMsg::Media(media) => {
                if state.phase == Phase::Conversing {
                    // A second stream for the same call (e.g. a carrier retry) is refused by dropping it.
                    drop(media);
                    return Ok(());
                }
                state.answered(&myself).await;
                state.phase = Phase::Conversing;
                let runner = Arc::clone(&state.shared.config.runner);
                let job = state.job.clone();
                let answered_at = state.answered_at.unwrap_or_else(|| state.shared.now_ms());
                let cancel = state.conversation.child_token();
                let machine = state.machine_rx.take().unwrap_or_else(|| {
                    // Only one conversation runs per call; a fresh channel never hears a verdict.
                    mpsc::unbounded_channel().1
                });
                let me = myself.clone();
                tokio::spawn(async move {
                    let reason = runner.run(job, media, answered_at, machine, cancel).await;
                    let _ = me.send_message(CallMsg::ConversationDone(reason));
                });
            }
            CallMsg::Cancel => match state.phase {
                Phase::Conversing => state.stop_conversation(EndedReason::Canceled),
                Phase::Answered => {
                    state.hangup().await;
                    state
                        .finish(&myself, CallStatus::Completed, EndedReason::Canceled)
                        .await;
                }
                Phase::Dialing => {
                    state.hangup().await;
                    state
                        .finish(&myself, CallStatus::Canceled, EndedReason::Canceled)
                        .await;
                }
            },
            CallMsg::ConversationDone(reason) => {
                // A transferred callee is talking to a person on the carrier's bridge now.
                if reason != EndedReason::Transferred {
                    state.hangup().await;
                }
                // A carrier's "completed" can overtake the conversation's own
                // ending (the agent hung up, so the callee's leg closed): the
                // conversation's reason wins unless it only saw the cancel.
                let reason = match state.stop_reason {
                    Some(EndedReason::CallerHangup) if reason != EndedReason::Canceled => reason,
                    Some(stop) => stop,
                    None => reason,
                };
                // An answering machine took the call: billed as answered, told apart.
                let status = if reason == EndedReason::Voicemail {
                    CallStatus::Voicemail
                } else {
                    CallStatus::Completed
                };
                state.finish(&myself, status, reason).await;
                for waiter in state.shutdown_waiters.drain(..) {
                    let _ = waiter.send(());
                }
            }
            CallMsg::Timeout(kind) => match (kind, state.phase) {
                (TimeoutKind::Ring, Phase::Dialing) => {
                    state.hangup().await;
                    state
                        .finish(&myself, CallStatus::NoAnswer, EndedReason::NoAnswer)
                        .await;
                }
                (TimeoutKind::Media, Phase::Answered) => {
                    state.hangup().await;
                    state
                        .finish(&myself, CallStatus::Failed, EndedReason::MediaTimeout)
                        .await;
                }
                (TimeoutKind::MaxDuration, Phase::Conversing) => {
                    state.stop_conversation(EndedReason::MaxDuration)
                }
                _ => {}
            },
            CallMsg::Shutdown(reason, reply) => {
                if state.phase == Phase::Conversing {
                    // The runner stores the transcript, results and recording
                    // after the loop stops; the end is recorded (and the
                    // shutdown answered) only once it has, so nothing is
                    // written after the store closes.
                    state.stop_conversation(reason);
                    state.shutdown_waiters.push(reply);
                    return Ok(());
                }
                state.conversation.cancel();
                state.hangup().await;
                let status = if state.answered_at.is_some() {
                    CallStatus::Completed
                } else {
                    CallStatus::Failed
                };
                state.finish(&myself, status, reason).await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}

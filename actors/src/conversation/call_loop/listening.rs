//! The caller's side and turn-taking: caller audio through the DTMF
//! detector, VAD, endpointer, recorder and ASR one 20 ms frame at a time;
//! barge-in once the caller has talked over the agent long enough; telling a
//! backchannel from a turn; and the transcribed turn that starts the reply.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;
use voxline_media::endpoint::{EndpointEvent, EndpointState};

use super::turn::{PendingLatency, Speech, TurnKind};
use super::voicemail::{self, MachinePhase};
use super::{CallLoop, FRAME_MS};
use crate::carrier::AnsweredBy;
use crate::conversation::Speaker;
use crate::conversation::text::contains_phrase;
use crate::conversation::transport::MediaTransport;
use crate::providers::{AsrEvent, AsrStream, ChatMessage, ChatRole, ProviderError, ProviderKind};

/// An utterance whose transcript is awaited.
#[derive(Debug, Clone, Copy)]
pub(super) struct Awaiting {
    speech_end_at: Instant,
    endpoint_at: Instant,
    pub(super) deadline: Instant,
}

/// The listening side's state.
#[derive(Debug, Default)]
pub(super) struct Listening {
    /// The endpointer is inside an utterance.
    pub(super) in_utterance: bool,
    /// The utterance began while the agent was talking.
    started_over_agent: bool,
    /// The utterance interrupted the agent.
    barged: bool,
    last_speech_at: Option<Instant>,
    pub(super) awaiting: Option<Awaiting>,
    /// Final transcript text gathered for the current utterance.
    text: String,
    /// The caller has begun an utterance at some point of the call.
    caller_spoke: bool,
}

/// The ASR stream's lifecycle.
pub(super) enum AsrSlot {
    /// Not used (announcement, keypad) or closed.
    Idle,
    /// Being opened off the loop.
    Opening(JoinHandle<Result<Box<dyn AsrStream>, ProviderError>>),
    /// Open.
    Open(Box<dyn AsrStream>),
}

/// What the ASR slot produced.
pub(super) enum AsrSignal {
    Opened(Box<dyn AsrStream>),
    Event(AsrEvent),
    Failed(ProviderError),
}

/// The next signal of the ASR slot.
pub(super) async fn next_asr(slot: &mut AsrSlot) -> AsrSignal {
    match slot {
        AsrSlot::Idle => std::future::pending().await,
        AsrSlot::Opening(handle) => match handle.await {
            Ok(Ok(stream)) => AsrSignal::Opened(stream),
            Ok(Err(error)) => AsrSignal::Failed(error),
            Err(join) => AsrSignal::Failed(ProviderError::Request {
                provider: ProviderKind::Asr,
                message: join.to_string(),
            }),
        },
        AsrSlot::Open(stream) => match stream.next_event().await {
            Some(Ok(event)) => AsrSignal::Event(event),
            Some(Err(error)) => AsrSignal::Failed(error),
            None => AsrSignal::Failed(ProviderError::Stream {
                provider: ProviderKind::Asr,
                message: "recognition stream ended".to_owned(),
            }),
        },
    }
}

impl<T: MediaTransport> CallLoop<T> {
    /// Runs the detectors over newly arrived caller audio, one 20 ms frame at a time.
    pub(super) async fn on_caller_audio(&mut self) {
        self.inbound.push_wire(&self.wire_in);
        let rate = self.inbound.analysis_rate();
        loop {
            let frame = match self.inbound.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    debug!(%error, "caller audio dropped");
                    break;
                }
            };
            let now = Instant::now();
            let digit = self.dtmf.as_mut().and_then(|dtmf| dtmf.push(frame));
            let machine = match self.amd.as_mut() {
                Some(detector) if !detector.is_done() => detector.push(frame),
                _ => None,
            };
            let speech = self.vad.as_mut().map(|vad| vad.is_speech(frame));
            let after_beep = matches!(self.machine, MachinePhase::AfterBeep { .. })
                .then(|| speech.map_or_else(|| voicemail::quiet_by_peak(frame), |s| !s));
            let mut asr_failure = None;
            if let AsrSlot::Open(stream) = &mut self.asr
                && let Err(error) = stream.push_audio(frame, rate)
            {
                asr_failure = Some(error);
            }
            if let Some(recorder) = self.recorder.as_mut() {
                match self.inbound.recording_frame() {
                    Ok(frame) => recorder.caller(frame),
                    Err(error) => debug!(%error, "caller audio not recorded"),
                }
            }
            if let Some(error) = asr_failure {
                self.fail(error);
                return;
            }
            if let Some(event) = machine {
                self.on_machine_verdict(voicemail::verdict(event), now)
                    .await;
                if self.ended.is_some() {
                    return;
                }
            }
            if let Some(digit) = digit {
                self.on_digit(digit).await;
            }
            if let Some(quiet) = after_beep {
                self.after_beep_frame(quiet, now).await;
            }
            // A machine's greeting is nobody's turn: no barge-in, no reply.
            if let Some(is_speech) = speech
                && !self.machine.is_machine()
            {
                self.on_vad(is_speech, now).await;
            }
            if self.ended.is_some() {
                return;
            }
        }
    }

    async fn on_vad(&mut self, is_speech: bool, now: Instant) {
        if is_speech {
            self.listening.last_speech_at = Some(now);
            self.last_activity = now;
        }
        match self.endpointer.push(is_speech, FRAME_MS) {
            Some(EndpointEvent::SpeechStart) => {
                if self.machine == MachinePhase::Undecided
                    && !self.listening.caller_spoke
                    && self.turn.is_none()
                    && self.greeting_latency.is_some()
                {
                    // Quiet through the agent's greeting, then talking once it ended: a
                    // person taking their turn (a machine plays over whatever we say), however
                    // long they go on.
                    self.on_machine_verdict(AnsweredBy::Human, now).await;
                }
                debug!(call_id = %self.call_id, over_agent = self.turn.is_some(), "caller speech started");
                self.listening.caller_spoke = true;
                self.listening.in_utterance = true;
                self.listening.started_over_agent = self.turn.is_some();
                self.listening.barged = false;
            }
            Some(EndpointEvent::SpeechEnd { speech_ms }) => {
                self.on_utterance_end(speech_ms, now);
            }
            Some(EndpointEvent::Discarded { .. }) => {
                debug!(call_id = %self.call_id, "caller sound too short for an utterance");
                self.listening.in_utterance = false;
            }
            None => {}
        }
        if let EndpointState::Speaking { speech_ms, .. } = self.endpointer.state()
            && self.interruptible
            && self.turn.is_some()
            && !self.listening.barged
            && speech_ms >= self.min_interruption_ms
        {
            self.listening.barged = true;
            self.interrupt(true).await;
        }
    }

    /// The endpointer says the caller stopped: ask the ASR for the transcript.
    fn on_utterance_end(&mut self, speech_ms: u32, now: Instant) {
        let listening = &mut self.listening;
        listening.in_utterance = false;
        let backchannel = listening.started_over_agent
            && !listening.barged
            && (self.turn.is_some() || speech_ms < self.min_interruption_ms);
        debug!(call_id = %self.call_id, speech_ms, backchannel, "caller utterance ended");
        if backchannel {
            // Talk over the agent that did not interrupt it is not a turn.
            if listening.awaiting.is_none() {
                listening.text.clear();
            }
            return;
        }
        let AsrSlot::Open(stream) = &mut self.asr else {
            debug!(call_id = %self.call_id, "utterance before the ASR was open; dropped");
            return;
        };
        if let Err(error) = stream.finalize() {
            self.fail(error);
            return;
        }
        let speech_end_at = self.listening.last_speech_at.unwrap_or(now);
        self.listening.awaiting = Some(Awaiting {
            speech_end_at,
            endpoint_at: now,
            deadline: now + self.asr_final_timeout,
        });
    }

    pub(super) async fn on_asr(&mut self, signal: AsrSignal) {
        match signal {
            AsrSignal::Opened(stream) => self.asr = AsrSlot::Open(stream),
            AsrSignal::Failed(error) => {
                self.asr = AsrSlot::Idle;
                self.fail(error);
            }
            AsrSignal::Event(AsrEvent::Final { text }) => {
                debug!(call_id = %self.call_id, %text, "transcript");
                let listening = &mut self.listening;
                if listening.in_utterance || listening.awaiting.is_some() {
                    if !listening.text.is_empty() {
                        listening.text.push(' ');
                    }
                    listening.text.push_str(text.trim());
                }
            }
            AsrSignal::Event(AsrEvent::UtteranceEnd) => {
                if self.listening.awaiting.is_some() && !self.listening.in_utterance {
                    self.take_user_turn(Instant::now()).await;
                }
            }
            AsrSignal::Event(AsrEvent::Interim(_) | AsrEvent::SpeechStarted) => {}
        }
    }

    /// The caller's utterance is transcribed: record it and start the reply.
    pub(super) async fn take_user_turn(&mut self, now: Instant) {
        let Some(awaiting) = self.listening.awaiting.take() else {
            return;
        };
        let text = std::mem::take(&mut self.listening.text).trim().to_owned();
        if text.is_empty() {
            debug!(call_id = %self.call_id, "the utterance had no words");
            return;
        }
        if self
            .end_call_phrases
            .iter()
            .any(|phrase| contains_phrase(&text, phrase))
        {
            self.hangup_after_reply = true;
        }
        self.history
            .push(ChatMessage::new(ChatRole::User, text.clone()));
        self.push_turn(Speaker::User, text, now);
        // A reply to an earlier utterance that is still going gives way to this one.
        self.interrupt(true).await;
        let request = self.reply_request();
        let latency = PendingLatency {
            speech_end_at: awaiting.speech_end_at,
            endpoint_at: awaiting.endpoint_at,
            transcript_at: now,
            llm_first_token: Duration::ZERO,
            tts_first_byte: Duration::ZERO,
        };
        self.start_speaking(TurnKind::Reply, Speech::Reply(request), Some(latency))
            .await;
    }
}

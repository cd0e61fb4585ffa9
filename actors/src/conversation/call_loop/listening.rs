//! The caller's side and turn-taking: caller audio through the DTMF
//! detector, VAD, recorder and ASR one 20 ms frame at a time; the VAD's
//! decisions, the transcripts and the end-of-turn model's verdicts fed to the
//! turn-taking machine (`voxline_media::turn_taking`) and its actions carried
//! out (ask the model, end the turn, pause, resume or stop the agent, discard a
//! backchannel); and the transcribed turn that starts the reply.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;
use voxline_media::turn_taking::{Actions, AskId, EndReason, ModelVerdict, TurnAction};

use super::CallLoop;
use super::turn::{PendingLatency, Speech, TurnKind};
use super::turn_audio::PendingVerdict;
use super::voicemail::{self, MachinePhase};
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
            if let Some(audio) = self.turn_audio.as_mut() {
                audio.push(frame);
            }
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
        let actions = self.turns.push_frame(is_speech);
        self.carry_out(actions, now).await;
    }

    /// Does what the turn-taking machine asks.
    pub(super) async fn carry_out(&mut self, actions: Actions, now: Instant) {
        for action in actions {
            if self.ended.is_some() {
                return;
            }
            match action {
                TurnAction::SpeechStarted { over_agent } => {
                    self.on_speech_started(over_agent, now).await;
                }
                TurnAction::AskModel { ask } => self.ask_model(ask),
                TurnAction::PeekWords { over_agent } => self.peek_words(over_agent),
                TurnAction::EndOfTurn {
                    reason,
                    speech_ms,
                    silence_ms,
                } => self.on_utterance_end(reason, speech_ms, silence_ms, now),
                TurnAction::PauseAgent => {
                    debug!(call_id = %self.call_id, "caller talks over the agent: agent paused");
                }
                TurnAction::ResumeAgent => {
                    debug!(call_id = %self.call_id, "a backchannel: agent resumes");
                    self.fill_playback().await;
                }
                TurnAction::YieldTurn => {
                    debug!(call_id = %self.call_id, "caller interrupts: agent yields");
                    self.interrupt(true).await;
                }
                TurnAction::Discard {
                    speech_ms,
                    backchannel,
                } => self.on_discard(speech_ms, backchannel),
            }
        }
    }

    async fn on_speech_started(&mut self, over_agent: bool, now: Instant) {
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
        debug!(call_id = %self.call_id, over_agent, "caller speech started");
        self.listening.caller_spoke = true;
        // The onset can join a burst and a stop's closure: its whole length is the
        // utterance's, not just the start requirement.
        let onset_ms = self
            .turns
            .timing()
            .map_or(self.turns.config().start_speech_ms, |(speech_ms, _)| {
                speech_ms
            });
        if let Some(audio) = self.turn_audio.as_mut() {
            audio.utterance_started(onset_ms);
        }
    }

    /// Smart turn-taking asks the end-of-turn model about the utterance so far; its answer
    /// comes back through the loop's `select!`, never on the frame path.
    fn ask_model(&mut self, ask: AskId) {
        self.verdict = Some(match self.turn_audio.as_mut() {
            Some(audio) => audio.ask(ask),
            None => PendingVerdict::Ready(ask, ModelVerdict::Unavailable),
        });
    }

    /// The machine judges a pause and has no fresh words: a recognizer without interim
    /// results transcribes the utterance so far, and the silence rule waits for it.
    fn peek_words(&mut self, over_agent: bool) {
        let AsrSlot::Open(stream) = &mut self.asr else {
            return;
        };
        match stream.peek(over_agent) {
            Ok(true) => self.turns.words_coming(),
            Ok(false) => {}
            Err(error) => self.fail(error),
        }
    }

    /// The end-of-turn model answered (or could not).
    pub(super) async fn on_model_verdict(&mut self, ask: AskId, verdict: ModelVerdict) {
        debug!(call_id = %self.call_id, ?verdict, "end-of-turn verdict");
        let actions = self.turns.model_verdict(ask, verdict);
        self.carry_out(actions, Instant::now()).await;
    }

    /// Talk that is not a turn: noise, or a backchannel over the agent.
    fn on_discard(&mut self, speech_ms: u32, backchannel: bool) {
        debug!(call_id = %self.call_id, speech_ms, backchannel, "caller sound is not a turn");
        self.verdict = None;
        if self.listening.awaiting.is_none() {
            self.listening.text.clear();
        }
        // A backchannel was words the recognizer heard; noise is left to it.
        if backchannel
            && let AsrSlot::Open(stream) = &mut self.asr
            && let Err(error) = stream.discard()
        {
            self.fail(error);
        }
    }

    /// The caller's turn is over: ask the ASR for the transcript.
    fn on_utterance_end(
        &mut self,
        reason: EndReason,
        speech_ms: u32,
        silence_ms: u32,
        now: Instant,
    ) {
        debug!(call_id = %self.call_id, ?reason, speech_ms, silence_ms, "caller turn ended");
        // Per reason, so a load test can tell what share of turns fell back to silence.
        metrics::counter!("voxline_turn_ends_total", "reason" => reason.as_str()).increment(1);
        self.verdict = None;
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
                let in_utterance = self.turns.in_utterance();
                let listening = &mut self.listening;
                if in_utterance || listening.awaiting.is_some() {
                    if !listening.text.is_empty() {
                        listening.text.push(' ');
                    }
                    listening.text.push_str(text.trim());
                }
                let actions = self.turns.transcript(&text, true);
                self.carry_out(actions, Instant::now()).await;
            }
            AsrSignal::Event(AsrEvent::Interim(text)) => {
                let actions = self.turns.transcript(&text, false);
                self.carry_out(actions, Instant::now()).await;
            }
            AsrSignal::Event(AsrEvent::UtteranceEnd) => {
                if self.listening.awaiting.is_some() && !self.turns.in_utterance() {
                    self.take_user_turn(Instant::now()).await;
                }
            }
            AsrSignal::Event(AsrEvent::SpeechStarted) => {}
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

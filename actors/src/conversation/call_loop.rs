//! The conversation loop itself: one task per call, one `select!` over the media socket, a
//! 20 ms playback clock, the responder task and the ASR stream.
//!
//! This file holds the loop, its clock and the call's state; the rest is split by what the
//! loop is doing: `speaking` (the agent's turn and its playback pacing, over the turn model
//! in `turn`), `listening` (caller audio, barge-in and turn-taking) and `keypad` (keys and
//! the keypad menu).
//!
//! Turn-taking follows the local VAD and endpointer (ASR only supplies text). The agent's
//! speech is a sequence of segments (one per sentence), each followed by a playback mark, so
//! when the caller barges in the loop knows how much of the reply was actually heard.

mod keypad;
mod listening;
mod speaking;
mod tooling;
mod turn;
mod turn_audio;
mod voicemail;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use voxline_media::carrier::{CarrierCodec, InboundEvent, Outbound, StreamStart};
use voxline_media::dtmf::DtmfDetector;
use voxline_media::turn_taking::{TurnMode, TurnTaking};
use voxline_media::vad::VoiceActivityDetector;

use keypad::KeypadPhase;
use listening::{AsrSlot, Listening, next_asr};
use speaking::next_responder;
use turn::{AgentTurn, Speech, TurnKind};
use turn_audio::{PendingVerdict, TurnAudio, next_verdict};
use voicemail::{MachinePhase, next_carrier_verdict};

use super::audio::{InboundAudio, OutboundAudio, Recorder};
use super::responder::{Responder, ToolEvent};
use super::transport::{MediaTransport, TransportMessage};
use super::{
    CarrierSession, ConversationConfig, ConversationEngine, ConversationObserver,
    ConversationOutcome, EndedReason, KeypadMenu, Speaker, Turn, TurnLatency, VoicemailPlan,
};
use crate::engine::MachineVerdicts;
use crate::providers::{AsrContext, ChatMessage, ProviderError, Providers};
use crate::tools::{CallTools, ToolCallRecord};

/// One telephony frame.
const FRAME: Duration = Duration::from_millis(20);
/// The loop's housekeeping clock: playback top-up, recording, deadlines. Carriers buffer
/// what we send, so the agent's audio goes out in bursts rather than on a 20 ms clock: a
/// tenth of the wake-ups, and a scheduling hiccup shorter than the lead is never heard.
const TICK: Duration = Duration::from_millis(100);
/// How far ahead of the carrier's playback the agent's audio is kept. It must outlast a
/// tick plus scheduling delay; `clear` drops it on barge-in, so it is never heard late.
const PLAYBACK_LEAD: Duration = Duration::from_millis(220);
/// Audio arriving from TTS tops the carrier's buffer up at once when the lead has fallen
/// below this (a stream slower than real time); otherwise the tick does it.
const STARVED_LEAD: Duration = Duration::from_millis(60);
/// Marks not acknowledged this long after the last frame count as played (carriers that
/// never echo them, or an echo lost on the way).
const ACK_GRACE: Duration = Duration::from_millis(1500);
/// How much of a cached message's audio (the welcome every call of an agent shares) a call
/// copies ahead of its playback: the lead and a tick with room to spare. Copying the whole
/// message at the call's start cost its full length in every call answered at once.
const AUDIO_AHEAD: Duration = Duration::from_secs(1);
/// How long closing the ASR may take at hang-up.
const ASR_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Runs a conversation; see [`super::run_conversation`].
pub(crate) async fn run<T: MediaTransport>(
    mut config: ConversationConfig,
    providers: Providers,
    mut transport: T,
    observer: Arc<dyn ConversationObserver>,
    cancel: CancellationToken,
) -> ConversationOutcome {
    let kind = config.carrier.codec.kind();
    let CarrierSession { mut codec, start } =
        std::mem::replace(&mut config.carrier, CarrierSession::new(kind));
    let start = match start {
        Some(start) => Ok(start),
        None => await_start(&mut transport, &mut codec, config.start_timeout, &cancel).await,
    };
    let call = start.and_then(|start| {
        CallLoop::new(config, providers, transport, codec, &start, observer).map_err(|error| {
            warn!(%error, "media stream format not supported");
            EndedReason::CarrierError
        })
    });
    match call {
        // Boxed: the loop's state (about 8 KiB) then lives once, in the box, rather than in
        // the task's future, where an async fn's by-value `self` is stored twice.
        Ok(call) => Box::new(call).run(cancel).await,
        Err(reason) => ConversationOutcome {
            ended_reason: reason,
            error: None,
            transcript: Vec::new(),
            extracted: serde_json::Map::new(),
            latencies: Vec::new(),
            greeting_latency: None,
            answered_at: None,
            duration: Duration::ZERO,
            recording: None,
            tool_calls: Vec::new(),
            transfer: None,
        },
    }
}

/// Reads the carrier's messages until `start`.
async fn await_start<T: MediaTransport>(
    transport: &mut T,
    codec: &mut CarrierCodec,
    wait: Duration,
    cancel: &CancellationToken,
) -> Result<Box<StreamStart>, EndedReason> {
    let deadline = Instant::now() + wait;
    let mut audio = Vec::new();
    loop {
        let message = tokio::select! {
            () = cancel.cancelled() => return Err(EndedReason::Canceled),
            () = sleep_until(deadline) => return Err(EndedReason::CarrierError),
            message = transport.recv() => message,
        };
        let parsed = match message {
            Some(TransportMessage::Text(text)) => codec.parse_text(&text, &mut audio),
            Some(TransportMessage::Binary(data)) => codec.parse_binary(&data, &mut audio),
            Some(TransportMessage::Closed) | None => return Err(EndedReason::CallerHangup),
        };
        match parsed {
            Ok(InboundEvent::Start(start)) => return Ok(start),
            Ok(InboundEvent::Stop { .. }) => return Err(EndedReason::CallerHangup),
            Ok(_) => {}
            Err(error) => debug!(%error, "unreadable carrier message before start"),
        }
    }
}

/// The state of one call's conversation.
struct CallLoop<T> {
    // What the agent does.
    call_id: String,
    engine: ConversationEngine,
    welcome_message: String,
    welcome_audio: Option<Arc<[i16]>>,
    prompt: String,
    language: String,
    voice: String,
    max_duration: Duration,
    silence_timeout: Duration,
    end_call_phrases: Vec<String>,
    keypad_menu: Option<KeypadMenu>,
    announcements_left: u32,
    sim_script: Arc<[String]>,
    sim_questions: Arc<[String]>,
    asr_final_timeout: Duration,
    providers: Providers,
    observer: Arc<dyn ConversationObserver>,
    tools: CallTools,
    tool_drain_timeout: Duration,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    max_reply_sentences: usize,
    closing_phrases: Vec<String>,

    // Media.
    transport: T,
    codec: CarrierCodec,
    started: Instant,
    started_wall: SystemTime,
    ticker: Interval,
    /// When the carrier finishes playing the agent audio sent so far.
    playout_end: Instant,
    wire_in: Vec<u8>,
    outbound: Outbound,
    inbound: InboundAudio,
    playback: OutboundAudio,
    vad: Option<VoiceActivityDetector>,
    /// When the caller's turn ends, and what interrupts the agent.
    turns: TurnTaking,
    /// The caller's audio for the end-of-turn model (smart mode with a model only).
    turn_audio: Option<TurnAudio>,
    /// The model's answer the loop waits for.
    verdict: Option<PendingVerdict>,
    dtmf: Option<DtmfDetector>,
    recorder: Option<Recorder>,

    // Answering machines.
    voicemail: VoicemailPlan,
    /// The engine's detector, until it has nothing more to say.
    amd: Option<voxline_media::amd::AnsweringMachineDetector>,
    /// The carrier's verdicts, when detection is on and the carrier was asked.
    machine_verdicts: Option<MachineVerdicts>,
    machine: MachinePhase,

    // Speaking.
    turn: Option<AgentTurn>,
    responder: Option<Responder>,
    next_turn_id: u64,

    // Listening.
    asr: AsrSlot,
    listening: Listening,
    last_activity: Instant,
    hangup_after_reply: bool,
    keypad: KeypadPhase,
    prompts_played: u32,
    last_digit: Option<(char, Instant)>,

    // Tools.
    tool_tx: mpsc::UnboundedSender<ToolEvent>,
    tool_rx: mpsc::UnboundedReceiver<ToolEvent>,
    /// Calls made so far (for the per-call limit).
    tool_calls_made: u32,
    /// Calls started and not yet recorded.
    tools_in_flight: usize,
    /// The transcript index of the agent turn that made each call, once that turn is kept.
    tool_turns: HashMap<String, usize>,
    /// A transfer asked of the carrier and not yet answered.
    transferring: bool,
    transfer: Option<(String, SystemTime)>,
    tool_records: Vec<ToolCallRecord>,

    // Results.
    history: Vec<ChatMessage>,
    transcript: Vec<Turn>,
    latencies: Vec<TurnLatency>,
    extracted: serde_json::Map<String, serde_json::Value>,
    greeting_latency: Option<Duration>,
    ended: Option<EndedReason>,
    error: Option<String>,
    /// The callee opted out (the model called `opt_out`): however the call ends from
    /// then on (a hang-up before the confirmation is heard, a barge-in over it), it
    /// ends `opt-out`, so the opt-out is never lost.
    opted_out: bool,
}

impl<T: MediaTransport> CallLoop<T> {
    fn new(
        config: ConversationConfig,
        providers: Providers,
        transport: T,
        codec: CarrierCodec,
        start: &StreamStart,
        observer: Arc<dyn ConversationObserver>,
    ) -> Result<Self, voxline_media::MediaError> {
        let format = start.format;
        let inbound = InboundAudio::new(format)?;
        let playback = OutboundAudio::new(format)?;
        let analysis_rate = inbound.analysis_rate();
        let pipeline = config.engine == ConversationEngine::Pipeline;
        let vad = pipeline
            .then(|| VoiceActivityDetector::new(analysis_rate))
            .transpose()?;
        let dtmf = (config.engine != ConversationEngine::Announcement)
            .then(|| DtmfDetector::new(analysis_rate))
            .transpose()?;
        // Only smart turn-taking asks a model, and only a conversation listens for turns.
        let turn_audio = match config.end_of_turn.clone() {
            Some(model) if pipeline && config.turns.mode == TurnMode::Smart => {
                Some(TurnAudio::new(model, analysis_rate)?)
            }
            _ => None,
        };
        let turns = TurnTaking::new(config.turns.clone(), turn_audio.is_some());
        let amd = voicemail::detector(config.voicemail.detect, analysis_rate, &config.call_id);
        let machine_verdicts = config.machine_verdicts.filter(|_| config.voicemail.detect);
        let recorder = config
            .recording_path
            .and_then(|path| match Recorder::create(path) {
                Ok(recorder) => Some(recorder),
                Err(error) => {
                    // A call without its recording beats no call.
                    warn!(%error, call_id = %config.call_id, "cannot create the recording");
                    None
                }
            });
        let started = Instant::now();
        let (tool_tx, tool_rx) = mpsc::unbounded_channel();
        let mut ticker = interval_at(started + TICK, TICK);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Self {
            call_id: config.call_id,
            engine: config.engine,
            welcome_message: config.welcome_message,
            welcome_audio: config.welcome_audio,
            prompt: config.prompt,
            language: config.language,
            voice: config.voice,
            max_duration: config.max_duration,
            silence_timeout: config.silence_timeout,
            end_call_phrases: config.end_call_phrases,
            keypad_menu: config.keypad,
            announcements_left: config.announcement_repeat.max(1),
            sim_script: config.sim_script.into(),
            sim_questions: config.sim_questions.into(),
            asr_final_timeout: config.asr_final_timeout,
            providers,
            observer,
            tools: config.tools,
            tool_drain_timeout: config.tool_drain_timeout,
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            max_reply_sentences: config.max_reply_sentences,
            closing_phrases: config.closing_phrases,
            transport,
            codec,
            started,
            started_wall: SystemTime::now(),
            ticker,
            playout_end: started,
            wire_in: Vec::with_capacity(format.bytes_for_ms(40)),
            outbound: Outbound::new(),
            inbound,
            playback,
            vad,
            turns,
            turn_audio,
            verdict: None,
            dtmf,
            recorder,
            voicemail: config.voicemail,
            amd,
            machine_verdicts,
            machine: MachinePhase::Undecided,
            turn: None,
            responder: None,
            next_turn_id: 0,
            asr: AsrSlot::Idle,
            listening: Listening::default(),
            last_activity: started,
            hangup_after_reply: false,
            keypad: KeypadPhase::Idle,
            prompts_played: 0,
            last_digit: None,
            tool_tx,
            tool_rx,
            tool_calls_made: 0,
            tools_in_flight: 0,
            tool_turns: HashMap::new(),
            transferring: false,
            transfer: None,
            tool_records: Vec::new(),
            history: Vec::new(),
            transcript: Vec::new(),
            latencies: Vec::new(),
            extracted: serde_json::Map::new(),
            greeting_latency: None,
            ended: None,
            error: None,
            opted_out: false,
        })
    }

    async fn run(mut self: Box<Self>, cancel: CancellationToken) -> ConversationOutcome {
        self.observer.on_answered(self.started_wall);
        self.begin().await;
        // Made once, not per iteration: the loop turns about a hundred times a second.
        let cancelled = cancel.cancelled();
        let max_duration = sleep_until(self.started + self.max_duration);
        tokio::pin!(cancelled, max_duration);
        while self.ended.is_none() {
            // Media first; the rare branches last, so a wake-up for a frame does not poll the
            // cancellation token (a mutex) on its way.
            tokio::select! {
                biased;
                message = self.transport.recv() => self.on_message(message).await,
                _ = self.ticker.tick() => self.on_tick().await,
                event = next_responder(&mut self.responder) => self.on_responder(event).await,
                signal = next_asr(&mut self.asr) => self.on_asr(signal).await,
                (ask, verdict) = next_verdict(&mut self.verdict) => {
                    self.on_model_verdict(ask, verdict).await;
                }
                Some(event) = self.tool_rx.recv() => self.on_tool_event(event).await,
                verdict = next_carrier_verdict(&mut self.machine_verdicts) => match verdict {
                    Some(verdict) => self.on_machine_verdict(verdict, Instant::now()).await,
                    None => self.machine_verdicts = None,
                },
                () = &mut max_duration => self.end(EndedReason::MaxDuration, None),
                () = &mut cancelled => self.end(EndedReason::Canceled, None),
            }
        }
        self.finish().await
    }

    /// Starts the engine: opens the ASR and speaks first.
    async fn begin(&mut self) {
        match self.engine {
            ConversationEngine::Pipeline => {
                let asr = Arc::clone(&self.providers.asr);
                let context = AsrContext {
                    call_id: self.call_id.clone(),
                    language: self.language.clone(),
                    sample_rate: self.inbound.analysis_rate(),
                    sim_script: Arc::clone(&self.sim_script),
                };
                // Opened off the loop so the greeting does not wait for the vendor.
                self.asr = AsrSlot::Opening(tokio::spawn(async move { asr.open(context).await }));
                if let Some(welcome) = self.welcome_speech() {
                    self.start_speaking(TurnKind::Welcome, welcome, None).await;
                }
            }
            ConversationEngine::Announcement => match self.welcome_speech() {
                Some(message) => {
                    self.announcements_left -= 1;
                    self.start_speaking(TurnKind::Announcement, message, None)
                        .await;
                }
                None => self.end(EndedReason::AgentHangup, None),
            },
            ConversationEngine::Keypad => {
                if self.keypad_menu.is_none() {
                    warn!(call_id = %self.call_id, "keypad agent without a menu");
                    self.end(EndedReason::AgentHangup, None);
                } else if let Some(welcome) = self.welcome_speech() {
                    self.start_speaking(TurnKind::Welcome, welcome, None).await;
                } else {
                    self.keypad_prompt(false).await;
                }
            }
        }
    }

    /// The welcome message as speech: cached audio when warm, else text to synthesize.
    fn welcome_speech(&self) -> Option<Speech> {
        let text = self.welcome_message.trim();
        match &self.welcome_audio {
            Some(audio) if !audio.is_empty() => {
                Some(Speech::Cached(text.to_owned(), Arc::clone(audio)))
            }
            _ if !text.is_empty() => Some(Speech::Text(text.to_owned())),
            _ => None,
        }
    }

    /// Ends the call with `reason`; the first reason wins.
    fn end(&mut self, reason: EndedReason, error: Option<String>) {
        let reason = match reason {
            EndedReason::CallerHangup
            | EndedReason::AgentHangup
            | EndedReason::SilenceTimeout
            | EndedReason::MaxDuration
                if self.opted_out =>
            {
                EndedReason::OptOut
            }
            other => other,
        };
        if self.ended.is_none() {
            debug!(call_id = %self.call_id, %reason, ?error, "conversation ending");
            self.ended = Some(reason);
            self.error = error;
        }
    }

    /// Ends the call because a provider failed.
    fn fail(&mut self, error: ProviderError) {
        warn!(call_id = %self.call_id, %error, "provider failed; ending the call");
        self.end(
            EndedReason::for_provider(error.provider()),
            Some(error.to_string()),
        );
    }

    /// Records a finished turn and tells the observer.
    fn push_turn(&mut self, speaker: Speaker, text: String, now: Instant) {
        let offset = now.saturating_duration_since(self.started);
        let turn = Turn {
            speaker,
            text,
            at: self.started_wall + offset,
            offset,
        };
        self.observer.on_turn(&turn);
        self.transcript.push(turn);
    }

    /// Sends whatever the codec queued.
    async fn flush_outbound(&mut self) {
        let sent = self.transport.send_all(&self.outbound).await;
        self.outbound.clear();
        if let Err(error) = sent {
            self.end(EndedReason::CarrierError, Some(error.to_string()));
        }
    }

    async fn on_message(&mut self, message: Option<TransportMessage>) {
        let parsed = match message {
            Some(TransportMessage::Text(text)) => self.codec.parse_text(&text, &mut self.wire_in),
            Some(TransportMessage::Binary(data)) => {
                self.codec.parse_binary(&data, &mut self.wire_in)
            }
            Some(TransportMessage::Closed) | None => {
                self.end(EndedReason::CallerHangup, None);
                return;
            }
        };
        match parsed {
            Ok(InboundEvent::Media { .. }) => self.on_caller_audio().await,
            Ok(InboundEvent::Dtmf { digit }) => self.on_digit(digit).await,
            Ok(InboundEvent::Mark { name }) => {
                let now = Instant::now();
                if let Some(turn) = self.turn.as_mut() {
                    turn.acknowledge(&name, now);
                }
                self.check_turn_complete(now).await;
            }
            Ok(InboundEvent::Stop { reason }) => {
                debug!(call_id = %self.call_id, ?reason, "carrier stopped the stream");
                self.end(EndedReason::CallerHangup, None);
            }
            Ok(InboundEvent::Error { message }) => {
                warn!(call_id = %self.call_id, %message, "carrier reported a stream error");
            }
            Ok(
                InboundEvent::Connected
                | InboundEvent::Start(_)
                | InboundEvent::Cleared
                | InboundEvent::Ignored,
            ) => {}
            Err(error) => debug!(%error, "unreadable carrier message"),
        }
    }

    async fn on_tick(&mut self) {
        self.fill_playback().await;
        let elapsed = Instant::now().saturating_duration_since(self.started);
        if let Some(recorder) = self.recorder.as_mut()
            && let Err(error) = recorder.write_until(elapsed)
        {
            warn!(call_id = %self.call_id, %error, "recording failed; stopping it");
            if let Some(recorder) = self.recorder.take()
                && let Err(error) = recorder.finish()
            {
                warn!(call_id = %self.call_id, %error, "recording could not be finalized");
            }
        }
        let now = Instant::now();
        self.check_turn_complete(now).await;
        if let Some(awaiting) = self.listening.awaiting
            && now >= awaiting.deadline
            && !self.turns.in_utterance()
        {
            self.take_user_turn(now).await;
        }
        if let KeypadPhase::Waiting { deadline } = self.keypad
            && now >= deadline
        {
            self.keypad_retry(false).await;
        }
        self.check_beep_wait(now).await;
        if self.engine == ConversationEngine::Pipeline
            && !self.machine.is_machine()
            && self.turn.is_none()
            && !self.transferring
            && !self.turns.in_utterance()
            && self.listening.awaiting.is_none()
            && now.saturating_duration_since(self.last_activity) >= self.silence_timeout
        {
            self.end(EndedReason::SilenceTimeout, None);
        }
    }

    /// Hangs up: keeps what was heard of an unfinished turn, closes everything, finalizes
    /// the recording, and takes what the call produced out of the loop (dropped after).
    async fn finish(&mut self) -> ConversationOutcome {
        self.interrupt(false).await;
        self.responder = None;
        self.drain_tools().await;
        if let AsrSlot::Open(mut stream) = std::mem::replace(&mut self.asr, AsrSlot::Idle) {
            match timeout(ASR_CLOSE_TIMEOUT, stream.close()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => debug!(%error, "ASR close failed"),
                Err(_) => debug!("ASR close timed out"),
            }
        }
        let duration = Instant::now().saturating_duration_since(self.started);
        self.transport.close().await;
        let recording = self.recorder.take().and_then(|mut recorder| {
            recorder
                .write_until(duration)
                .and_then(|()| {
                    // Agent audio sent ahead of playback was never played: the line is down.
                    recorder.drop_agent_backlog();
                    recorder.finish()
                })
                .map_err(|error| warn!(call_id = %self.call_id, %error, "recording not finalized"))
                .ok()
        });
        ConversationOutcome {
            ended_reason: self.ended.unwrap_or(EndedReason::CallerHangup),
            error: self.error.take(),
            transcript: std::mem::take(&mut self.transcript),
            extracted: std::mem::take(&mut self.extracted),
            latencies: std::mem::take(&mut self.latencies),
            greeting_latency: self.greeting_latency,
            answered_at: Some(self.started_wall),
            duration,
            recording,
            tool_calls: std::mem::take(&mut self.tool_records),
            transfer: self.transfer.take(),
        }
    }
}

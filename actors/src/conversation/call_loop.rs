//! The conversation loop itself: one task per call, one `select!` over the media socket, a
//! 20 ms playback clock, the responder task and the ASR stream.
//!
//! Turn-taking follows the local VAD and endpointer (ASR only supplies text). The agent's
//! speech is a sequence of segments (one per sentence), each followed by a playback mark, so
//! when the caller barges in the loop knows how much of the reply was actually heard.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use voxline_media::carrier::{CarrierCodec, InboundEvent, Outbound, StreamStart};
use voxline_media::dtmf::DtmfDetector;
use voxline_media::endpoint::{EndpointEvent, EndpointState, Endpointer};
use voxline_media::synth::{samples_for_duration, speech_duration_for_text};
use voxline_media::vad::VoiceActivityDetector;
use voxline_media::wav::RECORDING_SAMPLE_RATE;

use super::audio::{InboundAudio, OutboundAudio, Recorder};
use super::responder::{Responder, ResponderEvent, ResponsePlan, Voice};
use super::text::{contains_phrase, leading_words, split_sentences};
use super::transport::{MediaTransport, TransportMessage};
use super::{
    CarrierSession, ConversationConfig, ConversationEngine, ConversationObserver,
    ConversationOutcome, EndedReason, KeypadMenu, Speaker, Turn, TurnLatency,
};
use crate::providers::{
    AsrContext, AsrEvent, AsrStream, ChatMessage, ChatRole, LlmRequest, ProviderError,
    ProviderKind, Providers, ToolSpec,
};

/// One telephony frame.
const FRAME: Duration = Duration::from_millis(20);
/// The same, for the endpointer.
const FRAME_MS: u32 = 20;
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
/// A key reported twice within this window (out-of-band event and in-band tone) is one press.
const DTMF_DEBOUNCE: Duration = Duration::from_millis(600);
/// How long closing the ASR may take at hang-up.
const ASR_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Said before the menu again after a key that is not an option.
const KEYPAD_INVALID: &str = "Sorry, that is not one of the options.";

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
        Ok(call) => call.run(cancel).await,
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

/// What an agent turn is for; decides what follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnKind {
    /// The welcome message.
    Welcome,
    /// An LLM reply.
    Reply,
    /// The keypad menu.
    KeypadPrompt,
    /// The chosen option's text.
    KeypadChoice,
    /// One play of the announcement.
    Announcement,
}

/// What an agent turn says.
enum Speech {
    /// A known text, synthesized sentence by sentence.
    Text(String),
    /// A known text with its audio already synthesized at 8 kHz.
    Cached(String, Arc<[i16]>),
    /// An LLM reply.
    Reply(LlmRequest),
}

/// One sentence of an agent turn and its playback state.
#[derive(Debug)]
struct Segment {
    text: String,
    mark: String,
    /// Carrier-rate samples not yet sent.
    audio: VecDeque<i16>,
    /// All its audio has arrived.
    synthesized: bool,
    sent_samples: usize,
    /// How long the text should take to say, for cutting it before all audio arrived.
    expected_samples: usize,
    /// When its first frame starts playing at the carrier (it is sent up to
    /// [`PLAYBACK_LEAD`] earlier).
    first_sent_at: Option<Instant>,
    acked_at: Option<Instant>,
}

/// Timestamps of a reply in the making, for its latency record.
#[derive(Debug, Clone, Copy)]
struct PendingLatency {
    speech_end_at: Instant,
    endpoint_at: Instant,
    transcript_at: Instant,
    llm_first_token: Duration,
    tts_first_byte: Duration,
}

/// The agent's current turn.
#[derive(Debug)]
struct AgentTurn {
    id: u64,
    kind: TurnKind,
    segments: Vec<Segment>,
    /// Index of the segment being sent.
    playing: usize,
    /// No more segments will be added.
    source_done: bool,
    /// Hang up once the turn has been heard.
    end_call: bool,
    latency: Option<PendingLatency>,
    first_frame_at: Option<Instant>,
    /// When the last frame sent finishes playing at the carrier.
    last_frame_at: Option<Instant>,
}

impl AgentTurn {
    /// Everything the turn will say has been sent.
    fn all_sent(&self) -> bool {
        self.source_done && self.playing >= self.segments.len()
    }

    /// Everything has been sent and played (marks echoed, or the grace period is over).
    fn all_heard(&self, now: Instant) -> bool {
        self.all_sent()
            && (self.segments.iter().all(|s| s.acked_at.is_some())
                || self
                    .last_frame_at
                    .is_none_or(|last| now >= last + ACK_GRACE))
    }

    /// The whole text of the turn.
    fn text(&self) -> String {
        join_texts(self.segments.iter().map(|s| s.text.as_str()))
    }

    /// The part of the turn the caller heard by `now`: acknowledged segments whole, and the
    /// share of the segment then playing that its elapsed playback covers.
    fn heard_text(&self, now: Instant, rate: u32) -> String {
        let seconds = |samples: usize| samples as f64 / f64::from(rate);
        let mut parts: Vec<String> = Vec::new();
        let mut previous_ack: Option<Instant> = None;
        for segment in &self.segments {
            if let Some(acked) = segment.acked_at {
                parts.push(segment.text.clone());
                previous_ack = Some(acked);
                continue;
            }
            let Some(first_sent) = segment.first_sent_at else {
                break;
            };
            // It began playing when the previous one finished, or when its first frame went out.
            let began = previous_ack.map_or(first_sent, |ack| ack.max(first_sent));
            let played = now
                .saturating_duration_since(began)
                .as_secs_f64()
                .min(seconds(segment.sent_samples));
            let whole = if segment.synthesized {
                segment.sent_samples + segment.audio.len()
            } else {
                segment
                    .expected_samples
                    .max(segment.sent_samples + segment.audio.len())
            };
            let fraction = if whole == 0 {
                0.0
            } else {
                played / seconds(whole)
            };
            parts.push(leading_words(&segment.text, fraction));
            break;
        }
        join_texts(parts.iter().map(String::as_str))
    }

    /// A mark came back: it and every segment before it have played.
    fn acknowledge(&mut self, name: &str, now: Instant) {
        if let Some(index) = self.segments.iter().position(|s| s.mark == name) {
            for segment in &mut self.segments[..=index] {
                segment.acked_at.get_or_insert(now);
            }
        }
    }
}

/// Joins non-empty texts with single spaces.
fn join_texts<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for text in texts.filter(|t| !t.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(text);
    }
    out
}

/// An utterance whose transcript is awaited.
#[derive(Debug, Clone, Copy)]
struct Awaiting {
    speech_end_at: Instant,
    endpoint_at: Instant,
    deadline: Instant,
}

/// The listening side's state.
#[derive(Debug, Default)]
struct Listening {
    /// The endpointer is inside an utterance.
    in_utterance: bool,
    /// The utterance began while the agent was talking.
    started_over_agent: bool,
    /// The utterance interrupted the agent.
    barged: bool,
    last_speech_at: Option<Instant>,
    awaiting: Option<Awaiting>,
    /// Final transcript text gathered for the current utterance.
    text: String,
}

/// The ASR stream's lifecycle.
enum AsrSlot {
    /// Not used (announcement, keypad) or closed.
    Idle,
    /// Being opened off the loop.
    Opening(JoinHandle<Result<Box<dyn AsrStream>, ProviderError>>),
    /// Open.
    Open(Box<dyn AsrStream>),
}

/// What the ASR slot produced.
enum AsrSignal {
    Opened(Box<dyn AsrStream>),
    Event(AsrEvent),
    Failed(ProviderError),
}

/// Where the keypad menu is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeypadPhase {
    /// Before the menu (welcome playing).
    Idle,
    /// The menu is being read.
    Prompting,
    /// Waiting for a key until the deadline.
    Waiting { deadline: Instant },
    /// An option was chosen, or the attempts ran out.
    Done,
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
    interruptible: bool,
    min_interruption_ms: u32,
    end_call_phrases: Vec<String>,
    keypad_menu: Option<KeypadMenu>,
    announcements_left: u32,
    sim_script: Arc<[String]>,
    asr_final_timeout: Duration,
    providers: Providers,
    observer: Arc<dyn ConversationObserver>,

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
    endpointer: Endpointer,
    dtmf: Option<DtmfDetector>,
    recorder: Option<Recorder>,

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

    // Results.
    history: Vec<ChatMessage>,
    transcript: Vec<Turn>,
    latencies: Vec<TurnLatency>,
    extracted: serde_json::Map<String, serde_json::Value>,
    greeting_latency: Option<Duration>,
    ended: Option<EndedReason>,
    error: Option<String>,
}

/// The next event of the running responder, if any.
async fn next_responder(responder: &mut Option<Responder>) -> Option<ResponderEvent> {
    match responder {
        Some(responder) => responder.events.recv().await,
        None => std::future::pending().await,
    }
}

/// The next signal of the ASR slot.
async fn next_asr(slot: &mut AsrSlot) -> AsrSignal {
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
            interruptible: config.interruptible,
            min_interruption_ms: u32::try_from(config.min_interruption.as_millis())
                .unwrap_or(u32::MAX),
            end_call_phrases: config.end_call_phrases,
            keypad_menu: config.keypad,
            announcements_left: config.announcement_repeat.max(1),
            sim_script: config.sim_script.into(),
            asr_final_timeout: config.asr_final_timeout,
            providers,
            observer,
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
            endpointer: Endpointer::new(config.endpointing),
            dtmf,
            recorder,
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
            history: Vec::new(),
            transcript: Vec::new(),
            latencies: Vec::new(),
            extracted: serde_json::Map::new(),
            greeting_latency: None,
            ended: None,
            error: None,
        })
    }

    async fn run(mut self, cancel: CancellationToken) -> ConversationOutcome {
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

    // ---- Speaking -------------------------------------------------------------------------

    /// Starts an agent turn, replacing any running one without ceremony (callers interrupt
    /// first when the old one was audible).
    async fn start_speaking(
        &mut self,
        kind: TurnKind,
        speech: Speech,
        latency: Option<PendingLatency>,
    ) {
        self.responder = None;
        let id = self.next_turn_id;
        self.next_turn_id += 1;
        let mut turn = AgentTurn {
            id,
            kind,
            segments: Vec::new(),
            playing: 0,
            source_done: false,
            end_call: false,
            latency,
            first_frame_at: None,
            last_frame_at: None,
        };
        let voice = Voice {
            llm: Arc::clone(&self.providers.llm),
            tts: Arc::clone(&self.providers.tts),
            voice: self.voice.clone(),
            sample_rate: self.playback.rate(),
        };
        match speech {
            Speech::Text(text) => {
                self.responder = Some(Responder::spawn(
                    ResponsePlan::Say(split_sentences(&text)),
                    voice,
                ));
            }
            Speech::Reply(request) => {
                self.responder = Some(Responder::spawn(ResponsePlan::Reply(request), voice));
            }
            Speech::Cached(text, audio) => {
                let mut segment = Segment {
                    text,
                    mark: format!("t{id}s0"),
                    audio: VecDeque::with_capacity(audio.len()),
                    synthesized: true,
                    sent_samples: 0,
                    expected_samples: 0,
                    first_sent_at: None,
                    acked_at: None,
                };
                let resampled = self
                    .playback
                    .ingest(&audio, RECORDING_SAMPLE_RATE, &mut segment.audio)
                    .and_then(|()| self.playback.flush(&mut segment.audio));
                if let Err(error) = resampled {
                    warn!(%error, "cached welcome audio unusable");
                }
                segment.expected_samples = segment.audio.len();
                turn.segments.push(segment);
                turn.source_done = true;
            }
        }
        self.turn = Some(turn);
        // The first audio goes out at once; the clock keeps the carrier's buffer topped up.
        self.fill_playback().await;
    }

    /// Sends the current turn's audio until the carrier holds [`PLAYBACK_LEAD`] of it (and a
    /// segment's mark after its last frame), all in one write.
    async fn fill_playback(&mut self) {
        let now = Instant::now();
        // The carrier's buffer ran dry: playback resumes with the next frame.
        self.playout_end = self.playout_end.max(now);
        let horizon = now + PLAYBACK_LEAD;
        let mut first_frame_of_turn = false;
        while self.playout_end < horizon && self.queue_frame(now, &mut first_frame_of_turn) {}
        if first_frame_of_turn {
            self.record_turn_latency(now);
        }
        if !self.outbound.is_empty() {
            self.flush_outbound().await;
        }
    }

    /// The carrier holds less than [`STARVED_LEAD`] of agent audio: new TTS audio should go
    /// out now rather than at the next tick.
    fn playback_starved(&self) -> bool {
        self.playout_end.saturating_duration_since(Instant::now()) < STARVED_LEAD
    }

    /// Queues the current turn's next 20 ms frame; false when no whole frame is ready.
    fn queue_frame(&mut self, now: Instant, first_frame_of_turn: &mut bool) -> bool {
        let Some(turn) = self.turn.as_mut() else {
            return false;
        };
        let frame_len = self.playback.frame.len();
        while let Some(segment) = turn.segments.get_mut(turn.playing) {
            if segment.audio.len() >= frame_len
                || (segment.synthesized && !segment.audio.is_empty())
            {
                let take = segment.audio.len().min(frame_len);
                for (slot, sample) in self
                    .playback
                    .frame
                    .iter_mut()
                    .zip(segment.audio.drain(..take))
                {
                    *slot = sample;
                }
                self.playback.frame[take..].fill(0);
                segment.sent_samples += take;
                segment.first_sent_at.get_or_insert(self.playout_end);
                let wire = self.playback.encode_frame();
                self.codec.encode_media(wire, &mut self.outbound);
                if segment.synthesized && segment.audio.is_empty() {
                    self.codec.encode_mark(&segment.mark, &mut self.outbound);
                    turn.playing += 1;
                }
                if turn.first_frame_at.is_none() {
                    turn.first_frame_at = Some(now);
                    *first_frame_of_turn = true;
                }
                self.playout_end += FRAME;
                turn.last_frame_at = Some(self.playout_end);
                if let Some(recorder) = self.recorder.as_mut() {
                    match self.playback.recording_frame() {
                        Ok(frame) => recorder.agent(frame),
                        Err(error) => debug!(%error, "agent audio not recorded"),
                    }
                }
                return true;
            } else if segment.synthesized {
                // A sentence that produced no audio still gets its mark, in order.
                self.codec.encode_mark(&segment.mark, &mut self.outbound);
                turn.playing += 1;
            } else {
                // Waiting for TTS.
                return false;
            }
        }
        false
    }

    /// The turn's first audio went out at `now`: the greeting or reply latency is known.
    fn record_turn_latency(&mut self, now: Instant) {
        if self.greeting_latency.is_none() {
            self.greeting_latency = Some(now.saturating_duration_since(self.started));
        }
        let Some(pending) = self.turn.as_mut().and_then(|turn| turn.latency.take()) else {
            return;
        };
        let total = now.saturating_duration_since(pending.speech_end_at);
        let endpointing = pending
            .endpoint_at
            .saturating_duration_since(pending.speech_end_at);
        let asr = pending
            .transcript_at
            .saturating_duration_since(pending.endpoint_at);
        let latency = TurnLatency {
            total,
            endpointing,
            asr,
            llm_first_token: pending.llm_first_token,
            tts_first_byte: pending.tts_first_byte,
            engine_overhead: total.saturating_sub(
                endpointing + asr + pending.llm_first_token + pending.tts_first_byte,
            ),
        };
        self.observer.on_latency(&latency);
        self.latencies.push(latency);
    }

    async fn on_responder(&mut self, event: Option<ResponderEvent>) {
        let Some(turn) = self.turn.as_mut() else {
            self.responder = None;
            return;
        };
        let Some(event) = event else {
            // The task ended without `Finished` (it panicked): say what was synthesized.
            warn!(call_id = %self.call_id, "responder task ended early");
            self.responder = None;
            turn.source_done = true;
            return;
        };
        match event {
            ResponderEvent::FirstToken(elapsed) => {
                if let Some(latency) = turn.latency.as_mut() {
                    latency.llm_first_token = elapsed;
                }
            }
            ResponderEvent::FirstAudio(elapsed) => {
                if let Some(latency) = turn.latency.as_mut() {
                    latency.tts_first_byte = elapsed;
                }
            }
            ResponderEvent::Segment(text) => {
                let index = turn.segments.len();
                let expected_samples =
                    samples_for_duration(self.playback.rate(), speech_duration_for_text(&text));
                turn.segments.push(Segment {
                    text,
                    mark: format!("t{}s{index}", turn.id),
                    audio: VecDeque::new(),
                    synthesized: false,
                    sent_samples: 0,
                    expected_samples,
                    first_sent_at: None,
                    acked_at: None,
                });
            }
            ResponderEvent::Audio { samples, rate } => {
                let Some(segment) = turn.segments.last_mut() else {
                    return;
                };
                if let Err(error) = self.playback.ingest(&samples, rate, &mut segment.audio) {
                    self.fail(ProviderError::Stream {
                        provider: ProviderKind::Tts,
                        message: error.to_string(),
                    });
                    return;
                }
                if turn.first_frame_at.is_none() || self.playback_starved() {
                    self.fill_playback().await;
                }
            }
            ResponderEvent::SegmentDone => {
                if let Some(segment) = turn.segments.last_mut() {
                    if let Err(error) = self.playback.flush(&mut segment.audio) {
                        debug!(%error, "resampler tail lost");
                    }
                    segment.synthesized = true;
                }
                if self.playback_starved() {
                    self.fill_playback().await;
                }
            }
            ResponderEvent::EndCall => turn.end_call = true,
            ResponderEvent::Finished => {
                turn.source_done = true;
                self.responder = None;
                self.check_turn_complete(Instant::now()).await;
            }
            ResponderEvent::Failed(error) => self.fail(error),
        }
    }

    /// Closes the current turn once it has been heard, and moves the engine on.
    async fn check_turn_complete(&mut self, now: Instant) {
        if !self.turn.as_ref().is_some_and(|turn| turn.all_heard(now)) {
            return;
        }
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.responder = None;
        let text = turn.text();
        let says_end_phrase = turn.kind == TurnKind::Reply
            && self
                .end_call_phrases
                .iter()
                .any(|phrase| contains_phrase(&text, phrase));
        if !text.is_empty() {
            if matches!(turn.kind, TurnKind::Welcome | TurnKind::Reply) {
                self.history
                    .push(ChatMessage::new(ChatRole::Assistant, text.clone()));
            }
            self.push_turn(Speaker::Assistant, text, now);
        }
        self.last_activity = now;
        if turn.end_call
            || says_end_phrase
            || (turn.kind == TurnKind::Reply && self.hangup_after_reply)
        {
            self.end(EndedReason::AgentHangup, None);
            return;
        }
        match turn.kind {
            TurnKind::Welcome if self.engine == ConversationEngine::Keypad => {
                self.keypad_prompt(false).await;
            }
            TurnKind::Welcome | TurnKind::Reply => {}
            TurnKind::Announcement => match self.welcome_speech() {
                Some(message) if self.announcements_left > 0 => {
                    self.announcements_left -= 1;
                    self.start_speaking(TurnKind::Announcement, message, None)
                        .await;
                }
                _ => self.end(EndedReason::AgentHangup, None),
            },
            TurnKind::KeypadPrompt => {
                let wait = self
                    .keypad_menu
                    .as_ref()
                    .map_or(Duration::from_secs(5), |menu| menu.timeout);
                self.keypad = KeypadPhase::Waiting {
                    deadline: now + wait,
                };
            }
            TurnKind::KeypadChoice => self.end(EndedReason::AgentHangup, None),
        }
    }

    /// Stops the agent mid-turn: clears the carrier's buffer, cancels the responder and keeps
    /// what the caller heard in the transcript and the LLM history.
    async fn interrupt(&mut self, send_clear: bool) {
        let now = Instant::now();
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.responder = None;
        self.playback.reset();
        if send_clear && turn.first_frame_at.is_some() {
            self.codec.encode_clear(&mut self.outbound);
            self.flush_outbound().await;
            // The carrier dropped what it had not played; so does the recording.
            self.playout_end = now;
            if let Some(recorder) = self.recorder.as_mut() {
                recorder.drop_agent_backlog();
            }
        }
        let heard = turn.heard_text(now, self.playback.rate());
        debug!(call_id = %self.call_id, heard = %heard, "agent interrupted");
        if !heard.is_empty() {
            if matches!(turn.kind, TurnKind::Welcome | TurnKind::Reply) {
                self.history
                    .push(ChatMessage::new(ChatRole::Assistant, heard.clone()));
            }
            self.push_turn(Speaker::Assistant, heard, now);
        }
        self.last_activity = now;
    }

    // ---- Listening ------------------------------------------------------------------------

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

    /// Runs the detectors over newly arrived caller audio, one 20 ms frame at a time.
    async fn on_caller_audio(&mut self) {
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
            let speech = self.vad.as_mut().map(|vad| vad.is_speech(frame));
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
            if let Some(digit) = digit {
                self.on_digit(digit).await;
            }
            if let Some(is_speech) = speech {
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
                self.listening.in_utterance = true;
                self.listening.started_over_agent = self.turn.is_some();
                self.listening.barged = false;
            }
            Some(EndpointEvent::SpeechEnd { speech_ms }) => {
                self.on_utterance_end(speech_ms, now);
            }
            Some(EndpointEvent::Discarded { .. }) => self.listening.in_utterance = false,
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

    async fn on_asr(&mut self, signal: AsrSignal) {
        match signal {
            AsrSignal::Opened(stream) => self.asr = AsrSlot::Open(stream),
            AsrSignal::Failed(error) => {
                self.asr = AsrSlot::Idle;
                self.fail(error);
            }
            AsrSignal::Event(AsrEvent::Final { text }) => {
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
    async fn take_user_turn(&mut self, now: Instant) {
        let Some(awaiting) = self.listening.awaiting.take() else {
            return;
        };
        let text = std::mem::take(&mut self.listening.text).trim().to_owned();
        if text.is_empty() {
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
        let request = LlmRequest {
            system_prompt: self.prompt.clone(),
            history: self.history.clone(),
            tools: vec![ToolSpec::end_call()],
            sim_script: Arc::clone(&self.sim_script),
            json_mode: false,
        };
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

    // ---- Keys -----------------------------------------------------------------------------

    async fn on_digit(&mut self, digit: char) {
        let now = Instant::now();
        if let Some((last, at)) = self.last_digit
            && last == digit
            && now.saturating_duration_since(at) < DTMF_DEBOUNCE
        {
            return;
        }
        self.last_digit = Some((digit, now));
        debug!(call_id = %self.call_id, %digit, "caller pressed a key");
        match self.engine {
            ConversationEngine::Keypad => self.on_keypad_digit(digit).await,
            ConversationEngine::Pipeline => {
                let entry = self
                    .extracted
                    .entry("dtmf")
                    .or_insert_with(|| serde_json::Value::String(String::new()));
                if let serde_json::Value::String(digits) = entry {
                    digits.push(digit);
                }
            }
            ConversationEngine::Announcement => {}
        }
    }

    async fn on_keypad_digit(&mut self, digit: char) {
        if self.keypad == KeypadPhase::Done {
            return;
        }
        let Some(option) = self
            .keypad_menu
            .as_ref()
            .and_then(|menu| menu.options.iter().find(|option| option.digit == digit))
            .cloned()
        else {
            self.interrupt(true).await;
            self.keypad_retry(true).await;
            return;
        };
        self.interrupt(true).await;
        self.keypad = KeypadPhase::Done;
        self.extracted.insert("keypad".to_owned(), option.value);
        self.extracted
            .insert("digit".to_owned(), digit.to_string().into());
        if option.say.trim().is_empty() {
            self.end(EndedReason::AgentHangup, None);
        } else {
            self.start_speaking(TurnKind::KeypadChoice, Speech::Text(option.say), None)
                .await;
        }
    }

    /// Offers the menu again after a wrong key or a timeout, or gives up.
    async fn keypad_retry(&mut self, wrong_key: bool) {
        let attempts = self.keypad_menu.as_ref().map_or(1, |menu| menu.attempts);
        if self.prompts_played >= attempts {
            self.keypad = KeypadPhase::Done;
            self.extracted
                .insert("keypad".to_owned(), serde_json::Value::Null);
            self.end(EndedReason::AgentHangup, None);
            return;
        }
        self.keypad_prompt(wrong_key).await;
    }

    /// Reads the menu.
    async fn keypad_prompt(&mut self, after_wrong_key: bool) {
        let Some(menu) = self.keypad_menu.as_ref() else {
            return;
        };
        let text = if after_wrong_key {
            format!("{KEYPAD_INVALID} {}", menu.prompt)
        } else {
            menu.prompt.clone()
        };
        self.prompts_played += 1;
        self.keypad = KeypadPhase::Prompting;
        self.start_speaking(TurnKind::KeypadPrompt, Speech::Text(text), None)
            .await;
    }

    // ---- Clock ----------------------------------------------------------------------------

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
            && !self.listening.in_utterance
        {
            self.take_user_turn(now).await;
        }
        if let KeypadPhase::Waiting { deadline } = self.keypad
            && now >= deadline
        {
            self.keypad_retry(false).await;
        }
        if self.engine == ConversationEngine::Pipeline
            && self.turn.is_none()
            && !self.listening.in_utterance
            && self.listening.awaiting.is_none()
            && now.saturating_duration_since(self.last_activity) >= self.silence_timeout
        {
            self.end(EndedReason::SilenceTimeout, None);
        }
    }

    /// Hangs up: keeps what was heard of an unfinished turn, closes everything, finalizes
    /// the recording.
    async fn finish(mut self) -> ConversationOutcome {
        self.interrupt(false).await;
        self.responder = None;
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
            error: self.error,
            transcript: self.transcript,
            extracted: self.extracted,
            latencies: self.latencies,
            greeting_latency: self.greeting_latency,
            answered_at: Some(self.started_wall),
            duration,
            recording,
        }
    }
}

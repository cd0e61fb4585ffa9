//! The simulated callee: the person (or voicemail) at the other end of a sim call, used by the
//! sim carrier and the load generator.
//!
//! It speaks the carrier side of Twilio Media Streams over a real websocket: `connected`,
//! `start`, then real-time 20 ms μ-law frames of silence or speech-like audio, DTMF as both the
//! `dtmf` event and in-band tones, and marks echoed once the agent audio queued before them has
//! played (flushed on `clear`), as Twilio does. It waits for the agent's turn to finish before
//! saying its next line, and measures what the load generator reports.
//!
//! With a [`CalleeVoice`] its lines are real speech: each is synthesized (Piper, espeak-ng)
//! ahead of its turn, resampled once to 8 kHz and streamed as μ-law like any phone's audio,
//! with a short pause between sentences. Nothing then passes on a text side channel: the
//! agent's ASR has to hear it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, interval, sleep_until};
use tokio_tungstenite::connect_async_with_config;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_util::sync::CancellationToken;
use voxline_media::carrier::{OutboundFrame, ServerCommand, TwilioCarrierSide};
use voxline_media::dtmf::DtmfDetector;
use voxline_media::g711;
use voxline_media::resample::StreamResampler;
use voxline_media::synth::{
    DtmfToneGenerator, SpeechLikeGenerator, ToneGenerator, samples_for_duration,
    speech_duration_for_text,
};

use crate::conversation::{MediaTransport, TransportMessage, WebSocketTransport};
use crate::providers::TtsProvider;
use crate::providers::sim_lines::{BACKCHANNEL_MARK, LinePart, line_parts};

pub use crate::carrier::sim::CalleeBehaviour;

/// Read buffer of the callee's websocket: most of a burst of agent frames in one read.
pub const MEDIA_READ_BUFFER: usize = 4 * 1024;
/// The callee's sample rate (Twilio: 8 kHz μ-law).
const RATE: u32 = 8_000;
/// Samples per 20 ms frame.
const FRAME_SAMPLES: usize = 160;
/// One frame's duration.
const FRAME: Duration = Duration::from_millis(20);
/// A gap between agent frames longer than this starts a new talk spurt (not a late frame).
const SPURT_GAP: Duration = Duration::from_millis(400);
/// A frame arriving this much after its due time counts as late.
const LATE_AFTER: Duration = Duration::from_millis(40);
/// The answering machine's greeting length.
const MACHINE_GREETING: Duration = Duration::from_millis(3500);
/// The answering machine's beep.
const MACHINE_BEEP: Duration = Duration::from_millis(500);
/// How long the answering machine records after its beep before it hangs up, as machines
/// cap a message's length.
const MACHINE_RECORDING: Duration = Duration::from_secs(60);

/// One step of the caller script.
///
/// A line may pause inside: `"I live in [pause 1500] Pune"` says "I live in", stays quiet
/// for 1.5 s, then says "Pune" (see [`crate::providers::sim_lines`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptStep {
    /// Say a line once the agent has finished its turn.
    Say(String),
    /// Say a backchannel ("uh-huh") `after` the agent started talking, and keep listening:
    /// it expects no reply, and the next step waits for the agent's turn to end as before.
    Backchannel {
        /// What is said.
        text: String,
        /// Delay from the start of the agent's audio.
        after: Duration,
    },
    /// Press a key once the agent has finished its turn.
    Dtmf(char),
    /// Say a line `after` the agent started talking, without waiting for it to finish.
    Interrupt {
        /// The line.
        text: String,
        /// Delay from the start of the agent's audio.
        after: Duration,
    },
    /// Hang up once the agent has finished its turn.
    Hangup,
    /// An automated phone menu: say the options, then listen to the agent's audio for the
    /// key it presses (with the media crate's DTMF detector). Hearing `expect`, the script
    /// goes on; hearing nothing or another key, the menu hangs up.
    Menu {
        /// The options read out ("For sales, press 1. For support, press 2.").
        text: String,
        /// The key that reaches the option the test expects.
        expect: char,
    },
}

/// Why a caller script could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScriptError {
    /// The value is not a JSON array (or a string holding one).
    #[error("simScript must be a JSON array of lines and {{\"dtmf\":\"1\"}} steps: {0}")]
    NotAnArray(String),
    /// One element is neither a line nor a known step.
    #[error("simScript step {index} is not a line or a known step: {step}")]
    BadStep {
        /// Position in the array.
        index: usize,
        /// The element as JSON.
        step: String,
    },
}

/// Reads the variable `simScript`: a JSON array (or a JSON string holding one) of lines and
/// steps `{"dtmf":"12"}`, `{"say":"…"}`, `{"interrupt":"…","afterMs":800}`,
/// `{"backchannel":"uh-huh","afterMs":800}`, `{"hangup":true}`,
/// `{"menu":"For sales, press 1. For support, press 2.","expect":"2"}`. A line may hold
/// pauses, `"I live in [pause 1500] Pune"`.
pub fn parse_sim_script(value: &serde_json::Value) -> Result<Vec<ScriptStep>, ScriptError> {
    use serde_json::Value;
    let items = match value {
        Value::Array(items) => items.clone(),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => items,
            _ => return Err(ScriptError::NotAnArray(text.clone())),
        },
        other => return Err(ScriptError::NotAnArray(other.to_string())),
    };
    let mut steps = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let bad = || ScriptError::BadStep {
            index,
            step: item.to_string(),
        };
        match item {
            Value::String(line) => steps.push(ScriptStep::Say(line.clone())),
            Value::Object(step) => {
                if let Some(keys) = step.get("dtmf") {
                    let keys = match keys {
                        Value::String(keys) => keys.clone(),
                        Value::Number(key) => key.to_string(),
                        _ => return Err(bad()),
                    };
                    if keys.is_empty() {
                        return Err(bad());
                    }
                    for key in keys.chars() {
                        if voxline_media::dtmf::dtmf_frequencies(key).is_none() {
                            return Err(bad());
                        }
                        steps.push(ScriptStep::Dtmf(key));
                    }
                } else if let Some(Value::String(line)) = step.get("menu") {
                    let expect = step
                        .get("expect")
                        .and_then(Value::as_str)
                        .and_then(|keys| keys.chars().next())
                        .filter(|key| voxline_media::dtmf::dtmf_frequencies(*key).is_some())
                        .ok_or_else(bad)?;
                    steps.push(ScriptStep::Menu {
                        text: line.clone(),
                        expect,
                    });
                } else if let Some(Value::String(line)) = step.get("say") {
                    steps.push(ScriptStep::Say(line.clone()));
                } else if let Some(Value::String(line)) = step.get("backchannel") {
                    let after_ms = step.get("afterMs").and_then(Value::as_u64).unwrap_or(800);
                    steps.push(ScriptStep::Backchannel {
                        text: line.clone(),
                        after: Duration::from_millis(after_ms),
                    });
                } else if let Some(Value::String(line)) = step.get("interrupt") {
                    let after_ms = step.get("afterMs").and_then(Value::as_u64).unwrap_or(1000);
                    steps.push(ScriptStep::Interrupt {
                        text: line.clone(),
                        after: Duration::from_millis(after_ms),
                    });
                } else if step.get("hangup").is_some_and(|v| v != &Value::Bool(false)) {
                    steps.push(ScriptStep::Hangup);
                } else {
                    return Err(bad());
                }
            }
            _ => return Err(bad()),
        }
    }
    Ok(steps)
}

/// The script used when a call has no `simScript`.
pub fn default_sim_script() -> Vec<ScriptStep> {
    [
        "Hello, yes, this is me speaking.",
        "That sounds interesting, please tell me more.",
        "Okay, thank you very much. Goodbye!",
    ]
    .into_iter()
    .map(|line| ScriptStep::Say(line.to_owned()))
    .collect()
}

/// The lines a script speaks, in order: what the sim ASR transcribes (backchannels marked
/// as such, so the sim LLM does not count them as the caller's turns).
pub fn spoken_lines(steps: &[ScriptStep]) -> Vec<String> {
    steps
        .iter()
        .filter_map(|step| match step {
            ScriptStep::Say(text)
            | ScriptStep::Interrupt { text, .. }
            | ScriptStep::Menu { text, .. } => Some(text.clone()),
            ScriptStep::Backchannel { text, .. } => Some(format!("{BACKCHANNEL_MARK} {text}")),
            ScriptStep::Dtmf(_) | ScriptStep::Hangup => None,
        })
        .collect()
}

/// A real voice for the callee's lines.
#[derive(Clone)]
pub struct CalleeVoice {
    /// The synthesizer (Piper or espeak-ng in the binary).
    pub tts: Arc<dyn TtsProvider>,
    /// Its voice name; blank for its default.
    pub voice: String,
    /// Silence between two sentences of one line: a breath, shorter than the engine's
    /// end-of-turn silence so a line stays one utterance.
    pub sentence_pause: Duration,
}

impl std::fmt::Debug for CalleeVoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CalleeVoice")
            .field("voice", &self.voice)
            .field("sentence_pause", &self.sentence_pause)
            .finish_non_exhaustive()
    }
}

/// A line's sentences: split after `.`, `!` and `?` followed by a space.
pub fn sentences(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1).is_some_and(u8::is_ascii_whitespace)
        {
            out.push(line[start..=i].trim());
            start = i + 1;
        }
    }
    out.push(line[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

impl CalleeVoice {
    /// `line` spoken at 8 kHz: each sentence synthesized, resampled with one resampler
    /// for the line, and joined by the sentence pause; the line's `[pause N]` marks are
    /// silences of their length.
    pub async fn speak(&self, line: &str) -> Result<Vec<i16>, String> {
        let mut pcm = Vec::new();
        for part in line_parts(line) {
            self.speak_part(&part.text, &mut pcm).await?;
            pcm.resize(pcm.len() + samples_for_duration(RATE, part.pause_after), 0);
        }
        if pcm.iter().all(|&s| s == 0) {
            return Err(format!("the voice said nothing for {line:?}"));
        }
        Ok(pcm)
    }

    /// Appends `line` (no pause marks) spoken at 8 kHz to `pcm`.
    async fn speak_part(&self, line: &str, pcm: &mut Vec<i16>) -> Result<(), String> {
        let pause = samples_for_duration(RATE, self.sentence_pause);
        for (index, sentence) in sentences(line).into_iter().enumerate() {
            if index > 0 {
                pcm.resize(pcm.len() + pause, 0);
            }
            let mut stream = self
                .tts
                .synthesize(sentence, &self.voice, RATE)
                .await
                .map_err(|e| format!("synthesizing {sentence:?}: {e}"))?;
            let rate = stream.sample_rate();
            let mut resampler = (rate != RATE)
                .then(|| StreamResampler::new(rate, RATE))
                .transpose()
                .map_err(|e| format!("resampling {rate} Hz speech: {e}"))?;
            let mut pending: Vec<i16> = Vec::new();
            let mut out = [0i16; FRAME_SAMPLES];
            while let Some(chunk) = stream.next_chunk().await {
                let chunk = chunk.map_err(|e| format!("synthesizing {sentence:?}: {e}"))?;
                let Some(resampler) = resampler.as_mut() else {
                    pcm.extend_from_slice(&chunk);
                    continue;
                };
                pending.extend_from_slice(&chunk);
                let need = resampler.input_frames();
                while pending.len() >= need {
                    let n = resampler
                        .process(&pending[..need], &mut out)
                        .map_err(|e| e.to_string())?;
                    pcm.extend_from_slice(&out[..n]);
                    pending.drain(..need);
                }
            }
            if let Some(resampler) = resampler.as_mut() {
                if !pending.is_empty() {
                    let n = resampler
                        .process(&pending, &mut out)
                        .map_err(|e| e.to_string())?;
                    pcm.extend_from_slice(&out[..n]);
                }
                // The resampler's delay: a last chunk of silence brings out the tail.
                let n = resampler
                    .process(&[], &mut out)
                    .map_err(|e| e.to_string())?;
                pcm.extend_from_slice(&out[..n]);
            }
        }
        Ok(())
    }
}

/// How long a speaking callee waits for the agent's answer before it speaks anyway: a real
/// model on a small machine may think for seconds, and a person on the phone waits.
pub const SPEAKING_AGENT_WAIT: Duration = Duration::from_secs(20);

/// The agent's quiet after which a speaking callee takes its turn: a real model's reply can
/// pause between sentences while the next is generated and synthesized, and a person hears
/// from its tone that it is not done.
pub const SPEAKING_TURN_GAP: Duration = Duration::from_millis(1500);

/// How DTMF steps are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DtmfMode {
    /// The `dtmf` event and in-band tones, as a real phone through Twilio.
    #[default]
    Both,
    /// Only tones in the audio.
    InBandOnly,
    /// Only the `dtmf` event.
    EventOnly,
}

/// The callee's identifiers and timings.
#[derive(Debug, Clone)]
pub struct CalleeOptions {
    /// `streamSid` to announce.
    pub stream_sid: String,
    /// `callSid` to announce.
    pub call_sid: String,
    /// `accountSid` to announce.
    pub account_sid: String,
    /// Seeds the callee's voice.
    pub seed: u64,
    /// The agent's turn is over after this much quiet following its audio.
    pub turn_gap: Duration,
    /// Speak anyway when the agent has said nothing for this long.
    pub agent_wait: Duration,
    /// After the script, how long to wait for the agent to hang up before hanging up.
    pub hangup_wait: Duration,
    /// Hard bound on the whole call.
    pub max_call: Duration,
    /// How DTMF steps are sent.
    pub dtmf_mode: DtmfMode,
    /// Length of each in-band key tone.
    pub dtmf_tone: Duration,
    /// Cancelled when the call is ended from outside (the callee sends `stop` and closes).
    pub cancel: CancellationToken,
    /// Speak the lines with a real voice instead of speech-like noise.
    pub voice: Option<CalleeVoice>,
}

impl CalleeOptions {
    /// These options speaking in `voice` when given, with a person's patience for an agent
    /// on a real model ([`SPEAKING_AGENT_WAIT`], [`SPEAKING_TURN_GAP`]).
    pub fn with_voice(mut self, voice: Option<CalleeVoice>) -> Self {
        if voice.is_some() {
            self.agent_wait = SPEAKING_AGENT_WAIT;
            self.turn_gap = SPEAKING_TURN_GAP;
        }
        self.voice = voice;
        self
    }
}

impl Default for CalleeOptions {
    fn default() -> Self {
        Self {
            stream_sid: "MZ00000000000000000000000000000000".to_owned(),
            call_sid: "CA00000000000000000000000000000000".to_owned(),
            account_sid: "AC00000000000000000000000000000000".to_owned(),
            seed: 1,
            turn_gap: Duration::from_millis(800),
            agent_wait: Duration::from_secs(8),
            hangup_wait: Duration::from_secs(15),
            max_call: Duration::from_secs(900),
            dtmf_mode: DtmfMode::Both,
            dtmf_tone: Duration::from_millis(150),
            cancel: CancellationToken::new(),
            voice: None,
        }
    }
}

/// What the callee measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CalleeReport {
    /// The websocket connected and `start` was sent.
    pub connected: bool,
    /// `start` → the agent's first audio frame.
    pub greeting_latency: Option<Duration>,
    /// For each line said: its end → the agent's next audio frame.
    pub turn_latencies: Vec<Duration>,
    /// Agent audio frames received.
    pub agent_frames: u64,
    /// Agent audio received, in time.
    pub agent_audio: Duration,
    /// Mean playback stall before agent frames within talk spurts: how long the callee's
    /// playback buffer had been empty when each frame came (0 for audio sent ahead).
    pub mean_jitter: Duration,
    /// Longest such stall within a talk spurt.
    pub max_jitter: Duration,
    /// Agent frames that came more than 40 ms after the playback buffer ran dry in a spurt.
    pub late_frames: u64,
    /// Marks echoed back.
    pub marks_echoed: u64,
    /// `clear` commands received.
    pub clears: u64,
    /// For each line said over the agent (`interrupt` steps) that stopped it: the line's
    /// start → the agent's `clear`, the moment its audio stops at the phone.
    pub barge_in_stops: Vec<Duration>,
    /// Lines said.
    pub lines_said: usize,
    /// Backchannels said over the agent (`backchannel` steps).
    pub backchannels_said: usize,
    /// Keys pressed.
    pub digits_sent: usize,
    /// Keys the agent pressed, as a menu step heard them in its audio.
    pub digits_heard: String,
    /// The agent closed the stream.
    pub agent_hung_up: bool,
    /// The call ran to its natural end: agent or scripted hang-up, no error, no timeout.
    pub ended_cleanly: bool,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// `start` → end.
    pub duration: Duration,
}

/// What the callee is sending.
enum Voice {
    Silence,
    Speaking {
        generator: Box<SpeechLikeGenerator>,
        samples_left: usize,
    },
    /// A line synthesized by the [`CalleeVoice`].
    Recorded {
        pcm: Vec<i16>,
        at: usize,
    },
    /// A pause inside a line.
    Pause {
        samples_left: usize,
    },
    Tone(DtmfToneGenerator),
    Beep {
        tone: ToneGenerator,
        samples_left: usize,
    },
}

/// The simulated callee.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimCallee;

impl SimCallee {
    /// Connects to `ws_url`, starts a Twilio stream with `params` as `customParameters` (the
    /// media token among them) and plays the call until it ends.
    pub async fn run(
        ws_url: String,
        params: Vec<(String, String)>,
        script: Vec<ScriptStep>,
        behaviour: CalleeBehaviour,
        options: CalleeOptions,
    ) -> CalleeReport {
        // tungstenite zero-fills its whole read buffer (128 KiB by default) before every read;
        // media messages are a few hundred bytes, so a small buffer saves that per frame and
        // its memory per call.
        let config = WebSocketConfig::default().read_buffer_size(MEDIA_READ_BUFFER);
        match connect_async_with_config(ws_url.as_str(), Some(config), false).await {
            Ok((socket, _response)) => {
                Self::run_on(
                    WebSocketTransport::new(socket),
                    params,
                    script,
                    behaviour,
                    options,
                )
                .await
            }
            Err(error) => CalleeReport {
                error: Some(format!("connecting to {ws_url}: {error}")),
                ..CalleeReport::default()
            },
        }
    }

    /// Plays the call over an established connection (tests use an in-memory one).
    pub async fn run_on(
        transport: impl MediaTransport,
        params: Vec<(String, String)>,
        script: Vec<ScriptStep>,
        behaviour: CalleeBehaviour,
        options: CalleeOptions,
    ) -> CalleeReport {
        let script = match behaviour {
            CalleeBehaviour::Human => script,
            CalleeBehaviour::Silent | CalleeBehaviour::AnsweringMachine => Vec::new(),
        };
        let mut callee = Callee::new(transport, script, behaviour, options);
        callee.play(&params).await;
        callee.report
    }
}

/// One running callee.
struct Callee<T> {
    transport: T,
    side: TwilioCarrierSide,
    script: VecDeque<ScriptStep>,
    behaviour: CalleeBehaviour,
    options: CalleeOptions,
    report: CalleeReport,
    text: String,
    server_audio: Vec<u8>,
    pcm: [i16; FRAME_SAMPLES],
    mulaw: [u8; FRAME_SAMPLES],
    voice: Voice,
    speech_seed: u64,
    started: Instant,
    /// When the agent audio received so far finishes playing.
    playout_end: Instant,
    /// Marks to echo, with the time the audio before them has played.
    pending_marks: VecDeque<(Instant, String)>,
    /// When our last step ended (the agent's turn starts after it).
    my_turn_ended: Instant,
    /// The agent has sent audio since our last step.
    agent_spoke: bool,
    /// First agent audio since our last step.
    agent_started_at: Option<Instant>,
    /// Our last line ended and its reply has not started yet.
    awaiting_reply: Option<Instant>,
    /// When the script ran out (or the machine beeped).
    script_done_at: Option<Instant>,
    // Jitter bookkeeping.
    last_frame_at: Option<Instant>,
    jitter_total: Duration,
    jitter_samples: u64,
    /// Listens for the agent's keys while a menu step waits for one.
    menu: Option<MenuListener>,
    /// When the line said over the agent started, until the agent clears its audio.
    interrupting_since: Option<Instant>,
    /// The lines' real speech, when the callee has a voice.
    spoken: Option<SpokenLines>,
    /// The rest of the line being said as speech-like sound, after the current part.
    line_rest: VecDeque<LinePart>,
    /// The silence after the part being said.
    part_pause: Duration,
    /// The line being said is a backchannel.
    saying_backchannel: bool,
    done: bool,
}

/// The script's lines synthesized ahead of their turns, in order, by a task of their own so
/// the frame clock never waits on a synthesizer.
struct SpokenLines {
    ready: mpsc::UnboundedReceiver<Result<Vec<i16>, String>>,
    next: Option<Vec<i16>>,
    task: JoinHandle<()>,
}

impl SpokenLines {
    fn start(voice: CalleeVoice, lines: Vec<String>) -> Self {
        let (tx, ready) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            for line in lines {
                let spoken = voice.speak(&line).await;
                let failed = spoken.is_err();
                if tx.send(spoken).is_err() || failed {
                    return;
                }
            }
        });
        Self {
            ready,
            next: None,
            task,
        }
    }

    /// The next line's audio if it is ready; `Err` when it cannot be.
    fn poll(&mut self) -> Result<bool, String> {
        if self.next.is_some() {
            return Ok(true);
        }
        match self.ready.try_recv() {
            Ok(Ok(pcm)) => {
                self.next = Some(pcm);
                Ok(true)
            }
            Ok(Err(error)) => Err(error),
            Err(mpsc::error::TryRecvError::Empty) => Ok(false),
            Err(mpsc::error::TryRecvError::Disconnected) => {
                Err("the callee's voice stopped before its lines were spoken".to_owned())
            }
        }
    }
}

impl Drop for SpokenLines {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A menu step's ear: the agent's audio decoded and run through a DTMF detector.
struct MenuListener {
    detector: DtmfDetector,
    pcm: Vec<i16>,
    expect: char,
}

impl<T: MediaTransport> Callee<T> {
    fn new(
        transport: T,
        script: Vec<ScriptStep>,
        behaviour: CalleeBehaviour,
        options: CalleeOptions,
    ) -> Self {
        let now = Instant::now();
        let spoken = options
            .voice
            .clone()
            .map(|voice| SpokenLines::start(voice, spoken_lines(&script)));
        Self {
            spoken,
            transport,
            side: TwilioCarrierSide::new(
                &options.stream_sid,
                &options.call_sid,
                &options.account_sid,
            ),
            script: script.into(),
            behaviour,
            speech_seed: options.seed,
            options,
            report: CalleeReport::default(),
            text: String::with_capacity(512),
            server_audio: Vec::with_capacity(FRAME_SAMPLES * 2),
            pcm: [0; FRAME_SAMPLES],
            mulaw: [g711::MULAW_SILENCE; FRAME_SAMPLES],
            voice: Voice::Silence,
            started: now,
            playout_end: now,
            pending_marks: VecDeque::new(),
            my_turn_ended: now,
            agent_spoke: false,
            agent_started_at: None,
            awaiting_reply: None,
            script_done_at: None,
            last_frame_at: None,
            jitter_total: Duration::ZERO,
            jitter_samples: 0,
            menu: None,
            interrupting_since: None,
            line_rest: VecDeque::new(),
            part_pause: Duration::ZERO,
            saying_backchannel: false,
            done: false,
        }
    }

    /// Sends the text in `self.text`.
    async fn send_text(&mut self) -> bool {
        match self.transport.send(OutboundFrame::Text(&self.text)).await {
            Ok(()) => true,
            Err(error) => {
                self.finish_with_error(error.to_string());
                false
            }
        }
    }

    fn finish_with_error(&mut self, error: String) {
        if !self.done {
            self.report.error = Some(error);
            self.done = true;
        }
    }

    async fn play(&mut self, params: &[(String, String)]) {
        self.side.connected(&mut self.text);
        if !self.send_text().await {
            return;
        }
        let params: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.side.start(&params, &mut self.text);
        if !self.send_text().await {
            return;
        }
        self.report.connected = true;
        self.started = Instant::now();
        self.my_turn_ended = self.started;
        if self.behaviour == CalleeBehaviour::AnsweringMachine {
            self.start_speaking(MACHINE_GREETING);
        }
        if self.script.is_empty() && self.behaviour != CalleeBehaviour::AnsweringMachine {
            self.script_done_at = Some(self.started);
        }
        let cancel = self.options.cancel.clone();
        let cancelled = cancel.cancelled();
        let hard_stop = sleep_until(self.started + self.options.max_call);
        tokio::pin!(cancelled, hard_stop);
        let mut ticker = interval(FRAME);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
        while !self.done {
            // Media first; the rare branches last, so a frame's wake-up does not poll the
            // cancellation token (a mutex) on its way.
            tokio::select! {
                biased;
                message = self.transport.recv() => self.on_message(message).await,
                _ = ticker.tick() => self.on_tick().await,
                () = &mut hard_stop => {
                    self.report.error = Some("call exceeded the callee's time bound".to_owned());
                    self.hang_up(false).await;
                }
                () = &mut cancelled => {
                    // The carrier leg was hung up from the service's side: to the callee that
                    // is the agent hanging up, however the close and the hang-up race.
                    self.report.agent_hung_up = true;
                    self.hang_up(self.report.error.is_none()).await;
                }
            }
        }
        self.report.duration = self.started.elapsed();
        if self.jitter_samples > 0 {
            self.report.mean_jitter = self.jitter_total / self.jitter_samples as u32;
        }
    }

    /// Sends `stop` and closes; `clean` when the script itself hung up.
    async fn hang_up(&mut self, clean: bool) {
        self.side.stop(&mut self.text);
        // The agent may already have closed; a failed stop changes nothing.
        let _ = self.transport.send(OutboundFrame::Text(&self.text)).await;
        self.transport.close().await;
        self.report.ended_cleanly = clean && self.report.error.is_none();
        self.done = true;
    }

    async fn on_message(&mut self, message: Option<TransportMessage>) {
        let text = match message {
            Some(TransportMessage::Text(text)) => text,
            Some(TransportMessage::Binary(_)) => return,
            Some(TransportMessage::Closed) | None => {
                self.report.agent_hung_up = true;
                self.report.ended_cleanly = self.report.error.is_none();
                self.done = true;
                // Answers the agent's close frame, completing the closing handshake.
                self.transport.close().await;
                return;
            }
        };
        let now = Instant::now();
        match self.side.parse_server(&text, &mut self.server_audio) {
            Ok(ServerCommand::Media) => self.on_agent_audio(now),
            Ok(ServerCommand::Mark { name }) => {
                if self.playout_end <= now {
                    self.echo_mark(&name).await;
                } else {
                    self.pending_marks.push_back((self.playout_end, name));
                }
            }
            Ok(ServerCommand::Clear) => {
                self.report.clears += 1;
                if let Some(since) = self.interrupting_since.take() {
                    self.report
                        .barge_in_stops
                        .push(now.saturating_duration_since(since));
                }
                self.playout_end = now;
                while let Some((_, name)) = self.pending_marks.pop_front() {
                    self.echo_mark(&name).await;
                }
            }
            Ok(ServerCommand::Ignored) => {}
            Err(error) => self.report.error = Some(format!("unreadable server message: {error}")),
        }
    }

    async fn echo_mark(&mut self, name: &str) {
        self.side.mark(name, &mut self.text);
        if self.send_text().await {
            self.report.marks_echoed += 1;
        }
    }

    fn on_agent_audio(&mut self, now: Instant) {
        let played = Duration::from_micros(self.server_audio.len() as u64 * 1_000_000 / 8_000);
        self.report.agent_frames += 1;
        self.report.agent_audio += played;
        // Within a talk spurt, audio is late when the playback buffer ran dry before it came:
        // the listener heard a gap. Carriers buffer, so audio sent ahead is never late.
        let in_spurt = self
            .last_frame_at
            .is_some_and(|previous| now.saturating_duration_since(previous) < SPURT_GAP);
        if in_spurt && now > self.playout_end + LATE_AFTER {
            self.report.late_frames += 1;
        }
        if in_spurt {
            // How long the playback buffer had been empty when this audio came (0 when ahead).
            let gap = now.saturating_duration_since(self.playout_end);
            self.jitter_total += gap;
            self.jitter_samples += 1;
            self.report.max_jitter = self.report.max_jitter.max(gap);
        }
        self.playout_end = self.playout_end.max(now) + played;
        if self.report.greeting_latency.is_none() {
            self.report.greeting_latency = Some(now.saturating_duration_since(self.started));
        }
        if let Some(line_end) = self.awaiting_reply.take() {
            self.report
                .turn_latencies
                .push(now.saturating_duration_since(line_end));
        }
        self.agent_spoke = true;
        self.agent_started_at.get_or_insert(now);
        self.last_frame_at = Some(now);
        if let Some(menu) = self.menu.as_mut() {
            menu.pcm.resize(self.server_audio.len(), 0);
            g711::decode_mulaw_into(&self.server_audio, &mut menu.pcm);
            if let Some(key) = menu.detector.push(&menu.pcm) {
                self.report.digits_heard.push(key);
            }
        }
    }

    fn start_speaking(&mut self, duration: Duration) {
        self.speech_seed = self.speech_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.voice = Voice::Speaking {
            generator: Box::new(SpeechLikeGenerator::new(RATE, self.speech_seed)),
            samples_left: samples_for_duration(RATE, duration),
        };
    }

    /// Starts saying a line: its real speech when the callee has a voice, else speech-like
    /// sound as long as each of its parts' text would take, with its pauses between.
    fn say(&mut self, text: &str) {
        match self.spoken.as_mut().and_then(|spoken| spoken.next.take()) {
            Some(pcm) => self.voice = Voice::Recorded { pcm, at: 0 },
            None => {
                self.line_rest = line_parts(text).into();
                self.part_pause = Duration::ZERO;
                if !self.continue_line() {
                    self.start_speaking(speech_duration_for_text(text));
                }
            }
        }
    }

    /// Goes on with the line being said as speech-like sound: the pause after the part
    /// just said, or the next part. False when the line is over.
    fn continue_line(&mut self) -> bool {
        if !self.part_pause.is_zero() {
            self.voice = Voice::Pause {
                samples_left: samples_for_duration(RATE, self.part_pause),
            };
            self.part_pause = Duration::ZERO;
            return true;
        }
        match self.line_rest.pop_front() {
            Some(part) => {
                self.part_pause = part.pause_after;
                self.start_speaking(speech_duration_for_text(&part.text));
                true
            }
            None => false,
        }
    }

    /// A line, tone or greeting ended now.
    fn line_ended(&mut self, now: Instant, expects_reply: bool) {
        if self.saying_backchannel {
            // The agent's turn goes on: the next step still waits for its end.
            self.saying_backchannel = false;
            if self.script.is_empty() && self.script_done_at.is_none() {
                self.script_done_at = Some(now);
            }
            return;
        }
        self.step_ended(now, expects_reply);
    }

    /// Our step ended now; the agent's turn begins.
    fn step_ended(&mut self, now: Instant, expects_reply: bool) {
        self.my_turn_ended = now;
        self.agent_spoke = false;
        self.agent_started_at = None;
        if expects_reply {
            self.awaiting_reply = Some(now);
        }
        if self.script.is_empty() && self.script_done_at.is_none() {
            self.script_done_at = Some(now);
        }
    }

    /// Whether the agent's turn is over: it spoke and has been quiet for the turn gap, or it
    /// has said nothing for too long.
    fn agent_turn_over(&self, now: Instant) -> bool {
        if self.agent_spoke {
            now >= self.playout_end + self.options.turn_gap
        } else {
            now >= self.my_turn_ended + self.options.agent_wait
        }
    }

    async fn on_tick(&mut self) {
        let now = Instant::now();
        while self
            .pending_marks
            .front()
            .is_some_and(|(due, _)| *due <= now)
        {
            if let Some((_, name)) = self.pending_marks.pop_front() {
                self.echo_mark(&name).await;
            }
        }
        if matches!(self.voice, Voice::Silence) {
            self.next_step(now).await;
            if self.done {
                return;
            }
        }
        let finished_line = self.fill_frame();
        g711::encode_mulaw_into(&self.pcm, &mut self.mulaw);
        self.side.media(&self.mulaw, &mut self.text);
        if !self.send_text().await {
            return;
        }
        if let Some(expects_reply) = finished_line {
            self.line_ended(Instant::now(), expects_reply);
        }
    }

    /// Starts the next script step when its moment has come.
    async fn next_step(&mut self, now: Instant) {
        if let Some(done_at) = self.script_done_at {
            if self.behaviour == CalleeBehaviour::AnsweringMachine {
                // After its beep the machine records, quietly, until the agent hangs up or
                // the message is as long as it takes.
                if now >= done_at + MACHINE_RECORDING {
                    self.hang_up(true).await;
                }
                return;
            }
            if now >= done_at + self.options.hangup_wait {
                self.report.error = Some("the agent did not hang up".to_owned());
                self.hang_up(false).await;
            }
            return;
        }
        let ready = match self.script.front() {
            Some(ScriptStep::Interrupt { after, .. } | ScriptStep::Backchannel { after, .. }) => {
                self.agent_started_at
                    .is_some_and(|started| now >= started + *after)
            }
            Some(_) => self.agent_turn_over(now),
            None => false,
        };
        if !ready {
            return;
        }
        let speaks = matches!(
            self.script.front(),
            Some(
                ScriptStep::Say(_)
                    | ScriptStep::Interrupt { .. }
                    | ScriptStep::Backchannel { .. }
                    | ScriptStep::Menu { .. }
            )
        );
        if speaks && let Some(spoken) = self.spoken.as_mut() {
            match spoken.poll() {
                Ok(true) => {}
                // Still being synthesized: like a person gathering their words.
                Ok(false) => return,
                Err(error) => {
                    self.report.error = Some(error);
                    self.hang_up(false).await;
                    return;
                }
            }
        }
        if let Some(menu) = self.menu.take()
            && !self.report.digits_heard.contains(menu.expect)
        {
            self.report.error = Some(format!(
                "the menu heard {:?}, not {}",
                self.report.digits_heard, menu.expect
            ));
            self.hang_up(false).await;
            return;
        }
        match self.script.pop_front() {
            Some(ScriptStep::Say(text)) => {
                self.report.lines_said += 1;
                self.say(&text);
            }
            Some(ScriptStep::Backchannel { text, .. }) => {
                self.report.backchannels_said += 1;
                self.saying_backchannel = true;
                self.say(&text);
            }
            Some(ScriptStep::Interrupt { text, .. }) => {
                self.report.lines_said += 1;
                self.say(&text);
                // Its first frame goes out on this tick; a real voice's speech starts after
                // the silence its synthesizer put before it.
                let lead = match &self.voice {
                    Voice::Recorded { pcm, .. } => pcm
                        .iter()
                        .position(|s| s.unsigned_abs() > 1_000)
                        .unwrap_or(0),
                    _ => 0,
                };
                self.interrupting_since =
                    Some(now + Duration::from_micros(lead as u64 * 1_000_000 / u64::from(RATE)));
            }
            Some(ScriptStep::Menu { text, expect }) => {
                self.report.lines_said += 1;
                match DtmfDetector::new(RATE) {
                    Ok(detector) => {
                        self.menu = Some(MenuListener {
                            detector,
                            pcm: Vec::with_capacity(FRAME_SAMPLES),
                            expect,
                        });
                    }
                    Err(error) => self.report.error = Some(error.to_string()),
                }
                self.say(&text);
            }
            Some(ScriptStep::Dtmf(digit)) => {
                self.report.digits_sent += 1;
                if self.options.dtmf_mode != DtmfMode::InBandOnly {
                    self.side.dtmf(digit, &mut self.text);
                    if !self.send_text().await {
                        return;
                    }
                }
                if self.options.dtmf_mode == DtmfMode::EventOnly {
                    self.step_ended(now, true);
                } else {
                    let mut tone = DtmfToneGenerator::new(RATE);
                    let tone_ms = u32::try_from(self.options.dtmf_tone.as_millis()).unwrap_or(150);
                    match tone.start(digit, tone_ms) {
                        Ok(()) => self.voice = Voice::Tone(tone),
                        Err(error) => self.report.error = Some(error.to_string()),
                    }
                }
            }
            Some(ScriptStep::Hangup) => self.hang_up(true).await,
            None => {}
        }
    }

    /// Fills the next frame; `Some(expects_reply)` when a line, tone or greeting just ended.
    fn fill_frame(&mut self) -> Option<bool> {
        match &mut self.voice {
            Voice::Silence => {
                self.pcm.fill(0);
                None
            }
            Voice::Speaking {
                generator,
                samples_left,
            } => {
                let take = (*samples_left).min(FRAME_SAMPLES);
                generator.fill(&mut self.pcm[..take]);
                self.pcm[take..].fill(0);
                *samples_left -= take;
                if *samples_left > 0 {
                    return None;
                }
                self.voice = Voice::Silence;
                if self.continue_line() {
                    return None;
                }
                if self.behaviour == CalleeBehaviour::AnsweringMachine {
                    // The greeting is followed by the beep.
                    self.voice = Voice::Beep {
                        tone: ToneGenerator::new(RATE, 1000.0, -10.0),
                        samples_left: samples_for_duration(RATE, MACHINE_BEEP),
                    };
                    return None;
                }
                Some(true)
            }
            Voice::Recorded { pcm, at } => {
                let take = (pcm.len() - *at).min(FRAME_SAMPLES);
                self.pcm[..take].copy_from_slice(&pcm[*at..*at + take]);
                self.pcm[take..].fill(0);
                *at += take;
                if *at < pcm.len() {
                    return None;
                }
                self.voice = Voice::Silence;
                Some(true)
            }
            Voice::Pause { samples_left } => {
                let take = (*samples_left).min(FRAME_SAMPLES);
                self.pcm.fill(0);
                *samples_left -= take;
                if *samples_left > 0 || self.continue_line() {
                    return None;
                }
                self.voice = Voice::Silence;
                Some(true)
            }
            Voice::Tone(tone) => {
                tone.fill(&mut self.pcm);
                if tone.is_active() {
                    return None;
                }
                self.voice = Voice::Silence;
                Some(true)
            }
            Voice::Beep { tone, samples_left } => {
                let take = (*samples_left).min(FRAME_SAMPLES);
                tone.fill(&mut self.pcm[..take]);
                self.pcm[take..].fill(0);
                *samples_left -= take;
                if *samples_left > 0 {
                    return None;
                }
                self.voice = Voice::Silence;
                self.script_done_at = Some(Instant::now());
                Some(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scripts_parse_lines_and_steps() {
        let steps = parse_sim_script(&json!([
            "Hello",
            {"dtmf": "1#"},
            {"dtmf": 2},
            {"interrupt": "Wait!", "afterMs": 500},
            {"backchannel": "uh-huh", "afterMs": 600},
            {"backchannel": "mm"},
            {"hangup": true}
        ]))
        .unwrap();
        assert_eq!(
            steps,
            [
                ScriptStep::Say("Hello".into()),
                ScriptStep::Dtmf('1'),
                ScriptStep::Dtmf('#'),
                ScriptStep::Dtmf('2'),
                ScriptStep::Interrupt {
                    text: "Wait!".into(),
                    after: Duration::from_millis(500)
                },
                ScriptStep::Backchannel {
                    text: "uh-huh".into(),
                    after: Duration::from_millis(600)
                },
                ScriptStep::Backchannel {
                    text: "mm".into(),
                    after: Duration::from_millis(800)
                },
                ScriptStep::Hangup,
            ]
        );
        assert_eq!(
            spoken_lines(&steps),
            ["Hello", "Wait!", "[backchannel] uh-huh", "[backchannel] mm"]
        );
        let nested = parse_sim_script(&json!("[\"Hi\", {\"dtmf\":\"5\"}]")).unwrap();
        assert_eq!(
            nested,
            [ScriptStep::Say("Hi".into()), ScriptStep::Dtmf('5')]
        );
        assert!(parse_sim_script(&json!({"dtmf": "1"})).is_err());
        assert!(parse_sim_script(&json!([{"dtmf": "x"}])).is_err());
        assert!(parse_sim_script(&json!([42])).is_err());
        assert_eq!(spoken_lines(&default_sim_script()).len(), 3);
    }

    /// A synthesizer answering each sentence with a 440 Hz tone at 22.05 kHz, 0.5 s long,
    /// in chunks that do not line up with the resampler's.
    struct ToneVoice;

    struct ToneStream {
        left: usize,
        tone: voxline_media::synth::ToneGenerator,
    }

    #[async_trait::async_trait]
    impl crate::providers::TtsStream for ToneStream {
        fn sample_rate(&self) -> u32 {
            22_050
        }

        async fn next_chunk(
            &mut self,
        ) -> Option<Result<Vec<i16>, crate::providers::ProviderError>> {
            if self.left == 0 {
                return None;
            }
            let mut chunk = vec![0; self.left.min(1_000)];
            self.tone.fill(&mut chunk);
            self.left -= chunk.len();
            Some(Ok(chunk))
        }
    }

    #[async_trait::async_trait]
    impl TtsProvider for ToneVoice {
        async fn synthesize(
            &self,
            _text: &str,
            _voice: &str,
            _sample_rate: u32,
        ) -> Result<Box<dyn crate::providers::TtsStream>, crate::providers::ProviderError> {
            Ok(Box::new(ToneStream {
                left: 11_025,
                tone: voxline_media::synth::ToneGenerator::new(22_050, 440.0, -6.0),
            }))
        }
    }

    #[test]
    fn lines_split_into_sentences() {
        assert_eq!(
            sentences("My name is Asha. I am 34! Is that all?"),
            ["My name is Asha.", "I am 34!", "Is that all?"]
        );
        assert_eq!(sentences("It costs 4.50 rupees"), ["It costs 4.50 rupees"]);
        assert!(sentences("  ").is_empty());
    }

    #[tokio::test]
    async fn a_voice_speaks_each_sentence_at_8k_with_a_pause_between() {
        let voice = CalleeVoice {
            tts: Arc::new(ToneVoice),
            voice: String::new(),
            sentence_pause: Duration::from_millis(300),
        };
        let pcm = voice.speak("First sentence. Second one.").await.unwrap();
        // Two 0.5 s sentences and a 0.3 s pause, at 8 kHz, give or take the resampler's tail.
        let seconds = pcm.len() as f64 / 8_000.0;
        assert!((1.3..1.36).contains(&seconds), "{seconds} s");
        let rms = |s: &[i16]| {
            (s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / s.len() as f64).sqrt()
        };
        // Speech, the pause, speech.
        assert!(rms(&pcm[800..3_600]) > 5_000.0);
        assert!(rms(&pcm[4_400..6_200]) < 50.0);
        assert!(rms(&pcm[7_000..9_800]) > 5_000.0);

        // A pause mark is silence of its length between the parts.
        let pcm = voice.speak("First. [pause 700] Second.").await.unwrap();
        let seconds = pcm.len() as f64 / 8_000.0;
        assert!((1.7..1.76).contains(&seconds), "{seconds} s");
        assert!(rms(&pcm[4_400..9_200]) < 50.0);
    }
}

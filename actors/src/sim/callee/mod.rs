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
//!
//! The callee's parts: [`script`] (the caller script: steps, parsing, the lines it says),
//! [`voice`] (a real voice for its lines), [`keypad`] (how it presses keys and the phone
//! menu's ear for the agent's), [`load_report`] (what it measured, for the load generator)
//! and [`twilio_stream`] (its end of the Twilio Media Stream). This file holds its options
//! and plays the script, frame by frame.

pub mod keypad;
pub mod load_report;
pub mod script;
pub mod twilio_stream;
pub mod voice;

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use voxline_media::carrier::TwilioCarrierSide;
use voxline_media::g711;
use voxline_media::synth::{
    DtmfToneGenerator, SpeechLikeGenerator, ToneGenerator, samples_for_duration,
    speech_duration_for_text,
};

use crate::conversation::MediaTransport;
use crate::sim::lines::{LinePart, line_parts};

pub use crate::sim::carrier::CalleeBehaviour;
pub use keypad::DtmfMode;
pub use load_report::CalleeReport;
pub use script::{ScriptError, ScriptStep, default_sim_script, parse_sim_script, spoken_lines};
pub use twilio_stream::MEDIA_READ_BUFFER;
pub use voice::{CalleeVoice, SPEAKING_AGENT_WAIT, SPEAKING_TURN_GAP, sentences};

use keypad::MenuListener;
use voice::SpokenLines;

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
                match MenuListener::new(expect) {
                    Ok(menu) => self.menu = Some(menu),
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

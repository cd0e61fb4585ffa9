//! The turn-taking benchmark's harness: reads the labelled corpus in
//! `media/tests/fixtures/turns/` (made by `scripts/turn-corpus/generate.sh`), runs a
//! turn-taking policy over each clip in audio time, and scores what it decided against
//! the labels.
//!
//! Shared, by `#[path]`, between `benches/turn_taking.rs` (every row, the whole
//! corpus) and `media/tests/turn_corpus.rs` (the silence rule on a handful of clips,
//! so the harness cannot silently score nothing). It needs only `voxline_media`,
//! `serde` and `serde_json`.
//!
//! How a clip is run, as the call loop runs caller audio: the 8 kHz μ-law is decoded
//! and cut into 20 ms frames; each frame goes through the real voice activity detector
//! (`voxline_media::vad`) and then to the policy, with the time at the frame's end, the
//! agent's state (speaking during the labelled interval until the policy yields, or
//! paused), and the words a streaming ASR would have shown by then (see
//! [`heard_words`]). A clip is run past its end, holding the line with its own last
//! second (line noise only), until [`HOLD_MS`] after the true end of the turn (or the
//! agent's end, for backchannels), so a policy that waits long still gets to decide.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use voxline_media::g711;
use voxline_media::vad::VoiceActivityDetector;

/// Milliseconds per frame, as the call loop uses.
pub const FRAME_MS: u32 = 20;
/// The corpus's sample rate (a carrier's μ-law).
pub const RATE: u32 = 8_000;
/// Samples per 20 ms frame at 8 kHz.
pub const FRAME: usize = 160;
/// How long each clip runs after the true end of the turn (or the agent's end).
pub const HOLD_MS: u32 = 4_000;

/// What kind of clip a label describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    /// An answer said in one go.
    Complete,
    /// An answer with a thinking pause (with or without "um") mid-sentence.
    Pause,
    /// A phone number, date, amount or email read out in groups with pauses.
    Dictation,
    /// "uh-huh", "okay"… said while the agent speaks: not a turn.
    Backchannel,
    /// A real interruption of the agent.
    Interruption,
}

impl Category {
    /// Every category, in the corpus's order.
    pub const ALL: [Category; 5] = [
        Category::Complete,
        Category::Pause,
        Category::Dictation,
        Category::Backchannel,
        Category::Interruption,
    ];

    /// The label's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Category::Complete => "complete",
            Category::Pause => "pause",
            Category::Dictation => "dictation",
            Category::Backchannel => "backchannel",
            Category::Interruption => "interruption",
        }
    }
}

/// One transcript word with its time in the clip.
#[derive(Debug, Clone, Deserialize)]
pub struct Word {
    /// The word as a transcript shows it.
    pub word: String,
    /// When it starts, ms from the clip's start.
    pub start_ms: u32,
    /// When it ends.
    pub end_ms: u32,
}

/// One stretch of the caller's speech, synthesized as a unit.
#[derive(Debug, Clone, Deserialize)]
pub struct Segment {
    /// What was said.
    pub text: String,
    /// Its first sound, ms from the clip's start.
    pub start_ms: u32,
    /// Its last sound.
    pub end_ms: u32,
}

/// What the agent had asked, for dictation clips.
#[derive(Debug, Clone, Deserialize)]
pub struct Context {
    /// The agent's question.
    pub agent_asked: String,
    /// What kind of answer it expects: phone, date, amount or email.
    pub expects: String,
}

/// One line of `labels.jsonl`.
#[derive(Debug, Clone, Deserialize)]
pub struct Label {
    /// The clip's name.
    pub id: String,
    /// Its raw 8 kHz μ-law file, beside the labels.
    pub file: String,
    /// What kind of clip it is.
    pub category: Category,
    /// Which synthetic voice spoke.
    pub voice: String,
    /// The agent's question, where the answer is dictation.
    pub context: Option<Context>,
    /// The caller's segments.
    pub segments: Vec<Segment>,
    /// The caller's words.
    pub words: Vec<Word>,
    /// The true end of the caller's turn (`None` for a backchannel: it is no turn).
    pub end_of_turn_ms: Option<u32>,
    /// Silences inside the turn, `[start, end]` in ms.
    pub pauses: Vec<[u32; 2]>,
    /// When the agent speaks, `[start, end]` in ms (backchannel and interruption clips).
    pub agent_speaking: Option<[u32; 2]>,
    /// When the caller starts speaking.
    pub caller_onset_ms: u32,
}

/// A clip: its label and its audio, decoded and held to the run's length.
#[derive(Debug, Clone)]
pub struct Clip {
    /// The label.
    pub label: Label,
    /// 8 kHz linear PCM, run length (the recording, then its last second repeated).
    pub audio: Vec<i16>,
}

impl Clip {
    /// How long the clip is run, in ms: [`HOLD_MS`] past the true end or the agent's end.
    pub fn run_ms(&self) -> u32 {
        let label = &self.label;
        let anchor = label
            .end_of_turn_ms
            .or(label.agent_speaking.map(|[_, end]| end))
            .unwrap_or(label.caller_onset_ms);
        (anchor + HOLD_MS).div_ceil(FRAME_MS) * FRAME_MS
    }
}

/// Reads `labels.jsonl` and every clip it names from `dir`.
pub fn load_corpus(dir: &Path) -> Result<Vec<Clip>, String> {
    let labels_path = dir.join("labels.jsonl");
    let text = std::fs::read_to_string(&labels_path)
        .map_err(|e| format!("{}: {e}", labels_path.display()))?;
    let mut clips = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let label: Label = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: {e}", labels_path.display(), n + 1))?;
        let path = dir.join(&label.file);
        let wire = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut audio = vec![0i16; wire.len()];
        g711::decode_mulaw_into(&wire, &mut audio);
        let mut clip = Clip { label, audio };
        hold_line(&mut clip);
        clips.push(clip);
    }
    Ok(clips)
}

/// Extends the clip to its run length with copies of its last second (line noise).
fn hold_line(clip: &mut Clip) {
    let want = (clip.run_ms() as usize) * (RATE as usize) / 1000;
    let second = RATE as usize;
    if clip.audio.len() < second {
        clip.audio.resize(want.max(clip.audio.len()), 0);
        return;
    }
    let tail: Vec<i16> = clip.audio[clip.audio.len() - second..].to_vec();
    while clip.audio.len() < want {
        let n = (want - clip.audio.len()).min(second);
        clip.audio.extend_from_slice(&tail[..n]);
    }
}

///
/// The same rule as the sim ASR's interim results (words in proportion to the speech
/// heard), with the corpus's exact word times standing in for the proportion.
/// How long after a word ends the simulated recognizer shows it, in ms:
/// `VOXLINE_TURN_BENCH_ASR_LAG_MS`, 0 by default (a real streaming recognizer's interim
/// results come a few hundred ms behind the audio).
pub fn asr_lag_ms() -> u32 {
    std::env::var("VOXLINE_TURN_BENCH_ASR_LAG_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The words a streaming ASR has shown by `t_ms`: every word whose end has been heard.
pub fn heard_words(label: &Label, t_ms: u32) -> &[Word] {
    let n = label.words.iter().take_while(|w| w.end_ms <= t_ms).count();
    &label.words[..n]
}

/// `words` as a streaming recognizer with punctuation shows them: a word that ends a
/// segment spoken as a sentence ("I live in Pune.") carries its full stop or question
/// mark, as the sim ASR shows the script line's own text; a group that the speaker breaks
/// off ("I live in", "nine eight four") carries none.
pub fn transcript_text(label: &Label, words: &[Word]) -> String {
    let mut text = String::new();
    for word in words {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&word.word);
        let closing = label
            .segments
            .iter()
            .find(|s| s.end_ms == word.end_ms)
            .and_then(|s| s.text.trim_end().chars().last())
            .filter(|c| matches!(c, '.' | '?' | '!'));
        if let Some(mark) = closing {
            text.push(mark);
        }
    }
    text
}

/// The agent's side of the call as the harness plays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Not speaking (before or after its line, or no line in this clip).
    Silent,
    /// Speaking its line.
    Speaking,
    /// Paused by the policy, waiting to resume or yield.
    Paused,
    /// Stopped by the policy: the caller has the turn.
    Yielded,
}

/// What a policy sees at the end of one frame.
#[derive(Debug)]
pub struct FrameView<'a> {
    /// Time at the end of this frame, ms from the clip's start.
    pub t_ms: u32,
    /// This frame's samples (8 kHz).
    pub samples: &'a [i16],
    /// All caller audio up to the end of this frame (8 kHz), for a model's window.
    pub history: &'a [i16],
    /// The real VAD's decision on this frame.
    pub is_speech: bool,
    /// The agent's state.
    pub agent: Agent,
    /// Interim words shown so far.
    pub words: &'a [Word],
    /// The clip's label, for context (what the agent asked); not for its times.
    pub label: &'a Label,
}

/// A decision a policy takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The caller's turn is over: the agent answers now.
    EndOfTurn,
    /// Pause the agent's audio (the caller started talking over it).
    PauseAgent,
    /// Resume the agent where it paused (a backchannel or noise).
    ResumeAgent,
    /// Stop the agent: the caller takes the turn.
    YieldAgent,
}

/// A turn-taking policy under test, fed frame by frame.
pub trait Policy {
    /// Readies the policy for a new clip.
    fn start(&mut self, label: &Label);
    /// One frame; returns what it decided at this frame's end.
    fn frame(&mut self, view: &FrameView<'_>, actions: &mut Vec<Action>);
}

/// What a policy decided on one clip, in time order.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    /// `(time ms, action)`.
    pub actions: Vec<(u32, Action)>,
}

/// Runs `policy` over `clip` in audio time with the real VAD.
pub fn run_clip(clip: &Clip, policy: &mut dyn Policy) -> Result<Decisions, String> {
    let label = &clip.label;
    let lag = asr_lag_ms();
    let mut vad = VoiceActivityDetector::new(RATE).map_err(|e| e.to_string())?;
    policy.start(label);
    let mut agent = Agent::Silent;
    let mut decisions = Decisions::default();
    let mut actions = Vec::new();
    let frames = clip.audio.len() / FRAME;
    for i in 0..frames {
        let samples = &clip.audio[i * FRAME..(i + 1) * FRAME];
        let t_ms = (i as u32 + 1) * FRAME_MS;
        let is_speech = vad.is_speech(samples);
        agent = match (agent, label.agent_speaking) {
            (Agent::Silent, Some([start, end])) if t_ms > start && t_ms <= end => Agent::Speaking,
            (Agent::Speaking | Agent::Paused, Some([_, end])) if t_ms > end => Agent::Silent,
            (state, _) => state,
        };
        let view = FrameView {
            t_ms,
            samples,
            history: &clip.audio[..(i + 1) * FRAME],
            is_speech,
            agent,
            words: heard_words(label, t_ms.saturating_sub(lag)),
            label,
        };
        actions.clear();
        policy.frame(&view, &mut actions);
        for &action in &actions {
            agent = match (action, agent) {
                (Action::PauseAgent, Agent::Speaking) => Agent::Paused,
                (Action::ResumeAgent, Agent::Paused) => Agent::Speaking,
                (Action::YieldAgent, Agent::Speaking | Agent::Paused) => Agent::Yielded,
                (_, state) => state,
            };
            decisions.actions.push((t_ms, action));
        }
    }
    Ok(decisions)
}

/// A row's scores over the corpus.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The row's name.
    pub name: String,
    /// Clips with a pause inside the turn.
    pub paused_clips: usize,
    /// Of those, the ones a turn end fired inside (before the true end).
    pub cut_ins: usize,
    /// Cut-ins by category: pause, dictation.
    pub cut_ins_pause: (usize, usize),
    /// Cut-ins on dictation clips, and how many there are.
    pub cut_ins_dictation: (usize, usize),
    /// End-of-turn latency after the true end on complete answers, ms.
    pub latency_complete: Vec<u32>,
    /// The same over every clip that is a turn.
    pub latency_all: Vec<u32>,
    /// Turns whose end was never called within [`HOLD_MS`].
    pub no_end: usize,
    /// Turn clips.
    pub turn_clips: usize,
    /// Backchannel clips.
    pub backchannel_clips: usize,
    /// Backchannels that stopped the agent.
    pub backchannels_stopped: usize,
    /// Backchannels the agent paused for (and resumed after).
    pub backchannels_paused: usize,
    /// Backchannels answered as a turn.
    pub backchannels_answered: usize,
    /// Interruption clips.
    pub interruption_clips: usize,
    /// Interruptions the agent never yielded to.
    pub interruptions_missed: usize,
    /// Time from the caller's onset to the agent yielding, ms.
    pub yield_ms: Vec<u32>,
    /// Time from the caller's onset to the agent going silent (paused, or yielded at
    /// once), ms, for the interruptions it yielded to.
    pub silent_ms: Vec<u32>,
    /// Clip ids cut in on, for the detail listing.
    pub cut_in_ids: Vec<String>,
}

/// Scores each clip's decisions against its label.
pub fn score(name: &str, clips: &[Clip], decisions: &[Decisions]) -> Report {
    let mut report = Report {
        name: name.to_owned(),
        ..Report::default()
    };
    for (clip, decided) in clips.iter().zip(decisions) {
        let label = &clip.label;
        let ends = decided
            .actions
            .iter()
            .filter(|(_, a)| *a == Action::EndOfTurn)
            .map(|(t, _)| *t);
        match label.category {
            Category::Backchannel => {
                report.backchannel_clips += 1;
                let did = |want: Action| decided.actions.iter().any(|(_, a)| *a == want);
                if did(Action::YieldAgent) {
                    report.backchannels_stopped += 1;
                } else if did(Action::PauseAgent) {
                    report.backchannels_paused += 1;
                }
                if did(Action::EndOfTurn) {
                    report.backchannels_answered += 1;
                }
            }
            _ => {
                let Some(true_end) = label.end_of_turn_ms else {
                    continue;
                };
                report.turn_clips += 1;
                let ends: Vec<u32> = ends.collect();
                if !label.pauses.is_empty() {
                    report.paused_clips += 1;
                    let cut = ends.iter().any(|&t| t < true_end);
                    if cut {
                        report.cut_ins += 1;
                        report.cut_in_ids.push(label.id.clone());
                    }
                    let tally = match label.category {
                        Category::Dictation => &mut report.cut_ins_dictation,
                        _ => &mut report.cut_ins_pause,
                    };
                    tally.1 += 1;
                    tally.0 += usize::from(cut);
                }
                match ends.iter().find(|&&t| t >= true_end) {
                    Some(&t) => {
                        report.latency_all.push(t - true_end);
                        if label.category == Category::Complete {
                            report.latency_complete.push(t - true_end);
                        }
                    }
                    None => report.no_end += 1,
                }
                if label.category == Category::Interruption {
                    report.interruption_clips += 1;
                    let onset = label.caller_onset_ms;
                    let yielded = decided
                        .actions
                        .iter()
                        .find(|(t, a)| *a == Action::YieldAgent && *t >= onset);
                    match yielded {
                        Some((t, _)) => {
                            report.yield_ms.push(t - onset);
                            let silent = decided
                                .actions
                                .iter()
                                .find(|(t, a)| {
                                    matches!(a, Action::PauseAgent | Action::YieldAgent)
                                        && *t >= onset
                                })
                                .map_or(*t, |(t, _)| *t);
                            report.silent_ms.push(silent - onset);
                        }
                        None => report.interruptions_missed += 1,
                    }
                }
            }
        }
    }
    report
}

/// The `p`-th percentile (nearest rank) of `values`, or `None` when empty.
pub fn percentile(values: &[u32], p: u32) -> Option<u32> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (p as usize * sorted.len()).div_ceil(100).max(1);
    Some(sorted[rank - 1])
}

fn p50_p95(values: &[u32]) -> String {
    match (percentile(values, 50), percentile(values, 95)) {
        (Some(a), Some(b)) => format!("{a} / {b}"),
        _ => "–".to_owned(),
    }
}

/// The Markdown table's header.
pub fn table_header() -> String {
    "| row | false cut-ins (clips with pauses) | end-of-turn latency p50 / p95, complete answers (ms) | end-of-turn latency p50 / p95, all turns (ms) | backchannels that stopped the agent | real interruptions missed | agent silent after an interruption, p50 / p95 (ms) | time to yield p50 / p95 (ms) |\n\
     | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        .to_owned()
}

impl Report {
    /// The report as one row of the Markdown table.
    pub fn table_row(&self) -> String {
        let no_end = if self.no_end > 0 {
            format!(" ({} never ended)", self.no_end)
        } else {
            String::new()
        };
        format!(
            "| {} | {} of {} (pauses {} of {}, dictation {} of {}) | {} | {}{} | {} of {} | {} of {} | {} | {} |\n",
            self.name,
            self.cut_ins,
            self.paused_clips,
            self.cut_ins_pause.0,
            self.cut_ins_pause.1,
            self.cut_ins_dictation.0,
            self.cut_ins_dictation.1,
            p50_p95(&self.latency_complete),
            p50_p95(&self.latency_all),
            no_end,
            self.backchannels_stopped,
            self.backchannel_clips,
            self.interruptions_missed,
            self.interruption_clips,
            p50_p95(&self.silent_ms),
            p50_p95(&self.yield_ms),
        )
    }

    /// Details beyond the table: backchannels paused or answered, the clips cut in on.
    pub fn details(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "- {}: backchannels paused the agent (then resumed) {} of {}, answered as a turn {} of {}; cut in on: {}",
            self.name,
            self.backchannels_paused,
            self.backchannel_clips,
            self.backchannels_answered,
            self.backchannel_clips,
            if self.cut_in_ids.is_empty() {
                "none".to_owned()
            } else {
                self.cut_in_ids.join(", ")
            }
        );
        out
    }
}

/// Row (a), today's rule: the call loop's endpointer (a turn ends after 600 ms of
/// silence) and its duration interruption (the agent stops once the caller's utterance
/// over it reaches 400 ms), as `actors::conversation::call_loop::listening` runs them.
#[derive(Debug, Clone)]
pub struct SilenceRule {
    endpointer: voxline_media::endpoint::Endpointer,
    config: voxline_media::endpoint::EndpointerConfig,
    min_interruption_ms: u32,
    started_over_agent: bool,
    barged: bool,
}

impl SilenceRule {
    /// The engine's defaults: `EndpointerConfig::default()` (600 ms) and `interruptionMs` 400.
    pub fn new() -> Self {
        Self::with(voxline_media::endpoint::EndpointerConfig::default(), 400)
    }

    /// Other thresholds.
    pub fn with(
        config: voxline_media::endpoint::EndpointerConfig,
        min_interruption_ms: u32,
    ) -> Self {
        Self {
            endpointer: voxline_media::endpoint::Endpointer::new(config),
            config,
            min_interruption_ms,
            started_over_agent: false,
            barged: false,
        }
    }
}

impl Default for SilenceRule {
    fn default() -> Self {
        Self::new()
    }
}

impl Policy for SilenceRule {
    fn start(&mut self, _label: &Label) {
        self.endpointer = voxline_media::endpoint::Endpointer::new(self.config);
        self.started_over_agent = false;
        self.barged = false;
    }

    fn frame(&mut self, view: &FrameView<'_>, actions: &mut Vec<Action>) {
        use voxline_media::endpoint::{EndpointEvent, EndpointState};
        let agent_talking = view.agent == Agent::Speaking;
        match self.endpointer.push(view.is_speech, FRAME_MS) {
            Some(EndpointEvent::SpeechStart) => {
                self.started_over_agent = agent_talking;
                self.barged = false;
            }
            Some(EndpointEvent::SpeechEnd { speech_ms }) => {
                // Talk over the agent that did not interrupt it is not a turn.
                let backchannel = self.started_over_agent
                    && !self.barged
                    && (agent_talking || speech_ms < self.min_interruption_ms);
                if !backchannel {
                    actions.push(Action::EndOfTurn);
                }
            }
            Some(EndpointEvent::Discarded { .. }) | None => {}
        }
        if let EndpointState::Speaking { speech_ms, .. } = self.endpointer.state()
            && agent_talking
            && !self.barged
            && speech_ms >= self.min_interruption_ms
        {
            self.barged = true;
            actions.push(Action::YieldAgent);
        }
    }
}

/// An end-of-turn model as the benchmark runs it.
pub trait TurnModel {
    /// The probability that the turn is complete, given the caller's audio so far (8 kHz;
    /// the model takes what it needs of the end), and what the evaluation cost in ms (its
    /// answer reaches the machine that much later, in audio time).
    fn evaluate(&mut self, audio_8k: &[i16]) -> Result<(f32, u32), String>;
}

/// Row (b), the smart mode: `voxline_media::turn_taking::TurnTaking` with
/// `TurnConfig::smart()` (a turn decided at a 200 ms pause on the words and the model,
/// up to 2.5 s; talk over the agent pauses it, then yields or resumes on its words), fed
/// the real VAD's decisions, the streaming words of [`heard_words`] as interim
/// transcripts, and the agent's question from the label as the expected answer.
pub struct SmartMode {
    config: voxline_media::turn_taking::TurnConfig,
    machine: voxline_media::turn_taking::TurnTaking,
    model: Option<Box<dyn TurnModel>>,
    /// A model answer on its way: when it arrives, for which request, what it says.
    pending: Option<(
        u32,
        voxline_media::turn_taking::AskId,
        voxline_media::turn_taking::ModelVerdict,
    )>,
    /// Words that belong to utterances already ended (or discarded).
    consumed: usize,
    /// Words of the current utterance given to the machine so far.
    fed: usize,
    previous_agent: Agent,
    /// Model evaluations, and what each cost (ms).
    pub evaluations: Vec<u32>,
}

impl SmartMode {
    /// The smart mode with `config`, asking `model` when it has one.
    pub fn new(
        config: voxline_media::turn_taking::TurnConfig,
        model: Option<Box<dyn TurnModel>>,
    ) -> Self {
        let machine = voxline_media::turn_taking::TurnTaking::new(config.clone(), model.is_some());
        Self {
            config,
            machine,
            model,
            pending: None,
            consumed: 0,
            fed: 0,
            previous_agent: Agent::Silent,
            evaluations: Vec::new(),
        }
    }

    fn apply(
        &mut self,
        produced: voxline_media::turn_taking::Actions,
        view: &FrameView<'_>,
        heard: usize,
        actions: &mut Vec<Action>,
    ) -> Result<(), String> {
        use voxline_media::turn_taking::{ModelVerdict, TurnAction};
        for action in produced {
            match action {
                TurnAction::SpeechStarted { .. } => {
                    self.fed = 0;
                }
                TurnAction::AskModel { ask } => {
                    let verdict = match self.model.as_mut() {
                        Some(model) => {
                            let (probability, cost_ms) = model.evaluate(view.history)?;
                            self.evaluations.push(cost_ms);
                            if std::env::var_os("VOXLINE_TURN_BENCH_CLIPS").is_some() {
                                println!(
                                    "  {} at {} ms: model {probability:.2} on {:?}",
                                    view.label.id,
                                    view.t_ms,
                                    self.machine.text()
                                );
                            }
                            (view.t_ms + cost_ms, ModelVerdict::Probability(probability))
                        }
                        None => (view.t_ms, ModelVerdict::Unavailable),
                    };
                    self.pending = Some((verdict.0, ask, verdict.1));
                }
                TurnAction::EndOfTurn { .. } => {
                    self.consumed = heard;
                    self.fed = 0;
                    self.pending = None;
                    actions.push(Action::EndOfTurn);
                }
                TurnAction::Discard { .. } => {
                    self.consumed = heard;
                    self.fed = 0;
                    self.pending = None;
                }
                // The simulated recognizer streams its words; nothing to transcribe.
                TurnAction::PeekWords { .. } => {}
                TurnAction::PauseAgent => actions.push(Action::PauseAgent),
                TurnAction::ResumeAgent => actions.push(Action::ResumeAgent),
                TurnAction::YieldTurn => {
                    // The driver stops the agent for good.
                    self.machine.agent_stopped();
                    actions.push(Action::YieldAgent);
                }
            }
        }
        Ok(())
    }

    fn step(&mut self, view: &FrameView<'_>, actions: &mut Vec<Action>) -> Result<(), String> {
        let heard = view.words.len();
        match (self.previous_agent, view.agent) {
            (Agent::Silent, Agent::Speaking) => {
                let produced = self.machine.agent_started();
                self.apply(produced, view, heard, actions)?;
            }
            (Agent::Speaking | Agent::Paused, Agent::Silent) => self.machine.agent_stopped(),
            _ => {}
        }
        self.previous_agent = view.agent;
        if let Some((due, ask, verdict)) = self.pending
            && due <= view.t_ms
        {
            self.pending = None;
            let produced = self.machine.model_verdict(ask, verdict);
            self.apply(produced, view, heard, actions)?;
        }
        let produced = self.machine.push_frame(view.is_speech);
        self.apply(produced, view, heard, actions)?;
        // Interim results: the utterance's words heard so far, whenever one more ends.
        let new_words = heard.saturating_sub(self.consumed);
        if self.machine.in_utterance() && new_words > self.fed {
            let text = transcript_text(view.label, &view.words[self.consumed..heard]);
            self.fed = new_words;
            let produced = self.machine.transcript(&text, false);
            self.apply(produced, view, heard, actions)?;
        }
        Ok(())
    }
}

impl Policy for SmartMode {
    fn start(&mut self, label: &Label) {
        use voxline_media::turn_taking::{AnswerKind, TurnTaking};
        self.machine = TurnTaking::new(self.config.clone(), self.model.is_some());
        if let Some(context) = &label.context {
            self.machine
                .expect_answer(AnswerKind::asked_by(&context.agent_asked));
        }
        self.pending = None;
        self.consumed = 0;
        self.fed = 0;
        self.previous_agent = Agent::Silent;
    }

    fn frame(&mut self, view: &FrameView<'_>, actions: &mut Vec<Action>) {
        if let Err(error) = self.step(view, actions) {
            // The model failed: the machine falls back to silence timing for this pause.
            eprintln!("turn_taking: {}: model: {error}", view.label.id);
        }
    }
}

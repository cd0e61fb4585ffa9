//! Turn-taking: when the caller's turn ends, and whether the caller's talk over the agent
//! interrupts it.
//!
//! [`TurnTaking`] is a pure state machine, driven one input at a time in audio time (no
//! clock, no tokio, no I/O, nothing allocated per frame), so the call loop runs it live and
//! the turn-taking benchmark runs it on recorded clips, frame by frame:
//!
//! - [`push_frame`](TurnTaking::push_frame): one 20 ms frame's VAD decision;
//! - [`agent_started`](TurnTaking::agent_started) / [`agent_stopped`](TurnTaking::agent_stopped):
//!   the agent's turn began (its audio may still be on its way) or ended;
//! - [`transcript`](TurnTaking::transcript): an interim or final transcript of the caller's
//!   current utterance;
//! - [`model_verdict`](TurnTaking::model_verdict): the end-of-turn model's answer to an
//!   [`AskModel`](TurnAction::AskModel), or that it could not answer (pool saturated);
//! - [`expect_answer`](TurnTaking::expect_answer): the kind of answer the agent's last line
//!   asked for ([`AnswerKind::asked_by`]).
//!
//! Each returns the [`Actions`] the caller of the machine carries out: the caller started
//! speaking, ask the model now, the turn ended (and why), pause the agent's audio, resume
//! it, yield the turn (a real interruption), or discard the utterance (noise, a backchannel).
//!
//! # End of turn
//!
//! [`TurnMode::Silence`] is the fixed rule: the turn ends after
//! [`silence_ms`](TurnConfig::silence_ms) of silence (600 ms), as the endpointer always did.
//!
//! [`TurnMode::Smart`] decides at a short pause ([`min_silence_ms`](TurnConfig::min_silence_ms),
//! about 200 ms), once per pause, on the words so far, then the model:
//! 1. the words say wait ([`TextCue::Wait`]: a trailing "and" or "um", "my number is", six
//!    digits of a phone number the agent asked for), or stop short of a sentence's end
//!    (words with no closing mark from a recognizer that punctuates: "I bought it") → wait,
//!    up to [`max_silence_ms`](TurnConfig::max_silence_ms), re-judged on every transcript;
//! 2. the words say complete ([`TextCue::Complete`]: ten digits of the asked phone number, a
//!    whole date) or end a sentence ([`TextCue::Likely`]) → the turn ends now;
//! 3. no words yet: the silence rule ([`silence_ms`](TurnConfig::silence_ms)), which the
//!    model, asked at the short pause ([`TurnAction::AskModel`]), can hold open: incomplete
//!    (probability below [`threshold`](TurnConfig::threshold)) → wait up to the maximum.
//!    It never ends a turn earlier: on the turn-taking corpus every early end it called
//!    was a cut-in or came no sooner than the words;
//! 4. a recognizer without interim results is asked for the words so far
//!    ([`TurnAction::PeekWords`]); while they are coming, the silence rule waits for them.
//!
//! Utterances shorter than [`min_speech_ms`](TurnConfig::min_speech_ms) (a cough, a click)
//! are never sent to the model: the silence rule discards them.
//!
//! # Talk over the agent
//!
//! [`InterruptionMode::Duration`] is the old rule: the agent yields after
//! [`duration_ms`](InterruptionConfig::duration_ms) of caller speech; shorter talk over it is
//! discarded as a backchannel.
//!
//! [`InterruptionMode::Words`]: the agent pauses as soon as the caller's speech starts (the
//! VAD's onset, [`start_speech_ms`](TurnConfig::start_speech_ms)), then
//! - yields when a word outside the [`Backchannels`] list arrives, when more than
//!   [`min_words`](InterruptionConfig::min_words) words do, or when the talk goes on past
//!   [`max_backchannel_ms`](InterruptionConfig::max_backchannel_ms) (a recognizer without
//!   interim results gives no words to judge);
//! - resumes where it paused when the caller went quiet after backchannels only, or after
//!   [`resume_after_ms`](InterruptionConfig::resume_after_ms) of quiet without any word
//!   (noise, a cough); the utterance is discarded, not a turn.

pub mod words;

pub use words::{AnswerKind, Backchannels, DEFAULT_BACKCHANNELS, TextCue, WordTally, text_cue};

use crate::endpoint::{EndpointEvent, EndpointState, Endpointer, EndpointerConfig};

/// Length of the frames [`TurnTaking::push_frame`] is fed, in ms.
pub const FRAME_MS: u32 = 20;

/// How the end of the caller's turn is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TurnMode {
    /// Words, the end-of-turn model and silence together (see the module docs).
    Smart,
    /// A fixed silence ends the turn.
    #[default]
    Silence,
}

/// How the caller's talk over the agent is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InterruptionMode {
    /// Pause at once; yield on words that are not a backchannel, resume otherwise.
    Words,
    /// Yield after a fixed length of speech.
    #[default]
    Duration,
}

/// Interruption rules.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptionConfig {
    /// Whether the caller can interrupt the agent at all.
    pub enabled: bool,
    /// Which rule applies.
    pub mode: InterruptionMode,
    /// Duration mode: speech over the agent that yields the turn (the agent's `interruptionMs`).
    pub duration_ms: u32,
    /// Words mode: more words than this yield the turn, even if all are backchannels.
    pub min_words: u32,
    /// Words mode: what the caller says that does not take the turn.
    pub backchannels: Backchannels,
    /// Words mode: quiet without any word after which the paused agent resumes.
    pub resume_after_ms: u32,
    /// Words mode: speech over the agent longer than this yields whatever its words.
    pub max_backchannel_ms: u32,
    /// Words mode: while the agent talks, silence inside a speech onset that still joins
    /// its parts (otherwise [`TurnConfig::start_speech_ms`]). A start there only pauses
    /// the agent, which resumes if no words come, and "Excuse me" opens with a 60 ms
    /// burst and a 250 ms closure that would otherwise delay the pause by 300 ms.
    pub onset_gap_ms: u32,
}

impl Default for InterruptionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: InterruptionMode::default(),
            duration_ms: 400,
            min_words: 3,
            backchannels: Backchannels::default(),
            resume_after_ms: 800,
            max_backchannel_ms: 1500,
            onset_gap_ms: 300,
        }
    }
}

/// Turn-taking rules, all durations in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnConfig {
    /// Which end-of-turn rule applies.
    pub mode: TurnMode,
    /// Speech needed before the caller counts as speaking (shorter blips are ignored).
    pub start_speech_ms: u32,
    /// Utterances shorter than this are discarded, never a turn.
    pub min_speech_ms: u32,
    /// The silence rule: this much silence ends the turn (silence mode, and smart mode's
    /// fallback).
    pub silence_ms: u32,
    /// Smart mode: the short pause at which the words and the model are asked.
    pub min_silence_ms: u32,
    /// Smart mode: the longest the machine waits on a pause it was told is not the end.
    pub max_silence_ms: u32,
    /// Smart mode: model probability at or above which the turn is complete.
    pub threshold: f32,
    /// Talk over the agent.
    pub interruption: InterruptionConfig,
}

impl Default for TurnConfig {
    /// Today's rules: the silence rule (600 ms) and the duration rule (400 ms).
    fn default() -> Self {
        let endpoint = EndpointerConfig::default();
        Self {
            mode: TurnMode::default(),
            start_speech_ms: endpoint.start_speech_ms,
            min_speech_ms: endpoint.min_speech_ms,
            silence_ms: endpoint.end_silence_ms,
            min_silence_ms: 200,
            max_silence_ms: 2500,
            threshold: 0.5,
            interruption: InterruptionConfig::default(),
        }
    }
}

impl TurnConfig {
    /// The smart rules (smart end of turn, interruptions judged on words), other values
    /// as the defaults.
    pub fn smart() -> Self {
        Self {
            mode: TurnMode::Smart,
            interruption: InterruptionConfig {
                mode: InterruptionMode::Words,
                ..InterruptionConfig::default()
            },
            ..Self::default()
        }
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The end-of-turn model said complete.
    Model,
    /// The words were a complete answer of the asked kind (or, without a model, ended
    /// like a sentence).
    Text,
    /// The silence rule (silence mode).
    Silence,
    /// The silence rule in smart mode: no model, or it could not answer in time.
    SilenceFallback,
    /// Smart mode waited as long as it may.
    MaxSilence,
}

impl EndReason {
    /// A stable lowercase name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Text => "text",
            Self::Silence => "silence",
            Self::SilenceFallback => "silence_fallback",
            Self::MaxSilence => "max_silence",
        }
    }
}

/// The end-of-turn model's answer to one [`TurnAction::AskModel`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ModelVerdict {
    /// Probability that the turn is complete, in `[0, 1]`.
    Probability(f32),
    /// The model could not be asked (its pool is saturated) or failed.
    Unavailable,
}

/// Which model request a verdict answers; verdicts for an earlier pause are ignored. The
/// machine numbers its requests; the number is public for replays and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AskId(pub u32);

/// What the machine asks its driver to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TurnAction {
    /// The caller started an utterance (after the VAD's onset).
    SpeechStarted {
        /// The agent was speaking.
        over_agent: bool,
    },
    /// Ask the end-of-turn model about the utterance's audio so far, and report its answer
    /// with [`TurnTaking::model_verdict`] and this id.
    AskModel {
        /// Echo it back with the verdict.
        ask: AskId,
    },
    /// The caller's turn is over: transcribe it and answer.
    EndOfTurn {
        /// Why now.
        reason: EndReason,
        /// Speech from its first to its last speech frame, pauses included.
        speech_ms: u32,
        /// Silence since the last speech frame (how long ago the caller stopped).
        silence_ms: u32,
    },
    /// Stop sending the agent's audio, keeping what is unsent and where it was.
    PauseAgent,
    /// Send the agent's audio again from where it paused.
    ResumeAgent,
    /// A real interruption: the agent's turn is over; stop it for good.
    YieldTurn,
    /// A pause the machine must judge, with no words heard since the caller last spoke: a
    /// recognizer without interim results should transcribe the utterance so far and report
    /// it with [`TurnTaking::transcript`] (not final). If it will, call
    /// [`TurnTaking::words_coming`], and the silence rule waits for those words. Once per
    /// pause; a streaming recognizer ignores it.
    PeekWords {
        /// The talk is over the agent and not yet judged: most likely a backchannel.
        over_agent: bool,
    },
    /// The utterance is not a turn: noise, or a backchannel over the agent.
    Discard {
        /// Its speech length.
        speech_ms: u32,
        /// It was talk over the agent (a backchannel), not a short noise on its own.
        backchannel: bool,
    },
}

/// The actions one input produced, in order (at most four; nothing allocated).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Actions {
    items: [Option<TurnAction>; 4],
}

impl Actions {
    fn push(&mut self, action: TurnAction) {
        if let Some(slot) = self.items.iter_mut().find(|slot| slot.is_none()) {
            *slot = Some(action);
        }
    }

    /// The actions, in order.
    pub fn iter(&self) -> impl Iterator<Item = TurnAction> + '_ {
        self.items.iter().map_while(|slot| *slot)
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.items[0].is_none()
    }

    /// Whether `wanted` is among the actions (compared by kind, ignoring their fields).
    pub fn contains(&self, wanted: &TurnAction) -> bool {
        self.iter()
            .any(|a| std::mem::discriminant(&a) == std::mem::discriminant(wanted))
    }
}

impl IntoIterator for Actions {
    type Item = TurnAction;
    type IntoIter = std::iter::MapWhile<
        std::array::IntoIter<Option<TurnAction>, 4>,
        fn(Option<TurnAction>) -> Option<TurnAction>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.items
            .into_iter()
            .map_while(std::convert::identity as fn(_) -> _)
    }
}

/// The model's side of the current pause.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Asked {
    /// Not asked in this pause.
    No,
    /// Asked; no answer yet.
    Waiting(AskId),
    /// Answered.
    Answered(ModelVerdict),
}

/// The caller's utterance in progress (after its onset).
#[derive(Debug, Clone, Copy)]
struct Utterance {
    /// The agent was speaking when it began (or began while it went on).
    over_agent: bool,
    /// It interrupted the agent for good (after that it is an ordinary turn).
    yielded: bool,
    /// The model's side of the current pause.
    asked: Asked,
    /// [`TurnAction::PeekWords`] was sent in the current pause.
    peeked: bool,
    /// The recognizer will transcribe the utterance so far: the silence rule waits for it.
    words_coming: bool,
}

/// What the words of the utterance so far say, judged once per transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Words {
    cue: TextCue,
    tally: WordTally,
}

impl Words {
    const NONE: Self = Self {
        cue: TextCue::Unknown,
        tally: WordTally {
            words: 0,
            outside: false,
        },
    };
}

/// One call's turn-taking state machine; see the module docs.
#[derive(Debug, Clone)]
pub struct TurnTaking {
    config: TurnConfig,
    endpointer: Endpointer,
    /// An end-of-turn model can be asked.
    model: bool,
    agent_speaking: bool,
    agent_paused: bool,
    utterance: Option<Utterance>,
    answer: AnswerKind,
    /// Settled transcript text of the utterance.
    finals: String,
    /// The latest interim hypothesis after the settled text.
    interim: String,
    /// `finals` and `interim` joined, reused for judging.
    joined: String,
    words: Words,
    next_ask: u32,
}

impl TurnTaking {
    /// A machine with `config`; `model` says whether an end-of-turn model can be asked.
    pub fn new(config: TurnConfig, model: bool) -> Self {
        let endpointer = Endpointer::new(EndpointerConfig {
            start_speech_ms: config.start_speech_ms,
            min_speech_ms: config.min_speech_ms,
            // The machine ends utterances itself; the endpointer only finds their onset
            // and counts speech and silence.
            end_silence_ms: u32::MAX,
            onset_gap_ms: config.start_speech_ms,
        });
        Self {
            config,
            endpointer,
            model,
            agent_speaking: false,
            agent_paused: false,
            utterance: None,
            answer: AnswerKind::Free,
            finals: String::with_capacity(256),
            interim: String::with_capacity(256),
            joined: String::with_capacity(512),
            words: Words::NONE,
            next_ask: 0,
        }
    }

    /// The rules in force.
    pub fn config(&self) -> &TurnConfig {
        &self.config
    }

    /// Whether an utterance is in progress (after its onset, before it ended).
    pub fn in_utterance(&self) -> bool {
        self.utterance.is_some()
    }

    /// Whether the machine has the agent paused.
    pub fn agent_paused(&self) -> bool {
        self.agent_paused
    }

    /// Whether the agent is speaking, as last reported.
    pub fn agent_speaking(&self) -> bool {
        self.agent_speaking
    }

    /// The kind of answer expected, as last set.
    pub fn expected_answer(&self) -> AnswerKind {
        self.answer
    }

    /// The utterance's words so far (settled text, then the latest interim).
    pub fn text(&self) -> &str {
        &self.joined
    }

    /// What the utterance's words so far say about its end.
    pub fn text_cue(&self) -> TextCue {
        self.words.cue
    }

    /// Speech and silence of the utterance in progress, in ms.
    pub fn timing(&self) -> Option<(u32, u32)> {
        match self.endpointer.state() {
            EndpointState::Speaking {
                speech_ms,
                silence_ms,
            } if self.utterance.is_some() => Some((speech_ms, silence_ms)),
            _ => None,
        }
    }

    /// The agent's last line asked for `kind` of answer (see [`AnswerKind::asked_by`]).
    pub fn expect_answer(&mut self, kind: AnswerKind) {
        self.answer = kind;
        self.rejudge_words();
    }

    /// Whether the end-of-turn model can be asked (it can be installed or lost mid-call).
    pub fn set_model_available(&mut self, available: bool) {
        self.model = available;
    }

    /// The agent's turn began (a reply, the greeting). In words mode, talk already in
    /// progress counts as talk over it from now on (the agent pauses until it is judged).
    pub fn agent_started(&mut self) -> Actions {
        let mut actions = Actions::default();
        self.agent_speaking = true;
        self.agent_paused = false;
        if self.words_mode() {
            self.endpointer
                .set_onset_gap_ms(self.config.interruption.onset_gap_ms);
        }
        // The old rules judge talk by how it began; the words judge it whenever it is.
        if self.words_mode()
            && let Some(utterance) = self.utterance.as_mut()
            && !utterance.yielded
        {
            utterance.over_agent = true;
            self.agent_paused = true;
            actions.push(TurnAction::PauseAgent);
            self.check_words(&mut actions);
        }
        actions
    }

    /// The agent's turn ended (heard to its end, or stopped).
    pub fn agent_stopped(&mut self) {
        self.agent_speaking = false;
        self.agent_paused = false;
        self.endpointer
            .set_onset_gap_ms(self.config.start_speech_ms);
    }

    /// Forgets the utterance in progress and any pause (the call moved on without it).
    pub fn reset(&mut self) {
        self.endpointer.reset();
        self.end_utterance();
        self.agent_paused = false;
    }

    /// Advances by one [`FRAME_MS`] frame with its VAD decision.
    pub fn push_frame(&mut self, is_speech: bool) -> Actions {
        let mut actions = Actions::default();
        if let Some(EndpointEvent::SpeechStart) = self.endpointer.push(is_speech, FRAME_MS) {
            self.start_utterance(&mut actions);
        }
        let Some((speech_ms, silence_ms)) = self.timing() else {
            return actions;
        };
        if silence_ms == 0 {
            // Speech again: the next pause is a new one, asked anew.
            if let Some(utterance) = self.utterance.as_mut() {
                utterance.asked = Asked::No;
                utterance.peeked = false;
            }
        }
        self.check_interruption(speech_ms, &mut actions);
        if silence_ms > 0 {
            self.decide(&mut actions);
        }
        actions
    }

    /// A transcript of the current utterance: `is_final` text is settled and kept, an interim
    /// replaces the previous interim. Ignored between utterances.
    pub fn transcript(&mut self, text: &str, is_final: bool) -> Actions {
        let mut actions = Actions::default();
        let Some(utterance) = self.utterance.as_mut() else {
            return actions;
        };
        utterance.words_coming = false;
        if is_final {
            if !self.finals.is_empty() {
                self.finals.push(' ');
            }
            self.finals.push_str(text.trim());
            self.interim.clear();
        } else {
            self.interim.clear();
            self.interim.push_str(text.trim());
        }
        self.rejudge_words();
        self.check_words(&mut actions);
        if self.timing().is_some_and(|(_, silence)| silence > 0) {
            self.decide(&mut actions);
        }
        actions
    }

    /// The recognizer answers the [`TurnAction::PeekWords`] just sent: until its transcript
    /// arrives (or the longest pause passes), no silence rule ends or discards the utterance.
    pub fn words_coming(&mut self) {
        if let Some(utterance) = self.utterance.as_mut() {
            utterance.words_coming = true;
        }
    }

    /// The model's answer to the [`TurnAction::AskModel`] with `ask`.
    pub fn model_verdict(&mut self, ask: AskId, verdict: ModelVerdict) -> Actions {
        let mut actions = Actions::default();
        let Some(utterance) = self.utterance.as_mut() else {
            return actions;
        };
        if utterance.asked != Asked::Waiting(ask) {
            // An answer about an earlier pause: the caller has spoken since.
            return actions;
        }
        utterance.asked = Asked::Answered(verdict);
        self.decide(&mut actions);
        actions
    }

    fn words_mode(&self) -> bool {
        self.config.interruption.enabled && self.config.interruption.mode == InterruptionMode::Words
    }

    fn start_utterance(&mut self, actions: &mut Actions) {
        let over_agent = self.agent_speaking;
        self.utterance = Some(Utterance {
            over_agent,
            yielded: false,
            asked: Asked::No,
            peeked: false,
            words_coming: false,
        });
        self.clear_words();
        actions.push(TurnAction::SpeechStarted { over_agent });
        if over_agent && self.words_mode() && !self.agent_paused {
            self.agent_paused = true;
            actions.push(TurnAction::PauseAgent);
        }
    }

    fn clear_words(&mut self) {
        self.finals.clear();
        self.interim.clear();
        self.joined.clear();
        self.words = Words::NONE;
    }

    fn end_utterance(&mut self) {
        self.utterance = None;
        self.clear_words();
    }

    /// Re-reads the utterance's words after a transcript or a new expected answer.
    fn rejudge_words(&mut self) {
        self.joined.clear();
        self.joined.push_str(&self.finals);
        if !self.interim.is_empty() {
            if !self.joined.is_empty() {
                self.joined.push(' ');
            }
            self.joined.push_str(&self.interim);
        }
        self.words = Words {
            cue: text_cue(&self.joined, self.answer),
            tally: self.config.interruption.backchannels.tally(&self.joined),
        };
    }

    /// Talk over the agent that has not interrupted it yet.
    fn pending_interruption(&self) -> bool {
        self.agent_speaking
            && self.config.interruption.enabled
            && self.utterance.is_some_and(|u| u.over_agent && !u.yielded)
    }

    /// Words mode: the words so far make the talk over the agent a real interruption.
    fn check_words(&mut self, actions: &mut Actions) {
        if !self.words_mode() || !self.pending_interruption() {
            return;
        }
        let tally = self.words.tally;
        if tally.outside || tally.words > self.config.interruption.min_words {
            self.yield_turn(actions);
        }
    }

    /// The length of the talk over the agent makes it an interruption.
    fn check_interruption(&mut self, speech_ms: u32, actions: &mut Actions) {
        let interruption = &self.config.interruption;
        let limit = match interruption.mode {
            InterruptionMode::Duration => interruption.duration_ms,
            InterruptionMode::Words => interruption.max_backchannel_ms,
        };
        // Any speech while the agent talks counts, also an utterance that began before it.
        let talking_over = self.agent_speaking
            && interruption.enabled
            && self.utterance.is_some_and(|u| !u.yielded);
        if talking_over && speech_ms >= limit {
            self.yield_turn(actions);
        }
    }

    fn yield_turn(&mut self, actions: &mut Actions) {
        if let Some(utterance) = self.utterance.as_mut() {
            utterance.yielded = true;
        }
        self.agent_paused = false;
        actions.push(TurnAction::YieldTurn);
    }

    /// In a pause: whether the utterance ends now, and how; and, if it goes on and its words
    /// will judge it, a request for them.
    fn decide(&mut self, actions: &mut Actions) {
        self.judge_pause(actions);
        let Some((_, silence_ms)) = self.timing() else {
            return;
        };
        let words_mode = self.words_mode();
        let Some(utterance) = self.utterance.as_mut() else {
            return;
        };
        let over_agent_pending = utterance.over_agent && !utterance.yielded;
        let judged_on_words =
            self.config.mode == TurnMode::Smart || (over_agent_pending && words_mode);
        if judged_on_words && !utterance.peeked && silence_ms >= self.config.min_silence_ms {
            utterance.peeked = true;
            actions.push(TurnAction::PeekWords {
                over_agent: over_agent_pending,
            });
        }
    }

    /// In a pause: whether the utterance ends now, and how.
    fn judge_pause(&mut self, actions: &mut Actions) {
        let Some((speech_ms, silence_ms)) = self.timing() else {
            return;
        };
        let Some(utterance) = self.utterance else {
            return;
        };
        let over_agent_pending = utterance.over_agent && !utterance.yielded;
        // Words on their way hold the silence rules, up to the longest pause.
        let words_awaited = utterance.words_coming && silence_ms < self.config.max_silence_ms;
        let config = &self.config;
        if over_agent_pending {
            // Talk over the agent that did not interrupt it: never a turn while the agent
            // still talks; once it is done, a turn if long enough (the old rule).
            let tally = self.words.tally;
            let backchannel = if self.words_mode() && tally.words > 0 {
                // Words that would have yielded, had the agent still been talking, make a
                // turn of it.
                !tally.outside && tally.words <= config.interruption.min_words
            } else {
                self.agent_speaking || speech_ms < config.interruption.duration_ms
            };
            if backchannel {
                let quiet_enough = if self.words_mode() {
                    (tally.words > 0 && !tally.outside && silence_ms >= config.min_silence_ms)
                        || (silence_ms >= config.interruption.resume_after_ms && !words_awaited)
                } else {
                    silence_ms >= config.silence_ms
                };
                if quiet_enough {
                    self.discard(speech_ms, true, actions);
                }
                return;
            }
        }
        let reason = match config.mode {
            TurnMode::Silence => (silence_ms >= config.silence_ms).then_some(EndReason::Silence),
            TurnMode::Smart if speech_ms < config.min_speech_ms => {
                // Too short to be an answer: not worth the model's time.
                (silence_ms >= config.silence_ms).then_some(EndReason::SilenceFallback)
            }
            TurnMode::Smart => {
                self.smart_decision(silence_ms, utterance.asked, words_awaited, actions)
            }
        };
        let Some(reason) = reason else {
            return;
        };
        if speech_ms < self.config.min_speech_ms {
            self.discard(speech_ms, false, actions);
        } else {
            self.endpointer.reset();
            self.end_utterance();
            actions.push(TurnAction::EndOfTurn {
                reason,
                speech_ms,
                silence_ms,
            });
        }
    }

    /// Smart mode at `silence_ms` into a pause: the reason to end now, if any; asks the
    /// model when the words leave it open.
    fn smart_decision(
        &mut self,
        silence_ms: u32,
        asked: Asked,
        words_awaited: bool,
        actions: &mut Actions,
    ) -> Option<EndReason> {
        let config = &self.config;
        if silence_ms < config.min_silence_ms {
            return None;
        }
        if silence_ms >= config.max_silence_ms {
            return Some(EndReason::MaxSilence);
        }
        let fallback = (silence_ms >= config.silence_ms).then_some(EndReason::SilenceFallback);
        match self.words.cue {
            // The recognizer is transcribing the utterance so far: its words decide.
            _ if words_awaited => None,
            TextCue::Wait => None,
            TextCue::Complete => Some(EndReason::Text),
            // Words that stop short of a sentence's end ("I bought it", "My son"), from a
            // recognizer that punctuates: an unfinished clause, whatever the audio says
            // (the model calls most of them complete).
            TextCue::Unknown if self.words.tally.words > 0 => None,
            // A sentence's end: the model was asked on the corpus and only delayed true
            // ends (it hears a flat voice as unfinished), so the words decide.
            TextCue::Likely => Some(EndReason::Text),
            // No words yet (a recognizer behind, or none that streams): the silence rule,
            // which the model can only hold open. Asked at the short pause, an answer of
            // "incomplete" keeps the turn open up to the longest pause; on the corpus, the
            // model ending turns earlier than the silence rule cut in on mid-word gaps.
            TextCue::Unknown if !self.model => fallback,
            TextCue::Unknown => match asked {
                Asked::No => {
                    let ask = AskId(self.next_ask);
                    self.next_ask = self.next_ask.wrapping_add(1);
                    if let Some(utterance) = self.utterance.as_mut() {
                        utterance.asked = Asked::Waiting(ask);
                    }
                    actions.push(TurnAction::AskModel { ask });
                    fallback
                }
                Asked::Answered(ModelVerdict::Probability(p)) if p < config.threshold => None,
                Asked::Answered(ModelVerdict::Probability(_)) => fallback.map(|_| EndReason::Model),
                // A model slower than the silence rule is not waited for.
                Asked::Waiting(_) | Asked::Answered(ModelVerdict::Unavailable) => fallback,
            },
        }
    }

    fn discard(&mut self, speech_ms: u32, backchannel: bool, actions: &mut Actions) {
        self.endpointer.reset();
        self.end_utterance();
        if self.agent_paused {
            self.agent_paused = false;
            actions.push(TurnAction::ResumeAgent);
        }
        actions.push(TurnAction::Discard {
            speech_ms,
            backchannel,
        });
    }
}

#[cfg(test)]
mod tests;

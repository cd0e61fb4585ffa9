//! The simulated providers (decisions §11): deterministic, local, with configurable latencies,
//! so the whole service runs on one machine and load tests measure the engine, not a vendor.
//!
//! Every delay is a `tokio::time` deadline kept in the stream, so the `next_*` methods stay
//! cancel-safe and tests can run on a paused clock.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep_until};
use voxline_media::synth::{SpeechLikeGenerator, samples_for_duration, speech_duration_for_text};

use super::analysis::{AnalysisRequest, sim_analysis};
use super::scorecard::{ScorecardRequest, sim_scorecard};
use super::sim_lines::{LineTiming, spoken_text, turn_lines};
use super::sim_tools::{SimToolTurn, sim_tool_turn};
use super::{
    AsrContext, AsrEvent, AsrProvider, AsrStream, ChatRole, END_CALL_TOOL, LlmEvent, LlmProvider,
    LlmRequest, LlmStream, LlmUsage, ProviderError, ProviderKind, TtsProvider, TtsStream,
};

/// Makes one sim provider fail, for tests of the failure paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimFailure {
    /// The provider that fails.
    pub provider: ProviderKind,
    /// Uses that succeed before every later one fails (ASR: utterances, LLM: turns,
    /// TTS: syntheses), counted per provider instance.
    pub after_uses: u32,
}

/// Latencies and fault injection shared by the three sim providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// From the end of an utterance (`finalize`) to its final transcript.
    pub asr_latency: Duration,
    /// From an LLM request to its first token.
    pub llm_first_token: Duration,
    /// Between later tokens.
    pub llm_token_interval: Duration,
    /// From a TTS request to its first audio.
    pub tts_first_byte: Duration,
    /// Length of each TTS audio chunk.
    pub tts_chunk: Duration,
    /// A provider told to fail, if any.
    pub fail: Option<SimFailure>,
    /// The sim ASR streams interim transcripts as the caller speaks (a streaming
    /// recognizer); off, it sends only each utterance's final, as a recognizer without
    /// interim results does, and the turn is judged on the audio alone.
    pub interim_results: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            asr_latency: Duration::from_millis(150),
            llm_first_token: Duration::from_millis(300),
            llm_token_interval: Duration::from_millis(25),
            tts_first_byte: Duration::from_millis(120),
            tts_chunk: Duration::from_millis(200),
            fail: None,
            interim_results: true,
        }
    }
}

/// Counts uses of one provider and decides when an injected failure starts.
#[derive(Debug)]
struct UseCounter {
    kind: ProviderKind,
    fail: Option<SimFailure>,
    uses: AtomicU32,
}

impl UseCounter {
    fn new(kind: ProviderKind, fail: Option<SimFailure>) -> Self {
        Self {
            kind,
            fail,
            uses: AtomicU32::new(0),
        }
    }

    /// Counts one use; true when this use must fail.
    fn use_fails(&self) -> bool {
        let previous = self.uses.fetch_add(1, Ordering::Relaxed);
        self.fail
            .is_some_and(|fail| fail.provider == self.kind && previous >= fail.after_uses)
    }

    fn injected(&self) -> ProviderError {
        ProviderError::Injected {
            provider: self.kind,
        }
    }
}

/// Sim ASR: the loop's VAD and turn-taking find the utterances; each one's text is the next
/// line of the call's script (its words, see [`sim_lines`](super::sim_lines)).
///
/// It streams as a real one does: while the caller's audio arrives it sends interim
/// transcripts of the line's words in proportion to the speech heard so far (by the line's
/// [`LineTiming`], the pace the sim callee speaks at, whatever the audio is), then the whole
/// line as the final, `asr_latency` after `finalize`. A line the loop discards (a
/// backchannel over the agent) is skipped.
#[derive(Debug)]
pub struct SimAsr {
    latency: Duration,
    counter: Arc<UseCounter>,
    interim_results: bool,
}

impl SimAsr {
    /// A sim ASR with `config`'s latency and fault.
    pub fn new(config: SimConfig) -> Self {
        Self {
            latency: config.asr_latency,
            counter: Arc::new(UseCounter::new(ProviderKind::Asr, config.fail)),
            interim_results: config.interim_results,
        }
    }
}

#[async_trait]
impl AsrProvider for SimAsr {
    async fn open(&self, context: AsrContext) -> Result<Box<dyn AsrStream>, ProviderError> {
        let mut stream = SimAsrStream {
            script: context.sim_script,
            next_line: 0,
            latency: self.latency,
            counter: Arc::clone(&self.counter),
            pending: VecDeque::new(),
            closed: false,
            timing: None,
            hearing: Hearing::default(),
            interim_results: self.interim_results,
        };
        stream.start_line();
        Ok(Box::new(stream))
    }
}

/// Caller audio quieter than this (RMS of a frame) is not speech to the sim ASR.
const SIM_SPEECH_RMS: f64 = 200.0;
/// A gap in the speech shorter than this is part of it (between syllables and words); a
/// longer one is a pause, not counted as speech.
const SIM_GAP_MS: u32 = 300;
/// Quiet after which the speech of a part that has nearly all been heard counts as said
/// whole (the generated speech fades out before its nominal end).
const SIM_PART_END_QUIET_MS: u32 = 100;
/// How near its end a part must be for that quiet to complete it.
const SIM_PART_END_SLACK_MS: u32 = 300;

/// How much of the current line the sim ASR has heard.
#[derive(Debug, Default, Clone, Copy)]
struct Hearing {
    /// Speech heard, in ms (with the short gaps inside it).
    speech_ms: u32,
    /// Quiet since the last loud frame, in ms.
    gap_ms: u32,
    /// Words sent in interims.
    words_sent: usize,
}

/// One sim recognition session.
struct SimAsrStream {
    script: Arc<[String]>,
    next_line: usize,
    latency: Duration,
    counter: Arc<UseCounter>,
    /// Events with the time they become due, in order.
    pending: VecDeque<(Instant, Result<AsrEvent, ProviderError>)>,
    closed: bool,
    /// When the current line's words are said.
    timing: Option<LineTiming>,
    hearing: Hearing,
    /// Interim transcripts are sent (see [`SimConfig::interim_results`]).
    interim_results: bool,
}

impl SimAsrStream {
    /// Starts listening for the current line.
    fn start_line(&mut self) {
        self.timing = self
            .script
            .get(self.next_line)
            .map(|line| LineTiming::of(line));
        self.hearing = Hearing::default();
    }

    /// One frame of `ms` of the caller: counts its speech, sends the words it completed.
    fn hear(&mut self, loud: bool, ms: u32) {
        let Some(timing) = self.timing.as_ref() else {
            return;
        };
        let hearing = &mut self.hearing;
        if loud {
            if hearing.gap_ms < SIM_GAP_MS && hearing.speech_ms > 0 {
                hearing.speech_ms += hearing.gap_ms;
            }
            hearing.speech_ms += ms;
            hearing.gap_ms = 0;
        } else if hearing.speech_ms > 0 {
            let before = hearing.gap_ms;
            hearing.gap_ms = hearing.gap_ms.saturating_add(ms);
            if before < SIM_PART_END_QUIET_MS && hearing.gap_ms >= SIM_PART_END_QUIET_MS {
                // The part being said, if it was nearly over, is over.
                if let Some(&end) = timing
                    .part_ends
                    .iter()
                    .find(|&&end| end >= hearing.speech_ms)
                    && end - hearing.speech_ms <= SIM_PART_END_SLACK_MS
                {
                    hearing.speech_ms = end;
                }
            }
        }
        let heard = timing.words_heard(hearing.speech_ms);
        if heard > hearing.words_sent {
            hearing.words_sent = heard;
            if !self.interim_results {
                return;
            }
            let text = timing.first_words(heard).to_owned();
            self.pending
                .push_back((Instant::now(), Ok(AsrEvent::Interim(text))));
        }
    }
}

#[async_trait]
impl AsrStream for SimAsrStream {
    fn push_audio(&mut self, samples: &[i16], sample_rate: u32) -> Result<(), ProviderError> {
        // The text comes from the script; the audio only says how much of it was said.
        if samples.is_empty() || sample_rate == 0 {
            return Ok(());
        }
        let energy: f64 = samples.iter().map(|&s| f64::from(s).powi(2)).sum();
        let loud = (energy / samples.len() as f64).sqrt() > SIM_SPEECH_RMS;
        let ms = u32::try_from(samples.len() as u64 * 1000 / u64::from(sample_rate)).unwrap_or(0);
        self.hear(loud, ms);
        Ok(())
    }

    fn finalize(&mut self) -> Result<(), ProviderError> {
        let due = Instant::now() + self.latency;
        if self.counter.use_fails() {
            self.pending.push_back((due, Err(self.counter.injected())));
            return Ok(());
        }
        let line = self
            .script
            .get(self.next_line)
            .map(|line| spoken_text(line))
            .unwrap_or_default();
        self.next_line += 1;
        self.start_line();
        if !line.trim().is_empty() {
            self.pending
                .push_back((due, Ok(AsrEvent::Final { text: line })));
        }
        self.pending.push_back((due, Ok(AsrEvent::UtteranceEnd)));
        Ok(())
    }

    fn discard(&mut self) -> Result<(), ProviderError> {
        // The line that was being said was not a turn: the next utterance is the next line.
        if self.hearing.words_sent > 0 {
            self.next_line += 1;
            self.start_line();
        } else {
            self.hearing = Hearing::default();
        }
        Ok(())
    }

    async fn next_event(&mut self) -> Option<Result<AsrEvent, ProviderError>> {
        let Some(&(due, _)) = self.pending.front() else {
            if self.closed {
                return None;
            }
            // Nothing until the loop finalizes an utterance, which it does between polls.
            return std::future::pending().await;
        };
        sleep_until(due).await;
        self.pending.pop_front().map(|(_, event)| event)
    }

    async fn close(&mut self) -> Result<(), ProviderError> {
        self.closed = true;
        self.pending.clear();
        Ok(())
    }
}

/// Sim LLM: a deterministic responder that streams its reply word by word, asks the agent's
/// analysis questions one per turn ([`SimLlm::reply_for`]), and calls `end_call` when the
/// caller says goodbye, the questions are answered or the script is exhausted.
#[derive(Debug)]
pub struct SimLlm {
    first_token: Duration,
    token_interval: Duration,
    counter: UseCounter,
}

impl SimLlm {
    /// A sim LLM with `config`'s timings and fault.
    pub fn new(config: SimConfig) -> Self {
        Self {
            first_token: config.llm_first_token,
            token_interval: config.llm_token_interval,
            counter: UseCounter::new(ProviderKind::Llm, config.fail),
        }
    }

    /// The JSON answer to a JSON-mode request: scores for a scorecard request in the last
    /// user message, the analysis of an analysis request, `{}` for anything else (as a model
    /// with nothing to say would answer).
    pub fn json_reply_for(request: &LlmRequest) -> String {
        let Some(last) = request
            .history
            .iter()
            .rev()
            .find(|m| m.role == ChatRole::User)
        else {
            return "{}".to_owned();
        };
        if let Ok(card) = serde_json::from_str::<ScorecardRequest>(&last.content) {
            return serde_json::to_string(&sim_scorecard(&card)).unwrap_or_else(|_| "{}".into());
        }
        if let Ok(analysis) = serde_json::from_str::<AnalysisRequest>(&last.content) {
            return serde_json::to_string(&sim_analysis(&analysis)).unwrap_or_else(|_| "{}".into());
        }
        "{}".to_owned()
    }

    /// The reply to the conversation so far, and whether to hang up after it.
    ///
    /// In order of precedence:
    /// - the caller said goodbye: [`SIM_GOODBYE`], and hang up;
    /// - the script is exhausted (the caller's last line was just said): [`SIM_CLOSE`], and
    ///   hang up;
    /// - the caller's turn was empty: [`SIM_STILL_THERE`];
    /// - the agent has questions ([`LlmRequest::sim_questions`]): it asks them one per turn, in
    ///   order. The engine speaks the welcome before the caller's first line, so that line
    ///   answers the greeting: the reply to user turn `n` is an acknowledgement and question
    ///   `n` (1-based), and the reply to the answer of the last question is [`SIM_CLOSE`], with
    ///   a hang-up. Turns are counted on the user's side, not by the questions the caller heard,
    ///   so a script keeps its alignment (line `n + 1` answers question `n`) even when a reply
    ///   was cut by barge-in;
    /// - otherwise an acknowledgement that asks whether there is anything else
    ///   ([`SIM_ANYTHING_ELSE`], or [`SIM_NOTED_QUESTION`] after a question).
    ///
    /// The reply never repeats what the caller said, and depends only on the request.
    pub fn reply_for(request: &LlmRequest) -> (String, bool) {
        let user_turns = request
            .history
            .iter()
            .filter(|m| m.role == ChatRole::User)
            .count();
        let last = request
            .history
            .iter()
            .rev()
            .find(|m| m.role == ChatRole::User)
            .map(|m| m.content.trim())
            .unwrap_or_default();
        let says_goodbye = last
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| word.eq_ignore_ascii_case("bye") || word.eq_ignore_ascii_case("goodbye"));
        let script_done =
            !request.sim_script.is_empty() && user_turns >= turn_lines(&request.sim_script);
        if says_goodbye {
            (SIM_GOODBYE.to_owned(), true)
        } else if script_done {
            (SIM_CLOSE.to_owned(), true)
        } else if last.is_empty() {
            (SIM_STILL_THERE.to_owned(), false)
        } else if !request.sim_questions.is_empty() {
            match user_turns
                .checked_sub(1)
                .and_then(|at| request.sim_questions.get(at))
            {
                Some(question) => {
                    let ack = SIM_ACKNOWLEDGEMENTS[(user_turns - 1) % SIM_ACKNOWLEDGEMENTS.len()];
                    (format!("{ack} {}", question.trim()), false)
                }
                None => (SIM_CLOSE.to_owned(), true),
            }
        } else if last.ends_with('?') {
            (SIM_NOTED_QUESTION.to_owned(), false)
        } else {
            (SIM_ANYTHING_ELSE.to_owned(), false)
        }
    }
}

/// The sim agent's reply when the caller says goodbye (it hangs up after it).
pub const SIM_GOODBYE: &str = "Thank you for your time. Goodbye!";

/// The sim agent's closing line when its questions are answered or the script is exhausted
/// (it hangs up after it).
pub const SIM_CLOSE: &str = "Thank you, that is everything I needed. Have a great day. Goodbye!";

/// The sim agent's reply to an empty caller turn.
pub const SIM_STILL_THERE: &str = "Hello, are you still there?";

/// The sim agent's reply to a caller's question when it has no questions of its own.
pub const SIM_NOTED_QUESTION: &str =
    "Let me note that down for the team. Is there anything else I can help you with?";

/// The sim agent's reply to anything else the caller says when it has no questions of its own.
pub const SIM_ANYTHING_ELSE: &str =
    "Thank you for letting me know. Is there anything else I can help you with?";

/// What the sim agent says before each question, in turn (the reply to user turn `n` starts
/// with entry `(n - 1) % 4`).
pub const SIM_ACKNOWLEDGEMENTS: [&str; 4] = [
    "Thank you.",
    "Got it, thanks.",
    "Understood.",
    "Okay, noted.",
];

#[async_trait]
impl LlmProvider for SimLlm {
    async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        let first_at = Instant::now() + self.first_token;
        let mut events = VecDeque::new();
        if self.counter.use_fails() {
            events.push_back(Err(self.counter.injected()));
        } else {
            let user_turns = request
                .history
                .iter()
                .filter(|m| m.role == ChatRole::User)
                .count();
            let script_done =
                !request.sim_script.is_empty() && user_turns >= turn_lines(&request.sim_script);
            let tool_turn = (!request.response_format.is_json())
                .then(|| sim_tool_turn(&request, script_done))
                .flatten();
            let (reply, end_call) = match tool_turn {
                _ if request.response_format.is_json() => (Self::json_reply_for(&request), false),
                Some(SimToolTurn::Call(call)) => {
                    events.push_back(Ok(LlmEvent::ToolCall {
                        id: call.id,
                        name: call.name,
                        arguments_json: call.arguments_json,
                    }));
                    (String::new(), false)
                }
                Some(SimToolTurn::Say(text, false)) => (text, false),
                Some(SimToolTurn::Say(text, true)) => {
                    (format!("{text} {SIM_CLOSE}").trim_start().to_owned(), true)
                }
                None => Self::reply_for(&request),
            };
            for word in reply.split_inclusive(' ') {
                events.push_back(Ok(LlmEvent::Token(word.to_owned())));
            }
            if end_call {
                events.push_back(Ok(LlmEvent::ToolCall {
                    id: "sim_end_call".to_owned(),
                    name: END_CALL_TOOL.to_owned(),
                    arguments_json: "{}".to_owned(),
                }));
            }
            let prompt_words = request.system_prompt.split_whitespace().count()
                + request
                    .history
                    .iter()
                    .map(|m| m.content.split_whitespace().count())
                    .sum::<usize>();
            events.push_back(Ok(LlmEvent::Done {
                usage: LlmUsage {
                    prompt_tokens: u32::try_from(prompt_words).unwrap_or(u32::MAX),
                    completion_tokens: u32::try_from(reply.split_whitespace().count())
                        .unwrap_or(u32::MAX),
                },
            }));
        }
        Ok(Box::new(SimLlmStream {
            events,
            next_at: first_at,
            interval: self.token_interval,
        }))
    }
}

/// One sim LLM turn: events released one per `interval` after the first-token delay.
struct SimLlmStream {
    events: VecDeque<Result<LlmEvent, ProviderError>>,
    next_at: Instant,
    interval: Duration,
}

#[async_trait]
impl LlmStream for SimLlmStream {
    async fn next_event(&mut self) -> Option<Result<LlmEvent, ProviderError>> {
        if self.events.is_empty() {
            return None;
        }
        sleep_until(self.next_at).await;
        let event = self.events.pop_front()?;
        // Tool calls and `Done` follow the last token at once, as vendors send them.
        if matches!(self.events.front(), Some(Ok(LlmEvent::Token(_)))) {
            self.next_at += self.interval;
        }
        Some(event)
    }
}

/// Sim TTS: speech-like audio as long as the text takes to say, after a first-byte delay,
/// streamed in chunks.
#[derive(Debug)]
pub struct SimTts {
    first_byte: Duration,
    chunk: Duration,
    counter: UseCounter,
}

impl SimTts {
    /// A sim TTS with `config`'s timings and fault.
    pub fn new(config: SimConfig) -> Self {
        Self {
            first_byte: config.tts_first_byte,
            chunk: config.tts_chunk.max(Duration::from_millis(20)),
            counter: UseCounter::new(ProviderKind::Tts, config.fail),
        }
    }
}

/// FNV-1a, so a voice and text always give the same audio.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[async_trait]
impl TtsProvider for SimTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        if sample_rate == 0 {
            return Err(ProviderError::Request {
                provider: ProviderKind::Tts,
                message: "sample rate 0".to_owned(),
            });
        }
        let fails = self.counter.use_fails();
        Ok(Box::new(SimTtsStream {
            sample_rate,
            audio: rendered_speech(text, voice, sample_rate),
            sent: 0,
            chunk_samples: samples_for_duration(sample_rate, self.chunk).max(1),
            first_at: Some(Instant::now() + self.first_byte),
            fails,
        }))
    }
}

/// Sentences the sim TTS keeps rendered; past it the cache starts over.
const RENDERED_SENTENCES: usize = 512;

/// The sim voice saying `text`, rendered once per voice, text and rate and shared: agents say
/// the same welcome and replies on every call, and synthesis would otherwise be most of the
/// server's CPU in a load test (a real TTS does this work on the vendor's machines).
fn rendered_speech(text: &str, voice: &str, sample_rate: u32) -> Arc<[i16]> {
    type Cache = Mutex<HashMap<(u64, u32), Arc<[i16]>>>;
    static RENDERED: OnceLock<Cache> = OnceLock::new();
    let seed = fnv1a(&[voice, text]);
    let cache = RENDERED.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(audio) = cache
        .lock()
        .ok()
        .and_then(|map| map.get(&(seed, sample_rate)).cloned())
    {
        return audio;
    }
    let mut audio = vec![0; samples_for_duration(sample_rate, speech_duration_for_text(text))];
    SpeechLikeGenerator::new(sample_rate, seed).fill(&mut audio);
    let audio: Arc<[i16]> = audio.into();
    if let Ok(mut map) = cache.lock() {
        if map.len() >= RENDERED_SENTENCES {
            map.clear();
        }
        map.insert((seed, sample_rate), Arc::clone(&audio));
    }
    audio
}

/// One sim synthesis.
struct SimTtsStream {
    sample_rate: u32,
    audio: Arc<[i16]>,
    /// Samples of `audio` already delivered.
    sent: usize,
    chunk_samples: usize,
    /// When the first chunk is due; `None` once it has been delivered.
    first_at: Option<Instant>,
    fails: bool,
}

#[async_trait]
impl TtsStream for SimTtsStream {
    fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>> {
        if let Some(first_at) = self.first_at {
            sleep_until(first_at).await;
            self.first_at = None;
            if self.fails {
                self.sent = self.audio.len();
                return Some(Err(ProviderError::Injected {
                    provider: ProviderKind::Tts,
                }));
            }
        }
        let rest = &self.audio[self.sent..];
        if rest.is_empty() {
            return None;
        }
        let chunk = &rest[..self.chunk_samples.min(rest.len())];
        self.sent += chunk.len();
        Some(Ok(chunk.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ChatMessage;

    fn request(lines: &[&str], said: &[&str]) -> LlmRequest {
        LlmRequest {
            history: said
                .iter()
                .map(|s| ChatMessage::new(ChatRole::User, *s))
                .collect(),
            sim_script: lines.iter().map(|s| (*s).to_owned()).collect(),
            ..LlmRequest::default()
        }
    }

    /// Feeds `ms` of speech-like sound (or silence) in 20 ms frames.
    fn feed(stream: &mut dyn AsrStream, speech: Option<&mut SpeechLikeGenerator>, ms: u32) {
        let mut frame = [0i16; 160];
        let mut speech = speech;
        for _ in 0..ms / 20 {
            match speech.as_deref_mut() {
                Some(generator) => generator.fill(&mut frame),
                None => frame.fill(0),
            }
            stream.push_audio(&frame, 8_000).unwrap();
        }
    }

    /// The interims delivered so far.
    async fn interims(stream: &mut dyn AsrStream) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(Some(Ok(event))) =
            tokio::time::timeout(Duration::from_millis(1), stream.next_event()).await
        {
            if let AsrEvent::Interim(text) = event {
                seen.push(text);
            }
        }
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn sim_asr_streams_the_words_heard_so_far_and_skips_a_discarded_line() {
        let asr = SimAsr::new(SimConfig::default());
        let context = AsrContext {
            sim_script: vec![
                "[backchannel] uh-huh".to_owned(),
                "I live in [pause 1500] Pune".to_owned(),
            ]
            .into(),
            ..AsrContext::default()
        };
        let mut stream = asr.open(context).await.unwrap();
        // The backchannel, heard and then discarded: the next utterance is the next line.
        let mut voice = SpeechLikeGenerator::new(8_000, 3);
        feed(stream.as_mut(), Some(&mut voice), 400);
        feed(stream.as_mut(), None, 200);
        assert_eq!(interims(stream.as_mut()).await, ["uh-huh."]);
        stream.discard().unwrap();
        // "I live in" (643 ms), the pause, "Pune" (400 ms), as the sim callee says it.
        let mut voice = SpeechLikeGenerator::new(8_000, 4);
        feed(stream.as_mut(), Some(&mut voice), 640);
        feed(stream.as_mut(), None, 200);
        assert_eq!(
            interims(stream.as_mut()).await,
            ["I", "I live", "I live in"],
            "the words before the pause, by its middle"
        );
        feed(stream.as_mut(), None, 1300);
        feed(stream.as_mut(), Some(&mut voice), 400);
        feed(stream.as_mut(), None, 200);
        // The line's end closes the sentence, as a recognizer that punctuates writes it.
        assert_eq!(interims(stream.as_mut()).await, ["I live in Pune."]);
        stream.finalize().unwrap();
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::Final {
                text: "I live in Pune.".to_owned()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sim_asr_without_interim_results_sends_only_the_final() {
        let asr = SimAsr::new(SimConfig {
            interim_results: false,
            ..SimConfig::default()
        });
        let context = AsrContext {
            sim_script: vec!["I live in Pune".to_owned()].into(),
            ..AsrContext::default()
        };
        let mut stream = asr.open(context).await.unwrap();
        let mut voice = SpeechLikeGenerator::new(8_000, 5);
        feed(stream.as_mut(), Some(&mut voice), 1100);
        feed(stream.as_mut(), None, 200);
        assert!(interims(stream.as_mut()).await.is_empty());
        assert!(
            !stream.peek(false).unwrap(),
            "the sim ASR does not transcribe on request"
        );
        stream.finalize().unwrap();
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::Final {
                text: "I live in Pune.".to_owned()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sim_asr_delivers_script_lines_after_latency() {
        let asr = SimAsr::new(SimConfig::default());
        let context = AsrContext {
            sim_script: vec!["hello there".to_owned()].into(),
            ..AsrContext::default()
        };
        let mut stream = asr.open(context).await.unwrap();
        let started = Instant::now();
        stream.finalize().unwrap();
        let first = stream.next_event().await.unwrap().unwrap();
        assert_eq!(
            first,
            AsrEvent::Final {
                text: "hello there.".into()
            }
        );
        assert_eq!(started.elapsed(), SimConfig::default().asr_latency);
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::UtteranceEnd
        );
        // Past the script: an empty utterance, still closed by UtteranceEnd.
        stream.finalize().unwrap();
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::UtteranceEnd
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sim_llm_streams_tokens_and_ends_on_goodbye() {
        let config = SimConfig::default();
        let llm = SimLlm::new(config.clone());
        let started = Instant::now();
        let mut stream = llm
            .stream(request(&["a", "b", "c"], &["ok, bye now"]))
            .await
            .unwrap();
        let mut text = String::new();
        let mut first_token_at = None;
        let mut end_call = false;
        while let Some(event) = stream.next_event().await {
            match event.unwrap() {
                LlmEvent::Token(token) => {
                    first_token_at.get_or_insert(started.elapsed());
                    text.push_str(&token);
                }
                LlmEvent::ToolCall { name, .. } => end_call = name == END_CALL_TOOL,
                LlmEvent::Done { .. } => {}
            }
        }
        assert_eq!(text, "Thank you for your time. Goodbye!");
        assert!(end_call);
        assert_eq!(first_token_at, Some(config.llm_first_token));
    }

    #[test]
    fn sim_llm_ends_when_the_script_is_exhausted() {
        let (_, end) = SimLlm::reply_for(&request(&["one", "two"], &["one"]));
        assert!(!end);
        let (_, end) = SimLlm::reply_for(&request(&["one", "two"], &["one", "two"]));
        assert!(end);
        let (_, end) = SimLlm::reply_for(&request(&[], &["anything"]));
        assert!(!end);
    }

    /// A sim call's history: the welcome, then each line said, each followed by the agent's
    /// reply, as the call loop builds it; the replies and whether the agent hung up.
    fn converse(script: &[&str], questions: &[&str]) -> Vec<(String, bool)> {
        let mut request = LlmRequest {
            history: vec![ChatMessage::new(
                ChatRole::Assistant,
                "Hello, this is Asha.",
            )],
            sim_script: script.iter().map(|s| (*s).to_owned()).collect(),
            sim_questions: questions.iter().map(|s| (*s).to_owned()).collect(),
            ..LlmRequest::default()
        };
        let mut replies = Vec::new();
        for line in script {
            request
                .history
                .push(ChatMessage::new(ChatRole::User, *line));
            let (reply, end) = SimLlm::reply_for(&request);
            request
                .history
                .push(ChatMessage::new(ChatRole::Assistant, reply.clone()));
            replies.push((reply, end));
            if end {
                break;
            }
        }
        replies
    }

    fn said(replies: &[(String, bool)]) -> Vec<(&str, bool)> {
        replies.iter().map(|(r, e)| (r.as_str(), *e)).collect()
    }

    #[test]
    fn sim_llm_asks_each_question_in_turn_then_closes() {
        let questions = [
            "Could you tell me your full name?",
            "Could you tell me your notice period in days?",
            "Could you tell me preferred shift: morning, evening, night?",
        ];
        let replies = converse(
            &[
                "Yes, I have a minute.",
                "My name is Asha Rao.",
                "About 30 days.",
                "Evening works best.",
            ],
            &questions,
        );
        assert_eq!(
            said(&replies),
            [
                ("Thank you. Could you tell me your full name?", false),
                (
                    "Got it, thanks. Could you tell me your notice period in days?",
                    false
                ),
                (
                    "Understood. Could you tell me preferred shift: morning, evening, night?",
                    false
                ),
                (SIM_CLOSE, true),
            ]
        );
        // The fourth acknowledgement, then they cycle.
        let many: Vec<String> = (1..=6).map(|n| format!("Question {n}?")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let replies = converse(&["a", "b", "c", "d", "e", "f", "g", "h"], &many);
        assert_eq!(replies[3].0, "Okay, noted. Question 4?");
        assert_eq!(replies[4].0, "Thank you. Question 5?");
        assert_eq!(replies.len(), 7);
        assert_eq!(replies[6], (SIM_CLOSE.to_owned(), true));
    }

    #[test]
    fn sim_llm_questions_end_early_on_goodbye_or_when_the_script_runs_out() {
        let questions = [
            "Could you tell me your age?",
            "Could you tell me your city?",
        ];
        let replies = converse(&["Hi.", "Not now, bye."], &questions);
        assert_eq!(
            said(&replies),
            [
                ("Thank you. Could you tell me your age?", false),
                (SIM_GOODBYE, true),
            ]
        );
        let replies = converse(&["Hi.", "Thirty."], &questions);
        assert_eq!(
            said(&replies),
            [
                ("Thank you. Could you tell me your age?", false),
                (SIM_CLOSE, true),
            ]
        );
        // Without a script (the chat endpoint) the questions still run out.
        let mut request = request(&[], &["Hi.", "Thirty.", "Pune."]);
        request.sim_questions = questions.iter().map(|q| (*q).to_owned()).collect();
        assert_eq!(SimLlm::reply_for(&request), (SIM_CLOSE.to_owned(), true));
        request.history.pop();
        assert_eq!(
            SimLlm::reply_for(&request),
            (
                "Got it, thanks. Could you tell me your city?".to_owned(),
                false
            )
        );
    }

    #[test]
    fn sim_llm_without_questions_acknowledges_without_echoing() {
        let replies = converse(
            &["Hi, who is calling?", "I paid the fee yesterday.", "Okay."],
            &[],
        );
        assert_eq!(
            said(&replies),
            [
                (SIM_NOTED_QUESTION, false),
                (SIM_ANYTHING_ELSE, false),
                (SIM_CLOSE, true),
            ]
        );
        for (reply, _) in &replies {
            assert!(
                !reply.contains("fee") && !reply.contains("calling"),
                "{reply}"
            );
        }
        assert_eq!(
            SimLlm::reply_for(&request(&[], &["   "])),
            (SIM_STILL_THERE.to_owned(), false)
        );
        // Deterministic.
        let again = converse(
            &["Hi, who is calling?", "I paid the fee yesterday.", "Okay."],
            &[],
        );
        assert_eq!(replies, again);
    }

    #[tokio::test(start_paused = true)]
    async fn sim_tts_audio_lasts_as_long_as_the_text() {
        let config = SimConfig::default();
        let tts = SimTts::new(config.clone());
        let text = "This sentence takes a couple of seconds to say.";
        let started = Instant::now();
        let mut stream = tts.synthesize(text, "alloy", 8000).await.unwrap();
        let mut total = 0;
        let mut first_at = None;
        while let Some(chunk) = stream.next_chunk().await {
            first_at.get_or_insert(started.elapsed());
            total += chunk.unwrap().len();
        }
        assert_eq!(first_at, Some(config.tts_first_byte));
        assert_eq!(
            total,
            samples_for_duration(8000, speech_duration_for_text(text))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sim_failure_starts_after_the_configured_uses() {
        let tts = SimTts::new(SimConfig {
            fail: Some(SimFailure {
                provider: ProviderKind::Tts,
                after_uses: 1,
            }),
            ..SimConfig::default()
        });
        let mut ok = tts.synthesize("fine", "v", 8000).await.unwrap();
        assert!(ok.next_chunk().await.unwrap().is_ok());
        let mut broken = tts.synthesize("broken", "v", 8000).await.unwrap();
        let error = broken.next_chunk().await.unwrap().unwrap_err();
        assert_eq!(error.provider(), ProviderKind::Tts);
        assert!(broken.next_chunk().await.is_none());
    }
}

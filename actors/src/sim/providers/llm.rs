//! The sim LLM: a deterministic agent that streams its replies word by word, asks the agent's
//! questions, uses tools (see `tool_use.rs`), hangs up, and answers post-call JSON requests
//! with the sim analyst and scorer.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep_until};

use super::tool_use::{SimToolTurn, sim_tool_turn};
use super::{SimConfig, UseCounter};
use crate::providers::analysis::AnalysisRequest;
use crate::providers::scorecard::ScorecardRequest;
use crate::providers::{
    ChatRole, END_CALL_TOOL, LlmEvent, LlmProvider, LlmRequest, LlmStream, LlmUsage, OPT_OUT_TOOL,
    ProviderError, ProviderKind,
};
use crate::sim::analyst::sim_analysis;
use crate::sim::lines::turn_lines;
use crate::sim::scorer::sim_scorecard;

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

/// What callers say when they do not want to be called again, in English and in Hindi (both
/// romanised and in Devanagari), matched in the caller's last turn after [`opt_out_words`].
pub const SIM_OPT_OUT_PHRASES: &[&str] = &[
    "don't call me again",
    "do not call me again",
    "dont call me again",
    "never call me again",
    "don't call me anymore",
    "do not call me anymore",
    "remove my number",
    "take my number off",
    "take me off your list",
    "stop calling",
    "mujhe dobara call mat karna",
    "dobara call mat karna",
    "dobara call mat karo",
    "call mat karo",
    "call mat karna",
    "phone mat karo",
    "phone mat karna",
    "कॉल मत करो",
    "कॉल मत करना",
    "फ़ोन मत करो",
    "फोन मत करो",
];

/// The sim agent's confirmation of an opt-out (it hangs up after it, with `opt-out`).
pub const SIM_OPT_OUT_CONFIRMATION: &str =
    "Understood, we will not call you again. Your number has been removed. Goodbye!";

/// `text` lowercased, curly apostrophes made straight, every other mark a space, and runs of
/// spaces one space: the form [`SIM_OPT_OUT_PHRASES`] are matched in.
pub fn opt_out_words(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '\'' => '\'',
            c if c.is_alphanumeric() || c.is_whitespace() => c,
            // Devanagari vowel signs and the nukta are marks, not letters: keep them.
            c if ('\u{0900}'..='\u{097F}').contains(&c) => c,
            _ => ' ',
        })
        .collect();
    cleaned
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the caller asks not to be called again.
pub fn asks_opt_out(text: &str) -> bool {
    let words = format!(" {} ", opt_out_words(text));
    SIM_OPT_OUT_PHRASES
        .iter()
        .any(|phrase| words.contains(&format!(" {phrase} ")))
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
            // The caller opted out, and the agent offers the tool for it: confirm, then call it.
            let opts_out = !request.response_format.is_json()
                && request.tools.iter().any(|t| t.name == OPT_OUT_TOOL)
                && request
                    .history
                    .iter()
                    .rev()
                    .find(|m| m.role == ChatRole::User)
                    .is_some_and(|m| asks_opt_out(&m.content));
            let tool_turn = (!request.response_format.is_json() && !opts_out)
                .then(|| sim_tool_turn(&request, script_done))
                .flatten();
            let (reply, end_call) = match tool_turn {
                _ if request.response_format.is_json() => (Self::json_reply_for(&request), false),
                _ if opts_out => (SIM_OPT_OUT_CONFIRMATION.to_owned(), false),
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
            if opts_out {
                events.push_back(Ok(LlmEvent::ToolCall {
                    id: "sim_opt_out".to_owned(),
                    name: OPT_OUT_TOOL.to_owned(),
                    arguments_json: "{}".to_owned(),
                }));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ChatMessage, ToolSpec};

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

    #[test]
    fn opt_out_phrases_are_recognised_in_english_and_hindi() {
        for said in [
            "Please don't call me again.",
            "Please DON\u{2019}T call me again!",
            "Remove my number, please",
            "Stop calling me",
            "Mujhe dobara call mat karna.",
            "bas, call mat karo",
            "मुझे दोबारा कॉल मत करना",
        ] {
            assert!(asks_opt_out(said), "{said}");
        }
        for said in [
            "Call me again tomorrow",
            "I will call you",
            "Don't stop",
            "Yes",
        ] {
            assert!(!asks_opt_out(said), "{said}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sim_llm_confirms_an_opt_out_and_calls_its_tool_when_offered() {
        let llm = SimLlm::new(SimConfig::default());
        let mut req = request(&[], &["Please don't call me again."]);
        req.tools = vec![ToolSpec::end_call(), ToolSpec::opt_out()];
        let mut stream = llm.stream(req).await.unwrap();
        let (mut text, mut tools) = (String::new(), Vec::new());
        while let Some(event) = stream.next_event().await {
            match event.unwrap() {
                LlmEvent::Token(t) => text.push_str(&t),
                LlmEvent::ToolCall { name, .. } => tools.push(name),
                LlmEvent::Done { .. } => {}
            }
        }
        assert_eq!(text.trim(), SIM_OPT_OUT_CONFIRMATION);
        assert_eq!(tools, [OPT_OUT_TOOL]);
        // Without the tool (compliance.optOut off) the sim answers as usual.
        let mut req = request(&[], &["Please don't call me again."]);
        req.tools = vec![ToolSpec::end_call()];
        let mut stream = llm.stream(req).await.unwrap();
        while let Some(event) = stream.next_event().await {
            assert!(
                !matches!(event.unwrap(), LlmEvent::ToolCall { ref name, .. } if name == OPT_OUT_TOOL)
            );
        }
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
}

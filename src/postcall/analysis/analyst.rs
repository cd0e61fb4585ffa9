//! Asking a model for a call's analysis and checking its answer: one
//! `json_schema` request built from the plan (bounds included, tokens
//! capped), the answer validated against that schema, one repair request
//! carrying the validation error, and provider errors retried with backoff.

use crate::providers::drafting::collect_reply;
use backon::{ExponentialBuilder, Retryable};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use voxline_actors::providers::analysis::{AnalysisReply, AnalysisRequest, verdict_passes};
use voxline_actors::providers::{
    ChatMessage, ChatRole, LlmProvider, LlmRequest, LlmUsage, ProviderError, ResponseFormat,
};

/// Tries a provider error gets before the analysis is marked failed.
pub const PROVIDER_ATTEMPTS: usize = 3;

/// Wait before the second try after a provider error; doubles after each.
const RETRY_BACKOFF: Duration = Duration::from_millis(250);

/// The most tokens an answer may take: a summary and fifty short fields fit
/// well inside it, and a small local model that rambles is cut off instead of
/// holding its server for minutes.
pub const MAX_ANSWER_TOKENS: u32 = 2_048;

/// The schema's name in the `json_schema` response format.
const SCHEMA_NAME: &str = "call_analysis";

/// The system prompt of an analysis request.
pub const ANALYSIS_INSTRUCTIONS: &str = "You analyze phone calls made by an AI agent. The user \
message is JSON with `transcript` (turns of `agent` and `callee`), `endedReason`, an optional \
`summaryPrompt`, the `fields` to extract (name, type, description, options) or a JSON `schema` \
for them, and an optional `success` plan (a rubric and what success means). Use only what the \
transcript says. Reply with one JSON object and nothing else: `summary` (a string, following \
summaryPrompt) when summaryPrompt is given; `structuredData` with every field, null where the \
call did not reveal it (dates as YYYY-MM-DD, enums exactly as one of the options); and, when \
success is given, `success`: {`value`: the verdict on the rubric's scale, `reason`: one \
sentence citing the transcript}.";

/// Why an analysis could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// The model answered twice, neither time as the plan's schema requires.
    #[error("the model's answer does not match the plan: {0}")]
    Invalid(String),
    /// The request cannot be encoded (never for a valid plan).
    #[error("the analysis request cannot be encoded: {0}")]
    Encode(String),
    /// The model could not be reached or failed, after retries.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// A checked analysis.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// The answer, as the schema requires.
    pub reply: AnalysisReply,
    /// Whether the verdict is a pass, when success is judged.
    pub pass: Option<bool>,
    /// Tokens over every request the job made.
    pub usage: LlmUsage,
    /// Time spent waiting for the model.
    pub latency: Duration,
}

/// The first request for `analysis`.
pub fn llm_request(analysis: &AnalysisRequest) -> Result<LlmRequest, AnalysisError> {
    let content =
        serde_json::to_string(analysis).map_err(|e| AnalysisError::Encode(e.to_string()))?;
    Ok(LlmRequest {
        system_prompt: ANALYSIS_INSTRUCTIONS.to_owned(),
        history: vec![ChatMessage::new(ChatRole::User, content)],
        response_format: ResponseFormat::JsonSchema {
            name: SCHEMA_NAME.to_owned(),
            schema: analysis.answer_schema(),
        },
        max_tokens: Some(MAX_ANSWER_TOKENS),
        ..LlmRequest::default()
    })
}

/// The first JSON object in a reply (models may wrap JSON in prose or fences).
fn json_object(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    serde_json::from_str(text.get(start..=end)?).ok()
}

/// Checks a reply against the answer schema; the error names the first
/// offending path, as the repair request tells the model.
pub fn check_answer(text: &str, schema: &Value) -> Result<AnalysisReply, String> {
    let value = json_object(text).ok_or_else(|| "the reply is not a JSON object".to_owned())?;
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the plan's schema cannot be compiled: {e}"))?;
    if let Some(error) = validator.iter_errors(&value).next() {
        let path = error.instance_path().to_string();
        let at = if path.is_empty() {
            "/".to_owned()
        } else {
            path
        };
        return Err(format!("at {at}: {error}"));
    }
    serde_json::from_value(value).map_err(|e| format!("unexpected shape: {e}"))
}

/// One model call, retried with backoff on provider errors; counts every try.
async fn ask(
    llm: &dyn LlmProvider,
    request: &LlmRequest,
    tries: &mut i64,
    usage: &mut LlmUsage,
    latency: &mut Duration,
) -> Result<String, ProviderError> {
    let started = Instant::now();
    let counted = std::sync::atomic::AtomicI64::new(0);
    let result = (|| async {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        collect_reply(llm, request.clone()).await
    })
    .retry(
        ExponentialBuilder::default()
            .with_min_delay(RETRY_BACKOFF)
            .with_max_times(PROVIDER_ATTEMPTS - 1),
    )
    .notify(|err, wait| {
        tracing::debug!(error = %err, ?wait, "analysis request failed; retrying");
    })
    .await;
    *tries += counted.load(std::sync::atomic::Ordering::Relaxed);
    *latency += started.elapsed();
    let reply = result?;
    usage.prompt_tokens = usage
        .prompt_tokens
        .saturating_add(reply.usage.prompt_tokens);
    usage.completion_tokens = usage
        .completion_tokens
        .saturating_add(reply.usage.completion_tokens);
    Ok(reply.text)
}

/// Asks `llm` for the analysis of `request`: an invalid answer gets one
/// repair request carrying the validation error. Returns the outcome and the
/// model calls made.
pub async fn analyze(
    llm: &dyn LlmProvider,
    request: &AnalysisRequest,
) -> (Result<Analysis, AnalysisError>, i64) {
    let mut tries = 0;
    let outcome = analyze_counting(llm, request, &mut tries).await;
    (outcome, tries)
}

async fn analyze_counting(
    llm: &dyn LlmProvider,
    request: &AnalysisRequest,
    tries: &mut i64,
) -> Result<Analysis, AnalysisError> {
    let mut llm_request = llm_request(request)?;
    let schema = request.answer_schema();
    let mut usage = LlmUsage::default();
    let mut latency = Duration::ZERO;
    let first = ask(llm, &llm_request, tries, &mut usage, &mut latency).await?;
    let reply = match check_answer(&first, &schema) {
        Ok(reply) => reply,
        Err(problem) => {
            tracing::debug!(%problem, "analysis answer invalid; asking for a repair");
            llm_request
                .history
                .push(ChatMessage::new(ChatRole::Assistant, first));
            llm_request.history.push(ChatMessage::new(
                ChatRole::User,
                json!({
                    "error": format!("Your answer is invalid {problem}. Reply again with one JSON object that matches the schema exactly."),
                })
                .to_string(),
            ));
            let second = ask(llm, &llm_request, tries, &mut usage, &mut latency).await?;
            check_answer(&second, &schema).map_err(AnalysisError::Invalid)?
        }
    };
    let pass = request.success.as_ref().and_then(|plan| {
        reply
            .success
            .as_ref()
            .and_then(|verdict| verdict.get("value"))
            .and_then(|value| verdict_passes(plan.rubric, value))
    });
    Ok(Analysis {
        reply,
        pass,
        usage,
        latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use parking_lot::Mutex;
    use std::collections::VecDeque;
    use std::sync::Arc;
    use voxline_actors::providers::analysis::{AnalysisField, FieldType};
    use voxline_actors::providers::scorecard::ScorecardTurn;
    use voxline_actors::providers::{LlmEvent, LlmStream, ProviderKind};

    /// A model that answers from a queue: text, or an error.
    #[derive(Default, Clone)]
    struct Scripted {
        answers: Arc<Mutex<VecDeque<Result<String, ()>>>>,
        seen: Arc<Mutex<Vec<LlmRequest>>>,
    }

    struct Once(VecDeque<LlmEvent>);

    #[async_trait]
    impl LlmStream for Once {
        async fn next_event(&mut self) -> Option<Result<LlmEvent, ProviderError>> {
            self.0.pop_front().map(Ok)
        }
    }

    #[async_trait]
    impl LlmProvider for Scripted {
        async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
            self.seen.lock().push(request);
            match self.answers.lock().pop_front() {
                Some(Ok(text)) => Ok(Box::new(Once(VecDeque::from([
                    LlmEvent::Token(text),
                    LlmEvent::Done {
                        usage: LlmUsage {
                            prompt_tokens: 100,
                            completion_tokens: 10,
                        },
                    },
                ])))),
                _ => Err(ProviderError::Request {
                    provider: ProviderKind::Llm,
                    message: "503 overloaded".into(),
                }),
            }
        }
    }

    fn request() -> AnalysisRequest {
        AnalysisRequest {
            summary_prompt: Some("Summarize.".into()),
            fields: vec![AnalysisField {
                name: "years".into(),
                kind: FieldType::Integer,
                description: "Years of experience".into(),
                required: true,
                options: Vec::new(),
                minimum: Some(0.0),
                maximum: Some(60.0),
            }],
            schema: None,
            success: None,
            transcript: vec![ScorecardTurn {
                speaker: "callee".into(),
                text: "Five years.".into(),
            }],
            ended_reason: "agent-hangup".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_answer_is_repaired_once_with_the_error() {
        let llm = Scripted::default();
        llm.answers.lock().extend([
            Ok(r#"{"summary": "s", "structuredData": {"years": 99}}"#.to_owned()),
            Ok(r#"{"summary": "s", "structuredData": {"years": 5}}"#.to_owned()),
        ]);
        let (outcome, tries) = analyze(&llm, &request()).await;
        let analysis = outcome.unwrap();
        assert_eq!(tries, 2);
        assert_eq!(analysis.reply.structured_data["years"], 5);
        assert_eq!(analysis.usage.prompt_tokens, 200);
        let seen = llm.seen.lock();
        assert!(seen[1].history[2].content.contains("/structuredData/years"));
        assert!(matches!(
            seen[0].response_format,
            ResponseFormat::JsonSchema { .. }
        ));
        assert_eq!(seen[0].max_tokens, Some(MAX_ANSWER_TOKENS));
    }

    #[tokio::test(start_paused = true)]
    async fn two_invalid_answers_fail_with_the_reason() {
        let llm = Scripted::default();
        llm.answers
            .lock()
            .extend([Ok("not json".to_owned()), Ok("{\"summary\": 3}".to_owned())]);
        let (outcome, tries) = analyze(&llm, &request()).await;
        assert_eq!(tries, 2);
        let err = outcome.unwrap_err().to_string();
        assert!(err.contains("does not match the plan"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn provider_errors_are_retried_then_fail() {
        let llm = Scripted::default();
        llm.answers.lock().extend([
            Err(()),
            Ok(r#"{"summary": "s", "structuredData": {"years": 2}}"#.to_owned()),
        ]);
        let (outcome, tries) = analyze(&llm, &request()).await;
        assert_eq!(outcome.unwrap().reply.structured_data["years"], 2);
        assert_eq!(tries, 2);
        let dead = Scripted::default();
        let (outcome, tries) = analyze(&dead, &request()).await;
        assert!(matches!(outcome, Err(AnalysisError::Provider(_))));
        assert_eq!(tries, PROVIDER_ATTEMPTS as i64);
    }
}

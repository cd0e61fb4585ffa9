//! Asking a model for a scorecard and checking its answer: a request carrying
//! the template and transcript whose answer is held to a strict JSON Schema
//! (plain JSON mode on servers without schemas), a reply that must score
//! every template column 0–10, retried when malformed.

use crate::domain::agent::RatingTemplate;
use crate::providers::drafting::collect_reply;
use crate::providers::select::ProviderSelector;
use crate::store::CallTurnRow;
use serde_json::Value;
use std::time::Duration;
use voxline_actors::providers::scorecard::{
    CALLEE, ColumnScore, ScorecardColumn, ScorecardReply, ScorecardRequest, ScorecardTurn,
    answer_schema,
};
use voxline_actors::providers::{
    ChatMessage, ChatRole, LlmProvider, LlmRequest, ProviderError, ResponseFormat,
};

/// Model calls one scoring job makes before the rating is marked failed.
pub const MAX_ATTEMPTS: i64 = 3;

/// Wait before the second attempt; doubles after each.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// The system prompt of a scoring request.
pub const SCORING_INSTRUCTIONS: &str = "You grade phone calls made by an AI agent. \
The user message is JSON with `columns` (each {name, description}), `transcript` (turns of \
`agent` and `callee`) and `endedReason`. Score every column from 0 (worst) to 10 (best) using \
only evidence in the transcript, and give a one-sentence reason citing that evidence. \
Reply with one JSON object and nothing else: {\"columns\": [{\"name\": <column name>, \
\"score\": <0-10>, \"reason\": <text>}]}, one entry per column, names exactly as given.";

/// The name the answer's JSON Schema is sent under.
pub const SCHEMA_NAME: &str = "scorecard";

/// The token cap of a scorecard answer. A column's entry (name, score and a
/// one-sentence reason) is 40–80 tokens, so 1024 holds a dozen columns with
/// room to spare, while a model that loops (repeating entries, or padding JSON
/// mode with whitespace, as some local servers do) stops in seconds instead
/// of running to the context length and timing out.
pub const MAX_ANSWER_TOKENS: u32 = 1024;

/// The cap grows by this much per column past a dozen, so a large template is
/// never cut off mid-answer (a cut answer is malformed on every retry).
const TOKENS_PER_COLUMN: u32 = 80;

/// Why a scorecard could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ScoringError {
    /// The model answered, but not with a usable scorecard.
    #[error("the model's scorecard is malformed: {0}")]
    Malformed(String),
    /// The model could not be reached or failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// A checked scorecard.
#[derive(Debug, Clone, PartialEq)]
pub struct Scorecard {
    /// One score per template column, in template order.
    pub columns: Vec<ColumnScore>,
    /// Mean of the column scores, two decimals.
    pub overall: f64,
}

/// The scoring request's content for a call.
pub fn scorecard_request(
    template: &RatingTemplate,
    turns: &[CallTurnRow],
    ended_reason: &str,
) -> ScorecardRequest {
    ScorecardRequest {
        columns: template
            .columns
            .iter()
            .map(|c| ScorecardColumn {
                name: c.name.clone(),
                description: c.description.clone(),
            })
            .collect(),
        transcript: turns
            .iter()
            .map(|t| ScorecardTurn {
                speaker: if t.speaker == "user" { CALLEE } else { "agent" }.to_string(),
                text: t.text.clone(),
            })
            .collect(),
        ended_reason: ended_reason.to_string(),
    }
}

/// The most tokens the answer to `card` may take: [`MAX_ANSWER_TOKENS`], or
/// [`TOKENS_PER_COLUMN`] per column for larger templates.
pub fn max_answer_tokens(card: &ScorecardRequest) -> u32 {
    let columns = u32::try_from(card.columns.len()).unwrap_or(u32::MAX);
    MAX_ANSWER_TOKENS.max(columns.saturating_mul(TOKENS_PER_COLUMN).saturating_add(64))
}

/// The model request for `card`: its answer must match [`answer_schema`]
/// (strict `json_schema`), within [`max_answer_tokens`].
pub fn llm_request(card: &ScorecardRequest) -> Result<LlmRequest, ScoringError> {
    let content = serde_json::to_string(card)
        .map_err(|e| ScoringError::Malformed(format!("cannot encode the request: {e}")))?;
    Ok(LlmRequest {
        system_prompt: SCORING_INSTRUCTIONS.to_string(),
        history: vec![ChatMessage::new(ChatRole::User, content)],
        response_format: ResponseFormat::JsonSchema {
            name: SCHEMA_NAME.to_string(),
            schema: answer_schema(card),
        },
        max_tokens: Some(max_answer_tokens(card)),
        ..LlmRequest::default()
    })
}

/// Mean of the scores, rounded to two decimals.
pub fn overall(columns: &[ColumnScore]) -> f64 {
    if columns.is_empty() {
        return 0.0;
    }
    let mean = columns.iter().map(|c| c.score).sum::<f64>() / columns.len() as f64;
    (mean * 100.0).round() / 100.0
}

/// The first JSON object in a reply (models may wrap JSON in prose or fences).
fn json_object(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    serde_json::from_str(text.get(start..=end)?).ok()
}

/// Checks a model's reply against the template: every column scored once, 0–10.
pub fn parse_scorecard(text: &str, template: &RatingTemplate) -> Result<Scorecard, ScoringError> {
    let value = json_object(text)
        .ok_or_else(|| ScoringError::Malformed("the reply is not a JSON object".into()))?;
    let reply: ScorecardReply = serde_json::from_value(value)
        .map_err(|e| ScoringError::Malformed(format!("unexpected shape: {e}")))?;
    let mut columns = Vec::with_capacity(template.columns.len());
    for column in &template.columns {
        let scored = reply
            .columns
            .iter()
            .find(|c| c.name.trim().eq_ignore_ascii_case(column.name.trim()))
            .ok_or_else(|| {
                ScoringError::Malformed(format!("column {:?} is not scored", column.name))
            })?;
        if !scored.score.is_finite() || !(0.0..=10.0).contains(&scored.score) {
            return Err(ScoringError::Malformed(format!(
                "column {:?} has score {} outside 0–10",
                column.name, scored.score
            )));
        }
        columns.push(ColumnScore {
            name: column.name.clone(),
            score: scored.score,
            reason: scored.reason.trim().to_string(),
        });
    }
    Ok(Scorecard {
        overall: overall(&columns),
        columns,
    })
}

/// Asks `llm` for the scorecard, retrying failures up to [`MAX_ATTEMPTS`];
/// returns the outcome and the attempts made.
pub async fn score(
    llm: &dyn LlmProvider,
    card: &ScorecardRequest,
    template: &RatingTemplate,
) -> (Result<Scorecard, ScoringError>, i64) {
    let request = match llm_request(card) {
        Ok(request) => request,
        Err(err) => return (Err(err), 0),
    };
    let mut backoff = RETRY_BACKOFF;
    let mut attempt = 1;
    loop {
        let outcome = match collect_reply(llm, request.clone()).await {
            Ok(reply) => parse_scorecard(&reply.text, template),
            Err(err) => Err(ScoringError::Provider(err)),
        };
        match outcome {
            Ok(card) => return (Ok(card), attempt),
            Err(err) if attempt >= MAX_ATTEMPTS => return (Err(err), attempt),
            Err(err) => {
                tracing::debug!(attempt, error = %err, "scorecard attempt failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                attempt += 1;
            }
        }
    }
}

/// Scores ratings with the workspace's providers.
pub struct Rater {
    selector: ProviderSelector,
}

impl Rater {
    /// A rater choosing each workspace's LLM with `selector`.
    pub fn new(selector: ProviderSelector) -> Self {
        Self { selector }
    }

    /// The selector that picks a workspace's LLM for scoring.
    pub fn selector(&self) -> &ProviderSelector {
        &self.selector
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::agent::RatingColumn;

    fn template() -> RatingTemplate {
        RatingTemplate {
            columns: vec![
                RatingColumn {
                    name: "Clarity".into(),
                    description: String::new(),
                },
                RatingColumn {
                    name: "Interest".into(),
                    description: String::new(),
                },
            ],
        }
    }

    #[test]
    fn a_fenced_reply_is_read_in_template_order() {
        let text = "```json\n{\"columns\":[{\"name\":\"interest\",\"score\":4,\"reason\":\"meh\"},\
                    {\"name\":\"Clarity\",\"score\":7.5,\"reason\":\" clear \"}]}\n```";
        let card = parse_scorecard(text, &template()).unwrap();
        assert_eq!(card.columns[0].name, "Clarity");
        assert_eq!(card.columns[0].reason, "clear");
        assert_eq!(card.columns[1].score, 4.0);
        assert_eq!(card.overall, 5.75);
    }

    #[test]
    fn missing_columns_and_bad_scores_are_malformed() {
        for text in [
            "not json",
            "{\"columns\": 3}",
            "{\"columns\":[{\"name\":\"Clarity\",\"score\":7}]}",
            "{\"columns\":[{\"name\":\"Clarity\",\"score\":11},{\"name\":\"Interest\",\"score\":1}]}",
        ] {
            assert!(
                matches!(
                    parse_scorecard(text, &template()),
                    Err(ScoringError::Malformed(_))
                ),
                "{text}"
            );
        }
    }

    fn card(columns: usize) -> ScorecardRequest {
        ScorecardRequest {
            columns: (0..columns)
                .map(|i| ScorecardColumn {
                    name: format!("Column {i}"),
                    description: String::new(),
                })
                .collect(),
            transcript: Vec::new(),
            ended_reason: "agent-hangup".into(),
        }
    }

    #[test]
    fn the_request_holds_the_answer_to_the_schema_within_a_token_cap() {
        let card = scorecard_request(&template(), &[], "agent-hangup");
        let request = llm_request(&card).unwrap();
        let ResponseFormat::JsonSchema { name, schema } = &request.response_format else {
            panic!("expected a JSON Schema, got {:?}", request.response_format);
        };
        assert_eq!(name, SCHEMA_NAME);
        assert_eq!(schema, &answer_schema(&card));
        assert_eq!(
            schema["properties"]["columns"]["items"]["properties"]["name"]["enum"],
            serde_json::json!(["Clarity", "Interest"])
        );
        assert_eq!(request.max_tokens, Some(MAX_ANSWER_TOKENS));
        // The sim's answer (and so the shape the prompt asks for) matches the schema.
        let reply =
            serde_json::to_value(voxline_actors::sim::scorer::sim_scorecard(&card)).unwrap();
        let validator = jsonschema::validator_for(schema).unwrap();
        assert!(validator.is_valid(&reply), "{reply}");
        let out_of_range = serde_json::json!({"columns": [
            {"name": "Clarity", "score": 11, "reason": "x"}]});
        assert!(!validator.is_valid(&out_of_range));
        let unknown = serde_json::json!({"columns": [
            {"name": "Charm", "score": 5, "reason": "x"}]});
        assert!(!validator.is_valid(&unknown));
    }

    #[test]
    fn large_templates_get_room_for_every_column() {
        assert_eq!(max_answer_tokens(&card(4)), MAX_ANSWER_TOKENS);
        assert_eq!(max_answer_tokens(&card(12)), MAX_ANSWER_TOKENS);
        assert!(max_answer_tokens(&card(30)) >= 30 * TOKENS_PER_COLUMN);
    }

    #[tokio::test]
    async fn the_sim_llm_scores_through_the_same_path() {
        let llm = voxline_actors::sim::providers::SimLlm::new(
            voxline_actors::sim::providers::SimConfig {
                llm_first_token: Duration::ZERO,
                llm_token_interval: Duration::ZERO,
                ..Default::default()
            },
        );
        let turns = |lines: &[(&str, &str)]| -> Vec<CallTurnRow> {
            lines
                .iter()
                .enumerate()
                .map(|(i, (speaker, text))| CallTurnRow {
                    seq: i as i64,
                    speaker: (*speaker).into(),
                    text: (*text).into(),
                    created_at: 0,
                })
                .collect()
        };
        let chatty = scorecard_request(
            &template(),
            &turns(&[
                ("assistant", "Hi, are you interested?"),
                (
                    "user",
                    "Yes, I am very interested and I can explain it clearly in detail.",
                ),
                ("assistant", "Goodbye!"),
            ]),
            "agent-hangup",
        );
        let curt = scorecard_request(
            &template(),
            &turns(&[
                ("assistant", "Hi, are you interested?"),
                ("user", "No."),
                ("assistant", "Goodbye!"),
            ]),
            "caller-hangup",
        );
        let (a, attempts) = score(&llm, &chatty, &template()).await;
        let a = a.unwrap();
        assert_eq!(attempts, 1);
        let (b, _) = score(&llm, &curt, &template()).await;
        let b = b.unwrap();
        assert_eq!(a.columns.len(), 2);
        assert!(a.overall > b.overall, "{} vs {}", a.overall, b.overall);
    }
}

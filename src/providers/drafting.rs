//! Text work done with an agent's LLM outside calls: a whole reply collected
//! from a stream (chat), an agent drafted from a brief (generate), and a
//! prompt improved by an instruction (prompt-assist).
//!
//! Each has two paths: an OpenAI-compatible model asked for JSON, and the
//! deterministic `sim` behaviour (decisions §11), so the endpoints work on one
//! machine with no accounts and tests can rely on the exact output.

use crate::domain::agent::{AgentSpec, ConversationEngine, RatingColumn, RatingTemplate};
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;
use voxline_actors::providers::{
    ChatMessage, ChatRole, END_CALL_TOOL, LlmEvent, LlmProvider, LlmRequest, LlmUsage,
    ProviderError, ProviderKind,
};

/// The longest a text request waits for the model's whole answer.
pub const TEXT_TIMEOUT: Duration = Duration::from_secs(90);

/// A model's whole answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectedReply {
    /// The reply text.
    pub text: String,
    /// The model called `end_call`.
    pub end_call: bool,
    /// Token counts.
    pub usage: LlmUsage,
}

/// Streams one turn and gathers it.
pub async fn collect_reply(
    llm: &dyn LlmProvider,
    request: LlmRequest,
) -> Result<CollectedReply, ProviderError> {
    let gather = async {
        let mut stream = llm.stream(request).await?;
        let mut reply = CollectedReply::default();
        while let Some(event) = stream.next_event().await {
            match event? {
                LlmEvent::Token(token) => reply.text.push_str(&token),
                LlmEvent::ToolCall { name, .. } => reply.end_call |= name == END_CALL_TOOL,
                LlmEvent::Done { usage } => {
                    reply.usage = usage;
                    break;
                }
            }
        }
        reply.text = reply.text.trim().to_string();
        Ok(reply)
    };
    tokio::time::timeout(TEXT_TIMEOUT, gather)
        .await
        .map_err(|_| ProviderError::Timeout {
            provider: ProviderKind::Llm,
            after: TEXT_TIMEOUT,
        })?
}

/// The first JSON object in a model's answer (models wrap JSON in prose or fences).
fn json_object(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    serde_json::from_str(text.get(start..=end)?).ok()
}

fn model_error(message: impl Into<String>) -> ProviderError {
    ProviderError::Stream {
        provider: ProviderKind::Llm,
        message: message.into(),
    }
}

/// A draft the model proposed; missing fields keep the agent defaults.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelDraft {
    name: Option<String>,
    conversation_engine: Option<ConversationEngine>,
    welcome_message: Option<String>,
    prompt: Option<String>,
    language: Option<String>,
    rating_template: Option<RatingTemplate>,
}

const DRAFT_INSTRUCTIONS: &str = "You design AI agents that make outbound phone calls. \
Reply with one JSON object and nothing else, with the keys: \
name (short), conversationEngine (\"pipeline\" for a two-way conversation or \"announcement\" to play one message), \
welcomeMessage (the first sentence spoken; use {name} for the person's name), \
prompt (instructions for the rest of the call, written to the agent), \
language (a BCP 47 tag such as en-IN), \
ratingTemplate ({\"columns\": [{\"name\", \"description\"}]} with 2 to 5 columns judging the call).";

/// Drafts an agent from `brief` with a model.
pub async fn draft_agent_with(
    llm: &dyn LlmProvider,
    brief: &str,
    language: Option<&str>,
) -> Result<AgentSpec, ProviderError> {
    let mut user = format!("Brief: {brief}");
    if let Some(language) = language {
        user.push_str(&format!("\nLanguage: {language}"));
    }
    let reply = collect_reply(
        llm,
        LlmRequest {
            system_prompt: DRAFT_INSTRUCTIONS.to_string(),
            history: vec![ChatMessage::new(ChatRole::User, user)],
            ..LlmRequest::default()
        },
    )
    .await?;
    let value =
        json_object(&reply.text).ok_or_else(|| model_error("the model's draft is not JSON"))?;
    let draft: ModelDraft = serde_json::from_value(value)
        .map_err(|e| model_error(format!("the model's draft has a wrong field: {e}")))?;
    let name = draft
        .name
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| title_from(brief));
    let mut spec = AgentSpec::with_name(name.trim());
    if let Some(engine) = draft.conversation_engine {
        spec.conversation_engine = engine;
    }
    spec.welcome_message = draft.welcome_message.unwrap_or_default();
    spec.prompt = draft.prompt.unwrap_or_default();
    if let Some(language) = language.map(str::to_string).or(draft.language) {
        spec.language = language;
    }
    spec.rating_template = draft.rating_template;
    Ok(spec)
}

/// Up to five words of `brief`, title-cased: a readable agent name.
fn title_from(brief: &str) -> String {
    let words: Vec<String> = brief
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .take(5)
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map_or_else(String::new, |first| {
                first
                    .to_uppercase()
                    .chain(chars.flat_map(char::to_lowercase))
                    .collect()
            })
        })
        .collect();
    if words.is_empty() {
        "New Agent".into()
    } else {
        words.join(" ")
    }
}

/// The first sentence of `text`, without its final punctuation.
fn first_sentence(text: &str) -> String {
    let text = text.trim();
    let end = text.find(['.', '!', '?', '\n']).unwrap_or(text.len());
    text[..end].trim().to_string()
}

/// The sim's deterministic draft: the brief's first sentence becomes the
/// topic of a greeting, the whole brief the goal of a structured prompt.
pub fn draft_agent_sim(brief: &str, language: Option<&str>) -> AgentSpec {
    let brief = brief.trim();
    let mut spec = AgentSpec::with_name(title_from(brief));
    let lower = brief.to_lowercase();
    let announces = ["announce", "announcement", "broadcast", "alert everyone"]
        .iter()
        .any(|w| lower.contains(w));
    let topic = first_sentence(brief);
    let mut topic_chars = topic.chars();
    let topic = topic_chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(topic_chars).collect()
    });
    if announces {
        spec.conversation_engine = ConversationEngine::Announcement;
        spec.welcome_message = format!("Hello {{name}}, this is an announcement about {topic}.");
    } else {
        spec.welcome_message =
            format!("Hello {{name}}, I'm calling about {topic}. Do you have a minute?");
    }
    spec.prompt = format!(
        "You are a friendly, professional voice agent on a phone call with {{name}}.\n\
         Goal: {brief}\n\
         Rules:\n\
         - Keep each reply to one or two short sentences; they are spoken aloud.\n\
         - Ask one question at a time and confirm what you heard.\n\
         - If the person is busy, offer to call back later.\n\
         - When the goal is met or the person wants to stop, thank them, say goodbye and end the call."
    );
    if let Some(language) = language {
        spec.language = language.to_string();
    }
    spec.rating_template = Some(RatingTemplate {
        columns: vec![
            RatingColumn {
                name: "Goal achieved".into(),
                description: format!("Did the call achieve its goal: {topic}?"),
            },
            RatingColumn {
                name: "Clarity".into(),
                description: "Were the agent's replies short, clear and correct?".into(),
            },
            RatingColumn {
                name: "Courtesy".into(),
                description: "Was the agent polite and respectful of the person's time?".into(),
            },
        ],
    });
    spec
}

const ASSIST_INSTRUCTIONS: &str = "You improve the instructions (prompts) of AI phone agents. \
Keep every {placeholder} exactly as written. Reply with one JSON object and nothing else: \
{\"prompt\": the improved prompt, \"changes\": [short strings, one per change]}.";

/// Improves `prompt` by `instruction` with a model: (prompt, changes).
pub async fn assist_prompt_with(
    llm: &dyn LlmProvider,
    prompt: &str,
    instruction: Option<&str>,
) -> Result<(String, Vec<String>), ProviderError> {
    let mut user = format!("Prompt:\n{prompt}");
    if let Some(instruction) = instruction {
        user.push_str(&format!("\n\nInstruction: {instruction}"));
    }
    let reply = collect_reply(
        llm,
        LlmRequest {
            system_prompt: ASSIST_INSTRUCTIONS.to_string(),
            history: vec![ChatMessage::new(ChatRole::User, user)],
            ..LlmRequest::default()
        },
    )
    .await?;
    let value =
        json_object(&reply.text).ok_or_else(|| model_error("the model's answer is not JSON"))?;
    let improved = value
        .get("prompt")
        .and_then(Value::as_str)
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| model_error("the model's answer has no prompt"))?
        .to_string();
    let changes = value
        .get("changes")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok((improved, changes))
}

/// The sim's deterministic edit: tidy whitespace, then add what a phone
/// prompt needs and lacks (a role, brevity, how to end), then the instruction.
pub fn assist_prompt_sim(prompt: &str, instruction: Option<&str>) -> (String, Vec<String>) {
    let mut changes = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let mut blank_run = 0;
    for line in prompt.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() {
            blank_run += 1;
            if blank_run > 1 || lines.is_empty() {
                continue;
            }
        } else {
            blank_run = 0;
        }
        lines.push(line.to_string());
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let tidied = lines.join("\n");
    if tidied != prompt {
        changes.push("Removed stray blank lines and trailing spaces".to_string());
    }
    let lower = tidied.to_lowercase();
    let mut improved = String::new();
    if !lower.trim_start().starts_with("you are") {
        improved.push_str("You are a friendly, professional voice agent on a phone call.\n");
        changes.push("Added a role statement at the start".to_string());
    }
    improved.push_str(&tidied);
    let mut rules = Vec::new();
    if !["short", "brief", "concise"]
        .iter()
        .any(|w| lower.contains(w))
    {
        rules.push("Keep each reply to one or two short sentences; they are spoken aloud.");
        changes.push("Asked for short replies suited to speech".to_string());
    }
    if !["goodbye", "end the call", "hang up"]
        .iter()
        .any(|w| lower.contains(w))
    {
        rules.push(
            "When the conversation is complete or the person asks to stop, say goodbye and end the call.",
        );
        changes.push("Said how and when to end the call".to_string());
    }
    if let Some(instruction) = instruction.map(str::trim).filter(|i| !i.is_empty()) {
        let sentence = if instruction.ends_with(['.', '!', '?']) {
            instruction.to_string()
        } else {
            format!("{instruction}.")
        };
        improved.push_str(&format!("\n\nAdditional instruction: {sentence}"));
        changes.push(format!("Applied the instruction: {sentence}"));
    }
    if !rules.is_empty() {
        improved.push_str("\n\nRules:");
        for rule in rules {
            improved.push_str("\n- ");
            improved.push_str(rule);
        }
    }
    (improved, changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_draft_is_deterministic_and_valid() {
        let brief = "Remind parents that the school fee is due on Friday. Be gentle.";
        let a = draft_agent_sim(brief, None);
        assert_eq!(a, draft_agent_sim(brief, None));
        assert_eq!(a.name, "Remind Parents That The School");
        assert_eq!(
            a.welcome_message,
            "Hello {name}, I'm calling about remind parents that the school fee is due on Friday. Do you have a minute?"
        );
        a.validate().unwrap();
        assert_eq!(a.rating_template.as_ref().map(|t| t.columns.len()), Some(3));
    }

    #[test]
    fn sim_assist_keeps_placeholders_and_lists_changes() {
        let (prompt, changes) =
            assist_prompt_sim("Ask {name} about the exam.\n\n\n", Some("Mention the date"));
        assert!(prompt.starts_with("You are"));
        assert!(prompt.contains("Ask {name} about the exam."));
        assert!(prompt.contains("Additional instruction: Mention the date."));
        assert_eq!(changes.len(), 5, "{changes:?}");
        let (again, more) = assist_prompt_sim(&prompt, None);
        assert_eq!(again, prompt, "an improved prompt needs nothing more");
        assert!(more.is_empty());
    }

    #[test]
    fn json_is_found_inside_fences() {
        let v = json_object("```json\n{\"prompt\":\"x\",\"changes\":[]}\n```").unwrap();
        assert_eq!(v["prompt"], "x");
    }
}

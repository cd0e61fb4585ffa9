//! OpenAI-compatible chat completions, streamed: `POST {base}/chat/completions`
//! with `stream: true`, read as server-sent events (content deltas, tool calls
//! streamed in argument fragments, a usage chunk, `data: [DONE]`).
//!
//! Works with OpenAI, Groq, vLLM, the llama.cpp server and Ollama. Dropping a
//! stream drops the HTTP response, which closes the connection at once: that
//! is how a barge-in cancels generation.
//!
//! JSON answers ask for `response_format: json_schema` (strict) when the
//! request carries a schema. Servers that do not know that format answer 400
//! or 422 naming it; the request is then sent again at once with
//! `json_object`, and the endpoint (base URL and model) is remembered for the
//! life of the process so later requests skip the refused attempt. A server
//! that knows the format but calls one schema invalid gets `json_object` for
//! that request only.

use super::{ByteStream, HttpPolicy, byte_stream, next_chunk, send_with_retry};
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use voxline_actors::providers::{
    ChatMessage, ChatRole, LlmEvent, LlmProvider, LlmRequest, LlmStream, LlmUsage, ProviderError,
    ProviderKind, ResponseFormat,
};

/// Whether each endpoint (base URL, model) refused `json_schema`, shared by
/// every client for it: the selector builds a fresh client per request, so a
/// flag held by one client alone would be forgotten after one scoring job.
static SCHEMA_REFUSED: LazyLock<Mutex<HashMap<Endpoint, Arc<AtomicBool>>>> =
    LazyLock::new(Default::default);

/// An endpoint: base URL and model (servers may know schemas for some models only).
type Endpoint = (String, String);

/// The shared "refused `json_schema`" flag of `base_url` serving `model`.
fn schema_refused_flag(base_url: &str, model: &str) -> Arc<AtomicBool> {
    SCHEMA_REFUSED
        .lock()
        .entry((base_url.to_string(), model.to_string()))
        .or_default()
        .clone()
}

/// An OpenAI-compatible chat model.
#[derive(Clone)]
pub struct OpenAiLlm {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    policy: HttpPolicy,
    /// Set once this endpoint refused `json_schema`; JSON requests then ask for `json_object`.
    schema_refused: Arc<AtomicBool>,
}

impl std::fmt::Debug for OpenAiLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiLlm")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("schema_refused", &self.schema_refused())
            .finish_non_exhaustive()
    }
}

impl OpenAiLlm {
    /// A client for `model` at `base_url` (up to `/v1`); local servers need no key.
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        api_key: Option<String>,
        model: &str,
        policy: HttpPolicy,
    ) -> Self {
        let base_url = base_url.trim_end_matches('/').to_string();
        Self {
            http,
            schema_refused: schema_refused_flag(&base_url, model),
            base_url,
            api_key,
            model: model.to_string(),
            policy,
        }
    }

    /// Whether this endpoint refused the `json_schema` response format, so
    /// schema requests are sent as `json_object`.
    pub fn schema_refused(&self) -> bool {
        self.schema_refused.load(Ordering::Relaxed)
    }

    /// The request body for `request`, as it would be sent now (a schema is
    /// sent as `json_object` once the endpoint refused `json_schema`).
    pub fn body(&self, request: &LlmRequest) -> Value {
        self.body_with(request, !self.schema_refused())
    }

    /// The request body, with `json_schema` when `use_schema` and the request has one.
    fn body_with(&self, request: &LlmRequest, use_schema: bool) -> Value {
        let mut messages = Vec::with_capacity(request.history.len() + 1);
        if !request.system_prompt.trim().is_empty() {
            messages.push(json!({"role": "system", "content": request.system_prompt}));
        }
        messages.extend(wire_history(&request.history));
        let mut body = json!({
            "model": self.model,
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": messages,
        });
        match &request.response_format {
            ResponseFormat::Text => {}
            ResponseFormat::JsonSchema { name, schema } if use_schema => {
                body["response_format"] = json!({"type": "json_schema", "json_schema": {
                    "name": name, "strict": true, "schema": schema}});
            }
            ResponseFormat::JsonSchema { .. } | ResponseFormat::JsonObject => {
                body["response_format"] = json!({"type": "json_object"});
            }
        }
        // `max_tokens`, not `max_completion_tokens`: llama.cpp, vLLM, Ollama
        // and OpenAI's chat models all read it.
        if let Some(max_tokens) = request.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    let mut function = json!({"name": t.name, "description": t.description});
                    // OpenAI refuses `"parameters": null`; a tool without
                    // arguments may simply leave it out.
                    if !t.parameters.is_null() {
                        function["parameters"] = t.parameters.clone();
                    }
                    json!({"type": "function", "function": function})
                })
                .collect();
            body["tools"] = Value::Array(tools);
            body["tool_choice"] = json!("auto");
        }
        body
    }

    /// Opens the answer to `body`, retrying transient failures.
    async fn send(&self, url: &str, body: &Value) -> Result<reqwest::Response, ProviderError> {
        send_with_retry(ProviderKind::Llm, VENDOR, &self.policy, || {
            let req = self
                .http
                .post(url)
                .header("accept", "text/event-stream")
                .json(body);
            match &self.api_key {
                Some(key) => req.bearer_auth(key),
                None => req,
            }
        })
        .await
    }
}

/// How errors name this client; [`schema_refusal`] reads the status after it.
const VENDOR: &str = "openai llm";

/// Why a server refused a `json_schema` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SchemaRefusal {
    /// It does not know the format: remember that for the endpoint.
    Format,
    /// It knows the format but not this schema (OpenAI's strict mode refuses
    /// some keywords): fall back for this request only, so one odd schema
    /// (a user's analysis schema, say) does not cost every other request its
    /// schema.
    ThisSchema,
}

/// Whether `err` is a server refusing the `json_schema` response format, and
/// why: a 400 or 422 whose body talks about the response format or the schema.
/// (`send_with_retry` reports a refused request as "`{vendor} answered
/// {status}: {body}`" and never retries a 400 or 422.)
fn schema_refusal(err: &ProviderError) -> Option<SchemaRefusal> {
    let ProviderError::Request { message, .. } = err else {
        return None;
    };
    let rest = message
        .strip_prefix(VENDOR)
        .and_then(|m| m.strip_prefix(" answered "))?;
    let (status, body) = rest.split_once(':').unwrap_or((rest, ""));
    let status = status.split_whitespace().next().unwrap_or_default();
    if status != "400" && status != "422" {
        return None;
    }
    let body = body.to_ascii_lowercase();
    if !["response_format", "response format", "schema"]
        .iter()
        .any(|word| body.contains(word))
    {
        return None;
    }
    let bad_schema = [
        "invalid schema",
        "invalid_json_schema",
        "invalid json schema",
    ]
    .iter()
    .any(|words| body.contains(words));
    Some(if bad_schema {
        SchemaRefusal::ThisSchema
    } else {
        SchemaRefusal::Format
    })
}

#[async_trait]
impl LlmProvider for OpenAiLlm {
    async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        let url = format!("{}/chat/completions", self.base_url);
        let try_schema = matches!(request.response_format, ResponseFormat::JsonSchema { .. })
            && !self.schema_refused();
        let response = match self.send(&url, &self.body_with(&request, try_schema)).await {
            Ok(response) => response,
            Err(err) if try_schema => match schema_refusal(&err) {
                None => return Err(err),
                Some(refusal) => {
                    let remember = refusal == SchemaRefusal::Format;
                    if remember {
                        self.schema_refused.store(true, Ordering::Relaxed);
                    }
                    tracing::info!(
                        base_url = %self.base_url,
                        model = %self.model,
                        error = %err,
                        remember,
                        "the server refused a json_schema response format; asking for json_object"
                    );
                    self.send(&url, &self.body_with(&request, false)).await?
                }
            },
            Err(err) => return Err(err),
        };
        Ok(Box::new(OpenAiLlmStream {
            body: byte_stream(response),
            read_timeout: self.policy.read_timeout,
            parser: SseParser::default(),
            events: VecDeque::new(),
            finished: false,
        }))
    }
}

/// One streamed completion.
struct OpenAiLlmStream {
    body: ByteStream,
    read_timeout: std::time::Duration,
    parser: SseParser,
    events: VecDeque<Result<LlmEvent, ProviderError>>,
    finished: bool,
}

#[async_trait]
impl LlmStream for OpenAiLlmStream {
    async fn next_event(&mut self) -> Option<Result<LlmEvent, ProviderError>> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            match next_chunk(ProviderKind::Llm, &mut self.body, self.read_timeout).await {
                Some(Ok(bytes)) => {
                    let events = self.parser.push(&bytes);
                    self.finished = self.parser.done;
                    self.events.extend(events);
                }
                Some(Err(err)) => {
                    self.finished = true;
                    return Some(Err(err));
                }
                None => {
                    self.finished = true;
                    // Some servers end the body without `[DONE]` after the finish reason.
                    match self.parser.finish() {
                        Some(done) => self.events.extend(done),
                        None => {
                            return Some(Err(ProviderError::Stream {
                                provider: ProviderKind::Llm,
                                message: "the completion stream ended before it finished".into(),
                            }));
                        }
                    }
                }
            }
        }
    }
}

/// The history in an order OpenAI accepts: every assistant message with
/// `tool_calls` is followed at once by the `tool` results of those calls, in
/// call order. OpenAI answers 400 otherwise, and the engine's history may not
/// keep that order (a caller speaking while a tool ran puts their words
/// between the call and its result). A call whose result is missing is left
/// out of its message, and a result no call asked for is dropped, for the same
/// reason: a request that names them is refused whole.
fn wire_history(history: &[ChatMessage]) -> Vec<Value> {
    let calls_tools = |m: &ChatMessage| m.role == ChatRole::Assistant && !m.tool_calls.is_empty();
    let callers: Vec<usize> = (0..history.len())
        .filter(|&at| calls_tools(&history[at]))
        .collect();
    // For each message calling tools, the history index of each call's result.
    // A result belongs to the calls between the previous and the next message
    // calling tools only: servers without ids get `call_0` on every turn.
    let mut claimed = vec![false; history.len()];
    let mut results: HashMap<usize, Vec<Option<usize>>> = HashMap::new();
    for (turn, &at) in callers.iter().enumerate() {
        let from = turn.checked_sub(1).map_or(0, |prev| callers[prev] + 1);
        let to = callers.get(turn + 1).copied().unwrap_or(history.len());
        let found = history[at]
            .tool_calls
            .iter()
            .map(|call| {
                let n = (from..to).find(|&n| {
                    !claimed[n]
                        && history[n].role == ChatRole::Tool
                        && history[n].tool_call_id.as_deref() == Some(call.id.as_str())
                })?;
                claimed[n] = true;
                Some(n)
            })
            .collect();
        results.insert(at, found);
    }
    let mut messages = Vec::with_capacity(history.len());
    for (at, message) in history.iter().enumerate() {
        if message.role == ChatRole::Tool {
            if !claimed[at] {
                tracing::debug!(
                    tool_call_id = ?message.tool_call_id,
                    "a tool result answers no tool call; left out of the request"
                );
            }
            continue;
        }
        let Some(found) = results.get(&at) else {
            messages.push(wire_message(message));
            continue;
        };
        let mut answered = message.clone();
        answered.tool_calls.clear();
        let mut tool_messages = Vec::new();
        for (call, result) in message.tool_calls.iter().zip(found) {
            match result {
                Some(n) => {
                    answered.tool_calls.push(call.clone());
                    tool_messages.push(wire_message(&history[*n]));
                }
                None => tracing::debug!(
                    tool_call_id = %call.id,
                    tool = %call.name,
                    "a tool call has no result; left out of the request"
                ),
            }
        }
        if answered.tool_calls.is_empty() && answered.content.is_empty() {
            continue;
        }
        messages.push(wire_message(&answered));
        messages.extend(tool_messages);
    }
    messages
}

/// One history message in the chat-completions shape: an assistant message
/// carries its `tool_calls` (content null when it said nothing), a tool
/// result its `tool_call_id`.
fn wire_message(message: &ChatMessage) -> Value {
    match message.role {
        ChatRole::System => json!({"role": "system", "content": message.content}),
        ChatRole::User => json!({"role": "user", "content": message.content}),
        ChatRole::Assistant if message.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": message.content})
        }
        ChatRole::Assistant => {
            let calls: Vec<Value> = message
                .tool_calls
                .iter()
                .map(|call| {
                    json!({"id": call.id, "type": "function", "function": {
                        "name": call.name, "arguments": call.arguments_json}})
                })
                .collect();
            let content = if message.content.is_empty() {
                Value::Null
            } else {
                Value::String(message.content.clone())
            };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        ChatRole::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.as_deref().unwrap_or_default(),
            "content": message.content,
        }),
    }
}

/// A tool call being assembled from its streamed fragments.
#[derive(Debug, Default)]
struct PartialToolCall {
    id: String,
    name: String,
    arguments: String,
}

/// Turns SSE bytes into LLM events: text as it comes, then the turn's tool
/// calls (their streamed fragments joined, in `index` order) once the choice
/// finishes, then `Done`, each exactly once.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: String,
    /// The start of a character whose other bytes are in the next chunk.
    partial_char: Vec<u8>,
    tool_calls: BTreeMap<u64, PartialToolCall>,
    usage: LlmUsage,
    finish_reason: Option<String>,
    tools_emitted: bool,
    /// `[DONE]` was read (or an error ended the stream).
    pub done: bool,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Result<LlmEvent, ProviderError>> {
        if self.done {
            // Whatever a server sends after `[DONE]` would repeat the turn's end.
            return Vec::new();
        }
        // A network chunk may end inside a multi-byte character (accented or
        // non-Latin text); decode only whole characters and keep the rest.
        let mut bytes_now = std::mem::take(&mut self.partial_char);
        bytes_now.extend_from_slice(bytes);
        let whole = bytes_now.len() - incomplete_char_len(&bytes_now);
        self.buffer
            .push_str(&String::from_utf8_lossy(&bytes_now[..whole]));
        self.partial_char = bytes_now.split_off(whole);
        let mut events = Vec::new();
        while let Some((end, sep)) = event_boundary(&self.buffer) {
            let raw: String = self.buffer[..end].to_string();
            self.buffer.drain(..end + sep);
            let data: Vec<&str> = raw
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                continue;
            }
            let payload = data.join("\n");
            if payload.trim() == "[DONE]" {
                events.extend(self.tool_events());
                events.push(Ok(LlmEvent::Done { usage: self.usage }));
                self.done = true;
                return events;
            }
            match serde_json::from_str::<Value>(&payload) {
                Ok(chunk) => {
                    if let Err(err) = self.chunk(&chunk, &mut events) {
                        events.push(Err(err));
                        self.done = true;
                        return events;
                    }
                }
                Err(err) => {
                    events.push(Err(ProviderError::Stream {
                        provider: ProviderKind::Llm,
                        message: format!("unreadable event: {err}"),
                    }));
                    self.done = true;
                    return events;
                }
            }
        }
        events
    }

    /// The closing events when the body ended without `[DONE]`, if a finish
    /// reason was seen; `None` when the stream was cut short.
    pub fn finish(&mut self) -> Option<Vec<Result<LlmEvent, ProviderError>>> {
        if self.done {
            return Some(Vec::new());
        }
        // The last event may lack its blank line when the body ends right after it.
        let mut events = if self.buffer.trim().is_empty() {
            Vec::new()
        } else {
            self.push(b"\n\n")
        };
        if self.done {
            return Some(events);
        }
        self.finish_reason.as_ref()?;
        events.extend(self.tool_events());
        events.push(Ok(LlmEvent::Done { usage: self.usage }));
        self.done = true;
        Some(events)
    }

    fn chunk(
        &mut self,
        chunk: &Value,
        events: &mut Vec<Result<LlmEvent, ProviderError>>,
    ) -> Result<(), ProviderError> {
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the server reported an error");
            return Err(ProviderError::Stream {
                provider: ProviderKind::Llm,
                message: message.to_string(),
            });
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let count = |name: &str| {
                usage
                    .get(name)
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0)
            };
            self.usage = LlmUsage {
                prompt_tokens: count("prompt_tokens"),
                completion_tokens: count("completion_tokens"),
            };
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            events.push(Ok(LlmEvent::Token(text.to_string())));
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                self.tool_call_fragment(call);
            }
        }
        // Some servers send `"finish_reason": ""` on every chunk until the last.
        if let Some(reason) = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            self.finish_reason = Some(reason.to_string());
            // Tool calls are complete once the choice finishes; hand them on
            // now rather than after the usage chunk.
            events.extend(self.tool_events());
        }
        Ok(())
    }

    /// Adds one `delta.tool_calls[]` fragment to its call. OpenAI sends the
    /// id, type and name in a call's first fragment and only `index` and a
    /// piece of `function.arguments` in the rest; the pieces are joined as
    /// text, since one may end inside a JSON string or an escape sequence.
    fn tool_call_fragment(&mut self, call: &Value) {
        if self.tools_emitted {
            return; // the turn's calls are already handed on
        }
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let next_index = |calls: &BTreeMap<u64, PartialToolCall>| {
            calls.last_key_value().map_or(0, |(index, _)| index + 1)
        };
        let index = match call.get("index").and_then(Value::as_u64) {
            // Some servers give every parallel call index 0: a different id
            // at a taken index is another call.
            Some(index)
                if id.is_some_and(|id| {
                    self.tool_calls
                        .get(&index)
                        .is_some_and(|partial| !partial.id.is_empty() && partial.id != id)
                }) =>
            {
                next_index(&self.tool_calls)
            }
            Some(index) => index,
            // Servers that send each call whole may leave out `index`: a new
            // id starts a new call, a fragment without one continues the last.
            None => match id {
                Some(id) => self
                    .tool_calls
                    .iter()
                    .find(|(_, partial)| partial.id == id)
                    .map(|(index, _)| *index)
                    .unwrap_or_else(|| next_index(&self.tool_calls)),
                None => self
                    .tool_calls
                    .last_key_value()
                    .map_or(0, |(index, _)| *index),
            },
        };
        let partial = self.tool_calls.entry(index).or_default();
        // Some servers repeat the id and name in every fragment; they are
        // whole values, not pieces to join.
        if let Some(id) = id {
            partial.id = id.to_string();
        }
        let Some(function) = call.get("function") else {
            return;
        };
        if let Some(name) = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| *name != partial.name)
        {
            partial.name.push_str(name);
        }
        match function.get("arguments") {
            Some(Value::String(piece)) => partial.arguments.push_str(piece),
            // A few servers send the arguments as an object rather than as text.
            Some(arguments @ Value::Object(_)) => partial.arguments = arguments.to_string(),
            _ => {}
        }
    }

    /// The turn's tool calls, once: a call without a name is dropped (nothing
    /// can run it), empty arguments become `{}`, and a call the server gave no
    /// id gets `call_<index>`.
    fn tool_events(&mut self) -> Vec<Result<LlmEvent, ProviderError>> {
        if self.tools_emitted {
            return Vec::new();
        }
        self.tools_emitted = true;
        std::mem::take(&mut self.tool_calls)
            .into_iter()
            .filter(|(_, call)| !call.name.is_empty())
            .map(|(index, call)| {
                Ok(LlmEvent::ToolCall {
                    id: if call.id.is_empty() {
                        format!("call_{index}")
                    } else {
                        call.id
                    },
                    name: call.name,
                    arguments_json: if call.arguments.trim().is_empty() {
                        "{}".to_string()
                    } else {
                        call.arguments
                    },
                })
            })
            .collect()
    }
}

/// How many bytes at the end of `bytes` begin a UTF-8 character that is not
/// complete yet (0 when the last character is whole, or not UTF-8 at all).
fn incomplete_char_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for start in (len.saturating_sub(3)..len).rev() {
        let byte = bytes[start];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: the character began earlier
        }
        let needed = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        let have = len - start;
        return if have < needed { have } else { 0 };
    }
    0
}

/// The end of the first complete event in `buffer` and the separator length.
fn event_boundary(buffer: &str) -> Option<(usize, usize)> {
    let lf = buffer.find("\n\n").map(|i| (i, 2));
    let crlf = buffer.find("\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voxline_actors::providers::ToolCallRequest;

    #[test]
    fn parses_content_tool_call_usage_and_done_across_splits() {
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo.\"}}]}\n\n",
            ": keep-alive comment\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"end_call\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"reason\\\":\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"bye\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5}}\n\n",
            "data: [DONE]\n\n",
        );
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for piece in stream.as_bytes().chunks(7) {
            events.extend(parser.push(piece).into_iter().map(Result::unwrap));
        }
        assert_eq!(
            events,
            vec![
                LlmEvent::Token("Hel".into()),
                LlmEvent::Token("lo.".into()),
                LlmEvent::ToolCall {
                    id: "c1".into(),
                    name: "end_call".into(),
                    arguments_json: "{\"reason\":\"bye\"}".into()
                },
                LlmEvent::Done {
                    usage: LlmUsage {
                        prompt_tokens: 12,
                        completion_tokens: 5
                    }
                },
            ]
        );
        assert!(parser.done);
    }

    #[test]
    fn a_character_split_across_chunks_arrives_whole() {
        let stream =
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Très bien, 好 👍\"}}]}\n\n";
        for size in 1..8 {
            let mut parser = SseParser::default();
            let mut text = String::new();
            for piece in stream.as_bytes().chunks(size) {
                for event in parser.push(piece) {
                    if let LlmEvent::Token(token) = event.unwrap() {
                        text.push_str(&token);
                    }
                }
            }
            assert_eq!(text, "Très bien, 好 👍", "chunks of {size}");
        }
        assert_eq!(incomplete_char_len(b"ok"), 0);
        assert_eq!(incomplete_char_len("é".as_bytes()), 0);
        assert_eq!(incomplete_char_len(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_char_len(&"👍".as_bytes()[..3]), 3);
        assert_eq!(incomplete_char_len(&[0xFF]), 0);
    }

    fn client(base_url: &str) -> OpenAiLlm {
        OpenAiLlm::new(
            reqwest::Client::new(),
            base_url,
            None,
            "m",
            HttpPolicy::default(),
        )
    }

    fn json_request(format: ResponseFormat, max_tokens: Option<u32>) -> LlmRequest {
        LlmRequest {
            system_prompt: "Reply in JSON.".into(),
            response_format: format,
            max_tokens,
            ..LlmRequest::default()
        }
    }

    #[test]
    fn a_live_turn_sends_the_agents_token_cap_and_temperature() {
        let llm = client("http://body.test/v1");
        let mut request = json_request(ResponseFormat::Text, Some(150));
        request.temperature = Some(0.3);
        let body = llm.body(&request);
        assert_eq!(body["max_tokens"], json!(150));
        assert!((body["temperature"].as_f64().unwrap() - 0.3).abs() < 1e-6);
        assert!(body.get("response_format").is_none());
        request.temperature = None;
        assert!(llm.body(&request).get("temperature").is_none());
    }

    #[test]
    fn the_body_carries_the_response_format_and_the_token_cap() {
        let llm = client("http://body.test/v1");
        let schema = json!({"type": "object", "additionalProperties": false,
            "required": ["a"], "properties": {"a": {"type": "string"}}});
        let body = llm.body(&json_request(
            ResponseFormat::JsonSchema {
                name: "answer".into(),
                schema: schema.clone(),
            },
            Some(512),
        ));
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": schema}})
        );
        assert_eq!(body["max_tokens"], json!(512));
        assert!(body.get("max_completion_tokens").is_none());

        let body = llm.body(&json_request(ResponseFormat::JsonObject, None));
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        assert!(body.get("max_tokens").is_none());

        let body = llm.body(&json_request(ResponseFormat::Text, None));
        assert!(body.get("response_format").is_none());
    }

    #[test]
    fn an_endpoint_that_refused_schemas_gets_json_object_from_every_client() {
        let request = json_request(
            ResponseFormat::JsonSchema {
                name: "answer".into(),
                schema: json!({"type": "object"}),
            },
            None,
        );
        let first = client("http://refused.test/v1/");
        let other_model = OpenAiLlm::new(
            reqwest::Client::new(),
            "http://refused.test/v1",
            None,
            "other",
            HttpPolicy::default(),
        );
        assert!(!first.schema_refused());
        first.schema_refused.store(true, Ordering::Relaxed);
        let later = client("http://refused.test/v1");
        assert!(later.schema_refused());
        assert_eq!(
            later.body(&request)["response_format"],
            json!({"type": "json_object"})
        );
        assert!(
            !other_model.schema_refused(),
            "another model may know schemas"
        );
        assert_eq!(
            other_model.body(&request)["response_format"]["type"],
            "json_schema"
        );
    }

    #[test]
    fn only_a_400_or_422_about_the_format_refuses_the_schema() {
        let refusal = |message: &str| {
            schema_refusal(&ProviderError::Request {
                provider: ProviderKind::Llm,
                message: message.into(),
            })
        };
        let format = Some(SchemaRefusal::Format);
        assert_eq!(
            refusal(
                "openai llm answered 400 Bad Request: {\"error\":{\"message\":\"response_format json_schema is not supported\"}}"
            ),
            format
        );
        assert_eq!(
            refusal(
                "openai llm answered 422 Unprocessable Entity: {\"detail\":\"response_format.type: unknown variant json_schema\"}"
            ),
            format
        );
        assert_eq!(
            refusal(
                "openai llm answered 400 Bad Request: {\"error\":{\"message\":\"Invalid schema for response_format 'analysis': 'additionalProperties' is required to be supplied and to be false.\",\"code\":\"invalid_json_schema\"}}"
            ),
            Some(SchemaRefusal::ThisSchema)
        );
        for other in [
            "openai llm answered 400 Bad Request: {\"error\":{\"message\":\"context length exceeded\"}}",
            "openai llm answered 500 Internal Server Error: schema",
            "openai llm answered 401 Unauthorized: the API key was refused",
            "openai llm: error sending request: schema",
        ] {
            assert_eq!(refusal(other), None, "{other}");
        }
        assert_eq!(
            schema_refusal(&ProviderError::Stream {
                provider: ProviderKind::Llm,
                message: "openai llm answered 400 Bad Request: schema".into(),
            }),
            None
        );
    }

    #[test]
    fn an_error_event_fails_the_stream() {
        let mut parser = SseParser::default();
        let events = parser.push(b"data: {\"error\":{\"message\":\"model overloaded\"}}\n\n");
        assert!(
            matches!(&events[0], Err(ProviderError::Stream { message, .. }) if message == "model overloaded")
        );
    }

    /// One SSE event per value, then `[DONE]`.
    fn sse_bytes(chunks: &[Value]) -> Vec<u8> {
        let mut bytes: Vec<u8> = chunks
            .iter()
            .flat_map(|c| format!("data: {c}\n\n").into_bytes())
            .collect();
        bytes.extend_from_slice(b"data: [DONE]\n\n");
        bytes
    }

    /// Everything the parser makes of `bytes` fed in pieces of `size`.
    fn parse_in_pieces(bytes: &[u8], size: usize) -> Vec<LlmEvent> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for piece in bytes.chunks(size) {
            events.extend(parser.push(piece).into_iter().map(Result::unwrap));
        }
        events.extend(parser.finish().unwrap().into_iter().map(Result::unwrap));
        events
    }

    fn call_fragment(index: u64, head: Option<(&str, &str)>, arguments: &str) -> Value {
        let mut call = json!({"index": index, "function": {"arguments": arguments}});
        if let Some((id, name)) = head {
            call["id"] = json!(id);
            call["type"] = json!("function");
            call["function"]["name"] = json!(name);
        }
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]})
    }

    fn tool_call(id: &str, name: &str, arguments_json: &str) -> LlmEvent {
        LlmEvent::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments_json: arguments_json.into(),
        }
    }

    #[test]
    fn parallel_tool_calls_are_joined_by_index_and_follow_the_text() {
        // Fragments cut inside a JSON string, between `\` and its escaped
        // character and inside a `\u` escape; the two calls interleave (and the
        // second one starts first) to show only `index` decides.
        let chunks = vec![
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Un instant, "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "je vérifie."}}]}),
            call_fragment(1, Some(("call_B", "book_table")), ""),
            call_fragment(0, Some(("call_A", "get_weather")), ""),
            call_fragment(0, None, "{\"ci"),
            call_fragment(0, None, "ty\": \"Zü"),
            call_fragment(1, None, "{\"note\": \"say \\"),
            call_fragment(0, None, "rich\", \"unit\": \"\\u00"),
            call_fragment(1, None, "\"hi\\\" 👋\", \"when\": \"20:00\"}"),
            call_fragment(0, None, "b0C\"}"),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 80, "completion_tokens": 31}}),
        ];
        let bytes = sse_bytes(&chunks);
        let expected = vec![
            LlmEvent::Token("Un instant, ".into()),
            LlmEvent::Token("je vérifie.".into()),
            tool_call(
                "call_A",
                "get_weather",
                "{\"city\": \"Zürich\", \"unit\": \"\\u00b0C\"}",
            ),
            tool_call(
                "call_B",
                "book_table",
                "{\"note\": \"say \\\"hi\\\" 👋\", \"when\": \"20:00\"}",
            ),
            LlmEvent::Done {
                usage: LlmUsage {
                    prompt_tokens: 80,
                    completion_tokens: 31,
                },
            },
        ];
        for size in 1..=13 {
            assert_eq!(parse_in_pieces(&bytes, size), expected, "pieces of {size}");
        }
        let LlmEvent::ToolCall { arguments_json, .. } = &expected[3] else {
            unreachable!()
        };
        let arguments: Value = serde_json::from_str(arguments_json).unwrap();
        assert_eq!(arguments["note"], "say \"hi\" 👋");
    }

    #[test]
    fn nameless_calls_are_dropped_empty_arguments_become_an_object_and_ids_are_made_up() {
        let chunks = vec![
            call_fragment(0, Some(("", "end_call")), ""),
            call_fragment(1, Some(("call_x", "")), "{\"a\": 1}"),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 2, "function": {"name": "transfer", "arguments": "  "}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        assert_eq!(
            parse_in_pieces(&sse_bytes(&chunks), 64),
            vec![
                tool_call("call_0", "end_call", "{}"),
                tool_call("call_2", "transfer", "{}"),
                LlmEvent::Done {
                    usage: LlmUsage::default()
                },
            ]
        );
    }

    #[test]
    fn the_finish_reason_and_done_end_the_turn_once() {
        let mut parser = SseParser::default();
        let first = parser.push(
            format!(
                "data: {}\n\ndata: {}\n\n",
                call_fragment(0, Some(("c1", "end_call")), "{}"),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            )
            .as_bytes(),
        );
        assert_eq!(
            first.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            vec![tool_call("c1", "end_call", "{}")],
            "the calls are handed on at the finish reason"
        );
        // A server repeating the finish reason, or sending a late fragment.
        let again = parser.push(
            format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                call_fragment(1, Some(("c2", "transfer")), "{}"),
            )
            .as_bytes(),
        );
        assert_eq!(
            again.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            vec![LlmEvent::Done {
                usage: LlmUsage::default()
            }]
        );
        assert!(parser.push(b"data: [DONE]\n\n").is_empty());
        assert!(parser.finish().unwrap().is_empty());
    }

    #[test]
    fn repeated_ids_and_names_and_odd_indexes_are_understood() {
        // Servers that repeat the id and name in every fragment.
        let repeated = vec![
            call_fragment(0, Some(("call_r", "get_weather")), "{\"city\":"),
            call_fragment(0, Some(("call_r", "get_weather")), " \"Paris\"}"),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        // Servers that send each call whole, without `index` (one with its
        // arguments as an object).
        let unindexed = vec![
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"id": "u1", "type": "function", "function": {"name": "a", "arguments": "{\"x\":1}"}},
                {"id": "u2", "type": "function", "function": {"name": "b", "arguments": {"y": 2}}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"id": "u3", "type": "function", "function": {"name": "c", "arguments": ""}}]},
                "finish_reason": "stop"}]}),
        ];
        // Servers that give every parallel call index 0.
        let all_zero = vec![
            call_fragment(0, Some(("z1", "a")), "{\"x\":"),
            call_fragment(0, None, "1}"),
            call_fragment(0, Some(("z2", "b")), "{}"),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        let done = LlmEvent::Done {
            usage: LlmUsage::default(),
        };
        assert_eq!(
            parse_in_pieces(&sse_bytes(&all_zero), 5),
            vec![
                tool_call("z1", "a", "{\"x\":1}"),
                tool_call("z2", "b", "{}"),
                done.clone()
            ]
        );
        assert_eq!(
            parse_in_pieces(&sse_bytes(&repeated), 5),
            vec![
                tool_call("call_r", "get_weather", "{\"city\": \"Paris\"}"),
                done.clone()
            ]
        );
        assert_eq!(
            parse_in_pieces(&sse_bytes(&unindexed), 5),
            vec![
                tool_call("u1", "a", "{\"x\":1}"),
                tool_call("u2", "b", "{\"y\":2}"),
                tool_call("u3", "c", "{}"),
                done
            ]
        );
    }

    #[test]
    fn a_body_ending_without_done_or_its_last_blank_line_still_finishes() {
        let body = format!(
            "data: {}\n\ndata: {}",
            call_fragment(0, Some(("c1", "end_call")), ""),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
        );
        let mut parser = SseParser::default();
        assert!(parser.push(body.as_bytes()).is_empty());
        assert_eq!(
            parser
                .finish()
                .unwrap()
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<_>>(),
            vec![
                tool_call("c1", "end_call", "{}"),
                LlmEvent::Done {
                    usage: LlmUsage {
                        prompt_tokens: 3,
                        completion_tokens: 1
                    }
                }
            ]
        );
        let mut cut = SseParser::default();
        cut.push(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n");
        assert!(
            cut.finish().is_none(),
            "no finish reason: the stream was cut"
        );
    }

    fn call(id: &str, name: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: name.into(),
            arguments_json: "{}".into(),
        }
    }

    #[test]
    fn tool_results_follow_their_call_and_unmatched_ones_are_left_out() {
        let mut said_and_called =
            ChatMessage::tool_calls(vec![call("a", "lookup"), call("b", "x")]);
        said_and_called.content = "One moment.".into();
        let history = vec![
            ChatMessage::new(ChatRole::User, "Book me in"),
            said_and_called,
            // The caller spoke while the tools ran; the results came after.
            ChatMessage::new(ChatRole::User, "for two"),
            ChatMessage::tool_result("b", "{\"ok\":true}"),
            ChatMessage::tool_result("a", "{\"found\":1}"),
            ChatMessage::tool_result("zzz", "{}"),
            // A server without ids: the next turn reuses `call_0`.
            ChatMessage::tool_calls(vec![call("call_0", "end_call")]),
            ChatMessage::tool_result("call_0", "{\"ended\":true}"),
            ChatMessage::tool_calls(vec![call("call_0", "end_call")]),
            ChatMessage::new(ChatRole::User, "still there?"),
        ];
        let messages = wire_history(&history);
        let fn_call = |id: &str, name: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}});
        assert_eq!(
            Value::Array(messages),
            json!([
                {"role": "user", "content": "Book me in"},
                {"role": "assistant", "content": "One moment.",
                    "tool_calls": [fn_call("a", "lookup"), fn_call("b", "x")]},
                {"role": "tool", "tool_call_id": "a", "content": "{\"found\":1}"},
                {"role": "tool", "tool_call_id": "b", "content": "{\"ok\":true}"},
                {"role": "user", "content": "for two"},
                {"role": "assistant", "content": null, "tool_calls": [fn_call("call_0", "end_call")]},
                {"role": "tool", "tool_call_id": "call_0", "content": "{\"ended\":true}"},
                {"role": "user", "content": "still there?"},
            ])
        );
    }

    #[test]
    fn tools_are_sent_only_when_there_are_some() {
        let llm = client("http://tools.test/v1");
        let mut request = LlmRequest {
            history: vec![ChatMessage::new(ChatRole::User, "hi")],
            ..LlmRequest::default()
        };
        let body = llm.body(&request);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        assert!(body.get("parallel_tool_calls").is_none());
        request.tools = vec![voxline_actors::providers::ToolSpec::end_call()];
        let body = llm.body(&request);
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "end_call",
                "description": request.tools[0].description,
                "parameters": {"type": "object", "properties": {}}}}])
        );
        assert_eq!(body["tool_choice"], "auto");
        assert!(body.get("parallel_tool_calls").is_none());
    }
}

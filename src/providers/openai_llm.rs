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
        for message in &request.history {
            messages.push(wire_message(message));
        }
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
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
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

/// Turns SSE bytes into LLM events.
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
        self.finish_reason.as_ref()?;
        let mut events = self.tool_events();
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
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let partial = self.tool_calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    partial.id.push_str(id);
                }
                if let Some(function) = call.get("function") {
                    if let Some(name) = function.get("name").and_then(Value::as_str) {
                        partial.name.push_str(name);
                    }
                    if let Some(args) = function.get("arguments").and_then(Value::as_str) {
                        partial.arguments.push_str(args);
                    }
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
            // Tool calls are complete once the choice finishes; hand them on
            // now rather than after the usage chunk.
            events.extend(self.tool_events());
        }
        Ok(())
    }

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
}

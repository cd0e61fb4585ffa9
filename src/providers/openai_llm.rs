//! OpenAI-compatible chat completions, streamed: `POST {base}/chat/completions`
//! with `stream: true`, read as server-sent events (content deltas, tool calls
//! streamed in argument fragments, a usage chunk, `data: [DONE]`).
//!
//! Works with OpenAI, Groq, vLLM, the llama.cpp server and Ollama. Dropping a
//! stream drops the HTTP response, which closes the connection at once: that
//! is how a barge-in cancels generation.

use super::{ByteStream, HttpPolicy, byte_stream, next_chunk, send_with_retry};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use voxline_actors::providers::{
    ChatRole, LlmEvent, LlmProvider, LlmRequest, LlmStream, LlmUsage, ProviderError, ProviderKind,
};

/// An OpenAI-compatible chat model.
#[derive(Clone)]
pub struct OpenAiLlm {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    policy: HttpPolicy,
}

impl std::fmt::Debug for OpenAiLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiLlm")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
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
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            model: model.to_string(),
            policy,
        }
    }

    /// The request body for `request`.
    pub fn body(&self, request: &LlmRequest) -> Value {
        let mut messages = Vec::with_capacity(request.history.len() + 1);
        if !request.system_prompt.trim().is_empty() {
            messages.push(json!({"role": "system", "content": request.system_prompt}));
        }
        for message in &request.history {
            let role = match message.role {
                ChatRole::System => "system",
                ChatRole::User => "user",
                ChatRole::Assistant => "assistant",
            };
            messages.push(json!({"role": role, "content": message.content}));
        }
        let mut body = json!({
            "model": self.model,
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": messages,
        });
        if request.response_format.is_json() {
            body["response_format"] = json!({"type": "json_object"});
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
}

#[async_trait]
impl LlmProvider for OpenAiLlm {
    async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        let url = format!("{}/chat/completions", self.base_url);
        let body = self.body(&request);
        let response = send_with_retry(ProviderKind::Llm, "openai llm", &self.policy, || {
            let req = self
                .http
                .post(&url)
                .header("accept", "text/event-stream")
                .json(&body);
            match &self.api_key {
                Some(key) => req.bearer_auth(key),
                None => req,
            }
        })
        .await?;
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

/// A tool call being assembled from its streamed fragments.
#[derive(Debug, Default)]
struct PartialToolCall {
    name: String,
    arguments: String,
}

/// Turns SSE bytes into LLM events.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: String,
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
        self.buffer.push_str(&String::from_utf8_lossy(bytes));
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
            .into_values()
            .filter(|call| !call.name.is_empty())
            .map(|call| {
                Ok(LlmEvent::ToolCall {
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
    fn an_error_event_fails_the_stream() {
        let mut parser = SseParser::default();
        let events = parser.push(b"data: {\"error\":{\"message\":\"model overloaded\"}}\n\n");
        assert!(
            matches!(&events[0], Err(ProviderError::Stream { message, .. }) if message == "model overloaded")
        );
    }
}

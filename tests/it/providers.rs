//! Real provider clients against local fakes that speak each vendor's
//! documented protocol (small axum and tungstenite servers in the test), and
//! end-to-end calls on the sim carrier whose agents use the OpenAI-compatible
//! LLM and TTS clients pointed at a fake: transcript, recording, workspace
//! credentials and billing.

use crate::support::{TestApp, logs};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response as WsResponse};
use voxline::domain::agent::{RatingColumn, RatingTemplate};
use voxline::postcall::ratings::scoring;
use voxline::providers::HttpPolicy;
use voxline::providers::deepgram::DeepgramAsr;
use voxline::providers::elevenlabs::ElevenLabsTts;
use voxline::providers::espeak::{self, EspeakTts};
use voxline::providers::openai_asr::{OpenAiAsr, TranscriptionForm};
use voxline::providers::openai_llm::OpenAiLlm;
use voxline::providers::openai_tts::OpenAiTts;
use voxline::providers::piper::PiperTts;
use voxline::providers::settings::VendorAccount;
use voxline_actors::providers::scorecard::{
    self, ScorecardColumn, ScorecardRequest, ScorecardTurn,
};
use voxline_actors::providers::{
    AsrContext, AsrEvent, AsrProvider, ChatMessage, ChatRole, LlmEvent, LlmProvider, LlmRequest,
    LlmUsage, ProviderError, ProviderKind, ResponseFormat, ToolCallRequest, ToolSpec, TtsProvider,
};

fn policy() -> HttpPolicy {
    HttpPolicy {
        connect_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(5),
        retries: 2,
        backoff: Duration::from_millis(20),
    }
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

/// A body that streams `chunks` with a pause between them, so the client
/// sees them arrive separately.
fn chunked_body(chunks: Vec<Vec<u8>>, pause: Duration) -> Body {
    let stream = futures::stream::iter(chunks).then(move |chunk| async move {
        tokio::time::sleep(pause).await;
        Ok::<_, std::io::Error>(Bytes::from(chunk))
    });
    Body::from_stream(stream)
}

fn sse(events: &[Value]) -> Vec<Vec<u8>> {
    let mut chunks: Vec<Vec<u8>> = events
        .iter()
        .map(|e| format!("data: {e}\n\n").into_bytes())
        .collect();
    chunks.push(b"data: [DONE]\n\n".to_vec());
    chunks
}

fn content_chunk(text: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
}

/// Content deltas, an `end_call` tool call streamed in two argument
/// fragments, the finish reason and a usage chunk, as OpenAI sends them.
fn completion_events(words: &[&str], end_call: bool) -> Vec<Value> {
    let mut events =
        vec![json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})];
    events.extend(words.iter().map(|w| content_chunk(w)));
    if end_call {
        events.push(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
            "type": "function", "function": {"name": "end_call", "arguments": ""}}]}}]}),
        );
        events.push(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": "{\"reason\":"}}]}}]}),
        );
        events.push(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": "\"done\"}"}}]}}]}),
        );
    }
    events.push(json!({"choices": [{"index": 0, "delta": {},
        "finish_reason": if end_call { "tool_calls" } else { "stop" }}]}));
    events.push(json!({"choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}}));
    events
}

/// What a fake vendor saw.
#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<(String, HeaderMap, Bytes)>>>,
}

impl Seen {
    fn push(&self, path: &str, headers: &HeaderMap, body: &Bytes) {
        self.requests
            .lock()
            .unwrap()
            .push((path.to_string(), headers.clone(), body.clone()));
    }
    fn all(&self) -> Vec<(String, HeaderMap, Bytes)> {
        self.requests.lock().unwrap().clone()
    }
    fn auth_headers(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter_map(|(_, h, _)| h.get("authorization")?.to_str().ok().map(str::to_string))
            .collect()
    }
}

fn request(history: &[(&str, ChatRole)]) -> LlmRequest {
    LlmRequest {
        system_prompt: "You are a test agent.".into(),
        history: history
            .iter()
            .map(|(text, role)| ChatMessage::new(*role, *text))
            .collect(),
        tools: vec![ToolSpec::end_call()],
        ..LlmRequest::default()
    }
}

// ---------------------------------------------------------------------------
// OpenAI-compatible LLM

#[tokio::test]
async fn openai_llm_streams_content_a_streamed_tool_call_and_usage() {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/chat/completions", &headers, &body);
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(chunked_body(
                            sse(&completion_events(&["Thank", " you.", " Goodbye!"], true)),
                            Duration::from_millis(5),
                        ))
                        .unwrap()
                },
            ),
        )
        .with_state(seen.clone());
    let addr = serve(app).await;
    let llm = OpenAiLlm::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        Some("sk-test".into()),
        "gpt-test",
        policy(),
    );
    let mut stream = llm
        .stream(request(&[
            ("Hi", ChatRole::Assistant),
            ("ok bye", ChatRole::User),
        ]))
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next_event().await {
        events.push(event.unwrap());
    }
    assert_eq!(
        events,
        vec![
            LlmEvent::Token("Thank".into()),
            LlmEvent::Token(" you.".into()),
            LlmEvent::Token(" Goodbye!".into()),
            LlmEvent::ToolCall {
                id: "call_1".into(),
                name: "end_call".into(),
                arguments_json: "{\"reason\":\"done\"}".into()
            },
            LlmEvent::Done {
                usage: LlmUsage {
                    prompt_tokens: 42,
                    completion_tokens: 7
                }
            },
        ]
    );
    let (_, headers, body) = seen.all().remove(0);
    assert_eq!(headers["authorization"], "Bearer sk-test");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": "ok bye"})
    );
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "end_call");
}

#[tokio::test]
async fn dropping_an_llm_stream_closes_the_connection() {
    let (closed_tx, closed_rx) = oneshot::channel::<()>();
    let closed_tx = Arc::new(Mutex::new(Some(closed_tx)));
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let closed_tx = closed_tx.clone();
            async move {
                let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
                tokio::spawn(async move {
                    let first = format!("data: {}\n\n", content_chunk("Hello"));
                    tx.send(Ok(Bytes::from(first))).await.unwrap();
                    // A model that keeps generating: the body stays open until the
                    // client goes away, which drops the body and closes `tx`.
                    tx.closed().await;
                    if let Some(done) = closed_tx.lock().unwrap().take() {
                        let _ = done.send(());
                    }
                });
                let body = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|item| (item, rx))
                });
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(body))
                    .unwrap()
            }
        }),
    );
    let addr = serve(app).await;
    let llm = OpenAiLlm::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        None,
        "local-model",
        policy(),
    );
    let mut stream = llm
        .stream(request(&[("Hi", ChatRole::User)]))
        .await
        .unwrap();
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        LlmEvent::Token("Hello".into())
    );
    drop(stream);
    tokio::time::timeout(Duration::from_secs(3), closed_rx)
        .await
        .expect("the server saw the connection close after the stream was dropped")
        .unwrap();
}

#[tokio::test]
async fn llm_requests_are_retried_before_anything_was_spoken_and_auth_errors_are_not() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = attempts.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap| {
            let counter = counter.clone();
            async move {
                if headers
                    .get("authorization")
                    .is_some_and(|h| h == "Bearer wrong")
                {
                    return (
                        StatusCode::UNAUTHORIZED,
                        "{\"error\":{\"message\":\"Incorrect API key provided: wr***ng\"}}",
                    )
                        .into_response();
                }
                if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                    return (StatusCode::SERVICE_UNAVAILABLE, "overloaded").into_response();
                }
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(chunked_body(
                        sse(&completion_events(&["Fine."], false)),
                        Duration::ZERO,
                    ))
                    .unwrap()
            }
        }),
    );
    let addr = serve(app).await;
    let base = format!("http://{addr}/v1");
    let llm = OpenAiLlm::new(reqwest::Client::new(), &base, None, "m", policy());
    let mut stream = llm
        .stream(request(&[("Hi", ChatRole::User)]))
        .await
        .unwrap();
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        LlmEvent::Token("Fine.".into())
    );
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "one retry after the 503"
    );

    let refused = OpenAiLlm::new(
        reqwest::Client::new(),
        &base,
        Some("wrong".into()),
        "m",
        policy(),
    );
    let err = match refused.stream(request(&[("Hi", ChatRole::User)])).await {
        Err(err) => err,
        Ok(_) => panic!("a refused key must fail"),
    };
    assert_eq!(err.provider(), ProviderKind::Llm);
    assert!(err.to_string().contains("401"), "{err}");
    assert!(
        !err.to_string().contains("wr***ng"),
        "vendor text about keys is not repeated: {err}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "a 401 is not retried");
}

#[tokio::test]
async fn an_unreachable_llm_fails_as_an_llm_error_within_the_timeouts() {
    // A bound but never-accepting port would hang; a closed port refuses at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let llm = OpenAiLlm::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        None,
        "m",
        policy(),
    );
    let started = std::time::Instant::now();
    let err = match llm.stream(request(&[("Hi", ChatRole::User)])).await {
        Err(err) => err,
        Ok(_) => panic!("nothing listens there"),
    };
    assert!(
        matches!(
            err,
            ProviderError::Request {
                provider: ProviderKind::Llm,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------
// OpenAI-compatible LLM: JSON answers held to a schema (post-call scorecards)

/// What a fake answers a JSON request with, read off the request body.
type Answer = fn(&Value) -> String;

/// A fake OpenAI-compatible server for JSON answers. It records every request
/// and streams `answer(body)` as a model does: a role chunk, the JSON cut into
/// many content deltas, the finish reason, a usage chunk and `[DONE]`, with
/// the SSE bytes themselves cut at odd places (so multi-byte characters
/// straddle network chunks). When `refusal` is set, a `json_schema` request
/// is answered 400 with it as the error message.
fn json_fake(seen: Seen, refusal: Option<&'static str>, answer: Answer) -> Router {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(
                move |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/chat/completions", &headers, &body);
                    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
                        return (StatusCode::BAD_REQUEST, "unreadable body").into_response();
                    };
                    if let Some(message) = refusal
                        && request["response_format"]["type"] == "json_schema"
                    {
                        return (
                            StatusCode::BAD_REQUEST,
                            [("content-type", "application/json")],
                            json!({"error": {
                                "message": message,
                                "type": "invalid_request_error"}})
                            .to_string(),
                        )
                            .into_response();
                    }
                    let text = answer(&request);
                    let chars: Vec<char> = text.chars().collect();
                    let pieces: Vec<String> = chars.chunks(9).map(|c| c.iter().collect()).collect();
                    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
                    let bytes = sse(&completion_events(&pieces, false)).concat();
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(chunked_body(
                            odd_chunks(&bytes, 61),
                            Duration::from_millis(1),
                        ))
                        .unwrap()
                },
            ),
        )
        .with_state(seen)
}

/// The `response_format.type` of every request a fake saw, in order.
fn format_types(seen: &Seen) -> Vec<String> {
    seen.all()
        .iter()
        .map(|(_, _, body)| {
            let body: Value = serde_json::from_slice(body).unwrap();
            body["response_format"]["type"]
                .as_str()
                .unwrap_or("none")
                .to_string()
        })
        .collect()
}

/// A request for one JSON object matching a small strict schema.
fn schema_request() -> LlmRequest {
    LlmRequest {
        system_prompt: "Extract the caller's name and age as JSON.".into(),
        history: vec![ChatMessage::new(
            ChatRole::User,
            "Hi, this is Zoë Martín, I'm thirty-four.",
        )],
        response_format: ResponseFormat::JsonSchema {
            name: "caller".into(),
            schema: json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["name", "age"],
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            }),
        },
        max_tokens: Some(200),
        ..LlmRequest::default()
    }
}

/// The caller the fake "extracts", with accents that straddle chunk cuts.
fn caller_answer(_: &Value) -> String {
    "{\n  \"name\": \"Zoë Martín\",\n  \"age\": 34\n}".to_string()
}

/// The whole text of one streamed turn.
async fn collect_text(llm: &OpenAiLlm, request: LlmRequest) -> String {
    let mut stream = llm.stream(request).await.unwrap();
    let mut text = String::new();
    let mut done = false;
    while let Some(event) = stream.next_event().await {
        match event.unwrap() {
            LlmEvent::Token(token) => text.push_str(&token),
            LlmEvent::Done { usage } => {
                assert_eq!(usage.prompt_tokens, 42);
                done = true;
            }
            LlmEvent::ToolCall { name, .. } => panic!("unexpected tool call {name}"),
        }
    }
    assert!(done, "the stream ended with Done");
    text
}

#[tokio::test]
async fn openai_llm_asks_for_a_strict_json_schema_with_a_token_cap() {
    let seen = Seen::default();
    let addr = serve(json_fake(seen.clone(), None, caller_answer)).await;
    let llm = OpenAiLlm::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        None,
        "local",
        policy(),
    );
    let text = collect_text(&llm, schema_request()).await;
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer, json!({"name": "Zoë Martín", "age": 34}));

    let (_, _, body) = seen.all().remove(0);
    let body: Value = serde_json::from_slice(&body).unwrap();
    let format = &body["response_format"];
    assert_eq!(format["type"], "json_schema", "{body}");
    assert_eq!(format["json_schema"]["name"], "caller");
    assert_eq!(format["json_schema"]["strict"], true);
    assert_eq!(
        format["json_schema"]["schema"]["additionalProperties"],
        false
    );
    assert_eq!(
        format["json_schema"]["schema"]["required"],
        json!(["name", "age"])
    );
    assert_eq!(body["max_tokens"], 200);
    assert!(body.get("max_completion_tokens").is_none());
    assert!(body.get("tools").is_none());
    assert_eq!(body["stream"], true);
}

#[tokio::test]
async fn a_server_without_json_schema_gets_json_object_in_the_same_call_and_after() {
    let seen = Seen::default();
    let addr = serve(json_fake(seen.clone(), Some(NOT_SUPPORTED), caller_answer)).await;
    let base = format!("http://{addr}/v1");
    let llm = OpenAiLlm::new(reqwest::Client::new(), &base, None, "local", policy());
    assert!(!llm.schema_refused());

    // The refusal is answered within the same call: the caller sees only the answer.
    let text = collect_text(&llm, schema_request()).await;
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["age"], 34);
    assert_eq!(
        format_types(&seen),
        ["json_schema", "json_object"],
        "one refused schema request (a 400 is not retried), then json_object"
    );
    assert!(llm.schema_refused());
    let (_, _, retried) = seen.all().remove(1);
    let retried: Value = serde_json::from_slice(&retried).unwrap();
    assert_eq!(
        retried["max_tokens"], 200,
        "the same request, but json_object"
    );
    assert_eq!(
        retried["messages"][1]["content"],
        "Hi, this is Zoë Martín, I'm thirty-four."
    );

    // Later requests go straight to json_object, from this client and from a new
    // one for the same endpoint (the selector builds one per request).
    collect_text(&llm.clone(), schema_request()).await;
    let fresh = OpenAiLlm::new(reqwest::Client::new(), &base, None, "local", policy());
    assert!(fresh.schema_refused());
    collect_text(&fresh, schema_request()).await;
    let types = format_types(&seen);
    let count = |kind: &str| types.iter().filter(|t| *t == kind).count();
    assert_eq!(
        (count("json_schema"), count("json_object")),
        (1, 3),
        "{types:?}"
    );

    // Another model behind the same URL is asked with a schema again.
    let other = OpenAiLlm::new(reqwest::Client::new(), &base, None, "other", policy());
    assert!(!other.schema_refused());
}

#[tokio::test]
async fn a_schema_called_invalid_falls_back_for_that_request_only() {
    let seen = Seen::default();
    let addr = serve(json_fake(seen.clone(), Some(INVALID_SCHEMA), caller_answer)).await;
    let llm = OpenAiLlm::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        None,
        "local",
        policy(),
    );
    let text = collect_text(&llm, schema_request()).await;
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["age"], 34);
    collect_text(&llm, schema_request()).await;
    assert_eq!(
        format_types(&seen),
        ["json_schema", "json_object", "json_schema", "json_object"],
        "the server knows schemas; only this one was refused"
    );
    assert!(!llm.schema_refused());
}

/// How servers without schema support refuse one.
const NOT_SUPPORTED: &str = "response_format json_schema is not supported";

/// How OpenAI refuses a schema its strict mode cannot take.
const INVALID_SCHEMA: &str = "Invalid schema for response_format 'caller': In context=(), \
    'required' is required to be supplied and to be an array including every key in properties.";

/// A scorecard template with three columns.
fn scorecard_template() -> RatingTemplate {
    let column = |name: &str, description: &str| RatingColumn {
        name: name.into(),
        description: description.into(),
    };
    RatingTemplate {
        columns: vec![
            column("Experience", "Years of Rust and backend experience"),
            column("Interest", "Whether the candidate wants the role"),
            column("Communication", "How clearly the candidate explains things"),
        ],
    }
}

/// A screening call, as the scoring worker sends it.
fn scorecard_card(template: &RatingTemplate) -> ScorecardRequest {
    let turn = |speaker: &str, text: &str| ScorecardTurn {
        speaker: speaker.into(),
        text: text.into(),
    };
    ScorecardRequest {
        columns: template
            .columns
            .iter()
            .map(|c| ScorecardColumn {
                name: c.name.clone(),
                description: c.description.clone(),
            })
            .collect(),
        transcript: vec![
            turn(
                "agent",
                "Hello Asha, this is Voxline calling about the Rust role. Is now a good time?",
            ),
            turn("callee", "Yes, sure, I have a few minutes."),
            turn(
                "agent",
                "How many years of backend experience do you have, and with Rust?",
            ),
            turn(
                "callee",
                "Six years of backend work, the last three in Rust, mostly async services with Tokio.",
            ),
            turn("agent", "Are you interested in moving to this role?"),
            turn(
                "callee",
                "Definitely, the role sounds great and I would be glad to hear more.",
            ),
            turn("agent", "Thank you, we will be in touch. Goodbye!"),
        ],
        ended_reason: "agent-hangup".into(),
    }
}

/// What a grading model answers: every column of the request's template,
/// read from the user message as the model reads it.
fn scorecard_answer(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let content = messages.last().unwrap()["content"].as_str().unwrap();
    let card: ScorecardRequest = serde_json::from_str(content).unwrap();
    let columns: Vec<Value> = card
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"name": c.name, "score": 6 + i,
                "reason": format!("The callee's answers speak to {} — très clair.", c.name.to_lowercase())})
        })
        .collect();
    serde_json::to_string_pretty(&json!({ "columns": columns })).unwrap()
}

#[tokio::test]
async fn a_scorecard_is_asked_with_its_schema_through_openai_llm() {
    let template = scorecard_template();
    let card = scorecard_card(&template);
    for refuse_schema in [false, true] {
        let seen = Seen::default();
        let addr = serve(json_fake(
            seen.clone(),
            refuse_schema.then_some(NOT_SUPPORTED),
            scorecard_answer,
        ))
        .await;
        let llm = OpenAiLlm::new(
            reqwest::Client::new(),
            &format!("http://{addr}/v1"),
            None,
            "local",
            policy(),
        );
        let (outcome, attempts) = scoring::score(&llm, &card, &template).await;
        let scorecard = outcome.unwrap();
        assert_eq!(attempts, 1, "refuse_schema={refuse_schema}");
        let names: Vec<&str> = scorecard.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["Experience", "Interest", "Communication"]);
        assert_eq!(
            scorecard
                .columns
                .iter()
                .map(|c| c.score)
                .collect::<Vec<_>>(),
            [6.0, 7.0, 8.0]
        );
        assert_eq!(scorecard.overall, 7.0);
        assert!(scorecard.columns[0].reason.ends_with("très clair."));

        let (_, _, body) = seen.all().remove(0);
        let body: Value = serde_json::from_slice(&body).unwrap();
        let format = &body["response_format"];
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["name"], scoring::SCHEMA_NAME);
        assert_eq!(format["json_schema"]["strict"], true);
        let schema = &format["json_schema"]["schema"];
        assert_eq!(schema, &scorecard::answer_schema(&card));
        let item = &schema["properties"]["columns"]["items"];
        assert_eq!(item["additionalProperties"], false);
        assert_eq!(
            item["properties"]["name"]["enum"],
            json!(["Experience", "Interest", "Communication"])
        );
        assert_eq!(body["max_tokens"], scoring::MAX_ANSWER_TOKENS);
        let expected: &[&str] = if refuse_schema {
            &["json_schema", "json_object"]
        } else {
            &["json_schema"]
        };
        assert_eq!(format_types(&seen), expected);
    }
}

/// A real OpenAI-compatible server, when `VOXLINE_TEST_LLM_URL` names one
/// (base URL up to `/v1`; model `VOXLINE_TEST_LLM_MODEL`, default `local`;
/// key `VOXLINE_TEST_LLM_API_KEY` if it needs one).
#[tokio::test]
async fn a_real_llm_server_fills_a_scorecard_when_configured() {
    let Ok(base) = std::env::var("VOXLINE_TEST_LLM_URL") else {
        println!(
            "skipped a_real_llm_server_fills_a_scorecard_when_configured: \
             VOXLINE_TEST_LLM_URL is not set"
        );
        return;
    };
    let model = std::env::var("VOXLINE_TEST_LLM_MODEL").unwrap_or_else(|_| "local".into());
    let key = std::env::var("VOXLINE_TEST_LLM_API_KEY").ok();
    let patient = HttpPolicy {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(90),
        retries: 1,
        backoff: Duration::from_millis(500),
    };
    let llm = OpenAiLlm::new(reqwest::Client::new(), &base, key, &model, patient);
    let template = scorecard_template();
    let card = scorecard_card(&template);
    let (outcome, attempts) = scoring::score(&llm, &card, &template).await;
    let scorecard = outcome.unwrap_or_else(|err| panic!("{model} at {base}: {err}"));
    println!(
        "{model} at {base}: {attempts} attempt(s), json_schema refused: {}, {scorecard:?}",
        llm.schema_refused()
    );
    assert_eq!(scorecard.columns.len(), template.columns.len());
    for column in &scorecard.columns {
        assert!((0.0..=10.0).contains(&column.score), "{column:?}");
    }
}

#[tokio::test]
async fn a_real_llm_server_analyzes_a_call_when_configured() {
    let Ok(base) = std::env::var("VOXLINE_TEST_LLM_URL") else {
        println!(
            "skipped a_real_llm_server_analyzes_a_call_when_configured: \
             VOXLINE_TEST_LLM_URL is not set"
        );
        return;
    };
    let model = std::env::var("VOXLINE_TEST_LLM_MODEL").unwrap_or_else(|_| "local".into());
    let key = std::env::var("VOXLINE_TEST_LLM_API_KEY").ok();
    let patient = HttpPolicy {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(90),
        retries: 1,
        backoff: Duration::from_millis(500),
    };
    let llm = OpenAiLlm::new(reqwest::Client::new(), &base, key, &model, patient);
    let plan: voxline::domain::analysis::AnalysisPlan = serde_json::from_value(json!({
        "fields": [
            {"name": "notice_days", "type": "integer", "description": "Notice period in days", "minimum": 0, "maximum": 180},
            {"name": "can_relocate", "type": "boolean", "description": "Whether the candidate can relocate"}
        ],
        "success": {"rubric": "passFail", "prompt": "The candidate answered both questions."}
    }))
    .unwrap();
    let turn = |speaker: &str, text: &str| voxline_actors::providers::scorecard::ScorecardTurn {
        speaker: speaker.into(),
        text: text.into(),
    };
    let request = plan.engine_request(
        vec![
            turn("agent", "Hello Asha, what is your notice period?"),
            turn("callee", "It is thirty days."),
            turn("agent", "Can you relocate to Bengaluru?"),
            turn("callee", "Yes, I can relocate."),
        ],
        "agent-hangup",
    );
    let (outcome, attempts) = voxline::postcall::analysis::analyst::analyze(&llm, &request).await;
    let analysis = outcome.unwrap_or_else(|err| panic!("{model} at {base}: {err}"));
    println!("{model} at {base}: {attempts} request(s): {analysis:?}");
    let data = &analysis.reply.structured_data;
    assert!(
        data.contains_key("notice_days") && data.contains_key("can_relocate"),
        "{data:?}"
    );
    assert!(
        analysis
            .reply
            .summary
            .as_deref()
            .is_some_and(|s| !s.is_empty())
    );
}

/// Two parallel tool calls after some text, streamed as OpenAI streams them:
/// each call's first fragment carries its id, type, name and empty
/// arguments, the rest only `index` and a piece of the arguments (cut inside
/// strings, escapes and multi-byte characters), then the finish reason, a
/// usage chunk with no choices and `[DONE]`.
fn parallel_tool_call_events() -> Vec<Value> {
    let delta = |delta: Value| {
        json!({"id": "chatcmpl-9", "object": "chat.completion.chunk",
        "model": "fake", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    };
    let head = |index: u64, id: &str, name: &str| {
        delta(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}),
        )
    };
    let piece = |index: u64, arguments: &str| {
        delta(json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}))
    };
    let mut events = vec![
        delta(json!({"role": "assistant", "content": ""})),
        content_chunk("Je regarde "),
        content_chunk("ça tout de suite."),
        head(0, "call_w1", "get_weather"),
    ];
    events.extend(
        [
            "{\"",
            "city",
            "\":\"",
            "São",
            " Pau",
            "lo\",\"",
            "unit\":\"",
            "\\u00",
            "b0C",
            "\"}",
        ]
        .iter()
        .map(|p| piece(0, p)),
    );
    events.push(head(1, "call_s2", "send_sms"));
    events.extend(
        [
            "{\"to\":\"+3361",
            "2345678\",",
            "\"text\":\"Il fait ",
            "20 \\",
            "\"beau\\",
            "\" 😀",
            "\\n",
            "\"}",
        ]
        .iter()
        .map(|p| piece(1, p)),
    );
    events.push(
        json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    );
    events.push(json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "model": "fake",
        "choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 48, "total_tokens": 168}}));
    events
}

/// A fake that records each request and answers with `events` as SSE, its
/// bytes cut every `cut` bytes.
fn tool_fake(seen: Seen, events: Vec<Value>, cut: usize) -> Router {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(
                move |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/chat/completions", &headers, &body);
                    let bytes = sse(&events).concat();
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(chunked_body(
                            odd_chunks(&bytes, cut),
                            Duration::from_millis(1),
                        ))
                        .unwrap()
                },
            ),
        )
        .with_state(seen)
}

/// Every event of one streamed turn.
async fn all_events(llm: &OpenAiLlm, request: LlmRequest) -> Vec<LlmEvent> {
    let mut stream = llm.stream(request).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next_event().await {
        events.push(event.unwrap());
    }
    events
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "The current weather in a city.".into(),
        parameters: json!({"type": "object", "required": ["city"],
            "properties": {"city": {"type": "string", "description": "The city name"}}}),
    }
}

#[tokio::test]
async fn openai_llm_joins_parallel_tool_calls_streamed_in_fragments() {
    let events = parallel_tool_call_events();
    let bytes = sse(&events).concat();
    // The first odd cut at which some network chunk starts inside a
    // multi-byte character.
    let cut = (5..40)
        .step_by(2)
        .find(|&cut| {
            odd_chunks(&bytes, cut)
                .iter()
                .skip(1)
                .any(|chunk| chunk[0] & 0b1100_0000 == 0b1000_0000)
        })
        .unwrap();
    let seen = Seen::default();
    let addr = serve(tool_fake(seen.clone(), events, cut)).await;
    let llm = OpenAiLlm::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        None,
        "gpt-test",
        policy(),
    );
    let request = LlmRequest {
        history: vec![ChatMessage::new(
            ChatRole::User,
            "Quel temps fait-il à São Paulo ? Envoie-le par SMS.",
        )],
        tools: vec![weather_tool()],
        ..request(&[])
    };
    let events = all_events(&llm, request).await;
    assert_eq!(
        events,
        vec![
            LlmEvent::Token("Je regarde ".into()),
            LlmEvent::Token("ça tout de suite.".into()),
            LlmEvent::ToolCall {
                id: "call_w1".into(),
                name: "get_weather".into(),
                arguments_json: "{\"city\":\"São Paulo\",\"unit\":\"\\u00b0C\"}".into(),
            },
            LlmEvent::ToolCall {
                id: "call_s2".into(),
                name: "send_sms".into(),
                arguments_json:
                    "{\"to\":\"+33612345678\",\"text\":\"Il fait 20 \\\"beau\\\" 😀\\n\"}".into(),
            },
            LlmEvent::Done {
                usage: LlmUsage {
                    prompt_tokens: 120,
                    completion_tokens: 48
                }
            },
        ]
    );
    let LlmEvent::ToolCall { arguments_json, .. } = &events[3] else {
        unreachable!()
    };
    let arguments: Value = serde_json::from_str(arguments_json).unwrap();
    assert_eq!(arguments["text"], "Il fait 20 \"beau\" 😀\n");
}

#[tokio::test]
async fn a_continuation_sends_the_tool_calls_then_their_results() {
    let seen = Seen::default();
    let answer = vec![
        content_chunk("It is sunny in Paris, 21 degrees."),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 60, "completion_tokens": 9}}),
    ];
    let addr = serve(tool_fake(seen.clone(), answer, 13)).await;
    let llm = OpenAiLlm::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        Some("sk-test".into()),
        "gpt-test",
        policy(),
    );
    let mut calling = ChatMessage::tool_calls(vec![ToolCallRequest {
        id: "call_abc".into(),
        name: "get_weather".into(),
        arguments_json: "{\"city\":\"Paris\"}".into(),
    }]);
    calling.content = "Let me check.".into();
    let request = LlmRequest {
        system_prompt: "You are a weather line.".into(),
        history: vec![
            ChatMessage::new(ChatRole::User, "What's the weather in Paris?"),
            calling,
            ChatMessage::tool_result("call_abc", "{\"sky\":\"sunny\",\"celsius\":21}"),
        ],
        tools: vec![weather_tool(), ToolSpec::end_call()],
        ..LlmRequest::default()
    };
    let events = all_events(&llm, request).await;
    assert_eq!(
        events,
        vec![
            LlmEvent::Token("It is sunny in Paris, 21 degrees.".into()),
            LlmEvent::Done {
                usage: LlmUsage {
                    prompt_tokens: 60,
                    completion_tokens: 9
                }
            },
        ]
    );
    let requests = seen.all();
    assert_eq!(requests.len(), 1);
    let body: Value = serde_json::from_slice(&requests[0].2).unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are a weather line."},
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_abc", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_abc",
             "content": "{\"sky\":\"sunny\",\"celsius\":21}"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "function": {
                "name": "get_weather",
                "description": "The current weather in a city.",
                "parameters": {"type": "object", "required": ["city"],
                    "properties": {"city": {"type": "string", "description": "The city name"}}}}},
            {"type": "function", "function": {
                "name": "end_call",
                "description": ToolSpec::end_call().description,
                "parameters": {"type": "object", "properties": {}}}},
        ])
    );
    assert_eq!(body["tool_choice"], "auto");
    assert!(body.get("parallel_tool_calls").is_none());
}

#[tokio::test]
async fn a_real_llm_server_calls_a_tool_when_configured() {
    let Ok(base) = std::env::var("VOXLINE_TEST_LLM_URL") else {
        println!(
            "skipped a_real_llm_server_calls_a_tool_when_configured: \
             VOXLINE_TEST_LLM_URL is not set"
        );
        return;
    };
    let model = std::env::var("VOXLINE_TEST_LLM_MODEL").unwrap_or_else(|_| "local".into());
    let key = std::env::var("VOXLINE_TEST_LLM_API_KEY").ok();
    let patient = HttpPolicy {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(90),
        retries: 1,
        backoff: Duration::from_millis(500),
    };
    let llm = OpenAiLlm::new(reqwest::Client::new(), &base, key, &model, patient);
    let request = LlmRequest {
        system_prompt: "You answer weather questions. Use the get_weather tool.".into(),
        history: vec![ChatMessage::new(
            ChatRole::User,
            "What is the weather in Paris right now?",
        )],
        tools: vec![weather_tool()],
        max_tokens: Some(300),
        ..LlmRequest::default()
    };
    let mut stream = llm
        .stream(request)
        .await
        .unwrap_or_else(|err| panic!("{model} at {base}: {err}"));
    let mut events = Vec::new();
    while let Some(event) = stream.next_event().await {
        events.push(event.unwrap_or_else(|err| panic!("{model} at {base}: {err}")));
    }
    println!("{model} at {base}: {events:?}");
    assert!(
        matches!(events.last(), Some(LlmEvent::Done { .. })),
        "the stream ends with Done: {events:?}"
    );
    for event in &events {
        if let LlmEvent::ToolCall {
            id,
            name,
            arguments_json,
        } = event
        {
            assert!(!id.is_empty() && !name.is_empty(), "{event:?}");
            let arguments: Value = serde_json::from_str(arguments_json)
                .unwrap_or_else(|err| panic!("{name} arguments {arguments_json:?}: {err}"));
            assert!(arguments.is_object(), "{arguments_json}");
        }
    }
}

// ---------------------------------------------------------------------------
// TTS

/// 16-bit little-endian PCM of a tone.
fn tone_pcm(rate: u32, millis: u32) -> Vec<u8> {
    let n = rate * millis / 1000;
    (0..n)
        .flat_map(|i| {
            let t = f64::from(i) / f64::from(rate);
            let v = (t * 440.0 * std::f64::consts::TAU).sin() * 8000.0;
            (v as i16).to_le_bytes()
        })
        .collect()
}

/// Splits bytes into chunks of odd size, so samples straddle chunk boundaries.
fn odd_chunks(bytes: &[u8], size: usize) -> Vec<Vec<u8>> {
    bytes.chunks(size).map(<[u8]>::to_vec).collect()
}

fn samples_of(bytes: &[u8]) -> Vec<i16> {
    bytes
        .chunks_exact(2)
        .map(|p| i16::from_le_bytes([p[0], p[1]]))
        .collect()
}

#[tokio::test]
async fn openai_speech_is_streamed_as_pcm_chunks() {
    let seen = Seen::default();
    let pcm = tone_pcm(24_000, 300);
    let served = pcm.clone();
    let app = Router::new()
        .route(
            "/v1/audio/speech",
            post(
                move |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| {
                    let served = served.clone();
                    async move {
                        seen.push("/v1/audio/speech", &headers, &body);
                        Response::builder()
                            .header("content-type", "audio/pcm")
                            .body(chunked_body(
                                odd_chunks(&served, 4_801),
                                Duration::from_millis(5),
                            ))
                            .unwrap()
                    }
                },
            ),
        )
        .with_state(seen.clone());
    let addr = serve(app).await;
    let tts = OpenAiTts::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        Some("sk-tts".into()),
        "gpt-4o-mini-tts",
        policy(),
    );
    let mut stream = tts
        .synthesize("Hello there.", "sim-default", 8_000)
        .await
        .unwrap();
    assert_eq!(stream.sample_rate(), 24_000);
    let mut chunks = 0;
    let mut samples = Vec::new();
    while let Some(chunk) = stream.next_chunk().await {
        chunks += 1;
        samples.extend(chunk.unwrap());
    }
    assert!(chunks >= 3, "audio arrived in {chunks} chunk(s)");
    assert_eq!(samples, samples_of(&pcm));
    let (_, headers, body) = seen.all().remove(0);
    assert_eq!(headers["authorization"], "Bearer sk-tts");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body,
        json!({"model": "gpt-4o-mini-tts", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"})
    );
}

/// A Piper server's answer: a WAV file at `rate`, sent in odd-sized pieces.
fn piper_fake(seen: Seen, wav: Vec<u8>) -> Router {
    Router::new()
        .route(
            "/synthesize",
            post(
                move |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| {
                    let wav = wav.clone();
                    async move {
                        seen.push("/synthesize", &headers, &body);
                        Response::builder()
                            .header("content-type", "audio/wav")
                            .body(chunked_body(
                                odd_chunks(&wav, 1_001),
                                Duration::from_millis(2),
                            ))
                            .unwrap()
                    }
                },
            ),
        )
        .with_state(seen)
}

#[tokio::test]
async fn piper_speech_streams_the_wav_body_at_the_voice_rate() {
    let seen = Seen::default();
    let pcm = tone_pcm(22_050, 400);
    let samples = samples_of(&pcm);
    let wav = voxline_media::wav::mono_file(&samples, 22_050);
    let addr = serve(piper_fake(seen.clone(), wav)).await;
    let tts = PiperTts::new(
        reqwest::Client::new(),
        &format!("http://{addr}"),
        "en_US-joe-medium",
        policy(),
    );
    let mut stream = tts
        .synthesize("Hello there.\nHow are you?", "sim-default", 8_000)
        .await
        .unwrap();
    // The voice's own rate: the call loop resamples once to the carrier's.
    assert_eq!(stream.sample_rate(), 22_050);
    let mut heard = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = stream.next_chunk().await {
        chunks += 1;
        heard.extend(chunk.unwrap());
    }
    assert!(chunks >= 3, "audio arrived in {chunks} chunk(s)");
    assert_eq!(heard, samples);
    let (path, headers, body) = seen.all().remove(0);
    assert_eq!(path, "/synthesize");
    assert!(headers.get("authorization").is_none());
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body,
        json!({"text": "Hello there. How are you?", "voice": "en_US-joe-medium"})
    );
    // An agent naming a Piper voice gets it; no default voice means the server's own.
    let tts = PiperTts::new(
        reqwest::Client::new(),
        &format!("http://{addr}"),
        "",
        policy(),
    );
    drop(tts.synthesize("Hi.", "sim-default", 8_000).await.unwrap());
    drop(
        tts.synthesize("Hi.", "en_GB-alba-medium", 8_000)
            .await
            .unwrap(),
    );
    let bodies: Vec<Value> = seen
        .all()
        .into_iter()
        .skip(1)
        .map(|(_, _, body)| serde_json::from_slice(&body).unwrap())
        .collect();
    assert_eq!(
        bodies,
        [
            json!({"text": "Hi."}),
            json!({"text": "Hi.", "voice": "en_GB-alba-medium"})
        ]
    );
}

#[tokio::test]
async fn piper_answers_that_are_not_mono_16_bit_wav_fail_as_tts_errors() {
    let stereo = {
        let mut wav = voxline_media::wav::mono_file(&[0; 441], 22_050);
        wav[22] = 2; // channels
        wav
    };
    for (answer, expect) in [
        (b"not a wav file at all".to_vec(), "not a WAV"),
        (stereo, "16-bit mono"),
        (
            voxline_media::wav::mono_file(&[0; 110], 11_025),
            "cannot resample",
        ),
    ] {
        let addr = serve(piper_fake(Seen::default(), answer)).await;
        let tts = PiperTts::new(
            reqwest::Client::new(),
            &format!("http://{addr}"),
            "",
            policy(),
        );
        let error = match tts.synthesize("Hello.", "sim-default", 8_000).await {
            Err(error) => error,
            Ok(_) => panic!("{expect}: accepted"),
        };
        assert_eq!(error.provider(), ProviderKind::Tts);
        assert!(error.to_string().contains(expect), "{error}");
    }
}

#[tokio::test]
async fn elevenlabs_streams_pcm_at_the_rate_the_call_needs() {
    let seen = Seen::default();
    let pcm = tone_pcm(8_000, 400);
    let served = pcm.clone();
    let app = Router::new()
        .route(
            "/v1/text-to-speech/{voice}/stream",
            post(
                move |State(seen): State<Seen>,
                      Path(voice): Path<String>,
                      Query(query): Query<HashMap<String, String>>,
                      headers: HeaderMap,
                      body: Bytes| {
                    let served = served.clone();
                    async move {
                        seen.push(
                            &format!("{voice}?{}", query["output_format"]),
                            &headers,
                            &body,
                        );
                        if headers.get("xi-api-key").is_none_or(|k| k != "el-key") {
                            return StatusCode::UNAUTHORIZED.into_response();
                        }
                        Response::builder()
                            .header("content-type", "audio/pcm")
                            .body(chunked_body(
                                odd_chunks(&served, 1_601),
                                Duration::from_millis(5),
                            ))
                            .unwrap()
                    }
                },
            ),
        )
        .with_state(seen.clone());
    let addr = serve(app).await;
    let tts = ElevenLabsTts::new(
        reqwest::Client::new(),
        &format!("http://{addr}"),
        "el-key".into(),
        "eleven_flash_v2_5",
        policy(),
    );
    let mut stream = tts
        .synthesize("Namaste.", "voice-123", 8_000)
        .await
        .unwrap();
    assert_eq!(stream.sample_rate(), 8_000);
    let mut chunks = 0;
    let mut samples = Vec::new();
    while let Some(chunk) = stream.next_chunk().await {
        chunks += 1;
        samples.extend(chunk.unwrap());
    }
    assert!(chunks >= 2);
    assert_eq!(samples, samples_of(&pcm));
    let (path, _, body) = seen.all().remove(0);
    assert_eq!(path, "voice-123?pcm_8000");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body,
        json!({"text": "Namaste.", "model_id": "eleven_flash_v2_5"})
    );
}

#[tokio::test]
async fn espeak_produces_real_speech_when_installed() {
    if !espeak::installed("espeak-ng").await {
        eprintln!("SKIPPED espeak_produces_real_speech_when_installed: espeak-ng is not installed");
        return;
    }
    let tts = EspeakTts::new("espeak-ng", "en-US", Duration::from_secs(10));
    let mut stream = tts
        .synthesize(
            "Hello, this is a test of the local voice.",
            "sim-default",
            8_000,
        )
        .await
        .unwrap();
    // espeak-ng's own rate, known before the first chunk: the caller resamples once.
    assert_eq!(stream.sample_rate(), 22_050);
    let mut samples = Vec::new();
    while let Some(chunk) = stream.next_chunk().await {
        samples.extend(chunk.unwrap());
    }
    let seconds = samples.len() as f64 / 22_050.0;
    assert!((1.0..10.0).contains(&seconds), "{seconds} s of speech");
    let rms =
        (samples.iter().map(|s| f64::from(*s).powi(2)).sum::<f64>() / samples.len() as f64).sqrt();
    assert!(rms > 300.0, "speech has energy (rms {rms})");
}

// ---------------------------------------------------------------------------
// ASR

#[tokio::test]
// The handshake callback's error type is tungstenite's, not ours.
#[allow(clippy::result_large_err)]
async fn deepgram_live_stream_sends_audio_and_maps_interim_final_and_utterance_end() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (report_tx, report_rx) = oneshot::channel::<(String, String, usize, Vec<String>)>();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let handshake = Arc::new(Mutex::new((String::new(), String::new())));
        let seen = handshake.clone();
        let mut ws =
            tokio_tungstenite::accept_hdr_async(tcp, move |req: &Request, resp: WsResponse| {
                let auth = req
                    .headers()
                    .get("authorization")
                    .map(|v| v.to_str().unwrap().to_string());
                *seen.lock().unwrap() = (auth.unwrap_or_default(), req.uri().to_string());
                Ok(resp)
            })
            .await
            .unwrap();
        let mut audio_bytes = 0;
        let mut controls = Vec::new();
        let mut sent_interim = false;
        while let Some(Ok(message)) = ws.next().await {
            match message {
                Message::Binary(bytes) => {
                    audio_bytes += bytes.len();
                    if audio_bytes >= 3_200 && !sent_interim {
                        sent_interim = true;
                        ws.send(Message::text(
                            json!({"type": "SpeechStarted", "channel": [0], "timestamp": 0.1})
                                .to_string(),
                        ))
                        .await
                        .unwrap();
                        ws.send(Message::text(json!({"type": "Results", "is_final": false, "speech_final": false,
                            "channel": {"alternatives": [{"transcript": "I want to", "confidence": 0.8}]}}).to_string())).await.unwrap();
                    }
                }
                Message::Text(text) => {
                    let control: Value = serde_json::from_str(text.as_str()).unwrap();
                    let kind = control["type"].as_str().unwrap().to_string();
                    controls.push(kind.clone());
                    match kind.as_str() {
                        "Finalize" => {
                            ws.send(Message::text(json!({"type": "Results", "is_final": true, "speech_final": false,
                                "from_finalize": true,
                                "channel": {"alternatives": [{"transcript": "I want to book a demo", "confidence": 0.97}]}}).to_string())).await.unwrap();
                        }
                        "CloseStream" => {
                            ws.send(Message::text(
                                json!({"type": "Metadata", "request_id": "r1"}).to_string(),
                            ))
                            .await
                            .unwrap();
                            ws.close(None).await.unwrap();
                            break;
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        let (auth, uri) = handshake.lock().unwrap().clone();
        let _ = report_tx.send((auth, uri, audio_bytes, controls));
    });
    let asr = DeepgramAsr::new(
        &format!("http://{addr}/v1"),
        "dg-key".into(),
        "nova-2",
        policy(),
    );
    let mut stream = asr
        .open(AsrContext {
            call_id: "call-1".into(),
            language: "en-IN".into(),
            sample_rate: 8_000,
            sim_script: Vec::new().into(),
        })
        .await
        .unwrap();
    let frame = vec![1000i16; 160];
    for _ in 0..15 {
        stream.push_audio(&frame, 8_000).unwrap();
    }
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::SpeechStarted
    );
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Interim("I want to".into())
    );
    stream.finalize().unwrap();
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Final {
            text: "I want to book a demo".into()
        }
    );
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::UtteranceEnd
    );
    tokio::time::timeout(Duration::from_secs(3), stream.close())
        .await
        .unwrap()
        .unwrap();
    let (auth, uri, audio_bytes, controls) =
        tokio::time::timeout(Duration::from_secs(3), report_rx)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(auth, "Token dg-key");
    assert!(uri.starts_with("/v1/listen?"), "{uri}");
    for part in [
        "encoding=linear16",
        "sample_rate=8000",
        "language=en-IN",
        "interim_results=true",
        "utterance_end_ms=",
        "model=nova-2",
    ] {
        assert!(uri.contains(part), "{uri} lacks {part}");
    }
    assert_eq!(audio_bytes, 15 * 320, "every frame went out as linear16");
    assert_eq!(controls, vec!["Finalize", "CloseStream"]);
}

#[tokio::test]
async fn openai_transcription_posts_each_utterance_as_wav() {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/v1/audio/transcriptions",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/audio/transcriptions", &headers, &body);
                    axum::Json(json!({"text": " Yes, tomorrow works. "}))
                },
            ),
        )
        .with_state(seen.clone());
    let addr = serve(app).await;
    let asr = OpenAiAsr::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        Some("sk-asr".into()),
        "whisper-1",
        policy(),
    );
    let mut stream = asr
        .open(AsrContext {
            call_id: "call-2".into(),
            language: "en-IN".into(),
            sample_rate: 8_000,
            sim_script: Vec::new().into(),
        })
        .await
        .unwrap();
    let samples = samples_of(&tone_pcm(8_000, 500));
    for frame in samples.chunks(160) {
        stream.push_audio(frame, 8_000).unwrap();
    }
    stream.finalize().unwrap();
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Final {
            text: "Yes, tomorrow works.".into()
        }
    );
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::UtteranceEnd
    );
    let (_, headers, body) = seen.all().remove(0);
    assert_eq!(headers["authorization"], "Bearer sk-asr");
    let content_type = headers["content-type"].to_str().unwrap().to_string();
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .expect("multipart body");
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains(&format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
    )));
    assert!(text.contains("name=\"language\"\r\n\r\nen\r\n"));
    assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    let wav = wav_in(&body);
    assert_eq!(
        u32::from_le_bytes([wav[24], wav[25], wav[26], wav[27]]),
        8_000
    );
    assert_eq!(wav_data_len(&body), samples.len() * 2);
}

/// The WAV file inside a multipart transcription request.
fn wav_in(body: &[u8]) -> &[u8] {
    let at = body
        .windows(4)
        .position(|w| w == b"RIFF")
        .expect("a WAV file");
    &body[at..]
}

/// The audio bytes the WAV file of a transcription request declares.
fn wav_data_len(body: &[u8]) -> usize {
    let wav = wav_in(body);
    u32::from_le_bytes([wav[40], wav[41], wav[42], wav[43]]) as usize
}

/// A per-utterance recognizer answers the loop's pause question (`peek`) with the words
/// so far as an interim, keeps the audio for the utterance's own transcription, and drops
/// an answer that comes back after the utterance ended.
#[tokio::test]
async fn openai_transcription_peeks_at_the_utterance_so_far_as_an_interim() {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/v1/audio/transcriptions",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/audio/transcriptions", &headers, &body);
                    let text = match seen.all().len() {
                        1 => "My number is 98765.",
                        2 => "My number is 98765 43210.",
                        _ => "late",
                    };
                    axum::Json(json!({ "text": text }))
                },
            ),
        )
        .with_state(seen.clone());
    let addr = serve(app).await;
    let asr = OpenAiAsr::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        None,
        "whisper-1",
        policy(),
    );
    let mut stream = asr
        .open(AsrContext {
            call_id: "call-peek".into(),
            language: "en".into(),
            sample_rate: 8_000,
            sim_script: Vec::new().into(),
        })
        .await
        .unwrap();
    let first = samples_of(&tone_pcm(8_000, 400));
    stream.push_audio(&first, 8_000).unwrap();
    assert!(
        stream.peek(true).unwrap(),
        "a per-utterance recognizer answers peeks"
    );
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Interim("My number is 98765.".into())
    );
    stream.push_audio(&first, 8_000).unwrap();
    stream.finalize().unwrap();
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Final {
            text: "My number is 98765 43210.".into()
        }
    );
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::UtteranceEnd
    );
    // The peek sent the audio so far; the utterance's transcription all of it.
    let all = seen.all();
    assert_eq!(wav_data_len(&all[0].2), first.len() * 2);
    assert_eq!(wav_data_len(&all[1].2), 2 * first.len() * 2);
    // Talk over the agent is asked about with the backchannel spellings as the prompt; the
    // utterance's own transcription carries none.
    let has_prompt = |body: &Bytes| String::from_utf8_lossy(body).contains("name=\"prompt\"");
    assert!(has_prompt(&all[0].2));
    assert!(!has_prompt(&all[1].2));
    // A peek followed by silence only is the utterance's transcript: no second request.
    stream.push_audio(&first, 8_000).unwrap();
    assert!(stream.peek(false).unwrap());
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Interim("late".into())
    );
    stream.push_audio(&vec![0i16; 4_000], 8_000).unwrap();
    stream.finalize().unwrap();
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Final {
            text: "late".into()
        }
    );
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::UtteranceEnd
    );
    assert_eq!(seen.all().len(), 3, "the peek's answer served as the final");
    // A peek whose utterance is dropped before the answer says nothing.
    stream.push_audio(&first, 8_000).unwrap();
    assert!(stream.peek(true).unwrap());
    stream.discard().unwrap();
    let late = tokio::time::timeout(Duration::from_millis(300), stream.next_event()).await;
    assert!(late.is_err(), "a stale peek was delivered: {late:?}");
}

#[tokio::test]
async fn faster_whisper_server_gets_its_model_in_model_name() {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/v1/audio/transcriptions",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/audio/transcriptions", &headers, &body);
                    axum::Json(json!({"text": "I am forty two."}))
                },
            ),
        )
        .with_state(seen.clone());
    let addr = serve(app).await;
    let asr = OpenAiAsr::new(
        reqwest::Client::new(),
        &format!("http://{addr}/v1"),
        None,
        "/models/whisper-tiny.en",
        policy(),
    )
    .with_form(TranscriptionForm::FasterWhisper);
    let mut stream = asr
        .open(AsrContext {
            call_id: "call-3".into(),
            language: "en-US".into(),
            sample_rate: 8_000,
            sim_script: Vec::new().into(),
        })
        .await
        .unwrap();
    stream
        .push_audio(&samples_of(&tone_pcm(8_000, 300)), 8_000)
        .unwrap();
    stream.finalize().unwrap();
    assert_eq!(
        stream.next_event().await.unwrap().unwrap(),
        AsrEvent::Final {
            text: "I am forty two.".into()
        }
    );
    let (_, headers, body) = seen.all().remove(0);
    assert!(headers.get("authorization").is_none());
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("name=\"model_name\"\r\n\r\n/models/whisper-tiny.en\r\n"));
    assert!(!text.contains("name=\"model\""));
    assert!(text.contains("name=\"response_format\"\r\n\r\njson\r\n"));
    assert!(text.contains("name=\"temperature\"\r\n\r\n0\r\n"));
}

// ---------------------------------------------------------------------------
// End to end: a sim-carrier call on the OpenAI-compatible LLM and TTS.

/// A fake OpenAI-compatible server for whole calls: the reply numbers the
/// caller's turns and ends the call on the second; speech is a tone as long
/// as the text.
fn fake_openai(seen: Seen) -> Router {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/chat/completions", &headers, &body);
                    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let user_turns = request["messages"]
                        .as_array()
                        .map_or(0, |m| m.iter().filter(|m| m["role"] == "user").count());
                    let (words, end): (Vec<String>, bool) = if user_turns >= 2 {
                        (
                            vec!["Thanks,".into(), " that's all.".into(), " Goodbye!".into()],
                            true,
                        )
                    } else {
                        (
                            vec!["Fake".into(), format!(" reply number {user_turns}.")],
                            false,
                        )
                    };
                    let words: Vec<&str> = words.iter().map(String::as_str).collect();
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(chunked_body(
                            sse(&completion_events(&words, end)),
                            Duration::from_millis(2),
                        ))
                        .unwrap()
                },
            ),
        )
        .route(
            "/v1/audio/speech",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                    seen.push("/v1/audio/speech", &headers, &body);
                    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let words = request["input"]
                        .as_str()
                        .unwrap_or("")
                        .split_whitespace()
                        .count() as u32;
                    let pcm = tone_pcm(24_000, 200 + 60 * words);
                    Response::builder()
                        .header("content-type", "audio/pcm")
                        .body(chunked_body(
                            odd_chunks(&pcm, 9_601),
                            Duration::from_millis(2),
                        ))
                        .unwrap()
                },
            ),
        )
        .with_state(seen)
}

/// The app with the platform's OpenAI account pointed at a fake, and the
/// calls these tests make on it as (status, body) pairs.
struct CallTestApp {
    server: TestApp,
}

impl CallTestApp {
    async fn start(openai_base: &str) -> Self {
        logs();
        let server = TestApp::spawn_with_settings(|settings| {
            settings.providers.openai = VendorAccount {
                api_key: Some("sk-platform-key".into()),
                base_url: openai_base.to_string(),
            };
            settings.providers.platform_fee_paise = 100;
        })
        .await;
        Self { server }
    }

    /// `voxline admin …` on this app's database; returns its one JSON line and stdout.
    async fn admin(&self, args: &[&str]) -> (Value, String) {
        let out = self.server.admin(args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "admin {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (serde_json::from_str(stdout.trim()).unwrap(), stdout)
    }

    async fn api(
        &self,
        method: reqwest::Method,
        key: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, String) {
        let mut req = self
            .server
            .http
            .request(method, format!("{}{path}", self.server.base))
            .bearer_auth(key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    async fn get(&self, key: &str, path: &str) -> (u16, String) {
        self.api(reqwest::Method::GET, key, path, None).await
    }

    /// A funded workspace with a sim number; returns (org id, API key).
    async fn workspace(&self) -> (String, String) {
        let (org, _) = self.admin(&["org", "create", "--name", "Providers"]).await;
        let org = org["id"].as_str().unwrap().to_string();
        let (key, _) = self
            .admin(&["key", "create", "--org", &org, "--name", "k"])
            .await;
        self.admin(&["wallet", "credit", "--org", &org, "--paise", "100000"])
            .await;
        self.admin(&[
            "number",
            "add",
            "--org",
            &org,
            "--phone",
            "+918035740111",
            "--provider",
            "sim",
        ])
        .await;
        (org, key["key"].as_str().unwrap().to_string())
    }

    /// Places a call with a two-line caller script and waits for it to complete.
    async fn call_and_wait(&self, key: &str, agent_id: &str) -> Value {
        let (status, body) = self
            .api(
                reqwest::Method::POST,
                key,
                "/api/calls",
                Some(
                    json!({"agentId": agent_id, "to": "+918035740142", "variables": {
                    "name": "Asha", "simScript": ["Hello, who is this?", "Okay, thank you"]}}),
                ),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let call_id = serde_json::from_str::<Value>(&body).unwrap()["callId"]
            .as_str()
            .unwrap()
            .to_string();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(45);
        loop {
            let (_, body) = self.get(key, &format!("/api/calls/{call_id}")).await;
            let call: Value = serde_json::from_str(&body).unwrap();
            if call["status"] == "Completed" || call["status"] == "Failed" {
                return call;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "call never finished: {call}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn openai_agent() -> Value {
    json!({"name": "Fake OpenAI agent", "welcomeMessage": "Hello {name}, this is the fake agent.",
        "prompt": "Talk to {name}.", "llmProvider": "openai", "llmModel": "fake-model",
        "ttsProvider": "openai", "asrProvider": "sim", "perMinuteRatePaise": 600})
}

/// Root-mean-square of the agent (right) channel of a stereo 16-bit WAV.
fn agent_channel_rms(wav: &[u8]) -> f64 {
    let data = &wav[44..];
    let right: Vec<f64> = data
        .chunks_exact(4)
        .map(|f| f64::from(i16::from_le_bytes([f[2], f[3]])))
        .collect();
    (right.iter().map(|s| s * s).sum::<f64>() / right.len().max(1) as f64).sqrt()
}

#[tokio::test]
async fn a_sim_call_runs_on_the_openai_compatible_llm_and_tts() {
    let seen = Seen::default();
    let fake = serve(fake_openai(seen.clone())).await;
    let app = CallTestApp::start(&format!("http://{fake}/v1")).await;
    let (org, key) = app.workspace().await;
    let (status, body) = app
        .api(
            reqwest::Method::POST,
            &key,
            "/api/agents",
            Some(openai_agent()),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let agent: Value = serde_json::from_str(&body).unwrap();
    let call = app.call_and_wait(&key, agent["id"].as_str().unwrap()).await;
    let call_id = call["id"].as_str().unwrap();
    assert_eq!(call["status"], "Completed", "{call}");

    let (_, transcript) = app
        .get(&key, &format!("/api/calls/{call_id}/transcript"))
        .await;
    let transcript: Value = serde_json::from_str(&transcript).unwrap();
    let text = transcript["transcriptText"].as_str().unwrap();
    assert!(
        text.starts_with("Bot: Hello Asha, this is the fake agent."),
        "{text}"
    );
    assert!(
        text.contains("Candidate: Hello, who is this?\nBot: Fake reply number 1."),
        "{text}"
    );
    assert!(
        text.contains("Candidate: Okay, thank you.\nBot: Thanks, that's all. Goodbye!"),
        "{text}"
    );

    // The LLM saw the filled prompt and the conversation; speech was asked for each sentence.
    let requests = seen.all();
    // The completed call's scorecard may also have been asked for (in JSON mode) by now.
    let chat: Vec<Value> = requests
        .iter()
        .filter(|(p, _, _)| p == "/v1/chat/completions")
        .map(|(_, _, b)| serde_json::from_slice::<Value>(b).unwrap())
        .filter(|body| body.get("response_format").is_none())
        .collect();
    assert_eq!(chat.len(), 2);
    assert_eq!(chat[0]["model"], "fake-model");
    assert_eq!(
        chat[0]["messages"][0],
        json!({"role": "system", "content": "Talk to Asha."})
    );
    let speech = requests
        .iter()
        .filter(|(p, _, _)| p == "/v1/audio/speech")
        .count();
    assert!(
        speech >= 3,
        "welcome and both replies were synthesized ({speech})"
    );
    assert!(
        seen.auth_headers()
            .iter()
            .all(|h| h == "Bearer sk-platform-key")
    );

    // The recording holds the agent's synthesized audio on its channel.
    let wav = std::fs::read(
        app.server
            .data_dir
            .join("recordings")
            .join(&org)
            .join(format!("{call_id}.wav")),
    )
    .expect("the call was recorded");
    let rms = agent_channel_rms(&wav);
    assert!(
        rms > 500.0,
        "agent channel carries the fake TTS tone (rms {rms})"
    );
    let (_, recordings) = app.get(&key, "/api/recordings").await;
    assert!(recordings.contains(call_id), "{recordings}");

    // Platform keys: the bundled rate, and the usage the fake reported.
    let billing = app
        .server
        .state()
        .store
        .call_provider_billing(call_id.parse().expect("call id"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(billing.rate_paise, voxline::domain::Paise(600));
    assert!(!billing.own_credentials);
    assert_eq!(
        (billing.llm_prompt_tokens, billing.llm_completion_tokens),
        (84, 14)
    );
    let (_, wallet) = app.get(&key, "/api/wallet").await;
    let wallet: Value = serde_json::from_str(&wallet).unwrap();
    assert_eq!(wallet["balancePaise"], 100_000 - 600);
    app.server.shutdown().await;
}

#[tokio::test]
async fn a_workspace_credential_replaces_the_platform_key_stays_secret_and_bills_the_platform_fee()
{
    let seen = Seen::default();
    let fake = serve(fake_openai(seen.clone())).await;
    let base = format!("http://{fake}/v1");
    let app = CallTestApp::start("http://127.0.0.1:9/unused-platform-url").await;
    let (org, key) = app.workspace().await;
    let secret = "sk-workspace-0123456789-very-secret";
    let credential = json!({"apiKey": secret, "baseUrl": base}).to_string();
    let (stored, stdout) = app
        .admin(&[
            "credential",
            "set",
            "--org",
            &org,
            "--kind",
            "openai",
            "--json",
            &credential,
        ])
        .await;
    assert_eq!(stored["stored"], true);
    assert!(!stdout.contains(secret));

    let (_, body) = app
        .api(
            reqwest::Method::POST,
            &key,
            "/api/agents",
            Some(openai_agent()),
        )
        .await;
    let agent: Value = serde_json::from_str(&body).unwrap();
    let agent_id = agent["id"].as_str().unwrap().to_string();
    let call = app.call_and_wait(&key, &agent_id).await;
    let call_id = call["id"].as_str().unwrap().to_string();
    assert_eq!(call["status"], "Completed", "{call}");

    // Every vendor request carried the workspace's key, none the platform's.
    let auth = seen.auth_headers();
    assert!(auth.len() >= 4, "{auth:?}");
    assert!(
        auth.iter().all(|h| *h == format!("Bearer {secret}")),
        "{auth:?}"
    );

    // Billed at the platform fee: one started minute at 100 paise.
    let billing = app
        .server
        .state()
        .store
        .call_provider_billing(call_id.parse().expect("call id"))
        .await
        .unwrap()
        .unwrap();
    assert!(billing.own_credentials);
    assert_eq!(billing.rate_paise, voxline::domain::Paise(100));
    let (_, wallet) = app.get(&key, "/api/wallet").await;
    assert_eq!(
        serde_json::from_str::<Value>(&wallet).unwrap()["balancePaise"],
        100_000 - 100
    );

    // The text endpoints use it too.
    let (status, chat) = app
        .api(
            reqwest::Method::POST,
            &key,
            &format!("/api/agents/{agent_id}/chat"),
            Some(json!({"message": "Hi there", "variables": {"name": "Ravi"}})),
        )
        .await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(
        serde_json::from_str::<Value>(&chat).unwrap()["message"],
        "Fake reply number 1."
    );

    // The key appears in no API answer and no log line.
    let reads = [
        format!("/api/calls/{call_id}"),
        format!("/api/calls/{call_id}/transcript"),
        format!("/api/calls/{call_id}/turns"),
        "/api/calls".to_string(),
        format!("/api/agents/{agent_id}"),
        "/api/agents".to_string(),
        "/api/balances".to_string(),
        "/api/wallet".to_string(),
        "/api/wallet/transactions".to_string(),
        "/api/numbers".to_string(),
    ];
    for path in reads {
        let (status, body) = app.get(&key, &path).await;
        assert!(status < 500, "{path}: {status}");
        assert!(!body.contains(secret), "{path} leaks the key");
        assert!(
            !body.contains("sk-workspace"),
            "{path} leaks part of the key"
        );
    }
    let (_, openapi) = app.get("", "/openapi.json").await;
    assert!(!openapi.contains(secret));
    let logged = String::from_utf8_lossy(&logs().0.lock().unwrap()).to_string();
    assert!(
        logged.contains(&call_id),
        "the capture sees the server's logs"
    );
    assert!(
        !logged.contains(secret),
        "a log line holds the workspace key"
    );
    assert!(
        !logged.contains("sk-workspace"),
        "a log line holds part of the workspace key"
    );
    app.server.shutdown().await;
}

#[tokio::test]
async fn a_dead_llm_ends_the_call_with_llm_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = listener.local_addr().unwrap();
    drop(listener);
    let app = CallTestApp::start(&format!("http://{dead}/v1")).await;
    let (org, key) = app.workspace().await;
    let mut agent = openai_agent();
    agent["ttsProvider"] = json!("sim");
    let (_, body) = app
        .api(reqwest::Method::POST, &key, "/api/agents", Some(agent))
        .await;
    let agent: Value = serde_json::from_str(&body).unwrap();
    let call = app.call_and_wait(&key, agent["id"].as_str().unwrap()).await;
    let call_id = call["id"].as_str().unwrap();
    let ended: Option<String> = sqlx_ended_reason(&app, &org, call_id).await;
    assert_eq!(ended.as_deref(), Some("llm-error"), "{call}");
    let (_, transcript) = app
        .get(&key, &format!("/api/calls/{call_id}/transcript"))
        .await;
    assert!(
        transcript.contains("Bot: Hello Asha, this is the fake agent."),
        "the welcome played before the LLM was needed: {transcript}"
    );
    let logged = String::from_utf8_lossy(&logs().0.lock().unwrap()).to_string();
    assert!(
        logged
            .lines()
            .any(|l| l.contains(call_id) && l.contains("llm")),
        "the failure is logged with the call id"
    );
    app.server.shutdown().await;
}

/// The call's `endedReason`, as the webhook would carry it.
async fn sqlx_ended_reason(app: &CallTestApp, org_id: &str, call_id: &str) -> Option<String> {
    app.server
        .state()
        .store
        .call_detail(
            org_id.parse().expect("org id"),
            call_id.parse().expect("call id"),
        )
        .await
        .unwrap()
        .and_then(|row| row.call.ended_reason)
}

/// Without a Piper server, the speaking callee's `speech` voice is espeak-ng: real speech at
/// the carrier's 8 kHz, a pause between the sentences of a line.
#[tokio::test]
async fn the_speaking_callee_falls_back_to_espeak_without_piper() {
    if !espeak::installed("espeak-ng").await {
        eprintln!(
            "SKIPPED the_speaking_callee_falls_back_to_espeak_without_piper: espeak-ng is not installed"
        );
        return;
    }
    use voxline::calls::sim_callee::{CalleeVoiceKind, callee_voice};
    let mut settings = voxline::providers::settings::ProviderSettings::default();
    // Nothing listens on port 9 (discard): no Piper here.
    settings.piper.base_url = "http://127.0.0.1:9".into();
    assert!(
        callee_voice(CalleeVoiceKind::Synthetic, &settings)
            .await
            .unwrap()
            .is_none()
    );
    let voice = callee_voice(CalleeVoiceKind::Speech, &settings)
        .await
        .unwrap()
        .expect("a voice");
    let pcm = voice
        .speak("I am 34 years old. I live in Boston.")
        .await
        .unwrap();
    let seconds = pcm.len() as f64 / 8_000.0;
    assert!((2.0..8.0).contains(&seconds), "{seconds} s of speech");
    let rms = |s: &[i16]| {
        (s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / s.len().max(1) as f64).sqrt()
    };
    assert!(rms(&pcm) > 300.0, "speech has energy");
    // Between the first and the last speech, the sentence pause: 200 ms of near silence.
    let windows: Vec<f64> = pcm.windows(1_600).step_by(80).map(rms).collect();
    let first = windows.iter().position(|&r| r > 300.0).unwrap();
    let last = windows.iter().rposition(|&r| r > 300.0).unwrap();
    assert!(
        windows[first..last].iter().any(|&r| r < 50.0),
        "a pause between the sentences"
    );
}

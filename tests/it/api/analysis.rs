//! Post-call analysis (issue: summary, structured extraction, success): an
//! agent's plan is validated on write, a scripted sim call is analyzed from
//! what the callee said, the result is read back and delivered with
//! `call.completed`, an OpenAI-compatible model's invalid answer is
//! repaired, a failing one ends `failed` after the webhook went out, and a
//! restart finishes pending analyses once.

use crate::support::{TestApp, Workspace, eventually};
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// A plan with one field of every type and a pass/fail verdict.
fn screening_plan() -> Value {
    json!({
        "summary": {"enabled": true},
        "fields": [
            {"name": "full_name", "type": "string", "description": "Your full name", "required": true},
            {"name": "notice_days", "type": "integer", "description": "Your notice period in days", "minimum": 0, "maximum": 180},
            {"name": "experience_years", "type": "number", "description": "Your years of experience"},
            {"name": "can_relocate", "type": "boolean", "description": "Whether you can relocate to Bengaluru"},
            {"name": "shift", "type": "enum", "description": "Your preferred shift", "options": ["morning", "evening", "night"]},
            {"name": "join_date", "type": "date", "description": "The date you can join"}
        ],
        "success": {"rubric": "passFail", "prompt": "The candidate answered every screening question."},
        "timeoutSeconds": 30
    })
}

/// What the simulated candidate says, one line per agent question.
const ANSWERS: &[&str] = &[
    "Yes, I have a minute.",
    "My name is Asha Rao.",
    "It is 30 days.",
    "About 5 years.",
    "Yes, I can relocate.",
    "Evening works best for me.",
    "I can join on 15 March 2027.",
];

async fn place(app: &TestApp, ws: &Workspace, agent: &str, to: &str, variables: Value) -> String {
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": to, "name": "Asha", "variables": variables}),
    )
    .await
    .expect(201)
    .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

/// Polls the call read until its analysis is no longer pending. The deadline
/// covers a scripted call of seven answers spoken in real time (about 40 s on
/// a quiet machine, more in CI beside 200 other tests) plus the analysis.
async fn analyzed(app: &TestApp, key: &str, call_id: &str) -> Value {
    eventually(Duration::from_secs(180), "the analysis", || async {
        let r = app.get(key, &format!("/api/calls/{call_id}")).await;
        let status = r.body["analysis"]["status"].as_str().unwrap_or_default();
        (!status.is_empty() && status != "pending").then_some(r.body)
    })
    .await
}

#[derive(Clone, Debug)]
struct Received {
    event: String,
    body: Value,
}

async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let seen = Arc::new(Mutex::new(Vec::<Received>::new()));
    let app = Router::new().route(
        "/hook",
        post({
            let seen = seen.clone();
            move |headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                async move {
                    let event = headers
                        .get("x-service-event")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    seen.lock().unwrap().push(Received { event, body });
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/hook"), seen)
}

async fn subscribe(app: &TestApp, ws: &Workspace, url: &str) {
    app.admin_ok(&[
        "webhook",
        "add",
        "--org",
        &ws.org_id.to_string(),
        "--url",
        url,
        "--event",
        "call.completed",
        "--event",
        "call.analyzed",
        "--event",
        "rating.completed",
    ])
    .await;
}

fn message_of(r: &crate::support::Reply) -> String {
    r.message().to_string()
}

#[tokio::test]
async fn bad_plans_get_400_naming_the_path() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Plans").await;
    let cases = [
        (
            json!({"analysis": {"fields": [{"name": "a", "type": "colour"}]}}),
            "analysis.fields[0].type",
        ),
        (
            json!({"analysis": {"fields": [{"name": "a", "type": "string"}, {"name": "b", "type": "enum"}]}}),
            "analysis.fields[1].options",
        ),
        (
            json!({"analysis": {"fields": [{"name": "a"}, {"name": "a", "type": "number"}]}}),
            "analysis.fields[1].name",
        ),
        (
            json!({"analysis": {"fields": [{"name": "1st choice"}]}}),
            "analysis.fields[0].name",
        ),
        (
            json!({"analysis": {"schema": {"type": "object", "properties": {"a": {"type": "strange"}}}}}),
            "analysis.schema",
        ),
        (
            json!({"analysis": {"success": {"rubric": "checklist"}}}),
            "analysis.success.criteria",
        ),
        (
            json!({"analysis": {"success": {"rubric": "vibes"}}}),
            "analysis.success.rubric",
        ),
        (
            json!({"analysis": {"timeoutSeconds": 0}}),
            "analysis.timeoutSeconds",
        ),
        (
            json!({"extraction": {"fields": [{"name": "shift", "type": "enum", "options": []}]}}),
            "extraction.fields[0].options",
        ),
    ];
    for (plan, path) in cases {
        let mut body = plan.clone();
        body["name"] = json!("Bad plan");
        let r = app.post(&ws.key, "/api/agents", body).await.expect(400);
        assert!(message_of(&r).contains(path), "{plan}: {}", message_of(&r));
    }
    // Nothing was stored.
    let listed = app.get(&ws.key, "/api/agents").await.expect(200).body;
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");

    // The spec's spelling and the plan read back the same list.
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Spelled", "extraction": {"fields": [{"name": "city", "description": "City"}]}}),
        )
        .await;
    assert_eq!(agent["analysis"]["fields"][0]["name"], "city");
    assert_eq!(agent["analysis"]["fields"][0]["type"], "string");
    assert_eq!(agent["extraction"]["fields"], agent["analysis"]["fields"]);
    assert_eq!(agent["analysis"]["timeoutSeconds"], 60);
    let id = agent["id"].as_str().unwrap();
    let patched = app
        .patch(
            &ws.key,
            &format!("/api/agents/{id}"),
            json!({"analysis": screening_plan()}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(patched["extraction"]["fields"].as_array().unwrap().len(), 6);
    assert_eq!(patched["analysis"]["success"]["rubric"], "passFail");
}

#[tokio::test]
async fn a_scripted_sim_call_yields_exactly_what_the_callee_said() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Screening", 5).await;
    let (url, seen) = receiver().await;
    subscribe(&app, &ws, &url).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Screener", "welcomeMessage": "Hello {name}, do you have a minute for a few questions?",
                   "analysis": screening_plan()}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845013001",
        json!({"simScript": ANSWERS}),
    )
    .await;
    let read = analyzed(&app, &ws.key, &call).await;
    let analysis = &read["analysis"];
    assert_eq!(analysis["status"], "done", "{read}");
    // Tokens per stage: the conversation's replies and the analysis.
    assert!(
        read["usage"]["conversation"]["completionTokens"]
            .as_i64()
            .unwrap()
            > 0
    );
    assert_eq!(
        read["usage"]["analysis"]["promptTokens"], analysis["promptTokens"],
        "{read}"
    );
    assert!(read["usage"]["analysis"]["promptTokens"].as_i64().unwrap() > 0);
    let expected = json!({
        "full_name": "Asha Rao",
        "notice_days": 30,
        "experience_years": 5.0,
        "can_relocate": true,
        "shift": "evening",
        "join_date": "2027-03-15",
    });
    let data = &analysis["structuredData"];
    for (name, value) in expected.as_object().unwrap() {
        let got = &data[name];
        let same = match (got.as_f64(), value.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => got == value,
        };
        assert!(
            same,
            "{name}: got {got}, want {value}; transcript {}",
            read["transcript"]
        );
    }
    assert_eq!(analysis["success"]["pass"], true, "{analysis}");
    assert_eq!(analysis["success"]["rubric"], "passFail");
    assert_eq!(analysis["model"], "sim-1");
    let summary = analysis["summary"].as_str().unwrap();
    assert!(!summary.is_empty());
    assert_eq!(
        read["summary"], summary,
        "the call's summary is the analysis'"
    );
    assert_eq!(
        &read["extracted"], data,
        "extracted carries the structured data"
    );
    // The agent asked one question per field; nobody echoed the callee.
    let agent_lines: Vec<&str> = read["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["speaker"] == "Bot")
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert!(
        agent_lines.iter().all(|l| !l.contains("I heard you say")),
        "{agent_lines:?}"
    );
    assert!(
        agent_lines.iter().any(|l| l.contains("notice period")),
        "{agent_lines:?}"
    );

    // The transcript read carries it too.
    let transcript = app
        .get(&ws.key, &format!("/api/calls/{call}/transcript"))
        .await
        .expect(200)
        .body;
    assert_eq!(transcript["analysis"], read["analysis"]);

    // Lists filter by success and by analysis status.
    for (query, count) in [
        ("success=pass", 1),
        ("success=fail", 0),
        ("analysisStatus=done", 1),
        ("analysisStatus=failed", 0),
    ] {
        let listed = app
            .get(&ws.key, &format!("/api/calls?{query}"))
            .await
            .expect(200)
            .body;
        assert_eq!(listed["total"], count, "{query}: {listed}");
        if count == 1 {
            assert_eq!(listed["rows"][0]["analysis"]["status"], "done");
        }
    }
    let bad = app
        .get(&ws.key, "/api/calls?success=maybe")
        .await
        .expect(400);
    assert!(message_of(&bad).contains("success"), "{}", message_of(&bad));

    // call.completed carried everything, once; nothing followed.
    let completed = eventually(Duration::from_secs(30), "call.completed", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(completed.event, "call.completed");
    let body = &completed.body;
    assert_eq!(body["callId"], call.as_str());
    assert_eq!(body["status"], "completed");
    assert!(body["durationSeconds"].as_i64().unwrap() > 0);
    assert_eq!(body["summary"], summary);
    assert_eq!(&body["extracted"], data);
    assert_eq!(body["success"]["pass"], true);
    assert_eq!(body["analysis"]["status"], "done");
    let turns = body["transcript"].as_array().unwrap();
    assert!(
        turns
            .iter()
            .any(|t| t["speaker"] == "user" && t["text"] == ANSWERS[2])
    );
    assert!(body.get("recordingUrl").is_some(), "{body}");
    assert!(body["rating"]["overall"].is_number(), "{body}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let events: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.event.clone())
        .collect();
    assert_eq!(events, ["call.completed"]);

    // Every rubric, tried on this call without saving the plan.
    for (rubric, extra, check) in [
        ("numericScale", json!({}), "integer"),
        ("descriptiveScale", json!({}), "grade"),
        ("percentage", json!({}), "number"),
        (
            "checklist",
            json!({"criteria": [{"name": "Notice", "description": "Gave a notice period"}, {"name": "Date", "description": "Gave a joining date"}]}),
            "checklist",
        ),
    ] {
        let mut plan = screening_plan();
        let mut success = json!({"rubric": rubric, "prompt": "Answered the questions."});
        for (k, v) in extra.as_object().unwrap() {
            success[k] = v.clone();
        }
        plan["success"] = success;
        let r = app
            .post(
                &ws.key,
                &format!("/api/calls/{call}/analysis"),
                json!({"plan": plan}),
            )
            .await
            .expect(200)
            .body;
        assert_eq!(r["status"], "done", "{rubric}: {r}");
        assert_eq!(r["structuredData"], *data, "{rubric}");
        let value = &r["success"]["value"];
        match check {
            "integer" => assert!((1..=10).contains(&value.as_i64().unwrap()), "{r}"),
            "grade" => assert!(
                ["excellent", "good", "fair", "poor"].contains(&value.as_str().unwrap()),
                "{r}"
            ),
            "number" => assert!((0.0..=100.0).contains(&value.as_f64().unwrap()), "{r}"),
            _ => {
                let names: Vec<&str> = value
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["name"].as_str().unwrap())
                    .collect();
                assert_eq!(names, ["Notice", "Date"], "{r}");
            }
        }
        assert_eq!(r["success"]["pass"], true, "{rubric}: {r}");
    }
    // The agent's plan was not changed by the tries.
    let saved = app
        .get(&ws.key, &format!("/api/agents/{agent}"))
        .await
        .expect(200)
        .body;
    assert_eq!(saved["analysis"]["success"]["rubric"], "passFail");
    // A bad plan to try names its path.
    let r = app
        .post(
            &ws.key,
            &format!("/api/calls/{call}/analysis"),
            json!({"plan": {"fields": [{"name": "x", "type": "enum"}]}}),
        )
        .await
        .expect(400);
    assert!(
        message_of(&r).contains("plan.fields[0].options"),
        "{}",
        message_of(&r)
    );
}

/// Issue 28.3: the callee answers out of order. "I prefer hybrid work" comes
/// as the answer to the question about interest (said already at the
/// welcome) and only "Thanks, bye" to the work-mode question; the analyst
/// reads the whole call, as a real model does, and finds all four values.
#[tokio::test]
async fn a_value_given_out_of_order_is_still_extracted() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Order", 2).await;
    let plan = json!({
        "fields": [
            {"name": "yearsOfExperience", "type": "integer", "description": "Years of Rust experience"},
            {"name": "noticePeriodDays", "type": "integer", "description": "Notice period in days"},
            {"name": "interested", "type": "boolean", "description": "Whether interested in the role"},
            {"name": "workMode", "type": "enum", "description": "Preferred work mode", "options": ["remote", "hybrid", "office"]}
        ],
        "timeoutSeconds": 30
    });
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Recruiter", "welcomeMessage": "Hello {name}, this is Acme Hiring about the Rust role.",
                   "analysis": plan}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let script = [
        "Yes, I am interested in the role",
        "I have 5 years of Rust experience",
        "My notice period is 30 days",
        "I prefer hybrid work",
        "Thanks, bye",
    ];
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845013002",
        json!({"simScript": script}),
    )
    .await;
    let read = analyzed(&app, &ws.key, &call).await;
    assert_eq!(read["analysis"]["status"], "done", "{read}");
    assert_eq!(
        read["analysis"]["structuredData"],
        json!({
            "yearsOfExperience": 5,
            "noticePeriodDays": 30,
            "interested": true,
            "workMode": "hybrid",
        }),
        "transcript {}",
        read["transcript"]
    );
}

#[tokio::test]
async fn unanswered_calls_are_skipped_and_batches_rerun_with_progress() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Batch", 5).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Batcher", "analysis": screening_plan()}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let numbers = app.get(&ws.key, "/api/numbers").await.expect(200).body;
    let from = numbers["rows"][0]["phone"].as_str().unwrap().to_string();
    let batch = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "fromNumber": from, "contacts": [
                {"name": "A", "phone": "+919845013101", "variables": {"simScript": ANSWERS}},
                {"name": "B", "phone": "+919845013102", "variables": {"simScript": ANSWERS}},
                {"name": "C", "phone": "+919845013180"},
            ]}),
        )
        .await
        .expect(201)
        .body;
    let id = batch["id"].as_str().unwrap().to_string();
    let progress = eventually(Duration::from_secs(90), "the batch's analyses", || async {
        let p = app
            .get(&ws.key, &format!("/api/batches/{id}/analysis"))
            .await
            .expect(200)
            .body;
        (p["total"] == 3 && p["pending"] == 0).then_some(p)
    })
    .await;
    assert_eq!(progress["done"], 2, "{progress}");
    assert_eq!(progress["skipped"], 1, "{progress}");
    assert_eq!(progress["percent"], 100.0);
    let skipped = app
        .get(&ws.key, "/api/calls?analysisStatus=skipped")
        .await
        .expect(200)
        .body;
    assert_eq!(skipped["total"], 1, "{skipped}");

    let rerun = app
        .post_empty(&ws.key, &format!("/api/batches/{id}/analysis"))
        .await
        .expect(202)
        .body;
    assert_eq!(rerun["queued"], 2, "{rerun}");
    let again = eventually(Duration::from_secs(60), "the re-run", || async {
        let p = app
            .get(&ws.key, &format!("/api/batches/{id}/analysis"))
            .await
            .expect(200)
            .body;
        (p["pending"] == 0).then_some(p)
    })
    .await;
    assert_eq!(again["done"], 2, "{again}");
    app.post_empty(
        &ws.key,
        "/api/batches/00000000-0000-7000-8000-000000000000/analysis",
    )
    .await
    .expect(404);
}

/// An OpenAI-compatible stream of one content chunk.
fn sse(content: &str) -> ResponseTemplate {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": content}}]});
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 321, "completion_tokens": 45}});
    let done = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(format!(
            "data: {chunk}\n\ndata: {done}\n\ndata: {usage}\n\ndata: [DONE]\n\n"
        ))
}

/// Answers analysis requests from a queue, and conversation turns with a goodbye.
struct ModelScript {
    answers: Mutex<Vec<ResponseTemplate>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Respond for ModelScript {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        self.requests.lock().unwrap().push(body);
        let mut answers = self.answers.lock().unwrap();
        if answers.is_empty() {
            ResponseTemplate::new(500).set_body_string("the model crashed")
        } else {
            answers.remove(0)
        }
    }
}

async fn openai_agent(app: &TestApp, ws: &Workspace, llm: &MockServer, plan: Value) -> String {
    let credential = json!({"apiKey": "sk-test", "baseUrl": format!("{}/v1", llm.uri())});
    app.set_credential(ws, "openai", &credential).await;
    app.create_agent(
        &ws.key,
        json!({"name": "Modelled", "welcomeMessage": "Hello, a quick question?", "analysis": plan,
               "llmProvider": "openai", "llmModel": "analyst-1"}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn an_invalid_model_answer_is_repaired_with_the_validation_error() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Repair", 5).await;
    let llm = MockServer::start().await;
    let requests = Arc::new(Mutex::new(Vec::new()));
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"response_format": {"type": "json_schema"}})))
        .respond_with(ModelScript {
            answers: Mutex::new(vec![
                sse(r#"{"summary": "Asha gave her notice.", "structuredData": {"notice_days": "thirty"}}"#),
                sse(r#"{"summary": "Asha gave a 30 day notice.", "structuredData": {"notice_days": 30}}"#),
            ]),
            requests: requests.clone(),
        })
        .mount(&llm)
        .await;
    let plan = json!({"fields": [{"name": "notice_days", "type": "integer", "description": "Notice period in days", "required": true, "maximum": 180}]});
    // The call itself runs on the sim model; the analysis is re-run on the real one.
    let agent = app
        .create_agent(&ws.key, json!({"name": "Sim first", "analysis": plan}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845013201",
        json!({"simScript": ["Yes.", "30 days."]}),
    )
    .await;
    analyzed(&app, &ws.key, &call).await;
    openai_agent(&app, &ws, &llm, json!({})).await;
    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"llmProvider": "openai", "llmModel": "analyst-1"}),
    )
    .await
    .expect(200);
    let r = app
        .post_empty(&ws.key, &format!("/api/calls/{call}/analysis"))
        .await
        .expect(200)
        .body;
    assert_eq!(r["status"], "done", "{r}");
    assert_eq!(r["structuredData"]["notice_days"], 30);
    assert_eq!(r["summary"], "Asha gave a 30 day notice.");
    assert_eq!(r["model"], "analyst-1");
    assert_eq!(r["promptTokens"], 642, "tokens of both requests: {r}");
    assert_eq!(r["completionTokens"], 90);
    let seen = requests.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let format = &seen[0]["response_format"];
    assert_eq!(format["json_schema"]["strict"], true);
    let schema = &format["json_schema"]["schema"];
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(
        schema["properties"]["structuredData"]["properties"]["notice_days"]["maximum"],
        180.0
    );
    assert!(seen[0]["max_tokens"].as_u64().is_some());
    let repair = seen[1]["messages"].as_array().unwrap();
    let last = repair.last().unwrap()["content"].as_str().unwrap();
    assert!(last.contains("/structuredData/notice_days"), "{last}");
}

#[tokio::test]
async fn a_failing_model_ends_failed_after_the_webhook_went_out_and_nothing_follows() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Failing", 5).await;
    let (url, seen) = receiver().await;
    subscribe(&app, &ws, &url).await;
    let llm = MockServer::start().await;
    let requests = Arc::new(Mutex::new(Vec::new()));
    // Every analysis (and rating) request fails slowly: past the 1 s wait.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(
            json!({"response_format": {"type": "json_schema"}}),
        ))
        .respond_with(
            ResponseTemplate::new(500)
                .set_body_string("the model crashed")
                .set_delay(Duration::from_millis(700)),
        )
        .mount(&llm)
        .await;
    // Conversation turns get a short reply.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ModelScript {
            answers: Mutex::new((0..10).map(|_| sse("Thank you. Goodbye!")).collect()),
            requests: requests.clone(),
        })
        .mount(&llm)
        .await;
    let agent = openai_agent(
        &app,
        &ws,
        &llm,
        json!({"fields": [{"name": "notice_days", "type": "integer"}], "timeoutSeconds": 1}),
    )
    .await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845013301",
        json!({"simScript": ["Yes.", "Bye."]}),
    )
    .await;
    let completed = eventually(Duration::from_secs(30), "call.completed", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(completed.event, "call.completed");
    assert_eq!(
        completed.body["analysis"]["status"], "pending",
        "{}",
        completed.body
    );
    let read = analyzed(&app, &ws.key, &call).await;
    let analysis = &read["analysis"];
    assert_eq!(analysis["status"], "failed", "{read}");
    let error = analysis["error"].as_str().unwrap();
    assert!(
        error.contains("500") || error.contains("crashed"),
        "{error}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.event.clone())
        .collect();
    assert_eq!(events, ["call.completed"], "nothing follows a failure");
    let failed = app
        .get(&ws.key, "/api/calls?analysisStatus=failed")
        .await
        .expect(200)
        .body;
    assert_eq!(failed["total"], 1);
}

#[tokio::test]
async fn a_restart_finishes_pending_analyses_each_once() {
    let mut app = TestApp::spawn().await;
    let ws = app.calling_workspace("Restart", 5).await;
    let (url, seen) = receiver().await;
    subscribe(&app, &ws, &url).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Slow", "analysis": {"fields": [
                {"name": "notice_days", "type": "integer", "description": "Your notice period in days"}
            ]}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut calls = Vec::new();
    for i in 0..3 {
        // The sim model takes 4 s to analyze each of these.
        calls.push(
            place(
                &app,
                &ws,
                &agent,
                &format!("+91984501340{i}"),
                json!({"simScript": ["Yes.", "30 days."], "simAnalysisDelayMs": 4000}),
            )
            .await,
        );
    }
    for call in &calls {
        eventually(Duration::from_secs(60), "the call to end", || async {
            let r = app.get(&ws.key, &format!("/api/calls/{call}")).await;
            (r.body["analysis"]["status"] == "pending").then_some(())
        })
        .await;
    }
    app.restart().await;
    for call in &calls {
        let read = analyzed(&app, &ws.key, call).await;
        assert_eq!(read["analysis"]["status"], "done", "{read}");
        let row = app
            .store()
            .analysis(ws.org_id, call.parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.version, 1, "analyzed once");
    }
    let completed = eventually(Duration::from_secs(30), "three call.completed", || async {
        let seen = seen.lock().unwrap();
        (seen.len() >= 3).then(|| seen.clone())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(seen.lock().unwrap().len(), 3, "one call.completed each");
    for received in completed {
        assert_eq!(received.event, "call.completed");
        assert_eq!(received.body["analysis"]["status"], "done");
    }
}

#[tokio::test]
async fn the_openapi_document_describes_the_plan_endpoints_and_webhooks() {
    let app = TestApp::spawn().await;
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    assert_eq!(
        doc["openapi"].as_str().map(|v| v.starts_with("3.1")),
        Some(true)
    );
    for event in ["call.completed", "call.analyzed", "rating.completed"] {
        let op = &doc["webhooks"][event]["post"];
        assert!(op["description"].as_str().is_some(), "{event}: {op}");
        assert!(op["requestBody"]["content"]["application/json"]["schema"]["$ref"].is_string());
    }
    let schemas = &doc["components"]["schemas"];
    let completed = &schemas["CallCompletedEvent"]["properties"];
    for field in [
        "status",
        "durationSeconds",
        "transcript",
        "summary",
        "extracted",
        "success",
        "analysis",
        "rating",
        "recordingUrl",
    ] {
        assert!(completed.get(field).is_some(), "CallCompletedEvent.{field}");
    }
    assert!(schemas["AnalysisPlan"]["properties"]["fields"].is_object());
    assert!(schemas["AnalysisView"]["properties"]["structuredData"].is_object());
    for (path, method) in [
        ("/api/calls/{callId}/analysis", "post"),
        ("/api/batches/{batchId}/analysis", "post"),
        ("/api/batches/{batchId}/analysis", "get"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
    assert!(
        schemas["AgentSpec"]["properties"]["analysis"].is_object()
            || doc.to_string().contains("AnalysisPlan"),
        "agents carry the plan"
    );
}

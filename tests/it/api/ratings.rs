//! Ratings (spec "Rating (scorecard)", "Ratings" endpoints; decisions §6, §8):
//! a completed sim call is scored in the background with its agent's
//! template, read back through every endpoint, re-scored on request, and
//! reported to webhooks with or after `call.completed`.

use crate::support::{TestApp, Workspace, eventually, reply, utc};
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::domain::clock::ManualClock;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const ENGAGED: &[&str] = &[
    "Yes, I have a minute.",
    "I have five years of Rust backend experience and I can join next month.",
    "Thanks, bye.",
];
const CURT: &[&str] = &["No.", "Not interested, bye."];

async fn template_agent(app: &TestApp, ws: &Workspace) -> String {
    app.create_agent(
        &ws.key,
        json!({
            "name": "Screener",
            "welcomeMessage": "Hello {name}, do you have a minute?",
            "ratingTemplate": {"columns": [
                {"name": "Experience", "description": "Years of Rust and backend engineering experience"},
                {"name": "Availability", "description": "When the candidate can join or start"}
            ]}
        }),
    )
    .await["id"]
        .as_str()
        .expect("id")
        .to_string()
}

async fn place(
    app: &TestApp,
    ws: &Workspace,
    agent: &str,
    to: &str,
    name: &str,
    variables: Value,
) -> String {
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": to, "name": name, "variables": variables}),
    )
    .await
    .expect(201)
    .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

/// Polls until the call's rating reads 200 (done or failed).
async fn rating(app: &TestApp, key: &str, call_id: &str) -> Value {
    eventually(Duration::from_secs(60), "the rating", || async {
        let r = app.get(key, &format!("/api/ratings/{call_id}")).await;
        (r.status == StatusCode::OK).then_some(r.body)
    })
    .await
}

/// Polls until the call has ended.
async fn ended(app: &TestApp, key: &str, call_id: &str) -> Value {
    eventually(Duration::from_secs(60), "the call to end", || async {
        let r = app.get(key, &format!("/api/calls/{call_id}")).await;
        let terminal = ["completed", "failed", "no-answer", "busy", "canceled"]
            .contains(&r.body["rawStatus"].as_str().unwrap_or_default());
        terminal.then_some(r.body)
    })
    .await
}

fn overall(r: &Value) -> f64 {
    r["overallRating"].as_f64().expect("overallRating")
}

fn check_scorecard(r: &Value, columns: &[&str]) {
    assert_eq!(r["status"], "done", "{r}");
    let cols = r["columns"].as_array().expect("columns");
    let names: Vec<&str> = cols.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, columns);
    let mut sum = 0.0;
    for c in cols {
        let score = c["score"].as_f64().expect("score");
        assert!((0.0..=10.0).contains(&score), "{c}");
        assert!(!c["reason"].as_str().unwrap_or_default().is_empty(), "{c}");
        sum += score;
    }
    let mean = ((sum / cols.len() as f64) * 100.0).round() / 100.0;
    assert_eq!(overall(r), mean);
}

#[tokio::test]
async fn completed_calls_are_rated_and_read_back_every_way() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Ratings", 5).await;
    let agent = template_agent(&app, &ws).await;
    let engaged = place(
        &app,
        &ws,
        &agent,
        "+919845012310",
        "Asha",
        json!({"simScript": ENGAGED}),
    )
    .await;
    let curt = place(
        &app,
        &ws,
        &agent,
        "+919845012311",
        "Ravi",
        json!({"simScript": CURT}),
    )
    .await;
    // 80–84 never answer: no conversation, so no rating.
    let unanswered = place(&app, &ws, &agent, "+919845012381", "Nobody", json!({})).await;

    let a = rating(&app, &ws.key, &engaged).await;
    let b = rating(&app, &ws.key, &curt).await;
    check_scorecard(&a, &["Experience", "Availability"]);
    check_scorecard(&b, &["Experience", "Availability"]);
    assert_eq!(a["candidateName"], "Asha");
    assert_eq!(a["agentName"], "Screener");
    assert_eq!(a["phone"], "+919845012310");
    assert!(
        overall(&a) > overall(&b),
        "the engaged callee scores higher: {a} vs {b}"
    );
    assert_ne!(a["columns"][0]["reason"], b["columns"][0]["reason"]);

    ended(&app, &ws.key, &unanswered).await;
    let none = app
        .get(&ws.key, &format!("/api/ratings/{unanswered}"))
        .await
        .expect(404);
    assert!(none.message().contains("no rating"), "{}", none.message());
    app.get(&ws.key, "/api/ratings/00000000-0000-7000-8000-000000000000")
        .await
        .expect(404);
    app.get(&ws.key, "/api/ratings/not-a-call")
        .await
        .expect(404);
    let other = app.calling_workspace("Other", 1).await;
    app.get(&other.key, &format!("/api/ratings/{engaged}"))
        .await
        .expect(404);
    let foreign = app.get(&other.key, "/api/ratings").await.expect(200);
    assert_eq!(foreign.body["total"], 0);

    // List, paging and filters.
    let list = app.get(&ws.key, "/api/ratings").await.expect(200);
    assert_eq!(list.body["total"], 2);
    assert_eq!(list.body["page"], 1);
    assert_eq!(list.body["limit"], 20);
    let page2 = app
        .get(&ws.key, "/api/ratings?limit=1&page=2")
        .await
        .expect(200);
    assert_eq!(page2.body["rows"].as_array().unwrap().len(), 1);
    assert_eq!(page2.body["total"], 2);
    let page1 = app.get(&ws.key, "/api/ratings?limit=1").await.expect(200);
    assert_ne!(
        page1.body["rows"][0]["callId"],
        page2.body["rows"][0]["callId"]
    );
    let between = (overall(&a) + overall(&b)) / 2.0;
    let high = app
        .get(&ws.key, &format!("/api/ratings?minScore={between}"))
        .await
        .expect(200);
    assert_eq!(high.body["total"], 1);
    assert_eq!(high.body["rows"][0]["callId"], engaged.as_str());
    let low = app
        .get(&ws.key, &format!("/api/ratings?maxScore={between}"))
        .await
        .expect(200);
    assert_eq!(low.body["rows"][0]["callId"], curt.as_str());
    let by_agent = app
        .get(&ws.key, &format!("/api/ratings?agentId={agent}"))
        .await
        .expect(200);
    assert_eq!(by_agent.body["total"], 2);
    let today = app.now().format("%Y-%m-%d").to_string();
    let tomorrow = (app.now() + chrono::Duration::days(2))
        .format("%Y-%m-%d")
        .to_string();
    let dated = app
        .get(
            &ws.key,
            &format!("/api/ratings?from=2020-01-01&to={tomorrow}"),
        )
        .await
        .expect(200);
    assert_eq!(dated.body["total"], 2);
    let future = app
        .get(&ws.key, &format!("/api/ratings?from={tomorrow}"))
        .await
        .expect(200);
    assert_eq!(future.body["total"], 0);
    assert!(!today.is_empty());
    for (query, field) in [
        ("limit=0", "limit"),
        ("minScore=11", "minScore"),
        ("from=yesterday", "from"),
        ("status=great", "status"),
    ] {
        let bad = app
            .get(&ws.key, &format!("/api/ratings?{query}"))
            .await
            .expect(400);
        assert!(bad.message().contains(field), "{query}: {}", bad.message());
    }

    // By phone.
    let phone = app
        .get(&ws.key, "/api/ratings/by-phone/+919845012310")
        .await
        .expect(200);
    assert_eq!(phone.body["rows"].as_array().unwrap().len(), 1);
    assert_eq!(phone.body["rows"][0]["callId"], engaged.as_str());
    let bad_phone = app
        .get(&ws.key, "/api/ratings/by-phone/12345")
        .await
        .expect(400);
    assert!(
        bad_phone.message().contains("phone"),
        "{}",
        bad_phone.message()
    );

    // Stats against the two known scorecards.
    let stats = app.get(&ws.key, "/api/ratings/stats").await.expect(200);
    assert_eq!(stats.body["total"], 2);
    assert_eq!(stats.body["done"], 2);
    assert_eq!(stats.body["pending"], 0);
    assert_eq!(stats.body["failed"], 0);
    let mean = ((overall(&a) + overall(&b)) / 2.0 * 100.0).round() / 100.0;
    assert_eq!(stats.body["averageOverall"].as_f64(), Some(mean));
    assert_eq!(stats.body["agents"][0]["agentId"], agent.as_str());
    assert_eq!(stats.body["agents"][0]["agentName"], "Screener");
    assert_eq!(stats.body["agents"][0]["rated"], 2);

    // Analytics: per-column histograms hold exactly the two scores.
    let analytics = app.get(&ws.key, "/api/ratings/analytics").await.expect(200);
    assert_eq!(analytics.body["total"], 2);
    let columns = analytics.body["columns"].as_array().unwrap();
    assert_eq!(columns.len(), 2);
    for (i, dist) in columns.iter().enumerate() {
        assert_eq!(dist["name"], a["columns"][i]["name"]);
        assert_eq!(dist["count"], 2);
        let buckets = dist["buckets"].as_array().unwrap();
        assert_eq!(buckets.len(), 11);
        assert_eq!(
            buckets
                .iter()
                .map(|b| b["count"].as_i64().unwrap())
                .sum::<i64>(),
            2
        );
        for card in [&a, &b] {
            let score = card["columns"][i]["score"].as_f64().unwrap().round() as usize;
            assert!(buckets[score]["count"].as_i64().unwrap() >= 1, "{dist}");
        }
        let avg = ((a["columns"][i]["score"].as_f64().unwrap()
            + b["columns"][i]["score"].as_f64().unwrap())
            / 2.0
            * 100.0)
            .round()
            / 100.0;
        assert_eq!(dist["average"].as_f64(), Some(avg));
    }
    assert_eq!(analytics.body["overall"]["count"], 2);

    // CSV export: a download with one parsed row per rating.
    let csv = reply(
        app.request(&ws.key, reqwest::Method::GET, "/api/ratings/export-all")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(
        csv.header("content-disposition")
            .is_some_and(|d| d.starts_with("attachment") && d.contains("ratings.csv"))
    );
    assert!(
        csv.header("content-type")
            .is_some_and(|t| t.starts_with("text/csv"))
    );
    let mut reader = csv::Reader::from_reader(csv.text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    assert_eq!(&headers[0], "call_id");
    let overall_at = headers.iter().position(|h| h == "overall_rating").unwrap();
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 2);
    let row = records
        .iter()
        .find(|r| r[0] == engaged)
        .expect("engaged row");
    assert_eq!(row[overall_at].parse::<f64>().unwrap(), overall(&a));
    assert_eq!(&row[1], "Asha");
}

/// An SSE chat completion whose whole content is `content`.
fn sse(content: &str) -> ResponseTemplate {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": content}}]});
    let done = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(format!("data: {chunk}\n\ndata: {done}\n\ndata: [DONE]\n\n"))
}

#[tokio::test]
async fn rate_now_regenerate_bulk_and_reload() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Rescore", 5).await;
    // No template: the default one is used.
    let agent = app
        .create_agent(&ws.key, json!({"name": "Plain", "welcomeMessage": "Hi."}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845012312",
        "Meera",
        json!({"simScript": ENGAGED}),
    )
    .await;
    let first = rating(&app, &ws.key, &call).await;
    check_scorecard(&first, &["Engagement", "Clarity", "Relevance", "Outcome"]);
    let again = app
        .post_empty(&ws.key, &format!("/api/ratings/{call}/rate-now"))
        .await
        .expect(200);
    assert!(
        again.message().contains("already rated"),
        "{}",
        again.message()
    );

    // A new template, then regenerate: the scorecard is replaced synchronously.
    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"ratingTemplate": {"columns": [{"name": "Experience", "description": "Rust experience"}]}}),
    )
    .await
    .expect(200);
    let regen = app
        .post_empty(&ws.key, &format!("/api/ratings/{call}/regenerate"))
        .await
        .expect(200);
    assert!(regen.message().contains("overall"), "{}", regen.message());
    let replaced = app
        .get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(200)
        .body;
    check_scorecard(&replaced, &["Experience"]);

    // Bulk: by ids, then by agent; bad bodies name the field.
    let bulk = app
        .post(
            &ws.key,
            "/api/ratings/bulk-regenerate",
            json!({"callIds": [call]}),
        )
        .await
        .expect(200);
    assert_eq!(bulk.body["queued"], 1);
    assert!(bulk.message().contains('1'));
    let requeued = rating(&app, &ws.key, &call).await;
    check_scorecard(&requeued, &["Experience"]);
    let by_agent = app
        .post(
            &ws.key,
            "/api/ratings/bulk-regenerate",
            json!({"agentId": agent}),
        )
        .await
        .expect(200);
    assert_eq!(by_agent.body["queued"], 1);
    rating(&app, &ws.key, &call).await;
    let empty = app
        .post(&ws.key, "/api/ratings/bulk-regenerate", json!({}))
        .await
        .expect(400);
    assert!(empty.message().contains("callIds"), "{}", empty.message());
    let bad = app
        .post(
            &ws.key,
            "/api/ratings/bulk-regenerate",
            json!({"callIds": ["nope"]}),
        )
        .await
        .expect(400);
    assert!(bad.message().contains("callIds[0]"), "{}", bad.message());
    let other = app.calling_workspace("Elsewhere", 1).await;
    let foreign = app
        .post(
            &other.key,
            "/api/ratings/bulk-regenerate",
            json!({"callIds": [call]}),
        )
        .await
        .expect(200);
    assert_eq!(foreign.body["queued"], 0);
    app.post_empty(&other.key, &format!("/api/ratings/{call}/regenerate"))
        .await
        .expect(404);

    // rate-now refuses calls that cannot be rated.
    let unanswered = place(&app, &ws, &agent, "+919845012382", "Nobody", json!({})).await;
    ended(&app, &ws.key, &unanswered).await;
    let refused = app
        .post_empty(&ws.key, &format!("/api/ratings/{unanswered}/rate-now"))
        .await
        .expect(409);
    assert!(
        refused.message().contains("no conversation"),
        "{}",
        refused.message()
    );
    app.post_empty(
        &ws.key,
        "/api/ratings/00000000-0000-7000-8000-000000000000/rate-now",
    )
    .await
    .expect(404);

    // A real (OpenAI-compatible) model: a json_schema request, a good answer, then malformed ones.
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(
            json!({"response_format": {"type": "json_schema"}}),
        ))
        .respond_with(sse(
            r#"{"columns":[{"name":"Experience","score":8,"reason":"five years of Rust"}]}"#,
        ))
        .up_to_n_times(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse("I would rate this call highly."))
        .mount(&llm)
        .await;
    let credential = json!({"apiKey": "sk-test", "baseUrl": format!("{}/v1", llm.uri())});
    app.set_credential(&ws, "openai", &credential).await;
    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"llmProvider": "openai", "llmModel": "grader"}),
    )
    .await
    .expect(200);
    app.post_empty(&ws.key, &format!("/api/ratings/{call}/regenerate"))
        .await
        .expect(200);
    let graded = app
        .get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(200)
        .body;
    assert_eq!(graded["overallRating"], 8.0);
    assert_eq!(graded["columns"][0]["reason"], "five years of Rust");
    let sent: Value = llm.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(sent["model"], "grader");
    let card: Value =
        serde_json::from_str(sent["messages"][1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(card["columns"][0]["name"], "Experience");
    assert_eq!(card["transcript"][1]["speaker"], "callee");
    assert_eq!(card["transcript"][1]["text"], ENGAGED[0]);

    let failed = app
        .post_empty(&ws.key, &format!("/api/ratings/{call}/regenerate"))
        .await
        .expect(502);
    assert!(
        failed.message().contains("malformed"),
        "{}",
        failed.message()
    );
    assert_eq!(
        llm.received_requests().await.unwrap().len(),
        4,
        "one good request, then three attempts at the malformed one"
    );
    let marked = app
        .get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(200)
        .body;
    assert_eq!(marked["status"], "failed");
    assert!(marked["error"].as_str().unwrap().contains("malformed"));
    let stats = app.get(&ws.key, "/api/ratings/stats").await.expect(200);
    assert_eq!(stats.body["failed"], 1);

    // Reload re-reads templates and re-queues the failed rating; back on sim it succeeds.
    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"llmProvider": "sim"}),
    )
    .await
    .expect(200);
    let reloaded = app
        .post_empty(&ws.key, "/api/ratings/reload")
        .await
        .expect(200);
    assert_eq!(reloaded.body["queued"], 1);
    assert!(
        reloaded.message().contains("1 agent"),
        "{}",
        reloaded.message()
    );
    let back = rating(&app, &ws.key, &call).await;
    check_scorecard(&back, &["Experience"]);
}

#[tokio::test]
async fn export_sheet_appends_through_the_sheets_api() {
    let sheets = MockServer::start().await;
    let uri = sheets.uri();
    let app = TestApp::spawn_with_settings(move |s| s.ratings.sheets_base_url = uri.clone()).await;
    let ws = app.calling_workspace("Sheets", 5).await;
    let agent = template_agent(&app, &ws).await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845012313",
        "Asha",
        json!({"simScript": ENGAGED}),
    )
    .await;
    let card = rating(&app, &ws.key, &call).await;
    Mock::given(method("POST"))
        .and(path("/v4/spreadsheets/sheet_123/values/Ratings!A1:append"))
        .and(header("authorization", "Bearer ya29.token"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"spreadsheetId": "sheet_123", "updates": {"updatedRows": 2}}),
            ),
        )
        .expect(1)
        .mount(&sheets)
        .await;

    let missing = app
        .post(
            &ws.key,
            "/api/ratings/export-sheet",
            json!({"accessToken": "t"}),
        )
        .await
        .expect(400);
    assert!(
        missing.message().contains("spreadsheetId"),
        "{}",
        missing.message()
    );
    let no_token = app
        .post(
            &ws.key,
            "/api/ratings/export-sheet",
            json!({"spreadsheetId": "sheet_123"}),
        )
        .await
        .expect(400);
    assert!(
        no_token.message().contains("accessToken"),
        "{}",
        no_token.message()
    );
    let done = app
        .post(
            &ws.key,
            "/api/ratings/export-sheet",
            json!({"spreadsheetId": "sheet_123", "range": "Ratings!A1", "accessToken": "ya29.token"}),
        )
        .await
        .expect(200);
    assert!(done.message().contains("Appended 1"), "{}", done.message());
    let requests = sheets.received_requests().await.unwrap();
    let url = &requests[0].url;
    assert!(
        url.query()
            .unwrap_or_default()
            .contains("valueInputOption=RAW"),
        "{url}"
    );
    let body: Value = requests[0].body_json().unwrap();
    assert_eq!(body["majorDimension"], "ROWS");
    assert_eq!(body["range"], "Ratings!A1");
    let values = body["values"].as_array().unwrap();
    assert_eq!(values.len(), 2);
    assert_eq!(values[0][0], "call_id");
    assert_eq!(values[1][0], call.as_str());
    assert_eq!(values[1][1], "Asha");
    assert_eq!(
        values[1][5].as_str().unwrap().parse::<f64>().unwrap(),
        overall(&card)
    );

    // A stored google credential stands in for the body's token; Google's refusal is a 502.
    let credential = json!({"accessToken": "stored.token"});
    app.set_credential(&ws, "google", &credential).await;
    Mock::given(method("POST"))
        .and(header("authorization", "Bearer stored.token"))
        .respond_with(ResponseTemplate::new(403).set_body_json(
            json!({"error": {"code": 403, "message": "The caller does not have permission"}}),
        ))
        .mount(&sheets)
        .await;
    let refused = app
        .post(
            &ws.key,
            "/api/ratings/export-sheet",
            json!({"spreadsheetId": "sheet_123"}),
        )
        .await
        .expect(502);
    assert!(
        refused.message().contains("permission"),
        "{}",
        refused.message()
    );
}

/// One request a webhook receiver saw.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
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
                    seen.lock().unwrap().push(Received { headers, body });
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

async fn subscribe(app: &TestApp, ws: &Workspace, url: &str) -> String {
    subscribe_to(app, ws, url, &["call.completed", "rating.completed"]).await
}

async fn subscribe_to(app: &TestApp, ws: &Workspace, url: &str, events: &[&str]) -> String {
    let org = ws.org_id.to_string();
    let mut args = vec!["webhook", "add", "--org", org.as_str(), "--url", url];
    for event in events {
        args.extend(["--event", event]);
    }
    app.admin_ok(&args).await["secret"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn call_completed_waits_for_a_prompt_rating_and_carries_it() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Prompt", 5).await;
    let (url, seen) = receiver().await;
    subscribe(&app, &ws, &url).await;
    let agent = template_agent(&app, &ws).await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845012314",
        "Asha",
        json!({"simScript": ENGAGED}),
    )
    .await;
    // The call talks for about 20 s, then call.completed may wait for the analysis and the
    // rating up to the plan's 60 s: a deadline of 60 s from placing failed under CI load.
    let first = eventually(Duration::from_secs(150), "call.completed", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(first.header("x-service-event"), "call.completed");
    let body = first.json();
    assert_eq!(body["callId"], call.as_str());
    let card = rating(&app, &ws.key, &call).await;
    assert_eq!(body["rating"]["overall"].as_f64(), Some(overall(&card)));
    // The rating was ready in time, so no rating.completed follows.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_late_rating_sends_call_completed_without_it_then_rating_completed() {
    let clock = ManualClock::new(utc("2026-06-01T04:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.calling_workspace("Late", 5).await;
    let (url, seen) = receiver().await;
    let secret = subscribe(&app, &ws, &url).await;
    let agent = template_agent(&app, &ws).await;
    // The sim model takes 8 s to score this call.
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845012315",
        "Asha",
        json!({"simScript": ENGAGED, "simRatingDelayMs": 8000}),
    )
    .await;
    ended(&app, &ws.key, &call).await;
    let pending = app
        .get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(404);
    assert_eq!(pending.body["status"], "pending");
    assert_eq!(pending.header("retry-after"), Some("5"));
    assert!(
        pending.message().contains("not ready"),
        "{}",
        pending.message()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "call.completed waits for the rating"
    );

    // 60 s pass before the scorecard: call.completed goes with rating null…
    clock.advance(chrono::Duration::seconds(61));
    let first = eventually(Duration::from_secs(6), "call.completed", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(first.header("x-service-event"), "call.completed");
    assert_eq!(first.json()["rating"], Value::Null);

    // …and rating.completed follows when it lands, signed the same way.
    let second = eventually(Duration::from_secs(30), "rating.completed", || async {
        seen.lock().unwrap().get(1).cloned()
    })
    .await;
    assert_eq!(second.header("x-service-event"), "rating.completed");
    let timestamp: i64 = second.header("x-service-timestamp").parse().unwrap();
    assert_eq!(
        second.header("x-service-signature"),
        voxline::webhooks::delivery::signature(&secret, timestamp, &second.body)
    );
    let body = second.json();
    assert_eq!(body["event"], "rating.completed");
    assert_eq!(body["callId"], call.as_str());
    assert_ne!(body["eventId"], first.json()["eventId"]);
    let card = rating(&app, &ws.key, &call).await;
    assert_eq!(body["rating"]["overall"].as_f64(), Some(overall(&card)));
    assert_eq!(body["rating"]["columns"], card["columns"]);
}

#[tokio::test]
async fn redeliver_resends_every_event_of_the_call_with_its_original_event_id() {
    let clock = ManualClock::new(utc("2026-06-01T04:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.calling_workspace("Replay", 5).await;
    let (url, seen) = receiver().await;
    subscribe_to(
        &app,
        &ws,
        &url,
        &["call.completed", "call.analyzed", "rating.completed"],
    )
    .await;
    // A subscription that covers only call.completed gets only that again.
    let (narrow_url, narrow) = receiver().await;
    subscribe_to(&app, &ws, &narrow_url, &["call.completed"]).await;
    let agent = template_agent(&app, &ws).await;
    // The analysis and the scorecard both land after the webhook's wait, so
    // the call produces call.completed, then call.analyzed and rating.completed.
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845012317",
        "Asha",
        json!({"simScript": ENGAGED, "simRatingDelayMs": 5000, "simAnalysisDelayMs": 5000}),
    )
    .await;
    ended(&app, &ws.key, &call).await;
    clock.advance(chrono::Duration::seconds(61));
    let first = eventually(Duration::from_secs(60), "three events", || async {
        let seen = seen.lock().unwrap();
        (seen.len() >= 3).then(|| seen.clone())
    })
    .await;
    let event_id = |received: &[Received], event: &str| -> Vec<(String, String)> {
        received
            .iter()
            .filter(|r| r.header("x-service-event") == event)
            .map(|r| {
                (
                    r.json()["eventId"].as_str().unwrap_or_default().to_string(),
                    r.header("x-service-delivery").to_string(),
                )
            })
            .collect()
    };
    let mut kinds: Vec<&str> = first.iter().map(|r| r.header("x-service-event")).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["call.analyzed", "call.completed", "rating.completed"]
    );
    let rated = event_id(&first, "rating.completed");
    assert_eq!(narrow.lock().unwrap().len(), 1, "call.completed only");

    let reply = app
        .post_empty(&ws.key, &format!("/api/calls/{call}/redeliver-webhook"))
        .await
        .expect(200);
    let queued = reply.body["queued"].as_array().expect("queued").clone();
    let counts: Vec<(String, u64)> = queued
        .iter()
        .map(|q| {
            (
                q["event"].as_str().unwrap_or_default().to_string(),
                q["subscriptions"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(counts.len(), 3, "{}", reply.body);
    assert_eq!(
        counts[0],
        ("call.completed".to_string(), 2),
        "{}",
        reply.body
    );
    assert!(
        counts.contains(&("call.analyzed".to_string(), 1)),
        "{}",
        reply.body
    );
    assert!(
        counts.contains(&("rating.completed".to_string(), 1)),
        "{}",
        reply.body
    );
    assert!(
        reply.message().contains("rating.completed"),
        "{}",
        reply.message()
    );

    let all = eventually(
        Duration::from_secs(10),
        "the redelivered events",
        || async {
            let seen = seen.lock().unwrap();
            (seen.len() >= 6).then(|| seen.clone())
        },
    )
    .await;
    let again = &all[3..];
    for event in ["call.completed", "call.analyzed", "rating.completed"] {
        let before = event_id(&first, event);
        let after = event_id(again, event);
        assert_eq!(before.len(), 1, "{event}");
        assert_eq!(after.len(), 1, "{event} redelivered once");
        assert_eq!(after[0].0, before[0].0, "{event} keeps its event id");
        assert_ne!(after[0].1, before[0].1, "{event} is a new delivery");
    }
    let resent = again
        .iter()
        .find(|r| r.header("x-service-event") == "rating.completed")
        .expect("rating.completed");
    assert_eq!(resent.json()["eventId"], rated[0].0.as_str());
    let card = rating(&app, &ws.key, &call).await;
    assert_eq!(
        resent.json()["rating"]["overall"].as_f64(),
        Some(overall(&card))
    );
    let narrow_seen = eventually(Duration::from_secs(10), "the narrow redelivery", || async {
        let seen = narrow.lock().unwrap();
        (seen.len() >= 2).then(|| seen.clone())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(narrow.lock().unwrap().len(), 2, "nothing it does not cover");
    assert_eq!(narrow_seen[1].header("x-service-event"), "call.completed");
}

#[tokio::test]
async fn a_pending_rating_survives_a_restart() {
    let mut app = TestApp::spawn().await;
    let ws = app.calling_workspace("Durable", 5).await;
    let agent = template_agent(&app, &ws).await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845012316",
        "Asha",
        json!({"simScript": CURT, "simRatingDelayMs": 3000}),
    )
    .await;
    ended(&app, &ws.key, &call).await;
    let pending = app
        .get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(404);
    assert_eq!(pending.body["status"], "pending");
    // Give the worker (100 ms passes) time to lease it: the server stops
    // with the rating mid-scoring, and the restart must free the lease.
    tokio::time::sleep(Duration::from_millis(600)).await;
    app.get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(404);
    app.restart().await;
    let card = rating(&app, &ws.key, &call).await;
    check_scorecard(&card, &["Experience", "Availability"]);
}

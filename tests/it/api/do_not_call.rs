//! Issue 32, part 1: the workspace's do-not-call list (`/api/numbers/do-not-call`)
//! and the callee's opt-out during a call. Every path that dials checks the
//! list: a single call or test call answers 403, the alert dial skips the
//! number and says so per number, batch items and campaign rows are skipped
//! with `skipReason: do-not-call` (at upload, and again at dial time), and
//! retries are not placed.

use super::batches::{ANSWERS, BUSY, all_items, batch_with, dialing_workspace, phone, wait_status};
use crate::support::{Reply, TestApp, Workspace, eventually};
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LIST: &str = "/api/numbers/do-not-call";

async fn list(app: &TestApp, ws: &Workspace, number: &str, reason: &str) -> Reply {
    app.post(&ws.key, LIST, json!({"phone": number, "reason": reason}))
        .await
}

async fn import(app: &TestApp, ws: &Workspace, csv: &str) -> Reply {
    app.raw(
        &ws.key,
        Method::POST,
        &format!("{LIST}/import"),
        "text/csv",
        csv.to_string(),
    )
    .await
}

/// The entries of the list, newest first.
async fn entries(app: &TestApp, ws: &Workspace, query: &str) -> Value {
    app.get(&ws.key, &format!("{LIST}{query}"))
        .await
        .expect(200)
        .body
}

/// A short pipeline agent (a one-word greeting, a short silence timeout).
async fn quick_agent(app: &TestApp, ws: &Workspace, extra: Value) -> String {
    let mut body = json!({
        "name": "Quick",
        "welcomeMessage": "Hi.",
        "prompt": "Be brief.",
        "silenceTimeoutSeconds": 2,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    app.create_agent(&ws.key, body).await["id"]
        .as_str()
        .expect("agent id")
        .to_string()
}

async fn call(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body
}

async fn ended(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    eventually(Duration::from_secs(30), "the call to end", || async {
        let c = call(app, ws, id).await;
        let raw = c["rawStatus"].as_str().unwrap_or_default().to_string();
        ["completed", "failed", "no-answer", "busy", "canceled"]
            .contains(&raw.as_str())
            .then_some(c)
    })
    .await
}

#[tokio::test]
async fn numbers_are_listed_searched_removed_imported_and_exported() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Lists").await;
    let other = app.workspace("Elsewhere").await;

    let added = list(&app, &ws, "+919845012301", "Asked by email")
        .await
        .expect(201);
    assert_eq!(added.body["phone"], "+919845012301");
    assert_eq!(added.body["reason"], "Asked by email");
    assert_eq!(added.body["source"], "api");
    assert!(added.body["createdAt"].as_str().is_some());
    // Adding it again is idempotent: 200, the entry as it was.
    let again = list(&app, &ws, "+919845012301", "Another reason")
        .await
        .expect(200);
    assert_eq!(again.body["reason"], "Asked by email");
    // Spaces and dashes are a typing matter; the entry is stored as E.164.
    list(&app, &ws, "+91 98450-12302", "").await.expect(201);

    // Bad input names the field.
    for (body, field) in [
        (json!({"phone": "12345"}), "phone"),
        (json!({"phone": "+911111111111"}), "phone"),
        (
            json!({"phone": "+919845012303", "reason": "x".repeat(201)}),
            "reason",
        ),
        (
            json!({"phone": "+919845012303", "reason": "two\nlines"}),
            "reason",
        ),
        (json!({"reason": "no phone"}), "phone"),
        (json!({"phone": "+919845012303", "colour": "red"}), "colour"),
    ] {
        let refused = app.post(&ws.key, LIST, body.clone()).await.expect(400);
        assert!(
            refused.message().contains(field),
            "{body}: {}",
            refused.message()
        );
    }

    let page = entries(&app, &ws, "").await;
    assert_eq!(page["total"], 2, "{page}");
    assert_eq!(page["page"], 1);
    assert_eq!(page["limit"], 20);
    let page = entries(&app, &ws, "?limit=1&page=2").await;
    assert_eq!(page["rows"].as_array().unwrap().len(), 1);
    assert_eq!(page["total"], 2);
    let found = entries(&app, &ws, "?search=EMAIL").await;
    assert_eq!(
        found["total"], 1,
        "the reason is searched case-insensitively"
    );
    assert_eq!(found["rows"][0]["phone"], "+919845012301");
    let found = entries(&app, &ws, "?search=12302").await;
    assert_eq!(found["rows"][0]["phone"], "+919845012302");
    let found = entries(&app, &ws, "?search=%25").await;
    assert_eq!(found["total"], 0, "a % is a character, not a wildcard");
    app.get(&ws.key, &format!("{LIST}?limit=0"))
        .await
        .expect(400);

    // Another workspace sees nothing and removes nothing.
    assert_eq!(entries(&app, &other, "").await["total"], 0);
    app.delete(&other.key, &format!("{LIST}/+919845012301"))
        .await
        .expect(404);
    app.delete(&ws.key, &format!("{LIST}/+919845012302"))
        .await
        .expect(204);
    app.delete(&ws.key, &format!("{LIST}/+919845012302"))
        .await
        .expect(404);
    app.delete(&ws.key, &format!("{LIST}/nonsense"))
        .await
        .expect(404);
    assert_eq!(entries(&app, &ws, "").await["total"], 1);

    // Import: a phone column and an optional reason, any header case.
    let report = import(
        &app,
        &ws,
        "\u{feff}Reason,PHONE\n\
         moved,+919845012311\n\
         ,+919845012301\n\
         bad,12345\n\
         twice,+919845012311\n\
         \"quoted, with a comma\",+14155550123\n",
    )
    .await
    .expect(200);
    assert_eq!(report.body["added"], 2, "{}", report.body);
    assert_eq!(report.body["duplicate"], 2, "{}", report.body);
    assert_eq!(report.body["invalid"], 1, "{}", report.body);
    assert_eq!(report.body["invalidRows"][0]["row"], 4, "{}", report.body);
    assert_eq!(report.body["invalidRows"][0]["phone"], "12345");
    let imported = entries(&app, &ws, "?search=14155550123").await;
    assert_eq!(imported["rows"][0]["source"], "import");
    assert_eq!(imported["rows"][0]["reason"], "quoted, with a comma");
    let refused = import(&app, &ws, "number,reason\n+919845012399,x\n")
        .await
        .expect(400);
    assert!(refused.message().contains("phone"), "{}", refused.message());

    // Export: every entry in number order, and it imports back as it is.
    let export = app
        .get(&ws.key, &format!("{LIST}/export.csv"))
        .await
        .expect(200);
    assert!(
        export
            .header("content-type")
            .is_some_and(|ct| ct.starts_with("text/csv")),
        "{export:?}"
    );
    let lines: Vec<&str> = export.text.lines().collect();
    assert_eq!(lines[0], "phone,reason,source,created_at");
    assert_eq!(lines.len(), 4, "{}", export.text);
    assert!(lines[1].starts_with("+14155550123,\"quoted, with a comma\",import,"));
    assert!(lines[2].starts_with("+919845012301,Asked by email,api,"));
    assert!(lines[3].starts_with("+919845012311,moved,import,"));
    let back = import(&app, &other, &export.text).await.expect(200);
    assert_eq!(back.body["added"], 3, "{}", back.body);
}

#[tokio::test]
async fn a_single_call_a_test_call_and_an_alert_skip_a_listed_number() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Single", 5).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let listed = "+919845012310";
    list(&app, &ws, listed, "Asked us").await.expect(201);

    let refused = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": listed}),
        )
        .await
        .expect(403);
    assert!(
        refused
            .message()
            .contains("is on the workspace's do-not-call list"),
        "{}",
        refused.message()
    );
    let refused = app
        .post(
            &ws.key,
            &format!("/api/agents/{agent}/test-call"),
            json!({"phoneNumber": listed}),
        )
        .await
        .expect(403);
    assert!(
        refused.message().contains("do-not-call"),
        "{}",
        refused.message()
    );

    let alert = app
        .post(
            &ws.key,
            "/api/alert",
            json!({"agentId": agent, "phones": [listed, "+919845012311", "nope"]}),
        )
        .await
        .expect(200);
    assert_eq!(alert.body["dialed"], 1, "{}", alert.body);
    assert_eq!(alert.body["skipped"], 2, "{}", alert.body);
    assert_eq!(alert.body["calls"][0]["phone"], "+919845012311");
    let skips = alert.body["skippedNumbers"].as_array().unwrap();
    assert_eq!(skips.len(), 1, "{}", alert.body);
    assert_eq!(skips[0]["phone"], listed);
    assert_eq!(skips[0]["skipReason"], "do-not-call");
    // Only listed numbers: nothing is dialed, and the answer says why per number.
    let alert = app
        .post(
            &ws.key,
            "/api/alert",
            json!({"agentId": agent, "phones": [listed]}),
        )
        .await
        .expect(200);
    assert_eq!(alert.body["dialed"], 0, "{}", alert.body);
    assert_eq!(alert.body["skippedNumbers"][0]["skipReason"], "do-not-call");

    let page = app.get(&ws.key, "/api/calls").await.expect(200);
    assert_eq!(
        page.body["stats"]["total"], 1,
        "only the unlisted number was dialed"
    );

    // Off the list, the number may be called again.
    app.delete(&ws.key, &format!("{LIST}/{listed}"))
        .await
        .expect(204);
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": listed}),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn a_retry_is_not_placed_to_a_number_listed_after_the_first_attempt_was_dialed() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Retries", 5).await;
    let agent = quick_agent(
        &app,
        &ws,
        json!({"retryPolicy": {"maxAttempts": 3, "retryAfterSeconds": 1, "retryOn": ["busy"]}}),
    )
    .await;
    let busy = "+919845012387";
    let first = app
        .post(&ws.key, "/api/calls", json!({"agentId": agent, "to": busy}))
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .unwrap()
        .to_string();
    list(&app, &ws, busy, "Listed while ringing")
        .await
        .expect(201);
    let first = ended(&app, &ws, &first).await;
    assert_eq!(first["rawStatus"], "busy", "{first}");
    // A retry would be due a second after the busy signal; none comes.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let page = app.get(&ws.key, "/api/calls").await.expect(200);
    assert_eq!(page.body["stats"]["total"], 1, "{}", page.body);
}

#[tokio::test]
async fn batch_items_and_campaign_rows_of_listed_numbers_are_skipped_at_upload() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Uploads", 5).await;
    let listed = phone(1, ANSWERS);
    list(&app, &ws, &listed, "").await.expect(201);

    // A batch: the listed item is stored skipped and reported.
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Mixed", "agentId": agent}),
        )
        .await
        .expect(201);
    let id = created.body["id"].as_str().unwrap().to_string();
    let added = app
        .post(
            &ws.key,
            &format!("/api/batches/{id}/items"),
            json!({"items": [
                {"name": "A", "phone": phone(0, ANSWERS), "variables": {"course": "MBA", "simScript": ["Goodbye!"]}},
                {"name": "B", "phone": listed, "variables": {"course": "MBA"}},
            ]}),
        )
        .await
        .expect(200);
    assert_eq!(added.body["added"], 1, "{}", added.body);
    assert_eq!(added.body["skipped"], 1, "{}", added.body);
    assert_eq!(added.body["skippedItems"][0]["index"], 1);
    assert_eq!(added.body["skippedItems"][0]["skipReason"], "do-not-call");
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    let done = wait_status(&app, &ws, &id, "completed", 60).await;
    assert_eq!(done["completed"], 1, "{done}");
    assert_eq!(done["skipped"], 1, "{done}");
    let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    assert_eq!(items[1]["status"], "skipped", "{}", items[1]);
    assert_eq!(items[1]["skipReason"], "do-not-call");
    assert_eq!(items[1]["callId"], Value::Null);
    assert_eq!(items[0]["skipReason"], Value::Null);
    // The export shows the rule.
    let export = app
        .get(&ws.key, &format!("/api/batches/{id}/export"))
        .await
        .expect(200);
    let mut reader = csv::Reader::from_reader(export.text.as_bytes());
    let header = reader.headers().unwrap().clone();
    let at = header
        .iter()
        .position(|h| h == "skip_reason")
        .expect("a skip_reason column");
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(&records[1][at], "do-not-call");
    assert_eq!(&records[0][at], "");

    // A campaign: the listed row is accepted, stored skipped, and never dialed.
    let campaign = app
        .post(
            &ws.key,
            "/api/campaigns",
            json!({"name": "Sheet", "agentId": agent}),
        )
        .await
        .expect(201)
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let csv = format!(
        "name,phone,course\nAsha,{},MBA\nRavi,{listed},BBA\n",
        phone(2, ANSWERS)
    );
    let boundary = "dnc-boundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.csv\"\r\n\
         Content-Type: text/csv\r\n\r\n{csv}\r\n--{boundary}--\r\n"
    );
    let uploaded = app
        .raw(
            &ws.key,
            Method::POST,
            &format!("/api/campaigns/{campaign}/students/upload"),
            &format!("multipart/form-data; boundary={boundary}"),
            body,
        )
        .await
        .expect(200);
    assert_eq!(uploaded.body["accepted"], 2, "{}", uploaded.body);
    assert_eq!(uploaded.body["skipped"], 1, "{}", uploaded.body);
    let students = all_items(
        &app,
        &ws.key,
        &format!("/api/campaigns/{campaign}/students"),
    )
    .await;
    assert_eq!(students[1]["status"], "skipped");
    assert_eq!(students[1]["skipReason"], "do-not-call");
    assert_eq!(students[0]["status"], "pending");
}

#[tokio::test]
async fn a_number_listed_while_its_batch_runs_is_not_dialed_from_then_on() {
    let app = TestApp::spawn().await;
    // One slot: the items are dialed one after another.
    let (ws, agent) = dialing_workspace(&app, "Running", 1).await;
    // The first callee talks for a while, so the batch is running when the last is listed.
    let mut items = vec![json!({
        "name": "Talker", "phone": phone(0, ANSWERS),
        "variables": {"course": "MBA", "simScript": ["Hello.", "Tell me more.", "I see.", "Goodbye!"]},
    })];
    for n in 1..4 {
        items.push(json!({"name": format!("P{n}"), "phone": phone(n, ANSWERS),
                          "variables": {"course": "MBA", "simScript": ["Goodbye!"]}}));
    }
    let id = batch_with(&app, &ws, &agent, items).await;
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    let path = format!("/api/batches/{id}/items");
    eventually(
        Duration::from_secs(20),
        "the first call to be live",
        || async {
            let items = all_items(&app, &ws.key, &path).await;
            (items[0]["status"] == "in-progress" && items[3]["status"] == "pending").then_some(())
        },
    )
    .await;
    list(&app, &ws, &phone(3, ANSWERS), "Listed mid-batch")
        .await
        .expect(201);

    let done = wait_status(&app, &ws, &id, "completed", 90).await;
    assert_eq!(done["completed"], 3, "{done}");
    assert_eq!(done["skipped"], 1, "{done}");
    let items = all_items(&app, &ws.key, &path).await;
    assert_eq!(items[3]["status"], "skipped", "{}", items[3]);
    assert_eq!(items[3]["skipReason"], "do-not-call");
    assert_eq!(items[3]["attempts"], 0);
    assert_eq!(items[3]["callId"], Value::Null);
    let calls = app
        .get(
            &ws.key,
            &format!("/api/calls?search={}", &phone(3, ANSWERS)[1..]),
        )
        .await
        .expect(200);
    assert_eq!(calls.body["stats"]["total"], 0, "{}", calls.body);
}

/// One request the receiver saw.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

/// A webhook receiver on port 0 that answers 200.
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

#[tokio::test]
async fn a_callee_who_opts_out_is_listed_signalled_and_skipped_by_the_next_batch() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Opt-out", 2).await;
    let (url, seen) = receiver().await;
    let sub = app
        .admin_ok(&[
            "webhook",
            "add",
            "--org",
            &ws.org_id.to_string(),
            "--url",
            &url,
            "--event",
            "number.opted_out",
        ])
        .await;
    let secret = sub["secret"].as_str().expect("secret").to_string();
    let callee = phone(7, ANSWERS);
    let id = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": callee,
                   "variables": {"name": "Asha", "course": "MBA", "simScript": ["Please don't call me again."]}}),
        )
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .unwrap()
        .to_string();
    let ended = ended(&app, &ws, &id).await;
    assert_eq!(ended["endedReason"], "opt-out", "{ended}");
    assert_eq!(ended["rawStatus"], "completed", "{ended}");
    let bot: Vec<String> = ended["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["speaker"] == "Bot")
        .map(|t| t["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        bot.iter().any(|l| l.contains("will not call you again")),
        "the agent confirms: {bot:?}"
    );

    let listed = entries(&app, &ws, &format!("?search={}", &callee[1..])).await;
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["rows"][0]["source"], "opt-out");

    let delivery = eventually(Duration::from_secs(15), "number.opted_out", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    let header = |name: &str| {
        delivery
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("missing {name}"))
            .to_string()
    };
    assert_eq!(header("x-service-event"), "number.opted_out");
    let timestamp: i64 = header("x-service-timestamp").parse().unwrap();
    assert_eq!(
        header("x-service-signature"),
        voxline::webhooks::delivery::signature(&secret, timestamp, &delivery.body)
    );
    let body: Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(body["event"], "number.opted_out");
    assert_eq!(body["phone"], callee.as_str());
    assert_eq!(body["callId"], id.as_str());
    assert_eq!(body["source"], "opt-out");
    assert_eq!(body["listed"], true);

    // The next batch skips the number.
    let id = batch_with(
        &app,
        &ws,
        &agent,
        vec![
            json!({"name": "Asha", "phone": callee, "variables": {"course": "MBA"}}),
            json!({"name": "Ravi", "phone": phone(8, BUSY), "variables": {"course": "MBA"}}),
        ],
    )
    .await;
    let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    assert_eq!(items[0]["status"], "skipped", "{}", items[0]);
    assert_eq!(items[0]["skipReason"], "do-not-call");
    assert_eq!(items[1]["status"], "pending");
}

#[tokio::test]
async fn an_agent_without_opt_out_does_not_list_the_callee() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("No opt-out", 2).await;
    let refused = app
        .post(
            &ws.key,
            "/api/agents",
            json!({"name": "Bad", "compliance": {"optOut": "yes"}}),
        )
        .await
        .expect(400);
    assert!(
        refused.message().contains("compliance"),
        "{}",
        refused.message()
    );
    let refused = app
        .post(
            &ws.key,
            "/api/agents",
            json!({"name": "Bad", "compliance": {"optIn": true}}),
        )
        .await
        .expect(400);
    assert!(refused.message().contains("optIn"), "{}", refused.message());
    let agent = quick_agent(&app, &ws, json!({"compliance": {"optOut": false}})).await;
    let read = app
        .get(&ws.key, &format!("/api/agents/{agent}"))
        .await
        .expect(200);
    assert_eq!(read.body["compliance"]["optOut"], false, "{}", read.body);
    let default = quick_agent(&app, &ws, json!({})).await;
    let read = app
        .get(&ws.key, &format!("/api/agents/{default}"))
        .await
        .expect(200);
    assert_eq!(read.body["compliance"]["optOut"], true, "{}", read.body);

    let id = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012313",
                   "variables": {"simScript": ["Please don't call me again.", "Goodbye!"]}}),
        )
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .unwrap()
        .to_string();
    let ended = ended(&app, &ws, &id).await;
    assert_ne!(ended["endedReason"], "opt-out", "{ended}");
    assert_eq!(entries(&app, &ws, "").await["total"], 0);
}

#[tokio::test]
async fn a_keypad_callee_who_presses_the_opt_out_digit_is_listed_and_signalled() {
    let app = TestApp::spawn().await;
    let (ws, _) = dialing_workspace(&app, "Keypad opt-out", 2).await;
    let (url, seen) = receiver().await;
    app.admin_ok(&[
        "webhook",
        "add",
        "--org",
        &ws.org_id.to_string(),
        "--url",
        &url,
        "--event",
        "number.opted_out",
    ])
    .await;
    let keypad = |opt_out: Value| {
        json!({
            "name": "Survey",
            "conversationEngine": "keypad",
            "welcomeMessage": "Hello.",
            "keypad": {
                "prompt": "Press 1 if satisfied. Press 9 to stop these calls.",
                "options": [{"digit": "1", "say": "Thank you.", "value": "satisfied"}],
                "optOutDigit": opt_out,
            },
        })
    };
    // The key is one phone key, and no option's.
    for bad in [json!("x"), json!("12"), json!("1"), json!(9)] {
        let refused = app
            .post(&ws.key, "/api/agents", keypad(bad.clone()))
            .await
            .expect(400);
        assert!(
            refused.message().contains("keypad.optOutDigit"),
            "{bad}: {}",
            refused.message()
        );
    }
    let agent = app.create_agent(&ws.key, keypad(json!("9"))).await;
    assert_eq!(agent["keypad"]["optOutDigit"], "9", "{agent}");
    let agent = agent["id"].as_str().unwrap().to_string();
    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let property = &doc["components"]["schemas"]["KeypadConfig"]["properties"]["optOutDigit"];
    // The document writes `$` as the stricter `(?![\s\S])`.
    assert!(
        property["pattern"]
            .as_str()
            .is_some_and(|p| p.starts_with("^[0-9*#]")),
        "{property}"
    );
    assert_eq!(property["maxLength"], 1, "{property}");

    let callee = phone(9, ANSWERS);
    let id = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": callee, "variables": {"simScript": [{"dtmf": "9"}]}}),
        )
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .unwrap()
        .to_string();
    let ended = ended(&app, &ws, &id).await;
    assert_eq!(ended["endedReason"], "opt-out", "{ended}");
    let bot: Vec<String> = ended["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["speaker"] == "Bot")
        .map(|t| t["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        bot.iter().any(|l| l.contains("will not call you again")),
        "the agent confirms: {bot:?}"
    );
    let listed = entries(&app, &ws, &format!("?search={}", &callee[1..])).await;
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["rows"][0]["source"], "opt-out");
    let delivery = eventually(Duration::from_secs(15), "number.opted_out", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    let body: Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(body["event"], "number.opted_out");
    assert_eq!(body["phone"], callee.as_str());
    assert_eq!(body["callId"], id.as_str());
}

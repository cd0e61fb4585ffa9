//! Webhooks (decisions §8, spec Events): call.completed from the durable
//! outbox, signed, retried with backoff, redelivered on request, and never
//! sent into private networks unless allow-listed.

use crate::support::{TestApp, Workspace, eventually, utc};
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::domain::clock::ManualClock;

/// One request the receiver saw.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

/// A webhook receiver on port 0 answering `statuses` in turn (then 200).
async fn receiver(statuses: Vec<u16>) -> (String, Arc<Mutex<Vec<Received>>>) {
    let seen = Arc::new(Mutex::new(Vec::<Received>::new()));
    let answers = Arc::new(Mutex::new(statuses));
    let app = Router::new().route(
        "/hook",
        post({
            let seen = seen.clone();
            move |headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                let answers = answers.clone();
                async move {
                    seen.lock().unwrap().push(Received { headers, body });
                    let mut answers = answers.lock().unwrap();
                    let code = if answers.is_empty() {
                        200
                    } else {
                        answers.remove(0)
                    };
                    StatusCode::from_u16(code).unwrap()
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
    let sub = app
        .admin_ok(&[
            "webhook",
            "add",
            "--org",
            &ws.org_id.to_string(),
            "--url",
            url,
        ])
        .await;
    sub["secret"].as_str().expect("secret").to_string()
}

async fn agent(app: &TestApp, ws: &Workspace) -> String {
    let agent = app
        .create_agent(&ws.key, json!({"name": "Hook", "welcomeMessage": "Hi."}))
        .await;
    agent["id"].as_str().expect("id").to_string()
}

async fn place(app: &TestApp, ws: &Workspace, agent: &str, to: &str) -> String {
    app.post(&ws.key, "/api/calls", json!({"agentId": agent, "to": to}))
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

fn header<'a>(r: &'a Received, name: &str) -> &'a str {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("missing header {name}"))
}

#[tokio::test]
async fn call_completed_is_signed_retried_with_backoff_and_redelivered() {
    let clock = ManualClock::new(utc("2026-06-01T04:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.calling_workspace("Hooks", 5).await;
    let (url, seen) = receiver(vec![503]).await;
    let secret = subscribe(&app, &ws, &url).await;
    let agent = agent(&app, &ws).await;
    // 80–84: nobody answers; the call ends no-answer after the ring time.
    let call_id = place(&app, &ws, &agent, "+919845012381").await;

    let first = eventually(Duration::from_secs(15), "the first delivery", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(header(&first, "x-service-event"), "call.completed");
    let timestamp: i64 = header(&first, "x-service-timestamp")
        .parse()
        .expect("unix seconds");
    assert_eq!(timestamp, app.now().timestamp());
    assert_eq!(
        header(&first, "x-service-signature"),
        voxline::webhooks::delivery::signature(&secret, timestamp, &first.body)
    );
    let body: Value = serde_json::from_slice(&first.body).expect("JSON body");
    assert_eq!(body["event"], "call.completed");
    assert_eq!(body["callId"], call_id.as_str());
    assert_eq!(body["status"], "no-answer");
    assert_eq!(body["durationSeconds"], 0);
    assert_eq!(body["endedReason"], "no-answer");
    assert_eq!(body["agentId"], agent.as_str());
    assert_eq!(body["rating"], Value::Null);
    assert_eq!(body["costPaise"], 0);
    assert!(body["eventId"].as_str().is_some_and(|e| !e.is_empty()));
    assert!(body["transcript"].is_array());

    // The 503 schedules a retry a minute later; nothing is sent before then.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "no retry before the backoff");
    clock.advance(chrono::Duration::seconds(61));
    let second = eventually(Duration::from_secs(10), "the retry", || async {
        seen.lock().unwrap().get(1).cloned()
    })
    .await;
    assert_eq!(
        header(&second, "x-service-delivery"),
        header(&first, "x-service-delivery"),
        "a retry is the same delivery"
    );
    let retried: Value = serde_json::from_slice(&second.body).expect("JSON");
    assert_eq!(retried["eventId"], body["eventId"]);
    let deliveries = app
        .store()
        .call_deliveries(call_id.parse().expect("call id"))
        .await
        .expect("deliveries");
    let settled = eventually(
        Duration::from_secs(5),
        "the delivery to be recorded",
        || async {
            let rows = app
                .store()
                .call_deliveries(call_id.parse().expect("call id"))
                .await
                .expect("deliveries");
            (rows.first().is_some_and(|d| d.status == "delivered")).then_some(rows)
        },
    )
    .await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(settled[0].attempts, 2);

    // Redelivery: a new delivery of the same event.
    let reply = app
        .post_empty(&ws.key, &format!("/api/calls/{call_id}/redeliver-webhook"))
        .await
        .expect(200);
    assert!(reply.message().contains('1'), "{}", reply.message());
    let third = eventually(Duration::from_secs(10), "the redelivery", || async {
        seen.lock().unwrap().get(2).cloned()
    })
    .await;
    assert_ne!(
        header(&third, "x-service-delivery"),
        header(&first, "x-service-delivery")
    );
    let again: Value = serde_json::from_slice(&third.body).expect("JSON");
    assert_eq!(
        again["eventId"], body["eventId"],
        "receivers dedupe by eventId"
    );

    // Unknown calls answer 404, another workspace's call too.
    app.post_empty(
        &ws.key,
        "/api/calls/00000000-0000-7000-8000-000000000000/redeliver-webhook",
    )
    .await
    .expect(404);
    let other = app.calling_workspace("Other", 1).await;
    app.post_empty(
        &other.key,
        &format!("/api/calls/{call_id}/redeliver-webhook"),
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn a_live_call_cannot_be_redelivered_and_private_addresses_are_refused() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Guard", 5).await;
    // A private address the server does not allow-list: never contacted. (Adding it
    // needs the admin's own allow-list: the server checks again at delivery.)
    app.admin_ok(&[
        "webhook",
        "add",
        "--org",
        &ws.org_id.to_string(),
        "--url",
        "http://192.168.77.1:9/hook",
        "--allow-host",
        "192.168.77.1",
    ])
    .await;
    let agent = agent(&app, &ws).await;
    // 95–97 answer and stay silent, so the call is live for a while.
    let live = place(&app, &ws, &agent, "+919845012395").await;
    let conflict = app
        .post_empty(&ws.key, &format!("/api/calls/{live}/redeliver-webhook"))
        .await
        .expect(409);
    assert!(
        conflict.message().contains("not ended"),
        "{}",
        conflict.message()
    );
    app.post_empty(&ws.key, &format!("/api/calls/{live}/cancel"))
        .await
        .expect(200);
    let rows = eventually(Duration::from_secs(15), "the refused delivery", || async {
        let rows = app
            .store()
            .call_deliveries(live.parse().expect("call id"))
            .await
            .expect("deliveries");
        rows.first()
            .is_some_and(|d| d.status == "failed")
            .then_some(rows)
    })
    .await;
    assert_eq!(rows[0].attempts, 1, "a refused address is not retried");
    let error = rows[0].last_error.clone().unwrap_or_default();
    assert!(error.contains("address refused"), "{error}");
}

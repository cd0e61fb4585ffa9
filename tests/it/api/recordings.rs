//! Call recordings (decisions §9): `recording-url` signed links that expire
//! after 15 minutes and work without a key, `/recording` streaming with
//! `Range`, and the retention janitor (files deleted, url null, turn rows
//! pruned, `transcriptText` kept). Calls run end to end on the sim carrier.

use crate::support::{TestApp, Workspace, eventually, reply};
use chrono::Utc;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;
use voxline::domain::Paise;
use voxline::domain::clock::ManualClock;

/// Long enough for a sim call: answer, greeting, one caller line, goodbye.
const CALL_WAIT: Duration = Duration::from_secs(40);

/// A workspace that can dial on the sim carrier, and an agent.
async fn dialer(app: &TestApp, name: &str) -> (Workspace, String) {
    let ws = app.workspace(name).await;
    let now = app.now();
    app.store()
        .credit_wallet(ws.org_id, Paise(1_000_000), now.timestamp_millis())
        .await
        .expect("credit");
    let phone = if name == "Other" {
        "+918000000003"
    } else {
        "+918000000002"
    };
    app.add_number(&ws, phone, "sim").await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Recorder",
                "welcomeMessage": "Hello from Voxline.",
                "prompt": "You confirm appointments.",
            }),
        )
        .await;
    (ws, agent["id"].as_str().expect("agent id").to_string())
}

/// Places a call to `to` and waits until it has ended; returns its detail.
async fn finished_call(app: &TestApp, ws: &Workspace, agent: &str, to: &str) -> Value {
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": to, "variables": {"simScript": ["Goodbye."]}}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();
    eventually(CALL_WAIT, "the call to end", || async {
        let call = app.get(&ws.key, &format!("/api/calls/{id}")).await.body;
        let status = call["rawStatus"].as_str().unwrap_or_default();
        (!["queued", "ringing", "in-progress"].contains(&status)).then_some(call)
    })
    .await
}

async fn recording_url(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls/{id}/recording-url"))
        .await
        .expect(200)
        .body
}

/// GET of a full URL with no key and optional `Range`.
async fn fetch(
    app: &TestApp,
    url: &str,
    range: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = app.http.get(url);
    if let Some(range) = range {
        req = req.header("range", range);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.expect("body").to_vec();
    (status, headers, body)
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn recordings_are_signed_links_and_ranged_streams() {
    let clock = ManualClock::new(Utc::now());
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let (ws, agent) = dialer(&app, "Recorded").await;
    let call = finished_call(&app, &ws, &agent, "+919845012310").await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    let id = call["id"].as_str().expect("id").to_string();

    // The whole file through the API, with a key.
    let whole = app
        .request(&ws.key, Method::GET, &format!("/api/calls/{id}/recording"))
        .send()
        .await
        .expect("send");
    assert_eq!(whole.status().as_u16(), 200);
    assert_eq!(header(whole.headers(), "content-type"), "audio/wav");
    assert_eq!(header(whole.headers(), "accept-ranges"), "bytes");
    let wav = whole.bytes().await.expect("body").to_vec();
    assert_eq!(&wav[..4], b"RIFF");
    assert_eq!(&wav[8..12], b"WAVE");
    let len = wav.len();
    // 8 kHz, 16-bit stereo: 32,000 bytes a second; the call lasted seconds.
    assert!(len > 44 + 32_000, "{len} bytes");

    // Ranges: a prefix, a suffix, an open end, and one past the end.
    let ranged = |range: String| {
        let app = &app;
        let key = ws.key.clone();
        let id = id.clone();
        async move {
            let resp = app
                .request(&key, Method::GET, &format!("/api/calls/{id}/recording"))
                .header("range", range)
                .send()
                .await
                .expect("send");
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            (status, headers, resp.bytes().await.expect("body").to_vec())
        }
    };
    let (status, headers, body) = ranged("bytes=0-43".into()).await;
    assert_eq!(status, 206);
    assert_eq!(
        header(&headers, "content-range"),
        format!("bytes 0-43/{len}")
    );
    assert_eq!(body, wav[..44]);
    let (status, headers, body) = ranged("bytes=-100".into()).await;
    assert_eq!(status, 206);
    assert_eq!(
        header(&headers, "content-range"),
        format!("bytes {}-{}/{len}", len - 100, len - 1)
    );
    assert_eq!(body, wav[len - 100..]);
    let (status, _, body) = ranged(format!("bytes={}-", len - 10)).await;
    assert_eq!(status, 206);
    assert_eq!(body, wav[len - 10..]);
    let (status, headers, body) = ranged(format!("bytes={len}-")).await;
    assert_eq!(status, 416);
    assert_eq!(header(&headers, "content-range"), format!("bytes */{len}"));
    let message: Value = serde_json::from_slice(&body).expect("JSON error");
    assert!(message["message"].is_string());

    // The signed link serves the same bytes without a key.
    let link = recording_url(&app, &ws, &id).await;
    assert_eq!(link["callId"], id.as_str());
    let url = link["url"].as_str().expect("url").to_string();
    assert!(
        url.starts_with(&format!("{}/recordings/", app.base)),
        "{url}"
    );
    let (status, headers, body) = fetch(&app, &url, None).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), "audio/wav");
    assert_eq!(body, wav);
    let (status, _, body) = fetch(&app, &url, Some("bytes=4-11")).await;
    assert_eq!(status, 206);
    assert_eq!(body, wav[4..12]);

    // Tampered links are refused.
    let tampered = url.replace("signature=", "signature=00");
    assert_eq!(fetch(&app, &tampered, None).await.0, 403);
    let other_call = url.replacen(&id, "0192f0a0-0000-7000-8000-000000000000", 1);
    assert_eq!(fetch(&app, &other_call, None).await.0, 403);
    let unsigned = url.split('?').next().unwrap_or_default().to_string();
    assert_eq!(fetch(&app, &unsigned, None).await.0, 403);

    // Another workspace cannot read it.
    let (other, _) = dialer(&app, "Other").await;
    app.get(&other.key, &format!("/api/calls/{id}/recording-url"))
        .await
        .expect(404);
    app.get(&other.key, &format!("/api/calls/{id}/recording"))
        .await
        .expect(404);

    // Fifteen minutes later the link has expired; a fresh one works.
    clock.advance(chrono::Duration::minutes(14));
    assert_eq!(fetch(&app, &url, None).await.0, 200);
    clock.advance(chrono::Duration::minutes(2));
    let (status, _, body) = fetch(&app, &url, None).await;
    assert_eq!(status, 403);
    let message: Value = serde_json::from_slice(&body).expect("JSON error");
    assert!(
        message["message"]
            .as_str()
            .unwrap_or_default()
            .contains("expired"),
        "{message}"
    );
    let fresh = recording_url(&app, &ws, &id).await;
    let fresh = fresh["url"].as_str().expect("fresh url");
    assert_eq!(fetch(&app, fresh, None).await.0, 200);
}

#[tokio::test]
async fn unanswered_calls_have_no_recording() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialer(&app, "Busy").await;
    // Numbers ending 85–89 are busy on the sim carrier.
    let call = finished_call(&app, &ws, &agent, "+919845012385").await;
    assert_eq!(call["rawStatus"], "busy", "{call}");
    let id = call["id"].as_str().expect("id");
    let link = recording_url(&app, &ws, id).await;
    assert_eq!(link, json!({"url": null, "callId": id, "formats": []}));
    let missing = app
        .get(&ws.key, &format!("/api/calls/{id}/recording"))
        .await
        .expect(404);
    assert!(missing.message().contains("no recording"), "{missing:?}");
    app.get(
        &ws.key,
        "/api/calls/0192f0a0-0000-7000-8000-000000000000/recording-url",
    )
    .await
    .expect(404);
    app.get(&ws.key, "/api/calls/not-an-id/recording")
        .await
        .expect(404);
    // No key: the API routes stay closed.
    let anonymous = reply(
        app.http
            .get(format!("{}/api/calls/{id}/recording", app.base))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(anonymous.status.as_u16(), 401);
}

#[tokio::test]
async fn retention_deletes_recordings_and_prunes_turns_but_keeps_the_transcript() {
    let clock = ManualClock::new(Utc::now());
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let (ws, agent) = dialer(&app, "Retained").await;
    let call = finished_call(&app, &ws, &agent, "+919845012310").await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    let id = call["id"].as_str().expect("id").to_string();
    let transcript = app
        .get(&ws.key, &format!("/api/calls/{id}/transcript"))
        .await
        .expect(200)
        .body;
    let text = transcript["transcriptText"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(text.starts_with("Bot: Hello from Voxline."), "{text}");
    assert!(transcript["turns"].as_array().is_some_and(|t| t.len() >= 2));
    let files = |dir: std::path::PathBuf| {
        std::fs::read_dir(dir)
            .map(|d| d.filter_map(Result::ok).count())
            .unwrap_or(0)
    };
    let dir = app.data_dir.join("recordings").join(ws.org_id.to_string());
    // The WAV, and its Ogg Opus copy when built with `opus`.
    let formats = if cfg!(feature = "opus") { 2 } else { 1 };
    assert_eq!(files(dir.clone()), formats);

    // Inside the window nothing goes (a few janitor passes at 100 ms).
    clock.advance(chrono::Duration::days(89));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(recording_url(&app, &ws, &id).await["url"].is_string());
    assert_eq!(files(dir.clone()), formats);

    // Past 90 days: file deleted, url null, turns pruned, transcriptText kept.
    clock.advance(chrono::Duration::days(2));
    eventually(
        Duration::from_secs(10),
        "the recording to expire",
        || async {
            recording_url(&app, &ws, &id).await["url"]
                .is_null()
                .then_some(())
        },
    )
    .await;
    assert_eq!(files(dir), 0);
    app.get(&ws.key, &format!("/api/calls/{id}/recording"))
        .await
        .expect(404);
    let listed = app.get(&ws.key, "/api/recordings").await.expect(200).body;
    assert_eq!(listed["total"], 0, "{listed}");
    let after = eventually(Duration::from_secs(10), "turns to be pruned", || async {
        let t = app
            .get(&ws.key, &format!("/api/calls/{id}/transcript"))
            .await
            .expect(200)
            .body;
        t["turns"]
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(t)
    })
    .await;
    assert_eq!(after["transcriptText"], text.as_str());
}

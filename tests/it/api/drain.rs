//! Stopping the real `voxline serve` process (issue 19, points 3 and 7).
//!
//! SIGTERM drains: `/healthz` says `draining` and `/readyz` answers 503, no new
//! call starts (one placed meanwhile stays queued for the next start), live
//! calls finish their scripts, and the process exits 0 with every result,
//! recording and webhook stored. Past the grace period, or on a second signal,
//! what is left ends `service-shutdown`, billed, with its results stored.
//! A live call's last sign of life is stamped every 2 s for as long as it
//! lasts, and a kill -9 bills an answered call up to it, so a crash neither
//! makes a call free nor cuts its bill short (issue 28, point 2).

use crate::support::{ServeProcess, TestApp, Workspace, eventually};
use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use voxline::app::server::Server;
use voxline::config::Settings;

const LIVE: [&str; 3] = ["queued", "ringing", "in-progress"];

/// A `voxline serve` process on the app's database and data dir, with
/// `grace` seconds of shutdown grace; takes over `app` (whose in-process
/// server must be stopped) and points its HTTP helpers at the process.
struct Serve;

impl Serve {
    async fn start(app: &mut TestApp, grace: u64) -> ServeProcess {
        let serve = ServeProcess::start(
            &app.data_dir,
            &app.database_url,
            &[("VOXLINE_SHUTDOWN_GRACE_SECONDS", grace.to_string())],
        )
        .await;
        app.base = serve.base.clone();
        app.http = reqwest::Client::new();
        serve
    }
}

/// A fresh in-process server on the same database after the process is gone.
async fn restart_in_process(app: &mut TestApp) {
    let server = Server::start(
        Settings::for_tests(app.data_dir.clone(), Some(app.database_url.clone())),
        app.clock.clone(),
    )
    .await
    .expect("server restarts");
    app.base = server.base_url();
    app.server = Some(server);
    app.http = reqwest::Client::new();
}

/// An app with a calling workspace and a pipeline agent, its in-process
/// server stopped so that the process can take over.
async fn prepared(welcome: &str) -> (TestApp, Workspace, String) {
    let mut app = TestApp::spawn().await;
    let ws = app.calling_workspace("Drain", 10).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Drain",
                "welcomeMessage": welcome,
                "prompt": "Be brief.",
                "silenceTimeoutSeconds": 10,
                "perMinuteRatePaise": 700,
            }),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    app.server.take().expect("running").shutdown().await;
    (app, ws, agent)
}

async fn place(app: &TestApp, ws: &Workspace, agent: &str, to: &str, script: Value) -> String {
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": to, "variables": {"simScript": script}}),
    )
    .await
    .expect(201)
    .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

async fn detail(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body
}

async fn all_in_progress(app: &TestApp, ws: &Workspace, ids: &[String]) {
    eventually(
        Duration::from_secs(20),
        "the calls to be answered",
        || async {
            for id in ids {
                if detail(app, ws, id).await["rawStatus"] != "in-progress" {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// Waits until the call's stored transcript has `line` from the callee.
async fn heard(app: &TestApp, ws: &Workspace, id: &str, line: &str) {
    eventually(Duration::from_secs(20), "the callee's line", || async {
        said(&detail(app, ws, id).await, line).then_some(())
    })
    .await;
}

/// Whether the callee's `line` is in the call's transcript.
fn said(call: &Value, line: &str) -> bool {
    call["transcript"].as_array().is_some_and(|turns| {
        turns
            .iter()
            .any(|t| t["speaker"] != "Bot" && t["text"] == line)
    })
}

async fn ended(app: &TestApp, ws: &Workspace, id: &str, within: Duration) -> Value {
    eventually(within, &format!("call {id} to end"), || async {
        let call = detail(app, ws, id).await;
        (!LIVE.contains(&call["rawStatus"].as_str().unwrap_or("queued"))).then_some(call)
    })
    .await
}

/// No call of the workspace is queued, ringing or in progress.
async fn none_live(app: &TestApp, ws: &Workspace) -> bool {
    let page = app
        .get(
            &ws.key,
            "/api/calls?status=queued,ringing,in-progress&limit=100",
        )
        .await
        .expect(200);
    page.body["stats"]["total"] == 0
}

/// The wallet moved by exactly the calls' charges.
async fn assert_ledger_matches(app: &TestApp, ws: &Workspace, ids: &[String]) {
    let mut charged = 0;
    for id in ids {
        charged += detail(app, ws, id).await["costPaise"]
            .as_i64()
            .expect("costPaise");
    }
    let balance = app.get(&ws.key, "/api/wallet").await.expect(200).body["balancePaise"]
        .as_i64()
        .expect("balance");
    assert_eq!(balance, 100_000 - charged, "wallet vs. call charges");
}

/// The call's recording streams.
async fn assert_recording(app: &TestApp, ws: &Workspace, id: &str) {
    let reply = app
        .get(&ws.key, &format!("/api/calls/{id}/recording"))
        .await;
    assert_eq!(reply.status, 200, "recording of {id}: {reply:?}");
}

/// A webhook receiver on port 0 collecting the events' bodies.
pub async fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new().route(
        "/hook",
        post({
            let seen = seen.clone();
            move |body: Bytes| {
                let seen = seen.clone();
                async move {
                    if let Ok(event) = serde_json::from_slice::<Value>(&body) {
                        seen.lock().unwrap().push(event);
                    }
                    axum::http::StatusCode::OK
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

const FINISHING: [&str; 2] = ["Yes, I have a minute.", "Thank you, goodbye!"];

#[tokio::test]
async fn sigterm_drains_live_calls_then_exits_0_with_everything_stored() {
    let (mut app, ws, agent) = prepared("Hi.").await;
    let (url, events) = receiver().await;
    app.admin_ok(&[
        "webhook",
        "add",
        "--org",
        &ws.org_id.to_string(),
        "--url",
        &url,
    ])
    .await;
    let mut serve = Serve::start(&mut app, 60).await;
    app.get("", "/healthz").await.expect(200);
    let mut calls = Vec::new();
    for i in 0..3 {
        calls.push(
            place(
                &app,
                &ws,
                &agent,
                &format!("+91984501230{i}"),
                json!(FINISHING),
            )
            .await,
        );
    }
    all_in_progress(&app, &ws, &calls).await;

    serve.signal("TERM");
    let health = eventually(
        Duration::from_secs(5),
        "/healthz to say draining",
        || async {
            let health = app.get("", "/healthz").await;
            (health.body["status"] == "draining").then_some(health)
        },
    )
    .await;
    assert_eq!(health.status, 200);
    assert_eq!(health.body["status"], "draining");
    assert_eq!(health.body["node"]["draining"], true, "{}", health.body);
    let ready = app.get("", "/readyz").await.expect(503);
    assert_eq!(
        ready.body,
        json!({"status": "draining", "message": "shutting down"})
    );
    // The calls go on while the server drains.
    assert_eq!(
        detail(&app, &ws, &calls[0]).await["rawStatus"],
        "in-progress"
    );
    // A call placed now is stored but not started: it waits for the next start.
    let later = place(&app, &ws, &agent, "+919845012310", json!(FINISHING)).await;
    let took = serve.exit_cleanly_within(Duration::from_secs(75)).await;
    assert!(
        took < Duration::from_secs(60),
        "drained in {took:?}, past the grace"
    );

    restart_in_process(&mut app).await;
    for id in &calls {
        let call = detail(&app, &ws, id).await;
        assert_eq!(call["rawStatus"], "completed", "{call}");
        assert_ne!(call["endedReason"], "service-shutdown", "{call}");
        assert_ne!(call["endedReason"], "service-restart", "{call}");
        assert!(said(&call, "Thank you, goodbye!"), "{call}");
        assert!(
            call["costPaise"].as_i64().unwrap_or_default() >= 700,
            "{call}"
        );
        assert_recording(&app, &ws, id).await;
    }
    // Queued during the drain, dialed by the next start.
    let call = ended(&app, &ws, &later, Duration::from_secs(60)).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert!(none_live(&app, &ws).await);
    let mut all = calls.clone();
    all.push(later);
    assert_ledger_matches(&app, &ws, &all).await;
    eventually(Duration::from_secs(90), "every call.completed", || async {
        let events = events.lock().unwrap();
        all.iter()
            .all(|id| {
                events
                    .iter()
                    .any(|e| e["event"] == "call.completed" && e["callId"] == id.as_str())
            })
            .then_some(())
    })
    .await;
    app.shutdown().await;
}

/// A script long enough (sixteen exchanges) to outlast the tests' waits:
/// the sim agent hangs up only once the callee said every line.
fn lingering() -> Value {
    let mut lines = vec!["Yes, I have a minute."];
    lines.extend(["Please go on."; 15]);
    json!(lines)
}

#[tokio::test]
async fn past_the_grace_live_calls_end_service_shutdown_billed_and_stored() {
    let (mut app, ws, agent) = prepared("Hi.").await;
    let mut serve = Serve::start(&mut app, 3).await;
    let id = place(&app, &ws, &agent, "+919845012320", lingering()).await;
    all_in_progress(&app, &ws, std::slice::from_ref(&id)).await;
    let answered = Instant::now();
    heard(&app, &ws, &id, "Yes, I have a minute.").await;
    serve.signal("TERM");
    serve.exit_cleanly_within(Duration::from_secs(30)).await;
    let talked = answered.elapsed();

    restart_in_process(&mut app).await;
    let call = detail(&app, &ws, &id).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["endedReason"], "service-shutdown", "{call}");
    let seconds = call["durationSeconds"].as_i64().expect("durationSeconds");
    assert!(
        (2..=talked.as_secs() as i64 + 1).contains(&seconds),
        "billed {seconds} s for a call cut after the 3 s grace ({talked:?}): {call}"
    );
    assert_eq!(call["costPaise"], 700, "one started minute: {call}");
    assert!(said(&call, "Yes, I have a minute."), "{call}");
    assert_recording(&app, &ws, &id).await;
    assert!(none_live(&app, &ws).await);
    assert_ledger_matches(&app, &ws, &[id]).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_second_signal_ends_live_calls_at_once_still_storing_them() {
    let (mut app, ws, agent) = prepared("Hi.").await;
    let mut serve = Serve::start(&mut app, 120).await;
    let id = place(&app, &ws, &agent, "+919845012330", lingering()).await;
    all_in_progress(&app, &ws, std::slice::from_ref(&id)).await;
    heard(&app, &ws, &id, "Yes, I have a minute.").await;
    serve.signal("TERM");
    eventually(
        Duration::from_secs(5),
        "/healthz to say draining",
        || async { (app.get("", "/healthz").await.body["status"] == "draining").then_some(()) },
    )
    .await;
    serve.signal("INT");
    let took = serve.exit_cleanly_within(Duration::from_secs(30)).await;
    assert!(
        took < Duration::from_secs(15),
        "took {took:?} after SIGTERM"
    );

    restart_in_process(&mut app).await;
    let call = detail(&app, &ws, &id).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["endedReason"], "service-shutdown", "{call}");
    assert_eq!(call["costPaise"], 700, "{call}");
    assert!(said(&call, "Yes, I have a minute."), "{call}");
    assert_recording(&app, &ws, &id).await;
    assert_ledger_matches(&app, &ws, &[id]).await;
    app.shutdown().await;
}

const LONG_GREETING: &str = "Hello, this is the hiring desk calling about your application. ";

/// A stored call's `answered_at` and `last_seen_at` (Unix ms). The heartbeat
/// is not in the API, so the test reads the row (on SQLite or Postgres).
async fn stamps(database_url: &str, id: &str) -> (Option<i64>, Option<i64>) {
    use sqlx::Connection;
    const SQL: &str = "SELECT answered_at, last_seen_at FROM calls WHERE id = $1";
    if database_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(database_url)
            .await
            .expect("open the SQLite database");
        sqlx::query_as(SQL)
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .expect("the call's row")
    } else {
        let mut conn = sqlx::PgConnection::connect(database_url)
            .await
            .expect("connect to Postgres");
        sqlx::query_as(SQL)
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .expect("the call's row")
    }
}

fn wall_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Sleeps until the wall clock reads `at_ms`.
async fn sleep_until_wall(at_ms: i64) {
    let wait = u64::try_from(at_ms - wall_ms()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

#[tokio::test]
async fn a_live_call_is_stamped_every_2_s_and_a_crash_bills_it_up_to_the_last_stamp() {
    // A greeting of about 40 s: no turn ends (and none is stored) while it
    // plays, so only the heartbeat tells how long the call went on.
    let (mut app, ws, agent) = prepared(&LONG_GREETING.repeat(9)).await;
    let mut serve = Serve::start(&mut app, 30).await;
    let id = place(&app, &ws, &agent, "+919845012340", lingering()).await;
    all_in_progress(&app, &ws, std::slice::from_ref(&id)).await;
    let (answered, _) = stamps(&app.database_url, &id).await;
    let answered = answered.expect("answered_at of a call in progress");

    // Every second for the first 10 s of the call, the last stamp is at most
    // one heartbeat (2 s) old, with room for a busy machine.
    let mut seen = Vec::new();
    for second in 1..=10 {
        sleep_until_wall(answered + second * 1_000).await;
        let (_, last_seen) = stamps(&app.database_url, &id).await;
        let read_at = wall_ms();
        let last_seen = last_seen.expect("stamped from the start of the conversation");
        assert!(
            read_at - last_seen <= 3_500,
            "at answer + {second} s the last stamp was {} ms old (answer + {} ms); stamps so far: {seen:?}",
            read_at - last_seen,
            last_seen - answered,
        );
        seen.push(last_seen - answered);
    }
    seen.dedup();
    assert!(seen.len() >= 4, "stamps at answer + {seen:?} ms");

    // kill -9 at answer + 30 s: nothing of the shutdown runs.
    sleep_until_wall(answered + 30_000).await;
    assert_eq!(
        detail(&app, &ws, &id).await["rawStatus"],
        "in-progress",
        "the call lasts until the crash"
    );
    serve.child.start_kill().expect("kill -9");
    let talked_ms = wall_ms() - answered;
    let _ = serve.exit_within(Duration::from_secs(10)).await;

    restart_in_process(&mut app).await;
    let call = detail(&app, &ws, &id).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["endedReason"], "service-restart", "{call}");
    let seconds = call["durationSeconds"].as_i64().expect("durationSeconds");
    assert!(
        (28..=talked_ms / 1_000).contains(&seconds),
        "billed {seconds} s for {talked_ms} ms talked before the crash: {call}"
    );
    assert_eq!(call["costPaise"], 700, "the started minute: {call}");
    assert!(none_live(&app, &ws).await);
    assert_ledger_matches(&app, &ws, &[id]).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_bad_grace_stops_the_start_naming_the_variable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = tokio::process::Command::new(crate::support::VOXLINE_BIN)
        .arg("--data-dir")
        .arg(dir.path())
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env_remove("VOXLINE_CONFIG")
        .env("VOXLINE_LISTEN", "127.0.0.1:0")
        .env("VOXLINE_ADMIN_LISTEN", "127.0.0.1:0")
        .env("VOXLINE_SHUTDOWN_GRACE_SECONDS", "30s")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    // A server that ignored the value would serve on: bounded, it fails.
    let out = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("voxline serve stops at once on a bad value")
        .expect("run voxline serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("invalid value '30s' in environment variable VOXLINE_SHUTDOWN_GRACE_SECONDS"),
        "{stderr}"
    );
}

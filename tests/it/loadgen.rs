//! `voxline loadgen` end to end: the real binary starts a server in-process, places calls
//! through the API, answers them over real websockets and prints a JSON summary.

use crate::support::VOXLINE_BIN;
use serde_json::Value;
use std::process::Command;

/// Runs `voxline loadgen <args> --json` (in-process server) and returns its
/// JSON summary, failing the test if the run fails.
fn run_loadgen(args: &[&str]) -> Value {
    let output = Command::new(VOXLINE_BIN)
        .arg("loadgen")
        .args(args)
        .arg("--json")
        .env_remove("VOXLINE_API_KEY")
        .output()
        .expect("the voxline binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "loadgen failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).expect("stdout is the JSON summary")
}

#[test]
fn loadgen_runs_three_calls_in_process_and_counts_them() {
    let summary = run_loadgen(&[
        "--calls",
        "3",
        "--concurrency",
        "3",
        "--duration",
        "60",
        "--sim-answer-ms",
        "100",
        "--script",
        r#"["Yes, I have a minute.", "Thank you, goodbye!"]"#,
    ]);
    assert_eq!(summary["calls"], 3, "{summary:#}");
    assert_eq!(summary["placed"], 3, "{summary:#}");
    assert_eq!(summary["answered"], 3, "{summary:#}");
    assert_eq!(summary["ended"], 3, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(summary["failures"], serde_json::json!({}), "{summary:#}");
    assert_eq!(summary["liveAtEnd"], 0, "{summary:#}");
    // Every call had a greeting and two caller turns answered by the agent.
    assert_eq!(summary["greetingLatency"]["count"], 3, "{summary:#}");
    assert_eq!(summary["turnLatency"]["count"], 6, "{summary:#}");
    assert!(
        summary["frames"]["frames"].as_u64().unwrap_or(0) > 0,
        "{summary:#}"
    );
    assert!(
        summary["usage"]["peakActiveCalls"].as_u64().unwrap_or(0) >= 1,
        "{summary:#}"
    );
}

#[test]
fn loadgen_rings_the_number_as_inbound_callers_and_reports_the_answer_latency() {
    let summary = run_loadgen(&[
        "--inbound",
        "--calls",
        "3",
        "--concurrency",
        "3",
        "--duration",
        "60",
        "--script",
        r#"["Yes, I have a question.", "Thank you, goodbye!"]"#,
    ]);
    assert_eq!(summary["mode"], "inbound", "{summary:#}");
    assert_eq!(summary["answered"], 3, "{summary:#}");
    assert_eq!(summary["ended"], 3, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(summary["answerLatency"]["count"], 3, "{summary:#}");
    assert_eq!(summary["turnLatency"]["count"], 6, "{summary:#}");
    // The callers run on the fleet's threads, so their frames are the callee's measure.
    assert!(
        summary["frames"]["frames"].as_u64().unwrap_or(0) > 0,
        "{summary:#}"
    );
}

#[test]
fn loadgen_mixed_mode_rings_and_dials_half_each() {
    let summary = run_loadgen(&[
        "--mode",
        "mixed",
        "--calls",
        "4",
        "--concurrency",
        "4",
        "--duration",
        "60",
        "--sim-answer-ms",
        "100",
        "--script",
        r#"["Yes, I have a minute.", "Thank you, goodbye!"]"#,
    ]);
    assert_eq!(summary["mode"], "mixed", "{summary:#}");
    assert_eq!(summary["answered"], 4, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(
        summary["answerLatency"]["count"], 2,
        "half were inbound: {summary:#}"
    );
    assert_eq!(summary["greetingLatency"]["count"], 4, "{summary:#}");
}

/// Calls still talking when `--duration` runs out are hung up and reported as live at
/// the end, not failed, and each still has its greeting measured (the callee's report
/// used to be lost when the watcher stopped waiting, so most had none).
#[test]
fn calls_cut_by_the_duration_are_live_at_the_end_not_failed() {
    let summary = run_loadgen(&[
        "--calls",
        "3",
        "--concurrency",
        "3",
        "--duration",
        "6",
        "--sim-answer-ms",
        "100",
        "--script",
        r#"["Yes, I have a minute.", "Tell me more.", "Go on.", "And then?", "Thank you, goodbye!"]"#,
    ]);
    assert_eq!(summary["answered"], 3, "{summary:#}");
    assert_eq!(summary["liveAtEnd"], 3, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(summary["failures"], serde_json::json!({}), "{summary:#}");
    assert_eq!(summary["greetingLatency"]["count"], 3, "{summary:#}");
    assert_eq!(
        summary["greetingMissing"],
        serde_json::json!({}),
        "{summary:#}"
    );
}

#[test]
fn loadgen_drains_a_seeded_analysis_backlog_and_reports_it() {
    let summary = run_loadgen(&[
        "--calls",
        "1",
        "--concurrency",
        "1",
        "--duration",
        "30",
        "--sim-answer-ms",
        "100",
        "--script",
        r#"["Thank you, goodbye!"]"#,
        "--analysis-backlog",
        "50",
    ]);
    assert_eq!(summary["failed"], 0, "{summary:#}");
    let analysis = &summary["analysis"];
    assert_eq!(analysis["backlog"], 50, "{summary:#}");
    assert_eq!(analysis["drained"], 50, "{summary:#}");
    assert_eq!(analysis["failed"], 0, "{summary:#}");
    assert!(analysis["secondsToDrain"].as_f64().is_some(), "{summary:#}");
    assert!(
        analysis["perSecond"].as_f64().unwrap_or(0.0) > 0.0,
        "{summary:#}"
    );
}

#[test]
fn loadgen_calls_a_slow_function_tool_once_per_call_and_reports_it() {
    let summary = run_loadgen(&[
        "--calls",
        "5",
        "--concurrency",
        "5",
        "--duration",
        "60",
        "--sim-answer-ms",
        "100",
        "--tool-latency-ms",
        "50",
    ]);
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(summary["answered"], 5, "{summary:#}");
    let tools = &summary["tools"];
    assert_eq!(tools["serverDelayMs"], 50, "{summary:#}");
    // Every call reached the order question, and each asked the function exactly once.
    assert_eq!(tools["callsAtToolLine"], 5, "{summary:#}");
    assert_eq!(tools["functionRequests"], 5, "{summary:#}");
    assert_eq!(tools["callsRead"], 5, "{summary:#}");
    assert_eq!(tools["toolCalls"], 5, "{summary:#}");
    assert_eq!(tools["toolErrors"], 0, "{summary:#}");
    assert_eq!(tools["latency"]["count"], 5, "{summary:#}");
    assert!(
        tools["minLatencyMs"].as_f64().unwrap_or(0.0) >= 50.0,
        "{summary:#}"
    );
    assert_eq!(summary["frames"]["lateFrames"], 0, "{summary:#}");
    // The greeting and the three lines of the default tool script were answered.
    assert_eq!(summary["turnLatency"]["count"], 15, "{summary:#}");
}

/// `--target` with several servers (nodes sharing a database) gives them calls in turn
/// and counts each one's. On Postgres the targets are two nodes; on SQLite, one node
/// reached by two names.
#[tokio::test]
async fn loadgen_spreads_calls_over_several_targets_round_robin() {
    let app = crate::support::TestApp::spawn().await;
    let ws = app.calling_workspace("Loadgen targets", 10).await;
    let peer = if app.store().is_shared() {
        Some(app.spawn_peer(|_| {}).await)
    } else {
        None
    };
    let first = app.base.clone();
    let second = match &peer {
        Some(peer) => peer.base.clone(),
        None => first.replace("127.0.0.1", "localhost"),
    };
    assert_ne!(first, second);
    let targets = format!("{first},{second}");
    let output = tokio::process::Command::new(VOXLINE_BIN)
        .arg("loadgen")
        .args(["--target", &targets, "--key", &ws.key])
        .args(["--calls", "4", "--concurrency", "4", "--duration", "60"])
        .args(["--script", r#"["Thank you, goodbye!"]"#, "--json"])
        .env_remove("VOXLINE_API_KEY")
        .output()
        .await
        .expect("the voxline binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "loadgen failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(&stdout).expect("stdout is the JSON summary");
    assert_eq!(summary["placed"], 4, "{summary:#}");
    assert_eq!(summary["ended"], 4, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(
        summary["targets"],
        serde_json::json!([
            {"target": first, "placed": 2},
            {"target": second, "placed": 2},
        ]),
        "{summary:#}"
    );
    if let Some(peer) = peer {
        peer.shutdown().await;
    }
    app.shutdown().await;
}

/// One target keeps the summary as it was: no per-target counts.
#[tokio::test]
async fn loadgen_with_one_target_reports_no_per_target_counts() {
    let app = crate::support::TestApp::spawn().await;
    let ws = app.calling_workspace("Loadgen target", 10).await;
    let output = tokio::process::Command::new(VOXLINE_BIN)
        .arg("loadgen")
        .args(["--target", &app.base, "--key", &ws.key])
        .args(["--calls", "1", "--concurrency", "1", "--duration", "60"])
        .args(["--script", r#"["Thank you, goodbye!"]"#, "--json"])
        .env_remove("VOXLINE_API_KEY")
        .output()
        .await
        .expect("the voxline binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(&stdout).expect("stdout is the JSON summary");
    assert_eq!(summary["placed"], 1, "{summary:#}");
    assert!(summary.get("targets").is_none(), "{summary:#}");
    app.shutdown().await;
}

/// `--carrier sip`: the fleet is the workspace's SIP trunk; every call is a real INVITE
/// answered with SDP and talked over G.711 RTP both ways, measured as the websocket fleet
/// measures its calls, plus the agent's RTP loss and jitter. One line and a short ring, so
/// the calls end (about 12 s) well inside the 20 s bound: the default three-line script
/// takes longer than 20 s over either carrier.
#[test]
fn loadgen_places_sip_calls_with_rtp_and_reports_the_rtp_figures() {
    let summary = run_loadgen(&[
        "--carrier",
        "sip",
        "--calls",
        "4",
        "--concurrency",
        "4",
        "--duration",
        "20",
        "--sim-answer-ms",
        "100",
        "--script",
        r#"["Thank you, goodbye!"]"#,
    ]);
    assert_eq!(summary["placed"], 4, "{summary:#}");
    assert_eq!(summary["answered"], 4, "{summary:#}");
    assert_eq!(summary["ended"], 4, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(summary["failures"], serde_json::json!({}), "{summary:#}");
    assert_eq!(summary["liveAtEnd"], 0, "{summary:#}");
    assert_eq!(summary["greetingLatency"]["count"], 4, "{summary:#}");
    assert_eq!(summary["turnLatency"]["count"], 4, "{summary:#}");
    assert!(
        summary["frames"]["frames"].as_u64().unwrap_or(0) > 0,
        "{summary:#}"
    );
    let rtp = &summary["rtp"];
    assert_eq!(rtp["calls"], 4, "{summary:#}");
    let packets = rtp["packets"].as_u64().unwrap_or(0);
    // Every agent packet is a frame the callee heard.
    assert_eq!(
        Some(packets),
        summary["frames"]["frames"].as_u64(),
        "{summary:#}"
    );
    assert!(rtp["packetsSent"].as_u64().unwrap_or(0) > 0, "{summary:#}");
    assert_eq!(rtp["lost"], 0, "loopback loses nothing: {summary:#}");
    assert!(rtp["jitter"]["p99Ms"].as_f64().is_some(), "{summary:#}");
}

/// `--fleet twilio` against a separate `voxline serve` process: the load generator is Twilio.
/// It stores the workspace's `twilio` credential (pointing at its own loopback REST API) and a
/// Twilio caller number through the console, the server dials each call through that API with
/// Basic auth, and the fleet answers with signed status callbacks the server accepts and the
/// callee on the media websocket the TwiML names: the greetings and turns are measured by those
/// callees, outside the server's process.
#[tokio::test]
async fn loadgen_as_twilio_is_dialed_by_a_separate_server_and_plays_its_callees() {
    use voxline::domain::{Email, Role};
    let mut app = crate::support::TestApp::spawn().await;
    let ws = app.calling_workspace("Loadgen Twilio fleet", 10).await;
    let email = "loadgen-admin@example.com";
    let admin = voxline::admin::people::add_person(
        app.store(),
        ws.org_id,
        &Email::parse(email).expect("email"),
        Role::Admin,
        app.now().timestamp_millis(),
    )
    .await
    .expect("a console admin");
    app.server.take().expect("running").shutdown().await;
    let serve = crate::support::ServeProcess::start(&app.data_dir, &app.database_url, &[]).await;
    let pid = serve.child.id().expect("serve runs").to_string();
    let output = tokio::process::Command::new(VOXLINE_BIN)
        .arg("loadgen")
        .args([
            "--target",
            &serve.base,
            "--key",
            &ws.key,
            "--server-pid",
            &pid,
        ])
        .args(["--fleet", "twilio", "--console-email", email])
        .args(["--console-password", &admin.one_time_password])
        .args(["--calls", "3", "--concurrency", "3", "--duration", "60"])
        .args(["--sim-answer-ms", "100"])
        .args([
            "--script",
            r#"["Yes, I have a minute.", "Thank you, goodbye!"]"#,
            "--json",
        ])
        .env_remove("VOXLINE_API_KEY")
        .env_remove("VOXLINE_CONSOLE_EMAIL")
        .env_remove("VOXLINE_CONSOLE_PASSWORD")
        .output()
        .await
        .expect("the voxline binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "loadgen failed: {}\n{stdout}\nserver:\n{}",
        String::from_utf8_lossy(&output.stderr),
        serve.logs()
    );
    let summary: Value = serde_json::from_str(&stdout).expect("stdout is the JSON summary");
    assert_eq!(summary["fleet"], "twilio", "{summary:#}");
    assert_eq!(summary["placed"], 3, "{summary:#}");
    assert_eq!(summary["answered"], 3, "{summary:#}");
    assert_eq!(summary["ended"], 3, "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    // The greeting and both lines of every call, timed by the fleet's callees.
    assert_eq!(summary["greetingLatency"]["count"], 3, "{summary:#}");
    assert_eq!(summary["turnLatency"]["count"], 6, "{summary:#}");
    assert!(
        summary["frames"]["frames"].as_u64().unwrap_or(0) > 0,
        "{summary:#}"
    );
    // Every dial came with the fleet's account as Basic auth; the server accepted every
    // signed callback (initiated, ringing, in-progress, completed: four a call at least).
    let rest = &summary["twilioRest"];
    assert_eq!(rest["dials"], 3, "{summary:#}");
    assert_eq!(rest["unauthorized"], 0, "{summary:#}");
    assert_eq!(rest["callbacksRefused"], 0, "{summary:#}");
    assert!(rest["callbacks"].as_u64().unwrap_or(0) >= 12, "{summary:#}");
    // The usage figures are the server process's own.
    assert!(
        summary["usageSource"]
            .as_str()
            .is_some_and(|source| source.contains(&pid)),
        "{summary:#}"
    );
    // The server dialed through Twilio, from the Twilio number the run rented.
    let calls: Value = reqwest::Client::new()
        .get(format!("{}/api/calls?limit=10", serve.base))
        .bearer_auth(&ws.key)
        .send()
        .await
        .expect("list calls")
        .json()
        .await
        .expect("calls JSON");
    let rows = calls["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{calls:#}");
    for row in rows {
        assert_eq!(row["provider"], "twilio", "{row:#}");
        assert_eq!(row["rawStatus"], "completed", "{row:#}");
    }
    let numbers: Value = reqwest::Client::new()
        .get(format!("{}/api/numbers", serve.base))
        .bearer_auth(&ws.key)
        .send()
        .await
        .expect("list numbers")
        .json()
        .await
        .expect("numbers JSON");
    assert!(
        numbers["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .any(|n| n["provider"] == "twilio" && n["phone"] == "+918035740102"),
        "{numbers:#}"
    );
}

/// The Twilio fleet plays a transfer as Twilio does: the agent's new TwiML ends the callee's
/// stream, the `<Dial>`ed person (a number that answers) talks for the sim transfer time, and
/// the signed report to the `<Dial action>` and the final `completed` callback settle the call
/// as transferred.
#[tokio::test]
async fn the_twilio_fleet_bridges_a_transfer_and_reports_the_leg() {
    use voxline::loadgen::fleet::Fleet;
    use voxline::loadgen::twilio_fleet::TwilioFleet;
    use voxline_actors::sim::callee::ScriptStep;
    const FRONT_DESK: &str = "+14155550123";
    let app = crate::support::TestApp::spawn().await;
    let ws = app.calling_workspace("Twilio fleet transfer", 2).await;
    let (answered_tx, _answered_rx) = tokio::sync::mpsc::unbounded_channel();
    let fleet = Fleet::new(tokio::runtime::Handle::current(), answered_tx, None);
    let script = ["Hello, yes.", "Can I speak to a person please?"];
    let twilio = TwilioFleet::start(
        fleet.clone(),
        script
            .iter()
            .map(|line| ScriptStep::Say((*line).to_owned()))
            .collect(),
        std::time::Duration::from_millis(100),
    )
    .await
    .expect("the Twilio fleet starts");
    app.add_number(&ws, "+918035740102", "twilio").await;
    app.set_credential(&ws, "twilio", &twilio.credential())
        .await;
    let agent = app
        .create_agent(
            &ws.key,
            serde_json::json!({
                "name": "Front desk",
                "welcomeMessage": "Hi, this is Voxline.",
                "prompt": "Help the caller; connect them with the front desk when they ask for a person.",
                "telephonyProvider": "twilio",
                "tools": [{"type": "transferCall", "destinations": [{
                    "number": FRONT_DESK,
                    "description": "the front desk",
                    "message": "Let me connect you with the front desk.",
                }]}],
            }),
        )
        .await;
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            // The sim ASR hears the synthetic callee's lines from the call's script.
            serde_json::json!({
                "agentId": agent["id"],
                "to": "+919845012311",
                "variables": {"simScript": script},
            }),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_owned();
    let waited = std::time::Instant::now();
    let call = loop {
        let call = app
            .get(&ws.key, &format!("/api/calls/{id}"))
            .await
            .expect(200)
            .body;
        if call["transferStatus"] != Value::Null {
            break call;
        }
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "no transfer leg reported after 60 s: {call:#}\n{:?}",
            twilio.counts()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(call["endedReason"], "transferred", "{call:#}");
    assert_eq!(call["transferredTo"], FRONT_DESK, "{call:#}");
    assert_eq!(call["transferStatus"], "completed", "{call:#}");
    assert_eq!(call["transferDurationSeconds"], 3, "{call:#}");
    assert_eq!(call["provider"], "twilio", "{call:#}");
    let report = fleet.report(&id).await.expect("the callee's report");
    assert!(report.connected, "{report:?}");
    assert_eq!(report.lines_said, script.len(), "{report:?}");
    assert!(report.greeting_latency.is_some(), "{report:?}");
    let counts = twilio.counts();
    assert_eq!(counts.dials, 1, "{counts:?}");
    assert_eq!(counts.redirects, 1, "{counts:?}");
    assert_eq!(counts.unauthorized, 0, "{counts:?}");
    assert_eq!(counts.callbacks_refused, 0, "{counts:?}");
    drop(twilio);
    app.shutdown().await;
}

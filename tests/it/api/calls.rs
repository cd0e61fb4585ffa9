//! Placing calls through the engine and the sim carrier (issue 3): outcomes,
//! the live-call 409, alert dials, concurrency slots, announcement bypass,
//! cancel, a panicking call actor, restart recovery and billing.

use crate::support::{FakeCarrier, TestApp, Workspace, eventually};
use axum::http::Method;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use voxline::domain::Paise;
use voxline::domain::clock::ManualClock;
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{CallEnd, CallLedger, CallStatus};

const TERMINAL: [&str; 5] = ["completed", "failed", "no-answer", "busy", "canceled"];

/// A short pipeline agent: a one-word greeting so sim calls end quickly.
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
    let agent = app.create_agent(&ws.key, body).await;
    agent["id"].as_str().expect("agent id").to_string()
}

/// Places one call through `POST /api/calls` and returns its id.
async fn place(app: &TestApp, ws: &Workspace, agent: &str, to: &str, variables: Value) -> String {
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": to, "variables": variables}),
        )
        .await
        .expect(201);
    assert_eq!(placed.body["status"], "queued");
    placed.body["callId"].as_str().expect("callId").to_string()
}

/// The call's detail read.
async fn detail(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body
}

/// Waits until the call is terminal and returns its detail.
async fn ended(app: &TestApp, ws: &Workspace, id: &str, within: Duration) -> Value {
    eventually(within, &format!("call {id} to end"), || async {
        let call = detail(app, ws, id).await;
        let raw = call["rawStatus"].as_str().unwrap_or_default();
        TERMINAL.contains(&raw).then_some(call)
    })
    .await
}

fn statuses(call: &Value) -> Vec<String> {
    call["statusHistory"]
        .as_array()
        .unwrap_or_else(|| panic!("no statusHistory: {call}"))
        .iter()
        .map(|e| e["status"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Number of the workspace's calls that hold a slot now.
async fn live_count(app: &TestApp, ws: &Workspace) -> i64 {
    let page = app
        .get(&ws.key, "/api/calls?status=ringing,in-progress&limit=100")
        .await
        .expect(200);
    page.body["stats"]["total"].as_i64().unwrap_or_default()
}

#[tokio::test]
async fn each_sim_outcome_ends_with_its_status_and_reason() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Outcomes", 10).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let script = json!({"simScript": ["Bye"]});
    let cases = [
        (
            "+919845012310",
            "completed",
            &["caller-hangup", "agent-hangup"][..],
        ),
        ("+919845012381", "no-answer", &["no-answer"][..]),
        ("+919845012386", "busy", &["busy"][..]),
        ("+919845012391", "failed", &["carrier-error"][..]),
        ("+919845012396", "completed", &["silence-timeout"][..]),
    ];
    let mut ids = Vec::new();
    for (to, _, _) in &cases {
        ids.push(place(&app, &ws, &agent, to, script.clone()).await);
    }
    for ((to, status, reasons), id) in cases.iter().zip(&ids) {
        let call = ended(&app, &ws, id, Duration::from_secs(30)).await;
        assert_eq!(call["rawStatus"], *status, "{to}: {call}");
        let reason = call["endedReason"].as_str().unwrap_or_default();
        assert!(
            reasons.contains(&reason),
            "{to}: endedReason {reason}: {call}"
        );
        let history = statuses(&call);
        assert_eq!(history.first().map(String::as_str), Some("queued"), "{to}");
        assert_eq!(history.last().map(String::as_str), Some(*status), "{to}");
        if *status == "completed" {
            assert!(
                history.contains(&"ringing".to_string()),
                "{to}: {history:?}"
            );
            assert!(
                history.contains(&"in-progress".to_string()),
                "{to}: {history:?}"
            );
            assert!(call["durationSeconds"].as_i64().unwrap_or_default() >= 1);
            assert!(call["costPaise"].as_i64().unwrap_or_default() > 0, "{to}");
        } else {
            assert_eq!(call["costPaise"], 0, "{to}: unanswered calls cost nothing");
            assert_eq!(call["durationSeconds"], 0, "{to}");
        }
    }
    // The talking callee left a transcript with both sides.
    let transcript = app
        .get(&ws.key, &format!("/api/calls/{}/transcript", ids[0]))
        .await
        .expect(200);
    let speakers: HashSet<&str> = transcript.body["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .filter_map(|t| t["speaker"].as_str())
        .collect();
    assert!(speakers.len() >= 2, "{}", transcript.body);
}

#[tokio::test]
async fn a_test_call_to_a_number_in_flight_answers_409_with_the_live_id() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Dup", 5).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let path = format!("/api/agents/{agent}/test-call");
    // 95–97 answer and stay silent: the call stays live for a while.
    let first = app
        .post(&ws.key, &path, json!({"phoneNumber": "+919845012395"}))
        .await
        .expect(201);
    let live_id = first.body["callId"].as_str().expect("callId").to_string();
    let second = app
        .post(&ws.key, &path, json!({"phoneNumber": "+919845012395"}))
        .await
        .expect(409);
    assert_eq!(second.body["callId"], live_id.as_str(), "{}", second.body);
    assert!(!second.message().is_empty());
    // Another number is fine.
    app.post(
        &ws.key,
        &path,
        json!({"phoneNumber": "+919845012311", "variables": {"simScript": ["Bye"]}}),
    )
    .await
    .expect(201);
    app.post_empty(&ws.key, &format!("/api/calls/{live_id}/cancel"))
        .await
        .expect(200);
    ended(&app, &ws, &live_id, Duration::from_secs(15)).await;
    // Once it ended, the same number can be called again.
    app.post(&ws.key, &path, json!({"phoneNumber": "+919845012395"}))
        .await
        .expect(201);
}

#[tokio::test]
async fn refusals_come_before_anything_is_enqueued() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Refusals", 5).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let call = |to: &str| json!({"agentId": agent, "to": to});

    // Deactivated agent: 400 naming it; deleted: 404.
    app.post_empty(&ws.key, &format!("/api/agents/{agent}/deactivate"))
        .await
        .expect(200);
    let inactive = app
        .post(&ws.key, "/api/calls", call("+919845012310"))
        .await
        .expect(400);
    assert!(
        inactive.message().contains("agent"),
        "{}",
        inactive.message()
    );
    app.post_empty(&ws.key, &format!("/api/agents/{agent}/activate"))
        .await
        .expect(200);

    // A number the workspace does not own.
    let foreign = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012310", "fromNumber": "+918035749999"}),
        )
        .await
        .expect(400);
    assert!(
        foreign.message().contains("fromNumber"),
        "{}",
        foreign.message()
    );

    // Malformed destination.
    let bad = app
        .post(&ws.key, "/api/calls", call("12345"))
        .await
        .expect(400);
    assert!(bad.message().contains("to"), "{}", bad.message());

    // A workspace without numbers: 400.
    let bare = app.workspace("Bare").await;
    app.store()
        .credit_wallet(bare.org_id, Paise(10_000), app.now().timestamp_millis())
        .await
        .expect("credit");
    let bare_agent = quick_agent(&app, &bare, json!({})).await;
    let no_number = app
        .post(
            &bare.key,
            "/api/calls",
            json!({"agentId": bare_agent, "to": "+919845012310"}),
        )
        .await
        .expect(400);
    assert!(
        no_number.message().to_lowercase().contains("number"),
        "{}",
        no_number.message()
    );

    // Empty wallet: 402.
    let poor = app.workspace("Poor").await;
    app.add_sim_number(poor.org_id).await;
    let poor_agent = quick_agent(&app, &poor, json!({})).await;
    app.post(
        &poor.key,
        "/api/calls",
        json!({"agentId": poor_agent, "to": "+919845012310"}),
    )
    .await
    .expect(402);

    // Minute quota spent: 403.
    let org = voxline::admin::ops::create_org(app.store(), "Quota", Some(5), Some(0), app.now())
        .await
        .expect("org");
    let (quota_key_id, quota_key) = app.key(org.id, "k").await;
    let quota = Workspace {
        org_id: org.id,
        key_id: quota_key_id,
        key: quota_key,
    };
    app.add_sim_number(quota.org_id).await;
    app.store()
        .credit_wallet(quota.org_id, Paise(10_000), app.now().timestamp_millis())
        .await
        .expect("credit");
    let quota_agent = quick_agent(&app, &quota, json!({})).await;
    app.post(
        &quota.key,
        "/api/calls",
        json!({"agentId": quota_agent, "to": "+919845012310"}),
    )
    .await
    .expect(403);

    // Nothing of the refused requests was enqueued.
    for w in [&ws, &bare, &poor, &quota] {
        let page = app.get(&w.key, "/api/calls").await.expect(200);
        assert_eq!(page.body["stats"]["total"], 0, "{}", page.body);
    }
}

#[tokio::test]
async fn alert_dials_valid_numbers_once_and_counts_the_skipped() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Alert", 20).await;
    let agent = quick_agent(
        &app,
        &ws,
        json!({"conversationEngine": "announcement", "welcomeMessage": "Fire drill at {time}."}),
    )
    .await;
    let reply = app
        .post(
            &ws.key,
            "/api/alert",
            json!({
                "agentId": agent,
                "phones": [
                    "+919845012310",
                    {"name": "Asha", "phone": "+919845012311"},
                    "+919845012310",          // duplicate
                    "not a number",           // malformed
                    "+911111111111",          // placeholder: one digit repeated
                    "+911234567890",          // placeholder: a run
                    "+91XXXXXXXXXX",          // placeholder: letters
                    "+919845012312",
                ],
                "variables": {"time": "noon"},
            }),
        )
        .await
        .expect(200);
    assert_eq!(reply.body["dialed"], 3, "{}", reply.body);
    assert_eq!(reply.body["skipped"], 4, "{}", reply.body);
    let calls = reply.body["calls"].as_array().expect("calls").clone();
    assert_eq!(calls.len(), 3);
    let phones: HashSet<&str> = calls.iter().filter_map(|c| c["phone"].as_str()).collect();
    assert_eq!(
        phones,
        HashSet::from(["+919845012310", "+919845012311", "+919845012312"])
    );
    for c in &calls {
        let id = c["callId"].as_str().expect("callId");
        let call = ended(&app, &ws, id, Duration::from_secs(30)).await;
        assert_eq!(call["rawStatus"], "completed", "{call}");
        assert_eq!(call["variables"]["time"], "noon");
        if c["phone"] == "+919845012311" {
            assert_eq!(call["studentName"], "Asha");
        }
    }
    let page = app.get(&ws.key, "/api/calls").await.expect(200);
    assert_eq!(
        page.body["stats"]["total"], 3,
        "exactly the dialed calls exist"
    );

    // All malformed: 400, nothing created.
    let none = app
        .post(
            &ws.key,
            "/api/alert",
            json!({"agentId": agent, "phones": ["nope", "+910000000000"]}),
        )
        .await
        .expect(400);
    assert!(none.message().contains("phones"), "{}", none.message());
    let page = app.get(&ws.key, "/api/calls").await.expect(200);
    assert_eq!(page.body["stats"]["total"], 3);
}

#[tokio::test]
async fn concurrency_two_holds_at_most_two_live_calls_and_finishes_all_ten() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Slots", 2).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        // 80–84 ring out (1 s in tests) and 00–79 talk: both hold a slot.
        let to = if i % 2 == 0 {
            format!("+91984501231{i}")
        } else {
            format!("+9198450123{}", 80 + i % 5)
        };
        ids.push(place(&app, &ws, &agent, &to, json!({"simScript": ["Bye"]})).await);
    }
    let mut max_live = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        max_live = max_live.max(live_count(&app, &ws).await);
        let page = app
            .get(
                &ws.key,
                "/api/calls?status=completed,no-answer,failed,busy,canceled&limit=100",
            )
            .await
            .expect(200);
        if page.body["stats"]["total"] == 10 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "calls did not all end"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(max_live <= 2, "saw {max_live} live calls with 2 slots");
    assert!(max_live >= 1);
    for id in &ids {
        let call = detail(&app, &ws, id).await;
        assert!(
            ["completed", "no-answer"].contains(&call["rawStatus"].as_str().unwrap_or_default()),
            "{call}"
        );
    }
}

#[tokio::test]
async fn announcement_calls_are_not_held_by_the_slots() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Announce", 1).await;
    let talker = quick_agent(&app, &ws, json!({})).await;
    let announcer = quick_agent(
        &app,
        &ws,
        json!({"conversationEngine": "announcement", "welcomeMessage": "Office closed today."}),
    )
    .await;
    // The one slot is held by a silent callee, for as long as the test needs: with the
    // talker's 2 s silence timeout, a loaded machine ended it before the announcements.
    let patient = quick_agent(&app, &ws, json!({"silenceTimeoutSeconds": 120})).await;
    let holder = place(&app, &ws, &patient, "+919845012395", json!({})).await;
    eventually(
        Duration::from_secs(10),
        "the slot holder to answer",
        || async { (detail(&app, &ws, &holder).await["rawStatus"] == "in-progress").then_some(()) },
    )
    .await;
    // A queued pipeline call waits behind it…
    let waiting = place(
        &app,
        &ws,
        &talker,
        "+919845012320",
        json!({"simScript": ["Bye"]}),
    )
    .await;
    // …but announcements ring at once and finish while the slot is still held.
    let reply = app
        .post(
            &ws.key,
            "/api/alert",
            json!({"agentId": announcer, "phones": ["+919845012330", "+919845012331", "+919845012332"]}),
        )
        .await
        .expect(200);
    for c in reply.body["calls"].as_array().expect("calls") {
        let call = ended(
            &app,
            &ws,
            c["callId"].as_str().expect("id"),
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(call["rawStatus"], "completed", "{call}");
    }
    assert_eq!(detail(&app, &ws, &waiting).await["rawStatus"], "queued");
    assert_eq!(detail(&app, &ws, &holder).await["rawStatus"], "in-progress");
    app.post_empty(&ws.key, &format!("/api/calls/{holder}/cancel"))
        .await
        .expect(200);
    ended(&app, &ws, &waiting, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn cancel_removes_a_queued_call_and_hangs_up_a_live_one() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Cancel", 1).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let live = place(&app, &ws, &agent, "+919845012395", json!({})).await;
    let queued = place(&app, &ws, &agent, "+919845012396", json!({})).await;
    eventually(
        Duration::from_secs(10),
        "the first call to answer",
        || async { (detail(&app, &ws, &live).await["rawStatus"] == "in-progress").then_some(()) },
    )
    .await;
    assert_eq!(detail(&app, &ws, &queued).await["rawStatus"], "queued");

    app.post_empty(&ws.key, &format!("/api/calls/{queued}/cancel"))
        .await
        .expect(200);
    let call = ended(&app, &ws, &queued, Duration::from_secs(5)).await;
    assert_eq!(call["rawStatus"], "canceled");
    assert_eq!(call["endedReason"], "canceled");
    assert_eq!(statuses(&call), ["queued", "canceled"]);

    app.post_empty(&ws.key, &format!("/api/calls/{live}/cancel"))
        .await
        .expect(200);
    let call = ended(&app, &ws, &live, Duration::from_secs(10)).await;
    assert_eq!(
        call["rawStatus"], "completed",
        "a live call hangs up as completed"
    );
    assert_eq!(call["endedReason"], "canceled");

    // Cancelling an ended call is a conflict, an unknown one is 404.
    let again = app
        .post_empty(&ws.key, &format!("/api/calls/{live}/cancel"))
        .await;
    assert!(
        again.status == 409 || again.status == 400,
        "{}",
        again.status
    );
    app.post_empty(
        &ws.key,
        "/api/calls/00000000-0000-7000-8000-000000000000/cancel",
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn a_panicking_call_actor_fails_its_call_frees_the_slot_and_the_next_starts() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Panic", 1).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let doomed = place(
        &app,
        &ws,
        &agent,
        "+919845012340",
        json!({"simFault": "engine-panic", "simScript": ["Bye"]}),
    )
    .await;
    let next = place(
        &app,
        &ws,
        &agent,
        "+919845012341",
        json!({"simScript": ["Bye"]}),
    )
    .await;
    let call = ended(&app, &ws, &doomed, Duration::from_secs(15)).await;
    assert_eq!(call["rawStatus"], "failed", "{call}");
    assert_eq!(call["endedReason"], "engine-error");
    let call = ended(&app, &ws, &next, Duration::from_secs(30)).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
}

#[tokio::test]
async fn queued_calls_survive_a_restart_and_all_finish() {
    let mut app = TestApp::spawn().await;
    let ws = app.calling_workspace("Restart", 1).await;
    let agent = quick_agent(&app, &ws, json!({})).await;
    let holder = place(&app, &ws, &agent, "+919845012395", json!({})).await;
    let mut queued = Vec::new();
    for i in 0..4 {
        queued.push(
            place(
                &app,
                &ws,
                &agent,
                &format!("+91984501235{i}"),
                json!({"simScript": ["Bye"]}),
            )
            .await,
        );
    }
    eventually(Duration::from_secs(10), "the holder to answer", || async {
        (detail(&app, &ws, &holder).await["rawStatus"] == "in-progress").then_some(())
    })
    .await;
    app.restart().await;
    // The live call could not survive; it is ended, never left in progress.
    let call = ended(&app, &ws, &holder, Duration::from_secs(10)).await;
    assert_eq!(call["endedReason"], "service-restart", "{call}");
    for id in &queued {
        let call = ended(&app, &ws, id, Duration::from_secs(60)).await;
        assert_eq!(call["rawStatus"], "completed", "{call}");
    }
}

#[tokio::test]
async fn a_61_second_call_is_charged_two_minutes_once() {
    let clock = ManualClock::new(crate::support::utc("2026-05-01T05:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.calling_workspace("Billing", 2).await;
    let agent = quick_agent(&app, &ws, json!({"perMinuteRatePaise": 700})).await;
    let before = app.get(&ws.key, "/api/wallet").await.expect(200).body["balancePaise"]
        .as_i64()
        .expect("balance");
    let id = place(&app, &ws, &agent, "+919845012395", json!({})).await;
    eventually(Duration::from_secs(10), "the call to answer", || async {
        (detail(&app, &ws, &id).await["rawStatus"] == "in-progress").then_some(())
    })
    .await;
    clock.advance(chrono::Duration::seconds(61));
    app.post_empty(&ws.key, &format!("/api/calls/{id}/cancel"))
        .await
        .expect(200);
    let call = ended(&app, &ws, &id, Duration::from_secs(10)).await;
    assert_eq!(call["durationSeconds"], 61, "{call}");
    assert_eq!(call["costPaise"], 1400);

    // A second completion report (carrier callback after the media stop) is ignored.
    let ledger = app.server().state().ledger.clone();
    ledger
        .finish(CallEnd {
            call_id: id.parse().unwrap(),
            status: CallStatus::Completed,
            ended_reason: EndedReason::CallerHangup,
            answered_at: Some(app.now().timestamp_millis() - 200_000),
            ended_at: app.now().timestamp_millis(),
        })
        .await
        .expect("a second finish is accepted and ignored");
    let call = detail(&app, &ws, &id).await;
    assert_eq!(call["costPaise"], 1400, "the first finish stands");
    assert_eq!(call["endedReason"], "canceled");
    let after = app.get(&ws.key, "/api/wallet").await.expect(200).body["balancePaise"]
        .as_i64()
        .expect("balance");
    assert_eq!(before - after, 1400);
    let txs = app
        .get(&ws.key, "/api/wallet/transactions")
        .await
        .expect(200);
    let charges: Vec<&Value> = txs.body["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|t| t["callId"] == id.as_str())
        .collect();
    assert_eq!(charges.len(), 1, "{}", txs.body);
    assert_eq!(charges[0]["amountPaise"], -1400);
    let balances = app.get(&ws.key, "/api/balances").await.expect(200);
    assert_eq!(balances.body["minutesUsed"], 2, "{}", balances.body);
}

#[tokio::test]
async fn unanswered_calls_are_retried_by_the_agent_policy() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Retry", 5).await;
    let agent = quick_agent(
        &app,
        &ws,
        json!({"retryPolicy": {"maxAttempts": 3, "retryAfterSeconds": 1, "retryOn": ["busy"]}}),
    )
    .await;
    let first = place(&app, &ws, &agent, "+919845012387", json!({})).await;
    let attempts = eventually(Duration::from_secs(40), "three attempts", || async {
        let page = app.get(&ws.key, "/api/calls?limit=100").await.expect(200);
        let rows = page.body["rows"].as_array().cloned().unwrap_or_default();
        let done = rows.len() == 3
            && rows
                .iter()
                .all(|r| TERMINAL.contains(&r["rawStatus"].as_str().unwrap_or_default()));
        done.then_some(rows)
    })
    .await;
    let by_attempt: HashMap<i64, &Value> = attempts
        .iter()
        .map(|r| (r["attempt"].as_i64().unwrap_or_default(), r))
        .collect();
    assert_eq!(by_attempt.len(), 3);
    assert_eq!(by_attempt[&1]["id"], first.as_str());
    for n in [2, 3] {
        let id = by_attempt[&n]["id"].as_str().expect("id");
        let call = detail(&app, &ws, id).await;
        assert_eq!(call["retryOf"], first.as_str(), "{call}");
        assert_eq!(call["rawStatus"], "busy");
    }
    // No fourth attempt.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let page = app.get(&ws.key, "/api/calls").await.expect(200);
    assert_eq!(page.body["stats"]["total"], 3);
}

#[tokio::test]
async fn a_twilio_call_is_dialed_through_its_api_and_ended_by_a_signed_callback() {
    let twilio = FakeCarrier::start(voxline::carriers::CarrierKind::Twilio, "CA77").await;
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Twilio", 2).await;
    app.add_number(&ws, "+918035740177", "twilio").await;
    let credential = json!({"accountSid": "AC77", "authToken": "tw-token", "baseUrl": twilio.base});
    app.set_credential(&ws, "twilio", &credential).await;
    let agent = quick_agent(&app, &ws, json!({"telephonyProvider": "twilio"})).await;
    let id = place(&app, &ws, &agent, "+919845012310", json!({})).await;
    let create = twilio
        .wait_for(
            "the Twilio API to be called",
            Duration::from_secs(10),
            |_| true,
        )
        .await;
    assert_eq!(create.form_value("To"), "+919845012310");
    assert_eq!(create.form_value("From"), "+918035740177");
    let status_url = format!("{}/carrier/twilio/status/{id}", app.base);
    assert_eq!(create.form_value("StatusCallback"), status_url);
    let twiml = create.form_value("Twiml");
    assert!(twiml.contains("/media/twilio"), "{twiml}");

    let fields = vec![
        ("AccountSid".to_string(), "AC77".to_string()),
        ("CallSid".to_string(), "CA77".to_string()),
        ("CallStatus".to_string(), "busy".to_string()),
    ];
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter())
        .finish();
    // A forged callback is refused and changes nothing.
    let forged = app
        .http
        .post(&status_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-twilio-signature", "bm90IGEgc2lnbmF0dXJl")
        .body(body.clone())
        .send()
        .await
        .expect("send");
    assert!(forged.status().is_client_error(), "{}", forged.status());
    assert_eq!(detail(&app, &ws, &id).await["rawStatus"], "ringing");

    let signature = voxline::carriers::twilio::signature("tw-token", &status_url, &fields);
    let signed = app
        .http
        .post(&status_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-twilio-signature", signature)
        .body(body)
        .send()
        .await
        .expect("send");
    assert!(signed.status().is_success(), "{}", signed.status());
    let call = ended(&app, &ws, &id, Duration::from_secs(10)).await;
    assert_eq!(call["rawStatus"], "busy", "{call}");
    assert_eq!(call["provider"], "twilio");
    let creates = twilio.requests_to(Method::POST, "/2010-04-01/Accounts/AC77/Calls.json");
    assert_eq!(creates.len(), 1, "one dial: {creates:?}");
}

#[tokio::test]
async fn a_replaced_twilio_credential_checks_the_next_callback() {
    // The server keeps opened credentials (every dial and callback needs
    // one); a replaced one must be what the next callback is checked with,
    // though the change comes from another store handle (the admin CLI; on
    // Postgres, another node's notice).
    let twilio = FakeCarrier::start(voxline::carriers::CarrierKind::Twilio, "CA78").await;
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Twilio rotation", 2).await;
    app.add_number(&ws, "+918035740178", "twilio").await;
    let credential =
        json!({"accountSid": "AC78", "authToken": "old-token", "baseUrl": twilio.base});
    app.set_credential(&ws, "twilio", &credential).await;
    let agent = quick_agent(&app, &ws, json!({"telephonyProvider": "twilio"})).await;
    let id = place(&app, &ws, &agent, "+919845012311", json!({})).await;
    twilio
        .wait_for(
            "the Twilio API to be called",
            Duration::from_secs(10),
            |_| true,
        )
        .await;
    let status_url = format!("{}/carrier/twilio/status/{id}", app.base);
    let callback = |token: &str, status: &str| {
        let fields = vec![
            ("AccountSid".to_string(), "AC78".to_string()),
            ("CallSid".to_string(), "CA78".to_string()),
            ("CallStatus".to_string(), status.to_string()),
        ];
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields.iter())
            .finish();
        let signature = voxline::carriers::twilio::signature(token, &status_url, &fields);
        app.http
            .post(&status_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-twilio-signature", signature)
            .body(body)
            .send()
    };
    // The old token is good, and now opened and kept.
    let kept = callback("old-token", "ringing").await.expect("send");
    assert!(kept.status().is_success(), "{}", kept.status());

    let credential =
        json!({"accountSid": "AC78", "authToken": "new-token", "baseUrl": twilio.base});
    app.set_credential(&ws, "twilio", &credential).await;
    // On SQLite the next lookup sees the change; on Postgres the notice
    // arrives within milliseconds of the commit.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let status = callback("new-token", "ringing")
            .await
            .expect("send")
            .status();
        if status.is_success() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new token is still refused: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stale = callback("old-token", "busy").await.expect("send");
    assert!(stale.status().is_client_error(), "{}", stale.status());
    assert_eq!(detail(&app, &ws, &id).await["rawStatus"], "ringing");
    let signed = callback("new-token", "busy").await.expect("send");
    assert!(signed.status().is_success(), "{}", signed.status());
    let call = ended(&app, &ws, &id, Duration::from_secs(10)).await;
    assert_eq!(call["rawStatus"], "busy", "{call}");
}

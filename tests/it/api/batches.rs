//! Issue 6: batches — the state machine, pacing by the workspace's slots,
//! round-robin between batches, schedules, retry, and durability across a
//! restart. Calls ring the sim carrier, whose callee behaviour is chosen by the
//! number's last two digits (decisions §11).

use crate::support::{TestApp, Workspace, eventually, utc};
use chrono::Duration as ChronoDuration;
use serde_json::{Value, json};
use std::cell::Cell;
use std::time::Duration;
use voxline::admin::ops;
use voxline::domain::Paise;
use voxline::domain::clock::ManualClock;

/// Answers and says goodbye at once (a short completed call).
pub const ANSWERS: u32 = 10;
/// Rings out unanswered.
pub const NO_ANSWER: u32 = 80;
/// Busy.
pub const BUSY: u32 = 85;
/// Carrier failure.
pub const FAILS: u32 = 90;

/// A valid Indian mobile number, unique per `n` (< 1000), ending in `suffix`.
pub fn phone(n: usize, suffix: u32) -> String {
    format!("+9198450{n:03}{suffix:02}")
}

/// A workspace that can dial: a sim number, wallet credit, an agent whose
/// welcome message uses `{name}` and `{course}`. Returns (workspace, agent id).
pub async fn dialing_workspace(app: &TestApp, name: &str, concurrency: i64) -> (Workspace, String) {
    let org = ops::create_org(app.store(), name, Some(concurrency), None, app.now())
        .await
        .expect("create org");
    let (key_id, key) = app.key(org.id, "test key").await;
    // Tests poll progress often; the default daily cap is not what they test.
    app.set_limits(key_id, 1_000_000, 10_000_000).await;
    let ws = Workspace {
        org_id: org.id,
        key_id,
        key,
    };
    // Unique caller ID per workspace: numbers are unique across the service.
    let from = format!("+9180357{:05}", rand_suffix(name));
    app.add_number(&ws, &from, "sim").await;
    app.store()
        .credit_wallet(ws.org_id, Paise(10_000_000), app.now().timestamp_millis())
        .await
        .expect("credit");
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Admissions", "welcomeMessage": "Hello {name}, calling about {course}.",
                   "prompt": "Talk about {course}."}),
        )
        .await;
    (ws, agent["id"].as_str().unwrap().to_string())
}

fn rand_suffix(name: &str) -> u32 {
    name.bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        % 90_000
        + 10_000
}

/// An item calling `phone(n, suffix)`; answered calls end after one line.
pub fn item(n: usize, suffix: u32) -> Value {
    json!({"name": format!("Person {n}"), "phone": phone(n, suffix),
           "variables": {"course": "MBA", "simScript": ["Goodbye!"]}})
}

/// Creates a batch with `items` and returns its id.
pub async fn batch_with(app: &TestApp, ws: &Workspace, agent: &str, items: Vec<Value>) -> String {
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Intake", "agentId": agent}),
        )
        .await
        .expect(201);
    let id = created.body["id"].as_str().unwrap().to_string();
    assert_eq!(created.body["status"], "draft");
    for chunk in items.chunks(500) {
        app.post(
            &ws.key,
            &format!("/api/batches/{id}/items"),
            json!({ "items": chunk }),
        )
        .await
        .expect(200);
    }
    id
}

/// The batch's current view.
pub async fn batch(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(200)
        .body
}

/// Waits until the batch reaches `status`.
pub async fn wait_status(
    app: &TestApp,
    ws: &Workspace,
    id: &str,
    status: &str,
    secs: u64,
) -> Value {
    eventually(
        Duration::from_secs(secs),
        &format!("batch {status}"),
        || async {
            let b = batch(app, ws, id).await;
            (b["status"] == status).then_some(b)
        },
    )
    .await
}

/// Every item of a batch, in order.
pub async fn all_items(app: &TestApp, key: &str, path: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    for page in 1.. {
        let body = app
            .get(key, &format!("{path}?limit=100&page={page}"))
            .await
            .expect(200)
            .body;
        let got = body["rows"].as_array().unwrap().clone();
        let done = got.len() < 100;
        rows.extend(got);
        if done {
            break;
        }
    }
    rows
}

/// Items dialed so far (total minus those still waiting).
fn dialed(b: &Value) -> i64 {
    b["total"].as_i64().unwrap() - b["skipped"].as_i64().unwrap() - waiting(b)
}

fn waiting(b: &Value) -> i64 {
    b["pending"].as_i64().unwrap() - b["live"].as_i64().unwrap()
}

#[tokio::test]
async fn a_batch_dials_every_item_within_the_concurrency_limit() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Pacing", 5).await;
    let items: Vec<Value> = (0..200)
        .map(|n| {
            let suffix = match n % 10 {
                0 => ANSWERS,
                1 => NO_ANSWER,
                2 | 3 => BUSY,
                _ => FAILS,
            };
            item(n, suffix)
        })
        .collect();
    let id = batch_with(&app, &ws, &agent, items).await;
    let before = batch(&app, &ws, &id).await;
    assert_eq!(before["total"], 200);
    assert_eq!(before["pending"], 200);
    assert_eq!(before["live"], 0);

    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    let max_live = Cell::new(0);
    let done = eventually(Duration::from_secs(120), "batch completed", || async {
        let b = batch(&app, &ws, &id).await;
        let live = b["live"].as_i64().unwrap();
        max_live.set(max_live.get().max(live));
        assert!(live <= 5, "more live calls than slots: {b}");
        (b["status"] == "completed").then_some(b)
    })
    .await;
    assert!(
        max_live.get() >= 2,
        "the slots were used in parallel ({})",
        max_live.get()
    );
    assert_eq!(done["total"], 200);
    assert_eq!(done["completed"], 20, "{done}");
    assert_eq!(done["noAnswer"], 20, "{done}");
    assert_eq!(done["busy"], 40, "{done}");
    assert_eq!(done["failed"], 180, "{done}");
    assert_eq!(done["pending"], 0);
    assert!(done["finishedAt"].is_string());

    let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    assert_eq!(items.len(), 200);
    for (n, it) in items.iter().enumerate() {
        assert_eq!(it["index"], n as i64 + 1);
        assert_eq!(it["attempts"], 1, "{it}");
        let expected = match n % 10 {
            0 => "completed",
            1 => "no-answer",
            2 | 3 => "busy",
            _ => "failed",
        };
        assert_eq!(it["status"], expected, "{it}");
        let call_id = it["callId"].as_str().unwrap();
        let call = app
            .get(&ws.key, &format!("/api/calls/{call_id}"))
            .await
            .expect(200)
            .body;
        assert_eq!(call["batchId"], id.as_str());
        assert_eq!(call["phone"], it["phone"]);
        if n == 0 {
            assert_eq!(call["variables"]["name"], "Person 0");
            assert_eq!(call["costPaise"], 600, "answered calls are billed: {call}");
        }
    }
}

#[tokio::test]
async fn pause_keeps_pending_items_and_resume_continues() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Pause", 2).await;
    let id = batch_with(&app, &ws, &agent, (0..40).map(|n| item(n, FAILS)).collect()).await;
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    eventually(Duration::from_secs(30), "a few dials", || async {
        (dialed(&batch(&app, &ws, &id).await) >= 4).then_some(())
    })
    .await;
    let paused = app
        .post_empty(&ws.key, &format!("/api/batches/{id}/pause"))
        .await
        .expect(200);
    assert!(paused.message().contains("paused"));
    // Live calls finish within a second and nothing new is dialed.
    let settled = eventually(Duration::from_secs(2), "live calls end", || async {
        let b = batch(&app, &ws, &id).await;
        (b["live"] == 0).then_some(b)
    })
    .await;
    assert_eq!(settled["status"], "paused");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let still = batch(&app, &ws, &id).await;
    assert_eq!(dialed(&still), dialed(&settled), "no dial while paused");
    assert!(waiting(&still) > 20, "{still}");
    let waiting_items = app
        .get(
            &ws.key,
            &format!("/api/batches/{id}/items?status=pending&limit=100"),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(waiting_items["total"], waiting(&still));

    let again = app
        .post_empty(&ws.key, &format!("/api/batches/{id}/pause"))
        .await
        .expect(409);
    assert!(again.message().contains("paused"), "{}", again.message());
    app.post_empty(&ws.key, &format!("/api/batches/{id}/resume"))
        .await
        .expect(200);
    let done = wait_status(&app, &ws, &id, "completed", 60).await;
    assert_eq!(done["failed"], 40);
    let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    assert!(items.iter().all(|it| it["attempts"] == 1));
}

#[tokio::test]
async fn stop_drops_pending_items_and_lets_live_calls_finish() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Stop", 2).await;
    let id = batch_with(
        &app,
        &ws,
        &agent,
        (0..30).map(|n| item(n, NO_ANSWER)).collect(),
    )
    .await;
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    // Ringing, not merely queued: on Postgres a queued call may not yet be
    // claimed by a node, and the stop cancels it as never dialed.
    eventually(Duration::from_secs(10), "two ringing calls", || async {
        let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
        let ringing = items.iter().filter(|it| it["status"] == "ringing").count();
        (ringing == 2).then_some(())
    })
    .await;
    let stopped = app
        .post_empty(&ws.key, &format!("/api/batches/{id}/stop"))
        .await
        .expect(200);
    let b = batch(&app, &ws, &id).await;
    assert_eq!(b["status"], "stopped");
    let dropped = b["canceled"].as_i64().unwrap();
    assert!(dropped >= 26, "{b}");
    assert!(
        stopped.message().contains(&format!("{dropped} pending")),
        "{}",
        stopped.message()
    );
    assert_eq!(waiting(&b), 0, "nothing left to dial: {b}");
    assert!(
        b["live"].as_i64().unwrap() >= 1,
        "live calls are not cut: {b}"
    );
    let done = eventually(Duration::from_secs(10), "live calls finish", || async {
        let b = batch(&app, &ws, &id).await;
        (b["live"] == 0).then_some(b)
    })
    .await;
    let unanswered = done["noAnswer"].as_i64().unwrap();
    assert_eq!(unanswered, 30 - dropped);
    assert_eq!(done["pending"], 0);
    assert_eq!(done["status"], "stopped");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        batch(&app, &ws, &id).await["noAnswer"],
        unanswered,
        "no dial after stop"
    );
    let resume = app
        .post_empty(&ws.key, &format!("/api/batches/{id}/resume"))
        .await
        .expect(409);
    assert!(resume.message().contains("stopped"));
    // Retry of a stopped batch re-dials the two unanswered items only.
    let retry = app
        .post_empty(&ws.key, &format!("/api/batches/{id}/retry"))
        .await
        .expect(200);
    assert!(
        retry.message().starts_with(&format!("{unanswered} item")),
        "{}",
        retry.message()
    );
    let done = wait_status(&app, &ws, &id, "completed", 20).await;
    assert_eq!(done["canceled"], dropped);
    app.delete(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(204);
    app.get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(404);
}

#[tokio::test]
async fn retry_redials_exactly_the_failed_unanswered_and_busy_items() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Retry", 4).await;
    let suffixes = [
        ANSWERS, NO_ANSWER, BUSY, FAILS, ANSWERS, NO_ANSWER, BUSY, FAILS,
    ];
    let items = suffixes
        .iter()
        .enumerate()
        .map(|(n, s)| item(n, *s))
        .collect();
    let id = batch_with(&app, &ws, &agent, items).await;
    app.post_empty(&ws.key, &format!("/api/batches/{id}/retry"))
        .await
        .expect(409);
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    wait_status(&app, &ws, &id, "completed", 60).await;
    let first = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    let retry = app
        .post_empty(&ws.key, &format!("/api/batches/{id}/retry"))
        .await
        .expect(200);
    assert!(retry.message().starts_with("6 item"), "{}", retry.message());
    assert_eq!(batch(&app, &ws, &id).await["status"], "running");
    let done = wait_status(&app, &ws, &id, "completed", 60).await;
    assert_eq!(done["completed"], 2);
    let second = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    for (before, after) in first.iter().zip(&second) {
        if before["status"] == "completed" {
            assert_eq!(after["attempts"], 1, "{after}");
            assert_eq!(after["callId"], before["callId"]);
        } else {
            assert_eq!(after["attempts"], 2, "{after}");
            assert_ne!(after["callId"], before["callId"]);
            assert_eq!(after["status"], before["status"], "same sim outcome again");
        }
    }
    let calls = app
        .get(&ws.key, "/api/calls?limit=100")
        .await
        .expect(200)
        .body;
    assert_eq!(calls["total"], 14, "8 first calls and 6 re-dials");
}

#[tokio::test]
async fn two_batches_of_a_workspace_progress_alternately() {
    // Two workspaces at once: one workspace's traffic must not decide whose
    // turn it is in the other's (on Postgres a turn shared by all workspaces
    // fed one of the two batches first).
    let app = TestApp::spawn().await;
    let mut runs = Vec::new();
    for (name, base) in [("RoundRobin", 0), ("RoundRobinToo", 200)] {
        let (ws, agent) = dialing_workspace(&app, name, 2).await;
        let mut ids = Vec::new();
        for offset in [0, 100] {
            let items = (base + offset..base + offset + 16)
                .map(|n| item(n, FAILS))
                .collect();
            ids.push(batch_with(&app, &ws, &agent, items).await);
        }
        runs.push((ws, ids));
    }
    for (ws, ids) in &runs {
        for id in ids {
            app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
                .await
                .expect(200);
        }
    }
    let max_gap = [Cell::new(0), Cell::new(0)];
    eventually(
        Duration::from_secs(60),
        "all four batches complete",
        || async {
            let mut done = true;
            for ((ws, ids), gap) in runs.iter().zip(&max_gap) {
                let (va, vb) = (
                    batch(&app, ws, &ids[0]).await,
                    batch(&app, ws, &ids[1]).await,
                );
                if va["status"] == "running" && vb["status"] == "running" {
                    gap.set(gap.get().max((dialed(&va) - dialed(&vb)).abs()));
                }
                done &= va["status"] == "completed" && vb["status"] == "completed";
            }
            done.then_some(())
        },
    )
    .await;
    // First come, first served would dial all 16 of one batch first.
    for gap in &max_gap {
        assert!(
            gap.get() <= 3,
            "batches did not alternate: gap {}",
            gap.get()
        );
    }
}

#[tokio::test]
async fn a_test_call_placed_during_a_big_batch_starts_within_one_slot_turnover() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "NotStarved", 2).await;
    let id = batch_with(
        &app,
        &ws,
        &agent,
        (0..400).map(|n| item(n, FAILS)).collect(),
    )
    .await;
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    eventually(Duration::from_secs(10), "batch dialing", || async {
        (batch(&app, &ws, &id).await["live"] == 2).then_some(())
    })
    .await;
    let placed = app
        .post(
            &ws.key,
            &format!("/api/agents/{agent}/test-call"),
            json!({"phoneNumber": phone(999, ANSWERS), "variables": {"simScript": ["Goodbye!"]}}),
        )
        .await
        .expect(201);
    let call_id = placed.body["callId"].as_str().unwrap().to_string();
    let started = tokio::time::Instant::now();
    eventually(
        Duration::from_secs(3),
        "the test call leaves the queue",
        || async {
            let call = app
                .get(&ws.key, &format!("/api/calls/{call_id}"))
                .await
                .expect(200)
                .body;
            (call["rawStatus"] != "queued").then_some(())
        },
    )
    .await;
    // A failing sim call holds its slot ~300 ms; allow scheduling slack.
    assert!(started.elapsed() < Duration::from_millis(1_500));
    let b = batch(&app, &ws, &id).await;
    assert!(waiting(&b) > 350, "the batch was far from done: {b}");
    app.post_empty(&ws.key, &format!("/api/batches/{id}/stop"))
        .await
        .expect(200);
}

#[tokio::test]
async fn a_scheduled_batch_starts_by_itself_even_across_a_restart() {
    let clock = ManualClock::new(utc("2026-11-20T04:00:00Z"));
    let mut app = TestApp::spawn_with_clock(clock.clone()).await;
    let (ws, agent) = dialing_workspace(&app, "Schedule", 3).await;
    let past = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Late", "agentId": agent, "scheduledStartAt": "2026-11-20T03:59:00Z"}),
        )
        .await
        .expect(400);
    assert!(
        past.message().contains("scheduledStartAt"),
        "{}",
        past.message()
    );
    let bad = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Late", "agentId": agent, "scheduledStartAt": "tomorrow"}),
        )
        .await
        .expect(400);
    assert!(bad.message().contains("scheduledStartAt"));
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Morning", "agentId": agent, "scheduledStartAt": "2026-11-20T05:00:00Z"}),
        )
        .await
        .expect(201)
        .body;
    assert_eq!(created["status"], "scheduled");
    assert_eq!(created["scheduledStartAt"], "2026-11-20T05:00:00.000Z");
    let id = created["id"].as_str().unwrap().to_string();
    app.post(
        &ws.key,
        &format!("/api/batches/{id}/items"),
        json!({"items": (0..6).map(|n| item(n, FAILS)).collect::<Vec<_>>()}),
    )
    .await
    .expect(200);
    // Rescheduling is allowed before the start, not into the past.
    let moved = app
        .patch(
            &ws.key,
            &format!("/api/batches/{id}"),
            json!({"scheduledStartAt": "2026-11-20T06:00:00Z", "name": "Late morning"}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(moved["scheduledStartAt"], "2026-11-20T06:00:00.000Z");
    assert_eq!(moved["name"], "Late morning");
    app.patch(
        &ws.key,
        &format!("/api/batches/{id}"),
        json!({"scheduledStartAt": "2026-11-19T06:00:00Z"}),
    )
    .await
    .expect(400);

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(batch(&app, &ws, &id).await["status"], "scheduled");
    app.restart().await;
    assert_eq!(batch(&app, &ws, &id).await["status"], "scheduled");
    clock.advance(ChronoDuration::hours(2));
    let done = wait_status(&app, &ws, &id, "completed", 30).await;
    assert_eq!(done["failed"], 6);
    assert_eq!(done["startedAt"], "2026-11-20T06:00:00.000Z");
}

#[tokio::test]
async fn transitions_outside_the_state_machine_answer_409() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "States", 1).await;
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "S", "agentId": agent}),
        )
        .await
        .expect(201)
        .body;
    let id = created["id"].as_str().unwrap().to_string();
    let path = |op: &str| format!("/api/batches/{id}/{op}");
    for op in ["pause", "resume", "stop", "retry"] {
        let r = app.post_empty(&ws.key, &path(op)).await.expect(409);
        assert!(r.message().contains("draft"), "{op}: {}", r.message());
    }
    let empty = app.post_empty(&ws.key, &path("start")).await.expect(409);
    assert!(empty.message().contains("no items"), "{}", empty.message());
    let added = app
        .post(
            &ws.key,
            &path("items"),
            json!({"items": [item(1, NO_ANSWER), item(2, NO_ANSWER), {"name": "X", "phone": "+911111111111"},
                             {"name": "Y", "phone": "12345"}, item(1, NO_ANSWER)]}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(added["added"], 2);
    assert_eq!(added["skipped"], 3);
    let reasons: Vec<&str> = added["skippedItems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    assert!(reasons[0].contains("placeholder"), "{reasons:?}");
    assert!(reasons[1].contains("valid"), "{reasons:?}");
    assert!(reasons[2].contains("already"), "{reasons:?}");
    assert_eq!(added["skippedItems"][2]["index"], 4);
    app.post_empty(&ws.key, &path("start")).await.expect(200);
    let again = app.post_empty(&ws.key, &path("start")).await.expect(409);
    assert!(again.message().contains("running"));
    let resume = app.post_empty(&ws.key, &path("resume")).await.expect(409);
    assert_eq!(
        resume.message(),
        "Batch is running; it can be resumed only when paused"
    );
    app.post(&ws.key, &path("items"), json!({"items": [item(3, FAILS)]}))
        .await
        .expect(409);
    let del = app
        .delete(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(409);
    assert!(del.message().contains("running"));
    app.patch(
        &ws.key,
        &format!("/api/batches/{id}"),
        json!({"scheduledStartAt": "2099-01-01T00:00:00Z"}),
    )
    .await
    .expect(409);
    let renamed = app
        .patch(
            &ws.key,
            &format!("/api/batches/{id}"),
            json!({"name": "Renamed"}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(renamed["name"], "Renamed");
    assert_eq!(renamed["skipped"], 3);
    app.post_empty(&ws.key, &path("pause")).await.expect(200);
    app.delete(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(204);
    app.post_empty(&ws.key, &path("resume")).await.expect(404);

    // Another workspace sees nothing.
    let other = app.workspace("Other").await;
    let list = app.get(&other.key, "/api/batches").await.expect(200).body;
    assert_eq!(list["total"], 0);
    let mine = app.get(&ws.key, "/api/batches").await.expect(200).body;
    assert_eq!(mine["total"], 0);
    assert_eq!(mine["page"], 1);
    assert_eq!(mine["limit"], 20);
    app.get(&ws.key, "/api/batches/not-an-id").await.expect(404);
    app.post(&ws.key, "/api/batches", json!({"agentId": agent}))
        .await
        .expect(400);
}

#[tokio::test]
async fn the_one_step_form_creates_fills_and_starts() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "OneStep", 3).await;
    let numbers = app.get(&ws.key, "/api/numbers").await.expect(200).body;
    let from = numbers["rows"][0]["phone"].as_str().unwrap().to_string();
    let r = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "fromNumber": from,
                   "contacts": [{"name": "A", "phone": phone(1, FAILS)}, {"name": "B", "phone": phone(2, BUSY)},
                                {"name": "C", "phone": "not a number"}]}),
        )
        .await
        .expect(201)
        .body;
    assert_eq!(r["status"], "running");
    assert_eq!(r["total"], 3);
    assert_eq!(r["skipped"], 1);
    assert_eq!(r["skippedItems"][0]["index"], 2);
    assert!(r["message"].as_str().unwrap().contains("2 contact"));
    assert_eq!(r["fromNumber"], from.as_str());
    let id = r["id"].as_str().unwrap().to_string();
    let done = wait_status(&app, &ws, &id, "completed", 30).await;
    assert_eq!(done["busy"], 1);
    assert_eq!(done["failed"], 3);
    let listed = app.get(&ws.key, "/api/batches").await.expect(200).body;
    assert_eq!(listed["rows"][0]["id"], id.as_str());
    assert_eq!(listed["rows"][0]["agentName"], "Admissions");

    // Refusals (here: an empty wallet) happen before anything is stored.
    let broke = app.workspace("Broke").await;
    app.add_number(&broke, "+918035740777", "sim").await;
    let broke_agent = app.create_agent(&broke.key, json!({"name": "B"})).await;
    let refused = app
        .post(
            &broke.key,
            "/api/batches",
            json!({"agentId": broke_agent["id"], "contacts": [{"name": "A", "phone": phone(5, FAILS)}]}),
        )
        .await
        .expect(402);
    assert!(
        refused.message().contains("Wallet"),
        "{}",
        refused.message()
    );
    assert_eq!(
        app.get(&broke.key, "/api/batches").await.expect(200).body["total"],
        0
    );
}

#[tokio::test]
async fn a_restart_mid_batch_loses_and_duplicates_nothing() {
    let mut app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Restart", 2).await;
    let id = batch_with(&app, &ws, &agent, (0..40).map(|n| item(n, FAILS)).collect()).await;
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);
    eventually(Duration::from_secs(20), "some dials", || async {
        (dialed(&batch(&app, &ws, &id).await) >= 8).then_some(())
    })
    .await;
    app.restart().await;
    let done = wait_status(&app, &ws, &id, "completed", 60).await;
    assert_eq!(done["total"], 40);
    assert_eq!(done["failed"], 40);
    let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    assert!(items.iter().all(|it| it["attempts"] == 1), "dialed twice");
    let calls = app
        .get(&ws.key, "/api/calls?limit=100")
        .await
        .expect(200)
        .body;
    assert_eq!(calls["total"], 40, "one call per item");
    let mut phones: Vec<&str> = calls["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["phone"].as_str().unwrap())
        .collect();
    phones.sort_unstable();
    phones.dedup();
    assert_eq!(phones.len(), 40);
}

#[tokio::test]
async fn item_counts_stay_exact_before_and_after_the_counters_are_folded() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Counts", 1).await;
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "C", "agentId": agent}),
        )
        .await
        .expect(201)
        .body;
    let id = created["id"].as_str().unwrap().to_string();
    let items: Vec<Value> = (0..4).map(|n| item(n, FAILS)).collect();
    app.post(
        &ws.key,
        &format!("/api/batches/{id}/items"),
        json!({"items": items}),
    )
    .await
    .expect(200);
    // Read before and after a fold (on Postgres the scheduler may already have
    // folded; the explicit pass makes sure both states are read).
    let before = app
        .get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(
        (before["total"].as_i64(), before["pending"].as_i64()),
        (Some(4), Some(4))
    );
    app.store().fold_batch_item_counts().await.expect("fold");
    let after = app
        .get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(
        (after["total"].as_i64(), after["pending"].as_i64()),
        (Some(4), Some(4))
    );
    assert_eq!(
        app.store()
            .batch_item_counts(id.parse().expect("batch id"))
            .await
            .expect("counts"),
        vec![("pending".to_string(), 4)]
    );
    // A deleted batch leaves no counters behind once folded.
    app.delete(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(204);
    app.store().fold_batch_item_counts().await.expect("fold");
    assert!(
        app.store()
            .batch_item_counts(id.parse().expect("batch id"))
            .await
            .expect("counts")
            .is_empty()
    );
}

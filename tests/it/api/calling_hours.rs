//! Issue 32, point 3: calling hours. A window in the callee's time zone
//! (default 09:00–21:00 every day), set per workspace at
//! `/api/numbers/dialing-settings` and overridden per agent
//! (`compliance.callingHours`) and per batch or campaign (`callingHours`).
//! Batch items, campaign rows and retries outside it wait (`waiting`, with
//! `nextAttemptAt`) and are never dialed outside it; a single call is refused
//! 403 unless the request waives the hours and the agent allows it; an alert
//! dial skips the number unless its agent bypasses hours for emergencies.
//! Every test runs on the clock it moves, with the production default.

use super::batches::{ANSWERS, NO_ANSWER, all_items, batch, dialing_workspace, item, phone};
use crate::support::{TestApp, Workspace, eventually, utc};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use voxline::domain::calling_hours::CallingHours;
use voxline::domain::clock::ManualClock;

const SETTINGS: &str = "/api/numbers/dialing-settings";

/// A server on `clock` with the production default hours (09:00–21:00 in the callee's zone).
async fn app_at(clock: &Arc<ManualClock>) -> TestApp {
    TestApp::spawn_with(clock.clone(), HashMap::new(), |s| {
        s.calling_hours = CallingHours::workspace_default();
    })
    .await
}

fn created_at(call: &Value) -> DateTime<Utc> {
    utc(call["createdAt"].as_str().expect("createdAt"))
}

/// Every call of the workspace, newest first.
async fn calls(app: &TestApp, ws: &Workspace) -> Vec<Value> {
    all_items(app, &ws.key, "/api/calls").await
}

/// The batch's items once each is `waiting`, live ones finished.
async fn items_when(
    app: &TestApp,
    ws: &Workspace,
    id: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let path = format!("/api/batches/{id}/items");
    eventually(Duration::from_secs(60), what, || async {
        let items = all_items(app, &ws.key, &path).await;
        done(&items).then_some(items)
    })
    .await
}

#[tokio::test]
async fn workspace_hours_default_to_nine_to_nine_in_the_callee_zone_and_are_validated() {
    let clock = ManualClock::new(utc("2026-11-20T06:00:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Hours", 1).await;
    let read = app.get(&ws.key, SETTINGS).await.expect(200).body;
    assert_eq!(
        read["callingHours"],
        json!({"start": "09:00", "end": "21:00",
               "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "timeZone": "callee"}),
        "{read}"
    );
    assert_eq!(read["callingHoursDefault"], true);

    for (body, field) in [
        (
            json!({"callingHours": {"start": "9am", "end": "21:00"}}),
            "callingHours.start",
        ),
        (
            json!({"callingHours": {"start": "10:00", "end": "09:00"}}),
            "callingHours.end",
        ),
        (
            json!({"callingHours": {"start": "09:00", "end": "24:01"}}),
            "callingHours.end",
        ),
        (
            json!({"callingHours": {"start": "09:00", "end": "21:00", "days": []}}),
            "callingHours.days",
        ),
        (
            json!({"callingHours": {"start": "09:00", "end": "21:00", "days": ["someday"]}}),
            "callingHours.days",
        ),
        (
            json!({"callingHours": {"start": "09:00", "end": "21:00", "timeZone": "Mars/Base"}}),
            "callingHours.timeZone",
        ),
        (
            json!({"callingHours": {"start": "09:00", "end": "21:00", "colour": "red"}}),
            "colour",
        ),
        (json!({"callingHours": ["09:00", "21:00"]}), "callingHours"),
    ] {
        let refused = app.patch(&ws.key, SETTINGS, body.clone()).await.expect(400);
        assert!(
            refused.message().contains(field),
            "{body}: {}",
            refused.message()
        );
    }
    let set = app
        .patch(
            &ws.key,
            SETTINGS,
            json!({"callingHours": {"start": "10:00", "end": "18:30", "days": ["mon", "fri", "mon"],
                                    "timeZone": "Asia/Kolkata"}}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(
        set["callingHours"],
        json!({"start": "10:00", "end": "18:30", "days": ["mon", "fri"], "timeZone": "Asia/Kolkata"})
    );
    assert_eq!(set["callingHoursDefault"], false);
    assert_eq!(set["attemptCapPerDay"], 3, "other rules keep their value");
    let reset = app
        .patch(&ws.key, SETTINGS, json!({"callingHours": null}))
        .await
        .expect(200)
        .body;
    assert_eq!(reset["callingHoursDefault"], true);
    assert_eq!(reset["callingHours"]["start"], "09:00");

    // An agent's own hours are checked the same way, and read back.
    let refused = app
        .patch(
            &ws.key,
            &format!("/api/agents/{agent}"),
            json!({"compliance": {"callingHours": {"start": "25:00", "end": "26:00"}}}),
        )
        .await
        .expect(400);
    assert!(
        refused.message().contains("compliance.callingHours"),
        "{}",
        refused.message()
    );
    let changed = app
        .patch(
            &ws.key,
            &format!("/api/agents/{agent}"),
            json!({"compliance": {"callingHours": {"start": "08:00", "end": "20:00"},
                                  "allowCallingHoursOverride": true}}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(
        changed["compliance"]["callingHours"]["start"], "08:00",
        "{changed}"
    );
    assert_eq!(changed["compliance"]["allowCallingHoursOverride"], true);
    assert_eq!(changed["compliance"]["bypassCallingHours"], false);
    assert_eq!(changed["compliance"]["optOut"], true);
}

#[tokio::test]
async fn a_batch_started_at_2055_ist_stops_dialing_at_2100_and_resumes_at_0900() {
    // 20:55 IST.
    let clock = ManualClock::new(utc("2026-11-20T15:25:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Evening", 1).await;
    let items: Vec<Value> = (0..6).map(|n| item(n, ANSWERS)).collect();
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "contacts": items}),
        )
        .await
        .expect(201)
        .body;
    let id = created["id"].as_str().unwrap().to_string();
    // At least one call is placed before 21:00.
    eventually(Duration::from_secs(30), "a first call", || async {
        (batch(&app, &ws, &id).await["completed"].as_i64() >= Some(1)).then_some(())
    })
    .await;
    // 21:00 IST: the calls in flight finish; the rest wait for 09:00 IST.
    clock.set(utc("2026-11-20T15:30:00Z"));
    let items = items_when(&app, &ws, &id, "the rest waiting", |items| {
        items
            .iter()
            .all(|i| i["status"] == "completed" || i["status"] == "waiting")
    })
    .await;
    let waiting: Vec<&Value> = items.iter().filter(|i| i["status"] == "waiting").collect();
    assert!(
        !waiting.is_empty(),
        "some items were left for the morning: {items:?}"
    );
    for i in &waiting {
        assert_eq!(i["nextAttemptAt"], "2026-11-21T03:30:00.000Z", "{i}");
        assert_eq!(i["waitReason"], "calling-hours", "{i}");
        assert_eq!(i["displayStatus"], "Waiting for calling hours");
    }
    let view = batch(&app, &ws, &id).await;
    assert_eq!(view["status"], "running");
    assert_eq!(
        view["waiting"].as_u64(),
        Some(waiting.len() as u64),
        "{view}"
    );
    // Nothing is dialed overnight.
    clock.set(utc("2026-11-21T02:00:00Z"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        batch(&app, &ws, &id).await["waiting"].as_u64(),
        Some(waiting.len() as u64)
    );
    // 09:00 IST: the rest are dialed.
    clock.set(utc("2026-11-21T03:30:00Z"));
    eventually(Duration::from_secs(60), "batch completed", || async {
        let b = batch(&app, &ws, &id).await;
        (b["status"] == "completed").then_some(())
    })
    .await;
    let calls = calls(&app, &ws).await;
    assert_eq!(calls.len(), 6);
    let (evening, morning): (Vec<_>, Vec<_>) = calls
        .iter()
        .map(created_at)
        .partition(|at| *at < utc("2026-11-20T15:30:00Z"));
    assert_eq!(morning.len(), waiting.len());
    assert!(
        morning.iter().all(|at| *at >= utc("2026-11-21T03:30:00Z")),
        "no call was placed between 21:00 and 09:00 IST: {morning:?}"
    );
    assert!(!evening.is_empty());
}

#[tokio::test]
async fn a_us_number_follows_its_own_zone_across_the_dst_change() {
    // Saturday 2026-03-07 21:30 EST in New York; Sunday 08:00 IST in India.
    let clock = ManualClock::new(utc("2026-03-08T02:30:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Zones", 2).await;
    let new_york = "+12125550110";
    let india = phone(1, ANSWERS);
    let script = json!({"simScript": ["Goodbye!"]});
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "contacts": [
                {"name": "Ny", "phone": new_york, "variables": script},
                {"name": "In", "phone": india, "variables": script}]}),
        )
        .await
        .expect(201)
        .body;
    let id = created["id"].as_str().unwrap().to_string();
    let items = items_when(&app, &ws, &id, "both waiting", |items| {
        items.iter().all(|i| i["status"] == "waiting")
    })
    .await;
    let next: HashMap<&str, &str> = items
        .iter()
        .map(|i| {
            (
                i["phone"].as_str().unwrap(),
                i["nextAttemptAt"].as_str().unwrap(),
            )
        })
        .collect();
    // 09:00 EDT (UTC-4 since 02:00 local that Sunday), not 09:00 EST.
    assert_eq!(next[new_york], "2026-03-08T13:00:00.000Z", "{items:?}");
    assert_eq!(
        next[india.as_str()],
        "2026-03-08T03:30:00.000Z",
        "{items:?}"
    );

    clock.set(utc("2026-03-08T03:30:00Z"));
    let items = items_when(&app, &ws, &id, "India dialed", |items| {
        items.iter().any(|i| i["status"] == "completed")
    })
    .await;
    let us = items.iter().find(|i| i["phone"] == new_york).unwrap();
    assert_eq!(us["status"], "waiting", "New York is still asleep: {us}");
    clock.set(utc("2026-03-08T13:00:00Z"));
    eventually(Duration::from_secs(60), "batch completed", || async {
        (batch(&app, &ws, &id).await["status"] == "completed").then_some(())
    })
    .await;
    let calls = calls(&app, &ws).await;
    let us_call = calls.iter().find(|c| c["phone"] == new_york).unwrap();
    assert_eq!(created_at(us_call), utc("2026-03-08T13:00:00Z"));
}

#[tokio::test]
async fn retries_never_land_outside_the_window() {
    // 20:58 IST.
    let clock = ManualClock::new(utc("2026-11-20T15:28:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Retry", 1).await;
    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"retryPolicy": {"maxAttempts": 2, "retryOn": ["no-answer"], "retryAfterSeconds": 60}}),
    )
    .await
    .expect(200);
    let unanswered = phone(7, NO_ANSWER);
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": unanswered}),
    )
    .await
    .expect(201);
    let first = eventually(Duration::from_secs(30), "the retry stored", || async {
        let calls = calls(&app, &ws).await;
        calls.iter().any(|c| c["attempt"] == 2).then_some(calls)
    })
    .await;
    assert_eq!(first.len(), 2);
    // The retry is due at 20:59 IST; the dispatcher only sees it at 21:00:30.
    clock.set(utc("2026-11-20T15:30:30Z"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let retry = calls(&app, &ws)
        .await
        .into_iter()
        .find(|c| c["attempt"] == 2)
        .unwrap();
    assert_eq!(
        retry["rawStatus"], "queued",
        "not dialed after 21:00: {retry}"
    );
    // 09:00 IST: it is dialed then, and rings out again.
    clock.set(utc("2026-11-21T03:30:00Z"));
    let retry_id = retry["id"].as_str().unwrap().to_string();
    let detail = eventually(Duration::from_secs(30), "the retry dialed", || async {
        let d = app
            .get(&ws.key, &format!("/api/calls/{retry_id}"))
            .await
            .expect(200)
            .body;
        (d["rawStatus"] == "no-answer").then_some(d)
    })
    .await;
    for event in detail["statusHistory"].as_array().unwrap() {
        if event["status"] == "ringing" {
            assert!(
                utc(event["at"].as_str().unwrap()) >= utc("2026-11-21T03:30:00Z"),
                "{detail}"
            );
        }
    }
}

#[tokio::test]
async fn a_single_call_outside_the_window_is_refused_unless_waived_where_the_agent_allows() {
    // 22:00 IST.
    let clock = ManualClock::new(utc("2026-11-20T16:30:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Single", 3).await;
    let to = phone(2, ANSWERS);
    let refused = app
        .post(&ws.key, "/api/calls", json!({"agentId": agent, "to": to}))
        .await
        .expect(403);
    let msg = refused.message();
    assert!(
        msg.contains("calling hours") && msg.contains("2026-11-21T03:30:00Z"),
        "{msg}"
    );
    let waived = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": to, "respectCallingHours": false}),
        )
        .await
        .expect(403);
    assert!(
        waived.message().contains("allowCallingHoursOverride"),
        "{}",
        waived.message()
    );
    // The test call rings its builder's own phone: hours do not apply.
    app.post(
        &ws.key,
        &format!("/api/agents/{agent}/test-call"),
        json!({"phoneNumber": phone(3, ANSWERS)}),
    )
    .await
    .expect(201);

    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"compliance": {"allowCallingHoursOverride": true}}),
    )
    .await
    .expect(200);
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": to, "respectCallingHours": false}),
        )
        .await
        .expect(201)
        .body;
    let id = placed["callId"].as_str().unwrap();
    let detail = app
        .get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(detail["callingHoursOverride"], "request", "{detail}");
    // Still refused without the waiver.
    app.post(&ws.key, "/api/calls", json!({"agentId": agent, "to": to}))
        .await
        .expect(403);

    // Inside the window nothing is recorded.
    clock.set(utc("2026-11-21T05:00:00Z"));
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": phone(4, ANSWERS)}),
        )
        .await
        .expect(201)
        .body;
    let id = placed["callId"].as_str().unwrap();
    let detail = app
        .get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(detail["callingHoursOverride"], Value::Null);
}

#[tokio::test]
async fn an_alert_skips_numbers_outside_their_hours_unless_its_agent_bypasses_them() {
    // 22:00 IST; 11:30 EST in New York.
    let clock = ManualClock::new(utc("2026-11-20T16:30:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Alert", 5).await;
    let india = phone(5, ANSWERS);
    let new_york = "+12125550120";
    let sent = app
        .post(
            &ws.key,
            "/api/alert",
            json!({"agentId": agent, "phones": [india, new_york]}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(sent["dialed"], 1, "{sent}");
    assert_eq!(sent["calls"][0]["phone"], new_york);
    let skipped = &sent["skippedNumbers"][0];
    assert_eq!(skipped["phone"], india.as_str());
    assert_eq!(skipped["skipReason"], "calling-hours");
    assert!(
        skipped["message"]
            .as_str()
            .unwrap()
            .contains("2026-11-21T03:30:00Z"),
        "{skipped}"
    );

    let emergency = app
        .create_agent(
            &ws.key,
            json!({"name": "Flood warning", "welcomeMessage": "This is a flood warning.",
                   "compliance": {"bypassCallingHours": true}}),
        )
        .await;
    let sent = app
        .post(
            &ws.key,
            "/api/alert",
            json!({"agentId": emergency["id"], "phones": [phone(6, ANSWERS), new_york]}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(sent["dialed"], 2, "{sent}");
    for call in sent["calls"].as_array().unwrap() {
        let id = call["callId"].as_str().unwrap();
        let detail = app
            .get(&ws.key, &format!("/api/calls/{id}"))
            .await
            .expect(200)
            .body;
        let expected = if call["phone"] == new_york {
            Value::Null
        } else {
            json!("emergency-alert")
        };
        assert_eq!(detail["callingHoursOverride"], expected, "{detail}");
    }
}

#[tokio::test]
async fn batch_and_agent_hours_override_the_workspace_and_campaign_rows_keep_them() {
    // 22:00 IST: outside the default, inside a batch's own 00:00–24:00.
    let clock = ManualClock::new(utc("2026-11-20T16:30:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Override", 2).await;
    let all_day = json!({"start": "00:00", "end": "24:00"});
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "callingHours": all_day, "contacts": [item(1, ANSWERS)]}),
        )
        .await
        .expect(201)
        .body;
    assert_eq!(created["callingHours"]["end"], "24:00");
    let id = created["id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(30), "dialed at night", || async {
        (batch(&app, &ws, &id).await["status"] == "completed").then_some(())
    })
    .await;

    // A campaign keeps the workspace's hours: its row waits; then its own
    // hours, set while it runs, release it.
    let campaign = app
        .post(
            &ws.key,
            "/api/campaigns",
            json!({"name": "Night", "agentId": agent}),
        )
        .await
        .expect(201)
        .body;
    let cid = campaign["id"].as_str().unwrap().to_string();
    assert_eq!(campaign["callingHours"], Value::Null);
    let csv = format!("name,phone\nAsha,{}\n", phone(2, ANSWERS));
    super::campaigns::upload(&app, &ws, &cid, csv.as_bytes())
        .await
        .expect(200);
    app.post_empty(&ws.key, &format!("/api/campaigns/{cid}/start"))
        .await
        .expect(200);
    let path = format!("/api/campaigns/{cid}/students");
    eventually(Duration::from_secs(30), "the row waiting", || async {
        let rows = all_items(&app, &ws.key, &path).await;
        (rows.len() == 1 && rows[0]["status"] == "waiting").then_some(())
    })
    .await;
    let patched = app
        .patch(
            &ws.key,
            &format!("/api/campaigns/{cid}"),
            json!({"callingHours": all_day}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(patched["callingHours"]["start"], "00:00");
    eventually(Duration::from_secs(30), "campaign completed", || async {
        let c = app
            .get(&ws.key, &format!("/api/campaigns/{cid}"))
            .await
            .expect(200)
            .body;
        (c["status"] == "completed").then_some(())
    })
    .await;

    // An agent's own hours come before the workspace's.
    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"compliance": {"callingHours": {"start": "00:00", "end": "24:00"}}}),
    )
    .await
    .expect(200);
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": phone(3, ANSWERS)}),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn a_number_whose_candidate_zones_share_no_open_time_is_skipped_naming_the_rule() {
    let clock = ManualClock::new(utc("2026-11-20T17:00:00Z"));
    let app = app_at(&clock).await;
    let (ws, agent) = dialing_workspace(&app, "Never", 1).await;
    // Area code 775 spans Mountain (Boise) and Pacific time: an hour-long
    // window is never open in both at once.
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "callingHours": {"start": "09:00", "end": "10:00"},
                   "contacts": [{"name": "Nv", "phone": "+17755550110"}]}),
        )
        .await
        .expect(201)
        .body;
    let id = created["id"].as_str().unwrap().to_string();
    let items = items_when(&app, &ws, &id, "the item skipped", |items| {
        items.iter().all(|i| i["status"] == "skipped")
    })
    .await;
    assert_eq!(items[0]["skipReason"], "calling-hours", "{items:?}");
    assert!(items[0]["reason"].as_str().unwrap().contains("time zones"));
    assert!(calls(&app, &ws).await.is_empty());
}

#[tokio::test]
async fn the_admin_cli_reads_and_sets_the_dialing_rules() {
    let clock = ManualClock::new(utc("2026-11-20T06:00:00Z"));
    let app = app_at(&clock).await;
    let (ws, _) = dialing_workspace(&app, "Cli", 1).await;
    let org = ws.org_id.to_string();
    let read = app.admin_ok(&["number", "dialing", "--org", &org]).await;
    assert_eq!(read["attemptCapPerDay"], 3, "{read}");
    assert_eq!(read["callingHoursDefault"], true, "{read}");
    let set = app
        .admin_ok(&[
            "number",
            "dialing",
            "--org",
            &org,
            "--cap-per-week",
            "9",
            "--calling-hours",
            r#"{"start":"10:00","end":"19:00","days":["mon","tue"]}"#,
        ])
        .await;
    assert_eq!(set["attemptCapPerWeek"], 9, "{set}");
    assert_eq!(set["callingHours"]["end"], "19:00", "{set}");
    // The API reads what the CLI stored.
    let api = app.get(&ws.key, SETTINGS).await.expect(200).body;
    assert_eq!(api["callingHours"]["days"], json!(["mon", "tue"]), "{api}");
    assert_eq!(api["attemptCapPerWeek"], 9);
    let refused = app
        .admin(&[
            "number",
            "dialing",
            "--org",
            &org,
            "--calling-hours",
            r#"{"start":"10:00"}"#,
        ])
        .await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--calling-hours") && stderr.contains("callingHours.end"),
        "{stderr}"
    );
    let reset = app
        .admin_ok(&[
            "number",
            "dialing",
            "--org",
            &org,
            "--calling-hours",
            "default",
        ])
        .await;
    assert_eq!(reset["callingHoursDefault"], true, "{reset}");
}

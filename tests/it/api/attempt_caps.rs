//! Issue 32, point 4: attempt caps. At most N dial attempts per number per
//! rolling 24 hours and 7 days across the workspace (defaults 3 and 7, set at
//! `/api/numbers/dialing-settings`). A single call or test call over the cap
//! answers 403 naming the rule and when the number may be dialed again, the
//! alert dial skips it per number, batch items are skipped with
//! `skipReason: attempt-cap`, and the caps are exact under concurrent
//! placement (on Postgres across two nodes).

use super::batches::{ANSWERS, all_items, batch_with, dialing_workspace, phone, wait_status};
use crate::support::{PG_ENV, TestApp, Workspace, utc};
use axum::http::StatusCode;
use serde_json::{Value, json};
use voxline::domain::clock::ManualClock;

const SETTINGS: &str = "/api/numbers/dialing-settings";

async fn dial(app: &TestApp, ws: &Workspace, agent: &str, to: &str) -> crate::support::Reply {
    app.post(&ws.key, "/api/calls", json!({"agentId": agent, "to": to}))
        .await
}

async fn calls_to(app: &TestApp, ws: &Workspace, number: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls?search={}", &number[1..]))
        .await
        .expect(200)
        .body["stats"]["total"]
        .clone()
}

#[tokio::test]
async fn caps_default_to_three_a_day_and_seven_a_week_and_are_validated() {
    let app = TestApp::spawn().await;
    let (ws, _) = dialing_workspace(&app, "Settings", 1).await;
    let read = app.get(&ws.key, SETTINGS).await.expect(200);
    assert_eq!(read.body["attemptCapPerDay"], 3, "{}", read.body);
    assert_eq!(read.body["attemptCapPerWeek"], 7, "{}", read.body);

    for (body, field) in [
        (json!({"attemptCapPerDay": 0}), "attemptCapPerDay"),
        (json!({"attemptCapPerDay": 101}), "attemptCapPerDay"),
        (json!({"attemptCapPerWeek": -1}), "attemptCapPerWeek"),
        (json!({"attemptCapPerWeek": "7"}), "attemptCapPerWeek"),
        (json!({"colour": "red"}), "colour"),
    ] {
        let refused = app.patch(&ws.key, SETTINGS, body.clone()).await.expect(400);
        assert!(
            refused.message().contains(field),
            "{body}: {}",
            refused.message()
        );
    }
    let changed = app
        .patch(&ws.key, SETTINGS, json!({"attemptCapPerDay": 5}))
        .await
        .expect(200);
    assert_eq!(changed.body["attemptCapPerDay"], 5);
    assert_eq!(
        changed.body["attemptCapPerWeek"], 7,
        "absent fields keep their value"
    );
    let read = app.get(&ws.key, SETTINGS).await.expect(200);
    assert_eq!(read.body["attemptCapPerDay"], 5);
    let other = app.workspace("Other").await;
    let theirs = app.get(&other.key, SETTINGS).await.expect(200);
    assert_eq!(
        theirs.body["attemptCapPerDay"], 3,
        "settings are per workspace"
    );
}

#[tokio::test]
async fn the_fourth_call_to_a_number_within_a_day_is_refused_naming_the_rule_and_when() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Fourth", 5).await;
    let number = phone(1, ANSWERS);
    for _ in 0..3 {
        dial(&app, &ws, &agent, &number).await.expect(201);
    }
    let refused = dial(&app, &ws, &agent, &number).await.expect(403);
    let msg = refused.message();
    assert!(
        msg.contains("attempt cap (3 dial attempts per 24 hours)"),
        "{msg}"
    );
    assert!(msg.contains("may be dialed again at 20"), "{msg}");
    let refused = app
        .post(
            &ws.key,
            &format!("/api/agents/{agent}/test-call"),
            json!({"phoneNumber": number}),
        )
        .await;
    // The test call refuses a number with a live call first (409); once the
    // calls ended, it is the cap (403).
    assert!(
        refused.status == StatusCode::FORBIDDEN || refused.status == StatusCode::CONFLICT,
        "{}",
        refused.message()
    );
    let alert = app
        .post(
            &ws.key,
            "/api/alert",
            json!({"agentId": agent, "phones": [number, phone(2, ANSWERS)]}),
        )
        .await
        .expect(200);
    assert_eq!(alert.body["dialed"], 1, "{}", alert.body);
    let skips = alert.body["skippedNumbers"].as_array().unwrap();
    assert_eq!(skips.len(), 1, "{}", alert.body);
    assert_eq!(skips[0]["phone"], number.as_str());
    assert_eq!(skips[0]["skipReason"], "attempt-cap");
    assert!(
        skips[0]["message"]
            .as_str()
            .unwrap()
            .contains("attempt cap"),
        "{}",
        alert.body
    );
    assert_eq!(calls_to(&app, &ws, &number).await, 3);
    // A higher cap lets the number be dialed again.
    app.patch(&ws.key, SETTINGS, json!({"attemptCapPerDay": 4}))
        .await
        .expect(200);
    dial(&app, &ws, &agent, &number).await.expect(201);
}

#[tokio::test]
async fn five_batches_holding_one_number_dial_it_exactly_three_times() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Batches", 5).await;
    let number = phone(3, ANSWERS);
    // A batch keeps one item per number, so the number is repeated across
    // five batches, each with another number too, all running at once.
    let mut ids = Vec::new();
    for n in 0..5 {
        let items = vec![
            json!({"name": "Same", "phone": number, "variables": {"course": "MBA", "simScript": ["Goodbye!"]}}),
            json!({"name": format!("Other {n}"), "phone": phone(10 + n, ANSWERS),
                   "variables": {"course": "MBA", "simScript": ["Goodbye!"]}}),
        ];
        ids.push(batch_with(&app, &ws, &agent, items).await);
    }
    for id in &ids {
        app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
            .await
            .expect(200);
    }
    let mut capped = 0;
    for id in &ids {
        wait_status(&app, &ws, id, "completed", 90).await;
        let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
        for item in items {
            if item["phone"] == number.as_str() && item["status"] == "skipped" {
                assert_eq!(item["skipReason"], "attempt-cap", "{item}");
                assert!(
                    item["reason"]
                        .as_str()
                        .unwrap()
                        .contains("may be dialed again"),
                    "{item}"
                );
                assert_eq!(item["attempts"], 0, "{item}");
                capped += 1;
            } else {
                assert_eq!(item["status"], "completed", "{item}");
            }
        }
    }
    assert_eq!(capped, 2);
    assert_eq!(calls_to(&app, &ws, &number).await, 3);
}

#[tokio::test]
async fn twenty_simultaneous_calls_to_one_number_place_exactly_the_cap() {
    let app = TestApp::spawn().await;
    // On Postgres half the requests go to a second node on the same database.
    let on_postgres = std::env::var(PG_ENV).is_ok_and(|u| u.starts_with("postgres"));
    let peer = if on_postgres {
        Some(app.spawn_peer(|_| {}).await)
    } else {
        None
    };
    let (ws, agent) = dialing_workspace(&app, "Race", 20).await;
    let number = phone(4, ANSWERS);
    let replies = futures::future::join_all((0..20).map(|n| {
        let node = match &peer {
            Some(peer) if n % 2 == 1 => peer,
            _ => &app,
        };
        dial(node, &ws, &agent, &number)
    }))
    .await;
    let placed = replies
        .iter()
        .filter(|r| r.status == StatusCode::CREATED)
        .count();
    let refused = replies
        .iter()
        .filter(|r| r.status == StatusCode::FORBIDDEN)
        .count();
    assert_eq!((placed, refused), (3, 17), "every reply is 201 or 403");
    for r in replies.iter().filter(|r| r.status == StatusCode::FORBIDDEN) {
        assert!(r.message().contains("attempt cap"), "{}", r.message());
    }
    assert_eq!(calls_to(&app, &ws, &number).await, 3);
    if let Some(peer) = peer {
        peer.shutdown().await;
    }
}

#[tokio::test]
async fn the_weekly_cap_counts_seven_days_on_the_injected_clock() {
    let clock = ManualClock::new(utc("2026-11-20T04:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let (ws, agent) = dialing_workspace(&app, "Weekly", 5).await;
    let number = phone(5, ANSWERS);
    // Three a day for two days, then the seventh attempt on the third day.
    for day in 0..2 {
        for _ in 0..3 {
            dial(&app, &ws, &agent, &number).await.expect(201);
        }
        let refused = dial(&app, &ws, &agent, &number).await.expect(403);
        assert!(
            refused.message().contains("per 24 hours"),
            "day {day}: {}",
            refused.message()
        );
        clock.advance(chrono::Duration::hours(24) + chrono::Duration::seconds(1));
    }
    dial(&app, &ws, &agent, &number).await.expect(201);
    let refused = dial(&app, &ws, &agent, &number).await.expect(403);
    assert!(
        refused.message().contains("7 dial attempts per 7 days"),
        "{}",
        refused.message()
    );
    // The first day's attempts leave the week seven days after them.
    assert!(
        refused.message().contains("2026-11-27T04:00:00Z"),
        "{}",
        refused.message()
    );
    clock.advance(chrono::Duration::days(5));
    dial(&app, &ws, &agent, &number).await.expect(201);
    assert_eq!(calls_to(&app, &ws, &number).await, 8);
}

#[tokio::test]
async fn a_retry_over_the_cap_is_canceled_naming_the_rule_and_a_campaign_row_is_skipped() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Retry cap", 2).await;
    app.patch(&ws.key, SETTINGS, json!({"attemptCapPerDay": 2}))
        .await
        .expect(200);
    app.patch(
        &ws.key,
        &format!("/api/agents/{agent}"),
        json!({"retryPolicy": {"maxAttempts": 3, "retryOn": ["no-answer"], "retryAfterSeconds": 1}}),
    )
    .await
    .expect(200);
    let unanswered = phone(5, super::batches::NO_ANSWER);
    // Attempt 1 and its retry fill the day's cap; the second retry is stored
    // but canceled at dial time, its record naming the rule.
    dial(&app, &ws, &agent, &unanswered).await.expect(201);
    let third = crate::support::eventually(
        std::time::Duration::from_secs(30),
        "the third attempt settled",
        || async {
            let page = app
                .get(&ws.key, &format!("/api/calls?search={}", &unanswered[1..]))
                .await
                .expect(200)
                .body;
            page["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["attempt"] == 3 && c["rawStatus"] == "canceled")
                .cloned()
        },
    )
    .await;
    assert_eq!(third["endedReason"], "attempt-cap", "{third}");
    assert_eq!(third["durationSeconds"], 0, "{third}");

    // A campaign row for the capped number is skipped with the rule.
    let campaign = app
        .post(
            &ws.key,
            "/api/campaigns",
            json!({"name": "Capped", "agentId": agent}),
        )
        .await
        .expect(201)
        .body;
    let id = campaign["id"].as_str().unwrap().to_string();
    let csv = format!(
        "name,phone\nAsha,{unanswered}\nRavi,{}\n",
        phone(6, ANSWERS)
    );
    super::campaigns::upload(&app, &ws, &id, csv.as_bytes())
        .await
        .expect(200);
    app.post_empty(&ws.key, &format!("/api/campaigns/{id}/start"))
        .await
        .expect(200);
    let path = format!("/api/campaigns/{id}/students");
    let rows = crate::support::eventually(
        std::time::Duration::from_secs(30),
        "both rows settled",
        || async {
            let rows = all_items(&app, &ws.key, &path).await;
            rows.iter()
                .all(|r| r["status"] == "skipped" || r["status"] == "completed")
                .then_some(rows)
        },
    )
    .await;
    let capped = rows
        .iter()
        .find(|r| r["phone"] == unanswered.as_str())
        .unwrap();
    assert_eq!(capped["status"], "skipped", "{capped}");
    assert_eq!(capped["skipReason"], "attempt-cap", "{capped}");
    let other = rows
        .iter()
        .find(|r| r["phone"] != unanswered.as_str())
        .unwrap();
    assert_eq!(other["status"], "completed", "{other}");
}

#[tokio::test]
async fn concurrent_alerts_sharing_numbers_in_any_order_place_exactly_the_cap_of_each() {
    let app = TestApp::spawn().await;
    // On Postgres half the alerts go to a second node: each alert locks its
    // numbers in sorted order, so crossing orders never deadlock.
    let on_postgres = std::env::var(PG_ENV).is_ok_and(|u| u.starts_with("postgres"));
    let peer = if on_postgres {
        Some(app.spawn_peer(|_| {}).await)
    } else {
        None
    };
    let (ws, agent) = dialing_workspace(&app, "Alerts", 100).await;
    let numbers: Vec<String> = (0..12).map(|n| phone(40 + n, ANSWERS)).collect();
    let replies = futures::future::join_all((0..6).map(|n| {
        let node = match &peer {
            Some(peer) if n % 2 == 1 => peer,
            _ => &app,
        };
        let mut order = numbers.clone();
        if n % 2 == 1 {
            order.reverse();
        }
        order.rotate_left(n);
        let agent = agent.clone();
        let key = ws.key.clone();
        async move {
            node.post(
                &key,
                "/api/alert",
                json!({"agentId": agent, "phones": order}),
            )
            .await
        }
    }))
    .await;
    let dialed: u64 = replies
        .iter()
        .map(|r| r.body["dialed"].as_u64().expect("every alert answers 200"))
        .sum();
    assert_eq!(dialed, 12 * 3, "the cap of 3 for each of 12 numbers");
    for number in &numbers {
        assert_eq!(calls_to(&app, &ws, number).await, 3, "{number}");
    }
    if let Some(peer) = peer {
        peer.shutdown().await;
    }
}

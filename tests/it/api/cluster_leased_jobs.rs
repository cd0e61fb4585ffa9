//! The one leased-job worker on two nodes sharing one Postgres database
//! (issue 30, point 4): when many analyses and webhook deliveries become due
//! at the same moment, the nodes split them and each job runs exactly once.
//!
//! Needs Postgres: a plain `cargo test` lists it as ignored, and the
//! Postgres pass runs it with `--include-ignored`.

use crate::support::{PG_ENV, TestApp, eventually};
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::domain::{AgentId, CallId, DeliveryId, Paise};
use voxline::store::analysis_backlog::{BacklogCall, BacklogOwner, BacklogTurn};
use voxline::store::webhook_outbox::event_id;

/// Jobs of each kind due at once.
const JOBS: usize = 40;

/// A webhook receiver on port 0 that counts each event id on arrival and
/// answers 200 after `delay` (so deliveries overlap several passes).
async fn receiver(delay: Duration) -> (String, Arc<Mutex<HashMap<String, usize>>>) {
    let seen = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let app = Router::new().route(
        "/hook",
        post({
            let seen = seen.clone();
            move |_headers: HeaderMap, body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let id = body["eventId"].as_str().unwrap_or_default().to_string();
                    *seen.lock().unwrap().entry(id).or_insert(0) += 1;
                    tokio::time::sleep(delay).await;
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

/// `n` ended, answered calls with a short conversation, ended a while ago
/// (so their analyses' webhook wait is over).
fn ended_calls(n: usize, now_ms: i64) -> Vec<BacklogCall> {
    (0..n)
        .map(|i| {
            let queued_at = now_ms - 3_600_000 + i64::try_from(i).unwrap() * 1_000;
            let turns = ["Hello, do you have a minute?", "Yes.", "Goodbye!"]
                .iter()
                .enumerate()
                .map(|(k, text)| BacklogTurn {
                    speaker: if k % 2 == 0 { "assistant" } else { "user" },
                    text: (*text).to_owned(),
                    at_ms: queued_at + 5_000 + i64::try_from(k).unwrap() * 3_000,
                })
                .collect();
            BacklogCall {
                id: CallId::new(),
                phone: format!("+9197{:08}", 20_000_000 + i),
                target_name: "Asha".into(),
                queued_at,
                ringing_at: queued_at + 500,
                answered_at: queued_at + 2_000,
                ended_at: queued_at + 75_000,
                ended_reason: "agent-hangup",
                summary: String::new(),
                transcript_text: "Bot: Hello\nCandidate: Yes.".into(),
                turns,
            }
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn two_nodes_run_each_of_many_jobs_due_at_once_exactly_once() {
    let app = TestApp::spawn().await;
    assert!(
        std::env::var(PG_ENV).is_ok_and(|u| u.starts_with("postgres")),
        "needs {PG_ENV}"
    );
    assert_eq!(app.store().dialect(), "postgres");
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.workspace("Leased jobs").await;
    let agent: AgentId = app
        .create_agent(
            &ws.key,
            json!({"name": "Leased", "welcomeMessage": "Hello.", "prompt": "Be brief."}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .parse()
        .expect("agent id");
    // The receiver answers slowly enough that deliveries are in flight
    // across several passes of both nodes.
    let (url, seen) = receiver(Duration::from_millis(150)).await;
    let subscription = app
        .admin_ok(&[
            "webhook",
            "add",
            "--org",
            &ws.org_id.to_string(),
            "--url",
            &url,
        ])
        .await["id"]
        .as_str()
        .expect("subscription id")
        .to_string();

    // Forty ended calls with pending analyses, held (leased to no node
    // until tomorrow) while they are written.
    let now = app.now().timestamp_millis();
    let held_until = now + 86_400_000;
    let calls = ended_calls(JOBS, now);
    let owner = BacklogOwner {
        org_id: ws.org_id,
        agent_id: agent,
        agent_name: "Leased",
        from_number: "+918035740101",
        provider: "sim",
        rate_paise: Paise(200),
        analysis_wait_ms: 0,
        held_until,
    };
    app.store()
        .seed_analysis_backlog(&owner, &calls)
        .await
        .expect("seed the calls");
    // Their `call.completed` deliveries, all due now, in one transaction.
    let pool = sqlx::PgPool::connect(&app.database_url).await.expect("pg");
    let mut tx = pool.begin().await.expect("begin");
    for call in &calls {
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, event_id, event, subscription_id, org_id, call_id,
               next_attempt_at, created_at)
             VALUES ($1, $2, 'call.completed', $3, $4, $5, $6, $6)",
        )
        .bind(DeliveryId::new().to_string())
        .bind(event_id(call.id, "call.completed"))
        .bind(&subscription)
        .bind(ws.org_id.to_string())
        .bind(call.id.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await
        .expect("queue a delivery");
    }
    tx.commit().await.expect("commit the deliveries");
    // And the analyses, all at once: one statement.
    let released = app
        .store()
        .release_analysis_backlog(ws.org_id, agent, held_until)
        .await
        .expect("release the analyses");
    assert_eq!(released, JOBS as u64);

    // Each analysis, done, queues a `call.analyzed` (its wait is over):
    // two deliveries per call in the end, all delivered.
    for call in &calls {
        eventually(
            Duration::from_secs(120),
            "the call's analysis done and both deliveries recorded",
            || async {
                let analysis = app
                    .store()
                    .analysis(ws.org_id, call.id)
                    .await
                    .expect("analysis")?;
                let rows = app
                    .store()
                    .call_deliveries(call.id)
                    .await
                    .expect("deliveries");
                (analysis.status == "done"
                    && rows.len() == 2
                    && rows.iter().all(|d| d.status == "delivered"))
                .then_some(())
            },
        )
        .await;
    }
    // A second sender would have claimed a delivery before it was recorded
    // and sends at once: give such a stray request time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = seen.lock().unwrap().clone();
    for call in &calls {
        let analysis = app
            .store()
            .analysis(ws.org_id, call.id)
            .await
            .expect("analysis")
            .expect("the call is analyzed");
        // An analysis run twice would have stored a second version.
        assert_eq!((analysis.status.as_str(), analysis.version), ("done", 1));
        let rows = app
            .store()
            .call_deliveries(call.id)
            .await
            .expect("deliveries");
        assert!(
            rows.iter().all(|d| d.attempts == 1),
            "one attempt each: {rows:?}"
        );
        for event in ["call.completed", "call.analyzed/1"] {
            let id = event_id(call.id, event);
            assert_eq!(counts.get(&id), Some(&1), "{event} of {} once", call.id);
        }
    }
    assert_eq!(
        counts.values().sum::<usize>(),
        2 * JOBS,
        "one request per event: {counts:?}"
    );
    // Nothing is left leased: every job settled and freed its lease.
    let leased: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM call_analyses WHERE org_id = $1 AND lease_until <> 0)
              + (SELECT COUNT(*) FROM webhook_deliveries WHERE org_id = $1 AND lease_until <> 0)",
    )
    .bind(ws.org_id.to_string())
    .fetch_one(&pool)
    .await
    .expect("count leases");
    assert_eq!(leased, 0);
    peer.shutdown().await;
    app.shutdown().await;
}

//! Background work on several nodes sharing one Postgres database (issue 20,
//! point 6): webhook deliveries, ratings and analyses are claimed under
//! leases owned by a node, a node's start frees only its own leases, and the
//! janitor runs under a singleton lock.
//!
//! These need Postgres: a plain `cargo test` lists them as ignored, and the
//! Postgres pass runs them with `--include-ignored`.

use crate::support::{PG_ENV, TestApp, Workspace, eventually};
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::domain::{CallId, NodeId};
use voxline::store::singletons::Singleton;
use voxline::store::webhook_outbox::event_id;

/// Fails at once when Postgres is not what the app runs on.
fn require_postgres(app: &TestApp) {
    assert!(
        std::env::var(PG_ENV).is_ok_and(|u| u.starts_with("postgres")),
        "needs {PG_ENV}"
    );
    assert_eq!(app.store().dialect(), "postgres");
}

/// One request a receiver saw: its delivery id header and its JSON body.
#[derive(Clone, Debug)]
struct Received {
    delivery: String,
    body: Value,
}

/// A webhook receiver on port 0 that records each request on arrival and
/// answers 200 after `delay`: a slow receiver keeps a delivery in flight
/// across several passes of every node.
async fn receiver(delay: Duration) -> (String, Arc<Mutex<Vec<Received>>>) {
    let seen = Arc::new(Mutex::new(Vec::<Received>::new()));
    let app = Router::new().route(
        "/hook",
        post({
            let seen = seen.clone();
            move |headers: HeaderMap, body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let delivery = headers
                        .get("x-service-delivery")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    seen.lock().unwrap().push(Received { delivery, body });
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

/// Subscribes `url` to the workspace's events; returns the subscription id.
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
    sub["id"].as_str().expect("subscription id").to_string()
}

/// An agent that converses (so its calls are analyzed and rated).
async fn agent(app: &TestApp, ws: &Workspace) -> String {
    app.create_agent(
        &ws.key,
        json!({"name": "Background", "welcomeMessage": "Hello.", "prompt": "Be brief.",
               "silenceTimeoutSeconds": 10}),
    )
    .await["id"]
        .as_str()
        .expect("agent id")
        .to_string()
}

/// How many times each event id arrived at one receiver.
fn arrivals(seen: &Mutex<Vec<Received>>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for r in seen.lock().unwrap().iter() {
        let id = r.body["eventId"].as_str().unwrap_or_default().to_string();
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

/// Places a call that nobody answers and waits for its end; returns its id.
async fn ended_unanswered_call(app: &TestApp, ws: &Workspace, agent: &str) -> CallId {
    let id = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012381"}),
        )
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .expect("callId")
        .to_string();
    eventually(Duration::from_secs(30), "the call to end", || async {
        let call = app.get(&ws.key, &format!("/api/calls/{id}")).await;
        (call.body["rawStatus"] == "no-answer").then_some(())
    })
    .await;
    id.parse().expect("call id")
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn three_nodes_send_each_event_once_per_endpoint_and_rate_each_call_once() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peers = [app.spawn_peer(|_| {}).await, app.spawn_peer(|_| {}).await];
    let ws = app.calling_workspace("Hooks", 9).await;
    // Two endpoints; the first answers slowly, so its deliveries stay in
    // flight across many passes of all three nodes.
    let (slow_url, slow) = receiver(Duration::from_millis(400)).await;
    let (fast_url, fast) = receiver(Duration::ZERO).await;
    subscribe(&app, &ws, &slow_url).await;
    subscribe(&app, &ws, &fast_url).await;
    let agent = agent(&app, &ws).await;
    let script = json!(["Yes.", "Thank you, goodbye!"]);
    let nodes = [&app, &peers[0], &peers[1]];
    let mut calls = Vec::new();
    for n in 0..9 {
        let placed = nodes[n % 3]
            .post(
                &ws.key,
                "/api/calls",
                json!({"agentId": agent, "to": format!("+9198451{:05}", 20_000 + n),
                       "variables": {"simScript": script}}),
            )
            .await
            .expect(201);
        let id: CallId = placed.body["callId"]
            .as_str()
            .expect("callId")
            .parse()
            .expect("call id");
        calls.push(id);
    }
    for call in &calls {
        eventually(
            Duration::from_secs(120),
            "both deliveries of the call recorded",
            || async {
                let rows = app
                    .store()
                    .call_deliveries(*call)
                    .await
                    .expect("deliveries");
                (rows.len() == 2 && rows.iter().all(|d| d.status == "delivered")).then_some(())
            },
        )
        .await;
    }
    // Every delivery is recorded as sent; a second sender would have claimed
    // it before that and sends at once. Give such a stray request time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (name, seen) in [("slow", &slow), ("fast", &fast)] {
        let counts = arrivals(seen);
        for call in &calls {
            let expected = event_id(*call, "call.completed");
            assert_eq!(
                counts.get(&expected),
                Some(&1),
                "{name} endpoint: call.completed of {call} once, got {counts:?}"
            );
        }
        assert_eq!(
            seen.lock().unwrap().len(),
            calls.len(),
            "{name}: one request per event"
        );
        let deliveries: std::collections::HashSet<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.delivery.clone())
            .collect();
        assert_eq!(deliveries.len(), calls.len(), "{name}: distinct deliveries");
    }
    for call in &calls {
        let rows = app
            .store()
            .call_deliveries(*call)
            .await
            .expect("deliveries");
        assert!(
            rows.iter().all(|d| d.attempts == 1),
            "one attempt each: {rows:?}"
        );
        // A rating or analysis run twice would have stored a second version.
        let rating = app
            .store()
            .rating(ws.org_id, *call)
            .await
            .expect("rating")
            .expect("the call is rated");
        assert_eq!((rating.status.as_str(), rating.version), ("done", 1));
        let analysis = app
            .store()
            .analysis(ws.org_id, *call)
            .await
            .expect("analysis")
            .expect("the call is analyzed");
        assert_eq!((analysis.status.as_str(), analysis.version), ("done", 1));
    }
    for peer in peers {
        peer.shutdown().await;
    }
    app.shutdown().await;
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_dead_nodes_delivery_is_retried_and_a_live_peers_is_left_alone() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let ws = app.calling_workspace("Leases", 2).await;
    let agent = agent(&app, &ws).await;
    // The call ends before there is a subscription: nothing is queued for it.
    let call = ended_unanswered_call(&app, &ws, &agent).await;
    let (url, seen) = receiver(Duration::ZERO).await;
    let subscription = subscribe(&app, &ws, &url).await;
    let pool = sqlx::PgPool::connect(&app.database_url).await.expect("pg");
    let now = app.now().timestamp_millis();
    // Deliveries claimed by three other nodes: one died (its lease ran out),
    // one is alive (lease for ten minutes), one is about to start again.
    for (event_id, owner, lease_until) in [
        ("evt_dead", "node-dead", now - 1),
        ("evt_live", "node-live", now + 600_000),
        ("evt_back", "node-back", now + 600_000),
    ] {
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, event_id, event, subscription_id, org_id, call_id,
               next_attempt_at, created_at, lease_owner, lease_until)
             VALUES ($1, $2, 'call.completed', $3, $4, $5, $6, $6, $7, $8)",
        )
        .bind(voxline::domain::DeliveryId::new().to_string())
        .bind(event_id)
        .bind(&subscription)
        .bind(ws.org_id.to_string())
        .bind(call.to_string())
        .bind(now)
        .bind(owner)
        .bind(lease_until)
        .execute(&pool)
        .await
        .expect("insert a claimed delivery");
    }
    eventually(
        Duration::from_secs(10),
        "the dead node's delivery to be sent",
        || async { arrivals(&seen).contains_key("evt_dead").then_some(()) },
    )
    .await;
    // The node that held `evt_back` starts again: it frees its own lease,
    // and only its own.
    let back = app
        .spawn_peer(|s| s.node.id = Some("node-back".parse().expect("node id")))
        .await;
    eventually(
        Duration::from_secs(10),
        "the restarted node's delivery to be sent",
        || async { arrivals(&seen).contains_key("evt_back").then_some(()) },
    )
    .await;
    // Passes run every 100 ms on both nodes: give them several.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let counts = arrivals(&seen);
    assert_eq!(counts.get("evt_dead"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("evt_back"), Some(&1), "{counts:?}");
    assert_eq!(
        counts.get("evt_live"),
        None,
        "a live peer's delivery is not sent"
    );
    let live: (String, Option<String>, i64, i64) = sqlx::query_as(
        "SELECT status, lease_owner, lease_until, attempts FROM webhook_deliveries WHERE event_id = 'evt_live'",
    )
    .fetch_one(&pool)
    .await
    .expect("the live peer's delivery");
    assert_eq!(
        live,
        (
            "pending".to_string(),
            Some("node-live".to_string()),
            now + 600_000,
            0
        )
    );
    back.shutdown().await;
    app.shutdown().await;
}

/// A pending job's `(status, lease_owner, lease_until)` in `table`.
async fn lease_of(pool: &sqlx::PgPool, table: &str, call: CallId) -> (String, Option<String>, i64) {
    let sql = match table {
        "ratings" => "SELECT status, lease_owner, lease_until FROM ratings WHERE call_id = $1",
        _ => "SELECT status, lease_owner, lease_until FROM call_analyses WHERE call_id = $1",
    };
    sqlx::query_as(sql)
        .bind(call.to_string())
        .fetch_one(pool)
        .await
        .expect("the job's row")
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_live_peers_rating_and_analysis_leases_survive_another_nodes_start() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.calling_workspace("Jobs", 2).await;
    let agent = agent(&app, &ws).await;
    let call = ended_unanswered_call(&app, &ws, &agent).await;
    // The peer takes the call's rating and analysis, as its rate-now and
    // re-run handlers do; its jobs are running as far as anyone can tell.
    let owner: &NodeId = &peer.state().node_id;
    let now = app.now().timestamp_millis();
    let until = now + 600_000;
    app.store()
        .take_rating_now(owner, ws.org_id, call, now, until)
        .await
        .expect("take the rating")
        .expect("the call exists");
    app.store()
        .take_analysis_now(owner, ws.org_id, call, None, now, until)
        .await
        .expect("take the analysis")
        .expect("the call exists");
    let pool = sqlx::PgPool::connect(&app.database_url).await.expect("pg");
    let held = ("pending".to_string(), Some(owner.to_string()), until);
    // A third node starts: it frees its own leases, not the peer's.
    let third = app.spawn_peer(|_| {}).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(lease_of(&pool, "ratings", call).await, held);
    assert_eq!(lease_of(&pool, "call_analyses", call).await, held);
    // The peer stops cleanly: its jobs are over, so it hands their leases
    // back and the other nodes run them at once.
    peer.shutdown().await;
    eventually(
        Duration::from_secs(30),
        "the rating and the analysis to run on another node",
        || async {
            let rating = lease_of(&pool, "ratings", call).await;
            let analysis = lease_of(&pool, "call_analyses", call).await;
            (rating.0 != "pending" && analysis.0 != "pending").then_some(())
        },
    )
    .await;
    third.shutdown().await;
    app.shutdown().await;
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_singleton_lock_has_one_holder_across_nodes_and_the_janitor_waits_for_it() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    // Both nodes' janitors take the lock briefly every 100 ms: wait for a gap.
    let lock = eventually(Duration::from_secs(5), "the janitor lock", || async {
        app.store()
            .try_singleton(Singleton::Janitor)
            .await
            .expect("try the lock")
    })
    .await;
    assert!(
        peer.store()
            .try_singleton(Singleton::Janitor)
            .await
            .expect("try the lock")
            .is_none(),
        "another node is refused"
    );
    assert!(
        app.store()
            .try_singleton(Singleton::Janitor)
            .await
            .expect("try the lock")
            .is_none(),
        "the same node is refused too (another session)"
    );
    assert_eq!(
        peer.store()
            .run_singleton(Singleton::Janitor, async { 1 })
            .await
            .expect("run"),
        None,
        "a pass is skipped while the lock is held"
    );
    // The batch scheduler's lock is free while the janitor's is held (each
    // singleton has its own); its passes take it briefly every 100 ms too.
    let other = eventually(
        Duration::from_secs(5),
        "the batch scheduler lock",
        || async {
            peer.store()
                .try_singleton(Singleton::BatchScheduler)
                .await
                .expect("try the lock")
        },
    )
    .await;
    drop(other);

    // While the lock is held no janitor pass runs: an idle agent stays awake.
    let ws = app.workspace("Janitor").await;
    let agent = agent(&app, &ws).await;
    let pool = sqlx::PgPool::connect(&app.database_url).await.expect("pg");
    sqlx::query("UPDATE agents SET last_active_at = 0 WHERE id = $1")
        .bind(&agent)
        .execute(&pool)
        .await
        .expect("age the agent");
    let dormant = || async {
        sqlx::query_scalar::<_, bool>("SELECT dormant FROM agents WHERE id = $1")
            .bind(&agent)
            .fetch_one(&pool)
            .await
            .expect("agent")
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!dormant().await, "no janitor ran while the lock was held");
    lock.release().await.expect("release");
    eventually(
        Duration::from_secs(10),
        "a janitor to run once the lock is free",
        || async { dormant().await.then_some(()) },
    )
    .await;

    // A lock dropped without release (a panicking pass) is freed too: its
    // session is closed.
    let held = eventually(Duration::from_secs(5), "the janitor lock again", || async {
        peer.store()
            .try_singleton(Singleton::Janitor)
            .await
            .expect("try the lock")
    })
    .await;
    drop(held);
    eventually(
        Duration::from_secs(5),
        "the dropped lock to be free",
        || async {
            app.store()
                .try_singleton(Singleton::Janitor)
                .await
                .expect("try the lock")
        },
    )
    .await
    .release()
    .await
    .expect("release");
    peer.shutdown().await;
    app.shutdown().await;
}

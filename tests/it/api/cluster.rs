//! Several nodes on one Postgres database (issue 20), in process: the
//! workspace's slots are counted across nodes, every node carries calls, and
//! a node's start never touches a live peer's calls.
//!
//! These need Postgres: a plain `cargo test` lists them as ignored, and the
//! Postgres pass runs them with `--include-ignored`.

use crate::support::{PG_ENV, TestApp};
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

/// Fails at once when Postgres is not what the app runs on.
fn require_postgres(app: &TestApp) {
    assert!(
        std::env::var(PG_ENV).is_ok_and(|u| u.starts_with("postgres")),
        "needs {PG_ENV}"
    );
    assert_eq!(app.store().dialect(), "postgres");
}

/// Live calls per node of the workspace, straight from the database.
async fn live_by_node(pool: &sqlx::PgPool, org: &str) -> HashMap<String, i64> {
    let rows: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT node_id, COUNT(*) FROM calls WHERE org_id = $1 AND status IN ('ringing', 'in-progress')
         GROUP BY node_id",
    )
    .bind(org)
    .fetch_all(pool)
    .await
    .expect("count live calls");
    rows.into_iter()
        .map(|(node, n)| (node.unwrap_or_default(), n))
        .collect()
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn two_nodes_share_a_workspaces_slots_exactly_and_both_carry_calls() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.calling_workspace("Shared", 4).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Shared", "welcomeMessage": "Hello.", "prompt": "Be brief.",
                   "silenceTimeoutSeconds": 10}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    let script = json!(["Yes.", "Thank you, goodbye!"]);
    let mut ids = Vec::new();
    for n in 0..16 {
        let node = if n % 2 == 0 { &app } else { &peer };
        let placed = node
            .post(
                &ws.key,
                "/api/calls",
                json!({"agentId": agent, "to": format!("+9198450{:05}", 10_000 + n),
                       "variables": {"simScript": script}}),
            )
            .await
            .expect(201);
        ids.push(placed.body["callId"].as_str().expect("callId").to_string());
    }
    let org = ws.org_id.to_string();
    let (most, nodes_seen) = sample_until_done(&app, &org, 4, Duration::from_secs(120)).await;
    assert_eq!(most, 4, "the slots were used");
    assert_eq!(
        nodes_seen.len(),
        2,
        "both nodes carried calls: {nodes_seen:?}"
    );
    for id in &ids {
        let call = app
            .get(&ws.key, &format!("/api/calls/{id}"))
            .await
            .expect(200);
        assert_eq!(call.body["rawStatus"], "completed", "{id}: {}", call.body);
    }
    peer.shutdown().await;
    app.shutdown().await;
}

/// Samples the workspace's live calls every 100 ms until none is open,
/// failing if they ever exceed `slots`; returns the most seen at once and
/// the nodes that carried calls.
async fn sample_until_done(
    app: &TestApp,
    org: &str,
    slots: i64,
    within: Duration,
) -> (i64, std::collections::HashSet<String>) {
    let pool = sqlx::PgPool::connect(&app.database_url).await.expect("pg");
    let deadline = tokio::time::Instant::now() + within;
    let mut most = 0;
    let mut nodes = std::collections::HashSet::new();
    loop {
        let live = live_by_node(&pool, org).await;
        let total: i64 = live.values().sum();
        assert!(
            total <= slots,
            "{total} live calls across nodes with {slots} slots: {live:?}"
        );
        most = most.max(total);
        nodes.extend(live.into_keys());
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM calls WHERE org_id = $1 AND status IN ('queued', 'ringing', 'in-progress')",
        )
        .bind(org)
        .fetch_one(&pool)
        .await
        .expect("count open calls");
        if open == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{open} calls still open after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pool.close().await;
    (most, nodes)
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_cancel_that_reaches_another_node_hangs_up_the_owners_call() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.calling_workspace("Cancel", 2).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Cancel", "welcomeMessage": "Hello.", "prompt": "Be brief.",
                   "silenceTimeoutSeconds": 30}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012377"}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();
    let pool = sqlx::PgPool::connect(&app.database_url).await.expect("pg");
    let owner: String = crate::support::eventually(
        Duration::from_secs(20),
        "the call to be answered",
        || async {
            let (node, status): (Option<String>, String) =
                sqlx::query_as("SELECT node_id, status FROM calls WHERE id = $1")
                    .bind(&id)
                    .fetch_one(&pool)
                    .await
                    .expect("call row");
            (status == "in-progress").then_some(node).flatten()
        },
    )
    .await;
    let other = if owner == app.state().node_id.as_str() {
        &peer
    } else {
        &app
    };
    assert_ne!(other.state().node_id.as_str(), owner);
    let reply = other
        .post_empty(&ws.key, &format!("/api/calls/{id}/cancel"))
        .await
        .expect(200);
    assert_eq!(reply.body["message"], "Call is being hung up");
    let call = crate::support::eventually(Duration::from_secs(10), "the call to end", || async {
        let call = app
            .get(&ws.key, &format!("/api/calls/{id}"))
            .await
            .expect(200)
            .body;
        (call["rawStatus"] == "completed").then_some(call)
    })
    .await;
    assert_eq!(call["endedReason"], "canceled", "{call}");
    pool.close().await;
    peer.shutdown().await;
    app.shutdown().await;
}

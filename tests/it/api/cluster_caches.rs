//! Caches and caps across nodes on one Postgres database (issue 20.7): a key
//! revoked or an agent changed through one node is seen by the other long
//! before any cached entry would expire, and a key's daily and monthly caps
//! hold for requests spread over both nodes.
//!
//! These need Postgres: a plain `cargo test` lists them as ignored, and the
//! Postgres pass runs them with `--include-ignored`.

use crate::support::{PG_ENV, Reply, TestApp, eventually};
use futures::future::join_all;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use voxline::access::api_key::hash_key;
use voxline::domain::AgentId;

/// How soon a change made through one node must hold on the others.
///
/// A notice arrives within milliseconds on an idle machine, but this suite
/// shares two cores with a hundred other tests, and a one-second bound failed
/// CI once (stop 39). Five seconds still fails the test if notices stop
/// working: without them an entry lives its whole 30-second TTL.
const WITHIN: Duration = Duration::from_secs(5);

/// Fails at once when Postgres is not what the app runs on.
fn require_postgres(app: &TestApp) {
    assert!(
        std::env::var(PG_ENV).is_ok_and(|u| u.starts_with("postgres")),
        "needs {PG_ENV}"
    );
    assert_eq!(app.store().dialect(), "postgres");
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_key_revoked_through_one_node_is_refused_by_the_other_within_a_second() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.workspace("A").await;
    let (_other_id, other_key) = app.key(ws.org_id, "second integration").await;
    for node in [&app, &peer] {
        node.get(&ws.key, "/api/agents").await.expect(200);
        node.get(&other_key, "/api/agents").await.expect(200);
    }
    // The peer answers the key from its cache.
    assert!(
        peer.state().key_cache.get(&hash_key(&ws.key)).is_ok(),
        "the peer cached the key"
    );
    peer.get(&ws.key, "/api/wallet").await.expect(200);

    let revoked_at = Instant::now();
    assert!(
        app.store()
            .revoke_api_key(ws.key_id, app.now().timestamp_millis())
            .await
            .expect("revoke")
    );
    // The notice drops the peer's cached row, before any request of the
    // key reaches the peer.
    let hash = hash_key(&ws.key);
    eventually(WITHIN, "the peer's cached key dropped", || async {
        peer.state().key_cache.get(&hash).is_err().then_some(())
    })
    .await;
    // The node that revoked refuses on the very next request, and so does
    // the peer (its count reads the key as stored, whatever it caches).
    app.get(&ws.key, "/api/agents").await.expect(401);
    peer.get(&ws.key, "/api/agents").await.expect(401);
    assert!(revoked_at.elapsed() < WITHIN, "{:?}", revoked_at.elapsed());
    // Still refused on later requests; the workspace's other key, cached
    // beside it, is unaffected on both nodes.
    peer.get(&ws.key, "/api/wallet").await.expect(401);
    assert!(peer.state().key_cache.get(&hash_key(&other_key)).is_ok());
    for node in [&app, &peer] {
        node.get(&other_key, "/api/agents").await.expect(200);
    }
    peer.shutdown().await;
    app.shutdown().await;
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn an_agent_changed_through_one_node_reads_changed_on_the_other() {
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.workspace("A").await;
    let agent = app
        .create_agent(&ws.key, json!({"name": "Before", "prompt": "Be brief."}))
        .await;
    let id = agent["id"].as_str().expect("agent id").to_string();
    let path = format!("/api/agents/{id}");
    for node in [&app, &peer] {
        let read = node.get(&ws.key, &path).await.expect(200);
        assert_eq!(read.body["name"], "Before");
    }
    let agent_id: AgentId = id.parse().expect("agent id");
    assert!(
        peer.state().agent_cache.get(agent_id).is_ok(),
        "the peer cached the agent"
    );

    let changed_at = Instant::now();
    app.patch(&ws.key, &path, json!({"name": "After"}))
        .await
        .expect(200);
    // The node that wrote reads its own write at once.
    let read = app.get(&ws.key, &path).await.expect(200);
    assert_eq!(read.body["name"], "After");
    eventually(WITHIN, "the peer reads the change", || async {
        let read = peer.get(&ws.key, &path).await.expect(200);
        (read.body["name"] == "After").then_some(())
    })
    .await;
    assert!(changed_at.elapsed() < WITHIN, "{:?}", changed_at.elapsed());

    // A status change and a delete go the same way.
    app.post_empty(&ws.key, &format!("{path}/deactivate"))
        .await
        .expect(200);
    eventually(WITHIN, "the peer reads the agent inactive", || async {
        let read = peer.get(&ws.key, &path).await.expect(200);
        (read.body["status"] == "inactive").then_some(())
    })
    .await;
    app.delete(&ws.key, &path).await.expect(204);
    eventually(WITHIN, "the peer no longer finds the agent", || async {
        (peer.get(&ws.key, &path).await.status == 404).then_some(())
    })
    .await;
    peer.shutdown().await;
    app.shutdown().await;
}

/// `2 * cap` requests at once, alternating between the two nodes.
async fn spread_over(app: &TestApp, peer: &TestApp, key: &str, cap: usize) -> Vec<Reply> {
    join_all((0..2 * cap).map(|n| {
        let node = if n % 2 == 0 { app } else { peer };
        node.get(key, "/api/agents")
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_daily_cap_of_n_admits_exactly_n_of_2n_requests_spread_over_two_nodes() {
    const CAP: usize = 40;
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, CAP as i64, 100_000).await;

    let replies = spread_over(&app, &peer, &ws.key, CAP).await;
    let other: Vec<&str> = replies
        .iter()
        .filter(|r| r.status != 200 && r.status != 429)
        .map(|r| r.text.as_str())
        .collect();
    assert!(other.is_empty(), "neither admitted nor limited: {other:?}");
    let ok: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    let limited: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(ok.len(), CAP, "successes");
    assert_eq!(limited.len(), CAP, "429s");
    // Each admitted request saw its own place in the count of both nodes.
    let remaining: BTreeSet<i64> = ok
        .iter()
        .map(|r| r.header_i64("x-ratelimit-remaining"))
        .collect();
    assert_eq!(remaining, (0..CAP as i64).collect::<BTreeSet<i64>>());
    for r in &limited {
        assert_eq!(r.body["scope"], "daily", "{}", r.text);
        assert_eq!(r.body["used"], CAP, "{}", r.text);
        assert_eq!(r.header_i64("x-ratelimit-remaining"), 0);
        assert_eq!(r.header_i64("x-ratelimit-limit"), CAP as i64);
        assert!(r.header_i64("retry-after") >= 1);
    }
    // Both nodes answer the usage the two counted together.
    for node in [&app, &peer] {
        let r = node.get(&ws.key, "/api/balances").await.expect(429);
        assert_eq!(r.body["used"], CAP);
    }
    peer.shutdown().await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_monthly_cap_holds_across_two_nodes_too() {
    const CAP: usize = 30;
    let app = TestApp::spawn().await;
    require_postgres(&app);
    let peer = app.spawn_peer(|_| {}).await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 10_000, CAP as i64).await;

    let replies = spread_over(&app, &peer, &ws.key, CAP).await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let limited: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(ok, CAP, "successes");
    assert_eq!(limited.len(), CAP, "429s");
    for r in &limited {
        assert_eq!(r.body["scope"], "monthly", "{}", r.text);
        assert_eq!(r.body["used"], CAP, "{}", r.text);
        assert_eq!(r.header_i64("x-ratelimit-remaining"), 10_000 - CAP as i64);
    }
    let balances = peer.get(&ws.key, "/api/balances").await.expect(429);
    assert_eq!(balances.body["scope"], "monthly");
    peer.shutdown().await;
    app.shutdown().await;
}

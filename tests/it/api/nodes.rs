//! This node among those sharing the database (issue 20, points 1 and 9):
//! its heartbeat carries its load, `/healthz` and `/metrics` report it,
//! `voxline admin nodes` lists it, and `voxline admin node drain` stops it
//! taking new calls while its live calls finish (on SQLite too).

use crate::support::{TestApp, Workspace, eventually};
use serde_json::{Value, json};
use std::time::Duration;

/// A script of a few turns: the call stays up for some seconds, then ends.
const SEVERAL_TURNS: [&str; 4] = [
    "Yes, I have a minute.",
    "Tell me more.",
    "Go on.",
    "Thank you, goodbye!",
];

/// A server that heartbeats every 100 ms, with a calling workspace and an agent.
async fn beating_app() -> (TestApp, Workspace, String) {
    let app = TestApp::spawn_with_settings(|s| {
        s.node.heartbeat = Duration::from_millis(100);
    })
    .await;
    let ws = app.calling_workspace("Nodes", 4).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Nodes", "welcomeMessage": "Hello.", "prompt": "Be brief.",
                   "silenceTimeoutSeconds": 10}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    (app, ws, agent)
}

async fn place(app: &TestApp, ws: &Workspace, agent: &str, to: &str) -> String {
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": to, "variables": {"simScript": SEVERAL_TURNS}}),
    )
    .await
    .expect(201)
    .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

async fn status(app: &TestApp, ws: &Workspace, id: &str) -> String {
    app.get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body["rawStatus"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn until_status(app: &TestApp, ws: &Workspace, id: &str, wanted: &str) {
    eventually(
        Duration::from_secs(30),
        &format!("call {id} to be {wanted}"),
        || async { (status(app, ws, id).await == wanted).then_some(()) },
    )
    .await;
}

/// This node as `voxline admin nodes` lists it.
async fn listed(app: &TestApp) -> Value {
    let id = app.state().node_id.to_string();
    let list = app.admin_ok(&["nodes"]).await;
    list["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{id} not listed: {list}"))
}

#[tokio::test]
async fn the_heartbeat_advances_and_carries_the_live_calls() {
    let (app, ws, agent) = beating_app().await;
    let me = app.state().node_id.clone();
    let row = || async {
        app.store()
            .nodes()
            .await
            .expect("nodes")
            .into_iter()
            .find(|n| n.id == me)
            .expect("this node is registered")
    };
    let first = row().await.heartbeat_at;
    eventually(
        Duration::from_secs(5),
        "the heartbeat to advance",
        || async { (row().await.heartbeat_at > first).then_some(()) },
    )
    .await;

    let call = place(&app, &ws, &agent, "+919845012301").await;
    until_status(&app, &ws, &call, "in-progress").await;
    let beat = eventually(
        Duration::from_secs(5),
        "a heartbeat with the live call",
        || async { Some(row().await).filter(|n| n.live_calls == 1) },
    )
    .await;
    assert!(!beat.draining && !beat.overloaded, "{beat:?}");
    assert!(beat.lost_at.is_none(), "{beat:?}");
    assert_eq!(
        beat.public_url, app.base,
        "the bound address when no public URL is set"
    );

    let health = app.get("", "/healthz").await.expect(200).body;
    assert_eq!(health["status"], "ok", "{health}");
    let node = &health["node"];
    assert_eq!(node["id"], me.as_str(), "{health}");
    assert_eq!(node["liveCalls"], 1, "{health}");
    assert_eq!(node["draining"], false, "{health}");
    assert_eq!(node["overloaded"], false, "{health}");
    assert!(
        node["cpuPercent"].as_f64().is_some_and(|c| c >= 0.0),
        "{health}"
    );

    let metrics = app
        .http
        .get(format!("http://{}/metrics", app.server().admin_addr))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    for gauge in [
        "voxline_node_live_calls",
        "voxline_node_cpu_permille",
        "voxline_node_draining",
        "voxline_node_overloaded",
    ] {
        let line = format!("{gauge}{{node=\"{me}\"}}");
        assert!(metrics.contains(&line), "{line} missing from:\n{metrics}");
    }

    until_status(&app, &ws, &call, "completed").await;
    eventually(
        Duration::from_secs(5),
        "a heartbeat without calls",
        || async { (row().await.live_calls == 0).then_some(()) },
    )
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_node_at_its_most_live_calls_says_it_is_overloaded() {
    let app = TestApp::spawn_with_settings(|s| {
        s.node.heartbeat = Duration::from_millis(100);
        s.node.max_live_calls = Some(1);
    })
    .await;
    let ws = app.calling_workspace("Busy", 4).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Busy", "welcomeMessage": "Hello.", "prompt": "Be brief.",
                   "silenceTimeoutSeconds": 10}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    assert_eq!(listed(&app).await["status"], "alive");
    let call = place(&app, &ws, &agent, "+919845012302").await;
    until_status(&app, &ws, &call, "in-progress").await;
    eventually(
        Duration::from_secs(5),
        "/healthz to say overloaded",
        || async {
            let health = app.get("", "/healthz").await.body;
            (health["node"]["overloaded"] == true).then_some(())
        },
    )
    .await;
    let node = listed(&app).await;
    assert_eq!(node["status"], "overloaded", "{node}");
    assert_eq!(node["liveCalls"], 1, "{node}");
    until_status(&app, &ws, &call, "completed").await;
    eventually(Duration::from_secs(5), "the load to fall", || async {
        let health = app.get("", "/healthz").await.body;
        (health["node"]["overloaded"] == false).then_some(())
    })
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn admin_nodes_lists_this_node_and_refuses_an_unknown_one() {
    let (app, _, _) = beating_app().await;
    let node = listed(&app).await;
    assert_eq!(node["status"], "alive", "{node}");
    assert_eq!(node["publicUrl"], app.base.as_str(), "{node}");
    assert_eq!(node["liveCalls"], 0, "{node}");
    assert!(node["cpuPercent"].is_number(), "{node}");
    for field in ["heartbeatAt", "startedAt"] {
        let at = node[field].as_str().unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(at).is_ok(),
            "{field}: {node}"
        );
    }
    for args in [
        ["node", "drain", "node-nobody"],
        ["node", "undrain", "node-nobody"],
        ["node", "drain", "not a node id"],
    ] {
        let out = app.admin(&args).await;
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("no node with id"), "{args:?}: {stderr}");
    }
    // A peer silent past the lease is dead; one that stopped is gone.
    let peer: voxline::domain::NodeId = "node-silent-peer".parse().expect("node id");
    app.store()
        .register_node(&peer, "http://10.0.0.9:8080", 0)
        .await
        .expect("register");
    let status_of = |list: &Value| {
        list["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|n| n["id"] == peer.as_str())
            .map(|n| n["status"].clone())
            .unwrap_or_else(|| panic!("peer not listed: {list}"))
    };
    let list = app.admin_ok(&["nodes"]).await;
    if app.store().is_shared() {
        // On Postgres this node's reaper may already have recovered it.
        assert!(
            ["dead", "gone"].contains(&status_of(&list).as_str().unwrap_or_default()),
            "{list}"
        );
    } else {
        assert_eq!(status_of(&list), "dead", "a heartbeat from 1970: {list}");
    }
    app.store().node_stopped(&peer, 1).await.expect("stop");
    assert_eq!(status_of(&app.admin_ok(&["nodes"]).await), "gone");
    app.shutdown().await;
}

#[tokio::test]
async fn a_drained_node_starts_no_new_call_until_undrained_and_its_live_calls_finish() {
    let (app, ws, agent) = beating_app().await;
    let id = app.state().node_id.to_string();
    let live = place(&app, &ws, &agent, "+919845012303").await;
    until_status(&app, &ws, &live, "in-progress").await;

    let drained = app.admin_ok(&["node", "drain", &id]).await;
    assert_eq!(drained, json!({"id": id, "draining": true}));
    eventually(
        Duration::from_secs(5),
        "/healthz to say draining",
        || async {
            let health = app.get("", "/healthz").await.body;
            (health["node"]["draining"] == true).then_some(health)
        },
    )
    .await;
    // Still alive for a liveness probe, and listed as draining.
    assert_eq!(app.get("", "/healthz").await.body["status"], "ok");
    assert_eq!(listed(&app).await["status"], "draining");

    let waiting = place(&app, &ws, &agent, "+919845012304").await;
    // The live call finishes its script on the drained node.
    until_status(&app, &ws, &live, "completed").await;
    // A free slot and several heartbeats later, the new call has not started.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status(&app, &ws, &waiting).await, "queued");

    let undrained = app.admin_ok(&["node", "undrain", &id]).await;
    assert_eq!(undrained, json!({"id": id, "draining": false}));
    until_status(&app, &ws, &waiting, "completed").await;
    assert_eq!(listed(&app).await["status"], "alive");
    app.shutdown().await;
}

#[tokio::test]
async fn a_node_taken_for_lost_registers_again_with_its_public_url() {
    let (app, _, _) = beating_app().await;
    let me = app.state().node_id.clone();
    // What a peer's reaper does to a node it took for dead.
    app.store().node_stopped(&me, 1).await.expect("mark lost");
    let row = eventually(
        Duration::from_secs(5),
        "the node to register again",
        || async {
            app.store()
                .nodes()
                .await
                .expect("nodes")
                .into_iter()
                .find(|n| n.id == me && n.lost_at.is_none())
        },
    )
    .await;
    assert_eq!(row.public_url, app.base, "{row:?}");
    assert_eq!(listed(&app).await["status"], "alive");
    app.shutdown().await;
}

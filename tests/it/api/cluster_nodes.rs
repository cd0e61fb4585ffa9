//! Three `voxline serve` processes on one Postgres database (issue 20): a
//! batch shares its workspace's slots exactly across the nodes and every
//! node carries calls; `kill -9` of the node driving the batch ends its live
//! calls `node-lost` within the lease and another node takes the batch over, with no item
//! dialed twice and no call charged twice; a carrier callback that reaches
//! the wrong node still takes effect.
//!
//! Postgres only: a plain `cargo test` lists them as ignored.

use super::batches::{all_items, batch_with, dialing_workspace, item, wait_status};
use crate::support::{PG_ENV, ServeProcess, TestApp, Workspace, eventually};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The nodes' lease (the default): a killed node's calls end within this plus 5 s.
const LEASE: Duration = Duration::from_secs(10);

/// Nodes on the app's database, the app's in-process server stopped.
struct Cluster {
    nodes: Vec<ServeProcess>,
    _dirs: Vec<TempDir>,
    pool: sqlx::PgPool,
}

impl Cluster {
    /// Starts `n` nodes, `node-0` … on their own data directories and ports.
    async fn start(app: &mut TestApp, n: usize) -> Self {
        assert!(
            std::env::var(PG_ENV).is_ok_and(|u| u.starts_with("postgres")),
            "needs {PG_ENV}"
        );
        if let Some(server) = app.server.take() {
            server.shutdown().await;
        }
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        for i in 0..n {
            let dir = tempfile::tempdir().expect("temp dir");
            nodes.push(
                ServeProcess::start(
                    dir.path(),
                    &app.database_url,
                    &[
                        ("VOXLINE_NODE_ID", format!("node-{i}")),
                        // Three nodes beside the other tests stay well within
                        // Postgres' default 100 connections.
                        ("VOXLINE_DB_POOL", "8".to_string()),
                    ],
                )
                .await,
            );
            dirs.push(dir);
        }
        app.base = nodes[0].base.clone();
        app.http = reqwest::Client::new();
        let pool = sqlx::PgPool::connect(&app.database_url).await.expect("pg");
        Self {
            nodes,
            _dirs: dirs,
            pool,
        }
    }

    /// Live (ringing or answered) calls of the workspace per node.
    async fn live_by_node(&self, org: &str) -> HashMap<String, i64> {
        let rows: Vec<(Option<String>, i64)> = sqlx::query_as(
            "SELECT node_id, COUNT(*) FROM calls WHERE org_id = $1 AND status IN ('ringing', 'in-progress')
             GROUP BY node_id",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await
        .expect("count live calls");
        rows.into_iter()
            .map(|(node, n)| (node.unwrap_or_default(), n))
            .collect()
    }

    /// Calls of the workspace each node ever dialed.
    async fn carried_by_node(&self, org: &str) -> HashMap<String, i64> {
        let rows: Vec<(Option<String>, i64)> = sqlx::query_as(
            "SELECT node_id, COUNT(*) FROM calls WHERE org_id = $1 AND node_id IS NOT NULL GROUP BY node_id",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await
        .expect("count calls");
        rows.into_iter()
            .map(|(node, n)| (node.unwrap_or_default(), n))
            .collect()
    }

    async fn stop(mut self) {
        for node in &mut self.nodes {
            if node.child.id().is_some() {
                node.signal("TERM");
                let _ = node.exit_within(Duration::from_secs(60)).await;
            }
        }
        self.pool.close().await;
    }
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_600_call_batch_shares_50_slots_across_3_nodes_and_survives_a_kill_9() {
    let mut app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Cluster", 50).await;
    let items: Vec<Value> = (0..600).map(|n| item(n, 77)).collect();
    let id = batch_with(&app, &ws, &agent, items).await;
    let balance_before = wallet(&app, &ws).await;
    let cluster = Cluster::start(&mut app, 3).await;
    let distinct: HashSet<&str> = cluster.nodes.iter().map(|n| n.base.as_str()).collect();
    assert_eq!(distinct.len(), 3, "each node has its own URL");
    app.post_empty(&ws.key, &format!("/api/batches/{id}/start"))
        .await
        .expect(200);

    let org = ws.org_id.to_string();
    let mut cluster = cluster;
    let mut most = 0;
    let mut killed: Option<(Instant, String)> = None;
    let mut recovered_within = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let live = cluster.live_by_node(&org).await;
        let total: i64 = live.values().sum();
        assert!(total <= 50, "{total} live calls with 50 slots: {live:?}");
        most = most.max(total);
        let carried = cluster.carried_by_node(&org).await;
        let done: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM calls WHERE org_id = $1 AND status NOT IN ('queued', 'ringing', 'in-progress')",
        )
        .bind(&org)
        .fetch_one(&cluster.pool)
        .await
        .expect("count ended calls");
        match killed {
            // A third of the way through, kill the node driving the batch
            // (its lease holder) while it has live calls: the calls end
            // node-lost and another node takes the batch over.
            None if done >= 200 => {
                let holder: Option<String> =
                    sqlx::query_scalar("SELECT lease_node FROM batches WHERE id = $1")
                        .bind(&id)
                        .fetch_one(&cluster.pool)
                        .await
                        .expect("batch lease");
                let holder = holder.expect("a node holds the running batch's lease");
                if live.get(&holder).copied().unwrap_or(0) > 0 {
                    assert_eq!(carried.len(), 3, "every node carried calls: {carried:?}");
                    let index: usize = holder
                        .trim_start_matches("node-")
                        .parse()
                        .expect("node index");
                    cluster.nodes[index].child.start_kill().expect("kill -9");
                    let _ = cluster.nodes[index]
                        .exit_within(Duration::from_secs(10))
                        .await;
                    // The API is asked through a survivor from now on: the
                    // killed node may be the one the harness pointed at.
                    app.base = cluster.nodes[(index + 1) % cluster.nodes.len()]
                        .base
                        .clone();
                    killed = Some((Instant::now(), holder));
                }
            }
            Some((at, ref dead)) if recovered_within.is_none() && !live.contains_key(dead) => {
                recovered_within = Some(at.elapsed());
            }
            _ => {}
        }
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM batch_items WHERE batch_id = $1 AND status IN ('pending', 'queued', 'ringing', 'in-progress')",
        )
        .bind(&id)
        .fetch_one(&cluster.pool)
        .await
        .expect("count open items");
        if open == 0 && killed.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "batch still open: {open} items");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(most, 50, "the slots were used");
    let (_, dead) = killed.clone().expect("a node was killed");
    let took = recovered_within.expect("the killed node's calls were recovered");
    assert!(
        took <= LEASE + Duration::from_secs(5),
        "{dead}'s live calls ended {took:?} after the kill"
    );
    let lost: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT status, ended_reason FROM calls WHERE org_id = $1 AND node_id = $2 AND ended_reason = 'node-lost'",
    )
    .bind(&org)
    .bind(&dead)
    .fetch_all(&cluster.pool)
    .await
    .expect("lost calls");
    assert!(!lost.is_empty(), "{dead}'s live calls ended node-lost");
    let holder: Option<String> = sqlx::query_scalar("SELECT lease_node FROM batches WHERE id = $1")
        .bind(&id)
        .fetch_one(&cluster.pool)
        .await
        .expect("batch lease");
    assert_ne!(
        holder.as_deref(),
        Some(dead.as_str()),
        "another node took the batch over"
    );

    wait_status(&app, &ws, &id, "completed", 60).await;
    let items = all_items(&app, &ws.key, &format!("/api/batches/{id}/items")).await;
    assert_eq!(items.len(), 600);
    // No item dialed twice: one call per item phone, one item per call.
    let dialed: Vec<(String, i64)> = sqlx::query_as(
        "SELECT phone, COUNT(*) FROM calls WHERE batch_id = $1 GROUP BY phone HAVING COUNT(*) > 1",
    )
    .bind(&id)
    .fetch_all(&cluster.pool)
    .await
    .expect("calls per phone");
    assert!(dialed.is_empty(), "items dialed twice: {dialed:?}");
    let calls: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM calls WHERE batch_id = $1")
        .bind(&id)
        .fetch_one(&cluster.pool)
        .await
        .expect("calls");
    assert_eq!(calls, 600, "one call per item");
    // No call charged twice, and the wallet moved by exactly the calls' charges.
    let charges: Vec<(String, i64)> = sqlx::query_as(
        "SELECT call_id, COUNT(*) FROM wallet_transactions WHERE org_id = $1 AND kind = 'call-charge'
         GROUP BY call_id HAVING COUNT(*) > 1",
    )
    .bind(&org)
    .fetch_all(&cluster.pool)
    .await
    .expect("charges per call");
    assert!(charges.is_empty(), "calls charged twice: {charges:?}");
    let cost: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(cost_paise), 0)::BIGINT FROM calls WHERE org_id = $1",
    )
    .bind(&org)
    .fetch_one(&cluster.pool)
    .await
    .expect("sum of charges");
    assert!(cost > 0, "answered calls were charged");
    assert_eq!(
        wallet(&app, &ws).await,
        balance_before - cost,
        "wallet vs. call charges"
    );
    let carried = cluster.carried_by_node(&org).await;
    eprintln!("calls per node: {carried:?}; {dead} recovered in {took:?}");
    cluster.stop().await;
}

async fn wallet(app: &TestApp, ws: &Workspace) -> i64 {
    app.get(&ws.key, "/api/wallet").await.expect(200).body["balancePaise"]
        .as_i64()
        .expect("balance")
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn a_carrier_callback_that_reaches_another_node_takes_effect() {
    let twilio =
        crate::support::FakeCarrier::start(voxline::carriers::CarrierKind::Twilio, "CA88").await;
    let mut app = TestApp::spawn().await;
    let ws = app.calling_workspace("Callbacks", 2).await;
    app.add_number(&ws, "+918035740188", "twilio").await;
    let credential = json!({"accountSid": "AC88", "authToken": "tw-token", "baseUrl": twilio.base});
    app.set_credential(&ws, "twilio", &credential).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Twilio", "welcomeMessage": "Hi.", "prompt": "Be brief.",
                   "telephonyProvider": "twilio"}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    let cluster = Cluster::start(&mut app, 2).await;
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012388"}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();
    let owner: String = eventually(
        Duration::from_secs(20),
        "a node to dial the call",
        || async {
            let row: Option<(Option<String>, String)> =
                sqlx::query_as("SELECT node_id, status FROM calls WHERE id = $1")
                    .bind(&id)
                    .fetch_optional(&cluster.pool)
                    .await
                    .expect("call row");
            match row {
                Some((Some(node), status)) if status == "ringing" => Some(node),
                _ => None,
            }
        },
    )
    .await;
    let (owner_at, other) = if owner == "node-0" {
        (&cluster.nodes[0], &cluster.nodes[1])
    } else {
        (&cluster.nodes[1], &cluster.nodes[0])
    };
    // The carrier was given the owner's URL; a load balancer that keeps the
    // Host header hands the callback to the other node.
    let status_url = format!("{}/carrier/twilio/status/{id}", owner_at.base);
    let owner_host = owner_at.base.trim_start_matches("http://").to_string();
    let fields = vec![
        ("AccountSid".to_string(), "AC88".to_string()),
        ("CallSid".to_string(), "CA88".to_string()),
        ("CallStatus".to_string(), "busy".to_string()),
    ];
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter())
        .finish();
    let signature = voxline::carriers::twilio::signature("tw-token", &status_url, &fields);
    let delivered = app
        .http
        .post(format!("{}/carrier/twilio/status/{id}", other.base))
        .header("host", owner_host)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-twilio-signature", signature)
        .body(body)
        .send()
        .await
        .expect("send");
    assert!(delivered.status().is_success(), "{}", delivered.status());
    let call = eventually(Duration::from_secs(10), "the call to end busy", || async {
        let call = app
            .get(&ws.key, &format!("/api/calls/{id}"))
            .await
            .expect(200)
            .body;
        (call["rawStatus"] == "busy").then_some(call)
    })
    .await;
    assert_eq!(call["provider"], "twilio");
    cluster.stop().await;
}

/// Calls of `ids` each node dialed.
async fn nodes_of(pool: &sqlx::PgPool, ids: &[String]) -> HashMap<String, String> {
    let mut nodes = HashMap::new();
    for id in ids {
        let node: Option<String> = sqlx::query_scalar("SELECT node_id FROM calls WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .expect("call row");
        nodes.insert(id.clone(), node.unwrap_or_default());
    }
    nodes
}

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn drain_webhooks_and_revocation_hold_across_three_nodes() {
    let mut app = TestApp::spawn().await;
    let ws = app.calling_workspace("Three", 6).await;
    let (url, events) = super::drain::receiver().await;
    app.admin_ok(&[
        "webhook",
        "add",
        "--org",
        &ws.org_id.to_string(),
        "--url",
        &url,
    ])
    .await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Three", "welcomeMessage": "Hi.", "prompt": "Be brief.",
                   "silenceTimeoutSeconds": 10}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    let cluster = Cluster::start(&mut app, 3).await;
    let bases: Vec<String> = cluster.nodes.iter().map(|n| n.base.clone()).collect();
    // Long calls first, until node-2 carries some.
    let long = json!([
        "Yes, I have a minute.",
        "Tell me more.",
        "I see.",
        "Thank you, goodbye!"
    ]);
    let mut first = Vec::new();
    for n in 0..6 {
        first.push(place(&app, &ws, &agent, n, long.clone()).await);
    }
    let on_node_2: Vec<String> =
        eventually(Duration::from_secs(20), "calls live on node-2", || async {
            let nodes = nodes_of(&cluster.pool, &first).await;
            let mine: Vec<String> = nodes
                .iter()
                .filter(|(_, node)| node.as_str() == "node-2")
                .map(|(id, _)| id.clone())
                .collect();
            (!mine.is_empty() && nodes.values().all(|n| !n.is_empty())).then_some(mine)
        })
        .await;

    // Drain node-2: it takes no new call and finishes its live ones.
    app.admin_ok(&["node", "drain", "node-2"]).await;
    eventually(
        Duration::from_secs(10),
        "node-2 to say it drains",
        || async {
            let health: Value = reqwest::get(format!("{}/healthz", bases[2]))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (health["node"]["draining"] == true).then_some(())
        },
    )
    .await;
    let short = json!(["Thank you, goodbye!"]);
    let mut second = Vec::new();
    for n in 6..18 {
        second.push(place(&app, &ws, &agent, n, short.clone()).await);
    }
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    for id in &all {
        eventually(Duration::from_secs(120), "every call to end", || async {
            let call = app
                .get(&ws.key, &format!("/api/calls/{id}"))
                .await
                .expect(200)
                .body;
            (call["rawStatus"] == "completed").then_some(())
        })
        .await;
    }
    let nodes = nodes_of(&cluster.pool, &second).await;
    assert!(
        nodes.values().all(|n| n != "node-2"),
        "a drained node took a new call: {nodes:?}"
    );
    for id in &on_node_2 {
        let call = app
            .get(&ws.key, &format!("/api/calls/{id}"))
            .await
            .expect(200)
            .body;
        assert_eq!(
            call["endedReason"], "agent-hangup",
            "node-2 finished its call: {call}"
        );
    }

    // Each event arrives once per endpoint, with its stable id.
    let completed = eventually(
        Duration::from_secs(60),
        "a call.completed per call",
        || async {
            let seen = events.lock().unwrap().clone();
            let completed: Vec<Value> = seen
                .into_iter()
                .filter(|e| e["event"] == "call.completed")
                .collect();
            (completed.len() >= all.len()).then_some(completed)
        },
    )
    .await;
    // Give a would-be second delivery time to arrive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = events.lock().unwrap().clone();
    let mut ids = HashSet::new();
    for event in &seen {
        let id = event["eventId"].as_str().expect("eventId").to_string();
        assert!(ids.insert(id.clone()), "event {id} arrived twice");
    }
    assert_eq!(completed.len(), all.len(), "one call.completed per call");

    // A key revoked (through the admin CLI on the shared database) is refused
    // by every node within a second, each having served it just before.
    for base in &bases {
        app.http
            .get(format!("{base}/api/calls?limit=1"))
            .bearer_auth(&ws.key)
            .send()
            .await
            .expect("send")
            .error_for_status()
            .expect("served before the revocation");
    }
    app.admin_ok(&["key", "revoke", &ws.key_id.to_string()])
        .await;
    let revoked = Instant::now();
    for base in &bases {
        eventually(Duration::from_secs(1), "the key to be refused", || async {
            let status = app
                .http
                .get(format!("{base}/api/calls?limit=1"))
                .bearer_auth(&ws.key)
                .send()
                .await
                .expect("send")
                .status();
            (status == 401).then_some(())
        })
        .await;
    }
    assert!(
        revoked.elapsed() <= Duration::from_secs(1),
        "{:?}",
        revoked.elapsed()
    );
    cluster.stop().await;
}

/// Places a sim call to the `n`th number with the callee's `script`; returns its id.
async fn place(app: &TestApp, ws: &Workspace, agent: &str, n: usize, script: Value) -> String {
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": format!("+91984501{:04}", 2_000 + n),
               "variables": {"simScript": script}}),
    )
    .await
    .expect(201)
    .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

/// A call's ended reason, answer and end times (Unix ms) and billed seconds.
type EndedCall = (Option<String>, Option<i64>, Option<i64>, i64);

#[tokio::test]
#[ignore = "needs VOXLINE_TEST_DATABASE_URL"]
async fn inbound_calls_spread_over_3_nodes_keep_the_slots_exact_and_end_node_lost_on_a_kill_9() {
    use voxline::carriers::inbound::sim_account;
    use voxline::inbound::sim_phone::{self, Ring};
    use voxline_actors::sim::callee::{CalleeOptions, parse_sim_script};

    const SLOTS: i64 = 6;
    let mut app = TestApp::spawn().await;
    let ws = app.calling_workspace("Inbound cluster", SLOTS).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Desk", "welcomeMessage": "Hello.", "prompt": "Be brief.", "silenceTimeoutSeconds": 20}),
        )
        .await;
    let numbers = app.get(&ws.key, "/api/numbers").await.expect(200);
    let number_id = numbers.body["rows"][0]["id"].as_str().unwrap().to_string();
    let phone = numbers.body["rows"][0]["phone"]
        .as_str()
        .unwrap()
        .to_string();
    app.patch(
        &ws.key,
        &format!("/api/numbers/{number_id}"),
        json!({"inboundAgentId": agent["id"], "inbound": {"enabled": true, "whenBusy": "reject"}}),
    )
    .await
    .expect(200);
    let mut cluster = Cluster::start(&mut app, 3).await;
    // The nodes are started with one configured secret (`ServeProcess`'s `--secret`).
    let account = sim_account(b"test-secret", &ws.org_id.to_string());
    let lines: Vec<String> = (0..12)
        .map(|i| format!("Let me tell you about point {i}."))
        .collect();
    let script = json!(lines);
    // Twelve callers at once, their webhooks spread over the three nodes.
    let rings: Vec<_> = (0..12)
        .map(|i| {
            let ring = Ring {
                server: cluster.nodes[i % 3].base.clone(),
                provider: "sim".into(),
                account: account.clone(),
                to: phone.clone(),
                from: format!("+9197100{i:05}"),
                call_sid: sim_phone::new_call_sid(),
                sim_script: Some(script.clone()),
            };
            let script = script.clone();
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let (answer, _) = sim_phone::ring(&http, &ring).await.expect("answered");
                let connected = answer.call_id().is_some();
                let talk = tokio::spawn(async move {
                    let steps = parse_sim_script(&script).unwrap();
                    sim_phone::talk(&answer, &ring.call_sid, steps, CalleeOptions::default()).await
                });
                (connected, talk)
            })
        })
        .collect();
    let mut talks = Vec::new();
    let mut connected = 0;
    for ring in rings {
        let (ok, talk) = ring.await.expect("ring");
        connected += i64::from(ok);
        talks.push(talk);
    }
    assert_eq!(
        connected, SLOTS,
        "exactly the slots were answered; the others heard busy"
    );
    let org = ws.org_id.to_string();
    let live = eventually(
        Duration::from_secs(10),
        "the answered calls to be live",
        || async {
            let live = cluster.live_by_node(&org).await;
            (live.values().sum::<i64>() == SLOTS).then_some(live)
        },
    )
    .await;
    assert!(
        live.len() >= 2,
        "the calls were answered by several nodes: {live:?}"
    );
    let busy: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM calls WHERE org_id = $1 AND direction = 'inbound' AND status = 'busy'",
    )
    .bind(&org)
    .fetch_one(&cluster.pool)
    .await
    .expect("busy calls");
    assert_eq!(
        busy,
        12 - SLOTS,
        "each refused caller is a busy inbound call"
    );

    // kill -9 a node with live inbound calls: they end node-lost, billed to their last sign of life.
    let (dead, _) = live
        .iter()
        .max_by_key(|(_, n)| **n)
        .expect("a node with calls");
    let dead = dead.clone();
    let index: usize = dead
        .trim_start_matches("node-")
        .parse()
        .expect("node index");
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.nodes[index].child.start_kill().expect("kill -9");
    let _ = cluster.nodes[index]
        .exit_within(Duration::from_secs(10))
        .await;
    let killed_at = chrono::Utc::now().timestamp_millis();
    let lost: Vec<EndedCall> = eventually(
        LEASE + Duration::from_secs(10),
        "the dead node's inbound calls to end",
        || async {
            let rows: Vec<EndedCall> = sqlx::query_as(
                "SELECT ended_reason, answered_at, ended_at, duration_seconds FROM calls
                 WHERE org_id = $1 AND node_id = $2 AND direction = 'inbound' AND status <> 'busy'",
            )
            .bind(&org)
            .bind(&dead)
            .fetch_all(&cluster.pool)
            .await
            .expect("the dead node's calls");
            rows.iter().all(|r| r.0.is_some()).then_some(rows)
        },
    )
    .await;
    assert!(!lost.is_empty());
    for (reason, answered, ended, duration) in &lost {
        assert_eq!(reason.as_deref(), Some("node-lost"));
        let (answered, ended) = (answered.expect("answered"), ended.expect("ended"));
        assert!(
            ended <= killed_at + 1_000,
            "billed to the last sign of life, not the recovery"
        );
        assert_eq!(*duration, (ended - answered) / 1000);
    }
    // The survivors' callers need not finish their scripts: stopping the nodes ends them.
    for talk in talks {
        talk.abort();
    }
    cluster.stop().await;
}

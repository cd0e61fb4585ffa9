//! `POST /api/alert` with 1,000 valid numbers on an announcement agent: how
//! long the request takes, and how long until every call has left the queue
//! (the sim carrier is dialing it) and until every call has ended.
//!
//! Starts the server in-process on SQLite (or a fresh Postgres database when
//! `VOXLINE_TEST_DATABASE_URL` is set) with the default sim timings, so the
//! 1,000 calls really ring, answer and play the announcement over websockets.
//!
//! ```text
//! cargo bench --bench alert_dial
//! VOXLINE_BENCH_NUMBERS=2000 VOXLINE_BENCH_ROUNDS=3 cargo bench --bench alert_dial
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_db.rs"]
mod bench_db;

use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use voxline::admin::ops;
use voxline::app::server::Server;
use voxline::config::Settings;
use voxline::domain::clock::{SharedClock, SystemClock};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let numbers = env_u64("VOXLINE_BENCH_NUMBERS", 1_000) as usize;
    let rounds = env_u64("VOXLINE_BENCH_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(numbers, rounds));
}

/// `count` distinct valid Indian mobile numbers whose last two digits make the
/// sim callee answer (00–79).
fn phones(round: u64, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let tail = i % 80;
            let middle = i / 80;
            format!("+9198{round:01}{middle:05}{tail:02}")
        })
        .collect()
}

async fn count(http: &reqwest::Client, base: &str, key: &str, statuses: &str) -> i64 {
    let body: Value = http
        .get(format!("{base}/api/calls?status={statuses}&limit=1"))
        .bearer_auth(key)
        .send()
        .await
        .expect("list calls")
        .json()
        .await
        .expect("json");
    body["stats"]["total"].as_i64().unwrap_or_default()
}

async fn run(numbers: usize, rounds: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = bench_db::BenchDb::create(dir.path()).await;
    let mut settings = Settings::for_tests(dir.path().to_path_buf(), Some(db.url.clone()));
    // The production sim timings: ring, answer after 1 s, then play.
    settings.sim = voxline::config::SimSettings::default();
    settings.janitor_interval = Duration::from_secs(60);
    let clock: SharedClock = Arc::new(SystemClock);
    let server = Server::start(settings, clock.clone())
        .await
        .expect("server starts");
    let store = &server.state().store;
    let org = ops::create_org(store, "bench", Some(10), None, clock.now())
        .await
        .expect("org");
    let key = ops::create_key(store, org.id, "bench", clock.now())
        .await
        .expect("key");
    ops::add_number(
        store,
        org.id,
        "+918035740101",
        "sim",
        true,
        None,
        clock.now(),
    )
    .await
    .expect("number");
    store
        .credit_wallet(
            org.id,
            voxline::domain::Paise(100_000_000),
            clock.now().timestamp_millis(),
        )
        .await
        .expect("credit");
    let base = server.base_url();
    let http = reqwest::Client::new();
    let agent: Value = http
        .post(format!("{base}/api/agents"))
        .bearer_auth(&key.key)
        .json(&json!({
            "name": "Alert",
            "conversationEngine": "announcement",
            "welcomeMessage": "This is a test alert. Please ignore.",
        }))
        .send()
        .await
        .expect("create agent")
        .json()
        .await
        .expect("agent json");
    let agent_id = agent["id"].as_str().expect("agent id").to_string();

    let mut respond = Histogram::<u64>::new_with_bounds(1, 600_000, 3).expect("bounds");
    let mut dialing = Histogram::<u64>::new_with_bounds(1, 600_000, 3).expect("bounds");
    let mut ended = Histogram::<u64>::new_with_bounds(1, 600_000, 3).expect("bounds");
    for round in 0..rounds {
        let body = json!({"agentId": agent_id, "phones": phones(round, numbers)});
        let started = Instant::now();
        let reply = http
            .post(format!("{base}/api/alert"))
            .bearer_auth(&key.key)
            .json(&body)
            .send()
            .await
            .expect("alert");
        let status = reply.status();
        let reply: Value = reply.json().await.expect("alert json");
        let answered = started.elapsed();
        assert!(status.is_success(), "alert failed: {status} {reply}");
        assert_eq!(reply["dialed"], numbers as u64, "{reply}");
        respond.saturating_record(answered.as_millis() as u64);

        let after_response = Instant::now();
        loop {
            if count(&http, &base, &key.key, "queued").await == 0 {
                break;
            }
            assert!(
                after_response.elapsed() < Duration::from_secs(120),
                "calls stuck queued"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let all_dialing = after_response.elapsed();
        dialing.saturating_record(all_dialing.as_millis() as u64);
        loop {
            if count(&http, &base, &key.key, "ringing,in-progress").await == 0 {
                break;
            }
            assert!(
                after_response.elapsed() < Duration::from_secs(300),
                "calls never ended"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let all_ended = after_response.elapsed();
        ended.saturating_record(all_ended.as_millis() as u64);
        let completed = count(&http, &base, &key.key, "completed").await;
        println!(
            "round {round}: response {} ms, all {numbers} dialing {} ms after it, all ended after {:.1} s ({completed} completed in total)",
            answered.as_millis(),
            all_dialing.as_millis(),
            all_ended.as_secs_f64()
        );
    }
    let dialect = server.state().store.dialect();
    server.shutdown().await;
    db.drop_database().await;
    println!(
        "{}",
        json!({
            "bench": "alert_dial",
            "database": dialect,
            "numbers": numbers,
            "rounds": rounds,
            "response_ms": {"p50": respond.value_at_quantile(0.5), "max": respond.max()},
            "all_dialing_ms": {"p50": dialing.value_at_quantile(0.5), "max": dialing.max()},
            "all_ended_ms": {"p50": ended.value_at_quantile(0.5), "max": ended.max()},
        })
    );
}

//! A 10,000-item batch against the sim carrier: the dial rate, and how long
//! the batch read endpoints take while it dials.
//!
//! Starts the server in-process (SQLite in a temp dir, or a fresh Postgres
//! database when `VOXLINE_TEST_DATABASE_URL` is set), creates a workspace with
//! `VOXLINE_BENCH_CONCURRENCY` slots and a batch of `VOXLINE_BENCH_ITEMS` items
//! whose sim numbers fail after ~300 ms (so calls turn over quickly and the
//! measurement is of the batch path, not of conversations), starts it, and
//! reads `GET /api/batches/{id}` and `GET /api/batches/{id}/items` in a loop
//! until the batch completes.
//!
//! With `VOXLINE_BENCH_LISTED=N`, every (items/N)th number is put on the
//! workspace's do-not-call list after the items are added and before the
//! start (issue 32): the batch must dial exactly items − N of them, each
//! listed one skipped at dial time, and the dial rate is reported over the
//! numbers dialed.
//!
//! ```text
//! cargo bench --bench batch_load
//! VOXLINE_BENCH_ITEMS=10000 VOXLINE_BENCH_CONCURRENCY=50 cargo bench --bench batch_load
//! VOXLINE_BENCH_LISTED=1000 cargo bench --bench batch_load
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
use voxline::domain::agent::AgentSpec;
use voxline::domain::clock::{SharedClock, SystemClock};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let items = env_u64("VOXLINE_BENCH_ITEMS", 10_000);
    let concurrency = env_u64("VOXLINE_BENCH_CONCURRENCY", 50);
    let listed = env_u64("VOXLINE_BENCH_LISTED", 0).min(items);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(items, concurrency, listed));
}

/// Times one GET, asserting 200; returns the body.
async fn timed_get(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    hist: &mut Histogram<u64>,
) -> Value {
    let started = Instant::now();
    let resp = http.get(url).bearer_auth(key).send().await.expect("send");
    assert_eq!(resp.status(), 200, "GET {url}");
    let body: Value = resp.json().await.expect("json");
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    hist.saturating_record(micros.max(1));
    body
}

fn report(name: &str, hist: &Histogram<u64>) {
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "  {name:<34} n {:>6}  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        hist.len(),
        ms(0.50),
        ms(0.99),
        hist.max() as f64 / 1000.0
    );
}

async fn run(items: u64, concurrency: u64, listed: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = bench_db::BenchDb::create(dir.path()).await;
    let mut settings = Settings::for_tests(dir.path().to_path_buf(), Some(db.url.clone()));
    settings.janitor_interval = Duration::from_secs(60);
    let clock: SharedClock = Arc::new(SystemClock);
    let server = Server::start(settings, clock.clone())
        .await
        .expect("server starts");
    let store = &server.state().store;
    let org = ops::create_org(
        store,
        "bench",
        Some(i64::try_from(concurrency).unwrap_or(50)),
        None,
        clock.now(),
    )
    .await
    .expect("org");
    let key = ops::create_key(store, org.id, "bench", clock.now())
        .await
        .expect("key");
    store
        .set_api_key_limits(key.id, 1_000_000_000, 1_000_000_000)
        .await
        .expect("limits");
    ops::add_number(
        store,
        org.id,
        "+918035740111",
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
    let agent_id = voxline::domain::AgentId::new();
    store
        .insert_agent(
            agent_id,
            org.id,
            &AgentSpec::with_name("Bench agent"),
            clock.now().timestamp_millis(),
        )
        .await
        .expect("agent");

    let base = server.base_url();
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{base}/api/batches"))
        .bearer_auth(&key.key)
        .json(&json!({"name": "bench", "agentId": agent_id}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = created["id"].as_str().expect("batch id").to_string();
    let fill_started = Instant::now();
    let all: Vec<Value> = (0..items)
        .map(|n| json!({"name": format!("Person {n}"), "phone": format!("+9197{n:06}90")}))
        .collect();
    for chunk in all.chunks(2_000) {
        let resp = http
            .post(format!("{base}/api/batches/{id}/items"))
            .bearer_auth(&key.key)
            .json(&json!({ "items": chunk }))
            .send()
            .await
            .expect("add items");
        assert_eq!(resp.status(), 200, "add items");
    }
    let fill = fill_started.elapsed();
    // Listed after the upload, so each is skipped by the dial-time check.
    let step = items.checked_div(listed).unwrap_or(0);
    if listed > 0 {
        let mut csv = String::from("phone,reason\n");
        for n in (0..items)
            .step_by(usize::try_from(step).unwrap_or(1))
            .take(listed as usize)
        {
            csv.push_str(&format!("+9197{n:06}90,bench\n"));
        }
        let resp = http
            .post(format!("{base}/api/numbers/do-not-call/import"))
            .bearer_auth(&key.key)
            .header("content-type", "text/csv")
            .body(csv)
            .send()
            .await
            .expect("import do-not-call");
        assert_eq!(resp.status(), 200, "import do-not-call");
    }

    let started = Instant::now();
    let resp = http
        .post(format!("{base}/api/batches/{id}/start"))
        .bearer_auth(&key.key)
        .send()
        .await
        .expect("start");
    assert_eq!(resp.status(), 200, "start");
    let mut read = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut items_page = read.clone();
    let mut list = read.clone();
    let mut max_live = 0;
    let last_dialed = loop {
        let b = timed_get(
            &http,
            &format!("{base}/api/batches/{id}"),
            &key.key,
            &mut read,
        )
        .await;
        timed_get(
            &http,
            &format!("{base}/api/batches/{id}/items?limit=100&page=50"),
            &key.key,
            &mut items_page,
        )
        .await;
        timed_get(&http, &format!("{base}/api/batches"), &key.key, &mut list).await;
        max_live = max_live.max(b["live"].as_i64().unwrap_or(0));
        let dialed = b["total"].as_i64().unwrap_or(0)
            - (b["pending"].as_i64().unwrap_or(0) - b["live"].as_i64().unwrap_or(0));
        if b["status"] == "completed" {
            break dialed;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3_600),
            "batch did not finish: {b}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let elapsed = started.elapsed();
    let finished: Value = http
        .get(format!("{base}/api/batches/{id}"))
        .bearer_auth(&key.key)
        .send()
        .await
        .expect("batch")
        .json()
        .await
        .expect("json");
    let calls: Value = http
        .get(format!("{base}/api/calls?limit=1"))
        .bearer_auth(&key.key)
        .send()
        .await
        .expect("calls")
        .json()
        .await
        .expect("json");
    let placed = calls["stats"]["total"].as_u64().unwrap_or(0);
    assert_eq!(placed, items - listed, "calls placed: {finished}");
    assert_eq!(
        finished["skipped"].as_u64(),
        Some(listed),
        "listed numbers skipped: {finished}"
    );
    let dialect = server.state().store.dialect();
    server.shutdown().await;
    db.drop_database().await;
    println!(
        "batch_load: {items} items ({listed} listed do-not-call after the upload), concurrency {concurrency}, sim failures (~300 ms each), {dialect}"
    );
    println!(
        "  fill      {:.2} s ({} items per request)",
        fill.as_secs_f64(),
        2_000
    );
    println!(
        "  dialing   {:.1} s, {:.0} dials/s (ideal {:.0}/s), max live {max_live}, dialed {last_dialed}, calls placed {placed}",
        elapsed.as_secs_f64(),
        placed as f64 / elapsed.as_secs_f64(),
        concurrency as f64 / 0.3
    );
    report("GET /api/batches/{id}", &read);
    report("GET /api/batches/{id}/items?page=50", &items_page);
    report("GET /api/batches", &list);
}

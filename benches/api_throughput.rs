//! Authenticated `GET /api/agents/{id}` throughput and latency.
//!
//! Starts the server in-process (SQLite in a temp dir, or a fresh Postgres
//! database when `VOXLINE_TEST_DATABASE_URL` is set), creates a key with a
//! high cap and an agent, then drives the read from N keep-alive connections
//! for a bounded time with a minimal HTTP/1.1 client, so the client costs as
//! little CPU as possible next to the server it measures.
//!
//! ```text
//! cargo bench --bench api_throughput
//! VOXLINE_BENCH_SECONDS=10 VOXLINE_BENCH_CONNECTIONS=64 cargo bench --bench api_throughput
//! VOXLINE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench --bench api_throughput
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_db.rs"]
mod bench_db;

use hdrhistogram::Histogram;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
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

/// One keep-alive connection issuing the same GET until `stop`.
async fn drive(
    addr: SocketAddr,
    request: Arc<Vec<u8>>,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
) -> (Histogram<u64>, u64, u64) {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut errors = 0u64;
    let mut done = 0u64;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut buf = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        stream.write_all(&request).await.expect("write request");
        // Read the head, then exactly Content-Length bytes of body.
        let mut filled = 0usize;
        let (head_end, content_length, ok) = loop {
            let n = stream.read(&mut buf[filled..]).await.expect("read");
            assert!(n > 0, "server closed the connection");
            filled += n;
            if let Some(pos) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..pos]).expect("ascii head");
                let ok = head.starts_with("HTTP/1.1 200");
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())
                            .flatten()
                    })
                    .expect("content-length");
                break (pos + 4, length, ok);
            }
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
        };
        let total = head_end + content_length;
        if buf.len() < total {
            buf.resize(total, 0);
        }
        while filled < total {
            let n = stream
                .read(&mut buf[filled..total])
                .await
                .expect("read body");
            assert!(n > 0, "server closed mid-body");
            filled += n;
        }
        if measuring.load(Ordering::Relaxed) {
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            hist.saturating_record(micros.max(1));
            done += 1;
            if !ok {
                errors += 1;
            }
        }
    }
    (hist, done, errors)
}

fn main() {
    let seconds = env_u64("VOXLINE_BENCH_SECONDS", 10);
    let warmup = env_u64("VOXLINE_BENCH_WARMUP_SECONDS", 2);
    let connections = env_u64("VOXLINE_BENCH_CONNECTIONS", 64);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(seconds, warmup, connections));
}

async fn run(seconds: u64, warmup: u64, connections: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = bench_db::BenchDb::create(dir.path()).await;
    let mut settings = Settings::for_tests(dir.path().to_path_buf(), Some(db.url.clone()));
    settings.janitor_interval = Duration::from_secs(60);
    if let Some(pool) = std::env::var("VOXLINE_DB_POOL")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        settings.storage.db_pool_size = pool;
    }
    let clock: SharedClock = Arc::new(SystemClock);
    let server = Server::start(settings, clock.clone())
        .await
        .expect("server starts");
    let store = &server.state().store;
    let org = ops::create_org(store, "bench", None, None, clock.now())
        .await
        .expect("org");
    let key = ops::create_key(store, org.id, "bench", clock.now())
        .await
        .expect("key");
    store
        .set_api_key_limits(key.id, 1_000_000_000, 1_000_000_000)
        .await
        .expect("limits");
    let agent_id = voxline::domain::AgentId::new();
    let mut spec = AgentSpec::with_name("Bench agent");
    spec.welcome_message = "Hello {name}, this is a call about {topic}.".into();
    spec.prompt = "You are a polite assistant. Confirm {name}'s appointment.".into();
    store
        .insert_agent(agent_id, org.id, &spec, clock.now().timestamp_millis())
        .await
        .expect("agent");

    let addr = server.addr;
    let request = Arc::new(
        format!(
            "GET /api/agents/{agent_id} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nAccept: application/json\r\n\r\n",
            key = key.key
        )
        .into_bytes(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            tokio::spawn(drive(
                addr,
                request.clone(),
                stop.clone(),
                measuring.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(warmup)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);

    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut total = 0u64;
    let mut errors = 0u64;
    for task in tasks {
        let (h, n, e) = task.await.expect("driver");
        hist.add(&h).expect("merge histograms");
        total += n;
        errors += e;
    }
    let dialect = server.state().store.dialect();
    server.shutdown().await;
    db.drop_database().await;

    let rps = total as f64 / elapsed.as_secs_f64();
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "api_throughput: GET /api/agents/{{id}} on {dialect}, {connections} connections, {:.1} s",
        elapsed.as_secs_f64()
    );
    println!("  requests  {total} ({errors} non-200)");
    println!("  rate      {rps:.0} req/s");
    println!(
        "  latency   p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms",
        ms(0.50),
        ms(0.90),
        ms(0.99),
        ms(0.999),
        hist.max() as f64 / 1000.0
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": "api_throughput",
            "database": dialect,
            "connections": connections,
            "seconds": elapsed.as_secs_f64(),
            "requests": total,
            "errors": errors,
            "rps": rps.round(),
            "p50_ms": ms(0.50),
            "p99_ms": ms(0.99),
        })
    );
    assert_eq!(errors, 0, "every request should answer 200");
}

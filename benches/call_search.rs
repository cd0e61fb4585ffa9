//! Latency of `GET /api/calls` on a big SQLite workspace: deep search over
//! transcripts (FTS5) and names (trigram FTS5), and plain list pages.
//!
//! Fills one workspace with `CALLS` calls (default 1,000,000) spread over the
//! last 180 days in insertion order, as the engine writes them, with varied
//! transcripts (words drawn from a Zipf distribution over a 5,000-word
//! vocabulary), names, phones, agents, providers and statuses. Then measures
//! p50/p99 over HTTP against the in-process server for each query class.
//!
//! ```text
//! CALLS=100000 cargo bench --bench call_search
//! cargo bench --bench call_search                      # 1,000,000 calls
//! CALL_SEARCH_DIR=/tmp/calls-1m cargo bench --bench call_search   # keep and reuse the filled database
//! ```
//! `QUERIES` (default 200) sets the requests per class.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hdrhistogram::Histogram;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use voxline::admin::ops;
use voxline::app::server::Server;
use voxline::config::Settings;
use voxline::domain::clock::SystemClock;
use voxline::store::{CallFixture, Store};

const VOCABULARY: usize = 5_000;
const FIRST_NAMES: usize = 200;
const LAST_NAMES: usize = 200;
const AGENTS: [&str; 5] = [
    "Admissions Bot",
    "Sales Bot",
    "Support Bot",
    "Reminder Bot",
    "Survey Bot",
];
const PROVIDERS: [&str; 4] = ["sim", "twilio", "plivo", "exotel"];
const SPREAD_MS: i64 = 180 * 86_400_000;
const FILL_BATCH: usize = 10_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// SplitMix64: a small deterministic generator, so every run fills the same data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Pronounceable distinct words, e.g. `kamoru`.
fn make_words(count: usize, rng: &mut Rng, min_syllables: usize) -> Vec<String> {
    const CONSONANTS: &[u8] = b"bdfghjklmnprstvyz";
    const VOWELS: &[u8] = b"aeiou";
    let mut seen = std::collections::HashSet::new();
    let mut words = Vec::with_capacity(count);
    while words.len() < count {
        let syllables = min_syllables + rng.below(3);
        let mut word = String::new();
        for _ in 0..syllables {
            word.push(CONSONANTS[rng.below(CONSONANTS.len())] as char);
            word.push(VOWELS[rng.below(VOWELS.len())] as char);
        }
        if seen.insert(word.clone()) {
            words.push(word);
        }
    }
    words
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// Zipf(s = 1) over `n` ranks, sampled by binary search on the cumulative weights.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize) -> Self {
        let mut total = 0.0;
        let mut cumulative = Vec::with_capacity(n);
        for rank in 1..=n {
            total += 1.0 / rank as f64;
            cumulative.push(total);
        }
        for c in &mut cumulative {
            *c /= total;
        }
        Self(cumulative)
    }

    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.0.partition_point(|c| *c < u).min(self.0.len() - 1)
    }
}

struct Corpus {
    words: Vec<String>,
    first: Vec<String>,
    last: Vec<String>,
    zipf: Zipf,
}

impl Corpus {
    fn new() -> Self {
        let mut rng = Rng(7);
        Self {
            words: make_words(VOCABULARY, &mut rng, 2),
            first: make_words(FIRST_NAMES, &mut rng, 2)
                .iter()
                .map(|w| capitalised(w))
                .collect(),
            last: make_words(LAST_NAMES, &mut rng, 3)
                .iter()
                .map(|w| capitalised(w))
                .collect(),
            zipf: Zipf::new(VOCABULARY),
        }
    }

    fn call(
        &self,
        rng: &mut Rng,
        org_id: &str,
        index: u64,
        total: u64,
        start_ms: i64,
    ) -> CallFixture {
        let status = match rng.below(100) {
            0..=59 => "completed",
            60..=79 => "no-answer",
            80..=87 => "failed",
            88..=92 => "busy",
            93..=96 => "canceled",
            _ => "queued",
        };
        let answered = status == "completed";
        let created_at = start_ms + (index as i64 * SPREAD_MS) / total.max(1) as i64;
        let agent = AGENTS[rng.below(AGENTS.len())];
        let transcript = if answered {
            let turns = 4 + rng.below(6);
            let mut text = String::with_capacity(400);
            for turn in 0..turns {
                text.push_str(if turn % 2 == 0 { "Bot:" } else { "Candidate:" });
                for _ in 0..(4 + rng.below(8)) {
                    text.push(' ');
                    text.push_str(&self.words[self.zipf.sample(rng)]);
                }
                text.push('\n');
            }
            text
        } else {
            String::new()
        };
        let duration = if answered {
            20 + rng.below(400) as i64
        } else {
            0
        };
        CallFixture {
            id: uuid::Uuid::now_v7().to_string(),
            org_id: org_id.to_string(),
            agent_id: format!("agent-{}", agent.len()),
            agent_name: agent.to_string(),
            phone: format!("+9198{:08}", rng.below(100_000_000)),
            target_name: format!(
                "{} {}",
                self.first[rng.below(FIRST_NAMES)],
                self.last[rng.below(LAST_NAMES)]
            ),
            from_number: "+918045000001".into(),
            provider: PROVIDERS[rng.below(PROVIDERS.len())].to_string(),
            status: status.to_string(),
            ended_reason: (status != "queued").then(|| {
                if answered {
                    "caller-hangup".to_string()
                } else {
                    status.to_string()
                }
            }),
            duration_seconds: duration,
            cost_paise: (duration + 59) / 60 * 200,
            summary: if answered {
                "Discussed next steps.".into()
            } else {
                String::new()
            },
            transcript_text: transcript,
            created_at,
            answered_at: answered.then_some(created_at + 5_000),
            ended_at: (status != "queued").then_some(created_at + 5_000 + duration * 1000),
            ..CallFixture::default()
        }
    }
}

/// Fills the store with `total` calls of `org_id`, in transactions of 10,000.
async fn fill(store: &Store, corpus: &Corpus, org_id: &str, total: u64) {
    let mut rng = Rng(42);
    let start_ms = chrono::Utc::now().timestamp_millis() - SPREAD_MS;
    let started = Instant::now();
    let mut done = 0u64;
    while done < total {
        let batch = (total - done).min(FILL_BATCH as u64);
        let calls: Vec<CallFixture> = (done..done + batch)
            .map(|i| corpus.call(&mut rng, org_id, i, total, start_ms))
            .collect();
        if let Err(err) = store.insert_call_fixtures(&calls).await {
            panic!("fill failed after {done} calls: {err}");
        }
        done += batch;
        if done.is_multiple_of(100_000) || done == total {
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "  filled {done:>9} / {total} calls in {secs:6.1}s ({:.0} calls/s)",
                done as f64 / secs
            );
        }
    }
}

/// Runs every path once (warm-up) then `rounds` times, returning the latency histogram in µs.
async fn measure(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    paths: &[String],
    rounds: usize,
) -> (Histogram<u64>, f64) {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut matched = 0u64;
    for (i, path) in paths.iter().cycle().take(paths.len() + rounds).enumerate() {
        let started = Instant::now();
        let resp = client
            .get(format!("{base}{path}"))
            .bearer_auth(key)
            .send()
            .await
            .expect("send");
        let status = resp.status();
        let body = resp.bytes().await.expect("body");
        let elapsed = started.elapsed();
        assert!(
            status.is_success(),
            "{path}: {status} {}",
            String::from_utf8_lossy(&body)
        );
        if i >= paths.len() {
            hist.record(elapsed.as_micros().max(1) as u64)
                .expect("record latency");
            let value: serde_json::Value = serde_json::from_slice(&body).expect("JSON body");
            matched += value["total"].as_u64().unwrap_or_default();
        }
    }
    (hist, matched as f64 / rounds.max(1) as f64)
}

fn report(name: &str, hist: &Histogram<u64>, mean_total: f64) {
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "{name:<44} p50 {:>8.2} ms   p99 {:>8.2} ms   max {:>8.2} ms   (n={}, mean total {:.0})",
        ms(hist.value_at_quantile(0.5)),
        ms(hist.value_at_quantile(0.99)),
        ms(hist.max()),
        hist.len(),
        mean_total
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    let total = env_u64("CALLS", 1_000_000);
    let rounds = env_u64("QUERIES", 200) as usize;
    let corpus = Corpus::new();

    // A kept directory is reused when it already holds this many calls.
    let (data_dir, _temp) = match std::env::var("CALL_SEARCH_DIR") {
        Ok(dir) if !dir.is_empty() => {
            std::fs::create_dir_all(&dir).expect("create CALL_SEARCH_DIR");
            (PathBuf::from(dir), None)
        }
        _ => {
            let temp = tempfile::tempdir().expect("temp dir");
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    let marker = data_dir.join("call_search.json");
    let settings = Settings::for_tests(data_dir.clone(), None);
    let server = Server::start(settings, Arc::new(SystemClock))
        .await
        .expect("server starts");
    let store = server.state().store.clone();
    let now = chrono::Utc::now();

    let previous: Option<serde_json::Value> = std::fs::read(&marker)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(|m: &serde_json::Value| m["calls"].as_u64() == Some(total));
    let org_id = match &previous {
        Some(m) => {
            println!("reusing {total} calls in {}", data_dir.display());
            m["org"]
                .as_str()
                .and_then(|id| id.parse::<voxline::domain::OrgId>().ok())
                .expect("org id in marker")
        }
        None => {
            let org = ops::create_org(&store, "Bench", None, None, now)
                .await
                .expect("create org");
            println!("filling {total} calls into {}", data_dir.display());
            let started = Instant::now();
            fill(&store, &corpus, &org.id.to_string(), total).await;
            println!("filled in {:.1}s", started.elapsed().as_secs_f64());
            std::fs::write(
                &marker,
                serde_json::json!({"calls": total, "org": org.id}).to_string(),
            )
            .expect("write marker");
            org.id
        }
    };
    let key = ops::create_key(&store, org_id, "bench", now)
        .await
        .expect("create key");
    store
        .set_api_key_limits(key.id, 100_000_000, 1_000_000_000)
        .await
        .expect("raise key caps");

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client");
    let base = server.base_url();
    let mut rng = Rng(99);
    let pick = |rng: &mut Rng, ranks: std::ops::Range<usize>, n: usize| -> Vec<String> {
        (0..n)
            .map(|_| corpus.words[ranks.start + rng.below(ranks.end - ranks.start)].clone())
            .collect()
    };
    let deep = |terms: Vec<String>| -> Vec<String> {
        terms
            .into_iter()
            .map(|t| format!("/api/calls?search={}&deep=true", t.replace(' ', "%20")))
            .collect()
    };
    let typical_words = deep(pick(&mut rng, 1_000..VOCABULARY, 50));
    let mid_words = deep(pick(&mut rng, 200..1_000, 50));
    let common_words = deep(pick(&mut rng, 20..200, 20));
    let full_names = deep(
        (0..50)
            .map(|_| {
                format!(
                    "{} {}",
                    corpus.first[rng.below(FIRST_NAMES)],
                    corpus.last[rng.below(LAST_NAMES)]
                )
            })
            .collect(),
    );
    let phones = deep(
        (0..50)
            .map(|_| format!("98{:06}", rng.below(1_000_000)))
            .collect(),
    );
    let two_words = deep(
        (0..50)
            .map(|_| {
                let a = pick(&mut rng, 100..1_000, 1).remove(0);
                let b = pick(&mut rng, 100..1_000, 1).remove(0);
                format!("{a} {b}")
            })
            .collect(),
    );
    let first_pages: Vec<String> = vec!["/api/calls".into(), "/api/calls?limit=100".into()];
    let later_pages: Vec<String> = (0..50)
        .map(|_| format!("/api/calls?page={}&limit=20", 2 + rng.below(99)))
        .collect();
    let filtered_pages: Vec<String> = vec![
        "/api/calls?status=completed".into(),
        "/api/calls?status=failed,no-answer".into(),
        "/api/calls?provider=twilio".into(),
        "/api/calls?status=busy&provider=plivo&page=3".into(),
        "/api/calls?status=ringing".into(),
        "/api/calls?status=queued&provider=exotel&page=2".into(),
        "/api/calls?provider=sim&page=50&limit=100".into(),
    ];

    println!(
        "\nGET /api/calls on {total} calls of one workspace (SQLite, release), {rounds} requests per class, sequential keep-alive:"
    );
    let classes: [(&str, &Vec<String>); 9] = [
        ("list page 1 (limit 20 / 100)", &first_pages),
        ("list pages 2-100 (limit 20)", &later_pages),
        ("list with status/provider filters", &filtered_pages),
        ("deep: typical word (Zipf rank 1000-5000)", &typical_words),
        ("deep: two words (ranks 100-1000)", &two_words),
        ("deep: full name", &full_names),
        ("deep: phone digits", &phones),
        ("deep: mid-frequency word (rank 200-1000)", &mid_words),
        ("deep: common word (rank 20-200)", &common_words),
    ];
    for (name, paths) in classes {
        let (hist, mean_total) = measure(&client, &base, &key.key, paths, rounds).await;
        report(name, &hist, mean_total);
    }
    server.shutdown().await;
}

//! Latency of the console's calls pages on a big SQLite workspace: the list
//! (`/calls`, first and later pages, filtered) and one call's page
//! (`/calls/{id}`), each a full server-rendered HTML answer to a signed-in
//! person, measured over HTTP against the in-process server.
//!
//! Fills one workspace with `CALLS` calls (default 1,000,000) spread over
//! the last 180 days, one multi-row `INSERT` of 10,000 calls per
//! transaction, plus a few calls with transcripts, latencies and events for
//! the call page.
//!
//! ```text
//! cargo bench --profile dev --bench console_pages                 # 1,000,000 calls
//! CALLS=100000 cargo bench --profile dev --bench console_pages
//! CONSOLE_BENCH_DIR=/tmp/console-1m cargo bench --profile dev --bench console_pages   # keep and reuse
//! ```
//! `QUERIES` (default 300) sets the requests per class.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use voxline::admin::ops;
use voxline::app::server::Server;
use voxline::config::Settings;
use voxline::domain::clock::SystemClock;
use voxline::domain::{OrgId, Password, Role, UserId};
use voxline::store::users::NewUser;
use voxline::store::{CallFixture, Store};

const AGENTS: [&str; 5] = [
    "Admissions Bot",
    "Sales Bot",
    "Support Bot",
    "Reminder Bot",
    "Survey Bot",
];
/// The agents' ids: fixed, so a kept database keeps them.
const AGENT_IDS: [&str; 5] = [
    "01900000-0000-7000-8000-000000000001",
    "01900000-0000-7000-8000-000000000002",
    "01900000-0000-7000-8000-000000000003",
    "01900000-0000-7000-8000-000000000004",
    "01900000-0000-7000-8000-000000000005",
];
const PROVIDERS: [&str; 4] = ["sim", "twilio", "plivo", "exotel"];
const STATUSES: [&str; 6] = [
    "completed",
    "no-answer",
    "failed",
    "busy",
    "canceled",
    "voicemail",
];
const SPREAD_MS: i64 = 180 * 86_400_000;
const FILL_ROWS: u64 = 10_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// SplitMix64, so every run fills the same data.
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
}

/// Inserts `total` calls of `org` with one multi-row INSERT per 10,000, each
/// in its own transaction. Values are the bench's own (digits, fixed
/// words), written as literals.
async fn fill(database_url: &str, org: OrgId, total: u64) {
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(database_url)
        .await
        .expect("open the bench database");
    let mut rng = Rng(42);
    let start_ms = chrono::Utc::now().timestamp_millis() - SPREAD_MS;
    let started = Instant::now();
    let mut done = 0u64;
    while done < total {
        let rows = (total - done).min(FILL_ROWS);
        let mut sql = String::with_capacity(rows as usize * 420);
        sql.push_str(
            "INSERT INTO calls (id, org_id, agent_id, agent_name, engine, phone, target_name, from_number,
               provider, status, ended_reason, variables, source, attempt, dispatched, not_before, queued_at,
               answered_at, ended_at, duration_seconds, rate_paise, cost_paise, summary, transcript_text,
               extracted, latencies, created_at) VALUES ",
        );
        for i in done..done + rows {
            let created = start_ms + (i as i64 * SPREAD_MS) / total.max(1) as i64;
            let status = STATUSES[rng.below(STATUSES.len())];
            let answered = status == "completed";
            let duration = if answered {
                20 + rng.below(400) as i64
            } else {
                0
            };
            let agent = rng.below(AGENTS.len());
            if i > done {
                sql.push(',');
            }
            write!(
                sql,
                "('{id}', '{org}', '{agent_id}', '{agent_name}', 'pipeline', '+9198{phone:08}', 'Caller {i}',
                  '+918045000001', '{provider}', '{status}', '{reason}', '{{}}', 'api', 1, TRUE, {created},
                  {created}, {answered_at}, {ended}, {duration}, 200, {cost}, '{summary}', '', '{{}}', '[]', {created})",
                id = uuid::Uuid::now_v7(),
                agent_id = AGENT_IDS[agent],
                agent_name = AGENTS[agent],
                phone = rng.below(100_000_000),
                provider = PROVIDERS[rng.below(PROVIDERS.len())],
                reason = if answered { "caller-hangup" } else { status },
                answered_at = if answered { (created + 5_000).to_string() } else { "NULL".into() },
                ended = created + 5_000 + duration * 1000,
                cost = (duration + 59) / 60 * 200,
                summary = if answered { "Discussed next steps." } else { "" },
            )
            .expect("write SQL");
        }
        let mut tx = conn.begin().await.expect("begin");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .expect("insert calls");
        tx.commit().await.expect("commit");
        done += rows;
        if done.is_multiple_of(100_000) || done == total {
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "  filled {done:>9} / {total} calls in {secs:6.1}s ({:.0} calls/s)",
                done as f64 / secs
            );
        }
    }
}

/// A finished call with a transcript, latencies and events, for the call page.
async fn detailed_call(store: &Store, org: OrgId, n: usize) -> String {
    let now = chrono::Utc::now().timestamp_millis();
    let id = uuid::Uuid::now_v7().to_string();
    let turns: Vec<(String, String, i64)> = (0..12)
        .map(|t| {
            (
                if t % 2 == 0 { "assistant" } else { "user" }.to_string(),
                format!("Turn {t} of call {n}: a sentence or two of what was said, with <b>markup</b> typed in."),
                now - 60_000 + t * 4_000,
            )
        })
        .collect();
    store
        .insert_call_fixture(&CallFixture {
            id: id.clone(),
            org_id: org.to_string(),
            agent_id: AGENT_IDS[0].into(),
            agent_name: "Admissions Bot".into(),
            phone: "+919800000001".into(),
            target_name: format!("Detailed {n}"),
            from_number: "+918045000001".into(),
            provider: "sim".into(),
            status: "completed".into(),
            ended_reason: Some("caller-hangup".into()),
            duration_seconds: 52,
            cost_paise: 200,
            summary: "Confirmed the interview.".into(),
            transcript_text: "Bot: hello".into(),
            created_at: now - 70_000,
            answered_at: Some(now - 64_000),
            ended_at: Some(now - 12_000),
            latencies: r#"[{"totalMs":820,"endpointingMs":300,"asrMs":90,"llmFirstTokenMs":280,"ttsFirstByteMs":120,"engineOverheadMs":30},{"totalMs":760,"endpointingMs":280,"asrMs":80,"llmFirstTokenMs":260,"ttsFirstByteMs":110,"engineOverheadMs":30}]"#.into(),
            turns,
            events: vec![
                ("queued".into(), now - 70_000),
                ("ringing".into(), now - 68_000),
                ("in-progress".into(), now - 64_000),
                ("completed".into(), now - 12_000),
            ],
            ..CallFixture::default()
        })
        .await
        .expect("insert the detailed call");
    id
}

/// Runs every path once (warm-up) then `rounds` times; the latency histogram in µs.
async fn measure(
    client: &reqwest::Client,
    base: &str,
    cookie: &str,
    paths: &[String],
    rounds: usize,
) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    for (i, path) in paths.iter().cycle().take(paths.len() + rounds).enumerate() {
        let started = Instant::now();
        let resp = client
            .get(format!("{base}{path}"))
            .header("cookie", cookie)
            .send()
            .await
            .expect("send");
        let status = resp.status();
        let body = resp.bytes().await.expect("body");
        let elapsed = started.elapsed();
        assert!(
            status.is_success() && body.starts_with(b"<!"),
            "{path}: {status} {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        if i >= paths.len() {
            hist.record(elapsed.as_micros().max(1) as u64)
                .expect("record latency");
        }
    }
    hist
}

fn report(name: &str, hist: &Histogram<u64>) {
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "{name:<64} p50 {:>8.2} ms   p99 {:>8.2} ms   max {:>8.2} ms   (n={})",
        ms(hist.value_at_quantile(0.5)),
        ms(hist.value_at_quantile(0.99)),
        ms(hist.max()),
        hist.len(),
    );
}

/// `1234567` as `1,234,567`, as the list prints counts.
fn group_thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A session cookie of an owner of `org`, signed in through `/sign-in` as a browser does.
async fn sign_in_cookie(server: &Server, store: &Store, org: OrgId) -> String {
    let email = format!("bench-{}@example.com", uuid::Uuid::new_v4().simple());
    let password = "bench password long enough";
    let hash = voxline::access::password::hash(&Password::parse(password).expect("password"))
        .expect("hash");
    store
        .insert_user(&NewUser {
            id: UserId::new(),
            org_id: org,
            email: &email,
            password_hash: &hash,
            role: Role::Owner,
            now_ms: chrono::Utc::now().timestamp_millis(),
        })
        .await
        .expect("insert the bench person");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("HTTP client");
    // The form first: its pre-session cookie and the `_csrf` field bound to it.
    let form = http
        .get(format!("{}/sign-in", server.base_url()))
        .send()
        .await
        .expect("the sign-in form");
    let form_cookie = cookie_pair(form.headers(), "voxline_sign_in");
    let html = form.text().await.expect("the sign-in page");
    let marker = "name=\"_csrf\" value=\"";
    let field = html
        .split_once(marker)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(value, _)| value.to_string())
        .expect("the form's _csrf field");
    let resp = http
        .post(format!("{}/sign-in", server.base_url()))
        .header("cookie", form_cookie)
        .form(&[
            ("_csrf", field.as_str()),
            ("email", email.as_str()),
            ("password", password),
        ])
        .send()
        .await
        .expect("sign in");
    assert_eq!(resp.status(), 303, "sign-in refused");
    cookie_pair(resp.headers(), "voxline_session")
}

/// `name=value` of the cookie `name` among a response's `Set-Cookie` headers.
fn cookie_pair(headers: &reqwest::header::HeaderMap, name: &str) -> String {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|pair| pair.starts_with(&format!("{name}=")))
        .expect("the cookie")
        .to_string()
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
    let rounds = env_u64("QUERIES", 300) as usize;
    let (data_dir, _temp) = match std::env::var("CONSOLE_BENCH_DIR") {
        Ok(dir) if !dir.is_empty() => {
            std::fs::create_dir_all(&dir).expect("create CONSOLE_BENCH_DIR");
            (PathBuf::from(dir), None)
        }
        _ => {
            let temp = tempfile::tempdir().expect("temp dir");
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    let marker = data_dir.join("console_pages.json");
    let settings = Settings::for_tests(data_dir.clone(), None);
    let database_url = format!("sqlite://{}", data_dir.join("voxline.db").display());
    let server = Server::start(settings, Arc::new(SystemClock))
        .await
        .expect("server starts");
    let store = server.state().store.clone();
    let now = chrono::Utc::now();
    let previous: Option<serde_json::Value> = std::fs::read(&marker)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(|m: &serde_json::Value| m["calls"].as_u64() == Some(total));
    let (org_id, call_ids) = match &previous {
        Some(m) => {
            println!("reusing {total} calls in {}", data_dir.display());
            let org = m["org"]
                .as_str()
                .and_then(|id| id.parse::<OrgId>().ok())
                .expect("org id in marker");
            let ids = m["detailed"]
                .as_array()
                .expect("detailed calls in marker")
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>();
            (org, ids)
        }
        None => {
            let org = ops::create_org(&store, "Bench", None, None, now)
                .await
                .expect("create org");
            println!("filling {total} calls into {}", data_dir.display());
            let started = Instant::now();
            fill(&database_url, org.id, total).await;
            let mut ids = Vec::new();
            for n in 0..5 {
                ids.push(detailed_call(&store, org.id, n).await);
            }
            println!("filled in {:.1}s", started.elapsed().as_secs_f64());
            std::fs::write(
                &marker,
                serde_json::json!({"calls": total, "org": org.id, "detailed": ids}).to_string(),
            )
            .expect("write marker");
            (org.id, ids)
        }
    };
    let cookie = sign_in_cookie(&server, &store, org_id).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("HTTP client");
    let base = server.base_url();
    // The pages are of this workspace's calls: the list counts them all.
    let first = client
        .get(format!("{base}/calls"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("send")
        .text()
        .await
        .expect("body");
    let counted = format!("{} calls", group_thousands(total + 5));
    assert!(first.contains(&counted), "the list does not say {counted}");
    let mut rng = Rng(99);
    let first_pages: Vec<String> = vec!["/calls".into()];
    let later_pages: Vec<String> = (0..50)
        .map(|_| format!("/calls?page={}", 2 + rng.below(99)))
        .collect();
    let filtered: Vec<String> = vec![
        "/calls?status=completed".into(),
        "/calls?status=failed&status=no-answer".into(),
        "/calls?provider=twilio&page=3".into(),
        "/calls?status=busy&provider=plivo".into(),
    ];
    let today = chrono::Utc::now()
        .with_timezone(&voxline::domain::clock::IST)
        .date_naive();
    let week_ago = today - chrono::Days::new(6);
    let month_ago = today - chrono::Days::new(60);
    let narrower: Vec<String> = vec![
        format!("/calls?from={week_ago}&to={today}"),
        format!("/calls?from={month_ago}&to={week_ago}&status=completed"),
        format!("/calls?agent={}", AGENT_IDS[1]),
        format!("/calls?agent={}&status=busy", AGENT_IDS[2]),
        "/calls?q=Caller%2012345".into(),
        "/calls?q=%2B9198123".into(),
    ];
    let call_pages: Vec<String> = call_ids.iter().map(|id| format!("/calls/{id}")).collect();
    println!(
        "\nconsole pages on {total} calls of one workspace (SQLite), {rounds} requests per class, sequential keep-alive:"
    );
    let mut classes: Vec<(String, Vec<String>)> = vec![
        ("/calls (page 1)".into(), first_pages),
        ("/calls pages 2-100".into(), later_pages),
        ("/calls with status/provider filters".into(), filtered),
        ("/calls/{id} (call page)".into(), call_pages),
    ];
    // Each narrower filter on its own: they cost differently.
    classes.extend(narrower.into_iter().map(|path| (path.clone(), vec![path])));
    for (name, paths) in &classes {
        let hist = measure(&client, &base, &cookie, paths, rounds).await;
        report(name, &hist);
    }
    server.shutdown().await;
}

//! A real server on port 0 over a throwaway database, and a small HTTP client.
//!
//! SQLite in a temp dir by default; with `VOXLINE_TEST_DATABASE_URL` set, a
//! fresh Postgres database `voxline_test_<uuid>` created through that URL and
//! dropped (WITH (FORCE)) when the app is dropped.

use chrono::{DateTime, Utc};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use sqlx::Connection;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use voxline::admin::ops;
use voxline::app::config::Settings;
use voxline::app::server::Server;
use voxline::domain::clock::{ManualClock, SharedClock, SystemClock};
use voxline::domain::{ApiKeyId, OrgId, Paise};
use voxline::store::Store;

/// Env var naming a Postgres server to create per-test databases on.
pub const PG_ENV: &str = "VOXLINE_TEST_DATABASE_URL";

/// A workspace with one key, created the way the admin CLI does.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Workspace id.
    pub org_id: OrgId,
    /// Key id.
    pub key_id: ApiKeyId,
    /// The full bearer key.
    pub key: String,
}

/// One answered request, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub body: Value,
}

impl Reply {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A header parsed as an integer; panics when absent.
    pub fn header_i64(&self, name: &str) -> i64 {
        self.header(name)
            .unwrap_or_else(|| panic!("missing header {name}: {self:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("header {name} is not an integer: {self:?}"))
    }

    /// The `message` field of an error body; panics when the body is not `{message}` JSON.
    pub fn message(&self) -> &str {
        assert!(
            self.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.starts_with("application/json")),
            "not JSON: {self:?}"
        );
        self.body["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no message field: {self:?}"))
    }

    /// Asserts the status, showing the body on failure.
    #[track_caller]
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text
        );
        self
    }
}

/// Turns a reqwest response into a [`Reply`].
pub async fn reply(resp: reqwest::Response) -> Reply {
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("read body");
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        text,
        body,
    }
}

/// A Postgres database that exists for one test.
struct PgDatabase {
    admin_url: String,
    name: String,
}

impl PgDatabase {
    async fn create(admin_url: &str) -> (Self, String) {
        let name = format!("voxline_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(admin_url)
            .await
            .expect("connect to VOXLINE_TEST_DATABASE_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create test database");
        conn.close().await.ok();
        let mut url = reqwest::Url::parse(admin_url).expect("VOXLINE_TEST_DATABASE_URL is a URL");
        url.set_path(&format!("/{name}"));
        (
            Self {
                admin_url: admin_url.to_string(),
                name,
            },
            url.to_string(),
        )
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        // Drop may run inside the test's runtime, so use a thread with its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for the database drop");
            rt.block_on(async move {
                let mut conn = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
        }
    }
}

/// A running server on a private database.
pub struct TestApp {
    /// The server; `None` only during a restart.
    pub server: Option<Server>,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The data directory (SQLite file, secret).
    pub data_dir: PathBuf,
    /// The database the server uses (given to the admin CLI).
    pub database_url: String,
    /// The clock the server reads.
    pub clock: SharedClock,
    /// The HTTP client (keep-alive pool).
    pub http: reqwest::Client,
    // Field order matters: the server goes before the database is dropped.
    _pg: Option<PgDatabase>,
    _dir: TempDir,
}

impl TestApp {
    /// A server on the wall clock.
    pub async fn spawn() -> Self {
        Self::start(Arc::new(SystemClock)).await
    }

    /// A server on a clock the test moves.
    pub async fn spawn_with_clock(clock: Arc<ManualClock>) -> Self {
        Self::start(clock).await
    }

    /// A server on the wall clock with `tweak` applied to the test settings
    /// (a restart goes back to the plain test settings).
    pub async fn spawn_with_settings(tweak: impl FnOnce(&mut Settings)) -> Self {
        Self::start_with(Arc::new(SystemClock), tweak).await
    }

    async fn start(clock: SharedClock) -> Self {
        Self::start_with(clock, |_| {}).await
    }

    async fn start_with(clock: SharedClock, tweak: impl FnOnce(&mut Settings)) -> Self {
        // `VOXLINE_TEST_LOG=warn cargo test …` shows the servers' logs.
        if let Ok(filter) = std::env::var("VOXLINE_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let data_dir = dir.path().to_path_buf();
        let (pg, database_url) = match std::env::var(PG_ENV) {
            Ok(url) if !url.is_empty() => {
                let (db, url) = PgDatabase::create(&url).await;
                (Some(db), url)
            }
            _ => (
                None,
                format!("sqlite://{}", data_dir.join("voxline.db").display()),
            ),
        };
        let mut settings = Settings::for_tests(data_dir.clone(), Some(database_url.clone()));
        tweak(&mut settings);
        let server = Server::start(settings, clock.clone())
            .await
            .expect("server starts");
        Self {
            base: server.base_url(),
            server: Some(server),
            data_dir,
            database_url,
            clock,
            http: reqwest::Client::new(),
            _pg: pg,
            _dir: dir,
        }
    }

    /// The running server.
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("server is running")
    }

    /// The server's store, for admin setup only.
    pub fn store(&self) -> &Store {
        &self.server().state().store
    }

    /// What the server's clock reads.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Clean shutdown, then a fresh server on the same data dir and database.
    pub async fn restart(&mut self) {
        let server = self.server.take().expect("server is running");
        server.shutdown().await;
        let server = Server::start(
            Settings::for_tests(self.data_dir.clone(), Some(self.database_url.clone())),
            self.clock.clone(),
        )
        .await
        .expect("server restarts");
        self.base = server.base_url();
        self.server = Some(server);
        // Connections to the old listener are gone.
        self.http = reqwest::Client::new();
    }

    /// A workspace with the default caps and one key.
    pub async fn workspace(&self, name: &str) -> Workspace {
        let org = ops::create_org(self.store(), name, None, None, self.now())
            .await
            .expect("create org");
        let key = self.key(org.id, "test key").await;
        Workspace {
            org_id: org.id,
            key_id: key.0,
            key: key.1,
        }
    }

    /// A workspace that can place calls: `concurrency` slots, a default sim
    /// number of its own and ₹1,000 in its wallet.
    pub async fn calling_workspace(&self, name: &str, concurrency: i64) -> Workspace {
        let org = ops::create_org(self.store(), name, Some(concurrency), None, self.now())
            .await
            .expect("create org");
        let key = self.key(org.id, "test key").await;
        self.add_sim_number(org.id).await;
        self.store()
            .credit_wallet(org.id, Paise(100_000), self.now().timestamp_millis())
            .await
            .expect("credit wallet");
        Workspace {
            org_id: org.id,
            key_id: key.0,
            key: key.1,
        }
    }

    /// Rents a random default sim number for `org_id`, as `voxline admin number add` does.
    pub async fn add_sim_number(&self, org_id: OrgId) {
        let number = format!("+9180357{:05}", rand::random_range(10_000..99_999u32));
        ops::add_number(self.store(), org_id, &number, "sim", true, None, self.now())
            .await
            .expect("add number");
    }

    /// Another key for `org_id`: (id, full key).
    pub async fn key(&self, org_id: OrgId, name: &str) -> (ApiKeyId, String) {
        let key = ops::create_key(self.store(), org_id, name, self.now())
            .await
            .expect("create key");
        (key.id, key.key)
    }

    /// Overrides a key's caps, as `voxline admin key limits` does.
    pub async fn set_limits(&self, key_id: ApiKeyId, daily: i64, monthly: i64) {
        assert!(
            self.store()
                .set_api_key_limits(key_id, daily, monthly)
                .await
                .expect("set limits")
        );
    }

    /// A request with `key` as bearer (none when `key` is empty).
    pub fn request(&self, key: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        if key.is_empty() {
            req
        } else {
            req.bearer_auth(key)
        }
    }

    /// GET with `key`.
    pub async fn get(&self, key: &str, path: &str) -> Reply {
        reply(
            self.request(key, Method::GET, path)
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    /// POST of a JSON body with `key`.
    pub async fn post(&self, key: &str, path: &str, body: Value) -> Reply {
        reply(
            self.request(key, Method::POST, path)
                .json(&body)
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    /// POST without a body.
    pub async fn post_empty(&self, key: &str, path: &str) -> Reply {
        reply(
            self.request(key, Method::POST, path)
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    /// PATCH of a JSON body.
    pub async fn patch(&self, key: &str, path: &str, body: Value) -> Reply {
        reply(
            self.request(key, Method::PATCH, path)
                .json(&body)
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    /// DELETE.
    pub async fn delete(&self, key: &str, path: &str) -> Reply {
        reply(
            self.request(key, Method::DELETE, path)
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    /// Any method and a raw body with a content type.
    pub async fn raw(
        &self,
        key: &str,
        method: Method,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Reply {
        reply(
            self.request(key, method, path)
                .header("content-type", content_type)
                .body(body)
                .send()
                .await
                .expect("send"),
        )
        .await
    }

    /// Creates an agent through the API and returns its body.
    pub async fn create_agent(&self, key: &str, body: Value) -> Value {
        self.post(key, "/api/agents", body).await.expect(201).body
    }

    /// Runs `voxline admin …` (the real binary) against this app's database.
    pub async fn admin(&self, args: &[&str]) -> std::process::Output {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_voxline"))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--database-url")
            .arg(&self.database_url)
            .arg("--secret")
            .arg("test-secret")
            .arg("admin")
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("VOXLINE_CONFIG")
            .env_remove("VOXLINE_DATA_DIR")
            .env_remove("VOXLINE_SECRET")
            .output()
            .await
            .expect("run voxline admin")
    }

    /// Runs `voxline admin …`, asserts success and exactly one JSON object on stdout.
    pub async fn admin_ok(&self, args: &[&str]) -> Value {
        let out = self.admin(args).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "voxline admin {args:?} failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "expected one JSON line, got {stdout:?}");
        let value: Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
        assert!(value.is_object(), "expected a JSON object: {value}");
        value
    }
}

/// Polls `check` every 20 ms until it yields `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Parses an RFC 3339 instant.
pub fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

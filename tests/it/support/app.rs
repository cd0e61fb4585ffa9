//! A real server on port 0 over a throwaway database, and a small HTTP client.

use super::VOXLINE_BIN;
use super::log_capture;
use super::postgres::{PG_ENV, PgDatabase};
use super::reply::{Reply, reply};
use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tempfile::TempDir;
use voxline::admin::ops;
use voxline::app::server::Server;
use voxline::config::Settings;
use voxline::domain::clock::{ManualClock, SharedClock, SystemClock};
use voxline::domain::{ApiKeyId, OrgId, Paise};
use voxline::http::state::AppState;
use voxline::store::{NumberRow, Store};
use voxline_actors::carrier::Carrier;

/// Test carriers registered by name beside the built-in ones.
pub type Carriers = HashMap<String, Arc<dyn Carrier>>;

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
    /// Test carriers, registered again on a restart.
    carriers: Carriers,
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
        Self::spawn_with(Arc::new(SystemClock), Carriers::new(), tweak).await
    }

    /// A server on `clock` with `carriers` beside the built-in ones and
    /// `tweak` applied to the test settings (a restart keeps the carriers and
    /// goes back to the plain test settings).
    pub async fn spawn_with(
        clock: SharedClock,
        carriers: Carriers,
        tweak: impl FnOnce(&mut Settings),
    ) -> Self {
        // `VOXLINE_TEST_LOG=warn cargo test …` shows the servers' logs.
        log_capture::install_if_asked();
        let dir = tempfile::tempdir().expect("temp dir");
        let data_dir = dir.path().to_path_buf();
        let (pg, database_url) = throwaway_database(&data_dir).await;
        let mut settings = Settings::for_tests(data_dir.clone(), Some(database_url.clone()));
        tweak(&mut settings);
        let server = Server::start_with_carriers(settings, clock.clone(), carriers.clone())
            .await
            .expect("server starts");
        Self {
            base: server.base_url(),
            server: Some(server),
            data_dir,
            database_url,
            clock,
            http: reqwest::Client::new(),
            carriers,
            _pg: pg,
            _dir: dir,
        }
    }

    /// Another node on this app's database (its own data directory, node id
    /// and port, the same clock and carriers), with `tweak` applied to the
    /// test settings. Shut peers down before the app that owns the database.
    pub async fn spawn_peer(&self, tweak: impl FnOnce(&mut Settings)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let data_dir = dir.path().to_path_buf();
        let mut settings = Settings::for_tests(data_dir.clone(), Some(self.database_url.clone()));
        settings.no_bootstrap = true;
        tweak(&mut settings);
        let server =
            Server::start_with_carriers(settings, self.clock.clone(), self.carriers.clone())
                .await
                .expect("peer server starts");
        Self {
            base: server.base_url(),
            server: Some(server),
            data_dir,
            database_url: self.database_url.clone(),
            clock: self.clock.clone(),
            http: reqwest::Client::new(),
            carriers: self.carriers.clone(),
            _pg: None,
            _dir: dir,
        }
    }

    async fn start(clock: SharedClock) -> Self {
        Self::spawn_with(clock, Carriers::new(), |_| {}).await
    }

    /// The running server.
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("server is running")
    }

    /// The running server's shared state, for what the API does not show.
    pub fn state(&self) -> &AppState {
        self.server().state()
    }

    /// The server's store, for admin setup only.
    pub fn store(&self) -> &Store {
        &self.state().store
    }

    /// What the server's clock reads.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Clean shutdown, then a fresh server on the same data dir and database.
    pub async fn restart(&mut self) {
        let server = self.server.take().expect("server is running");
        server.shutdown().await;
        let server = Server::start_with_carriers(
            Settings::for_tests(self.data_dir.clone(), Some(self.database_url.clone())),
            self.clock.clone(),
            self.carriers.clone(),
        )
        .await
        .expect("server restarts");
        self.base = server.base_url();
        self.server = Some(server);
        // Connections to the old listener are gone.
        self.http = reqwest::Client::new();
    }

    /// Clean shutdown (requests in flight finish, counters persist), then the
    /// database and data dir go.
    pub async fn shutdown(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
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

    /// Stores (replacing) `ws`'s `kind` credential through the admin CLI.
    pub async fn set_credential(&self, ws: &Workspace, kind: &str, credential: &Value) {
        self.admin_ok(&[
            "credential",
            "set",
            "--org",
            &ws.org_id.to_string(),
            "--kind",
            kind,
            "--json",
            &credential.to_string(),
        ])
        .await;
    }

    /// Rents `phone` on `provider` as `ws`'s default number, as `voxline admin number add` does.
    pub async fn add_number(&self, ws: &Workspace, phone: &str, provider: &str) -> NumberRow {
        ops::add_number(
            self.store(),
            ws.org_id,
            phone,
            provider,
            true,
            None,
            self.now(),
        )
        .await
        .unwrap_or_else(|e| panic!("{provider} number: {e:?}"))
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
        tokio::process::Command::new(VOXLINE_BIN)
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
            // The operator's allow-list the test servers use, so loopback receivers register.
            .env(
                "VOXLINE_WEBHOOK_ALLOW_HOSTS",
                Settings::for_tests(self.data_dir.clone(), None)
                    .webhook_allow_hosts
                    .join(","),
            )
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

/// A fresh Postgres database when `VOXLINE_TEST_DATABASE_URL` names a server,
/// else a SQLite file in `data_dir`; returns it (to drop with the app) and its URL.
async fn throwaway_database(data_dir: &Path) -> (Option<PgDatabase>, String) {
    match std::env::var(PG_ENV) {
        Ok(url) if !url.is_empty() => {
            let (db, url) = PgDatabase::create(&url).await;
            (Some(db), url)
        }
        _ => (
            None,
            format!("sqlite://{}", data_dir.join("voxline.db").display()),
        ),
    }
}

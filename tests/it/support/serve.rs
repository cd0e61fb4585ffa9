//! A real `voxline serve` process on a test database: what the drain and
//! multi-node tests run, since signals, `kill -9` and several nodes need
//! separate processes.

use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `voxline serve` process.
pub struct ServeProcess {
    /// The process.
    pub child: Child,
    /// `http://127.0.0.1:<port>` it serves on.
    pub base: String,
    /// What it logged (JSON lines on stderr).
    logs: Arc<Mutex<Vec<String>>>,
}

impl ServeProcess {
    /// Starts the binary on `data_dir` and `database_url` with the test
    /// settings' fast sim, ephemeral ports and `env` on top; returns once it
    /// logged its address.
    pub async fn start(data_dir: &Path, database_url: &str, env: &[(&str, String)]) -> Self {
        let mut command = Command::new(super::VOXLINE_BIN);
        command
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--database-url")
            .arg(database_url)
            .arg("--secret")
            .arg("test-secret")
            .arg("serve")
            .env_remove("DATABASE_URL")
            .env_remove("VOXLINE_CONFIG")
            .env_remove("VOXLINE_DATA_DIR")
            .env_remove("VOXLINE_SECRET")
            .env("RUST_LOG", "info,sqlx=warn")
            .env("VOXLINE_LISTEN", "127.0.0.1:0")
            .env("VOXLINE_ADMIN_LISTEN", "127.0.0.1:0")
            .env("VOXLINE_SIP_LISTEN", "127.0.0.1:0")
            .env("VOXLINE_NO_BOOTSTRAP", "true")
            .env("VOXLINE_LOG_JSON", "true")
            .env("VOXLINE_WEBHOOK_ALLOW_HOSTS", "127.0.0.1,localhost")
            // Tests dial at whatever hour they run.
            .env(
                "VOXLINE_CALLING_HOURS",
                r#"{"start":"00:00","end":"24:00"}"#,
            )
            // The test settings' fast sim, as the in-process harness uses.
            .env("VOXLINE_SIM_RING_SECONDS", "1")
            .env("VOXLINE_SIM_ANSWER_MS", "100")
            .env("VOXLINE_SIM_ASR_MS", "20")
            .env("VOXLINE_SIM_LLM_MS", "20")
            .env("VOXLINE_SIM_LLM_TOKEN_MS", "2")
            .env("VOXLINE_SIM_TTS_MS", "20");
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start voxline serve");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        tokio::spawn({
            let logs = logs.clone();
            async move {
                let mut lines = BufReader::new(stderr).lines();
                let mut addr_tx = Some(addr_tx);
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(entry) = serde_json::from_str::<Value>(&line)
                        && entry["fields"]["message"] == "voxline serving"
                        && let Some(tx) = addr_tx.take()
                    {
                        let _ = tx.send(entry["fields"]["addr"].as_str().unwrap_or("").to_string());
                    }
                    logs.lock().unwrap().push(line);
                }
            }
        });
        let addr = tokio::time::timeout(Duration::from_secs(60), addr_rx)
            .await
            .expect("voxline serve starts within 60 s")
            .expect("voxline serve logged its address");
        Self {
            child,
            base: format!("http://{addr}"),
            logs,
        }
    }

    /// Sends the process a signal by name (`TERM`, `INT`, `KILL`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("still running").to_string();
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the process to exit; returns its exit code and how long it took.
    pub async fn exit_within(&mut self, limit: Duration) -> (Option<i32>, Duration) {
        let began = Instant::now();
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("voxline serve still running after {limit:?}"))
            .expect("wait for voxline serve");
        (status.code(), began.elapsed())
    }

    /// Waits for the process to exit 0 without having lost a call's results
    /// (no closed-pool or store error logged); returns how long it took.
    pub async fn exit_cleanly_within(&mut self, limit: Duration) -> Duration {
        let (code, took) = self.exit_within(limit).await;
        let logs = self.logs();
        assert_eq!(code, Some(0), "exit code; logs:\n{logs}");
        for bad in ["closed pool", "could not store", "could not record"] {
            assert!(!logs.contains(bad), "logged {bad:?}:\n{logs}");
        }
        took
    }

    /// Everything it logged so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }
}

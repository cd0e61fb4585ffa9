//! Recordings in S3-compatible storage (issue 20.8), against a real local S3
//! server: moto in server mode, started on a free port when `moto_server` is
//! on the PATH or `VOXLINE_TEST_MOTO` names it (CI installs a pinned moto);
//! without it these tests say they are skipped and pass. A call recorded by
//! one node is stored in the bucket, not on that node's disk, and a second
//! node on the same database and bucket serves it, whole and in ranges; the
//! retention janitor deletes it from the bucket; an upload that fails keeps
//! the file and sends it once the store is back.

use crate::support::{TestApp, Workspace, eventually};
use chrono::Utc;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use voxline::domain::clock::ManualClock;
use voxline::recordings::{RecordingKey, RecordingStore, RecordingsLocation};

/// Long enough for a sim call: answer, greeting, one caller line, goodbye.
const CALL_WAIT: Duration = Duration::from_secs(40);

/// The variable that names the moto server executable.
const MOTO_ENV: &str = "VOXLINE_TEST_MOTO";

/// A moto S3 server on a free local port, killed when dropped.
struct Moto {
    endpoint: String,
    http: reqwest::Client,
    _child: tokio::process::Child,
}

/// The moto server executable: `VOXLINE_TEST_MOTO`, else `moto_server` on the PATH.
fn moto_executable() -> Option<PathBuf> {
    if let Some(given) = std::env::var_os(MOTO_ENV) {
        return Some(PathBuf::from(given));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("moto_server"))
        .find(|candidate| candidate.is_file())
}

impl Moto {
    /// Starts moto, or None (after saying so) when it is not installed.
    async fn start(test: &str) -> Option<Self> {
        let Some(executable) = moto_executable() else {
            eprintln!(
                "{test}: skipped, no moto_server on the PATH and {MOTO_ENV} unset \
                 (pip install 'moto[server]')"
            );
            return None;
        };
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
            probe.local_addr().expect("port").port()
        };
        let child = tokio::process::Command::new(&executable)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("{} does not start: {err}", executable.display()));
        let moto = Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            _child: child,
        };
        eventually(Duration::from_secs(30), "moto to answer", || async {
            moto.http
                .get(format!("{}/", moto.endpoint))
                .send()
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        Some(moto)
    }

    /// Creates a bucket through the S3 API.
    async fn create_bucket(&self, bucket: &str) {
        let resp = self
            .http
            .put(format!("{}/{bucket}", self.endpoint))
            .send()
            .await
            .expect("create bucket");
        assert!(resp.status().is_success(), "create bucket: {resp:?}");
    }

    /// The keys and sizes under `prefix` in `bucket`, through the S3 API.
    async fn list(&self, bucket: &str, prefix: &str) -> Vec<(String, u64)> {
        let body = self
            .http
            .get(format!(
                "{}/{bucket}?list-type=2&prefix={prefix}",
                self.endpoint
            ))
            .send()
            .await
            .expect("list objects")
            .text()
            .await
            .expect("listing");
        body.split("<Contents>")
            .skip(1)
            .map(|entry| {
                let field = |name: &str| {
                    entry
                        .split(&format!("<{name}>"))
                        .nth(1)
                        .and_then(|rest| rest.split(&format!("</{name}>")).next())
                        .unwrap_or_default()
                        .to_string()
                };
                (field("Key"), field("Size").parse().unwrap_or(0))
            })
            .collect()
    }

    /// An object's bytes, through the S3 API (signed, as moto wants reads).
    async fn object(&self, bucket: &str, key: &str) -> Vec<u8> {
        let scratch = tempfile::tempdir().expect("temp dir");
        let store =
            RecordingStore::open(&self.location(bucket, ""), scratch.path()).expect("S3 client");
        let key = RecordingKey::stored(key).expect("key");
        store
            .read(&key, None)
            .await
            .expect("get object")
            .unwrap_or_else(|| panic!("no object {key}"))
            .bytes()
            .await
            .expect("object")
            .to_vec()
    }

    /// The recordings location for `bucket` under `prefix` on this server,
    /// with the options `AWS_*` variables would give.
    fn location(&self, bucket: &str, prefix: &str) -> RecordingsLocation {
        let options = [
            ("aws_endpoint", self.endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", "testing"),
            ("aws_secret_access_key", "testing"),
        ];
        RecordingsLocation::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
            options: options
                .iter()
                .map(|(name, value)| ((*name).to_string(), (*value).to_string()))
                .collect(),
        }
    }
}

/// An agent for `ws`.
async fn agent(app: &TestApp, ws: &Workspace) -> String {
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Recorder",
                "welcomeMessage": "Hello from Voxline.",
                "prompt": "You confirm appointments.",
            }),
        )
        .await;
    agent["id"].as_str().expect("agent id").to_string()
}

/// Places a call and waits until it has ended; returns its detail.
async fn finished_call(app: &TestApp, ws: &Workspace, agent: &str) -> Value {
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012310", "variables": {"simScript": ["Goodbye."]}}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();
    eventually(CALL_WAIT, "the call to end", || async {
        let call = app.get(&ws.key, &format!("/api/calls/{id}")).await.body;
        let status = call["rawStatus"].as_str().unwrap_or_default();
        (!["queued", "ringing", "in-progress"].contains(&status)).then_some(call)
    })
    .await
}

/// Status, headers and body of a GET of `url` (with `key` when not empty).
async fn fetch(
    app: &TestApp,
    key: &str,
    url: &str,
    range: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = app.http.request(Method::GET, url);
    if !key.is_empty() {
        req = req.bearer_auth(key);
    }
    if let Some(range) = range {
        req = req.header("range", range);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.bytes().await.expect("body").to_vec())
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// Files under `dir`, at any depth.
fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|entry| {
                let path = entry.path();
                if path.is_dir() { files_under(&path) } else { 1 }
            })
            .sum()
    })
}

#[tokio::test]
async fn a_recording_made_on_one_node_is_in_the_bucket_and_served_by_another() {
    let Some(moto) =
        Moto::start("a_recording_made_on_one_node_is_in_the_bucket_and_served_by_another").await
    else {
        return;
    };
    let bucket = "voxline-recordings";
    moto.create_bucket(bucket).await;
    let location = moto.location(bucket, "prod/calls");
    let clock = ManualClock::new(Utc::now());
    let app = TestApp::spawn_with(clock.clone(), HashMap::new(), |s| {
        s.recordings = location.clone();
    })
    .await;
    let ws = app.calling_workspace("Shared", 2).await;
    let agent = agent(&app, &ws).await;
    let call = finished_call(&app, &ws, &agent).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    let id = call["id"].as_str().expect("id").to_string();

    // In the bucket under the prefix, and nowhere on the recording node's disk.
    let key = format!("prod/calls/{}/{id}.wav", ws.org_id);
    let listed = moto.list(bucket, "prod/calls/").await;
    // The WAV, and its Ogg Opus copy when built with `opus`.
    let formats = if cfg!(feature = "opus") { 2 } else { 1 };
    assert_eq!(listed.len(), formats, "{listed:?}");
    let listed: Vec<_> = listed
        .into_iter()
        .filter(|(k, _)| k.ends_with(".wav"))
        .collect();
    assert_eq!(listed[0].0, key);
    let stored = moto.object(bucket, &key).await;
    assert_eq!(listed[0].1, stored.len() as u64);
    assert_eq!(&stored[..4], b"RIFF");
    // 8 kHz, 16-bit stereo: 32,000 bytes a second; the call lasted seconds.
    assert!(stored.len() > 44 + 32_000, "{} bytes", stored.len());
    for dir in ["recordings", "recordings-staging", "recordings-unsent"] {
        assert_eq!(files_under(&app.data_dir.join(dir)), 0, "{dir}");
    }

    // Another node (its own data directory) on the same database and bucket.
    let peer = app
        .spawn_peer(|s| {
            s.recordings = location.clone();
        })
        .await;
    assert_ne!(peer.data_dir, app.data_dir);
    let api = format!("{}/api/calls/{id}/recording", peer.base);
    let (status, headers, whole) = fetch(&peer, &ws.key, &api, None).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), "audio/wav");
    assert_eq!(header(&headers, "accept-ranges"), "bytes");
    assert_eq!(whole, stored);
    let len = stored.len();
    let (status, headers, body) = fetch(&peer, &ws.key, &api, Some("bytes=0-43")).await;
    assert_eq!(status, 206);
    assert_eq!(
        header(&headers, "content-range"),
        format!("bytes 0-43/{len}")
    );
    assert_eq!(body, stored[..44]);
    let (status, headers, body) = fetch(&peer, &ws.key, &api, Some("bytes=-100")).await;
    assert_eq!(status, 206);
    assert_eq!(
        header(&headers, "content-range"),
        format!("bytes {}-{}/{len}", len - 100, len - 1)
    );
    assert_eq!(body, stored[len - 100..]);
    let (status, headers, body) = fetch(&peer, &ws.key, &api, Some(&format!("bytes={len}-"))).await;
    assert_eq!(status, 416);
    assert_eq!(header(&headers, "content-range"), format!("bytes */{len}"));
    let message: Value = serde_json::from_slice(&body).expect("JSON error");
    assert!(message["message"].is_string(), "{message}");

    // A link signed by the recording node works on the other, without a key.
    let link = app
        .get(&ws.key, &format!("/api/calls/{id}/recording-url"))
        .await
        .expect(200)
        .body;
    let url = link["url"].as_str().expect("url");
    let on_peer = url.replacen(&app.base, &peer.base, 1);
    assert_ne!(on_peer, url);
    let (status, _, body) = fetch(&peer, "", &on_peer, Some("bytes=4-11")).await;
    assert_eq!(status, 206);
    assert_eq!(body, stored[4..12]);
    let (status, _, body) = fetch(&peer, "", &on_peer, None).await;
    assert_eq!(status, 200);
    assert_eq!(body, stored);

    // Past retention the janitor deletes the object from the bucket.
    clock.advance(chrono::Duration::days(91));
    eventually(
        Duration::from_secs(15),
        "the recording to leave the bucket",
        || async {
            moto.list(bucket, "prod/calls/")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    eventually(Duration::from_secs(10), "the url to read null", || async {
        let link = app
            .get(&ws.key, &format!("/api/calls/{id}/recording-url"))
            .await
            .expect(200)
            .body;
        link["url"].is_null().then_some(())
    })
    .await;
    let (status, _, _) = fetch(&peer, &ws.key, &api, None).await;
    assert_eq!(status, 404);
    peer.shutdown().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_recording_whose_upload_fails_is_kept_and_sent_when_the_store_is_back() {
    let Some(moto) =
        Moto::start("a_recording_whose_upload_fails_is_kept_and_sent_when_the_store_is_back").await
    else {
        return;
    };
    // The bucket does not exist yet: every upload attempt is refused.
    let bucket = "voxline-later";
    let location = moto.location(bucket, "");
    let app = TestApp::spawn_with_settings(|s| {
        s.recordings = location.clone();
    })
    .await;
    let ws = app.calling_workspace("Kept", 2).await;
    let agent = agent(&app, &ws).await;
    let call = finished_call(&app, &ws, &agent).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    let id = call["id"].as_str().expect("id").to_string();

    // Kept on the node that recorded it, out of staging.
    let kept = app
        .data_dir
        .join("recordings-unsent")
        .join(ws.org_id.to_string())
        .join(format!("{id}.wav"));
    let local = std::fs::read(&kept).expect("the recording is kept on disk");
    assert_eq!(&local[..4], b"RIFF");
    assert_eq!(files_under(&app.data_dir.join("recordings-staging")), 0);
    let api = format!("/api/calls/{id}/recording");
    app.get(&ws.key, &api).await.expect(404);

    // Once the bucket exists, the node's retry sends it and it is served.
    moto.create_bucket(bucket).await;
    let key = format!("{}/{id}.wav", ws.org_id);
    eventually(
        Duration::from_secs(15),
        "the kept recording to be sent",
        || async {
            let listed = moto.list(bucket, "").await;
            listed.iter().any(|(k, _)| *k == key).then_some(())
        },
    )
    .await;
    assert_eq!(moto.object(bucket, &key).await, local);
    assert!(!kept.exists());
    let (status, _, body) = fetch(&app, &ws.key, &format!("{}{api}", app.base), None).await;
    assert_eq!(status, 200);
    assert_eq!(body, local);
    app.shutdown().await;
}

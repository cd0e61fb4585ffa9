//! `voxline admin webhook …` beyond `add` (issue 21.6): subscriptions listed,
//! disabled (they receive nothing), enabled, deleted; the delivery log; and a
//! rotated secret that signs beside the new one for its overlap, then not.

use crate::support::{TestApp, Workspace, eventually};
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::domain::clock::ManualClock;
use voxline::webhooks::delivery::signature;

/// One request a receiver saw.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("missing header {name}"))
    }

    /// Whether the signature header holds a `v1=` entry made with `secret`,
    /// as a receiver checks it (any entry may match).
    fn verifies_with(&self, secret: &str) -> bool {
        let timestamp: i64 = self
            .header("x-service-timestamp")
            .parse()
            .expect("unix seconds");
        let expected = signature(secret, timestamp, &self.body);
        self.header("x-service-signature")
            .split(',')
            .any(|entry| entry.trim() == expected)
    }
}

type Seen = Arc<Mutex<Vec<Received>>>;

/// A webhook receiver on port 0 answering every request with `status`.
async fn receiver(status: u16) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().route(
        "/hook",
        post({
            let seen = seen.clone();
            move |headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(Received { headers, body });
                    StatusCode::from_u16(status).unwrap()
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/hook"), seen)
}

/// Subscribes `url` to `call.completed`; returns `(id, secret)`.
async fn subscribe(app: &TestApp, ws: &Workspace, url: &str) -> (String, String) {
    let sub = app
        .admin_ok(&[
            "webhook",
            "add",
            "--org",
            &ws.org_id.to_string(),
            "--url",
            url,
            "--event",
            "call.completed",
        ])
        .await;
    (
        sub["id"].as_str().expect("id").to_string(),
        sub["secret"].as_str().expect("secret").to_string(),
    )
}

/// Places a call nobody answers (80–84): it ends no-answer after the ring time.
async fn unanswered_call(app: &TestApp, ws: &Workspace, to: &str) -> String {
    let agent = app
        .create_agent(&ws.key, json!({"name": "Hook", "welcomeMessage": "Hi."}))
        .await;
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent["id"], "to": to}),
    )
    .await
    .expect(201)
    .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

async fn first_of(seen: &Seen, what: &str) -> Received {
    eventually(Duration::from_secs(20), what, || async {
        seen.lock().unwrap().first().cloned()
    })
    .await
}

async fn admin_err(app: &TestApp, args: &[&str]) -> String {
    let out = app.admin(args).await;
    assert!(!out.status.success(), "voxline admin {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn subscriptions_are_listed_disabled_enabled_deleted_and_their_deliveries_logged() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Managed", 5).await;
    let org = ws.org_id.to_string();
    let (ok_url, ok_seen) = receiver(200).await;
    let (bad_url, bad_seen) = receiver(500).await;
    let (ok_id, ok_secret) = subscribe(&app, &ws, &ok_url).await;
    let (bad_id, _) = subscribe(&app, &ws, &bad_url).await;

    let listed = app.admin_ok(&["webhook", "list", "--org", &org]).await;
    let hooks = listed["webhooks"].as_array().expect("webhooks");
    assert_eq!(hooks.len(), 2, "{listed}");
    assert_eq!(hooks[0]["id"], ok_id.as_str());
    assert_eq!(hooks[0]["url"], ok_url.as_str());
    assert_eq!(hooks[0]["events"], json!(["call.completed"]));
    assert_eq!(hooks[0]["active"], true);
    assert!(
        !listed.to_string().contains(&ok_secret),
        "secrets are shown only when made"
    );

    // A disabled subscription receives nothing; the other one still does.
    let disabled = app.admin_ok(&["webhook", "disable", &ok_id]).await;
    assert_eq!(disabled["active"], false);
    let listed = app.admin_ok(&["webhook", "list", "--org", &org]).await;
    assert_eq!(listed["webhooks"][0]["active"], false, "{listed}");
    let call = unanswered_call(&app, &ws, "+919845012381").await;
    first_of(&bad_seen, "the failing receiver's attempt").await;
    let failed = eventually(Duration::from_secs(10), "the failure logged", || async {
        let log = app
            .admin_ok(&["webhook", "deliveries", "--org", &org, "--failed"])
            .await;
        (log["deliveries"][0]["attempts"] == 1).then_some(log)
    })
    .await;
    let rows = failed["deliveries"].as_array().expect("deliveries");
    assert_eq!(rows.len(), 1, "{failed}");
    let row = &rows[0];
    assert_eq!(row["subscriptionId"], bad_id.as_str());
    assert_eq!(row["event"], "call.completed");
    assert_eq!(row["callId"], call.as_str());
    assert!(
        row["eventId"]
            .as_str()
            .is_some_and(|e| e.starts_with("evt_"))
    );
    assert_eq!(row["status"], "pending", "retried later");
    assert!(
        row["lastError"].as_str().is_some_and(|e| e.contains("500")),
        "{row}"
    );
    assert!(row["nextAttemptAt"].is_string(), "{row}");
    assert_eq!(row["deliveredAt"], Value::Null);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        ok_seen.lock().unwrap().is_empty(),
        "a disabled subscription receives nothing"
    );

    // Enabled again, it receives the next call's event; its delivery is logged
    // as delivered, and --failed leaves it out.
    let enabled = app.admin_ok(&["webhook", "enable", &ok_id]).await;
    assert_eq!(enabled["active"], true);
    let second = unanswered_call(&app, &ws, "+919845012382").await;
    let got = first_of(&ok_seen, "the enabled subscription's delivery").await;
    assert!(got.verifies_with(&ok_secret));
    let mine = eventually(Duration::from_secs(10), "the delivery logged", || async {
        let log = app
            .admin_ok(&[
                "webhook",
                "deliveries",
                "--org",
                &org,
                "--subscription",
                &ok_id,
            ])
            .await;
        (log["deliveries"][0]["status"] == "delivered").then_some(log)
    })
    .await;
    let rows = mine["deliveries"].as_array().expect("deliveries");
    assert_eq!(rows.len(), 1, "{mine}");
    assert_eq!(rows[0]["callId"], second.as_str());
    assert_eq!(rows[0]["attempts"], 1);
    assert!(rows[0]["deliveredAt"].is_string());
    assert_eq!(rows[0]["nextAttemptAt"], Value::Null);
    let only_failed = app
        .admin_ok(&[
            "webhook",
            "deliveries",
            "--org",
            &org,
            "--failed",
            "--subscription",
            &ok_id,
        ])
        .await;
    assert_eq!(only_failed["deliveries"], json!([]));
    let everything = app
        .admin_ok(&["webhook", "deliveries", "--org", &org])
        .await;
    assert_eq!(everything["deliveries"].as_array().map(Vec::len), Some(3));

    // Deleted: gone from the list with its log, and no longer named.
    let deleted = app.admin_ok(&["webhook", "delete", &bad_id]).await;
    assert_eq!(deleted["deleted"], true);
    let listed = app.admin_ok(&["webhook", "list", "--org", &org]).await;
    assert_eq!(listed["webhooks"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["webhooks"][0]["id"], ok_id.as_str());
    let left = app
        .admin_ok(&["webhook", "deliveries", "--org", &org])
        .await;
    assert_eq!(left["deliveries"].as_array().map(Vec::len), Some(1));
    let err = admin_err(&app, &["webhook", "disable", &bad_id]).await;
    assert!(err.contains("no webhook subscription"), "{err}");
    let err = admin_err(&app, &["webhook", "enable", "not-an-id"]).await;
    assert!(err.contains("no webhook subscription"), "{err}");

    // Another workspace's subscription is not this workspace's log.
    let other = app.calling_workspace("Other", 1).await;
    let err = admin_err(
        &app,
        &[
            "webhook",
            "deliveries",
            "--org",
            &other.org_id.to_string(),
            "--subscription",
            &ok_id,
        ],
    )
    .await;
    assert!(err.contains("not in workspace"), "{err}");
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_new_one_for_its_overlap_then_not() {
    // The server's clock starts at the wall clock the CLI stamps the overlap with.
    let clock = ManualClock::new(chrono::Utc::now());
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.calling_workspace("Rotation", 5).await;
    let org = ws.org_id.to_string();
    let (url, seen) = receiver(200).await;
    let (id, old) = subscribe(&app, &ws, &url).await;

    let bad = admin_err(
        &app,
        &["webhook", "rotate-secret", &id, "--overlap", "soon"],
    )
    .await;
    assert!(bad.contains("--overlap"), "{bad}");
    let rotated = app
        .admin_ok(&["webhook", "rotate-secret", &id, "--overlap", "1h"])
        .await;
    let new = rotated["secret"].as_str().expect("secret").to_string();
    assert_ne!(new, old);
    assert!(new.starts_with("whsec_"), "{new}");
    assert_eq!(rotated["overlap"], "1h");
    let listed = app.admin_ok(&["webhook", "list", "--org", &org]).await;
    assert_eq!(
        listed["webhooks"][0]["previousSecretValidUntil"],
        rotated["previousSecretValidUntil"]
    );

    // During the overlap: two v1= entries, the new secret's first; a receiver
    // that knows either secret accepts the delivery.
    let call = unanswered_call(&app, &ws, "+919845012383").await;
    let during = first_of(&seen, "the delivery during the overlap").await;
    let entries: Vec<&str> = during.header("x-service-signature").split(',').collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().all(|e| e.starts_with("v1=")), "{entries:?}");
    assert!(during.verifies_with(&new));
    assert!(during.verifies_with(&old));
    let timestamp: i64 = during.header("x-service-timestamp").parse().unwrap();
    assert_eq!(entries[0], signature(&new, timestamp, &during.body));

    // After it: only the new secret signs.
    clock.advance(chrono::Duration::hours(2));
    app.post_empty(&ws.key, &format!("/api/calls/{call}/redeliver-webhook"))
        .await
        .expect(200);
    let after = eventually(Duration::from_secs(10), "the delivery after it", || async {
        seen.lock().unwrap().get(1).cloned()
    })
    .await;
    assert!(after.verifies_with(&new));
    assert!(!after.verifies_with(&old), "the old secret has expired");
    assert_eq!(
        after.header("x-service-signature"),
        signature(
            &new,
            after.header("x-service-timestamp").parse().unwrap(),
            &after.body
        ),
        "one secret, one entry: the header as before any rotation"
    );
}

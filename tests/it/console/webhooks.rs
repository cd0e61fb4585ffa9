//! The webhooks page: endpoints added with their URL checked at the field
//! and their secret shown once; disabled, enabled, deleted; the secret
//! rotated with an overlap; the delivery log with redeliver. Admins and
//! owners only, each workspace its own endpoints.

use super::support::{Browser, ConsoleClient, person};
use crate::support::{TestApp, Workspace, eventually};
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use fantoccini::Locator;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::domain::Role;

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A webhook receiver on port 0 answering 200 to every delivery.
async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().route(
        "/hook",
        post({
            let seen = seen.clone();
            move |headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push((headers, body));
                    StatusCode::OK
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

/// The secret in a page that just made one.
fn shown_secret(html: &str) -> String {
    let marker = "id=\"new-secret-value\">";
    let at = html.find(marker).expect("a secret on the page") + marker.len();
    html[at..at + html[at..].find('<').unwrap()].to_string()
}

/// Places a call nobody answers: it ends no-answer after the ring time.
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
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn endpoints_are_checked_shown_once_managed_and_their_deliveries_redelivered() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Hooks", 5).await;
    let admin = person(&app, &ws, Role::Admin).await;
    let client = ConsoleClient::sign_in(&app, &admin).await;
    let (url, seen) = receiver().await;

    // Refused at the field, with what was typed kept.
    let private = client
        .post_form(
            "/webhooks",
            &[("url", "http://10.1.2.3/hook"), ("event", "call.completed")],
        )
        .await;
    assert_eq!(private.status, 422, "{}", private.body);
    assert!(private.body.contains("URL is refused"), "{}", private.body);
    assert!(private.body.contains("value=\"http://10.1.2.3/hook\""));
    let scheme = client
        .post_form(
            "/webhooks",
            &[("url", "ftp://example.com/x"), ("event", "call.completed")],
        )
        .await;
    assert_eq!(scheme.status, 422);
    assert!(scheme.body.contains("must be http or https"));
    let no_events = client
        .post_form("/webhooks", &[("url", url.as_str())])
        .await;
    assert_eq!(no_events.status, 422);
    assert!(no_events.body.contains("Choose at least one event"));
    let unknown = client
        .post_form(
            "/webhooks",
            &[("url", url.as_str()), ("event", "call.started")],
        )
        .await;
    assert_eq!(unknown.status, 422);
    assert!(
        app.store()
            .all_webhooks(ws.org_id)
            .await
            .unwrap()
            .is_empty()
    );

    // Added: the secret is shown once and signs the deliveries.
    let added = client
        .post_form(
            "/webhooks",
            &[
                ("url", url.as_str()),
                ("event", "call.completed"),
                ("event", "rating.completed"),
            ],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(added.headers["cache-control"], "no-store");
    let secret = shown_secret(&added.body);
    assert!(secret.starts_with("whsec_"), "{secret}");
    let hooks = app.store().all_webhooks(ws.org_id).await.unwrap();
    assert_eq!(hooks.len(), 1);
    let hook = &hooks[0];
    assert_eq!(hook.secret, secret);
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&hook.events).unwrap(),
        ["call.completed", "rating.completed"]
    );
    let page = client.get("/webhooks").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&url));
    assert!(
        !page.body.contains(&secret),
        "the secret is shown only once"
    );

    // A call's event arrives and shows in the log; redeliver sends it again
    // with the same event id.
    let call = unanswered_call(&app, &ws, "+919845012381").await;
    eventually(Duration::from_secs(30), "the first delivery", || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let log = eventually(Duration::from_secs(10), "the delivery logged", || async {
        let page = client.get("/webhooks").await;
        page.body.contains("status-delivered").then_some(page)
    })
    .await;
    assert!(log.body.contains(&call), "{}", log.body);
    let redelivered = client
        .post_form("/webhooks/redeliver", &[("call_id", call.as_str())])
        .await;
    assert_eq!(redelivered.status, 303, "{}", redelivered.body);
    eventually(Duration::from_secs(10), "the redelivery", || async {
        (seen.lock().unwrap().len() >= 2).then_some(())
    })
    .await;
    let ids: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| {
            let event: serde_json::Value = serde_json::from_slice(body).unwrap();
            event["eventId"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids[0], ids[1], "{ids:?}");
    let unknown_call = client
        .post_form("/webhooks/redeliver", &[("call_id", "not-a-call")])
        .await;
    assert_eq!(unknown_call.status, 404);

    // Rotated: a new secret, shown once; the old one signs for the overlap.
    let rotated = client
        .post_form(
            &format!("/webhooks/{}/rotate", hook.id),
            &[("overlap", "24h")],
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let new_secret = shown_secret(&rotated.body);
    assert_ne!(new_secret, secret);
    let row = app.store().webhook(hook.id).await.unwrap().unwrap();
    assert_eq!(row.secret, new_secret);
    let until = row.previous_secret_expires_at.expect("an overlap");
    let hours = (until - app.now().timestamp_millis()) / 3_600_000;
    assert!((23..=24).contains(&hours), "{hours}");
    let odd = client
        .post_form(
            &format!("/webhooks/{}/rotate", hook.id),
            &[("overlap", "99y")],
        )
        .await;
    assert_eq!(odd.status, 400);

    // Disabled, enabled, deleted.
    let path = |action: &str| format!("/webhooks/{}/{action}", hook.id);
    assert_eq!(client.post_form(&path("disable"), &[]).await.status, 303);
    assert!(!app.store().webhook(hook.id).await.unwrap().unwrap().active);
    assert_eq!(client.post_form(&path("enable"), &[]).await.status, 303);
    assert!(app.store().webhook(hook.id).await.unwrap().unwrap().active);
    assert_eq!(client.post_form(&path("delete"), &[]).await.status, 303);
    assert!(app.store().webhook(hook.id).await.unwrap().is_none());
}

#[tokio::test]
async fn members_see_no_endpoints_and_workspaces_keep_to_their_own() {
    let app = TestApp::spawn().await;
    let mine = app.workspace("Mine").await;
    let theirs = app.workspace("Theirs").await;
    let their_hook = app
        .store()
        .insert_webhook(
            theirs.org_id,
            "https://theirs.example/hook",
            &["call.completed".to_string()],
            "whsec_theirs",
            0,
        )
        .await
        .unwrap();
    let member = person(&app, &mine, Role::Member).await;
    let client = ConsoleClient::sign_in(&app, &member).await;
    assert_eq!(client.get("/webhooks").await.status, 403);
    let add = client
        .post_form(
            "/webhooks",
            &[("url", "https://a.example/x"), ("event", "call.completed")],
        )
        .await;
    assert_eq!(add.status, 403);

    let owner = person(&app, &mine, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &owner).await;
    let page = client.get("/webhooks").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("theirs.example"));
    for action in ["disable", "delete", "rotate"] {
        let reach = client
            .post_form(
                &format!("/webhooks/{their_hook}/{action}"),
                &[("overlap", "0s")],
            )
            .await;
        assert_eq!(reach.status, 404, "{action}");
    }
    let row = app.store().webhook(their_hook).await.unwrap().unwrap();
    assert!(row.active);
    assert_eq!(row.secret, "whsec_theirs");
}

#[tokio::test]
async fn a_browser_adds_an_endpoint_and_sees_its_secret_once() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.workspace("Hooks").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let (url, _) = receiver().await;
    browser.sign_in(&app, &owner).await;
    browser.goto(&app, "/webhooks").await;
    browser.fill(Locator::Id("webhook-url"), &url).await;
    browser
        .click(Locator::Css("form.webhook-add button[type=submit]"))
        .await;
    let secret = browser.text(Locator::Id("new-secret-value")).await;
    assert!(secret.trim().starts_with("whsec_"), "{secret}");
    let table = browser
        .client
        .find(Locator::Css("table.webhooks-table"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(table.contains(&url), "{table}");
    browser.screenshot("webhooks").await;
    browser.close().await;
}

//! Spec Errors: every error is `{message}` JSON; 400 names the field; 413, 415, 405.

use crate::support::{Reply, TestApp};
use reqwest::Method;
use serde_json::json;

fn assert_error(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status, "{reply:?}");
    let object = reply
        .body
        .as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {reply:?}"));
    assert!(!reply.message().is_empty(), "{reply:?}");
    assert!(object.contains_key("message"));
}

#[tokio::test]
async fn malformed_json_wrong_types_and_missing_fields_are_400_naming_the_field() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let json = "application/json";

    let r = app
        .raw(&ws.key, Method::POST, "/api/agents", json, r#"{"name": "#)
        .await;
    assert_error(&r, 400);
    assert!(
        !r.message().contains("line 1"),
        "no parser positions: {}",
        r.text
    );
    let r = app
        .raw(&ws.key, Method::POST, "/api/agents", json, "not json")
        .await;
    assert_error(&r, 400);
    let r = app
        .raw(&ws.key, Method::POST, "/api/agents", json, "[1,2]")
        .await;
    assert_error(&r, 400);
    let r = app
        .raw(&ws.key, Method::POST, "/api/agents", json, "")
        .await;
    assert_error(&r, 400);

    for (body, field) in [
        (r#"{"name": true}"#, "name"),
        (r#"{"name": "a", "interruptible": "yes"}"#, "interruptible"),
        (
            r#"{"name": "a", "endCallPhrases": "bye"}"#,
            "endCallPhrases",
        ),
        (
            r#"{"name": "a", "retryPolicy": {"maxAttempts": "x"}}"#,
            "retryPolicy.maxAttempts",
        ),
        (
            r#"{"name": "a", "keypad": {"prompt": "p", "options": [{"digit": 1}]}}"#,
            "keypad.options[0].digit",
        ),
        (r#"{"prompt": "no name"}"#, "name"),
    ] {
        let r = app
            .raw(&ws.key, Method::POST, "/api/agents", json, body)
            .await;
        assert_error(&r, 400);
        assert!(
            r.message().contains(field),
            "{body}: {} should name {field}",
            r.text
        );
    }
}

#[tokio::test]
async fn wrong_content_type_is_415_json() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let r = app
        .raw(
            &ws.key,
            Method::POST,
            "/api/agents",
            "text/plain",
            r#"{"name":"a"}"#,
        )
        .await;
    assert_error(&r, 415);
    assert!(r.message().contains("application/json"), "{}", r.text);
}

#[tokio::test]
async fn oversized_body_is_413_json() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let big = format!(
        r#"{{"name":"big","prompt":"{}"}}"#,
        "a".repeat(2 * 1024 * 1024)
    );
    let r = app
        .raw(
            &ws.key,
            Method::POST,
            "/api/agents",
            "application/json",
            big.clone(),
        )
        .await;
    assert_error(&r, 413);
    let id = app.create_agent(&ws.key, json!({"name": "small"})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = app
        .raw(
            &ws.key,
            Method::PATCH,
            &format!("/api/agents/{id}"),
            "application/json",
            big,
        )
        .await;
    assert_error(&r, 413);
    // Just under the limit is fine (the prompt cap of 100,000 chars answers 400, not 413).
    let r = app
        .post(
            &ws.key,
            "/api/agents",
            json!({"name": "a", "prompt": "a".repeat(200_000)}),
        )
        .await;
    assert_error(&r, 400);
    assert!(r.message().contains("prompt"));
}

#[tokio::test]
async fn wrong_method_is_405_json() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let id = uuid::Uuid::now_v7();
    for (method, path) in [
        (Method::PUT, "/api/agents".to_string()),
        (Method::DELETE, "/api/agents".to_string()),
        (Method::PUT, format!("/api/agents/{id}")),
        (Method::GET, format!("/api/agents/{id}/restore")),
        (Method::POST, "/api/wallet".to_string()),
        (Method::DELETE, "/api/numbers".to_string()),
        (Method::POST, "/api/balances".to_string()),
        (Method::POST, "/healthz".to_string()),
    ] {
        let r = crate::support::reply(
            app.request(&ws.key, method.clone(), &path)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(&r, 405);
        assert!(
            r.message().contains(method.as_str()),
            "{method} {path}: {}",
            r.text
        );
    }
}

#[tokio::test]
async fn every_error_class_is_json_with_message() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    app.set_limits(ws.key_id, 8, 100).await;
    let cases: Vec<(Reply, u16)> = vec![
        (app.get("", "/api/agents").await, 401),
        (app.get(&ws.key, "/api/settings").await, 403),
        (app.get(&ws.key, "/api/agents/zzz").await, 404),
        (app.get(&ws.key, "/api/agents/zzz/zzz").await, 404),
        (app.get("", "/nowhere").await, 404),
        (app.post(&ws.key, "/api/agents", json!({})).await, 400),
        (
            app.raw(&ws.key, Method::POST, "/api/agents", "text/csv", "a,b")
                .await,
            415,
        ),
        (
            crate::support::reply(
                app.request(&ws.key, Method::PUT, "/api/agents")
                    .send()
                    .await
                    .unwrap(),
            )
            .await,
            405,
        ),
    ];
    for (reply, status) in &cases {
        assert_error(reply, *status);
    }
    // Use up the rest of the cap, then the 429.
    while app.get(&ws.key, "/api/wallet").await.status == 200 {}
    let r = app.get(&ws.key, "/api/wallet").await;
    assert_error(&r, 429);
    assert!(r.header("retry-after").is_some());
}

#[tokio::test]
async fn a_failing_database_answers_500_without_internal_details() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    app.get(&ws.key, "/api/agents").await.expect(200);
    // Pull the database out from under the running server.
    app.store().close().await;
    let r = app.get(&ws.key, "/api/agents").await;
    assert_error(&r, 500);
    assert_eq!(r.message(), "Internal server error");
    assert!(
        r.header("x-request-id").is_some(),
        "logged with a request id"
    );
    let ready = app.get("", "/readyz").await;
    assert_error(&ready, 503);
    assert!(
        !ready.text.to_lowercase().contains("pool"),
        "{}",
        ready.text
    );
    // Liveness does not depend on the database.
    app.get("", "/healthz").await.expect(200);
}

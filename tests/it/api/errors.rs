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

    // Not JSON: the parser's reason with line and column.
    for (body, message) in [
        (
            r#"{"name": "#,
            "the body is not valid JSON: EOF while parsing a value at line 1 column 9",
        ),
        (
            "not json",
            "the body is not valid JSON: expected ident at line 1 column 2",
        ),
        (
            "{\n  \"name\": \"a\",\n}",
            "the body is not valid JSON: trailing comma at line 3 column 1",
        ),
        (
            "",
            "the body is not valid JSON: EOF while parsing a value at line 1 column 0",
        ),
    ] {
        let r = app
            .raw(&ws.key, Method::POST, "/api/agents", json, body)
            .await;
        assert_error(&r, 400);
        assert_eq!(r.message(), message, "{body:?}");
    }
    // JSON, but not an object.
    for body in ["[1,2]", r#""name""#, "42", "null", "true"] {
        let r = app
            .raw(&ws.key, Method::POST, "/api/agents", json, body)
            .await;
        assert_error(&r, 400);
        assert_eq!(r.message(), "the body must be a JSON object", "{body}");
    }

    // A wrong type names the field path and the type expected there.
    for (body, message) in [
        (r#"{"name": true}"#, "name: expected a string"),
        (
            r#"{"name": "a", "interruptible": "yes"}"#,
            "interruptible: expected a boolean",
        ),
        (
            r#"{"name": "a", "endCallPhrases": "bye"}"#,
            "endCallPhrases: expected an array",
        ),
        (
            r#"{"name": "a", "retryPolicy": {"maxAttempts": "x"}}"#,
            "retryPolicy.maxAttempts: expected an integer from 0 to 4294967295",
        ),
        (
            r#"{"name": "a", "silenceTimeoutSeconds": 20.5}"#,
            "silenceTimeoutSeconds: expected an integer from 0 to 4294967295",
        ),
        (
            r#"{"name": "a", "silenceTimeoutSeconds": -1}"#,
            "silenceTimeoutSeconds: expected an integer from 0 to 4294967295",
        ),
        (
            r#"{"name": "a", "keypad": {"prompt": "p", "options": [{"digit": 1}]}}"#,
            "keypad.options[0].digit: expected a string",
        ),
    ] {
        let r = app
            .raw(&ws.key, Method::POST, "/api/agents", json, body)
            .await;
        assert_error(&r, 400);
        assert_eq!(r.message(), message, "{body}");
    }
    let r = app
        .raw(
            &ws.key,
            Method::POST,
            "/api/agents",
            json,
            r#"{"prompt": "no name"}"#,
        )
        .await;
    assert_error(&r, 400);
    assert!(r.message().contains("name"), "{}", r.text);
    assert_eq!(
        app.get(&ws.key, "/api/agents").await.expect(200).body,
        json!([]),
        "nothing stored"
    );
}

#[tokio::test]
async fn every_json_route_answers_the_same_json_errors() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let agent = app.create_agent(&ws.key, json!({"name": "a"})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let json = "application/json";
    for (method, path) in [
        (Method::POST, "/api/calls".to_string()),
        (Method::POST, "/api/alert".to_string()),
        (Method::POST, format!("/api/agents/{agent}/test-call")),
        (Method::PATCH, format!("/api/agents/{agent}")),
        (Method::POST, "/api/batches".to_string()),
        (Method::POST, "/api/campaigns".to_string()),
    ] {
        let r = app.raw(&ws.key, method.clone(), &path, json, "{").await;
        assert_error(&r, 400);
        assert_eq!(
            r.message(),
            "the body is not valid JSON: EOF while parsing an object at line 1 column 1",
            "{method} {path}"
        );
        let r = app.raw(&ws.key, method.clone(), &path, json, "[{}]").await;
        assert_error(&r, 400);
        assert_eq!(
            r.message(),
            "the body must be a JSON object",
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn a_whole_number_float_is_accepted_for_an_integer_field() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let r = app
        .raw(
            &ws.key,
            Method::POST,
            "/api/agents",
            "application/json",
            r#"{"name": "a", "silenceTimeoutSeconds": 20.0, "maxDurationSeconds": 3e2,
                "retryPolicy": {"maxAttempts": 2.0}}"#,
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["id"].as_str().unwrap();
    let agent = app
        .get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(agent["silenceTimeoutSeconds"], 20, "{agent}");
    assert_eq!(agent["maxDurationSeconds"], 300, "{agent}");
    assert_eq!(agent["retryPolicy"]["maxAttempts"], 2, "{agent}");
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

//! Spec Authentication: bearer keys, revocation, workspace scoping and the
//! twelve mounts.

use crate::support::{TestApp, Workspace};
use reqwest::Method;
use serde_json::json;

fn assert_unauthorized(reply: &crate::support::Reply) {
    assert_eq!(reply.status, 401, "{reply:?}");
    assert!(!reply.message().is_empty());
    assert!(
        reply.header("x-ratelimit-limit").is_none(),
        "an unidentified caller gets no quota headers"
    );
}

#[tokio::test]
async fn missing_malformed_and_wrong_keys_get_401() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;

    let none = app.get("", "/api/agents").await;
    assert_unauthorized(&none);
    assert!(none.message().contains("Authorization"), "{}", none.text);

    // A well-formed key that was never issued.
    let forged = format!("acai_{}", "x".repeat(43));
    assert_unauthorized(&app.get(&forged, "/api/agents").await);
    // Not our key shape at all.
    assert_unauthorized(&app.get("acai_short", "/api/agents").await);
    // The right key under the wrong scheme.
    let basic = crate::support::reply(
        app.request("", Method::GET, "/api/agents")
            .header("authorization", format!("Basic {}", ws.key))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_unauthorized(&basic);
    // One character off.
    let mut tampered = ws.key.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'a' { 'b' } else { 'a' });
    assert_unauthorized(&app.get(&tampered, "/api/agents").await);

    // Auth comes first, even outside the mounts and on unknown paths.
    assert_unauthorized(&app.get("", "/api/settings").await);
    assert_unauthorized(&app.get("", "/api/agents/x/y").await);
    assert_unauthorized(&app.post("", "/api/agents", json!({"name": "x"})).await);

    // The right key works, with a case-insensitive scheme.
    app.get(&ws.key, "/api/agents").await.expect(200);
    let lower = crate::support::reply(
        app.request("", Method::GET, "/api/agents")
            .header("authorization", format!("bearer {}", ws.key))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(lower.status, 200);
}

#[tokio::test]
async fn revoked_key_gets_401_on_its_very_next_request() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let (_other_id, other_key) = app.key(ws.org_id, "second integration").await;
    app.get(&ws.key, "/api/agents").await.expect(200);
    app.get(&ws.key, "/api/wallet").await.expect(200);

    assert!(
        app.store()
            .revoke_api_key(ws.key_id, app.now().timestamp_millis())
            .await
            .unwrap()
    );
    let reply = app.get(&ws.key, "/api/agents").await;
    assert_unauthorized(&reply);
    assert!(reply.message().contains("revoked"), "{}", reply.text);
    // Still refused on later requests and on every route.
    assert_unauthorized(&app.post(&ws.key, "/api/agents", json!({"name": "x"})).await);
    // The workspace's other key is unaffected.
    app.get(&other_key, "/api/agents").await.expect(200);
}

async fn two_workspaces(app: &TestApp) -> (Workspace, Workspace, String) {
    let a = app.workspace("A").await;
    let b = app.workspace("B").await;
    let agent = app.create_agent(&b.key, json!({"name": "B's agent"})).await;
    (a, b, agent["id"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn another_workspace_record_is_404_exactly_like_a_missing_one() {
    let app = TestApp::spawn().await;
    let (a, b, b_agent) = two_workspaces(&app).await;
    let missing = uuid::Uuid::now_v7().to_string();

    let foreign = app.get(&a.key, &format!("/api/agents/{b_agent}")).await;
    let absent = app.get(&a.key, &format!("/api/agents/{missing}")).await;
    assert_eq!(foreign.status, 404);
    assert_eq!(absent.status, 404);
    // Same shape and wording; only the echoed id differs.
    assert_eq!(
        foreign.text.replace(&b_agent, "ID"),
        absent.text.replace(&missing, "ID")
    );
    assert_eq!(
        foreign.body,
        json!({"message": format!("Agent {b_agent} not found")})
    );

    // Every verb on the foreign agent is a 404 too, and changes nothing.
    for (method, path) in [
        (Method::PATCH, format!("/api/agents/{b_agent}")),
        (Method::DELETE, format!("/api/agents/{b_agent}")),
        (Method::POST, format!("/api/agents/{b_agent}/restore")),
        (Method::POST, format!("/api/agents/{b_agent}/activate")),
        (Method::POST, format!("/api/agents/{b_agent}/deactivate")),
    ] {
        let reply = app
            .raw(
                &a.key,
                method.clone(),
                &path,
                "application/json",
                r#"{"name":"hijacked"}"#,
            )
            .await;
        assert_eq!(reply.status, 404, "{method} {path}: {}", reply.text);
        assert_eq!(reply.body, foreign.body, "{method} {path}");
    }
    let list = app.get(&a.key, "/api/agents").await.expect(200);
    assert_eq!(list.body, json!([]));
    let own = app
        .get(&b.key, &format!("/api/agents/{b_agent}"))
        .await
        .expect(200);
    assert_eq!(own.body["name"], "B's agent");
    assert_eq!(own.body["status"], "active");
}

#[tokio::test]
async fn paths_outside_the_twelve_mounts_answer_403() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    for (method, path) in [
        (Method::GET, "/api/settings"),
        (Method::GET, "/api/credentials"),
        (Method::GET, "/api/integrations"),
        (Method::GET, "/api/billing"),
        (Method::GET, "/api/team/members"),
        (Method::GET, "/api/admin/orgs"),
        (Method::GET, "/api/api-keys"),
        (Method::POST, "/api/keys"),
        (Method::DELETE, "/api/webhooks/1"),
        (Method::GET, "/api/agentsx"),
        (Method::GET, "/api"),
    ] {
        let reply = crate::support::reply(
            app.request(&ws.key, method.clone(), path)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(reply.status, 403, "{method} {path}: {}", reply.text);
        assert!(
            reply.message().contains("not available via API key"),
            "{method} {path}: {}",
            reply.text
        );
        assert!(
            reply.header("x-ratelimit-limit").is_some(),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn unknown_paths_inside_a_mount_answer_cannot_method_path() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let agent = app.create_agent(&ws.key, json!({"name": "x"})).await;
    let id = agent["id"].as_str().unwrap();
    for (method, path) in [
        (Method::GET, format!("/api/agents/{id}/nope")),
        (Method::POST, format!("/api/agents/{id}/explode")),
        (Method::GET, "/api/wallet/nope".to_string()),
        (Method::POST, "/api/numbers/buy/now".to_string()),
        (Method::GET, "/api/recordings/a/b/c".to_string()),
        (Method::DELETE, "/api/balances/x".to_string()),
        (Method::GET, "/api/dashboard".to_string()),
        (Method::GET, "/api/analytics".to_string()),
    ] {
        let reply = crate::support::reply(
            app.request(&ws.key, method.clone(), &path)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(reply.status, 404, "{method} {path}: {}", reply.text);
        assert_eq!(
            reply.body,
            json!({"message": format!("Cannot {method} {path}")}),
            "{method} {path}"
        );
        assert!(reply.header("x-ratelimit-remaining").is_some());
    }
    // Outside /api entirely: no key needed, same style.
    let reply = app.get("", "/nope").await.expect(404);
    assert_eq!(reply.body, json!({"message": "Cannot GET /nope"}));
}

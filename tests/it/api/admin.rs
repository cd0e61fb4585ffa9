//! `voxline admin …` (decisions §3): the real binary, on the running server's
//! database, each command printing exactly one JSON object.

use crate::support::{TestApp, eventually};
use serde_json::{Value, json};
use std::time::Duration;

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

#[tokio::test]
async fn every_command_prints_one_json_object_while_the_server_runs() {
    let app = TestApp::spawn().await;

    let org = app.admin_ok(&["org", "create", "--name", "Acme"]).await;
    assert_eq!(org["name"], "Acme");
    assert_eq!(org["concurrency"], 10);
    assert_eq!(org["minuteQuota"], 10_000);
    let sized = app
        .admin_ok(&[
            "org",
            "create",
            "--name",
            "Small",
            "--concurrency",
            "3",
            "--minute-quota",
            "50",
        ])
        .await;
    assert_eq!(sized["concurrency"], 3);
    assert_eq!(sized["minuteQuota"], 50);
    let org_id = s(&org["id"]).to_string();

    let key = app
        .admin_ok(&["key", "create", "--org", &org_id, "--name", "backend"])
        .await;
    let full = s(&key["key"]).to_string();
    let key_id = s(&key["id"]).to_string();
    assert!(full.starts_with("acai_") && full.len() >= 5 + 43, "{full}");
    assert!(full.starts_with(s(&key["prefix"])));
    assert!(s(&key["prefix"]).len() < full.len());

    // The CLI's key works against the running server at once.
    let agents = app.get(&full, "/api/agents").await.expect(200);
    assert_eq!(agents.body, json!([]));

    let listed = app.admin_ok(&["key", "list", "--org", &org_id]).await;
    assert_eq!(listed["keys"].as_array().unwrap().len(), 1);
    let k = &listed["keys"][0];
    assert_eq!(k["id"], key_id.as_str());
    assert_eq!(k["name"], "backend");
    assert_eq!(k["prefix"], key["prefix"]);
    assert_eq!(k["dailyLimit"], 5_000);
    assert_eq!(k["monthlyLimit"], 100_000);
    assert_eq!(k["revoked"], false);
    assert!(
        !listed.to_string().contains(&full),
        "the full key is shown only at creation"
    );

    let credit = app
        .admin_ok(&["wallet", "credit", "--org", &org_id, "--paise", "2500"])
        .await;
    assert_eq!(credit["balancePaise"], 2_500);
    let wallet = app.get(&full, "/api/wallet").await.expect(200);
    assert_eq!(wallet.body["balancePaise"], 2_500);

    let number = app
        .admin_ok(&[
            "number",
            "add",
            "--org",
            &org_id,
            "--phone",
            "+14155550177",
            "--provider",
            "twilio",
            "--default",
        ])
        .await;
    assert_eq!(number["phone"], "+14155550177");
    assert_eq!(number["provider"], "twilio");
    assert_eq!(number["isDefault"], true);
    let numbers = app.get(&full, "/api/numbers").await.expect(200);
    assert_eq!(numbers.body["rows"][0]["id"], number["id"]);
    let sim = app
        .admin_ok(&[
            "number",
            "add",
            "--org",
            &org_id,
            "--phone",
            "+918035740155",
        ])
        .await;
    assert_eq!(sim["provider"], "sim");

    let out = app
        .admin(&[
            "credential",
            "set",
            "--org",
            &org_id,
            "--kind",
            "openai",
            "--json",
            r#"{"apiKey":"sk-very-secret"}"#,
        ])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("sk-very-secret"),
        "credentials never echo: {stdout}"
    );
    let cred: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(cred["stored"], true);

    let hook = app
        .admin_ok(&[
            "webhook",
            "add",
            "--org",
            &org_id,
            "--url",
            // A public address literal: tests run without DNS, and a name is resolved when added.
            "https://203.0.113.10/hooks",
            "--event",
            "call.completed",
        ])
        .await;
    assert!(hook["id"].is_string());
    assert!(s(&hook["secret"]).len() >= 32);
    // Webhook subscriptions cannot be reached with an API key.
    app.get(&full, "/api/webhooks").await.expect(403);

    let limits = app
        .admin_ok(&["key", "limits", &key_id, "--daily", "7", "--monthly", "70"])
        .await;
    assert_eq!(
        limits,
        json!({"id": key_id, "dailyLimit": 7, "monthlyLimit": 70})
    );

    let revoked = app.admin_ok(&["key", "revoke", &key_id]).await;
    assert_eq!(revoked["revoked"], true);
    app.get(&full, "/api/agents").await.expect(401);
    let listed = app.admin_ok(&["key", "list", "--org", &org_id]).await;
    assert_eq!(listed["keys"][0]["revoked"], true);
    assert!(listed["keys"][0]["revokedAt"].is_string());
}

#[tokio::test]
async fn key_limits_take_effect_on_the_next_request() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    app.get(&ws.key, "/api/agents").await.expect(200);

    app.admin_ok(&["key", "limits", &ws.key_id.to_string(), "--daily", "3"])
        .await;
    let r = app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(r.header_i64("x-ratelimit-limit"), 3);
    assert_eq!(r.header_i64("x-ratelimit-remaining"), 1);
    app.get(&ws.key, "/api/agents").await.expect(200);
    let r = app.get(&ws.key, "/api/agents").await.expect(429);
    assert_eq!(r.body["limit"], 3);
    assert_eq!(r.body["used"], 3);

    // Raising the cap lets the very next request through; the monthly cap is kept.
    let out = app
        .admin_ok(&["key", "limits", &ws.key_id.to_string(), "--daily", "10"])
        .await;
    assert_eq!(out["monthlyLimit"], 100_000);
    let r = app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(r.header_i64("x-ratelimit-limit"), 10);
    assert_eq!(r.header_i64("x-ratelimit-remaining"), 6);

    // A monthly override below what is used refuses at once with scope monthly.
    app.admin_ok(&["key", "limits", &ws.key_id.to_string(), "--monthly", "2"])
        .await;
    let r = app.get(&ws.key, "/api/agents").await.expect(429);
    assert_eq!(r.body["scope"], "monthly");
    assert_eq!(r.body["limit"], 2);
}

#[tokio::test]
async fn usage_categories_and_last_used_show_in_key_list() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let (_idle_id, _idle) = app.key(ws.org_id, "idle").await;
    let before = app
        .admin_ok(&["key", "list", "--org", &ws.org_id.to_string()])
        .await;
    assert!(
        before["keys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["lastUsedAt"].is_null())
    );

    app.set_limits(ws.key_id, 5, 100_000).await;
    for _ in 0..3 {
        app.get(&ws.key, "/api/agents").await.expect(200);
    }
    app.get(&ws.key, "/api/agents/x/y").await.expect(404);
    app.post(&ws.key, "/api/agents", json!({}))
        .await
        .expect(400);
    app.get(&ws.key, "/api/agents").await.expect(429);
    app.get(&ws.key, "/api/wallet").await.expect(429);

    let key = eventually(Duration::from_secs(10), "usage flushed", || async {
        let listed = app
            .admin_ok(&["key", "list", "--org", &ws.org_id.to_string()])
            .await;
        let key = listed["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == ws.key_id.to_string())
            .cloned()
            .unwrap();
        (key["usage"]["today"]["rateLimited"] == 2).then_some(key)
    })
    .await;
    let today = &key["usage"]["today"];
    assert_eq!(
        today,
        &json!({"admitted": 5, "success": 3, "failed": 2, "rateLimited": 2}),
        "{key}"
    );
    assert_eq!(&key["usage"]["month"], today);
    let last_used = chrono::DateTime::parse_from_rfc3339(s(&key["lastUsedAt"])).unwrap();
    let age = chrono::Utc::now().signed_duration_since(last_used);
    assert!(age < chrono::Duration::minutes(1), "lastUsedAt {last_used}");
    let listed = app
        .admin_ok(&["key", "list", "--org", &ws.org_id.to_string()])
        .await;
    let idle = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "idle")
        .unwrap();
    assert!(idle["lastUsedAt"].is_null());
    // 401s are not attributed to any key.
    app.get("", "/api/agents").await.expect(401);
}

#[tokio::test]
async fn bad_input_exits_non_zero_with_a_message_on_stderr() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let org = &ws.org_id.to_string();
    let key_id = &ws.key_id.to_string();
    let ghost = uuid::Uuid::now_v7().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["org", "create", "--name", "  "],
        vec!["org", "create", "--name", "x", "--concurrency", "0"],
        vec!["org", "create"],
        vec!["key", "create", "--org", &ghost, "--name", "k"],
        vec!["key", "list", "--org", &ghost],
        vec!["key", "revoke", &ghost],
        vec!["key", "limits", &ghost, "--daily", "5"],
        vec!["key", "limits", key_id, "--daily", "-1"],
        vec!["key", "limits", key_id, "--daily", "lots"],
        vec!["wallet", "credit", "--org", org, "--paise", "0"],
        vec!["wallet", "credit", "--org", &ghost, "--paise", "100"],
        vec!["number", "add", "--org", org, "--phone", "12345"],
        vec!["number", "add", "--org", org, "--phone", "+911111111111"],
        vec![
            "number",
            "add",
            "--org",
            org,
            "--phone",
            "+14155550190",
            "--provider",
            "pigeon",
        ],
        vec![
            "credential",
            "set",
            "--org",
            org,
            "--kind",
            "nope",
            "--json",
            "{}",
        ],
        vec![
            "credential",
            "set",
            "--org",
            org,
            "--kind",
            "openai",
            "--json",
            "not json",
        ],
        vec![
            "credential",
            "set",
            "--org",
            org,
            "--kind",
            "openai",
            "--json",
            r#"{"key":"x"}"#,
        ],
        vec![
            "webhook",
            "add",
            "--org",
            org,
            "--url",
            "ftp://example.com/x",
        ],
        vec![
            "webhook",
            "add",
            "--org",
            org,
            "--url",
            "https://example.com",
            "--event",
            "call.exploded",
        ],
        vec!["frobnicate"],
    ];
    for args in cases {
        let out = app.admin(&args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(!stderr.trim().is_empty(), "{args:?}: no message on stderr");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: stdout {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // Renting the same number twice is refused.
    app.admin_ok(&["number", "add", "--org", org, "--phone", "+14155550191"])
        .await;
    let out = app
        .admin(&["number", "add", "--org", org, "--phone", "+14155550191"])
        .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already"));
    // The server kept running throughout.
    app.get(&ws.key, "/api/agents").await.expect(200);
}

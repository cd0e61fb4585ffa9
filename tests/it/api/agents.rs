//! Spec Agents (minus test-call, chat, generate, prompt-assist) and decisions §6.

use crate::support::{TestApp, eventually, utc};
use chrono::Duration;
use serde_json::{Value, json};
use voxline::domain::clock::ManualClock;

fn id_of(agent: &Value) -> String {
    agent["id"].as_str().expect("agent id").to_string()
}

#[tokio::test]
async fn create_applies_defaults_and_lists_placeholders() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let agent = app
        .create_agent(&ws.key, json!({"name": "Recruiter"}))
        .await;
    let id = id_of(&agent);
    let uuid = uuid::Uuid::parse_str(&id).expect("id is a uuid");
    assert_eq!(uuid.get_version_num(), 7, "ids are UUIDv7");
    assert_eq!(agent["name"], "Recruiter");
    assert_eq!(agent["status"], "active");
    assert_eq!(agent["conversationEngine"], "pipeline");
    assert_eq!(agent["language"], "en-IN");
    assert_eq!(agent["dormant"], false);
    assert_eq!(agent["placeholders"], json!([]));
    assert!(agent["llmProvider"].is_string());
    assert!(agent["llmModel"].is_string());
    assert_eq!(agent["maxDurationSeconds"], 600);
    assert_eq!(agent["silenceTimeoutSeconds"], 20);
    assert_eq!(agent["interruptible"], true);
    assert_eq!(agent["retryPolicy"]["maxAttempts"], 1);
    assert_eq!(agent["retryPolicy"]["retryAfterSeconds"], 300);
    assert_eq!(
        agent["retryPolicy"]["retryOn"],
        json!(["no-answer", "busy", "failed"])
    );
    assert!(agent["perMinuteRatePaise"].is_i64());
    assert!(agent["createdAt"].as_str().unwrap().ends_with('Z'));

    let full = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Caller",
                "conversationEngine": "pipeline",
                "welcomeMessage": "Hi {name}, calling about the {role} role",
                "prompt": "You work for {company_name}. Ask {name} about {role}. Not {1bad} or { spaced }.",
                "language": "hi-IN",
                "voice": "sim-bright",
                "maxDurationSeconds": 300,
                "endCallPhrases": ["goodbye"],
                "retryPolicy": {"maxAttempts": 3, "retryAfterSeconds": 60, "retryOn": ["no-answer"]},
                "ratingTemplate": {"columns": [{"name": "Clarity", "description": "Was it clear"}]},
                "extraction": {"fields": [{"name": "interested", "type": "boolean", "description": "?"}]},
            }),
        )
        .await;
    assert_eq!(
        full["placeholders"],
        json!(["company_name", "name", "role"])
    );
    assert_eq!(full["language"], "hi-IN");
    assert_eq!(full["retryPolicy"]["maxAttempts"], 3);
    assert_eq!(full["ratingTemplate"]["columns"][0]["name"], "Clarity");

    let keypad = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Menu",
                "conversationEngine": "keypad",
                "keypad": {"prompt": "Press 1 for {dept}", "options": [{"digit": "1", "say": "ok", "value": "yes"}]},
            }),
        )
        .await;
    assert_eq!(keypad["conversationEngine"], "keypad");
    assert_eq!(keypad["keypad"]["timeoutSeconds"], 8);
    let announcement = app
        .create_agent(
            &ws.key,
            json!({"name": "Alert", "conversationEngine": "announcement", "welcomeMessage": "Fire drill at {time}"}),
        )
        .await;
    assert_eq!(announcement["placeholders"], json!(["time"]));

    // List: newest first, same shape as reads.
    let list = app.get(&ws.key, "/api/agents").await.expect(200);
    let ids: Vec<String> = list.body.as_array().unwrap().iter().map(id_of).collect();
    assert_eq!(
        ids,
        vec![id_of(&announcement), id_of(&keypad), id_of(&full), id]
    );
    let read = app
        .get(&ws.key, &format!("/api/agents/{}", id_of(&full)))
        .await
        .expect(200);
    assert_eq!(read.body, full);
}

#[tokio::test]
async fn create_validation_names_the_field() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    for (body, field) in [
        (json!({}), "name"),
        (json!({"name": "   "}), "name"),
        (json!({"name": 42}), "name"),
        (
            json!({"name": "x", "conversationEngine": "robot"}),
            "conversationEngine",
        ),
        (json!({"name": "x", "language": "english!"}), "language"),
        (
            json!({"name": "x", "conversationEngine": "keypad"}),
            "keypad",
        ),
        (
            json!({"name": "x", "conversationEngine": "announcement"}),
            "welcomeMessage",
        ),
        (json!({"name": "x", "llmProvider": "skynet"}), "llmProvider"),
        (
            json!({"name": "x", "maxDurationSeconds": 1}),
            "maxDurationSeconds",
        ),
        (
            json!({"name": "x", "maxDurationSeconds": -5}),
            "maxDurationSeconds",
        ),
        (
            json!({"name": "x", "retryPolicy": {"maxAttempts": 0}}),
            "retryPolicy.maxAttempts",
        ),
        (
            json!({"name": "x", "retryPolicy": {"retryOn": ["boredom"]}}),
            "retryPolicy.retryOn",
        ),
        // A struct read from an array by position would pass as its defaults.
        (json!({"name": "x", "retryPolicy": []}), "retryPolicy"),
        (json!({"name": "x", "keypad": [1]}), "keypad"),
        (
            json!({"name": "x", "favouriteColour": "blue"}),
            "favouriteColour",
        ),
    ] {
        let r = app.post(&ws.key, "/api/agents", body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert!(
            r.message().contains(field),
            "{body}: {} should name {field}",
            r.text
        );
    }
    let list = app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(list.body, json!([]), "nothing was created");
}

#[tokio::test]
async fn patch_changes_only_the_given_fields_and_validates_the_result() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "A", "welcomeMessage": "Hello {name}", "prompt": "Be brief"}),
        )
        .await;
    let path = format!("/api/agents/{}", id_of(&agent));

    let patched = app
        .patch(&ws.key, &path, json!({"prompt": "Ask {name} about {slot}"}))
        .await
        .expect(200)
        .body;
    assert_eq!(patched["prompt"], "Ask {name} about {slot}");
    assert_eq!(patched["placeholders"], json!(["name", "slot"]));
    let mut expected = agent.clone();
    for field in ["prompt", "placeholders", "updatedAt"] {
        expected[field] = patched[field].clone();
    }
    assert_eq!(patched, expected, "only prompt changed");

    let renamed = app
        .patch(&ws.key, &path, json!({"name": "B", "interruptible": false, "ratingTemplate": {"columns": [{"name": "Tone"}]}}))
        .await
        .expect(200)
        .body;
    assert_eq!(renamed["name"], "B");
    assert_eq!(renamed["interruptible"], false);
    assert_eq!(renamed["prompt"], "Ask {name} about {slot}");
    // null clears an optional section.
    let cleared = app
        .patch(&ws.key, &path, json!({"ratingTemplate": null}))
        .await
        .expect(200)
        .body;
    assert!(cleared["ratingTemplate"].is_null());

    for (body, field) in [
        (json!({"name": ""}), "name"),
        (json!({"conversationEngine": "keypad"}), "keypad"),
        (json!({"language": "english!"}), "language"),
        (
            json!({"silenceTimeoutSeconds": "soon"}),
            "silenceTimeoutSeconds",
        ),
        (json!({"status": "deleted"}), "status"),
    ] {
        let r = app.patch(&ws.key, &path, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert!(r.message().contains(field), "{body}: {}", r.text);
    }
    let read = app.get(&ws.key, &path).await.expect(200);
    assert_eq!(read.body, cleared, "rejected patches changed nothing");

    let missing = format!("/api/agents/{}", uuid::Uuid::now_v7());
    app.patch(&ws.key, &missing, json!({"name": "x"}))
        .await
        .expect(404);
    app.patch(&ws.key, "/api/agents/not-a-uuid", json!({"name": "x"}))
        .await
        .expect(404);
}

#[tokio::test]
async fn delete_is_soft_and_restore_undoes_it() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let agent = app.create_agent(&ws.key, json!({"name": "Temp"})).await;
    let id = id_of(&agent);
    let path = format!("/api/agents/{id}");

    // Restoring a live agent is a conflict.
    app.post_empty(&ws.key, &format!("{path}/restore"))
        .await
        .expect(409);

    let deleted = app.delete(&ws.key, &path).await.expect(204);
    assert!(deleted.text.is_empty(), "no body: {}", deleted.text);
    let gone = app.get(&ws.key, &path).await.expect(404);
    assert_eq!(
        gone.body,
        json!({"message": format!("Agent {id} not found")})
    );
    app.patch(&ws.key, &path, json!({"name": "x"}))
        .await
        .expect(404);
    app.delete(&ws.key, &path).await.expect(404);
    app.post_empty(&ws.key, &format!("{path}/activate"))
        .await
        .expect(404);
    app.post_empty(&ws.key, &format!("{path}/deactivate"))
        .await
        .expect(404);
    let list = app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(list.body, json!([]));

    let restored = app
        .post_empty(&ws.key, &format!("{path}/restore"))
        .await
        .expect(200);
    assert!(!restored.message().is_empty());
    let back = app.get(&ws.key, &path).await.expect(200);
    assert_eq!(back.body["status"], "active");
    assert_eq!(back.body["name"], "Temp");
    assert_eq!(
        app.get(&ws.key, "/api/agents")
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Restore of something that never existed.
    app.post_empty(
        &ws.key,
        &format!("/api/agents/{}/restore", uuid::Uuid::now_v7()),
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn deactivate_and_activate_toggle_status() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let id = id_of(&app.create_agent(&ws.key, json!({"name": "A"})).await);
    let path = format!("/api/agents/{id}");

    let r = app
        .post_empty(&ws.key, &format!("{path}/deactivate"))
        .await
        .expect(200);
    assert!(!r.message().is_empty());
    assert_eq!(app.get(&ws.key, &path).await.body["status"], "inactive");
    // Still listed and editable while inactive.
    assert_eq!(
        app.get(&ws.key, "/api/agents").await.body[0]["status"],
        "inactive"
    );
    app.patch(&ws.key, &path, json!({"prompt": "p"}))
        .await
        .expect(200);

    app.post_empty(&ws.key, &format!("{path}/activate"))
        .await
        .expect(200);
    assert_eq!(app.get(&ws.key, &path).await.body["status"], "active");
}

#[tokio::test]
async fn idle_agents_turn_dormant_and_activate_wakes_them() {
    let clock = ManualClock::new(utc("2026-03-01T09:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.workspace("A").await;
    let idle = id_of(&app.create_agent(&ws.key, json!({"name": "Idle"})).await);
    let off = id_of(&app.create_agent(&ws.key, json!({"name": "Off"})).await);
    app.post_empty(&ws.key, &format!("/api/agents/{off}/deactivate"))
        .await
        .expect(200);

    clock.advance(Duration::days(6));
    // Give the janitor (every 100 ms) a few passes: six days is inside the window.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        app.get(&ws.key, &format!("/api/agents/{idle}")).await.body["dormant"],
        false
    );

    clock.advance(Duration::days(2));
    let path = format!("/api/agents/{idle}");
    eventually(
        std::time::Duration::from_secs(5),
        "agent turns dormant",
        || async {
            let body = app.get(&ws.key, &path).await.body;
            (body["dormant"] == true).then_some(())
        },
    )
    .await;
    let r = app
        .post_empty(&ws.key, &format!("{path}/activate"))
        .await
        .expect(200);
    assert!(!r.message().is_empty());
    let woke = app.get(&ws.key, &path).await.expect(200).body;
    assert_eq!(woke["dormant"], false);
    assert_eq!(woke["status"], "active");
    // A deactivated agent is not dialed, so it is not marked dormant.
    assert_eq!(
        app.get(&ws.key, &format!("/api/agents/{off}")).await.body["dormant"],
        false
    );
    // Activation counts as activity: later janitor passes leave it awake.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(app.get(&ws.key, &path).await.body["dormant"], false);
}

#[tokio::test]
async fn a_read_right_after_any_change_sees_it_even_from_another_process() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let other = app.workspace("B").await;
    let id = id_of(&app.create_agent(&ws.key, json!({"name": "Cached"})).await);
    let path = format!("/api/agents/{id}");

    // Each read right after a write (the first read of a pair may be cached).
    for round in 0..20 {
        app.get(&ws.key, &path).await.expect(200);
        let name = format!("Cached {round}");
        app.patch(&ws.key, &path, json!({"name": name}))
            .await
            .expect(200);
        assert_eq!(app.get(&ws.key, &path).await.expect(200).body["name"], name);
    }
    app.post_empty(&ws.key, &format!("{path}/deactivate"))
        .await
        .expect(200);
    assert_eq!(app.get(&ws.key, &path).await.body["status"], "inactive");
    // A cached agent is still invisible to another workspace.
    app.get(&other.key, &path).await.expect(404);

    // Another process on the same database (a second server, say) edits it.
    let second = voxline::store::Store::connect(&app.database_url, 2)
        .await
        .expect("second store");
    let mut spec = voxline::domain::agent::AgentSpec::with_name("Edited elsewhere");
    spec.prompt = "From the other process".into();
    let now = app.now().timestamp_millis();
    assert!(
        second
            .update_agent_spec(ws.org_id, id.parse().expect("agent id"), &spec, now)
            .await
            .expect("update")
    );
    let read = app.get(&ws.key, &path).await.expect(200).body;
    assert_eq!(read["name"], "Edited elsewhere");
    assert_eq!(read["prompt"], "From the other process");
    app.delete(&ws.key, &path).await.expect(204);
    app.get(&ws.key, &path).await.expect(404);
    second.close().await;
}

#[tokio::test]
async fn replies_have_a_token_cap_and_an_optional_temperature() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Caps").await;
    let agent = app
        .create_agent(&ws.key, serde_json::json!({"name": "Capped"}))
        .await;
    assert_eq!(agent["maxTokens"], 150, "{agent}");
    assert!(agent["temperature"].is_null());
    let id = agent["id"].as_str().unwrap();
    let updated = app
        .patch(
            &ws.key,
            &format!("/api/agents/{id}"),
            serde_json::json!({"maxTokens": 300, "temperature": 0.4}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(updated["maxTokens"], 300, "{updated}");
    assert!((updated["temperature"].as_f64().unwrap() - 0.4).abs() < 1e-6);
    for (body, message) in [
        (
            serde_json::json!({"maxTokens": 0}),
            "maxTokens must be between 1 and 4096",
        ),
        (
            serde_json::json!({"temperature": 2.5}),
            "temperature must be between 0 and 2",
        ),
    ] {
        let reply = app
            .patch(&ws.key, &format!("/api/agents/{id}"), body)
            .await
            .expect(400);
        assert_eq!(reply.body["message"], message);
    }
}

#[tokio::test]
async fn turn_detection_and_interruption_are_validated_stored_and_read_back() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Turns").await;
    // Left unset: stored as unset (the mode is decided when a call starts), defaults shown.
    let plain = app.create_agent(&ws.key, json!({"name": "Plain"})).await;
    assert_eq!(
        plain["turnDetection"],
        json!({"minSilenceMs": 200, "maxSilenceMs": 2500, "threshold": 0.5}),
        "{plain}"
    );
    assert_eq!(
        plain["interruption"],
        json!({"minWords": 3, "resumeAfterMs": 800}),
        "{plain}"
    );
    assert_eq!(plain["interruptionMs"], 400);

    let set = json!({
        "turnDetection": {"mode": "smart", "minSilenceMs": 250, "maxSilenceMs": 3000, "threshold": 0.75},
        "interruption": {"mode": "words", "minWords": 2, "backchannels": ["haan ji", "uh-huh"], "resumeAfterMs": 1000},
        "interruptionMs": 600,
    });
    let mut body = set.clone();
    body["name"] = json!("Smart");
    let agent = app.create_agent(&ws.key, body).await;
    let path = format!("/api/agents/{}", id_of(&agent));
    let read = app.get(&ws.key, &path).await.expect(200).body;
    for field in ["turnDetection", "interruption", "interruptionMs"] {
        assert_eq!(read[field], set[field], "{field}: {read}");
    }

    // A patch replaces the whole setting: what it leaves out takes its default.
    let patched = app
        .patch(
            &ws.key,
            &path,
            json!({"turnDetection": {"mode": "silence"}, "interruption": {"mode": "duration"}}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(
        patched["turnDetection"],
        json!({"mode": "silence", "minSilenceMs": 200, "maxSilenceMs": 2500, "threshold": 0.5})
    );
    assert_eq!(
        patched["interruption"],
        json!({"mode": "duration", "minWords": 3, "resumeAfterMs": 800})
    );
    assert_eq!(
        patched["interruptionMs"], 600,
        "the duration mode's value is kept"
    );

    let long = "x".repeat(41);
    let many: Vec<String> = (0..101).map(|i| format!("ok {i}")).collect();
    for (body, field) in [
        (
            json!({"turnDetection": {"mode": "fast"}}),
            "turnDetection.mode",
        ),
        (
            json!({"turnDetection": {"minSilenceMs": 50}}),
            "turnDetection.minSilenceMs",
        ),
        (
            json!({"turnDetection": {"minSilenceMs": 800, "maxSilenceMs": 600}}),
            "turnDetection.maxSilenceMs",
        ),
        (
            json!({"turnDetection": {"maxSilenceMs": 9000}}),
            "turnDetection.maxSilenceMs",
        ),
        (
            json!({"turnDetection": {"threshold": 1.5}}),
            "turnDetection.threshold",
        ),
        (
            json!({"turnDetection": {"silenceMs": 600}}),
            "turnDetection",
        ),
        (
            json!({"interruption": {"mode": "loud"}}),
            "interruption.mode",
        ),
        (
            json!({"interruption": {"minWords": 0}}),
            "interruption.minWords",
        ),
        (
            json!({"interruption": {"resumeAfterMs": 10}}),
            "interruption.resumeAfterMs",
        ),
        (
            json!({"interruption": {"backchannels": ["  "]}}),
            "interruption.backchannels",
        ),
        (
            json!({"interruption": {"backchannels": [long]}}),
            "interruption.backchannels",
        ),
        (
            json!({"interruption": {"backchannels": many}}),
            "interruption.backchannels",
        ),
        (json!({"interruptionMs": 50}), "interruptionMs"),
    ] {
        let reply = app.patch(&ws.key, &path, body.clone()).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        assert!(
            reply.message().contains(field),
            "{body}: {} should name {field}",
            reply.text
        );
    }
    let unchanged = app.get(&ws.key, &path).await.expect(200).body;
    assert_eq!(unchanged["turnDetection"], patched["turnDetection"]);

    let doc = app.get("", "/openapi.json").await.expect(200).body;
    let schemas = &doc["components"]["schemas"];
    for agent in ["AgentInput", "AgentSpec"] {
        let text = schemas[agent].to_string();
        assert!(text.contains("\"turnDetection\""), "{agent}: {text}");
        assert!(text.contains("\"interruption\""), "{agent}: {text}");
    }
    let modes = schemas["TurnDetectionMode"].to_string();
    assert!(
        modes.contains("smart") && modes.contains("silence"),
        "{modes}"
    );
}

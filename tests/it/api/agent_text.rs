//! Spec Agents: chat, generate and prompt-assist (issue 5), on the sim LLM.

use crate::support::TestApp;
use serde_json::{Value, json};

async fn agent(app: &TestApp, key: &str) -> String {
    let body = app
        .create_agent(
            key,
            json!({"name": "Fees", "welcomeMessage": "Hello {name}, this is Asha from the school.",
                "prompt": "Remind {name} about the fee."}),
        )
        .await;
    body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn chat_opens_with_the_welcome_and_keeps_history_per_session() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("chat").await;
    let id = agent(&app, &ws.key).await;
    let path = format!("/api/agents/{id}/chat");

    let opened = app
        .post(&ws.key, &path, json!({"variables": {"name": "Ravi"}}))
        .await
        .expect(200);
    assert_eq!(
        opened.body["message"],
        "Hello Ravi, this is Asha from the school."
    );
    let session = opened.body["sessionId"].as_str().unwrap().to_string();

    let reply = app
        .post(
            &ws.key,
            &path,
            json!({"message": "When is it due?", "sessionId": session}),
        )
        .await
        .expect(200);
    assert_eq!(
        reply.body["message"],
        "Let me note that down for the team. Is there anything else I can help you with?"
    );
    assert_eq!(reply.body["sessionId"], session);
    assert_eq!(reply.body["ended"], false);

    let bye = app
        .post(
            &ws.key,
            &path,
            json!({"message": "Okay, bye", "sessionId": session}),
        )
        .await
        .expect(200);
    assert_eq!(bye.body["message"], "Thank you for your time. Goodbye!");
    assert_eq!(bye.body["ended"], true);

    // A first message without a session starts one and is answered directly.
    let direct = app
        .post(&ws.key, &path, json!({"message": "Hello?"}))
        .await
        .expect(200);
    assert_ne!(direct.body["sessionId"], session);
    assert_eq!(
        direct.body["message"],
        "Let me note that down for the team. Is there anything else I can help you with?"
    );
}

#[tokio::test]
async fn chat_validates_its_input_and_scopes_sessions() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("chat-errors").await;
    let other = app.workspace("other").await;
    let id = agent(&app, &ws.key).await;
    let path = format!("/api/agents/{id}/chat");
    let opened = app.post(&ws.key, &path, json!({})).await.expect(200);
    let session = opened.body["sessionId"].as_str().unwrap().to_string();

    let blank = app
        .post(
            &ws.key,
            &path,
            json!({"message": "  ", "sessionId": session}),
        )
        .await
        .expect(400);
    assert!(blank.message().contains("message"), "{}", blank.text);
    let long = app
        .post(&ws.key, &path, json!({"message": "x".repeat(4001)}))
        .await
        .expect(400);
    assert!(long.message().contains("message"));
    let late_vars = app
        .post(
            &ws.key,
            &path,
            json!({"message": "hi", "sessionId": session, "variables": {"a": "b"}}),
        )
        .await
        .expect(400);
    assert!(late_vars.message().contains("variables"));
    let unknown = app
        .post(&ws.key, &path, json!({"text": "hi"}))
        .await
        .expect(400);
    assert!(unknown.message().contains("text"), "{}", unknown.text);
    app.post(
        &ws.key,
        &path,
        json!({"message": "hi", "sessionId": "not-a-session"}),
    )
    .await
    .expect(404);
    // Another workspace sees neither the agent nor the session.
    app.post(&other.key, &path, json!({"message": "hi"}))
        .await
        .expect(404);
    let other_agent = agent(&app, &other.key).await;
    app.post(
        &other.key,
        &format!("/api/agents/{other_agent}/chat"),
        json!({"message": "hi", "sessionId": session}),
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn generate_drafts_an_agent_and_creates_it_only_when_asked() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("generate").await;
    let brief = "Remind parents that the school fee is due on Friday. Be gentle.";
    let draft = app
        .post(&ws.key, "/api/agents/generate", json!({"brief": brief}))
        .await
        .expect(200);
    assert_eq!(draft.body["created"], false);
    assert!(draft.body["id"].is_null());
    let agent = &draft.body["agent"];
    assert_eq!(agent["name"], "Remind Parents That The School");
    assert_eq!(agent["conversationEngine"], "pipeline");
    assert_eq!(agent["language"], "en-IN");
    assert!(
        agent["welcomeMessage"]
            .as_str()
            .unwrap()
            .starts_with("Hello {name}")
    );
    assert!(agent["prompt"].as_str().unwrap().contains(brief));
    assert_eq!(
        agent["ratingTemplate"]["columns"].as_array().unwrap().len(),
        3
    );
    let again = app
        .post(&ws.key, "/api/agents/generate", json!({"brief": brief}))
        .await
        .expect(200);
    assert_eq!(
        again.body["agent"], draft.body["agent"],
        "the sim is deterministic"
    );
    let listed = app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(
        listed.body.as_array().unwrap().len(),
        0,
        "a draft is not saved"
    );

    let created = app
        .post(
            &ws.key,
            "/api/agents/generate",
            json!({"brief": "Announce that the campus is closed tomorrow.", "create": true, "language": "hi-IN"}),
        )
        .await
        .expect(201);
    assert_eq!(created.body["created"], true);
    assert_eq!(created.body["agent"]["conversationEngine"], "announcement");
    let id = created.body["id"].as_str().unwrap();
    let read = app
        .get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200);
    assert_eq!(read.body["language"], "hi-IN");
    assert_eq!(
        read.body["welcomeMessage"],
        created.body["agent"]["welcomeMessage"]
    );

    let short = app
        .post(&ws.key, "/api/agents/generate", json!({"brief": "hi"}))
        .await
        .expect(400);
    assert!(short.message().contains("brief"));
    let bad_language = app
        .post(
            &ws.key,
            "/api/agents/generate",
            json!({"brief": "Call customers about renewals", "language": "not a tag"}),
        )
        .await
        .expect(400);
    assert!(bad_language.message().contains("language"));
    let bad_provider = app
        .post(
            &ws.key,
            "/api/agents/generate",
            json!({"brief": "Call customers about renewals", "llmProvider": "gpt"}),
        )
        .await
        .expect(400);
    assert!(bad_provider.message().contains("llmProvider"));
}

#[tokio::test]
async fn prompt_assist_improves_a_prompt_and_lists_the_changes() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("assist").await;
    let reply = app
        .post(
            &ws.key,
            "/api/agents/prompt-assist",
            json!({"prompt": "Ask {name} whether they will attend the exam.\n\n\n", "instruction": "Mention the hall ticket"}),
        )
        .await
        .expect(200);
    let prompt = reply.body["prompt"].as_str().unwrap();
    assert!(prompt.starts_with("You are a friendly, professional voice agent"));
    assert!(prompt.contains("Ask {name} whether they will attend the exam."));
    assert!(prompt.contains("Additional instruction: Mention the hall ticket."));
    let changes: Vec<&str> = reply.body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(changes.len(), 5, "{changes:?}");
    assert_eq!(reply.body["message"], "Prompt improved with 5 change(s)");

    let settled = app
        .post(
            &ws.key,
            "/api/agents/prompt-assist",
            json!({"prompt": prompt}),
        )
        .await
        .expect(200);
    assert_eq!(settled.body["prompt"], Value::String(prompt.to_string()));
    assert_eq!(settled.body["changes"], json!([]));

    let blank = app
        .post(&ws.key, "/api/agents/prompt-assist", json!({"prompt": " "}))
        .await
        .expect(400);
    assert!(blank.message().contains("prompt"));
}

#[tokio::test]
async fn the_text_endpoints_are_in_the_openapi_document() {
    let app = TestApp::spawn().await;
    let doc = app.get("", "/openapi.json").await.expect(200);
    for path in [
        "/api/agents/{agentId}/chat",
        "/api/agents/generate",
        "/api/agents/prompt-assist",
    ] {
        assert!(
            doc.body["paths"][path]["post"].is_object(),
            "{path} missing"
        );
    }
    let schemas = &doc.body["components"]["schemas"];
    assert!(schemas["ChatRequest"]["properties"]["sessionId"].is_object());
    assert!(schemas["PromptAssistReply"]["properties"]["changes"].is_object());
}

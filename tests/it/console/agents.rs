//! The Agents pages: the form judged by the API's own parser and validation
//! (each refusal beside its input, what was typed kept), the lifecycle
//! buttons, roles and CSRF, a test call that opens the live call view, the
//! chat, escaping, and a real browser creating an agent.

use super::support::{Browser, ConsoleClient, Page, person};
use crate::support::{TestApp, Workspace, eventually};
use fantoccini::Locator;
use serde_json::{Value, json};
use std::time::Duration;
use voxline::domain::Role;

/// The text of the error shown beside input `id` (`f-<path with - for .>`), if any.
fn field_error(page: &Page, id: &str) -> Option<String> {
    let marker = format!("id=\"{id}-error\">");
    let at = page.body.find(&marker)? + marker.len();
    let rest = &page.body[at..];
    Some(rest[..rest.find('<')?].to_string())
}

/// The workspace's agents named `name`, as the API lists them.
async fn agents_named(app: &TestApp, ws: &Workspace, name: &str) -> Vec<Value> {
    let list = app.get(&ws.key, "/api/agents").await.expect(200).body;
    list.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["name"] == name)
        .collect()
}

#[tokio::test]
async fn the_form_shows_each_refusal_beside_its_field_then_creates_and_edits() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Agents").await;
    let member = person(&app, &ws, Role::Member).await;
    let client = ConsoleClient::sign_in(&app, &member).await;

    let blank = client.get("/agents/new").await;
    assert_eq!(blank.status, 200, "{}", blank.body);
    for input in [
        "name=\"name\"",
        "name=\"retryPolicy.maxAttempts\"",
        "name=\"analysis\"",
        "name=\"tools\"",
        "name=\"voicemail.action\"",
    ] {
        assert!(blank.body.contains(input), "{input}");
    }

    // A number out of range: refused by the spec's validation, shown at its input.
    let out_of_range = client
        .post_form(
            "/agents/new",
            &[("name", "Screener"), ("maxDurationSeconds", "5")],
        )
        .await;
    assert_eq!(out_of_range.status, 422, "{}", out_of_range.body);
    assert_eq!(
        field_error(&out_of_range, "f-maxDurationSeconds").as_deref(),
        Some("maxDurationSeconds must be between 10 and 14400")
    );
    assert!(out_of_range.body.contains("value=\"Screener\""), "kept");

    // Not a number at all: the API's parser names the path.
    let not_a_number = client
        .post_form(
            "/agents/new",
            &[("name", "Screener"), ("retryPolicy.maxAttempts", "three")],
        )
        .await;
    assert_eq!(not_a_number.status, 422);
    let message = field_error(&not_a_number, "f-retryPolicy-maxAttempts").expect("error");
    assert!(message.starts_with("retryPolicy.maxAttempts"), "{message}");

    // A deep path inside the analysis plan lands at the analysis textarea.
    let plan = r#"{"fields": [{"name": "tier", "type": "enum", "options": []}]}"#;
    let bad_plan = client
        .post_form("/agents/new", &[("name", "Screener"), ("analysis", plan)])
        .await;
    assert_eq!(bad_plan.status, 422);
    let message = field_error(&bad_plan, "f-analysis").expect("error at the plan");
    assert!(message.starts_with("analysis.fields[0]"), "{message}");
    assert!(bad_plan.body.contains("tier"), "what was typed is kept");
    let broken_json = client
        .post_form("/agents/new", &[("name", "Screener"), ("tools", "[{")])
        .await;
    assert_eq!(broken_json.status, 422);
    assert!(
        field_error(&broken_json, "f-tools")
            .unwrap_or_default()
            .contains("not valid JSON")
    );
    let blank_name = client.post_form("/agents/new", &[("name", "  ")]).await;
    assert_eq!(blank_name.status, 422);
    assert!(field_error(&blank_name, "f-name").is_some());
    assert!(agents_named(&app, &ws, "Screener").await.is_empty());

    // A valid form creates the agent exactly as the API would.
    let created = client
        .post_form(
            "/agents/new",
            &[
                ("name", "Screener"),
                ("welcomeMessage", "Hello {name}"),
                ("maxDurationSeconds", "300"),
                ("interruptible", ""),
                ("retryPolicy.retryOn", ""),
                ("retryPolicy.retryOn", "busy"),
                (
                    "analysis",
                    r#"{"fields": [{"name": "tier", "type": "enum", "options": ["a", "b"]}]}"#,
                ),
                ("ratingTemplate", r#"{"columns": [{"name": "Clarity"}]}"#),
            ],
        )
        .await;
    assert_eq!(created.status, 303, "{}", created.body);
    assert_eq!(created.headers["location"], "/agents");
    let found = agents_named(&app, &ws, "Screener").await;
    assert_eq!(found.len(), 1);
    let agent = &found[0];
    assert_eq!(agent["maxDurationSeconds"], 300);
    assert_eq!(agent["interruptible"], false);
    assert_eq!(agent["retryPolicy"]["retryOn"], json!(["busy"]));
    assert_eq!(agent["analysis"]["fields"][0]["options"], json!(["a", "b"]));
    assert_eq!(agent["placeholders"], json!(["name"]));
    let id = agent["id"].as_str().unwrap().to_string();
    let list = client.get("/agents").await;
    assert!(list.body.contains("Screener") && list.body.contains(&id));

    // The edit form holds the stored values; a refused edit changes nothing.
    let edit = client.get(&format!("/agents/{id}/edit")).await;
    assert_eq!(edit.status, 200);
    assert!(edit.body.contains("value=\"300\""));
    let refused = client
        .post_form(&format!("/agents/{id}/edit"), &[("language", "english!")])
        .await;
    assert_eq!(refused.status, 422);
    assert!(field_error(&refused, "f-language").is_some());
    let saved = client
        .post_form(
            &format!("/agents/{id}/edit"),
            &[("name", "Screener 2"), ("silenceTimeoutSeconds", "30")],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let read = app
        .get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200);
    assert_eq!(read.body["name"], "Screener 2");
    assert_eq!(read.body["silenceTimeoutSeconds"], 30);
    assert_eq!(
        read.body["maxDurationSeconds"], 300,
        "inputs not sent are kept"
    );

    // Lifecycle buttons answer the row and change the agent for the API too.
    let row = client
        .htmx_post(&format!("/agents/{id}/deactivate"), &[])
        .await;
    assert_eq!(row.status, 200);
    assert!(row.body.contains("status-inactive") && row.body.contains("Activate"));
    let read = app
        .get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200);
    assert_eq!(read.body["status"], "inactive");
    let row = client
        .htmx_post(&format!("/agents/{id}/activate"), &[])
        .await;
    assert!(row.body.contains("status-active"));
    let row = client.htmx_post(&format!("/agents/{id}/delete"), &[]).await;
    assert!(row.body.contains("status-deleted") && row.body.contains("Restore"));
    app.get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(404);
    let list = client.get("/agents").await;
    assert!(list.body.contains("Deleted agents"));
    let again = client.htmx_post(&format!("/agents/{id}/delete"), &[]).await;
    assert_eq!(again.status, 404);
    let row = client
        .htmx_post(&format!("/agents/{id}/restore"), &[])
        .await;
    assert!(row.body.contains("status-active"), "{}", row.body);
    app.get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200);

    // Another workspace's agent is not found.
    let other = app.workspace("Other").await;
    let foreign = app
        .create_agent(&other.key, json!({"name": "Theirs"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        client.get(&format!("/agents/{foreign}/edit")).await.status,
        404
    );
    let post = client
        .post_form(&format!("/agents/{foreign}/edit"), &[("name", "Mine")])
        .await;
    assert_eq!(post.status, 404);
}

#[tokio::test]
async fn the_form_sets_turn_taking_and_shows_its_refusals() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Turns").await;
    let member = person(&app, &ws, Role::Member).await;
    let client = ConsoleClient::sign_in(&app, &member).await;

    let blank = client.get("/agents/new").await;
    assert_eq!(blank.status, 200, "{}", blank.body);
    for input in [
        "name=\"turnDetection.mode\"",
        "name=\"turnDetection.minSilenceMs\"",
        "name=\"turnDetection.maxSilenceMs\"",
        "name=\"turnDetection.threshold\"",
        "name=\"interruption.mode\"",
        "name=\"interruptionMs\"",
        "name=\"interruption.minWords\"",
        "name=\"interruption.backchannels\"",
        "name=\"interruption.resumeAfterMs\"",
    ] {
        assert!(blank.body.contains(input), "{input} missing");
    }
    // Unset modes are offered as "default".
    assert!(
        blank
            .body
            .contains("<option value=\"\" selected>default</option>")
    );

    let refused = client
        .post_form(
            "/agents/new",
            &[("name", "Turns"), ("turnDetection.maxSilenceMs", "9000")],
        )
        .await;
    assert_eq!(refused.status, 422);
    let message =
        field_error(&refused, "f-turnDetection-maxSilenceMs").expect("error at the input");
    assert!(
        message.starts_with("turnDetection.maxSilenceMs"),
        "{message}"
    );

    let created = client
        .post_form(
            "/agents/new",
            &[
                ("name", "Turns"),
                ("turnDetection.mode", "smart"),
                ("turnDetection.minSilenceMs", "300"),
                ("turnDetection.maxSilenceMs", "2000"),
                ("turnDetection.threshold", "0.6"),
                ("interruption.mode", ""),
                ("interruptionMs", "500"),
                ("interruption.minWords", "2"),
                ("interruption.backchannels", "haan ji\nuh-huh\n"),
                ("interruption.resumeAfterMs", "1000"),
            ],
        )
        .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let agent = agents_named(&app, &ws, "Turns").await.remove(0);
    assert_eq!(agent["turnDetection"]["mode"], "smart");
    assert_eq!(agent["turnDetection"]["minSilenceMs"], 300);
    assert_eq!(agent["turnDetection"]["maxSilenceMs"], 2000);
    assert!((agent["turnDetection"]["threshold"].as_f64().unwrap() - 0.6).abs() < 1e-6);
    assert_eq!(
        agent["interruption"],
        json!({"minWords": 2, "backchannels": ["haan ji", "uh-huh"], "resumeAfterMs": 1000}),
        "a blank mode stays unset"
    );
    assert_eq!(agent["interruptionMs"], 500);
    let id = agent["id"].as_str().unwrap();
    let edit = client.get(&format!("/agents/{id}/edit")).await;
    assert!(
        edit.body
            .contains("<option value=\"smart\" selected>smart</option>")
    );
    assert!(edit.body.contains("haan ji\nuh-huh"));
}

#[tokio::test]
async fn viewers_read_agents_but_change_nothing_and_posts_need_the_token() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Roles", 1).await;
    let id = app.create_agent(&ws.key, json!({"name": "Kept"})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let viewer = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Viewer).await).await;

    let list = viewer.get("/agents").await;
    assert_eq!(list.status, 200);
    assert!(list.body.contains("Kept"));
    assert!(
        !list.body.contains("href=\"/agents/new\""),
        "no create button"
    );
    assert!(!list.body.contains("/deactivate"), "no lifecycle buttons");
    let edit = viewer.get(&format!("/agents/{id}/edit")).await;
    assert_eq!(edit.status, 200);
    assert!(edit.body.contains("disabled"), "read-only form");
    assert_eq!(viewer.get("/agents/new").await.status, 403);
    assert_eq!(
        viewer
            .post_form("/agents/new", &[("name", "Sneaky")])
            .await
            .status,
        403
    );
    assert_eq!(
        viewer
            .post_form(&format!("/agents/{id}/edit"), &[("name", "Renamed")])
            .await
            .status,
        403
    );
    for action in ["delete", "deactivate", "chat", "test-call"] {
        let page = viewer
            .htmx_post(
                &format!("/agents/{id}/{action}"),
                &[("phoneNumber", "+919845012310"), ("message", "hi")],
            )
            .await;
        assert_eq!(page.status, 403, "{action}");
    }
    let read = app
        .get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200);
    assert_eq!(read.body["name"], "Kept");
    assert_eq!(read.body["status"], "active");

    // A member's form without the CSRF token is refused before anything happens.
    let member = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;
    let forged = member
        .post_form_raw("/agents/new", &[("name", "Forged")])
        .await;
    assert_eq!(forged.status, 403);
    let forged = member
        .post_form_raw(
            &format!("/agents/{id}/edit"),
            &[("_csrf", "not-the-token"), ("name", "Forged")],
        )
        .await;
    assert_eq!(forged.status, 403);
    assert!(agents_named(&app, &ws, "Forged").await.is_empty());
    let read = app
        .get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200);
    assert_eq!(read.body["name"], "Kept");

    // An API key opens no console page.
    let keyed = app.get(&ws.key, "/agents").await;
    assert_eq!(keyed.status.as_u16(), 403);
}

#[tokio::test]
async fn the_chat_answers_in_a_session_and_names_are_escaped() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Chat").await;
    let id = app
        .create_agent(
            &ws.key,
            json!({"name": "<script>alert(1)</script>", "welcomeMessage": "Hello <b>there</b>",
                   "prompt": "You are a helpful screener."}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let member = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;

    let list = member.get("/agents").await;
    assert!(!list.body.contains("<script>alert(1)"), "escaped");
    assert!(
        list.body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{}",
        list.body
    );

    // Start: the agent opens with its welcome message (escaped too).
    let start = member
        .htmx_post(&format!("/agents/{id}/chat"), &[("message", "")])
        .await;
    assert_eq!(start.status, 200, "{}", start.body);
    assert!(
        start.body.contains("Hello &#60;b&#62;there&#60;/b&#62;"),
        "{}",
        start.body
    );
    let marker = "name=\"sessionId\" value=\"";
    let at = start.body.find(marker).unwrap() + marker.len();
    let session = start.body[at..at + start.body[at..].find('"').unwrap()].to_string();
    assert!(!session.is_empty());

    let turn = member
        .htmx_post(
            &format!("/agents/{id}/chat"),
            &[("message", "What is this about?"), ("sessionId", &session)],
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert!(turn.body.contains("What is this about?"));
    assert_eq!(
        turn.body.matches("class=\"chat-agent\"").count(),
        2,
        "{}",
        turn.body
    );
    assert_eq!(turn.body.matches("class=\"chat-you\"").count(), 1);

    let blank = member
        .htmx_post(
            &format!("/agents/{id}/chat"),
            &[("message", "  "), ("sessionId", &session)],
        )
        .await;
    assert_eq!(blank.status, 422);
    assert!(blank.body.contains("message is required"), "{}", blank.body);
    assert!(
        blank.body.contains("What is this about?"),
        "the history stays"
    );
}

#[tokio::test]
async fn a_test_call_opens_the_live_call_view() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Test calls", 2).await;
    let id = app
        .create_agent(&ws.key, json!({"name": "Caller", "welcomeMessage": "Hi"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let member = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;

    let bad = member
        .htmx_post(&format!("/agents/{id}/test-call"), &[("phoneNumber", "12")])
        .await;
    assert_eq!(bad.status, 422);
    assert!(bad.body.contains("phoneNumber"), "{}", bad.body);
    assert!(bad.body.contains("value=\"12\""), "kept");

    let placed = member
        .htmx_post(
            &format!("/agents/{id}/test-call"),
            &[("phoneNumber", "+919845012310")],
        )
        .await;
    assert_eq!(placed.status, 204, "{}", placed.body);
    let to = placed.headers["hx-redirect"].to_str().unwrap().to_string();
    let call_id = to.strip_prefix("/calls/").expect("the live call view");
    let call = app
        .get(&ws.key, &format!("/api/calls/{call_id}"))
        .await
        .expect(200);
    assert_eq!(call.body["agentId"], id.as_str());
    let again = member
        .htmx_post(
            &format!("/agents/{id}/test-call"),
            &[("phoneNumber", "+919845012310")],
        )
        .await;
    assert!(
        again.status == 422
            && again.body.contains("already has a call in flight")
            && again.body.contains(&format!("href=\"/calls/{call_id}\""))
            || again.status == 204,
        "a second ring while the first is live is refused ({}): {}",
        again.status,
        again.body
    );
    eventually(Duration::from_secs(60), "the test call to end", || async {
        let r = app.get(&ws.key, &format!("/api/calls/{call_id}")).await;
        (r.body["rawStatus"] == "completed").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_browser_sees_the_refusal_beside_the_field_then_the_agent_in_the_list() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.workspace("Browser agents").await;
    let existing = app
        .create_agent(
            &ws.key,
            json!({"name": "Existing receptionist", "welcomeMessage": "Hello, this is the front desk."}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let member = person(&app, &ws, Role::Member).await;
    browser.sign_in(&app, &member).await;
    let c = &browser.client;

    c.goto(&format!("{}/agents/new", app.base)).await.unwrap();
    let name = browser.wait_for(Locator::Id("f-name")).await;
    name.send_keys("Interview screener").await.unwrap();
    let duration = c.find(Locator::Id("f-maxDurationSeconds")).await.unwrap();
    duration.clear().await.unwrap();
    duration.send_keys("5").await.unwrap();
    c.find(Locator::Css("form.agent-form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let error = browser
        .wait_for(Locator::Id("f-maxDurationSeconds-error"))
        .await;
    assert_eq!(
        error.text().await.unwrap(),
        "maxDurationSeconds must be between 10 and 14400"
    );
    // The error sits inside that field's own box, and the name typed is kept.
    let field = c
        .find(Locator::Css("#f-maxDurationSeconds-field .field-error"))
        .await
        .unwrap();
    assert!(field.text().await.unwrap().contains("maxDurationSeconds"));
    let kept = c.find(Locator::Id("f-name")).await.unwrap();
    assert_eq!(
        kept.prop("value").await.unwrap().as_deref(),
        Some("Interview screener")
    );

    let duration = c.find(Locator::Id("f-maxDurationSeconds")).await.unwrap();
    duration.clear().await.unwrap();
    duration.send_keys("600").await.unwrap();
    c.find(Locator::Css("form.agent-form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let table = browser.wait_for(Locator::Id("agents")).await;
    let text = table.text().await.unwrap();
    assert!(text.contains("Interview screener"), "{text}");
    assert!(text.contains("Existing receptionist"), "{text}");
    browser.screenshot("agents").await;
    assert_eq!(agents_named(&app, &ws, "Interview screener").await.len(), 1);

    // An agent's page: the chat opens with the welcome and answers through htmx.
    c.goto(&format!("{}/agents/{existing}/edit", app.base))
        .await
        .unwrap();
    browser
        .click(Locator::Css("#chat button[type=submit]"))
        .await;
    let welcome = browser
        .wait_for(Locator::Css("#chat-log li.chat-agent"))
        .await;
    assert!(
        welcome
            .text()
            .await
            .unwrap()
            .contains("Hello, this is the front desk.")
    );
    c.find(Locator::Id("chat-message"))
        .await
        .unwrap()
        .send_keys("Is the clinic open on Sunday?")
        .await
        .unwrap();
    c.find(Locator::Css("#chat button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let mine = browser
        .wait_for(Locator::Css("#chat-log li.chat-you"))
        .await;
    assert!(mine.text().await.unwrap().contains("clinic open on Sunday"));
    browser.screenshot("agent-edit").await;

    // A refused message (blank) comes back 422 and is swapped in with its reason.
    c.find(Locator::Css("#chat button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let refusal = browser.wait_for(Locator::Id("chat-error")).await;
    assert!(
        refusal
            .text()
            .await
            .unwrap()
            .contains("message is required")
    );
    browser.close().await;
}

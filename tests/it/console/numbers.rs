//! The numbers pages: an admin puts an agent on a number and sets how it
//! answers (the API's rules, each refusal beside its field); a viewer sees
//! the settings and cannot change them.

use super::support::{ConsoleClient, person};
use crate::support::{TestApp, Workspace};
use serde_json::json;
use voxline::domain::Role;
use voxline::domain::inbound::WhenBusy;
use voxline::store::NumberRow;

/// A form's fields.
type Fields<'a> = &'a [(&'a str, &'a str)];

/// The workspace's only number, as stored.
async fn the_number(app: &TestApp, ws: &Workspace) -> NumberRow {
    let mut numbers = app.store().numbers(ws.org_id).await.unwrap();
    assert_eq!(numbers.len(), 1);
    numbers.remove(0)
}

#[tokio::test]
async fn the_inbound_form_saves_and_refuses_bad_fields_by_name() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Front desk", 1).await;
    let other = app.calling_workspace("Elsewhere", 1).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Reception", "welcomeMessage": "Hi.", "prompt": "Be brief."}),
        )
        .await;
    let agent_id = agent["id"].as_str().unwrap().to_string();
    let foreign = app
        .create_agent(
            &other.key,
            json!({"name": "Not ours", "welcomeMessage": "Hi.", "prompt": "Be brief."}),
        )
        .await;
    let foreign_id = foreign["id"].as_str().unwrap().to_string();
    let number = the_number(&app, &ws).await;
    let admin = person(&app, &ws, Role::Admin).await;
    let client = ConsoleClient::sign_in(&app, &admin).await;

    let wallet = client.get("/wallet").await;
    assert_eq!(wallet.status, 200, "{}", wallet.body);
    assert!(
        wallet
            .body
            .contains(&format!("href=\"/numbers/{}\"", number.id))
    );

    let path = format!("/numbers/{}/inbound", number.id);
    let saved = client
        .post_form(
            &path,
            &[
                ("agent", &agent_id),
                ("enabled", "1"),
                ("when_busy", "queue"),
                ("queue_seconds", "30"),
                ("hold_message", "Please hold, a person will be with you."),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let location = saved.headers["location"].to_str().unwrap().to_string();
    assert_eq!(location, format!("/numbers/{}?saved=1", number.id));
    let stored = the_number(&app, &ws).await;
    assert_eq!(
        stored.inbound_agent_id.map(|a| a.to_string()),
        Some(agent_id.clone())
    );
    let settings = stored.inbound();
    assert!(settings.enabled);
    assert_eq!(settings.when_busy, WhenBusy::Queue);
    assert_eq!(settings.queue_seconds, 30);
    assert_eq!(
        settings.hold_message.as_deref(),
        Some("Please hold, a person will be with you.")
    );
    let page = client.get(&location).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Inbound settings saved."));
    assert!(page.body.contains("Reception"));
    assert!(page.body.contains("hold the caller up to 30 s"));
    let wallet = client.get("/wallet").await;
    assert!(wallet.body.contains("Reception"), "{}", wallet.body);
    // The agent's page lists the number it answers.
    let agent_page = client.get(&format!("/agents/{agent_id}/edit")).await;
    assert_eq!(agent_page.status, 200, "{}", agent_page.body);
    assert!(
        agent_page.body.contains(&format!(
            "href=\"/numbers/{}\">{}</a>",
            number.id, number.phone
        )),
        "{}",
        agent_page.body
    );

    // Each refusal is a 422 with the message beside its field; nothing changes.
    let cases: [(Fields, &str, &str); 5] = [
        (
            &[
                ("agent", &agent_id),
                ("when_busy", "queue"),
                ("queue_seconds", "4"),
            ],
            "inbound-queue-seconds-error",
            "between 5 and 600",
        ),
        (
            &[
                ("agent", &agent_id),
                ("when_busy", "wait"),
                ("queue_seconds", "30"),
            ],
            "inbound-when-busy-error",
            "Choose reject or queue.",
        ),
        (
            &[
                ("agent", ""),
                ("enabled", "1"),
                ("when_busy", "reject"),
                ("queue_seconds", "30"),
            ],
            "inbound-enabled-error",
            "Choose the agent that answers",
        ),
        (
            &[
                ("agent", &foreign_id),
                ("when_busy", "reject"),
                ("queue_seconds", "30"),
            ],
            "inbound-agent-error",
            "Choose one of the workspace",
        ),
        (
            &[
                ("agent", &agent_id),
                ("when_busy", "reject"),
                ("queue_seconds", "30"),
                ("hold_message", &"x".repeat(501)),
            ],
            "inbound-hold-message-error",
            "The hold message",
        ),
    ];
    for (fields, error_id, message) in cases {
        let refused = client.post_form(&path, fields).await;
        assert_eq!(refused.status, 422, "{error_id}: {}", refused.body);
        assert!(
            refused.body.contains(&format!("id=\"{error_id}\"")),
            "{error_id}: {}",
            refused.body
        );
        assert!(
            refused.body.contains(message),
            "{error_id}: {}",
            refused.body
        );
    }
    assert_eq!(the_number(&app, &ws).await.inbound(), settings);

    // The agent comes off: the number answers nothing.
    let off = client
        .post_form(
            &path,
            &[
                ("agent", ""),
                ("when_busy", "reject"),
                ("queue_seconds", "60"),
            ],
        )
        .await;
    assert_eq!(off.status, 303, "{}", off.body);
    let stored = the_number(&app, &ws).await;
    assert_eq!(stored.inbound_agent_id, None);
    assert!(!stored.inbound().enabled);
    let agent_page = client.get(&format!("/agents/{agent_id}/edit")).await;
    assert!(
        agent_page
            .body
            .contains("No number routes its calls to this agent")
    );

    // Another workspace's number is no page.
    let theirs = the_number(&app, &other).await;
    assert_eq!(
        client.get(&format!("/numbers/{}", theirs.id)).await.status,
        404
    );
    let forged = client
        .post_form(
            &format!("/numbers/{}/inbound", theirs.id),
            &[
                ("agent", &foreign_id),
                ("when_busy", "reject"),
                ("queue_seconds", "60"),
            ],
        )
        .await;
    assert_eq!(forged.status, 404);
}

#[tokio::test]
async fn a_viewer_sees_the_settings_but_cannot_change_them() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Read only", 1).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Desk", "welcomeMessage": "Hi.", "prompt": "Be brief."}),
        )
        .await;
    let agent_id = agent["id"].as_str().unwrap().to_string();
    let number = the_number(&app, &ws).await;
    let viewer = person(&app, &ws, Role::Viewer).await;
    let client = ConsoleClient::sign_in(&app, &viewer).await;

    let page = client.get(&format!("/numbers/{}", number.id)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Inbound calls"));
    assert!(
        !page.body.contains("id=\"inbound-form\""),
        "no form for a viewer"
    );

    let refused = client
        .post_form(
            &format!("/numbers/{}/inbound", number.id),
            &[
                ("agent", &agent_id),
                ("enabled", "1"),
                ("when_busy", "reject"),
                ("queue_seconds", "60"),
            ],
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let stored = the_number(&app, &ws).await;
    assert_eq!(stored.inbound_agent_id, None);
    assert!(!stored.inbound().enabled);

    // An admin's form without the session's token changes nothing either.
    let admin = person(&app, &ws, Role::Admin).await;
    let admin_client = ConsoleClient::sign_in(&app, &admin).await;
    let forged = admin_client
        .post_form_raw(
            &format!("/numbers/{}/inbound", number.id),
            &[
                ("agent", &agent_id),
                ("enabled", "1"),
                ("when_busy", "reject"),
                ("queue_seconds", "60"),
            ],
        )
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(the_number(&app, &ws).await.inbound_agent_id, None);
}

#[tokio::test]
async fn blocked_callers_the_cap_and_the_routing_url_are_kept_on_the_inbound_page() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Rules", 1).await;
    let admin = person(&app, &ws, Role::Admin).await;
    let client = ConsoleClient::sign_in(&app, &admin).await;

    let page = client.get("/inbound").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("No blocked callers."));

    let blocked = client
        .post_form(
            "/inbound/blocked-callers",
            &[("phone", "+919845000111"), ("reason", "prank calls")],
        )
        .await;
    assert_eq!(blocked.status, 303, "{}", blocked.body);
    let page = client.get("/inbound?done=blocked").await;
    assert!(page.body.contains("+919845000111"));
    assert!(page.body.contains("prank calls"));
    let (rows, total) = app.store().blocked_callers(ws.org_id, 10, 0).await.unwrap();
    assert_eq!((rows.len(), total), (1, 1));

    let bad = client
        .post_form(
            "/inbound/blocked-callers",
            &[("phone", "12345"), ("reason", "")],
        )
        .await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(
        bad.body.contains("id=\"block-phone-error\""),
        "{}",
        bad.body
    );

    let removed = client
        .post_form(
            "/inbound/blocked-callers/remove",
            &[("phone", "+919845000111")],
        )
        .await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert_eq!(
        app.store()
            .blocked_callers(ws.org_id, 10, 0)
            .await
            .unwrap()
            .1,
        0
    );
    let again = client
        .post_form(
            "/inbound/blocked-callers/remove",
            &[("phone", "+919845000111")],
        )
        .await;
    assert_eq!(again.status, 404);

    // The cap is bounded, named at its field.
    let bad_cap = client
        .post_form(
            "/inbound/settings",
            &[("caller_hourly_cap", "1001"), ("routing_url", "")],
        )
        .await;
    assert_eq!(bad_cap.status, 422, "{}", bad_cap.body);
    assert!(bad_cap.body.contains("id=\"rules-cap-error\""));
    // A URL that is no URL is refused at its field; nothing is stored.
    let bad_url = client
        .post_form(
            "/inbound/settings",
            &[("caller_hourly_cap", "5"), ("routing_url", "not a url")],
        )
        .await;
    assert_eq!(bad_url.status, 422, "{}", bad_url.body);
    assert!(bad_url.body.contains("id=\"rules-routing-url-error\""));
    assert!(bad_url.body.contains("routingUrl is refused"));
    assert_eq!(
        app.store()
            .inbound_caller_hourly_cap(ws.org_id)
            .await
            .unwrap(),
        20
    );
    assert!(
        app.store()
            .inbound_routing(ws.org_id)
            .await
            .unwrap()
            .is_none()
    );

    // The first URL's signing secret is shown in that answer, once (the
    // test server allows its own host).
    let url = format!("{}/routing-test", app.base);
    let first = client
        .post_form(
            "/inbound/settings",
            &[("caller_hourly_cap", "5"), ("routing_url", &url)],
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let (stored_url, secret) = app
        .store()
        .inbound_routing(ws.org_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored_url, url);
    assert!(
        first
            .body
            .contains(&format!("id=\"new-secret-value\">{secret}<")),
        "{}",
        first.body
    );
    assert_eq!(
        app.store()
            .inbound_caller_hourly_cap(ws.org_id)
            .await
            .unwrap(),
        5
    );
    let later = client.get("/inbound").await;
    assert!(!later.body.contains(&secret), "shown only once");
    assert!(later.body.contains(&url));
    let again = client
        .post_form(
            "/inbound/settings",
            &[("caller_hourly_cap", "0"), ("routing_url", "")],
        )
        .await;
    assert_eq!(again.status, 303, "{}", again.body);
    assert!(
        app.store()
            .inbound_routing(ws.org_id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        app.store()
            .inbound_caller_hourly_cap(ws.org_id)
            .await
            .unwrap(),
        0
    );

    // A viewer cannot reach the page or change a rule.
    let viewer = person(&app, &ws, Role::Viewer).await;
    let viewer_client = ConsoleClient::sign_in(&app, &viewer).await;
    assert_eq!(viewer_client.get("/inbound").await.status, 403);
    let refused = viewer_client
        .post_form("/inbound/blocked-callers", &[("phone", "+919845000222")])
        .await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        app.store()
            .blocked_callers(ws.org_id, 10, 0)
            .await
            .unwrap()
            .1,
        0
    );
}

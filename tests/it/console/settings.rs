//! The settings page: provider credentials are write-only. A saved value is
//! stored (sealed) and never shown back, not even in a refused form; only
//! admins and owners reach the page.

use super::support::{Browser, ConsoleClient, person};
use crate::support::TestApp;
use fantoccini::Locator;
use voxline::domain::Role;
use voxline::secrets::credentials::CredentialCipher;

#[tokio::test]
async fn credentials_are_stored_sealed_and_never_echoed() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Secrets").await;
    let admin = person(&app, &ws, Role::Admin).await;
    let client = ConsoleClient::sign_in(&app, &admin).await;

    let empty = client.get("/settings").await;
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert!(empty.body.contains("not set"));

    let secret_key = "sk-very-secret-0123456789";
    let saved = client
        .post_form(
            "/settings/credentials/openai",
            &[("apiKey", secret_key), ("baseUrl", "")],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let page = client
        .get(saved.headers["location"].to_str().unwrap())
        .await;
    assert_eq!(page.status, 200);
    assert!(
        !page.body.contains(secret_key),
        "a stored value is never shown"
    );
    assert!(page.body.contains("fields: apiKey"), "{}", page.body);
    assert!(page.body.contains("openai credential is saved"));

    // It is stored sealed, and opens to what was typed.
    let (nonce, sealed) = app
        .store()
        .credential(ws.org_id, "openai")
        .await
        .unwrap()
        .expect("stored");
    assert!(!sealed.contains(secret_key));
    let opened = CredentialCipher::new(&app.state().secret)
        .open(&nonce, &sealed)
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&opened).unwrap();
    assert_eq!(value, serde_json::json!({"apiKey": secret_key}));

    // Removed: the workspace falls back to the service's own account.
    let removed = client
        .post_form("/settings/credentials/openai/remove", &[])
        .await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert!(
        app.store()
            .credential(ws.org_id, "openai")
            .await
            .unwrap()
            .is_none()
    );
    let again = client
        .post_form("/settings/credentials/openai/remove", &[])
        .await;
    assert_eq!(again.status, 404, "nothing left to remove");

    // A refused form says why and keeps the account's name, never the token.
    let token = "twilio-token-never-echoed";
    let refused = client
        .post_form(
            "/settings/credentials/twilio",
            &[
                ("accountSid", "AC-typed-sid"),
                ("authToken", ""),
                ("baseUrl", ""),
            ],
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("needs a non-empty string field authToken"),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("value=\"AC-typed-sid\""));
    let refused = client
        .post_form(
            "/settings/credentials/twilio",
            &[("accountSid", ""), ("authToken", token)],
        )
        .await;
    assert_eq!(refused.status, 422);
    assert!(
        !refused.body.contains(token),
        "a secret is never put back on a page"
    );
    assert!(
        app.store()
            .credential(ws.org_id, "twilio")
            .await
            .unwrap()
            .is_none()
    );

    // An unknown vendor is no page.
    let unknown = client
        .post_form("/settings/credentials/myspace", &[("apiKey", "x")])
        .await;
    assert_eq!(unknown.status, 404);
    // Without the CSRF token nothing is stored.
    let forged = client
        .post_form_raw("/settings/credentials/deepgram", &[("apiKey", "dg-key")])
        .await;
    assert_eq!(forged.status, 403);
    assert!(
        app.store()
            .credential(ws.org_id, "deepgram")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn viewers_and_members_neither_see_nor_change_credentials() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Closed").await;
    let cipher = CredentialCipher::new(&app.state().secret);
    voxline::secrets::workspace_credentials::store_credential(
        app.store(),
        &cipher,
        ws.org_id,
        voxline::secrets::credentials::CredentialKind::OpenAi,
        &serde_json::json!({"apiKey": "sk-kept"}),
        0,
    )
    .await
    .unwrap();
    for role in [Role::Viewer, Role::Member] {
        let someone = person(&app, &ws, role).await;
        let client = ConsoleClient::sign_in(&app, &someone).await;
        assert_eq!(client.get("/settings").await.status, 403, "{role}");
        let post = client
            .post_form("/settings/credentials/openai", &[("apiKey", "sk-x")])
            .await;
        assert_eq!(post.status, 403, "{role}");
        let remove = client
            .post_form("/settings/credentials/openai/remove", &[])
            .await;
        assert_eq!(remove.status, 403, "{role}");
    }
    // Neither replaced nor removed: it still opens to what was stored.
    let (nonce, sealed) = app
        .store()
        .credential(ws.org_id, "openai")
        .await
        .unwrap()
        .expect("still stored");
    let opened = cipher.open(&nonce, &sealed).unwrap();
    assert_eq!(opened, br#"{"apiKey":"sk-kept"}"#);
}

#[tokio::test]
async fn a_browser_sets_a_credential_and_sees_only_its_field_names() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.workspace("Settings").await;
    let owner = person(&app, &ws, Role::Owner).await;
    browser.sign_in(&app, &owner).await;
    browser.goto(&app, "/settings").await;
    browser
        .click(Locator::Css("#credential-deepgram summary"))
        .await;
    browser
        .fill(Locator::Id("deepgram-apiKey"), "dg-secret-value-42")
        .await;
    browser
        .click(Locator::Css("#credential-deepgram button[type=submit]"))
        .await;
    let notice = browser.text(Locator::Css("p.flash.ok")).await;
    assert!(notice.contains("deepgram"), "{notice}");
    let source = browser.client.source().await.unwrap();
    assert!(!source.contains("dg-secret-value-42"));
    let row = browser
        .client
        .find(Locator::Id("credential-deepgram"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(row.contains("apiKey"), "{row}");
    browser.screenshot("settings").await;
    browser.close().await;
}

//! The API keys page: a key is shown once, works, is revoked and then
//! refused by the API; only admins and owners reach the page; caps and
//! names are checked at the field; one workspace never touches another's keys.

use super::support::{Browser, ConsoleClient, person};
use crate::support::{TestApp, eventually};
use fantoccini::Locator;
use std::time::Duration;
use voxline::domain::Role;

#[tokio::test]
async fn a_browser_creates_a_key_sees_it_once_revokes_it_and_the_api_refuses_it() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.workspace("Keys").await;
    let admin = person(&app, &ws, Role::Admin).await;
    browser.sign_in(&app, &admin).await;
    browser.goto(&app, "/keys").await;
    browser.fill(Locator::Id("key-name"), "CRM sync").await;
    browser
        .click(Locator::Css("form.key-create button[type=submit]"))
        .await;
    let key = browser.text(Locator::Id("new-key-value")).await;
    let key = key.trim().to_string();
    assert!(key.starts_with("acai_") && key.len() > 40, "{key}");
    // The copy button is wired to the key (console.js's data-copy).
    let copy = browser
        .client
        .find(Locator::Css("#new-key button[data-copy]"))
        .await
        .unwrap();
    assert_eq!(
        copy.attr("data-copy").await.unwrap().as_deref(),
        Some("#new-key-value")
    );
    browser.screenshot("keys").await;

    // The key works against the API at once.
    app.get(&key, "/api/agents").await.expect(200);

    // Shown once: the list does not carry it again.
    browser.goto(&app, "/keys").await;
    browser.wait_for(Locator::Css("table.keys-table")).await;
    let source = browser.client.source().await.unwrap();
    assert!(!source.contains(&key), "the full key is shown only once");
    assert!(source.contains("CRM sync"));

    // Revoke it from its row.
    browser
        .click(Locator::XPath(
            "//tr[td[contains(., 'CRM sync')]]//button[contains(., 'Revoke')]",
        ))
        .await;
    let notice = browser.text(Locator::Css("p.flash.ok")).await;
    assert!(notice.contains("revoked"), "{notice}");
    let row = browser
        .client
        .find(Locator::XPath("//tr[td[contains(., 'CRM sync')]]"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(row.contains("revoked"), "{row}");

    // The API refuses it now.
    let refused = app.get(&key, "/api/agents").await;
    assert_eq!(refused.status, 401, "{:?}", refused.body);
    // The workspace's other key still works.
    app.get(&ws.key, "/api/agents").await.expect(200);
    browser.close().await;
}

#[tokio::test]
async fn only_admins_and_owners_reach_keys_and_a_viewer_changes_nothing() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Roles").await;
    for role in [Role::Viewer, Role::Member] {
        let someone = person(&app, &ws, role).await;
        let client = ConsoleClient::sign_in(&app, &someone).await;
        let page = client.get("/keys").await;
        assert_eq!(page.status, 403, "{role}: {}", page.body);
        assert!(!page.body.contains(&ws.key_id.to_string()), "{role}");
        // The menu does not offer it either.
        let account = client.get("/account").await;
        assert!(!account.body.contains("href=\"/keys\""), "{role}");
        // Posting anyway changes nothing.
        let created = client.post_form("/keys", &[("name", "sneaky")]).await;
        assert_eq!(created.status, 403, "{role}");
        let revoked = client
            .post_form(&format!("/keys/{}/revoke", ws.key_id), &[])
            .await;
        assert_eq!(revoked.status, 403, "{role}");
        let limits = client
            .post_form(
                &format!("/keys/{}/limits", ws.key_id),
                &[("daily", "1"), ("monthly", "1")],
            )
            .await;
        assert_eq!(limits.status, 403, "{role}");
    }
    let keys = app.store().api_keys(ws.org_id).await.unwrap();
    assert_eq!(keys.len(), 1, "no key was created");
    assert!(keys[0].revoked_at.is_none(), "nothing was revoked");
    assert_eq!(keys[0].daily_limit, 5_000, "no cap was changed");
    app.get(&ws.key, "/api/agents").await.expect(200);

    let admin = person(&app, &ws, Role::Admin).await;
    let client = ConsoleClient::sign_in(&app, &admin).await;
    let page = client.get("/keys").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(&keys[0].prefix));
    assert!(!page.body.contains(&ws.key), "never the full key in a list");
}

#[tokio::test]
async fn names_and_caps_are_checked_at_the_field_and_usage_shows_against_the_caps() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Fields").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &owner).await;

    let blank = client.post_form("/keys", &[("name", "   ")]).await;
    assert_eq!(blank.status, 422);
    assert!(
        blank.body.contains("class=\"field-error\""),
        "{}",
        blank.body
    );
    assert!(blank.body.contains("Name is required"));
    let long = "n".repeat(101);
    let too_long = client.post_form("/keys", &[("name", &long)]).await;
    assert_eq!(too_long.status, 422);
    assert!(too_long.body.contains(&long), "what was typed is kept");
    assert_eq!(app.store().api_keys(ws.org_id).await.unwrap().len(), 1);

    // Without the CSRF token nothing is created.
    let forged = client.post_form_raw("/keys", &[("name", "forged")]).await;
    assert_eq!(forged.status, 403);
    assert_eq!(app.store().api_keys(ws.org_id).await.unwrap().len(), 1);

    let limits_path = format!("/keys/{}/limits", ws.key_id);
    let bad = client
        .post_form(&limits_path, &[("daily", "-3"), ("monthly", "lots")])
        .await;
    assert_eq!(bad.status, 422);
    assert!(
        bad.body.contains("Daily cap must not be negative"),
        "{}",
        bad.body
    );
    assert!(bad.body.contains("Monthly cap must be a whole number"));
    assert!(
        bad.body.contains("value=\"lots\""),
        "what was typed is kept"
    );
    let ok = client
        .post_form(&limits_path, &[("daily", "2"), ("monthly", "1,000")])
        .await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    let key = app.store().api_key(ws.key_id).await.unwrap().unwrap();
    assert_eq!((key.daily_limit, key.monthly_limit), (2, 1_000));

    // Two requests use the daily cap; the third is refused, and the page
    // shows the usage against the caps and the last use.
    app.get(&ws.key, "/api/agents").await.expect(200);
    app.get(&ws.key, "/api/agents").await.expect(200);
    assert_eq!(app.get(&ws.key, "/api/agents").await.status, 429);
    // The outcome of a request is counted as it ends: wait for the refusal.
    let page = eventually(Duration::from_secs(10), "usage on the page", || async {
        let page = client.get("/keys").await;
        page.body.contains("1 refused").then_some(page)
    })
    .await;
    assert!(page.body.contains("2 / 2"), "{}", page.body);
    assert!(page.body.contains("2 / 1,000"), "{}", page.body);
    assert!(!page.body.contains(">never<"), "last use is shown");
}

#[tokio::test]
async fn one_workspace_cannot_revoke_or_cap_anothers_key() {
    let app = TestApp::spawn().await;
    let mine = app.workspace("Mine").await;
    let theirs = app.workspace("Theirs").await;
    let owner = person(&app, &mine, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &owner).await;
    let page = client.get("/keys").await;
    assert!(!page.body.contains(&theirs.key_id.to_string()));
    let revoke = client
        .post_form(&format!("/keys/{}/revoke", theirs.key_id), &[])
        .await;
    assert_eq!(revoke.status, 404);
    let limits = client
        .post_form(
            &format!("/keys/{}/limits", theirs.key_id),
            &[("daily", "0"), ("monthly", "0")],
        )
        .await;
    assert_eq!(limits.status, 404);
    app.get(&theirs.key, "/api/agents").await.expect(200);
    let not_an_id = client.post_form("/keys/nope/revoke", &[]).await;
    assert_eq!(not_an_id.status, 404);
}

#[tokio::test]
async fn a_key_name_with_markup_renders_as_text() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Escapes").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &owner).await;
    let name = "<script>alert(1)</script>";
    let created = client.post_form("/keys", &[("name", name)]).await;
    assert_eq!(created.status, 200, "{}", created.body);
    let page = client.get("/keys").await;
    assert!(!page.body.contains(name), "{}", page.body);
    // Escaped (askama writes `<` as `&#60;`), the name is still there as text.
    assert!(
        page.body.contains("script&#62;alert(1)&#60;/script"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("<script>"),
        "no script element on the page"
    );
}

#[tokio::test]
async fn a_browser_signed_in_as_a_viewer_is_refused_the_keys_page() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.workspace("Viewers").await;
    let viewer = person(&app, &ws, Role::Viewer).await;
    browser.sign_in(&app, &viewer).await;
    let menu = browser.text(Locator::Css("nav.main")).await;
    assert!(!menu.contains("API keys"), "{menu}");
    browser.goto(&app, "/keys").await;
    let heading = browser.text(Locator::Css("main h1")).await;
    assert_eq!(heading, "Not allowed");
    assert!(
        browser
            .client
            .find(Locator::Css("table.keys-table"))
            .await
            .is_err(),
        "no key list for a viewer"
    );
    let source = browser.client.source().await.unwrap();
    assert!(!source.contains(&ws.key_id.to_string()));
    browser.close().await;
}

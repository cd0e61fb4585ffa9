//! The console's door: sign-in and its throttle, sessions and sign-out,
//! CSRF, the security headers, keys refused, and a real browser signing in.

use super::support::{Browser, ConsoleClient, person, post_sign_in, sign_in_token};
use crate::support::TestApp;
use fantoccini::Locator;
use voxline::domain::Role;

#[tokio::test]
async fn a_person_signs_in_gets_a_strict_cookie_and_signs_out() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Console").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // Signed out, a page sends you to sign in and back.
    let r = http
        .get(format!("{}/account", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/sign-in?next=%2Faccount");
    // htmx is told where to go instead.
    let r = http
        .get(format!("{}/account", app.base))
        .header("hx-request", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["hx-redirect"], "/sign-in?next=%2Faccount");

    // A wrong password is refused without saying which part was wrong.
    let token = sign_in_token(&app).await;
    let r = post_sign_in(
        &app,
        &token,
        &[
            ("email", owner.email.as_str()),
            ("password", "wrong password!"),
        ],
        &[],
    )
    .await;
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("do not match"));

    // The right one opens a session; the cookie is HttpOnly and Lax, and a
    // crafted next cannot leave the site.
    let r = post_sign_in(
        &app,
        &token,
        &[
            ("email", owner.email.to_uppercase().as_str()),
            ("password", owner.password.as_str()),
            ("next", "//evil.example/"),
        ],
        &[],
    )
    .await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("voxline_session="))
        .expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "http public URL: {cookie}");

    let client = ConsoleClient::sign_in(&app, &owner).await;
    let account = client.get("/account").await;
    assert_eq!(account.status, 200);
    assert!(account.body.contains(&owner.email));
    assert!(account.body.contains("Console"), "the workspace's name");
    // The owner's menu has every page.
    for href in ["/calls", "/agents", "/keys", "/team"] {
        assert!(account.body.contains(&format!("href=\"{href}\"")), "{href}");
    }

    // Sign-out ends the session on the server: the old cookie opens nothing.
    let out = client.post_form("/sign-out", &[]).await;
    assert_eq!(out.status, 303);
    assert!(
        out.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0"),
        "the cookie is cleared"
    );
    assert_eq!(client.get("/account").await.status, 303);
}

#[tokio::test]
async fn the_menu_follows_the_role_and_the_role_is_read_on_every_request() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Roles").await;
    let viewer = person(&app, &ws, Role::Viewer).await;
    let client = ConsoleClient::sign_in(&app, &viewer).await;
    let page = client.get("/account").await;
    assert!(page.body.contains("href=\"/calls\""));
    for hidden in ["/keys", "/webhooks", "/settings", "/team"] {
        assert!(
            !page.body.contains(&format!("href=\"{hidden}\"")),
            "{hidden}"
        );
    }
    // A change of role applies to the open session at once.
    app.store()
        .set_user_role(ws.org_id, viewer.id, Role::Admin)
        .await
        .unwrap();
    let page = client.get("/account").await;
    assert!(page.body.contains("href=\"/keys\""));
    // Removing the person ends their sessions.
    let owner = super::support::person(&app, &ws, Role::Owner).await;
    assert!(app.store().delete_user(ws.org_id, viewer.id).await.unwrap());
    assert_eq!(client.get("/account").await.status, 303);
    // The last owner stays.
    let err = app.store().delete_user(ws.org_id, owner.id).await;
    assert!(err.is_err(), "the last owner cannot be removed");
    let err = app
        .store()
        .set_user_role(ws.org_id, owner.id, Role::Member)
        .await;
    assert!(err.is_err(), "the last owner cannot be demoted");
}

#[tokio::test]
async fn state_changes_need_the_csrf_token_and_a_password_change_ends_other_sessions() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Csrf").await;
    let member = person(&app, &ws, Role::Member).await;
    let client = ConsoleClient::sign_in(&app, &member).await;
    let other = ConsoleClient::sign_in(&app, &member).await;
    let new_password = "a brand new password";

    // No token, or another session's token: refused, nothing changed.
    let r = client
        .post_form_raw(
            "/account/password",
            &[("current", member.password.as_str()), ("new", new_password)],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("security token"));
    let r = client
        .post_form_raw(
            "/account/password",
            &[
                ("_csrf", other.csrf.as_str()),
                ("current", member.password.as_str()),
                ("new", new_password),
            ],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(other.get("/account").await.status, 200, "nothing changed");

    // A wrong current password or a short new one is shown at its field.
    let r = client
        .post_form(
            "/account/password",
            &[("current", "not it at all"), ("new", new_password)],
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(r.body.contains("Current password is wrong"));
    let r = client
        .htmx_post(
            "/account/password",
            &[("current", member.password.as_str()), ("new", "short")],
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(r.body.contains("at least 10 characters"), "{}", r.body);

    // With the token (as htmx sends it) the change is made; the other
    // session is signed out, this one stays.
    let r = client
        .htmx_post(
            "/account/password",
            &[("current", member.password.as_str()), ("new", new_password)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("Your password is changed"));
    assert_eq!(client.get("/account").await.status, 200);
    assert_eq!(other.get("/account").await.status, 303);
    let mut changed = member.clone();
    changed.password = new_password.to_string();
    ConsoleClient::sign_in(&app, &changed).await;
}

#[tokio::test]
async fn failed_sign_ins_are_throttled_per_address() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Throttle").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let token = sign_in_token(&app).await;
    let try_sign_in = |password: String| {
        let (app, token, email) = (&app, &token, owner.email.clone());
        async move {
            let fields = [("email", email.as_str()), ("password", password.as_str())];
            post_sign_in(app, token, &fields, &[])
                .await
                .status()
                .as_u16()
        }
    };
    for _ in 0..5 {
        assert_eq!(try_sign_in("wrong password!".into()).await, 401);
    }
    // Even the right password waits now.
    assert_eq!(try_sign_in(owner.password.clone()).await, 429);
    // Another address is not held up.
    let other = person(&app, &ws, Role::Viewer).await;
    ConsoleClient::sign_in(&app, &other).await;
}

#[tokio::test]
async fn pages_carry_the_security_headers_and_keys_open_no_console_page() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Headers").await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http
        .get(format!("{}/sign-in", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"));
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let html = r.text().await.unwrap();
    assert!(
        !html.contains("<script>") && !html.contains(" onclick="),
        "no inline script"
    );

    // Assets are embedded and cacheable.
    for (name, kind) in [
        ("htmx.min.js", "text/javascript"),
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
        ("uPlot.iife.min.js", "text/javascript"),
    ] {
        let r = http
            .get(format!("{}/assets/{name}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        assert!(
            r.headers()["cache-control"]
                .to_str()
                .unwrap()
                .contains("max-age")
        );
        let etag = r.headers()["etag"].clone();
        let again = http
            .get(format!("{}/assets/{name}", app.base))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304);
    }

    // An API key opens no console page, and a session opens no key route.
    let r = http
        .get(format!("{}/account", app.base))
        .bearer_auth(&ws.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let owner = person(&app, &ws, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &owner).await;
    let api = client.get("/api/agents").await;
    assert_eq!(api.status, 401, "{}", api.body);
}

#[tokio::test]
async fn a_browser_signs_in_and_a_form_post_without_the_token_is_refused() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.workspace("Browser").await;
    let owner = person(&app, &ws, Role::Owner).await;
    browser.goto(&app, "/account").await;
    // Sent to sign in first.
    browser.wait_for(Locator::Id("email")).await;
    browser.screenshot("sign-in").await;
    browser.sign_in(&app, &owner).await;
    let who = browser.text(Locator::Css("header.top .who")).await;
    assert!(who.contains(&owner.email), "{who}");
    // A post the page did not make (no token) is refused by the server.
    let status = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/account/password', {method: 'POST',
               headers: {'content-type': 'application/x-www-form-urlencoded'},
               body: 'current=x&new=yyyyyyyyyyyy'}).then(r => done(r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, 403);
    browser.close().await;
}

#[tokio::test]
async fn a_browser_at_phone_width_reads_every_page_without_sideways_scrolling() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Phone", 2).await;
    let owner = person(&app, &ws, Role::Owner).await;
    browser.sign_in(&app, &owner).await;
    browser.client.set_window_size(390, 844).await.unwrap();
    for path in [
        "/",
        "/calls",
        "/agents",
        "/agents/new",
        "/batches",
        "/batches/new",
        "/ratings",
        "/keys",
        "/webhooks",
        "/wallet",
        "/settings",
        "/team",
        "/account",
    ] {
        browser.goto(&app, path).await;
        browser.wait_for(Locator::Css("main#content")).await;
        let fits = browser
            .client
            .execute(
                "return document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1;",
                vec![],
            )
            .await
            .unwrap();
        if fits != serde_json::Value::Bool(true) {
            let wide = browser
                .client
                .execute(
                    "const w = document.documentElement.clientWidth;
                     return [...document.querySelectorAll('body *')]
                       .filter(e => e.getBoundingClientRect().right > w + 1)
                       .slice(0, 5)
                       .map(e => e.tagName.toLowerCase() + '.' + e.className);",
                    vec![],
                )
                .await
                .unwrap();
            panic!("{path} scrolls sideways at 390 px; too wide: {wide}");
        }
    }
    browser.goto(&app, "/calls").await;
    browser.screenshot("calls-phone").await;
    browser.close().await;
}

#[tokio::test]
async fn the_demo_workspaces_owner_signs_in_with_the_password_printed_at_first_start() {
    let app = TestApp::spawn_with_settings(|s| s.no_bootstrap = false).await;
    let boot = app
        .server()
        .bootstrapped
        .clone()
        .expect("an empty database bootstraps the Demo workspace");
    let owner = super::support::Person {
        id: voxline::domain::UserId::new(),
        email: boot.owner_email.clone(),
        password: boot.owner_password.clone(),
    };
    let client = ConsoleClient::sign_in(&app, &owner).await;
    let account = client.get("/account").await;
    assert!(account.body.contains("Demo"), "the Demo workspace");
    assert!(account.body.contains("owner"));
    // Shown once: the database holds only its hash.
    let stored = app
        .store()
        .user_credentials(&boot.owner_email)
        .await
        .unwrap()
        .unwrap();
    assert!(stored.password_hash.starts_with("$argon2id$"));
    assert!(!stored.password_hash.contains(&boot.owner_password));
}

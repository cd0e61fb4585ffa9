//! Cross-site requests (issue 28, login CSRF): a state-changing request
//! from another site's page is refused whatever it carries, and the sign-in
//! form needs its pre-session token; over HTTP and in a real browser whose
//! hostile page is served from a second listener.

use super::support::{
    Browser, ConsoleClient, SignInToken, no_redirects, person, post_sign_in, set_cookie,
    sign_in_token,
};
use crate::support::TestApp;
use axum::response::Html;
use fantoccini::Locator;
use std::sync::Arc;
use voxline::domain::Role;
use voxline::domain::clock::ManualClock;

/// The port of `app`'s server.
fn port(app: &TestApp) -> u16 {
    app.base
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("base ends in a port")
}

/// Whether a response started a session.
fn has_session(resp: &reqwest::Response) -> bool {
    set_cookie(resp.headers(), "voxline_session").is_some()
}

#[tokio::test]
async fn a_sign_in_posted_from_another_site_is_refused_and_starts_no_session() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Attacker").await;
    let attacker = person(&app, &ws, Role::Owner).await;
    let creds = [
        ("email", attacker.email.as_str()),
        ("password", attacker.password.as_str()),
    ];
    // A genuine token pair, so the origin alone is what refuses.
    let token = sign_in_token(&app).await;
    let other_port = format!("http://127.0.0.1:{}", port(&app) + 1);
    let refused: [&[(&str, &str)]; 7] = [
        // The issue's reproduction.
        &[
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ],
        // A foreign Origin decides even when Sec-Fetch-Site would pass.
        &[
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "same-origin"),
        ],
        // Same host, another port: same-site, but another origin.
        &[
            ("origin", other_port.as_str()),
            ("sec-fetch-site", "same-site"),
        ],
        // Another scheme of this very host.
        &[("origin", &app.base.replacen("http://", "https://", 1))],
        // Sandboxed frames and cross-origin redirects send `null`.
        &[("origin", "null")],
        // No Origin: Sec-Fetch-Site decides.
        &[("sec-fetch-site", "cross-site")],
        &[("sec-fetch-site", "same-site")],
    ];
    for headers in refused {
        let r = post_sign_in(&app, &token, &creds, headers).await;
        assert_eq!(r.status(), 403, "{headers:?}");
        assert!(!has_session(&r), "no session for {headers:?}");
        let body = r.text().await.unwrap();
        assert!(body.contains("another site"), "the error page: {body}");
        assert!(body.contains("<html"), "an HTML page");
    }

    // From the site itself: its public origin, its own Host under another
    // name, or a browser's same-origin / user-initiated fetch without Origin.
    let localhost = format!("localhost:{}", port(&app));
    let localhost_origin = format!("http://{localhost}");
    let passed: [&[(&str, &str)]; 5] = [
        &[
            ("origin", app.base.as_str()),
            ("sec-fetch-site", "same-origin"),
        ],
        &[
            ("origin", localhost_origin.as_str()),
            ("host", localhost.as_str()),
        ],
        &[("sec-fetch-site", "same-origin")],
        &[("sec-fetch-site", "none")],
        // Neither header (curl): the token check alone decides.
        &[],
    ];
    for headers in passed {
        let r = post_sign_in(&app, &token, &creds, headers).await;
        assert_eq!(r.status(), 303, "{headers:?}");
        assert!(has_session(&r), "a session for {headers:?}");
    }
}

#[tokio::test]
async fn the_sign_in_form_needs_its_own_pre_session_token() {
    let clock = ManualClock::new(crate::support::utc("2026-05-01T05:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.workspace("PreSession").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let creds = [
        ("email", owner.email.as_str()),
        ("password", owner.password.as_str()),
    ];

    // The form sets a strict, HttpOnly, short-lived cookie and carries a
    // field that is not the cookie's value.
    let r = no_redirects()
        .get(format!("{}/sign-in", app.base))
        .send()
        .await
        .unwrap();
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("voxline_sign_in="))
        .expect("a pre-session cookie");
    for part in ["HttpOnly", "SameSite=Strict", "Max-Age=3600", "Path=/"] {
        assert!(cookie.contains(part), "{part}: {cookie}");
    }
    assert!(!cookie.contains("Secure"), "http public URL: {cookie}");
    let token = sign_in_token(&app).await;
    let nonce = token.cookie.split_once('=').unwrap().1;
    assert!(
        !token.field.contains(nonce),
        "the field is bound, not a copy"
    );

    // Without the token, or with parts of two different ones: refused, and
    // no session.
    let other = sign_in_token(&app).await;
    let no_cookie = SignInToken {
        cookie: "unrelated=1".into(),
        field: token.field.clone(),
    };
    let no_field = SignInToken {
        cookie: token.cookie.clone(),
        field: String::new(),
    };
    let mixed = SignInToken {
        cookie: other.cookie.clone(),
        field: token.field.clone(),
    };
    // The cookie's value itself, as a naive double submit would take.
    let copied = SignInToken {
        cookie: token.cookie.clone(),
        field: nonce.to_string(),
    };
    let (issued, tag) = token.field.split_once('.').unwrap();
    let later: i64 = issued.parse::<i64>().unwrap() + 1;
    let retimed = SignInToken {
        cookie: token.cookie.clone(),
        field: format!("{later}.{tag}"),
    };
    for (what, bad) in [
        ("no cookie", &no_cookie),
        ("no field", &no_field),
        ("another form's cookie", &mixed),
        ("the cookie copied", &copied),
        ("a changed time", &retimed),
    ] {
        let r = post_sign_in(&app, bad, &creds, &[]).await;
        assert_eq!(r.status(), 403, "{what}");
        assert!(!has_session(&r), "{what}");
        assert!(r.text().await.unwrap().contains("security token"), "{what}");
    }
    // A bare post (no cookie, no field, no Origin): curl's reproduction.
    let r = no_redirects()
        .post(format!("{}/sign-in", app.base))
        .form(&creds)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(!has_session(&r));

    // A wrong password shows the form again with a field that works.
    let wrong = [
        ("email", owner.email.as_str()),
        ("password", "not the one!"),
    ];
    let r = post_sign_in(&app, &token, &wrong, &[]).await;
    assert_eq!(r.status(), 401);
    let again = SignInToken {
        cookie: set_cookie(r.headers(), "voxline_sign_in").expect("the cookie again"),
        field: super::support::csrf_of(&r.text().await.unwrap()).expect("a field"),
    };
    assert_eq!(again.cookie, token.cookie, "the nonce is kept");

    // The genuine pair opens a session and drops the pre-session cookie.
    let r = post_sign_in(&app, &again, &creds, &[("origin", app.base.as_str())]).await;
    assert_eq!(r.status(), 303);
    assert!(has_session(&r));
    assert_eq!(
        set_cookie(r.headers(), "voxline_sign_in").as_deref(),
        Some("voxline_sign_in="),
        "cleared"
    );

    // A form left open over an hour has expired.
    clock.advance(chrono::Duration::seconds(3601));
    let r = post_sign_in(&app, &token, &creds, &[]).await;
    assert_eq!(r.status(), 403, "an hour-old form");
    assert!(!has_session(&r));
    let fresh = sign_in_token(&app).await;
    assert_eq!(post_sign_in(&app, &fresh, &creds, &[]).await.status(), 303);
}

#[tokio::test]
async fn over_https_the_pre_session_cookie_is_host_only_and_the_scheme_must_match() {
    let app = TestApp::spawn_with_settings(|s| {
        s.public_url = Some("https://voxline.example".into());
    })
    .await;
    let ws = app.workspace("Https").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let creds = [
        ("email", owner.email.as_str()),
        ("password", owner.password.as_str()),
    ];
    let r = no_redirects()
        .get(format!("{}/sign-in", app.base))
        .send()
        .await
        .unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("__Host-voxline_sign_in="), "{cookie}");
    assert!(
        cookie.contains("; Secure") && cookie.contains("Path=/;"),
        "{cookie}"
    );
    let field = super::support::csrf_of(&r.text().await.unwrap()).unwrap();
    let pair = cookie.split(';').next().unwrap().to_string();
    let token = SignInToken {
        cookie: pair.clone(),
        field: field.clone(),
    };
    // The same nonce without the prefix (what a sibling domain could set)
    // does not count.
    let unprefixed = SignInToken {
        cookie: pair.replacen("__Host-", "", 1),
        field,
    };
    let r = post_sign_in(&app, &unprefixed, &creds, &[]).await;
    assert_eq!(r.status(), 403);
    // An http page on this host is another origin of an https site.
    let r = post_sign_in(&app, &token, &creds, &[("origin", app.base.as_str())]).await;
    assert_eq!(r.status(), 403);
    assert!(!has_session(&r));
    let r = post_sign_in(
        &app,
        &token,
        &creds,
        &[("origin", "https://voxline.example")],
    )
    .await;
    assert_eq!(r.status(), 303);
    let session = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("voxline_session="))
        .expect("a session");
    assert!(session.contains("Secure"), "{session}");
}

#[tokio::test]
async fn sign_out_and_forms_from_another_site_are_refused_even_with_the_session_token() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Victim").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &owner).await;
    let evil: &[(&str, &str)] = &[
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let token = client.csrf.clone();

    let out = client
        .post_form_with_headers("/sign-out", &[("_csrf", token.as_str())], evil)
        .await;
    assert_eq!(out.status, 403, "{}", out.body);
    assert!(out.body.contains("another site"));
    assert!(!out.headers.contains_key("set-cookie"));
    assert_eq!(client.get("/account").await.status, 200, "still signed in");

    // A password change and a new key, as forms and as htmx sends them.
    let new_password = "the attacker's password";
    let change = [
        ("_csrf", token.as_str()),
        ("current", owner.password.as_str()),
        ("new", new_password),
    ];
    let r = client
        .post_form_with_headers("/account/password", &change, evil)
        .await;
    assert_eq!(r.status, 403);
    let htmx: Vec<(&str, &str)> = [("hx-request", "true"), ("x-csrf-token", token.as_str())]
        .into_iter()
        .chain(evil.iter().copied())
        .collect();
    let r = client
        .post_form_with_headers(
            "/account/password",
            &[("current", owner.password.as_str()), ("new", new_password)],
            &htmx,
        )
        .await;
    assert_eq!(r.status, 403);
    let r = client
        .post_form_with_headers(
            "/keys",
            &[("_csrf", token.as_str()), ("name", "planted")],
            evil,
        )
        .await;
    assert_eq!(r.status, 403);
    let keys = client.get("/keys").await;
    assert!(!keys.body.contains("planted"), "no key was made");
    // The password is the old one still.
    ConsoleClient::sign_in(&app, &owner).await;

    // The same requests from the console's own pages pass.
    let ours: &[(&str, &str)] = &[
        ("origin", app.base.as_str()),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = client
        .post_form_with_headers(
            "/keys",
            &[("_csrf", token.as_str()), ("name", "ours")],
            ours,
        )
        .await;
    assert!(r.status < 400, "{} {}", r.status, r.body);
    let out = client
        .post_form_with_headers("/sign-out", &[("_csrf", token.as_str())], ours)
        .await;
    assert_eq!(out.status, 303);
    assert_eq!(client.get("/account").await.status, 303, "signed out");
}

/// A hostile page that signs its visitor in to `attacker`'s workspace on
/// `target` as soon as it loads, with a pre-session field the attacker got
/// from the sign-in form themselves. Served until the returned task drops.
async fn hostile_site(
    target: &str,
    email: &str,
    password: &str,
    field: &str,
) -> (u16, tokio::task::JoinHandle<()>) {
    let html = format!(
        r#"<!doctype html><html><body>
<form method="post" action="{target}/sign-in">
<input type="hidden" name="_csrf" value="{field}">
<input type="hidden" name="email" value="{email}">
<input type="hidden" name="password" value="{password}">
<input type="hidden" name="next" value="/account">
</form>
<script>document.forms[0].submit();</script>
</body></html>"#
    );
    let html = Arc::new(html);
    let router = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { Html(html.as_str().to_string()) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (port, task)
}

#[tokio::test]
async fn a_page_on_another_site_cannot_sign_a_browser_in() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let theirs = app.workspace("Attacker").await;
    let attacker = person(&app, &theirs, Role::Owner).await;
    let harvested = sign_in_token(&app).await;
    let (hostile_port, hostile) = hostile_site(
        &app.base,
        &attacker.email,
        &attacker.password,
        &harvested.field,
    )
    .await;

    // The victim has seen the sign-in form, so their browser holds a
    // pre-session cookie of its own; then they visit the hostile pages: one
    // cross-site (localhost is another site than 127.0.0.1) and one
    // same-site (another port), whose post carries that Strict cookie.
    browser.goto(&app, "/sign-in").await;
    browser.wait_for(Locator::Id("email")).await;
    for hostile_url in [
        format!("http://localhost:{hostile_port}/"),
        format!("http://127.0.0.1:{hostile_port}/"),
    ] {
        browser.client.goto(&hostile_url).await.unwrap();
        let refused = browser.text(Locator::Css("main#content h1")).await;
        assert_eq!(refused, "Refused", "from {hostile_url}");
        let url = browser.client.current_url().await.unwrap();
        assert_eq!(
            url.as_str(),
            format!("{}/sign-in", app.base),
            "{hostile_url}"
        );
        let cookies = browser.client.get_all_cookies().await.unwrap();
        assert!(
            cookies.iter().all(|c| c.name() != "voxline_session"),
            "no session from {hostile_url}: {cookies:?}"
        );
        // Nothing is signed in: the console asks for a sign-in.
        browser.goto(&app, "/account").await;
        browser.wait_for(Locator::Id("email")).await;
    }
    hostile.abort();

    // The console's own form still signs the person in.
    let ws = app.workspace("Victim").await;
    let victim = person(&app, &ws, Role::Owner).await;
    browser.sign_in(&app, &victim).await;
    let who = browser.text(Locator::Css("header.top .who")).await;
    assert!(who.contains(&victim.email), "{who}");
    browser.close().await;
}

//! The team page and `voxline admin user`: a person added gets a one-time
//! password that signs in; roles change and apply at once; nobody removes
//! themselves; the last owner is never removed or demoted; only owners
//! manage people.

use super::support::{Browser, ConsoleClient, Person, person};
use crate::support::TestApp;
use fantoccini::Locator;
use voxline::domain::Role;

/// The one-time password in a team page that just added someone.
fn one_time_password(html: &str) -> String {
    let marker = "id=\"new-person-password\">";
    let at = html.find(marker).expect("a one-time password on the page") + marker.len();
    html[at..at + html[at..].find('<').unwrap()].to_string()
}

#[tokio::test]
async fn an_owner_adds_a_person_whose_one_time_password_signs_in() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Team").await;
    let owner = person(&app, &ws, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &owner).await;

    let bad = client
        .post_form("/team", &[("email", "not-an-address"), ("role", "member")])
        .await;
    assert_eq!(bad.status, 422);
    assert!(bad.body.contains("class=\"field-error\""), "{}", bad.body);
    assert!(
        bad.body.contains("value=\"not-an-address\""),
        "kept as typed"
    );

    let added = client
        .post_form(
            "/team",
            &[("email", "Ravi@Example.com"), ("role", "viewer")],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(
        added.headers["cache-control"], "no-store",
        "a page with a password is not cached"
    );
    let password = one_time_password(&added.body);
    assert_eq!(password.len(), 16);
    // Shown once: the page afterwards does not carry it.
    let listed = client.get("/team").await;
    assert!(!listed.body.contains(&password));
    assert!(listed.body.contains("ravi@example.com"));

    let ravi = Person {
        id: app
            .store()
            .users(ws.org_id)
            .await
            .unwrap()
            .into_iter()
            .find(|u| u.email == "ravi@example.com")
            .unwrap()
            .id,
        email: "ravi@example.com".into(),
        password,
    };
    let viewer = ConsoleClient::sign_in(&app, &ravi).await;
    assert_eq!(
        viewer.get("/team").await.status,
        403,
        "a viewer manages no one"
    );
    assert_eq!(viewer.get("/keys").await.status, 403);

    // The same address cannot be added twice.
    let again = client
        .post_form("/team", &[("email", "ravi@example.com"), ("role", "admin")])
        .await;
    assert_eq!(again.status, 422);
    assert!(
        again.body.contains("already has a sign-in"),
        "{}",
        again.body
    );

    // A role change applies to the open session at once.
    let promote = client
        .post_form(&format!("/team/{}/role", ravi.id), &[("role", "admin")])
        .await;
    assert_eq!(promote.status, 303, "{}", promote.body);
    assert_eq!(viewer.get("/keys").await.status, 200);

    // Removing them ends their session.
    let removed = client
        .post_form(&format!("/team/{}/remove", ravi.id), &[])
        .await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert_eq!(viewer.get("/keys").await.status, 303, "sent to sign in");
}

#[tokio::test]
async fn the_last_owner_is_never_removed_or_demoted_and_nobody_removes_themselves() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Owners").await;
    let first = person(&app, &ws, Role::Owner).await;
    let client = ConsoleClient::sign_in(&app, &first).await;

    let demote = client
        .post_form(&format!("/team/{}/role", first.id), &[("role", "admin")])
        .await;
    assert_eq!(demote.status, 409, "{}", demote.body);
    assert!(
        demote.body.contains("at least one owner"),
        "{}",
        demote.body
    );
    let me = client
        .post_form(&format!("/team/{}/remove", first.id), &[])
        .await;
    assert_eq!(me.status, 409);
    assert!(me.body.contains("cannot remove yourself"), "{}", me.body);
    let owners = app.store().owner_count(ws.org_id).await.unwrap();
    assert_eq!(owners, 1);

    // With a second owner the first may step down, and the second may
    // remove the first; then the second is the last and stays.
    // (`person` names people by role and the time-ordered start of their id,
    // so a second owner made at once would take the first's address.)
    let second = person(&app, &ws, Role::Admin).await;
    app.store()
        .set_user_role(ws.org_id, second.id, Role::Owner)
        .await
        .unwrap();
    let step_down = client
        .post_form(&format!("/team/{}/role", first.id), &[("role", "admin")])
        .await;
    assert_eq!(step_down.status, 303);
    assert_eq!(client.get("/team").await.status, 403, "no longer an owner");
    let other = ConsoleClient::sign_in(&app, &second).await;
    let demote_last = other
        .post_form(&format!("/team/{}/role", second.id), &[("role", "member")])
        .await;
    assert_eq!(demote_last.status, 409);
    let removed = other
        .post_form(&format!("/team/{}/remove", first.id), &[])
        .await;
    assert_eq!(removed.status, 303);
    assert_eq!(app.store().users(ws.org_id).await.unwrap().len(), 1);

    // An admin manages no one.
    let admin = person(&app, &ws, Role::Viewer).await;
    app.store()
        .set_user_role(ws.org_id, admin.id, Role::Admin)
        .await
        .unwrap();
    let admin_client = ConsoleClient::sign_in(&app, &admin).await;
    assert_eq!(admin_client.get("/team").await.status, 403);
    let grab = admin_client
        .post_form(&format!("/team/{}/role", admin.id), &[("role", "owner")])
        .await;
    assert_eq!(grab.status, 403, "an admin cannot make themselves owner");
    let kick = admin_client
        .post_form(&format!("/team/{}/remove", second.id), &[])
        .await;
    assert_eq!(kick.status, 403);
    assert_eq!(app.store().owner_count(ws.org_id).await.unwrap(), 1);

    // Another workspace's people are out of reach.
    let elsewhere = app.workspace("Elsewhere").await;
    let stranger = person(&app, &elsewhere, Role::Member).await;
    let reach = other
        .post_form(&format!("/team/{}/remove", stranger.id), &[])
        .await;
    assert_eq!(reach.status, 404);
}

#[tokio::test]
async fn admin_user_create_prints_a_password_that_signs_in_and_keeps_an_owner() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Cli").await;
    let org = ws.org_id.to_string();
    let created = app
        .admin_ok(&[
            "user",
            "create",
            "--org",
            &org,
            "--email",
            "Boss@Example.com",
            "--role",
            "owner",
        ])
        .await;
    assert_eq!(created["email"], "boss@example.com");
    assert_eq!(created["role"], "owner");
    let password = created["password"].as_str().unwrap().to_string();
    let boss = Person {
        id: created["id"].as_str().unwrap().parse().unwrap(),
        email: "boss@example.com".into(),
        password,
    };
    let client = ConsoleClient::sign_in(&app, &boss).await;
    assert_eq!(client.get("/team").await.status, 200);

    let listed = app.admin_ok(&["user", "list", "--org", &org]).await;
    let users = listed["users"].as_array().unwrap();
    assert_eq!(users.len(), 1);
    assert!(!listed.to_string().contains(&boss.password), "never listed");

    // The last owner is neither demoted nor removed.
    let demote = app
        .admin(&[
            "user",
            "role",
            "--org",
            &org,
            "boss@example.com",
            "--role",
            "admin",
        ])
        .await;
    assert!(!demote.status.success());
    assert!(String::from_utf8_lossy(&demote.stderr).contains("at least one owner"));
    let remove = app
        .admin(&["user", "remove", "--org", &org, &boss.id.to_string()])
        .await;
    assert!(!remove.status.success());

    let helper = app
        .admin_ok(&[
            "user",
            "create",
            "--org",
            &org,
            "--email",
            "helper@example.com",
            "--role",
            "member",
        ])
        .await;
    let role = app
        .admin_ok(&[
            "user",
            "role",
            "--org",
            &org,
            "helper@example.com",
            "--role",
            "admin",
        ])
        .await;
    assert_eq!(role["role"], "admin");
    let removed = app
        .admin_ok(&[
            "user",
            "remove",
            "--org",
            &org,
            helper["id"].as_str().unwrap(),
        ])
        .await;
    assert_eq!(removed["removed"], true);

    // Bad input exits non-zero with a message.
    for args in [
        vec![
            "user", "create", "--org", &org, "--email", "nope", "--role", "owner",
        ],
        vec![
            "user",
            "create",
            "--org",
            &org,
            "--email",
            "a@b.example",
            "--role",
            "root",
        ],
        vec![
            "user",
            "create",
            "--org",
            "no-such-org",
            "--email",
            "a@b.example",
            "--role",
            "owner",
        ],
        vec![
            "user",
            "create",
            "--org",
            &org,
            "--email",
            "boss@example.com",
            "--role",
            "viewer",
        ],
    ] {
        let out = app.admin(&args).await;
        assert!(!out.status.success(), "{args:?}");
        assert!(
            !String::from_utf8_lossy(&out.stderr).trim().is_empty(),
            "{args:?}"
        );
    }
}

#[tokio::test]
async fn a_browser_adds_a_person_on_the_team_page() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.workspace("Team").await;
    let owner = person(&app, &ws, Role::Owner).await;
    person(&app, &ws, Role::Viewer).await;
    browser.sign_in(&app, &owner).await;
    browser.goto(&app, "/team").await;
    browser
        .fill(Locator::Id("person-email"), "asha@example.com")
        .await;
    browser
        .click(Locator::Css("#person-role option[value='admin']"))
        .await;
    browser
        .click(Locator::Css("form.team-add button[type=submit]"))
        .await;
    let password = browser.text(Locator::Id("new-person-password")).await;
    assert_eq!(password.trim().len(), 16);
    let table = browser
        .client
        .find(Locator::Css("table.team-table"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(table.contains("asha@example.com"), "{table}");
    browser.screenshot("team").await;
    browser.close().await;
}

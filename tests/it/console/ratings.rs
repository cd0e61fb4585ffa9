//! The Ratings page: templates listed and edited through the agent service,
//! scorecards with the API's filters, regenerate, the CSV export, roles and
//! CSRF, and a browser screenshot.

use super::support::{Browser, ConsoleClient, person};
use crate::support::{TestApp, Workspace, eventually};
use fantoccini::Locator;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use voxline::domain::Role;

const ENGAGED: &[&str] = &[
    "Yes, I have a minute",
    "I have five years of Rust backend experience and I can join next month",
    "Thanks, bye",
];

/// An agent with its own columns, one rated call to Asha; (agent id, call id).
async fn rated_call(app: &TestApp, ws: &Workspace) -> (String, String) {
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Screener",
                "welcomeMessage": "Hello {name}, do you have a minute?",
                "ratingTemplate": {"columns": [
                    {"name": "Experience", "description": "Years of Rust experience"},
                    {"name": "Availability", "description": "When they can join"}
                ]}
            }),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let call = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012310", "name": "Asha <b>",
                   "variables": {"simScript": ENGAGED}}),
        )
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .unwrap()
        .to_string();
    eventually(Duration::from_secs(60), "the rating", || async {
        let r = app.get(&ws.key, &format!("/api/ratings/{call}")).await;
        (r.status == StatusCode::OK).then_some(())
    })
    .await;
    (agent, call)
}

#[tokio::test]
async fn scorecards_filter_regenerate_export_and_templates_save() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Ratings", 2).await;
    let (agent, call) = rated_call(&app, &ws).await;
    let plain = app.create_agent(&ws.key, json!({"name": "Plain"})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let member = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;

    let page = member.get("/ratings").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(&format!("href=\"/calls/{call}\"")));
    assert!(
        page.body.contains("Asha &#60;b&#62;"),
        "escaped: {}",
        page.body
    );
    assert!(!page.body.contains("Asha <b>"));
    assert!(page.body.contains("Experience") && page.body.contains("Availability"));
    assert!(
        page.body.contains("(default)"),
        "Plain uses the default columns"
    );
    assert!(page.body.contains("1 scorecard(s)"));

    // The API's filters, with the API's refusals.
    let none = member.get(&format!("/ratings?agentId={plain}")).await;
    assert!(none.body.contains("0 scorecard(s)"), "{}", none.body);
    let high = member.get("/ratings?minScore=10.0&maxScore=10").await;
    let low = member
        .get("/ratings?minScore=0&maxScore=10&status=all")
        .await;
    assert!(low.body.contains("1 scorecard(s)"));
    assert!(high.status == 200 && low.status == 200);
    let refused = member.get("/ratings?minScore=7&maxScore=3").await;
    assert_eq!(refused.status, 400);
    assert!(
        refused
            .body
            .contains("minScore must not be greater than maxScore")
    );
    let refused = member.get("/ratings?from=yesterday").await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("from must be a date"));

    // Regenerate scores the call again now; the row comes back.
    let before = app
        .get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(200)
        .body;
    let row = member
        .htmx_post(&format!("/ratings/{call}/regenerate"), &[])
        .await;
    assert_eq!(row.status, 200, "{}", row.body);
    assert!(row.body.contains("Regenerated: overall"), "{}", row.body);
    let after = app
        .get(&ws.key, &format!("/api/ratings/{call}"))
        .await
        .expect(200)
        .body;
    assert_ne!(before["ratedAt"], after["ratedAt"], "a new scorecard");
    let missing = member
        .htmx_post(
            "/ratings/00000000-0000-7000-8000-000000000000/regenerate",
            &[],
        )
        .await;
    assert_eq!(missing.status, 404);

    // The export is the API's CSV.
    let csv = member
        .get(&format!("/ratings/export.csv?agentId={agent}"))
        .await;
    assert_eq!(csv.status, 200);
    assert!(
        csv.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    let api_csv = app
        .request(
            &ws.key,
            reqwest::Method::GET,
            &format!("/api/ratings/export-all?agentId={agent}"),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(csv.body, api_csv);
    assert_eq!(csv.body.lines().count(), 2, "{}", csv.body);

    // Templates: the agent's own columns in the form; a new one saved through
    // the agent service; a blank name refused with what was typed kept.
    let form = member.get(&format!("/ratings/templates/{agent}")).await;
    assert_eq!(form.status, 200);
    assert!(form.body.contains("value=\"Experience\""));
    let refused = member
        .post_form(
            &format!("/ratings/templates/{plain}"),
            &[("name", ""), ("description", "no name")],
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        refused.body.contains("ratingTemplate.columns[].name"),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("value=\"no name\""));
    let saved = member
        .post_form(
            &format!("/ratings/templates/{plain}"),
            &[
                ("name", "Warmth"),
                ("description", "How friendly"),
                ("name", ""),
                ("description", ""),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let read = app
        .get(&ws.key, &format!("/api/agents/{plain}"))
        .await
        .expect(200);
    assert_eq!(
        read.body["ratingTemplate"],
        json!({"columns": [{"name": "Warmth", "description": "How friendly"}]})
    );
    let reset = member
        .post_form(
            &format!("/ratings/templates/{plain}"),
            &[("name", "Warmth"), ("description", ""), ("useDefault", "1")],
        )
        .await;
    assert_eq!(reset.status, 303);
    let read = app
        .get(&ws.key, &format!("/api/agents/{plain}"))
        .await
        .expect(200);
    assert_eq!(read.body["ratingTemplate"], Value::Null);

    // Viewers read, but neither regenerate nor edit; a post needs the token.
    let viewer = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Viewer).await).await;
    let page = viewer.get("/ratings").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("/regenerate"));
    assert_eq!(
        viewer
            .htmx_post(&format!("/ratings/{call}/regenerate"), &[])
            .await
            .status,
        403
    );
    assert_eq!(
        viewer
            .post_form(&format!("/ratings/templates/{agent}"), &[("name", "X")])
            .await
            .status,
        403
    );
    let forged = member
        .post_form_raw(&format!("/ratings/templates/{agent}"), &[("name", "X")])
        .await;
    assert_eq!(forged.status, 403);
    let read = app
        .get(&ws.key, &format!("/api/agents/{agent}"))
        .await
        .expect(200);
    assert_eq!(
        read.body["ratingTemplate"]["columns"][0]["name"],
        "Experience"
    );
}

#[tokio::test]
async fn a_browser_shows_the_ratings_page() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Browser ratings", 2).await;
    let (_, call) = rated_call(&app, &ws).await;
    let member = person(&app, &ws, Role::Member).await;
    browser.sign_in(&app, &member).await;
    browser.goto(&app, "/ratings").await;
    let table = browser.wait_for(Locator::Id("scorecards")).await;
    let text = table.text().await.unwrap();
    assert!(text.contains(&call) && text.contains("Screener"), "{text}");
    browser.screenshot("ratings").await;
    browser.close().await;
}

//! The console's calls pages: the list's filters (HTTP), escaping of what
//! callers said, the rules (roles, CSRF, tenancy) of the call page, its
//! recording and redelivery, the overview, and a real browser watching a sim
//! call live, then playing its recording from the transcript.

use super::support::{Browser, ConsoleClient, person};
use crate::support::{TestApp, Workspace, eventually};
use fantoccini::Locator;
use serde_json::json;
use std::time::Duration;
use voxline::carriers::inbound::sim_account;
use voxline::domain::{AgentId, BatchId, Role};
use voxline::inbound::sim_phone::{self, Ring};
use voxline::store::CallFixture;

/// What a caller typed into a form that ended up in a transcript.
const HOSTILE: &str = "<script>window.pwned=1;alert('x')</script><img src=x onerror=alert(1)>";

/// Whether `html` shows [`HOSTILE`]'s script tag as text (escaped by name or by number).
fn shown_as_text(html: &str) -> bool {
    html.contains("&lt;script&gt;window.pwned=1;")
        || html.contains("&#60;script&#62;window.pwned=1;")
}

/// A finished call written straight into the store.
fn fixture(ws: &Workspace, name: &str, status: &str, created_at: i64) -> CallFixture {
    CallFixture {
        id: uuid::Uuid::now_v7().to_string(),
        org_id: ws.org_id.to_string(),
        agent_id: AgentId::new().to_string(),
        agent_name: "Fixture Bot".into(),
        phone: "+919800000001".into(),
        target_name: name.into(),
        from_number: "+918045000001".into(),
        provider: "sim".into(),
        status: status.into(),
        ended_reason: Some("caller-hangup".into()),
        duration_seconds: 30,
        cost_paise: 200,
        summary: format!("Summary of {name}"),
        created_at,
        answered_at: Some(created_at + 2_000),
        ended_at: Some(created_at + 32_000),
        ..CallFixture::default()
    }
}

#[tokio::test]
async fn the_list_filters_by_every_field_and_pages() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Filters").await;
    let viewer = person(&app, &ws, Role::Viewer).await;
    let now = app.now().timestamp_millis();
    let day = 86_400_000;
    let agent = AgentId::new().to_string();
    let batch = BatchId::new().to_string();
    let mut calls = vec![
        CallFixture {
            agent_id: agent.clone(),
            agent_name: "Sales Bot".into(),
            ..fixture(&ws, "Asha Agent", "completed", now - 1_000)
        },
        CallFixture {
            batch_id: Some(batch.clone()),
            ..fixture(&ws, "Bela Batch", "no-answer", now - 2_000)
        },
        fixture(&ws, "Chandra Old", "failed", now - 20 * day),
        CallFixture {
            transcript_text: "Bot: hello\nCandidate: the zucchini festival".into(),
            ..fixture(&ws, "Dev Deep", "completed", now - 3_000)
        },
    ];
    // Enough others for a second page.
    for n in 0..30 {
        calls.push(fixture(
            &ws,
            &format!("Filler {n:02}"),
            "busy",
            now - 5 * day - n * 1_000,
        ));
    }
    app.store().insert_call_fixtures(&calls).await.unwrap();
    // Another workspace's call is never listed.
    let other = app.workspace("Other").await;
    app.store()
        .insert_call_fixture(&fixture(&other, "Zed Elsewhere", "completed", now))
        .await
        .unwrap();

    let client = ConsoleClient::sign_in(&app, &viewer).await;
    let names = |body: &str| -> Vec<&'static str> {
        [
            "Asha Agent",
            "Bela Batch",
            "Chandra Old",
            "Dev Deep",
            "Filler 00",
            "Zed Elsewhere",
        ]
        .into_iter()
        .filter(|name| body.contains(name))
        .collect()
    };

    let all = client.get("/calls").await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert!(
        all.body.contains("34 calls"),
        "stats count the whole filter"
    );
    assert_eq!(
        names(&all.body),
        ["Asha Agent", "Bela Batch", "Dev Deep", "Filler 00"]
    );
    assert!(all.body.contains("Page 1 of 2"));
    // The second page has the rest, and links keep the filters.
    assert!(
        all.body.contains("href=\"/calls?page=2\""),
        "a link to page 2"
    );
    let second = client.get("/calls?page=2").await;
    assert!(second.body.contains("Chandra Old"));
    assert!(!second.body.contains("Asha Agent"));

    let cases: [(String, Vec<&str>); 7] = [
        (
            "/calls?status=completed".into(),
            vec!["Asha Agent", "Dev Deep"],
        ),
        (
            "/calls?status=no-answer&status=failed".into(),
            vec!["Bela Batch", "Chandra Old"],
        ),
        (format!("/calls?agent={agent}"), vec!["Asha Agent"]),
        (format!("/calls?batch={batch}"), vec!["Bela Batch"]),
        ("/calls?q=chandra".into(), vec!["Chandra Old"]),
        ("/calls?q=zucchini&deep=1".into(), vec!["Dev Deep"]),
        ("/calls?q=zucchini".into(), vec![]),
    ];
    for (path, expected) in cases {
        let page = client.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(names(&page.body), expected, "{path}");
    }
    // Dates are IST days, `to` inclusive.
    let today = app
        .now()
        .with_timezone(&voxline::domain::clock::IST)
        .date_naive();
    let old_day = today - chrono::Days::new(20);
    let page = client
        .get(&format!("/calls?from={old_day}&to={old_day}"))
        .await;
    assert_eq!(names(&page.body), ["Chandra Old"]);
    let page = client.get(&format!("/calls?from={today}")).await;
    assert_eq!(names(&page.body), ["Asha Agent", "Bela Batch", "Dev Deep"]);
    // Filters survive in the form.
    let page = client
        .get(&format!("/calls?status=completed&batch={batch}&q=bela"))
        .await;
    assert!(page.body.contains("value=\"completed\" checked"));
    assert!(page.body.contains("value=\"bela\""));

    // A bad filter is named at its field, with what was typed kept.
    let bad = client
        .get("/calls?status=exploded&from=yesterday&q=ab&deep=1")
        .await;
    assert_eq!(bad.status, 422);
    assert!(
        bad.body.contains("“exploded” is not a call status"),
        "{}",
        bad.body
    );
    assert!(bad.body.contains("Use a date such as"));
    assert!(
        bad.body
            .contains("Transcript search needs at least 3 characters")
    );
    assert!(bad.body.contains("value=\"yesterday\""));
}

#[tokio::test]
async fn a_call_page_shows_everything_escaped_and_enforces_roles() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Detail").await;
    let viewer = person(&app, &ws, Role::Viewer).await;
    let admin = person(&app, &ws, Role::Admin).await;
    let now = app.now().timestamp_millis();
    let call = CallFixture {
        target_name: format!("Name {HOSTILE}"),
        latencies: r#"[{"totalMs":900,"endpointingMs":300,"asrMs":100,"llmFirstTokenMs":300,"ttsFirstByteMs":150,"engineOverheadMs":50}]"#.into(),
        turns: vec![
            ("assistant".into(), "Hello, this is the agent.".into(), now - 28_000),
            ("user".into(), HOSTILE.into(), now - 24_000),
        ],
        events: vec![
            ("queued".into(), now - 33_000),
            ("in-progress".into(), now - 30_000),
            ("completed".into(), now - 2_000),
        ],
        answered_at: Some(now - 30_000),
        ..fixture(&ws, "unused", "completed", now - 33_000)
    };
    app.store().insert_call_fixture(&call).await.unwrap();
    let client = ConsoleClient::sign_in(&app, &viewer).await;
    let page = client.get(&format!("/calls/{}", call.id)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    // Whatever was said or typed is text, never markup.
    assert!(
        !page.body.contains("<script>window.pwned"),
        "raw script in the page"
    );
    assert!(!page.body.contains("<img src=x"), "raw markup in the page");
    assert!(shown_as_text(&page.body), "{}", page.body);
    // The turns seek to where they start: the caller's began when the agent's ended.
    assert!(page.body.contains("data-seek=\"0.00\""));
    assert!(page.body.contains("data-seek=\"2.00\""));
    assert!(page.body.contains("Reply 1 · 900 ms"), "the latency bars");
    assert!(page.body.contains("In Progress"), "the status history");
    assert!(page.body.contains("₹2.00"), "the cost");
    assert!(page.body.contains("No recording is kept"));
    // A viewer sees the deliveries but cannot redeliver.
    assert!(page.body.contains("Webhook deliveries"));
    assert!(!page.body.contains("Redeliver events"));
    let refused = client
        .htmx_post(&format!("/calls/{}/redeliver", call.id), &[])
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);

    // An admin may, with the session's token, and not without it.
    let admin = ConsoleClient::sign_in(&app, &admin).await;
    let page = admin.get(&format!("/calls/{}", call.id)).await;
    assert!(page.body.contains("Redeliver events"));
    let forged = admin
        .post_form_raw(&format!("/calls/{}/redeliver", call.id), &[])
        .await;
    assert_eq!(forged.status, 403, "no CSRF token: {}", forged.body);
    let done = admin
        .htmx_post(&format!("/calls/{}/redeliver", call.id), &[])
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("id=\"deliveries\""), "{}", done.body);

    // Another workspace's call, a malformed id and a missing recording are 404s.
    let other = app.workspace("Other").await;
    let theirs = fixture(&other, "Theirs", "completed", now);
    app.store().insert_call_fixture(&theirs).await.unwrap();
    assert_eq!(
        client.get(&format!("/calls/{}", theirs.id)).await.status,
        404
    );
    assert_eq!(client.get("/calls/not-an-id").await.status, 404);
    assert_eq!(
        client
            .get(&format!("/calls/{}/recording", call.id))
            .await
            .status,
        404
    );
    // A key is no session.
    let r = app
        .http
        .get(format!("{}/calls/{}", app.base, call.id))
        .bearer_auth(&ws.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // The overview counts the call and links the list.
    let overview = client.get("/?days=7").await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(overview.body.contains("data-chart=\"bars\""));
    assert!(shown_as_text(&overview.body), "recent calls escaped");
    assert!(!overview.body.contains("<script>window.pwned"));
    let bad = client.get("/?days=8").await;
    assert_eq!(bad.status, 422);
    assert!(bad.body.contains("Choose 7, 30 or 90 days"));
}

/// Seconds of audio in the call's WAV as the API serves it.
async fn wav_seconds(app: &TestApp, ws: &Workspace, call_id: &str) -> f64 {
    let wav = app
        .http
        .get(format!("{}/api/calls/{call_id}/recording", app.base))
        .bearer_auth(&ws.key)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&wav[..4], b"RIFF");
    let rate = u32::from_le_bytes(wav[28..32].try_into().unwrap());
    (wav.len() - 44) as f64 / f64::from(rate)
}

#[tokio::test]
async fn a_browser_watches_a_sim_call_live_then_plays_its_recording() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Live", 2).await;
    let owner = person(&app, &ws, Role::Owner).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Live Bot", "welcomeMessage": "Hello from Voxline.", "prompt": "You confirm appointments."}),
        )
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    browser.sign_in(&app, &owner).await;

    let placed = app
        .post(
            &ws.key,
            &format!("/api/agents/{agent_id}/test-call"),
            json!({"phoneNumber": "+919800000042"}),
        )
        .await
        .expect(201);
    let call_id = placed.body["callId"].as_str().unwrap().to_string();
    let c = &browser.client;
    c.goto(&format!("{}/calls/{call_id}", app.base))
        .await
        .unwrap();
    // The live view: status and turns as they come.
    browser.wait_for(Locator::Css("#live .live-status")).await;
    let live_html = c
        .find(Locator::Css("#live"))
        .await
        .unwrap()
        .html(false)
        .await
        .unwrap();
    assert!(live_html.contains("badge status-"), "{live_html}");
    // When it ends the page switches to the finished view by itself.
    let player = c
        .wait()
        .at_most(Duration::from_secs(90))
        .for_element(Locator::Css("audio#player"))
        .await
        .expect("the finished view with the player");
    assert!(
        c.find(Locator::Css("#live")).await.is_err(),
        "live view gone"
    );
    let status = c
        .find(Locator::Css("#call-status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(status, "Completed");

    // The recording loads in the player and is as long as the WAV.
    let duration: f64 = eventually(Duration::from_secs(20), "the audio to load", || async {
        let value = c
            .execute(
                "const a = document.querySelector('#player'); return a.readyState >= 1 ? a.duration : null;",
                vec![],
            )
            .await
            .unwrap();
        value.as_f64()
    })
    .await;
    let expected = wav_seconds(&app, &ws, &call_id).await;
    assert!(
        (duration - expected).abs() < 0.5,
        "player says {duration} s, the WAV holds {expected} s"
    );
    assert!(duration > 1.0, "a real conversation: {duration} s");
    drop(player);
    // Clicking a turn's time plays from where it starts.
    let turns = c.find_all(Locator::Css("[data-seek]")).await.unwrap();
    assert!(turns.len() >= 2, "the transcript has turns");
    let target: f64 = turns[1]
        .attr("data-seek")
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    turns[1].click().await.unwrap();
    let at = c
        .execute(
            "return document.querySelector('#player').currentTime;",
            vec![],
        )
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(
        at >= target - 0.05 && at < target + 2.0,
        "seeked to {at}, turn starts at {target}"
    );
    c.execute("document.querySelector('#player').pause();", vec![])
        .await
        .unwrap();
    browser.screenshot("call").await;

    // A hostile transcript renders as text: no script element, no alert.
    let now = app.now().timestamp_millis();
    let hostile = CallFixture {
        turns: vec![("user".into(), HOSTILE.into(), now - 1_000)],
        ..fixture(&ws, "Hostile Caller", "completed", now - 5_000)
    };
    app.store().insert_call_fixture(&hostile).await.unwrap();
    c.goto(&format!("{}/calls/{}", app.base, hostile.id))
        .await
        .unwrap();
    browser.wait_for(Locator::Css("#transcript")).await;
    let (scripts, text, pwned) = {
        let v = c
            .execute(
                "return [document.querySelectorAll('#transcript script, #transcript img').length, document.querySelector('#transcript').textContent, window.pwned === 1];",
                vec![],
            )
            .await
            .unwrap();
        (
            v[0].as_u64().unwrap(),
            v[1].as_str().unwrap().to_string(),
            v[2].as_bool().unwrap(),
        )
    };
    assert_eq!(scripts, 0);
    assert!(!pwned);
    assert!(text.contains("<script>window.pwned=1;"), "{text}");
    assert!(c.get_alert_text().await.is_err(), "no alert is open");

    // The list and the overview, for the README.
    c.goto(&format!("{}/calls", app.base)).await.unwrap();
    browser.wait_for(Locator::Css("#calls-table")).await;
    let rows = c
        .find_all(Locator::Css("#calls-table tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    browser.screenshot("calls").await;
    c.goto(&format!("{}/?days=7", app.base)).await.unwrap();
    browser.wait_for(Locator::Css(".chart .uplot")).await;
    browser.screenshot("overview").await;
    browser.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn the_list_shows_and_filters_calls_by_direction() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Directions", 2).await;
    let now = app.now().timestamp_millis();
    app.store()
        .insert_call_fixture(&fixture(&ws, "Outbound Olga", "completed", now - 5_000))
        .await
        .unwrap();
    // An inbound call: the number is put on an agent and a caller rings it.
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Front desk", "welcomeMessage": "Hello.", "prompt": "Be brief."}),
        )
        .await;
    let number = app.store().numbers(ws.org_id).await.unwrap().remove(0);
    app.patch(
        &ws.key,
        &format!("/api/numbers/{}", number.id),
        json!({"inboundAgentId": agent["id"], "inbound": {"enabled": true}}),
    )
    .await
    .expect(200);
    let caller = "+919845012377";
    let ring = Ring {
        server: app.base.clone(),
        provider: "sim".into(),
        account: sim_account(&app.state().secret, &ws.org_id.to_string()),
        to: number.phone.clone(),
        from: caller.into(),
        call_sid: sim_phone::new_call_sid(),
        sim_script: None,
    };
    let (answer, _) = sim_phone::ring(&reqwest::Client::new(), &ring)
        .await
        .expect("the webhook answers");
    let inbound_id = answer.call_id().expect("an inbound call").to_string();

    let viewer = person(&app, &ws, Role::Viewer).await;
    let client = ConsoleClient::sign_in(&app, &viewer).await;
    let all = client.get("/calls").await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert!(all.body.contains("Outbound Olga"));
    assert!(all.body.contains(&inbound_id));
    assert!(all.body.contains("<th scope=\"col\">Direction</th>"));
    assert!(all.body.contains("class=\"direction-inbound\""));

    let inbound = client.get("/calls?direction=inbound").await;
    assert_eq!(inbound.status, 200, "{}", inbound.body);
    assert!(inbound.body.contains(&inbound_id));
    assert!(!inbound.body.contains("Outbound Olga"));
    assert!(inbound.body.contains("<option value=\"inbound\" selected>"));
    let outbound = client.get("/calls?direction=outbound").await;
    assert!(outbound.body.contains("Outbound Olga"));
    assert!(!outbound.body.contains(&inbound_id));
    let bad = client.get("/calls?direction=sideways").await;
    assert_eq!(bad.status, 422);
    assert!(bad.body.contains("Choose outbound or inbound"));

    // The call page says which way it went and which number was rung.
    let page = client.get(&format!("/calls/{inbound_id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("id=\"call-direction\">inbound<"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(&format!("id=\"call-to-number\">{}<", number.phone))
    );
}

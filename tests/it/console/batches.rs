//! Issue 22, Batches and campaigns, Wallet and numbers: a CSV upload
//! previewed with its bad rows before anything is stored, created, started
//! and followed live to 100 % in a real browser; over plain HTTP, the roles
//! (a viewer creates, pauses and rents nothing), the CSRF token on uploads,
//! a preview that stores nothing, escaping, the live stream's end, the
//! wallet page and renting a number.

use super::support::{Browser, ConsoleClient, person};
use crate::support::{TestApp, Workspace, eventually};
use fantoccini::Locator;
use serde_json::json;
use std::time::Duration;
use voxline::domain::Role;

/// Answers and ends the call at once (sim numbers choose by their last two digits).
const ANSWERS: u32 = 10;

/// A valid Indian mobile number, unique per `n`, ending in `suffix`.
fn phone(n: usize, suffix: u32) -> String {
    format!("+9198451{n:03}{suffix:02}")
}

/// A workspace that can dial (sim number, wallet, 4 slots) and an agent.
async fn dialing_workspace(app: &TestApp, name: &str) -> (Workspace, String) {
    let ws = app.calling_workspace(name, 4).await;
    // The live view and the tests poll; the default daily cap is not under test.
    app.set_limits(ws.key_id, 1_000_000, 10_000_000).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Admissions", "welcomeMessage": "Hello {name}, calling about {course}.",
                   "prompt": "Talk about {course}."}),
        )
        .await;
    (ws, agent["id"].as_str().unwrap().to_string())
}

/// Four rows that dial and end quickly, and three rows the sheet rejects:
/// an empty name (row 3), a malformed number (row 5), a repeated number (row 7).
fn sheet_with_bad_rows() -> String {
    let script = "\"[\"\"Goodbye!\"\"]\"";
    format!(
        "name,phone,course,simScript\n\
         Asha,{},MBA,{script}\n\
         ,{},MBA,{script}\n\
         Ravi,{},BBA,{script}\n\
         Nobody,12345,MBA,{script}\n\
         Meera,{},MCA,{script}\n\
         Twice,{},MBA,{script}\n\
         Kabir,{},MBA,{script}\n",
        phone(1, ANSWERS),
        phone(2, ANSWERS),
        phone(3, ANSWERS),
        phone(4, ANSWERS),
        phone(1, ANSWERS),
        phone(5, ANSWERS),
    )
}

/// The new-batch form as multipart, with the CSV as its file.
fn upload_form(fields: &[(&str, &str)], csv: &str) -> reqwest::multipart::Form {
    let mut form = reqwest::multipart::Form::new();
    for (k, v) in fields {
        form = form.text(k.to_string(), v.to_string());
    }
    let file = reqwest::multipart::Part::bytes(csv.as_bytes().to_vec())
        .file_name("people.csv")
        .mime_str("text/csv")
        .unwrap();
    form.part("file", file)
}

/// Whether `<script>alert(1)</script>` appears escaped, as text (askama
/// writes `<` as `&#60;`; `&lt;` would do as well).
fn shows_script_as_text(html: &str) -> bool {
    html.contains("&#60;script&#62;alert(1)&#60;/script&#62;")
        || html.contains("&lt;script&gt;alert(1)&lt;/script&gt;")
}

/// Batches and campaigns of the workspace, through the API.
async fn stored_batches(app: &TestApp, ws: &Workspace) -> (i64, i64) {
    let batches = app.get(&ws.key, "/api/batches").await.expect(200).body;
    let campaigns = app.get(&ws.key, "/api/campaigns").await.expect(200).body;
    (
        batches["total"].as_i64().unwrap(),
        campaigns["total"].as_i64().unwrap(),
    )
}

#[tokio::test]
async fn a_csv_with_bad_rows_is_previewed_created_started_and_followed_to_100_percent() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Console batches").await;
    let member = person(&app, &ws, Role::Member).await;
    browser.sign_in(&app, &member).await;
    let c = &browser.client;

    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("intake.csv");
    std::fs::write(&csv_path, sheet_with_bad_rows()).unwrap();

    c.goto(&format!("{}/batches/new", app.base)).await.unwrap();
    c.find(Locator::Id("batch-file"))
        .await
        .unwrap()
        .send_keys(csv_path.to_str().unwrap())
        .await
        .unwrap();
    c.find(Locator::Id("batch-name"))
        .await
        .unwrap()
        .send_keys("Winter intake")
        .await
        .unwrap();
    c.find(Locator::Id("batch-agent"))
        .await
        .unwrap()
        .select_by_value(&agent)
        .await
        .unwrap();
    c.find(Locator::Id("batch-preview-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    // The preview lists the bad rows with their reasons; nothing is stored yet.
    let rejections = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("preview-rejections"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(rejections.contains("name is empty"), "{rejections}");
    assert!(rejections.contains("phone"), "{rejections}");
    assert!(rejections.contains("already in the list"), "{rejections}");
    let accepted = c
        .find(Locator::Id("preview-accepted"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(accepted, "4");
    let rows = c.find(Locator::Id("preview-rows")).await.unwrap();
    assert!(rows.text().await.unwrap().contains("Meera"));
    assert_eq!(stored_batches(&app, &ws).await, (0, 0));
    c.execute(
        "document.getElementById('batch-preview').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    browser.screenshot("batch-new").await;

    c.find(Locator::Id("batch-create"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let start = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("batch-start"))
        .await
        .unwrap();
    let url = c.current_url().await.unwrap();
    let id = url.path().trim_start_matches("/batches/").to_string();
    let stored = app
        .get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(stored["total"], 4, "{stored}");
    assert_eq!(stored["status"], "draft");
    start.click().await.unwrap();

    // The live view (server-sent events) follows the batch to the end.
    let percent = eventually(Duration::from_secs(90), "progress at 100 %", || async {
        let text = c
            .find(Locator::Id("batch-percent"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (text == "100 %").then_some(text)
    })
    .await;
    assert_eq!(percent, "100 %");
    eventually(Duration::from_secs(30), "status completed", || async {
        let status = c
            .find(Locator::Id("batch-status"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (status == "completed").then_some(())
    })
    .await;
    let finished = c
        .find(Locator::Id("batch-finished"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        finished.ends_with("UTC"),
        "the live view fills the end: {finished}"
    );
    let completed = c
        .find(Locator::Id("count-completed"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(completed, "4");
    let flash = c
        .find(Locator::Id("batch-flash"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(flash.contains("4 item(s) to dial"), "{flash}");
    browser.screenshot("batch").await;

    c.goto(&format!("{}/batches", app.base)).await.unwrap();
    let list = c
        .find(Locator::Id("batch-list"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(list.contains("Winter intake"), "{list}");
    assert!(list.contains("100 %"), "{list}");
    browser.screenshot("batches").await;

    c.goto(&format!("{}/wallet", app.base)).await.unwrap();
    let ledger = c
        .find(Locator::Id("wallet-ledger"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(ledger.contains("credit"), "{ledger}");
    assert!(
        c.find(Locator::Id("wallet-numbers"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .contains("sim")
    );
    browser.screenshot("wallet").await;
    browser.close().await;
}

#[tokio::test]
async fn the_preview_stores_nothing_and_escapes_what_the_file_holds() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Preview").await;
    let s = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;
    let csv = format!(
        "name,phone\n<script>alert(1)</script>,{}\nBad,12\n",
        phone(7, ANSWERS)
    );
    let fields = [
        ("kind", "batch"),
        ("name", "X"),
        ("agent_id", agent.as_str()),
    ];

    let page = s
        .htmx_multipart("/batches/preview", upload_form(&fields, &csv))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let html = page.body;
    assert!(shows_script_as_text(&html), "{html}");
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(
        html.contains("id=\"preview-accepted\">1<"),
        "one row accepted: {html}"
    );
    assert!(
        html.contains("<td>3</td><td>phone"),
        "row 3 rejected: {html}"
    );
    assert_eq!(stored_batches(&app, &ws).await, (0, 0));

    // A file without a phone column is refused whole, at the file.
    let page = s
        .htmx_multipart(
            "/batches/preview",
            upload_form(&fields, "name,email\nA,a@b.co\n"),
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(page.body.contains("needs a phone column"), "{}", page.body);

    // Without the CSRF token neither the preview nor the create is done.
    for path in ["/batches/preview", "/batches"] {
        let page = s.post_form_raw(path, &fields).await;
        assert_eq!(page.status, 403, "{path}: {}", page.body);
    }
    assert_eq!(stored_batches(&app, &ws).await, (0, 0));

    // A create with a blank name and a past schedule comes back with the
    // reasons beside the fields and the values kept; nothing is stored.
    let bad = [
        ("kind", "campaign"),
        ("name", "  "),
        ("agent_id", agent.as_str()),
        ("scheduled_start_at", "2020-01-01T09:30"),
    ];
    let page = s.htmx_multipart("/batches", upload_form(&bad, &csv)).await;
    assert_eq!(page.status, 422, "{}", page.body);
    let html = page.body;
    assert!(
        html.contains("id=\"batch-name-error\">Give it a name."),
        "{html}"
    );
    assert!(
        html.contains("id=\"batch-schedule-error\">Pick a time in the future"),
        "{html}"
    );
    assert!(html.contains("value=\"2020-01-01T09:30\""), "{html}");
    assert!(html.contains("value=\"campaign\" checked"), "{html}");
    assert_eq!(stored_batches(&app, &ws).await, (0, 0));

    // A good one is created as a campaign with the accepted row, not started.
    let good = [
        ("kind", "campaign"),
        ("name", "Spring"),
        ("agent_id", agent.as_str()),
    ];
    let page = s.htmx_multipart("/batches", upload_form(&good, &csv)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let location = page.headers["hx-redirect"].to_str().unwrap().to_string();
    let id = location.trim_start_matches("/batches/");
    let campaign = app
        .get(&ws.key, &format!("/api/campaigns/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(campaign["total"], 1, "{campaign}");
    assert_eq!(campaign["status"], "draft");
    assert_eq!(stored_batches(&app, &ws).await, (0, 1));
    let page = s.get(&location).await;
    assert_eq!(page.status, 200);
    assert!(shows_script_as_text(&page.body), "{}", page.body);
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    assert!(
        page.body.contains("id=\"batch-start\""),
        "a member may start it"
    );
}

/// Issue 28.4: the console's batch upload follows the API's one rule. A
/// quoted name with a line break rejects its row (shown in the preview with
/// the column named), the good row beside it is created, and its multi-line
/// address is stored as written.
#[tokio::test]
async fn a_batch_upload_rejects_a_bad_cells_row_and_keeps_the_good_one() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Cells").await;
    let s = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;
    let csv = format!(
        "name,phone,address\n\"Asha\nKumar\",{},Pune\nRavi,{},\"Flat 4\nMG Road\"\n",
        phone(11, ANSWERS),
        phone(12, ANSWERS),
    );
    let fields = [
        ("kind", "batch"),
        ("name", "Cells"),
        ("agent_id", agent.as_str()),
    ];
    let page = s
        .htmx_multipart("/batches/preview", upload_form(&fields, &csv))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("id=\"preview-accepted\">1<"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<td>2</td><td>name must not contain the control character U+000A</td>"),
        "{}",
        page.body
    );
    let page = s
        .htmx_multipart("/batches", upload_form(&fields, &csv))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let location = page.headers["hx-redirect"].to_str().unwrap().to_string();
    let id = location.trim_start_matches("/batches/");
    let items = app
        .get(&ws.key, &format!("/api/batches/{id}/items"))
        .await
        .expect(200)
        .body;
    assert_eq!(items["total"], 1, "{items}");
    assert_eq!(items["rows"][0]["name"], "Ravi", "{items}");
    assert_eq!(
        items["rows"][0]["variables"]["address"], "Flat 4\nMG Road",
        "{items}"
    );
}

#[tokio::test]
async fn a_viewer_sees_batches_but_creates_pauses_and_rents_nothing() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Viewer").await;
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Later", "agentId": agent, "scheduledStartAt": "2099-01-01T09:00:00Z",
                   "contacts": [{"name": "Asha", "phone": phone(9, ANSWERS)}]}),
        )
        .await
        .expect(201)
        .body;
    let id = created["id"].as_str().unwrap();
    let s = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Viewer).await).await;

    let list = s.get("/batches").await;
    assert_eq!(list.status, 200);
    assert!(list.body.contains("Later"));
    assert!(
        !list.body.contains("id=\"new-batch\""),
        "no create button for a viewer"
    );
    let page = s.get(&format!("/batches/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(">scheduled<"), "{}", page.body);
    assert!(
        !page.body.contains("id=\"batch-start\""),
        "no buttons for a viewer"
    );
    assert!(
        !page.body.contains("id=\"batch-schedule-form\""),
        "no schedule form for a viewer"
    );
    assert_eq!(s.get("/batches/new").await.status, 403);

    let fields = [
        ("kind", "batch"),
        ("name", "X"),
        ("agent_id", agent.as_str()),
    ];
    let csv = format!("name,phone\nA,{}\n", phone(8, ANSWERS));
    for path in ["/batches/preview", "/batches"] {
        let page = s.htmx_multipart(path, upload_form(&fields, &csv)).await;
        assert_eq!(page.status, 403, "{path}");
    }
    for action in ["pause", "stop", "retry", "start"] {
        let page = s.htmx_post(&format!("/batches/{id}/{action}"), &[]).await;
        assert_eq!(page.status, 403, "{action}");
    }
    let page = s
        .htmx_post(&format!("/batches/{id}/schedule"), &[("clear", "1")])
        .await;
    assert_eq!(page.status, 403);
    let batch = app
        .get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(batch["status"], "scheduled", "the viewer changed nothing");
    assert_eq!(batch["scheduledStartAt"], "2099-01-01T09:00:00.000Z");
    assert_eq!(stored_batches(&app, &ws).await, (1, 0));

    // The wallet is open to read, not to rent numbers.
    let wallet = s.get("/wallet").await;
    assert_eq!(wallet.status, 200);
    assert!(wallet.body.contains("₹1,000.00"), "{}", wallet.body);
    assert!(!wallet.body.contains("id=\"number-form\""));
    let page = s
        .post_form(
            "/wallet/numbers",
            &[("phone", "+918035799999"), ("provider", "sim")],
        )
        .await;
    assert_eq!(page.status, 403);
    let numbers = app.get(&ws.key, "/api/numbers").await.expect(200).body;
    assert_eq!(numbers["rows"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn actions_answer_with_a_flash_and_the_live_stream_ends_when_the_batch_does() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Actions").await;
    let s = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;
    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Draft", "agentId": agent}),
        )
        .await
        .expect(201)
        .body;
    let id = created["id"].as_str().unwrap().to_string();

    // A live view of a batch that never finishes ends once its session does.
    let watcher = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Viewer).await).await;
    let events = format!("/batches/{id}/events");
    let sign_out = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        watcher.post_form("/sign-out", &[]).await
    };
    let (stream, out) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(watcher.get(&events), sign_out)
    })
    .await
    .expect("the live view ends after sign-out");
    assert_eq!(out.status, 303);
    assert!(stream.body.contains("event: update"), "{}", stream.body);
    assert!(stream.body.contains(">draft<"), "{}", stream.body);
    assert!(!stream.body.contains("event: done"), "{}", stream.body);

    // The state machine's refusal comes back as a 409 flash.
    let page = s.htmx_post(&format!("/batches/{id}/pause"), &[]).await;
    assert_eq!(page.status, 409);
    assert!(page.body.contains("flash error"), "{}", page.body);
    assert!(
        page.body
            .contains("Batch is draft; it can be paused only when running"),
        "{}",
        page.body
    );
    let page = s.htmx_post(&format!("/batches/{id}/start"), &[]).await;
    assert_eq!(page.status, 409);
    assert!(page.body.contains("no items to dial"), "{}", page.body);

    // A schedule is set, then cleared; a past one is refused.
    let schedule = format!("/batches/{id}/schedule");
    let page = s
        .htmx_post(&schedule, &[("scheduled_start_at", "2000-01-01T00:00")])
        .await;
    assert_eq!(page.status, 422);
    let page = s
        .htmx_post(&schedule, &[("scheduled_start_at", "2099-06-01T09:30")])
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let batch = app
        .get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(batch["status"], "scheduled");
    assert_eq!(batch["scheduledStartAt"], "2099-06-01T09:30:00.000Z");
    let page = s.htmx_post(&schedule, &[("clear", "1")]).await;
    assert_eq!(page.status, 200);
    let batch = app
        .get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(batch["status"], "draft");

    // Items, a start from the console, and the stream ends with the batch.
    app.post(
        &ws.key,
        &format!("/api/batches/{id}/items"),
        json!({"items": [
            {"name": "One", "phone": phone(11, ANSWERS), "variables": {"simScript": ["Goodbye!"]}},
            {"name": "Two", "phone": phone(12, ANSWERS), "variables": {"simScript": ["Goodbye!"]}}
        ]}),
    )
    .await
    .expect(200);
    let page = s.htmx_post(&format!("/batches/{id}/start"), &[]).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Batch started: 2 item(s)"),
        "{}",
        page.body
    );
    let events = tokio::time::timeout(
        Duration::from_secs(90),
        s.get(&format!("/batches/{id}/events")),
    )
    .await
    .expect("the stream ends when the batch completes");
    assert_eq!(events.status, 200);
    assert!(events.body.contains("event: done"), "{}", events.body);
    let done = &events.body[events.body.rfind("event: done").unwrap()..];
    assert!(done.contains("100 %"), "{done}");
    assert!(done.contains(">completed<"), "{done}");

    // The export is the API's CSV, behind the session.
    let export = s.get(&format!("/batches/{id}/export")).await;
    assert_eq!(export.status, 200);
    assert!(
        export.body.starts_with("name,phone,status"),
        "{}",
        export.body
    );
    assert!(
        export.body.contains("\nOne,") && export.body.contains("\nTwo,"),
        "{}",
        export.body
    );

    // Another workspace's batch is not found.
    let other = app.workspace("Other").await;
    let stranger = ConsoleClient::sign_in(&app, &person(&app, &other, Role::Owner).await).await;
    assert_eq!(stranger.get(&format!("/batches/{id}")).await.status, 404);
    let page = stranger
        .htmx_post(&format!("/batches/{id}/retry"), &[])
        .await;
    assert_eq!(page.status, 404);
}

#[tokio::test]
async fn an_admin_rents_a_number_from_the_wallet_page() {
    let app = TestApp::spawn().await;
    let (ws, _) = dialing_workspace(&app, "Numbers").await;
    let s = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Admin).await).await;

    let page = s
        .post_form(
            "/wallet/numbers",
            &[("phone", "12"), ("provider", "sim"), ("rent", "abc")],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(
        page.body.contains("id=\"number-phone-error\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("id=\"number-rent-error\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("value=\"abc\""),
        "what was typed is kept"
    );

    let page = s
        .post_form(
            "/wallet/numbers",
            &[
                ("phone", "+918035711111"),
                ("provider", "twilio"),
                ("rent", "499.50"),
            ],
        )
        .await;
    assert_eq!(page.status, 303, "{}", page.body);
    assert_eq!(page.headers["location"], "/wallet?added=1");
    let wallet = s.get("/wallet?added=1").await;
    assert!(wallet.body.contains("Number added."));
    assert!(wallet.body.contains("+918035711111"));
    assert!(wallet.body.contains("₹499.50"));
    let numbers = app.get(&ws.key, "/api/numbers").await.expect(200).body;
    assert_eq!(numbers["rows"].as_array().unwrap().len(), 2, "{numbers}");

    // The same number again is refused at the field.
    let page = s
        .post_form(
            "/wallet/numbers",
            &[("phone", "+918035711111"), ("provider", "twilio")],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(page.body.contains("already rented"), "{}", page.body);

    // A form post without the token changes nothing.
    let page = s
        .post_form_raw(
            "/wallet/numbers",
            &[("phone", "+918035722222"), ("provider", "sim")],
        )
        .await;
    assert_eq!(page.status, 403);
    let numbers = app.get(&ws.key, "/api/numbers").await.expect(200).body;
    assert_eq!(numbers["rows"].as_array().unwrap().len(), 2);
}

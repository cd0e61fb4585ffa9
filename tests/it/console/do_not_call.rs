//! The do-not-call page (`/do-not-call`): the list searched and paged, a
//! number added and removed, a CSV imported and the list exported, with the
//! API's rules and messages; roles decide who adds, imports and removes.

use super::support::{ConsoleClient, person};
use crate::support::{TestApp, Workspace};
use serde_json::{Value, json};
use voxline::domain::Role;

const API: &str = "/api/numbers/do-not-call";

/// The API's view of the list, searched by `search`.
async fn api_entries(app: &TestApp, ws: &Workspace, search: &str) -> Value {
    app.get(&ws.key, &format!("{API}?search={search}&limit=100"))
        .await
        .expect(200)
        .body
}

/// A page's text with askama's escapes undone, to find a message as written.
fn unescaped(html: &str) -> String {
    html.replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#38;", "&")
        .replace("&amp;", "&")
}

/// The import form as htmx sends it: the CSV as its file.
fn upload(csv: &str) -> reqwest::multipart::Form {
    let file = reqwest::multipart::Part::bytes(csv.as_bytes().to_vec())
        .file_name("numbers.csv")
        .mime_str("text/csv")
        .unwrap();
    reqwest::multipart::Form::new().part("file", file)
}

#[tokio::test]
async fn the_list_adds_searches_pages_and_removes_with_the_apis_messages() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Lawful").await;
    let other = app.workspace("Elsewhere").await;
    let admin = person(&app, &ws, Role::Admin).await;
    let client = ConsoleClient::sign_in(&app, &admin).await;

    let home = client.get("/").await;
    assert!(
        home.body.contains("href=\"/do-not-call\""),
        "the navigation links the page: {}",
        home.body
    );
    let empty = client.get("/do-not-call").await;
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert!(empty.body.contains("No numbers are listed."));
    assert!(empty.body.contains("aria-current=\"page\">Do not call<"));

    // Added from the console: source console, shown on the page.
    let added = client
        .post_form(
            "/do-not-call",
            &[("phone", "+919845012310"), ("reason", "Asked by letter")],
        )
        .await;
    assert_eq!(added.status, 303, "{}", added.body);
    assert_eq!(added.headers["location"], "/do-not-call?done=added");
    let page = client.get("/do-not-call?done=added").await;
    assert!(page.body.contains("no path dials it from now on"));
    assert!(page.body.contains("+919845012310"));
    assert!(page.body.contains("Asked by letter"));
    let listed = api_entries(&app, &ws, "9845012310").await;
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["rows"][0]["source"], "console");
    assert_eq!(listed["rows"][0]["reason"], "Asked by letter");
    // Another workspace's list does not hold it.
    assert_eq!(api_entries(&app, &other, "9845012310").await["total"], 0);

    // Again: kept as it was.
    let again = client
        .post_form(
            "/do-not-call",
            &[("phone", "+919845012310"), ("reason", "Other")],
        )
        .await;
    assert_eq!(again.headers["location"], "/do-not-call?done=already");
    assert_eq!(
        api_entries(&app, &ws, "9845012310").await["rows"][0]["reason"],
        "Asked by letter"
    );

    // A bad number or reason: 422, the API's message beside the field, the input kept.
    for (phone, reason, error_id) in [
        ("98450 12310", "", "dnc-phone-error"),
        ("+91984501231", "", "dnc-phone-error"),
        ("+919845012399", "line one\nline two", "dnc-reason-error"),
        ("+919845012399", &"x".repeat(201), "dnc-reason-error"),
    ] {
        let api = app
            .post(&ws.key, API, json!({"phone": phone, "reason": reason}))
            .await
            .expect(400);
        let refused = client
            .post_form("/do-not-call", &[("phone", phone), ("reason", reason)])
            .await;
        assert_eq!(refused.status, 422, "{phone}: {}", refused.body);
        assert!(
            refused.body.contains(&format!("id=\"{error_id}\"")),
            "{error_id}: {}",
            refused.body
        );
        assert!(
            unescaped(&refused.body).contains(api.message()),
            "the API's message {:?}: {}",
            api.message(),
            refused.body
        );
        assert!(unescaped(&refused.body).contains(&format!("value=\"{phone}\"")));
    }
    assert_eq!(api_entries(&app, &ws, "").await["total"], 1);

    // Search and paging: 60 more through the API, 50 a page, newest first.
    for n in 0..60 {
        app.post(
            &ws.key,
            API,
            json!({"phone": format!("+9198450{n:05}"), "reason": if n == 7 { "Moved to Pune" } else { "bulk" }}),
        )
        .await
        .expect(201);
    }
    let first = client.get("/do-not-call").await;
    assert!(first.body.contains("(61)"), "{}", first.body);
    assert!(first.body.contains("Page 1 of 2"));
    assert!(first.body.contains("href=\"/do-not-call?page=2\""));
    let second = client.get("/do-not-call?page=2").await;
    assert!(second.body.contains("Page 2 of 2"));
    assert!(second.body.contains("+919845012310"), "the oldest is last");
    let found = client.get("/do-not-call?q=pune").await;
    assert!(found.body.contains("(1)"), "{}", found.body);
    assert!(found.body.contains("+919845000007"));
    assert!(!found.body.contains("+919845000008"));
    let none = client.get("/do-not-call?q=%3Cscript%3E").await;
    assert_eq!(none.status, 200);
    assert!(none.body.contains("No listed number matches the search."));
    assert!(!none.body.contains("<script>"));

    // Removed: off the list; removing again, or a number never listed, is a 404.
    let removed = client
        .post_form("/do-not-call/remove", &[("phone", "+919845012310")])
        .await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert_eq!(removed.headers["location"], "/do-not-call?done=removed");
    assert_eq!(api_entries(&app, &ws, "9845012310").await["total"], 0);
    let gone = client
        .post_form("/do-not-call/remove", &[("phone", "+919845012310")])
        .await;
    assert_eq!(gone.status, 404);
    // Another workspace's entry cannot be removed from here.
    app.post(&other.key, API, json!({"phone": "+919845099999"}))
        .await
        .expect(201);
    let foreign = client
        .post_form("/do-not-call/remove", &[("phone", "+919845099999")])
        .await;
    assert_eq!(foreign.status, 404);
    assert_eq!(api_entries(&app, &other, "9845099999").await["total"], 1);

    // Without the session's token nothing changes.
    let forged = client
        .post_form_raw("/do-not-call", &[("phone", "+919845077777")])
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(api_entries(&app, &ws, "9845077777").await["total"], 0);
}

#[tokio::test]
async fn a_csv_import_lists_the_valid_rows_reports_the_rest_and_the_export_reads_back() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Importer").await;
    let member = person(&app, &ws, Role::Member).await;
    let client = ConsoleClient::sign_in(&app, &member).await;
    app.post(
        &ws.key,
        API,
        json!({"phone": "+14155550123", "reason": "API"}),
    )
    .await
    .expect(201);

    let csv = "Phone,Reason\n+919845012310,asked\nnot a number,x\n+14155550123,again\n\"+919845012311\",\"moved, twice\"\n";
    let api_refusal = app
        .raw(
            &ws.key,
            reqwest::Method::POST,
            &format!("{API}/import"),
            "text/csv",
            "number\n+919845012310\n".to_string(),
        )
        .await
        .expect(400);
    let done = client
        .htmx_multipart("/do-not-call/import", upload(csv))
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body
            .contains("2 number(s) added, 1 already listed, 1 row(s) invalid"),
        "{}",
        done.body
    );
    assert!(done.body.contains("id=\"dnc-import-invalid\""));
    assert!(
        done.body.contains("<td>3</td>"),
        "the bad row's line: {}",
        done.body
    );
    assert!(done.body.contains("not a number"));
    let listed = api_entries(&app, &ws, "98450123").await;
    assert_eq!(listed["total"], 2, "{listed}");
    assert!(
        listed["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["source"] == "import")
    );
    assert_eq!(
        api_entries(&app, &ws, "4155550123").await["rows"][0]["reason"],
        "API",
        "an entry already listed is kept as it was"
    );

    // A file without a phone column: the API's message, nothing listed.
    let refused = client
        .htmx_multipart("/do-not-call/import", upload("number\n+919845012399\n"))
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        unescaped(&refused.body).contains(api_refusal.message()),
        "{:?}: {}",
        api_refusal.message(),
        refused.body
    );
    // No file chosen.
    let empty = client
        .htmx_multipart(
            "/do-not-call/import",
            reqwest::multipart::Form::new().part(
                "file",
                reqwest::multipart::Part::bytes(Vec::new()).file_name(""),
            ),
        )
        .await;
    assert_eq!(empty.status, 422, "{}", empty.body);
    assert!(empty.body.contains("Choose a CSV file"));
    assert_eq!(api_entries(&app, &ws, "").await["total"], 3);

    // The export: every entry in number order, as the API's.
    let page = client.get("/do-not-call").await;
    assert!(page.body.contains("href=\"/do-not-call/export\""));
    let export = client.get("/do-not-call/export").await;
    assert_eq!(export.status, 200, "{}", export.body);
    assert!(
        export.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    let lines: Vec<&str> = export.body.lines().collect();
    assert_eq!(lines[0], "phone,reason,source,created_at");
    assert_eq!(lines.len(), 4, "{}", export.body);
    assert!(lines[1].starts_with("+14155550123,API,api,"));
    assert!(lines[2].starts_with("+919845012310,asked,import,"));
    assert!(lines[3].starts_with("+919845012311,\"moved, twice\",import,"));
    let api_export = app
        .raw(
            &ws.key,
            reqwest::Method::GET,
            &format!("{API}/export.csv"),
            "text/plain",
            String::new(),
        )
        .await
        .expect(200);
    assert_eq!(api_export.text, export.body);
}

#[tokio::test]
async fn roles_decide_who_adds_imports_and_removes() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Roles").await;
    app.post(
        &ws.key,
        API,
        json!({"phone": "+919845012310", "reason": "asked"}),
    )
    .await
    .expect(201);
    let viewer = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Viewer).await).await;
    let member = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Member).await).await;
    let admin = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Admin).await).await;

    // A viewer sees the list and exports it; no form to change it.
    let seen = viewer.get("/do-not-call").await;
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert!(seen.body.contains("+919845012310"));
    assert!(!seen.body.contains("id=\"dnc-add-form\""));
    assert!(!seen.body.contains("id=\"dnc-import-form\""));
    assert!(!seen.body.contains("/do-not-call/remove"));
    assert_eq!(viewer.get("/do-not-call/export").await.status, 200);
    let add = viewer
        .post_form("/do-not-call", &[("phone", "+919845012311")])
        .await;
    assert_eq!(add.status, 403, "{}", add.body);
    let import = viewer
        .htmx_multipart("/do-not-call/import", upload("phone\n+919845012312\n"))
        .await;
    assert_eq!(import.status, 403, "{}", import.body);
    let remove = viewer
        .post_form("/do-not-call/remove", &[("phone", "+919845012310")])
        .await;
    assert_eq!(remove.status, 403, "{}", remove.body);
    assert_eq!(api_entries(&app, &ws, "").await["total"], 1);

    // A member adds and imports, but cannot let a number be dialed again.
    let page = member.get("/do-not-call").await;
    assert!(page.body.contains("id=\"dnc-add-form\""));
    assert!(page.body.contains("id=\"dnc-import-form\""));
    assert!(!page.body.contains("/do-not-call/remove"));
    assert_eq!(
        member
            .post_form("/do-not-call", &[("phone", "+919845012311")])
            .await
            .status,
        303
    );
    assert_eq!(
        member
            .htmx_multipart("/do-not-call/import", upload("phone\n+919845012312\n"))
            .await
            .status,
        200
    );
    let remove = member
        .post_form("/do-not-call/remove", &[("phone", "+919845012310")])
        .await;
    assert_eq!(remove.status, 403, "{}", remove.body);
    assert_eq!(api_entries(&app, &ws, "").await["total"], 3);

    // An admin removes.
    assert!(
        admin
            .get("/do-not-call")
            .await
            .body
            .contains("/do-not-call/remove")
    );
    let removed = admin
        .post_form("/do-not-call/remove", &[("phone", "+919845012310")])
        .await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert_eq!(api_entries(&app, &ws, "").await["total"], 2);
}

#[tokio::test]
async fn a_batch_page_shows_each_items_skip_reason_and_counts_skips_by_rule() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Skips", 2).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Reminder", "welcomeMessage": "Hello {name}.", "prompt": "Be brief."}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.post(
        &ws.key,
        API,
        json!({"phone": "+919845200110", "reason": "asked"}),
    )
    .await
    .expect(201);
    let batch = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Reminders", "agentId": agent}),
        )
        .await
        .expect(201)
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let added = app
        .post(
            &ws.key,
            &format!("/api/batches/{batch}/items"),
            json!({"items": [
                {"name": "Listed", "phone": "+919845200110"},
                {"name": "Typo", "phone": "12345"},
                {"name": "Fine", "phone": "+919845200210"},
            ]}),
        )
        .await
        .expect(200);
    assert_eq!(added.body["skipped"], 2, "{}", added.body);

    let viewer = ConsoleClient::sign_in(&app, &person(&app, &ws, Role::Viewer).await).await;
    let page = viewer.get(&format!("/batches/{batch}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let rows: Vec<&str> = page.body.split("<tr>").collect();
    let row_of = |name: &str| {
        rows.iter()
            .find(|r| r.contains(&format!("<td>{name}</td>")))
            .unwrap_or_else(|| panic!("no row for {name}: {}", page.body))
            .to_string()
    };
    assert!(
        row_of("Listed").contains("<span class=\"badge skip-reason\">do-not-call</span>"),
        "{}",
        row_of("Listed")
    );
    assert!(!row_of("Typo").contains("skip-reason"));
    assert!(!row_of("Fine").contains("skip-reason"));
    let summary = page
        .body
        .split("id=\"batch-skipped-by\"")
        .nth(1)
        .expect("the skipped-by-rule summary")
        .split("</p>")
        .next()
        .unwrap()
        .to_string();
    assert!(
        summary.contains("<span class=\"badge\">do-not-call</span> 1"),
        "{summary}"
    );
    assert!(
        summary.contains("<span class=\"badge\">invalid number</span> 1"),
        "{summary}"
    );
}

#[tokio::test]
async fn an_admin_sets_the_dialing_rules_with_the_apis_messages_and_a_member_only_reads_them() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Rules").await;
    let admin = person(&app, &ws, Role::Admin).await;
    let client = ConsoleClient::sign_in(&app, &admin).await;
    let page = client.get("/do-not-call").await;
    assert!(page.body.contains("Dialing rules"), "{}", page.body);
    assert!(
        page.body.contains("id=\"rules-default\""),
        "the server's hours at first"
    );
    assert!(
        page.body.contains("value=\"3\""),
        "the day's cap: {}",
        page.body
    );

    let ticked = |days: &[&'static str]| days.iter().map(|d| (*d, "on")).collect::<Vec<_>>();
    let mut form = vec![
        ("cap_per_day", "2"),
        ("cap_per_week", "6"),
        ("start", "10:00"),
        ("end", "18:30"),
        ("time_zone", "Asia/Kolkata"),
    ];
    form.extend(ticked(&["mon", "tue", "wed"]));
    let saved = client.post_form("/do-not-call/rules", &form).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(saved.headers["location"], "/do-not-call?done=rules");
    let api = app
        .get(&ws.key, "/api/numbers/dialing-settings")
        .await
        .expect(200)
        .body;
    assert_eq!(api["attemptCapPerDay"], 2, "{api}");
    assert_eq!(api["attemptCapPerWeek"], 6);
    assert_eq!(
        api["callingHours"],
        json!({"start": "10:00", "end": "18:30", "days": ["mon", "tue", "wed"], "timeZone": "Asia/Kolkata"})
    );
    let page = client.get("/do-not-call?done=rules").await;
    assert!(page.body.contains("The dialing rules are saved"));
    assert!(page.body.contains("value=\"18:30\""), "{}", page.body);
    assert!(!page.body.contains("id=\"rules-default\""));

    // Refused with the API's messages; nothing is stored.
    let mut bad = vec![
        ("cap_per_day", "0"),
        ("cap_per_week", "6"),
        ("start", "9am"),
        ("end", "18:30"),
        ("time_zone", ""),
    ];
    bad.extend(ticked(&["mon"]));
    let refused = client.post_form("/do-not-call/rules", &bad).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    let text = unescaped(&refused.body);
    assert!(
        text.contains("attemptCapPerDay must be from 1 to 100"),
        "{text}"
    );
    assert!(text.contains("callingHours.start"), "{text}");
    assert!(
        text.contains("value=\"9am\""),
        "the form keeps what was typed"
    );
    assert_eq!(
        app.get(&ws.key, "/api/numbers/dialing-settings")
            .await
            .expect(200)
            .body["attemptCapPerDay"],
        2
    );
    // Back to the server's hours.
    let reset = client
        .post_form(
            "/do-not-call/rules",
            &[
                ("cap_per_day", "3"),
                ("cap_per_week", "7"),
                ("server_default", "on"),
            ],
        )
        .await;
    assert_eq!(reset.status, 303, "{}", reset.body);
    let api = app
        .get(&ws.key, "/api/numbers/dialing-settings")
        .await
        .expect(200)
        .body;
    assert_eq!(api["callingHoursDefault"], true, "{api}");

    // A member sees the rules but cannot change them.
    let member = person(&app, &ws, Role::Member).await;
    let member_client = ConsoleClient::sign_in(&app, &member).await;
    let page = member_client.get("/do-not-call").await;
    assert!(
        page.body
            .contains("Only an admin changes the dialing rules.")
    );
    let denied = member_client
        .post_form(
            "/do-not-call/rules",
            &[("cap_per_day", "9"), ("cap_per_week", "9")],
        )
        .await;
    assert_eq!(denied.status, 403, "{}", denied.body);
}

//! Issue 6: campaigns — CSV upload (decisions §7 header rules, BOM, quotes,
//! extra columns as variables, rejected rows reported), students, calls in the
//! call-row shape, and the streamed export.

use super::batches::{ANSWERS, BUSY, FAILS, all_items, dialing_workspace, phone};
use crate::support::{Reply, TestApp, Workspace, eventually};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

const BOUNDARY: &str = "voxline-test-boundary";

/// Uploads `csv` as the multipart field `file`.
pub async fn upload(app: &TestApp, ws: &Workspace, id: &str, csv: &[u8]) -> Reply {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nignored\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"students.csv\"\r\n\
         Content-Type: text/csv\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(csv);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    app.raw(
        &ws.key,
        Method::POST,
        &format!("/api/campaigns/{id}/students/upload"),
        &format!("multipart/form-data; boundary={BOUNDARY}"),
        body,
    )
    .await
}

async fn campaign(app: &TestApp, ws: &Workspace, agent: &str, name: &str) -> String {
    let created = app
        .post(
            &ws.key,
            "/api/campaigns",
            json!({"name": name, "agentId": agent}),
        )
        .await
        .expect(201)
        .body;
    assert_eq!(created["status"], "draft");
    assert_eq!(created["agentName"], "Admissions");
    created["id"].as_str().unwrap().to_string()
}

async fn wait_completed(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    eventually(Duration::from_secs(60), "campaign completed", || async {
        let c = app
            .get(&ws.key, &format!("/api/campaigns/{id}"))
            .await
            .expect(200)
            .body;
        (c["status"] == "completed").then_some(c)
    })
    .await
}

#[tokio::test]
async fn a_csv_with_bom_quotes_extra_columns_and_bad_rows_is_ingested_and_dialed() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Campaign", 3).await;
    let id = campaign(&app, &ws, &agent, "Winter intake").await;
    let script = "\"[\"\"Goodbye!\"\"]\"";
    let csv = format!(
        "\u{feff}course,NAME,Phone_Number,City,simScript\r\n\
         MBA,\"Rao, Asha\",{},\"Pune\nMH\",{script}\r\n\
         BBA,Ravi,{},Delhi,{script}\r\n\
         MBA,,{},Delhi,{script}\r\n\
         MBA,Nobody,+911111111111,Delhi,{script}\r\n\
         MBA,Twice,{},Delhi,{script}\r\n\
         MBA,Wide,{},Delhi,{script},extra\r\n\
         \r\n\
         MCA,Meera,{},Chennai,{script}",
        phone(1, ANSWERS),
        phone(2, BUSY),
        phone(3, FAILS),
        phone(1, ANSWERS),
        phone(4, FAILS),
        phone(5, FAILS),
    );
    let report = upload(&app, &ws, &id, csv.as_bytes())
        .await
        .expect(200)
        .body;
    assert_eq!(report["accepted"], 3, "{report}");
    assert_eq!(report["rejected"], 4, "{report}");
    let rejected = report["rejectedRows"].as_array().unwrap();
    let rows: Vec<i64> = rejected
        .iter()
        .map(|r| r["row"].as_i64().unwrap())
        .collect();
    assert_eq!(rows, [4, 5, 6, 7]);
    assert!(rejected[0]["reason"].as_str().unwrap().contains("name"));
    assert!(
        rejected[1]["reason"]
            .as_str()
            .unwrap()
            .contains("placeholder")
    );
    assert!(rejected[2]["reason"].as_str().unwrap().contains("already"));
    assert!(rejected[3]["reason"].as_str().unwrap().contains("fields"));

    let students = all_items(&app, &ws.key, &format!("/api/campaigns/{id}/students")).await;
    assert_eq!(students.len(), 3);
    assert_eq!(students[0]["name"], "Rao, Asha");
    assert_eq!(students[0]["status"], "pending");
    // Other columns become variables named as in the header.
    assert_eq!(students[0]["variables"]["City"], "Pune\nMH");
    assert_eq!(students[0]["variables"]["course"], "MBA");
    assert_eq!(students[0]["variables"]["simScript"], "[\"Goodbye!\"]");
    assert_eq!(students[0]["variables"]["name"], "Rao, Asha");
    assert_eq!(students[2]["name"], "Meera");

    let view = app
        .get(&ws.key, &format!("/api/campaigns/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(view["total"], 3);
    assert_eq!(view["pending"], 3);
    app.post_empty(&ws.key, &format!("/api/campaigns/{id}/start"))
        .await
        .expect(200);
    let more = upload(&app, &ws, &id, b"name,phone\nLate,+919845099910\n")
        .await
        .expect(409);
    assert!(more.message().contains("running"));
    let done = wait_completed(&app, &ws, &id).await;
    assert_eq!(done["completed"], 1, "{done}");
    assert_eq!(done["busy"], 1);
    assert_eq!(done["failed"], 2);

    let calls = app
        .get(&ws.key, &format!("/api/campaigns/{id}/calls"))
        .await
        .expect(200)
        .body;
    assert_eq!(calls["total"], 3);
    assert_eq!(calls["stats"]["completedCount"], 1);
    let rows = calls["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["campaignName"] == "Winter intake"));
    let answered = rows.iter().find(|r| r["rawStatus"] == "completed").unwrap();
    assert_eq!(answered["studentName"], "Rao, Asha");
    // The student's columns reached the agent's placeholders.
    let call_id = answered["id"].as_str().unwrap();
    let detail = eventually(Duration::from_secs(5), "transcript", || async {
        let d = app
            .get(&ws.key, &format!("/api/calls/{call_id}"))
            .await
            .expect(200)
            .body;
        (!d["transcript"].as_array().unwrap().is_empty()).then_some(d)
    })
    .await;
    let greeting = detail["transcript"][0]["text"].as_str().unwrap();
    assert_eq!(greeting, "Hello Rao, Asha, calling about MBA.");

    // Other workspaces see none of it.
    let other = app.workspace("Other").await;
    app.get(&other.key, &format!("/api/campaigns/{id}/students"))
        .await
        .expect(404);
    // A campaign is not a batch.
    app.get(&ws.key, &format!("/api/batches/{id}"))
        .await
        .expect(404);
}

#[tokio::test]
async fn the_export_streams_every_student_with_their_latest_result() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Export", 5).await;
    let id = campaign(&app, &ws, &agent, "Export").await;
    let mut csv = String::from("mobile,Name,Batch\n");
    // Numbers the numbering plan accepts and the placeholder rules let through.
    let phones = (0..).map(|n| format!("+9197{n:06}{FAILS:02}"));
    let valid = phones.filter(|p| voxline::domain::PhoneNumber::parse(p).is_ok());
    for (n, p) in valid.take(1_200).enumerate() {
        csv.push_str(&format!("{p},Student {n},\"B, {}\"\n", n % 3));
    }
    let report = upload(&app, &ws, &id, csv.as_bytes())
        .await
        .expect(200)
        .body;
    assert_eq!(report["accepted"], 1_200, "{report}");
    let export = app
        .get(&ws.key, &format!("/api/campaigns/{id}/export"))
        .await
        .expect(200);
    assert!(
        export
            .header("content-type")
            .unwrap()
            .starts_with("text/csv")
    );
    let mut reader = csv::Reader::from_reader(export.text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(
        headers,
        [
            "name",
            "phone",
            "status",
            "attempts",
            "call_id",
            "duration_seconds",
            "ended_reason",
            "summary",
            "variables",
            "skip_reason",
            "wait_reason",
            "next_attempt_at",
            "success",
            "success_pass",
            "other_extracted"
        ]
    );
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 1_200, "every student, across export pages");
    assert_eq!(&records[0][0], "Student 0");
    assert_eq!(&records[0][2], "pending");
    assert_eq!(&records[1_199][0], "Student 1199");
    let vars: Value = serde_json::from_str(&records[1][8]).unwrap();
    assert_eq!(vars["Batch"], "B, 1");

    // Dial a small campaign to see results in the export.
    let small = campaign(&app, &ws, &agent, "Small").await;
    let csv = format!(
        "name,phone\nBusy One,{}\nFail Two,{}\n",
        phone(7, BUSY),
        phone(8, FAILS)
    );
    upload(&app, &ws, &small, csv.as_bytes()).await.expect(200);
    app.post_empty(&ws.key, &format!("/api/campaigns/{small}/start"))
        .await
        .expect(200);
    wait_completed(&app, &ws, &small).await;
    let export = app
        .get(&ws.key, &format!("/api/campaigns/{small}/export"))
        .await
        .expect(200);
    let mut reader = csv::Reader::from_reader(export.text.as_bytes());
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 2);
    assert_eq!(&records[0][2], "busy");
    assert_eq!(&records[0][3], "1");
    assert!(!records[0][4].is_empty(), "call id");
    assert_eq!(&records[0][6], "busy");
    assert_eq!(&records[1][2], "failed");
    assert_eq!(&records[1][6], "carrier-error");
}

/// Issue 28.4: one rule for every bad row. A quoted name with a line break
/// (valid RFC 4180), a control character or NUL in a variable cell, and a
/// malformed number each reject their own row with the column named; the good
/// row beside them is stored, its multi-line address and note kept as prose.
#[tokio::test]
async fn a_bad_cell_rejects_its_row_and_the_good_rows_are_stored() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Cells", 2).await;
    let id = campaign(&app, &ws, &agent, "Cells").await;
    let csv = format!(
        "name,phone,address,note\r\n\
         \"Asha\nKumar\",{},Pune,x\r\n\
         Ravi,{},\"Flat 4\nMG Road\",\"call after 6\r\nnot before\"\r\n\
         Bell,{},\"a\u{7}b\",y\r\n\
         Nul,{},z,\"a\u{0}b\"\r\n\
         Short,12345,Delhi,y\r\n",
        phone(1, ANSWERS),
        phone(2, ANSWERS),
        phone(3, ANSWERS),
        phone(4, ANSWERS),
    );
    let report = upload(&app, &ws, &id, csv.as_bytes())
        .await
        .expect(200)
        .body;
    assert_eq!(report["accepted"], 1, "{report}");
    assert_eq!(report["rejected"], 4, "{report}");
    let rejected: Vec<(i64, &str)> = report["rejectedRows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["row"].as_i64().unwrap(), r["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rejected,
        [
            (2, "name must not contain the control character U+000A"),
            (4, "address must not contain the control character U+0007"),
            (5, "note must not contain NUL (U+0000)"),
            (6, "phone is not a valid E.164 phone number"),
        ],
        "{report}"
    );
    let students = all_items(&app, &ws.key, &format!("/api/campaigns/{id}/students")).await;
    assert_eq!(students.len(), 1, "{students:?}");
    assert_eq!(students[0]["name"], "Ravi");
    assert_eq!(students[0]["variables"]["address"], "Flat 4\nMG Road");
    assert_eq!(
        students[0]["variables"]["note"],
        "call after 6\r\nnot before"
    );
}

#[tokio::test]
async fn uploads_without_the_needed_columns_or_file_are_refused() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Refusals", 2).await;
    let id = campaign(&app, &ws, &agent, "R").await;
    let no_phone = upload(&app, &ws, &id, b"name,email\nA,a@example.com\n")
        .await
        .expect(400);
    assert!(
        no_phone.message().contains("phone"),
        "{}",
        no_phone.message()
    );
    let no_name = upload(&app, &ws, &id, b"Number\n+919845012310\n")
        .await
        .expect(400);
    assert!(no_name.message().contains("name"));
    let empty = upload(&app, &ws, &id, b"").await.expect(400);
    assert!(empty.message().contains("empty"));
    let json_body = app
        .post(
            &ws.key,
            &format!("/api/campaigns/{id}/students/upload"),
            json!({}),
        )
        .await
        .expect(400);
    assert!(json_body.message().contains("file"));
    let start = app
        .post_empty(&ws.key, &format!("/api/campaigns/{id}/start"))
        .await
        .expect(409);
    assert!(start.message().contains("no items"));
    app.post(&ws.key, "/api/campaigns", json!({"agentId": agent}))
        .await
        .expect(400);
    let scheduled = app
        .post(
            &ws.key,
            "/api/campaigns",
            json!({"name": "Later", "agentId": agent, "scheduledStartAt": "2000-01-01T00:00:00Z"}),
        )
        .await
        .expect(400);
    assert!(scheduled.message().contains("scheduledStartAt"));
    let list = app.get(&ws.key, "/api/campaigns").await.expect(200).body;
    assert_eq!(list["total"], 1);
    app.delete(&ws.key, &format!("/api/campaigns/{id}"))
        .await
        .expect(204);
}

/// Every call of the workspace whose name, phone, agent or email holds `term`
/// (deep: transcripts too, through SQLite's trigram index when 3+ characters).
async fn search_calls(app: &TestApp, ws: &Workspace, term: &str, deep: bool) -> Vec<Value> {
    let found = app
        .get(&ws.key, &format!("/api/calls?search={term}&deep={deep}"))
        .await
        .expect(200)
        .body;
    found["rows"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_csv_email_column_reaches_the_call_and_is_found_by_search() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "Emails", 3).await;
    let id = campaign(&app, &ws, &agent, "Mailers").await;
    let csv = format!(
        "name,phone,Email,course\n\
         Asha,{},asha.rao@example.com,MBA\n\
         Ravi,{},,BBA\n\
         Bad,{},not-an-address,MBA\n",
        phone(11, FAILS),
        phone(12, FAILS),
        phone(13, FAILS),
    );
    let report = upload(&app, &ws, &id, csv.as_bytes())
        .await
        .expect(200)
        .body;
    assert_eq!(report["accepted"], 2, "{report}");
    assert_eq!(report["rejectedRows"][0]["row"], 4, "{report}");
    let reason = report["rejectedRows"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("email is not an email address"),
        "{reason}"
    );
    app.post_empty(&ws.key, &format!("/api/campaigns/{id}/start"))
        .await
        .expect(200);
    wait_completed(&app, &ws, &id).await;

    let found = search_calls(&app, &ws, "ASHA.RAO%40example", true).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["email"], "asha.rao@example.com");
    assert_eq!(found[0]["studentName"], "Asha");
    // A short term goes through the other arm of the search.
    assert_eq!(search_calls(&app, &ws, "%40e", false).await.len(), 1);
    let call_id = found[0]["id"].as_str().unwrap();
    let detail = app
        .get(&ws.key, &format!("/api/calls/{call_id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(detail["email"], "asha.rao@example.com");
    let calls = app
        .get(&ws.key, &format!("/api/campaigns/{id}/calls"))
        .await
        .expect(200)
        .body;
    let ravi = calls["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["studentName"] == "Ravi")
        .expect("Ravi's call");
    assert_eq!(ravi["email"], Value::Null, "a blank cell is no address");
    assert!(
        search_calls(&app, &ws, "example.org", true)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn batch_items_and_call_variables_carry_an_email_and_refuse_a_bad_one() {
    let app = TestApp::spawn().await;
    let (ws, agent) = dialing_workspace(&app, "ItemEmails", 3).await;
    let refused = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "contacts": [
                {"name": "A", "phone": phone(21, FAILS), "email": "a@example.com"},
                {"name": "B", "phone": phone(22, FAILS), "email": "b@"}
            ]}),
        )
        .await
        .expect(400);
    assert!(
        refused.message().contains("contacts[1].email"),
        "{}",
        refused.message()
    );
    assert!(refused.message().contains("not an email address"));
    let bad_variable = app
        .post(
            &ws.key,
            &format!("/api/agents/{agent}/test-call"),
            json!({"phoneNumber": phone(23, FAILS), "variables": {"email": "nobody"}}),
        )
        .await
        .expect(400);
    assert!(
        bad_variable.message().contains("variables.email"),
        "{}",
        bad_variable.message()
    );

    let created = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"agentId": agent, "contacts": [
                {"name": "A", "phone": phone(24, FAILS), "email": "item.a@example.com"},
                {"name": "B", "phone": phone(25, FAILS), "variables": {"email": "var.b@example.com"}}
            ]}),
        )
        .await
        .expect(201)
        .body;
    let batch_id = created["id"].as_str().unwrap().to_string();
    super::batches::wait_status(&app, &ws, &batch_id, "completed", 30).await;
    let tested = app
        .post(
            &ws.key,
            &format!("/api/agents/{agent}/test-call"),
            json!({"phoneNumber": phone(26, FAILS), "variables": {"email": "test.c@example.com"}}),
        )
        .await
        .expect(201)
        .body;
    for (term, email) in [
        ("item.a", "item.a@example.com"),
        ("var.b", "var.b@example.com"),
        ("test.c", "test.c@example.com"),
    ] {
        let found = search_calls(&app, &ws, term, true).await;
        assert_eq!(found.len(), 1, "{term}: {found:?}");
        assert_eq!(found[0]["email"], email);
    }
    let test_call = tested["callId"].as_str().unwrap();
    let detail = app
        .get(&ws.key, &format!("/api/calls/{test_call}"))
        .await
        .expect(200)
        .body;
    assert_eq!(detail["email"], "test.c@example.com");
    // The item's email is its call's `email` variable too (the calendar's attendee).
    let items = all_items(&app, &ws.key, &format!("/api/batches/{batch_id}/items")).await;
    assert_eq!(items[0]["variables"]["email"], "item.a@example.com");
}

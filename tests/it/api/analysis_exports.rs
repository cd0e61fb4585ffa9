//! Post-call analysis in exports and analytics: the batch, campaign and call
//! exports carry one column per extracted field of the agent's plan plus the
//! success verdict, and `/api/dashboard/analysis` counts outcomes per agent
//! and day. Expected cells come from the API's own call reads, not from what
//! the sim analyzer is known to extract.

use crate::support::{TestApp, Workspace, eventually};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// The callee's answers to the sim agent's questions.
const ANSWERS: &[&str] = &[
    "Yes, I have a minute.",
    "About 30 days.",
    "Yes, I can relocate.",
    "Thanks, bye",
];

/// The call export's columns without analysis columns.
const CALL_COLUMNS: [&str; 12] = [
    "id",
    "name",
    "phone",
    "agent",
    "status",
    "duration_seconds",
    "cost_paise",
    "provider",
    "direction",
    "ended_reason",
    "created_at",
    "summary",
];

/// The batch and campaign export's leading columns.
const ITEM_COLUMNS: [&str; 12] = [
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
];

/// An agent extracting `notice_days` and `relocate` and judging pass/fail.
async fn screening_agent(app: &TestApp, ws: &Workspace) -> String {
    app.create_agent(
        &ws.key,
        json!({
            "name": "Screener",
            "welcomeMessage": "Hello {name}, do you have a minute?",
            "analysis": {
                "fields": [
                    {"name": "notice_days", "type": "integer", "description": "Notice period in days"},
                    {"name": "relocate", "type": "boolean", "description": "Whether they can relocate"}
                ],
                "success": {"rubric": "passFail", "prompt": "The candidate answered every question"}
            }
        }),
    )
    .await["id"]
        .as_str()
        .expect("agent id")
        .to_string()
}

/// A CSV body as its header and records.
fn parse_csv(text: &str) -> (Vec<String>, Vec<csv::StringRecord>) {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader
        .headers()
        .expect("CSV header")
        .iter()
        .map(str::to_string)
        .collect();
    let records = reader.records().map(|r| r.expect("CSV record")).collect();
    (header, records)
}

/// A JSON value as an export cell: strings as they are, null or missing
/// empty, anything else JSON text.
fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The cell of column `name` in `record`.
fn column<'r>(header: &[String], record: &'r csv::StringRecord, name: &str) -> &'r str {
    let at = header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    &record[at]
}

/// Checks the analysis cells of one exported row against the call's read.
fn check_analysis_cells(header: &[String], record: &csv::StringRecord, call: &Value) {
    let analysis = &call["analysis"];
    let data = &analysis["structuredData"];
    for field in ["notice_days", "relocate"] {
        assert_eq!(
            column(header, record, field),
            cell(data.get(field)),
            "{field} of {call}"
        );
    }
    assert_eq!(
        column(header, record, "success"),
        cell(analysis["success"].get("value")),
        "success of {call}"
    );
    assert_eq!(
        column(header, record, "success_pass"),
        cell(analysis["success"].get("pass")),
        "success_pass of {call}"
    );
    assert_eq!(
        column(header, record, "summary"),
        call["summary"].as_str().expect("summary"),
    );
}

/// Polls the call until its analysis is no longer pending, and returns its read.
async fn analyzed(app: &TestApp, key: &str, call_id: &str) -> Value {
    eventually(Duration::from_secs(90), "the analysis", || async {
        let call = app
            .get(key, &format!("/api/calls/{call_id}"))
            .await
            .expect(200)
            .body;
        let status = call["analysis"]["status"].as_str().unwrap_or_default();
        (status == "done" || status == "failed" || status == "skipped").then_some(call)
    })
    .await
}

#[tokio::test]
async fn exports_and_the_dashboard_carry_the_analysis() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Analysis exports", 5).await;
    let agent = screening_agent(&app, &ws).await;

    // A batch of two callees who answer every question.
    let batch = app
        .post(
            &ws.key,
            "/api/batches",
            json!({"name": "Screening", "agentId": agent}),
        )
        .await
        .expect(201)
        .body["id"]
        .as_str()
        .expect("batch id")
        .to_string();
    let items: Vec<Value> = ["Asha", "Ravi"]
        .iter()
        .enumerate()
        .map(|(n, name)| {
            json!({"name": name, "phone": format!("+91984507{n:02}10"),
                   "variables": {"simScript": ANSWERS}})
        })
        .collect();
    app.post(
        &ws.key,
        &format!("/api/batches/{batch}/items"),
        json!({ "items": items }),
    )
    .await
    .expect(200);
    app.post_empty(&ws.key, &format!("/api/batches/{batch}/start"))
        .await
        .expect(200);
    eventually(Duration::from_secs(90), "the batch to complete", || async {
        let b = app
            .get(&ws.key, &format!("/api/batches/{batch}"))
            .await
            .expect(200)
            .body;
        (b["status"] == "completed").then_some(())
    })
    .await;
    let rows = app
        .get(&ws.key, &format!("/api/batches/{batch}/items"))
        .await
        .expect(200)
        .body["rows"]
        .as_array()
        .expect("items")
        .clone();
    assert_eq!(rows.len(), 2);
    let mut calls = Map::new();
    for row in &rows {
        let id = row["callId"].as_str().expect("callId");
        let call = analyzed(&app, &ws.key, id).await;
        assert_eq!(call["analysis"]["status"], "done", "{call}");
        calls.insert(id.to_string(), call);
    }

    // The list filters by agent (and by analysis status).
    let listed = app
        .get(
            &ws.key,
            &format!("/api/calls?agentId={agent}&analysisStatus=done"),
        )
        .await
        .expect(200);
    assert_eq!(listed.body["rows"].as_array().expect("rows").len(), 2);
    let upper = app
        .get(
            &ws.key,
            &format!("/api/calls?agentId={}", agent.to_uppercase()),
        )
        .await
        .expect(200);
    assert_eq!(upper.body["rows"].as_array().expect("rows").len(), 2);
    for other in ["00000000-0000-7000-8000-000000000000", "not-an-agent"] {
        let none = app
            .get(&ws.key, &format!("/api/calls?agentId={other}"))
            .await
            .expect(200);
        assert_eq!(none.body["rows"], json!([]), "agentId={other}");
    }

    // The batch export: one column per field, the verdict, and the rest.
    let export = app
        .get(&ws.key, &format!("/api/batches/{batch}/export"))
        .await
        .expect(200);
    assert!(
        export
            .header("content-type")
            .is_some_and(|ct| ct.starts_with("text/csv"))
    );
    let (header, records) = parse_csv(&export.text);
    let mut expected: Vec<&str> = ITEM_COLUMNS.to_vec();
    expected.extend([
        "notice_days",
        "relocate",
        "success",
        "success_pass",
        "other_extracted",
    ]);
    assert_eq!(header, expected);
    assert_eq!(records.len(), 2);
    for record in &records {
        let call = &calls[column(&header, record, "call_id")];
        check_analysis_cells(&header, record, call);
        let others: Value =
            serde_json::from_str(column(&header, record, "other_extracted")).expect("JSON");
        let mut rest = call["extracted"].as_object().expect("extracted").clone();
        rest.remove("notice_days");
        rest.remove("relocate");
        assert_eq!(others, Value::Object(rest));
    }

    // The call export filtered to the agent has the same analysis columns.
    let export = app
        .get(&ws.key, &format!("/api/calls/export.csv?agentId={agent}"))
        .await
        .expect(200);
    let (header, records) = parse_csv(&export.text);
    let mut expected: Vec<&str> = CALL_COLUMNS.to_vec();
    expected.extend(["notice_days", "relocate", "success", "success_pass"]);
    assert_eq!(header, expected);
    assert_eq!(records.len(), 2);
    for record in &records {
        check_analysis_cells(&header, record, &calls[&record[0]]);
    }
    // Unfiltered, it has none.
    let (header, records) = parse_csv(
        &app.get(&ws.key, "/api/calls/export.csv")
            .await
            .expect(200)
            .text,
    );
    assert_eq!(header, CALL_COLUMNS);
    assert_eq!(records.len(), 2);

    // The dashboard counts both calls for the agent, today.
    let passed = calls
        .values()
        .filter(|c| c["analysis"]["success"]["pass"] == true)
        .count() as i64;
    let not_passed = calls
        .values()
        .filter(|c| c["analysis"]["success"]["pass"] == false)
        .count() as i64;
    let rate = if passed + not_passed > 0 {
        json!(passed as f64 / (passed + not_passed) as f64)
    } else {
        Value::Null
    };
    let overview = app
        .get(&ws.key, "/api/dashboard/analysis")
        .await
        .expect(200)
        .body;
    assert_eq!(overview["days"], 30);
    assert_eq!(overview["timeZone"], "Asia/Kolkata");
    let by_agent = overview["byAgent"].as_array().expect("byAgent");
    assert_eq!(by_agent.len(), 1, "{overview}");
    let mine = &by_agent[0];
    assert_eq!(mine["agentId"], agent.as_str());
    assert_eq!(mine["agentName"], "Screener");
    assert_eq!(mine["analyzed"], 2);
    assert_eq!(mine["passed"], passed);
    assert_eq!(mine["notPassed"], not_passed);
    assert_eq!(mine["failed"], 0);
    assert_eq!(mine["successRate"], rate);
    assert_eq!(overview["totals"]["analyzed"], 2);
    assert_eq!(overview["totals"]["successRate"], rate);
    let today = (app.now() + chrono::Duration::minutes(330))
        .format("%Y-%m-%d")
        .to_string();
    assert_eq!(
        overview["byDay"],
        json!([{
            "date": today, "agentId": agent, "agentName": "Screener",
            "analyzed": 2, "passed": passed, "notPassed": not_passed, "failed": 0,
            "successRate": rate,
        }])
    );
    let one_day = app
        .get(&ws.key, "/api/dashboard/analysis?days=1")
        .await
        .expect(200)
        .body;
    assert_eq!(one_day["totals"]["analyzed"], 2);
    let bad = app
        .get(&ws.key, "/api/dashboard/analysis?days=0")
        .await
        .expect(400);
    assert!(bad.message().contains("days"), "{}", bad.message());

    // Another workspace sees none of it.
    let other = app.workspace("Elsewhere").await;
    let theirs = app
        .get(&other.key, "/api/dashboard/analysis")
        .await
        .expect(200)
        .body;
    assert_eq!(theirs["byAgent"], json!([]));
    assert_eq!(theirs["totals"]["successRate"], Value::Null);
    app.get(&other.key, &format!("/api/batches/{batch}/export"))
        .await
        .expect(404);
}

#[tokio::test]
async fn field_columns_named_like_fixed_ones_are_prefixed() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Analysis columns", 1).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Checker",
                "analysis": {"fields": [
                    {"name": "summary", "description": "What was agreed"},
                    {"name": "phone", "description": "A second number they gave"},
                    {"name": "city", "description": "Where they live"}
                ]}
            }),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    let campaign = app
        .post(
            &ws.key,
            "/api/campaigns",
            json!({"name": "Empty", "agentId": agent}),
        )
        .await
        .expect(201)
        .body["id"]
        .as_str()
        .expect("campaign id")
        .to_string();
    let (header, records) = parse_csv(
        &app.get(&ws.key, &format!("/api/campaigns/{campaign}/export"))
            .await
            .expect(200)
            .text,
    );
    let mut expected: Vec<&str> = ITEM_COLUMNS.to_vec();
    expected.extend([
        "extracted.summary",
        "extracted.phone",
        "city",
        "success",
        "success_pass",
        "other_extracted",
    ]);
    assert_eq!(header, expected);
    assert!(records.is_empty());

    let (header, _) = parse_csv(
        &app.get(&ws.key, &format!("/api/calls/export.csv?agentId={agent}"))
            .await
            .expect(200)
            .text,
    );
    let mut expected: Vec<&str> = CALL_COLUMNS.to_vec();
    expected.extend([
        "extracted.summary",
        "extracted.phone",
        "city",
        "success",
        "success_pass",
    ]);
    assert_eq!(header, expected);
    // An id of no agent: no field columns, the verdict columns all the same.
    let (header, records) = parse_csv(
        &app.get(&ws.key, "/api/calls/export.csv?agentId=not-an-agent")
            .await
            .expect(200)
            .text,
    );
    let mut expected: Vec<&str> = CALL_COLUMNS.to_vec();
    expected.extend(["success", "success_pass"]);
    assert_eq!(header, expected);
    assert!(records.is_empty());
}

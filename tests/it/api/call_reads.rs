//! The read side of calls (issue 3 point 7), the dashboard and analytics.
//! Calls are inserted straight into the store, so these tests do not depend on
//! the engine placing them.

use crate::support::{TestApp, Workspace, utc};
use serde_json::{Value, json};
use std::collections::HashSet;
use voxline::domain::Paise;
use voxline::domain::clock::ManualClock;
use voxline::store::CallFixture;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// A call of `ws` created `ago_ms` before the app's clock.
#[allow(clippy::too_many_arguments)]
fn call(
    app: &TestApp,
    ws: &Workspace,
    name: &str,
    phone: &str,
    agent: &str,
    status: &str,
    provider: &str,
    ago_ms: i64,
) -> CallFixture {
    let created_at = app.now().timestamp_millis() - ago_ms;
    CallFixture {
        id: uuid::Uuid::now_v7().to_string(),
        org_id: ws.org_id.to_string(),
        agent_id: format!("agent-{}", agent.to_lowercase().replace(' ', "-")),
        agent_name: agent.to_string(),
        phone: phone.to_string(),
        target_name: name.to_string(),
        from_number: "+918045000001".to_string(),
        provider: provider.to_string(),
        status: status.to_string(),
        created_at,
        ..CallFixture::default()
    }
}

fn ids(body: &Value) -> Vec<String> {
    body["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {body}"))
        .iter()
        .map(|row| row["id"].as_str().unwrap().to_string())
        .collect()
}

/// Five calls of A (and one of B) at known ages.
struct Seeded {
    app: TestApp,
    a: Workspace,
    b: Workspace,
    asha: String,
    ravi: String,
    meera: String,
    old: String,
    live: String,
    other_workspace: String,
}

async fn seeded() -> Seeded {
    let clock = ManualClock::new(utc("2026-03-15T06:00:00Z"));
    let app = TestApp::spawn_with_clock(clock).await;
    let a = app.workspace("A").await;
    let b = app.workspace("B").await;

    let mut asha = call(
        &app,
        &a,
        "Asha Verma",
        "+919876500001",
        "Sales Bot",
        "completed",
        "sim",
        5 * MINUTE + 20_000,
    );
    asha.duration_seconds = 125;
    asha.cost_paise = 600;
    asha.ended_reason = Some("caller-hangup".into());
    asha.summary = "Asha will attend the interview.".into();
    asha.transcript_text =
        "Bot: we discussed the interview schedule\nCandidate: thursday works".into();
    let mut ravi = call(
        &app,
        &a,
        "Ravi Kumar",
        "+919876500002",
        "Support Bot",
        "no-answer",
        "twilio",
        2 * HOUR,
    );
    ravi.ended_reason = Some("no-answer".into());
    let mut meera = call(
        &app,
        &a,
        "Meera Iyer",
        "+919876500003",
        "Sales Bot",
        "failed",
        "sim",
        3 * DAY,
    );
    meera.ended_reason = Some("carrier-error".into());
    meera.transcript_text = "pricing question about the premium plan".into();
    let mut old = call(
        &app,
        &a,
        "Old Timer",
        "+919876500004",
        "Sales Bot",
        "completed",
        "sim",
        100 * DAY,
    );
    old.duration_seconds = 45;
    old.transcript_text = "an interview long ago".into();
    let mut live = call(
        &app,
        &a,
        "John Doe",
        "+919876500005",
        "Sales Bot",
        "in-progress",
        "sim",
        10_000,
    );
    live.campaign_id = Some("campaign-1".into());
    live.campaign_name = Some("Diwali Drive".into());
    let mut theirs = call(
        &app,
        &b,
        "Asha Verma",
        "+919876500001",
        "Sales Bot",
        "completed",
        "sim",
        MINUTE,
    );
    theirs.transcript_text = "interview".into();
    let fixtures = vec![
        asha.clone(),
        ravi.clone(),
        meera.clone(),
        old.clone(),
        live.clone(),
        theirs.clone(),
    ];
    app.store()
        .insert_call_fixtures(&fixtures)
        .await
        .expect("insert calls");
    Seeded {
        app,
        a,
        b,
        asha: asha.id,
        ravi: ravi.id,
        meera: meera.id,
        old: old.id,
        live: live.id,
        other_workspace: theirs.id,
    }
}

#[tokio::test]
async fn call_list_rows_have_the_spec_shape_newest_first() {
    let s = seeded().await;
    let list = s.app.get(&s.a.key, "/api/calls").await.expect(200).body;
    assert_eq!(list["total"], 5);
    assert_eq!(list["page"], 1);
    assert_eq!(list["limit"], 20);
    assert_eq!(
        list["stats"],
        json!({"total": 5, "completedCount": 2, "failedCount": 1})
    );
    assert_eq!(
        ids(&list),
        vec![
            s.live.clone(),
            s.asha.clone(),
            s.ravi.clone(),
            s.meera.clone(),
            s.old.clone()
        ]
    );
    assert!(!ids(&list).contains(&s.other_workspace));

    let asha = &list["rows"][1];
    let expected = json!({
        "id": s.asha,
        "studentName": "Asha Verma",
        "phone": "+919876500001",
        "email": null,
        "campaignName": "No campaign",
        "agentName": "Sales Bot",
        "duration": "2m 05s",
        "status": "Completed",
        "provider": "sim",
        "direction": "outbound",
        "startedAt": "5 minutes ago",
        "summary": "Asha will attend the interview.",
        "calendarStatus": null,
        "calendarEventUrl": null,
        "calendarError": null,
        "transcript": [],
        "rawStatus": "completed",
        "durationSeconds": 125,
        "costPaise": 600,
        "endedReason": "caller-hangup",
        "createdAt": "2026-03-15T05:54:40.000Z",
        "agentId": "agent-sales-bot",
        "attempt": 1,
        "batchId": null,
        "campaignId": null,
        // Fixture calls ended before analysis existed: they have none.
        "analysis": null,
        // Nor did their agents transfer anyone.
        "transferredTo": null,
        "transferredAt": null,
        "transferStatus": null,
        "transferDurationSeconds": null,
    });
    assert_eq!(asha, &expected);

    let live = &list["rows"][0];
    assert_eq!(live["startedAt"], "just now");
    assert_eq!(live["status"], "In Progress");
    assert_eq!(live["duration"], "0s");
    assert_eq!(live["campaignName"], "Diwali Drive");
    assert_eq!(live["campaignId"], "campaign-1");
    let ravi = &list["rows"][2];
    assert_eq!(ravi["startedAt"], "2 hours ago");
    assert_eq!(ravi["status"], "No Answer");
    assert_eq!(list["rows"][3]["startedAt"], "3 days ago");
    assert_eq!(list["rows"][3]["status"], "Failed");
    assert_eq!(list["rows"][4]["duration"], "45s");

    // B sees only its own call.
    let theirs = s.app.get(&s.b.key, "/api/calls").await.expect(200).body;
    assert_eq!(ids(&theirs), vec![s.other_workspace.clone()]);
    assert_eq!(theirs["stats"]["total"], 1);
}

#[tokio::test]
async fn call_list_filters_by_status_provider_and_search_with_matching_stats() {
    let s = seeded().await;
    let get = |path: String| {
        let app = &s.app;
        let key = s.a.key.clone();
        async move { app.get(&key, &path).await.expect(200).body }
    };

    let done = get("/api/calls?status=completed,failed".into()).await;
    assert_eq!(
        ids(&done),
        vec![s.asha.clone(), s.meera.clone(), s.old.clone()]
    );
    assert_eq!(done["total"], 3);
    assert_eq!(
        done["stats"],
        json!({"total": 3, "completedCount": 2, "failedCount": 1})
    );
    let spaced = get("/api/calls?status=no-answer,%20in-progress".into()).await;
    assert_eq!(ids(&spaced), vec![s.live.clone(), s.ravi.clone()]);
    assert_eq!(
        spaced["stats"],
        json!({"total": 2, "completedCount": 0, "failedCount": 0})
    );

    let bad = s
        .app
        .get(&s.a.key, "/api/calls?status=completed,Completed")
        .await
        .expect(400);
    assert!(bad.message().contains("\"Completed\""), "{}", bad.text);
    assert!(bad.message().contains("status"), "{}", bad.text);

    let twilio = get("/api/calls?provider=twilio".into()).await;
    assert_eq!(ids(&twilio), vec![s.ravi.clone()]);
    assert_eq!(
        twilio["stats"],
        json!({"total": 1, "completedCount": 0, "failedCount": 0})
    );
    let sim_done = get("/api/calls?provider=sim&status=completed".into()).await;
    assert_eq!(ids(&sim_done), vec![s.asha.clone(), s.old.clone()]);
    assert_eq!(sim_done["stats"]["completedCount"], 2);

    // search: name, phone or agent name, case-insensitive substrings.
    let by_name = get("/api/calls?search=aSHA".into()).await;
    assert_eq!(ids(&by_name), vec![s.asha.clone()]);
    assert_eq!(
        by_name["stats"],
        json!({"total": 1, "completedCount": 1, "failedCount": 0})
    );
    let by_phone = get("/api/calls?search=500002".into()).await;
    assert_eq!(ids(&by_phone), vec![s.ravi.clone()]);
    let by_agent = get("/api/calls?search=support%20bot".into()).await;
    assert_eq!(ids(&by_agent), vec![s.ravi.clone()]);
    // Terms too short for the trigram index take the LIKE path.
    let short = get("/api/calls?search=ra".into()).await;
    assert_eq!(ids(&short), vec![s.ravi.clone(), s.meera.clone()]);
    // LIKE wildcards are literal.
    let wildcard = get("/api/calls?search=%25".into()).await;
    assert_eq!(wildcard["total"], 0);
    let combined = get("/api/calls?search=sales&status=completed,failed".into()).await;
    assert_eq!(
        ids(&combined),
        vec![s.asha.clone(), s.meera.clone(), s.old.clone()]
    );
    assert_eq!(
        combined["stats"],
        json!({"total": 3, "completedCount": 2, "failedCount": 1})
    );
    let none = get("/api/calls?search=interview".into()).await;
    assert_eq!(
        none,
        json!({"rows": [], "total": 0, "totalIsEstimate": false, "page": 1, "limit": 20,
               "stats": {"total": 0, "completedCount": 0, "failedCount": 0}})
    );
}

#[tokio::test]
async fn deep_search_reads_recent_transcripts_through_the_index() {
    let s = seeded().await;
    let get = |path: &'static str| {
        let app = &s.app;
        let key = s.a.key.clone();
        async move { app.get(&key, path).await.expect(200).body }
    };
    // The 100-day-old call also says "interview" but is outside the 90 days;
    // workspace B's call says it too.
    let deep = get("/api/calls?search=interview&deep=true").await;
    assert_eq!(ids(&deep), vec![s.asha.clone()]);
    assert_eq!(
        deep["stats"],
        json!({"total": 1, "completedCount": 1, "failedCount": 0})
    );
    let two_words = get("/api/calls?search=Premium%20PLAN&deep=true").await;
    assert_eq!(ids(&two_words), vec![s.meera.clone()]);
    let nothing = get("/api/calls?search=zebra&deep=true").await;
    assert_eq!(nothing["total"], 0);
    // Deep search still matches names, phones and agents.
    let names = get("/api/calls?search=ravi&deep=true").await;
    assert_eq!(ids(&names), vec![s.ravi.clone()]);
    let filtered = get("/api/calls?search=interview&deep=true&status=failed").await;
    assert_eq!(filtered["total"], 0);
    // Past 90 days a call still matches by name, only not by transcript.
    let old_name = get("/api/calls?search=timer&deep=true").await;
    assert_eq!(ids(&old_name), vec![s.old.clone()]);
    let past_end = get("/api/calls?search=interview&deep=true&page=2").await;
    assert_eq!(ids(&past_end), Vec::<String>::new());
    assert_eq!(past_end["total"], 1);
    assert_eq!(past_end["stats"]["completedCount"], 1);

    for path in [
        "/api/calls?search=in&deep=true",
        "/api/calls?deep=true",
        "/api/calls?search=%20%20ab%20&deep=true",
    ] {
        let r = s.app.get(&s.a.key, path).await.expect(400);
        assert!(r.message().contains("search"), "{path}: {}", r.text);
        assert!(r.message().contains('3'), "{path}: {}", r.text);
    }
    let r = s
        .app
        .get(&s.a.key, "/api/calls?search=interview&deep=maybe")
        .await
        .expect(400);
    assert!(r.message().contains("deep"), "{}", r.text);
}

#[tokio::test]
async fn call_list_pages_are_bounded() {
    let s = seeded().await;
    let first = s
        .app
        .get(&s.a.key, "/api/calls?limit=2")
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&first), vec![s.live.clone(), s.asha.clone()]);
    assert_eq!(
        (first["total"].clone(), first["limit"].clone()),
        (json!(5), json!(2))
    );
    let last = s
        .app
        .get(&s.a.key, "/api/calls?limit=2&page=3")
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&last), vec![s.old.clone()]);
    assert_eq!(last["page"], 3);
    let past = s
        .app
        .get(&s.a.key, "/api/calls?limit=2&page=4")
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&past), Vec::<String>::new());
    assert_eq!(past["total"], 5);
    let searched = s
        .app
        .get(&s.a.key, "/api/calls?search=sales&limit=3&page=2")
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&searched), vec![s.old.clone()]);
    assert_eq!(searched["total"], 4);
    let searched_past = s
        .app
        .get(&s.a.key, "/api/calls?search=sales&limit=3&page=3")
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&searched_past), Vec::<String>::new());
    assert_eq!(
        searched_past["stats"],
        json!({"total": 4, "completedCount": 2, "failedCount": 1})
    );
    for (path, param) in [
        ("/api/calls?limit=0", "limit"),
        ("/api/calls?limit=101", "limit"),
        ("/api/calls?limit=ten", "limit"),
        ("/api/calls?page=0", "page"),
        ("/api/calls?page=-1", "page"),
    ] {
        let r = s.app.get(&s.a.key, path).await.expect(400);
        assert!(r.message().contains(param), "{path}: {}", r.text);
    }
    let hundred = s
        .app
        .get(&s.a.key, "/api/calls?limit=100")
        .await
        .expect(200)
        .body;
    assert_eq!(hundred["limit"], 100);
}

#[tokio::test]
async fn call_detail_transcript_and_turns() {
    let clock = ManualClock::new(utc("2026-03-15T06:00:00Z"));
    let app = TestApp::spawn_with_clock(clock).await;
    let a = app.workspace("A").await;
    let b = app.workspace("B").await;
    let t0 = app.now().timestamp_millis() - 10 * MINUTE;
    let mut c = call(
        &app,
        &a,
        "Asha Verma",
        "+919876500001",
        "Sales Bot",
        "completed",
        "sim",
        10 * MINUTE,
    );
    c.duration_seconds = 61;
    c.answered_at = Some(t0 + 3_000);
    c.ended_at = Some(t0 + 64_000);
    c.variables = r#"{"name":"Asha","role":"analyst"}"#.into();
    c.extracted = r#"{"interested":true}"#.into();
    c.latencies = r#"[{"turn":1,"ms":420}]"#.into();
    c.transcript_text = "Hello Asha\nHi\nBye".into();
    c.turns = vec![
        ("assistant".into(), "Hello Asha".into(), t0 + 4_000),
        ("user".into(), "Hi".into(), t0 + 6_000),
        ("assistant".into(), "Bye".into(), t0 + 60_000),
    ];
    c.events = vec![
        ("queued".into(), t0),
        ("ringing".into(), t0 + 1_000),
        ("in-progress".into(), t0 + 3_000),
        ("completed".into(), t0 + 64_000),
    ];
    app.store().insert_call_fixture(&c).await.unwrap();

    let detail = app
        .get(&a.key, &format!("/api/calls/{}", c.id))
        .await
        .expect(200)
        .body;
    assert_eq!(detail["id"], c.id.as_str());
    assert_eq!(detail["studentName"], "Asha Verma");
    assert_eq!(detail["status"], "Completed");
    assert_eq!(detail["duration"], "1m 01s");
    assert_eq!(detail["startedAt"], "10 minutes ago");
    assert_eq!(
        detail["transcript"],
        json!([
            {"speaker": "Bot", "text": "Hello Asha"},
            {"speaker": "Candidate", "text": "Hi"},
            {"speaker": "Bot", "text": "Bye"},
        ])
    );
    assert_eq!(
        detail["variables"],
        json!({"name": "Asha", "role": "analyst"})
    );
    assert_eq!(detail["extracted"], json!({"interested": true}));
    assert_eq!(detail["latencies"], json!([{"turn": 1, "ms": 420}]));
    assert_eq!(detail["fromNumber"], "+918045000001");
    assert_eq!(detail["answeredAt"], "2026-03-15T05:50:03.000Z");
    let history: Vec<&str> = detail["statusHistory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["queued", "ringing", "in-progress", "completed"]);
    assert_eq!(detail["statusHistory"][3]["at"], "2026-03-15T05:51:04.000Z");

    let transcript = app
        .get(&a.key, &format!("/api/calls/{}/transcript", c.id))
        .await
        .expect(200)
        .body;
    assert_eq!(
        transcript,
        json!({
            "analysis": null,
            "transcriptText": "Hello Asha\nHi\nBye",
            "turns": [
                {"speaker": "assistant", "text": "Hello Asha", "createdAt": "2026-03-15T05:50:04.000Z", "toolCalls": []},
                {"speaker": "user", "text": "Hi", "createdAt": "2026-03-15T05:50:06.000Z", "toolCalls": []},
                {"speaker": "assistant", "text": "Bye", "createdAt": "2026-03-15T05:51:00.000Z", "toolCalls": []},
            ]
        })
    );

    let turns = app
        .get(&a.key, &format!("/api/calls/{}/turns?limit=2", c.id))
        .await
        .expect(200)
        .body;
    assert_eq!(
        turns,
        json!({
            "rows": [
                {"seq": 1, "speaker": "assistant", "text": "Hello Asha", "createdAt": "2026-03-15T05:50:04.000Z"},
                {"seq": 2, "speaker": "user", "text": "Hi", "createdAt": "2026-03-15T05:50:06.000Z"},
            ],
            "total": 3, "page": 1, "limit": 2
        })
    );
    let page2 = app
        .get(&a.key, &format!("/api/calls/{}/turns?limit=2&page=2", c.id))
        .await
        .expect(200)
        .body;
    assert_eq!(page2["rows"][0]["seq"], 3);
    app.get(&a.key, &format!("/api/calls/{}/turns?limit=500", c.id))
        .await
        .expect(400);

    // Another workspace's id, a malformed id and an unknown id all read as missing.
    let unknown = uuid::Uuid::now_v7().to_string();
    for (key, id) in [
        (&b.key, c.id.as_str()),
        (&a.key, "not-a-call"),
        (&a.key, unknown.as_str()),
    ] {
        for suffix in ["", "/transcript", "/turns"] {
            let r = app
                .get(key, &format!("/api/calls/{id}{suffix}"))
                .await
                .expect(404);
            assert_eq!(r.message(), format!("Call {id} not found"), "{suffix}");
        }
    }
}

#[tokio::test]
async fn csv_export_streams_every_matching_call() {
    let clock = ManualClock::new(utc("2026-03-15T06:00:00Z"));
    let app = TestApp::spawn_with_clock(clock).await;
    let a = app.workspace("A").await;
    let b = app.workspace("B").await;
    // More than two keyset pages of 500, with same-millisecond neighbours.
    let mut fixtures = Vec::new();
    for i in 0..1_203_i64 {
        let status = if i % 3 == 0 { "failed" } else { "completed" };
        let mut c = call(
            &app,
            &a,
            &format!("Person {i}"),
            &format!("+9198765{i:05}"),
            "Sales Bot",
            status,
            "sim",
            (i / 2) * 1_000,
        );
        c.duration_seconds = i;
        c.cost_paise = i * 2;
        fixtures.push(c);
    }
    fixtures[7].target_name = "Singh, \"Raj\"".into();
    fixtures[7].summary = "line one\nline two".into();
    fixtures[7].ended_reason = Some("agent-hangup".into());
    app.store().insert_call_fixtures(&fixtures).await.unwrap();
    let theirs = call(
        &app,
        &b,
        "Theirs",
        "+919999900000",
        "X",
        "completed",
        "sim",
        0,
    );
    app.store().insert_call_fixture(&theirs).await.unwrap();

    let resp = app
        .request(&a.key, reqwest::Method::GET, "/api/calls/export.csv")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert!(header("content-type").starts_with("text/csv"));
    assert_eq!(
        header("content-disposition"),
        "attachment; filename=\"calls.csv\""
    );
    // Streamed: no length known up front.
    assert_eq!(header("transfer-encoding"), "chunked");
    assert!(resp.content_length().is_none());
    let text = resp.text().await.unwrap();

    let mut reader = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(
        reader.headers().unwrap().iter().collect::<Vec<_>>(),
        [
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
            "summary"
        ]
    );
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 1_203);
    let exported: Vec<&str> = records.iter().map(|r| &r[0]).collect();
    let unique: HashSet<&str> = exported.iter().copied().collect();
    assert_eq!(unique.len(), 1_203);
    assert!(!unique.contains(theirs.id.as_str()));
    // Same order as the list: newest first, then id descending.
    let mut expected: Vec<&CallFixture> = fixtures.iter().collect();
    expected.sort_by(|x, y| (y.created_at, &y.id).cmp(&(x.created_at, &x.id)));
    assert_eq!(
        exported,
        expected.iter().map(|c| c.id.as_str()).collect::<Vec<_>>()
    );
    let quoted = records
        .iter()
        .find(|r| &r[0] == fixtures[7].id.as_str())
        .unwrap();
    assert_eq!(&quoted[1], "Singh, \"Raj\"");
    assert_eq!(&quoted[2], fixtures[7].phone.as_str());
    assert_eq!(&quoted[3], "Sales Bot");
    assert_eq!(&quoted[4], "completed");
    assert_eq!(&quoted[5], "7");
    assert_eq!(&quoted[6], "14");
    assert_eq!(&quoted[7], "sim");
    assert_eq!(&quoted[8], "outbound");
    assert_eq!(&quoted[9], "agent-hangup");
    assert_eq!(&quoted[10], "2026-03-15T05:59:57.000Z");
    assert_eq!(&quoted[11], "line one\nline two");

    // The list's filters apply.
    let failed = app
        .get(
            &a.key,
            "/api/calls/export.csv?status=failed&search=person%2011",
        )
        .await
        .expect(200);
    let rows: Vec<csv::StringRecord> = csv::Reader::from_reader(failed.text.as_bytes())
        .records()
        .map(Result::unwrap)
        .collect();
    let names: HashSet<String> = rows.iter().map(|r| r[1].to_string()).collect();
    // Person 11, 110–119 and 1100–1199 whose index is a multiple of 3.
    let wanted: HashSet<String> = (0..1_203)
        .filter(|i| i % 3 == 0 && format!("Person {i}").contains("Person 11"))
        .map(|i| format!("Person {i}"))
        .collect();
    assert_eq!(names, wanted);
    assert!(rows.iter().all(|r| &r[4] == "failed"));

    let empty = app
        .get(&b.key, "/api/calls/export.csv?provider=twilio")
        .await
        .expect(200);
    assert_eq!(
        empty.text,
        "id,name,phone,agent,status,duration_seconds,cost_paise,provider,direction,ended_reason,created_at,summary\n"
    );
    let bad = app
        .get(&a.key, "/api/calls/export.csv?status=done")
        .await
        .expect(400);
    assert!(bad.message().contains("done"));
    let bad = app
        .get(&a.key, "/api/calls/export.csv?search=ab&deep=true")
        .await
        .expect(400);
    assert!(bad.message().contains("search"));
}

#[tokio::test]
async fn dashboard_and_analytics_summarise_the_workspace() {
    // 11:30 IST on 15 March.
    let clock = ManualClock::new(utc("2026-03-15T06:00:00Z"));
    let app = TestApp::spawn_with_clock(clock).await;
    let a = app.workspace("A").await;
    let b = app.workspace("B").await;

    let mut today_done = call(
        &app,
        &a,
        "T1",
        "+919876500011",
        "Sales Bot",
        "completed",
        "sim",
        HOUR,
    );
    today_done.duration_seconds = 90;
    today_done.cost_paise = 400;
    today_done.answered_at = Some(today_done.created_at + 5_000);
    today_done.ended_reason = Some("caller-hangup".into());
    let mut today_missed = call(
        &app,
        &a,
        "T2",
        "+919876500012",
        "Support Bot",
        "no-answer",
        "twilio",
        2 * HOUR,
    );
    today_missed.ended_reason = Some("no-answer".into());
    // 23:00 IST yesterday (17:30 UTC on the 14th).
    let mut yesterday = call(
        &app,
        &a,
        "Y1",
        "+919876500013",
        "Sales Bot",
        "completed",
        "sim",
        12 * HOUR + 30 * MINUTE,
    );
    yesterday.duration_seconds = 30;
    yesterday.cost_paise = 200;
    yesterday.answered_at = Some(yesterday.created_at + 5_000);
    yesterday.ended_reason = Some("agent-hangup".into());
    // 00:15 IST today is 18:45 UTC yesterday: counts as today in IST.
    let mut early = call(
        &app,
        &a,
        "E1",
        "+919876500014",
        "Sales Bot",
        "failed",
        "sim",
        11 * HOUR + 15 * MINUTE,
    );
    early.ended_reason = Some("carrier-error".into());
    // Last month.
    let mut last_month = call(
        &app,
        &a,
        "L1",
        "+919876500015",
        "Sales Bot",
        "completed",
        "sim",
        20 * DAY,
    );
    last_month.duration_seconds = 600;
    last_month.cost_paise = 2_000;
    last_month.answered_at = Some(last_month.created_at);
    let ringing = call(
        &app,
        &a,
        "R1",
        "+919876500016",
        "Sales Bot",
        "ringing",
        "sim",
        MINUTE,
    );
    let talking = call(
        &app,
        &a,
        "R2",
        "+919876500017",
        "Sales Bot",
        "in-progress",
        "sim",
        2 * MINUTE,
    );
    let queued = call(
        &app,
        &a,
        "Q1",
        "+919876500018",
        "Sales Bot",
        "queued",
        "sim",
        3 * MINUTE,
    );
    app.store()
        .insert_call_fixtures(&[
            today_done.clone(),
            today_missed.clone(),
            yesterday.clone(),
            early.clone(),
            last_month.clone(),
            ringing.clone(),
            talking.clone(),
            queued.clone(),
        ])
        .await
        .unwrap();
    app.store()
        .credit_wallet(a.org_id, Paise(50_000), app.now().timestamp_millis())
        .await
        .unwrap();

    let overview = app
        .get(&a.key, "/api/dashboard/overview")
        .await
        .expect(200)
        .body;
    assert_eq!(overview["callsToday"], 6, "{overview}");
    assert_eq!(overview["callsThisMonth"], 7);
    assert_eq!(overview["completedThisMonth"], 2);
    assert_eq!(overview["unsuccessfulThisMonth"], 2);
    // Finished this month: 2 completed (answered), 1 no-answer, 1 failed.
    assert_eq!(overview["answerRate"], 0.5);
    assert_eq!(overview["talkSecondsThisMonth"], 120);
    assert_eq!(overview["spendPaiseThisMonth"], 600);
    assert_eq!(overview["liveCalls"], 2);
    assert_eq!(overview["queuedCalls"], 1);
    assert_eq!(overview["walletPaise"], 50_000);
    assert_eq!(overview["month"], "2026-03");
    assert!(overview["minutesThisMonth"].is_i64());
    assert!(overview["minuteQuota"].is_i64());

    let volume = app
        .get(&a.key, "/api/dashboard/call-volume?days=3")
        .await
        .expect(200)
        .body;
    assert_eq!(
        volume,
        json!({
            "days": 3,
            "timeZone": "Asia/Kolkata",
            "series": [
                {"date": "2026-03-13", "calls": 0, "completed": 0, "unsuccessful": 0},
                {"date": "2026-03-14", "calls": 1, "completed": 1, "unsuccessful": 0},
                {"date": "2026-03-15", "calls": 6, "completed": 1, "unsuccessful": 2},
            ]
        })
    );
    let default_volume = app
        .get(&a.key, "/api/dashboard/call-volume")
        .await
        .expect(200)
        .body;
    assert_eq!(default_volume["series"].as_array().unwrap().len(), 14);
    for days in ["0", "91", "x"] {
        let r = app
            .get(&a.key, &format!("/api/dashboard/call-volume?days={days}"))
            .await
            .expect(400);
        assert!(r.message().contains("days"));
    }

    let breakdown = app
        .get(&a.key, "/api/dashboard/status-breakdown")
        .await
        .expect(200)
        .body;
    assert_eq!(
        breakdown,
        json!({
            "total": 8,
            "statuses": [
                {"status": "queued", "label": "Queued", "count": 1},
                {"status": "ringing", "label": "Ringing", "count": 1},
                {"status": "in-progress", "label": "In Progress", "count": 1},
                {"status": "completed", "label": "Completed", "count": 3},
                {"status": "failed", "label": "Failed", "count": 1},
                {"status": "no-answer", "label": "No Answer", "count": 1},
                {"status": "busy", "label": "Busy", "count": 0},
                {"status": "canceled", "label": "Canceled", "count": 0},
                {"status": "voicemail", "label": "Voicemail", "count": 0},
            ]
        })
    );

    let recent = app
        .get(&a.key, "/api/dashboard/recent-calls")
        .await
        .expect(200)
        .body;
    assert_eq!(
        ids(&recent),
        vec![
            ringing.id.clone(),
            talking.id.clone(),
            queued.id.clone(),
            today_done.id.clone(),
            today_missed.id.clone(),
            early.id.clone(),
            yesterday.id.clone(),
            last_month.id.clone(),
        ]
    );
    assert_eq!(recent["rows"][0]["status"], "Ringing");
    assert_eq!(recent["rows"][0]["startedAt"], "1 minute ago");
    assert_eq!(recent["rows"][0]["transcript"], json!([]));

    let analytics = app
        .get(&a.key, "/api/analytics/overview")
        .await
        .expect(200)
        .body;
    assert_eq!(analytics["days"], 30);
    assert_eq!(analytics["since"], "2026-02-13T18:30:00.000Z");
    assert_eq!(
        analytics["totals"],
        json!({
            "calls": 8, "completed": 3, "failed": 1, "noAnswer": 1, "busy": 0, "canceled": 0,
            "answered": 3, "answerRate": 0.6, "talkSeconds": 720,
            "averageDurationSeconds": 240.0, "spendPaise": 2_600
        })
    );
    let agents = analytics["byAgent"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    assert_eq!(agents[0]["agentId"], "agent-sales-bot");
    assert_eq!(agents[0]["agentName"], "Sales Bot");
    assert_eq!(agents[0]["calls"], 7);
    assert_eq!(agents[1]["agentName"], "Support Bot");
    assert_eq!(agents[1]["noAnswer"], 1);
    assert_eq!(agents[1]["answerRate"], 0.0);
    let providers: Vec<(String, i64)> = analytics["byProvider"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["provider"].as_str().unwrap().to_string(),
                p["calls"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        providers,
        [("sim".to_string(), 7), ("twilio".to_string(), 1)]
    );
    let mut reasons: Vec<(String, i64)> = analytics["endedReasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["endedReason"].as_str().unwrap().to_string(),
                r["count"].as_i64().unwrap(),
            )
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("agent-hangup".to_string(), 1),
            ("caller-hangup".to_string(), 1),
            ("carrier-error".to_string(), 1),
            ("no-answer".to_string(), 1),
        ]
    );
    let week = app
        .get(&a.key, "/api/analytics/overview?days=1")
        .await
        .expect(200)
        .body;
    assert_eq!(week["totals"]["calls"], 6);
    app.get(&a.key, "/api/analytics/overview?days=366")
        .await
        .expect(400);

    // Another workspace sees nothing of A.
    let empty = app
        .get(&b.key, "/api/dashboard/overview")
        .await
        .expect(200)
        .body;
    assert_eq!(empty["callsThisMonth"], 0);
    assert_eq!(empty["liveCalls"], 0);
    assert_eq!(empty["answerRate"], 0.0);
    let empty = app
        .get(&b.key, "/api/dashboard/status-breakdown")
        .await
        .expect(200)
        .body;
    assert_eq!(empty["total"], 0);
    let empty = app
        .get(&b.key, "/api/analytics/overview")
        .await
        .expect(200)
        .body;
    assert_eq!(empty["totals"]["calls"], 0);
    assert_eq!(empty["byAgent"], json!([]));

    // The mounts alone are not resources.
    app.get(&a.key, "/api/dashboard").await.expect(404);
    app.get(&a.key, "/api/analytics").await.expect(404);
}

#[tokio::test]
async fn counts_follow_status_transitions() {
    let app = TestApp::spawn().await;
    let a = app.workspace("A").await;
    let c = call(
        &app,
        &a,
        "Q",
        "+919876500021",
        "Sales Bot",
        "queued",
        "sim",
        0,
    );
    app.store().insert_call_fixture(&c).await.unwrap();
    let stats = |body: &Value| body["stats"].clone();
    let list = app
        .get(&a.key, "/api/calls?status=queued")
        .await
        .expect(200)
        .body;
    assert_eq!(stats(&list)["total"], 1);

    let at = app.now().timestamp_millis();
    assert!(
        app.store()
            .call_transition(c.id.parse().expect("call id"), "ringing", at)
            .await
            .unwrap()
    );
    let queued = app
        .get(&a.key, "/api/calls?status=queued")
        .await
        .expect(200)
        .body;
    assert_eq!(stats(&queued)["total"], 0);
    assert_eq!(queued["total"], 0);
    let ringing = app
        .get(&a.key, "/api/calls?status=ringing")
        .await
        .expect(200)
        .body;
    assert_eq!(ringing["total"], 1);
    assert_eq!(ids(&ringing), vec![c.id.clone()]);
    let overview = app
        .get(&a.key, "/api/dashboard/overview")
        .await
        .expect(200)
        .body;
    assert_eq!(overview["liveCalls"], 1);
    assert_eq!(overview["queuedCalls"], 0);
}

#[tokio::test]
async fn a_common_search_term_counts_up_to_a_cap_and_still_pages_newest_first() {
    let clock = ManualClock::new(utc("2026-03-15T06:00:00Z"));
    let app = TestApp::spawn_with_clock(clock).await;
    let a = app.workspace("A").await;
    // Written out of order on purpose: the newest call is stored first, so
    // the indexes hand it out last; the page must still start with it.
    let mut newest = call(&app, &a, "Zed", "+919845000001", "Bot", "failed", "sim", 0);
    newest.transcript_text = "Bot: alpha".into();
    let mut fixtures = vec![newest.clone()];
    for i in 0..1_030 {
        let mut c = call(
            &app,
            &a,
            "Asha",
            "+919845000002",
            "Bot",
            "completed",
            "sim",
            (1_031 - i) * MINUTE,
        );
        c.transcript_text = if i % 200 == 0 {
            "Bot: alpha gamma".into()
        } else {
            "Bot: alpha".into()
        };
        fixtures.push(c);
    }
    app.store().insert_call_fixtures(&fixtures).await.unwrap();
    let mut by_age = fixtures.clone();
    by_age.sort_by(|x, y| y.created_at.cmp(&x.created_at).then(y.id.cmp(&x.id)));
    let expected: Vec<String> = by_age.iter().map(|c| c.id.clone()).collect();

    let first = app
        .get(&a.key, "/api/calls?search=alpha&deep=true")
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&first), expected[..20].to_vec());
    assert_eq!(first["total"], 1_000);
    assert_eq!(first["totalIsEstimate"], true);
    assert_eq!(first["stats"]["total"], 1_000);
    let third = app
        .get(&a.key, "/api/calls?search=alpha&deep=true&page=3&limit=50")
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&third), expected[100..150].to_vec());
    // Pages past the counted matches still answer.
    let deep_page = app
        .get(
            &a.key,
            "/api/calls?search=alpha&deep=true&page=11&limit=100",
        )
        .await
        .expect(200)
        .body;
    assert_eq!(ids(&deep_page), expected[1_000..].to_vec());

    // Fewer matches than the cap are counted exactly.
    let rare = app
        .get(&a.key, "/api/calls?search=gamma&deep=true")
        .await
        .expect(200)
        .body;
    assert_eq!(rare["total"], 6);
    assert_eq!(rare["totalIsEstimate"], false);
    assert_eq!(
        rare["stats"],
        json!({"total": 6, "completedCount": 6, "failedCount": 0})
    );
    let gamma: Vec<String> = by_age
        .iter()
        .filter(|c| c.transcript_text.contains("gamma"))
        .map(|c| c.id.clone())
        .collect();
    assert_eq!(ids(&rare), gamma);
    let plain = app.get(&a.key, "/api/calls").await.expect(200).body;
    assert_eq!(plain["total"], 1_031);
    assert_eq!(plain["totalIsEstimate"], false);
}

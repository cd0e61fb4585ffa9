//! Voicemail (issue 21 point 1): sim numbers ending 98–99 answer with an answering machine
//! (a greeting, then a beep). The engine detects it from the audio; the agent's `voicemail`
//! setting hangs up or leaves a message after the beep; either way the call ends
//! `voicemail`, billed as answered, counted in the dashboard, re-dialed when `retryOn` asks.

use crate::support::{TestApp, Workspace, eventually};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// Long enough for a machine's 3.5 s greeting, its beep and a message.
const CALL_WAIT: Duration = Duration::from_secs(45);
const TERMINAL: [&str; 6] = [
    "completed",
    "failed",
    "no-answer",
    "busy",
    "canceled",
    "voicemail",
];
/// The message a `leaveMessage` agent leaves, with a placeholder.
const MESSAGE: &str = "Hi {name}, this is Voxline about your appointment. Please call us back.";

async fn agent(app: &TestApp, ws: &Workspace, extra: Value) -> String {
    let mut body = json!({
        "name": "Reminder",
        "welcomeMessage": "Hello, this is Voxline calling about your appointment tomorrow.",
        "prompt": "Confirm the appointment.",
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let agent = app.create_agent(&ws.key, body).await;
    agent["id"].as_str().expect("agent id").to_string()
}

async fn place(app: &TestApp, ws: &Workspace, agent: &str, to: &str) -> String {
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": to, "variables": {"name": "Asha"}}),
        )
        .await
        .expect(201);
    placed.body["callId"].as_str().expect("callId").to_string()
}

async fn ended(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    eventually(CALL_WAIT, &format!("call {id} to end"), || async {
        let call = app.get(&ws.key, &format!("/api/calls/{id}")).await.body;
        let raw = call["rawStatus"].as_str().unwrap_or_default();
        TERMINAL.contains(&raw).then_some(call)
    })
    .await
}

/// The recording as (caller, agent) channels at 8 kHz.
async fn recording(app: &TestApp, ws: &Workspace, id: &str) -> (Vec<i16>, Vec<i16>) {
    let wav = eventually(Duration::from_secs(10), "the recording", || async {
        let resp = app
            .request(&ws.key, Method::GET, &format!("/api/calls/{id}/recording"))
            .send()
            .await
            .expect("send");
        if resp.status().as_u16() != 200 {
            return None;
        }
        Some(resp.bytes().await.expect("body").to_vec())
    })
    .await;
    assert_eq!(&wav[..4], b"RIFF");
    // 44-byte header, then interleaved 16-bit stereo: caller left, agent right.
    let samples: Vec<i16> = wav[44..]
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let caller = samples.iter().step_by(2).copied().collect();
    let agent = samples.iter().skip(1).step_by(2).copied().collect();
    (caller, agent)
}

/// Mean absolute amplitude of each 20 ms window.
fn levels(channel: &[i16]) -> Vec<f64> {
    channel
        .chunks(160)
        .map(|w| w.iter().map(|s| f64::from(*s).abs()).sum::<f64>() / w.len() as f64)
        .collect()
}

/// Loud enough to be speech or a tone; silence in the recording is digital zero.
const LOUD: f64 = 200.0;

#[tokio::test]
async fn a_machine_ends_the_call_voicemail_when_the_agent_hangs_up() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Voicemail hangup", 2).await;
    let agent = agent(&app, &ws, json!({})).await;
    let id = place(&app, &ws, &agent, "+919845012398").await;
    let call = ended(&app, &ws, &id).await;
    assert_eq!(call["rawStatus"], "voicemail", "{call}");
    assert_eq!(call["status"], "Voicemail", "{call}");
    assert_eq!(call["endedReason"], "voicemail", "{call}");
    // Billed as answered: its first minute, like a completed call.
    assert!(call["costPaise"].as_i64().unwrap_or_default() > 0, "{call}");
    assert!(
        call["durationSeconds"].as_i64().unwrap_or_default() >= 1,
        "{call}"
    );
    // No reply was made to the machine's greeting.
    let candidate_turns = call["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .filter(|line| line["speaker"] == "Candidate")
        .count();
    assert_eq!(candidate_turns, 0, "{call}");

    // Found by the status filter, and counted in the dashboard's breakdown.
    let page = app
        .get(&ws.key, "/api/calls?status=voicemail")
        .await
        .expect(200);
    assert_eq!(page.body["stats"]["total"], 1, "{}", page.body);
    let breakdown = app
        .get(&ws.key, "/api/dashboard/status-breakdown")
        .await
        .expect(200)
        .body;
    let voicemail = breakdown["statuses"]
        .as_array()
        .expect("statuses")
        .iter()
        .find(|s| s["status"] == "voicemail")
        .cloned()
        .unwrap_or_else(|| panic!("no voicemail entry: {breakdown}"));
    assert_eq!(voicemail["label"], "Voicemail");
    assert_eq!(voicemail["count"], 1);
    assert_eq!(breakdown["total"], 1);
}

#[tokio::test]
async fn a_left_message_follows_the_beep_in_the_recording() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Voicemail message", 2).await;
    let agent = agent(
        &app,
        &ws,
        json!({"voicemail": {"action": "leaveMessage", "message": MESSAGE}}),
    )
    .await;
    let id = place(&app, &ws, &agent, "+919845012398").await;
    let call = ended(&app, &ws, &id).await;
    assert_eq!(call["rawStatus"], "voicemail", "{call}");
    assert_eq!(call["endedReason"], "voicemail", "{call}");
    assert!(call["costPaise"].as_i64().unwrap_or_default() > 0, "{call}");
    // The message, its placeholder filled, is the agent's last turn.
    let transcript = call["transcript"].as_array().expect("transcript");
    let last = transcript.last().expect("a turn");
    assert_eq!(last["speaker"], "Bot", "{call}");
    assert_eq!(
        last["text"], "Hi Asha, this is Voxline about your appointment. Please call us back.",
        "{call}"
    );

    let (caller, agent) = recording(&app, &ws, &id).await;
    let caller = levels(&caller);
    let agent = levels(&agent);
    // After its beep the machine records in silence: the caller channel's last loud window
    // is the end of the beep.
    let beep_end = caller
        .iter()
        .rposition(|level| *level > LOUD)
        .expect("the machine's greeting and beep");
    // The beep lasts 500 ms (25 windows): the agent is quiet throughout.
    let during_beep = &agent[beep_end.saturating_sub(24)..=beep_end];
    assert!(
        during_beep.iter().all(|level| *level < LOUD),
        "the agent talked over the beep: {during_beep:?}"
    );
    // Then it speaks: seconds of speech after the beep.
    let after = &agent[beep_end + 1..];
    let spoken = after.iter().filter(|level| **level > LOUD).count();
    assert!(
        spoken >= 50,
        "{spoken} loud agent windows after the beep ({} windows recorded after it)",
        after.len()
    );
}

#[tokio::test]
async fn detection_can_be_switched_off_and_a_person_never_ends_voicemail() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Voicemail off", 2).await;
    // With detection off, a machine is talked to like a person: the call completes.
    let deaf = agent(
        &app,
        &ws,
        json!({"voicemail": {"action": "hangup", "detect": false}, "silenceTimeoutSeconds": 6}),
    )
    .await;
    // A person (a number ending 00) is never taken for a machine.
    let listening = agent(&app, &ws, json!({})).await;
    let machine = place(&app, &ws, &deaf, "+919845012399").await;
    let person = place(&app, &ws, &listening, "+919845012300").await;
    let machine = ended(&app, &ws, &machine).await;
    let person = ended(&app, &ws, &person).await;
    assert_eq!(machine["rawStatus"], "completed", "{machine}");
    assert_ne!(machine["endedReason"], "voicemail", "{machine}");
    assert_eq!(person["rawStatus"], "completed", "{person}");
    assert_ne!(person["endedReason"], "voicemail", "{person}");
}

#[tokio::test]
async fn a_retry_policy_can_redial_on_voicemail() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Voicemail retry", 2).await;
    let agent = agent(
        &app,
        &ws,
        json!({"retryPolicy": {"maxAttempts": 2, "retryAfterSeconds": 1, "retryOn": ["voicemail"]}}),
    )
    .await;
    let first = place(&app, &ws, &agent, "+919845012399").await;
    let rows = eventually(Duration::from_secs(90), "two attempts", || async {
        let page = app.get(&ws.key, "/api/calls?limit=100").await.expect(200);
        let rows = page.body["rows"].as_array().cloned().unwrap_or_default();
        let done = rows.len() == 2
            && rows
                .iter()
                .all(|r| r["rawStatus"].as_str() == Some("voicemail"));
        done.then_some(rows)
    })
    .await;
    let retry = rows
        .iter()
        .find(|r| r["id"] != first.as_str())
        .expect("the retry");
    assert_eq!(retry["attempt"], 2, "{retry}");
    let detail = app
        .get(
            &ws.key,
            &format!("/api/calls/{}", retry["id"].as_str().unwrap()),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(detail["retryOf"], first.as_str(), "{detail}");
}

#[tokio::test]
async fn the_voicemail_setting_is_parsed_at_the_edge() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Voicemail setting", 1).await;
    // Absent: hang up, detection on; round-trips as written.
    let plain = app
        .create_agent(&ws.key, json!({"name": "Plain", "prompt": "x"}))
        .await;
    assert_eq!(
        plain["voicemail"],
        json!({"action": "hangup", "detect": true}),
        "{plain}"
    );
    let body = json!({"name": "Leaver", "prompt": "x",
        "voicemail": {"action": "leaveMessage", "message": MESSAGE, "detect": true}});
    let created = app.create_agent(&ws.key, body).await;
    assert_eq!(created["voicemail"]["action"], "leaveMessage");
    assert_eq!(created["voicemail"]["message"], MESSAGE);
    assert!(
        created["placeholders"]
            .as_array()
            .is_some_and(|names| names.contains(&json!("name"))),
        "{created}"
    );
    let id = created["id"].as_str().expect("id");
    let read = app
        .get(&ws.key, &format!("/api/agents/{id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(read["voicemail"], created["voicemail"]);

    // Bad input: 400 naming the field.
    for (bad, field) in [
        (json!({"action": "leaveMessage"}), "voicemail.message"),
        (
            json!({"action": "leaveMessage", "message": "   "}),
            "voicemail.message",
        ),
        (json!({"action": "shout"}), "voicemail"),
        (json!({"action": "hangup", "beep": true}), "voicemail"),
        (
            json!({"action": "leaveMessage", "message": "x".repeat(1_001)}),
            "voicemail",
        ),
    ] {
        let reply = app
            .patch(
                &ws.key,
                &format!("/api/agents/{id}"),
                json!({"voicemail": bad}),
            )
            .await
            .expect(400);
        let message = reply.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{bad}: {message}");
    }
    // A retry policy accepts voicemail as an outcome.
    let reply = app
        .patch(
            &ws.key,
            &format!("/api/agents/{id}"),
            json!({"retryPolicy": {"maxAttempts": 2, "retryOn": ["voicemail", "no-answer"]}}),
        )
        .await
        .expect(200);
    assert_eq!(reply.body["retryPolicy"]["retryOn"][0], "voicemail");
}

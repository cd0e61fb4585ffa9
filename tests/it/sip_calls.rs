//! SIP calls against baresip (issue 33): a SIP phone nobody here wrote, run on
//! loopback by `support::Baresip`. The workspace's trunk is baresip itself; the
//! call goes out as a real INVITE with SDP, its audio as RTP both ways.
//!
//! Skipped, saying so, when baresip is not installed (`.ci/run` installs
//! Debian's `baresip-core`).

use crate::support::{
    Baresip, SIP_WELCOME as WELCOME, TestApp, Workspace, baresip_installed, call_detail,
    eventually, sip_agent, sip_trunk_workspace,
};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use voxline_media::g711::mulaw_to_linear;

const OUR_NUMBER: &str = "+14155550142";
const CALLEE: &str = "+14155550199";
const CALLER_LINE: &str = "Yes, I have a minute.";
const WAIT: Duration = Duration::from_secs(40);

/// Whether baresip is here; prints why the test does nothing when it is not.
fn have_baresip(test: &str) -> bool {
    let installed = baresip_installed();
    if !installed {
        eprintln!("skipped {test}: baresip is not installed (apt-get install baresip-core)");
    }
    installed
}

/// What baresip plays: silence while the agent greets, a line of real
/// recorded speech (a Piper voice from the turn-taking corpus), then silence
/// longer than the call.
fn caller_wav(dir: &Path) -> std::path::PathBuf {
    let speech = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("media/tests/fixtures/turns/complete-02-piper.ulaw"),
    )
    .expect("the speech fixture");
    let mut samples = vec![0i16; 8_000 * 4];
    samples.extend(speech.iter().map(|b| mulaw_to_linear(*b)));
    samples.extend(std::iter::repeat_n(0i16, 8_000 * 30));
    let path = dir.join("caller.wav");
    std::fs::write(&path, voxline_media::wav::mono_file(&samples, 8_000)).expect("caller.wav");
    path
}

/// A workspace whose trunk is `phone` and whose caller ID is a `sip` number;
/// returns it and the number's id.
async fn sip_workspace_with_number(app: &TestApp, phone: &Baresip) -> (Workspace, String) {
    let trunk = json!({"host": "127.0.0.1", "port": phone.sip.port(), "transport": "udp"});
    sip_trunk_workspace(app, "SIP calls", OUR_NUMBER, &trunk).await
}

/// [`sip_workspace_with_number`] without the number's id.
async fn sip_workspace(app: &TestApp, phone: &Baresip) -> Workspace {
    sip_workspace_with_number(app, phone).await.0
}

async fn detail(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    call_detail(app, ws, id).await
}

/// The RMS of a 16-bit mono WAV's samples.
fn wav_rms(path: &Path) -> (f64, usize) {
    let bytes = std::fs::read(path).expect("the recording");
    let data = &bytes[44.min(bytes.len())..];
    let samples: Vec<i16> = data
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect();
    let energy: f64 = samples.iter().map(|s| f64::from(*s).powi(2)).sum();
    ((energy / samples.len().max(1) as f64).sqrt(), samples.len())
}

#[tokio::test]
async fn a_call_to_baresip_holds_a_scripted_conversation_over_rtp() {
    if !have_baresip("a_call_to_baresip_holds_a_scripted_conversation_over_rtp") {
        return;
    }
    let app = TestApp::spawn().await;
    let audio = tempfile::tempdir().unwrap();
    let mut phone = Baresip::start(CALLEE, &caller_wav(audio.path())).await;
    let ws = sip_workspace(&app, &phone).await;
    let agent = sip_agent(&app, &ws).await;

    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": CALLEE, "variables": {"simScript": [CALLER_LINE]}}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();

    // The caller's line, heard over RTP, is answered by the agent.
    let transcript = tokio::time::timeout(WAIT, async {
        loop {
            let t = app
                .get(&ws.key, &format!("/api/calls/{id}/transcript"))
                .await
                .body;
            let turns = t["turns"].as_array().cloned().unwrap_or_default();
            if turns.len() >= 3 {
                return turns;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let transcript = match transcript {
        Ok(turns) => turns,
        Err(_) => panic!(
            "no conversation; the call: {}\nbaresip: {}",
            detail(&app, &ws, &id).await,
            phone.log()
        ),
    };
    assert_eq!(transcript[0]["speaker"], "assistant", "{transcript:?}");
    assert_eq!(transcript[0]["text"], WELCOME, "{transcript:?}");
    assert_eq!(transcript[1]["speaker"], "user", "{transcript:?}");
    assert_eq!(transcript[1]["text"], CALLER_LINE, "{transcript:?}");

    // The callee hangs up: a BYE from baresip ends the call as completed.
    let hangup = phone.command("hangup", "").await;
    assert_eq!(hangup["ok"], true, "{hangup}\n{}", phone.log());
    let call = eventually(WAIT, "the call to end", || async {
        let call = detail(&app, &ws, &id).await;
        call["endedReason"].is_string().then_some(call)
    })
    .await;
    assert_eq!(call["provider"], "sip", "{call}");
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert!(
        call["carrierCallId"]
            .as_str()
            .is_some_and(|id| id.ends_with("@voxline")),
        "the SIP Call-ID is the carrier's call id: {call}"
    );
    let coded = eventually(WAIT, "the answered call's SIP code", || async {
        let call = detail(&app, &ws, &id).await;
        call["carrierCode"].is_number().then_some(call)
    })
    .await;
    assert_eq!(coded["carrierCode"], 200, "{coded}");
    // baresip's recording of what it heard holds the agent's speech.
    phone.stop().await;
    let heard = phone.heard();
    assert_eq!(heard.len(), 1, "one recording: {heard:?}\n{}", phone.log());
    let (rms, samples) = wav_rms(&heard[0]);
    assert!(samples > 8_000 * 2, "baresip heard {samples} samples");
    assert!(rms > 300.0, "baresip heard the agent (RMS {rms:.0})");
    app.shutdown().await;
}

#[tokio::test]
async fn a_call_from_baresip_is_answered_by_the_number_s_inbound_agent() {
    if !have_baresip("a_call_from_baresip_is_answered_by_the_number_s_inbound_agent") {
        return;
    }
    let app = TestApp::spawn().await;
    let sip = app.server().sip_addr.expect("the SIP listener");
    let audio = tempfile::tempdir().unwrap();
    let phone = Baresip::start(CALLEE, &caller_wav(audio.path())).await;
    let (ws, number_id) = sip_workspace_with_number(&app, &phone).await;
    let agent = sip_agent(&app, &ws).await;
    app.patch(
        &ws.key,
        &format!("/api/numbers/{number_id}"),
        json!({"inboundAgentId": agent, "inbound": {"enabled": true}}),
    )
    .await
    .expect(200);

    let dial = phone
        .command("dial", &format!("sip:{OUR_NUMBER}@{sip}"))
        .await;
    assert_eq!(dial["ok"], true, "{dial}\n{}", phone.log());
    let call = eventually(
        WAIT,
        "the inbound call and the agent's greeting",
        || async {
            let calls = app.get(&ws.key, "/api/calls").await.body;
            let call = calls["rows"].as_array()?.first()?.clone();
            let id = call["id"].as_str()?.to_string();
            let t = app
                .get(&ws.key, &format!("/api/calls/{id}/transcript"))
                .await
                .body;
            let greeted = t["turns"].as_array()?.first()?["text"] == WELCOME;
            greeted.then_some(call)
        },
    )
    .await;
    assert_eq!(call["direction"], "inbound", "{call}");
    let id = call["id"].as_str().unwrap().to_string();
    let hangup = phone.command("hangup", "").await;
    assert_eq!(hangup["ok"], true, "{hangup}");
    let ended = eventually(WAIT, "the inbound call to end", || async {
        let call = detail(&app, &ws, &id).await;
        call["endedReason"].is_string().then_some(call)
    })
    .await;
    assert_eq!(ended["provider"], "sip", "{ended}");
    assert_eq!(ended["rawStatus"], "completed", "{ended}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_call_to_an_unknown_number_or_from_an_unlisted_source_is_refused() {
    if !have_baresip("a_call_to_an_unknown_number_or_from_an_unlisted_source_is_refused") {
        return;
    }
    let app = TestApp::spawn().await;
    let sip = app.server().sip_addr.expect("the SIP listener");
    let audio = tempfile::tempdir().unwrap();
    let phone = Baresip::start(CALLEE, &caller_wav(audio.path())).await;
    // The trunk lets in one other address only.
    let trunk =
        json!({"host": "127.0.0.1", "port": phone.sip.port(), "allowedSources": ["192.0.2.10"]});
    let (ws, _) = sip_trunk_workspace(&app, "SIP refusals", OUR_NUMBER, &trunk).await;
    for (number, code) in [("+14155550100", "404"), (OUR_NUMBER, "403")] {
        let dial = phone.command("dial", &format!("sip:{number}@{sip}")).await;
        assert_eq!(dial["ok"], true, "{dial}");
        eventually(WAIT, "baresip to be refused", || async {
            phone.log().contains(&format!("{code} ")).then_some(())
        })
        .await;
    }
    let calls = app.get(&ws.key, "/api/calls").await.body;
    assert_eq!(calls["rows"].as_array().map(Vec::len), Some(0), "{calls}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_key_pressed_on_baresip_reaches_a_keypad_agent() {
    if !have_baresip("a_key_pressed_on_baresip_reaches_a_keypad_agent") {
        return;
    }
    let app = TestApp::spawn().await;
    let audio = tempfile::tempdir().unwrap();
    let phone = Baresip::start(CALLEE, &caller_wav(audio.path())).await;
    let ws = sip_workspace(&app, &phone).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "SIP survey",
                "conversationEngine": "keypad",
                "welcomeMessage": "Hello.",
                "telephonyProvider": "sip",
                "ttsProvider": "sim",
                "keypad": {
                    "prompt": "Press 2 if you are coming.",
                    "options": [
                        {"digit": "1", "say": "Sorry to hear.", "value": "declined"},
                        {"digit": "2", "say": "See you then.", "value": "coming"}
                    ],
                },
            }),
        )
        .await;
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent["id"], "to": CALLEE}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().unwrap().to_string();
    eventually(WAIT, "the call to be answered", || async {
        detail(&app, &ws, &id).await["answeredAt"]
            .is_string()
            .then_some(())
    })
    .await;
    // RFC 4733 events from baresip, not tones in the audio.
    let pressed = phone.command("sndcode", "2").await;
    assert_eq!(pressed["ok"], true, "{pressed}\n{}", phone.log());
    let call = eventually(WAIT, "the keypad's answer", || async {
        let call = detail(&app, &ws, &id).await;
        (call["extracted"]["keypad"] == "coming").then_some(call)
    })
    .await;
    assert_eq!(call["extracted"]["digit"], "2", "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_transfer_on_sip_sends_refer_and_follows_its_notify() {
    if !have_baresip("a_transfer_on_sip_sends_refer_and_follows_its_notify") {
        return;
    }
    const FRONT_DESK: &str = "+14155550123";
    let app = TestApp::spawn().await;
    let audio = tempfile::tempdir().unwrap();
    let phone = Baresip::start(CALLEE, &caller_wav(audio.path())).await;
    let ws = sip_workspace(&app, &phone).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "SIP desk",
                "welcomeMessage": WELCOME,
                "prompt": "You help callers.",
                "telephonyProvider": "sip",
                "llmProvider": "sim",
                "asrProvider": "sim",
                "ttsProvider": "sim",
                "tools": [{"type": "transferCall", "destinations": [{
                    "number": FRONT_DESK,
                    "description": "the front desk",
                    "message": "Let me connect you with the front desk.",
                }]}],
            }),
        )
        .await;
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent["id"], "to": CALLEE,
                   "variables": {"simScript": ["Can I speak to a person please?"]}}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().unwrap().to_string();
    let call = tokio::time::timeout(WAIT, async {
        loop {
            let call = detail(&app, &ws, &id).await;
            if call["transferStatus"].is_string() && call["endedReason"].is_string() {
                return call;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let call = match call {
        Ok(call) => call,
        Err(_) => panic!(
            "no transfer: {}\nbaresip: {}",
            detail(&app, &ws, &id).await,
            phone.log()
        ),
    };
    assert_eq!(call["transferredTo"], FRONT_DESK, "{call}");
    // baresip dials the target on itself, where no account answers it: the final
    // NOTIFY carries its 404, and the leg is recorded failed.
    assert_eq!(call["transferStatus"], "failed", "{call}");
    // baresip took the REFER and dialed the target, which is this trunk again.
    assert!(
        phone.log().contains(FRONT_DESK),
        "baresip was referred to the front desk:\n{}",
        phone.log()
    );
    app.shutdown().await;
}

#[tokio::test]
async fn baresip_holds_and_resumes_the_call_by_re_invite() {
    if !have_baresip("baresip_holds_and_resumes_the_call_by_re_invite") {
        return;
    }
    let app = TestApp::spawn().await;
    let audio = tempfile::tempdir().unwrap();
    let phone = Baresip::start(CALLEE, &caller_wav(audio.path())).await;
    let ws = sip_workspace(&app, &phone).await;
    let agent = sip_agent(&app, &ws).await;
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": CALLEE}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().unwrap().to_string();
    eventually(WAIT, "the call to be answered", || async {
        detail(&app, &ws, &id).await["answeredAt"]
            .is_string()
            .then_some(())
    })
    .await;
    for command in ["hold", "resume"] {
        let reply = phone.command(command, "").await;
        assert_eq!(reply["ok"], true, "{command}: {reply}\n{}", phone.log());
    }
    // baresip's SIP trace: its hold re-INVITE (sendonly) got our recvonly answer.
    eventually(WAIT, "the hold re-INVITE answered", || async {
        let log = phone.log();
        (log.contains("a=sendonly") && log.contains("a=recvonly")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let call = detail(&app, &ws, &id).await;
    assert!(call["endedReason"].is_null(), "{call}");
    assert!(
        !phone.log().contains("session closed"),
        "the call survived hold and resume:\n{}",
        phone.log()
    );
    let hangup = phone.command("hangup", "").await;
    assert_eq!(hangup["ok"], true, "{hangup}");
    let ended = eventually(WAIT, "the call to end", || async {
        let call = detail(&app, &ws, &id).await;
        call["endedReason"].is_string().then_some(call)
    })
    .await;
    assert_eq!(ended["rawStatus"], "completed", "{ended}");
    app.shutdown().await;
}

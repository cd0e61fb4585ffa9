//! What the SIP tests share (`sip_calls` against baresip, `sip_signaling`
//! against `SipPeer`): a workspace whose `sip` trunk points at the test's far
//! end, the SIP agent, and the call read back through the API.

use super::{TestApp, Workspace, eventually};
use serde_json::{Value, json};
use std::time::Duration;

/// What the SIP agent says first.
pub const SIP_WELCOME: &str = "Hello from Voxline over SIP.";

/// Stores `trunk` as the workspace's `sip` credential, the admin CLI's way.
pub async fn set_sip_trunk(app: &TestApp, ws: &Workspace, trunk: &Value) {
    app.set_credential(ws, "sip", trunk).await;
}

/// A calling workspace with `number` on `sip` as its caller ID and `trunk` as
/// its `sip` credential; returns it and the number's id.
pub async fn sip_trunk_workspace(
    app: &TestApp,
    name: &str,
    number: &str,
    trunk: &Value,
) -> (Workspace, String) {
    let ws = app.calling_workspace(name, 2).await;
    let row = app.add_number(&ws, number, "sip").await;
    set_sip_trunk(app, &ws, trunk).await;
    (ws, row.id.to_string())
}

/// A pipeline agent on `sip` with the sim ASR, LLM and TTS; returns its id.
pub async fn sip_agent(app: &TestApp, ws: &Workspace) -> String {
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "SIP agent",
                "welcomeMessage": SIP_WELCOME,
                "prompt": "You confirm appointments.",
                "telephonyProvider": "sip",
                "llmProvider": "sim",
                "asrProvider": "sim",
                "ttsProvider": "sim",
            }),
        )
        .await;
    agent["id"].as_str().expect("agent id").to_string()
}

/// `GET /api/calls/{id}`.
pub async fn call_detail(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body
}

/// The call once it has ended (an `endedReason`), within `within`.
pub async fn call_ended(app: &TestApp, ws: &Workspace, id: &str, within: Duration) -> Value {
    eventually(within, "the call to end", || async {
        let call = call_detail(app, ws, id).await;
        call["endedReason"].is_string().then_some(call)
    })
    .await
}

//! `voxline admin sim call`: ring a workspace's number as Twilio would (the
//! signed Voice URL request, then the media stream) and play a caller script
//! on the call, with the account the server itself would check: the number's
//! Twilio credential, or the workspace's sim account.

use crate::carriers::inbound::sim_account;
use crate::carriers::store_wiring::StoreCredentials;
use crate::config::StorageSettings;
use crate::domain::PhoneNumber;
use crate::inbound::sim_phone::{self, Ring, RingAnswer};
use crate::secrets::server_secret::ServerSecret;
use crate::store::Store;
use anyhow::{anyhow, bail};
use serde_json::{Value, json};
use voxline_actors::sim::callee::{CalleeOptions, default_sim_script, parse_sim_script};

/// Rings `to` from `from` through `server` and plays `script` (the default
/// caller script when `None`); returns what happened as JSON.
pub async fn call(
    store: &Store,
    settings: &StorageSettings,
    to: &str,
    from: &str,
    script: Option<&str>,
    server: &str,
) -> anyhow::Result<Value> {
    let phone = PhoneNumber::parse(to).map_err(|e| anyhow!("--to {to} {e}"))?;
    let (steps, sim_script) = match script {
        Some(raw) => {
            let value: Value =
                serde_json::from_str(raw).map_err(|e| anyhow!("--script is not JSON: {e}"))?;
            let steps = parse_sim_script(&value).map_err(|e| anyhow!("--script {e}"))?;
            (steps, Some(value))
        }
        None => (default_sim_script(), None),
    };
    let number = store
        .number_by_phone(phone.as_str())
        .await?
        .ok_or_else(|| anyhow!("--to {phone}: no workspace rents this number"))?;
    let secret = ServerSecret::resolve(store, settings.secret.is_some(), || {
        Ok(settings.load_secret()?)
    })
    .await?;
    let account = match number.provider.as_str() {
        "sim" => sim_account(&secret, &number.org_id.to_string()),
        "twilio" => StoreCredentials::new(store.clone(), &secret)
            .load(number.org_id, "twilio")
            .await
            .ok_or_else(|| anyhow!("the workspace has no readable twilio credential"))?,
        other => bail!(
            "--to {phone} is a {other} number; `admin sim call` rings sim and twilio numbers through Twilio's protocol"
        ),
    };
    let call_sid = sim_phone::new_call_sid();
    let ring = Ring {
        server: server.to_string(),
        provider: number.provider.clone(),
        account,
        to: phone.as_str().to_string(),
        from: from.to_string(),
        call_sid: call_sid.clone(),
        sim_script,
    };
    let http = reqwest::Client::new();
    let (answer, took) = sim_phone::ring(&http, &ring).await?;
    let webhook_ms = took.as_millis();
    let Some(report) = sim_phone::talk(&answer, &call_sid, steps, CalleeOptions::default()).await
    else {
        let RingAnswer::Refused { twiml } = answer else {
            bail!("the server answered a stream the callee could not play");
        };
        return Ok(
            json!({"answered": false, "callSid": call_sid, "twiml": twiml, "webhookMs": webhook_ms}),
        );
    };
    Ok(json!({
        "answered": true,
        "callSid": call_sid,
        "callId": answer.call_id(),
        "webhookMs": webhook_ms,
        "connected": report.connected,
        "greetingMs": report.greeting_latency.map(|d| d.as_millis()),
        "turnLatenciesMs": report.turn_latencies.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
        "linesSaid": report.lines_said,
        "lateFrames": report.late_frames,
        "agentHungUp": report.agent_hung_up,
        "endedCleanly": report.ended_cleanly,
        "error": report.error,
        "durationMs": report.duration.as_millis(),
    }))
}

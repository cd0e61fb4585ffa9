//! The engine's job for a stored call: what the call actor needs to dial and
//! run it, built from the call row and its agent.
//!
//! The engine crate names calls and workspaces by plain strings; this is
//! where the typed ids become those strings (the runner and the ledger parse
//! them back).

use crate::domain::agent::AgentSpec;
use crate::domain::{CallId, OrgId};
use voxline_actors::engine::CallJob;

/// Builds the engine's job for a stored call.
#[allow(clippy::too_many_arguments)]
pub fn job_for(
    call_id: CallId,
    org_id: OrgId,
    concurrency: i64,
    to: &str,
    from: &str,
    provider: &str,
    spec: &AgentSpec,
    variables_json: &str,
    ring_seconds: u32,
) -> CallJob {
    let variables: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(variables_json).unwrap_or_default();
    let sim_script = variables.get("simScript").and_then(|v| match v {
        serde_json::Value::String(s) => serde_json::from_str(s).ok(),
        serde_json::Value::Array(_) => Some(v.clone()),
        _ => None,
    });
    CallJob {
        call_id: call_id.to_string(),
        org_id: org_id.to_string(),
        org_concurrency: u32::try_from(concurrency.max(1)).unwrap_or(u32::MAX),
        to: to.to_string(),
        from: from.to_string(),
        provider: provider.to_string(),
        bypass_slots: spec.bypasses_slots(),
        ring_timeout_seconds: if provider == "sim" { ring_seconds } else { 30 },
        max_duration_seconds: spec.max_duration_seconds,
        sim_script,
        sim_fault: variables
            .get("simFault")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        detect_machine: spec.voicemail.detect,
    }
}

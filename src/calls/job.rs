//! The engine's job for a stored call: what the call actor needs to dial and
//! run it, built from the call row and its agent.
//!
//! The engine crate names calls and workspaces by its own id types; this is
//! where the service's ids become them (the runner and the ledger convert them
//! back, infallibly).

use crate::domain::agent::AgentSpec;
use crate::domain::{CallId, OrgId};
use serde_json::{Map, Value};
use voxline_actors::engine::CallJob;

/// A stored call's variables that are not a JSON object.
#[derive(Debug, thiserror::Error)]
#[error("call {call_id}: stored variables do not parse: {source}")]
pub struct CorruptVariables {
    /// The call whose row holds them.
    pub call_id: CallId,
    /// What serde said.
    pub source: serde_json::Error,
}

/// Parses a stored call's variables for [`job_for`]. Text that does not parse is an
/// error, logged with the call's id: dialing with no variables would fill the agent's
/// prompt with blanks and drop a sim script unnoticed.
pub fn stored_variables(
    call_id: CallId,
    text: &str,
) -> Result<Map<String, Value>, CorruptVariables> {
    serde_json::from_str(text).map_err(|source| {
        tracing::error!(call = %call_id, column = "calls.variables", error = %source, "stored variables do not parse");
        CorruptVariables { call_id, source }
    })
}

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
    variables: &Map<String, Value>,
    ring_seconds: u32,
) -> CallJob {
    let sim_script = variables.get("simScript").and_then(|v| match v {
        Value::String(s) => serde_json::from_str(s).ok(),
        Value::Array(_) => Some(v.clone()),
        _ => None,
    });
    CallJob {
        call_id: call_id.into(),
        org_id: org_id.into(),
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
        inbound: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_variables_that_do_not_parse_are_an_error_naming_the_call() {
        let call = CallId::new();
        let parsed =
            stored_variables(call, r#"{"simFault":"engine-panic","name":"Asha"}"#).unwrap();
        assert_eq!(parsed["name"], "Asha");
        let err = stored_variables(call, "{\"name\":").unwrap_err();
        assert_eq!(err.call_id, call);
        assert!(err.to_string().contains(&call.to_string()), "{err}");
        assert!(
            stored_variables(call, "[1, 2]").is_err(),
            "variables are an object"
        );
    }

    #[test]
    fn the_job_carries_the_sim_script_and_fault_from_the_variables() {
        let spec = AgentSpec::with_name("Clinic");
        let variables = stored_variables(
            CallId::new(),
            r#"{"simScript":"[\"Hello\"]","simFault":"engine-panic"}"#,
        )
        .unwrap();
        let (call, org) = (CallId::new(), OrgId::new());
        let job = job_for(
            call,
            org,
            3,
            "+919845012310",
            "+918035740111",
            "sim",
            &spec,
            &variables,
            7,
        );
        assert_eq!(CallId::from(job.call_id), call);
        assert_eq!(OrgId::from(job.org_id), org);
        assert_eq!(job.sim_script, Some(serde_json::json!(["Hello"])));
        assert_eq!(job.sim_fault.as_deref(), Some("engine-panic"));
        assert_eq!(job.ring_timeout_seconds, 7, "the sim rings as configured");
    }
}

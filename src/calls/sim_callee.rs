//! The simulated callee behind the sim carrier: joins answered calls over a
//! real websocket and plays the call's script (decisions §11).

use serde_json::Value;
use voxline_actors::callee::{
    CalleeOptions, ScriptStep, SimCallee, default_sim_script, parse_sim_script,
};
use voxline_actors::carrier::sim::CalleeStart;

/// The script a call plays: its `simScript` variable, else the default script.
/// The callee speaks it and the sim ASR transcribes it, so both read it here.
pub fn script_steps(script: &Option<Value>) -> Vec<ScriptStep> {
    script
        .as_ref()
        .and_then(|s| parse_sim_script(s).ok())
        .filter(|steps| !steps.is_empty())
        .unwrap_or_else(default_sim_script)
}

/// Joins an answered sim call as the callee and plays its script.
pub async fn run(start: CalleeStart) {
    let steps = script_steps(&start.script);
    let options = CalleeOptions {
        call_sid: start.carrier_call_id.clone(),
        cancel: start.hangup.clone(),
        ..CalleeOptions::default()
    };
    let report = SimCallee::run(
        start.media_url,
        start.params,
        steps,
        start.behaviour,
        options,
    )
    .await;
    tracing::debug!(call = %start.call_id, ?report, "sim callee finished");
}

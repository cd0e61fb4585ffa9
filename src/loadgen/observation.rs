//! One call's observation from what the callee measured and what the API
//! reports, and whether it counts as failed.

use super::metrics::{CallObservation, StageTimes};
use serde_json::Value;
use std::time::Duration;
use voxline_actors::sim::callee::CalleeReport;

pub(super) fn fill_from_report(call: &mut CallObservation, report: &CalleeReport) {
    call.answered = report.connected;
    call.greeting_latency = report.greeting_latency;
    call.turn_latencies = report.turn_latencies.clone();
    call.agent_frames = report.agent_frames;
    call.late_frames = report.late_frames;
    call.mean_jitter = report.mean_jitter;
    call.max_jitter = report.max_jitter;
}

/// Takes the server's view; `server_latencies` when no callee measured the turns.
pub(super) fn fill_from_detail(call: &mut CallObservation, detail: &Value, server_latencies: bool) {
    let status = detail["rawStatus"].as_str().unwrap_or_default();
    call.ended = voxline_actors::engine::CallStatus::parse(status)
        .is_some_and(voxline_actors::engine::CallStatus::is_terminal);
    if call.ended {
        call.final_status = Some(match detail["endedReason"].as_str() {
            Some(reason) => format!("{status} ({reason})"),
            None => status.to_owned(),
        });
    }
    if !detail["answeredAt"].is_null() {
        call.answered = true;
    }
    let turns = detail["latencies"].as_array().cloned().unwrap_or_default();
    for turn in &turns {
        if let Some(ms) = turn["engineOverheadMs"].as_u64() {
            call.server_engine_overheads.push(Duration::from_millis(ms));
        }
        let ms = |name: &str| Duration::from_millis(turn[name].as_u64().unwrap_or(0));
        call.server_stages.push(StageTimes {
            total: ms("totalMs"),
            endpointing: ms("endpointingMs"),
            asr: ms("asrMs"),
            llm_first_token: ms("llmFirstTokenMs"),
            tts_first_byte: ms("ttsFirstByteMs"),
        });
        if server_latencies && let Some(ms) = turn["totalMs"].as_u64() {
            call.turn_latencies.push(Duration::from_millis(ms));
        }
    }
}

/// Why an answered call has no greeting latency, if it has none: every answered call
/// is either measured or accounted for in the report.
pub(super) fn greeting_missing(
    call: &CallObservation,
    report: Option<&CalleeReport>,
    expect_report: bool,
) -> Option<String> {
    if !call.answered || call.greeting_latency.is_some() {
        return None;
    }
    Some(
        match report {
            Some(_) => "the agent never spoke",
            None if expect_report => "no callee report",
            // --target: the server's own sim callee heard the call, and it keeps no figures.
            None => "no callee in this process (--target)",
        }
        .to_owned(),
    )
}

/// Why a call counts as failed, if it does.
pub(super) fn failure_of(
    call: &CallObservation,
    report: Option<&CalleeReport>,
    expect_report: bool,
) -> Option<String> {
    if let Some(report) = report {
        if let Some(error) = &report.error {
            return Some(format!("callee: {error}"));
        }
        if !report.connected {
            return Some("callee could not start the stream".to_owned());
        }
        if !report.ended_cleanly {
            return Some("callee: the call did not end cleanly".to_owned());
        }
    } else if expect_report {
        return Some("never answered".to_owned());
    }
    match &call.final_status {
        None => Some("no terminal status from the API".to_owned()),
        Some(status) if !status.starts_with("completed") => Some(format!("ended {status}")),
        Some(_) => None,
    }
}

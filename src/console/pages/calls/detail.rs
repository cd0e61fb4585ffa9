//! What the call page shows, built from the stored rows: the header, the
//! transcript turns with where each starts in the recording, the latency
//! bars, the status history, the analysis, the scorecard, the tool calls
//! and the webhook deliveries. Pure functions of the rows, so the handler
//! only reads and renders; a stored JSON column that no longer parses is an
//! error ([`decode_json`]), never an empty panel.

use super::display::{ago, duration, ist_time, rupees, status_class, status_label};
use crate::domain::clock::iso;
use crate::domain::{AgentId, CallId};
use crate::store::analyses::AnalysisRow;
use crate::store::tool_calls::ToolCallRow;
use crate::store::{
    CallDetailRow, CallEventRow, CallTurnRow, DeliveryLogRow, RatingRow, RecordingFileRow,
    StoreResult, decode_json,
};
use serde_json::Value;

/// Bytes a second of the stored WAV holds: 8 kHz, 16-bit, two channels.
pub const WAV_BYTES_PER_SECOND: i64 = 8_000 * 2 * 2;
/// The WAV header the recorder writes before the samples.
pub const WAV_HEADER_BYTES: i64 = 44;

/// The call's facts in the page header.
#[derive(Debug, Clone)]
pub struct CallHeader {
    /// Call id.
    pub id: String,
    /// Person called (or the number when unnamed).
    pub name: String,
    /// Number dialed.
    pub phone: String,
    /// Caller ID.
    pub from_number: String,
    /// `outbound` or `inbound`.
    pub direction: &'static str,
    /// The workspace number an inbound caller rang.
    pub to_number: Option<String>,
    /// Agent id and name.
    pub agent_id: String,
    /// Agent name.
    pub agent_name: String,
    /// The agent's console page, when the call names an agent id.
    pub agent_link: Option<String>,
    /// Display status.
    pub status: String,
    /// Badge class suffix.
    pub status_class: &'static str,
    /// Raw status.
    pub raw_status: String,
    /// Why it ended.
    pub ended_reason: String,
    /// Provider.
    pub provider: String,
    /// Talk time for display.
    pub duration: String,
    /// Charge in rupees.
    pub cost: String,
    /// Created, IST.
    pub created: String,
    /// Created, relative.
    pub created_ago: String,
    /// Answered, IST.
    pub answered: String,
    /// Ended, IST.
    pub ended: String,
    /// Attempt number.
    pub attempt: i64,
    /// Batch id, when part of one.
    pub batch_id: Option<String>,
    /// Campaign name, when part of one.
    pub campaign: Option<String>,
    /// Where it was transferred, with the leg's outcome.
    pub transfer: Option<String>,
    /// The calendar booking's outcome.
    pub booking: Option<String>,
    /// LLM tokens of the conversation, `prompt / completion`.
    pub tokens: String,
}

/// One transcript turn.
#[derive(Debug, Clone)]
pub struct TurnView {
    /// `Agent` or `Caller`.
    pub speaker: &'static str,
    /// CSS class: `turn-agent` or `turn-caller`.
    pub class: &'static str,
    /// What was said (escaped by the template).
    pub text: String,
    /// Seconds into the recording where the turn starts, as text for `data-seek`.
    pub seek: String,
    /// The same, for display: `1:05`.
    pub at: String,
    /// Tools the agent called in this turn.
    pub tools: Vec<String>,
}

/// One segment of a latency bar.
#[derive(Debug, Clone)]
pub struct LatencyPart {
    /// Stage name.
    pub label: &'static str,
    /// CSS class of the segment.
    pub class: &'static str,
    /// Milliseconds.
    pub ms: u64,
    /// Share of the bar, percent of the longest turn, one decimal.
    pub width: String,
}

/// One agent reply's latency breakdown.
#[derive(Debug, Clone)]
pub struct LatencyView {
    /// 1-based reply number.
    pub reply: usize,
    /// End of speech to first audio, ms.
    pub total_ms: u64,
    /// The stages.
    pub parts: Vec<LatencyPart>,
}

/// A status the call entered.
#[derive(Debug, Clone)]
pub struct HistoryView {
    /// Display status.
    pub status: String,
    /// Badge class suffix.
    pub class: &'static str,
    /// When, IST.
    pub at: String,
}

/// The post-call analysis.
#[derive(Debug, Clone)]
pub struct AnalysisPanel {
    /// pending, done, failed or skipped.
    pub status: String,
    /// The summary.
    pub summary: String,
    /// Extracted fields as (name, value text).
    pub fields: Vec<(String, String)>,
    /// The verdict's value as text.
    pub verdict: String,
    /// `pass`, `fail` or empty when not judged.
    pub verdict_class: &'static str,
    /// The verdict's reason.
    pub reason: String,
    /// Why it failed.
    pub error: String,
    /// Model and tokens.
    pub model: String,
}

/// The scorecard.
#[derive(Debug, Clone)]
pub struct ScorecardPanel {
    /// pending, done or failed.
    pub status: String,
    /// The mean score, one decimal.
    pub overall: String,
    /// (criterion, score, reason).
    pub columns: Vec<(String, String, String)>,
    /// Why the last scoring failed.
    pub error: String,
}

/// One tool the agent called.
#[derive(Debug, Clone)]
pub struct ToolView {
    /// Tool name.
    pub name: String,
    /// What kind: transfer, booking, availability, keys, hang-up or function.
    pub kind: &'static str,
    /// Arguments, compact JSON.
    pub arguments: String,
    /// Result, compact JSON, or the error.
    pub outcome: String,
    /// Whether it failed.
    pub failed: bool,
    /// Latency, ms.
    pub latency_ms: i64,
}

/// One webhook delivery.
#[derive(Debug, Clone)]
pub struct DeliveryView {
    /// Event kind.
    pub event: String,
    /// Event id.
    pub event_id: String,
    /// pending, delivered or failed.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// The last error.
    pub last_error: String,
    /// Queued, IST.
    pub created: String,
}

/// The header of a call row, with relative times from `now_ms`.
pub fn header(detail: &CallDetailRow, now_ms: i64) -> CallHeader {
    let call = &detail.call;
    let optional_time = |at: Option<i64>| at.map(ist_time).unwrap_or_else(|| "—".into());
    CallHeader {
        id: call.id.to_string(),
        name: if call.target_name.trim().is_empty() {
            call.phone.clone()
        } else {
            call.target_name.clone()
        },
        phone: call.phone.clone(),
        from_number: call.from_number.clone(),
        direction: call.direction.as_str(),
        to_number: call.to_number.clone(),
        agent_id: call.agent_id.clone(),
        agent_name: call.agent_name.clone(),
        agent_link: call
            .agent_id
            .parse::<AgentId>()
            .ok()
            .map(|id| format!("/agents/{id}")),
        status: status_label(&call.status),
        status_class: status_class(&call.status),
        raw_status: call.status.clone(),
        ended_reason: call.ended_reason.clone().unwrap_or_default(),
        provider: call.provider.clone(),
        duration: duration(call.duration_seconds),
        cost: rupees(call.cost_paise),
        created: ist_time(call.created_at),
        created_ago: ago(call.created_at, now_ms),
        answered: optional_time(call.answered_at),
        ended: optional_time(call.ended_at),
        attempt: call.attempt,
        batch_id: call.batch_id.map(|id| id.to_string()),
        campaign: call.campaign_name.clone().filter(|n| !n.is_empty()),
        transfer: call.transferred_to.as_ref().map(|to| {
            let mut text = to.clone();
            if let Some(status) = &call.transfer_status {
                text.push_str(&format!(" ({status}"));
                if let Some(seconds) = call.transfer_duration_seconds {
                    text.push_str(&format!(", {}", duration(seconds)));
                }
                text.push(')');
            }
            text
        }),
        booking: call.calendar_status.as_ref().map(|status| {
            match (&call.calendar_event_url, &call.calendar_error) {
                (Some(url), _) if status == "booked" => format!("booked: {url}"),
                (_, Some(error)) => format!("{status}: {error}"),
                _ => status.clone(),
            }
        }),
        tokens: format!(
            "{} prompt / {} completion",
            detail.llm_prompt_tokens, detail.llm_completion_tokens
        ),
    }
}

/// `m:ss` for a number of seconds.
fn clock_text(seconds: f64) -> String {
    let whole = seconds.max(0.0) as i64;
    format!("{}:{:02}", whole / 60, whole % 60)
}

/// The transcript turns, each with where it starts in the recording: a
/// turn is stored when it ends, so it starts where the one before it ended
/// (the first at the answer, where the recording starts).
pub fn turns(
    turns: &[CallTurnRow],
    answered_at: Option<i64>,
    tools: &[ToolCallRow],
) -> Vec<TurnView> {
    let origin = answered_at.or_else(|| turns.first().map(|t| t.created_at));
    let mut previous_end = 0.0_f64;
    turns
        .iter()
        .map(|turn| {
            let start = previous_end;
            if let Some(origin) = origin {
                previous_end = ((turn.created_at - origin) as f64 / 1000.0).max(start);
            }
            let agent = turn.speaker == "assistant";
            TurnView {
                speaker: if agent { "Agent" } else { "Caller" },
                class: if agent { "turn-agent" } else { "turn-caller" },
                text: turn.text.clone(),
                seek: format!("{start:.2}"),
                at: clock_text(start),
                tools: tools
                    .iter()
                    .filter(|t| t.turn_seq == turn.seq)
                    .map(|t| t.name.clone())
                    .collect(),
            }
        })
        .collect()
}

/// The latency bars of the call's stored `latencies` JSON array, scaled to the slowest reply.
pub fn latencies(call_id: CallId, stored: &str) -> StoreResult<Vec<LatencyView>> {
    const STAGES: [(&str, &str, &str); 5] = [
        ("endpointingMs", "Endpointing", "lat-endpoint"),
        ("asrMs", "Speech to text", "lat-asr"),
        ("llmFirstTokenMs", "LLM first token", "lat-llm"),
        ("ttsFirstByteMs", "TTS first audio", "lat-tts"),
        ("engineOverheadMs", "Engine", "lat-engine"),
    ];
    let Value::Array(items) = decode_json::<Value>("calls", "latencies", call_id, stored)? else {
        return Ok(Vec::new());
    };
    let ms = |item: &Value, key: &str| item.get(key).and_then(Value::as_u64).unwrap_or(0);
    let slowest = items
        .iter()
        .map(|item| ms(item, "totalMs").max(STAGES.iter().map(|(key, _, _)| ms(item, key)).sum()))
        .max()
        .unwrap_or(0)
        .max(1);
    Ok(items
        .iter()
        .enumerate()
        .map(|(index, item)| LatencyView {
            reply: index + 1,
            total_ms: ms(item, "totalMs"),
            parts: STAGES
                .iter()
                .map(|(key, label, class)| {
                    let value = ms(item, key);
                    LatencyPart {
                        label,
                        class,
                        ms: value,
                        width: format!("{:.1}", value as f64 * 100.0 / slowest as f64),
                    }
                })
                .collect(),
        })
        .collect())
}

/// The status history.
pub fn history(events: &[CallEventRow]) -> Vec<HistoryView> {
    events
        .iter()
        .map(|event| HistoryView {
            status: status_label(&event.status),
            class: status_class(&event.status),
            at: ist_time(event.at),
        })
        .collect()
}

/// A JSON value as a cell: strings as they are, null as empty, the rest compact.
fn value_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The analysis panel; `keypad` is the call's stored `extracted` (keypad choices win).
pub fn analysis(row: &AnalysisRow, keypad: &str) -> StoreResult<AnalysisPanel> {
    let parse = |table: &'static str, column: &'static str, text: Option<&str>| {
        text.map(|t| decode_json::<Value>(table, column, row.call_id, t))
            .transpose()
    };
    let mut fields: Vec<(String, String)> = Vec::new();
    for source in [
        parse(
            "call_analyses",
            "structured_data",
            row.structured_data.as_deref(),
        )?,
        parse("calls", "extracted", Some(keypad))?,
    ]
    .into_iter()
    .flatten()
    {
        if let Value::Object(map) = source {
            for (key, value) in map {
                let text = value_text(&value);
                match fields.iter_mut().find(|(k, _)| *k == key) {
                    Some(existing) => existing.1 = text,
                    None => fields.push((key, text)),
                }
            }
        }
    }
    let verdict = parse("call_analyses", "success", row.success.as_deref())?;
    let verdict_text = match verdict.as_ref().and_then(|v| v.get("value")) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let name = item.get("name").and_then(Value::as_str).unwrap_or("?");
                let pass = item.get("pass").and_then(Value::as_bool).unwrap_or(false);
                format!("{name}: {}", if pass { "pass" } else { "fail" })
            })
            .collect::<Vec<_>>()
            .join(", "),
        Some(value) => value_text(value),
        None => String::new(),
    };
    Ok(AnalysisPanel {
        status: row.status.clone(),
        summary: row.summary.clone().unwrap_or_default(),
        fields,
        verdict: verdict_text,
        verdict_class: match row.success_pass {
            Some(true) => "pass",
            Some(false) => "fail",
            None => "",
        },
        reason: verdict
            .as_ref()
            .and_then(|v| v.get("reason"))
            .map(value_text)
            .unwrap_or_default(),
        error: row.error.clone().unwrap_or_default(),
        model: row
            .model
            .as_ref()
            .map(|model| {
                format!(
                    "{model} · {} prompt / {} completion tokens · {} ms",
                    row.prompt_tokens, row.completion_tokens, row.latency_ms
                )
            })
            .unwrap_or_default(),
    })
}

/// The scorecard panel.
pub fn scorecard(row: &RatingRow) -> StoreResult<ScorecardPanel> {
    let columns = match decode_json::<Value>("ratings", "columns", row.call_id, &row.columns)? {
        Value::Array(items) => items
            .iter()
            .map(|item| {
                (
                    item.get("name").map(value_text).unwrap_or_default(),
                    item.get("score").map(value_text).unwrap_or_default(),
                    item.get("reason").map(value_text).unwrap_or_default(),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(ScorecardPanel {
        status: row.status.clone(),
        overall: row
            .overall
            .map(|score| format!("{score:.1}"))
            .unwrap_or_default(),
        columns,
        error: row.last_error.clone().unwrap_or_default(),
    })
}

/// What a tool does, by its name.
fn tool_kind(name: &str) -> &'static str {
    match name {
        "transfer_call" | "transferCall" => "transfer",
        "book_appointment" | "bookAppointment" => "booking",
        "check_availability" | "checkAvailability" => "availability",
        "dtmf" => "keys",
        "end_call" | "endCall" => "hang-up",
        _ => "function",
    }
}

/// The tool calls of the call `call_id`.
pub fn tools(call_id: CallId, rows: &[ToolCallRow]) -> StoreResult<Vec<ToolView>> {
    rows.iter()
        .map(|row| {
            let compact = |column: &'static str, text: &str| {
                let id = format!("{call_id}#{}", row.seq);
                decode_json::<Value>("call_tool_calls", column, id, text).map(|v| v.to_string())
            };
            Ok(ToolView {
                name: row.name.clone(),
                kind: tool_kind(&row.name),
                arguments: compact("arguments", &row.arguments)?,
                outcome: match (&row.error, &row.result) {
                    (Some(error), _) => error.clone(),
                    (None, Some(result)) => compact("result", result)?,
                    (None, None) => String::new(),
                },
                failed: row.error.is_some(),
                latency_ms: row.latency_ms,
            })
        })
        .collect()
}

/// The webhook deliveries.
pub fn deliveries(rows: &[DeliveryLogRow]) -> Vec<DeliveryView> {
    rows.iter()
        .map(|row| DeliveryView {
            event: row.event.clone(),
            event_id: row.event_id.clone(),
            status: row.status.clone(),
            attempts: row.attempts,
            last_error: row.last_error.clone().unwrap_or_default(),
            created: ist_time(row.created_at),
        })
        .collect()
}

/// Seconds of audio in a stored recording: the WAV's samples after its
/// header (the Ogg copy is never the main format's size).
pub fn recording_seconds(file: &RecordingFileRow) -> f64 {
    if file.format == "wav" {
        (file.bytes - WAV_HEADER_BYTES).max(0) as f64 / WAV_BYTES_PER_SECOND as f64
    } else {
        0.0
    }
}

/// ISO time of a Unix ms, for `<time datetime>`.
pub fn machine_time(at_ms: i64) -> String {
    iso(at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(seq: i64, speaker: &str, text: &str, at: i64) -> CallTurnRow {
        CallTurnRow {
            seq,
            speaker: speaker.into(),
            text: text.into(),
            created_at: at,
        }
    }

    #[test]
    fn a_turn_starts_where_the_one_before_it_ended() {
        let rows = [
            turn(0, "assistant", "Hello", 10_000 + 2_500),
            turn(1, "user", "Hi", 10_000 + 6_000),
            turn(2, "assistant", "Bye", 10_000 + 9_250),
        ];
        let views = turns(&rows, Some(10_000), &[]);
        let seeks: Vec<&str> = views.iter().map(|t| t.seek.as_str()).collect();
        assert_eq!(seeks, ["0.00", "2.50", "6.00"]);
        assert_eq!(views[1].speaker, "Caller");
        assert_eq!(views[2].at, "0:06");
    }

    #[test]
    fn latency_bars_scale_to_the_slowest_reply() {
        let call = CallId::new();
        let bars = latencies(
            call,
            r#"[{"totalMs": 1000, "endpointingMs": 200, "asrMs": 100, "llmFirstTokenMs": 500, "ttsFirstByteMs": 150, "engineOverheadMs": 50},
                {"totalMs": 500, "endpointingMs": 100, "asrMs": 100, "llmFirstTokenMs": 200, "ttsFirstByteMs": 50, "engineOverheadMs": 50}]"#,
        );
        let bars = bars.unwrap();
        assert_eq!(bars.len(), 2);
        assert_eq!(bars[0].parts[2].width, "50.0");
        assert_eq!(bars[1].parts[0].width, "10.0");
        assert_eq!(bars[1].total_ms, 500);
        assert!(latencies(call, "{}").unwrap().is_empty());
        assert!(latencies(call, "not json").is_err());
    }

    #[test]
    fn tools_are_sorted_into_kinds() {
        assert_eq!(tool_kind("transfer_call"), "transfer");
        assert_eq!(tool_kind("book_appointment"), "booking");
        assert_eq!(tool_kind("lookup_order"), "function");
    }
}

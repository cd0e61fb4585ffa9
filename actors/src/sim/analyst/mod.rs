//! The sim analyst: the sim LLM's deterministic post-call analysis. It reads the transcript
//! for the values the callee said (`extraction.rs`, on the readings of `words.rs`,
//! `numbers.rs`, `choices.rs`, `dates.rs` and `free_text.rs`), summarizes what the callee said
//! and grades the call by the agent's rubric. It answers the analysis contract of
//! [`crate::providers::analysis`], which it imports and which never imports it.

pub mod choices;
pub mod dates;
pub mod extraction;
pub mod free_text;
pub mod numbers;
pub mod words;

use serde_json::{Map, Value, json};

use crate::providers::analysis::{
    AnalysisField, AnalysisReply, AnalysisRequest, Rubric, SuccessPlan, split_name,
};
use crate::providers::scorecard::CALLEE;
use dates::{Ymd, today_utc};
use extraction::{Found, answer_after, extract};
use words::{field_topic, hits, topic_stems, words};

/// How well a call that ended for `reason` ran to its natural end, 0–1.
fn ending_quality(reason: &str) -> f64 {
    match reason {
        "agent-hangup" => 1.0,
        "caller-hangup" => 0.8,
        "max-duration" => 0.6,
        "silence-timeout" => 0.4,
        _ => 0.5,
    }
}

/// How a call that ended for `reason` ended, in words.
fn ending_words(reason: &str) -> &'static str {
    match reason {
        "agent-hangup" => "the agent closed the call",
        "caller-hangup" => "the callee hung up",
        "max-duration" => "it reached its time limit",
        "silence-timeout" => "the callee went silent",
        "canceled" => "it was canceled",
        r if r.ends_with("-error") => "a technical failure",
        _ => "",
    }
}

/// Whether a schema lets a value be `null` (no type, or one that lists `null`; no `enum`, or
/// one that lists `null`).
fn allows_null(schema: &Value) -> bool {
    let typed = match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => true,
    };
    typed
        && schema
            .get("enum")
            .and_then(Value::as_array)
            .is_none_or(|options| options.contains(&Value::Null))
}

/// The sim LLM's analysis: values read from the callee's answers (see [`extract`]), a summary
/// built from what the callee said, and a verdict from how many of the plan's fields (required
/// ones above all) the call yielded and how it ended. Deterministic: the same request always
/// gets the same answer, except that a date said without its year is read as the next such day
/// from today (UTC).
pub fn sim_analysis(request: &AnalysisRequest) -> AnalysisReply {
    analyze(request, today_utc())
}

fn analyze(request: &AnalysisRequest, today: Ymd) -> AnalysisReply {
    let fields = request.effective_fields();
    let found = extract(&fields, &request.transcript, today);
    let user_properties = request
        .schema
        .as_ref()
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    let mut data = Map::new();
    for (field, found) in fields.iter().zip(&found) {
        match found {
            Some(found) => {
                data.insert(field.name.clone(), found.value.clone());
            }
            None => {
                // A user's schema may not allow null: a key it does not require is left out
                // rather than break it; one it requires stays null, as nothing true fits there.
                let leave_out = !field.required
                    && user_properties
                        .and_then(|p| p.get(&field.name))
                        .is_some_and(|p| !allows_null(p));
                if !leave_out {
                    data.insert(field.name.clone(), Value::Null);
                }
            }
        }
    }
    let summary = request
        .summary_prompt
        .as_ref()
        .map(|_| summarize(&fields, &found, request));
    let success = request
        .success
        .as_ref()
        .map(|plan| verdict(plan, request, &fields, &found));
    AnalysisReply {
        summary,
        structured_data: data,
        success,
    }
}

/// A field's name as words (`noticePeriodDays` → "notice period days").
fn label(field: &AnalysisField) -> String {
    split_name(&field.name).join(" ")
}

/// A value as the summary says it.
fn spoken(value: &Value) -> String {
    match value {
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

fn says_goodbye(text: &str) -> bool {
    words(text)
        .iter()
        .any(|w| w == "bye" || w == "goodbye" || w == "good-bye")
}

fn summarize(
    fields: &[AnalysisField],
    found: &[Option<Found>],
    request: &AnalysisRequest,
) -> String {
    let ended = &request.ended_reason;
    let how = match ending_words(ended) {
        "" => format!("The call ended by {ended}."),
        words => format!("The call ended by {ended} ({words})."),
    };
    let answers: Vec<&str> = request
        .transcript
        .iter()
        .filter(|t| t.speaker == CALLEE && !t.text.trim().is_empty())
        .map(|t| t.text.trim())
        .collect();
    let agent_turns = request
        .transcript
        .iter()
        .filter(|t| t.speaker != CALLEE && !t.text.trim().is_empty())
        .count();
    if answers.is_empty() {
        return format!(
            "The agent spoke {agent_turns} time(s) but the callee never answered. {how}"
        );
    }
    let mut parts = Vec::new();
    if fields.is_empty() {
        let quoted: Vec<String> = answers
            .iter()
            .take(3)
            .map(|a| {
                let mut a = (*a).to_owned();
                if a.chars().count() > 80 {
                    a = a.chars().take(77).collect::<String>() + "...";
                }
                format!("\"{a}\"")
            })
            .collect();
        parts.push(format!(
            "The callee spoke {} time(s), saying {}.",
            answers.len(),
            quoted.join(", then ")
        ));
    } else {
        let labels: Vec<String> = fields.iter().map(label).collect();
        parts.push(format!("The agent asked about {}.", labels.join(", ")));
        let given: Vec<String> = fields
            .iter()
            .zip(found)
            .filter_map(|(f, v)| {
                v.as_ref()
                    .map(|v| format!("{} {}", label(f), spoken(&v.value)))
            })
            .collect();
        let missing: Vec<String> = fields
            .iter()
            .zip(found)
            .filter(|(_, v)| v.is_none())
            .map(|(f, _)| label(f))
            .collect();
        if !given.is_empty() {
            parts.push(format!("The callee gave {}.", given.join(", ")));
        }
        if !missing.is_empty() {
            parts.push(format!("The callee did not give {}.", missing.join(", ")));
        }
    }
    if answers.iter().any(|a| says_goodbye(a)) {
        parts.push("The callee said goodbye.".to_owned());
    }
    parts.push(how);
    parts.join(" ")
}

/// The verdict. The call scores a percentage: the share of fields yielded, each required field
/// weighing three times an optional one, times how well the call ended ([`ending_quality`]),
/// at most 45 % while a required field is missing or the callee never spoke. Every rubric reads
/// that one score, so they agree on [`verdict_passes`]: pass at 60 % or more, `score / 10` on
/// the 1–10 scale, `excellent` from 85 %, `good` from 60 %, `fair` from 35 %. A checklist
/// criterion passes when the field it names was yielded, or, naming no field, when the call
/// talked about it and the callee answered.
fn verdict(
    plan: &SuccessPlan,
    request: &AnalysisRequest,
    fields: &[AnalysisField],
    found: &[Option<Found>],
) -> Value {
    let callee_spoke = request
        .transcript
        .iter()
        .any(|t| t.speaker == CALLEE && !t.text.trim().is_empty());
    let weight = |f: &AnalysisField| if f.required { 3.0 } else { 1.0 };
    let total: f64 = fields.iter().map(weight).sum();
    let yielded: f64 = fields
        .iter()
        .zip(found)
        .filter(|(_, v)| v.is_some())
        .map(|(f, _)| weight(f))
        .sum();
    let coverage = if fields.is_empty() {
        if callee_spoke { 1.0 } else { 0.0 }
    } else {
        yielded / total
    };
    let missing_required: Vec<&str> = fields
        .iter()
        .zip(found)
        .filter(|(f, v)| f.required && v.is_none())
        .map(|(f, _)| f.name.as_str())
        .collect();
    let missing_optional: Vec<&str> = fields
        .iter()
        .zip(found)
        .filter(|(f, v)| !f.required && v.is_none())
        .map(|(f, _)| f.name.as_str())
        .collect();
    let mut score = coverage * ending_quality(&request.ended_reason);
    if !missing_required.is_empty() || !callee_spoke {
        score = score.min(0.45);
    }
    let percent = (score * 100.0).round().clamp(0.0, 100.0) as i64;
    let got = found.iter().filter(|v| v.is_some()).count();
    let mut reason = if fields.is_empty() {
        if callee_spoke {
            "The callee took part".to_owned()
        } else {
            "The callee never spoke".to_owned()
        }
    } else if missing_required.is_empty() && missing_optional.is_empty() {
        format!("The call yielded every field ({got} of {})", fields.len())
    } else {
        format!("The call yielded {got} of {} fields", fields.len())
    };
    if !missing_required.is_empty() {
        reason.push_str(&format!(
            "; missing required {}",
            missing_required.join(", ")
        ));
    }
    if !missing_optional.is_empty() {
        reason.push_str(&format!("; missing {}", missing_optional.join(", ")));
    }
    let value = match plan.rubric {
        Rubric::PassFail => json!(percent >= 60),
        Rubric::NumericScale => json!((percent / 10).clamp(1, 10)),
        Rubric::DescriptiveScale => json!(match percent {
            85.. => "excellent",
            60.. => "good",
            35.. => "fair",
            _ => "poor",
        }),
        Rubric::Percentage => json!(percent as f64),
        Rubric::Checklist => {
            let checks: Vec<(String, bool)> = plan
                .criteria
                .iter()
                .map(|c| {
                    let topic = topic_stems(&format!("{} {}", c.name, c.description));
                    (
                        c.name.clone(),
                        criterion_met(&topic, request, fields, found),
                    )
                })
                .collect();
            let met = checks.iter().filter(|(_, pass)| *pass).count();
            reason.push_str(&format!("; {met} of {} criteria met", checks.len()));
            Value::Array(
                checks
                    .into_iter()
                    .map(|(name, pass)| json!({"name": name, "pass": pass && callee_spoke}))
                    .collect(),
            )
        }
    };
    reason.push_str(&format!("; it ended by {}.", request.ended_reason));
    json!({"value": value, "reason": reason})
}

/// Whether a checklist criterion about `topic` was met: the field sharing the most of its
/// words was yielded; with no such field, an agent turn about it got an answer or the callee
/// spoke of it.
fn criterion_met(
    topic: &[String],
    request: &AnalysisRequest,
    fields: &[AnalysisField],
    found: &[Option<Found>],
) -> bool {
    if topic.is_empty() {
        return false;
    }
    let mut best: Option<(usize, bool)> = None;
    for (field, value) in fields.iter().zip(found) {
        let shared = field_topic(field)
            .iter()
            .filter(|s| topic.contains(s))
            .count();
        if shared > 0 && best.is_none_or(|(most, _)| shared > most) {
            best = Some((shared, value.is_some()));
        }
    }
    if let Some((_, yielded)) = best {
        return yielded;
    }
    let transcript = &request.transcript;
    transcript.iter().enumerate().any(|(at, t)| {
        hits(topic, &t.text) > 0
            && (t.speaker == CALLEE || !answer_after(transcript, at).is_empty())
    })
}

#[cfg(test)]
mod tests;

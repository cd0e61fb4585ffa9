//! The caller script a sim callee follows: its steps (lines, keys, interruptions,
//! backchannels, a phone menu, hanging up), read from a call's `simScript` variable, and the
//! lines it says, as the sim ASR will transcribe them.

use std::time::Duration;

use crate::sim::lines::BACKCHANNEL_MARK;

/// One step of the caller script.
///
/// A line may pause inside: `"I live in [pause 1500] Pune"` says "I live in", stays quiet
/// for 1.5 s, then says "Pune" (see [`crate::sim::lines`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptStep {
    /// Say a line once the agent has finished its turn.
    Say(String),
    /// Say a backchannel ("uh-huh") `after` the agent started talking, and keep listening:
    /// it expects no reply, and the next step waits for the agent's turn to end as before.
    Backchannel {
        /// What is said.
        text: String,
        /// Delay from the start of the agent's audio.
        after: Duration,
    },
    /// Press a key once the agent has finished its turn.
    Dtmf(char),
    /// Say a line `after` the agent started talking, without waiting for it to finish.
    Interrupt {
        /// The line.
        text: String,
        /// Delay from the start of the agent's audio.
        after: Duration,
    },
    /// Hang up once the agent has finished its turn.
    Hangup,
    /// An automated phone menu: say the options, then listen to the agent's audio for the
    /// key it presses (with the media crate's DTMF detector). Hearing `expect`, the script
    /// goes on; hearing nothing or another key, the menu hangs up.
    Menu {
        /// The options read out ("For sales, press 1. For support, press 2.").
        text: String,
        /// The key that reaches the option the test expects.
        expect: char,
    },
}

/// Why a caller script could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScriptError {
    /// The value is not a JSON array (or a string holding one).
    #[error("simScript must be a JSON array of lines and {{\"dtmf\":\"1\"}} steps: {0}")]
    NotAnArray(String),
    /// One element is neither a line nor a known step.
    #[error("simScript step {index} is not a line or a known step: {step}")]
    BadStep {
        /// Position in the array.
        index: usize,
        /// The element as JSON.
        step: String,
    },
}

/// Reads the variable `simScript`: a JSON array (or a JSON string holding one) of lines and
/// steps `{"dtmf":"12"}`, `{"say":"…"}`, `{"interrupt":"…","afterMs":800}`,
/// `{"backchannel":"uh-huh","afterMs":800}`, `{"hangup":true}`,
/// `{"menu":"For sales, press 1. For support, press 2.","expect":"2"}`. A line may hold
/// pauses, `"I live in [pause 1500] Pune"`.
pub fn parse_sim_script(value: &serde_json::Value) -> Result<Vec<ScriptStep>, ScriptError> {
    use serde_json::Value;
    let items = match value {
        Value::Array(items) => items.clone(),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => items,
            _ => return Err(ScriptError::NotAnArray(text.clone())),
        },
        other => return Err(ScriptError::NotAnArray(other.to_string())),
    };
    let mut steps = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let bad = || ScriptError::BadStep {
            index,
            step: item.to_string(),
        };
        match item {
            Value::String(line) => steps.push(ScriptStep::Say(line.clone())),
            Value::Object(step) => {
                if let Some(keys) = step.get("dtmf") {
                    let keys = match keys {
                        Value::String(keys) => keys.clone(),
                        Value::Number(key) => key.to_string(),
                        _ => return Err(bad()),
                    };
                    if keys.is_empty() {
                        return Err(bad());
                    }
                    for key in keys.chars() {
                        if voxline_media::dtmf::dtmf_frequencies(key).is_none() {
                            return Err(bad());
                        }
                        steps.push(ScriptStep::Dtmf(key));
                    }
                } else if let Some(Value::String(line)) = step.get("menu") {
                    let expect = step
                        .get("expect")
                        .and_then(Value::as_str)
                        .and_then(|keys| keys.chars().next())
                        .filter(|key| voxline_media::dtmf::dtmf_frequencies(*key).is_some())
                        .ok_or_else(bad)?;
                    steps.push(ScriptStep::Menu {
                        text: line.clone(),
                        expect,
                    });
                } else if let Some(Value::String(line)) = step.get("say") {
                    steps.push(ScriptStep::Say(line.clone()));
                } else if let Some(Value::String(line)) = step.get("backchannel") {
                    let after_ms = step.get("afterMs").and_then(Value::as_u64).unwrap_or(800);
                    steps.push(ScriptStep::Backchannel {
                        text: line.clone(),
                        after: Duration::from_millis(after_ms),
                    });
                } else if let Some(Value::String(line)) = step.get("interrupt") {
                    let after_ms = step.get("afterMs").and_then(Value::as_u64).unwrap_or(1000);
                    steps.push(ScriptStep::Interrupt {
                        text: line.clone(),
                        after: Duration::from_millis(after_ms),
                    });
                } else if step.get("hangup").is_some_and(|v| v != &Value::Bool(false)) {
                    steps.push(ScriptStep::Hangup);
                } else {
                    return Err(bad());
                }
            }
            _ => return Err(bad()),
        }
    }
    Ok(steps)
}

/// The script used when a call has no `simScript`.
pub fn default_sim_script() -> Vec<ScriptStep> {
    [
        "Hello, yes, this is me speaking.",
        "That sounds interesting, please tell me more.",
        "Okay, thank you very much. Goodbye!",
    ]
    .into_iter()
    .map(|line| ScriptStep::Say(line.to_owned()))
    .collect()
}

/// The lines a script speaks, in order: what the sim ASR transcribes (backchannels marked
/// as such, so the sim LLM does not count them as the caller's turns).
pub fn spoken_lines(steps: &[ScriptStep]) -> Vec<String> {
    steps
        .iter()
        .filter_map(|step| match step {
            ScriptStep::Say(text)
            | ScriptStep::Interrupt { text, .. }
            | ScriptStep::Menu { text, .. } => Some(text.clone()),
            ScriptStep::Backchannel { text, .. } => Some(format!("{BACKCHANNEL_MARK} {text}")),
            ScriptStep::Dtmf(_) | ScriptStep::Hangup => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scripts_parse_lines_and_steps() {
        let steps = parse_sim_script(&json!([
            "Hello",
            {"dtmf": "1#"},
            {"dtmf": 2},
            {"interrupt": "Wait!", "afterMs": 500},
            {"backchannel": "uh-huh", "afterMs": 600},
            {"backchannel": "mm"},
            {"hangup": true}
        ]))
        .unwrap();
        assert_eq!(
            steps,
            [
                ScriptStep::Say("Hello".into()),
                ScriptStep::Dtmf('1'),
                ScriptStep::Dtmf('#'),
                ScriptStep::Dtmf('2'),
                ScriptStep::Interrupt {
                    text: "Wait!".into(),
                    after: Duration::from_millis(500)
                },
                ScriptStep::Backchannel {
                    text: "uh-huh".into(),
                    after: Duration::from_millis(600)
                },
                ScriptStep::Backchannel {
                    text: "mm".into(),
                    after: Duration::from_millis(800)
                },
                ScriptStep::Hangup,
            ]
        );
        assert_eq!(
            spoken_lines(&steps),
            ["Hello", "Wait!", "[backchannel] uh-huh", "[backchannel] mm"]
        );
        let nested = parse_sim_script(&json!("[\"Hi\", {\"dtmf\":\"5\"}]")).unwrap();
        assert_eq!(
            nested,
            [ScriptStep::Say("Hi".into()), ScriptStep::Dtmf('5')]
        );
        assert!(parse_sim_script(&json!({"dtmf": "1"})).is_err());
        assert!(parse_sim_script(&json!([{"dtmf": "x"}])).is_err());
        assert!(parse_sim_script(&json!([42])).is_err());
        assert_eq!(spoken_lines(&default_sim_script()).len(), 3);
    }
}

//! The sim LLM as post-call work uses it: answering at once, unless a call
//! variable (in milliseconds) slows it, so tests can make a job finish after
//! the webhook's wait.

use serde_json::{Map, Value};
use std::time::Duration;
use voxline_actors::providers::SimConfig;

/// The sim LLM config for a post-call job on a call with `variables` (JSON),
/// delayed by the number of milliseconds in `variable`, if any.
pub fn sim_config(variables: &str, variable: &str) -> SimConfig {
    let variables: Map<String, Value> = serde_json::from_str(variables).unwrap_or_default();
    let delay = variables.get(variable).and_then(Value::as_u64).unwrap_or(0);
    SimConfig {
        llm_first_token: Duration::from_millis(delay),
        llm_token_interval: Duration::ZERO,
        ..SimConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_comes_from_the_named_variable() {
        assert_eq!(sim_config("{}", "d").llm_first_token, Duration::ZERO);
        assert_eq!(
            sim_config(r#"{"d": 1500}"#, "d").llm_first_token,
            Duration::from_millis(1500)
        );
        assert_eq!(
            sim_config(r#"{"e": 1500}"#, "d").llm_first_token,
            Duration::ZERO
        );
        assert_eq!(sim_config("not json", "d").llm_first_token, Duration::ZERO);
    }
}

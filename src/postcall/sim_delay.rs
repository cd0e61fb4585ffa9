//! The sim LLM as post-call work uses it: answering at once, unless a call
//! variable (in milliseconds) slows it, so tests can make a job finish after
//! the webhook's wait.

use crate::domain::CallId;
use crate::store::{StoreResult, decode_json};
use serde_json::{Map, Value};
use std::time::Duration;
use voxline_actors::sim::providers::SimConfig;

/// The sim LLM config for a post-call job on the call `call_id` with
/// `variables` (its stored JSON), delayed by the number of milliseconds in
/// `variable`, if any; stored variables that no longer parse are an error.
pub fn sim_config(call_id: CallId, variables: &str, variable: &str) -> StoreResult<SimConfig> {
    let variables: Map<String, Value> = decode_json("calls", "variables", call_id, variables)?;
    let delay = variables.get(variable).and_then(Value::as_u64).unwrap_or(0);
    Ok(SimConfig {
        llm_first_token: Duration::from_millis(delay),
        llm_token_interval: Duration::ZERO,
        ..SimConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    fn delay(variables: &str) -> Duration {
        sim_config(CallId::new(), variables, "d")
            .unwrap()
            .llm_first_token
    }

    #[test]
    fn the_delay_comes_from_the_named_variable() {
        assert_eq!(delay("{}"), Duration::ZERO);
        assert_eq!(delay(r#"{"d": 1500}"#), Duration::from_millis(1500));
        assert_eq!(delay(r#"{"e": 1500}"#), Duration::ZERO);
    }

    #[test]
    fn variables_that_do_not_parse_are_an_error_not_no_delay() {
        let call = CallId::new();
        match sim_config(call, "not json", "d") {
            Err(StoreError::CorruptColumn {
                table, column, id, ..
            }) => {
                assert_eq!((table, column), ("calls", "variables"));
                assert_eq!(id, call.to_string());
            }
            other => panic!("expected CorruptColumn, got {other:?}"),
        }
    }
}

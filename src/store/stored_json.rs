//! Reading JSON text the store keeps in a column. A value that no longer
//! parses is an error naming the table, column and row, logged where it is
//! found, never an empty default: a silent default would show a customer
//! nothing where their data was, and hide the corruption from operators.

use super::StoreError;
use serde::de::DeserializeOwned;
use std::fmt::Display;

/// Parses the JSON `text` stored in `table.column` of the row `id`; logs and
/// returns [`StoreError::CorruptColumn`] when it does not parse as `T`.
pub fn decode_json<T: DeserializeOwned>(
    table: &'static str,
    column: &'static str,
    id: impl Display,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|err| {
        let id = id.to_string();
        tracing::error!(
            table,
            column,
            row_id = %id,
            error = %err,
            "stored JSON does not parse"
        );
        StoreError::CorruptColumn {
            table,
            column,
            id,
            detail: err.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    #[test]
    fn a_stored_value_that_parses_is_returned() {
        let map: Map<String, Value> =
            decode_json("calls", "variables", "c1", r#"{"name": "Asha"}"#).unwrap();
        assert_eq!(map["name"], "Asha");
        let list: Vec<String> = decode_json("webhooks", "events", 7, r#"["a","b"]"#).unwrap();
        assert_eq!(list, ["a", "b"]);
    }

    #[test]
    fn a_stored_value_that_does_not_parse_names_its_row() {
        let err = decode_json::<Vec<String>>("ratings", "columns", "r-9", "{not json").unwrap_err();
        let StoreError::CorruptColumn {
            table,
            column,
            id,
            detail,
        } = &err
        else {
            panic!("expected CorruptColumn, got {err:?}");
        };
        assert_eq!(
            (*table, *column, id.as_str()),
            ("ratings", "columns", "r-9")
        );
        assert!(!detail.is_empty());
        let text = err.to_string();
        assert!(
            text.contains("ratings.columns") && text.contains("r-9"),
            "{text}"
        );
    }

    #[test]
    fn json_of_the_wrong_shape_is_corrupt_too() {
        // Valid JSON, but not what the column holds: still no default.
        let err = decode_json::<Vec<String>>("webhooks", "events", "w1", r#"{"a": 1}"#);
        assert!(matches!(err, Err(StoreError::CorruptColumn { .. })));
        let err = decode_json::<Map<String, Value>>("calls", "variables", "c1", "");
        assert!(matches!(err, Err(StoreError::CorruptColumn { .. })));
    }
}

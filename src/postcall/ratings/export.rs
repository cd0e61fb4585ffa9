//! One rating as a flat record, shared by the CSV download and the
//! spreadsheet export.

use crate::domain::clock::iso;
use crate::store::{RatingRow, StoreResult, decode_json};
use serde_json::Value;

/// Rows read per page when the spreadsheet export and the analytics walk every rating.
pub const EXPORT_PAGE_ROWS: i64 = 500;

/// The record's columns, in order.
pub const EXPORT_HEADER: [&str; 10] = [
    "call_id",
    "candidate_name",
    "phone",
    "agent_name",
    "status",
    "overall_rating",
    "scores",
    "columns_json",
    "rated_at",
    "call_created_at",
];

/// `Name=score; Name=score` of a stored columns array.
fn scores(columns: &Value) -> String {
    columns
        .as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| {
                    let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
                    let score = c.get("score").map(Value::to_string).unwrap_or_default();
                    format!("{name}={score}")
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

/// The record of one rating, aligned with [`EXPORT_HEADER`].
pub fn export_record(row: &RatingRow) -> StoreResult<Vec<String>> {
    let columns: Value = decode_json("ratings", "columns", row.call_id, &row.columns)?;
    Ok(vec![
        row.call_id.to_string(),
        row.target_name.clone(),
        row.phone.clone(),
        row.agent_name.clone(),
        row.status.clone(),
        row.overall.map(|o| o.to_string()).unwrap_or_default(),
        scores(&columns),
        row.columns.clone(),
        row.rated_at.map(iso).unwrap_or_default(),
        iso(row.call_created_at),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AgentId, CallId, OrgId};
    use crate::store::StoreError;

    fn rating(columns: &str) -> RatingRow {
        RatingRow {
            call_id: CallId::new(),
            org_id: OrgId::new(),
            agent_id: AgentId::new(),
            status: "done".into(),
            overall: Some(6.5),
            columns: columns.into(),
            template: None,
            attempts: 1,
            version: 1,
            last_error: None,
            call_created_at: 0,
            created_at: 0,
            rated_at: Some(1_000),
            target_name: "Asha".into(),
            phone: "+919845012310".into(),
            agent_name: "Screener".into(),
        }
    }

    #[test]
    fn records_flatten_the_columns() {
        let row = rating(
            r#"[{"name":"Clarity","score":7.0,"reason":"r"},{"name":"Fit","score":6.0,"reason":"s"}]"#,
        );
        let record = export_record(&row).unwrap();
        assert_eq!(record.len(), EXPORT_HEADER.len());
        assert_eq!(record[5], "6.5");
        assert_eq!(record[6], "Clarity=7.0; Fit=6.0");
        assert_eq!(record[8], "1970-01-01T00:00:01.000Z");
    }

    #[test]
    fn corrupt_columns_are_an_error_naming_the_rating() {
        let row = rating("[{\"name\":");
        match export_record(&row) {
            Err(StoreError::CorruptColumn {
                table, column, id, ..
            }) => {
                assert_eq!((table, column), ("ratings", "columns"));
                assert_eq!(id, row.call_id.to_string());
            }
            other => panic!("expected CorruptColumn, got {other:?}"),
        }
    }
}

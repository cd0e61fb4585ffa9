//! Post-call scorecards: the JSON a model is asked to fill (one score 0–10 and a reason per
//! template column). The sim LLM's deterministic scorer, which answers it, is
//! [`crate::sim::scorer`].

use serde::{Deserialize, Serialize};

/// One column of the template the model fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScorecardColumn {
    /// Column name, echoed back in the reply.
    pub name: String,
    /// What the column judges.
    #[serde(default)]
    pub description: String,
}

/// One transcript turn as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScorecardTurn {
    /// `agent` or `callee`.
    pub speaker: String,
    /// What was said.
    pub text: String,
}

/// The user message of a scorecard request: the template, the transcript and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScorecardRequest {
    /// Columns to score, in order.
    pub columns: Vec<ScorecardColumn>,
    /// The conversation, oldest first.
    pub transcript: Vec<ScorecardTurn>,
    /// Why the call ended (`agent-hangup`, `caller-hangup`, `silence-timeout`, …).
    pub ended_reason: String,
}

/// One filled column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnScore {
    /// Column name.
    pub name: String,
    /// 0 (worst) to 10 (best).
    pub score: f64,
    /// The evidence behind the score.
    #[serde(default)]
    pub reason: String,
}

/// The model's answer: `{"columns": [{name, score, reason}]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScorecardReply {
    /// One entry per template column.
    pub columns: Vec<ColumnScore>,
}

/// The JSON Schema of the answer to `card`, in the strict form OpenAI's `json_schema`
/// response format accepts (every object closed with `additionalProperties: false` and
/// listing all its properties in `required`): `{"columns": [{name, score, reason}]}`, each
/// name one of the template's column names and each score a number from 0 to 10.
pub fn answer_schema(card: &ScorecardRequest) -> serde_json::Value {
    let mut names: Vec<&str> = Vec::with_capacity(card.columns.len());
    for column in &card.columns {
        if !names.contains(&column.name.as_str()) {
            names.push(&column.name);
        }
    }
    let mut name = serde_json::json!({"type": "string"});
    // An empty enum matches nothing and servers refuse it; a template always has columns,
    // but an empty one must not read as "this server cannot do schemas".
    if !names.is_empty() {
        name["enum"] = serde_json::json!(names);
    }
    serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["columns"],
        "properties": {
            "columns": {
                "type": "array",
                "description": "One entry per template column.",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["name", "score", "reason"],
                    "properties": {
                        "name": name,
                        "score": {"type": "number", "minimum": 0, "maximum": 10},
                        "reason": {"type": "string"},
                    },
                },
            },
        },
    })
}

/// The speaker label of the person called in [`ScorecardTurn::speaker`].
pub const CALLEE: &str = "callee";

#[cfg(test)]
mod tests {
    use super::*;

    /// A request for two columns (the transcript does not shape the schema).
    fn card() -> ScorecardRequest {
        ScorecardRequest {
            columns: vec![
                ScorecardColumn {
                    name: "Experience".into(),
                    description: "Years of Rust and backend experience".into(),
                },
                ScorecardColumn {
                    name: "Interest".into(),
                    description: "Whether the candidate wants the role".into(),
                },
            ],
            transcript: Vec::new(),
            ended_reason: "agent-hangup".into(),
        }
    }

    /// Every object in `schema` is closed and requires all of its properties.
    fn assert_strict(schema: &serde_json::Value) {
        if let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) {
            assert_eq!(schema["additionalProperties"], false, "{schema}");
            let mut required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            required.sort_unstable();
            let mut keys: Vec<&str> = properties.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(required, keys, "{schema}");
            properties.values().for_each(assert_strict);
        }
        if let Some(items) = schema.get("items") {
            assert_strict(items);
        }
    }

    #[test]
    fn the_answer_schema_is_strict_and_names_the_columns() {
        let mut card = card();
        card.columns.push(card.columns[0].clone());
        let schema = answer_schema(&card);
        assert_strict(&schema);
        let item = &schema["properties"]["columns"]["items"];
        assert_eq!(
            item["properties"]["name"]["enum"],
            serde_json::json!(["Experience", "Interest"])
        );
        assert_eq!(item["properties"]["score"]["minimum"], 0);
        assert_eq!(item["properties"]["score"]["maximum"], 10);

        card.columns.clear();
        let schema = answer_schema(&card);
        assert_strict(&schema);
        assert!(
            schema["properties"]["columns"]["items"]["properties"]["name"]
                .get("enum")
                .is_none()
        );
    }
}

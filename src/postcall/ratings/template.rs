//! The template a call is scored with: the agent's `ratingTemplate`, or the
//! default one for agents without it.

use crate::domain::agent::{RatingColumn, RatingTemplate};

/// The default template's columns: (name, description).
pub const DEFAULT_COLUMNS: [(&str, &str); 4] = [
    (
        "Engagement",
        "How willing and engaged the callee was: answered the questions and stayed in the conversation",
    ),
    (
        "Clarity",
        "How clear, specific and detailed the callee's answers were",
    ),
    (
        "Relevance",
        "How well the callee's answers addressed what the agent asked about",
    ),
    (
        "Outcome",
        "Whether the call reached a natural, complete end with a positive outcome",
    ),
];

/// The template used for agents that have none (or one without columns).
pub fn default_template() -> RatingTemplate {
    RatingTemplate {
        columns: DEFAULT_COLUMNS
            .iter()
            .map(|(name, description)| RatingColumn {
                name: (*name).to_string(),
                description: (*description).to_string(),
            })
            .collect(),
    }
}

/// The agent's template when it has columns, else the default.
pub fn effective_template(agent_template: Option<&RatingTemplate>) -> RatingTemplate {
    match agent_template {
        Some(template) if !template.columns.is_empty() => template.clone(),
        _ => default_template(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_without_columns_get_the_default() {
        assert_eq!(effective_template(None).columns.len(), 4);
        let empty = RatingTemplate { columns: vec![] };
        assert_eq!(effective_template(Some(&empty)), default_template());
        let own = RatingTemplate {
            columns: vec![RatingColumn {
                name: "Rust".into(),
                description: String::new(),
            }],
        };
        assert_eq!(effective_template(Some(&own)), own);
    }
}

//! The sim scorer: how the sim LLM fills a post-call scorecard, deterministically, grading
//! each column from evidence in the transcript so different conversations get different
//! scores. It answers the contract of [`crate::providers::scorecard`].

use crate::providers::scorecard::{
    CALLEE, ColumnScore, ScorecardColumn, ScorecardReply, ScorecardRequest, ScorecardTurn,
};

/// Words too common to count as evidence of a topic.
const STOPWORDS: &[&str] = &[
    "about", "after", "also", "been", "being", "call", "callee", "caller", "could", "does", "from",
    "have", "into", "just", "more", "much", "other", "over", "person", "should", "some", "such",
    "than", "that", "their", "them", "then", "there", "these", "they", "this", "those", "very",
    "were", "what", "when", "where", "which", "while", "with", "would", "your",
];

const POSITIVE: &[&str] = &[
    "yes",
    "sure",
    "happy",
    "interested",
    "definitely",
    "okay",
    "great",
    "love",
    "glad",
    "absolutely",
    "thanks",
    "thank",
];

const NEGATIVE: &[&str] = &[
    "no",
    "not",
    "never",
    "busy",
    "don't",
    "dont",
    "can't",
    "cant",
    "stop",
    "hate",
    "wrong",
    "later",
    "unfortunately",
];

/// Lowercase words of `text`, apostrophes kept.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A crude stem, so "experience" and "experienced" meet.
fn stem(word: &str) -> &str {
    let end = word.char_indices().nth(6).map_or(word.len(), |(at, _)| at);
    &word[..end]
}

/// The topic words of a column: its name and description without filler.
fn topic_words(column: &ScorecardColumn) -> Vec<String> {
    let mut topic: Vec<String> = words(&format!("{} {}", column.name, column.description))
        .into_iter()
        .filter(|w| w.chars().count() >= 4 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w).to_owned())
        .collect();
    topic.sort();
    topic.dedup();
    topic
}

/// How well a call that ended for `reason` ran to its natural end, 0–1.
fn ending_quality(reason: &str) -> f64 {
    match reason {
        "agent-hangup" => 1.0,
        "caller-hangup" => 0.6,
        "max-duration" => 0.5,
        "canceled" => 0.3,
        "silence-timeout" => 0.2,
        _ => 0.4,
    }
}

/// The deterministic scores the sim LLM gives: each column from the callee's share of the
/// conversation, the detail of their answers, how much they said about the column's topic,
/// their tone and how the call ended.
pub fn sim_scorecard(request: &ScorecardRequest) -> ScorecardReply {
    let answers: Vec<&ScorecardTurn> = request
        .transcript
        .iter()
        .filter(|t| t.speaker == CALLEE && !t.text.trim().is_empty())
        .collect();
    let agent_turns = request.transcript.len() - answers.len();
    let callee_words: Vec<String> = answers.iter().flat_map(|t| words(&t.text)).collect();
    let callee_stems: Vec<&str> = callee_words.iter().map(|w| stem(w)).collect();
    let n_answers = answers.len();
    // The agent's last turn is usually its goodbye, not a question.
    let questions = agent_turns.saturating_sub(1).max(1);
    let participation = (n_answers as f64 / questions as f64).min(1.0);
    let avg_words = if n_answers == 0 {
        0.0
    } else {
        callee_words.len() as f64 / n_answers as f64
    };
    let detail = (avg_words / 12.0).min(1.0);
    let positive = callee_words
        .iter()
        .filter(|w| POSITIVE.contains(&w.as_str()))
        .count();
    let negative = callee_words
        .iter()
        .filter(|w| NEGATIVE.contains(&w.as_str()))
        .count();
    let tone = (0.5 + 0.15 * (positive as f64 - negative as f64)).clamp(0.0, 1.0);
    let ending = ending_quality(&request.ended_reason);
    let columns = request
        .columns
        .iter()
        .map(|column| {
            if n_answers == 0 {
                return ColumnScore {
                    name: column.name.clone(),
                    score: 0.0,
                    reason: format!(
                        "The callee said nothing; the call ended by {}.",
                        request.ended_reason
                    ),
                };
            }
            let topic = topic_words(column);
            let hits: Vec<&String> = topic
                .iter()
                .filter(|t| callee_stems.contains(&t.as_str()))
                .collect();
            let relevance = if topic.is_empty() {
                0.5
            } else {
                (hits.len() as f64 / topic.len().min(3) as f64).min(1.0)
            };
            let raw = 0.25 * participation
                + 0.30 * detail
                + 0.25 * relevance
                + 0.10 * tone
                + 0.10 * ending;
            let score = (raw * 10.0).round().clamp(0.0, 10.0);
            let mentioned = if hits.is_empty() {
                "no words about this topic".to_owned()
            } else {
                format!(
                    "spoke about {}",
                    hits.iter()
                        .map(|h| h.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            ColumnScore {
                name: column.name.clone(),
                score,
                reason: format!(
                    "{n_answers} answer(s) to {questions} question(s), {avg_words:.1} words each on average; \
                     {mentioned}; {positive} positive and {negative} negative word(s); ended by {}.",
                    request.ended_reason
                ),
            }
        })
        .collect();
    ScorecardReply { columns }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(lines: &[(&str, &str)], ended: &str) -> ScorecardRequest {
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
            transcript: lines
                .iter()
                .map(|(speaker, text)| ScorecardTurn {
                    speaker: (*speaker).into(),
                    text: (*text).into(),
                })
                .collect(),
            ended_reason: ended.into(),
        }
    }

    const ENGAGED: &[(&str, &str)] = &[
        ("agent", "Hello Asha, do you have a minute?"),
        ("callee", "Yes, sure, I have a minute."),
        ("agent", "Tell me about your experience."),
        (
            "callee",
            "I have five years of Rust experience building backend services and I want this role.",
        ),
        ("agent", "Thank you. Goodbye!"),
    ];

    #[test]
    fn scores_follow_the_transcript_and_are_deterministic() {
        let engaged = sim_scorecard(&request(ENGAGED, "agent-hangup"));
        assert_eq!(engaged, sim_scorecard(&request(ENGAGED, "agent-hangup")));
        let curt = sim_scorecard(&request(
            &[
                ("agent", "Hello, do you have a minute?"),
                ("callee", "No."),
                ("agent", "Could you tell me more?"),
                ("callee", "Not interested, bye."),
                ("agent", "Goodbye!"),
            ],
            "caller-hangup",
        ));
        assert_eq!(engaged.columns.len(), 2);
        assert_eq!(engaged.columns[0].name, "Experience");
        for (good, bad) in engaged.columns.iter().zip(&curt.columns) {
            assert!(
                good.score > bad.score,
                "{} {} vs {}",
                good.name,
                good.score,
                bad.score
            );
            assert!((0.0..=10.0).contains(&bad.score));
        }
        // The experience column found its topic in the answers; the reason says so.
        assert!(
            engaged.columns[0].reason.contains("experi"),
            "{}",
            engaged.columns[0].reason
        );
        assert!(curt.columns[0].reason.contains("no words about this topic"));
    }

    #[test]
    fn the_same_answers_score_lower_when_the_call_ends_badly() {
        let natural = sim_scorecard(&request(ENGAGED, "agent-hangup"));
        let dropped = sim_scorecard(&request(ENGAGED, "silence-timeout"));
        let total = |r: &ScorecardReply| r.columns.iter().map(|c| c.score).sum::<f64>();
        assert!(total(&natural) > total(&dropped));
    }

    #[test]
    fn a_silent_callee_scores_zero() {
        let silent = sim_scorecard(&request(
            &[("agent", "Hello?"), ("agent", "Are you there?")],
            "silence-timeout",
        ));
        assert!(silent.columns.iter().all(|c| c.score == 0.0));
        assert!(silent.columns[0].reason.contains("said nothing"));
    }
}

//! Where the sim analyst finds each field's value in the transcript: the answer to the field's
//! own question, else to the agent turn nearest its topic, else a callee turn that names it;
//! and how an answer is read for the field's type.

use serde_json::{Value, json};

use super::choices::{named_option, yes_no};
use super::dates::{Ymd, first_date};
use super::free_text::string_value;
use super::numbers::{nearest_number, number_value, numbers_in};
use super::words::{field_topic, hits, normalized, words};
use crate::providers::analysis::{AnalysisField, FieldType, question_for};
use crate::providers::scorecard::{CALLEE, ScorecardTurn};

/// The agent turns that ask `field`'s own question ([`question_for`], what the sim agent asks).
pub(super) fn asked_at(field: &AnalysisField, transcript: &[ScorecardTurn]) -> Vec<usize> {
    let question = normalized(&question_for(field));
    transcript
        .iter()
        .enumerate()
        .filter(|(_, t)| t.speaker != CALLEE && normalized(&t.text).contains(&question))
        .map(|(at, _)| at)
        .collect()
}

/// The callee's non-empty turns right after the agent turn at `at`, up to the next agent turn.
pub(super) fn answer_after(transcript: &[ScorecardTurn], at: usize) -> Vec<usize> {
    transcript
        .iter()
        .enumerate()
        .skip(at + 1)
        .take_while(|(_, t)| t.speaker == CALLEE)
        .filter(|(_, t)| !t.text.trim().is_empty())
        .map(|(i, _)| i)
        .collect()
}

pub(super) fn joined(transcript: &[ScorecardTurn], turns: &[usize]) -> String {
    turns
        .iter()
        .map(|&i| transcript[i].text.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the call yielded for one field: the value, and the callee's words it was read from.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Found {
    /// The value read.
    pub(super) value: Value,
    /// The callee's words it was read from.
    pub(super) said: String,
}

/// Reads every field's value from the transcript. For each field, in order of trust:
/// 1. the callee's answer to an agent turn that asks the field's own question
///    ([`question_for`], as the sim agent does), the latest one that holds a value;
/// 2. when that question was never asked, the answer to the agent turn that shares the most
///    words with the field (never a turn asking another field's own question);
/// 3. a callee turn anywhere in the call that names the field itself ("5 years of
///    experience", "my notice period is 30 days", "I prefer hybrid work"), the value read
///    nearest the field's words. A text field takes a turn only when it says "my … is". A
///    turn that answered another field's own question is read only when it said nothing for
///    that field (a value given out of order); one that did answer it stays that field's.
pub(super) fn extract(
    fields: &[AnalysisField],
    transcript: &[ScorecardTurn],
    today: Ymd,
) -> Vec<Option<Found>> {
    let asked: Vec<Vec<usize>> = fields.iter().map(|f| asked_at(f, transcript)).collect();
    // Per field, the callee turns of the answers to its own question that spoke to it.
    let claimed: Vec<Vec<usize>> = fields
        .iter()
        .zip(&asked)
        .map(|(field, questions)| {
            let topic = field_topic(field);
            questions
                .iter()
                .map(|&at| answer_after(transcript, at))
                .filter(|turns| speaks_to(field, &topic, &joined(transcript, turns), today))
                .flatten()
                .collect()
        })
        .collect();
    fields
        .iter()
        .enumerate()
        .map(|(n, field)| {
            let topic = field_topic(field);
            let others_questions: Vec<usize> = asked
                .iter()
                .enumerate()
                .filter(|(m, _)| *m != n)
                .flat_map(|(_, turns)| turns.iter().copied())
                .filter(|at| !asked[n].contains(at))
                .collect();
            let others_answers: Vec<usize> = claimed
                .iter()
                .enumerate()
                .filter(|(m, _)| *m != n)
                .flat_map(|(_, turns)| turns.iter().copied())
                .collect();
            for &at in asked[n].iter().rev() {
                let answer = joined(transcript, &answer_after(transcript, at));
                if let Some(found) = read(field, &topic, &answer, today, false) {
                    return Some(found);
                }
            }
            if topic.is_empty() {
                return None;
            }
            if asked[n].is_empty() {
                let mut best: Option<(usize, usize)> = None;
                for (at, turn) in transcript.iter().enumerate() {
                    if turn.speaker == CALLEE || others_questions.contains(&at) {
                        continue;
                    }
                    let n = hits(&topic, &turn.text);
                    if n > 0 && best.is_none_or(|(_, most)| n > most) {
                        best = Some((at, n));
                    }
                }
                if let Some((at, _)) = best {
                    let answer = joined(transcript, &answer_after(transcript, at));
                    if let Some(found) = read(field, &topic, &answer, today, false) {
                        return Some(found);
                    }
                }
            }
            let mut naming: Vec<(usize, usize)> = transcript
                .iter()
                .enumerate()
                .filter(|(at, t)| t.speaker == CALLEE && !others_answers.contains(at))
                .map(|(at, t)| (hits(&topic, &t.text), at))
                .filter(|(n, _)| *n > 0 && n * 2 >= topic.len())
                .collect();
            // Most of the field's words first, then the latest (a correction wins).
            naming.sort_by(|a, b| b.cmp(a));
            naming
                .into_iter()
                .find_map(|(_, at)| read(field, &topic, &transcript[at].text, today, true))
        })
        .collect()
}

/// Whether `answer`, given to `field`'s own question, spoke to it: it holds the field's value,
/// or, for a number, a number the field's bounds refuse (the answer was about the field all
/// the same, so the number beside it is not another field's).
pub(super) fn speaks_to(field: &AnalysisField, topic: &[String], answer: &str, today: Ymd) -> bool {
    match field.kind {
        FieldType::Number | FieldType::Integer => {
            !numbers_in(&words(&answer.replace(',', ""))).is_empty()
        }
        _ => read(field, topic, answer, today, false).is_some(),
    }
}

/// The value of `field` in `answer`; `naming` when the text is not an answer to the field's
/// question but a turn that happens to name it.
pub(super) fn read(
    field: &AnalysisField,
    topic: &[String],
    answer: &str,
    today: Ymd,
    naming: bool,
) -> Option<Found> {
    let answer = answer.trim();
    if answer.is_empty() {
        return None;
    }
    let value = match field.kind {
        FieldType::Number => nearest_number(field, topic, answer).map(number_value),
        FieldType::Integer => nearest_number(field, topic, answer).map(|n| json!(n.round() as i64)),
        FieldType::Boolean => yes_no(answer).map(Value::Bool),
        FieldType::Enum => named_option(&field.options, answer).map(Value::String),
        FieldType::Date => first_date(answer, today).map(Value::String),
        FieldType::String => string_value(answer, topic, naming).map(Value::String),
    }?;
    Some(Found {
        value,
        said: answer.to_owned(),
    })
}

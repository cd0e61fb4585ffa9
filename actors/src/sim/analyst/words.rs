//! The sim analyst's reading of words: tokens, crude stems, the filler that ties no question
//! to a field, and a field's topic (the stems of its name and description).

use crate::providers::analysis::{AnalysisField, split_name};

/// Words too common to tie a question to a field.
pub(super) const FILLER: &[&str] = &[
    "the",
    "and",
    "for",
    "you",
    "your",
    "are",
    "was",
    "what",
    "which",
    "how",
    "many",
    "much",
    "does",
    "did",
    "have",
    "has",
    "with",
    "this",
    "that",
    "from",
    "about",
    "tell",
    "could",
    "would",
    "please",
    "their",
    "they",
    "them",
    "whether",
    "callee",
    "caller",
    "candidate",
    "person",
    "call",
    "any",
    "can",
    "will",
    "when",
    "who",
    "also",
    "yes",
    "not",
    "ask",
    "asked",
];

/// Lowercase words of `text`, inner apostrophes, dots and hyphens kept (`don't`, `2.5`).
pub(super) fn words(text: &str) -> Vec<String> {
    text.replace('\u{2019}', "'")
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '.' || c == '-'))
        .map(|w| w.trim_matches(|c| c == '.' || c == '-' || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A crude stem, so "experience" and "experienced" meet.
pub(super) fn stem(word: &str) -> &str {
    let end = word.char_indices().nth(5).map_or(word.len(), |(at, _)| at);
    &word[..end]
}

pub(super) fn topic_stems(text: &str) -> Vec<String> {
    let mut stems: Vec<String> = words(text)
        .into_iter()
        .filter(|w| w.chars().count() >= 3 && !FILLER.contains(&w.as_str()))
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
        .map(|w| stem(&w).to_owned())
        .collect();
    stems.sort();
    stems.dedup();
    stems
}

pub(super) fn hits(topic: &[String], text: &str) -> usize {
    let stems: Vec<String> = words(text).iter().map(|w| stem(w).to_owned()).collect();
    topic.iter().filter(|t| stems.contains(t)).count()
}

/// The stems that tie a turn to `field`: those of its name's words and its description.
pub(super) fn field_topic(field: &AnalysisField) -> Vec<String> {
    topic_stems(&format!(
        "{} {}",
        split_name(&field.name).join(" "),
        field.description
    ))
}

/// `text` lowercased with its whitespace collapsed, to find one text inside another.
pub(super) fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

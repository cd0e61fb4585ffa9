//! Answers that pick: yes or no (with the phrases and hedges people use) and one of a field's
//! named options, as the sim analyst reads them.

use super::words::{stem, words};

pub(super) const YES: &[&str] = &[
    "yes",
    "yeah",
    "yep",
    "yup",
    "sure",
    "correct",
    "definitely",
    "absolutely",
    "certainly",
    "okay",
    "ok",
    "haan",
    "gladly",
];
pub(super) const NO: &[&str] = &[
    "no",
    "nope",
    "nah",
    "not",
    "never",
    "don't",
    "dont",
    "can't",
    "cant",
    "cannot",
    "won't",
    "wont",
    "wouldn't",
    "isn't",
    "aren't",
    "nahi",
    "neither",
    "unable",
    "unwilling",
];
/// Phrases with a "no" in them that mean yes.
pub(super) const YES_PHRASES: &[&[&str]] = &[
    &["no", "problem"],
    &["not", "a", "problem"],
    &["no", "worries"],
    &["no", "issue"],
    &["no", "issues"],
    &["why", "not"],
    &["of", "course"],
];
/// Phrases that leave the question open.
pub(super) const UNSURE: &[&[&str]] = &[
    &["not", "sure"],
    &["don't", "know"],
    &["dont", "know"],
    &["no", "idea"],
    &["maybe"],
    &["perhaps"],
    &["not", "decided"],
    &["let", "me", "think"],
    &["think", "about", "it"],
    &["depends"],
];
/// Statements that agree without a yes ("I can relocate").
pub(super) const AFFIRMATIONS: &[&[&str]] = &[
    &["i", "can"],
    &["i", "will"],
    &["i'll"],
    &["i", "would"],
    &["i'd"],
    &["i", "am"],
    &["i'm"],
    &["i", "do"],
    &["happy", "to"],
    &["willing", "to"],
    &["works"],
];

/// Whether `tokens` holds `phrase` at `at`.
pub(super) fn phrase_at(tokens: &[String], at: usize, phrase: &[&str]) -> bool {
    tokens
        .get(at..at + phrase.len())
        .is_some_and(|w| w.iter().zip(phrase).all(|(a, b)| a == b))
}

/// The yes or no `text` gives, whichever comes first; an affirmative statement with neither is
/// a yes, and an unsure answer ("not sure", "maybe") gives nothing.
pub(super) fn yes_no(text: &str) -> Option<bool> {
    let tokens = words(text);
    for (at, word) in tokens.iter().enumerate() {
        if YES_PHRASES.iter().any(|p| phrase_at(&tokens, at, p)) {
            return Some(true);
        }
        if UNSURE.iter().any(|p| phrase_at(&tokens, at, p)) {
            return None;
        }
        if YES.contains(&word.as_str()) {
            return Some(true);
        }
        if NO.contains(&word.as_str()) {
            return Some(false);
        }
    }
    (0..tokens.len())
        .any(|at| AFFIRMATIONS.iter().any(|p| phrase_at(&tokens, at, p)))
        .then_some(true)
}

/// Words that turn down the option after them ("not the night shift").
pub(super) const NEGATIONS: &[&str] = &[
    "not", "no", "never", "don't", "dont", "than", "except", "without", "nor",
];

/// The option `text` names: the first one named that is not turned down ("not morning,
/// evening" names evening), the longer one when two start at the same word. Matching is by
/// word stems, so "evenings" names "Evening" and "full time" names "Full-time".
pub(super) fn named_option(options: &[String], text: &str) -> Option<String> {
    let said = words(&text.replace('-', " "));
    let stems: Vec<&str> = said.iter().map(|w| stem(w)).collect();
    let option_stems: Vec<Vec<String>> = options
        .iter()
        .map(|o| {
            words(&o.replace('-', " "))
                .iter()
                .map(|w| stem(w).to_owned())
                .collect()
        })
        .collect();
    let is_option_word = |w: &str| option_stems.iter().flatten().any(|s| s == w);
    let mut best: Option<(usize, usize)> = None;
    for (n, wanted) in option_stems.iter().enumerate() {
        if wanted.is_empty() || wanted.len() > stems.len() {
            continue;
        }
        let first = (0..=stems.len() - wanted.len()).find(|&at| {
            let matches = stems[at..at + wanted.len()]
                .iter()
                .zip(wanted)
                .all(|(a, b)| a == b);
            // A negation reaches back over at most two words, and not past another option.
            let negated = said[at.saturating_sub(2)..at]
                .iter()
                .rev()
                .take_while(|w| !is_option_word(stem(w)))
                .any(|w| NEGATIONS.contains(&w.as_str()));
            matches && !negated
        });
        if let Some(at) = first {
            let better = best.is_none_or(|(best_at, best_n)| {
                at < best_at || (at == best_at && options[n].len() > options[best_n].len())
            });
            if better {
                best = Some((at, n));
            }
        }
    }
    best.map(|(_, n)| options[n].clone())
}

//! Numbers as people say them to the sim analyst: digits, words ("twenty five"), and the one
//! nearest a field's words.

use serde_json::{Value, json};

use super::words::{stem, words};
use crate::providers::analysis::{AnalysisField, FieldType};

/// A number as JSON: whole numbers without a fraction (`30`, not `30.0`).
pub(super) fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        json!(n as i64)
    } else {
        json!(n)
    }
}

/// The number in `text` nearest the field's words (the first one when the text does not name
/// the field), when it fits the field's bounds: a number out of bounds is no value, and
/// another number said beside it is not taken in its place.
pub(super) fn nearest_number(field: &AnalysisField, topic: &[String], text: &str) -> Option<f64> {
    let tokens = words(&text.replace(',', ""));
    let named: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, w)| topic.iter().any(|t| t == stem(w)))
        .map(|(at, _)| at)
        .collect();
    let fits = |n: f64| {
        let n = if field.kind == FieldType::Integer {
            n.round()
        } else {
            n
        };
        field.minimum.is_none_or(|min| n >= min) && field.maximum.is_none_or(|max| n <= max)
    };
    numbers_in(&tokens)
        .into_iter()
        .min_by_key(|(at, _)| named.iter().map(|w| w.abs_diff(*at)).min().unwrap_or(0))
        .map(|(_, n)| n)
        .filter(|n| fits(*n))
}

pub(super) const SMALL_NUMBERS: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
pub(super) const TENS: &[&str] = &[
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// The numbers said in `tokens` (from [`words`], commas removed), with the token each starts
/// at: digits (`45000`, `2.5`, `45k`, `3 lakh`) or words (`twenty five`, `three thousand`).
/// Ordinals (`15th`) are days, not quantities, and are skipped.
pub(super) fn numbers_in(tokens: &[String]) -> Vec<(usize, f64)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let raw = tokens[i].as_str();
        let digits = raw.trim_end_matches(['k', '%']);
        if let Ok(value) = digits.parse::<f64>()
            && value.is_finite()
            && digits.starts_with(|c: char| c.is_ascii_digit())
        {
            let (scale, used) = if raw.ends_with('k') {
                (1_000.0, 1)
            } else {
                match tokens.get(i + 1).map(String::as_str) {
                    Some("thousand") => (1_000.0, 2),
                    Some("lakh" | "lakhs") => (100_000.0, 2),
                    Some("million") => (1_000_000.0, 2),
                    Some("crore" | "crores") => (10_000_000.0, 2),
                    _ => (1.0, 1),
                }
            };
            found.push((i, value * scale));
            i += used;
            continue;
        }
        if let Some((value, used)) = word_number(&tokens[i..]) {
            found.push((i, value));
            i += used;
            continue;
        }
        i += 1;
    }
    found
}

/// A number spelled out at the start of `tokens`, and how many tokens it takes.
pub(super) fn word_number(tokens: &[String]) -> Option<(f64, usize)> {
    let mut total = 0.0;
    let mut current = 0.0;
    let mut used = 0;
    for (at, token) in tokens.iter().enumerate() {
        let t = token.as_str();
        if let Some(n) = SMALL_NUMBERS.iter().position(|w| *w == t) {
            current += n as f64;
        } else if let Some(n) = TENS.iter().position(|w| !w.is_empty() && *w == t) {
            current += (n * 10) as f64;
        } else if t == "hundred" && used > 0 {
            current *= 100.0;
        } else if t == "thousand" && used > 0 {
            total += current * 1_000.0;
            current = 0.0;
        } else if (t == "lakh" || t == "lakhs") && used > 0 {
            total += current * 100_000.0;
            current = 0.0;
        } else if t == "and" && used > 0 {
            continue;
        } else {
            break;
        }
        used = at + 1;
    }
    (used > 0).then_some((total + current, used))
}

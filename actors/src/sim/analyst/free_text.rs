//! Free-text answers: the clause of the callee's turn that holds the value, with refusals and
//! words that are no answer left out.

use super::words::{stem, words};

/// Words that are no answer on their own ("Yes.", "Okay, thanks.").
pub(super) const NOT_AN_ANSWER: &[&str] = &[
    "yes", "yeah", "yep", "no", "nope", "sure", "okay", "ok", "well", "so", "um", "uh", "umm",
    "hmm", "oh", "hi", "hello", "sorry", "thanks", "thank", "you", "bye", "goodbye", "alright",
    "right", "fine", "please",
];
/// Answers that decline to give the value.
pub(super) const REFUSALS: &[&str] = &[
    "rather not",
    "prefer not",
    "don't know",
    "dont know",
    "no idea",
    "not sure",
    "can't say",
    "cannot say",
    "won't say",
    "not telling",
];

/// The whitespace-separated words of `text` with where each starts, lowercased and without
/// the punctuation around them.
pub(super) fn spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut start = None;
    for (at, c) in text.char_indices().chain([(text.len(), ' ')]) {
        if c.is_whitespace() {
            if let Some(from) = start.take() {
                let word = text[from..at]
                    .replace('\u{2019}', "'")
                    .trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase();
                out.push((from, word));
            }
        } else if start.is_none() {
            start = Some(at);
        }
    }
    out
}

/// `text` up to the end of its first clause: a sentence end (not the dot of an initial or a
/// title: "A. Rao", "Dr. Rao"), `;`, or a comma that starts "and", "but" or "so".
pub(super) fn clause(text: &str) -> &str {
    let mut end = text.len();
    for (at, c) in text.char_indices() {
        let rest = &text[at + c.len_utf8()..];
        let stop = match c {
            ';' => true,
            '.' | '!' | '?' => {
                let word = text[..at]
                    .rsplit(|c: char| !c.is_alphanumeric())
                    .next()
                    .unwrap_or_default();
                let abbreviation = word.chars().count() == 1
                    || ["dr", "mr", "mrs", "ms", "prof", "st", "jr", "sr"]
                        .iter()
                        .any(|t| word.eq_ignore_ascii_case(t));
                (rest.is_empty() || rest.starts_with(' ')) && !abbreviation
            }
            ',' => {
                let next = rest.split_whitespace().next().unwrap_or_default();
                ["and", "but", "so"]
                    .iter()
                    .any(|w| next.eq_ignore_ascii_case(w))
            }
            _ => false,
        };
        if stop {
            end = at;
            break;
        }
    }
    &text[..end]
}

/// The text answer in `answer`, without what leads into it ("Yes, my name is", "It's") or
/// closes it ("thanks"); `None` for a refusal or a bare "yes". A turn that merely names the
/// field (`naming`) counts only when it says "my <field> is …".
pub(super) fn string_value(answer: &str, topic: &[String], naming: bool) -> Option<String> {
    let flat = format!(" {} ", words(answer).join(" "));
    if REFUSALS.iter().any(|r| flat.contains(&format!(" {r} "))) {
        return None;
    }
    let spans = spans(answer);
    let word = |at: usize| spans.get(at).map_or("", |(_, w)| w.as_str());
    let in_topic = |w: &str| topic.iter().any(|t| t == stem(w.trim_end_matches("'s")));
    let mut from = 0;
    while from < spans.len() && NOT_AN_ANSWER.contains(&word(from)) {
        from += 1;
    }
    let mut said_my = false;
    if word(from) == "my" {
        // "my notice period is", "my name's"
        for verb in from + 1..(from + 6).min(spans.len()) {
            let w = word(verb);
            let contracted = w.ends_with("'s");
            if !(contracted || matches!(w, "is" | "are" | "was" | "will" | "would")) {
                continue;
            }
            let named = (from + 1..verb).any(|m| in_topic(word(m))) || (contracted && in_topic(w));
            if named {
                from = verb + 1;
                if word(from) == "be" {
                    from += 1;
                }
                said_my = true;
            }
            break;
        }
    }
    if !said_my {
        let mut lead_ins: Vec<&[&str]> = vec![
            &["it's"],
            &["it", "is"],
            &["that's"],
            &["that", "is"],
            &["it", "would", "be"],
            &["it", "will", "be"],
            &["that", "would", "be"],
        ];
        if topic.iter().any(|t| t == "name") {
            lead_ins.extend([&["i", "am"][..], &["i'm"], &["this", "is"], &["call", "me"]]);
        }
        if let Some(lead) = lead_ins
            .iter()
            .find(|l| l.iter().enumerate().all(|(k, w)| word(from + k) == *w))
        {
            from += lead.len();
        }
    }
    if naming && !said_my {
        return None;
    }
    let mut text = spans.get(from).map_or("", |(at, _)| &answer[*at..]);
    if said_my {
        // "My name is Asha Rao, and I have …": the value ends with its clause.
        text = clause(text);
    }
    loop {
        text = text.trim_end_matches(['.', '!', '?', ',', ';', ' ']);
        let closing = [" thank you", " thanks"].iter().find(|s| {
            text.len()
                .checked_sub(s.len())
                .and_then(|at| text.get(at..))
                .is_some_and(|end| end.eq_ignore_ascii_case(s))
        });
        match closing {
            Some(s) => text = &text[..text.len() - s.len()],
            None => break,
        }
    }
    let meaningful = words(text)
        .iter()
        .any(|w| !NOT_AN_ANSWER.contains(&w.as_str()));
    meaningful.then(|| text.to_owned())
}

//! How a sim caller's script line is spoken, shared by the sim callee (which says it) and the
//! sim ASR (which transcribes it as the audio arrives):
//!
//! - a line may pause inside: `"I live in [pause 1500] Pune"` is "I live in", 1.5 s of
//!   silence, then "Pune"; its transcript is "I live in Pune";
//! - a backchannel said over the agent reaches the sim ASR and LLM as
//!   `"[backchannel] uh-huh"`: the ASR transcribes "uh-huh", the LLM does not count it as
//!   one of the caller's turns.

use std::time::Duration;

use voxline_media::synth::speech_duration_for_text;

/// What starts a pause inside a line: `[pause 1500]` is 1.5 s of silence.
const PAUSE_OPEN: &str = "[pause ";
/// What marks a script line said as a backchannel over the agent.
pub const BACKCHANNEL_MARK: &str = "[backchannel]";
/// The longest pause a line may hold.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// One stretch of speech of a line and the silence after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinePart {
    /// The words said.
    pub text: String,
    /// The silence that follows them (zero for the last part).
    pub pause_after: Duration,
}

/// Whether a script line is a backchannel said over the agent.
pub fn is_backchannel(line: &str) -> bool {
    line.trim_start().starts_with(BACKCHANNEL_MARK)
}

/// How many of the script's lines are the caller's turns (backchannels are not).
pub fn turn_lines(script: &[String]) -> usize {
    script.iter().filter(|line| !is_backchannel(line)).count()
}

/// The line's stretches of speech and the pauses between them. Text in brackets that is not
/// a valid `[pause N]` (N in ms, at most 30 s) is spoken as written.
pub fn line_parts(line: &str) -> Vec<LinePart> {
    let line = line.trim_start();
    let line = line.strip_prefix(BACKCHANNEL_MARK).unwrap_or(line);
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = line;
    while let Some(at) = find_ignore_case(rest, PAUSE_OPEN) {
        let after = &rest[at + PAUSE_OPEN.len()..];
        let pause = after.split_once(']').and_then(|(ms, tail)| {
            let ms: u64 = ms.trim().parse().ok()?;
            let pause = Duration::from_millis(ms);
            (pause <= MAX_PAUSE).then_some((pause, tail))
        });
        match pause {
            Some((pause, tail)) => {
                text.push_str(&rest[..at]);
                push_part(&mut parts, &mut text, pause);
                rest = tail;
            }
            None => {
                text.push_str(&rest[..at + PAUSE_OPEN.len()]);
                rest = after;
            }
        }
    }
    text.push_str(rest);
    push_part(&mut parts, &mut text, Duration::ZERO);
    parts
}

/// Closes the part being gathered; a pause with no words before it lengthens the last one.
fn push_part(parts: &mut Vec<LinePart>, text: &mut String, pause_after: Duration) {
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    text.clear();
    if words.is_empty() {
        if let Some(last) = parts.last_mut() {
            last.pause_after += pause_after;
        }
        return;
    }
    parts.push(LinePart {
        text: words,
        pause_after,
    });
}

/// Byte offset of `needle` (ASCII) in `haystack`, ignoring ASCII case.
fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack
        .as_bytes()
        .windows(needle.len())
        .position(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The words of a line as a recognizer hears them: its parts joined, without the marks,
/// ending like a sentence (a full stop added where the line has no closing mark, as a
/// recognizer that punctuates would write it).
pub fn spoken_text(line: &str) -> String {
    let mut text = line_parts(line)
        .iter()
        .map(|part| part.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    close_sentence(&mut text);
    text
}

/// Adds a full stop to `text` unless it is empty or already ends with a closing mark.
fn close_sentence(text: &mut String) -> bool {
    let trimmed = text.trim_end();
    if trimmed.is_empty() || trimmed.ends_with(['.', '?', '!', '…', '।', '"', '\'']) {
        return false;
    }
    text.truncate(trimmed.len());
    text.push('.');
    true
}

/// When each word of a line has been heard, counting its speech only (not the pauses): the
/// sim callee says each part for [`speech_duration_for_text`] of its text, and a word is
/// heard once the share of its part that ends with it has been spoken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineTiming {
    /// The line's words, as [`spoken_text`].
    pub text: String,
    /// For each word: the speech (ms) by which it has been said, and where its text ends.
    pub words: Vec<(u32, usize)>,
    /// The speech (ms) at which each part ends.
    pub part_ends: Vec<u32>,
}

impl LineTiming {
    /// The timing of `line`.
    pub fn of(line: &str) -> Self {
        let mut text = String::new();
        let mut words = Vec::new();
        let mut part_ends = Vec::new();
        let mut start_ms = 0u32;
        for part in line_parts(line) {
            let duration =
                u32::try_from(speech_duration_for_text(&part.text).as_millis()).unwrap_or(u32::MAX);
            let chars = part.text.chars().count().max(1) as u64;
            if !text.is_empty() {
                text.push(' ');
            }
            let offset = text.len();
            let mut chars_before = 0u64;
            for word in part.text.split(' ') {
                chars_before += word.chars().count() as u64;
                let end_ms = start_ms
                    + u32::try_from(u64::from(duration) * chars_before / chars).unwrap_or(0);
                let byte_end = offset
                    + part.text[..]
                        .char_indices()
                        .nth(chars_before as usize)
                        .map_or(part.text.len(), |(at, _)| at);
                words.push((end_ms, byte_end));
                // The space after the word.
                chars_before += 1;
            }
            text.push_str(&part.text);
            start_ms = start_ms.saturating_add(duration);
            part_ends.push(start_ms);
        }
        // The last word carries the sentence's full stop, once it has been heard.
        if close_sentence(&mut text)
            && let Some(last) = words.last_mut()
        {
            last.1 = text.len();
        }
        Self {
            text,
            words,
            part_ends,
        }
    }

    /// How many words have been said after `speech_ms` of the line's speech.
    pub fn words_heard(&self, speech_ms: u32) -> usize {
        self.words
            .iter()
            .take_while(|(end, _)| *end <= speech_ms)
            .count()
    }

    /// The first `count` words.
    pub fn first_words(&self, count: usize) -> &str {
        match count.checked_sub(1).and_then(|last| self.words.get(last)) {
            Some(&(_, end)) => &self.text[..end],
            None => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_split_a_line_and_leave_its_words() {
        let line = "I live in [pause 1500] um [PAUSE 800] Pune.";
        assert_eq!(
            line_parts(line),
            [
                LinePart {
                    text: "I live in".into(),
                    pause_after: Duration::from_millis(1500)
                },
                LinePart {
                    text: "um".into(),
                    pause_after: Duration::from_millis(800)
                },
                LinePart {
                    text: "Pune.".into(),
                    pause_after: Duration::ZERO
                },
            ]
        );
        assert_eq!(spoken_text(line), "I live in um Pune.");
        // Not a pause: spoken as written.
        assert_eq!(spoken_text("a [pause x] b"), "a [pause x] b.");
        assert_eq!(spoken_text("[pause 500] hi"), "hi.");
        assert_eq!(spoken_text("[backchannel] uh-huh"), "uh-huh.");
        assert_eq!(spoken_text("Is it?"), "Is it?");
        assert_eq!(spoken_text(""), "");
        assert!(is_backchannel("[backchannel] uh-huh"));
        assert_eq!(
            turn_lines(&["Hi".into(), "[backchannel] mm".into(), "Bye".into()]),
            2
        );
    }

    #[test]
    fn words_are_heard_in_proportion_to_their_parts_speech() {
        let timing = LineTiming::of("I live in [pause 1500] Pune");
        // "I live in" is 9 characters: 643 ms of speech; "Pune" the 400 ms minimum.
        // A recognizer that punctuates closes the sentence.
        assert_eq!(timing.text, "I live in Pune.");
        assert_eq!(timing.part_ends, [642, 1042]);
        assert_eq!(timing.words_heard(100), 1);
        assert_eq!(timing.first_words(1), "I");
        assert_eq!(timing.words_heard(642), 3);
        assert_eq!(timing.first_words(3), "I live in");
        assert_eq!(timing.words_heard(1000), 3);
        assert_eq!(timing.words_heard(1042), 4);
        assert_eq!(timing.first_words(4), "I live in Pune.");
        assert_eq!(timing.first_words(0), "");
    }
}

//! Text helpers of the speaking side: sentence chunking of streamed LLM tokens (each chunk is
//! one TTS request and one playback mark) and cutting a reply down to what was heard.

/// Characters that end a sentence when followed by whitespace.
const SENTENCE_ENDS: [char; 4] = ['.', '!', '?', '\n'];
/// Words whose trailing period does not end a sentence.
const ABBREVIATIONS: [&str; 8] = ["mr", "mrs", "ms", "dr", "st", "e.g", "i.e", "etc"];
/// The first chunk of a reply may end at a comma once it is this long, so speech starts sooner.
const FIRST_CHUNK_COMMA_MIN: usize = 24;
/// A chunk longer than this is cut at a space even without punctuation.
const MAX_CHUNK: usize = 220;

/// Splits streamed text into speakable chunks.
#[derive(Debug, Default)]
pub(crate) struct SentenceChunker {
    buffer: String,
    emitted: usize,
}

impl SentenceChunker {
    /// Adds streamed text and returns the chunks it completed.
    pub(crate) fn push(&mut self, text: &str) -> Vec<String> {
        self.buffer.push_str(text);
        let mut chunks = Vec::new();
        while let Some(end) = self.boundary() {
            let rest = self.buffer.split_off(end);
            let chunk = std::mem::replace(&mut self.buffer, rest);
            self.buffer = self.buffer.trim_start().to_owned();
            let chunk = chunk.trim();
            if !chunk.is_empty() {
                chunks.push(chunk.to_owned());
                self.emitted += 1;
            }
        }
        chunks
    }

    /// The complete words buffered so far as one chunk, if there are any.
    ///
    /// A reply's first chunk is taken this way as soon as the LLM has produced a word, so the
    /// caller hears the agent start without waiting for the first sentence to end.
    pub(crate) fn take_words(&mut self) -> Option<String> {
        let end = self.buffer.rfind(char::is_whitespace)?;
        let rest = self.buffer.split_off(end);
        let chunk = std::mem::replace(&mut self.buffer, rest.trim_start().to_owned());
        let chunk = chunk.trim();
        (!chunk.is_empty()).then(|| {
            self.emitted += 1;
            chunk.to_owned()
        })
    }

    /// The text left over at the end of the stream, if any.
    pub(crate) fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.buffer);
        let rest = rest.trim();
        (!rest.is_empty()).then(|| {
            self.emitted += 1;
            rest.to_owned()
        })
    }

    /// Byte offset just past the first chunk boundary in the buffer.
    fn boundary(&self) -> Option<usize> {
        let text = &self.buffer;
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            let next_is_space = chars.peek().is_some_and(|&(_, n)| n.is_whitespace());
            let end = at + c.len_utf8();
            if SENTENCE_ENDS.contains(&c) && (next_is_space || c == '\n') {
                if c == '.' && is_abbreviation(&text[..at]) {
                    continue;
                }
                return Some(end);
            }
            if c == ',' && next_is_space && self.emitted == 0 && at >= FIRST_CHUNK_COMMA_MIN {
                return Some(end);
            }
        }
        if text.len() > MAX_CHUNK {
            return text[..MAX_CHUNK]
                .rfind(char::is_whitespace)
                .filter(|&at| at > 0);
        }
        None
    }
}

/// Whether the word right before a period is a known abbreviation.
fn is_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(char::is_whitespace)
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    ABBREVIATIONS.contains(&word.as_str())
}

/// Splits a whole text into the chunks [`SentenceChunker`] would make of it.
pub(crate) fn split_sentences(text: &str) -> Vec<String> {
    let mut chunker = SentenceChunker::default();
    let mut chunks = chunker.push(text);
    chunks.extend(chunker.finish());
    chunks
}

/// The leading share `fraction` (0–1) of `text`'s words, rounded to the nearest word.
pub(crate) fn leading_words(text: &str, fraction: f64) -> String {
    let total = text.split_whitespace().count();
    let keep = (fraction.clamp(0.0, 1.0) * total as f64).round() as usize;
    let mut out = String::new();
    for word in text.split_whitespace().take(keep) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Whether `text` contains `phrase` as whole words, ignoring case and punctuation.
pub(crate) fn contains_phrase(text: &str, phrase: &str) -> bool {
    let normalize = |s: &str| {
        s.split(|c: char| !c.is_alphanumeric() && c != '\'')
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect::<Vec<_>>()
    };
    let words = normalize(text);
    let phrase = normalize(phrase);
    !phrase.is_empty() && words.windows(phrase.len()).any(|window| window == phrase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunker_splits_streamed_tokens_at_sentence_ends() {
        let mut chunker = SentenceChunker::default();
        let mut chunks = Vec::new();
        for token in "Hello there. I am Dr. Smith! How are you? Fine".split_inclusive(' ') {
            chunks.extend(chunker.push(token));
        }
        chunks.extend(chunker.finish());
        assert_eq!(
            chunks,
            ["Hello there.", "I am Dr. Smith!", "How are you?", "Fine"]
        );
    }

    #[test]
    fn chunker_lets_the_first_chunk_end_at_a_comma() {
        let chunks = split_sentences(
            "Thanks for waiting on the line, I have your booking, and it is confirmed.",
        );
        assert_eq!(
            chunks,
            [
                "Thanks for waiting on the line,",
                "I have your booking, and it is confirmed."
            ]
        );
        assert_eq!(
            split_sentences("3.5 percent. Next"),
            ["3.5 percent.", "Next"]
        );
    }

    #[test]
    fn take_words_hands_over_complete_words_only() {
        let mut chunker = SentenceChunker::default();
        assert!(chunker.push("Hel").is_empty());
        assert_eq!(chunker.take_words(), None);
        assert!(chunker.push("lo the").is_empty());
        assert_eq!(chunker.take_words().as_deref(), Some("Hello"));
        assert_eq!(chunker.take_words(), None);
        assert_eq!(chunker.push("re. Next"), ["there."]);
        assert_eq!(chunker.finish().as_deref(), Some("Next"));
    }

    #[test]
    fn leading_words_cut_proportionally() {
        assert_eq!(leading_words("one two three four", 0.5), "one two");
        assert_eq!(
            leading_words("one two three four", 1.2),
            "one two three four"
        );
        assert_eq!(leading_words("one two three four", 0.0), "");
    }

    #[test]
    fn phrases_match_whole_words() {
        assert!(contains_phrase("OK, goodbye now!", "Goodbye"));
        assert!(contains_phrase("that's all, thank you", "that's all"));
        assert!(!contains_phrase("byebye", "bye"));
        assert!(!contains_phrase("anything", ""));
    }
}

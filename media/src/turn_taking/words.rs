//! What the caller's words say about turn-taking: whether an utterance sounds finished, what
//! kind of answer the agent's last line asked for, and whether talk over the agent is only a
//! backchannel ("uh-huh", "haan").
//!
//! Pure text functions over transcripts (interim or final). They run when a transcript
//! arrives, a few times a second at most, never per audio frame.

/// What kind of answer the agent's last line asked for: it decides which unfinished answers
/// mean "wait" (a phone number is 10 digits, a date has a day, a month and a year).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AnswerKind {
    /// Anything; only the generic cues (a trailing "and", "um") apply.
    #[default]
    Free,
    /// A phone number: fewer than 10 digits means the caller is still reading it.
    Phone,
    /// A number of unknown length (a PIN code, an age, a count).
    Number,
    /// A date (of an appointment, an order): day and month, perhaps a year.
    Date,
    /// A date of birth: not complete without its year.
    BirthDate,
    /// An amount of money.
    Amount,
    /// An email address, read out ("asha dot k at gmail dot com").
    Email,
}

impl AnswerKind {
    /// The kind of answer `agent_text` asks for, judged on its last question (or its last
    /// sentence when it asks none) by keywords: "phone", "mobile" → [`Phone`](Self::Phone),
    /// "email" → [`Email`](Self::Email), "date", "when", "born" → [`Date`](Self::Date), "how
    /// much", "salary", "amount" → [`Amount`](Self::Amount), "number", "how many", "pin
    /// code", "age" → [`Number`](Self::Number), otherwise [`Free`](Self::Free). "Birth",
    /// "born" and "DOB" ask for a [`BirthDate`](Self::BirthDate); "your number", "call
    /// back" and "reach you" for a phone number.
    pub fn asked_by(agent_text: &str) -> Self {
        let sentence = last_question(agent_text);
        let tokens: Vec<String> = tokens(sentence).map(str::to_ascii_lowercase).collect();
        let has = |word: &str| tokens.iter().any(|t| t == word);
        let has_pair = |first: &str, second: &str| {
            tokens
                .windows(2)
                .any(|pair| pair[0] == first && pair[1] == second)
        };
        // "your number", "the number": a phone number unless a noun says which ("your
        // account number").
        let plain_number = tokens.windows(2).any(|pair| {
            pair[1] == "number"
                && ["your", "the", "a", "contact", "best"].contains(&pair[0].as_str())
        });
        if has("email") || has("e-mail") || has_pair("mail", "id") {
            Self::Email
        } else if [
            "phone", "mobile", "whatsapp", "cell", "landline", "callback",
        ]
        .iter()
        .any(|w| has(w))
            || has_pair("contact", "number")
            || has_pair("reach", "you")
            || has_pair("call", "back")
            || has_pair("call", "you")
            || plain_number
        {
            Self::Phone
        } else if ["born", "birthday", "dob", "birth"].iter().any(|w| has(w)) {
            Self::BirthDate
        } else if ["date", "when", "day"].iter().any(|w| has(w)) {
            Self::Date
        } else if [
            "salary", "amount", "budget", "price", "cost", "ctc", "income", "fee", "fees",
        ]
        .iter()
        .any(|w| has(w))
            || has_pair("how", "much")
        {
            Self::Amount
        } else if ["number", "pincode", "zip", "age", "otp", "digits"]
            .iter()
            .any(|w| has(w))
            || has_pair("how", "many")
            || has_pair("how", "old")
            || has_pair("pin", "code")
        {
            Self::Number
        } else {
            Self::Free
        }
    }
}

/// The last sentence of `text` that asks something, or its last sentence.
fn last_question(text: &str) -> &str {
    let mut last = "";
    let mut last_question = None;
    let mut start = 0;
    for (at, c) in text.char_indices() {
        if matches!(c, '.' | '?' | '!' | '\n') {
            let sentence = text[start..at].trim();
            if !sentence.is_empty() {
                last = sentence;
                if c == '?' {
                    last_question = Some(sentence);
                }
            }
            start = at + c.len_utf8();
        }
    }
    let tail = text[start..].trim();
    if !tail.is_empty() {
        last = tail;
    }
    last_question.unwrap_or(last)
}

/// What the words of an utterance so far say about its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TextCue {
    /// Not finished: a trailing conjunction or filler ("and", "um", "my number is"), or an
    /// answer of the asked kind that is not complete yet (six digits of a phone number).
    Wait,
    /// Nothing either way (no words yet, or words that could end or go on).
    Unknown,
    /// Ends like a sentence (the recognizer's full stop or question mark) with no cue to
    /// wait: weak evidence, used only when no end-of-turn model can be asked.
    Likely,
    /// A complete answer of the asked kind: ten digits of a phone number, a date with day,
    /// month and year, an amount with its currency, an email address with its domain.
    Complete,
}

/// Words that hardly ever end a sentence: conjunctions, fillers, articles, prepositions, a
/// possessive, a subject or a verb waiting for its complement. One of these last means the
/// caller is still talking, however long the pause. Words that end short answers ("yes I
/// am", "thank you", "that's it", "and so on") are left out.
const TRAILING_WAIT: &[&str] = &[
    // Conjunctions ("so" only when it is not "I think so", see `is_trailing_wait`).
    "and",
    "or",
    "but",
    "so",
    "because",
    "cause",
    "cuz",
    "since",
    "although",
    "though",
    "unless",
    "while",
    "whereas",
    "plus",
    "than",
    "if",
    "which",
    "whose",
    // Fillers.
    "um",
    "umm",
    "ummm",
    "uh",
    "uhh",
    "uhm",
    "er",
    "erm",
    "err",
    "ah",
    "ahh",
    "hmm",
    "hm",
    "like",
    // Articles, possessives, prepositions.
    "a",
    "an",
    "the",
    "my",
    "your",
    "his",
    "our",
    "their",
    "its",
    "to",
    "of",
    "in",
    "at",
    "for",
    "from",
    "with",
    "by",
    "into",
    "near",
    "between",
    "per",
    // A subject or a verb waiting for what follows ("my number is").
    "is",
    "it's",
    "i'm",
    "i'll",
    "i'd",
    "i've",
    "it’s",
    "i’m",
    "i",
    // Spelling out numbers and addresses.
    "point",
    "dot",
    "underscore",
    "dash",
    "hyphen",
    "double",
    "triple",
    "hash",
    "slash",
    // Hindi and Hinglish, romanised: "aur" (and), "lekin"/"par" (but), "ki"/"ke"/"ka"
    // (of), "toh" (so), "matlab"/"yaani" (I mean), "woh" (that).
    "aur",
    "lekin",
    "par",
    "ki",
    "ke",
    "ka",
    "toh",
    "matlab",
    "yaani",
    "woh",
    "jo",
];

/// Verbs after which a trailing "so" closes the sentence ("I think so").
const SO_CLOSERS: &[&str] = &[
    "think", "hope", "guess", "believe", "suppose", "said", "say",
];

/// Words that end a sentence on their own but not after certain words: "on" after "is"
/// ("my appointment is on") but not "so on" or "go on"; "that" after a verb of saying or
/// "is" ("the problem is that") but not "like that"; "you" after an auxiliary ("can you")
/// but not "thank you"; reported speech ("the doctor said").
const WAIT_AFTER: &[(&str, &[&str])] = &[
    (
        "on",
        &[
            "is", "was", "are", "were", "be", "it's", "its", "due", "based", "depends", "focus",
            "focused", "working", "work", "worked",
        ],
    ),
    (
        "that",
        &[
            "is", "was", "are", "were", "said", "say", "says", "think", "thought", "know", "knew",
            "mean", "feel", "felt", "hope", "believe", "so", "sure", "told", "tell", "heard",
            "realized", "noticed", "saw", "see", "except", "but",
        ],
    ),
    (
        "you",
        &[
            "can", "could", "would", "will", "do", "did", "are", "were", "have", "should", "may",
            "might", "if", "when", "let", "tell", "told", "give", "send", "ask",
        ],
    ),
    (
        "said",
        &[
            "he", "she", "they", "doctor", "manager", "agent", "mother", "father", "wife",
            "husband", "son", "daughter", "boss", "someone", "somebody", "person", "lady", "guy",
            "man", "woman", "team", "bank", "it", "you", "we", "i",
        ],
    ),
];

/// Auxiliaries that end short answers ("yes I was", "I can") but leave a clause that
/// opened with a conjunction unfinished ("because I was").
const AUXILIARIES: &[&str] = &[
    "was", "were", "am", "are", "have", "has", "had", "will", "would", "can", "could", "should",
    "do", "does", "did", "been", "being", "going",
];

/// Words that open a clause still to be completed.
const SUBORDINATORS: &[&str] = &[
    "because", "cause", "if", "when", "although", "though", "since", "while", "unless", "whereas",
    "whether", "after", "before", "until", "so",
];

/// Phrases that, ending an utterance, mean the caller is gathering their words.
const TRAILING_WAIT_PHRASES: &[&[&str]] = &[
    &["let", "me", "see"],
    &["let", "me", "think"],
    &["let", "me", "check"],
    &["one", "second"],
    &["one", "sec"],
    &["one", "minute"],
    &["hold", "on"],
    &["you", "know"],
    &["i", "mean"],
    &["i", "think"],
    &["ek", "minute"],
];

/// Month names and their usual short forms.
const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
];

/// Words that name a day without a calendar date.
const RELATIVE_DAYS: &[&str] = &[
    "today",
    "tomorrow",
    "yesterday",
    "tonight",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "weekend",
    "aaj",
    "kal",
    "parso",
];

/// Spoken ordinals of days of the month, up to "thirty first" (read as two words).
const ORDINALS: &[&str] = &[
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
    "twentieth",
    "thirtieth",
];

/// Words that end an amount.
const CURRENCIES: &[&str] = &[
    "rupees", "rupee", "rs", "inr", "dollars", "dollar", "usd", "bucks", "euros", "euro", "pounds",
    "paise", "only", "lpa", "annum", "month", "year", "k",
];

/// Top-level domains an email address read out usually ends with.
const EMAIL_ENDINGS: &[&str] = &[
    "com", "in", "org", "net", "co", "io", "edu", "gov", "ai", "me", "info", "biz", "us", "uk",
];

/// The words of `text`: split at spaces, hyphens, commas, semicolons and slashes, with
/// punctuation trimmed from both ends (an email address read as one token keeps its inner
/// `@` and dots).
pub fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '-' | '–' | '—' | ',' | ';' | '/'))
        .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’'))
        .map(|t| t.trim_matches(|c: char| c == '\'' || c == '’'))
        .filter(|t| !t.is_empty())
}

/// Whether `token` is one of `words`, ignoring ASCII case.
fn is_one_of(token: &str, words: &[&str]) -> bool {
    words.iter().any(|w| w.eq_ignore_ascii_case(token))
}

/// What the words so far (`text`, interim or final) say about the end of an answer to a
/// question of `kind`. Generic cues come first: a trailing conjunction, filler or phrase
/// like "let me see", or a trailing "..." (a recognizer's mark of trailing off), mean
/// [`TextCue::Wait`] whatever the kind.
pub fn text_cue(text: &str, kind: AnswerKind) -> TextCue {
    let trimmed = text.trim();
    let words: Vec<&str> = tokens(trimmed).collect();
    let Some(&last) = words.last() else {
        return TextCue::Unknown;
    };
    let before = words.len().checked_sub(2).map(|at| words[at]);
    let closing_so =
        last.eq_ignore_ascii_case("so") && before.is_some_and(|b| is_one_of(b, SO_CLOSERS));
    let waits_after = WAIT_AFTER.iter().any(|(word, after)| {
        last.eq_ignore_ascii_case(word) && before.is_some_and(|b| is_one_of(b, after))
    });
    let open_clause = is_one_of(last, AUXILIARIES)
        && words
            .first()
            .is_some_and(|first| is_one_of(first, SUBORDINATORS));
    if trimmed.ends_with("...")
        || trimmed.ends_with('…')
        || (is_one_of(last, TRAILING_WAIT) && !closing_so)
        || waits_after
        || open_clause
    {
        return TextCue::Wait;
    }
    if TRAILING_WAIT_PHRASES.iter().any(|phrase| {
        words.len() >= phrase.len()
            && words[words.len() - phrase.len()..]
                .iter()
                .zip(phrase.iter())
                .all(|(w, p)| w.eq_ignore_ascii_case(p))
    }) {
        return TextCue::Wait;
    }
    let sentence_end = trimmed.ends_with(['.', '?', '!', '।']);
    let specific = match kind {
        AnswerKind::Free => TextCue::Unknown,
        AnswerKind::Phone => match spoken_digits(&words) {
            0 => TextCue::Unknown,
            1..=9 => TextCue::Wait,
            _ => TextCue::Complete,
        },
        AnswerKind::Number => TextCue::Unknown,
        AnswerKind::Date => date_cue(&words, false),
        AnswerKind::BirthDate => date_cue(&words, true),
        AnswerKind::Amount => amount_cue(&words, sentence_end),
        AnswerKind::Email => email_cue(&words, sentence_end),
    };
    if specific != TextCue::Unknown {
        return specific;
    }
    if sentence_end {
        TextCue::Likely
    } else {
        TextCue::Unknown
    }
}

/// How many digits `words` read out: numerals count their digits, "nine" one, "double
/// five" two, "ninety" two (with the unit that follows it), "nineteen" two, "hundred" two.
pub fn spoken_digits(words: &[&str]) -> usize {
    const UNITS: &[&str] = &[
        "zero", "oh", "o", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    // Digits of the current run of number words; a lone "one" ("I don't have one") is a
    // pronoun, not a digit, so a run of one number word counts only when it is a numeral.
    let mut digits = 0;
    let mut run_digits = 0;
    let mut run_words = 0;
    let mut run_numerals = false;
    let mut repeat = 1;
    let mut after_tens = false;
    let mut flush = |run_digits: &mut usize, run_words: &mut usize, run_numerals: &mut bool| {
        if *run_words > 1 || *run_numerals {
            digits += *run_digits;
        }
        *run_digits = 0;
        *run_words = 0;
        *run_numerals = false;
    };
    for word in words {
        let numerals = word.chars().filter(char::is_ascii_digit).count();
        let mut number_word = true;
        if numerals > 0 {
            run_digits += numerals * repeat;
            run_numerals = true;
            repeat = 1;
            after_tens = false;
        } else if word.eq_ignore_ascii_case("double") {
            repeat = 2;
        } else if word.eq_ignore_ascii_case("triple") {
            repeat = 3;
        } else if is_one_of(word, UNITS) {
            // "ninety eight" is two digits, not three.
            if !after_tens {
                run_digits += repeat;
            }
            repeat = 1;
            after_tens = false;
        } else if is_one_of(word, TEEN_WORDS) {
            run_digits += 2;
            after_tens = false;
        } else if is_one_of(word, TENS_WORDS) {
            run_digits += 2;
            after_tens = true;
        } else if word.eq_ignore_ascii_case("hundred") {
            run_digits += 2;
            after_tens = false;
        } else {
            number_word = false;
            after_tens = false;
            repeat = 1;
        }
        if number_word {
            run_words += 1;
        } else {
            flush(&mut run_digits, &mut run_words, &mut run_numerals);
        }
    }
    flush(&mut run_digits, &mut run_words, &mut run_numerals);
    digits
}

/// A date read out: day, month and year make it complete; some of them only, wait; a
/// relative day ("tomorrow", "Friday") is complete on its own. Day and month without a
/// year leave it open, except a date of birth (`birth`), which waits for its year, and a
/// date read as numbers ("twenty one, oh six"), which usually goes on to it.
fn date_cue(words: &[&str], birth: bool) -> TextCue {
    if !birth && words.iter().any(|w| is_one_of(w, RELATIVE_DAYS)) {
        return TextCue::Complete;
    }
    // "nineteen ninety" may be going on to "two".
    if words.last().is_some_and(|last| is_one_of(last, TENS_WORDS)) {
        return TextCue::Wait;
    }
    let numbers = spoken_numbers(words);
    let month_name = words.iter().any(|w| is_one_of(w, MONTHS));
    let ordinal = words.iter().any(|w| is_one_of(w, ORDINALS));
    let year = numbers.iter().any(|n| (1900..=2100).contains(n));
    let small = numbers.iter().filter(|n| (1..=31).contains(*n)).count();
    let day = ordinal || small > 0;
    // "15/03/1990", "twenty one, oh six": the day, then the month, as numbers.
    let numeric_month = !month_name && (small >= 2 || (ordinal && small > 0));
    match (day, month_name || numeric_month, year) {
        (true, true, true) => TextCue::Complete,
        (true, true, false) if birth || numeric_month => TextCue::Wait,
        (true, true, false) => TextCue::Unknown,
        (false, false, false) => TextCue::Unknown,
        _ => TextCue::Wait,
    }
}

/// Number words by value.
const UNIT_WORDS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
];
/// Ten to nineteen.
const TEEN_WORDS: &[&str] = &[
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
/// Twenty to ninety.
const TENS_WORDS: &[&str] = &[
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// Where `word` is in `list`, ignoring ASCII case.
fn position_in(list: &[&str], word: &str) -> Option<u32> {
    list.iter()
        .position(|w| w.eq_ignore_ascii_case(word))
        .and_then(|at| u32::try_from(at).ok())
}

/// The numbers `words` read out, numerals and number words alike: "twenty one" is 21,
/// "oh six" 6, "nineteen ninety two" 1992, "twenty twenty five" 2025, "two thousand and
/// five" 2005, "15th" 15.
pub fn spoken_numbers(words: &[&str]) -> Vec<u32> {
    // First the groups up to 99 ("twenty one", "nineteen", "oh six") and thousands, each
    // marked when read as words; then years read as two groups ("nineteen ninety two").
    let mut groups: Vec<Option<(u32, bool)>> = Vec::new();
    let mut at = 0;
    while at < words.len() {
        let word = words[at];
        let next = words.get(at + 1).copied();
        if let Some(n) = leading_number(word) {
            groups.push(Some((n, false)));
        } else if let Some(tens) = position_in(TENS_WORDS, word) {
            let tens = 20 + 10 * tens;
            match next.and_then(|n| position_in(UNIT_WORDS, n)) {
                Some(unit) if unit > 0 => {
                    groups.push(Some((tens + unit, true)));
                    at += 1;
                }
                _ => groups.push(Some((tens, true))),
            }
        } else if let Some(teen) = position_in(TEEN_WORDS, word) {
            groups.push(Some((10 + teen, true)));
        } else if word.eq_ignore_ascii_case("oh") || word.eq_ignore_ascii_case("o") {
            if let Some(unit) = next.and_then(|n| position_in(UNIT_WORDS, n)) {
                groups.push(Some((unit, true)));
                at += 1;
            }
        } else if let Some(unit) = position_in(UNIT_WORDS, word) {
            groups.push(Some((unit, true)));
        } else if word.eq_ignore_ascii_case("thousand") {
            let thousands = groups.pop().flatten().map_or(1, |(n, _)| n);
            let mut value = thousands.saturating_mul(1000);
            // "two thousand and five", "two thousand five".
            let and = usize::from(next.is_some_and(|n| n.eq_ignore_ascii_case("and")));
            let rest = words.get(at + 1 + and..).unwrap_or(&[]);
            let (small, used) = small_number(rest);
            if let Some(small) = small {
                value += small;
                at += and + used;
            }
            groups.push(Some((value, true)));
        } else {
            groups.push(None);
        }
        at += 1;
    }
    let mut numbers = Vec::new();
    let mut index = 0;
    while index < groups.len() {
        match (groups[index], groups.get(index + 1).copied().flatten()) {
            // "nineteen ninety two", "twenty twenty five": a century and its year.
            (Some((century @ (19 | 20), true)), Some((year, true)))
                if (10..100).contains(&year) =>
            {
                numbers.push(century * 100 + year);
                index += 2;
            }
            (Some((value, _)), _) => {
                numbers.push(value);
                index += 1;
            }
            (None, _) => index += 1,
        }
    }
    numbers
}

/// A number below 100 read at the start of `words` ("five", "forty two"), and how many
/// words it took.
fn small_number(words: &[&str]) -> (Option<u32>, usize) {
    let Some(&first) = words.first() else {
        return (None, 0);
    };
    if let Some(tens) = position_in(TENS_WORDS, first) {
        let tens = 20 + 10 * tens;
        return match words.get(1).and_then(|n| position_in(UNIT_WORDS, n)) {
            Some(unit) if unit > 0 => (Some(tens + unit), 2),
            _ => (Some(tens), 1),
        };
    }
    if let Some(teen) = position_in(TEEN_WORDS, first) {
        return (Some(10 + teen), 1);
    }
    match position_in(UNIT_WORDS, first) {
        Some(unit) => (Some(unit), 1),
        None => (None, 0),
    }
}

/// The number a token starts with ("15th" → 15, "1990" → 1990).
fn leading_number(word: &str) -> Option<u32> {
    let end = word
        .char_indices()
        .find(|(_, c)| !c.is_ascii_digit())
        .map_or(word.len(), |(at, _)| at);
    word[..end].parse().ok()
}

/// An amount: its currency word ("rupees", "per annum", "LPA") ends it; a trailing
/// "thousand", "hundred" or "lakh" not closed by a full stop goes on ("two thousand …
/// four hundred").
fn amount_cue(words: &[&str], sentence_end: bool) -> TextCue {
    const SCALES: &[&str] = &[
        "hundred", "thousand", "lakh", "lakhs", "lac", "crore", "crores", "million", "billion",
    ];
    let Some(last) = words.last() else {
        return TextCue::Unknown;
    };
    if is_one_of(last, CURRENCIES) {
        TextCue::Complete
    } else if is_one_of(last, SCALES) && !sentence_end {
        TextCue::Wait
    } else {
        TextCue::Unknown
    }
}

/// An email address read out: complete once it has an "at" and ends with a domain ending;
/// before that, wait (unless a full stop says the caller is done, "I don't have one.").
fn email_cue(words: &[&str], sentence_end: bool) -> TextCue {
    let Some(last) = words.last() else {
        return TextCue::Unknown;
    };
    let written = words.iter().find(|w| w.contains('@'));
    if let Some(address) = written {
        let ends = address
            .rsplit_once('.')
            .is_some_and(|(_, tld)| is_one_of(tld, EMAIL_ENDINGS));
        return if ends {
            TextCue::Complete
        } else {
            TextCue::Wait
        };
    }
    let at = words.iter().rposition(|w| w.eq_ignore_ascii_case("at"));
    match at {
        Some(at) => {
            let after_dot = words.len() >= at + 3
                && words[words.len() - 2].eq_ignore_ascii_case("dot")
                && is_one_of(last, EMAIL_ENDINGS);
            let glued = last
                .rsplit_once('.')
                .is_some_and(|(_, tld)| is_one_of(tld, EMAIL_ENDINGS))
                && words.len() > at + 1;
            if after_dot || glued {
                TextCue::Complete
            } else {
                TextCue::Wait
            }
        }
        None if sentence_end => TextCue::Unknown,
        // "priya dot sharma": the address has begun.
        None => TextCue::Wait,
    }
}

/// The caller's acknowledgements that do not take the turn: "uh-huh", "yeah", "haan".
///
/// Phrases are kept as lower-case words (hyphens split, so "uh-huh" and "uh huh" are one
/// phrase); matching is greedy, longest phrase first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backchannels {
    phrases: Vec<Vec<String>>,
}

/// English and Hindi (romanised) backchannels: what a caller says to show they are
/// listening.
pub const DEFAULT_BACKCHANNELS: &[&str] = &[
    "uh-huh",
    "uh huh",
    "mm-hm",
    "mm-hmm",
    "mhm",
    "mm",
    "hmm",
    "yeah",
    "yes",
    "yep",
    "yup",
    "ok",
    "okay",
    "right",
    "sure",
    "alright",
    "all right",
    "i see",
    "got it",
    "oh",
    "ah",
    "aha",
    // A recognizer's spelling of a short "uh-huh" (Whisper tiny writes "Uh"), and fillers:
    // hesitation over the agent is not an interruption.
    "uh",
    "um",
    "cool",
    "great",
    "fine",
    "haan",
    "han",
    "haa",
    "haanji",
    "ji",
    "ji haan",
    "achha",
    "accha",
    "acha",
    "achchha",
    "theek hai",
    "thik hai",
    "theek",
    "hmm haan",
];

impl Default for Backchannels {
    fn default() -> Self {
        Self::new(DEFAULT_BACKCHANNELS.iter().copied())
    }
}

/// How talk over the agent reads against the backchannel list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WordTally {
    /// Words said, a backchannel phrase counting as one.
    pub words: u32,
    /// Some word is not part of a backchannel.
    pub outside: bool,
}

impl Backchannels {
    /// A list of the given phrases (blank ones are ignored).
    pub fn new<S: AsRef<str>>(phrases: impl IntoIterator<Item = S>) -> Self {
        let mut phrases: Vec<Vec<String>> = phrases
            .into_iter()
            .map(|p| {
                tokens(p.as_ref())
                    .map(str::to_lowercase)
                    .collect::<Vec<_>>()
            })
            .filter(|p| !p.is_empty())
            .collect();
        // Longest first, so "ji haan" wins over "ji".
        phrases.sort_by_key(|p| std::cmp::Reverse(p.len()));
        phrases.dedup();
        Self { phrases }
    }

    /// The phrases, as lower-case words joined by spaces.
    pub fn phrases(&self) -> impl Iterator<Item = String> + '_ {
        self.phrases.iter().map(|p| p.join(" "))
    }

    /// Counts the words of `text` and whether any is outside the list.
    pub fn tally(&self, text: &str) -> WordTally {
        let words: Vec<&str> = tokens(text).collect();
        let mut tally = WordTally::default();
        let mut at = 0;
        while at < words.len() {
            let matched = self.phrases.iter().find(|phrase| {
                words.len() - at >= phrase.len()
                    && phrase
                        .iter()
                        .zip(&words[at..])
                        .all(|(p, w)| w.to_lowercase() == *p)
            });
            tally.words += 1;
            match matched {
                Some(phrase) => at += phrase.len(),
                None => {
                    tally.outside = true;
                    at += 1;
                }
            }
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_conjunctions_fillers_and_phrases_mean_wait() {
        for text in [
            "I live in",
            "I live in Pune and",
            "um",
            "I was thinking, uh",
            "My number is",
            "let me see",
            "It was, you know",
            "mera naam Asha aur",
            "I would say...",
            "My appointment is on",
            "The problem is that",
            "Can you",
            "The doctor said",
            "Because I was",
        ] {
            assert_eq!(text_cue(text, AnswerKind::Free), TextCue::Wait, "{text}");
        }
        for text in [
            "That's it",
            "Thank you",
            "I think so",
            "Yes I am",
            "and so on",
            "Yes",
            "Yes I was",
            "I like that",
            "Hold on, go on",
        ] {
            assert_eq!(text_cue(text, AnswerKind::Free), TextCue::Unknown, "{text}");
        }
        assert_eq!(text_cue("", AnswerKind::Free), TextCue::Unknown);
        assert_eq!(
            text_cue("I live in Pune", AnswerKind::Free),
            TextCue::Unknown
        );
        assert_eq!(
            text_cue("I live in Pune.", AnswerKind::Free),
            TextCue::Likely
        );
    }

    #[test]
    fn a_phone_number_is_complete_at_ten_digits() {
        let phone = AnswerKind::Phone;
        assert_eq!(text_cue("98765", phone), TextCue::Wait);
        assert_eq!(text_cue("It's 98765 43", phone), TextCue::Wait);
        assert_eq!(text_cue("98765 43210", phone), TextCue::Complete);
        assert_eq!(text_cue("98765-43210.", phone), TextCue::Complete);
        assert_eq!(text_cue("nine eight seven six five", phone), TextCue::Wait);
        assert_eq!(
            text_cue(
                "nine eight seven, six five four, double three two one",
                phone
            ),
            TextCue::Complete
        );
        assert_eq!(text_cue("ninety eight seventy six", phone), TextCue::Wait);
        assert_eq!(text_cue("I don't have one.", phone), TextCue::Likely);
        assert_eq!(spoken_digits(&["ninety", "eight", "triple", "four"]), 5);
    }

    #[test]
    fn dates_amounts_and_emails_wait_until_complete() {
        let date = AnswerKind::Date;
        assert_eq!(text_cue("the fifteenth of", date), TextCue::Wait);
        assert_eq!(text_cue("March", date), TextCue::Wait);
        assert_eq!(text_cue("15th March", date), TextCue::Unknown);
        assert_eq!(text_cue("15th March 1990", date), TextCue::Complete);
        assert_eq!(text_cue("15/03/1990", date), TextCue::Complete);
        assert_eq!(text_cue("Tomorrow works", date), TextCue::Complete);

        let amount = AnswerKind::Amount;
        assert_eq!(text_cue("fifty thousand rupees", amount), TextCue::Complete);
        assert_eq!(text_cue("about 12 lakh per", amount), TextCue::Wait);
        assert_eq!(text_cue("12 LPA", amount), TextCue::Complete);
        assert_eq!(text_cue("fifty thousand", amount), TextCue::Wait);
        assert_eq!(text_cue("Fifty thousand.", amount), TextCue::Likely);
        assert_eq!(text_cue("One lakh", amount), TextCue::Wait);
        assert_eq!(
            text_cue("It was three hundred and forty nine dollars.", amount),
            TextCue::Complete
        );
        assert_eq!(text_cue("twelve point", amount), TextCue::Wait);

        let email = AnswerKind::Email;
        assert_eq!(text_cue("asha dot k at", email), TextCue::Wait);
        assert_eq!(text_cue("asha dot k at gmail", email), TextCue::Wait);
        assert_eq!(
            text_cue("asha dot k at gmail dot com", email),
            TextCue::Complete
        );
        assert_eq!(text_cue("asha.k@gmail.com", email), TextCue::Complete);
        assert_eq!(text_cue("asha.k@gmail", email), TextCue::Wait);
        // The address has begun before its "at".
        assert_eq!(text_cue("priya dot sharma", email), TextCue::Wait);
        assert_eq!(text_cue("I don't have one.", email), TextCue::Likely);

        // Dates read as numbers, and dates of birth, wait for the year.
        assert_eq!(text_cue("It was twenty one", date), TextCue::Wait);
        assert_eq!(text_cue("It was twenty one oh six", date), TextCue::Wait);
        assert_eq!(
            text_cue("It was twenty one oh six twenty twenty five.", date),
            TextCue::Complete
        );
        let birth = AnswerKind::BirthDate;
        assert_eq!(text_cue("The fourteenth of March", birth), TextCue::Wait);
        assert_eq!(
            text_cue("The fourteenth of March nineteen ninety", birth),
            TextCue::Wait
        );
        assert_eq!(
            text_cue("The fourteenth of March nineteen ninety two.", birth),
            TextCue::Complete
        );
        assert_eq!(text_cue("Tomorrow", birth), TextCue::Unknown);
    }

    #[test]
    fn numbers_read_as_words_are_read_as_numbers() {
        let numbers = |text: &str| spoken_numbers(&tokens(text).collect::<Vec<_>>());
        assert_eq!(numbers("twenty one oh six"), [21, 6]);
        assert_eq!(numbers("nineteen ninety two"), [1992]);
        assert_eq!(numbers("twenty twenty five"), [2025]);
        assert_eq!(numbers("two thousand and five"), [2005]);
        assert_eq!(numbers("the 15th of march 1990"), [15, 1990]);
        // Hundreds are not read (dates do not need them).
        assert_eq!(numbers("seven thousand five hundred"), [7005]);
    }

    #[test]
    fn the_agents_question_decides_the_answer_kind() {
        for (text, kind) in [
            ("Thanks. What is your phone number?", AnswerKind::Phone),
            (
                "Could you share your mobile number, please?",
                AnswerKind::Phone,
            ),
            ("And your email address?", AnswerKind::Email),
            ("What is your date of birth?", AnswerKind::BirthDate),
            ("Which number should we call back?", AnswerKind::Phone),
            ("Could you repeat your number?", AnswerKind::Phone),
            ("And your account number?", AnswerKind::Number),
            ("When would you like to come in?", AnswerKind::Date),
            ("What is your expected salary?", AnswerKind::Amount),
            ("How much do you pay now?", AnswerKind::Amount),
            ("What is your pin code?", AnswerKind::Number),
            (
                "How many years of experience do you have?",
                AnswerKind::Number,
            ),
            ("Where do you live?", AnswerKind::Free),
            (
                "Got it. Where do you live? I ask everyone.",
                AnswerKind::Free,
            ),
            ("Your phone is noted. Where do you live?", AnswerKind::Free),
        ] {
            assert_eq!(AnswerKind::asked_by(text), kind, "{text}");
        }
    }

    #[test]
    fn backchannels_are_counted_as_phrases() {
        let list = Backchannels::default();
        assert_eq!(
            list.tally("Uh-huh."),
            WordTally {
                words: 1,
                outside: false
            }
        );
        // Whisper tiny hears Piper's "Uh-huh." as "Uh".
        assert_eq!(
            list.tally(" Uh"),
            WordTally {
                words: 1,
                outside: false
            }
        );
        assert_eq!(
            list.tally("yeah, okay, ji haan"),
            WordTally {
                words: 3,
                outside: false
            }
        );
        assert_eq!(
            list.tally("Wait, stop"),
            WordTally {
                words: 2,
                outside: true
            }
        );
        assert_eq!(list.tally(""), WordTally::default());
        let custom = Backchannels::new(["Sahi hai", " "]);
        assert_eq!(custom.phrases().collect::<Vec<_>>(), ["sahi hai"]);
        assert!(!custom.tally("sahi hai").outside);
        assert!(custom.tally("yeah").outside);
    }
}

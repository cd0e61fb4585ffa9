//! Text parsed once at the edge: no NUL, no C0/C1 control characters (tab and
//! line breaks only where several lines are meant), trimmed, bounded in
//! characters. Postgres refuses NUL in `TEXT` and `JSONB` (a 500 if it gets
//! that far) and control characters are never what a client meant to store,
//! so they are refused with a reason naming the character.

use super::email::Email;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::ops::Deref;

/// Why a piece of text is refused; phrased to follow the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// A U+0000 anywhere.
    #[error("must not contain NUL (U+0000)")]
    Nul,
    /// A C0 or C1 control character (or DEL), or a line break in one-line text.
    #[error("must not contain the control character U+{:04X}", u32::from(*.0))]
    Control(char),
    /// Longer than the field allows, after trimming.
    #[error("must be at most {0} characters")]
    TooLong(usize),
}

/// The end of the text in a JSON Schema pattern, read the same in every regex
/// dialect. JSON Schema means ECMA-262, where `$` is the end; Python's `re`
/// (schemathesis, Python clients) also lets `$` match before a final line
/// break, so there `^[^\n]*$` admits `"a\n"`, which [`check`] refuses. "Not
/// followed by any character" is the end in both.
pub const PATTERN_END: &str = r"(?![\s\S])";

/// [`Lines::One`] text as a JSON Schema pattern: no control character
/// (C0, DEL, C1: what [`char::is_control`] holds), so no tab or line break.
pub const ONE_LINE_PATTERN: &str = r"^[^\x00-\x1f\x7f-\x9f]*(?![\s\S])";

/// [`Lines::Many`] text as a pattern: no control character but tab, LF and CR.
pub const MANY_LINES_PATTERN: &str = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*(?![\s\S])";

/// [`ONE_LINE_PATTERN`] with at least one character that is not white space.
pub const ONE_LINE_NOT_BLANK_PATTERN: &str =
    r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*(?![\s\S])";

/// [`MANY_LINES_PATTERN`] with at least one character that is not white space.
pub const MANY_LINES_NOT_BLANK_PATTERN: &str = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*(?![\s\S])";

impl Lines {
    /// The text rule as a JSON Schema pattern ([`ONE_LINE_PATTERN`] or [`MANY_LINES_PATTERN`]).
    pub fn pattern(self) -> &'static str {
        match self {
            Lines::One => ONE_LINE_PATTERN,
            Lines::Many => MANY_LINES_PATTERN,
        }
    }

    /// The rule for text that must not be blank, as a pattern.
    pub fn not_blank_pattern(self) -> &'static str {
        match self {
            Lines::One => ONE_LINE_NOT_BLANK_PATTERN,
            Lines::Many => MANY_LINES_NOT_BLANK_PATTERN,
        }
    }
}

/// Whether line breaks and tabs belong in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// A name, an identifier, a search: one line.
    One,
    /// A prompt or a message: tab, CR and LF allowed.
    Many,
}

/// Refuses NUL and control characters (`\t`, `\r`, `\n` allowed with [`Lines::Many`]).
pub fn check(text: &str, lines: Lines) -> Result<(), TextError> {
    for c in text.chars() {
        if c == '\0' {
            return Err(TextError::Nul);
        }
        if c.is_control() && !(lines == Lines::Many && matches!(c, '\t' | '\r' | '\n')) {
            return Err(TextError::Control(c));
        }
    }
    Ok(())
}

/// Checks, trims and bounds `raw` to at most `max` characters.
pub fn parse(raw: &str, lines: Lines, max: usize) -> Result<String, TextError> {
    check(raw, lines)?;
    let trimmed = raw.trim();
    if trimmed.chars().count() > max {
        return Err(TextError::TooLong(max));
    }
    Ok(trimmed.to_string())
}

/// The first string (or object key) in a JSON value that holds NUL or a
/// control character other than tab and line breaks, with its path in the
/// form `serde_path_to_error` prints (`rows[12].phone`). The extractors run
/// it over every body so that no field, typed or not, stores such text.
pub fn first_refused(value: &Value) -> Option<(String, TextError)> {
    fn walk(value: &Value, path: &mut String) -> Option<(String, TextError)> {
        match value {
            Value::String(s) => check(s, Lines::Many).err().map(|e| (path.clone(), e)),
            Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let found = walk(item, path);
                path.truncate(len);
                found
            }),
            Value::Object(map) => map.iter().find_map(|(key, item)| {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                if let Err(e) = check(key, Lines::One) {
                    // The key itself cannot be printed: it holds the bad character.
                    let parent = if len == 0 {
                        ".".to_string()
                    } else {
                        path[..len].to_string()
                    };
                    path.truncate(len);
                    return Some((parent, e));
                }
                path.push_str(key);
                let found = walk(item, path);
                path.truncate(len);
                found
            }),
            Value::Null | Value::Bool(_) | Value::Number(_) => None,
        }
    }
    walk(value, &mut String::new())
}

/// Call variables: an object whose keys are one-line names (trimmed, at most
/// 200 characters) and whose string values, at any depth, hold no NUL or
/// control character other than tab and line breaks. A refusal names the
/// variable (`variables.name`).
///
/// The `email` variable, when set and not blank, must be an email address:
/// it becomes the call's `email` (and the calendar tool's attendee).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Variables {
    map: serde_json::Map<String, Value>,
    email: Option<Email>,
}

/// The variable that holds the person's email address.
pub const EMAIL_VARIABLE: &str = "email";

impl Variables {
    /// The variables as a JSON object.
    pub fn into_map(self) -> serde_json::Map<String, Value> {
        self.map
    }

    /// The variables as a JSON object, and the address in `email`, if any.
    pub fn into_parts(self) -> (serde_json::Map<String, Value>, Option<Email>) {
        (self.map, self.email)
    }
}

/// One variable's value, checked as it is read so the error's path ends in
/// its name; `email` also parsed as an address.
struct VariableValue {
    value: Value,
    email: Option<Email>,
}

/// Reads the value of the variable named `key`.
struct VariableSeed<'k> {
    key: &'k str,
}

impl<'de> serde::de::DeserializeSeed<'de> for VariableSeed<'_> {
    type Value = VariableValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<VariableValue, D::Error> {
        let value = Value::deserialize(d)?;
        if let Some((_, reason)) = first_refused(&value) {
            return Err(serde::de::Error::custom(reason));
        }
        let email = match (&value, self.key == EMAIL_VARIABLE) {
            (Value::String(raw), true) => {
                Email::parse_optional(raw).map_err(serde::de::Error::custom)?
            }
            (Value::Null, true) | (_, false) => None,
            (_, true) => {
                return Err(serde::de::Error::custom(
                    "must be an email address (a string)",
                ));
            }
        };
        Ok(VariableValue { value, email })
    }
}

impl<'de> Deserialize<'de> for Variables {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;

        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Variables;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of variables")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<Variables, A::Error> {
                let mut map = serde_json::Map::new();
                let mut email = None;
                while let Some(key) = access.next_key::<Line<200>>()? {
                    let read = access.next_value_seed(VariableSeed { key: key.as_str() })?;
                    if key.as_str() == EMAIL_VARIABLE {
                        email = read.email;
                    }
                    map.insert(key.into_string(), read.value);
                }
                Ok(Variables { map, email })
            }
        }

        d.deserialize_map(Visit)
    }
}

macro_rules! text_type {
    ($(#[doc = $doc:literal])* $name:ident, $lines:expr) => {
        $(#[doc = $doc])*
        ///
        /// `MAX` is the most characters it may hold after trimming.
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name<const MAX: usize>(String);

        impl<const MAX: usize> $name<MAX> {
            /// Parses `raw`: checked, trimmed, bounded.
            pub fn parse(raw: &str) -> Result<Self, TextError> {
                parse(raw, $lines, MAX).map(Self)
            }

            /// The text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl<const MAX: usize> Deref for $name<MAX> {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl<const MAX: usize> fmt::Display for $name<MAX> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<const MAX: usize> From<$name<MAX>> for String {
            fn from(text: $name<MAX>) -> String {
                text.0
            }
        }

        impl<const MAX: usize> Serialize for $name<MAX> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de, const MAX: usize> Deserialize<'de> for $name<MAX> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// An optional one-line value, `None` when blank: for free-text query filters.
pub fn optional_line<'de, D: Deserializer<'de>, const MAX: usize>(
    d: D,
) -> Result<Option<Line<MAX>>, D::Error> {
    let line = Line::<MAX>::deserialize(d)?;
    Ok((!line.is_empty()).then_some(line))
}

text_type!(
    /// One line of text: a name, an identifier, a search. No tab or line break.
    Line,
    Lines::One
);

text_type!(
    /// Several lines of text: a prompt, a message. Tab, CR and LF allowed.
    Prose,
    Lines::Many
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_refuse_nul_controls_and_breaks_and_are_trimmed() {
        assert_eq!(Line::<5>::parse("  Asha ").unwrap().as_str(), "Asha");
        assert_eq!(Line::<5>::parse("a\0b").unwrap_err(), TextError::Nul);
        assert_eq!(
            Line::<5>::parse("a\u{7}").unwrap_err().to_string(),
            "must not contain the control character U+0007"
        );
        assert_eq!(
            Line::<5>::parse("a\nb").unwrap_err(),
            TextError::Control('\n')
        );
        assert_eq!(
            Line::<5>::parse("x\u{85}").unwrap_err(),
            TextError::Control('\u{85}')
        );
        assert_eq!(Line::<3>::parse("abcd").unwrap_err(), TextError::TooLong(3));
        assert_eq!(Line::<3>::parse("äöü").unwrap().as_str(), "äöü");
    }

    #[test]
    fn prose_keeps_tabs_and_line_breaks() {
        assert_eq!(
            Prose::<20>::parse("Hi\r\n\tthere\n").unwrap().as_str(),
            "Hi\r\n\tthere"
        );
        assert_eq!(
            Prose::<20>::parse("a\u{1b}").unwrap_err(),
            TextError::Control('\u{1b}')
        );
    }

    #[test]
    fn variables_name_the_refused_one() {
        let ok: Variables = serde_json::from_value(json!({" name ": "Asha\nRao", "n": 2})).unwrap();
        assert_eq!(
            ok.into_map(),
            json!({"name": "Asha\nRao", "n": 2})
                .as_object()
                .unwrap()
                .clone()
        );
        let mut de = serde_json::Deserializer::from_str(r#"{"v": {"name": "A\u0000"}}"#);
        let err =
            serde_path_to_error::deserialize::<_, std::collections::HashMap<String, Variables>>(
                &mut de,
            )
            .unwrap_err();
        assert_eq!(err.path().to_string(), "v.name");
        assert!(
            err.to_string().contains("must not contain NUL (U+0000)"),
            "{err}"
        );
    }

    #[test]
    fn the_email_variable_is_an_address() {
        let (map, email) =
            serde_json::from_value::<Variables>(json!({"email": " a@b.co ", "x": 1}))
                .unwrap()
                .into_parts();
        assert_eq!(email.map(Email::into_string).as_deref(), Some("a@b.co"));
        assert_eq!(
            map["email"], " a@b.co ",
            "the variable itself is kept as given"
        );
        let blank = serde_json::from_value::<Variables>(json!({"email": ""})).unwrap();
        assert_eq!(blank.into_parts().1, None);
        let mut de = serde_json::Deserializer::from_str(r#"{"v": {"email": "not-an-address"}}"#);
        let err =
            serde_path_to_error::deserialize::<_, std::collections::HashMap<String, Variables>>(
                &mut de,
            )
            .unwrap_err();
        assert_eq!(err.path().to_string(), "v.email");
        assert!(err.to_string().contains("not an email address"), "{err}");
        assert!(serde_json::from_value::<Variables>(json!({"email": 5})).is_err());
    }

    #[test]
    fn deserializing_gives_the_reason() {
        let err = serde_json::from_value::<Line<10>>(json!("a\u{0}")).unwrap_err();
        assert_eq!(err.to_string(), "must not contain NUL (U+0000)");
    }

    #[test]
    fn the_first_refused_string_is_named_by_its_path() {
        let value = json!({"rows": [{"phone": "1"}, {"name": "ok", "phone": "\u{0}"}]});
        assert_eq!(
            first_refused(&value),
            Some(("rows[1].phone".to_string(), TextError::Nul))
        );
        assert_eq!(first_refused(&json!({"prompt": "a\n\tb"})), None);
        assert_eq!(
            first_refused(&json!({"variables": {"a\u{7}": 1}})),
            Some(("variables".to_string(), TextError::Control('\u{7}')))
        );
        assert_eq!(
            first_refused(&json!(["\u{9f}"])),
            Some(("[0]".to_string(), TextError::Control('\u{9f}')))
        );
    }
}

//! Wire primitives shared by the carrier codecs: lenient serde readers, hand-written
//! JSON output and base64 audio payloads.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{GeneralPurpose, STANDARD_PAD_INDIFFERENT};
use serde::de::{self, Deserialize, Deserializer, Visitor};

use crate::MediaError;

/// Writes padded base64 (what every carrier documents) and reads it with or without padding.
const BASE64: GeneralPurpose = STANDARD_PAD_INDIFFERENT;

/// Appends the decoded audio of a base64 payload to `audio`.
pub(crate) fn decode_payload(payload: &str, audio: &mut Vec<u8>) -> Result<(), MediaError> {
    BASE64
        .decode_vec(payload.as_bytes(), audio)
        .map_err(MediaError::InvalidBase64)
}

/// Appends `audio` as base64 to `out`.
pub(crate) fn push_base64(out: &mut String, audio: &[u8]) {
    BASE64.encode_string(audio, out);
}

/// Appends `value` to `out` as a quoted JSON string.
pub(crate) fn push_json_str(out: &mut String, value: &str) {
    out.push('"');
    let mut clean_from = 0;
    for (at, byte) in value.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&value[clean_from..at]);
        if escape.is_empty() {
            push_unicode_escape(out, byte);
        } else {
            out.push_str(escape);
        }
        clean_from = at + 1;
    }
    out.push_str(&value[clean_from..]);
    out.push('"');
}

fn push_unicode_escape(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u00");
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0xf)]));
}

/// Appends a decimal number to `out` without going through a temporary string.
pub(crate) fn push_u64(out: &mut String, value: u64) {
    use std::fmt::Write as _;
    // Writing into a String cannot fail.
    let _ = write!(out, "{value}");
}

/// A JSON string borrowed from the frame when it has no escapes; numbers are accepted too
/// because carriers are inconsistent about identifier types.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct WireStr<'a>(pub(crate) Cow<'a, str>);

impl WireStr<'_> {
    /// The text of the value.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for WireStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WireStrVisitor;
        impl<'de> Visitor<'de> for WireStrVisitor {
            type Value = WireStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(WireStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(WireStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(WireStr(Cow::Owned(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(WireStr(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(WireStr(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(WireStr(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(WireStr(Cow::Borrowed(if v { "true" } else { "false" })))
            }
        }
        deserializer.deserialize_any(WireStrVisitor)
    }
}

/// Converts an optional wire string into an owned, non-empty string.
pub(crate) fn owned(value: Option<WireStr<'_>>) -> Option<String> {
    value.map(|v| v.0.into_owned()).filter(|v| !v.is_empty())
}

/// Reads a non-negative integer sent as a JSON number or a numeric string; anything else is
/// treated as absent, because these counters are informational.
pub(crate) fn lenient_u64<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    struct LenientU64;
    impl<'de> Visitor<'de> for LenientU64 {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number or a numeric string")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(v).ok())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            // Truncation is intended: some carriers send whole numbers as floats.
            Ok((v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then_some(v as u64))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                .is_some()
            {}
            Ok(None)
        }
    }
    deserializer.deserialize_any(LenientU64)
}

/// Reads a sample rate the same lenient way as [`lenient_u64`].
pub(crate) fn lenient_rate<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u32>, D::Error> {
    Ok(lenient_u64(deserializer)?.and_then(|v| u32::try_from(v).ok()))
}

/// Reads a media `track` and reports whether it is our own outbound audio echoed back, which
/// must never reach speech recognition.
pub(crate) fn track_is_outbound<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<bool, D::Error> {
    let track = Option::<WireStr<'de>>::deserialize(deserializer)?;
    Ok(track.is_some_and(|t| t.as_str().starts_with("outbound")))
}

/// Reads a DTMF digit sent as a one-character string or as a number 0–9.
pub(crate) fn lenient_digit<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<char>, D::Error> {
    let digit = Option::<WireStr<'de>>::deserialize(deserializer)?;
    Ok(digit.and_then(|d| d.as_str().trim().chars().next()))
}

/// Validates a DTMF key and normalises it to upper case.
pub(crate) fn dtmf_key(digit: Option<char>) -> Result<char, MediaError> {
    match digit.map(|d| d.to_ascii_uppercase()) {
        Some(d @ ('0'..='9' | '*' | '#' | 'A'..='D')) => Ok(d),
        Some(other) => Err(MediaError::InvalidDtmfDigit(other)),
        None => Err(MediaError::Malformed(
            "dtmf event without a digit".to_owned(),
        )),
    }
}

/// Turns a serde_json failure into the crate error; only reached on bad input.
pub(crate) fn malformed(err: serde_json::Error) -> MediaError {
    MediaError::Malformed(err.to_string())
}

/// Flattens custom parameters sent as an object (`{"k":"v"}`) or as a list of
/// `{"name":…,"value":…}` pairs into ordered pairs of strings.
pub(crate) fn custom_parameters(value: Option<serde_json::Value>) -> Vec<(String, String)> {
    use serde_json::Value;
    let mut pairs = Vec::new();
    match value {
        Some(Value::Object(map)) => {
            pairs.extend(map.into_iter().map(|(k, v)| (k, scalar_text(v))));
        }
        Some(Value::Array(items)) => {
            for item in items {
                if let Value::Object(mut entry) = item
                    && let Some(Value::String(name)) = entry.remove("name")
                {
                    let value = entry.remove("value").map(scalar_text).unwrap_or_default();
                    pairs.push((name, value));
                }
            }
        }
        Some(Value::String(text)) if !text.is_empty() => {
            // A JSON object encoded as a string is still a set of parameters.
            if let Ok(inner @ Value::Object(_)) = serde_json::from_str::<Value>(&text) {
                return custom_parameters(Some(inner));
            }
        }
        _ => {}
    }
    pairs
}

/// The text of a JSON value: strings as-is, null as empty, anything else as JSON.
pub(crate) fn scalar_text(value: serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut out = String::new();
        push_json_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
        let back: String = serde_json::from_str(&out).unwrap();
        assert_eq!(back, "a\"b\\c\nd\u{1}é");
    }

    #[test]
    fn lenient_numbers_accept_strings_and_numbers() {
        #[derive(serde::Deserialize)]
        struct N {
            #[serde(default, deserialize_with = "lenient_u64")]
            n: Option<u64>,
        }
        let read = |json: &str| serde_json::from_str::<N>(json).unwrap().n;
        assert_eq!(read(r#"{"n":"42"}"#), Some(42));
        assert_eq!(read(r#"{"n":42}"#), Some(42));
        assert_eq!(read(r#"{"n":42.0}"#), Some(42));
        assert_eq!(read(r#"{"n":null}"#), None);
        assert_eq!(read(r#"{"n":"x"}"#), None);
        assert_eq!(read(r#"{}"#), None);
    }

    #[test]
    fn wire_str_borrows_unescaped_text() {
        let json = r#"["plain","with\/slash",7]"#;
        let parsed: Vec<WireStr<'_>> = serde_json::from_str(json).unwrap();
        assert!(matches!(parsed[0].0, Cow::Borrowed("plain")));
        assert_eq!(parsed[1].as_str(), "with/slash");
        assert_eq!(parsed[2].as_str(), "7");
    }

    #[test]
    fn custom_parameters_accept_objects_and_pair_lists() {
        let object = serde_json::json!({"token": "t1", "n": 3});
        assert_eq!(
            custom_parameters(Some(object)),
            vec![("n".into(), "3".into()), ("token".into(), "t1".into())]
        );
        let list = serde_json::json!([{"name": "token", "value": "t1"}]);
        assert_eq!(
            custom_parameters(Some(list)),
            vec![("token".into(), "t1".into())]
        );
    }
}

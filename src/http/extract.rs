//! Request extractors that turn malformed input into 4xx `{message}` answers
//! naming the offending field.

use super::error::ApiError;
use crate::domain::text;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use bytes::Bytes;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::collections::HashMap;

/// A JSON body parsed with field paths in its error messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| {
                let mime = ct.split(';').next().unwrap_or_default().trim();
                mime.eq_ignore_ascii_case("application/json") || mime.ends_with("+json")
            });
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge("Request body is too large".into())
            } else {
                ApiError::BadRequest(format!("Could not read the request body: {rejection}"))
            }
        })?;
        if !is_json {
            return Err(ApiError::UnsupportedMediaType(
                "Content-Type must be application/json".into(),
            ));
        }
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses a JSON body in two steps, so each kind of failure says what it is:
/// text that is not JSON names the line and column, a document that is not
/// an object says so, and a value of the wrong type names its field path and
/// the type expected there ("`retryPolicy.maxAttempts: expected an integer`").
///
/// A whole-number float (`20.0`) counts as an integer, as JSON Schema says.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut value: Value = serde_json::from_slice(bytes)
        .map_err(|err| ApiError::BadRequest(format!("the body is not valid JSON: {err}")))?;
    if !value.is_object() {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object".into(),
        ));
    }
    refuse_control_text(&value)?;
    integral_floats_as_integers(&mut value);
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let detail = err.into_inner().to_string();
        ApiError::BadRequest(field_message(&path, &detail))
    })
}

/// Refuses NUL and control characters in every string of a body, the fields
/// not typed as [`text`] included, so none reaches the store.
fn refuse_control_text(value: &Value) -> Result<(), ApiError> {
    match text::first_refused(value) {
        None => Ok(()),
        Some((path, reason)) => Err(ApiError::BadRequest(field_message(
            &path,
            &reason.to_string(),
        ))),
    }
}

/// The largest magnitude a float holds every whole number up to (2^53):
/// beyond it `1e300` would turn into a different integer than was meant.
const EXACT_FLOAT_LIMIT: f64 = 9_007_199_254_740_992.0;

/// Rewrites every float with no fractional part (`20.0`, `-3e2`) as the
/// integer it equals, so integer fields accept it; float fields accept an
/// integer already, and JSON Schema counts both as the same number.
fn integral_floats_as_integers(value: &mut Value) {
    match value {
        Value::Number(number) if number.is_f64() => {
            let Some(float) = number.as_f64() else { return };
            if float.fract() != 0.0 || float.abs() > EXACT_FLOAT_LIMIT {
                return;
            }
            // Exact: `float` is whole and within ±2^53.
            #[allow(clippy::cast_possible_truncation)]
            let whole = float as i64;
            *number = Number::from(whole);
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

/// `"<path>: <reason>"` from serde's message for the value at `path` (`.`
/// for the body itself), with Rust's type names put in JSON's words.
fn field_message(path: &str, detail: &str) -> String {
    let join = |field: &str| {
        if path == "." || path.is_empty() {
            field.to_string()
        } else {
            format!("{path}.{field}")
        }
    };
    let at = if path.is_empty() { "." } else { path };
    if let Some(rest) = detail.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return format!("{}: is required", join(field));
    }
    if let Some(rest) = detail.strip_prefix("unknown field `") {
        // The path already ends at the unknown field.
        let known = rest.split_once("`, ").map(|(_, known)| known);
        return match known {
            Some(known) => format!("{at}: unknown field, {known}"),
            None => format!("{at}: unknown field"),
        };
    }
    if let Some((_, expected)) = detail
        .strip_prefix("invalid type: ")
        .or_else(|| detail.strip_prefix("invalid value: "))
        .and_then(|rest| rest.rsplit_once(", expected "))
    {
        return format!("{at}: expected {}", json_type_name(expected));
    }
    format!("{at}: {detail}")
}

/// serde's "expected …" in the words of a JSON client.
fn json_type_name(expected: &str) -> Cow<'_, str> {
    let name = match expected {
        "u8" => "an integer from 0 to 255",
        "u16" => "an integer from 0 to 65535",
        "u32" => "an integer from 0 to 4294967295",
        "u64" | "usize" | "u128" => "an integer of at least 0",
        "i8" => "an integer from -128 to 127",
        "i16" => "an integer from -32768 to 32767",
        "i32" => "an integer from -2147483648 to 2147483647",
        "i64" | "isize" | "i128" => "an integer",
        "f32" | "f64" => "a number",
        "a sequence" => "an array",
        "a map" => "an object",
        "a boolean" | "a string" | "a character" => return Cow::Borrowed(expected),
        other if other.starts_with("struct ") => "an object",
        other if other.starts_with("a sequence") => "an array",
        other if other.starts_with("a map") => "an object",
        other if other.starts_with("tuple") => "an array",
        other => return Cow::Borrowed(other),
    };
    Cow::Borrowed(name)
}

/// A query string deserialized into `T`, so every handler's parameters are a
/// typed struct that also documents them (`IntoParams`).
///
/// A bad value answers 400 with `{message}` "`<parameter> <reason>`": the
/// field deserializers of query structs phrase their errors as the reason
/// that follows the name ("must be an integer from 1 to 100"). A repeated
/// parameter keeps its last value, as the parameter map handlers read before did.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parse_query(parts.uri.query().unwrap_or_default()).map(ApiQuery)
    }
}

/// Deserializes a raw query string, naming the parameter that failed.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    // serde_urlencoded refuses a repeated field; keep the last value instead.
    let mut pairs: Vec<(Cow<'_, str>, Cow<'_, str>)> = Vec::new();
    let mut slots: HashMap<Cow<'_, str>, usize> = HashMap::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match slots.get(&name) {
            Some(&slot) => pairs[slot].1 = value,
            None => {
                slots.insert(name.clone(), pairs.len());
                pairs.push((name, value));
            }
        }
    }
    // Query values are one line each: no NUL, no control character, no line break.
    for (name, value) in &pairs {
        text::check(value, text::Lines::One)
            .map_err(|reason| ApiError::BadRequest(format!("{name} {reason}")))?;
    }
    let once = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&pairs)
        .finish();
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(once.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let reason = err.into_inner();
        if path == "." || path.is_empty() {
            ApiError::BadRequest(format!("Invalid query string: {reason}"))
        } else {
            ApiError::BadRequest(format!("{path} {reason}"))
        }
    })
}

/// A query value trimmed, `None` when blank: for free-text filters.
pub fn trimmed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let raw = String::deserialize(d)?;
    let value = raw.trim();
    Ok((!value.is_empty()).then(|| value.to_string()))
}

/// A `true`/`false` query flag, exactly the document's boolean: a blank or
/// `1` is refused rather than read as a guess.
pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let raw = String::deserialize(d)?;
    match raw.as_str() {
        "false" => Ok(false),
        "true" => Ok(true),
        other => Err(D::Error::custom(format!(
            "must be true or false, not \"{other}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::page::PageRequest;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Probe {
        #[serde(default, deserialize_with = "trimmed")]
        search: Option<String>,
        #[serde(default, deserialize_with = "flag")]
        deep: bool,
    }

    fn message(err: ApiError) -> String {
        match err {
            ApiError::BadRequest(message) => message,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn values_are_decoded_trimmed_and_the_last_repeat_wins() {
        let probe: Probe = parse_query("search=%20a+b%20&deep=true&search=c").unwrap();
        assert_eq!(probe.search.as_deref(), Some("c"));
        assert!(probe.deep);
        let probe: Probe = parse_query("search=++&unknown=1").unwrap();
        assert_eq!(probe.search, None);
        assert!(!probe.deep);
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Body {
        #[allow(dead_code)]
        name: String,
        #[serde(default)]
        silence_timeout_seconds: Option<u32>,
        #[serde(default)]
        temperature: Option<f64>,
        #[serde(default)]
        nested: Option<Nested>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Nested {
        items: Vec<u8>,
    }

    #[test]
    fn json_failures_say_what_kind_they_are() {
        let err = parse_json::<Body>(br#"{"name": "#).unwrap_err();
        assert_eq!(
            message(err),
            "the body is not valid JSON: EOF while parsing a value at line 1 column 9"
        );
        for shape in ["[1,2]", "\"a\"", "3", "null"] {
            let err = parse_json::<Body>(shape.as_bytes()).unwrap_err();
            assert_eq!(message(err), "the body must be a JSON object", "{shape}");
        }
        let err = parse_json::<Body>(br#"{"name": true}"#).unwrap_err();
        assert_eq!(message(err), "name: expected a string");
        let err = parse_json::<Body>(br#"{}"#).unwrap_err();
        assert_eq!(message(err), "name: is required");
        let err =
            parse_json::<Body>(br#"{"name": "a", "nested": {"items": [1, "x"]}}"#).unwrap_err();
        assert_eq!(
            message(err),
            "nested.items[1]: expected an integer from 0 to 255"
        );
        let err =
            parse_json::<Body>(br#"{"name": "a", "nested": {"items": [], "b": 1}}"#).unwrap_err();
        assert_eq!(message(err), "nested.b: unknown field, expected `items`");
        let err =
            parse_json::<Body>(br#"{"name": "a", "silenceTimeoutSeconds": 20.5}"#).unwrap_err();
        assert_eq!(
            message(err),
            "silenceTimeoutSeconds: expected an integer from 0 to 4294967295"
        );
    }

    #[test]
    fn a_whole_number_float_is_an_integer() {
        let body: Body = parse_json(
            br#"{"name": "a", "silenceTimeoutSeconds": 20.0, "temperature": 1.0,
                 "nested": {"items": [2e1, 255.0]}}"#,
        )
        .unwrap();
        assert_eq!(body.silence_timeout_seconds, Some(20));
        assert_eq!(body.temperature, Some(1.0));
        assert_eq!(body.nested.unwrap().items, [20, 255]);
        let err =
            parse_json::<Body>(br#"{"name": "a", "silenceTimeoutSeconds": 1e300}"#).unwrap_err();
        assert_eq!(
            message(err),
            "silenceTimeoutSeconds: expected an integer from 0 to 4294967295"
        );
    }

    #[test]
    fn a_bad_value_is_named_with_its_reason() {
        let err = parse_query::<Probe>("deep=maybe").unwrap_err();
        assert_eq!(message(err), "deep must be true or false, not \"maybe\"");
        let err = parse_query::<Probe>("deep=").unwrap_err();
        assert_eq!(message(err), "deep must be true or false, not \"\"");
        let err = parse_query::<PageRequest>("page=2&limit=ten").unwrap_err();
        assert_eq!(message(err), "limit must be an integer from 1 to 100");
    }
}

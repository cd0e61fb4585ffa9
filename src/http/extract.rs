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

/// Parses a JSON body, naming the field that failed.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    refuse_control_text(bytes)?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let detail = strip_position(&inner.to_string());
        if path == "." || path.is_empty() {
            ApiError::BadRequest(format!("Invalid request body: {detail}"))
        } else {
            ApiError::BadRequest(format!("Invalid field {path}: {detail}"))
        }
    })
}

/// Refuses NUL and control characters in every string of a body, the fields
/// not typed as [`text`] included, so none reaches the store. Only bodies that
/// could hold one (an escape or a raw C1/DEL byte) are parsed twice.
fn refuse_control_text(bytes: &[u8]) -> Result<(), ApiError> {
    let suspicious = bytes
        .windows(2)
        .any(|w| w == b"\\u" || w[0] == 0x7f || (w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1])))
        || bytes.last() == Some(&0x7f);
    if !suspicious {
        return Ok(());
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Ok(());
    };
    match text::first_refused(&value) {
        None => Ok(()),
        Some((path, reason)) if path.is_empty() || path == "." => Err(ApiError::BadRequest(
            format!("Invalid request body: {reason}"),
        )),
        Some((path, reason)) => Err(ApiError::BadRequest(format!(
            "Invalid field {path}: {reason}"
        ))),
    }
}

/// serde_json appends "at line 1 column 9"; clients need the field, not the column.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// A query string deserialized into `T`, so every handler's parameters are a
/// typed struct that also documents them (`IntoParams`).
///
/// A bad value answers 400 with `{message}` "`<parameter> <reason>`": the
/// field deserializers of query structs phrase their errors as the reason
/// that follows the name ("must be an integer of at least 1"). A repeated
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

/// A `true`/`false` (or `1`/`0`) query flag; blank reads as false.
pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let raw = String::deserialize(d)?;
    match raw.trim() {
        "" | "false" | "0" => Ok(false),
        "true" | "1" => Ok(true),
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
        let probe: Probe = parse_query("search=%20a+b%20&deep=1&search=c").unwrap();
        assert_eq!(probe.search.as_deref(), Some("c"));
        assert!(probe.deep);
        let probe: Probe = parse_query("search=++&unknown=1").unwrap();
        assert_eq!(probe.search, None);
        assert!(!probe.deep);
    }

    #[test]
    fn a_bad_value_is_named_with_its_reason() {
        let err = parse_query::<Probe>("deep=maybe").unwrap_err();
        assert_eq!(message(err), "deep must be true or false, not \"maybe\"");
        let err = parse_query::<PageRequest>("page=2&limit=ten").unwrap_err();
        assert_eq!(message(err), "limit must be an integer from 1 to 100");
    }
}

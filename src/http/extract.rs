//! Request extractors that turn malformed input into 4xx `{message}` answers
//! naming the offending field.

use super::error::ApiError;
use crate::domain::page::PageRequest;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use bytes::Bytes;
use serde::de::DeserializeOwned;
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

/// serde_json appends "at line 1 column 9"; clients need the field, not the column.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// Raw query parameters; handlers parse what they need into domain types.
#[derive(Debug, Clone, Default)]
pub struct RawQuery(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for RawQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(map) = Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest(format!("Invalid query string: {e}")))?;
        Ok(Self(map))
    }
}

impl RawQuery {
    /// One parameter's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The validated `page`/`limit` pair.
    pub fn page(&self) -> Result<PageRequest, ApiError> {
        PageRequest::parse(self.get("page"), self.get("limit"))
            .map_err(|e| ApiError::BadRequest(e.0))
    }
}

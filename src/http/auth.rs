//! API-key authentication, rate limiting and the twelve-mount rule.

use super::error::ApiError;
use crate::access::api_key::{hash_key, looks_like_key};
use crate::access::key_cache::KeyCache;
use crate::access::rate_limit::RateLimiter;
use crate::access::rate_limit::{Admission, Outcome, Quota};
use crate::domain::{ApiKeyId, OrgId};
use crate::store::Store;
use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::Arc;

/// The only path mounts an API key may reach (spec Authentication 8).
pub const MOUNTS: [&str; 12] = [
    "agents",
    "campaigns",
    "batches",
    "calls",
    "alert",
    "ratings",
    "dashboard",
    "analytics",
    "wallet",
    "balances",
    "numbers",
    "recordings",
];

/// Who is calling: attached to every authenticated request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key's workspace; every query is scoped to it.
    pub org_id: OrgId,
    /// The key's id.
    pub key_id: ApiKeyId,
    /// The key's caps.
    pub daily_limit: i64,
    /// The key's monthly cap.
    pub monthly_limit: i64,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::Unauthorized("Missing API key".into()))
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn set_quota_headers(headers: &mut HeaderMap, quota: Quota) {
    headers.insert("x-ratelimit-limit", HeaderValue::from(quota.limit));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(quota.remaining));
    headers.insert("x-ratelimit-reset", HeaderValue::from(quota.reset));
}

/// Authenticates the key, applies the caps, then checks the mount.
pub async fn authenticate(
    State(store): State<Store>,
    State(limiter): State<Arc<RateLimiter>>,
    State(key_cache): State<KeyCache>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(token) = bearer(req.headers()) else {
        return ApiError::Unauthorized(
            "Missing API key: send the header Authorization: Bearer <API_KEY>".into(),
        )
        .into_response();
    };
    if !looks_like_key(token) {
        return ApiError::Unauthorized("Invalid or revoked API key".into()).into_response();
    }
    let hash = hash_key(token);
    let found = match key_cache.get(&hash) {
        Ok(key) => Some(key),
        Err(miss) => match store.api_key_by_hash(&hash).await {
            Ok(Some(key)) => {
                if let Some(miss) = miss {
                    key_cache.put(miss, &hash, &key);
                }
                Some(key)
            }
            Ok(None) => None,
            Err(err) => return ApiError::Store(err).into_response(),
        },
    };
    let key = match found {
        Some(key) if key.revoked_at.is_none() => key,
        _ => {
            return ApiError::Unauthorized("Invalid or revoked API key".into()).into_response();
        }
    };
    let admission = match limiter.admit(&key).await {
        Ok(a) => a,
        Err(err) => return ApiError::Store(err).into_response(),
    };
    let quota = match admission {
        Admission::Allowed(quota) => quota,
        Admission::Limited {
            scope,
            limit,
            used,
            retry_after,
            quota,
        } => {
            limiter.record(key.id, Outcome::RateLimited);
            let body = json!({
                "message": format!("Rate limit exceeded: {used} of {limit} {scope} requests used"),
                "scope": scope,
                "limit": limit,
                "used": used,
            });
            let mut resp = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
            set_quota_headers(resp.headers_mut(), quota);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            return resp;
        }
        Admission::Revoked => {
            return ApiError::Unauthorized("Invalid or revoked API key".into()).into_response();
        }
    };
    let key_id = key.id;
    req.extensions_mut().insert(Caller {
        org_id: key.org_id,
        key_id: key.id,
        daily_limit: key.daily_limit,
        monthly_limit: key.monthly_limit,
    });
    let mut resp = next.run(req).await;
    limiter.record(key_id, Outcome::of_status(resp.status().as_u16()));
    set_quota_headers(resp.headers_mut(), quota);
    resp
}

/// Answers any `/api/...` path no route matched: 404 inside a mount, 403 outside.
pub async fn api_fallback(req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mount = path
        .strip_prefix("/api/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    if MOUNTS.contains(&mount) {
        ApiError::NotFound(format!("Cannot {method} {path}")).into_response()
    } else {
        ApiError::Forbidden(format!("The endpoint {path} is not available via API key"))
            .into_response()
    }
}

/// [`authenticate`] for `/api` paths only; everything else passes untouched.
pub async fn authenticate_api_paths(
    store: State<Store>,
    limiter: State<Arc<RateLimiter>>,
    key_cache: State<KeyCache>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if path == "/api" || path.starts_with("/api/") {
        authenticate(store, limiter, key_cache, req, next).await
    } else {
        next.run(req).await
    }
}

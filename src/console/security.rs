//! Headers every console response carries, and the refusal of API keys:
//! the console is for people with a session, the API for keys, and neither
//! credential opens the other's door.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// No inline script or style, nothing from elsewhere, never framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
media-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

/// Adds the Content-Security-Policy and its companions to every response.
pub async fn headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

/// Answers 403 to a request that presents an API key: keys open the API's
/// twelve mounts, not the console.
pub async fn refuse_api_keys(req: Request, next: Next) -> Response {
    if req.headers().contains_key(header::AUTHORIZATION) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({
                "message": "API keys open the API under /api; the console needs a signed-in person"
            })),
        )
            .into_response();
    }
    next.run(req).await
}

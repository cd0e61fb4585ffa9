//! The console's defences against cross-site requests. Every state-changing
//! request (any method but GET, HEAD and OPTIONS) passes two checks, and a
//! refusal is a 403 with the console's error page and a log line, before any
//! handler runs, so it never starts a session or changes anything:
//!
//! 1. **Where it came from** ([`refuse_cross_site`]). A request whose
//!    `Origin` is not this site ([`Site`]: the public URL's origin, or the
//!    origin the request's own `Host` names under the public URL's scheme) is
//!    refused; so are `Origin: null` and an unreadable one. Without `Origin`,
//!    `Sec-Fetch-Site` decides: `same-origin` and `none` (the person's own
//!    action) pass, `same-site`, `cross-site` and any other value are
//!    refused. A request with neither header passes this check: every
//!    current browser sends `Origin` on a cross-origin POST, so such a
//!    request comes from a program (curl, the tests) or a browser too old to
//!    send either, and the token check below still applies to it.
//! 2. **A token the attacker cannot read.** Signed in, the session's CSRF
//!    token ([`require_token`]), in the `X-CSRF-Token` header (htmx requests:
//!    the layout sets it on `<body>`) or a `_csrf` field of a urlencoded form.
//!    Signing in has no session yet, so the sign-in form carries a
//!    pre-session token instead ([`PreSession`]): rendering the form sets a
//!    random nonce in a cookie (`HttpOnly`, `SameSite=Strict`, one hour;
//!    `Secure` and `__Host-`-prefixed when the public URL is https) and puts
//!    in the form's `_csrf` field the time it was issued and an HMAC of the
//!    nonce and that time under a key derived from the server secret for
//!    this purpose alone. The POST must carry both, the tag must verify
//!    (constant time) and be under an hour old. Because the field is bound to
//!    the cookie by the MAC, an attacker who can plant a cookie (a sibling
//!    subdomain, a man in the middle on http) cannot choose a matching pair:
//!    at best replay one this server issued to them within the hour, which
//!    the origin check refuses from their page; on https the `__Host-` prefix
//!    keeps sibling domains from planting the cookie at all.
//!
//! The session cookie is `SameSite=Lax` too, which old browsers ignore.

use super::MAX_FORM_BODY;
use super::error::ConsoleError;
use super::origin::{Origin, Site};
use super::session;
use crate::config::Settings;
use crate::domain::clock::SharedClock;
use crate::secrets::server_secret::ServerSecret;
use crate::store::Store;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::sync::Arc;
use std::time::Duration;
use voxline_actors::signing::Signer;

/// The header htmx requests carry the token in.
pub const HEADER: &str = "x-csrf-token";
/// The form field plain forms carry the token in.
pub const FIELD: &str = "_csrf";

/// The path that changes state without a session yet: signing in. Its
/// token is the pre-session one.
const SIGN_IN: &str = "/sign-in";

/// The pre-session cookie's name over http.
pub const SIGN_IN_COOKIE: &str = "voxline_sign_in";
/// Its name over https: the `__Host-` prefix makes browsers refuse it unless
/// it is `Secure`, has `Path=/` and no `Domain`, so no sibling domain can set it.
pub const SIGN_IN_COOKIE_SECURE: &str = "__Host-voxline_sign_in";
/// How long a rendered sign-in form can be sent.
pub const SIGN_IN_TTL: Duration = Duration::from_secs(3600);
/// The key purpose of the sign-in form's tags (see `Signer::derived`).
const SIGN_IN_PURPOSE: &str = "voxline/console-sign-in/v1";

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Refuses a state-changing request that another site's page made (see the
/// module docs for the rule), with 403 and a log line.
pub async fn refuse_cross_site(
    State(site): State<Arc<Site>>,
    req: Request,
    next: Next,
) -> Response {
    if is_safe(req.method()) {
        return next.run(req).await;
    }
    let headers = req.headers();
    let origin = headers.get(header::ORIGIN);
    let fetch_site = headers.get("sec-fetch-site");
    let ours = match (origin, fetch_site) {
        (Some(origin), _) => origin
            .to_str()
            .ok()
            .and_then(Origin::parse)
            .is_some_and(|o| site.is(&o, headers, req.uri().authority())),
        (None, Some(fetch_site)) => matches!(fetch_site.as_bytes(), b"same-origin" | b"none"),
        (None, None) => true,
    };
    if ours {
        return next.run(req).await;
    }
    tracing::warn!(
        method = %req.method(),
        path = %req.uri().path(),
        origin = ?origin,
        sec_fetch_site = ?fetch_site,
        "console: refused a state-changing request from another site"
    );
    ConsoleError::CrossSite.into_response()
}

/// Lets safe methods through; for the others requires a live session and its
/// CSRF token, and hands the session on to the handler. Signing in needs the
/// sign-in form's pre-session token instead.
pub async fn require_token(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(secret): State<ServerSecret>,
    State(settings): State<Arc<Settings>>,
    req: Request,
    next: Next,
) -> Response {
    if is_safe(req.method()) {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    if parts.uri.path() == SIGN_IN {
        let (given, body) = match given_token(&parts, body).await {
            Ok(found) => found,
            Err(err) => return err.into_response(),
        };
        let secure = session::secure_cookies(&settings);
        if !PreSession::valid(&secret, &clock, secure, &parts.headers, given.as_deref()) {
            return refused(&parts);
        }
        return next.run(Request::from_parts(parts, body)).await;
    }
    let user = match session::lookup(&parts.headers, &store, &clock).await {
        Ok(Some(user)) => user,
        Ok(None) => return ConsoleError::not_signed_in(&parts).into_response(),
        Err(err) => return ConsoleError::Store(err).into_response(),
    };
    let (given, body) = match given_token(&parts, body).await {
        Ok(found) => found,
        Err(err) => return err.into_response(),
    };
    if !given.is_some_and(|g| same(g.as_bytes(), user.csrf.as_bytes())) {
        return refused(&parts);
    }
    parts.extensions.insert(user);
    next.run(Request::from_parts(parts, body)).await
}

/// The 403 of a missing or wrong token, logged.
fn refused(parts: &Parts) -> Response {
    tracing::warn!(
        method = %parts.method,
        path = %parts.uri.path(),
        "console: refused a state-changing request without its CSRF token"
    );
    ConsoleError::Csrf.into_response()
}

/// The token the request carries, from the header or a urlencoded form's
/// field, and the body to hand on (read whole when it was a form).
async fn given_token(parts: &Parts, body: Body) -> Result<(Option<String>, Body), ConsoleError> {
    if let Some(token) = parts.headers.get(HEADER).and_then(|v| v.to_str().ok()) {
        return Ok((Some(token.to_string()), body));
    }
    let is_form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Ok((None, body));
    }
    let bytes = axum::body::to_bytes(body, MAX_FORM_BODY)
        .await
        .map_err(|_| ConsoleError::BadRequest("The form is too large.".into()))?;
    let token = form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == FIELD)
        .map(|(_, v)| v.into_owned());
    Ok((token, Body::from(bytes)))
}

/// The sign-in form's pre-session token: the nonce its cookie carries and
/// the `_csrf` field bound to it (`{issued_ms}.{tag}`, see the module docs).
#[derive(Debug, Clone)]
pub struct PreSession {
    nonce: String,
    field: String,
}

impl PreSession {
    /// The token of a sign-in form rendered now. It keeps the nonce of the
    /// request's cookie when there is one, so two open sign-in tabs (or a
    /// form shown again after a wrong password) both stay valid. `secure`:
    /// whether cookies are `Secure` ([`session::secure_cookies`]).
    pub fn issue(
        secret: &ServerSecret,
        clock: &SharedClock,
        secure: bool,
        headers: &HeaderMap,
    ) -> Self {
        let nonce = nonce_in(headers, secure)
            .map(str::to_string)
            .unwrap_or_else(session::new_token);
        let issued = clock.now().timestamp_millis().to_string();
        let tag = signer(secret).sign(&[nonce.as_bytes(), b".", issued.as_bytes()]);
        let field = format!("{issued}.{}", URL_SAFE_NO_PAD.encode(tag));
        Self { nonce, field }
    }

    /// The value of the form's hidden `_csrf` field.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The `Set-Cookie` value that carries the nonce.
    pub fn cookie(&self, secure: bool) -> HeaderValue {
        let (name, secure) = cookie_name(secure);
        let value = format!(
            "{name}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            self.nonce,
            SIGN_IN_TTL.as_secs()
        );
        // The nonce is base64url: always a valid header value.
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// The `Set-Cookie` value that removes the cookie once it served.
    pub fn clear_cookie(secure: bool) -> HeaderValue {
        if secure {
            HeaderValue::from_static(
                "__Host-voxline_sign_in=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict; Secure",
            )
        } else {
            HeaderValue::from_static(
                "voxline_sign_in=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict",
            )
        }
    }

    /// Whether `given` is a field this server issued for the nonce in the
    /// request's cookie, less than [`SIGN_IN_TTL`] ago. `secure` as for
    /// [`PreSession::issue`].
    pub fn valid(
        secret: &ServerSecret,
        clock: &SharedClock,
        secure: bool,
        headers: &HeaderMap,
        given: Option<&str>,
    ) -> bool {
        let Some(nonce) = nonce_in(headers, secure) else {
            return false;
        };
        let Some((issued, tag)) = given.and_then(|g| g.split_once('.')) else {
            return false;
        };
        let (Ok(issued_ms), Ok(tag)) = (issued.parse::<i64>(), URL_SAFE_NO_PAD.decode(tag)) else {
            return false;
        };
        let ttl = i64::try_from(SIGN_IN_TTL.as_millis()).unwrap_or(i64::MAX);
        let age = clock.now().timestamp_millis().saturating_sub(issued_ms);
        // A little negative age is another node's clock running ahead.
        (-60_000..ttl).contains(&age)
            && signer(secret).verify(&[nonce.as_bytes(), b".", issued.as_bytes()], &tag)
    }
}

/// The cookie's name and its `Secure` attribute.
fn cookie_name(secure: bool) -> (&'static str, &'static str) {
    if secure {
        (SIGN_IN_COOKIE_SECURE, "; Secure")
    } else {
        (SIGN_IN_COOKIE, "")
    }
}

/// The pre-session nonce in the request's cookies, when well formed. Over
/// https only the `__Host-` cookie counts: a plain one may come from a sibling.
fn nonce_in(headers: &HeaderMap, secure: bool) -> Option<&str> {
    session::cookie(headers, cookie_name(secure).0).filter(|n| {
        n.len() == 43
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

fn signer(secret: &ServerSecret) -> Signer {
    Signer::derived(SIGN_IN_PURPOSE, secret)
}

/// Compares without stopping at the first difference, so the time taken
/// tells nothing about how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(super::same(b"abc", b"abc"));
        assert!(!super::same(b"abc", b"abd"));
        assert!(!super::same(b"abc", b"ab"));
    }

    #[test]
    fn the_sign_in_cookie_is_strict_and_host_only_on_https() {
        let token = PreSession {
            nonce: session::new_token(),
            field: String::new(),
        };
        let https = token.cookie(true);
        let https = https.to_str().unwrap();
        assert!(https.starts_with("__Host-voxline_sign_in="), "{https}");
        for part in [
            "Path=/;",
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Max-Age=3600",
        ] {
            assert!(https.contains(part), "{part}: {https}");
        }
        let http = token.cookie(false);
        let http = http.to_str().unwrap();
        assert!(http.starts_with("voxline_sign_in=") && !http.contains("Secure"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("voxline_sign_in={}", token.nonce)).unwrap(),
        );
        assert_eq!(nonce_in(&h, false), Some(token.nonce.as_str()));
        assert_eq!(nonce_in(&h, true), None, "over https only __Host- counts");
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("voxline_sign_in=short"),
        );
        assert_eq!(nonce_in(&h, false), None);
    }
}

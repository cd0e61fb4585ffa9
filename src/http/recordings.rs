//! Call recordings (decisions §9): `recording-url` hands out a signed link to
//! the service's own `/recordings/…` path, valid for 15 minutes and usable
//! without an API key; `/api/calls/{id}/recording` streams the file to a key
//! holder. Both honour a single `Range`.

use super::MessageBody;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use crate::app::state::AppState;
use crate::domain::{CallId, OrgId};
use crate::store::RecordingFileRow;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::SeekFrom;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// How long a signed recording link stays valid.
pub const LINK_LIFETIME_SECONDS: i64 = 15 * 60;
/// Bytes read from disk per streamed chunk.
const CHUNK: usize = 64 * 1024;

type HmacSha256 = Hmac<Sha256>;

/// The API-key routes (`/api/calls/{id}/recording-url`, `/api/calls/{id}/recording`).
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(recording_url))
        .routes(routes!(recording_audio))
}

/// The signed-link route, outside `/api` and without an API key.
pub fn public_router() -> Router<AppState> {
    Router::new().route("/recordings/{org_id}/{file}", get(signed_recording))
}

/// Signs and checks recording links with a key derived from the server secret.
struct LinkSigner {
    key: Vec<u8>,
}

impl LinkSigner {
    fn new(server_secret: &[u8]) -> Self {
        let mut key = b"voxline/recording-link/v1\0".to_vec();
        key.extend_from_slice(server_secret);
        Self { key }
    }

    fn mac(&self, org_id: &str, call_id: &str, expires: i64) -> HmacSha256 {
        // HMAC takes keys of any length, so construction cannot fail.
        let mut mac = match <HmacSha256 as KeyInit>::new_from_slice(&self.key) {
            Ok(mac) => mac,
            Err(_) => unreachable!("hmac takes any key length"),
        };
        mac.update(format!("{org_id}/{call_id}.{expires}").as_bytes());
        mac
    }

    fn sign(&self, org_id: &str, call_id: &str, expires: i64) -> String {
        hex::encode(self.mac(org_id, call_id, expires).finalize().into_bytes())
    }

    fn verify(&self, org_id: &str, call_id: &str, expires: i64, signature: &str) -> bool {
        hex::decode(signature).is_ok_and(|sig| {
            self.mac(org_id, call_id, expires)
                .verify_slice(&sig)
                .is_ok()
        })
    }
}

/// `GET /api/calls/{id}/recording-url` body.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordingUrlView {
    /// Signed link valid for 15 minutes; null when the call has no retained recording.
    pub url: Option<String>,
    /// The call.
    pub call_id: String,
}

fn call_not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Call {id} not found"))
}

fn parse_call_id(id: &str) -> ApiResult<CallId> {
    id.parse::<CallId>().map_err(|_| call_not_found(id))
}

/// The base of links to this service: the configured public URL, else the
/// host the client reached.
fn public_base(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.settings.public_url {
        return url.clone();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// A short-lived signed link to a call's recording.
#[utoipa::path(get, path = "/api/calls/{callId}/recording-url", tag = "calls",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = RecordingUrlView), (status = 404, body = MessageBody)))]
async fn recording_url(
    State(state): State<AppState>,
    caller: Caller,
    Path(call_id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Json<RecordingUrlView>> {
    let id = parse_call_id(&call_id)?;
    let org = caller.org_id;
    if !state.store.call_exists(org, id).await? {
        return Err(call_not_found(&call_id));
    }
    let url = state.store.recording_file(org, id).await?.map(|file| {
        let expires = state.clock.now().timestamp() + LINK_LIFETIME_SECONDS;
        let signature =
            LinkSigner::new(&state.secret).sign(&org.to_string(), &id.to_string(), expires);
        format!(
            "{}/recordings/{org}/{id}.{}?expires={expires}&signature={signature}",
            public_base(&state, &headers),
            file.format
        )
    });
    Ok(Json(RecordingUrlView {
        url,
        call_id: id.to_string(),
    }))
}

/// Stream a call's recording; honours `Range`.
#[utoipa::path(get, path = "/api/calls/{callId}/recording", tag = "calls",
    params(("callId" = String, Path, description = "Call id"),
        ("Range" = Option<String>, Header, description = "One byte range, e.g. bytes=0-1023")),
    responses((status = 200, description = "The recording (audio/wav)", content_type = "audio/wav"),
        (status = 206, description = "The requested byte range", content_type = "audio/wav"),
        (status = 404, body = MessageBody), (status = 416, body = MessageBody)))]
async fn recording_audio(
    State(state): State<AppState>,
    caller: Caller,
    Path(call_id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = parse_call_id(&call_id)?;
    let org = caller.org_id;
    if !state.store.call_exists(org, id).await? {
        return Err(call_not_found(&call_id));
    }
    let file = state
        .store
        .recording_file(org, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Call {call_id} has no recording")))?;
    serve_file(&file, &headers).await
}

/// The query of a signed link.
#[derive(Debug, Deserialize)]
struct LinkQuery {
    expires: i64,
    signature: String,
}

/// `GET /recordings/{orgId}/{callId}.{format}?expires=…&signature=…`.
async fn signed_recording(
    State(state): State<AppState>,
    Path((org_id, file)): Path<(String, String)>,
    query: Result<Query<LinkQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Ok(Query(link)) = query else {
        return Err(ApiError::Forbidden(
            "Recording links need expires and signature".into(),
        ));
    };
    let (call_id, format) = file
        .rsplit_once('.')
        .ok_or_else(|| ApiError::NotFound(format!("Cannot GET /recordings/{org_id}/{file}")))?;
    if !LinkSigner::new(&state.secret).verify(&org_id, call_id, link.expires, &link.signature) {
        return Err(ApiError::Forbidden(
            "Recording link signature is invalid".into(),
        ));
    }
    if state.clock.now().timestamp() > link.expires {
        return Err(ApiError::Forbidden("Recording link has expired".into()));
    }
    let no_recording = || ApiError::NotFound(format!("Call {call_id} has no recording"));
    // A signed path names ids the service signed; any other text names no recording.
    let (Ok(org), Ok(id)) = (org_id.parse::<OrgId>(), call_id.parse::<CallId>()) else {
        return Err(no_recording());
    };
    let recording = state
        .store
        .recording_file(org, id)
        .await?
        .filter(|r| r.format == format)
        .ok_or_else(no_recording)?;
    serve_file(&recording, &headers).await
}

/// A `Range` header reduced to what is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ByteRange {
    /// The whole file (no range, or one we do not serve partially).
    Whole,
    /// Bytes `start..=end`.
    Part { start: u64, end: u64 },
    /// Outside the file: 416.
    Unsatisfiable,
}

/// Reads a `Range` header for a file of `len` bytes. Several ranges, other
/// units or malformed values fall back to the whole file, as RFC 9110 allows.
fn byte_range(header: Option<&str>, len: u64) -> ByteRange {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return ByteRange::Whole;
    };
    if spec.contains(',') {
        return ByteRange::Whole;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return ByteRange::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // A suffix: the last N bytes.
        return match last.parse::<u64>() {
            Ok(0) => ByteRange::Unsatisfiable,
            Ok(_) if len == 0 => ByteRange::Unsatisfiable,
            Ok(n) => ByteRange::Part {
                start: len.saturating_sub(n),
                end: len - 1,
            },
            Err(_) => ByteRange::Whole,
        };
    }
    let Ok(start) = first.parse::<u64>() else {
        return ByteRange::Whole;
    };
    let end = if last.is_empty() {
        len.saturating_sub(1)
    } else {
        match last.parse::<u64>() {
            Ok(end) if end >= start => end.min(len.saturating_sub(1)),
            _ => return ByteRange::Whole,
        }
    };
    if start >= len {
        return ByteRange::Unsatisfiable;
    }
    ByteRange::Part { start, end }
}

fn content_type(format: &str) -> &'static str {
    match format {
        "ogg" => "audio/ogg",
        _ => "audio/wav",
    }
}

/// Streams `recording` (or the part `Range` asks for) from disk.
async fn serve_file(recording: &RecordingFileRow, headers: &HeaderMap) -> ApiResult<Response> {
    let mut file = match tokio::fs::File::open(&recording.path).await {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(call = %recording.call_id, path = %recording.path, "recording file is missing");
            return Err(ApiError::NotFound(format!(
                "Call {} has no recording",
                recording.call_id
            )));
        }
        Err(err) => return Err(ApiError::Internal(err.into())),
    };
    let len = file
        .metadata()
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
        .len();
    let range = byte_range(
        headers.get(header::RANGE).and_then(|v| v.to_str().ok()),
        len,
    );
    let (status, start, count) = match range {
        ByteRange::Whole => (StatusCode::OK, 0, len),
        ByteRange::Part { start, end } => (StatusCode::PARTIAL_CONTENT, start, end - start + 1),
        ByteRange::Unsatisfiable => {
            let mut response = (
                StatusCode::RANGE_NOT_SATISFIABLE,
                Json(MessageBody {
                    message: format!("Range is outside the recording's {len} bytes"),
                }),
            )
                .into_response();
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{len}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return Ok(response);
        }
    };
    file.seek(SeekFrom::Start(start))
        .await
        .map_err(|e| ApiError::Internal(e.into()))?;
    let body = Body::from_stream(futures::stream::unfold(
        (file, count),
        |(mut file, left)| async move {
            if left == 0 {
                return None;
            }
            let want = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
            let mut buf = vec![0; want];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(bytes::Bytes::from(buf)), (file, left - n as u64)))
                }
                Err(err) => Some((Err(err), (file, 0))),
            }
        },
    ));
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&recording.format)),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(count));
    if status == StatusCode::PARTIAL_CONTENT
        && let Ok(value) =
            HeaderValue::from_str(&format!("bytes {start}-{}/{len}", start + count - 1))
    {
        h.insert(header::CONTENT_RANGE, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_rfc_9110_says() {
        assert_eq!(byte_range(None, 100), ByteRange::Whole);
        assert_eq!(
            byte_range(Some("bytes=0-9"), 100),
            ByteRange::Part { start: 0, end: 9 }
        );
        assert_eq!(
            byte_range(Some("bytes=90-"), 100),
            ByteRange::Part { start: 90, end: 99 }
        );
        assert_eq!(
            byte_range(Some("bytes=-10"), 100),
            ByteRange::Part { start: 90, end: 99 }
        );
        assert_eq!(
            byte_range(Some("bytes=50-500"), 100),
            ByteRange::Part { start: 50, end: 99 }
        );
        assert_eq!(
            byte_range(Some("bytes=100-"), 100),
            ByteRange::Unsatisfiable
        );
        assert_eq!(byte_range(Some("bytes=-0"), 100), ByteRange::Unsatisfiable);
        assert_eq!(byte_range(Some("bytes=0-1,5-6"), 100), ByteRange::Whole);
        assert_eq!(byte_range(Some("items=0-1"), 100), ByteRange::Whole);
        assert_eq!(byte_range(Some("bytes=9-2"), 100), ByteRange::Whole);
    }

    #[test]
    fn links_verify_only_with_their_own_call_and_expiry() {
        let signer = LinkSigner::new(b"secret");
        let sig = signer.sign("org", "call", 100);
        assert!(signer.verify("org", "call", 100, &sig));
        assert!(!signer.verify("org", "call", 101, &sig));
        assert!(!signer.verify("org", "other", 100, &sig));
        assert!(!signer.verify("other", "call", 100, &sig));
        assert!(!signer.verify("org", "call", 100, "zz"));
        assert!(!LinkSigner::new(b"other").verify("org", "call", 100, &sig));
    }
}

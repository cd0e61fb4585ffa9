//! Call recordings (decisions §9): `recording-url` hands out a signed link to
//! the service's own `/recordings/…` path, valid for 15 minutes and usable
//! without an API key; `/api/calls/{id}/recording` streams the recording to a
//! key holder. Both read it from the recordings store, so any node serves
//! any call's recording, and both honour a single `Range`.

use super::MessageBody;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use crate::app::state::AppState;
use crate::calls::recording_link::{LinkSigner, recording_link};
use crate::domain::{CallId, OrgId};
use crate::recordings::{RecordingKey, RecordingStore, RecordingStoreError};
use crate::store::RecordingFileRow;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_range_header::{EndPosition, RangeUnsatisfiableError, StartPosition, parse_range_header};
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

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
    let base = public_base(&state, &headers);
    let now = state.clock.now().timestamp();
    let url = state
        .store
        .recording_file(org, id)
        .await?
        .map(|file| recording_link(&state.secret, &base, org, id, &file.format, now));
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
    serve_recording(&state.recordings, &file, &headers).await
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
    serve_recording(&state.recordings, &recording, &headers).await
}

fn content_type(format: &str) -> &'static str {
    match format {
        "ogg" => "audio/ogg",
        _ => "audio/wav",
    }
}

/// What a `Range` header selects of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selection {
    /// The whole recording (no range, or one to ignore).
    Whole,
    /// These bytes, first to last inclusive.
    Part(RangeInclusive<u64>),
    /// Nothing the recording has.
    Unsatisfiable,
}

/// What `header` selects of a recording of `len` bytes.
///
/// As RFC 9110 (§14.2) has it, a range in another unit, with bad syntax or
/// with a last byte before the first is ignored, and several ranges are
/// answered with the whole recording rather than a multipart body; a suffix
/// longer than the recording selects all of it.
fn select(header: Option<&HeaderValue>, len: u64) -> Selection {
    let Some(text) = header.and_then(|h| h.to_str().ok()).map(str::trim) else {
        return Selection::Whole;
    };
    let parsed = match parse_range_header(text) {
        Ok(parsed) => parsed,
        // `bytes=-0` is well formed and selects nothing.
        Err(RangeUnsatisfiableError::ZeroSuffix) => return Selection::Unsatisfiable,
        Err(_) => return Selection::Whole,
    };
    let [range] = parsed.ranges.as_slice() else {
        return Selection::Whole;
    };
    match (range.start, range.end) {
        (StartPosition::Index(first), EndPosition::Index(last)) if last < first => {
            return Selection::Whole;
        }
        (StartPosition::FromLast(suffix), _) if suffix > len && len > 0 => {
            return Selection::Part(0..=len - 1);
        }
        _ => {}
    }
    match parsed.validate(len).as_deref() {
        Ok([part]) => Selection::Part(part.clone()),
        _ => Selection::Unsatisfiable,
    }
}

/// Serves `recording` (or the part `Range` asks for) from the recordings
/// store, whichever node wrote it.
async fn serve_recording(
    recordings: &RecordingStore,
    recording: &RecordingFileRow,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let missing = || {
        tracing::warn!(call = %recording.call_id, key = %recording.object_key, "recording object is missing");
        ApiError::NotFound(format!("Call {} has no recording", recording.call_id))
    };
    let key = RecordingKey::stored(&recording.object_key).map_err(|_| missing())?;
    let internal = |err: RecordingStoreError| ApiError::Internal(err.into());
    let meta = recordings
        .metadata(&key)
        .await
        .map_err(internal)?
        .ok_or_else(missing)?;
    let len = meta.size;
    let (status, range) = match select(headers.get(header::RANGE), len) {
        Selection::Unsatisfiable => {
            let mut refused = (
                StatusCode::RANGE_NOT_SATISFIABLE,
                Json(MessageBody {
                    message: format!("Range is outside the recording's {len} bytes"),
                }),
            )
                .into_response();
            refused.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{len}"))
                    .map_err(|e| ApiError::Internal(e.into()))?,
            );
            return Ok(refused);
        }
        Selection::Whole => (StatusCode::OK, None),
        Selection::Part(part) => (StatusCode::PARTIAL_CONTENT, Some(part)),
    };
    let found = recordings
        .read(&key, range.as_ref().map(|r| *r.start()..*r.end() + 1))
        .await
        .map_err(internal)?
        .ok_or_else(missing)?;
    let body_len = range.as_ref().map_or(len, |r| r.end() - r.start() + 1);
    let mut response = Response::new(Body::from_stream(found.into_stream()));
    *response.status_mut() = status;
    let out = response.headers_mut();
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&recording.format)),
    );
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    out.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    if let Ok(modified) = HeaderValue::from_str(
        &meta
            .last_modified
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string(),
    ) {
        out.insert(header::LAST_MODIFIED, modified);
    }
    if let Some(part) = range {
        let value = format!("bytes {}-{}/{len}", part.start(), part.end());
        out.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&value).map_err(|e| ApiError::Internal(e.into()))?,
        );
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local recordings store holding one 100-byte recording, and its row.
    async fn store_with_100_bytes() -> (tempfile::TempDir, RecordingStore, RecordingFileRow) {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::recordings::RecordingsLocation::Local(dir.path().join("recordings"));
        let recordings = RecordingStore::open(&root, dir.path()).unwrap();
        let (org_id, call_id) = (OrgId::new(), CallId::new());
        let staged = recordings.staging_file(org_id, call_id, "wav").unwrap();
        std::fs::write(&staged, (0..100u8).collect::<Vec<_>>()).unwrap();
        let key = RecordingKey::for_call(org_id, call_id, "wav");
        recordings.upload(&staged, &key).await.unwrap();
        let recording = RecordingFileRow {
            call_id,
            org_id,
            object_key: key.to_string(),
            format: "wav".into(),
            bytes: 100,
        };
        (dir, recordings, recording)
    }

    /// Status, `Content-Range` and body of serving a 100-byte recording with `range`.
    async fn serve_100_bytes(range: Option<&str>) -> (StatusCode, Option<String>, Vec<u8>) {
        let (_dir, recordings, recording) = store_with_100_bytes().await;
        let mut headers = HeaderMap::new();
        if let Some(range) = range {
            headers.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
        }
        let response = serve_recording(&recordings, &recording, &headers)
            .await
            .unwrap();
        let status = response.status();
        let content_range = response
            .headers()
            .get(header::CONTENT_RANGE)
            .map(|v| v.to_str().unwrap().to_string());
        if status != StatusCode::RANGE_NOT_SATISFIABLE {
            assert_eq!(response.headers()[header::CONTENT_TYPE], "audio/wav");
            assert_eq!(response.headers()[header::ACCEPT_RANGES], "bytes");
        }
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        (status, content_range, body)
    }

    #[tokio::test]
    async fn ranges_are_read_as_rfc_9110_says() {
        let whole = (0..100u8).collect::<Vec<_>>();
        let part = |from: u8, to: u8| {
            (
                StatusCode::PARTIAL_CONTENT,
                Some(format!("bytes {from}-{to}/100")),
                (from..=to).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            serve_100_bytes(None).await,
            (StatusCode::OK, None, whole.clone())
        );
        assert_eq!(serve_100_bytes(Some("bytes=0-9")).await, part(0, 9));
        assert_eq!(serve_100_bytes(Some("bytes=90-")).await, part(90, 99));
        assert_eq!(serve_100_bytes(Some("bytes=-10")).await, part(90, 99));
        assert_eq!(serve_100_bytes(Some("bytes=50-500")).await, part(50, 99));
        assert_eq!(serve_100_bytes(Some("bytes=-500")).await, part(0, 99));
        for unsatisfiable in ["bytes=100-", "bytes=-0"] {
            let (status, content_range, body) = serve_100_bytes(Some(unsatisfiable)).await;
            assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{unsatisfiable}");
            assert_eq!(content_range.as_deref(), Some("bytes */100"));
            let message: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert!(message["message"].is_string(), "{message}");
        }
        for ignored in ["bytes=0-1,5-6", "items=0-1", "bytes=9-2", "bytes=x-"] {
            assert_eq!(
                serve_100_bytes(Some(ignored)).await,
                (StatusCode::OK, None, whole.clone()),
                "{ignored}"
            );
        }
    }

    #[tokio::test]
    async fn a_missing_object_is_no_recording() {
        let (_dir, recordings, recording) = store_with_100_bytes().await;
        let key = RecordingKey::stored(&recording.object_key).unwrap();
        recordings.delete(&key).await.unwrap();
        let err = serve_recording(&recordings, &recording, &HeaderMap::new())
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
        let unkeyed = RecordingFileRow {
            object_key: "/nonexistent//call.wav".into(),
            ..recording
        };
        let err = serve_recording(&recordings, &unkeyed, &HeaderMap::new())
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
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

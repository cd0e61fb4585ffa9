//! Call recordings (decisions §9): `recording-url` hands out a signed link to
//! the service's own `/recordings/…` path, valid for 15 minutes and usable
//! without an API key; `/api/calls/{id}/recording` streams the recording to a
//! key holder. Both read it from the recordings store, so any node serves
//! any call's recording, and both honour a single `Range`.
//!
//! A recording is kept as WAV, and also as Ogg Opus when the server is built
//! with the `opus` feature. Reads serve the format a `format` query or the
//! `Accept` header asks for (the query wins); a format the call's recording
//! is not kept in is a 404 that says which formats it has.

use super::MessageBody;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiQuery;
use crate::calls::recording_link::{LinkSigner, recording_link};
use crate::config::Settings;
use crate::domain::clock::SharedClock;
use crate::domain::{CallId, OrgId};
use crate::http::state::AppState;
use crate::recordings::RecordingStore;
use crate::recordings::serve::{self, ServeRecordingError};
use crate::secrets::server_secret::ServerSecret;
use crate::store::RecordingFileRow;
use crate::store::Store;
use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};
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
    /// Signed link valid for 15 minutes, to the recording in the asked format
    /// (`wav` unless `format` says otherwise); null when the call has no retained recording.
    pub url: Option<String>,
    /// The call.
    pub call_id: String,
    /// The formats the recording is kept in (`wav`, and `ogg` when the server
    /// writes Ogg Opus); empty when there is no retained recording.
    pub formats: Vec<String>,
}

/// A recording's audio format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordingFormat {
    /// Stereo 16-bit PCM WAV, 8 kHz: caller left, agent right.
    Wav,
    /// Stereo Ogg Opus, written beside the WAV when the server is built with `opus`.
    Ogg,
}

impl RecordingFormat {
    /// The format's name, also the object's extension.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Wav => "wav",
            Self::Ogg => "ogg",
        }
    }
}

/// The `format` query of the recording reads.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RecordingFormatQuery {
    /// `wav` or `ogg`; wins over `Accept`. Unknown values are a 400.
    #[param(value_type = Option<String>, pattern = "^(wav|ogg)$")]
    pub format: Option<RecordingFormat>,
}

/// Why a recording has no object in `format`, and what it has.
fn no_such_format(call_id: &str, format: &str, recording: &RecordingFileRow) -> ApiError {
    let mut message = format!(
        "Call {call_id} has no {format} recording; it is kept as {}",
        recording.formats().join(", ")
    );
    if format == "ogg" && !cfg!(feature = "opus") {
        message.push_str(" (this server writes Ogg Opus only when built with the opus feature)");
    }
    ApiError::NotFound(message)
}

/// What one `Accept` media range asks of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acceptable {
    /// `audio/*` or `*/*`: the recording's main format.
    Any,
    /// One format by its media type.
    Format(RecordingFormat),
}

/// The recording formats an `Accept` header asks for, most wanted first
/// (by `q`, then order); ranges with `q=0` and types that are no recording
/// format (`application/json`, …) are left out.
fn accepted(header: Option<&HeaderValue>) -> Vec<Acceptable> {
    let Some(text) = header.and_then(|h| h.to_str().ok()) else {
        return Vec::new();
    };
    let mut ranges: Vec<(f32, Acceptable)> = text
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';');
            let media = parts.next()?.trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let wanted = match media.as_str() {
                "*/*" | "audio/*" => Acceptable::Any,
                "audio/ogg" | "audio/opus" => Acceptable::Format(RecordingFormat::Ogg),
                "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => {
                    Acceptable::Format(RecordingFormat::Wav)
                }
                _ => return None,
            };
            (q > 0.0).then_some((q, wanted))
        })
        .collect();
    // Stable: equal weights keep the client's order.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranges.into_iter().map(|(_, wanted)| wanted).collect()
}

/// The format to serve of `recording`: the query's, else the first of `Accept`'s
/// that the recording has, else its main format. A format asked for (by the query,
/// or by an `Accept` naming only formats it lacks) that it lacks is a 404.
fn choose_format(
    call_id: &str,
    recording: &RecordingFileRow,
    query: Option<RecordingFormat>,
    accept: Option<&HeaderValue>,
) -> ApiResult<String> {
    if let Some(format) = query {
        return match recording.object_key_for(format.as_str()) {
            Some(_) => Ok(format.as_str().to_string()),
            None => Err(no_such_format(call_id, format.as_str(), recording)),
        };
    }
    let wanted = accepted(accept);
    for choice in &wanted {
        match choice {
            Acceptable::Any => return Ok(recording.format.clone()),
            Acceptable::Format(format) if recording.object_key_for(format.as_str()).is_some() => {
                return Ok(format.as_str().to_string());
            }
            Acceptable::Format(_) => {}
        }
    }
    match wanted.first() {
        Some(Acceptable::Format(format)) => {
            Err(no_such_format(call_id, format.as_str(), recording))
        }
        _ => Ok(recording.format.clone()),
    }
}

fn call_not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Call {id} not found"))
}

fn parse_call_id(id: &str) -> ApiResult<CallId> {
    id.parse::<CallId>().map_err(|_| call_not_found(id))
}

/// The base of links to this service: the configured public URL, else the
/// host the client reached.
fn public_base(settings: &Settings, headers: &HeaderMap) -> String {
    if let Some(url) = &settings.public_url {
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
    params(("callId" = String, Path, description = "Call id"), RecordingFormatQuery),
    responses((status = 200, body = RecordingUrlView),
        (status = 400, description = "format is not wav or ogg", body = MessageBody),
        (status = 404, description = "No such call, or its recording is not kept in the asked format", body = MessageBody)))]
// One extractor per state part the link needs (store, clock, public URL,
// signing secret) besides the request's own four.
#[allow(clippy::too_many_arguments)]
async fn recording_url(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(settings): State<Arc<Settings>>,
    State(secret): State<ServerSecret>,
    caller: Caller,
    Path(call_id): Path<String>,
    ApiQuery(query): ApiQuery<RecordingFormatQuery>,
    headers: HeaderMap,
) -> ApiResult<Json<RecordingUrlView>> {
    let id = parse_call_id(&call_id)?;
    let org = caller.org_id;
    if !store.call_exists(org, id).await? {
        return Err(call_not_found(&call_id));
    }
    let base = public_base(&settings, &headers);
    let now = clock.now().timestamp();
    let Some(file) = store.recording_file(org, id).await? else {
        return Ok(Json(RecordingUrlView {
            url: None,
            call_id: id.to_string(),
            formats: Vec::new(),
        }));
    };
    let format = match query.format {
        Some(format) if file.object_key_for(format.as_str()).is_none() => {
            return Err(no_such_format(&call_id, format.as_str(), &file));
        }
        Some(format) => format.as_str().to_string(),
        None => file.format.clone(),
    };
    Ok(Json(RecordingUrlView {
        url: Some(recording_link(&secret, &base, org, id, &format, now)),
        call_id: id.to_string(),
        formats: file.formats().into_iter().map(str::to_string).collect(),
    }))
}

/// Stream a call's recording in the format asked for; honours `Range`.
#[utoipa::path(get, path = "/api/calls/{callId}/recording", tag = "calls",
    params(("callId" = String, Path, description = "Call id"), RecordingFormatQuery,
        ("Accept" = Option<String>, Header, description = "audio/ogg, audio/wav (or audio/x-wav), audio/* or */*; the format query wins. Without either, the WAV."),
        ("Range" = Option<String>, Header, description = "One byte range, e.g. bytes=0-1023")),
    responses((status = 200, description = "The recording (audio/wav or audio/ogg)",
            content(("audio/wav"), ("audio/ogg"))),
        (status = 206, description = "The requested byte range", content(("audio/wav"), ("audio/ogg"))),
        (status = 400, description = "format is not wav or ogg", body = MessageBody),
        (status = 404, description = "No such call, no recording, or none in the asked format (the message lists the formats kept)", body = MessageBody),
        (status = 416, body = MessageBody)))]
async fn recording_audio(
    State(store): State<Store>,
    State(recordings): State<RecordingStore>,
    caller: Caller,
    Path(call_id): Path<String>,
    ApiQuery(query): ApiQuery<RecordingFormatQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = parse_call_id(&call_id)?;
    let org = caller.org_id;
    if !store.call_exists(org, id).await? {
        return Err(call_not_found(&call_id));
    }
    let file = store
        .recording_file(org, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Call {call_id} has no recording")))?;
    let format = choose_format(&call_id, &file, query.format, headers.get(header::ACCEPT))?;
    let mut response = serve_recording(&recordings, &file, &format, &headers).await?;
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("accept"));
    Ok(response)
}

/// The query of a signed link.
#[derive(Debug, Deserialize)]
struct LinkQuery {
    expires: i64,
    signature: String,
}

/// `GET /recordings/{orgId}/{callId}.{format}?expires=…&signature=…`.
async fn signed_recording(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(secret): State<ServerSecret>,
    State(recordings): State<RecordingStore>,
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
    if !LinkSigner::new(&secret).verify(&org_id, call_id, link.expires, &link.signature) {
        return Err(ApiError::Forbidden(
            "Recording link signature is invalid".into(),
        ));
    }
    if clock.now().timestamp() > link.expires {
        return Err(ApiError::Forbidden("Recording link has expired".into()));
    }
    let no_recording = || ApiError::NotFound(format!("Call {call_id} has no recording"));
    // A signed path names ids the service signed; any other text names no recording.
    let (Ok(org), Ok(id)) = (org_id.parse::<OrgId>(), call_id.parse::<CallId>()) else {
        return Err(no_recording());
    };
    let recording = store
        .recording_file(org, id)
        .await?
        .ok_or_else(no_recording)?;
    if recording.object_key_for(format).is_none() {
        return Err(no_such_format(call_id, format, &recording));
    }
    serve_recording(&recordings, &recording, format, &headers).await
}

/// Serves `recording` in `format` (or the part `Range` asks for) through the
/// shared recording server; a range outside it is a 416 that says its size.
async fn serve_recording(
    recordings: &RecordingStore,
    recording: &RecordingFileRow,
    format: &str,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    match serve::serve_recording(recordings, recording, format, headers.get(header::RANGE)).await {
        Ok(response) => Ok(response),
        Err(ServeRecordingError::Missing) => {
            tracing::warn!(call = %recording.call_id, format, "recording object is missing");
            Err(ApiError::NotFound(format!(
                "Call {} has no recording",
                recording.call_id
            )))
        }
        Err(ServeRecordingError::Unsatisfiable { len }) => {
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
            Ok(refused)
        }
        Err(err) => Err(ApiError::Internal(err.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recordings::RecordingKey;

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
            ogg_object_key: None,
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
        let response = serve_recording(&recordings, &recording, "wav", &headers)
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
        let err = serve_recording(&recordings, &recording, "wav", &HeaderMap::new())
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
        let unkeyed = RecordingFileRow {
            object_key: "/nonexistent//call.wav".into(),
            ..recording
        };
        let err = serve_recording(&recordings, &unkeyed, "wav", &HeaderMap::new())
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
    }

    #[test]
    fn the_query_wins_then_accept_then_the_main_format() {
        let row = |ogg: bool| RecordingFileRow {
            call_id: CallId::new(),
            org_id: OrgId::new(),
            object_key: "o/c.wav".into(),
            format: "wav".into(),
            bytes: 1,
            ogg_object_key: ogg.then(|| "o/c.ogg".into()),
        };
        let accept = |text: &'static str| HeaderValue::from_static(text);
        let pick = |ogg: bool, query: Option<RecordingFormat>, header: Option<HeaderValue>| {
            choose_format("c", &row(ogg), query, header.as_ref()).map_err(|e| e.to_string())
        };
        let ogg = Some(RecordingFormat::Ogg);
        let wav = Some(RecordingFormat::Wav);
        assert_eq!(pick(true, None, None).unwrap(), "wav");
        assert_eq!(pick(true, ogg, Some(accept("audio/wav"))).unwrap(), "ogg");
        assert_eq!(pick(true, wav, Some(accept("audio/ogg"))).unwrap(), "wav");
        assert_eq!(pick(true, None, Some(accept("audio/ogg"))).unwrap(), "ogg");
        assert_eq!(
            pick(true, None, Some(accept("audio/x-wav"))).unwrap(),
            "wav"
        );
        assert_eq!(pick(true, None, Some(accept("*/*"))).unwrap(), "wav");
        assert_eq!(
            pick(true, None, Some(accept("audio/wav;q=0.5, audio/ogg"))).unwrap(),
            "ogg"
        );
        assert_eq!(
            pick(true, None, Some(accept("audio/ogg;q=0, */*"))).unwrap(),
            "wav"
        );
        assert_eq!(
            pick(true, None, Some(accept("application/json"))).unwrap(),
            "wav"
        );
        // Without the Ogg copy: asked by query or by an Accept naming only it, a clear 404.
        let err = pick(false, ogg, None).unwrap_err();
        assert!(
            err.contains("no ogg recording") && err.contains("kept as wav"),
            "{err}"
        );
        assert!(pick(false, None, Some(accept("audio/ogg"))).is_err());
        assert_eq!(
            pick(false, None, Some(accept("audio/ogg, audio/wav;q=0.1"))).unwrap(),
            "wav"
        );
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

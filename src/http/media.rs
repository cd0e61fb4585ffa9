//! `/media/{carrier}`: the carriers' media websockets (decisions §10).
//!
//! The stream's first messages are read here to find the per-call token (in
//! the path or the stream's custom parameters); only a valid, unexpired,
//! unused token for a live call hands the socket to that call's actor.
//! Anything else is closed without touching a call.

use super::extract::ApiQuery;
use crate::calls::media_stream::CallEngine;
use crate::calls::media_stream::{AxumTransport, MediaConnection, MediaStream};
use crate::domain::clock::SharedClock;
use crate::http::state::AppState;
use axum::Router;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{FromRef, FromRequestParts, Path, RawQuery};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use voxline_actors::conversation::transport::{MediaTransport, TransportMessage};
use voxline_actors::media_token::{MediaTokens, UsedTokens};
use voxline_media::carrier::{CarrierCodec, CarrierKind, InboundEvent, StreamStart};

/// Read buffer of a carrier's media websocket.
const MEDIA_READ_BUFFER: usize = 2 * 1024;
/// How long a carrier may take to send its `start` message.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The media routes; no API key (carriers authenticate with the call token).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/media/{carrier}", get(media_socket))
        .route("/media/{carrier}/{token}", get(media_socket_with_token))
}

/// What accepting a media socket uses: the token checks and the engine that
/// takes the stream. Extracted from the state's parts, so the socket task
/// owns only these, not the whole service.
struct MediaGate {
    /// Time source for the token's expiry.
    clock: SharedClock,
    /// Verifies the per-call token.
    tokens: MediaTokens,
    /// Tokens already used, so a token attaches one stream only.
    used: Arc<UsedTokens>,
    /// Hands the stream to the call's actor.
    engine: CallEngine,
}

impl<S> FromRequestParts<S> for MediaGate
where
    S: Send + Sync,
    SharedClock: FromRef<S>,
    MediaTokens: FromRef<S>,
    Arc<UsedTokens>: FromRef<S>,
    CallEngine: FromRef<S>,
{
    type Rejection = Infallible;

    async fn from_request_parts(_parts: &mut Parts, state: &S) -> Result<Self, Infallible> {
        Ok(Self {
            clock: SharedClock::from_ref(state),
            tokens: MediaTokens::from_ref(state),
            used: Arc::<UsedTokens>::from_ref(state),
            engine: CallEngine::from_ref(state),
        })
    }
}

/// The media socket's query: the per-call token when the carrier cannot put
/// it in the path (the codec also reads carrier parameters from the raw query).
#[derive(Debug, Default, Deserialize)]
struct MediaQuery {
    /// The per-call media token.
    token: Option<String>,
}

async fn media_socket(
    gate: MediaGate,
    Path(carrier): Path<String>,
    query: RawQuery,
    ApiQuery(media): ApiQuery<MediaQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    upgrade(gate, carrier, media.token, query, ws)
}

async fn media_socket_with_token(
    gate: MediaGate,
    Path((carrier, token)): Path<(String, String)>,
    query: RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    upgrade(gate, carrier, Some(token), query, ws)
}

fn upgrade(
    gate: MediaGate,
    carrier: String,
    token: Option<String>,
    RawQuery(query): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    let Ok(kind) = carrier.parse::<CarrierKind>() else {
        return super::error::ApiError::NotFound(format!("Cannot GET /media/{carrier}"))
            .into_response();
    };
    let query = query.unwrap_or_default();
    let Ok(codec) = CarrierCodec::with_url_query(kind, &query) else {
        return super::error::ApiError::BadRequest("unsupported media parameters".into())
            .into_response();
    };
    // tungstenite zero-fills its whole read buffer (128 KiB by default) before every read;
    // carrier messages are a few hundred bytes each, so a small buffer saves that per frame
    // and its memory per call (it still grows for a larger message).
    ws.read_buffer_size(MEDIA_READ_BUFFER)
        .on_upgrade(move |socket| accept(gate, codec, token, socket))
}

async fn accept(
    gate: MediaGate,
    mut codec: CarrierCodec,
    token: Option<String>,
    socket: WebSocket,
) {
    let mut transport = AxumTransport::new(socket);
    let mut audio = Vec::new();
    let start = match tokio::time::timeout(
        START_TIMEOUT,
        read_start(&mut codec, &mut transport, &mut audio),
    )
    .await
    {
        Ok(Some(start)) => start,
        _ => {
            transport.reject("no start message").await;
            return;
        }
    };
    let token = token.or_else(|| start.custom_parameter("token").map(str::to_string));
    let now = gate.clock.now().timestamp();
    let call_id = match token.as_deref().map(|t| gate.tokens.verify(t, now)) {
        Some(Ok(call_id)) => call_id,
        Some(Err(err)) => {
            tracing::warn!(error = %err, "media stream refused");
            transport.reject("invalid media token").await;
            return;
        }
        None => {
            transport.reject("missing media token").await;
            return;
        }
    };
    if !gate.used.claim(token.as_deref().unwrap_or_default(), now) {
        tracing::warn!(call = %call_id, "media token reused");
        transport.reject("media token already used").await;
        return;
    }
    let stream = MediaStream {
        codec,
        transport: MediaConnection::WebSocket(transport),
        start: *start,
    };
    if let Err(returned) = gate.engine.attach_media(call_id, stream) {
        tracing::info!(call = %call_id, "media stream for a call that is not live; closing");
        if let Some(MediaStream {
            transport: MediaConnection::WebSocket(mut socket),
            ..
        }) = returned
        {
            socket.reject("call has ended").await;
        }
    }
}

/// Reads until the carrier's `start` (Vonage: `websocket:connected`).
async fn read_start(
    codec: &mut CarrierCodec,
    transport: &mut AxumTransport,
    audio: &mut Vec<u8>,
) -> Option<Box<StreamStart>> {
    loop {
        let event = match transport.recv().await? {
            TransportMessage::Text(text) => codec.parse_text(&text, audio).ok()?,
            TransportMessage::Binary(data) => codec.parse_binary(&data, audio).ok()?,
            TransportMessage::Closed => return None,
        };
        match event {
            InboundEvent::Start(start) => return Some(start),
            InboundEvent::Stop { .. } => return None,
            _ => {}
        }
    }
}

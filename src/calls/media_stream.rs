//! An answered call's media connection as the conversation runner receives
//! it: the carrier's websocket (accepted by `http::media`) adapted to the
//! engine's [`MediaTransport`], with the codec and the parsed `start`.
//!
//! It lives here, below the HTTP handlers, so the runner never imports a
//! handler: the handler builds it, the engine carries it to the runner.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::SinkExt;
use std::time::Duration;
use voxline_actors::conversation::transport::{MediaTransport, TransportError, TransportMessage};
use voxline_media::carrier::{CarrierCodec, Outbound, OutboundFrame, StreamStart};

/// How long a closing media socket waits for the carrier's close frame.
const CLOSE_HANDSHAKE: Duration = Duration::from_secs(1);

/// The call engine as this service runs it: its conversations take a [`MediaStream`].
pub type CallEngine = voxline_actors::engine::Engine<MediaStream>;

/// An answered call's media stream, handed to the call's conversation.
pub struct MediaStream {
    /// The carrier's codec, with the `start` already parsed.
    pub codec: CarrierCodec,
    /// The socket.
    pub transport: AxumTransport,
    /// The parsed `start` message.
    pub start: StreamStart,
}

/// [`MediaTransport`] over axum's websocket.
pub struct AxumTransport {
    socket: WebSocket,
    closed: bool,
}

impl AxumTransport {
    /// Wraps an upgraded carrier socket.
    pub fn new(socket: WebSocket) -> Self {
        Self {
            socket,
            closed: false,
        }
    }

    /// Closes with a policy-violation code and a reason.
    pub async fn reject(&mut self, reason: &'static str) {
        let _ = self
            .socket
            .send(Message::Close(Some(CloseFrame {
                code: 1008,
                reason: reason.into(),
            })))
            .await;
        self.closed = true;
    }
}

impl MediaTransport for AxumTransport {
    async fn recv(&mut self) -> Option<TransportMessage> {
        if self.closed {
            return None;
        }
        loop {
            match self.socket.recv().await {
                Some(Ok(Message::Text(text))) => {
                    return Some(TransportMessage::Text(text.to_string()));
                }
                Some(Ok(Message::Binary(data))) => {
                    return Some(TransportMessage::Binary(data.to_vec()));
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    self.closed = true;
                    return Some(TransportMessage::Closed);
                }
            }
        }
    }

    async fn send(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        self.socket
            .send(axum_message(frame))
            .await
            .map_err(|e| TransportError::Socket(e.to_string()))
    }

    async fn send_all(&mut self, outbound: &Outbound) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        for frame in outbound.frames() {
            self.socket
                .feed(axum_message(frame))
                .await
                .map_err(|e| TransportError::Socket(e.to_string()))?;
        }
        self.socket
            .flush()
            .await
            .map_err(|e| TransportError::Socket(e.to_string()))
    }

    async fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.socket.send(Message::Close(None)).await.is_err() {
            return;
        }
        // Wait for the carrier's close frame (RFC 6455 §5.5.1) before the socket is dropped:
        // dropping it with the carrier's last frames unread resets the connection, and the
        // reset can destroy our close frame before the carrier reads it.
        let _ = tokio::time::timeout(CLOSE_HANDSHAKE, async {
            while let Some(Ok(message)) = self.socket.recv().await {
                if matches!(message, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
}

/// axum's message for one outbound frame.
fn axum_message(frame: OutboundFrame<'_>) -> Message {
    match frame {
        OutboundFrame::Text(text) => Message::Text(text.into()),
        OutboundFrame::Binary(data) => Message::Binary(bytes::Bytes::copy_from_slice(data)),
    }
}

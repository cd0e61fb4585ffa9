//! An answered call's media connection as the conversation runner receives
//! it: the carrier's websocket (accepted by `http::media`) or a SIP call's RTP
//! socket, adapted to the engine's [`MediaTransport`], with the codec and the
//! parsed (for SIP, made up) `start`.
//!
//! It lives here, below the HTTP handlers, so the runner never imports a
//! handler: the handler builds it, the engine carries it to the runner.

use crate::sip::rtp_transport::{RtpConfig, RtpTransport};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::SinkExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
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
    pub transport: MediaConnection,
    /// The parsed `start` message.
    pub start: StreamStart,
}

/// The connection an answered call's audio travels on.
// One per call, held by the call's task: the websocket's size costs nothing worth an
// allocation, and the RTP leg's buffers are boxed.
#[allow(clippy::large_enum_variant)]
pub enum MediaConnection {
    /// A carrier's media websocket.
    WebSocket(AxumTransport),
    /// A SIP call's RTP (boxed: its buffers are large beside a websocket's handle).
    Rtp(Box<RtpLeg>),
}

impl MediaTransport for MediaConnection {
    async fn recv(&mut self) -> Option<TransportMessage> {
        match self {
            Self::WebSocket(socket) => socket.recv().await,
            Self::Rtp(leg) => leg.recv().await,
        }
    }

    async fn send(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        match self {
            Self::WebSocket(socket) => socket.send(frame).await,
            Self::Rtp(leg) => leg.send(frame).await,
        }
    }

    async fn send_all(&mut self, outbound: &Outbound) -> Result<(), TransportError> {
        match self {
            Self::WebSocket(socket) => socket.send_all(outbound).await,
            Self::Rtp(leg) => leg.send_all(outbound).await,
        }
    }

    async fn close(&mut self) {
        match self {
            Self::WebSocket(socket) => socket.close().await,
            Self::Rtp(leg) => leg.close().await,
        }
    }
}

/// A SIP call's RTP as a [`MediaTransport`]: the transport is made at the
/// conversation's first read, so its 20 ms pacer starts with the loop rather
/// than counting the hand-off as late ticks; the dialog's end (a BYE either
/// way) closes it.
pub struct RtpLeg {
    /// The socket and settings, until the first read makes the transport.
    pending: Option<(tokio::net::UdpSocket, RtpConfig)>,
    rtp: Option<RtpTransport>,
    /// Cancelled when the SIP dialog ends.
    ended: CancellationToken,
    /// What re-INVITEs changed, applied at the next read.
    control: Arc<RtpControl>,
    /// The control's version last applied.
    applied: u64,
    closed: bool,
}

/// A SIP call's media as re-INVITEs change it (hold, resume, a new address):
/// written by the signaling side, read by the call's loop at its next read.
#[derive(Debug, Default)]
pub struct RtpControl {
    version: AtomicU64,
    state: parking_lot::Mutex<(bool, Option<SocketAddr>)>,
}

impl RtpControl {
    /// The peer holds the call (`held`) or not, and sends from / to `remote`.
    pub fn update(&self, held: bool, remote: Option<SocketAddr>) {
        *self.state.lock() = (held, remote);
        self.version.fetch_add(1, Ordering::Release);
    }
}

impl RtpLeg {
    /// A leg over `socket`, ending when `ended` is cancelled and changed through `control`.
    pub fn new(
        socket: tokio::net::UdpSocket,
        config: RtpConfig,
        ended: CancellationToken,
        control: Arc<RtpControl>,
    ) -> Self {
        Self {
            pending: Some((socket, config)),
            rtp: None,
            ended,
            control,
            applied: 0,
            closed: false,
        }
    }

    /// The transport, made on first use; `None` once closed or when it cannot be made.
    fn transport(&mut self) -> Option<&mut RtpTransport> {
        if self.closed {
            return None;
        }
        if let Some((socket, config)) = self.pending.take() {
            match RtpTransport::new(socket, config) {
                Ok(rtp) => self.rtp = Some(rtp),
                Err(err) => {
                    tracing::warn!(error = %err, "the RTP transport could not start");
                    self.closed = true;
                }
            }
        }
        self.rtp.as_mut()
    }

    async fn recv(&mut self) -> Option<TransportMessage> {
        if self.transport().is_none() {
            return Some(TransportMessage::Closed);
        }
        // Borrowed field by field: this runs once per 20 ms frame, so nothing is cloned.
        let Self {
            rtp: Some(rtp),
            ended,
            control,
            applied,
            ..
        } = self
        else {
            return Some(TransportMessage::Closed);
        };
        let version = control.version.load(Ordering::Acquire);
        if version != *applied {
            *applied = version;
            // A held call sends no RTP: the inactivity timeout waits for the resume.
            let (held, remote) = *control.state.lock();
            rtp.set_hold(held);
            if let Some(remote) = remote.filter(|r| !r.ip().is_unspecified()) {
                rtp.set_remote(remote);
            }
        }
        // Both futures are cancel-safe, so the select is too.
        let message = tokio::select! {
            () = ended.cancelled() => None,
            message = rtp.recv() => message,
        };
        match message {
            Some(TransportMessage::Closed) | None => {
                self.closed = true;
                Some(TransportMessage::Closed)
            }
            other => other,
        }
    }

    async fn send(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        match self.transport() {
            Some(rtp) => rtp.send(frame).await,
            None => Err(TransportError::Closed),
        }
    }

    async fn send_all(&mut self, outbound: &Outbound) -> Result<(), TransportError> {
        match self.transport() {
            Some(rtp) => rtp.send_all(outbound).await,
            None => Err(TransportError::Closed),
        }
    }

    async fn close(&mut self) {
        if let Some(rtp) = self.rtp.as_mut() {
            rtp.close().await;
        }
        self.closed = true;
    }
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

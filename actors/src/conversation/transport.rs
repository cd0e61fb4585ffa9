//! The media websocket as the conversation loop sees it.
//!
//! The service adapts axum's websocket to [`MediaTransport`]; [`WebSocketTransport`] adapts a
//! tokio-tungstenite socket (the simulated callee's side, and test servers), and
//! [`memory_pair`] joins two ends in memory so tests can run on a paused clock.

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use voxline_media::carrier::{Outbound, OutboundFrame};

/// One message received from the other end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportMessage {
    /// A text message.
    Text(String),
    /// A binary message.
    Binary(Vec<u8>),
    /// The other end closed the connection.
    Closed,
}

/// Why a message could not be sent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The connection is closed.
    #[error("media connection closed")]
    Closed,
    /// The socket failed.
    #[error("media connection failed: {0}")]
    Socket(String),
}

/// A bidirectional media connection (one carrier websocket).
///
/// The call loop is generic over it, so its futures are not boxed: the loop awaits `recv`
/// some fifty times a second per call.
pub trait MediaTransport: Send {
    /// The next message; `None` or [`TransportMessage::Closed`] when the connection is gone.
    /// Must be cancel-safe: the loop polls it inside `tokio::select!`.
    fn recv(&mut self) -> impl Future<Output = Option<TransportMessage>> + Send;
    /// Sends one message.
    fn send(
        &mut self,
        frame: OutboundFrame<'_>,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;
    /// Sends every queued message in order. Sockets write them with one flush, so a burst of
    /// playback frames costs one system call rather than one per frame.
    fn send_all(
        &mut self,
        outbound: &Outbound,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;
    /// Closes the connection; later sends fail.
    fn close(&mut self) -> impl Future<Output = ()> + Send;
}

/// [`MediaTransport`] over a tokio-tungstenite websocket, client or server side.
#[derive(Debug)]
pub struct WebSocketTransport<S> {
    socket: WebSocketStream<S>,
    closed: bool,
}

impl<S> WebSocketTransport<S> {
    /// Wraps an established websocket.
    pub fn new(socket: WebSocketStream<S>) -> Self {
        Self {
            socket,
            closed: false,
        }
    }
}

impl<S> MediaTransport for WebSocketTransport<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    async fn recv(&mut self) -> Option<TransportMessage> {
        loop {
            // `StreamExt::next` on a websocket is cancel-safe.
            return match self.socket.next().await? {
                Ok(Message::Text(text)) => Some(TransportMessage::Text(text.as_str().to_owned())),
                Ok(Message::Binary(data)) => Some(TransportMessage::Binary(data.to_vec())),
                Ok(Message::Close(_)) => Some(TransportMessage::Closed),
                // Pings are answered by tungstenite on the next write.
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                Err(_) => None,
            };
        }
    }

    async fn send(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        self.socket
            .send(tungstenite_message(frame))
            .await
            .map_err(|e| TransportError::Socket(e.to_string()))
    }

    async fn send_all(&mut self, outbound: &Outbound) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        for frame in outbound.frames() {
            self.socket
                .feed(tungstenite_message(frame))
                .await
                .map_err(|e| TransportError::Socket(e.to_string()))?;
        }
        self.socket
            .flush()
            .await
            .map_err(|e| TransportError::Socket(e.to_string()))
    }

    async fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            // The peer may already be gone; closing is best effort.
            let _ = self.socket.close(None).await;
        }
    }
}

/// The tungstenite message for one outbound frame.
fn tungstenite_message(frame: OutboundFrame<'_>) -> Message {
    match frame {
        OutboundFrame::Text(text) => Message::text(text),
        OutboundFrame::Binary(data) => Message::binary(data.to_vec()),
    }
}

/// One end of an in-memory media connection made by [`memory_pair`].
#[derive(Debug)]
pub struct MemoryTransport {
    incoming: mpsc::Receiver<TransportMessage>,
    outgoing: Option<mpsc::Sender<TransportMessage>>,
}

/// Two connected in-memory ends; each buffers up to `capacity` messages.
pub fn memory_pair(capacity: usize) -> (MemoryTransport, MemoryTransport) {
    let (a_tx, a_rx) = mpsc::channel(capacity.max(1));
    let (b_tx, b_rx) = mpsc::channel(capacity.max(1));
    (
        MemoryTransport {
            incoming: a_rx,
            outgoing: Some(b_tx),
        },
        MemoryTransport {
            incoming: b_rx,
            outgoing: Some(a_tx),
        },
    )
}

impl MediaTransport for MemoryTransport {
    async fn recv(&mut self) -> Option<TransportMessage> {
        self.incoming.recv().await
    }

    async fn send(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        let outgoing = self.outgoing.as_ref().ok_or(TransportError::Closed)?;
        let message = match frame {
            OutboundFrame::Text(text) => TransportMessage::Text(text.to_owned()),
            OutboundFrame::Binary(data) => TransportMessage::Binary(data.to_vec()),
        };
        outgoing
            .send(message)
            .await
            .map_err(|_| TransportError::Closed)
    }

    async fn send_all(&mut self, outbound: &Outbound) -> Result<(), TransportError> {
        for frame in outbound.frames() {
            self.send(frame).await?;
        }
        Ok(())
    }

    async fn close(&mut self) {
        if let Some(outgoing) = self.outgoing.take() {
            // Dropping the sender closes the channel even when it is full or the peer is gone.
            let _ = outgoing.try_send(TransportMessage::Closed);
        }
    }
}

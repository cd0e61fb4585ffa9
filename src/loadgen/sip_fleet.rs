//! The SIP fleet (`--carrier sip`): the far end of the load workspace's SIP trunk. A SIP user
//! agent (rsipstack, as the signaling tests' peer) on 127.0.0.1 that answers every INVITE
//! after the sim carrier's ring time with 200 and an SDP answer, one RTP socket per call, and
//! plays the run's script as the websocket fleet's callee does: the same [`SimCallee`], its
//! Twilio messages carried as G.711 RTP paced at 20 ms by [`RtpCallee`]. The agent's RTP comes
//! back to it as media messages, so late frames, greeting and turn latency are measured as on
//! the websocket; [`RtpCallee`] also counts the stream's loss, reorders and RFC 3550
//! interarrival jitter. A call ends as the websocket callee ends it: after its script (our
//! BYE), or on the server's BYE (the agent hung up).
//!
//! Reports are filed under the number the INVITE dialed (the request-URI's user), which the
//! driver knows for each call it placed.

use super::fleet::{Fleet, seed_for};
use super::metrics::RtpCallStats;
use base64::Engine;
use parking_lot::Mutex;
use rsipstack::EndpointBuilder;
use rsipstack::dialog::dialog::{Dialog, DialogState, DialogStateSender};
use rsipstack::dialog::dialog_layer::DialogLayer;
use rsipstack::sip::{Header, Method, StatusCode};
use rsipstack::transaction::TransactionReceiver;
use rsipstack::transaction::transaction::Transaction;
use rsipstack::transport::TransportLayer;
use rsipstack::transport::udp::UdpConnection;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use voxline_actors::conversation::{MediaTransport, TransportError, TransportMessage};
use voxline_actors::sim::callee::{CalleeBehaviour, CalleeOptions, ScriptStep, SimCallee};
use voxline_media::carrier::{Outbound, OutboundFrame};
use voxline_media::g711;
use voxline_media::rtp::{RtpOut, parse_rtp, write_rtp};
use voxline_media::sdp::{self, G711Codec, LocalMedia, MediaDirection};

/// The receiving side's sequence and jitter bookkeeping (RFC 3550 A.1, A.8).
#[derive(Debug)]
struct Receiving {
    origin: Instant,
    base: Option<i64>,
    highest: i64,
    transit: Option<i64>,
    /// The jitter in clock ticks, scaled by 16.
    jitter_scaled: i64,
}

impl Receiving {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            base: None,
            highest: 0,
            transit: None,
            jitter_scaled: 0,
        }
    }

    fn on_packet(&mut self, stats: &mut RtpCallStats, sequence: u16, timestamp: u32) {
        let now = Instant::now();
        stats.received += 1;
        match self.base {
            None => {
                self.base = Some(i64::from(sequence));
                self.highest = i64::from(sequence);
            }
            Some(_) => {
                // The extended sequence number: the nearest to the highest seen, modulo 2^16.
                #[allow(clippy::cast_possible_truncation)]
                let delta = sequence.wrapping_sub(self.highest as u16) as i16;
                let extended = self.highest + i64::from(delta);
                if extended < self.highest {
                    stats.reordered += 1;
                } else {
                    self.highest = extended;
                }
            }
        }
        if let Some(base) = self.base {
            stats.expected = u64::try_from(self.highest - base + 1).unwrap_or(0);
        }
        // 8 kHz clock ticks since the stream started, modulo 2^32 as RTP counts.
        let arrival = now.duration_since(self.origin).as_micros() * 8 / 1000;
        #[allow(clippy::cast_possible_truncation)]
        let transit = i64::from((arrival as u32).wrapping_sub(timestamp) as i32);
        if let Some(previous) = self.transit {
            let d = (transit - previous).abs();
            self.jitter_scaled += d - ((self.jitter_scaled + 8) >> 4);
        }
        self.transit = Some(transit);
        // One tick is 125 µs.
        let jitter_us = (self.jitter_scaled.max(0) >> 4) * 125;
        stats
            .jitter_us
            .push(u32::try_from(jitter_us).unwrap_or(u32::MAX));
    }
}

/// The prefix and suffix of the media message the callee reads for each agent packet.
const MEDIA_PREFIX: &str = r#"{"event":"media","media":{"payload":""#;
const MEDIA_SUFFIX: &str = r#""}}"#;

/// A SIP callee's media: the [`SimCallee`]'s Twilio messages as RTP on the call's socket.
/// Its `media` messages go out as one G.711 packet each (the callee sends one every 20 ms);
/// the agent's packets come in as `media` messages. Marks, `connected`, `start` and `stop`
/// have no RTP form and are dropped (the call's end is SIP's: BYE).
pub struct RtpCallee {
    socket: UdpSocket,
    remote: SocketAddr,
    codec: G711Codec,
    ssrc: u32,
    sequence: u16,
    timestamp: u32,
    marker: bool,
    payload: Vec<u8>,
    packet: Vec<u8>,
    datagram: Vec<u8>,
    receiving: Receiving,
    stats: Arc<Mutex<RtpCallStats>>,
    closed: bool,
}

impl RtpCallee {
    /// Media on `socket` to `remote` in `codec`; what it measures goes into `stats`.
    pub fn new(
        socket: UdpSocket,
        remote: SocketAddr,
        codec: G711Codec,
        stats: Arc<Mutex<RtpCallStats>>,
    ) -> Self {
        Self {
            socket,
            remote,
            codec,
            ssrc: rand::random(),
            sequence: rand::random(),
            timestamp: rand::random(),
            marker: true,
            payload: Vec::with_capacity(160),
            packet: vec![0; 1500],
            datagram: vec![0; 1500],
            receiving: Receiving::new(),
            stats,
            closed: false,
        }
    }
}

/// The base64 payload of a Twilio `media` message the callee wrote.
fn media_payload(text: &str) -> Option<&str> {
    if !text.starts_with(r#"{"event":"media""#) {
        return None;
    }
    let start = text.find(r#""payload":""#)? + r#""payload":""#.len();
    let len = text[start..].find('"')?;
    Some(&text[start..start + len])
}

impl MediaTransport for RtpCallee {
    async fn recv(&mut self) -> Option<TransportMessage> {
        loop {
            if self.closed {
                return Some(TransportMessage::Closed);
            }
            // Cancel-safe: a datagram is either taken whole or left in the socket.
            let len = match self.socket.recv_from(&mut self.datagram).await {
                Ok((len, _from)) => len,
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                Err(_) => return Some(TransportMessage::Closed),
            };
            let Ok(packet) = parse_rtp(&self.datagram[..len]) else {
                continue;
            };
            // RTCP, telephone events: not the agent's audio.
            if packet.payload_type != self.codec.payload_type() {
                continue;
            }
            {
                let mut stats = self.stats.lock();
                self.receiving
                    .on_packet(&mut stats, packet.sequence, packet.timestamp);
            }
            self.payload.clear();
            match self.codec {
                G711Codec::Pcmu => self.payload.extend_from_slice(packet.payload),
                G711Codec::Pcma => self.payload.extend(
                    packet
                        .payload
                        .iter()
                        .map(|b| g711::linear_to_mulaw(g711::alaw_to_linear(*b))),
                ),
            }
            let mut text = String::with_capacity(
                MEDIA_PREFIX.len() + self.payload.len().div_ceil(3) * 4 + MEDIA_SUFFIX.len(),
            );
            text.push_str(MEDIA_PREFIX);
            base64::engine::general_purpose::STANDARD.encode_string(&self.payload, &mut text);
            text.push_str(MEDIA_SUFFIX);
            return Some(TransportMessage::Text(text));
        }
    }

    async fn send(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        let OutboundFrame::Text(text) = frame else {
            return Ok(());
        };
        let Some(payload) = media_payload(text) else {
            return Ok(());
        };
        self.payload.clear();
        if base64::engine::general_purpose::STANDARD
            .decode_vec(payload, &mut self.payload)
            .is_err()
        {
            return Ok(());
        }
        if self.codec == G711Codec::Pcma {
            for byte in &mut self.payload {
                *byte = g711::linear_to_alaw(g711::mulaw_to_linear(*byte));
            }
        }
        let header = RtpOut {
            payload_type: self.codec.payload_type(),
            sequence: self.sequence,
            timestamp: self.timestamp,
            ssrc: self.ssrc,
            marker: self.marker,
        };
        let len = write_rtp(&header, &self.payload, &mut self.packet)
            .map_err(|e| TransportError::Socket(e.to_string()))?;
        // UDP: a packet the server's socket no longer takes is lost, as on a network.
        let _ = self.socket.send_to(&self.packet[..len], self.remote).await;
        self.sequence = self.sequence.wrapping_add(1);
        self.timestamp = self
            .timestamp
            .wrapping_add(u32::try_from(self.payload.len()).unwrap_or(160));
        self.marker = false;
        self.stats.lock().sent += 1;
        Ok(())
    }

    async fn send_all(&mut self, outbound: &Outbound) -> Result<(), TransportError> {
        for frame in outbound.frames() {
            self.send(frame).await?;
        }
        Ok(())
    }

    async fn close(&mut self) {
        self.closed = true;
    }
}

/// What the request loop and the calls share.
struct Shared {
    fleet: Arc<Fleet>,
    steps: Vec<ScriptStep>,
    answer_after: Duration,
    /// Each live call's hang-up, by SIP Call-ID: cancelled when its dialog ends.
    hangups: Mutex<HashMap<String, CancellationToken>>,
}

/// The running SIP fleet; stops when dropped.
pub struct SipFleet {
    /// Where it takes SIP over UDP.
    pub addr: SocketAddr,
    cancel: CancellationToken,
    _endpoint: rsipstack::transaction::Endpoint,
}

impl SipFleet {
    /// Starts the fleet on `fleet`'s runtime, playing `steps` on every call it answers
    /// `answer_after` after the INVITE.
    pub async fn start(
        fleet: Arc<Fleet>,
        steps: Vec<ScriptStep>,
        answer_after: Duration,
    ) -> anyhow::Result<Self> {
        let runtime = fleet.runtime().clone();
        runtime
            .spawn(Self::start_here(fleet, steps, answer_after))
            .await?
    }

    async fn start_here(
        fleet: Arc<Fleet>,
        steps: Vec<ScriptStep>,
        answer_after: Duration,
    ) -> anyhow::Result<Self> {
        let cancel = CancellationToken::new();
        let transport = TransportLayer::new(cancel.clone());
        let udp = UdpConnection::create_connection(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            None,
            Some(cancel.child_token()),
        )
        .await
        .map_err(|e| anyhow::anyhow!("the SIP fleet's UDP socket: {e}"))?;
        let addr = udp
            .get_addr()
            .get_socketaddr()
            .map_err(|e| anyhow::anyhow!("the SIP fleet's address: {e}"))?;
        transport.add_transport(udp.into());
        let endpoint = EndpointBuilder::new()
            .with_cancel_token(cancel.clone())
            .with_transport_layer(transport)
            .with_user_agent("voxline-loadgen")
            .build();
        let incoming = endpoint
            .incoming_transactions()
            .map_err(|e| anyhow::anyhow!("the SIP fleet's transactions: {e}"))?;
        let dialogs = Arc::new(DialogLayer::new(endpoint.inner.clone()));
        let serving = endpoint.inner.clone();
        tokio::spawn(async move {
            let _ = serving.serve().await;
        });
        let contact = rsipstack::sip::Uri::try_from(format!("sip:loadgen@{addr}").as_str())
            .map_err(|e| anyhow::anyhow!("the SIP fleet's contact: {e}"))?;
        let shared = Arc::new(Shared {
            fleet,
            steps,
            answer_after,
            hangups: Mutex::new(HashMap::new()),
        });
        tokio::spawn(serve_requests(
            shared,
            dialogs,
            incoming,
            contact,
            cancel.clone(),
        ));
        Ok(Self {
            addr,
            cancel,
            _endpoint: endpoint,
        })
    }
}

impl Drop for SipFleet {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Answers requests until the fleet stops.
async fn serve_requests(
    shared: Arc<Shared>,
    dialogs: Arc<DialogLayer>,
    mut incoming: TransactionReceiver,
    contact: rsipstack::sip::Uri,
    cancel: CancellationToken,
) {
    let (states, mut state_rx) = dialogs.new_dialog_state_channel();
    {
        // A dialog that ends (the server's BYE or CANCEL) hangs its callee up.
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Some(state) = state_rx.recv().await {
                if let DialogState::Terminated(id, _) = state
                    && let Some(hangup) = shared.hangups.lock().remove(&id.call_id)
                {
                    hangup.cancel();
                }
            }
        });
    }
    loop {
        let mut tx = tokio::select! {
            () = cancel.cancelled() => return,
            tx = incoming.recv() => match tx { Some(tx) => tx, None => return },
        };
        if tx.original.method != Method::Invite
            && let Some(Dialog::Invite(mut dialog)) = dialogs.match_dialog(&tx)
        {
            // BYE, ACK, re-INVITE … of a call we answered: the stack replies.
            tokio::spawn(async move {
                let _ = dialog.handle(&mut tx).await;
            });
            continue;
        }
        match tx.original.method {
            Method::Invite => {
                tokio::spawn(answer(
                    Arc::clone(&shared),
                    Arc::clone(&dialogs),
                    states.clone(),
                    contact.clone(),
                    tx,
                ));
            }
            Method::Ack => {}
            Method::Options => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::OK).await;
                });
            }
            Method::Bye | Method::Cancel => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::CallTransactionDoesNotExist).await;
                });
            }
            _ => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::MethodNotAllowed).await;
                });
            }
        }
    }
}

/// The number an INVITE dialed: its request-URI's user part.
fn dialed_number(uri: &str) -> String {
    let rest = uri
        .strip_prefix("sips:")
        .or_else(|| uri.strip_prefix("sip:"))
        .unwrap_or(uri);
    rest.split('@').next().unwrap_or(rest).to_owned()
}

/// Rings, answers one INVITE and plays the callee until the call ends.
async fn answer(
    shared: Arc<Shared>,
    dialogs: Arc<DialogLayer>,
    states: DialogStateSender,
    contact: rsipstack::sip::Uri,
    mut tx: Transaction,
) {
    let number = dialed_number(&tx.original.uri.to_string());
    let socket = match UdpSocket::bind("127.0.0.1:0").await {
        Ok(socket) => socket,
        Err(err) => {
            tracing::warn!(%number, error = %err, "the SIP fleet has no RTP socket");
            let _ = tx.reply(StatusCode::ServiceUnavailable).await;
            return;
        }
    };
    let port = socket.local_addr().map(|a| a.port()).unwrap_or(0);
    let local = LocalMedia {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port,
        session_id: u64::from(rand::random::<u32>()),
        version: 1,
        codecs: vec![G711Codec::Pcmu, G711Codec::Pcma],
        dtmf_payload_type: 101,
        direction: MediaDirection::SendRecv,
    };
    let offer = String::from_utf8_lossy(&tx.original.body).into_owned();
    let dialog = match dialogs.get_or_create_server_invite(&tx, states, None, Some(contact)) {
        Ok(dialog) => dialog,
        Err(err) => {
            tracing::warn!(%number, error = %err, "the SIP fleet has no dialog for an INVITE");
            let _ = tx.reply(StatusCode::ServerInternalError).await;
            return;
        }
    };
    let call_id = dialog.id().call_id;
    let hangup = CancellationToken::new();
    shared
        .hangups
        .lock()
        .insert(call_id.clone(), hangup.clone());
    let mut handling = dialog.clone();
    tokio::spawn(async move {
        let _ = handling.handle(&mut tx).await;
    });
    let negotiated = match sdp::answer(&offer, &local) {
        Ok((body, negotiated)) if negotiated.remote.is_some() => Some((body, negotiated)),
        _ => None,
    };
    let Some((body, negotiated)) = negotiated else {
        tracing::warn!(%number, "the INVITE's offer takes no answer");
        let _ = dialog.reject(Some(StatusCode::NotAcceptableHere), None);
        shared.hangups.lock().remove(&call_id);
        return;
    };
    let _ = dialog.ringing(None, None);
    // Rings as long as the sim carrier's callee does; a CANCEL ends it here.
    tokio::select! {
        () = tokio::time::sleep(shared.answer_after) => {}
        () = hangup.cancelled() => return,
    }
    if dialog
        .accept(
            Some(vec![Header::ContentType("application/sdp".into())]),
            Some(body.into_bytes()),
        )
        .is_err()
    {
        shared.hangups.lock().remove(&call_id);
        return;
    }
    let fleet = Arc::clone(&shared.fleet);
    fleet.answered(number.clone());
    let stats = Arc::new(Mutex::new(RtpCallStats::default()));
    let Some(remote) = negotiated.remote else {
        return;
    };
    let media = RtpCallee::new(socket, remote, negotiated.codec, Arc::clone(&stats));
    let options = CalleeOptions {
        call_sid: call_id.clone(),
        cancel: hangup,
        seed: seed_for(&number),
        ..CalleeOptions::default()
    }
    .with_voice(fleet.voice());
    let report = fleet
        .on_line(SimCallee::run_on(
            media,
            Vec::new(),
            shared.steps.clone(),
            CalleeBehaviour::Human,
            options,
        ))
        .await;
    shared.hangups.lock().remove(&call_id);
    if !report.agent_hung_up
        && let Err(err) = dialog.bye().await
    {
        tracing::debug!(%number, error = %err, "the SIP callee's BYE failed");
    }
    let stats = std::mem::take(&mut *stats.lock());
    fleet.deliver(number, report, Some(stats));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dialed_number_is_the_request_uris_user() {
        assert_eq!(
            dialed_number("sip:+919810000000@127.0.0.1:5070"),
            "+919810000000"
        );
        assert_eq!(
            dialed_number("sip:+919810000000@host;transport=udp"),
            "+919810000000"
        );
    }

    #[test]
    fn media_payloads_are_found_in_the_callees_messages() {
        let mut side = voxline_media::carrier::TwilioCarrierSide::new("MZ1", "CA1", "AC1");
        let mut text = String::new();
        side.media(&[0xff; 160], &mut text);
        let payload = media_payload(&text).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(payload)
            .unwrap();
        assert_eq!(bytes, vec![0xff; 160]);
        side.stop(&mut text);
        assert_eq!(media_payload(&text), None);
    }

    #[test]
    fn loss_reorders_and_jitter_are_counted() {
        let mut receiving = Receiving::new();
        let mut stats = RtpCallStats::default();
        for seq in [65_534u16, 65_535, 1, 0, 3] {
            receiving.on_packet(&mut stats, seq, u32::from(seq) * 160);
        }
        assert_eq!(stats.received, 5);
        assert_eq!(stats.expected, 6);
        assert_eq!(stats.lost(), 1);
        assert_eq!(stats.reordered, 1);
        assert_eq!(stats.jitter_us.len(), 5);
    }
}

//! [`RtpTransport`]: one SIP call's RTP media as the conversation loop's [`MediaTransport`].
//!
//! A websocket carrier buffers the audio we send, paces it out, echoes our marks when its
//! playback reaches them and drops queued audio on `clear`. On a SIP trunk nothing stands
//! between us and the RTP peer, so this transport plays that part, speaking the `sip` codec's
//! internal wire ([`voxline_media::carrier::sip`]) to the loop:
//!
//! - **Pacing.** `recv` selects over the socket and a 20 ms [`Interval`]. Each tick sends the
//!   next 160-byte frame of the outbound ring as one RTP packet (PT 0 or 8, the marker bit on
//!   the first packet after a pause, sequence +1 a packet, timestamp +160 a tick, a random
//!   SSRC), and pops one frame of caller audio from the jitter buffer. A tick the runtime
//!   delivered late is not made up with a burst (`MissedTickBehavior::Burst` would hand the
//!   peer's jitter buffer several frames at once) nor pushed back (`Delay` would play the
//!   stream slower than its clock): the missed slots are counted in
//!   [`RtpStats::late_ticks`], the RTP clock skips over them as it would over a pause, the
//!   next packet carries the marker bit so the peer re-anchors its playout, and the caller's
//!   audio of the missed slots is popped at once (one binary message of several frames), so
//!   neither direction drifts from real time.
//! - **Nothing to send, nothing sent.** With the ring empty a tick sends no packet. Comfort
//!   noise (RFC 3389) would need a CN payload type the SDP did not negotiate, and the loop
//!   already sends real silence whenever the agent's turn needs a pause; between turns, no
//!   packets is what a phone with silence suppression sends, and the peer plays silence.
//! - **Outbound commands.** Binary frames are appended to a ring preallocated for
//!   [`OUTBOUND_CAPACITY`] (4 s; the loop keeps about 220 ms ahead), which never grows: audio
//!   beyond it is dropped and counted. `mark <name>` is remembered at the ring's current end
//!   and echoed once playout passes it; `clear` drops queued audio and pending digits, echoes
//!   pending marks (as Twilio does) and answers `cleared`; `dtmf <digits>` sends the digits as
//!   RFC 4733 telephone events when playout reaches that point: each key's event packets
//!   replace the audio frames they overlap (the loop queued silence there), one key every
//!   `KEY_TONE_MS + KEY_GAP_MS`.
//! - **Inbound.** Audio packets go through the [`JitterBuffer`]; a lost frame is concealed by
//!   repeating the last one once, then silence, and an empty buffer (before the first packet,
//!   while the peer is silent) plays silence, so the loop hears a frame every 20 ms as it does
//!   from websocket carriers. Telephone events (the payload type the SDP negotiated) go to the
//!   [`TelephoneEventReceiver`], each key returned once as text `dtmf <digit>`.
//! - **Symmetric RTP** (RFC 4961, "comedia"). We send to the SDP's address until the first
//!   valid packet of a negotiated payload type arrives; its source becomes the peer (a NAT may
//!   have rewritten it; logged when it differs), once. Afterwards only that source is heard.
//!   Garbage, short or oversized datagrams, other payload types and packets from other
//!   sources are counted and dropped.
//! - **Inactivity.** No valid packet for the configured timeout ends the stream: `recv`
//!   returns [`TransportMessage::Closed`]. A held call ([`RtpTransport::set_hold`]) is exempt.
//! - **No RTCP yet.** Sender reports would need a second socket per call (RTCP on port+1; we
//!   do not offer `rtcp-mux`), doubling the descriptors and the port range's arithmetic, and
//!   reading the peer's reports too, for a protocol the trunks we target do not require: our
//!   own inactivity timeout covers what an RTCP timeout would. Packets and octets are counted
//!   ([`RtpStats`], [`RtpTransport::sender_stats`] is the report's content), so adding
//!   `write_sender_report` on an `rtcp-mux` socket later is a few lines.
//!
//! No allocation per packet: datagrams are received into a fixed buffer, parsed in place, and
//! RTP is written into a reused one. The one allocation per 20 ms is the
//! [`TransportMessage::Binary`] `Vec` the trait's shape requires (the websocket transports
//! allocate it too); marks and digits allocate their (rare) text messages.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use tokio::net::UdpSocket;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at};
use tracing::{debug, info};
use voxline_actors::conversation::transport::{MediaTransport, TransportError, TransportMessage};
use voxline_media::carrier::sip::{KEY_GAP_MS, KEY_TONE_MS};
use voxline_media::carrier::{AudioEncoding, AudioFormat, Outbound, OutboundFrame};
use voxline_media::rtp::telephone_event::dtmf_event_code;
use voxline_media::rtp::{
    DigitSender, EventStream, FRAME_BYTES, JitterBuffer, MAX_RTP_PACKET_LEN, Playout, RtpError,
    RtpOut, SenderStats, TelephoneEventReceiver, ntp_timestamp, parse_rtp, write_rtp,
};

/// One RTP packet's worth of audio.
const FRAME: Duration = Duration::from_millis(20);
/// RTP clock ticks in one frame (8 kHz).
const FRAME_TICKS: u32 = FRAME_BYTES as u32;
/// Bytes of outbound audio the ring holds: 4 s of G.711.
pub const OUTBOUND_CAPACITY: usize = 4 * 8_000;
/// Marks, digit commands and messages for the loop held at once before the queues would
/// grow (they may, these are not per packet).
const COMMANDS: usize = 32;
/// Ticks one key takes: its event and the gap after it.
const KEY_TICKS: u32 = (KEY_TONE_MS + KEY_GAP_MS) / 20;
/// The most frames of caller audio one late tick catches up on; a longer stall loses the rest
/// (the jitter buffer counts them).
const MAX_CATCH_UP: usize = 10;
/// Datagrams read in a row before a due tick goes first.
const DATAGRAMS_PER_TICK: u32 = 64;
/// The receive buffer: one byte more than the largest packet taken, to see oversized ones.
const RECV_BUFFER: usize = MAX_RTP_PACKET_LEN + 1;

/// How one call's RTP stream is set up, from the SDP offer/answer.
#[derive(Debug, Clone, Copy)]
pub struct RtpConfig {
    /// The audio format the answer chose: PCMU or PCMA at 8 kHz.
    pub format: AudioFormat,
    /// The negotiated `telephone-event` payload type, if any.
    pub telephone_event: Option<u8>,
    /// Where to send until the peer's first packet shows its real source: the SDP's
    /// `c=`/`m=` address.
    pub remote: SocketAddr,
    /// No valid packet this long ends the stream (unless the call is on hold).
    pub inactivity_timeout: Duration,
    /// Jitter buffer capacity, in 20 ms frames.
    pub jitter_capacity: usize,
    /// Jitter buffer playout delay, in 20 ms frames.
    pub jitter_delay: usize,
}

impl RtpConfig {
    /// A stream to `remote` in `format` with the usual settings: 30 s inactivity timeout,
    /// an 8-frame jitter buffer that starts playout 3 frames (60 ms) after the first packet.
    pub fn new(format: AudioFormat, telephone_event: Option<u8>, remote: SocketAddr) -> Self {
        Self {
            format,
            telephone_event,
            remote,
            inactivity_timeout: Duration::from_secs(30),
            jitter_capacity: 8,
            jitter_delay: 3,
        }
    }
}

/// Running totals of one call's RTP stream, for the call record and loadgen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RtpStats {
    /// RTP packets taken from the peer (audio and telephone events).
    pub packets_in: u64,
    /// Their payload bytes.
    pub octets_in: u64,
    /// RTP packets sent (audio and telephone events).
    pub packets_out: u64,
    /// Their payload bytes.
    pub octets_out: u64,
    /// Caller frames that never arrived in time to play.
    pub lost: u64,
    /// Caller frames that arrived after their playout time.
    pub late: u64,
    /// Caller frames that arrived after a newer one, still in time.
    pub reordered: u64,
    /// Caller frames received twice.
    pub duplicate: u64,
    /// RFC 3550 interarrival jitter of the caller's audio, in 8 kHz clock ticks (8 = 1 ms).
    pub jitter: u32,
    /// 20 ms send slots the runtime woke us too late for (skipped, not bursted).
    pub late_ticks: u64,
    /// Datagrams that were not RTP we take: garbage, short, oversized, or an audio packet
    /// that is not one 20 ms frame.
    pub malformed: u64,
    /// RTP packets of a payload type the SDP did not negotiate.
    pub unexpected_payload: u64,
    /// RTP packets from a source other than the latched peer.
    pub foreign: u64,
    /// Outbound audio bytes dropped because the ring was full.
    pub outbound_dropped: u64,
    /// Packets the socket refused to send.
    pub send_errors: u64,
    /// Keys received as telephone events.
    pub digits_in: u64,
    /// Keys sent as telephone events.
    pub digits_out: u64,
}

impl RtpStats {
    /// The interarrival jitter in milliseconds.
    pub fn jitter_ms(&self) -> f64 {
        f64::from(self.jitter) / 8.0
    }
}

/// A key pressed at a point of the outbound audio.
#[derive(Debug)]
struct KeysAt {
    /// Outbound byte position (counted since the stream began) where they start.
    position: u64,
    digits: String,
}

/// What one turn of `recv`'s select produced.
enum Wake {
    Datagram(std::io::Result<(usize, SocketAddr)>),
    Tick,
}

/// [`MediaTransport`] over one call's RTP socket; see the module doc.
#[derive(Debug)]
pub struct RtpTransport {
    socket: UdpSocket,
    config: RtpConfig,
    payload_type: u8,
    silence: u8,
    remote: SocketAddr,
    latched: bool,
    pacer: Interval,
    /// When slot 0 began: slot `n` is due at `origin + n * FRAME`.
    origin: Instant,
    slots_done: u64,
    // Outbound.
    ssrc: u32,
    sequence: u16,
    timestamp: u32,
    /// The next audio packet starts a talk spurt.
    marker_next: bool,
    ring: VecDeque<u8>,
    /// Bytes ever accepted into the ring.
    queued_end: u64,
    /// Bytes ever taken out of it (played or cleared).
    played: u64,
    marks: VecDeque<(u64, String)>,
    keys_at: VecDeque<KeysAt>,
    /// Keys due now, waiting their turn.
    keys: VecDeque<char>,
    digit: Option<DigitSender>,
    /// Ticks until the next key may start.
    key_wait: u32,
    frame: [u8; FRAME_BYTES],
    send_buffer: [u8; 256],
    // Inbound.
    recv_buffer: [u8; RECV_BUFFER],
    jitter: JitterBuffer,
    events: TelephoneEventReceiver,
    peer_ssrc: Option<u32>,
    last_in: [u8; FRAME_BYTES],
    /// Consecutive lost frames, for concealment.
    lost_run: u32,
    last_packet_at: Instant,
    /// RFC 3550 A.8 state: the previous transit time and the jitter estimate, scaled by 16.
    transit: Option<i64>,
    jitter_scaled: i64,
    datagrams_since_tick: u32,
    hold: bool,
    closed: bool,
    ended: bool,
    outgoing: VecDeque<TransportMessage>,
    stats: RtpStats,
}

impl RtpTransport {
    /// A transport on `socket` (bound by [`super::rtp_ports::RtpPorts`]) for the stream
    /// `config` describes. Must be called inside a tokio runtime: the pacer starts now, so
    /// make it when the loop is about to poll it (slots before the first `recv` count as
    /// late ticks), and the inactivity timeout runs from now too.
    pub fn new(socket: UdpSocket, config: RtpConfig) -> Result<Self, RtpError> {
        let jitter = JitterBuffer::new(config.jitter_capacity, config.jitter_delay)?;
        let (payload_type, silence) = match config.format.encoding {
            AudioEncoding::Alaw => (8, AudioFormat::ALAW_8K.silence_byte()),
            AudioEncoding::Mulaw | AudioEncoding::Pcm16Le => {
                (0, AudioFormat::MULAW_8K.silence_byte())
            }
        };
        let origin = Instant::now();
        let mut pacer = interval_at(origin + FRAME, FRAME);
        pacer.set_missed_tick_behavior(MissedTickBehavior::Skip);
        Ok(Self {
            socket,
            config,
            payload_type,
            silence,
            remote: config.remote,
            latched: false,
            pacer,
            origin,
            slots_done: 0,
            ssrc: rand::random(),
            sequence: rand::random(),
            timestamp: rand::random(),
            marker_next: true,
            ring: VecDeque::with_capacity(OUTBOUND_CAPACITY),
            queued_end: 0,
            played: 0,
            marks: VecDeque::with_capacity(COMMANDS),
            keys_at: VecDeque::with_capacity(COMMANDS),
            keys: VecDeque::with_capacity(COMMANDS),
            digit: None,
            key_wait: 0,
            frame: [silence; FRAME_BYTES],
            send_buffer: [0; 256],
            recv_buffer: [0; RECV_BUFFER],
            jitter,
            events: TelephoneEventReceiver::new(),
            peer_ssrc: None,
            last_in: [silence; FRAME_BYTES],
            lost_run: 0,
            last_packet_at: origin,
            transit: None,
            jitter_scaled: 0,
            datagrams_since_tick: 0,
            hold: false,
            closed: false,
            ended: false,
            outgoing: VecDeque::with_capacity(COMMANDS),
            stats: RtpStats::default(),
        })
    }

    /// The running totals.
    pub fn stats(&self) -> RtpStats {
        let counters = self.jitter.counters();
        RtpStats {
            lost: counters.lost,
            late: counters.late,
            reordered: counters.reordered,
            duplicate: counters.duplicate,
            jitter: u32::try_from(self.jitter_scaled >> 4).unwrap_or(u32::MAX),
            ..self.stats
        }
    }

    /// Where packets go now: the SDP's address, or the source we latched to.
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// The local address of the socket.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Our synchronisation source.
    pub fn ssrc(&self) -> u32 {
        self.ssrc
    }

    /// The call is on hold (`true`) or back (`false`): while held, silence from the peer does
    /// not end the stream; the timeout starts afresh when the hold ends.
    pub fn set_hold(&mut self, hold: bool) {
        if self.hold && !hold {
            self.last_packet_at = Instant::now();
        }
        self.hold = hold;
    }

    /// A re-INVITE moved the peer: send to `remote` and latch afresh.
    pub fn set_remote(&mut self, remote: SocketAddr) {
        self.remote = remote;
        self.latched = false;
    }

    /// What an RTCP sender report would say now.
    pub fn sender_stats(&self) -> SenderStats {
        let since_epoch = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        SenderStats {
            ssrc: self.ssrc,
            ntp_timestamp: ntp_timestamp(since_epoch),
            rtp_timestamp: self.timestamp,
            // RTCP's counters are 32 bits and wrap.
            packet_count: self.stats.packets_out as u32,
            octet_count: self.stats.octets_out as u32,
        }
    }

    /// Takes one datagram from the receive buffer.
    fn on_datagram(&mut self, len: usize, from: SocketAddr) {
        if len > MAX_RTP_PACKET_LEN {
            self.stats.malformed += 1;
            return;
        }
        let Ok(packet) = parse_rtp(&self.recv_buffer[..len]) else {
            self.stats.malformed += 1;
            return;
        };
        let is_audio = packet.payload_type == self.payload_type;
        let is_event = Some(packet.payload_type) == self.config.telephone_event;
        if !is_audio && !is_event {
            self.stats.unexpected_payload += 1;
            return;
        }
        if from != self.remote {
            if self.latched {
                self.stats.foreign += 1;
                return;
            }
            info!(sdp = %self.remote, source = %from, "RTP peer latched to its packets' source");
            self.remote = from;
        }
        self.latched = true;
        if self.peer_ssrc != Some(packet.ssrc) {
            if self.peer_ssrc.is_some() {
                debug!(
                    ssrc = packet.ssrc,
                    "RTP peer changed SSRC: stream restarted"
                );
                self.jitter.reset();
                self.events.reset();
                self.transit = None;
            }
            self.peer_ssrc = Some(packet.ssrc);
        }
        let (timestamp, octets) = (packet.timestamp, packet.payload.len() as u64);
        if is_audio {
            if self
                .jitter
                .push(packet.sequence, timestamp, packet.payload)
                .is_err()
            {
                // Not one 20 ms frame: the answer asked for ptime 20.
                self.stats.malformed += 1;
                return;
            }
        } else {
            match self.events.push(timestamp, packet.payload) {
                Ok(Some(digit)) => {
                    self.stats.digits_in += 1;
                    self.outgoing
                        .push_back(TransportMessage::Text(format!("dtmf {digit}")));
                }
                Ok(None) => {}
                Err(_) => {
                    self.stats.malformed += 1;
                    return;
                }
            }
        }
        let now = Instant::now();
        if is_audio {
            self.update_jitter(now, timestamp);
        }
        self.stats.packets_in += 1;
        self.stats.octets_in += octets;
        self.last_packet_at = now;
    }

    /// RFC 3550 A.8: `J += (|D| - J) / 16`, in clock ticks, kept scaled by 16.
    fn update_jitter(&mut self, now: Instant, timestamp: u32) {
        let arrival = now.duration_since(self.origin).as_micros() * 8 / 1000;
        // Both clocks count modulo 2^32.
        let transit = i64::from((arrival as u32).wrapping_sub(timestamp) as i32);
        if let Some(previous) = self.transit {
            let d = (transit - previous).abs();
            self.jitter_scaled += d - ((self.jitter_scaled + 8) >> 4);
        }
        self.transit = Some(transit);
    }

    /// One tick of the pacer: the slots due since the last, one packet out, caller audio in.
    fn on_tick(&mut self) {
        let now = Instant::now();
        if !self.hold && now.duration_since(self.last_packet_at) >= self.config.inactivity_timeout {
            info!(timeout = ?self.config.inactivity_timeout, "no RTP from the peer: stream ended");
            self.ended = true;
            return;
        }
        let due = (now.duration_since(self.origin).as_micros() / FRAME.as_micros()) as u64;
        let slots = due.saturating_sub(self.slots_done).max(1);
        self.slots_done = self.slots_done.max(due);
        if slots > 1 {
            self.stats.late_ticks += slots - 1;
            // The skipped slots pass on the RTP clock as a pause would.
            // Modulo 2^32, as the RTP clock counts.
            let skipped = FRAME_TICKS.wrapping_mul((slots - 1) as u32);
            self.timestamp = self.timestamp.wrapping_add(skipped);
            self.marker_next = true;
        }
        self.send_slot();
        self.timestamp = self.timestamp.wrapping_add(FRAME_TICKS);
        self.echo_marks();
        self.play_in(slots.min(MAX_CATCH_UP as u64) as usize);
    }

    /// Sends this slot's packet: a key's telephone event, the next audio frame, or nothing.
    fn send_slot(&mut self) {
        while self
            .keys_at
            .front()
            .is_some_and(|keys| keys.position <= self.played)
        {
            if let Some(keys) = self.keys_at.pop_front() {
                self.keys.extend(keys.digits.chars());
            }
        }
        self.key_wait = self.key_wait.saturating_sub(1);
        if self.digit.is_none() && self.key_wait == 0 {
            self.start_key();
        }
        if let Some(sender) = self.digit.as_mut() {
            let sequence = self.sequence;
            match sender.write_next(sequence, &mut self.send_buffer) {
                Ok(Some(len)) => {
                    let done = sender.is_done();
                    self.transmit(len, 4);
                    if done {
                        self.digit = None;
                    }
                }
                _ => self.digit = None,
            }
            // The event replaces the audio (the loop's silence) it overlaps.
            let take = self.ring.len().min(FRAME_BYTES);
            self.ring.drain(..take);
            self.played += take as u64;
            return;
        }
        if self.ring.is_empty() {
            self.marker_next = true;
            return;
        }
        let take = self.ring.len().min(FRAME_BYTES);
        for (slot, byte) in self.frame.iter_mut().zip(self.ring.drain(..take)) {
            *slot = byte;
        }
        self.frame[take..].fill(self.silence);
        self.played += take as u64;
        let header = RtpOut {
            payload_type: self.payload_type,
            sequence: self.sequence,
            timestamp: self.timestamp,
            ssrc: self.ssrc,
            marker: self.marker_next,
        };
        match write_rtp(&header, &self.frame, &mut self.send_buffer) {
            Ok(len) => {
                self.marker_next = false;
                self.transmit(len, FRAME_BYTES);
            }
            Err(error) => debug!(%error, "RTP packet not written"),
        }
    }

    /// Starts the next waiting key, if any, at the current point of the RTP clock.
    fn start_key(&mut self) {
        let Some(payload_type) = self.config.telephone_event else {
            if !self.keys.is_empty() {
                // The peer did not accept telephone-event, so the codec should have kept the
                // keys in band (`CarrierCodec::sip_without_telephone_events`).
                debug!("keys dropped: no telephone-event payload type negotiated");
                self.keys.clear();
            }
            return;
        };
        while let Some(key) = self.keys.pop_front() {
            let stream = EventStream {
                payload_type,
                ssrc: self.ssrc,
                timestamp: self.timestamp,
            };
            match DigitSender::new(key, KEY_TONE_MS, stream) {
                Ok(sender) => {
                    self.digit = Some(sender);
                    self.key_wait = KEY_TICKS;
                    self.stats.digits_out += 1;
                    return;
                }
                Err(error) => debug!(%error, "key not sent"),
            }
        }
    }

    /// Sends the `len` bytes of the send buffer (`payload` of them payload) to the peer.
    fn transmit(&mut self, len: usize, payload: usize) {
        self.sequence = self.sequence.wrapping_add(1);
        match self
            .socket
            .try_send_to(&self.send_buffer[..len], self.remote)
        {
            Ok(_) => {
                self.stats.packets_out += 1;
                self.stats.octets_out += payload as u64;
            }
            Err(error) => {
                self.stats.send_errors += 1;
                debug!(%error, remote = %self.remote, "RTP packet not sent");
            }
        }
    }

    /// Echoes the marks playout has passed.
    fn echo_marks(&mut self) {
        while self.marks.front().is_some_and(|(at, _)| *at <= self.played) {
            if let Some((_, name)) = self.marks.pop_front() {
                self.outgoing
                    .push_back(TransportMessage::Text(format!("mark {name}")));
            }
        }
    }

    /// Pops `frames` frames of caller audio for the loop, as one binary message.
    fn play_in(&mut self, frames: usize) {
        let mut audio = Vec::with_capacity(frames * FRAME_BYTES);
        for _ in 0..frames {
            let mut frame = [self.silence; FRAME_BYTES];
            match self.jitter.pop(&mut frame) {
                Playout::Frame { .. } => {
                    self.last_in = frame;
                    self.lost_run = 0;
                }
                Playout::Lost { .. } => {
                    // Repeat the last frame once; longer gaps are silence.
                    self.lost_run += 1;
                    frame = if self.lost_run == 1 {
                        self.last_in
                    } else {
                        [self.silence; FRAME_BYTES]
                    };
                }
                Playout::Empty => {}
            }
            audio.extend_from_slice(&frame);
        }
        self.outgoing.push_back(TransportMessage::Binary(audio));
    }

    /// Takes one command or audio frame from the loop.
    fn accept(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        if self.closed || self.ended {
            return Err(TransportError::Closed);
        }
        match frame {
            OutboundFrame::Binary(audio) => {
                let room = OUTBOUND_CAPACITY - self.ring.len();
                let take = audio.len().min(room);
                self.ring.extend(&audio[..take]);
                self.queued_end += take as u64;
                self.stats.outbound_dropped += (audio.len() - take) as u64;
            }
            OutboundFrame::Text(text) => {
                let (command, argument) = text.split_once(' ').unwrap_or((text, ""));
                match command {
                    "mark" => self.marks.push_back((self.queued_end, argument.to_owned())),
                    "clear" => self.clear(),
                    "dtmf" => {
                        let digits: String = argument
                            .chars()
                            .filter(|&d| dtmf_event_code(d).is_some())
                            .collect();
                        if !digits.is_empty() {
                            self.keys_at.push_back(KeysAt {
                                position: self.queued_end,
                                digits,
                            });
                        }
                    }
                    _ => debug!(command, "unknown command for the RTP transport ignored"),
                }
            }
        }
        Ok(())
    }

    /// Barge-in: drops queued audio and keys not begun (a key being sent finishes its
    /// packets, so the far end never sees a key held), echoes pending marks, says `cleared`.
    fn clear(&mut self) {
        self.played += self.ring.len() as u64;
        self.ring.clear();
        self.queued_end = self.played;
        self.keys_at.clear();
        self.keys.clear();
        while let Some((_, name)) = self.marks.pop_front() {
            self.outgoing
                .push_back(TransportMessage::Text(format!("mark {name}")));
        }
        self.outgoing
            .push_back(TransportMessage::Text("cleared".to_owned()));
    }
}

impl MediaTransport for RtpTransport {
    /// Cancel-safe: each branch of the select (`recv_from`, `Interval::tick`) is, and the
    /// work after either is synchronous (packets go out with `try_send_to`).
    async fn recv(&mut self) -> Option<TransportMessage> {
        loop {
            if let Some(message) = self.outgoing.pop_front() {
                return Some(message);
            }
            if self.ended || self.closed {
                return Some(TransportMessage::Closed);
            }
            // Datagrams waiting are read before a tick due at the same moment, so a tick
            // plays what has arrived; but a flood cannot hold the pacer off.
            let wake = if self.datagrams_since_tick < DATAGRAMS_PER_TICK {
                tokio::select! {
                    biased;
                    received = self.socket.recv_from(&mut self.recv_buffer) => {
                        Wake::Datagram(received)
                    }
                    _ = self.pacer.tick() => Wake::Tick,
                }
            } else {
                tokio::select! {
                    biased;
                    _ = self.pacer.tick() => Wake::Tick,
                    received = self.socket.recv_from(&mut self.recv_buffer) => {
                        Wake::Datagram(received)
                    }
                }
            };
            match wake {
                Wake::Datagram(received) => {
                    self.datagrams_since_tick += 1;
                    match received {
                        Ok((len, from)) => self.on_datagram(len, from),
                        // ICMP errors surface here on some systems; the stream goes on.
                        Err(error) => debug!(%error, "RTP receive failed"),
                    }
                }
                Wake::Tick => {
                    self.datagrams_since_tick = 0;
                    self.on_tick();
                }
            }
        }
    }

    async fn send(&mut self, frame: OutboundFrame<'_>) -> Result<(), TransportError> {
        self.accept(frame)
    }

    async fn send_all(&mut self, outbound: &Outbound) -> Result<(), TransportError> {
        for frame in outbound.frames() {
            self.accept(frame)?;
        }
        Ok(())
    }

    async fn close(&mut self) {
        self.closed = true;
        self.ring.clear();
        self.keys.clear();
        self.keys_at.clear();
        self.digit = None;
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use voxline_media::carrier::CarrierCodec;
    use voxline_media::g711::{decode_mulaw_into, encode_mulaw_into};
    use voxline_media::rtp::{RtpHeaderView, TelephoneEvent};
    use voxline_media::wav::WavInfo;

    use super::*;

    const EVENT_PT: u8 = 101;
    const PEER_SSRC: u32 = 0x5eed_0001;

    /// The speech fixture (Piper saying "my name is Mary Jones", as the sim callee sends it),
    /// G.711 μ-law in 20 ms frames.
    fn speech_frames() -> Vec<[u8; FRAME_BYTES]> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/media/tests/fixtures/vad/piper-my-name-is-mary-jones-1.wav"
        );
        let bytes = std::fs::read(path).expect("speech fixture");
        let info = WavInfo::read(Cursor::new(&bytes)).expect("a WAV header");
        assert_eq!((info.channels, info.sample_rate), (1, 8_000));
        let start = usize::try_from(info.data_offset).unwrap();
        let stored = &bytes[start..start + usize::try_from(info.frames).unwrap()];
        let mut linear = vec![0i16; stored.len()];
        decode_mulaw_into(stored, &mut linear);
        let mut encoded = vec![0u8; linear.len()];
        encode_mulaw_into(&linear, &mut encoded);
        let frames: Vec<[u8; FRAME_BYTES]> = encoded
            .chunks_exact(FRAME_BYTES)
            .map(|frame| frame.try_into().unwrap())
            .collect();
        assert!(frames.len() > 40, "{} frames", frames.len());
        frames
    }

    /// A peer's socket on 127.0.0.1. A plain non-blocking one: its `try_recv` asks the
    /// kernel, where tokio's would answer from readiness the reactor may not have polled yet.
    fn peer_socket() -> std::net::UdpSocket {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        socket
    }

    /// A transport on 127.0.0.1 and its peer's socket, which the SDP names as the remote.
    async fn pair(adjust: impl FnOnce(&mut RtpConfig)) -> (RtpTransport, std::net::UdpSocket) {
        let peer = peer_socket();
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut config = RtpConfig::new(
            AudioFormat::MULAW_8K,
            Some(EVENT_PT),
            peer.local_addr().unwrap(),
        );
        adjust(&mut config);
        (RtpTransport::new(socket, config).unwrap(), peer)
    }

    fn rtp(payload_type: u8, sequence: u16, timestamp: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = [0u8; MAX_RTP_PACKET_LEN];
        let header = RtpOut {
            payload_type,
            sequence,
            timestamp,
            ssrc: PEER_SSRC,
            marker: false,
        };
        let len = write_rtp(&header, payload, &mut out).unwrap();
        out[..len].to_vec()
    }

    fn send_to(from: &std::net::UdpSocket, transport: &RtpTransport, datagram: &[u8]) {
        from.send_to(datagram, transport.local_addr().unwrap())
            .unwrap();
    }

    /// The next message, skipping caller audio when `skip_audio`.
    async fn next(transport: &mut RtpTransport, skip_audio: bool) -> TransportMessage {
        loop {
            match transport.recv().await.expect("a message") {
                TransportMessage::Binary(_) if skip_audio => {}
                message => return message,
            }
        }
    }

    /// Runs `ticks` pacer ticks (each returns one binary message) and returns the texts seen.
    async fn run_ticks(transport: &mut RtpTransport, ticks: usize) -> Vec<String> {
        let mut texts = Vec::new();
        let mut seen = 0;
        while seen < ticks {
            match transport.recv().await.expect("a message") {
                TransportMessage::Binary(_) => seen += 1,
                TransportMessage::Text(text) => texts.push(text),
                TransportMessage::Closed => panic!("closed"),
            }
        }
        texts
    }

    /// Every datagram waiting at `peer`, parsed (owned).
    fn drain(peer: &std::net::UdpSocket) -> Vec<(RtpOut, Vec<u8>)> {
        let mut buffer = [0u8; 2048];
        let mut packets = Vec::new();
        while let Ok(len) = peer.recv(&mut buffer) {
            let RtpHeaderView {
                payload_type,
                sequence,
                timestamp,
                ssrc,
                marker,
                payload,
            } = parse_rtp(&buffer[..len]).unwrap();
            let header = RtpOut {
                payload_type,
                sequence,
                timestamp,
                ssrc,
                marker,
            };
            packets.push((header, payload.to_vec()));
        }
        packets
    }

    /// What the loop sends: `frames` through the `sip` codec, then `mark`.
    fn burst(frames: &[[u8; FRAME_BYTES]], mark: &str) -> Outbound {
        let mut codec = CarrierCodec::sip(AudioFormat::MULAW_8K);
        let mut out = Outbound::new();
        for frame in frames {
            codec.encode_media(frame, &mut out);
        }
        codec.encode_mark(mark, &mut out);
        out
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_reordered_and_lost_speech_comes_out_in_order() {
        let speech = &speech_frames()[..40];
        let (mut transport, peer) = pair(|_| {}).await;
        let (first_seq, first_ts) = (65_530u16, 4_294_960_000u32);
        // 5 and 6 swapped, 10 lost; sequence numbers and timestamps wrap on the way.
        let mut order: Vec<usize> = (0..speech.len()).filter(|&i| i != 10).collect();
        order.swap(5, 6);
        let mut heard = Vec::new();
        for &i in &order {
            let packet = rtp(
                0,
                first_seq.wrapping_add(i as u16),
                first_ts.wrapping_add(160 * i as u32),
                &speech[i],
            );
            send_to(&peer, &transport, &packet);
            // One tick per packet sent, as a steady peer would.
            let TransportMessage::Binary(audio) = next(&mut transport, false).await else {
                panic!("caller audio expected");
            };
            heard.extend(audio.chunks_exact(FRAME_BYTES).map(<[u8]>::to_vec));
        }
        for _ in 0..5 {
            let TransportMessage::Binary(audio) = next(&mut transport, false).await else {
                panic!("caller audio expected");
            };
            heard.extend(audio.chunks_exact(FRAME_BYTES).map(<[u8]>::to_vec));
        }
        let silence = vec![0xff; FRAME_BYTES];
        let mut expected = vec![silence.clone(); 3]; // the jitter buffer's playout delay
        for i in 0..speech.len() {
            // The lost frame is concealed by repeating the one before it.
            expected.push(speech[if i == 10 { 9 } else { i }].to_vec());
        }
        assert_eq!(heard.len(), expected.len() + 1);
        assert_eq!(heard[..expected.len()], expected[..]);
        assert_eq!(heard[expected.len()], silence, "nothing held: silence");
        let stats = transport.stats();
        assert_eq!(stats.lost, 1, "{stats:?}");
        assert_eq!(stats.reordered, 1, "{stats:?}");
        assert_eq!(stats.packets_in, speech.len() as u64 - 1);
        assert_eq!(stats.octets_in, 160 * (speech.len() as u64 - 1));
        assert_eq!(stats.late_ticks, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_a_one_second_burst_goes_out_as_fifty_paced_packets_then_its_mark() {
        let speech = &speech_frames()[..50];
        let (mut transport, peer) = pair(|_| {}).await;
        let started = Instant::now();
        transport.send_all(&burst(speech, "t1s0")).await.unwrap();
        // The mark comes back on the tick that sent the last frame, not before.
        let mut ticks = 0;
        let mark = loop {
            match next(&mut transport, false).await {
                TransportMessage::Binary(_) => ticks += 1,
                message => break message,
            }
        };
        assert_eq!(mark, TransportMessage::Text("mark t1s0".into()));
        assert_eq!(ticks, 49, "the mark is echoed with the 50th tick's audio");
        assert!(matches!(
            next(&mut transport, false).await,
            TransportMessage::Binary(_)
        ));
        // On the paused clock, the 50 ticks took exactly one second.
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        let packets = drain(&peer);
        assert_eq!(packets.len(), 50);
        let (first, _) = packets[0];
        assert!(first.marker, "the first packet starts a talk spurt");
        for (i, (header, payload)) in packets.iter().enumerate() {
            assert_eq!(header.payload_type, 0);
            assert_eq!(header.ssrc, transport.ssrc());
            assert_eq!(header.sequence, first.sequence.wrapping_add(i as u16));
            assert_eq!(
                header.timestamp,
                first.timestamp.wrapping_add(160 * i as u32)
            );
            assert_eq!(header.marker, i == 0);
            assert_eq!(payload[..], speech[i][..]);
        }
        let stats = transport.stats();
        assert_eq!((stats.packets_out, stats.octets_out), (50, 50 * 160));
        // Nothing queued: ticks send nothing (no comfort noise), and the clock runs on.
        run_ticks(&mut transport, 5).await;
        assert!(drain(&peer).is_empty());
        transport
            .send_all(&burst(&speech[..1], "t1s1"))
            .await
            .unwrap();
        let texts = run_ticks(&mut transport, 1).await;
        assert_eq!(texts, ["mark t1s1"]);
        let after_pause = drain(&peer);
        assert_eq!(after_pause.len(), 1);
        let (header, _) = after_pause[0];
        assert!(
            header.marker,
            "the first packet after silence carries the marker"
        );
        assert_eq!(header.sequence, first.sequence.wrapping_add(50));
        assert_eq!(header.timestamp, first.timestamp.wrapping_add(160 * 55));
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_clear_drops_the_rest_and_echoes_pending_marks() {
        let speech = &speech_frames()[..50];
        let (mut transport, peer) = pair(|_| {}).await;
        transport
            .send_all(&burst(&speech[..5], "t1s0"))
            .await
            .unwrap();
        transport
            .send_all(&burst(&speech[5..], "t1s1"))
            .await
            .unwrap();
        let texts = run_ticks(&mut transport, 10).await;
        assert_eq!(texts, ["mark t1s0"]);
        let mut out = Outbound::new();
        CarrierCodec::sip(AudioFormat::MULAW_8K).encode_clear(&mut out);
        transport.send_all(&out).await.unwrap();
        assert_eq!(
            next(&mut transport, true).await,
            TransportMessage::Text("mark t1s1".into())
        );
        assert_eq!(
            next(&mut transport, true).await,
            TransportMessage::Text("cleared".into())
        );
        let texts = run_ticks(&mut transport, 10).await;
        assert!(texts.is_empty(), "{texts:?}");
        let packets = drain(&peer);
        assert_eq!(
            packets.len(),
            10,
            "only what played before the clear went out"
        );
        assert_eq!(packets[9].1[..], speech[9][..]);
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_keys_from_the_peer_come_once_each() {
        let (mut transport, peer) = pair(|_| {}).await;
        for (n, key) in ['5', '#', '5'].into_iter().enumerate() {
            let stream = EventStream {
                payload_type: EVENT_PT,
                ssrc: PEER_SSRC,
                timestamp: 8_000 * n as u32,
            };
            let mut sender = DigitSender::new(key, 100, stream).unwrap();
            let mut buffer = [0u8; 64];
            let mut sequence = 100 * n as u16;
            while let Some(len) = sender.write_next(sequence, &mut buffer).unwrap() {
                send_to(&peer, &transport, &buffer[..len]);
                sequence += 1;
            }
        }
        let mut keys = Vec::new();
        for _ in 0..3 {
            keys.push(next(&mut transport, true).await);
        }
        let expected: Vec<TransportMessage> = ["dtmf 5", "dtmf #", "dtmf 5"]
            .map(|text| TransportMessage::Text(text.into()))
            .into();
        assert_eq!(keys, expected);
        let texts = run_ticks(&mut transport, 3).await;
        assert!(texts.is_empty(), "each key once: {texts:?}");
        assert_eq!(transport.stats().digits_in, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_keys_go_out_as_telephone_events_where_the_loop_put_them() {
        let (mut transport, peer) = pair(|_| {}).await;
        let speech = &speech_frames()[..2];
        let mut codec = CarrierCodec::sip(AudioFormat::MULAW_8K);
        let mut out = Outbound::new();
        for frame in speech {
            codec.encode_media(frame, &mut out);
        }
        // As the loop does: the command, then the keys' length of silence.
        assert!(codec.encode_dtmf("1#", &mut out));
        let per_key = (KEY_TONE_MS + KEY_GAP_MS) as usize / 20;
        for _ in 0..2 * per_key {
            codec.encode_media(&[0xff; FRAME_BYTES], &mut out);
        }
        codec.encode_mark("after-keys", &mut out);
        transport.send_all(&out).await.unwrap();
        let texts = run_ticks(&mut transport, 2 + 2 * per_key).await;
        assert_eq!(texts, ["mark after-keys"]);
        let packets = drain(&peer);
        let events: Vec<&(RtpOut, Vec<u8>)> = packets
            .iter()
            .filter(|(header, _)| header.payload_type == EVENT_PT)
            .collect();
        let audio = packets.len() - events.len();
        // The speech, then per key 8 event packets (5 updates, 3 ends) and 3 of silence.
        assert_eq!(audio, 2 + 2 * (per_key - 8));
        assert_eq!(events.len(), 16);
        for (i, (header, _)) in packets.iter().enumerate() {
            assert_eq!(
                header.sequence,
                packets[0].0.sequence.wrapping_add(i as u16)
            );
        }
        let mut receiver = TelephoneEventReceiver::new();
        let mut keys = String::new();
        for (header, payload) in &events {
            if let Some(key) = receiver.push(header.timestamp, payload).unwrap() {
                keys.push(key);
            }
        }
        assert_eq!(keys, "1#");
        // Each key goes down where its silence begins on the audio clock.
        let start = packets[0].0.timestamp;
        assert_eq!(events[0].0.timestamp, start.wrapping_add(2 * 160));
        assert_eq!(
            events[8].0.timestamp,
            start.wrapping_add((2 + per_key as u32) * 160)
        );
        assert!(events[0].0.marker && !events[1].0.marker && events[8].0.marker);
        let last = TelephoneEvent::parse(&events[7].1).unwrap();
        assert!(last.end);
        assert_eq!(u32::from(last.duration), KEY_TONE_MS * 8);
        assert_eq!(transport.stats().digits_out, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_latches_to_the_first_source_then_ignores_others() {
        // The SDP names an address nothing answers from (a NAT rewrote the real one).
        let (mut transport, _sdp_peer) = pair(|_| {}).await;
        let natted = peer_socket();
        let intruder = peer_socket();
        let speech = speech_frames();
        send_to(&natted, &transport, &rtp(0, 1, 160, &speech[0]));
        run_ticks(&mut transport, 1).await;
        assert_eq!(transport.remote(), natted.local_addr().unwrap());
        // Latched once: another source is not followed.
        send_to(&intruder, &transport, &rtp(0, 2, 320, &speech[1]));
        run_ticks(&mut transport, 1).await;
        assert_eq!(transport.remote(), natted.local_addr().unwrap());
        assert_eq!(transport.stats().foreign, 1);
        assert_eq!(transport.stats().packets_in, 1);
        // Our audio goes to the latched source.
        transport.send_all(&burst(&speech[..1], "m")).await.unwrap();
        run_ticks(&mut transport, 1).await;
        assert_eq!(drain(&natted).len(), 1);
        assert!(drain(&intruder).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_garbage_is_counted_and_dropped() {
        let (mut transport, peer) = pair(|_| {}).await;
        let speech = speech_frames();
        let mut version_one = rtp(0, 1, 160, &speech[0]);
        version_one[0] = 0x40;
        let garbage: [&[u8]; 6] = [
            &[],
            &[0x80, 0x00, 0x01],
            &[0xde; 2_000],
            &version_one,
            &rtp(0, 1, 160, &speech[0][..100]), // not a 20 ms frame
            &rtp(101, 1, 160, &[1, 2]),         // a short telephone event
        ];
        for datagram in garbage {
            send_to(&peer, &transport, datagram);
        }
        send_to(&peer, &transport, &rtp(96, 1, 160, &speech[0]));
        run_ticks(&mut transport, 2).await;
        let stats = transport.stats();
        assert_eq!(stats.malformed, 6, "{stats:?}");
        assert_eq!(stats.unexpected_payload, 1, "{stats:?}");
        assert_eq!(stats.packets_in, 0);
        // The stream still works.
        send_to(&peer, &transport, &rtp(0, 2, 320, &speech[1]));
        run_ticks(&mut transport, 1).await;
        assert_eq!(transport.stats().packets_in, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_silence_from_the_peer_ends_the_stream_unless_held() {
        let (mut transport, _peer) = pair(|config| {
            config.inactivity_timeout = Duration::from_millis(200);
        })
        .await;
        transport.set_hold(true);
        run_ticks(&mut transport, 50).await;
        transport.set_hold(false);
        let mut ticks = 0;
        loop {
            match transport.recv().await {
                Some(TransportMessage::Binary(_)) => ticks += 1,
                Some(TransportMessage::Closed) => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            ticks, 9,
            "closed on the tenth tick, 200 ms after the hold ended"
        );
        assert_eq!(transport.recv().await, Some(TransportMessage::Closed));
        let mut out = Outbound::new();
        CarrierCodec::sip(AudioFormat::MULAW_8K).encode_clear(&mut out);
        assert!(matches!(
            transport.send_all(&out).await,
            Err(TransportError::Closed)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_close_stops_sending() {
        let (mut transport, peer) = pair(|_| {}).await;
        let speech = &speech_frames()[..10];
        transport.send_all(&burst(speech, "m")).await.unwrap();
        run_ticks(&mut transport, 2).await;
        transport.close().await;
        assert_eq!(transport.recv().await, Some(TransportMessage::Closed));
        let frame = OutboundFrame::Binary(&speech[0]);
        assert!(matches!(
            transport.send(frame).await,
            Err(TransportError::Closed)
        ));
        assert_eq!(drain(&peer).len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_the_outbound_ring_never_grows() {
        let (mut transport, peer) = pair(|_| {}).await;
        let capacity = transport.ring.capacity();
        assert!(capacity >= OUTBOUND_CAPACITY);
        let second = vec![0x55u8; 8_000];
        for _ in 0..5 {
            transport
                .send(OutboundFrame::Binary(&second))
                .await
                .unwrap();
        }
        assert_eq!(transport.ring.len(), OUTBOUND_CAPACITY);
        assert_eq!(transport.ring.capacity(), capacity);
        assert_eq!(transport.stats().outbound_dropped, 8_000);
        run_ticks(&mut transport, 3).await;
        assert_eq!(drain(&peer).len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_a_new_ssrc_restarts_the_stream() {
        let (mut transport, peer) = pair(|_| {}).await;
        let speech = speech_frames();
        for i in 0..4u16 {
            let packet = rtp(0, 1_000 + i, 160 * u32::from(i), &speech[usize::from(i)]);
            send_to(&peer, &transport, &packet);
        }
        run_ticks(&mut transport, 2).await;
        // The peer restarts (a transfer on its side): a new SSRC whose numbering happens to
        // start where the old one had been, at a number already played.
        let mut restarted = rtp(0, 1_000, 99_000, &speech[10]);
        restarted[8..12].copy_from_slice(&0xabcd_0002u32.to_be_bytes());
        send_to(&peer, &transport, &restarted);
        let mut heard = Vec::new();
        for _ in 0..5 {
            if let TransportMessage::Binary(audio) = next(&mut transport, false).await {
                heard.push(audio);
            }
        }
        assert!(
            heard.iter().any(|frame| frame[..] == speech[10][..]),
            "the new stream plays"
        );
        let stats = transport.stats();
        assert_eq!(stats.packets_in, 5);
        assert_eq!(
            (stats.late, stats.duplicate),
            (0, 0),
            "the old numbering is not held against it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sip_rtp_late_ticks_are_counted_and_skipped_not_bursted() {
        let (mut transport, peer) = pair(|_| {}).await;
        let speech = &speech_frames()[..10];
        transport.send_all(&burst(speech, "m")).await.unwrap();
        run_ticks(&mut transport, 1).await;
        // The task is not polled for 100 ms: four slots pass unseen.
        tokio::time::advance(Duration::from_millis(100)).await;
        let texts = run_ticks(&mut transport, 1).await;
        assert!(texts.is_empty());
        let packets = drain(&peer);
        assert_eq!(packets.len(), 2, "one packet for the late tick, no burst");
        assert_eq!(transport.stats().late_ticks, 4);
        let (first, second) = (packets[0].0, packets[1].0);
        assert_eq!(second.sequence, first.sequence.wrapping_add(1));
        assert_eq!(second.timestamp, first.timestamp.wrapping_add(5 * 160));
        assert!(second.marker, "the peer re-anchors after the gap");
    }
}

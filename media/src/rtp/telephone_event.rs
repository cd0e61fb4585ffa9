//! DTMF as RTP telephone events (RFC 4733): the four-byte payload, a receiver that turns a
//! stream of event packets into digits, each exactly once, and a sender that writes the
//! packets of one digit.
//!
//! One key press is one event: every packet of it carries the timestamp at which the key went
//! down, the first with the marker bit, later ones with the duration so far, and the last,
//! sent three times because a lost end would leave the key held, with the end bit. The
//! receiver therefore reports a digit on the first packet of a new timestamp and ignores the
//! rest, which also covers a lost first packet and a digit pressed twice (a new timestamp).

use super::packet::{RtpError, RtpOut, write_rtp};

/// Bytes of one telephone-event payload.
pub const EVENT_PAYLOAD_LEN: usize = 4;

/// How many times the final packet of an event is sent (RFC 4733 section 2.5.1.4).
pub const END_PACKET_COPIES: usize = 3;

/// Longest digit the sender writes. One event's 16-bit duration holds 8.19 s at 8 kHz; a
/// phone menu never needs more than a fraction of a second.
pub const MAX_DIGIT_MS: u32 = 8000;

/// Volume the sender reports, in dB below 1 mW (-10 dBm0, a typical phone's keypad).
pub const DEFAULT_VOLUME: u8 = 10;

/// The sixteen DTMF keys by event code (RFC 4733 section 3.2: 0-9, `*`, `#`, A-D).
pub const DTMF_EVENT_KEYS: [char; 16] = [
    '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '*', '#', 'A', 'B', 'C', 'D',
];

/// Clock ticks per millisecond of the 8 kHz telephone-event clock.
const TICKS_PER_MS: u32 = 8;

/// Clock ticks between two packets of an event: one 20 ms packet interval.
const TICKS_PER_PACKET: u32 = 20 * TICKS_PER_MS;

/// How far behind the current event a timestamp may be and still be taken for a straggler of
/// an earlier one (10 s); further back is a sender that restarted its clock.
const STALE_EVENT_TICKS: u32 = 10_000 * TICKS_PER_MS;

/// The event code of a DTMF key, or `None` if `digit` is not one of `0-9 * # A-D`.
pub fn dtmf_event_code(digit: char) -> Option<u8> {
    let digit = digit.to_ascii_uppercase();
    DTMF_EVENT_KEYS
        .iter()
        .position(|&key| key == digit)
        .and_then(|code| u8::try_from(code).ok())
}

/// The DTMF key of an event code, or `None` for the other events (flash, fax and modem tones).
pub fn dtmf_digit(event: u8) -> Option<char> {
    DTMF_EVENT_KEYS.get(usize::from(event)).copied()
}

/// One telephone-event payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelephoneEvent {
    /// The event code: 0-15 for the DTMF keys, see [`dtmf_digit`].
    pub event: u8,
    /// The end bit: the key has been released and `duration` is final.
    pub end: bool,
    /// Power level in dB below 1 mW (0-63; larger is quieter).
    pub volume: u8,
    /// How long the event has lasted so far, in ticks of the 8 kHz clock.
    pub duration: u16,
}

impl TelephoneEvent {
    /// Reads the first four bytes of a telephone-event payload; the reserved bit is ignored,
    /// as the RFC asks. Longer payloads are read too (only RFC 2198 redundancy, which Voxline
    /// never offers, would put more there).
    pub fn parse(payload: &[u8]) -> Result<Self, RtpError> {
        let &[event, flags, duration_high, duration_low, ..] = payload else {
            return Err(RtpError::EventLength(payload.len()));
        };
        Ok(Self {
            event,
            end: flags & 0x80 != 0,
            volume: flags & 0x3f,
            duration: u16::from_be_bytes([duration_high, duration_low]),
        })
    }

    /// The four payload bytes; a volume above 63 is cut to its six bits.
    pub fn to_bytes(&self) -> [u8; EVENT_PAYLOAD_LEN] {
        let end_bit = if self.end { 0x80 } else { 0 };
        let flags = end_bit | (self.volume & 0x3f);
        let [duration_high, duration_low] = self.duration.to_be_bytes();
        [self.event, flags, duration_high, duration_low]
    }

    /// The DTMF key this event is, if it is one.
    pub fn digit(&self) -> Option<char> {
        dtmf_digit(self.event)
    }
}

/// Turns the telephone-event packets of one stream into DTMF digits, each exactly once.
#[derive(Debug, Clone, Default)]
pub struct TelephoneEventReceiver {
    /// Timestamp of the newest event seen.
    current: Option<u32>,
}

impl TelephoneEventReceiver {
    /// A receiver that has seen no event yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers one packet of the negotiated telephone-event payload type (its RTP timestamp
    /// and payload). Returns the key on the first packet of a new event; updates, the
    /// repeated end packets, stragglers of earlier events and non-DTMF events give `None`.
    pub fn push(&mut self, timestamp: u32, payload: &[u8]) -> Result<Option<char>, RtpError> {
        let event = TelephoneEvent::parse(payload)?;
        if let Some(current) = self.current {
            let behind = current.wrapping_sub(timestamp);
            if behind <= STALE_EVENT_TICKS {
                // This event (behind == 0) or a late packet of an earlier one.
                return Ok(None);
            }
        }
        self.current = Some(timestamp);
        Ok(event.digit())
    }

    /// Forgets the current event, e.g. when the sender's SSRC changes.
    pub fn reset(&mut self) {
        self.current = None;
    }
}

/// The RTP stream a digit is sent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventStream {
    /// The telephone-event payload type the far end offered (often 101).
    pub payload_type: u8,
    /// Our synchronisation source, the same as the audio's.
    pub ssrc: u32,
    /// The RTP timestamp at which the key goes down: where the audio stream's clock is now.
    pub timestamp: u32,
}

/// Writes the packets of one DTMF digit, one per 20 ms tick: a first packet with the
/// marker bit, updates with the growing duration, then the final packet with the end bit,
/// [`END_PACKET_COPIES`] times. All carry the timestamp at which the key went down.
#[derive(Debug, Clone)]
pub struct DigitSender {
    event: u8,
    duration: u16,
    stream: EventStream,
    /// Packets before the end packets (at least the first).
    updates: usize,
    /// Packets written so far.
    written: usize,
}

impl DigitSender {
    /// A sender for `digit` (one of `0-9 * # A-D`) held for `duration_ms` (1 to
    /// [`MAX_DIGIT_MS`]) on `stream`.
    pub fn new(digit: char, duration_ms: u32, stream: EventStream) -> Result<Self, RtpError> {
        let event = dtmf_event_code(digit).ok_or(RtpError::InvalidDigit(digit))?;
        if !(1..=MAX_DIGIT_MS).contains(&duration_ms) {
            return Err(RtpError::DigitDuration(duration_ms, MAX_DIGIT_MS));
        }
        let ticks = duration_ms * TICKS_PER_MS;
        let duration =
            u16::try_from(ticks).map_err(|_| RtpError::DigitDuration(duration_ms, MAX_DIGIT_MS))?;
        // One packet per started 20 ms before the end; the end packets carry the last part.
        let updates = ticks.div_ceil(TICKS_PER_PACKET).saturating_sub(1).max(1) as usize;
        Ok(Self {
            event,
            duration,
            stream,
            updates,
            written: 0,
        })
    }

    /// The event's duration in ticks of the 8 kHz clock, which the audio clock should skip
    /// over once the digit is sent.
    pub fn duration_ticks(&self) -> u32 {
        u32::from(self.duration)
    }

    /// How many packets the digit takes in all, end copies included.
    pub fn packet_count(&self) -> usize {
        self.updates + END_PACKET_COPIES
    }

    /// Whether every packet has been written.
    pub fn is_done(&self) -> bool {
        self.written >= self.packet_count()
    }

    /// Writes the next packet, with sequence number `sequence` from the stream's own
    /// counter, into `out` and returns its length; `None` once all are written.
    pub fn write_next(&mut self, sequence: u16, out: &mut [u8]) -> Result<Option<usize>, RtpError> {
        if self.is_done() {
            return Ok(None);
        }
        let end = self.written >= self.updates;
        let duration = if end {
            self.duration
        } else {
            // `written` stays below `updates` (at most 399), so this cannot overflow.
            let so_far = (self.written as u32 + 1) * TICKS_PER_PACKET;
            u16::try_from(so_far).unwrap_or(u16::MAX).min(self.duration)
        };
        let payload = TelephoneEvent {
            event: self.event,
            end,
            volume: DEFAULT_VOLUME,
            duration,
        }
        .to_bytes();
        let header = RtpOut {
            payload_type: self.stream.payload_type,
            sequence,
            timestamp: self.stream.timestamp,
            ssrc: self.stream.ssrc,
            marker: self.written == 0,
        };
        let len = write_rtp(&header, &payload, out)?;
        self.written += 1;
        Ok(Some(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtp::packet::parse_rtp;
    use proptest::prelude::*;

    const STREAM: EventStream = EventStream {
        payload_type: 101,
        ssrc: 0x1234_5678,
        timestamp: 4_000_000_000,
    };

    /// The packets `sender` writes, as datagrams, with sequence numbers from `first`.
    fn packets(mut sender: DigitSender, first: u16) -> Vec<Vec<u8>> {
        let mut out = [0u8; 64];
        let mut datagrams = Vec::new();
        let mut sequence = first;
        while let Some(len) = sender.write_next(sequence, &mut out).unwrap() {
            datagrams.push(out[..len].to_vec());
            sequence = sequence.wrapping_add(1);
        }
        datagrams
    }

    /// Feeds datagrams to `receiver` and collects the digits it reports.
    fn receive(receiver: &mut TelephoneEventReceiver, datagrams: &[Vec<u8>]) -> String {
        let mut digits = String::new();
        for datagram in datagrams {
            let packet = parse_rtp(datagram).unwrap();
            assert_eq!(packet.payload_type, 101);
            if let Some(digit) = receiver.push(packet.timestamp, packet.payload).unwrap() {
                digits.push(digit);
            }
        }
        digits
    }

    #[test]
    fn payload_reads_and_writes_the_rfc_layout() {
        // Digit 5, end bit, reserved bit set (ignored), -10 dBm0, 800 ticks (100 ms).
        let bytes = [5, 0xca, 0x03, 0x20];
        let event = TelephoneEvent::parse(&bytes).unwrap();
        assert_eq!(
            event,
            TelephoneEvent {
                event: 5,
                end: true,
                volume: 10,
                duration: 800
            }
        );
        assert_eq!(event.digit(), Some('5'));
        assert_eq!(event.to_bytes(), [5, 0x8a, 0x03, 0x20]);
        assert_eq!(
            TelephoneEvent::parse(&[5, 0x8a, 0x03]),
            Err(RtpError::EventLength(3))
        );
        assert_eq!(TelephoneEvent::parse(&[16, 0, 0, 0]).unwrap().digit(), None);
        assert_eq!(
            TelephoneEvent::parse(&[5, 0x0a, 0, 160, 9, 9])
                .unwrap()
                .duration,
            160
        );
    }

    #[test]
    fn event_codes_cover_the_sixteen_keys() {
        for (code, key) in DTMF_EVENT_KEYS.iter().enumerate() {
            assert_eq!(dtmf_event_code(*key), Some(code as u8));
            assert_eq!(dtmf_digit(code as u8), Some(*key));
        }
        assert_eq!(dtmf_event_code('b'), Some(13));
        assert_eq!(dtmf_event_code('E'), None);
        assert_eq!(dtmf_digit(16), None);
    }

    #[test]
    fn sender_writes_start_updates_and_three_end_packets() {
        let sender = DigitSender::new('#', 100, STREAM).unwrap();
        assert_eq!((sender.duration_ticks(), sender.packet_count()), (800, 7));
        let datagrams = packets(sender, 65534);
        assert_eq!(datagrams.len(), 7);
        let mut durations = Vec::new();
        for (i, datagram) in datagrams.iter().enumerate() {
            let packet = parse_rtp(datagram).unwrap();
            assert_eq!(packet.sequence, 65534u16.wrapping_add(i as u16));
            assert_eq!(
                (packet.timestamp, packet.ssrc),
                (STREAM.timestamp, STREAM.ssrc)
            );
            assert_eq!(packet.marker, i == 0, "packet {i}");
            let event = TelephoneEvent::parse(packet.payload).unwrap();
            assert_eq!((event.event, event.volume), (11, DEFAULT_VOLUME));
            assert_eq!(event.end, i >= 4, "packet {i}");
            durations.push(event.duration);
        }
        assert_eq!(durations, [160, 320, 480, 640, 800, 800, 800]);
    }

    #[test]
    fn a_short_digit_still_has_a_start_and_three_ends() {
        let datagrams = packets(DigitSender::new('1', 15, STREAM).unwrap(), 0);
        let events: Vec<TelephoneEvent> = datagrams
            .iter()
            .map(|d| TelephoneEvent::parse(parse_rtp(d).unwrap().payload).unwrap())
            .collect();
        assert_eq!(events.len(), 4);
        assert!(!events[0].end && events[1..].iter().all(|e| e.end));
        assert!(events.iter().all(|e| e.duration == 120));
    }

    #[test]
    fn receiver_reports_each_digit_once_despite_repeated_end_packets() {
        let mut receiver = TelephoneEventReceiver::new();
        let datagrams = packets(DigitSender::new('7', 160, STREAM).unwrap(), 10);
        assert_eq!(datagrams.len(), 10);
        assert_eq!(receive(&mut receiver, &datagrams), "7");
        // The end packets once more, as a lossy path might retransmit them.
        assert_eq!(receive(&mut receiver, &datagrams[7..]), "");
    }

    #[test]
    fn the_same_digit_twice_is_two_digits() {
        let mut receiver = TelephoneEventReceiver::new();
        let first = DigitSender::new('5', 100, STREAM).unwrap();
        // The second press starts after the first's 100 ms and 60 ms of silence.
        let second_stream = EventStream {
            timestamp: STREAM.timestamp.wrapping_add(first.duration_ticks() + 480),
            ..STREAM
        };
        let second = DigitSender::new('5', 100, second_stream).unwrap();
        let mut datagrams = packets(first, 100);
        datagrams.extend(packets(second, 107));
        assert_eq!(receive(&mut receiver, &datagrams), "55");
    }

    #[test]
    fn lost_first_packets_and_stragglers_are_handled() {
        let mut receiver = TelephoneEventReceiver::new();
        let first = packets(DigitSender::new('3', 100, STREAM).unwrap(), 0);
        let later = EventStream {
            timestamp: STREAM.timestamp.wrapping_add(2000),
            ..STREAM
        };
        let second = packets(DigitSender::new('9', 100, later).unwrap(), 7);
        // The first two packets of '3' are lost; an end packet of '3' arrives after '9' began.
        let mut datagrams = first[2..6].to_vec();
        datagrams.push(second[0].clone());
        datagrams.push(first[6].clone());
        datagrams.extend_from_slice(&second[1..]);
        assert_eq!(receive(&mut receiver, &datagrams), "39");
        // A sender whose clock restarted far away is heard again; so is anything after reset.
        let restarted = EventStream {
            timestamp: 1000,
            ..STREAM
        };
        let third = packets(DigitSender::new('0', 100, restarted).unwrap(), 0);
        assert_eq!(receive(&mut receiver, &third), "0");
        receiver.reset();
        assert_eq!(receive(&mut receiver, &third[3..]), "0");
    }

    #[test]
    fn sender_refuses_bad_digits_durations_and_buffers() {
        assert_eq!(
            DigitSender::new('x', 100, STREAM).unwrap_err(),
            RtpError::InvalidDigit('x')
        );
        assert_eq!(
            DigitSender::new('1', 0, STREAM).unwrap_err(),
            RtpError::DigitDuration(0, MAX_DIGIT_MS)
        );
        assert_eq!(
            DigitSender::new('1', MAX_DIGIT_MS + 1, STREAM).unwrap_err(),
            RtpError::DigitDuration(MAX_DIGIT_MS + 1, MAX_DIGIT_MS)
        );
        let longest = DigitSender::new('1', MAX_DIGIT_MS, STREAM).unwrap();
        assert_eq!(longest.packet_count(), 399 + END_PACKET_COPIES);
        let mut sender = DigitSender::new('1', 100, STREAM).unwrap();
        let mut small = [0u8; 15];
        assert_eq!(
            sender.write_next(0, &mut small),
            Err(RtpError::OutputTooSmall {
                needed: 16,
                actual: 15
            })
        );
        // A failed write is not counted: the packet can be written again.
        assert_eq!(packets(sender, 0).len(), 7);
    }

    proptest! {
        /// Random payloads and timestamps give digits or errors, never a panic.
        #[test]
        fn random_event_packets_never_panic(
            packets in prop::collection::vec(
                (any::<u32>(), prop::collection::vec(any::<u8>(), 0..8)),
                0..64,
            ),
        ) {
            let mut receiver = TelephoneEventReceiver::new();
            for (timestamp, payload) in packets {
                let result = receiver.push(timestamp, &payload);
                prop_assert_eq!(result.is_err(), payload.len() < EVENT_PAYLOAD_LEN);
            }
        }
    }
}

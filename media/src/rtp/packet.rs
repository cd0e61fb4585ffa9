//! Reading and writing RTP packets (RFC 3550) with the `rtp-types` crate, behind a narrow
//! API: [`parse_rtp`] borrows the datagram and hands back the few header fields a G.711 call
//! needs plus the payload slice; [`write_rtp`] writes a packet into a caller-owned buffer.
//! Neither allocates, so they can run once per packet on the media path.
//!
//! Contributing sources, header extensions and padding are understood when reading (the
//! payload comes back without them) and never written: nothing Voxline sends needs them.

use rtp_types::{RtpPacket, RtpPacketBuilder, RtpParseError, RtpWriteError};

/// Length of the fixed RTP header, without contributing sources or extensions.
pub const RTP_HEADER_LEN: usize = RtpPacket::MIN_RTP_PACKET_LEN;

/// Largest datagram accepted or written: an Ethernet MTU. Nothing this carrier negotiates
/// comes near it (20 ms of G.711 is 172 bytes, a telephone event 16), so a larger datagram is
/// garbage or an attack; a receive buffer of `MAX_RTP_PACKET_LEN + 1` bytes tells an
/// oversized datagram from one that exactly fills the buffer.
pub const MAX_RTP_PACKET_LEN: usize = 1500;

/// Highest RTP payload type: the field has seven bits.
pub const MAX_PAYLOAD_TYPE: u8 = 0x7f;

/// Everything that can go wrong reading or writing RTP and the payloads it carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RtpError {
    /// The datagram ends before the header, contributing sources, extension or padding it
    /// announces.
    #[error("truncated RTP packet: {actual} bytes, its header needs {needed}")]
    Truncated {
        /// The length the packet's own header fields require.
        needed: usize,
        /// The length that arrived.
        actual: usize,
    },
    /// A version other than 2 (RTP has had no other since 1996); usually not RTP at all.
    #[error("unsupported RTP version {0}")]
    UnsupportedVersion(u8),
    /// The padding bit is set but the last byte gives a padding length of zero.
    #[error("invalid RTP padding length {0}")]
    InvalidPadding(u8),
    /// A datagram, or a packet to be written, larger than [`MAX_RTP_PACKET_LEN`].
    #[error("RTP packet of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The packet's length.
        len: usize,
        /// The limit, [`MAX_RTP_PACKET_LEN`].
        max: usize,
    },
    /// The caller's output buffer cannot hold the packet.
    #[error("output buffer of {actual} bytes is too small, the packet needs {needed}")]
    OutputTooSmall {
        /// Bytes the packet needs.
        needed: usize,
        /// Bytes the buffer has.
        actual: usize,
    },
    /// A payload type above [`MAX_PAYLOAD_TYPE`].
    #[error("RTP payload type {0} does not fit in seven bits")]
    InvalidPayloadType(u8),
    /// A frame for the jitter buffer that is not exactly one 20 ms G.711 frame.
    #[error("audio frame of {actual} bytes, the jitter buffer takes {expected}")]
    FrameLength {
        /// The frame length the jitter buffer holds.
        expected: usize,
        /// The payload length that was pushed.
        actual: usize,
    },
    /// A jitter buffer size that cannot work (see `JitterBuffer::new`).
    #[error("jitter buffer of {capacity} frames cannot delay playout by {delay}")]
    JitterSize {
        /// The requested capacity in frames.
        capacity: usize,
        /// The requested playout delay in frames.
        delay: usize,
    },
    /// A telephone-event payload shorter than its four bytes.
    #[error("telephone-event payload of {0} bytes, expected 4")]
    EventLength(usize),
    /// A character that is not one of the sixteen DTMF keys.
    #[error("not a DTMF digit: {0:?}")]
    InvalidDigit(char),
    /// An RTCP CNAME longer than the 255 bytes an SDES item holds.
    #[error("RTCP CNAME of {0} bytes, at most 255 fit")]
    CnameLength(usize),
    /// `rtcp-types` refused to write an RTCP packet for another reason.
    #[error("RTCP packet not written: {0}")]
    Rtcp(String),
    /// A DTMF digit duration (ms) outside what one telephone event can carry
    /// (1 to the second field, ms).
    #[error("DTMF duration of {0} ms is outside 1-{1} ms")]
    DigitDuration(u32, u32),
}

/// The header fields of a received packet that a call needs, and its payload, borrowed from
/// the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeaderView<'a> {
    /// Payload type, as negotiated in SDP (0 PCMU, 8 PCMA, the telephone-event number).
    pub payload_type: u8,
    /// Sequence number; increments by one per packet and wraps at 65535.
    pub sequence: u16,
    /// Media clock of the payload's first sample (8 kHz for G.711 and DTMF events).
    pub timestamp: u32,
    /// Synchronisation source: a new value means the sender restarted its stream.
    pub ssrc: u32,
    /// Marker bit: the start of a talk spurt, or the first packet of a DTMF event.
    pub marker: bool,
    /// The payload, without contributing sources, header extension or padding.
    pub payload: &'a [u8],
}

/// The header fields of a packet to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpOut {
    /// Payload type, at most [`MAX_PAYLOAD_TYPE`].
    pub payload_type: u8,
    /// Sequence number.
    pub sequence: u16,
    /// Media clock of the payload's first sample.
    pub timestamp: u32,
    /// Our synchronisation source.
    pub ssrc: u32,
    /// Marker bit.
    pub marker: bool,
}

/// Parses one RTP datagram without copying it. Refuses datagrams over
/// [`MAX_RTP_PACKET_LEN`], versions other than 2, and headers whose contributing sources,
/// extension or padding run past the end of the datagram.
pub fn parse_rtp(datagram: &[u8]) -> Result<RtpHeaderView<'_>, RtpError> {
    if datagram.len() > MAX_RTP_PACKET_LEN {
        return Err(RtpError::TooLarge {
            len: datagram.len(),
            max: MAX_RTP_PACKET_LEN,
        });
    }
    let packet = RtpPacket::parse(datagram).map_err(parse_error)?;
    // `RtpPacket::payload` borrows from the parsed wrapper, not the datagram, so the payload
    // is cut from the datagram with the offsets the parser checked.
    let start = packet.payload_offset();
    let end = start + packet.payload_len();
    let payload = datagram.get(start..end).ok_or(RtpError::Truncated {
        needed: end,
        actual: datagram.len(),
    })?;
    Ok(RtpHeaderView {
        payload_type: packet.payload_type(),
        sequence: packet.sequence_number(),
        timestamp: packet.timestamp(),
        ssrc: packet.ssrc(),
        marker: packet.marker_bit(),
        payload,
    })
}

/// Writes a packet with `header` and `payload` into `out` and returns its length. The
/// packet has no contributing sources, extension or padding, so it is
/// `RTP_HEADER_LEN + payload.len()` bytes; it must fit both `out` and
/// [`MAX_RTP_PACKET_LEN`].
pub fn write_rtp(header: &RtpOut, payload: &[u8], out: &mut [u8]) -> Result<usize, RtpError> {
    if header.payload_type > MAX_PAYLOAD_TYPE {
        return Err(RtpError::InvalidPayloadType(header.payload_type));
    }
    let needed = RTP_HEADER_LEN + payload.len();
    // Checked here rather than left to the builder, which only knows the output length.
    if needed > MAX_RTP_PACKET_LEN {
        return Err(RtpError::TooLarge {
            len: needed,
            max: MAX_RTP_PACKET_LEN,
        });
    }
    if needed > out.len() {
        return Err(RtpError::OutputTooSmall {
            needed,
            actual: out.len(),
        });
    }
    RtpPacketBuilder::<&[u8], &[u8]>::new()
        .payload_type(header.payload_type)
        .sequence_number(header.sequence)
        .timestamp(header.timestamp)
        .ssrc(header.ssrc)
        .marker_bit(header.marker)
        .payload(payload)
        .write_into(out)
        .map_err(|err| write_error(err, out.len()))
}

/// Translates the parser's error into ours, so callers never see the crate underneath.
fn parse_error(err: RtpParseError) -> RtpError {
    match err {
        RtpParseError::UnsupportedVersion(version) => RtpError::UnsupportedVersion(version),
        RtpParseError::Truncated { expected, actual } => RtpError::Truncated {
            needed: expected,
            actual,
        },
        RtpParseError::PaddingInvalid(length) => RtpError::InvalidPadding(length),
    }
}

/// Translates the builder's error into ours. The checks in [`write_rtp`] come first, and
/// it never adds contributing sources, an extension or padding, so only the first two arms
/// can be reached; the others still map to an error rather than a panic.
fn write_error(err: RtpWriteError, out_len: usize) -> RtpError {
    match err {
        RtpWriteError::OutputTooSmall(needed) => RtpError::OutputTooSmall {
            needed,
            actual: out_len,
        },
        RtpWriteError::InvalidPayloadType(payload_type) => {
            RtpError::InvalidPayloadType(payload_type)
        }
        RtpWriteError::PacketTooLarge
        | RtpWriteError::TooManyContributionSources(_)
        | RtpWriteError::ExtensionDataNotPadded => RtpError::TooLarge {
            len: out_len,
            max: MAX_RTP_PACKET_LEN,
        },
        RtpWriteError::InvalidPadding => RtpError::InvalidPadding(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A PCMU packet as a SIP trunk sends it: sequence 0x1234, timestamp 0xdeadbeef,
    /// SSRC 0x01020304, marker set, four payload bytes.
    const PCMU_PACKET: [u8; 16] = [
        0x80, 0x80, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04, 0xff, 0x7f, 0x00,
        0x80,
    ];

    fn sample_out() -> RtpOut {
        RtpOut {
            payload_type: 8,
            sequence: 65535,
            timestamp: 160 * 1000,
            ssrc: 0xcafe_f00d,
            marker: true,
        }
    }

    #[test]
    fn parses_a_pcmu_packet_in_place() {
        let view = parse_rtp(&PCMU_PACKET).unwrap();
        assert_eq!(
            view,
            RtpHeaderView {
                payload_type: 0,
                sequence: 0x1234,
                timestamp: 0xdead_beef,
                ssrc: 0x0102_0304,
                marker: true,
                payload: &[0xff, 0x7f, 0x00, 0x80],
            }
        );
        // The payload is a view into the datagram, not a copy.
        assert!(std::ptr::eq(
            view.payload.as_ptr(),
            PCMU_PACKET[12..].as_ptr()
        ));
    }

    #[test]
    fn skips_contributing_sources_extension_and_padding() {
        let mut packet = vec![0xb1, 0x08, 0, 7, 0, 0, 0, 160, 0, 0, 0, 9];
        packet.extend_from_slice(&[0xaa; 4]); // one CSRC
        packet.extend_from_slice(&[0xbe, 0xde, 0, 1, 1, 2, 3, 4]); // a one-word extension
        packet.extend_from_slice(&[5, 6, 7]); // payload
        packet.extend_from_slice(&[0, 0, 3]); // three bytes of padding
        let view = parse_rtp(&packet).unwrap();
        assert_eq!((view.payload_type, view.sequence, view.ssrc), (8, 7, 9));
        assert!(!view.marker);
        assert_eq!(view.payload, &[5, 6, 7]);
    }

    #[test]
    fn refuses_truncated_wrong_version_bad_padding_and_oversized() {
        assert_eq!(
            parse_rtp(&PCMU_PACKET[..11]),
            Err(RtpError::Truncated {
                needed: 12,
                actual: 11
            })
        );
        assert_eq!(
            parse_rtp(&[]).unwrap_err().to_string(),
            "truncated RTP packet: 0 bytes, its header needs 12"
        );
        let mut version_1 = PCMU_PACKET;
        version_1[0] = 0x40;
        assert_eq!(parse_rtp(&version_1), Err(RtpError::UnsupportedVersion(1)));
        // Two CSRCs announced, one present.
        let mut csrcs = PCMU_PACKET;
        csrcs[0] = 0x82;
        assert!(matches!(
            parse_rtp(&csrcs),
            Err(RtpError::Truncated { needed: 20, .. })
        ));
        // Padding longer than the payload.
        let mut padding = PCMU_PACKET;
        padding[0] = 0xa0;
        padding[15] = 9;
        assert!(matches!(
            parse_rtp(&padding),
            Err(RtpError::Truncated { .. })
        ));
        padding[15] = 0;
        assert_eq!(parse_rtp(&padding), Err(RtpError::InvalidPadding(0)));
        let mut huge = vec![0u8; MAX_RTP_PACKET_LEN + 1];
        huge[..12].copy_from_slice(&PCMU_PACKET[..12]);
        assert_eq!(
            parse_rtp(&huge),
            Err(RtpError::TooLarge {
                len: MAX_RTP_PACKET_LEN + 1,
                max: MAX_RTP_PACKET_LEN
            })
        );
        assert!(parse_rtp(&huge[..MAX_RTP_PACKET_LEN]).is_ok());
    }

    #[test]
    fn writes_what_parses_back() {
        let payload = [0xd5u8; 160];
        let mut out = [0u8; 200];
        let len = write_rtp(&sample_out(), &payload, &mut out).unwrap();
        assert_eq!(len, RTP_HEADER_LEN + 160);
        assert_eq!(&out[..4], &[0x80, 0x88, 0xff, 0xff]);
        let view = parse_rtp(&out[..len]).unwrap();
        assert_eq!(
            (view.payload_type, view.sequence, view.timestamp, view.ssrc),
            (8, 65535, 160_000, 0xcafe_f00d)
        );
        assert!(view.marker);
        assert_eq!(view.payload, &payload);
        let header = RtpOut {
            payload_type: 0,
            sequence: 0x1234,
            timestamp: 0xdead_beef,
            ssrc: 0x0102_0304,
            marker: true,
        };
        let len = write_rtp(&header, &PCMU_PACKET[12..], &mut out).unwrap();
        assert_eq!(&out[..len], &PCMU_PACKET);
    }

    #[test]
    fn refuses_to_write_what_does_not_fit() {
        let mut small = [0u8; 100];
        assert_eq!(
            write_rtp(&sample_out(), &[0; 160], &mut small),
            Err(RtpError::OutputTooSmall {
                needed: 172,
                actual: 100
            })
        );
        let bad_type = RtpOut {
            payload_type: 128,
            ..sample_out()
        };
        let mut out = [0u8; MAX_RTP_PACKET_LEN + 64];
        assert_eq!(
            write_rtp(&bad_type, &[0; 160], &mut out),
            Err(RtpError::InvalidPayloadType(128))
        );
        assert!(matches!(
            write_rtp(&sample_out(), &[0; MAX_RTP_PACKET_LEN], &mut out),
            Err(RtpError::TooLarge { .. })
        ));
        assert_eq!(
            write_rtp(
                &sample_out(),
                &[0; MAX_RTP_PACKET_LEN - RTP_HEADER_LEN],
                &mut out
            ),
            Ok(MAX_RTP_PACKET_LEN)
        );
    }

    proptest! {
        /// Any bytes at all are a packet or an error, never a panic, and a packet's payload
        /// lies inside the datagram.
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1600)) {
            if let Ok(view) = parse_rtp(&bytes) {
                prop_assert!(bytes.len() <= MAX_RTP_PACKET_LEN);
                prop_assert!(view.payload.len() + RTP_HEADER_LEN <= bytes.len());
            }
        }

        /// Version-2 headers with random flags, CSRC counts, extension lengths and padding:
        /// the paths a random first byte rarely reaches.
        #[test]
        fn random_version_2_headers_never_panic(
            mut bytes in prop::collection::vec(any::<u8>(), 12..200),
            first in any::<u8>(),
        ) {
            bytes[0] = (first & 0x3f) | 0x80;
            if let Ok(view) = parse_rtp(&bytes) {
                let payload_start = view.payload.as_ptr() as usize - bytes.as_ptr() as usize;
                prop_assert!(payload_start >= RTP_HEADER_LEN);
                prop_assert!(payload_start + view.payload.len() <= bytes.len());
            }
        }

        /// What we write reads back field for field.
        #[test]
        fn written_packets_round_trip(
            payload_type in 0u8..=127,
            sequence in any::<u16>(),
            timestamp in any::<u32>(),
            ssrc in any::<u32>(),
            marker in any::<bool>(),
            payload in prop::collection::vec(any::<u8>(), 0..400),
        ) {
            let header = RtpOut { payload_type, sequence, timestamp, ssrc, marker };
            let mut out = [0u8; 512];
            let len = write_rtp(&header, &payload, &mut out).unwrap();
            let view = parse_rtp(&out[..len]).unwrap();
            prop_assert_eq!(
                (view.payload_type, view.sequence, view.timestamp, view.ssrc, view.marker),
                (payload_type, sequence, timestamp, ssrc, marker)
            );
            prop_assert_eq!(view.payload, &payload[..]);
        }
    }
}

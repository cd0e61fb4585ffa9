//! RTP media for the SIP carrier: the packet format (RFC 3550), a jitter buffer for the
//! caller's 20 ms G.711 frames, DTMF as telephone events (RFC 4733) and RTCP sender reports.
//!
//! Like the rest of the crate this is wire formats only: the sockets, the 20 ms pacer and
//! SDP live with the carrier. Every per-packet call reads from the datagram in place and
//! writes into caller-owned buffers; the jitter buffer allocates once, when it is made.
//!
//! ```
//! use voxline_media::rtp::{JitterBuffer, Playout, RtpOut, parse_rtp, write_rtp};
//!
//! let mut datagram = [0u8; 200];
//! let header = RtpOut { payload_type: 0, sequence: 7, timestamp: 1120, ssrc: 42, marker: false };
//! let len = write_rtp(&header, &[0xff; 160], &mut datagram)?;
//!
//! let mut jitter = JitterBuffer::new(8, 0)?;
//! let packet = parse_rtp(&datagram[..len])?;
//! jitter.push(packet.sequence, packet.timestamp, packet.payload)?;
//! let mut frame = [0u8; 160];
//! assert_eq!(jitter.pop(&mut frame), Playout::Frame { sequence: 7, timestamp: 1120 });
//! # Ok::<(), voxline_media::rtp::RtpError>(())
//! ```

pub mod jitter;
pub mod packet;
pub mod rtcp;
pub mod telephone_event;

pub use jitter::{FRAME_BYTES, JitterBuffer, JitterCounters, Playout, Pushed};
pub use packet::{
    MAX_RTP_PACKET_LEN, RTP_HEADER_LEN, RtpError, RtpHeaderView, RtpOut, parse_rtp, write_rtp,
};
pub use rtcp::{SenderStats, ntp_timestamp, write_sender_report};
pub use telephone_event::{DigitSender, EventStream, TelephoneEvent, TelephoneEventReceiver};

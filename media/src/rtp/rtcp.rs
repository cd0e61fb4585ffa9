//! RTCP sender reports (RFC 3550 section 6.4.1) written with `rtcp-types`: the compound
//! packet the SIP carrier sends every few seconds, a sender report followed by the SDES
//! chunk with our CNAME that every compound packet must carry (section 6.1).
//!
//! This runs once per report, not per frame: `rtcp-types` boxes each packet of a compound
//! while building it. The bytes still go into the caller's buffer.

use std::time::Duration;

use rtcp_types::{
    Compound, RtcpPacketWriterExt, RtcpWriteError, Sdes, SdesChunk, SdesItem, SenderReport,
};

use super::packet::RtpError;

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET_SECS: u64 = 2_208_988_800;

/// Longest CNAME an SDES item holds: its length is one byte.
pub const MAX_CNAME_LEN: usize = 255;

/// A wall-clock time given as the time since the Unix epoch, in the 64-bit NTP format of
/// sender reports: seconds since 1900 in the high half (wrapping in 2036 as NTP's era does),
/// the fraction of a second in the low half.
pub fn ntp_timestamp(since_unix_epoch: Duration) -> u64 {
    let seconds = since_unix_epoch
        .as_secs()
        .wrapping_add(NTP_UNIX_OFFSET_SECS)
        & 0xffff_ffff;
    let fraction = (u64::from(since_unix_epoch.subsec_nanos()) << 32) / 1_000_000_000;
    (seconds << 32) | fraction
}

/// What a sender report says about the stream we send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderStats {
    /// Our synchronisation source.
    pub ssrc: u32,
    /// Wall-clock time of the report, in NTP format (see [`ntp_timestamp`]).
    pub ntp_timestamp: u64,
    /// The RTP timestamp of the same instant, on the media clock.
    pub rtp_timestamp: u32,
    /// RTP packets sent since the stream started (wrapping).
    pub packet_count: u32,
    /// Payload bytes sent since the stream started (wrapping).
    pub octet_count: u32,
}

/// Writes the compound packet of a sender report and our CNAME into `out` and returns its
/// length (52 bytes plus the CNAME, rounded up to four).
pub fn write_sender_report(
    stats: &SenderStats,
    cname: &str,
    out: &mut [u8],
) -> Result<usize, RtpError> {
    if cname.len() > MAX_CNAME_LEN {
        return Err(RtpError::CnameLength(cname.len()));
    }
    let report = SenderReport::builder(stats.ssrc)
        .ntp_timestamp(stats.ntp_timestamp)
        .rtp_timestamp(stats.rtp_timestamp)
        .packet_count(stats.packet_count)
        .octet_count(stats.octet_count);
    let description = Sdes::builder().add_chunk(
        SdesChunk::builder(stats.ssrc).add_item(SdesItem::builder(SdesItem::CNAME, cname)),
    );
    Compound::builder()
        .add_packet(report)
        .add_packet(description)
        .write_into(out)
        .map_err(|err| match err {
            RtcpWriteError::OutputTooSmall(needed) => RtpError::OutputTooSmall {
                needed,
                actual: out.len(),
            },
            RtcpWriteError::SdesValueTooLarge { len, .. } => RtpError::CnameLength(len),
            // Nothing else this packet holds can be out of range; kept as text all the same.
            other => RtpError::Rtcp(other.to_string()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtcp_types::Packet;

    const STATS: SenderStats = SenderStats {
        ssrc: 0xcafe_f00d,
        ntp_timestamp: 0xe9a0_0000_8000_0000,
        rtp_timestamp: 123_456,
        packet_count: 250,
        octet_count: 40_000,
    };

    #[test]
    fn ntp_timestamps_count_from_1900() {
        assert_eq!(ntp_timestamp(Duration::ZERO), NTP_UNIX_OFFSET_SECS << 32);
        assert_eq!(
            ntp_timestamp(Duration::from_millis(1_500)),
            ((NTP_UNIX_OFFSET_SECS + 1) << 32) | 0x8000_0000
        );
        // 2036-02-07 06:28:16 UTC ends NTP era 0.
        assert_eq!(ntp_timestamp(Duration::from_secs(2_085_978_496)), 0);
    }

    #[test]
    fn sender_report_and_cname_parse_back() {
        let mut out = [0u8; 128];
        let len = write_sender_report(&STATS, "voxline@10.0.0.1", &mut out).unwrap();
        // 28 bytes of report, then 4 of SDES header, 4 of SSRC, 2 + 16 of item and 2 of end
        // and padding.
        assert_eq!(len, 56);
        let mut packets = Compound::parse(&out[..len]).unwrap();
        let Some(Ok(Packet::Sr(report))) = packets.next() else {
            panic!("the first packet is the sender report");
        };
        assert_eq!(
            (
                report.ssrc(),
                report.ntp_timestamp(),
                report.rtp_timestamp(),
                report.packet_count(),
                report.octet_count()
            ),
            (0xcafe_f00d, 0xe9a0_0000_8000_0000, 123_456, 250, 40_000)
        );
        let Some(Ok(Packet::Sdes(description))) = packets.next() else {
            panic!("the second packet is the SDES");
        };
        let chunk = description.chunks().next().unwrap();
        assert_eq!(chunk.ssrc(), 0xcafe_f00d);
        let item = chunk.items().next().unwrap();
        assert_eq!(
            (item.type_(), item.value()),
            (SdesItem::CNAME, &b"voxline@10.0.0.1"[..])
        );
        assert!(packets.next().is_none());
    }

    #[test]
    fn refuses_small_buffers_and_long_cnames() {
        let mut out = [0u8; 40];
        assert_eq!(
            write_sender_report(&STATS, "voxline", &mut out),
            Err(RtpError::OutputTooSmall {
                needed: 48,
                actual: 40
            })
        );
        let mut out = [0u8; 400];
        assert_eq!(
            write_sender_report(&STATS, &"x".repeat(256), &mut out),
            Err(RtpError::CnameLength(256))
        );
        assert!(write_sender_report(&STATS, &"x".repeat(255), &mut out).is_ok());
    }
}

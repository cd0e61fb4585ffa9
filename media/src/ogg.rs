//! Ogg Opus container writer (RFC 3533 pages, RFC 7845 Opus mapping).
//!
//! Pure Rust and independent of libopus: it frames already-encoded Opus
//! packets, so it is compiled and tested even without the `opus` feature.
//! Packets are grouped into pages of about one second to keep the container
//! overhead small; granule positions count 48 kHz samples as RFC 7845 requires.

use std::io::Write;

use crate::error::MediaError;

/// Ogg page header flag: this page continues a packet from the previous page.
const FLAG_CONTINUED: u8 = 0x01;
/// Ogg page header flag: first page of the logical stream.
const FLAG_BOS: u8 = 0x02;
/// Ogg page header flag: last page of the logical stream.
const FLAG_EOS: u8 = 0x04;
/// Fixed part of an Ogg page header, before the segment table.
const PAGE_HEADER_LEN: usize = 27;
/// Offset of the CRC field inside the page header.
const CRC_OFFSET: usize = 22;
/// Maximum lacing values in one page.
const MAX_SEGMENTS: usize = 255;
/// Packets per audio page (50 × 20 ms = 1 s).
const PACKETS_PER_PAGE: usize = 50;
/// Vendor string written into OpusTags.
const VENDOR: &str = "voxline";

/// Builds the Ogg CRC-32 table (polynomial 0x04C11DB7, MSB first, no reflection).
const fn build_crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut r = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            r = if r & 0x8000_0000 != 0 {
                (r << 1) ^ 0x04C1_1DB7
            } else {
                r << 1
            };
            bit += 1;
        }
        table[i] = r;
        i += 1;
    }
    table
}

/// Lookup table for `ogg_crc32`.
static CRC_TABLE: [u32; 256] = build_crc_table();

/// Ogg page checksum: CRC-32 with initial value 0 and no final XOR.
pub fn ogg_crc32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0u32, |crc, &b| {
        (crc << 8) ^ CRC_TABLE[(((crc >> 24) as u8) ^ b) as usize]
    })
}

/// Streams Opus packets into an Ogg Opus file.
#[derive(Debug)]
pub struct OggOpusWriter<W: Write> {
    writer: W,
    serial: u32,
    sequence: u32,
    granule: u64,
    segments: Vec<u8>,
    body: Vec<u8>,
    page: Vec<u8>,
    packets_in_page: usize,
}

impl<W: Write> OggOpusWriter<W> {
    /// Writes the OpusHead and OpusTags pages.
    ///
    /// `input_sample_rate` is informational (the original rate); `pre_skip`
    /// is the encoder delay in 48 kHz samples that players drop.
    pub fn new(
        writer: W,
        serial: u32,
        channels: u8,
        input_sample_rate: u32,
        pre_skip: u16,
    ) -> Result<Self, MediaError> {
        if channels == 0 || channels > 2 {
            return Err(MediaError::Opus(format!(
                "{channels} channels need a mapping family this writer does not emit"
            )));
        }
        let mut this = Self {
            writer,
            serial,
            sequence: 0,
            granule: 0,
            segments: Vec::with_capacity(MAX_SEGMENTS),
            body: Vec::with_capacity(8 * 1024),
            page: Vec::with_capacity(PAGE_HEADER_LEN + MAX_SEGMENTS + 8 * 1024),
            packets_in_page: 0,
        };
        let mut head = [0u8; 19];
        head[0..8].copy_from_slice(b"OpusHead");
        head[8] = 1; // version
        head[9] = channels;
        head[10..12].copy_from_slice(&pre_skip.to_le_bytes());
        head[12..16].copy_from_slice(&input_sample_rate.to_le_bytes());
        // Output gain 0 and channel mapping family 0 (mono/stereo) stay zero.
        this.add_packet(&head);
        this.flush_page(FLAG_BOS)?;

        let mut tags = Vec::with_capacity(16 + VENDOR.len());
        tags.extend_from_slice(b"OpusTags");
        tags.extend_from_slice(&(VENDOR.len() as u32).to_le_bytes());
        tags.extend_from_slice(VENDOR.as_bytes());
        tags.extend_from_slice(&0u32.to_le_bytes()); // no user comments
        this.add_packet(&tags);
        this.flush_page(0)?;
        Ok(this)
    }

    /// Granule position so far: 48 kHz samples of all packets written, pre-skip included.
    pub fn granule_position(&self) -> u64 {
        self.granule
    }

    /// Appends one Opus packet that decodes to `samples_48k` samples per channel.
    pub fn write_packet(&mut self, packet: &[u8], samples_48k: u32) -> Result<(), MediaError> {
        let lacing = packet.len() / 255 + 1;
        if lacing > MAX_SEGMENTS {
            return Err(MediaError::Opus(format!(
                "packet of {} bytes is too large for one page",
                packet.len()
            )));
        }
        if self.segments.len() + lacing > MAX_SEGMENTS {
            self.flush_page(0)?;
        }
        self.add_packet(packet);
        self.granule += u64::from(samples_48k);
        self.packets_in_page += 1;
        if self.packets_in_page >= PACKETS_PER_PAGE {
            self.flush_page(0)?;
        }
        Ok(())
    }

    /// Writes the final page (end-of-stream flag), flushes and returns the writer.
    pub fn finish(mut self) -> Result<W, MediaError> {
        self.flush_page(FLAG_EOS)?;
        self.writer.flush()?;
        Ok(self.writer)
    }

    /// Adds a packet's lacing values and bytes to the open page.
    fn add_packet(&mut self, packet: &[u8]) {
        let full = packet.len() / 255;
        self.segments.extend(std::iter::repeat_n(255u8, full));
        // The final lacing value (< 255, possibly 0) marks the packet end.
        self.segments.push((packet.len() % 255) as u8);
        self.body.extend_from_slice(packet);
    }

    /// Writes the open page with `flags`, even if it is empty (for the EOS page).
    fn flush_page(&mut self, flags: u8) -> Result<(), MediaError> {
        debug_assert_eq!(flags & FLAG_CONTINUED, 0, "packets never span pages here");
        self.page.clear();
        self.page.extend_from_slice(b"OggS");
        self.page.push(0); // stream structure version
        self.page.push(flags);
        self.page.extend_from_slice(&self.granule.to_le_bytes());
        self.page.extend_from_slice(&self.serial.to_le_bytes());
        self.page.extend_from_slice(&self.sequence.to_le_bytes());
        self.page.extend_from_slice(&0u32.to_le_bytes()); // CRC placeholder
        self.page.push(self.segments.len() as u8);
        self.page.extend_from_slice(&self.segments);
        self.page.extend_from_slice(&self.body);
        let crc = ogg_crc32(&self.page);
        self.page[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        self.writer.write_all(&self.page)?;
        self.sequence += 1;
        self.segments.clear();
        self.body.clear();
        self.packets_in_page = 0;
        Ok(())
    }
}

/// One parsed Ogg page, for tests and diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OggPage {
    /// Header flags (continued / BOS / EOS).
    pub flags: u8,
    /// Granule position.
    pub granule: u64,
    /// Stream serial number.
    pub serial: u32,
    /// Page sequence number.
    pub sequence: u32,
    /// Whether the stored CRC matches the page contents.
    pub crc_ok: bool,
    /// Packets completed on this page.
    pub packets: Vec<Vec<u8>>,
}

/// Splits an Ogg byte stream into pages (packets spanning pages are not supported).
pub fn parse_ogg_pages(mut bytes: &[u8]) -> Result<Vec<OggPage>, MediaError> {
    let malformed = |what: &str| MediaError::Opus(format!("malformed Ogg page: {what}"));
    let mut pages = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < PAGE_HEADER_LEN || &bytes[0..4] != b"OggS" {
            return Err(malformed("bad capture pattern"));
        }
        let segment_count = usize::from(bytes[26]);
        let header_len = PAGE_HEADER_LEN + segment_count;
        let segments = bytes
            .get(PAGE_HEADER_LEN..header_len)
            .ok_or_else(|| malformed("short segment table"))?;
        let body_len: usize = segments.iter().map(|&s| usize::from(s)).sum();
        let page = bytes
            .get(..header_len + body_len)
            .ok_or_else(|| malformed("short body"))?;
        let mut zeroed = page.to_vec();
        zeroed[CRC_OFFSET..CRC_OFFSET + 4].fill(0);
        let stored = u32::from_le_bytes([page[22], page[23], page[24], page[25]]);
        let mut packets = Vec::new();
        let mut current = Vec::new();
        let mut offset = header_len;
        for &lace in segments {
            current.extend_from_slice(&page[offset..offset + usize::from(lace)]);
            offset += usize::from(lace);
            if lace < 255 {
                packets.push(std::mem::take(&mut current));
            }
        }
        let mut granule = [0u8; 8];
        granule.copy_from_slice(&page[6..14]);
        pages.push(OggPage {
            flags: page[5],
            granule: u64::from_le_bytes(granule),
            serial: u32::from_le_bytes([page[14], page[15], page[16], page[17]]),
            sequence: u32::from_le_bytes([page[18], page[19], page[20], page[21]]),
            crc_ok: ogg_crc32(&zeroed) == stored,
            packets,
        });
        bytes = &bytes[page.len()..];
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_ogg_check_value() {
        // CRC-32/POSIX without its final inversion: check value of "123456789".
        assert_eq!(ogg_crc32(b"123456789"), 0x89A1_897F);
        assert_eq!(ogg_crc32(b""), 0);
    }

    #[test]
    fn writes_head_tags_and_audio_pages() {
        let mut writer = OggOpusWriter::new(Vec::new(), 0xCAFE, 2, 8000, 312).unwrap();
        // 120 fake packets of varying size, one a multi-segment 600-byte packet.
        for i in 0..120u32 {
            let len = if i == 7 { 600 } else { 20 + (i as usize % 40) };
            let packet = vec![i as u8; len];
            writer.write_packet(&packet, 960).unwrap();
        }
        assert_eq!(writer.granule_position(), 120 * 960);
        let bytes = writer.finish().unwrap();
        let pages = parse_ogg_pages(&bytes).unwrap();

        assert!(pages.iter().all(|p| p.crc_ok && p.serial == 0xCAFE));
        for (i, page) in pages.iter().enumerate() {
            assert_eq!(page.sequence, i as u32);
        }
        let head = &pages[0];
        assert_eq!(head.flags, FLAG_BOS);
        assert_eq!(&head.packets[0][0..8], b"OpusHead");
        assert_eq!(head.packets[0][9], 2);
        assert_eq!(
            u16::from_le_bytes([head.packets[0][10], head.packets[0][11]]),
            312
        );
        assert_eq!(&pages[1].packets[0][0..8], b"OpusTags");
        assert_eq!(pages[1].granule, 0);

        let audio: Vec<&OggPage> = pages[2..].iter().collect();
        let packets: Vec<&Vec<u8>> = audio.iter().flat_map(|p| &p.packets).collect();
        assert_eq!(packets.len(), 120);
        assert_eq!(packets[7].len(), 600);
        assert!(packets[8].iter().all(|&b| b == 8));
        // Granules grow by 960 per packet completed on each page.
        let mut expected = 0;
        for page in &audio {
            expected += 960 * page.packets.len() as u64;
            assert_eq!(page.granule, expected);
        }
        assert_eq!(audio.last().map(|p| p.flags), Some(FLAG_EOS));
        assert_eq!(audio[0].packets.len(), PACKETS_PER_PAGE);
    }

    #[test]
    fn rejects_unsupported_layouts() {
        assert!(OggOpusWriter::new(Vec::new(), 1, 3, 8000, 0).is_err());
        let mut writer = OggOpusWriter::new(Vec::new(), 1, 1, 8000, 0).unwrap();
        assert!(writer.write_packet(&vec![0; 255 * 255], 960).is_err());
        assert!(parse_ogg_pages(b"NotOgg at all, sorry!!!!!!!!!").is_err());
    }
}

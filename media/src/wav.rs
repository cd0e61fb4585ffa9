//! The one WAV implementation: call recordings as 8 kHz 16-bit stereo WAV
//! (caller left, agent right), whole mono files for transcription uploads,
//! and the header reader for files and for streams arriving piece by piece
//! (a speech synthesizer's stdout).
//!
//! The recording writer streams frames as they happen and patches the RIFF
//! and `data` sizes on `finalize`, so a crash leaves a file whose header says
//! zero length but whose audio is intact and recoverable.

use std::io::{Cursor, ErrorKind, Read, Seek, SeekFrom, Write};
use std::time::Duration;

use crate::error::MediaError;

/// Recording sample rate in Hz.
pub const RECORDING_SAMPLE_RATE: u32 = 8000;
/// Recording channel count: caller (left) and agent (right).
pub const RECORDING_CHANNELS: u16 = 2;
/// Bits per sample.
const BITS_PER_SAMPLE: u16 = 16;
/// Bytes per stereo frame.
const BLOCK_ALIGN: u16 = RECORDING_CHANNELS * BITS_PER_SAMPLE / 8;
/// Length of the canonical 44-byte header this writer emits.
const HEADER_LEN: u64 = 44;
/// Offset of the RIFF chunk size field.
const RIFF_SIZE_OFFSET: u64 = 4;
/// Offset of the `data` chunk size field.
const DATA_SIZE_OFFSET: u64 = 40;

/// The canonical 44-byte header of a 16-bit PCM file with `data_bytes` of audio.
pub fn header(channels: u16, sample_rate: u32, data_bytes: u32) -> [u8; HEADER_LEN as usize] {
    let block_align = channels * BITS_PER_SAMPLE / 8;
    let byte_rate = sample_rate * u32::from(block_align);
    let mut header = [0u8; HEADER_LEN as usize];
    header[0..4].copy_from_slice(b"RIFF");
    header[4..8].copy_from_slice(&data_bytes.saturating_add(36).to_le_bytes());
    header[8..12].copy_from_slice(b"WAVE");
    header[12..16].copy_from_slice(b"fmt ");
    header[16..20].copy_from_slice(&16u32.to_le_bytes());
    header[20..22].copy_from_slice(&1u16.to_le_bytes()); // PCM
    header[22..24].copy_from_slice(&channels.to_le_bytes());
    header[24..28].copy_from_slice(&sample_rate.to_le_bytes());
    header[28..32].copy_from_slice(&byte_rate.to_le_bytes());
    header[32..34].copy_from_slice(&block_align.to_le_bytes());
    header[34..36].copy_from_slice(&BITS_PER_SAMPLE.to_le_bytes());
    header[36..40].copy_from_slice(b"data");
    header[40..44].copy_from_slice(&data_bytes.to_le_bytes());
    header
}

/// A whole 16-bit mono WAV file of `samples` at `sample_rate`.
pub fn mono_file(samples: &[i16], sample_rate: u32) -> Vec<u8> {
    let data_bytes = u32::try_from(samples.len() * 2).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(HEADER_LEN as usize + samples.len() * 2);
    out.extend_from_slice(&header(1, sample_rate, data_bytes));
    out.extend(samples.iter().flat_map(|sample| sample.to_le_bytes()));
    out
}

/// Streaming stereo WAV writer for one call recording.
#[derive(Debug)]
pub struct WavWriter<W: Write + Seek> {
    writer: W,
    frames: u64,
    interleaved: Vec<u8>,
}

impl<W: Write + Seek> WavWriter<W> {
    /// Writes the header (sizes zero until `finalize`) and returns the writer.
    pub fn new(mut writer: W) -> Result<Self, MediaError> {
        writer.write_all(&header(RECORDING_CHANNELS, RECORDING_SAMPLE_RATE, 0))?;
        Ok(Self {
            writer,
            frames: 0,
            // 20 ms of stereo; grows once if callers pass longer frames.
            interleaved: Vec::with_capacity(160 * usize::from(BLOCK_ALIGN)),
        })
    }

    /// Stereo frames written so far.
    pub fn frames_written(&self) -> u64 {
        self.frames
    }

    /// Recorded length so far.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.frames as f64 / f64::from(RECORDING_SAMPLE_RATE))
    }

    /// Appends `max(caller.len(), agent.len())` frames; a shorter or empty side is padded with silence.
    pub fn write_frames(&mut self, caller: &[i16], agent: &[i16]) -> Result<(), MediaError> {
        let frames = caller.len().max(agent.len());
        let data_bytes = (self.frames + frames as u64) * u64::from(BLOCK_ALIGN);
        if data_bytes + HEADER_LEN - 8 > u64::from(u32::MAX) {
            return Err(MediaError::InvalidWav(
                "recording exceeds the 4 GiB WAV limit".into(),
            ));
        }
        self.interleaved.clear();
        self.interleaved
            .resize(frames * usize::from(BLOCK_ALIGN), 0);
        for (i, frame) in self
            .interleaved
            .chunks_exact_mut(usize::from(BLOCK_ALIGN))
            .enumerate()
        {
            let left = caller.get(i).copied().unwrap_or(0);
            let right = agent.get(i).copied().unwrap_or(0);
            frame[0..2].copy_from_slice(&left.to_le_bytes());
            frame[2..4].copy_from_slice(&right.to_le_bytes());
        }
        self.writer.write_all(&self.interleaved)?;
        self.frames += frames as u64;
        Ok(())
    }

    /// Appends `frames` frames of silence on both sides (e.g. a gap in the media stream).
    pub fn write_silence(&mut self, frames: usize) -> Result<(), MediaError> {
        const CHUNK: [i16; 160] = [0; 160];
        let mut left = frames;
        while left > 0 {
            let n = left.min(CHUNK.len());
            self.write_frames(&CHUNK[..n], &[])?;
            left -= n;
        }
        Ok(())
    }

    /// Patches the RIFF and data sizes, flushes, and returns the underlying writer.
    pub fn finalize(mut self) -> Result<W, MediaError> {
        let data_bytes = self.frames * u64::from(BLOCK_ALIGN);
        let data_size = u32::try_from(data_bytes)
            .map_err(|_| MediaError::InvalidWav("data chunk exceeds 4 GiB".into()))?;
        let riff_size = data_size
            .checked_add((HEADER_LEN - 8) as u32)
            .ok_or_else(|| MediaError::InvalidWav("RIFF chunk exceeds 4 GiB".into()))?;
        let end = self.writer.stream_position()?;
        self.writer.seek(SeekFrom::Start(RIFF_SIZE_OFFSET))?;
        self.writer.write_all(&riff_size.to_le_bytes())?;
        self.writer.seek(SeekFrom::Start(DATA_SIZE_OFFSET))?;
        self.writer.write_all(&data_size.to_le_bytes())?;
        self.writer.seek(SeekFrom::Start(end))?;
        self.writer.flush()?;
        Ok(self.writer)
    }
}

/// Format facts read back from a WAV header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WavInfo {
    /// Channel count.
    pub channels: u16,
    /// Sample rate in Hz.
    pub sample_rate: u32,
    /// Bits per sample.
    pub bits_per_sample: u16,
    /// Frames (samples per channel) in the data chunk.
    pub frames: u64,
    /// Byte offset of the first audio sample.
    pub data_offset: u64,
}

impl WavInfo {
    /// Parses the RIFF chunks of a PCM WAV stream up to the `data` chunk.
    pub fn read<R: Read + Seek>(mut reader: R) -> Result<Self, MediaError> {
        let mut riff = [0u8; 12];
        reader.read_exact(&mut riff)?;
        if &riff[0..4] != b"RIFF" || &riff[8..12] != b"WAVE" {
            return Err(MediaError::InvalidWav("not a RIFF/WAVE stream".into()));
        }
        let mut format: Option<(u16, u32, u16, u16)> = None;
        loop {
            let mut chunk = [0u8; 8];
            reader.read_exact(&mut chunk)?;
            let size = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            match &chunk[0..4] {
                b"fmt " => {
                    if size < 16 {
                        return Err(MediaError::InvalidWav("fmt chunk too short".into()));
                    }
                    let mut fmt = [0u8; 16];
                    reader.read_exact(&mut fmt)?;
                    let channels = u16::from_le_bytes([fmt[2], fmt[3]]);
                    let sample_rate = u32::from_le_bytes([fmt[4], fmt[5], fmt[6], fmt[7]]);
                    let block_align = u16::from_le_bytes([fmt[12], fmt[13]]);
                    let bits = u16::from_le_bytes([fmt[14], fmt[15]]);
                    format = Some((channels, sample_rate, block_align, bits));
                    // Chunks are word aligned.
                    let skip = i64::from(size - 16) + i64::from(size % 2);
                    reader.seek(SeekFrom::Current(skip))?;
                }
                b"data" => {
                    let (channels, sample_rate, block_align, bits_per_sample) = format
                        .ok_or_else(|| MediaError::InvalidWav("data before fmt chunk".into()))?;
                    if block_align == 0 {
                        return Err(MediaError::InvalidWav("zero block alignment".into()));
                    }
                    return Ok(Self {
                        channels,
                        sample_rate,
                        bits_per_sample,
                        frames: u64::from(size) / u64::from(block_align),
                        data_offset: reader.stream_position()?,
                    });
                }
                _ => {
                    reader.seek(SeekFrom::Current(i64::from(size) + i64::from(size % 2)))?;
                }
            }
        }
    }

    /// The header at the start of a stream that is still arriving: `None`
    /// until `prefix` reaches the `data` chunk. Streams (a synthesizer's
    /// stdout) cannot patch their sizes, so `frames` means nothing for them.
    pub fn from_prefix(prefix: &[u8]) -> Result<Option<Self>, MediaError> {
        match Self::read(Cursor::new(prefix)) {
            Ok(info) => Ok(Some(info)),
            Err(MediaError::Io(err)) if err.kind() == ErrorKind::UnexpectedEof => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Audio length.
    pub fn duration(&self) -> Duration {
        if self.sample_rate == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(self.frames as f64 / f64::from(self.sample_rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{SpeechLikeGenerator, ToneGenerator};
    use std::io::Cursor;

    #[test]
    fn writes_readable_stereo_recording() {
        let mut writer = WavWriter::new(Cursor::new(Vec::new())).unwrap();
        let mut caller = SpeechLikeGenerator::new(8000, 1);
        let mut agent = ToneGenerator::new(8000, 440.0, -12.0);
        let mut left = [0i16; 160];
        let mut right = [0i16; 160];
        for i in 0..150 {
            caller.fill(&mut left);
            agent.fill(&mut right);
            match i % 3 {
                0 => writer.write_frames(&left, &right).unwrap(),
                1 => writer.write_frames(&left, &[]).unwrap(),
                _ => writer.write_frames(&[], &right).unwrap(),
            }
        }
        writer.write_silence(400).unwrap();
        assert_eq!(writer.frames_written(), 150 * 160 + 400);
        let bytes = writer.finalize().unwrap().into_inner();
        let info = WavInfo::read(Cursor::new(&bytes)).unwrap();
        assert_eq!(info.channels, 2);
        assert_eq!(info.sample_rate, 8000);
        assert_eq!(info.bits_per_sample, 16);
        assert_eq!(info.frames, 150 * 160 + 400);
        assert_eq!(info.duration(), Duration::from_millis(3050));
        assert_eq!(bytes.len() as u64, info.data_offset + info.frames * 4);
        let riff = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        assert_eq!(riff as usize, bytes.len() - 8);

        // Frame 1 (index 160..320) had no agent audio: right channel silent, left not.
        let sample = |frame: usize, channel: usize| {
            let at = info.data_offset as usize + frame * 4 + channel * 2;
            i16::from_le_bytes([bytes[at], bytes[at + 1]])
        };
        assert!((160..320).all(|f| sample(f, 1) == 0));
        assert!((160..320).any(|f| sample(f, 0) != 0));
        assert!((320..480).all(|f| sample(f, 0) == 0));
    }

    #[test]
    fn uneven_sides_pad_the_shorter_one() {
        let mut writer = WavWriter::new(Cursor::new(Vec::new())).unwrap();
        writer.write_frames(&[1, 2, 3], &[9]).unwrap();
        let bytes = writer.finalize().unwrap().into_inner();
        assert_eq!(&bytes[44..], &[1, 0, 9, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
    }

    #[test]
    fn mono_files_read_back() {
        let bytes = mono_file(&[1, -2, 3], 16_000);
        let info = WavInfo::read(Cursor::new(&bytes)).unwrap();
        assert_eq!(
            (info.channels, info.sample_rate, info.frames),
            (1, 16_000, 3)
        );
        assert_eq!(info.data_offset, 44);
        let riff = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        assert_eq!(riff as usize, bytes.len() - 8);
        assert_eq!(&bytes[44..], &[1, 0, 0xfe, 0xff, 3, 0]);
    }

    #[test]
    fn prefixes_wait_for_the_data_chunk() {
        let bytes = mono_file(&[7; 10], 22_050);
        for cut in 0..44 {
            assert_eq!(WavInfo::from_prefix(&bytes[..cut]).unwrap(), None, "{cut}");
        }
        let info = WavInfo::from_prefix(&bytes[..50]).unwrap().unwrap();
        assert_eq!((info.sample_rate, info.data_offset), (22_050, 44));
        assert!(WavInfo::from_prefix(b"ID3\x04 not a wav file").is_err());
    }

    #[test]
    fn reader_skips_unknown_chunks_and_rejects_garbage() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"RIFF\0\0\0\0WAVE");
        bytes.extend_from_slice(b"LIST\x03\0\0\0abc\0");
        bytes.extend_from_slice(b"fmt \x10\0\0\0\x01\0\x01\0\x40\x1f\0\0\x80\x3e\0\0\x02\0\x10\0");
        bytes.extend_from_slice(b"data\x08\0\0\0\0\0\0\0\0\0\0\0");
        let info = WavInfo::read(Cursor::new(&bytes)).unwrap();
        assert_eq!((info.channels, info.sample_rate, info.frames), (1, 8000, 4));
        assert!(WavInfo::read(Cursor::new(b"not a wav file at all")).is_err());
    }
}

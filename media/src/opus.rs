//! Opus encoding for call recordings (feature `opus`, needs libopus).
//!
//! `OpusEncoder` wraps audiopus; `OggOpusRecorder` mirrors `WavWriter`:
//! caller left, agent right, 8 kHz, written as 20 ms Opus packets in Ogg.

use std::io::Write;

use audiopus::coder::Encoder;
use audiopus::{Application, Bitrate, Channels, SampleRate};

use crate::error::MediaError;
use crate::ogg::OggOpusWriter;

/// The libopus bindings this module encodes with, for callers that decode
/// what it wrote (the service's tests check recordings with its decoder).
pub use audiopus;

/// Opus frame length used throughout: 20 ms.
pub const OPUS_FRAME_MS: u32 = 20;
/// Largest Opus packet (RFC 6716 §3.4 bound for one frame).
pub const MAX_OPUS_PACKET: usize = 1275;
/// Bitrate for the stereo 8 kHz recording: narrowband speech on two channels.
const RECORDING_BITRATE_BPS: i32 = 24_000;

/// Maps a rate in Hz to the Opus enum.
fn opus_rate(sample_rate: u32) -> Result<SampleRate, MediaError> {
    Ok(match sample_rate {
        8000 => SampleRate::Hz8000,
        12000 => SampleRate::Hz12000,
        16000 => SampleRate::Hz16000,
        24000 => SampleRate::Hz24000,
        48000 => SampleRate::Hz48000,
        other => return Err(MediaError::UnsupportedSampleRate(other)),
    })
}

/// Converts an audiopus error into ours.
fn opus_error(error: audiopus::Error) -> MediaError {
    MediaError::Opus(error.to_string())
}

/// A 20 ms-frame Opus encoder for speech.
pub struct OpusEncoder {
    encoder: Encoder,
    sample_rate: u32,
    channels: usize,
}

impl std::fmt::Debug for OpusEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpusEncoder")
            .field("sample_rate", &self.sample_rate)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

impl OpusEncoder {
    /// A VoIP-tuned encoder for `channels` (1 or 2) at `sample_rate`, at `bitrate_bps` bits per second.
    pub fn new(sample_rate: u32, channels: u8, bitrate_bps: i32) -> Result<Self, MediaError> {
        let layout = match channels {
            1 => Channels::Mono,
            2 => Channels::Stereo,
            other => {
                return Err(MediaError::Opus(format!(
                    "{other} channels are not supported"
                )));
            }
        };
        let mut encoder =
            Encoder::new(opus_rate(sample_rate)?, layout, Application::Voip).map_err(opus_error)?;
        encoder
            .set_bitrate(Bitrate::BitsPerSecond(bitrate_bps))
            .map_err(opus_error)?;
        Ok(Self {
            encoder,
            sample_rate,
            channels: usize::from(channels),
        })
    }

    /// Samples per channel in one 20 ms frame.
    pub fn frame_samples(&self) -> usize {
        (self.sample_rate / 1000 * OPUS_FRAME_MS) as usize
    }

    /// Interleaved samples `encode` expects per call.
    pub fn frame_len(&self) -> usize {
        self.frame_samples() * self.channels
    }

    /// Samples one frame advances the Ogg granule position (always counted at 48 kHz).
    pub fn samples_48k_per_frame(&self) -> u32 {
        48 * OPUS_FRAME_MS
    }

    /// Encoder delay in 48 kHz samples, for the OpusHead pre-skip.
    pub fn pre_skip_48k(&self) -> Result<u16, MediaError> {
        let lookahead = self.encoder.lookahead().map_err(opus_error)?;
        let scaled = u64::from(lookahead) * 48_000 / u64::from(self.sample_rate);
        u16::try_from(scaled).map_err(|_| MediaError::Opus(format!("pre-skip {scaled} too large")))
    }

    /// Encodes one 20 ms frame of interleaved PCM into `packet`; returns the packet length.
    pub fn encode(&mut self, pcm: &[i16], packet: &mut [u8]) -> Result<usize, MediaError> {
        if pcm.len() != self.frame_len() {
            return Err(MediaError::BufferLength {
                expected: self.frame_len(),
                actual: pcm.len(),
            });
        }
        self.encoder.encode(pcm, packet).map_err(opus_error)
    }
}

/// Streams a stereo 8 kHz call recording (caller left, agent right) into Ogg Opus.
#[derive(Debug)]
pub struct OggOpusRecorder<W: Write> {
    encoder: OpusEncoder,
    ogg: OggOpusWriter<W>,
    pending: Vec<i16>,
    packet: [u8; MAX_OPUS_PACKET],
    frames: u64,
}

impl<W: Write> OggOpusRecorder<W> {
    /// Starts a recording; writes the Ogg Opus headers.
    pub fn new(writer: W, serial: u32) -> Result<Self, MediaError> {
        let encoder = OpusEncoder::new(8000, 2, RECORDING_BITRATE_BPS)?;
        let ogg = OggOpusWriter::new(writer, serial, 2, 8000, encoder.pre_skip_48k()?)?;
        let frame_len = encoder.frame_len();
        Ok(Self {
            encoder,
            ogg,
            pending: Vec::with_capacity(frame_len),
            packet: [0; MAX_OPUS_PACKET],
            frames: 0,
        })
    }

    /// Stereo frames recorded so far.
    pub fn frames_written(&self) -> u64 {
        self.frames
    }

    /// Appends `max(caller.len(), agent.len())` frames; a shorter or empty side is silence.
    pub fn write_frames(&mut self, caller: &[i16], agent: &[i16]) -> Result<(), MediaError> {
        let frames = caller.len().max(agent.len());
        for i in 0..frames {
            self.pending.push(caller.get(i).copied().unwrap_or(0));
            self.pending.push(agent.get(i).copied().unwrap_or(0));
            if self.pending.len() == self.encoder.frame_len() {
                self.encode_pending()?;
            }
        }
        self.frames += frames as u64;
        Ok(())
    }

    fn encode_pending(&mut self) -> Result<(), MediaError> {
        let len = self.encoder.encode(&self.pending, &mut self.packet)?;
        self.ogg
            .write_packet(&self.packet[..len], self.encoder.samples_48k_per_frame())?;
        self.pending.clear();
        Ok(())
    }

    /// Pads and encodes the last partial frame, writes the end-of-stream page, returns the writer.
    pub fn finish(mut self) -> Result<W, MediaError> {
        if !self.pending.is_empty() {
            self.pending.resize(self.encoder.frame_len(), 0);
            self.encode_pending()?;
        }
        self.ogg.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ogg::parse_ogg_pages;
    use crate::synth::{SpeechLikeGenerator, ToneGenerator};

    #[test]
    fn encoder_produces_packets_and_checks_length() {
        let mut encoder = OpusEncoder::new(8000, 1, 16_000).unwrap();
        assert_eq!(encoder.frame_len(), 160);
        let mut speech = SpeechLikeGenerator::new(8000, 1);
        let mut pcm = [0i16; 160];
        let mut packet = [0u8; MAX_OPUS_PACKET];
        for _ in 0..10 {
            speech.fill(&mut pcm);
            let len = encoder.encode(&pcm, &mut packet).unwrap();
            assert!(len > 0 && len < 200, "{len}");
        }
        assert!(encoder.encode(&pcm[..100], &mut packet).is_err());
        assert!(encoder.pre_skip_48k().unwrap() > 0);
        assert!(OpusEncoder::new(44100, 1, 16_000).is_err());
    }

    #[test]
    fn recorder_writes_valid_ogg_opus() {
        let mut recorder = OggOpusRecorder::new(Vec::new(), 42).unwrap();
        let mut caller = SpeechLikeGenerator::new(8000, 3);
        let mut agent = ToneGenerator::new(8000, 440.0, -12.0);
        let mut left = [0i16; 160];
        let mut right = [0i16; 160];
        for i in 0..100 {
            caller.fill(&mut left);
            agent.fill(&mut right);
            let agent_side: &[i16] = if i % 2 == 0 { &right } else { &[] };
            recorder.write_frames(&left, agent_side).unwrap();
        }
        recorder.write_frames(&left[..50], &[]).unwrap();
        assert_eq!(recorder.frames_written(), 100 * 160 + 50);
        let bytes = recorder.finish().unwrap();
        let pages = parse_ogg_pages(&bytes).unwrap();
        assert!(pages.iter().all(|p| p.crc_ok));
        assert_eq!(&pages[0].packets[0][0..8], b"OpusHead");
        let packets: usize = pages[2..].iter().map(|p| p.packets.len()).sum();
        assert_eq!(packets, 101);
        assert_eq!(pages.last().map(|p| p.granule), Some(101 * 960));
    }
}

//! Per-call audio plumbing around the media crate: caller audio from the carrier's wire format
//! to 20 ms analysis frames, agent audio from TTS rate to the carrier's wire format, and the
//! stereo recording. Every buffer is allocated once per call and reused, so steady-state
//! frames allocate nothing.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;

use voxline_media::MediaError;
use voxline_media::carrier::{AudioEncoding, AudioFormat};
use voxline_media::g711;
use voxline_media::pcm;
use voxline_media::resample::StreamResampler;
use voxline_media::wav::{RECORDING_SAMPLE_RATE, WavWriter};

/// Samples in 20 ms at the recording rate.
const RECORD_FRAME: usize = (RECORDING_SAMPLE_RATE / 50) as usize;
/// Caller or agent audio kept waiting for the recording clock before the oldest is dropped.
const RECORD_BACKLOG: usize = RECORDING_SAMPLE_RATE as usize;
/// What a recording queue starts with: the caller's side holds a frame or two between ticks
/// and the agent's the playback lead, so a queue grows to the full backlog only when the clock
/// falls behind. Reserving the whole backlog up front cost 32 KiB a call.
const RECORD_QUEUE_START: usize = RECORD_FRAME * 8;
/// The WAV file's write buffer: half a second of stereo audio, two writes a second. A 64 KiB
/// buffer wrote less often but kept 48 KiB more of every live call resident.
const RECORD_WRITE_BUFFER: usize = 16 * 1024;

/// Samples in one 20 ms frame at `rate`.
pub(crate) const fn frame_len(rate: u32) -> usize {
    (rate / 50) as usize
}

/// The rate VAD, DTMF detection and ASR run at for a carrier rate: 8 kHz stays, wideband
/// carriers are analysed at 16 kHz (what the detectors support).
pub(crate) const fn analysis_rate(carrier_rate: u32) -> u32 {
    if carrier_rate <= 8_000 { 8_000 } else { 16_000 }
}

/// Decodes wire bytes of `format` into `out` (resized to fit).
fn decode_wire(format: AudioFormat, wire: &[u8], out: &mut Vec<i16>) {
    match format.encoding {
        AudioEncoding::Mulaw => {
            out.resize(wire.len(), 0);
            g711::decode_mulaw_into(wire, out);
        }
        AudioEncoding::Alaw => {
            out.resize(wire.len(), 0);
            g711::decode_alaw_into(wire, out);
        }
        AudioEncoding::Pcm16Le => {
            out.resize(wire.len() / 2, 0);
            pcm::decode_pcm16le_into(wire, out);
        }
    }
}

/// Encodes `samples` into `out` (resized to fit) in `format`.
fn encode_wire(format: AudioFormat, samples: &[i16], out: &mut Vec<u8>) {
    match format.encoding {
        AudioEncoding::Mulaw => {
            out.resize(samples.len(), 0);
            g711::encode_mulaw_into(samples, out);
        }
        AudioEncoding::Alaw => {
            out.resize(samples.len(), 0);
            g711::encode_alaw_into(samples, out);
        }
        AudioEncoding::Pcm16Le => {
            out.resize(pcm::pcm16_byte_len(samples.len()), 0);
            pcm::encode_pcm16le_into(samples, out);
        }
    }
}

/// Caller audio: carrier bytes in, 20 ms frames at the analysis rate out.
#[derive(Debug)]
pub(crate) struct InboundAudio {
    format: AudioFormat,
    decoded: Vec<i16>,
    /// Carrier-rate samples not yet a whole frame (carriers may send odd sizes).
    pending: Vec<i16>,
    to_analysis: StreamResampler,
    frame: Vec<i16>,
    to_recording: Option<StreamResampler>,
    record_frame: Vec<i16>,
}

impl InboundAudio {
    /// Audio plumbing for a stream in `format`.
    pub(crate) fn new(format: AudioFormat) -> Result<Self, MediaError> {
        let analysis = analysis_rate(format.sample_rate);
        Ok(Self {
            format,
            decoded: Vec::with_capacity(frame_len(format.sample_rate) * 4),
            pending: Vec::with_capacity(frame_len(format.sample_rate) * 4),
            to_analysis: StreamResampler::new(format.sample_rate, analysis)?,
            frame: vec![0; frame_len(analysis)],
            to_recording: (analysis != RECORDING_SAMPLE_RATE)
                .then(|| StreamResampler::new(analysis, RECORDING_SAMPLE_RATE))
                .transpose()?,
            record_frame: vec![0; RECORD_FRAME],
        })
    }

    /// The rate of the frames [`next_frame`](Self::next_frame) yields.
    pub(crate) fn analysis_rate(&self) -> u32 {
        self.to_analysis.output_rate()
    }

    /// Takes one inbound media payload.
    pub(crate) fn push_wire(&mut self, wire: &[u8]) {
        decode_wire(self.format, wire, &mut self.decoded);
        self.pending.extend_from_slice(&self.decoded);
    }

    /// The next whole 20 ms frame at the analysis rate, if one is buffered.
    pub(crate) fn next_frame(&mut self) -> Result<Option<&[i16]>, MediaError> {
        let need = self.to_analysis.input_frames();
        if self.pending.len() < need {
            return Ok(None);
        }
        self.to_analysis
            .process(&self.pending[..need], &mut self.frame)?;
        self.pending.drain(..need);
        Ok(Some(&self.frame))
    }

    /// The frame last returned by `next_frame`, at the recording rate.
    pub(crate) fn recording_frame(&mut self) -> Result<&[i16], MediaError> {
        match &mut self.to_recording {
            None => Ok(&self.frame),
            Some(resampler) => {
                resampler.process(&self.frame, &mut self.record_frame)?;
                Ok(&self.record_frame)
            }
        }
    }
}

/// Agent audio: TTS PCM at any supported rate in, carrier-rate samples out, then one 20 ms
/// frame at a time encoded for the wire.
#[derive(Debug)]
pub(crate) struct OutboundAudio {
    format: AudioFormat,
    /// TTS rate → carrier rate; rebuilt only if a TTS stream declares another rate.
    from_tts: Option<StreamResampler>,
    tts_pending: Vec<i16>,
    resampled: Vec<i16>,
    /// The frame being sent, at carrier rate.
    pub(crate) frame: Vec<i16>,
    wire: Vec<u8>,
    to_recording: Option<StreamResampler>,
    record_frame: Vec<i16>,
}

impl OutboundAudio {
    /// Audio plumbing for a stream in `format`.
    pub(crate) fn new(format: AudioFormat) -> Result<Self, MediaError> {
        let rate = format.sample_rate;
        Ok(Self {
            format,
            from_tts: None,
            tts_pending: Vec::new(),
            resampled: vec![0; frame_len(rate)],
            frame: vec![0; frame_len(rate)],
            wire: Vec::with_capacity(format.bytes_for_ms(20)),
            to_recording: (rate != RECORDING_SAMPLE_RATE)
                .then(|| StreamResampler::new(rate, RECORDING_SAMPLE_RATE))
                .transpose()?,
            record_frame: vec![0; RECORD_FRAME],
        })
    }

    /// The carrier's sample rate.
    pub(crate) fn rate(&self) -> u32 {
        self.format.sample_rate
    }

    /// Appends TTS audio at `rate` to `dest` at carrier rate.
    pub(crate) fn ingest(
        &mut self,
        samples: &[i16],
        rate: u32,
        dest: &mut VecDeque<i16>,
    ) -> Result<(), MediaError> {
        if rate == self.format.sample_rate {
            dest.extend(samples.iter().copied());
            return Ok(());
        }
        if self.from_tts.as_ref().map(StreamResampler::input_rate) != Some(rate) {
            self.from_tts = Some(StreamResampler::new(rate, self.format.sample_rate)?);
            self.tts_pending.clear();
        }
        let Some(resampler) = self.from_tts.as_mut() else {
            return Ok(());
        };
        self.tts_pending.extend_from_slice(samples);
        let need = resampler.input_frames();
        while self.tts_pending.len() >= need {
            let produced = resampler.process(&self.tts_pending[..need], &mut self.resampled)?;
            dest.extend(self.resampled[..produced].iter().copied());
            self.tts_pending.drain(..need);
        }
        Ok(())
    }

    /// Pushes out audio still inside the TTS resampler at the end of a synthesis.
    pub(crate) fn flush(&mut self, dest: &mut VecDeque<i16>) -> Result<(), MediaError> {
        if let Some(resampler) = self.from_tts.as_mut()
            && !self.tts_pending.is_empty()
        {
            let produced = resampler.process(&self.tts_pending, &mut self.resampled)?;
            dest.extend(self.resampled[..produced].iter().copied());
            self.tts_pending.clear();
        }
        Ok(())
    }

    /// Forgets buffered TTS audio (barge-in).
    pub(crate) fn reset(&mut self) {
        self.tts_pending.clear();
        if let Some(resampler) = self.from_tts.as_mut() {
            resampler.reset();
        }
    }

    /// Encodes [`frame`](Self::frame) for the wire.
    pub(crate) fn encode_frame(&mut self) -> &[u8] {
        encode_wire(self.format, &self.frame, &mut self.wire);
        &self.wire
    }

    /// [`frame`](Self::frame) at the recording rate.
    pub(crate) fn recording_frame(&mut self) -> Result<&[i16], MediaError> {
        match &mut self.to_recording {
            None => Ok(&self.frame),
            Some(resampler) => {
                resampler.process(&self.frame, &mut self.record_frame)?;
                Ok(&self.record_frame)
            }
        }
    }
}

/// Where a finished recording is and how long it lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingInfo {
    /// The WAV file.
    pub path: PathBuf,
    /// The same recording in Ogg Opus beside it (`.ogg`), when built with the
    /// `opus` feature and the encoder could run.
    pub ogg_path: Option<PathBuf>,
    /// Its length.
    pub duration: Duration,
}

/// The Ogg Opus copy written beside the WAV, fed the same stereo frames.
#[cfg(feature = "opus")]
#[derive(Debug)]
struct OggCopy {
    path: PathBuf,
    writer: voxline_media::opus::OggOpusRecorder<BufWriter<File>>,
}

#[cfg(feature = "opus")]
impl OggCopy {
    /// Starts `{wav path}.ogg`; `None` (the WAV alone) when it cannot be created.
    fn create(wav: &std::path::Path) -> Option<Self> {
        let path = wav.with_extension("ogg");
        let started = File::create(&path)
            .map_err(MediaError::from)
            .and_then(|file| {
                // Each file's own stream serial, as Ogg asks; any value is valid.
                voxline_media::opus::OggOpusRecorder::new(
                    BufWriter::with_capacity(16 * 1024, file),
                    rand::random(),
                )
            });
        match started {
            Ok(writer) => Some(Self { path, writer }),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "the Ogg Opus recording is not written");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn finish(self) -> Result<PathBuf, MediaError> {
        let mut file = self.writer.finish()?;
        std::io::Write::flush(&mut file)?;
        Ok(self.path)
    }
}

/// The call recording: caller left, agent right, written on the call's clock.
#[derive(Debug)]
pub(crate) struct Recorder {
    path: PathBuf,
    writer: WavWriter<BufWriter<File>>,
    #[cfg(feature = "opus")]
    ogg: Option<OggCopy>,
    caller: VecDeque<i16>,
    agent: VecDeque<i16>,
    left: [i16; RECORD_FRAME],
    right: [i16; RECORD_FRAME],
    /// 20 ms frames written by the clock so far.
    ticks: u64,
}

impl Recorder {
    /// Creates the file (and its directory) and writes the header.
    pub(crate) fn create(path: PathBuf) -> Result<Self, MediaError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = BufWriter::with_capacity(RECORD_WRITE_BUFFER, File::create(&path)?);
        Ok(Self {
            #[cfg(feature = "opus")]
            ogg: OggCopy::create(&path),
            path,
            writer: WavWriter::new(file)?,
            caller: VecDeque::with_capacity(RECORD_QUEUE_START),
            agent: VecDeque::with_capacity(RECORD_QUEUE_START),
            left: [0; RECORD_FRAME],
            right: [0; RECORD_FRAME],
            ticks: 0,
        })
    }

    /// Queues caller audio at 8 kHz.
    pub(crate) fn caller(&mut self, samples: &[i16]) {
        push_bounded(&mut self.caller, samples);
    }

    /// Queues agent audio at 8 kHz.
    pub(crate) fn agent(&mut self, samples: &[i16]) {
        push_bounded(&mut self.agent, samples);
    }

    /// Forgets agent audio sent ahead of playback but not yet due (the carrier's buffer was
    /// cleared, so it was never heard).
    pub(crate) fn drop_agent_backlog(&mut self) {
        self.agent.clear();
    }

    /// Writes the 20 ms stereo frames due `elapsed` into the call, silence where a side has
    /// nothing queued; following the clock rather than counting ticks keeps the file as long
    /// as the call even when the loop's timer is reset or falls behind.
    pub(crate) fn write_until(&mut self, elapsed: Duration) -> Result<(), MediaError> {
        let due = elapsed.as_millis() as u64 / 20;
        while self.ticks < due {
            fill_from(&mut self.caller, &mut self.left);
            fill_from(&mut self.agent, &mut self.right);
            self.writer.write_frames(&self.left, &self.right)?;
            self.write_ogg(RECORD_FRAME);
            self.ticks += 1;
        }
        Ok(())
    }

    /// Feeds the first `frames` of `left`/`right` to the Ogg copy; an encoder failure
    /// stops the copy (and removes its file), never the WAV.
    #[cfg(feature = "opus")]
    fn write_ogg(&mut self, frames: usize) {
        if let Some(ogg) = &mut self.ogg
            && let Err(error) = ogg
                .writer
                .write_frames(&self.left[..frames], &self.right[..frames])
        {
            tracing::warn!(%error, "the Ogg Opus recording failed; keeping the WAV only");
            if let Some(ogg) = self.ogg.take() {
                let _ = std::fs::remove_file(&ogg.path);
            }
        }
    }

    #[cfg(not(feature = "opus"))]
    fn write_ogg(&mut self, _frames: usize) {}

    /// Writes what is still queued, patches the header and closes the file.
    pub(crate) fn finish(mut self) -> Result<RecordingInfo, MediaError> {
        while !self.caller.is_empty() || !self.agent.is_empty() {
            let frames = self.caller.len().max(self.agent.len()).min(RECORD_FRAME);
            fill_from(&mut self.caller, &mut self.left[..frames]);
            fill_from(&mut self.agent, &mut self.right[..frames]);
            self.writer
                .write_frames(&self.left[..frames], &self.right[..frames])?;
            self.write_ogg(frames);
        }
        let duration = self.writer.duration();
        let mut file = self.writer.finalize()?;
        std::io::Write::flush(&mut file)?;
        #[cfg(feature = "opus")]
        let ogg_path = self.ogg.and_then(|ogg| {
            let path = ogg.path.clone();
            ogg.finish()
                .map_err(|error| {
                    tracing::warn!(%error, "the Ogg Opus recording could not be finished");
                    let _ = std::fs::remove_file(&path);
                })
                .ok()
        });
        #[cfg(not(feature = "opus"))]
        let ogg_path = None;
        Ok(RecordingInfo {
            path: self.path,
            ogg_path,
            duration,
        })
    }
}

/// Appends to a recording queue, dropping the oldest audio beyond the backlog bound.
fn push_bounded(queue: &mut VecDeque<i16>, samples: &[i16]) {
    queue.extend(samples.iter().copied());
    if queue.len() > RECORD_BACKLOG {
        let excess = queue.len() - RECORD_BACKLOG;
        queue.drain(..excess);
    }
}

/// Moves queued samples into `out`, padding with silence.
fn fill_from(queue: &mut VecDeque<i16>, out: &mut [i16]) {
    let take = queue.len().min(out.len());
    for (slot, sample) in out.iter_mut().zip(queue.drain(..take)) {
        *slot = sample;
    }
    out[take..].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use voxline_media::wav::WavInfo;

    #[test]
    fn inbound_frames_wideband_audio_for_analysis_and_recording() {
        let mut inbound = InboundAudio::new(AudioFormat::PCM16_16K).unwrap();
        assert_eq!(inbound.analysis_rate(), 16_000);
        // 30 ms of audio: one frame now, the rest waits.
        inbound.push_wire(&[0u8; 960]);
        assert_eq!(inbound.next_frame().unwrap().map(<[i16]>::len), Some(320));
        assert_eq!(inbound.recording_frame().unwrap().len(), 160);
        assert!(inbound.next_frame().unwrap().is_none());
    }

    #[test]
    fn outbound_resamples_tts_audio_to_the_carrier_rate() {
        let mut outbound = OutboundAudio::new(AudioFormat::MULAW_8K).unwrap();
        let mut queue = VecDeque::new();
        outbound.ingest(&[0; 480], 24_000, &mut queue).unwrap();
        assert_eq!(queue.len(), 160);
        outbound.ingest(&[0; 100], 24_000, &mut queue).unwrap();
        outbound.flush(&mut queue).unwrap();
        assert_eq!(queue.len(), 320);
        outbound.frame.fill(0);
        assert_eq!(outbound.encode_frame(), &[0xff; 160][..]);
    }

    #[test]
    fn recorder_writes_one_frame_per_tick_and_flushes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls/rec.wav");
        let mut recorder = Recorder::create(path.clone()).unwrap();
        recorder.caller(&[1; 200]);
        recorder.agent(&[2; 100]);
        recorder.write_until(Duration::from_millis(45)).unwrap();
        recorder.caller(&[1; 50]);
        let info = recorder.finish().unwrap();
        assert_eq!(info.duration, Duration::from_micros(46_250));
        let wav = WavInfo::read(File::open(path).unwrap()).unwrap();
        assert_eq!(wav.duration(), info.duration);
        #[cfg(not(feature = "opus"))]
        assert_eq!(info.ogg_path, None);
    }

    #[cfg(feature = "opus")]
    #[test]
    fn with_opus_the_same_frames_go_to_an_ogg_beside_the_wav() {
        use voxline_media::ogg::parse_ogg_pages;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.wav");
        let mut recorder = Recorder::create(path.clone()).unwrap();
        recorder.caller(&[1_000; 1_600]);
        recorder.agent(&[-1_000; 800]);
        recorder.write_until(Duration::from_millis(200)).unwrap();
        recorder.caller(&[500; 80]);
        let info = recorder.finish().unwrap();
        let ogg = info.ogg_path.expect("an ogg copy");
        assert_eq!(ogg, dir.path().join("rec.ogg"));
        let pages = parse_ogg_pages(&std::fs::read(ogg).unwrap()).unwrap();
        assert!(pages.iter().all(|p| p.crc_ok));
        assert_eq!(pages[0].packets[0][9], 2, "stereo");
        // 10 whole frames and the 10 ms tail padded to one more, at 48 kHz.
        assert_eq!(pages.last().map(|p| p.granule), Some(11 * 960));
    }
}

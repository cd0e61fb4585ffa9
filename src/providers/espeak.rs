//! Local speech from the espeak-ng program, run as a child process per
//! sentence (`espeak-ng --stdout --stdin -v VOICE`): no account, no network.
//!
//! espeak-ng writes a WAV stream at 22 050 Hz. The samples are lifted to
//! 24 kHz by linear interpolation (a small upsampling step, which cannot
//! alias), then brought to the loop's rate by the media crate's FFT resampler,
//! which does the band-limited part of the work. The program is found at
//! runtime; agents asking for `espeak` on a machine without it fail with
//! `tts-error` and a log line saying so.

use super::Pcm16Assembler;
use async_trait::async_trait;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdout, Command};
use voxline_actors::providers::{ProviderError, ProviderKind, TtsProvider, TtsStream};
use voxline_media::resample::{SUPPORTED_RATES, StreamResampler};
use voxline_media::wav::WavInfo;

/// The rate the linear step produces, and the media resampler's input.
const BRIDGE_RATE: u32 = 24_000;

/// espeak-ng, found on this machine.
#[derive(Debug, Clone)]
pub struct EspeakTts {
    program: String,
    default_voice: String,
    read_timeout: Duration,
}

fn tts_error(message: impl Into<String>) -> ProviderError {
    ProviderError::Request {
        provider: ProviderKind::Tts,
        message: message.into(),
    }
}

/// Whether `program` runs (`--version` succeeds).
pub async fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// A voice name safe to pass as an argument: letters, digits, `-`, `_`, `+`, `/`,
/// not starting with `-`.
fn plausible_voice(voice: &str) -> bool {
    !voice.is_empty()
        && !voice.starts_with('-')
        && voice.len() <= 40
        && voice
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '/'))
}

impl EspeakTts {
    /// espeak-ng at `program`, speaking `language` (a BCP 47 tag) unless the
    /// agent names an espeak voice.
    pub fn new(program: &str, language: &str, read_timeout: Duration) -> Self {
        let language = language.to_ascii_lowercase();
        Self {
            program: program.to_string(),
            default_voice: if plausible_voice(&language) {
                language
            } else {
                "en".into()
            },
            read_timeout,
        }
    }

    /// The espeak voice for an agent voice: the agent's own when it is an
    /// espeak voice of the agent's language (`en-us`, `en+f3`), else the language.
    fn voice_for(&self, voice: &str) -> String {
        let primary = self.default_voice.split('-').next().unwrap_or("en");
        if plausible_voice(voice) && voice.to_ascii_lowercase().starts_with(primary) {
            voice.to_ascii_lowercase()
        } else {
            self.default_voice.clone()
        }
    }
}

#[async_trait]
impl TtsProvider for EspeakTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        let mut child = Command::new(&self.program)
            .args(["--stdout", "--stdin", "-v"])
            .arg(self.voice_for(voice))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| tts_error(format!("cannot run {}: {e}", self.program)))?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| tts_error("espeak-ng stdin unavailable"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| tts_error("espeak-ng stdout unavailable"))?;
        // One line: a newline inside would make espeak pause as at a paragraph.
        let line = format!("{}\n", text.replace(['\n', '\r'], " "));
        stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| tts_error(format!("writing to espeak-ng: {e}")))?;
        drop(stdin);
        let output_rate = if SUPPORTED_RATES.contains(&sample_rate) {
            sample_rate
        } else {
            BRIDGE_RATE
        };
        let resampler = StreamResampler::new(BRIDGE_RATE, output_rate)
            .map_err(|e| tts_error(format!("resampler: {e}")))?;
        Ok(Box::new(EspeakStream {
            _child: child,
            stdout,
            read_timeout: self.read_timeout,
            header: Vec::new(),
            input_rate: None,
            pcm: Pcm16Assembler::default(),
            bridge: LinearBridge::default(),
            bridged: Vec::new(),
            resampler,
            output_rate,
            ended: false,
        }))
    }
}

/// Streaming linear interpolation from any rate to [`BRIDGE_RATE`].
#[derive(Debug, Default)]
struct LinearBridge {
    last: Option<i16>,
    /// Position of the next output sample after `last`, in input samples.
    t: f64,
}

impl LinearBridge {
    fn push(&mut self, input_rate: u32, input: &[i16], out: &mut Vec<i16>) {
        let step = f64::from(input_rate) / f64::from(BRIDGE_RATE);
        for &current in input {
            let Some(last) = self.last else {
                self.last = Some(current);
                out.push(current);
                self.t = step;
                continue;
            };
            while self.t <= 1.0 {
                let value = f64::from(last) + (f64::from(current) - f64::from(last)) * self.t;
                out.push(value.round().clamp(-32768.0, 32767.0) as i16);
                self.t += step;
            }
            self.t -= 1.0;
            self.last = Some(current);
        }
    }
}

/// One sentence being spoken by espeak-ng.
struct EspeakStream {
    /// Killed on drop, which stops synthesis on barge-in.
    _child: Child,
    stdout: ChildStdout,
    read_timeout: Duration,
    header: Vec<u8>,
    input_rate: Option<u32>,
    pcm: Pcm16Assembler,
    bridge: LinearBridge,
    /// 24 kHz samples not yet a whole resampler chunk.
    bridged: Vec<i16>,
    resampler: StreamResampler,
    output_rate: u32,
    ended: bool,
}

impl EspeakStream {
    /// Consumes the WAV header from `header`; returns the PCM after it once complete.
    fn take_header(&mut self) -> Result<Option<Vec<u8>>, ProviderError> {
        let not_wav = || tts_error("espeak-ng output is not a WAV stream");
        let info = match WavInfo::from_prefix(&self.header) {
            Ok(Some(info)) => info,
            Ok(None) if self.header.len() > 4096 => return Err(not_wav()),
            Ok(None) => return Ok(None),
            Err(_) => return Err(not_wav()),
        };
        if info.sample_rate == 0 {
            return Err(tts_error("espeak-ng reported a zero sample rate"));
        }
        self.input_rate = Some(info.sample_rate);
        let data_at = usize::try_from(info.data_offset).map_err(|_| not_wav())?;
        Ok(Some(self.header.split_off(data_at)))
    }

    /// Resamples whole chunks of `bridged` (all of it when `flush`).
    fn drain_chunks(&mut self, flush: bool) -> Result<Vec<i16>, ProviderError> {
        let chunk = self.resampler.input_frames();
        let mut out = Vec::new();
        let mut buffer = vec![0i16; self.resampler.output_frames()];
        while self.bridged.len() >= chunk || (flush && !self.bridged.is_empty()) {
            let take = chunk.min(self.bridged.len());
            let written = self
                .resampler
                .process(&self.bridged[..take], &mut buffer)
                .map_err(|e| tts_error(format!("resampling espeak-ng audio: {e}")))?;
            // A short last chunk is padded with silence; keep only its share.
            let keep = if take < chunk {
                written * take / chunk
            } else {
                written
            };
            out.extend_from_slice(&buffer[..keep]);
            self.bridged.drain(..take);
        }
        Ok(out)
    }
}

#[async_trait]
impl TtsStream for EspeakStream {
    fn sample_rate(&self) -> u32 {
        self.output_rate
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>> {
        let mut buffer = [0u8; 8192];
        loop {
            if self.ended {
                return None;
            }
            let read = match tokio::time::timeout(self.read_timeout, self.stdout.read(&mut buffer))
                .await
            {
                Err(_) => {
                    self.ended = true;
                    return Some(Err(ProviderError::Timeout {
                        provider: ProviderKind::Tts,
                        after: self.read_timeout,
                    }));
                }
                Ok(Err(e)) => {
                    self.ended = true;
                    return Some(Err(tts_error(format!("reading espeak-ng: {e}"))));
                }
                Ok(Ok(n)) => n,
            };
            if read == 0 {
                self.ended = true;
                if self.input_rate.is_none() {
                    return Some(Err(tts_error("espeak-ng produced no audio")));
                }
                return match self.drain_chunks(true) {
                    Ok(tail) if tail.is_empty() => None,
                    Ok(tail) => Some(Ok(tail)),
                    Err(err) => Some(Err(err)),
                };
            }
            let pcm_bytes = match self.input_rate {
                Some(_) => buffer[..read].to_vec(),
                None => {
                    self.header.extend_from_slice(&buffer[..read]);
                    match self.take_header() {
                        Ok(Some(rest)) => rest,
                        Ok(None) => continue,
                        Err(err) => {
                            self.ended = true;
                            return Some(Err(err));
                        }
                    }
                }
            };
            let Some(rate) = self.input_rate else {
                continue;
            };
            let samples = self.pcm.push(&pcm_bytes);
            let mut bridged = std::mem::take(&mut self.bridged);
            self.bridge.push(rate, &samples, &mut bridged);
            self.bridged = bridged;
            match self.drain_chunks(false) {
                Ok(out) if out.is_empty() => continue,
                Ok(out) => return Some(Ok(out)),
                Err(err) => {
                    self.ended = true;
                    return Some(Err(err));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_bridge_keeps_duration() {
        let mut bridge = LinearBridge::default();
        let mut out = Vec::new();
        let input: Vec<i16> = (0..22_050).map(|i| (i % 100) as i16).collect();
        for chunk in input.chunks(1000) {
            bridge.push(22_050, chunk, &mut out);
        }
        assert!((23_990..=24_001).contains(&out.len()), "{}", out.len());
    }

    #[test]
    fn voices_fall_back_to_the_language() {
        let tts = EspeakTts::new("espeak-ng", "en-IN", Duration::from_secs(1));
        assert_eq!(tts.voice_for("sim-default"), "en-in");
        assert_eq!(tts.voice_for("en-us+f3"), "en-us+f3");
        assert_eq!(tts.voice_for("--evil"), "en-in");
    }
}

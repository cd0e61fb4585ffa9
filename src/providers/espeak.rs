//! Local speech from the espeak-ng program, run as a child process per
//! sentence (`espeak-ng --stdout --stdin -v VOICE`): no account, no network.
//!
//! espeak-ng writes a WAV stream at 22 050 Hz. Its header is read before the
//! stream is handed over, so the stream says its rate from the start, and the
//! samples go out at that rate: the call loop's one resampler per stream (or
//! the speaking sim callee's) brings them to the carrier's. The program is
//! found at runtime; agents asking for `espeak` on a machine without it fail
//! with `tts-error` and a log line saying so.

use super::{Pcm16Assembler, tts_wav_header};
use async_trait::async_trait;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdout, Command};
use voxline_actors::providers::{ProviderError, ProviderKind, TtsProvider, TtsStream};

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
        _sample_rate: u32,
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
        let mut stream = EspeakStream {
            _child: child,
            stdout,
            read_timeout: self.read_timeout,
            rate: 0,
            first: None,
            pcm: Pcm16Assembler::default(),
            ended: false,
        };
        stream.read_header().await?;
        Ok(Box::new(stream))
    }
}

/// One sentence being spoken by espeak-ng.
struct EspeakStream {
    /// Killed on drop, which stops synthesis on barge-in.
    _child: Child,
    stdout: ChildStdout,
    read_timeout: Duration,
    /// The WAV header's rate.
    rate: u32,
    /// Samples that came with the header.
    first: Option<Vec<i16>>,
    pcm: Pcm16Assembler,
    ended: bool,
}

impl EspeakStream {
    /// Reads up to `buffer.len()` bytes of espeak's output; 0 at its end.
    async fn read(&mut self, buffer: &mut [u8]) -> Result<usize, ProviderError> {
        match tokio::time::timeout(self.read_timeout, self.stdout.read(buffer)).await {
            Err(_) => Err(ProviderError::Timeout {
                provider: ProviderKind::Tts,
                after: self.read_timeout,
            }),
            Ok(Err(e)) => Err(tts_error(format!("reading espeak-ng: {e}"))),
            Ok(Ok(n)) => Ok(n),
        }
    }

    /// Reads the WAV header: the rate, and the samples that came with it.
    async fn read_header(&mut self) -> Result<(), ProviderError> {
        let mut header = Vec::new();
        let mut buffer = [0u8; 1024];
        let (rate, start) = loop {
            let read = self.read(&mut buffer).await?;
            if read == 0 {
                return Err(tts_error("espeak-ng produced no audio"));
            }
            header.extend_from_slice(&buffer[..read]);
            if let Some(found) = tts_wav_header("espeak-ng", &header)? {
                break found;
            }
        };
        self.rate = rate;
        let first = self.pcm.push(header.get(start..).unwrap_or_default());
        self.first = (!first.is_empty()).then_some(first);
        Ok(())
    }
}

#[async_trait]
impl TtsStream for EspeakStream {
    fn sample_rate(&self) -> u32 {
        self.rate
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>> {
        if let Some(first) = self.first.take() {
            return Some(Ok(first));
        }
        let mut buffer = [0u8; 8192];
        while !self.ended {
            match self.read(&mut buffer).await {
                Ok(0) => self.ended = true,
                Ok(read) => {
                    let samples = self.pcm.push(&buffer[..read]);
                    if !samples.is_empty() {
                        return Some(Ok(samples));
                    }
                }
                Err(err) => {
                    self.ended = true;
                    return Some(Err(err));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voices_fall_back_to_the_language() {
        let tts = EspeakTts::new("espeak-ng", "en-IN", Duration::from_secs(1));
        assert_eq!(tts.voice_for("sim-default"), "en-in");
        assert_eq!(tts.voice_for("en-us+f3"), "en-us+f3");
        assert_eq!(tts.voice_for("--evil"), "en-in");
    }
}

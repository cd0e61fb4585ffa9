//! A real voice for the sim callee: each line synthesized ahead of its turn (Piper,
//! espeak-ng in the binary), resampled once to 8 kHz, sentences joined by a breath, so an
//! agent on a real ASR has to hear it; and how long a speaking callee waits for a real model.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use voxline_media::resample::StreamResampler;
use voxline_media::synth::samples_for_duration;

use super::{FRAME_SAMPLES, RATE};
use crate::providers::TtsProvider;
use crate::sim::lines::line_parts;

/// A real voice for the callee's lines.
#[derive(Clone)]
pub struct CalleeVoice {
    /// The synthesizer (Piper or espeak-ng in the binary).
    pub tts: Arc<dyn TtsProvider>,
    /// Its voice name; blank for its default.
    pub voice: String,
    /// Silence between two sentences of one line: a breath, shorter than the engine's
    /// end-of-turn silence so a line stays one utterance.
    pub sentence_pause: Duration,
}

impl std::fmt::Debug for CalleeVoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CalleeVoice")
            .field("voice", &self.voice)
            .field("sentence_pause", &self.sentence_pause)
            .finish_non_exhaustive()
    }
}

/// A line's sentences: split after `.`, `!` and `?` followed by a space.
pub fn sentences(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1).is_some_and(u8::is_ascii_whitespace)
        {
            out.push(line[start..=i].trim());
            start = i + 1;
        }
    }
    out.push(line[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

impl CalleeVoice {
    /// `line` spoken at 8 kHz: each sentence synthesized, resampled with one resampler
    /// for the line, and joined by the sentence pause; the line's `[pause N]` marks are
    /// silences of their length.
    pub async fn speak(&self, line: &str) -> Result<Vec<i16>, String> {
        let mut pcm = Vec::new();
        for part in line_parts(line) {
            self.speak_part(&part.text, &mut pcm).await?;
            pcm.resize(pcm.len() + samples_for_duration(RATE, part.pause_after), 0);
        }
        if pcm.iter().all(|&s| s == 0) {
            return Err(format!("the voice said nothing for {line:?}"));
        }
        Ok(pcm)
    }

    /// Appends `line` (no pause marks) spoken at 8 kHz to `pcm`.
    async fn speak_part(&self, line: &str, pcm: &mut Vec<i16>) -> Result<(), String> {
        let pause = samples_for_duration(RATE, self.sentence_pause);
        for (index, sentence) in sentences(line).into_iter().enumerate() {
            if index > 0 {
                pcm.resize(pcm.len() + pause, 0);
            }
            let mut stream = self
                .tts
                .synthesize(sentence, &self.voice, RATE)
                .await
                .map_err(|e| format!("synthesizing {sentence:?}: {e}"))?;
            let rate = stream.sample_rate();
            let mut resampler = (rate != RATE)
                .then(|| StreamResampler::new(rate, RATE))
                .transpose()
                .map_err(|e| format!("resampling {rate} Hz speech: {e}"))?;
            let mut pending: Vec<i16> = Vec::new();
            let mut out = [0i16; FRAME_SAMPLES];
            while let Some(chunk) = stream.next_chunk().await {
                let chunk = chunk.map_err(|e| format!("synthesizing {sentence:?}: {e}"))?;
                let Some(resampler) = resampler.as_mut() else {
                    pcm.extend_from_slice(&chunk);
                    continue;
                };
                pending.extend_from_slice(&chunk);
                let need = resampler.input_frames();
                while pending.len() >= need {
                    let n = resampler
                        .process(&pending[..need], &mut out)
                        .map_err(|e| e.to_string())?;
                    pcm.extend_from_slice(&out[..n]);
                    pending.drain(..need);
                }
            }
            if let Some(resampler) = resampler.as_mut() {
                if !pending.is_empty() {
                    let n = resampler
                        .process(&pending, &mut out)
                        .map_err(|e| e.to_string())?;
                    pcm.extend_from_slice(&out[..n]);
                }
                // The resampler's delay: a last chunk of silence brings out the tail.
                let n = resampler
                    .process(&[], &mut out)
                    .map_err(|e| e.to_string())?;
                pcm.extend_from_slice(&out[..n]);
            }
        }
        Ok(())
    }
}

/// How long a speaking callee waits for the agent's answer before it speaks anyway: a real
/// model on a small machine may think for seconds, and a person on the phone waits.
pub const SPEAKING_AGENT_WAIT: Duration = Duration::from_secs(20);

/// The agent's quiet after which a speaking callee takes its turn: a real model's reply can
/// pause between sentences while the next is generated and synthesized, and a person hears
/// from its tone that it is not done.
pub const SPEAKING_TURN_GAP: Duration = Duration::from_millis(1500);

/// The script's lines synthesized ahead of their turns, in order, by a task of their own so
/// the frame clock never waits on a synthesizer.
pub(super) struct SpokenLines {
    ready: mpsc::UnboundedReceiver<Result<Vec<i16>, String>>,
    pub(super) next: Option<Vec<i16>>,
    task: JoinHandle<()>,
}

impl SpokenLines {
    pub(super) fn start(voice: CalleeVoice, lines: Vec<String>) -> Self {
        let (tx, ready) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            for line in lines {
                let spoken = voice.speak(&line).await;
                let failed = spoken.is_err();
                if tx.send(spoken).is_err() || failed {
                    return;
                }
            }
        });
        Self {
            ready,
            next: None,
            task,
        }
    }

    /// The next line's audio if it is ready; `Err` when it cannot be.
    pub(super) fn poll(&mut self) -> Result<bool, String> {
        if self.next.is_some() {
            return Ok(true);
        }
        match self.ready.try_recv() {
            Ok(Ok(pcm)) => {
                self.next = Some(pcm);
                Ok(true)
            }
            Ok(Err(error)) => Err(error),
            Err(mpsc::error::TryRecvError::Empty) => Ok(false),
            Err(mpsc::error::TryRecvError::Disconnected) => {
                Err("the callee's voice stopped before its lines were spoken".to_owned())
            }
        }
    }
}

impl Drop for SpokenLines {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthesizer answering each sentence with a 440 Hz tone at 22.05 kHz, 0.5 s long,
    /// in chunks that do not line up with the resampler's.
    struct ToneVoice;

    struct ToneStream {
        left: usize,
        tone: voxline_media::synth::ToneGenerator,
    }

    #[async_trait::async_trait]
    impl crate::providers::TtsStream for ToneStream {
        fn sample_rate(&self) -> u32 {
            22_050
        }

        async fn next_chunk(
            &mut self,
        ) -> Option<Result<Vec<i16>, crate::providers::ProviderError>> {
            if self.left == 0 {
                return None;
            }
            let mut chunk = vec![0; self.left.min(1_000)];
            self.tone.fill(&mut chunk);
            self.left -= chunk.len();
            Some(Ok(chunk))
        }
    }

    #[async_trait::async_trait]
    impl TtsProvider for ToneVoice {
        async fn synthesize(
            &self,
            _text: &str,
            _voice: &str,
            _sample_rate: u32,
        ) -> Result<Box<dyn crate::providers::TtsStream>, crate::providers::ProviderError> {
            Ok(Box::new(ToneStream {
                left: 11_025,
                tone: voxline_media::synth::ToneGenerator::new(22_050, 440.0, -6.0),
            }))
        }
    }

    #[test]
    fn lines_split_into_sentences() {
        assert_eq!(
            sentences("My name is Asha. I am 34! Is that all?"),
            ["My name is Asha.", "I am 34!", "Is that all?"]
        );
        assert_eq!(sentences("It costs 4.50 rupees"), ["It costs 4.50 rupees"]);
        assert!(sentences("  ").is_empty());
    }

    #[tokio::test]
    async fn a_voice_speaks_each_sentence_at_8k_with_a_pause_between() {
        let voice = CalleeVoice {
            tts: Arc::new(ToneVoice),
            voice: String::new(),
            sentence_pause: Duration::from_millis(300),
        };
        let pcm = voice.speak("First sentence. Second one.").await.unwrap();
        // Two 0.5 s sentences and a 0.3 s pause, at 8 kHz, give or take the resampler's tail.
        let seconds = pcm.len() as f64 / 8_000.0;
        assert!((1.3..1.36).contains(&seconds), "{seconds} s");
        let rms = |s: &[i16]| {
            (s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / s.len() as f64).sqrt()
        };
        // Speech, the pause, speech.
        assert!(rms(&pcm[800..3_600]) > 5_000.0);
        assert!(rms(&pcm[4_400..6_200]) < 50.0);
        assert!(rms(&pcm[7_000..9_800]) > 5_000.0);

        // A pause mark is silence of its length between the parts.
        let pcm = voice.speak("First. [pause 700] Second.").await.unwrap();
        let seconds = pcm.len() as f64 / 8_000.0;
        assert!((1.7..1.76).contains(&seconds), "{seconds} s");
        assert!(rms(&pcm[4_400..9_200]) < 50.0);
    }
}

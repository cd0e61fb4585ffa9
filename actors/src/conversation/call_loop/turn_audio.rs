//! The caller's audio for the end-of-turn model: the current utterance's last 8 s, kept in a
//! ring buffer made once per call, and the model's pending verdict as a branch of the loop's
//! `select!`.
//!
//! Only a call in smart mode with a model keeps it. Nothing is allocated per frame: the
//! ring, the resampler (call rate → 16 kHz, made once per call) and the 16 kHz snapshot
//! buffer are sized at the start.

use std::sync::Arc;

use tokio::sync::oneshot;
use voxline_media::MediaError;
use voxline_media::resample::StreamResampler;
use voxline_media::turn_taking::{AskId, ModelVerdict};

use crate::providers::{EndOfTurnModel, EndOfTurnVerdict};

/// The rate the end-of-turn model listens at.
const MODEL_RATE: u32 = 16_000;
/// The most audio one evaluation gets, in seconds.
const MODEL_WINDOW_SECONDS: usize = 8;
/// Audio kept from before the utterance's onset was declared (the onset itself, and a
/// breath before it), in ms.
const PRE_ROLL_MS: usize = 300;

/// The model and the audio it is asked about.
pub(super) struct TurnAudio {
    model: Arc<dyn EndOfTurnModel>,
    rate: u32,
    /// The latest caller audio at the call's analysis rate, circular.
    ring: Vec<i16>,
    /// Next write position in `ring`.
    write: usize,
    /// Samples written since the current utterance began (with its pre-roll), capped.
    utterance: usize,
    resampler: StreamResampler,
    /// One resampled chunk.
    chunk: Vec<i16>,
    /// The snapshot sent to the model, at 16 kHz.
    snapshot: Vec<f32>,
}

impl TurnAudio {
    /// Buffers for `model` on a call whose caller audio is analysed at `rate`.
    pub(super) fn new(model: Arc<dyn EndOfTurnModel>, rate: u32) -> Result<Self, MediaError> {
        let resampler = StreamResampler::new(rate, MODEL_RATE)?;
        let chunk = vec![0; resampler.output_frames()];
        Ok(Self {
            model,
            rate,
            ring: vec![0; MODEL_WINDOW_SECONDS * rate as usize],
            write: 0,
            utterance: 0,
            resampler,
            chunk,
            snapshot: Vec::with_capacity(
                MODEL_WINDOW_SECONDS * MODEL_RATE as usize + 2 * MODEL_RATE as usize / 50,
            ),
        })
    }

    /// Keeps one frame of caller audio.
    pub(super) fn push(&mut self, frame: &[i16]) {
        for &sample in frame {
            self.ring[self.write] = sample;
            self.write = (self.write + 1) % self.ring.len();
        }
        self.utterance = (self.utterance + frame.len()).min(self.ring.len());
    }

    /// The caller's utterance was declared `onset_ms` after its first speech: it starts
    /// that long (and a breath) ago.
    pub(super) fn utterance_started(&mut self, onset_ms: u32) {
        let samples = (onset_ms as usize + PRE_ROLL_MS) * self.rate as usize / 1000;
        self.utterance = samples.min(self.ring.len());
    }

    /// Asks the model about the current utterance; what to wait for.
    pub(super) fn ask(&mut self, ask: AskId) -> PendingVerdict {
        if self.resample_utterance().is_err() {
            return PendingVerdict::Ready(ask, ModelVerdict::Unavailable);
        }
        match self.model.submit(&self.snapshot) {
            Some(receiver) => PendingVerdict::Waiting(ask, receiver),
            // Saturated: this pause falls back to silence timing.
            None => PendingVerdict::Ready(ask, ModelVerdict::Unavailable),
        }
    }

    /// The utterance so far (oldest first), resampled to 16 kHz into `snapshot`.
    fn resample_utterance(&mut self) -> Result<(), MediaError> {
        self.snapshot.clear();
        self.resampler.reset();
        let len = self.ring.len();
        let start = (self.write + len - self.utterance) % len;
        let (tail, head) = if start + self.utterance <= len {
            (&self.ring[start..start + self.utterance], &self.ring[..0])
        } else {
            (&self.ring[start..], &self.ring[..self.write])
        };
        let step = self.resampler.input_frames();
        // Chunks never straddle the ring's end except once; a short chunk there is padded
        // with silence by the resampler, a click the model does not mind.
        for part in [tail, head] {
            for input in part.chunks(step) {
                let written = self.resampler.process(input, &mut self.chunk)?;
                self.snapshot.extend(
                    self.chunk[..written]
                        .iter()
                        .map(|&s| f32::from(s) / 32768.0),
                );
            }
        }
        let most = MODEL_WINDOW_SECONDS * MODEL_RATE as usize;
        if self.snapshot.len() > most {
            let excess = self.snapshot.len() - most;
            self.snapshot.drain(..excess);
        }
        Ok(())
    }
}

/// The model's answer the loop waits for.
pub(super) enum PendingVerdict {
    /// Asked; the answer comes on the receiver.
    Waiting(AskId, oneshot::Receiver<EndOfTurnVerdict>),
    /// Known at once (the model could not be asked).
    Ready(AskId, ModelVerdict),
}

/// The pending verdict once it is in (a dropped receiver counts as no answer).
pub(super) async fn next_verdict(pending: &mut Option<PendingVerdict>) -> (AskId, ModelVerdict) {
    let outcome = match pending {
        None => return std::future::pending().await,
        Some(PendingVerdict::Ready(ask, verdict)) => (*ask, *verdict),
        Some(PendingVerdict::Waiting(ask, receiver)) => {
            let verdict = match receiver.await {
                Ok(answer) => ModelVerdict::Probability(answer.probability),
                Err(_) => ModelVerdict::Unavailable,
            };
            (*ask, verdict)
        }
    };
    *pending = None;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Keeps the length and level of what it is asked about.
    #[derive(Default)]
    struct Listener(Mutex<Vec<(usize, f32)>>);

    impl EndOfTurnModel for Listener {
        fn submit(&self, audio: &[f32]) -> Option<oneshot::Receiver<EndOfTurnVerdict>> {
            let peak = audio.iter().fold(0f32, |m, s| m.max(s.abs()));
            if let Ok(mut seen) = self.0.lock() {
                seen.push((audio.len(), peak));
            }
            None
        }
    }

    #[test]
    fn the_utterance_goes_to_the_model_at_16k_and_at_most_8_s() {
        let model = Arc::new(Listener::default());
        let mut audio = TurnAudio::new(model.clone(), 8_000).unwrap();
        let frame = [8_000i16; 160];
        // Ten seconds of sound; the utterance began 1 s ago (the onset 100 ms after it).
        for _ in 0..500 {
            audio.push(&frame);
        }
        audio.utterance_started(100);
        for _ in 0..30 {
            audio.push(&frame);
        }
        assert!(matches!(
            audio.ask(AskId(0)),
            PendingVerdict::Ready(_, ModelVerdict::Unavailable)
        ));
        for _ in 0..1_000 {
            audio.push(&frame);
        }
        audio.ask(AskId(1));
        let seen = model.0.lock().unwrap().clone();
        // 0.4 s + 0.6 s at 16 kHz, then the 8 s cap.
        assert_eq!(seen[0].0, 16_000);
        assert_eq!(seen[1].0, 8 * 16_000);
        assert!(seen.iter().all(|(_, peak)| *peak > 0.2 && *peak <= 1.0));
    }
}

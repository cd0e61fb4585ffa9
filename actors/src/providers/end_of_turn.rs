//! The engine's one door to a learned end-of-turn model: a classifier the call loop asks,
//! at a short pause, whether the caller finished, without ever waiting on it in the frame
//! loop.
//!
//! The service implements it (`providers::smart_turn`: Smart Turn v3.2 on a bounded pool of
//! worker threads); the engine sees only this trait, so it knows nothing of ONNX, threads
//! or model files. When no model is installed the engine gets none and times silence.

use std::fmt;
use std::time::Duration;

use tokio::sync::oneshot;

/// The sample rate of the audio a model is given.
pub const END_OF_TURN_SAMPLE_RATE: u32 = 16_000;

/// The most audio a model looks at: its last 8 s.
pub const END_OF_TURN_MAX_SAMPLES: usize = 8 * END_OF_TURN_SAMPLE_RATE as usize;

/// An end-of-turn classifier over the caller's recent audio, run off the frame loop.
pub trait EndOfTurnModel: Send + Sync + 'static {
    /// Asks for a verdict on the last `audio` (16 kHz mono f32, at most 8 s, oldest first;
    /// anything older is ignored).
    /// Returns `None` at once when the evaluation pool is saturated: the caller then falls
    /// back to silence timing. The receiver's sender is dropped without a verdict if the
    /// evaluation fails; that too means silence timing.
    fn submit(&self, audio: &[f32]) -> Option<oneshot::Receiver<EndOfTurnVerdict>>;
}

impl fmt::Debug for dyn EndOfTurnModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EndOfTurnModel")
    }
}

/// What the model said.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndOfTurnVerdict {
    /// How sure the model is that the turn is over, 0 to 1 (Smart Turn calls above 0.5
    /// complete).
    pub probability: f32,
    /// The CPU time this evaluation cost (its share of a batch).
    pub cpu: Duration,
}

impl EndOfTurnVerdict {
    /// Whether the model calls the turn complete at `threshold`.
    pub fn is_complete(&self, threshold: f32) -> bool {
        self.probability > threshold
    }
}

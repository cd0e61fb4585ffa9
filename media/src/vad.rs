//! Voice activity detection per 20 ms frame at 8 or 16 kHz.
//!
//! Two detectors vote:
//! - the `earshot` neural VAD (16 kHz, 16 ms frames; 8 kHz input is upsampled
//!   two-fold into a scratch buffer), which knows what real voices look like;
//! - a periodicity detector: frame level above an adaptive noise floor plus a
//!   pitch-range autocorrelation peak, which recognises any voiced sound,
//!   including the synthetic speech the simulated providers generate (a
//!   neural VAD trained on real speech may reject that).
//!
//! A frame is speech if either says so and the frame is louder than an
//! absolute floor. Both reject white noise and silence. The neural model only
//! runs on frames loud enough to possibly be speech that the periodicity
//! detector did not already call voiced, which keeps silence (most of a call's
//! inbound audio) and voiced speech cheap.

use crate::error::MediaError;

/// Samples per earshot prediction (16 ms at 16 kHz).
const NEURAL_FRAME: usize = 256;
/// Rate periodicity is analysed at; pitch (80–400 Hz) is well below its Nyquist.
const PITCH_RATE: u32 = 4000;
/// Shortest pitch period searched, in samples at `PITCH_RATE` (400 Hz).
const MIN_PITCH_LAG: usize = 10;
/// Longest pitch period searched, in samples at `PITCH_RATE` (80 Hz).
const MAX_PITCH_LAG: usize = 50;
/// Samples of decimated history kept for the autocorrelation window plus the longest lag.
const PITCH_HISTORY: usize = 80 + MAX_PITCH_LAG;
/// Correlation window length at `PITCH_RATE` (20 ms).
const PITCH_WINDOW: usize = 80;
/// Level the noise floor starts at before it has heard anything, in dBFS.
const INITIAL_NOISE_FLOOR_DBFS: f32 = -60.0;
/// How fast the floor follows quieter frames (fraction per frame).
const FLOOR_FALL_RATE: f32 = 0.2;
/// How fast the floor follows louder non-speech frames (fraction per frame, ≈ 0.4 s time constant).
const FLOOR_RISE_RATE: f32 = 0.05;
/// The most the floor rises in one frame (energy ratio, 0.25 dB; about 12 dB a second).
const FLOOR_MAX_RISE: f32 = 1.059_254;
/// Zero-crossing rate (crossings per sample) above which a frame is hiss, not voice.
const MAX_VOICED_ZERO_CROSSING_RATE: f32 = 0.42;

/// Tuning for `VoiceActivityDetector`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VadConfig {
    /// Neural score in `[0, 1]` at or above which earshot's vote is "speech".
    pub neural_threshold: f32,
    /// Frames quieter than this (RMS dBFS) are never speech, whatever the detectors say.
    pub min_speech_dbfs: f32,
    /// How far above the adaptive noise floor a frame must be for the periodicity vote, in dB.
    pub noise_margin_db: f32,
    /// Normalised autocorrelation in the pitch range at or above which a frame counts as voiced.
    pub min_periodicity: f32,
    /// Whether to run the earshot neural VAD at all (off: periodicity detector only).
    pub use_neural: bool,
    /// Whether to run the periodicity detector at all (off: the neural model on every
    /// candidate frame).
    pub use_periodicity: bool,
}

impl Default for VadConfig {
    fn default() -> Self {
        Self {
            neural_threshold: 0.5,
            min_speech_dbfs: -50.0,
            noise_margin_db: 9.0,
            min_periodicity: 0.55,
            use_neural: true,
            use_periodicity: true,
        }
    }
}

/// What the detector concluded about one frame, with the evidence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VadDecision {
    /// The verdict: this frame contains speech.
    pub is_speech: bool,
    /// Latest earshot score in `[0, 1]`, or 0 when the model did not run (quiet frames, or
    /// frames the periodicity detector already called voiced).
    pub neural_score: f32,
    /// Best normalised autocorrelation in the pitch range, `[-1, 1]` (0 for quiet frames).
    pub periodicity: f32,
    /// Frame RMS level in dBFS.
    pub level_dbfs: f32,
    /// Adaptive noise floor after this frame, in dBFS.
    pub noise_floor_dbfs: f32,
}

/// Streaming voice activity detector for one audio stream.
pub struct VoiceActivityDetector {
    sample_rate: u32,
    frame_len: usize,
    config: VadConfig,
    neural: Box<earshot::Detector>,
    neural_pending: [i16; NEURAL_FRAME],
    neural_filled: usize,
    neural_running: bool,
    last_score: f32,
    upsampled: Vec<i16>,
    previous_sample: i16,
    decimation: usize,
    pitch_history: [f32; PITCH_HISTORY],
    noise_floor_energy: f32,
}

impl std::fmt::Debug for VoiceActivityDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoiceActivityDetector")
            .field("sample_rate", &self.sample_rate)
            .field("config", &self.config)
            .field("noise_floor_dbfs", &energy_to_dbfs(self.noise_floor_energy))
            .finish_non_exhaustive()
    }
}

/// Mean-square energy (full scale sine = 0.5) to dBFS relative to a full-scale square wave.
fn energy_to_dbfs(energy: f32) -> f32 {
    10.0 * (energy.max(1e-12)).log10()
}

/// dBFS to mean-square energy of samples normalised to `[-1, 1]`.
fn dbfs_to_energy(dbfs: f32) -> f32 {
    10f32.powf(dbfs / 10.0)
}

impl VoiceActivityDetector {
    /// A detector for 20 ms frames at `sample_rate` (8000 or 16000 Hz) with default tuning.
    pub fn new(sample_rate: u32) -> Result<Self, MediaError> {
        Self::with_config(sample_rate, VadConfig::default())
    }

    /// A detector for 20 ms frames at `sample_rate` (8000 or 16000 Hz).
    pub fn with_config(sample_rate: u32, config: VadConfig) -> Result<Self, MediaError> {
        if sample_rate != 8000 && sample_rate != 16000 {
            return Err(MediaError::UnsupportedSampleRate(sample_rate));
        }
        let frame_len = sample_rate as usize / 50;
        Ok(Self {
            sample_rate,
            frame_len,
            config,
            neural: earshot::Detector::default_boxed(),
            neural_pending: [0; NEURAL_FRAME],
            neural_filled: 0,
            neural_running: false,
            last_score: 0.0,
            // 8 kHz frames are doubled for the 16 kHz model.
            upsampled: vec![
                0;
                if sample_rate == 8000 {
                    frame_len * 2
                } else {
                    0
                }
            ],
            previous_sample: 0,
            decimation: (sample_rate / PITCH_RATE) as usize,
            pitch_history: [0.0; PITCH_HISTORY],
            noise_floor_energy: dbfs_to_energy(INITIAL_NOISE_FLOOR_DBFS),
        })
    }

    /// Samples per 20 ms frame at this detector's rate.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Sample rate the detector expects.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Current tuning.
    pub fn config(&self) -> &VadConfig {
        &self.config
    }

    /// Current adaptive noise floor in dBFS.
    pub fn noise_floor_dbfs(&self) -> f32 {
        energy_to_dbfs(self.noise_floor_energy)
    }

    /// Forgets all stream state (new call, new audio source).
    pub fn reset(&mut self) {
        self.neural.reset();
        self.neural_filled = 0;
        self.neural_running = false;
        self.last_score = 0.0;
        self.previous_sample = 0;
        self.pitch_history = [0.0; PITCH_HISTORY];
        self.noise_floor_energy = dbfs_to_energy(INITIAL_NOISE_FLOOR_DBFS);
    }

    /// Classifies one frame; `true` means speech. See [`Self::analyze`] for the evidence.
    pub fn is_speech(&mut self, frame: &[i16]) -> bool {
        self.analyze(frame).is_speech
    }

    /// Classifies one frame (ideally 20 ms; any length works) and returns the evidence.
    pub fn analyze(&mut self, frame: &[i16]) -> VadDecision {
        let (energy, zero_crossings) = frame_energy_and_crossings(frame);
        let level_dbfs = energy_to_dbfs(energy);
        let zero_crossing_rate = zero_crossings as f32 / frame.len().max(1) as f32;
        let loud_enough = level_dbfs >= self.config.min_speech_dbfs;
        let above_floor =
            energy >= self.noise_floor_energy * dbfs_to_energy(self.config.noise_margin_db);

        self.push_pitch_history(frame);
        let candidate = loud_enough && above_floor;
        // Periodicity is cheap (one autocorrelation at 4 kHz) and says "voiced" for most
        // speech frames; the neural model, a hundred times dearer, is only asked about loud
        // frames that are not voiced (fricatives, plosives, breathy speech).
        let periodicity = if candidate && self.config.use_periodicity {
            self.pitch_periodicity()
        } else {
            0.0
        };
        let periodic_vote = candidate
            && self.config.use_periodicity
            && periodicity >= self.config.min_periodicity
            && zero_crossing_rate <= MAX_VOICED_ZERO_CROSSING_RATE;
        let neural_score = if self.config.use_neural && candidate && !periodic_vote {
            if !self.neural_running {
                // The model kept stale context from before the frames it skipped.
                self.neural.reset();
                self.neural_filled = 0;
                self.neural_running = true;
            }
            self.run_neural(frame)
        } else {
            self.neural_running = false;
            self.last_score = 0.0;
            0.0
        };
        let neural_vote = loud_enough && neural_score >= self.config.neural_threshold;
        let is_speech = periodic_vote || neural_vote;

        self.track_noise_floor(energy, is_speech);
        VadDecision {
            is_speech,
            neural_score,
            periodicity,
            level_dbfs,
            noise_floor_dbfs: self.noise_floor_dbfs(),
        }
    }

    /// Follows quieter frames quickly and louder ones only when they are not speech, and
    /// then at most [`FLOOR_MAX_RISE`] a frame, so talking never drags the floor up.
    ///
    /// The cap matters at the start of an utterance after digital silence: one loud frame
    /// the voters miss (a breath, a plosive) would otherwise lift a -60 dBFS floor to within
    /// 13 dB of the speech in a single step, the next words fail the floor's margin, count
    /// as noise and lift it further, and a whole answer is lost as "too short".
    fn track_noise_floor(&mut self, energy: f32, is_speech: bool) {
        if energy < self.noise_floor_energy {
            self.noise_floor_energy += FLOOR_FALL_RATE * (energy - self.noise_floor_energy);
        } else if !is_speech {
            let toward =
                self.noise_floor_energy + FLOOR_RISE_RATE * (energy - self.noise_floor_energy);
            self.noise_floor_energy = toward.min(self.noise_floor_energy * FLOOR_MAX_RISE);
        }
        self.noise_floor_energy = self.noise_floor_energy.max(1e-10);
    }

    /// Feeds the frame to earshot in 256-sample pieces; returns the highest score seen for it.
    fn run_neural(&mut self, frame: &[i16]) -> f32 {
        let mut best: Option<f32> = None;
        if self.sample_rate == 8000 {
            // Linear interpolation is enough: the model only looks at the mel spectrum below 4 kHz here.
            let mut previous = self.previous_sample;
            for (pair, &sample) in self.upsampled.chunks_exact_mut(2).zip(frame) {
                pair[0] = ((i32::from(previous) + i32::from(sample)) / 2) as i16;
                pair[1] = sample;
                previous = sample;
            }
            self.previous_sample = previous;
            let upsampled_len = (frame.len() * 2).min(self.upsampled.len());
            let upsampled = std::mem::take(&mut self.upsampled);
            self.feed_neural(&upsampled[..upsampled_len], &mut best);
            self.upsampled = upsampled;
        } else {
            self.feed_neural(frame, &mut best);
        }
        if let Some(score) = best {
            self.last_score = score;
        }
        self.last_score
    }

    fn feed_neural(&mut self, samples: &[i16], best: &mut Option<f32>) {
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (NEURAL_FRAME - self.neural_filled).min(rest.len());
            self.neural_pending[self.neural_filled..self.neural_filled + take]
                .copy_from_slice(&rest[..take]);
            self.neural_filled += take;
            rest = &rest[take..];
            if self.neural_filled == NEURAL_FRAME {
                self.neural_filled = 0;
                let score = self.neural.predict_i16(&self.neural_pending);
                *best = Some(best.map_or(score, |b: f32| b.max(score)));
            }
        }
    }

    /// Appends the frame, decimated to `PITCH_RATE` by block averaging, to the pitch history.
    fn push_pitch_history(&mut self, frame: &[i16]) {
        let factor = self.decimation;
        let new_len = (frame.len() / factor).min(PITCH_HISTORY);
        self.pitch_history.copy_within(new_len.., 0);
        let start = PITCH_HISTORY - new_len;
        for (slot, block) in self.pitch_history[start..]
            .iter_mut()
            .zip(frame.chunks_exact(factor))
        {
            let sum: i32 = block.iter().map(|&s| i32::from(s)).sum();
            *slot = sum as f32 / (factor as f32 * 32768.0);
        }
    }

    /// Highest normalised autocorrelation of the latest 20 ms over pitch lags of 80–400 Hz.
    fn pitch_periodicity(&self) -> f32 {
        let window = &self.pitch_history[PITCH_HISTORY - PITCH_WINDOW..];
        let window_energy: f32 = window.iter().map(|x| x * x).sum();
        if window_energy <= 0.0 {
            return 0.0;
        }
        let end = PITCH_HISTORY - MIN_PITCH_LAG;
        let mut lagged_energy: f32 = self.pitch_history[end - PITCH_WINDOW..end]
            .iter()
            .map(|x| x * x)
            .sum();
        let mut best = 0.0f32;
        for lag in MIN_PITCH_LAG..=MAX_PITCH_LAG {
            let start = PITCH_HISTORY - PITCH_WINDOW - lag;
            let lagged = &self.pitch_history[start..start + PITCH_WINDOW];
            if lag > MIN_PITCH_LAG {
                // Slide the lagged window one sample back instead of re-summing it.
                let entering = self.pitch_history[start];
                let leaving = self.pitch_history[start + PITCH_WINDOW];
                lagged_energy = (lagged_energy + entering * entering - leaving * leaving).max(0.0);
            }
            if lagged_energy > 0.0 {
                best = best.max(dot(window, lagged) / (window_energy * lagged_energy).sqrt());
            }
        }
        best
    }
}

/// Dot product with eight independent accumulators so it vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let a_chunks = a.chunks_exact(8);
    let b_chunks = b.chunks_exact(8);
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Mean-square energy of the frame (normalised to full scale = 1) and its zero-crossing count.
fn frame_energy_and_crossings(frame: &[i16]) -> (f32, usize) {
    if frame.is_empty() {
        return (0.0, 0);
    }
    let mut sum = 0i64;
    let mut crossings = 0;
    let mut previous_negative = frame[0] < 0;
    for &sample in frame {
        sum += i64::from(sample) * i64::from(sample);
        let negative = sample < 0;
        crossings += usize::from(negative != previous_negative);
        previous_negative = negative;
    }
    let energy = sum as f32 / (frame.len() as f32 * 32768.0 * 32768.0);
    (energy, crossings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{SpeechLikeGenerator, ToneGenerator, WhiteNoiseGenerator};

    /// Fraction of frames classified as speech, after a warm-up of 10 frames.
    fn speech_fraction(
        vad: &mut VoiceActivityDetector,
        mut fill: impl FnMut(&mut [i16]),
        frames: usize,
    ) -> f32 {
        let mut frame = vec![0i16; vad.frame_len()];
        let mut speech = 0;
        for i in 0..frames + 10 {
            fill(&mut frame);
            let decision = vad.analyze(&frame);
            if i >= 10 && decision.is_speech {
                speech += 1;
            }
        }
        speech as f32 / frames as f32
    }

    #[test]
    fn each_voter_alone_hears_the_synthetic_speech() {
        let periodic_only = VadConfig {
            use_neural: false,
            ..VadConfig::default()
        };
        let neural_only = VadConfig {
            use_periodicity: false,
            // Alone, the model would let the noise floor rise on every frame it rejects and
            // gate itself off; here it judges every loud frame.
            noise_margin_db: -100.0,
            ..VadConfig::default()
        };
        for rate in [8000, 16000] {
            let mut vad = VoiceActivityDetector::with_config(rate, neural_only).unwrap();
            let mut periodic_vad = VoiceActivityDetector::with_config(rate, periodic_only).unwrap();
            let mut speech = SpeechLikeGenerator::new(rate, 1);
            let mut frame = vec![0i16; vad.frame_len()];
            let (mut neural, mut periodic) = (0, 0);
            for _ in 0..250 {
                speech.fill(&mut frame);
                neural += usize::from(vad.analyze(&frame).neural_score >= 0.5);
                periodic += usize::from(periodic_vad.analyze(&frame).periodicity >= 0.55);
            }
            assert!(neural > 100, "rate {rate}: neural {neural}/250");
            assert!(periodic > 150, "rate {rate}: periodic {periodic}/250");
        }
        let config = VadConfig {
            use_neural: false,
            ..VadConfig::default()
        };
        let mut vad = VoiceActivityDetector::with_config(8000, config).unwrap();
        let mut speech = SpeechLikeGenerator::new(8000, 5);
        assert!(speech_fraction(&mut vad, |f| speech.fill(f), 250) > 0.6);
        let mut vad = VoiceActivityDetector::with_config(8000, config).unwrap();
        let mut noise = WhiteNoiseGenerator::new(8, -30.0);
        assert!(speech_fraction(&mut vad, |f| noise.fill(f), 250) < 0.03);
    }

    #[test]
    fn speech_like_audio_is_speech_at_both_rates() {
        for rate in [8000, 16000] {
            for seed in 0..4 {
                let mut vad = VoiceActivityDetector::new(rate).unwrap();
                let mut speech = SpeechLikeGenerator::new(rate, seed);
                let fraction = speech_fraction(&mut vad, |f| speech.fill(f), 250);
                // Syllable dips and word gaps are legitimately non-speech frames.
                assert!(fraction > 0.6, "rate {rate} seed {seed}: {fraction}");
            }
        }
    }

    #[test]
    fn quiet_speech_over_noise_is_still_speech() {
        let mut vad = VoiceActivityDetector::new(8000).unwrap();
        let mut speech = SpeechLikeGenerator::with_level(8000, 9, -30.0);
        let mut noise = WhiteNoiseGenerator::new(3, -50.0);
        let fraction = speech_fraction(
            &mut vad,
            |f| {
                speech.fill(f);
                noise.add_to(f);
            },
            250,
        );
        assert!(fraction > 0.6, "{fraction}");
    }

    #[test]
    fn silence_and_white_noise_are_not_speech() {
        for rate in [8000, 16000] {
            let mut vad = VoiceActivityDetector::new(rate).unwrap();
            assert_eq!(speech_fraction(&mut vad, |f| f.fill(0), 100), 0.0);
            for level in [-60.0, -45.0, -35.0, -25.0] {
                let mut vad = VoiceActivityDetector::new(rate).unwrap();
                let mut noise = WhiteNoiseGenerator::new((-level) as u64, level);
                let fraction = speech_fraction(&mut vad, |f| noise.fill(f), 250);
                assert!(
                    fraction < 0.03,
                    "rate {rate} noise {level} dBFS: {fraction}"
                );
            }
        }
    }

    #[test]
    fn speech_after_noise_is_detected_and_floor_adapts() {
        let mut vad = VoiceActivityDetector::new(8000).unwrap();
        let mut noise = WhiteNoiseGenerator::new(4, -45.0);
        assert!(speech_fraction(&mut vad, |f| noise.fill(f), 100) < 0.03);
        let floor = vad.noise_floor_dbfs();
        assert!((-52.0..-40.0).contains(&floor), "floor {floor}");
        let mut speech = SpeechLikeGenerator::new(8000, 2);
        let fraction = speech_fraction(
            &mut vad,
            |f| {
                speech.fill(f);
                noise.add_to(f);
            },
            200,
        );
        assert!(fraction > 0.6, "{fraction}");
    }

    #[test]
    fn low_hum_is_not_speech() {
        // A steady 50 Hz hum is below the pitch range and quiet; it must not open the gate.
        let mut vad = VoiceActivityDetector::new(8000).unwrap();
        let mut hum = ToneGenerator::new(8000, 50.0, -55.0);
        assert_eq!(speech_fraction(&mut vad, |f| hum.fill(f), 100), 0.0);
    }

    #[test]
    fn voiced_frames_spare_the_neural_model() {
        let mut vad = VoiceActivityDetector::new(8000).unwrap();
        let mut speech = SpeechLikeGenerator::new(8000, 3);
        let mut frame = vec![0i16; vad.frame_len()];
        let (mut voiced, mut modelled) = (0, 0);
        for _ in 0..250 {
            speech.fill(&mut frame);
            let decision = vad.analyze(&frame);
            if decision.is_speech && decision.periodicity >= 0.55 {
                voiced += 1;
                assert_eq!(decision.neural_score, 0.0, "{decision:?}");
            }
            modelled += usize::from(decision.neural_score > 0.0);
        }
        assert!(voiced > 150, "voiced {voiced}/250");
        // Loud frames that are not voiced still go to the model.
        assert!(modelled > 0, "the model never ran");
    }

    #[test]
    fn rejects_unsupported_rate() {
        assert!(VoiceActivityDetector::new(24000).is_err());
    }
}

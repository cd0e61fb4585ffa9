//! Deterministic test-signal generators for the simulated providers, the load
//! generator and tests.
//!
//! Everything is seeded and allocation-free after construction, so a sim call
//! can synthesise its 20 ms frames on the hot path and two runs with the same
//! seed produce identical audio.

use std::collections::HashMap;
use std::f32::consts::TAU;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::dtmf::dtmf_frequencies;
use crate::error::MediaError;

/// Speaking rate used to turn text length into audio length, in characters per second.
pub const SPEECH_CHARS_PER_SECOND: f32 = 14.0;
/// Shortest utterance `speech_duration_for_text` returns, so one-word replies are still audible.
pub const MIN_SPEECH_DURATION: Duration = Duration::from_millis(400);

/// How long a line of text would take to say at about 14 characters per second (at least 400 ms).
pub fn speech_duration_for_text(text: &str) -> Duration {
    let chars = text.trim().chars().count() as f32;
    Duration::from_secs_f32(chars / SPEECH_CHARS_PER_SECOND).max(MIN_SPEECH_DURATION)
}

/// Number of samples in `duration` at `sample_rate`, rounded to the nearest sample.
pub fn samples_for_duration(sample_rate: u32, duration: Duration) -> usize {
    (duration.as_secs_f64() * f64::from(sample_rate)).round() as usize
}

/// Fills `output` with digital silence.
pub fn fill_silence(output: &mut [i16]) {
    output.fill(0);
}

/// Converts a level in dBFS to a linear amplitude relative to full scale (32767).
fn dbfs_to_amplitude(level_dbfs: f32) -> f32 {
    32767.0 * 10f32.powf(level_dbfs / 20.0)
}

/// Small, fast, seedable PRNG (SplitMix64); good enough for noise and jitter, no dependency.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// Creates a generator from `seed`; equal seeds give equal sequences.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform value in `[0, 1)`.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform value in `[low, high)`.
    pub fn range(&mut self, low: f32, high: f32) -> f32 {
        low + (high - low) * self.next_f32()
    }

    /// Approximately Gaussian value with zero mean and unit variance (sum of uniforms).
    pub fn gaussian(&mut self) -> f32 {
        // Irwin–Hall with 4 terms: cheap and smooth enough for test noise.
        let sum = self.next_f32() + self.next_f32() + self.next_f32() + self.next_f32();
        (sum - 2.0) * (3.0f32).sqrt()
    }
}

/// Seeded white (Gaussian-ish) noise at a given RMS level.
#[derive(Debug, Clone)]
pub struct WhiteNoiseGenerator {
    rng: SplitMix64,
    rms: f32,
}

impl WhiteNoiseGenerator {
    /// Noise with RMS `level_dbfs` relative to full scale.
    pub fn new(seed: u64, level_dbfs: f32) -> Self {
        Self {
            rng: SplitMix64::new(seed),
            rms: dbfs_to_amplitude(level_dbfs),
        }
    }

    /// Overwrites `output` with noise.
    pub fn fill(&mut self, output: &mut [i16]) {
        for sample in output {
            *sample = saturate(self.rng.gaussian() * self.rms);
        }
    }

    /// Adds noise onto the samples already in `output`, saturating.
    pub fn add_to(&mut self, output: &mut [i16]) {
        for sample in output {
            *sample = saturate(f32::from(*sample) + self.rng.gaussian() * self.rms);
        }
    }
}

/// Continuous single sine tone (answering-machine beeps, test tones).
#[derive(Debug, Clone)]
pub struct ToneGenerator {
    phase: f32,
    step: f32,
    amplitude: f32,
}

impl ToneGenerator {
    /// A tone of `frequency_hz` at peak level `level_dbfs`.
    pub fn new(sample_rate: u32, frequency_hz: f32, level_dbfs: f32) -> Self {
        Self {
            phase: 0.0,
            step: TAU * frequency_hz / sample_rate as f32,
            amplitude: dbfs_to_amplitude(level_dbfs),
        }
    }

    /// Overwrites `output` with the next samples of the tone.
    pub fn fill(&mut self, output: &mut [i16]) {
        for sample in output {
            *sample = saturate(self.amplitude * self.phase.sin());
            self.phase = (self.phase + self.step) % TAU;
        }
    }
}

/// Per-syllable vowel formants (F1, F2, F3 in Hz), loosely after Peterson & Barney.
const VOWEL_FORMANTS: [[f32; 3]; 8] = [
    [730.0, 1090.0, 2440.0], // a
    [530.0, 1840.0, 2480.0], // e
    [270.0, 2290.0, 3010.0], // i
    [570.0, 840.0, 2410.0],  // o
    [300.0, 870.0, 2240.0],  // u
    [660.0, 1720.0, 2410.0], // ae
    [490.0, 1350.0, 1690.0], // er
    [640.0, 1190.0, 2390.0], // uh
];
/// Formant bandwidths in Hz; wide enough to sound vowel-like, narrow enough to be peaky.
const FORMANT_BANDWIDTHS: [f32; 3] = [90.0, 110.0, 170.0];
/// Relative formant gains; higher formants are weaker in real voices.
const FORMANT_GAINS: [f32; 3] = [1.0, 0.6, 0.25];
/// How often (in samples) the formant filters are re-tuned toward their targets.
const FORMANT_UPDATE_SAMPLES: u32 = 32;

/// Two-pole resonator used as one formant filter.
#[derive(Debug, Clone, Copy, Default)]
struct Resonator {
    b1: f32,
    b2: f32,
    gain: f32,
    y1: f32,
    y2: f32,
}

impl Resonator {
    fn tune(&mut self, frequency: f32, bandwidth: f32, sample_rate: f32) {
        let r = (-std::f32::consts::PI * bandwidth / sample_rate).exp();
        self.b1 = 2.0 * r * (TAU * frequency / sample_rate).cos();
        self.b2 = -r * r;
        // Normalise the peak gain to about 1 so formant moves do not change loudness.
        let theta = TAU * frequency / sample_rate;
        self.gain = (1.0 - r) * (1.0 + r * r - 2.0 * r * (2.0 * theta).cos()).sqrt();
    }

    #[inline]
    fn process(&mut self, x: f32) -> f32 {
        let y = self.gain * x + self.b1 * self.y1 + self.b2 * self.y2;
        self.y2 = self.y1;
        self.y1 = y;
        y
    }
}

/// Where the generator is inside the current syllable.
#[derive(Debug, Clone, Copy)]
struct Syllable {
    /// Samples left in the voiced part of the syllable.
    voiced_left: u32,
    /// Total voiced samples, for the attack/release envelope.
    voiced_total: u32,
    /// Samples of low-level gap after the voiced part.
    gap_left: u32,
    /// Pitch target for this syllable in Hz.
    f0: f32,
    /// Peak amplitude multiplier for this syllable (stress).
    stress: f32,
    /// Vowel index into `VOWEL_FORMANTS`.
    vowel: usize,
}

/// Pitch steps the level calibration is shared across, in Hz.
const CALIBRATION_PITCH_STEP: f32 = 5.0;
/// Syllable sequence the level calibration is measured on.
const CALIBRATION_SEED: u64 = 0x00CA_11B8_A710;

/// RMS of one second of unit-amplitude speech at `sample_rate` and about `base_f0`.
///
/// The filter chain's gain depends on pitch and vowels, so levels are calibrated by
/// measuring a second of a reference voice. That costs a second of synthesis, so it is done
/// once per sample rate and 5 Hz pitch step and shared: the simulated TTS and callees make a
/// generator per sentence, and would otherwise synthesize a second of audio for each.
fn voice_rms(sample_rate: u32, base_f0: f32) -> f32 {
    static CALIBRATION: OnceLock<Mutex<HashMap<(u32, u32), f32>>> = OnceLock::new();
    let step = (base_f0 / CALIBRATION_PITCH_STEP).round().max(1.0);
    let key = (sample_rate, step as u32);
    let cache = CALIBRATION.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(rms) = cache.lock().ok().and_then(|map| map.get(&key).copied()) {
        return rms;
    }
    let mut probe = SpeechLikeGenerator::unscaled(
        sample_rate,
        CALIBRATION_SEED,
        Some(step * CALIBRATION_PITCH_STEP),
    );
    let probe_len = sample_rate as usize;
    let energy: f64 = (0..probe_len)
        .map(|_| f64::from(probe.next_sample()).powi(2))
        .sum();
    let rms = ((energy / probe_len.max(1) as f64).sqrt() as f32).max(1e-9);
    if let Ok(mut map) = cache.lock() {
        map.insert(key, rms);
    }
    rms
}

/// Voiced, syllable-rate modulated, formant-filtered signal that voice activity detectors treat as speech.
///
/// A glottal pulse train with varying pitch (declination, per-syllable
/// accents, slight jitter) drives three formant resonators whose targets
/// change per syllable; a raised-cosine envelope at about 4–5 syllables per
/// second shapes it, with short inter-syllable dips and occasional word gaps.
#[derive(Debug, Clone)]
pub struct SpeechLikeGenerator {
    sample_rate: f32,
    rng: SplitMix64,
    base_f0: f32,
    amplitude: f32,
    glottal_phase: f32,
    f0: f32,
    formants: [Resonator; 3],
    formant_now: [f32; 3],
    formant_update_in: u32,
    syllable: Syllable,
    breath: f32,
}

impl SpeechLikeGenerator {
    /// Speech-like audio at `sample_rate`, seeded; level about -18 dBFS RMS while voiced.
    pub fn new(sample_rate: u32, seed: u64) -> Self {
        Self::with_level(sample_rate, seed, -18.0)
    }

    /// Same as `new` with an explicit voiced RMS level in dBFS.
    pub fn with_level(sample_rate: u32, seed: u64, level_dbfs: f32) -> Self {
        let mut generator = Self::unscaled(sample_rate, seed, None);
        generator.amplitude =
            dbfs_to_amplitude(level_dbfs) / voice_rms(sample_rate, generator.base_f0);
        generator
    }

    /// A generator at unit amplitude; `pitch` overrides the seeded neutral pitch.
    fn unscaled(sample_rate: u32, seed: u64, pitch: Option<f32>) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x5EED_5EED_5EED_5EED);
        // Voices between a low male and a female pitch.
        let seeded_f0 = rng.range(95.0, 210.0);
        let base_f0 = pitch.unwrap_or(seeded_f0);
        let sample_rate = sample_rate as f32;
        let mut generator = Self {
            sample_rate,
            rng,
            base_f0,
            amplitude: 1.0,
            glottal_phase: 0.0,
            f0: base_f0,
            formants: [Resonator::default(); 3],
            formant_now: VOWEL_FORMANTS[0],
            formant_update_in: 0,
            syllable: Syllable {
                voiced_left: 0,
                voiced_total: 1,
                gap_left: 0,
                f0: base_f0,
                stress: 1.0,
                vowel: 0,
            },
            breath: 0.0,
        };
        generator.next_syllable();
        generator.formant_now = VOWEL_FORMANTS[generator.syllable.vowel];
        generator.retune_formants();
        generator
    }

    /// Pitch of this voice's neutral intonation, in Hz.
    pub fn base_pitch_hz(&self) -> f32 {
        self.base_f0
    }

    fn next_syllable(&mut self) {
        let voiced_ms = self.rng.range(130.0, 230.0);
        // Mostly short co-articulation dips, sometimes a word boundary pause.
        let gap_ms = if self.rng.next_f32() < 0.2 {
            self.rng.range(90.0, 160.0)
        } else {
            self.rng.range(25.0, 60.0)
        };
        let voiced = (voiced_ms * self.sample_rate / 1000.0) as u32;
        self.syllable = Syllable {
            voiced_left: voiced,
            voiced_total: voiced.max(1),
            gap_left: (gap_ms * self.sample_rate / 1000.0) as u32,
            f0: self.base_f0 * self.rng.range(0.85, 1.25),
            stress: self.rng.range(0.6, 1.0),
            vowel: (self.rng.next_u64() % VOWEL_FORMANTS.len() as u64) as usize,
        };
    }

    fn retune_formants(&mut self) {
        let target = VOWEL_FORMANTS[self.syllable.vowel];
        let nyquist_guard = self.sample_rate * 0.45;
        for (i, resonator) in self.formants.iter_mut().enumerate() {
            // Glide toward the target so transitions sound like co-articulation.
            self.formant_now[i] += 0.15 * (target[i] - self.formant_now[i]);
            let frequency = self.formant_now[i].min(nyquist_guard);
            resonator.tune(frequency, FORMANT_BANDWIDTHS[i], self.sample_rate);
        }
    }

    /// Envelope of the voiced part: raised-cosine attack and release around a flat top.
    fn envelope(&self) -> f32 {
        let done = (self.syllable.voiced_total - self.syllable.voiced_left) as f32;
        let total = self.syllable.voiced_total as f32;
        let ramp = (total * 0.3).max(1.0);
        let shape = if done < ramp {
            0.5 - 0.5 * (std::f32::consts::PI * done / ramp).cos()
        } else if total - done < ramp {
            0.5 - 0.5 * (std::f32::consts::PI * (total - done) / ramp).cos()
        } else {
            1.0
        };
        shape * self.syllable.stress
    }

    /// Rosenberg-style glottal pulse evaluated at phase `p` in `[0, 1)`: smooth, so little aliasing.
    fn glottal_pulse(p: f32) -> f32 {
        const OPEN: f32 = 0.4;
        const CLOSE: f32 = 0.16;
        if p < OPEN {
            let x = p / OPEN;
            3.0 * x * x - 2.0 * x * x * x
        } else if p < OPEN + CLOSE {
            let x = (p - OPEN) / CLOSE;
            1.0 - x * x
        } else {
            0.0
        }
    }

    /// Overwrites `output` with the next samples of speech-like audio.
    pub fn fill(&mut self, output: &mut [i16]) {
        for sample in output {
            *sample = saturate(self.next_sample() * self.amplitude);
        }
    }

    /// Next unscaled sample of the source-filter model.
    fn next_sample(&mut self) -> f32 {
        if self.syllable.voiced_left == 0 && self.syllable.gap_left == 0 {
            self.next_syllable();
        }
        if self.formant_update_in == 0 {
            self.retune_formants();
            self.formant_update_in = FORMANT_UPDATE_SAMPLES;
        }
        self.formant_update_in -= 1;

        let (voicing, envelope) = if self.syllable.voiced_left > 0 {
            let envelope = self.envelope();
            self.syllable.voiced_left -= 1;
            (1.0, envelope)
        } else {
            self.syllable.gap_left -= 1;
            (0.0, 0.0)
        };

        // Pitch glides toward the syllable target with a little jitter.
        self.f0 += 0.002 * (self.syllable.f0 - self.f0);
        let jitter = 1.0 + 0.01 * (self.rng.next_f32() - 0.5);
        self.glottal_phase += self.f0 * jitter / self.sample_rate;
        if self.glottal_phase >= 1.0 {
            self.glottal_phase -= 1.0;
        }
        // Remove the pulse's DC so the resonators see an AC excitation.
        let excitation = voicing * (Self::glottal_pulse(self.glottal_phase) - 0.28);
        // A breath of aspiration noise keeps dips from being digital silence.
        self.breath = 0.9 * self.breath + 0.1 * self.rng.gaussian();
        let source = excitation * envelope + 0.01 * self.breath;

        let mut value = 0.0;
        for (resonator, gain) in self.formants.iter_mut().zip(FORMANT_GAINS) {
            value += gain * resonator.process(source);
        }
        value
    }
}

/// DTMF key tone generator: plays one key for a set duration, then silence.
#[derive(Debug, Clone)]
pub struct DtmfToneGenerator {
    sample_rate: u32,
    amplitude: f32,
    low_step: f32,
    high_step: f32,
    low_phase: f32,
    high_phase: f32,
    samples_left: usize,
}

impl DtmfToneGenerator {
    /// A generator at `sample_rate` with each of the two tones at -10 dBFS peak.
    pub fn new(sample_rate: u32) -> Self {
        Self::with_level(sample_rate, -10.0)
    }

    /// A generator whose two tones each peak at `level_dbfs`.
    pub fn with_level(sample_rate: u32, level_dbfs: f32) -> Self {
        Self {
            sample_rate,
            amplitude: dbfs_to_amplitude(level_dbfs),
            low_step: 0.0,
            high_step: 0.0,
            low_phase: 0.0,
            high_phase: 0.0,
            samples_left: 0,
        }
    }

    /// Starts playing `digit` for `duration_ms`; fails on a character that is not a DTMF key.
    pub fn start(&mut self, digit: char, duration_ms: u32) -> Result<(), MediaError> {
        let (low, high) = dtmf_frequencies(digit).ok_or(MediaError::InvalidDtmfDigit(digit))?;
        let rate = self.sample_rate as f32;
        self.low_step = TAU * low / rate;
        self.high_step = TAU * high / rate;
        self.low_phase = 0.0;
        self.high_phase = 0.0;
        self.samples_left = samples_for_duration(
            self.sample_rate,
            Duration::from_millis(u64::from(duration_ms)),
        );
        Ok(())
    }

    /// Whether tone samples remain to be played.
    pub fn is_active(&self) -> bool {
        self.samples_left > 0
    }

    /// Overwrites `output` with the tone while it lasts and silence after; returns the tone samples written.
    pub fn fill(&mut self, output: &mut [i16]) -> usize {
        let tone = self.samples_left.min(output.len());
        for sample in &mut output[..tone] {
            let value = self.low_phase.sin() + self.high_phase.sin();
            *sample = saturate(self.amplitude * value);
            self.low_phase = (self.low_phase + self.low_step) % TAU;
            self.high_phase = (self.high_phase + self.high_step) % TAU;
        }
        output[tone..].fill(0);
        self.samples_left -= tone;
        tone
    }
}

/// Rounds (half away from zero) and clamps a float sample into `i16`.
#[inline]
pub(crate) fn saturate(value: f32) -> i16 {
    // `f32::round` is a libm call on baseline x86-64; adding ±0.5 and letting the
    // saturating `as` cast truncate gives the same result and vectorises.
    (value + 0.5f32.copysign(value)) as i16
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn rms(samples: &[i16]) -> f32 {
        let sum: f64 = samples.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
        (sum / samples.len().max(1) as f64).sqrt() as f32
    }

    #[test]
    fn speech_duration_tracks_text_length() {
        assert_eq!(speech_duration_for_text(""), MIN_SPEECH_DURATION);
        assert_eq!(speech_duration_for_text("ok"), MIN_SPEECH_DURATION);
        let line = "Hello, I would like to book a table for two tonight.";
        let expected = line.chars().count() as f32 / 14.0;
        assert!((speech_duration_for_text(line).as_secs_f32() - expected).abs() < 1e-3);
        assert_eq!(samples_for_duration(8000, Duration::from_millis(20)), 160);
    }

    #[test]
    fn speech_like_is_deterministic_and_continuous_across_frames() {
        let mut a = SpeechLikeGenerator::new(8000, 7);
        let mut b = SpeechLikeGenerator::new(8000, 7);
        let mut whole = vec![0i16; 1600];
        a.fill(&mut whole);
        let mut framed = vec![0i16; 1600];
        for chunk in framed.chunks_mut(160) {
            b.fill(chunk);
        }
        assert_eq!(whole, framed);
        let mut other = vec![0i16; 1600];
        SpeechLikeGenerator::new(8000, 8).fill(&mut other);
        assert_ne!(whole, other);
    }

    #[test]
    fn speech_like_has_speech_level_and_syllable_modulation() {
        let mut generator = SpeechLikeGenerator::new(8000, 3);
        let mut audio = vec![0i16; 8000 * 3];
        generator.fill(&mut audio);
        let level_db = 20.0 * (rms(&audio) / 32767.0).log10();
        assert!((-30.0..-12.0).contains(&level_db), "level {level_db} dBFS");
        // Frame energies must swing (syllables), not sit flat like a tone.
        let frame_rms: Vec<f32> = audio.chunks(160).map(rms).collect();
        let max = frame_rms.iter().cloned().fold(0.0, f32::max);
        let min = frame_rms.iter().cloned().fold(f32::MAX, f32::min);
        assert!(max > 8.0 * min.max(1.0), "max {max} min {min}");
        assert!(
            audio.iter().all(|&s| s > i16::MIN && s < i16::MAX),
            "clipped"
        );
    }

    #[test]
    fn dtmf_generator_plays_for_duration_then_silence() {
        let mut generator = DtmfToneGenerator::new(8000);
        assert!(generator.start('x', 100).is_err());
        generator.start('5', 50).unwrap_or_default();
        let mut frame = [0i16; 160];
        assert_eq!(generator.fill(&mut frame), 160);
        assert!(rms(&frame) > 1000.0);
        let mut frame2 = [1i16; 320];
        assert_eq!(generator.fill(&mut frame2), 240);
        assert!(frame2[240..].iter().all(|&s| s == 0));
        assert!(!generator.is_active());
    }

    #[test]
    fn noise_level_matches_request() {
        let mut noise = WhiteNoiseGenerator::new(1, -40.0);
        let mut buffer = vec![0i16; 16000];
        noise.fill(&mut buffer);
        let level_db = 20.0 * (rms(&buffer) / 32767.0).log10();
        assert!((level_db + 40.0).abs() < 1.0, "{level_db}");
    }
}

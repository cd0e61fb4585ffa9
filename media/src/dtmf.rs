//! In-band DTMF detection with the Goertzel algorithm.
//!
//! Samples are collected into fixed analysis blocks (205 samples at 8 kHz,
//! the classic size whose ~39 Hz resolution separates the DTMF rows) and each
//! block is checked for exactly one row and one column tone. A key is
//! reported once it has been seen in two consecutive blocks, and not again
//! until it has been released, so a held key produces one digit.

use crate::error::MediaError;
use crate::goertzel::{self, coefficient as goertzel_coefficient, energy as goertzel_energy};

/// Low-group (row) frequencies in Hz.
pub const DTMF_ROW_HZ: [f32; 4] = [697.0, 770.0, 852.0, 941.0];
/// High-group (column) frequencies in Hz.
pub const DTMF_COL_HZ: [f32; 4] = [1209.0, 1336.0, 1477.0, 1633.0];
/// Keypad layout indexed by `[row][column]`.
pub const DTMF_KEYS: [[char; 4]; 4] = [
    ['1', '2', '3', 'A'],
    ['4', '5', '6', 'B'],
    ['7', '8', '9', 'C'],
    ['*', '0', '#', 'D'],
];

/// Analysis block length at 8 kHz; scaled with the sample rate.
const BLOCK_SAMPLES_AT_8K: usize = 205;
/// Weakest tone accepted, as RMS of one tone in dBFS; quieter is line noise.
const MIN_TONE_DBFS: f32 = -42.0;
/// Normal twist: how much weaker the low group may be than the high group.
const MAX_NORMAL_TWIST_DB: f32 = 8.0;
/// Reverse twist: how much weaker the high group may be than the low group.
const MAX_REVERSE_TWIST_DB: f32 = 4.0;
/// The winning tone must beat the runner-up of its group by this much.
const MIN_RELATIVE_PEAK_DB: f32 = 6.0;
/// Share of the block's energy the two tones must carry; speech spreads its energy wider.
const MIN_TONE_ENERGY_FRACTION: f32 = 0.6;
/// Second harmonics must stay this far below their fundamental; voices have strong harmonics.
const MIN_HARMONIC_REJECTION_DB: f32 = 10.0;
/// Consecutive blocks a key must be seen in before it is reported.
const BLOCKS_TO_PRESS: u8 = 2;
/// Consecutive blocks without the key before it counts as released.
const BLOCKS_TO_RELEASE: u8 = 2;

/// The (row, column) frequencies of a DTMF key, or `None` if `digit` is not one of `0-9 * # A-D`.
pub fn dtmf_frequencies(digit: char) -> Option<(f32, f32)> {
    let digit = digit.to_ascii_uppercase();
    for (row, keys) in DTMF_KEYS.iter().enumerate() {
        for (col, &key) in keys.iter().enumerate() {
            if key == digit {
                return Some((DTMF_ROW_HZ[row], DTMF_COL_HZ[col]));
            }
        }
    }
    None
}

/// Converts decibels to a power ratio.
fn db_to_power(db: f32) -> f32 {
    10f32.powf(db / 10.0)
}

/// Index and value of the largest element plus the largest of the others.
fn strongest(energies: &[f32; 4]) -> (usize, f32, f32) {
    let mut best = 0;
    for i in 1..4 {
        if energies[i] > energies[best] {
            best = i;
        }
    }
    let runner_up = energies
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best)
        .map(|(_, &e)| e)
        .fold(0.0, f32::max);
    (best, energies[best], runner_up)
}

/// Streaming DTMF detector for one audio stream.
#[derive(Debug, Clone)]
pub struct DtmfDetector {
    block: Vec<f32>,
    filled: usize,
    row_coefficients: [f32; 4],
    col_coefficients: [f32; 4],
    row_harmonic_coefficients: [f32; 4],
    col_harmonic_coefficients: [f32; 4],
    min_tone_energy: f32,
    candidate: Option<char>,
    candidate_blocks: u8,
    pressed: Option<char>,
    blocks_without_pressed: u8,
    queued: Option<char>,
}

impl DtmfDetector {
    /// A detector for audio at `sample_rate` (8000 or 16000 Hz).
    pub fn new(sample_rate: u32) -> Result<Self, MediaError> {
        if sample_rate != 8000 && sample_rate != 16000 {
            return Err(MediaError::UnsupportedSampleRate(sample_rate));
        }
        let rate = sample_rate as f32;
        let block_len = BLOCK_SAMPLES_AT_8K * (sample_rate as usize / 8000);
        let tone_rms = 32768.0 * 10f32.powf(MIN_TONE_DBFS / 20.0);
        Ok(Self {
            block: vec![0.0; block_len],
            filled: 0,
            row_coefficients: DTMF_ROW_HZ.map(|f| goertzel_coefficient(f, rate)),
            col_coefficients: DTMF_COL_HZ.map(|f| goertzel_coefficient(f, rate)),
            row_harmonic_coefficients: DTMF_ROW_HZ.map(|f| goertzel_coefficient(2.0 * f, rate)),
            col_harmonic_coefficients: DTMF_COL_HZ.map(|f| goertzel_coefficient(2.0 * f, rate)),
            min_tone_energy: tone_rms * tone_rms * block_len as f32,
            candidate: None,
            candidate_blocks: 0,
            pressed: None,
            blocks_without_pressed: 0,
            queued: None,
        })
    }

    /// Analysis block length in samples.
    pub fn block_len(&self) -> usize {
        self.block.len()
    }

    /// The key currently held down, if any.
    pub fn pressed(&self) -> Option<char> {
        self.pressed
    }

    /// Forgets all state, e.g. after a stream restart.
    pub fn reset(&mut self) {
        self.filled = 0;
        self.candidate = None;
        self.candidate_blocks = 0;
        self.pressed = None;
        self.blocks_without_pressed = 0;
        self.queued = None;
    }

    /// Feeds samples; returns a key the first time it is recognised as pressed.
    ///
    /// If one call completes two key presses (only possible with very long
    /// input slices), the second is returned by the next call.
    pub fn push(&mut self, samples: &[i16]) -> Option<char> {
        let mut reported = self.queued.take();
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (self.block.len() - self.filled).min(rest.len());
            for (slot, &sample) in self.block[self.filled..self.filled + take]
                .iter_mut()
                .zip(&rest[..take])
            {
                *slot = f32::from(sample);
            }
            self.filled += take;
            rest = &rest[take..];
            if self.filled == self.block.len() {
                self.filled = 0;
                let detected = self.classify_block();
                if let Some(key) = self.debounce(detected) {
                    if reported.is_none() {
                        reported = Some(key);
                    } else {
                        self.queued = Some(key);
                    }
                }
            }
        }
        reported
    }

    /// Advances the press/release state machine with one block's result.
    fn debounce(&mut self, detected: Option<char>) -> Option<char> {
        if detected.is_some() && detected == self.candidate {
            self.candidate_blocks = self.candidate_blocks.saturating_add(1);
        } else {
            self.candidate = detected;
            self.candidate_blocks = u8::from(detected.is_some());
        }
        if detected.is_some() && detected == self.pressed {
            self.blocks_without_pressed = 0;
            return None;
        }
        if self.pressed.is_some() {
            self.blocks_without_pressed += 1;
            if self.blocks_without_pressed >= BLOCKS_TO_RELEASE {
                self.pressed = None;
            }
        }
        if self.candidate_blocks >= BLOCKS_TO_PRESS && self.pressed != self.candidate {
            self.pressed = self.candidate;
            self.blocks_without_pressed = 0;
            return self.candidate;
        }
        None
    }

    /// Runs all eight DTMF Goertzel filters in one pass over the block.
    fn goertzel_bank(&self, block: &[f32]) -> ([f32; 4], [f32; 4]) {
        let mut coefficients = [0.0f32; 8];
        coefficients[..4].copy_from_slice(&self.row_coefficients);
        coefficients[4..].copy_from_slice(&self.col_coefficients);
        let energies = goertzel::bank(block, &coefficients);
        (
            [energies[0], energies[1], energies[2], energies[3]],
            [energies[4], energies[5], energies[6], energies[7]],
        )
    }

    /// Decides whether the current block holds exactly one valid key.
    fn classify_block(&self) -> Option<char> {
        let block = &self.block[..];
        let total: f32 = block.iter().map(|x| x * x).sum();
        if total < self.min_tone_energy * 2.0 {
            return None;
        }
        let (rows, cols) = self.goertzel_bank(block);
        let (row, row_energy, row_runner_up) = strongest(&rows);
        let (col, col_energy, col_runner_up) = strongest(&cols);

        if row_energy < self.min_tone_energy || col_energy < self.min_tone_energy {
            return None;
        }
        if col_energy > row_energy * db_to_power(MAX_NORMAL_TWIST_DB)
            || row_energy > col_energy * db_to_power(MAX_REVERSE_TWIST_DB)
        {
            return None;
        }
        let relative_peak = db_to_power(MIN_RELATIVE_PEAK_DB);
        if row_energy < row_runner_up * relative_peak || col_energy < col_runner_up * relative_peak
        {
            return None;
        }
        if row_energy + col_energy < MIN_TONE_ENERGY_FRACTION * total {
            return None;
        }
        let harmonic_limit = db_to_power(-MIN_HARMONIC_REJECTION_DB);
        if goertzel_energy(block, self.row_harmonic_coefficients[row]) > row_energy * harmonic_limit
            || goertzel_energy(block, self.col_harmonic_coefficients[col])
                > col_energy * harmonic_limit
        {
            return None;
        }
        Some(DTMF_KEYS[row][col])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{
        DtmfToneGenerator, SpeechLikeGenerator, ToneGenerator, WhiteNoiseGenerator,
    };

    const ALL_KEYS: &str = "0123456789*#ABCD";

    /// Plays `digits` (each `tone_ms` on, `gap_ms` off) with noise, in 20 ms frames; returns what was detected.
    fn detect_sequence(
        sample_rate: u32,
        digits: &str,
        tone_ms: u32,
        gap_ms: u32,
        noise_dbfs: f32,
    ) -> String {
        let mut detector = DtmfDetector::new(sample_rate).unwrap();
        let mut tones = DtmfToneGenerator::with_level(sample_rate, -10.0);
        let mut noise = WhiteNoiseGenerator::new(99, noise_dbfs);
        let frame_len = sample_rate as usize / 50;
        let mut frame = vec![0i16; frame_len];
        let mut detected = String::new();
        for digit in digits.chars() {
            tones.start(digit, tone_ms).unwrap();
            let frames = (tone_ms + gap_ms).div_ceil(20);
            for _ in 0..frames {
                tones.fill(&mut frame);
                noise.add_to(&mut frame);
                if let Some(key) = detector.push(&frame) {
                    detected.push(key);
                }
            }
        }
        detected
    }

    #[test]
    fn frequencies_cover_all_sixteen_keys() {
        for key in ALL_KEYS.chars() {
            assert!(dtmf_frequencies(key).is_some(), "{key}");
        }
        assert_eq!(dtmf_frequencies('5'), Some((770.0, 1336.0)));
        assert_eq!(dtmf_frequencies('d'), Some((941.0, 1633.0)));
        assert_eq!(dtmf_frequencies('E'), None);
    }

    #[test]
    fn detects_every_key_at_8k_with_noise() {
        // Each tone peaks at -10 dBFS (RMS -13 dBFS, pair -10 dBFS); noise at -27 dBFS is 17 dB SNR.
        assert_eq!(detect_sequence(8000, ALL_KEYS, 100, 60, -27.0), ALL_KEYS);
    }

    #[test]
    fn detects_every_key_at_15_db_snr() {
        assert_eq!(detect_sequence(8000, ALL_KEYS, 80, 60, -25.0), ALL_KEYS);
    }

    #[test]
    fn detects_every_key_at_16k() {
        assert_eq!(detect_sequence(16000, ALL_KEYS, 100, 60, -30.0), ALL_KEYS);
    }

    #[test]
    fn held_key_reports_once_and_repeats_after_release() {
        assert_eq!(detect_sequence(8000, "5", 1000, 100, -40.0), "5");
        assert_eq!(detect_sequence(8000, "55", 100, 80, -40.0), "55");
    }

    #[test]
    fn whole_buffer_push_reports_each_key() {
        let mut detector = DtmfDetector::new(8000).unwrap();
        let mut tones = DtmfToneGenerator::new(8000);
        let mut audio = vec![0i16; 8000];
        let mut found = String::new();
        for (i, digit) in "19".chars().enumerate() {
            tones.start(digit, 120).unwrap();
            tones.fill(&mut audio[i * 2000..(i + 1) * 2000]);
        }
        if let Some(key) = detector.push(&audio) {
            found.push(key);
        }
        if let Some(key) = detector.push(&[]) {
            found.push(key);
        }
        assert_eq!(found, "19");
    }

    #[test]
    fn no_digit_from_speech_like_audio() {
        for seed in 0..6 {
            let mut detector = DtmfDetector::new(8000).unwrap();
            let mut speech = SpeechLikeGenerator::new(8000, seed);
            let mut frame = [0i16; 160];
            for _ in 0..500 {
                speech.fill(&mut frame);
                assert_eq!(detector.push(&frame), None, "seed {seed}");
            }
        }
    }

    #[test]
    fn no_digit_from_single_tones_or_noise() {
        let mut frame = [0i16; 160];
        for frequency in DTMF_ROW_HZ
            .iter()
            .chain(&DTMF_COL_HZ)
            .chain(&[440.0, 1000.0, 2000.0])
        {
            let mut detector = DtmfDetector::new(8000).unwrap();
            let mut tone = ToneGenerator::new(8000, *frequency, -6.0);
            for _ in 0..50 {
                tone.fill(&mut frame);
                assert_eq!(detector.push(&frame), None, "{frequency} Hz");
            }
        }
        let mut detector = DtmfDetector::new(8000).unwrap();
        let mut noise = WhiteNoiseGenerator::new(5, -12.0);
        for _ in 0..500 {
            noise.fill(&mut frame);
            assert_eq!(detector.push(&frame), None);
        }
    }

    #[test]
    fn rejects_excess_twist() {
        let mut detector = DtmfDetector::new(8000).unwrap();
        let mut low = ToneGenerator::new(8000, 697.0, -6.0);
        let mut high = ToneGenerator::new(8000, 1209.0, -20.0);
        let mut frame = [0i16; 160];
        let mut other = [0i16; 160];
        for _ in 0..20 {
            low.fill(&mut frame);
            high.fill(&mut other);
            for (a, b) in frame.iter_mut().zip(&other) {
                *a = a.saturating_add(*b);
            }
            assert_eq!(detector.push(&frame), None);
        }
    }

    #[test]
    fn rejects_unsupported_rate() {
        assert!(DtmfDetector::new(44100).is_err());
    }
}

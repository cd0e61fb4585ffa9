//! Whisper's log-mel input features over the last 8 s of 16 kHz audio: what the Smart Turn
//! end-of-turn model reads.
//!
//! A port of the numpy extractor Pipecat ships beside the model
//! (`pipecat/audio/turn/smart_turn/_whisper_features.py`, itself a copy of Hugging Face's
//! `WhisperFeatureExtractor` with `chunk_length=8`, `do_normalize=True`), with its front
//! padding as `LocalSmartTurnAnalyzerV3` does it:
//! 1. the last [`N_SAMPLES`] samples, zero-padded at the front when there are fewer;
//! 2. zero mean, unit variance over those 8 s (padding included), variance floored by 1e-7;
//! 3. reflect padding of `N_FFT / 2` at both ends, a periodic Hann window of [`N_FFT`]
//!    samples every [`HOP`] samples, the power of a real FFT;
//! 4. an 80-band Slaney mel filterbank (0–8 kHz, area-normalised), `log10` of the band
//!    power floored at 1e-10, the last frame dropped (801 frames → [`N_FRAMES`]);
//! 5. everything below the maximum minus 8 raised to it, then `(x + 4) / 4`.
//!
//! The spectrum is computed in f64 as the reference does (it promotes to float64), so the
//! features agree with it to about 1e-6; `media/tests/whisper_mel.rs` holds them to 1e-4 on
//! real speech. [`WhisperMel::new`] plans the FFT and builds the window and the filterbank
//! once; [`WhisperMel::compute`] then allocates nothing.

use std::fmt;
use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

/// The model's sample rate.
pub const SAMPLE_RATE: u32 = 16_000;
/// Samples the features cover: 8 s at [`SAMPLE_RATE`].
pub const N_SAMPLES: usize = 8 * SAMPLE_RATE as usize;
/// FFT length (25 ms).
pub const N_FFT: usize = 400;
/// Samples between frames (10 ms).
pub const HOP: usize = 160;
/// Mel bands.
pub const N_MELS: usize = 80;
/// Frames: one per hop over the 8 s, the trailing 801st dropped as the reference does.
pub const N_FRAMES: usize = N_SAMPLES / HOP;
/// Values in one feature matrix, `[N_MELS][N_FRAMES]` row-major (a band's frames together),
/// the layout of the model's `input_features` `[batch, 80, 800]`.
pub const FEATURES_LEN: usize = N_MELS * N_FRAMES;

/// One feature matrix, `[N_MELS][N_FRAMES]` row-major.
pub type Features = [f32; FEATURES_LEN];

/// Frequency bins of the real FFT.
const N_BINS: usize = N_FFT / 2 + 1;
/// Floor of a band's power before the logarithm.
const MEL_FLOOR: f64 = 1e-10;
/// Floor added to the variance before normalising (silence would divide by zero).
const NORM_VARIANCE_EPS: f64 = 1e-7;
/// Reflect padding at each end: frames are centred on their hop.
const PAD: usize = N_FFT / 2;

/// One triangular mel filter: its weights over the FFT bins `first..first + len`.
#[derive(Debug, Clone, Copy)]
struct Band {
    first: usize,
    offset: usize,
    len: usize,
}

/// The feature extractor: window, filterbank and FFT plan, and the scratch buffers one
/// evaluation needs. One per worker thread (`compute` takes `&mut self`).
pub struct WhisperMel {
    window: Vec<f64>,
    bands: Vec<Band>,
    weights: Vec<f64>,
    fft: Arc<dyn RealToComplex<f64>>,
    padded: Vec<f64>,
    frame: Vec<f64>,
    spectrum: Vec<Complex<f64>>,
    scratch: Vec<Complex<f64>>,
    power: Vec<f64>,
}

impl fmt::Debug for WhisperMel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WhisperMel")
            .field("n_fft", &N_FFT)
            .field("hop", &HOP)
            .field("n_mels", &N_MELS)
            .finish_non_exhaustive()
    }
}

impl Default for WhisperMel {
    fn default() -> Self {
        Self::new()
    }
}

impl WhisperMel {
    /// Plans the FFT and builds the window and the filterbank.
    pub fn new() -> Self {
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(N_FFT);
        let scratch = fft.make_scratch_vec();
        let spectrum = fft.make_output_vec();
        let (bands, weights) = slaney_filterbank();
        Self {
            window: periodic_hann(N_FFT),
            bands,
            weights,
            fft,
            padded: vec![0.0; N_SAMPLES + 2 * PAD],
            frame: vec![0.0; N_FFT],
            spectrum,
            scratch,
            power: vec![0.0; N_BINS],
        }
    }

    /// Writes the features of the last 8 s of `audio` (16 kHz mono, oldest first, any
    /// length: longer is cut to its end, shorter is zero-padded at the front) into
    /// `features`.
    pub fn compute(&mut self, audio: &[f32], features: &mut Features) {
        let tail = &audio[audio.len().saturating_sub(N_SAMPLES)..];
        let silence = N_SAMPLES - tail.len();

        // Normalise over the whole window, padding included, as the reference does
        // after padding (its mean and variance are of the padded 8 s).
        let sum: f64 = tail.iter().map(|&s| f64::from(s)).sum();
        let mean = sum / N_SAMPLES as f64;
        let deviations: f64 = tail
            .iter()
            .map(|&s| (f64::from(s) - mean).powi(2))
            .sum::<f64>()
            + silence as f64 * mean * mean;
        let scale = 1.0 / (deviations / N_SAMPLES as f64 + NORM_VARIANCE_EPS).sqrt();

        let body = &mut self.padded[PAD..PAD + N_SAMPLES];
        body[..silence].fill(-mean * scale);
        for (out, &s) in body[silence..].iter_mut().zip(tail) {
            *out = (f64::from(s) - mean) * scale;
        }
        // numpy's `reflect`: the edge sample itself is not repeated.
        for k in 1..=PAD {
            self.padded[PAD - k] = self.padded[PAD + k];
            self.padded[PAD + N_SAMPLES - 1 + k] = self.padded[PAD + N_SAMPLES - 1 - k];
        }

        let mut max = f64::NEG_INFINITY;
        for t in 0..N_FRAMES {
            let start = t * HOP;
            for ((out, &s), &w) in self
                .frame
                .iter_mut()
                .zip(&self.padded[start..start + N_FFT])
                .zip(&self.window)
            {
                *out = s * w;
            }
            // The lengths are the plan's own, so this cannot fail.
            if self
                .fft
                .process_with_scratch(&mut self.frame, &mut self.spectrum, &mut self.scratch)
                .is_err()
            {
                features.fill(0.0);
                return;
            }
            for (p, c) in self.power.iter_mut().zip(&self.spectrum) {
                *p = c.norm_sqr();
            }
            for (m, band) in self.bands.iter().enumerate() {
                let weights = &self.weights[band.offset..band.offset + band.len];
                let bins = &self.power[band.first..band.first + band.len];
                let energy: f64 = weights.iter().zip(bins).map(|(w, p)| w * p).sum();
                let log = energy.max(MEL_FLOOR).log10();
                max = max.max(log);
                features[m * N_FRAMES + t] = log as f32;
            }
        }

        let floor = (max - 8.0) as f32;
        for value in features.iter_mut() {
            *value = (value.max(floor) + 4.0) / 4.0;
        }
    }
}

/// `np.hanning(n + 1)[:-1]`: the periodic Hann window (torch's `hann_window`).
fn periodic_hann(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos())
        .collect()
}

/// `np.linspace(start, stop, num)`: `start + i * step`, the last point exactly `stop`.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    let step = (stop - start) / (num - 1) as f64;
    let mut points: Vec<f64> = (0..num).map(|i| start + i as f64 * step).collect();
    if let Some(last) = points.last_mut() {
        *last = stop;
    }
    points
}

const MIN_LOG_HERTZ: f64 = 1000.0;
const MIN_LOG_MEL: f64 = 15.0;

/// Hertz to mels on the Slaney scale: linear below 1 kHz, logarithmic above.
fn hertz_to_mel(freq: f64) -> f64 {
    let logstep = 27.0 / 6.4f64.ln();
    if freq >= MIN_LOG_HERTZ {
        MIN_LOG_MEL + (freq / MIN_LOG_HERTZ).ln() * logstep
    } else {
        3.0 * freq / 200.0
    }
}

/// Mels to hertz on the Slaney scale.
fn mel_to_hertz(mel: f64) -> f64 {
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= MIN_LOG_MEL {
        MIN_LOG_HERTZ * (logstep * (mel - MIN_LOG_MEL)).exp()
    } else {
        200.0 * mel / 3.0
    }
}

/// The reference's `_build_mel_filterbank(201, 80, 0, 8000, 16000)`, stored sparse: each
/// band's nonzero run of weights (a triangle spans a few bins), concatenated.
fn slaney_filterbank() -> (Vec<Band>, Vec<f64>) {
    let mel_points = linspace(
        hertz_to_mel(0.0),
        hertz_to_mel(f64::from(SAMPLE_RATE) / 2.0),
        N_MELS + 2,
    );
    let filter_freqs: Vec<f64> = mel_points.into_iter().map(mel_to_hertz).collect();
    let fft_freqs = linspace(0.0, f64::from(SAMPLE_RATE / 2), N_BINS);
    let mut bands = Vec::with_capacity(N_MELS);
    let mut weights = Vec::new();
    for m in 0..N_MELS {
        let (lower, centre, upper) = (filter_freqs[m], filter_freqs[m + 1], filter_freqs[m + 2]);
        let enorm = 2.0 / (upper - lower);
        let row: Vec<f64> = fft_freqs
            .iter()
            .map(|&f| {
                let down = (f - lower) / (centre - lower);
                let up = (upper - f) / (upper - centre);
                down.min(up).max(0.0) * enorm
            })
            .collect();
        let first = row.iter().position(|&w| w > 0.0).unwrap_or(0);
        let end = row.iter().rposition(|&w| w > 0.0).map_or(first, |i| i + 1);
        bands.push(Band {
            first,
            offset: weights.len(),
            len: end - first,
        });
        weights.extend_from_slice(&row[first..end]);
    }
    (bands, weights)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn every_band_has_weights_and_they_rise_with_frequency() {
        let (bands, _) = slaney_filterbank();
        assert_eq!(bands.len(), N_MELS);
        assert!(bands.iter().all(|b| b.len > 0));
        assert!(bands.windows(2).all(|w| w[0].first <= w[1].first));
        assert!(bands.iter().all(|b| b.first + b.len <= N_BINS));
    }

    #[test]
    fn digital_silence_is_one_flat_value() {
        // All-zero power floors every band at log10(1e-10) = -10; the max-8 clamp leaves it,
        // so every value is (-10 + 4) / 4.
        let mut mel = WhisperMel::new();
        let mut features = vec![1.0f32; FEATURES_LEN];
        let features: &mut Features = features.as_mut_slice().try_into().unwrap();
        mel.compute(&[0.0; 1600], features);
        assert!(features.iter().all(|&v| (v - -1.5).abs() < 1e-6));
    }

    #[test]
    fn only_the_last_eight_seconds_count() {
        let mut mel = WhisperMel::new();
        let tone: Vec<f32> = (0..N_SAMPLES)
            .map(|i| (i as f32 * 0.05).sin() * 0.3)
            .collect();
        let mut longer = vec![0.9f32; 4_000];
        longer.extend_from_slice(&tone);
        let mut a = vec![0.0f32; FEATURES_LEN];
        let mut b = vec![0.0f32; FEATURES_LEN];
        mel.compute(&tone, a.as_mut_slice().try_into().unwrap());
        mel.compute(&longer, b.as_mut_slice().try_into().unwrap());
        assert_eq!(a, b);
    }
}

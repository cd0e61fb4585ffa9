//! Fixed-chunk streaming sample-rate conversion between the telephony and
//! speech rates: 8, 16, 22.05, 24, 44.1 and 48 kHz.
//!
//! Wraps rubato's synchronous FFT resampler: for these rationally related
//! rates it is exact, cheap and has a fixed latency (22.05 kHz is Piper's
//! voices' rate). Each stream owns one
//! `StreamResampler`, which keeps its own f32 scratch buffers, so per-chunk
//! processing does not allocate.

use std::time::Duration;

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler};

use crate::error::MediaError;

/// Sample rates the call engine uses.
pub const SUPPORTED_RATES: [u32; 6] = [8000, 16000, 22050, 24000, 44100, 48000];
/// Default chunk: one 20 ms telephony frame.
pub const DEFAULT_CHUNK_MS: u32 = 20;

/// Converts i16 samples to f32 in `[-1, 1)`.
const I16_TO_F32: f32 = 1.0 / 32768.0;

/// The conversion backend: nothing when rates match, rubato otherwise.
enum Engine {
    Passthrough,
    Fft {
        resampler: Box<Fft<f32>>,
        input: Vec<f32>,
        output: Vec<f32>,
    },
}

/// One stream's resampler: fixed-size input chunks in, fixed-size chunks out, i16 both ways.
pub struct StreamResampler {
    input_rate: u32,
    output_rate: u32,
    input_frames: usize,
    output_frames: usize,
    engine: Engine,
}

impl std::fmt::Debug for StreamResampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamResampler")
            .field("input_rate", &self.input_rate)
            .field("output_rate", &self.output_rate)
            .field("input_frames", &self.input_frames)
            .field("output_frames", &self.output_frames)
            .field("passthrough", &matches!(self.engine, Engine::Passthrough))
            .finish()
    }
}

impl StreamResampler {
    /// A resampler taking 20 ms chunks at `input_rate` and producing 20 ms at `output_rate`.
    pub fn new(input_rate: u32, output_rate: u32) -> Result<Self, MediaError> {
        Self::with_chunk_ms(input_rate, output_rate, DEFAULT_CHUNK_MS)
    }

    /// A resampler with a chunk of `chunk_ms` milliseconds (1–1000).
    pub fn with_chunk_ms(
        input_rate: u32,
        output_rate: u32,
        chunk_ms: u32,
    ) -> Result<Self, MediaError> {
        for rate in [input_rate, output_rate] {
            if !SUPPORTED_RATES.contains(&rate) {
                return Err(MediaError::UnsupportedSampleRate(rate));
            }
        }
        if !(1..=1000).contains(&chunk_ms) {
            return Err(MediaError::Resampler(format!(
                "chunk of {chunk_ms} ms is outside 1..=1000"
            )));
        }
        // A chunk must be a whole number of samples at both rates: any whole-millisecond
        // chunk at the kHz rates, even ones at 22.05 and 44.1 kHz (20 ms is 441 samples).
        let frames = |rate: u32| {
            let milli = u64::from(rate) * u64::from(chunk_ms);
            (milli % 1000 == 0).then_some((milli / 1000) as usize)
        };
        let (Some(input_frames), Some(output_frames)) = (frames(input_rate), frames(output_rate))
        else {
            return Err(MediaError::Resampler(format!(
                "a {chunk_ms} ms chunk is not a whole number of samples at {input_rate} or {output_rate} Hz"
            )));
        };
        let engine = if input_rate == output_rate {
            Engine::Passthrough
        } else {
            let resampler = Fft::<f32>::new(
                input_rate as usize,
                output_rate as usize,
                input_frames,
                1,
                FixedSync::Both,
            )
            .map_err(|e| MediaError::Resampler(e.to_string()))?;
            if resampler.input_frames_next() != input_frames
                || resampler.output_frames_next() != output_frames
            {
                return Err(MediaError::Resampler(format!(
                    "rubato chose {}→{} frames for a {input_frames}→{output_frames} chunk",
                    resampler.input_frames_next(),
                    resampler.output_frames_next()
                )));
            }
            Engine::Fft {
                resampler: Box::new(resampler),
                input: vec![0.0; input_frames],
                output: vec![0.0; output_frames],
            }
        };
        Ok(Self {
            input_rate,
            output_rate,
            input_frames,
            output_frames,
            engine,
        })
    }

    /// Input sample rate in Hz.
    pub fn input_rate(&self) -> u32 {
        self.input_rate
    }

    /// Output sample rate in Hz.
    pub fn output_rate(&self) -> u32 {
        self.output_rate
    }

    /// Samples `process` consumes per call.
    pub fn input_frames(&self) -> usize {
        self.input_frames
    }

    /// Samples `process` produces per call.
    pub fn output_frames(&self) -> usize {
        self.output_frames
    }

    /// Whether input and output rates are equal and samples are copied through.
    pub fn is_passthrough(&self) -> bool {
        matches!(self.engine, Engine::Passthrough)
    }

    /// Delay the resampler adds, in output samples.
    pub fn latency_samples(&self) -> usize {
        match &self.engine {
            Engine::Passthrough => 0,
            Engine::Fft { resampler, .. } => resampler.output_delay(),
        }
    }

    /// Delay the resampler adds, as time.
    pub fn latency(&self) -> Duration {
        Duration::from_secs_f64(self.latency_samples() as f64 / f64::from(self.output_rate))
    }

    /// Clears the filter history, e.g. after a barge-in flush.
    pub fn reset(&mut self) {
        if let Engine::Fft { resampler, .. } = &mut self.engine {
            resampler.reset();
        }
    }

    /// Resamples one chunk into `output` and returns the samples written (`output_frames`).
    ///
    /// `input` may be shorter than `input_frames` for the last chunk of a
    /// stream; the rest is treated as silence. `output` must hold at least
    /// `output_frames` samples.
    pub fn process(&mut self, input: &[i16], output: &mut [i16]) -> Result<usize, MediaError> {
        if input.len() > self.input_frames {
            return Err(MediaError::BufferLength {
                expected: self.input_frames,
                actual: input.len(),
            });
        }
        if output.len() < self.output_frames {
            return Err(MediaError::BufferLength {
                expected: self.output_frames,
                actual: output.len(),
            });
        }
        let frames_out = self.output_frames;
        match &mut self.engine {
            Engine::Passthrough => {
                output[..input.len()].copy_from_slice(input);
                output[input.len()..frames_out].fill(0);
            }
            Engine::Fft {
                resampler,
                input: input_f32,
                output: output_f32,
            } => {
                for (slot, &sample) in input_f32.iter_mut().zip(input) {
                    *slot = f32::from(sample) * I16_TO_F32;
                }
                input_f32[input.len()..].fill(0.0);
                let frames_in = input_f32.len();
                let adapter_in = InterleavedSlice::new(&input_f32[..], 1, frames_in)
                    .map_err(|e| MediaError::Resampler(e.to_string()))?;
                let mut adapter_out = InterleavedSlice::new_mut(&mut output_f32[..], 1, frames_out)
                    .map_err(|e| MediaError::Resampler(e.to_string()))?;
                resampler
                    .process_into_buffer(&adapter_in, &mut adapter_out, None)
                    .map_err(|e| MediaError::Resampler(e.to_string()))?;
                for (out, &value) in output.iter_mut().zip(output_f32.iter()) {
                    *out = crate::synth::saturate(value * 32768.0);
                }
            }
        }
        Ok(frames_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::ToneGenerator;

    /// Goertzel power of `frequency` in `samples`, normalised to the block's energy (1.0 = pure tone).
    fn tone_share(samples: &[i16], frequency: f32, rate: u32) -> f32 {
        let coefficient = 2.0 * (std::f32::consts::TAU * frequency / rate as f32).cos();
        let (mut s1, mut s2) = (0.0f64, 0.0f64);
        let mut energy = 0.0f64;
        for &x in samples {
            let x = f64::from(x);
            energy += x * x;
            let s0 = x + f64::from(coefficient) * s1 - s2;
            s2 = s1;
            s1 = s0;
        }
        let power = s1 * s1 + s2 * s2 - f64::from(coefficient) * s1 * s2;
        (2.0 * power / samples.len() as f64 / energy) as f32
    }

    fn rms(samples: &[i16]) -> f32 {
        let sum: f64 = samples.iter().map(|&s| f64::from(s).powi(2)).sum();
        (sum / samples.len() as f64).sqrt() as f32
    }

    #[test]
    fn chunk_sizes_and_latency_for_all_rate_pairs() {
        for &from in &SUPPORTED_RATES {
            for &to in &SUPPORTED_RATES {
                let resampler = StreamResampler::new(from, to).unwrap();
                assert_eq!(resampler.input_frames(), from as usize / 50);
                assert_eq!(resampler.output_frames(), to as usize / 50);
                assert_eq!(resampler.is_passthrough(), from == to);
                // One FFT block per chunk: at most a chunk (20 ms) of delay.
                assert!(
                    resampler.latency() <= Duration::from_millis(20),
                    "{from}->{to}"
                );
                if from != to {
                    assert!(resampler.latency_samples() > 0);
                }
            }
        }
        assert!(StreamResampler::new(11025, 8000).is_err());
        assert!(StreamResampler::with_chunk_ms(8000, 16000, 0).is_err());
        // 1 ms at 22.05 kHz is not a whole sample.
        assert!(StreamResampler::with_chunk_ms(22050, 8000, 1).is_err());
        assert_eq!(
            StreamResampler::with_chunk_ms(22050, 8000, 40)
                .unwrap()
                .input_frames(),
            882
        );
    }

    #[test]
    fn piper_22050_to_8k_keeps_tone_and_length() {
        let mut down = StreamResampler::new(22050, 8000).unwrap();
        let mut tone = ToneGenerator::new(22050, 440.0, -6.0);
        let mut chunk = [0i16; 441];
        let mut out = [0i16; 160];
        let (mut all_in, mut all) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            tone.fill(&mut chunk);
            assert_eq!(down.process(&chunk, &mut out).unwrap(), 160);
            all_in.extend_from_slice(&chunk);
            all.extend_from_slice(&out);
        }
        // Two seconds in, two seconds out: 441 samples make exactly 160.
        assert_eq!(all.len(), 16_000);
        assert!(tone_share(&all[800..], 440.0, 8000) > 0.95);
        let gain_db = 20.0 * (rms(&all[800..]) / rms(&all_in[2205..])).log10();
        assert!(gain_db.abs() < 0.5, "gain {gain_db} dB");
    }

    #[test]
    fn tone_survives_8k_to_16k_and_back() {
        let mut up = StreamResampler::new(8000, 16000).unwrap();
        let mut down = StreamResampler::new(16000, 8000).unwrap();
        let mut tone = ToneGenerator::new(8000, 1000.0, -6.0);
        let mut input = [0i16; 160];
        let mut wide = [0i16; 320];
        let mut back = [0i16; 160];
        let mut all_input = Vec::new();
        let mut all_wide = Vec::new();
        let mut all_back = Vec::new();
        for _ in 0..100 {
            tone.fill(&mut input);
            assert_eq!(up.process(&input, &mut wide).unwrap(), 320);
            assert_eq!(down.process(&wide, &mut back).unwrap(), 160);
            all_input.extend_from_slice(&input);
            all_wide.extend_from_slice(&wide);
            all_back.extend_from_slice(&back);
        }
        // Every frame in produced exactly one frame out: lengths stay locked over time.
        assert_eq!(all_wide.len(), 2 * all_input.len());
        assert_eq!(all_back.len(), all_input.len());
        // Skip the start-up delay, then the 1 kHz tone must dominate at both rates.
        let settled_wide = &all_wide[1600..];
        let settled_back = &all_back[800..];
        assert!(tone_share(settled_wide, 1000.0, 16000) > 0.95);
        assert!(tone_share(settled_back, 1000.0, 8000) > 0.95);
        assert!(tone_share(settled_back, 1500.0, 8000) < 0.01);
        let gain_db = 20.0 * (rms(settled_back) / rms(&all_input[800..])).log10();
        assert!(gain_db.abs() < 0.5, "gain {gain_db} dB");
    }

    #[test]
    fn tts_24k_to_8k_keeps_tone_and_drops_above_nyquist() {
        let mut down = StreamResampler::new(24000, 8000).unwrap();
        let mut in_band = ToneGenerator::new(24000, 1000.0, -6.0);
        let mut above = ToneGenerator::new(24000, 6000.0, -6.0);
        let mut chunk = [0i16; 480];
        let mut high = [0i16; 480];
        let mut out = [0i16; 160];
        let mut all = Vec::new();
        for _ in 0..50 {
            in_band.fill(&mut chunk);
            above.fill(&mut high);
            for (a, b) in chunk.iter_mut().zip(&high) {
                *a = a.saturating_add(*b) / 2;
            }
            down.process(&chunk, &mut out).unwrap();
            all.extend_from_slice(&out);
        }
        // The 6 kHz component cannot exist at 8 kHz; it must be filtered, not aliased to 2 kHz.
        assert!(tone_share(&all[800..], 1000.0, 8000) > 0.95);
        assert!(tone_share(&all[800..], 2000.0, 8000) < 0.01);
    }

    #[test]
    fn latency_matches_observed_delay() {
        let mut up = StreamResampler::new(8000, 16000).unwrap();
        let mut input = [0i16; 160];
        input[0] = 16000;
        let mut output = [0i16; 320];
        let mut all = Vec::new();
        up.process(&input, &mut output).unwrap();
        all.extend_from_slice(&output);
        up.process(&[0; 160], &mut output).unwrap();
        all.extend_from_slice(&output);
        let peak = all
            .iter()
            .enumerate()
            .max_by_key(|(_, s)| s.unsigned_abs())
            .map(|(i, _)| i)
            .unwrap_or_default();
        assert!(peak.abs_diff(up.latency_samples()) <= 1, "peak {peak}");
    }

    #[test]
    fn passthrough_copies_and_pads_partial_chunks() {
        let mut same = StreamResampler::new(8000, 8000).unwrap();
        let mut out = [7i16; 160];
        assert_eq!(same.process(&[1, 2, 3], &mut out).unwrap(), 160);
        assert_eq!(&out[..4], &[1, 2, 3, 0]);
        assert_eq!(same.latency(), Duration::ZERO);
        let mut up = StreamResampler::new(8000, 16000).unwrap();
        assert!(up.process(&[0; 161], &mut [0; 320]).is_err());
        assert!(up.process(&[0; 160], &mut [0; 319]).is_err());
        assert_eq!(up.process(&[0; 80], &mut [0; 320]).unwrap(), 320);
    }
}

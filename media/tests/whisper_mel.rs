//! The Whisper log-mel features Smart Turn reads, against Pipecat's own numpy extractor on
//! real speech: the clips of `media/tests/fixtures/smart_turn/clips.tsv`, whose reference
//! features `scripts/smart-turn-reference.sh` computed from exactly these 16 kHz samples.
//!
//! The reference keeps, per clip, the mean of every frame and of every band over the whole
//! 80 × 800 matrix, its maximum and minimum, and every value of the last 128 frames (the
//! speech before the pause and the pause), stored as i16 of value × 8192. Both sides compute
//! the spectrum in f64; they differ in the waveform's normalisation (numpy's float32 mean
//! and variance, ours in f64) and in the FFT's rounding, about 1e-6. The tolerance is 1e-4
//! (a tenth of the 1e-3 the model's inputs would need to move its probability in the
//! fourth decimal), plus the stored values' rounding of 1 / 16384.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/smart_turn_clips.rs"]
mod smart_turn_clips;

use serde_json::Value;
use voxline_media::whisper_mel::{FEATURES_LEN, Features, N_FRAMES, N_MELS, WhisperMel};

/// Largest difference allowed from the reference.
const TOLERANCE: f32 = 1e-4;

fn reference() -> (Value, Vec<i16>) {
    let dir = smart_turn_clips::fixtures_dir().join("smart_turn");
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let tails = std::fs::read(dir.join("features.i16"))
        .unwrap()
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    (json, tails)
}

fn max_diff(ours: impl IntoIterator<Item = f32>, theirs: impl IntoIterator<Item = f32>) -> f32 {
    ours.into_iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn features_match_pipecats_extractor_on_real_speech() {
    let (json, tails) = reference();
    let tail_frames = json["tail_frames"].as_u64().unwrap() as usize;
    let scale = json["tail_scale"].as_f64().unwrap() as f32;
    let clips = smart_turn_clips::load_all();
    let expected = json["clips"].as_array().unwrap();
    assert_eq!(clips.len(), expected.len(), "regenerate the reference");
    assert_eq!(tails.len(), clips.len() * N_MELS * tail_frames);

    let mut mel = WhisperMel::new();
    let mut buffer = vec![0.0f32; FEATURES_LEN];
    for (i, (clip, reference)) in clips.iter().zip(expected).enumerate() {
        assert_eq!(reference["name"], clip.name.as_str());
        assert_eq!(
            reference["samples"].as_u64().unwrap() as usize,
            clip.samples.len(),
            "{}: not the samples the reference was computed from",
            clip.name
        );
        let features: &mut Features = buffer.as_mut_slice().try_into().unwrap();
        mel.compute(&clip.samples, features);

        let frame_means = (0..N_FRAMES).map(|t| {
            (0..N_MELS)
                .map(|m| f64::from(features[m * N_FRAMES + t]))
                .sum::<f64>() as f32
                / N_MELS as f32
        });
        let band_means = (0..N_MELS).map(|m| {
            features[m * N_FRAMES..(m + 1) * N_FRAMES]
                .iter()
                .map(|&v| f64::from(v))
                .sum::<f64>() as f32
                / N_FRAMES as f32
        });
        let frames = max_diff(frame_means, floats(&reference["frame_means"]));
        let bands = max_diff(band_means, floats(&reference["band_means"]));
        let max = features.iter().copied().fold(f32::MIN, f32::max);
        let min = features.iter().copied().fold(f32::MAX, f32::min);
        let extremes = max_diff(
            [max, min],
            [
                reference["max"].as_f64().unwrap() as f32,
                reference["min"].as_f64().unwrap() as f32,
            ],
        );
        let stored = &tails[i * N_MELS * tail_frames..(i + 1) * N_MELS * tail_frames];
        let ours_tail = (0..N_MELS).flat_map(|m| {
            let row = &features[m * N_FRAMES..(m + 1) * N_FRAMES];
            row[N_FRAMES - tail_frames..].to_vec()
        });
        let tail = max_diff(ours_tail, stored.iter().map(|&q| f32::from(q) / scale));
        eprintln!(
            "{}: max |diff| frame means {frames:.2e}, band means {bands:.2e}, max/min {extremes:.2e}, last {tail_frames} frames {tail:.2e}",
            clip.name
        );
        assert!(frames <= TOLERANCE, "{}: frame means {frames}", clip.name);
        assert!(bands <= TOLERANCE, "{}: band means {bands}", clip.name);
        assert!(extremes <= TOLERANCE, "{}: max/min {extremes}", clip.name);
        let rounding = 0.5 / scale;
        assert!(
            tail <= TOLERANCE + rounding,
            "{}: last frames {tail}",
            clip.name
        );
    }
}

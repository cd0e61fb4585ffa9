//! CPU per Smart Turn evaluation on this machine: the Whisper features of one 8 s window,
//! and the model on ONNX Runtime (one intra-op thread) at batch 1, 4 and 8, each measured
//! as the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time, so other
//! load on the machine does not count.
//!
//!     scripts/smart-turn-model.sh --dir ~/.cache/voxline/models
//!     VOXLINE_SMART_TURN_MODEL=~/.cache/voxline/models/smart-turn-v3.2-cpu.onnx \
//!       cargo bench --bench smart_turn
//!
//! Without `VOXLINE_SMART_TURN_MODEL` it says so and measures only the features.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../media/tests/support/smart_turn_clips.rs"]
mod smart_turn_clips;

use std::path::PathBuf;
use std::time::Duration;

use voxline::providers::smart_turn::{RUNTIME_FILE, SmartTurnModel, thread_cpu_time};
use voxline_media::whisper_mel::{FEATURES_LEN, Features, WhisperMel};

/// Evaluations measured per batch size (after two unmeasured rounds).
const EVALUATIONS: usize = 24;

fn cpu() -> Duration {
    thread_cpu_time().expect("the thread's CPU clock")
}

fn main() {
    let clips = smart_turn_clips::load_all();
    let mut mel = WhisperMel::new();
    let mut features = vec![0.0f32; 8 * FEATURES_LEN];
    let fill = |mel: &mut WhisperMel, features: &mut [f32]| {
        for (i, slot) in features.chunks_exact_mut(FEATURES_LEN).enumerate() {
            let slot: &mut Features = slot.try_into().unwrap();
            mel.compute(&clips[i % clips.len()].samples, slot);
        }
    };
    fill(&mut mel, &mut features);
    let started = cpu();
    for _ in 0..EVALUATIONS / 8 {
        fill(&mut mel, &mut features);
    }
    let per_window = (cpu() - started) / EVALUATIONS as u32;
    println!(
        "features (80 x 800 of 8 s): {:.2} ms CPU each",
        per_window.as_secs_f64() * 1e3
    );

    let Some(model) = std::env::var_os("VOXLINE_SMART_TURN_MODEL").map(PathBuf::from) else {
        println!("model: skipped, VOXLINE_SMART_TURN_MODEL unset");
        return;
    };
    let runtime = std::env::var_os("VOXLINE_ONNXRUNTIME_LIB")
        .map_or_else(|| model.with_file_name(RUNTIME_FILE), PathBuf::from);
    let model = SmartTurnModel::open(&model, &runtime).expect("the pinned model loads");
    let mut runner = model.runner().unwrap();
    let mut probabilities = [0.0f32; 8];
    for batch in [1usize, 4, 8] {
        let input = &features[..batch * FEATURES_LEN];
        let output = &mut probabilities[..batch];
        for _ in 0..2 {
            runner.evaluate(input, output).unwrap();
        }
        let rounds = EVALUATIONS.div_ceil(batch);
        let mut fastest = Duration::MAX;
        let started = cpu();
        for _ in 0..rounds {
            let round = cpu();
            runner.evaluate(input, output).unwrap();
            fastest = fastest.min(cpu() - round);
        }
        let evaluations = (rounds * batch) as u32;
        let mean = (cpu() - started) / evaluations;
        println!(
            "model, batch {batch}: {:.1} ms CPU per evaluation (mean of {evaluations}; fastest batch {:.1} ms per evaluation)",
            mean.as_secs_f64() * 1e3,
            (fastest / batch as u32).as_secs_f64() * 1e3
        );
    }
}

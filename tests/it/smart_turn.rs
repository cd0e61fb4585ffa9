//! Smart Turn v3.2 on ONNX Runtime (`providers::smart_turn`) against Pipecat's own analyzer
//! on real speech: the clips of `media/tests/fixtures/smart_turn/`, whose probabilities
//! `scripts/smart-turn-reference.sh` computed with `LocalSmartTurnAnalyzerV3` (onnxruntime
//! 1.24.3, one thread) from exactly the samples built here.
//!
//! They need the model and the library `scripts/smart-turn-model.sh` installs: they run when
//! `VOXLINE_TEST_SMART_TURN_MODEL` names the model (the library is looked for beside it, or where
//! `VOXLINE_ONNXRUNTIME_LIB` says), as CI sets it, and otherwise say they are skipped.
//!
//! Tolerance: 1e-3 of probability. The runtime and its kernels are Pipecat's, so what is
//! left is the features' difference (about 1e-5, `media/tests/whisper_mel.rs`); onnxruntime
//! run without its graph optimizations already differs by 2.7e-2 on `karen-cooking`, so a
//! runtime that quantizes differently would not pass.
//!
//! The model is quantized, and onnxruntime picks its int8 kernels by the CPU (AMX, VNNI or
//! plain AVX2), which round differently: Pipecat itself gives `karen` 0.80 on one machine
//! and 0.94 on another. So the reference names the kernels it was computed with
//! (`cpu_kernels`), and the 1e-3 holds on a CPU of the same kind; on another, the verdicts
//! must agree and the probabilities be within 0.2, and the test says it ran loosely.

#[path = "../../media/tests/support/smart_turn_clips.rs"]
mod smart_turn_clips;

use std::path::PathBuf;

use serde_json::Value;
use smart_turn_clips::Clip;
use voxline::providers::smart_turn::{PoolSettings, RUNTIME_FILE, SmartTurnModel, SmartTurnPool};
use voxline_actors::providers::end_of_turn::EndOfTurnModel;
use voxline_media::whisper_mel::{FEATURES_LEN, Features, WhisperMel};

/// Largest difference allowed from Pipecat's probability, on the CPU kind it ran on.
const TOLERANCE: f32 = 1e-3;
/// Largest difference allowed where onnxruntime's int8 kernels differ from the reference's.
const OTHER_KERNELS_TOLERANCE: f32 = 0.2;

/// Which int8 kernels onnxruntime picks on this CPU, named as
/// `scripts/smart-turn-reference.py` names them.
fn cpu_kernels() -> &'static str {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|line| line.starts_with("flags"))
        .map(|line| line.split_whitespace().collect())
        .unwrap_or_default();
    let has = |flag: &str| flags.contains(&flag);
    if has("amx_int8") {
        "amx"
    } else if has("avx512_vnni") {
        "avx512-vnni"
    } else if has("avx_vnni") {
        "avx-vnni"
    } else if has("avx512f") {
        "avx512"
    } else {
        "avx2"
    }
}

/// The tolerance for this machine: exact where the reference's kernels are this CPU's.
fn tolerance() -> f32 {
    static TOLERANCE_HERE: std::sync::OnceLock<f32> = std::sync::OnceLock::new();
    *TOLERANCE_HERE.get_or_init(|| {
        let path = smart_turn_clips::fixtures_dir().join("smart_turn/reference.json");
        let reference: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let theirs = reference["cpu_kernels"].as_str().unwrap_or("unknown");
        let ours = cpu_kernels();
        if theirs == ours {
            TOLERANCE
        } else {
            eprintln!(
                "the reference was computed on {theirs} kernels, this CPU runs {ours}: \
                 probabilities checked within {OTHER_KERNELS_TOLERANCE} and verdicts exactly \
                 (scripts/smart-turn-reference.sh makes a reference for this CPU)"
            );
            OTHER_KERNELS_TOLERANCE
        }
    })
}

/// The installed model, or None after saying the test is skipped.
fn model(test: &str) -> Option<SmartTurnModel> {
    let Some(model) = std::env::var_os("VOXLINE_TEST_SMART_TURN_MODEL").map(PathBuf::from) else {
        eprintln!(
            "{test}: skipped, VOXLINE_TEST_SMART_TURN_MODEL unset (scripts/smart-turn-model.sh installs the model)"
        );
        return None;
    };
    let runtime = std::env::var_os("VOXLINE_ONNXRUNTIME_LIB")
        .map_or_else(|| model.with_file_name(RUNTIME_FILE), PathBuf::from);
    if !model.is_file() || !runtime.is_file() {
        eprintln!(
            "{test}: skipped, {} or {} missing (scripts/smart-turn-model.sh installs them)",
            model.display(),
            runtime.display()
        );
        return None;
    }
    Some(SmartTurnModel::open(&model, &runtime).expect("the pinned model loads"))
}

/// The clips with Pipecat's probability of each.
fn clips() -> Vec<(Clip, f32)> {
    let path = smart_turn_clips::fixtures_dir().join("smart_turn/reference.json");
    let reference: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let expected = reference["clips"].as_array().unwrap();
    let clips = smart_turn_clips::load_all();
    assert_eq!(clips.len(), expected.len(), "regenerate the reference");
    clips
        .into_iter()
        .zip(expected)
        .map(|(clip, reference)| {
            assert_eq!(reference["name"], clip.name.as_str());
            (clip, reference["probability"].as_f64().unwrap() as f32)
        })
        .collect()
}

/// The features of every clip, one matrix after another.
fn features(clips: &[(Clip, f32)]) -> Vec<f32> {
    let mut mel = WhisperMel::new();
    let mut all = vec![0.0f32; clips.len() * FEATURES_LEN];
    for ((clip, _), slot) in clips.iter().zip(all.chunks_exact_mut(FEATURES_LEN)) {
        let slot: &mut Features = slot.try_into().unwrap();
        mel.compute(&clip.samples, slot);
    }
    all
}

fn check(clip: &Clip, ours: f32, pipecat: f32) -> f32 {
    let diff = (ours - pipecat).abs();
    eprintln!(
        "{}: {ours:.6} (Pipecat {pipecat:.6}, |diff| {diff:.1e}): {}",
        clip.name, clip.description
    );
    assert!(
        diff <= tolerance(),
        "{}: {ours} against Pipecat's {pipecat}",
        clip.name
    );
    assert_eq!(ours > 0.5, clip.complete, "{}: verdict", clip.name);
    diff
}

#[test]
fn smart_turn_gives_pipecats_probabilities_on_real_speech() {
    let Some(model) = model("smart_turn_gives_pipecats_probabilities_on_real_speech") else {
        return;
    };
    let clips = clips();
    let features = features(&clips);
    let mut runner = model.runner().unwrap();
    let mut worst = 0.0f32;
    for ((clip, pipecat), matrix) in clips.iter().zip(features.chunks_exact(FEATURES_LEN)) {
        let mut probability = [0.0f32];
        runner.evaluate(matrix, &mut probability).unwrap();
        worst = worst.max(check(clip, probability[0], *pipecat));
    }
    eprintln!("max |diff| from Pipecat: {worst:.1e}");
    assert!(clips.iter().any(|(c, _)| c.complete) && clips.iter().any(|(c, _)| !c.complete));
}

#[test]
fn a_batch_gives_each_clip_its_own_probability() {
    let Some(model) = model("a_batch_gives_each_clip_its_own_probability") else {
        return;
    };
    let clips = clips();
    let features = features(&clips);
    let mut probabilities = vec![0.0f32; clips.len()];
    model
        .runner()
        .unwrap()
        .evaluate(&features, &mut probabilities)
        .unwrap();
    for ((clip, pipecat), ours) in clips.iter().zip(probabilities) {
        check(clip, ours, *pipecat);
    }
}

#[tokio::test]
async fn the_pool_answers_each_submission_with_its_own_verdict() {
    let Some(model) = model("the_pool_answers_each_submission_with_its_own_verdict") else {
        return;
    };
    let pool = SmartTurnPool::start(
        &model,
        PoolSettings {
            workers: 1,
            queue: 8,
            max_batch: 4,
        },
    )
    .unwrap();
    let clips = clips();
    let pending: Vec<_> = clips
        .iter()
        .map(|(clip, _)| pool.submit(&clip.samples).expect("room in the queue"))
        .collect();
    for ((clip, pipecat), verdict) in clips.iter().zip(pending) {
        let verdict = verdict.await.expect("a verdict");
        check(clip, verdict.probability, *pipecat);
        assert!(verdict.cpu > std::time::Duration::ZERO, "{}", clip.name);
    }
}

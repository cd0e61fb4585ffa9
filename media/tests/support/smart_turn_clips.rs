//! The Smart Turn clips (`media/tests/fixtures/smart_turn/clips.tsv`): real speech cut from
//! the μ-law fixtures and upsampled to the model's 16 kHz by `StreamResampler`, built the
//! same way by `media/tests/whisper_mel.rs`, the model tests in `tests/it/smart_turn.rs` and
//! `media/examples/smart_turn_clips.rs` (which writes them for the Python reference).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;
use std::path::{Path, PathBuf};

use voxline_media::g711::mulaw_to_linear;
use voxline_media::resample::StreamResampler;
use voxline_media::wav::WavInfo;

/// The fixtures' rate.
const SOURCE_RATE: u32 = 8_000;
/// The model's rate.
pub const RATE: u32 = 16_000;
/// The pause after the cut: the source's last 200 ms.
const PAUSE_SAMPLES: usize = 1_600;

/// One clip.
#[derive(Debug, Clone)]
pub struct Clip {
    /// Its name in the manifest and the reference.
    pub name: String,
    /// Whether onnxruntime calls it complete.
    pub complete: bool,
    /// What it says.
    pub description: String,
    /// 16 kHz mono, in [-1, 1).
    pub samples: Vec<f32>,
}

/// `media/tests/fixtures`, from the media crate or from the workspace's root crate.
pub fn fixtures_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if root.join("media").is_dir() {
        root.join("media/tests/fixtures")
    } else {
        root.join("tests/fixtures")
    }
}

/// Reads an 8 kHz mono μ-law WAV.
fn read_mulaw(bytes: &[u8]) -> Vec<i16> {
    let info = WavInfo::read(Cursor::new(bytes)).expect("a WAV header");
    assert_eq!((info.channels, info.sample_rate), (1, SOURCE_RATE));
    let start = usize::try_from(info.data_offset).unwrap();
    let end = start + usize::try_from(info.frames).unwrap();
    bytes[start..end]
        .iter()
        .map(|&b| mulaw_to_linear(b))
        .collect()
}

/// 8 kHz to 16 kHz through the call engine's resampler, 20 ms at a time, its delay
/// removed so the output lines up with the input.
fn upsample(input: &[i16]) -> Vec<f32> {
    let mut resampler = StreamResampler::new(SOURCE_RATE, RATE).unwrap();
    let delay = resampler.latency_samples();
    let wanted = input.len() * 2;
    let mut out = Vec::with_capacity(wanted + delay + resampler.output_frames());
    let mut chunk = vec![0i16; resampler.output_frames()];
    let mut chunks = input.chunks(resampler.input_frames());
    while out.len() < wanted + delay {
        let n = resampler
            .process(chunks.next().unwrap_or(&[]), &mut chunk)
            .unwrap();
        out.extend(chunk[..n].iter().map(|&s| f32::from(s) / 32_768.0));
    }
    out.drain(..delay);
    out.truncate(wanted);
    out
}

/// Every clip, in the manifest's order.
pub fn load_all() -> Vec<Clip> {
    let dir = fixtures_dir();
    let manifest = std::fs::read_to_string(dir.join("smart_turn/clips.tsv")).expect("clips.tsv");
    manifest
        .lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with("name\t") && !line.is_empty())
        .map(|line| {
            let columns: Vec<&str> = line.split('\t').collect();
            assert_eq!(columns.len(), 5, "{line}");
            let source = read_mulaw(&std::fs::read(dir.join(columns[1])).expect("source fixture"));
            let end = columns[2].parse::<usize>().expect("end_ms") * 8;
            let mut cut = source[..end].to_vec();
            cut.extend_from_slice(&source[source.len() - PAUSE_SAMPLES..]);
            Clip {
                name: columns[0].to_owned(),
                complete: match columns[3] {
                    "complete" => true,
                    "incomplete" => false,
                    other => panic!("verdict {other:?}"),
                },
                description: columns[4].to_owned(),
                samples: upsample(&cut),
            }
        })
        .collect()
}

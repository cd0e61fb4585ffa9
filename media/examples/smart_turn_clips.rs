//! Writes the Smart Turn clips (`media/tests/fixtures/smart_turn/clips.tsv`) as raw f32
//! little-endian 16 kHz files, `DIR/<name>.f32`, for `scripts/smart-turn-reference.py` to
//! compute the reference features and probabilities from exactly the samples the tests use.
//!
//!     cargo run -p voxline-media --example smart_turn_clips -- DIR

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/smart_turn_clips.rs"]
mod smart_turn_clips;

fn main() {
    let dir = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: smart_turn_clips DIR"),
    );
    std::fs::create_dir_all(&dir).unwrap();
    for clip in smart_turn_clips::load_all() {
        let bytes: Vec<u8> = clip.samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        std::fs::write(dir.join(format!("{}.f32", clip.name)), bytes).unwrap();
        println!("{}\t{} samples", clip.name, clip.samples.len());
    }
}

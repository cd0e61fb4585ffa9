//! The voice activity detector and endpointer on real speech: Piper's `en_US-joe-medium`
//! voice saying "My name is Mary Jones.", as the speaking sim callee sends it (synthesized
//! at 22,050 Hz by `scripts/local-models.sh`'s Piper server, resampled to 8 kHz by
//! `StreamResampler`, stored as μ-law in `media/tests/fixtures/vad/`). Piper's synthesis
//! is random, and takes 1 and 2 are ones that once lost the whole answer: a loud first
//! frame the voters missed lifted the noise floor over the words that followed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/amd_fixtures.rs"]
mod amd_fixtures;

use voxline_media::endpoint::{EndpointEvent, Endpointer, EndpointerConfig};
use voxline_media::vad::VoiceActivityDetector;

const FRAME: usize = 160;

/// The endpointer's events for a second of digital silence, the fixture, and a second of
/// silence, as the call loop runs them (20 ms frames at 8 kHz).
fn events_for(name: &str) -> Vec<EndpointEvent> {
    let path = format!("{}/tests/fixtures/vad/{name}", env!("CARGO_MANIFEST_DIR"));
    let speech = amd_fixtures::read_mulaw(&std::fs::read(&path).expect("fixture"));
    let mut audio = vec![0i16; 8_000];
    audio.extend_from_slice(&speech);
    audio.extend_from_slice(&[0; 8_000]);
    let mut vad = VoiceActivityDetector::new(8_000).unwrap();
    let mut endpointer = Endpointer::new(EndpointerConfig::default());
    audio
        .chunks(FRAME)
        .filter_map(|frame| endpointer.push(vad.is_speech(frame), 20))
        .collect()
}

#[test]
fn a_spoken_answer_after_silence_is_one_whole_utterance() {
    for take in 1..=3 {
        let name = format!("piper-my-name-is-mary-jones-{take}.wav");
        let events = events_for(&name);
        let [
            EndpointEvent::SpeechStart,
            EndpointEvent::SpeechEnd { speech_ms },
        ] = events[..]
        else {
            panic!("{name}: {events:?}");
        };
        // The words take about 1.3 s; an utterance cut at a missed word is shorter.
        assert!(speech_ms >= 1_100, "{name}: {speech_ms} ms of speech");
    }
}

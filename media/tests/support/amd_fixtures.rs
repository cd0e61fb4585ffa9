//! The answering-machine fixtures (`media/tests/fixtures/amd/`, made by
//! `scripts/amd-fixtures.sh`): loading them and running the detector over them, shared by
//! `media/tests/amd.rs` and `benches/amd.rs`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;
use std::path::PathBuf;

use voxline_media::amd::{AmdEvent, AmdSettings, AnsweringMachineDetector};
use voxline_media::g711::mulaw_to_linear;
use voxline_media::wav::WavInfo;

/// The fixture rate: what a phone line delivers.
pub const RATE: u32 = 8000;
/// Samples per 20 ms frame at `RATE`.
pub const FRAME: usize = 160;
/// WAVE format tag of G.711 μ-law.
const FORMAT_MULAW: u16 = 7;

/// What a fixture should be detected as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// A machine whose beep must be found.
    Beep,
    /// A machine that never beeps.
    GreetingEnded,
    /// A person.
    Human,
}

impl Expected {
    fn parse(text: &str) -> Self {
        match text {
            "beep" => Self::Beep,
            "greeting-ended" => Self::GreetingEnded,
            "human" => Self::Human,
            other => panic!("unknown outcome {other:?} in manifest.tsv"),
        }
    }

    /// Label used in reports.
    pub fn label(self) -> &'static str {
        match self {
            Self::Beep => "machine + beep",
            Self::GreetingEnded => "machine, no beep",
            Self::Human => "person",
        }
    }
}

/// One recorded call opening.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// File name.
    pub name: String,
    /// The right outcome.
    pub expected: Expected,
    /// Beep onset, end of the greeting, or end of the person's first utterance (ms).
    pub mark_ms: Option<u64>,
    /// Beep end (ms).
    pub mark_end_ms: Option<u64>,
    /// For a case the detector is known to get wrong, the outcome it gives instead.
    pub known_miss: Option<Expected>,
    /// What the file holds.
    pub description: String,
    /// 8 kHz mono PCM.
    pub samples: Vec<i16>,
}

/// The fixture folder.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/amd")
}

fn parse_ms(text: &str) -> Option<u64> {
    (text != "-").then(|| text.parse().expect("a time in ms"))
}

/// Reads an 8 kHz mono μ-law WAV.
pub fn read_mulaw(bytes: &[u8]) -> Vec<i16> {
    let info = WavInfo::read(Cursor::new(bytes)).expect("a WAV header");
    // sox writes the fmt chunk first, so its format tag sits at byte 20.
    let tag = u16::from_le_bytes([bytes[20], bytes[21]]);
    assert_eq!(tag, FORMAT_MULAW, "fixtures are μ-law");
    assert_eq!((info.channels, info.sample_rate), (1, RATE));
    let start = usize::try_from(info.data_offset).unwrap();
    let end = start + usize::try_from(info.frames).unwrap();
    bytes[start..end]
        .iter()
        .map(|&b| mulaw_to_linear(b))
        .collect()
}

/// Every fixture in the manifest, in its order.
pub fn load_all() -> Vec<Fixture> {
    let manifest = std::fs::read_to_string(dir().join("manifest.tsv")).expect("manifest.tsv");
    manifest
        .lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with("file\t") && !line.is_empty())
        .map(|line| {
            let columns: Vec<&str> = line.split('\t').collect();
            assert_eq!(columns.len(), 6, "{line}");
            let bytes = std::fs::read(dir().join(columns[0])).expect("fixture file");
            Fixture {
                name: columns[0].to_owned(),
                expected: Expected::parse(columns[1]),
                mark_ms: parse_ms(columns[2]),
                mark_end_ms: parse_ms(columns[3]),
                known_miss: (columns[4] != "-").then(|| Expected::parse(columns[4])),
                description: columns[5].to_owned(),
                samples: read_mulaw(&bytes),
            }
        })
        .collect()
}

/// The fixtures the detector gets right, the ones its timing is measured on.
pub fn load_detectable() -> Vec<Fixture> {
    load_all()
        .into_iter()
        .filter(|f| f.known_miss.is_none())
        .collect()
}

/// The events a run produced, each with the audio time (ms) at which `push` returned it.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Events in order.
    pub events: Vec<(AmdEvent, u64)>,
    /// Frames pushed until the detector was done (or the audio ran out).
    pub frames: usize,
}

impl Run {
    /// The outcome the engine would act on.
    pub fn outcome(&self) -> Option<Expected> {
        self.events.iter().find_map(|&(event, _)| match event {
            AmdEvent::Human => Some(Expected::Human),
            AmdEvent::Beep => Some(Expected::Beep),
            AmdEvent::GreetingEnded => Some(Expected::GreetingEnded),
            AmdEvent::Machine => None,
        })
    }

    /// When `event` was reported, in ms of audio.
    pub fn time_of(&self, event: AmdEvent) -> Option<u64> {
        self.events
            .iter()
            .find(|&&(e, _)| e == event)
            .map(|&(_, at)| at)
    }
}

/// Pushes `samples` in slices of `chunk` samples until the detector is done.
pub fn run_chunked(samples: &[i16], settings: AmdSettings, chunk: usize) -> Run {
    let mut detector = AnsweringMachineDetector::new(settings).unwrap();
    let mut run = Run::default();
    for slice in samples.chunks(chunk) {
        run.frames += 1;
        if let Some(event) = detector.push(slice) {
            run.events.push((event, detector.elapsed_ms()));
        }
        if detector.is_done() {
            break;
        }
    }
    // A long final slice may have left a second event queued.
    while !detector.is_done() {
        match detector.push(&[]) {
            Some(event) => run.events.push((event, detector.elapsed_ms())),
            None => break,
        }
    }
    run
}

/// Pushes the fixture in 20 ms frames, as the call loop does.
pub fn run(fixture: &Fixture, settings: AmdSettings) -> Run {
    run_chunked(&fixture.samples, settings, FRAME)
}

//! Answering-machine detection on the real-audio fixture set (`media/tests/fixtures/amd/`,
//! espeak-ng speech over line noise, 8 kHz μ-law): accuracy per class, how long after the
//! beep's onset the `Beep` event comes, how long after a person stops talking `Human`
//! comes, and the CPU one 20 ms frame costs.
//!
//!   cargo bench -p voxline-media --bench amd

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../media/tests/support/amd_fixtures.rs"]
mod amd_fixtures;

use std::hint::black_box;
use std::time::{Duration, Instant};

use amd_fixtures::{Expected, FRAME, Fixture, load_all, run};
use voxline_media::amd::{AmdEvent, AmdSettings, AnsweringMachineDetector};

/// Timing rounds over the whole set; the median round is reported.
const ROUNDS: usize = 15;

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// CPU per frame while the detector is still deciding (frames after it is done cost nothing).
fn time_per_frame(fixtures: &[Fixture], settings: AmdSettings) -> (Duration, usize) {
    let mut spent = Duration::ZERO;
    let mut frames = 0;
    for fixture in fixtures {
        let mut detector = AnsweringMachineDetector::new(settings).unwrap();
        let started = Instant::now();
        for frame in fixture.samples.chunks(FRAME) {
            black_box(detector.push(black_box(frame)));
            frames += 1;
            if detector.is_done() {
                break;
            }
        }
        spent += started.elapsed();
    }
    (spent, frames)
}

fn main() {
    let settings = AmdSettings::default();
    let fixtures = load_all();
    println!(
        "Answering-machine detection on {} fixtures (default settings)\n",
        fixtures.len()
    );
    println!(
        "{:<34} {:<17} {:<17} events (ms of audio)",
        "fixture", "expected", "detected"
    );
    let classes = [Expected::Beep, Expected::GreetingEnded, Expected::Human];
    let mut correct = [0usize; 3];
    let mut total = [0usize; 3];
    let mut after_onset = Vec::new();
    let mut after_end = Vec::new();
    let mut after_utterance = Vec::new();
    for fixture in &fixtures {
        let result = run(fixture, settings);
        let class = classes.iter().position(|&c| c == fixture.expected).unwrap();
        total[class] += 1;
        let outcome = result.outcome();
        if outcome == Some(fixture.expected) {
            correct[class] += 1;
        }
        if let (Some(at), Some(onset), Some(end)) = (
            result.time_of(AmdEvent::Beep),
            fixture.mark_ms,
            fixture.mark_end_ms,
        ) {
            after_onset.push(at.saturating_sub(onset));
            after_end.push(at.saturating_sub(end));
        }
        if let (Some(at), Some(end), Expected::Human) = (
            result.time_of(AmdEvent::Human),
            fixture.mark_ms,
            fixture.expected,
        ) {
            after_utterance.push(at.saturating_sub(end));
        }
        println!(
            "{:<34} {:<17} {:<17} {:?}{}",
            fixture.name,
            fixture.expected.label(),
            outcome.map_or("undecided", Expected::label),
            result.events,
            if fixture.known_miss.is_some() {
                "  (known limit)"
            } else {
                ""
            }
        );
    }
    println!("\n| class | correct |");
    println!("|---|---|");
    for (k, class) in classes.iter().enumerate() {
        println!("| {} | {}/{} |", class.label(), correct[k], total[k]);
    }
    println!(
        "| all | {}/{} |",
        correct.iter().sum::<usize>(),
        total.iter().sum::<usize>()
    );
    let max = |values: &[u64]| values.iter().copied().max().unwrap_or(0);
    let (onset_max, end_max, utterance_max) =
        (max(&after_onset), max(&after_end), max(&after_utterance));
    println!("\n| decision time | median | max |");
    println!("|---|---|---|");
    println!(
        "| Beep after the beep's onset (beeps 250–1000 ms) | {} ms | {onset_max} ms |",
        median(&mut after_onset)
    );
    println!(
        "| Beep after the beep's end | {} ms | {end_max} ms |",
        median(&mut after_end)
    );
    println!(
        "| Human after the person's first utterance ends | {} ms | {utterance_max} ms |",
        median(&mut after_utterance)
    );

    let mut per_frame_ns = Vec::with_capacity(ROUNDS);
    let mut frames = 0;
    for _ in 0..ROUNDS {
        let (spent, counted) = time_per_frame(&fixtures, settings);
        frames = counted;
        per_frame_ns
            .push(u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX) / counted.max(1) as u64);
    }
    let per_frame = median(&mut per_frame_ns);
    println!(
        "\nCPU: {:.2} µs per 20 ms frame while deciding (median of {ROUNDS} rounds over {frames} frames; nothing once done)",
        per_frame as f64 / 1000.0
    );
}

//! The answering-machine detector on real audio: espeak-ng greetings and people over line
//! noise, beeps of several frequencies and lengths, stored as 8 kHz μ-law
//! (`media/tests/fixtures/amd/`, made by `scripts/amd-fixtures.sh`).
//!
//! Timing is audio time: the milliseconds of audio pushed when `push` returned the event.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/amd_fixtures.rs"]
mod amd_fixtures;

use amd_fixtures::{Expected, Fixture, Run, load_all, load_detectable, run, run_chunked};
use voxline_media::amd::{AmdEvent, AmdSettings};
use voxline_media::resample::StreamResampler;

/// How late a beep may be reported after the beep's end.
const BEEP_REPORT_WITHIN_MS: u64 = 300;

fn report(fixture: &Fixture, run: &Run) -> String {
    format!(
        "{} ({}): events {:?}",
        fixture.name, fixture.description, run.events
    )
}

#[test]
fn the_fixture_set_covers_every_case_the_issue_names() {
    let fixtures = load_all();
    let count = |expected| fixtures.iter().filter(|f| f.expected == expected).count();
    assert!(count(Expected::Beep) >= 5);
    assert!(count(Expected::GreetingEnded) >= 1);
    assert!(count(Expected::Human) >= 5);
    for name in [
        "human-hello.wav",
        "human-talks-long.wav",
        "human-tone-inside-speech.wav",
        "human-tone-between-words.wav",
    ] {
        assert!(fixtures.iter().any(|f| f.name == name), "{name}");
    }
    for fixture in &fixtures {
        assert!(fixture.samples.len() > 8000 * 3, "{}", fixture.name);
    }
}

#[test]
fn every_fixture_gets_its_verdict() {
    let mut wrong = Vec::new();
    for fixture in load_all() {
        let run = run(&fixture, AmdSettings::default());
        if run.outcome() != Some(fixture.known_miss.unwrap_or(fixture.expected)) {
            wrong.push(report(&fixture, &run));
        }
    }
    assert!(wrong.is_empty(), "wrong verdicts:\n{}", wrong.join("\n"));
}

#[test]
fn the_known_misses_are_still_missed_as_documented() {
    // The README names these limits; if the detector learns to handle one, this fails so
    // the manifest's known_miss column and the README are brought up to date.
    let misses: Vec<Fixture> = load_all()
        .into_iter()
        .filter(|f| f.known_miss.is_some())
        .collect();
    assert_eq!(misses.len(), 2);
    for fixture in misses {
        let run = run(&fixture, AmdSettings::default());
        assert_eq!(
            run.outcome(),
            fixture.known_miss,
            "{}",
            report(&fixture, &run)
        );
        assert_ne!(run.outcome(), Some(fixture.expected));
    }
}

#[test]
fn events_come_in_the_documented_order() {
    for fixture in load_all() {
        let run = run(&fixture, AmdSettings::default());
        let kinds: Vec<AmdEvent> = run.events.iter().map(|&(e, _)| e).collect();
        let allowed = matches!(
            kinds.as_slice(),
            [AmdEvent::Human]
                | [AmdEvent::Beep]
                | [AmdEvent::Machine, AmdEvent::Beep]
                | [AmdEvent::Machine, AmdEvent::GreetingEnded]
        );
        assert!(allowed, "{}", report(&fixture, &run));
    }
}

#[test]
fn beeps_are_reported_within_300_ms_of_their_end() {
    for fixture in load_detectable()
        .into_iter()
        .filter(|f| f.expected == Expected::Beep)
    {
        let run = run(&fixture, AmdSettings::default());
        let beep_end = fixture.mark_end_ms.unwrap();
        let at = run.time_of(AmdEvent::Beep).unwrap_or(u64::MAX);
        assert!(
            (beep_end..=beep_end + BEEP_REPORT_WITHIN_MS).contains(&at),
            "beep ended at {beep_end} ms; {}",
            report(&fixture, &run)
        );
        if let Some(machine_at) = run.time_of(AmdEvent::Machine) {
            assert!(
                machine_at < beep_end,
                "the greeting itself shows a machine; {}",
                report(&fixture, &run)
            );
        }
    }
}

#[test]
fn long_greetings_are_called_machines_before_the_beep() {
    for fixture in load_detectable()
        .into_iter()
        .filter(|f| f.expected == Expected::Beep && !f.name.contains("short"))
    {
        let run = run(&fixture, AmdSettings::default());
        let machine_at = run.time_of(AmdEvent::Machine);
        assert!(
            machine_at.is_some_and(|at| at < fixture.mark_ms.unwrap()),
            "{}",
            report(&fixture, &run)
        );
    }
}

#[test]
fn a_greeting_without_beep_ends_after_the_configured_silence() {
    let settings = AmdSettings::default();
    let silence = u64::from(settings.greeting_end_silence_ms);
    for fixture in load_detectable()
        .into_iter()
        .filter(|f| f.expected == Expected::GreetingEnded)
    {
        let run = run(&fixture, settings);
        let greeting_end = fixture.mark_ms.unwrap();
        let at = run.time_of(AmdEvent::GreetingEnded).unwrap_or(u64::MAX);
        assert!(
            // The VAD may hear the greeting's trailing breath or consonant as silence.
            (greeting_end + silence - 300..=greeting_end + silence + 400).contains(&at),
            "greeting ended at {greeting_end} ms; {}",
            report(&fixture, &run)
        );
    }
}

#[test]
fn people_are_recognised_soon_after_they_stop_talking() {
    let settings = AmdSettings::default();
    for fixture in load_detectable()
        .into_iter()
        .filter(|f| f.expected == Expected::Human)
    {
        let run = run(&fixture, settings);
        let at = run.time_of(AmdEvent::Human).unwrap_or(u64::MAX);
        let deadline = match fixture.mark_ms {
            Some(first_utterance_end) => {
                first_utterance_end + u64::from(settings.reply_pause_ms) + 400
            }
            None => u64::from(settings.decision_ms),
        };
        assert!(
            at <= deadline,
            "due by {deadline} ms; {}",
            report(&fixture, &run)
        );
    }
}

#[test]
fn a_tone_inside_speech_is_not_a_beep_even_while_still_listening() {
    // Settings under which no person is ever recognised, so the detector keeps looking for
    // a beep through the whole file: only the tone's own context can tell it apart.
    let settings = AmdSettings {
        reply_pause_ms: u32::MAX,
        decision_ms: u32::MAX,
        machine_greeting_ms: u32::MAX,
        ..AmdSettings::default()
    };
    let fixtures: Vec<Fixture> = load_all()
        .into_iter()
        .filter(|f| f.name.starts_with("human-tone"))
        .collect();
    assert_eq!(fixtures.len(), 2);
    for fixture in fixtures {
        let run = run(&fixture, settings);
        assert_eq!(
            run.time_of(AmdEvent::Beep),
            None,
            "{}",
            report(&fixture, &run)
        );
    }
}

#[test]
fn slice_lengths_do_not_change_the_events() {
    for fixture in load_all() {
        let kinds = |run: Run| run.events.iter().map(|&(e, _)| e).collect::<Vec<_>>();
        let framed = kinds(run(&fixture, AmdSettings::default()));
        for chunk in [37, 97, 1000, fixture.samples.len()] {
            let chunked = kinds(run_chunked(&fixture.samples, AmdSettings::default(), chunk));
            assert_eq!(chunked, framed, "{} in slices of {chunk}", fixture.name);
        }
    }
}

#[test]
fn sixteen_khz_audio_gets_the_same_verdicts() {
    let settings = AmdSettings {
        sample_rate: 16_000,
        ..AmdSettings::default()
    };
    let mut wrong = Vec::new();
    for fixture in load_all() {
        let mut resampler = StreamResampler::new(8000, 16_000).unwrap();
        let mut upsampled = Vec::with_capacity(fixture.samples.len() * 2);
        let mut out = vec![0i16; resampler.output_frames()];
        for frame in fixture.samples.chunks(resampler.input_frames()) {
            let written = resampler.process(frame, &mut out).unwrap();
            upsampled.extend_from_slice(&out[..written]);
        }
        let run = run_chunked(&upsampled, settings, 320);
        if run.outcome() != Some(fixture.known_miss.unwrap_or(fixture.expected)) {
            wrong.push(report(&fixture, &run));
        }
    }
    assert!(
        wrong.is_empty(),
        "wrong verdicts at 16 kHz:\n{}",
        wrong.join("\n")
    );
}

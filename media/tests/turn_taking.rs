//! The turn-taking machine on real speech: Piper saying "My name is Mary Jones." (the VAD
//! fixtures, `media/tests/fixtures/vad/`), through the real VAD, 20 ms at a time, as the
//! call loop runs them. Pause clips are made here by splicing silence into the answer at
//! its quietest point between "My name is" and "Mary Jones".

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/amd_fixtures.rs"]
mod amd_fixtures;

use voxline_media::turn_taking::{
    AnswerKind, EndReason, ModelVerdict, TurnAction, TurnConfig, TurnMode, TurnTaking,
};
use voxline_media::vad::VoiceActivityDetector;

const FRAME: usize = 160;
const RATE: usize = 8_000;

/// Take `take` of the fixture, as 8 kHz samples.
fn answer(take: u32) -> Vec<i16> {
    let path = format!(
        "{}/tests/fixtures/vad/piper-my-name-is-mary-jones-{take}.wav",
        env!("CARGO_MANIFEST_DIR")
    );
    amd_fixtures::read_mulaw(&std::fs::read(path).expect("fixture"))
}

fn rms(frame: &[i16]) -> f64 {
    (frame.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / frame.len() as f64).sqrt()
}

/// Where the words are: the first and last 20 ms frame louder than -40 dBFS.
fn speech_span(audio: &[i16]) -> (usize, usize) {
    let loud: Vec<usize> = audio
        .chunks(FRAME)
        .enumerate()
        .filter(|(_, f)| rms(f) > 330.0)
        .map(|(i, _)| i * FRAME)
        .collect();
    (loud[0], loud[loud.len() - 1] + FRAME)
}

/// A clip: 1 s of silence, the answer with `pause_ms` of silence spliced in at its quietest
/// frame in the middle third of the words (a word gap), and 1.5 s of silence. Returns the
/// clip, where the pause starts and where the words end (sample offsets).
fn clip(take: u32, pause_ms: usize) -> (Vec<i16>, usize, usize) {
    let speech = answer(take);
    let (start, end) = speech_span(&speech);
    let third = (end - start) / 3;
    let split = (start + third..end - third)
        .step_by(FRAME)
        .min_by(|&a, &b| {
            rms(&speech[a..a + FRAME])
                .partial_cmp(&rms(&speech[b..b + FRAME]))
                .unwrap()
        })
        .unwrap();
    let mut audio = vec![0i16; RATE];
    audio.extend_from_slice(&speech[..split]);
    let pause_at = audio.len();
    audio.resize(audio.len() + pause_ms * RATE / 1000, 0);
    audio.extend_from_slice(&speech[split..]);
    let words_end = RATE + end + pause_ms * RATE / 1000;
    audio.resize(audio.len() + RATE * 3 / 2, 0);
    (audio, pause_at, words_end)
}

/// Something that happens at a sample offset of the clip besides its audio.
enum Cue {
    /// An interim transcript.
    Words(&'static str),
}

/// Runs the clip through the VAD and the machine; the actions with their sample offsets.
/// Model answers come the frame after the question when `model` is given (`None` answers
/// no question: there is no model).
fn run(
    machine: &mut TurnTaking,
    audio: &[i16],
    cues: &[(usize, Cue)],
    model: Option<&dyn Fn(usize) -> ModelVerdict>,
) -> Vec<(usize, TurnAction)> {
    let mut vad = VoiceActivityDetector::new(8_000).unwrap();
    let mut log = Vec::new();
    let mut asked = None;
    for (index, frame) in audio.chunks(FRAME).enumerate() {
        let at = index * FRAME;
        for (cue_at, cue) in cues {
            if (at..at + FRAME).contains(cue_at) {
                let Cue::Words(text) = cue;
                let actions = machine.transcript(text, false);
                log.extend(actions.into_iter().map(|a| (at, a)));
            }
        }
        if let (Some(ask), Some(model)) = (asked.take(), model) {
            let actions = machine.model_verdict(ask, model(at));
            log.extend(actions.into_iter().map(|a| (at, a)));
        }
        let actions = machine.push_frame(vad.is_speech(frame));
        for action in actions {
            if let TurnAction::AskModel { ask } = action {
                asked = Some(ask);
            }
            log.push((at, action));
        }
    }
    log
}

fn ends(log: &[(usize, TurnAction)]) -> Vec<(usize, EndReason)> {
    log.iter()
        .filter_map(|(at, a)| match a {
            TurnAction::EndOfTurn { reason, .. } => Some((*at, *reason)),
            _ => None,
        })
        .collect()
}

fn ms(samples: usize) -> usize {
    samples * 1000 / RATE
}

#[test]
fn the_silence_rule_cuts_in_on_a_pause_that_smart_turns_wait_through() {
    for take in 1..=3 {
        let (audio, pause_at, words_end) = clip(take, 1_200);

        // Today's rule: 600 ms into the pause the turn is over, and the rest is a second turn.
        let mut silence = TurnTaking::new(TurnConfig::default(), false);
        let log = run(&mut silence, &audio, &[], None);
        assert_eq!(ends(&log).len(), 2, "take {take}: {log:?}");
        assert!(ends(&log)[0].0 < pause_at + 1_200 * RATE / 1000);

        // Smart, no model: the words at the pause say wait; the complete answer ends at
        // the short pause after it.
        let mut smart = TurnTaking::new(
            TurnConfig {
                mode: TurnMode::Smart,
                ..TurnConfig::default()
            },
            false,
        );
        let cues = [
            (pause_at, Cue::Words("my name is")),
            (words_end, Cue::Words("my name is Mary Jones.")),
        ];
        let log = run(&mut smart, &audio, &cues, None);
        let ends = ends(&log);
        assert_eq!(ends.len(), 1, "take {take}: {log:?}");
        let (at, reason) = ends[0];
        assert_eq!(reason, EndReason::Text);
        let latency = ms(at.saturating_sub(words_end));
        assert!(
            at > words_end && latency <= 300,
            "take {take}: ended {latency} ms after the words"
        );
    }
}

#[test]
fn with_no_words_the_model_holds_the_pause_and_the_end_comes_at_the_silence_rule() {
    // A recognizer without interim results and no peek: only the audio model can tell the
    // pause from the end. It calls the pause incomplete, which holds it open past the
    // silence rule; it calls the end complete, which ends it at the silence rule (the model
    // never ends a turn earlier).
    for take in 1..=3 {
        let (audio, pause_at, words_end) = clip(take, 1_500);
        let mut smart = TurnTaking::new(
            TurnConfig {
                mode: TurnMode::Smart,
                ..TurnConfig::default()
            },
            true,
        );
        let model = |at: usize| {
            ModelVerdict::Probability(if at < words_end - RATE / 2 { 0.1 } else { 0.8 })
        };
        let log = run(&mut smart, &audio, &[], Some(&model));
        let asks: Vec<usize> = log
            .iter()
            .filter(|(_, a)| matches!(a, TurnAction::AskModel { .. }))
            .map(|(at, _)| *at)
            .collect();
        assert_eq!(
            asks.len(),
            2,
            "take {take}: one question per pause: {log:?}"
        );
        assert!(asks[0] > pause_at && asks[0] < pause_at + RATE / 2);
        let ends = ends(&log);
        assert_eq!(ends.len(), 1, "take {take}: {log:?}");
        assert_eq!(ends[0].1, EndReason::Model);
        let latency = ms(ends[0].0 - words_end);
        assert!(
            (400..=700).contains(&latency),
            "take {take}: ended {latency} ms after the words: {ends:?}"
        );

        // The same pause, the model saturated: the silence rule, as today.
        let mut saturated = TurnTaking::new(
            TurnConfig {
                mode: TurnMode::Smart,
                ..TurnConfig::default()
            },
            true,
        );
        let log = run(
            &mut saturated,
            &audio,
            &[],
            Some(&|_| ModelVerdict::Unavailable),
        );
        assert!(
            ends_all(&log, EndReason::SilenceFallback) == 2,
            "take {take}: {log:?}"
        );
    }
}

fn ends_all(log: &[(usize, TurnAction)], reason: EndReason) -> usize {
    ends(log).iter().filter(|(_, r)| *r == reason).count()
}

#[test]
fn an_asked_phone_number_read_in_groups_is_one_turn() {
    // The answer stands in for a group of digits: what matters is the audio's pauses and
    // the words the recognizer gives at each.
    let (first, pause_at, first_end) = clip(1, 1_000);
    let (second, second_pause, second_end) = clip(2, 1_000);
    let mut audio = first[..first_end + RATE / 10].to_vec();
    let offset = audio.len();
    audio.extend_from_slice(&second[RATE / 2..]);
    let shift = |at: usize| at + offset - RATE / 2;
    let mut smart = TurnTaking::new(
        TurnConfig {
            mode: TurnMode::Smart,
            ..TurnConfig::default()
        },
        true,
    );
    smart.expect_answer(AnswerKind::asked_by("And your mobile number?"));
    let cues = [
        (pause_at, Cue::Words("nine eight seven")),
        (first_end, Cue::Words("nine eight seven six five")),
        (
            shift(second_pause),
            Cue::Words("nine eight seven six five four three"),
        ),
        (
            shift(second_end),
            Cue::Words("nine eight seven six five four three two one zero"),
        ),
    ];
    // A model that calls every pause complete: the digits alone must hold the turn.
    let log = run(
        &mut smart,
        &audio,
        &cues,
        Some(&|_| ModelVerdict::Probability(0.99)),
    );
    let ends = ends(&log);
    assert_eq!(ends.len(), 1, "{log:?}");
    assert_eq!(ends[0].1, EndReason::Text);
    assert!(ends[0].0 > shift(second_end));
    assert!(
        !log.iter()
            .any(|(_, a)| matches!(a, TurnAction::AskModel { .. })),
        "digits said wait or complete: the model was never needed"
    );
}

#[test]
fn talk_over_the_agent_pauses_it_at_the_onset_then_yields_or_resumes_on_the_words() {
    for take in 1..=3 {
        let speech = answer(take);
        let (start, _) = speech_span(&speech);
        let mut audio = vec![0i16; RATE];
        audio.extend_from_slice(&speech);
        audio.resize(audio.len() + RATE * 2, 0);
        let onset = RATE + start;

        // The words are not a backchannel: the agent yields.
        let mut machine = TurnTaking::new(TurnConfig::smart(), false);
        assert!(machine.agent_started().is_empty());
        let first_word = onset + RATE * 3 / 10;
        let log = run(
            &mut machine,
            &audio,
            &[(first_word, Cue::Words("my"))],
            None,
        );
        let pause = log
            .iter()
            .find(|(_, a)| *a == TurnAction::PauseAgent)
            .map(|(at, _)| *at)
            .expect("paused");
        assert!(
            pause > onset && ms(pause - onset) <= 200,
            "take {take}: paused {} ms after the speech began",
            ms(pause.saturating_sub(onset))
        );
        let yielded = log
            .iter()
            .find(|(_, a)| *a == TurnAction::YieldTurn)
            .map(|(at, _)| *at)
            .expect("yielded");
        assert_eq!(yielded, first_word - first_word % FRAME);
        assert!(!log.iter().any(|(_, a)| *a == TurnAction::ResumeAgent));

        // Heard as "mm-hm" (a backchannel): the agent resumes once the caller is quiet, and
        // the talk is not a turn.
        let mut short = vec![0i16; RATE];
        short.extend_from_slice(&speech[..start + RATE * 6 / 10]);
        short.resize(short.len() + RATE * 2, 0);
        let mut machine = TurnTaking::new(TurnConfig::smart(), false);
        machine.agent_started();
        let (_, end) = speech_span(&short);
        let log = run(&mut machine, &short, &[(end, Cue::Words("mm-hm"))], None);
        let resumed = log
            .iter()
            .find(|(_, a)| *a == TurnAction::ResumeAgent)
            .map(|(at, _)| *at)
            .expect("resumed");
        assert!(resumed > end && ms(resumed - end) <= 400, "take {take}");
        assert!(
            !log.iter()
                .any(|(_, a)| matches!(a, TurnAction::YieldTurn | TurnAction::EndOfTurn { .. })),
            "take {take}: {log:?}"
        );
    }
}

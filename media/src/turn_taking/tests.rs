//! The state machine's rules, one by one, on VAD decisions and transcripts given by hand.

use super::*;
use crate::endpoint::{EndpointEvent, Endpointer};

/// Drives a machine through time and keeps every action with the time (ms) it came at.
struct Run {
    machine: TurnTaking,
    now: u32,
    log: Vec<(u32, TurnAction)>,
}

impl Run {
    fn new(config: TurnConfig, model: bool) -> Self {
        Self {
            machine: TurnTaking::new(config, model),
            now: 0,
            log: Vec::new(),
        }
    }

    fn keep(&mut self, actions: Actions) {
        let now = self.now;
        self.log.extend(actions.into_iter().map(|a| (now, a)));
    }

    /// `ms` of speech or silence, frame by frame.
    fn frames(&mut self, speech: bool, ms: u32) -> &mut Self {
        for _ in 0..ms / FRAME_MS {
            self.now += FRAME_MS;
            let actions = self.machine.push_frame(speech);
            self.keep(actions);
        }
        self
    }

    fn speak(&mut self, ms: u32) -> &mut Self {
        self.frames(true, ms)
    }

    fn quiet(&mut self, ms: u32) -> &mut Self {
        self.frames(false, ms)
    }

    fn interim(&mut self, text: &str) -> &mut Self {
        let actions = self.machine.transcript(text, false);
        self.keep(actions);
        self
    }

    fn agent(&mut self) -> &mut Self {
        let actions = self.machine.agent_started();
        self.keep(actions);
        self
    }

    /// The last `AskModel`'s id.
    fn last_ask(&self) -> AskId {
        self.log
            .iter()
            .rev()
            .find_map(|(_, a)| match a {
                TurnAction::AskModel { ask } => Some(*ask),
                _ => None,
            })
            .expect("the model was asked")
    }

    fn verdict(&mut self, verdict: ModelVerdict) -> &mut Self {
        let ask = self.last_ask();
        let actions = self.machine.model_verdict(ask, verdict);
        self.keep(actions);
        self
    }

    /// When the turn ended, and why.
    fn ends(&self) -> Vec<(u32, EndReason)> {
        self.log
            .iter()
            .filter_map(|(at, a)| match a {
                TurnAction::EndOfTurn { reason, .. } => Some((*at, *reason)),
                _ => None,
            })
            .collect()
    }

    /// The times `kind` of action came.
    fn times(&self, kind: TurnAction) -> Vec<u32> {
        self.log
            .iter()
            .filter(|(_, a)| std::mem::discriminant(a) == std::mem::discriminant(&kind))
            .map(|(at, _)| *at)
            .collect()
    }
}

const ASK: TurnAction = TurnAction::AskModel { ask: AskId(0) };
const PAUSE: TurnAction = TurnAction::PauseAgent;
const RESUME: TurnAction = TurnAction::ResumeAgent;
const YIELD: TurnAction = TurnAction::YieldTurn;
const DISCARD: TurnAction = TurnAction::Discard {
    speech_ms: 0,
    backchannel: false,
};

fn smart_without_interruptions() -> TurnConfig {
    TurnConfig {
        mode: TurnMode::Smart,
        ..TurnConfig::default()
    }
}

fn words() -> TurnConfig {
    TurnConfig::smart()
}

#[test]
fn silence_mode_ends_and_discards_exactly_as_the_endpointer_did() {
    // Runs of speech and silence, each a multiple of 20 ms, the agent quiet.
    let patterns: [&[(bool, u32)]; 4] = [
        &[
            (false, 200),
            (true, 800),
            (false, 300),
            (true, 400),
            (false, 1000),
        ],
        &[(true, 200), (false, 800), (true, 60), (false, 800)],
        &[
            (true, 120),
            (false, 80),
            (true, 40),
            (false, 580),
            (true, 20),
            (false, 620),
        ],
        &[
            (true, 2000),
            (false, 599),
            (true, 20),
            (false, 700),
            (true, 300),
            (false, 600),
        ],
    ];
    for pattern in patterns {
        let mut old = Endpointer::default();
        let mut expected = Vec::new();
        let mut run = Run::new(TurnConfig::default(), false);
        let mut now = 0;
        for &(speech, ms) in pattern {
            for _ in 0..ms / FRAME_MS {
                now += FRAME_MS;
                match old.push(speech, FRAME_MS) {
                    Some(EndpointEvent::SpeechEnd { speech_ms }) => {
                        expected.push((now, Some(speech_ms)));
                    }
                    Some(EndpointEvent::Discarded { .. }) => expected.push((now, None)),
                    _ => {}
                }
            }
            run.frames(speech, ms);
        }
        let got: Vec<(u32, Option<u32>)> = run
            .log
            .iter()
            .filter_map(|(at, a)| match a {
                TurnAction::EndOfTurn {
                    reason: EndReason::Silence,
                    speech_ms,
                    ..
                } => Some((*at, Some(*speech_ms))),
                TurnAction::Discard {
                    backchannel: false, ..
                } => Some((*at, None)),
                _ => None,
            })
            .collect();
        assert_eq!(got, expected, "{pattern:?}");
        assert!(run.times(ASK).is_empty());
    }
}

#[test]
fn duration_mode_yields_after_the_interruption_length_and_discards_shorter_talk() {
    let mut run = Run::new(TurnConfig::default(), false);
    run.agent().speak(300).quiet(700);
    // 300 ms over the agent: a backchannel, discarded once quiet for the silence rule.
    assert!(run.times(YIELD).is_empty());
    assert_eq!(run.times(DISCARD), [300 + 600]);
    assert!(run.times(PAUSE).is_empty(), "duration mode never pauses");

    let mut run = Run::new(TurnConfig::default(), false);
    run.agent().speak(1000);
    assert_eq!(run.times(YIELD), [400]);
    run.machine.agent_stopped();
    run.quiet(600);
    assert_eq!(run.ends(), [(1600, EndReason::Silence)]);
}

#[test]
fn smart_mode_waits_on_words_that_say_wait_up_to_the_longest_pause() {
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000).interim("I live in").quiet(2000);
    assert!(run.ends().is_empty(), "{:?}", run.log);
    assert!(
        run.times(ASK).is_empty(),
        "no model asked when the words say wait"
    );
    run.speak(400).interim("I live in Pune").quiet(200);
    // Words short of a sentence's end: still waiting, and the model is not asked.
    assert!(run.ends().is_empty() && run.times(ASK).is_empty());
    run.interim("I live in Pune.");
    // The sentence's end: the turn is over at once, on the words.
    assert_eq!(run.ends(), [(3600, EndReason::Text)]);
    assert!(run.times(ASK).is_empty());

    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000).interim("My number is").quiet(3000);
    assert_eq!(run.ends(), [(1000 + 2500, EndReason::MaxSilence)]);
}

#[test]
fn with_no_words_the_model_can_hold_a_pause_open_but_never_end_it_early() {
    // Complete: asked at the short pause, the turn still ends at the silence rule.
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000).quiet(200);
    assert_eq!(run.times(ASK), [1200]);
    run.quiet(40).verdict(ModelVerdict::Probability(0.9));
    assert!(run.ends().is_empty());
    run.quiet(400);
    assert_eq!(run.ends(), [(1600, EndReason::Model)]);

    // Incomplete: wait past the silence rule, ask again only in the next pause.
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000)
        .quiet(200)
        .verdict(ModelVerdict::Probability(0.2));
    run.quiet(1000);
    assert!(run.ends().is_empty());
    assert_eq!(run.times(ASK), [1200]);
    run.speak(500).quiet(200);
    assert_eq!(run.times(ASK), [1200, 2900]);
    run.verdict(ModelVerdict::Probability(0.5));
    run.quiet(400);
    assert_eq!(run.ends(), [(3300, EndReason::Model)]);

    // Incomplete, no further speech: the longest pause ends it.
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000)
        .quiet(200)
        .verdict(ModelVerdict::Probability(0.1));
    run.quiet(2500);
    assert_eq!(run.ends(), [(3500, EndReason::MaxSilence)]);
}

#[test]
fn a_saturated_or_slow_model_falls_back_to_the_silence_rule() {
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000)
        .quiet(200)
        .verdict(ModelVerdict::Unavailable);
    run.quiet(600);
    assert_eq!(run.ends(), [(1600, EndReason::SilenceFallback)]);

    // No answer by the silence rule's 600 ms: not waited for.
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000).quiet(800);
    assert_eq!(run.ends(), [(1600, EndReason::SilenceFallback)]);
}

#[test]
fn a_verdict_about_an_earlier_pause_is_ignored() {
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(1000).quiet(200);
    let stale = run.last_ask();
    run.speak(500);
    let actions = run
        .machine
        .model_verdict(stale, ModelVerdict::Probability(1.0));
    assert!(actions.is_empty());
    run.quiet(200);
    assert_eq!(run.times(ASK).len(), 2);
    assert_ne!(run.last_ask(), stale);
    assert!(run.ends().is_empty());
}

#[test]
fn digits_of_an_asked_phone_number_wait_until_all_ten_are_read() {
    let mut run = Run::new(smart_without_interruptions(), true);
    run.machine
        .expect_answer(AnswerKind::asked_by("What is your phone number?"));
    run.speak(1200).interim("nine eight seven").quiet(1000);
    run.speak(1200)
        .interim("nine eight seven six five four")
        .quiet(1000);
    assert!(run.ends().is_empty(), "{:?}", run.log);
    assert!(run.times(ASK).is_empty());
    run.speak(1200)
        .interim("nine eight seven six five four three two one zero")
        .quiet(200);
    // Ten digits: complete on the words alone, at the short pause, no model asked.
    assert_eq!(run.ends(), [(5800, EndReason::Text)]);
    assert!(run.times(ASK).is_empty());
}

#[test]
fn later_words_can_end_a_pause_the_model_called_incomplete() {
    let mut run = Run::new(smart_without_interruptions(), true);
    run.machine.expect_answer(AnswerKind::Phone);
    run.speak(1500)
        .quiet(200)
        .verdict(ModelVerdict::Probability(0.1));
    run.quiet(200);
    assert!(run.ends().is_empty());
    // The recognizer catches up with the last digits.
    run.interim("98765 43210");
    assert_eq!(run.ends(), [(1900, EndReason::Text)]);
}

#[test]
fn a_sentence_ends_at_the_short_pause_and_words_short_of_one_wait_for_more() {
    for model in [false, true] {
        let mut run = Run::new(smart_without_interruptions(), model);
        run.speak(1000).interim("I live in Pune.").quiet(400);
        assert_eq!(run.ends(), [(1200, EndReason::Text)]);
        assert!(run.times(ASK).is_empty(), "the words settle it");

        // "I bought it" before "about two weeks ago": the words of a recognizer that
        // punctuates stop short of a sentence, so the pause is not the end.
        let mut run = Run::new(smart_without_interruptions(), model);
        run.speak(1000).interim("I bought it").quiet(2000);
        assert!(run.ends().is_empty(), "{:?}", run.log);
        assert!(run.times(ASK).is_empty());
        run.quiet(500);
        assert_eq!(run.ends(), [(3500, EndReason::MaxSilence)]);
    }
    // No words at all and no model: the silence rule.
    let mut run = Run::new(smart_without_interruptions(), false);
    run.speak(1000).quiet(800);
    assert_eq!(run.ends(), [(1600, EndReason::SilenceFallback)]);
}

#[test]
fn a_cough_is_never_sent_to_the_model() {
    let mut run = Run::new(smart_without_interruptions(), true);
    run.speak(200).quiet(800);
    assert!(run.times(ASK).is_empty());
    assert!(run.ends().is_empty());
    assert_eq!(run.times(DISCARD), [800]);
}

#[test]
fn a_backchannel_over_the_agent_pauses_it_then_resumes() {
    let mut run = Run::new(words(), true);
    run.agent().quiet(200).speak(100);
    // Paused at the VAD's onset.
    assert_eq!(run.times(PAUSE), [300]);
    run.speak(300).interim("uh-huh").quiet(200);
    assert_eq!(run.times(RESUME), [800]);
    assert_eq!(
        run.log.last().map(|(_, a)| *a),
        Some(TurnAction::Discard {
            speech_ms: 400,
            backchannel: true
        })
    );
    assert!(run.times(YIELD).is_empty() && run.ends().is_empty());
    assert!(!run.machine.agent_paused() && !run.machine.in_utterance());
}

#[test]
fn noise_over_the_agent_resumes_it_when_no_words_come() {
    let mut run = Run::new(words(), true);
    run.agent().speak(400).quiet(1000);
    assert_eq!(run.times(PAUSE), [100]);
    assert_eq!(run.times(RESUME), [400 + 800]);
    assert!(run.times(YIELD).is_empty());
}

#[test]
fn a_word_outside_the_list_yields_at_once() {
    let mut run = Run::new(words(), true);
    run.agent().speak(300).interim("wait");
    assert_eq!(run.times(YIELD), [300]);
    // From then on it is the caller's turn, judged as any other.
    run.speak(1200)
        .interim("Wait, stop, I have a question.")
        .quiet(200);
    assert_eq!(run.ends(), [(1700, EndReason::Text)]);
    assert!(run.times(RESUME).is_empty());
}

#[test]
fn more_backchannels_than_min_words_or_long_talk_yield() {
    let mut run = Run::new(words(), true);
    run.agent().speak(900).interim("yeah yeah okay right");
    assert_eq!(run.times(YIELD), [900]);

    // A recognizer without interim results gives no words: long talk yields.
    let mut run = Run::new(words(), true);
    run.agent().speak(2000);
    assert_eq!(run.times(YIELD), [1500]);
}

#[test]
fn talk_already_going_when_the_agent_starts_is_judged_by_its_words() {
    let mut run = Run::new(words(), true);
    run.speak(500).interim("and also");
    run.agent();
    assert_eq!(run.times(PAUSE), [500]);
    assert_eq!(run.times(YIELD), [500]);
}

#[test]
fn interruptions_off_never_pause_or_yield() {
    let mut config = words();
    config.interruption.enabled = false;
    let mut run = Run::new(config, true);
    run.agent()
        .speak(2000)
        .interim("stop talking please")
        .quiet(700);
    assert!(run.times(PAUSE).is_empty() && run.times(YIELD).is_empty());
    // Still talk over the agent: not a turn.
    assert_eq!(run.times(DISCARD), [2600]);
}

#[test]
fn words_arriving_after_the_agent_finished_still_make_a_turn() {
    let mut run = Run::new(words(), true);
    run.agent().speak(600);
    run.machine.agent_stopped();
    run.interim("I want to reschedule.").speak(400).quiet(200);
    assert!(run.times(DISCARD).is_empty());
    assert_eq!(run.ends(), [(1200, EndReason::Text)]);
}

const PEEK: TurnAction = TurnAction::PeekWords { over_agent: false };

#[test]
fn a_pause_without_words_asks_for_them_and_the_silence_rule_waits_for_them() {
    // A recognizer without interim results: the words come only when asked.
    let mut run = Run::new(smart_without_interruptions(), false);
    run.machine.expect_answer(AnswerKind::Phone);
    run.quiet(100).speak(1000).quiet(200);
    assert_eq!(run.times(PEEK), [1300], "asked once, at the short pause");
    run.machine.words_coming();
    // Past the 600 ms silence rule, still waiting for the words.
    run.quiet(800);
    assert!(run.ends().is_empty(), "{:?}", run.log);
    run.interim("My number is 98765");
    assert!(run.ends().is_empty(), "an unfinished number waits");
    run.speak(800).quiet(200);
    assert_eq!(run.times(PEEK), [1300, 3100], "a new pause asks again");
    run.machine.words_coming();
    run.quiet(200).interim("My number is 98765 43210.");
    assert_eq!(run.ends(), [(3300, EndReason::Text)]);

    // Words that never come: the longest pause still ends the turn.
    let mut run = Run::new(smart_without_interruptions(), false);
    run.speak(1000).quiet(200);
    run.machine.words_coming();
    run.quiet(3000);
    assert_eq!(run.ends(), [(1000 + 2500, EndReason::MaxSilence)]);

    // A streaming recognizer ignores the question: the silence rule as before.
    let mut run = Run::new(smart_without_interruptions(), false);
    run.speak(1000).quiet(1000);
    assert_eq!(run.times(PEEK), [1200]);
    assert_eq!(run.ends(), [(1600, EndReason::SilenceFallback)]);
}

#[test]
fn talk_over_the_agent_waits_for_the_words_it_asked_for_before_resuming() {
    let mut run = Run::new(words(), false);
    run.agent().speak(400).quiet(200);
    assert_eq!(run.times(PEEK), [600]);
    run.machine.words_coming();
    // No words within the resume bound: still paused, for the words are coming.
    run.quiet(1000);
    assert!(run.times(RESUME).is_empty(), "{:?}", run.log);
    run.interim("Uh-huh.");
    assert_eq!(run.times(RESUME), [1600]);
    assert!(run.times(YIELD).is_empty());

    let mut run = Run::new(words(), false);
    run.agent().speak(600).quiet(200);
    run.machine.words_coming();
    run.quiet(100).interim("Wait, stop.");
    assert_eq!(run.times(YIELD), [900]);
    assert!(run.times(RESUME).is_empty());
}

#[test]
fn over_the_agent_an_onset_joins_a_burst_and_its_closure() {
    // "Ex-cuse me": a 60 ms burst, a 240 ms closure, then the word. Over the agent the
    // pause comes 40 ms into the word; with the agent quiet the burst is dropped and the
    // utterance starts 100 ms into the word, as the silence rule always had it.
    let mut run = Run::new(words(), true);
    run.agent().quiet(200).speak(60).quiet(240).speak(400);
    assert_eq!(run.times(PAUSE), [200 + 60 + 240 + 40]);
    assert_eq!(run.machine.timing().map(|(speech, _)| speech), Some(700));

    let mut run = Run::new(words(), true);
    run.quiet(200).speak(60).quiet(240).speak(400);
    assert_eq!(run.machine.timing().map(|(speech, _)| speech), Some(400));
    run.agent().quiet(20);
    assert_eq!(run.times(PAUSE), [900]);
    // Once the agent stopped, the short gap applies again.
    let mut run = Run::new(words(), true);
    run.agent();
    run.machine.agent_stopped();
    run.speak(60).quiet(240).speak(80);
    assert!(run.machine.timing().is_none());
    run.speak(20);
    assert!(run.machine.timing().is_some());
}

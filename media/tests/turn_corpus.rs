//! The turn-taking benchmark's harness (`benches/turn_taking/harness.rs`) on a handful
//! of the corpus's clips, with today's silence rule: it must find the rule's known
//! failure (a caller who pauses mid-answer is cut in on) and score the rest as the rule
//! behaves, so the benchmark cannot silently score nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../benches/turn_taking/harness.rs"]
mod harness;

use std::path::Path;

use harness::{Category, Clip, SilenceRule};

/// Clips whose labels the assertions below were read from.
const PICKED: [&str; 6] = [
    "complete-01-piper",
    "complete-01-espeak",
    "pause-02-espeak",
    "dictation-phone-03-piper",
    "backchannel-01a-piper",
    "interruption-01c-piper",
];

fn picked_clips() -> Vec<Clip> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/turns");
    let clips = harness::load_corpus(&dir).expect("the corpus");
    assert!(clips.len() >= 150, "{} clips", clips.len());
    let picked: Vec<Clip> = PICKED
        .iter()
        .map(|id| {
            clips
                .iter()
                .find(|c| c.label.id == *id)
                .unwrap_or_else(|| panic!("no clip {id}"))
                .clone()
        })
        .collect();
    picked
}

#[test]
fn the_silence_rule_cuts_in_on_pauses_and_answers_complete_turns_after_600_ms() {
    let clips = picked_clips();
    let mut rule = SilenceRule::new();
    let decisions: Vec<_> = clips
        .iter()
        .map(|clip| harness::run_clip(clip, &mut rule).unwrap())
        .collect();
    let report = harness::score("silence", &clips, &decisions);

    // Every clip was scored in its category.
    assert_eq!(report.turn_clips, 5, "{report:?}");
    assert_eq!(report.paused_clips, 2, "{report:?}");
    assert_eq!(report.backchannel_clips, 1, "{report:?}");
    assert_eq!(report.interruption_clips, 1, "{report:?}");

    // The known failure: pauses of 0.9 to 1.9 s are longer than 600 ms of silence.
    assert_eq!(report.cut_ins, 2, "{report:?}");
    assert_eq!(
        report.cut_in_ids,
        ["pause-02-espeak", "dictation-phone-03-piper"],
        "{report:?}"
    );

    // A complete answer ends 600 ms after the VAD's last speech frame, which is a little
    // before the last faint sound the label marks.
    assert_eq!(report.latency_complete.len(), 2, "{report:?}");
    for &latency in &report.latency_complete {
        assert!((450..=800).contains(&latency), "{report:?}");
    }
    // After the cut-in, "um" and "Pune." come as utterances shorter than 300 ms each and are
    // discarded: the end of that answer is never called.
    assert_eq!(report.no_end, 1, "{report:?}");
    assert_eq!(report.latency_all.len(), 4, "{report:?}");

    // The quiet "uh-huh" is too short to stop the agent.
    assert_eq!(report.backchannels_stopped, 0, "{report:?}");

    // The interruption is yielded to once 400 ms of it were heard ("Wait," and the start
    // of "stop", the gap between them included).
    assert_eq!(report.interruptions_missed, 0, "{report:?}");
    assert!((400..=900).contains(&report.yield_ms[0]), "{report:?}");

    // The table shows what was scored.
    let row = report.table_row();
    assert!(row.starts_with("| silence | 2 of 2 "), "{row}");
}

#[test]
fn the_streaming_words_appear_as_their_end_is_heard() {
    let clips = picked_clips();
    let clip = clips
        .iter()
        .find(|c| c.label.category == Category::Pause)
        .unwrap();
    let label = &clip.label;
    let first = &label.words[0];
    assert!(harness::heard_words(label, first.end_ms - 1).is_empty());
    assert_eq!(harness::heard_words(label, first.end_ms).len(), 1);
    let end = label.end_of_turn_ms.unwrap();
    assert_eq!(harness::heard_words(label, end).len(), label.words.len());
    // A clip is run 4 s past its true end, its line held with its own noise.
    assert_eq!(
        clip.audio.len(),
        clip.run_ms() as usize * 8,
        "{} samples",
        clip.audio.len()
    );
    assert!(clip.run_ms() >= end + harness::HOLD_MS);
}

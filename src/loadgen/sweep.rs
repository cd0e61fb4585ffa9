//! `--sweep`: raise concurrency step by step until a target breaks, and report the highest
//! concurrency that held.

use super::metrics::StepSummary;
use serde::Serialize;

/// What a step must meet to hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Targets {
    /// Most agent frames allowed later than 40 ms.
    pub max_late_frames: u64,
    /// Highest turn-latency p99 allowed.
    pub max_turn_p99_ms: f64,
    /// Most failed calls allowed.
    pub max_failed: u64,
}

/// A step's verdict: the targets it broke (none when it held).
pub fn broken_targets(step: &StepSummary, targets: &Targets) -> Vec<String> {
    let mut broken = Vec::new();
    if step.frames.late_frames > targets.max_late_frames {
        broken.push(format!(
            "{} late frames > {}",
            step.frames.late_frames, targets.max_late_frames
        ));
    }
    match &step.turn_latency {
        Some(turn) if turn.p99_ms > targets.max_turn_p99_ms => broken.push(format!(
            "turn latency p99 {:.1} ms > {:.1} ms",
            turn.p99_ms, targets.max_turn_p99_ms
        )),
        Some(_) => {}
        None => broken.push("no turn was measured".to_owned()),
    }
    if step.failed > targets.max_failed {
        broken.push(format!(
            "{} failed calls > {}",
            step.failed, targets.max_failed
        ));
    }
    broken
}

/// Concurrency levels to try: `start`, then `start + step`, … up to `max` inclusive.
pub fn levels(start: u64, step: u64, max: u64) -> Vec<u64> {
    if start == 0 || step == 0 {
        return Vec::new();
    }
    let mut levels = Vec::new();
    let mut level = start;
    while level <= max {
        levels.push(level);
        level = level.saturating_add(step);
    }
    levels
}

/// One step of a sweep and its verdict.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepStep {
    /// The step's summary.
    pub summary: StepSummary,
    /// Targets it broke; empty when it held.
    pub broken: Vec<String>,
}

/// The whole sweep.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// The targets each step had to meet.
    pub targets: Targets,
    /// Steps in the order run; the sweep stops after the first broken one.
    pub steps: Vec<SweepStep>,
    /// The highest concurrency that held, if any did.
    pub ceiling: Option<u64>,
}

/// The highest concurrency that held before the first broken step.
pub fn ceiling(steps: &[SweepStep]) -> Option<u64> {
    steps
        .iter()
        .take_while(|step| step.broken.is_empty())
        .map(|step| step.summary.concurrency)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::metrics::{StepMetrics, TurnBudget};
    use std::time::Duration;

    fn targets() -> Targets {
        Targets {
            max_late_frames: 0,
            max_turn_p99_ms: 1200.0,
            max_failed: 0,
        }
    }

    fn step(concurrency: u64, turn_ms: u64, late: u64) -> StepSummary {
        let mut metrics = StepMetrics::default();
        metrics.turn.record(Duration::from_millis(turn_ms));
        metrics.late_frames = late;
        StepSummary::new(
            concurrency,
            concurrency,
            "test-call",
            Duration::from_secs(1),
            &metrics,
            TurnBudget {
                endpointing_ms: 600,
                asr_ms: 150,
                llm_first_token_ms: 200,
                llm_token_interval_ms: 0,
                tts_first_byte_ms: 120,
            },
            None,
            "none",
        )
    }

    #[test]
    fn a_step_holds_only_within_every_target() {
        assert!(broken_targets(&step(10, 1100, 0), &targets()).is_empty());
        let late = broken_targets(&step(10, 1100, 3), &targets());
        assert_eq!(late, ["3 late frames > 0"]);
        let slow = broken_targets(&step(10, 1500, 0), &targets());
        assert_eq!(slow.len(), 1);
        assert!(slow[0].starts_with("turn latency p99 15"), "{slow:?}");
        let mut failing = step(10, 1100, 0);
        failing.failed = 2;
        assert_eq!(broken_targets(&failing, &targets()), ["2 failed calls > 0"]);
    }

    #[test]
    fn a_step_without_turns_does_not_hold() {
        let mut empty = step(10, 1100, 0);
        empty.turn_latency = None;
        assert_eq!(broken_targets(&empty, &targets()), ["no turn was measured"]);
    }

    #[test]
    fn levels_step_up_to_the_maximum() {
        assert_eq!(levels(100, 150, 500), [100, 250, 400]);
        assert_eq!(levels(100, 100, 300), [100, 200, 300]);
        assert!(levels(0, 10, 100).is_empty());
        assert!(levels(10, 0, 100).is_empty());
    }

    #[test]
    fn ceiling_is_the_last_level_before_the_first_break() {
        let sweep = |broken: &[bool]| -> Vec<SweepStep> {
            broken
                .iter()
                .enumerate()
                .map(|(i, broke)| SweepStep {
                    summary: step((i as u64 + 1) * 100, 1100, 0),
                    broken: if *broke { vec!["x".into()] } else { vec![] },
                })
                .collect()
        };
        assert_eq!(ceiling(&sweep(&[false, false, true])), Some(200));
        assert_eq!(ceiling(&sweep(&[false, false, false])), Some(300));
        assert_eq!(ceiling(&sweep(&[true, false])), None);
        assert_eq!(ceiling(&[]), None);
    }
}

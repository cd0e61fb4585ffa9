//! How the in-process server's turns ended, read from its own metrics
//! (`voxline_turn_ends_total` by reason, `voxline_smart_turn_evaluations_total` and
//! `voxline_smart_turn_saturated_total`), so a run with the end-of-turn model reports its
//! evaluations and the share of turns that fell back to silence timing.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::app::telemetry::metrics_handle;

/// Turn ends by reason and end-of-turn model use, over a step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnCounts {
    /// Turns ended, by reason (`text`, `model`, `silence`, `silence_fallback`,
    /// `max_silence`).
    pub ends: BTreeMap<String, u64>,
    /// End-of-turn model evaluations.
    pub model_evaluations: u64,
    /// Requests the model's pool turned away (full), each a pause judged on silence.
    pub model_saturated: u64,
}

impl TurnCounts {
    /// The process's counters now.
    pub fn read() -> Self {
        Self::parse(&metrics_handle().render())
    }

    /// The counters in a Prometheus text rendering.
    fn parse(text: &str) -> Self {
        let mut counts = Self::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            // Counters only grow from 0; a rendering's float is a whole count.
            let value = value.max(0.0) as u64;
            if let Some(labels) = name.strip_prefix("voxline_turn_ends_total{reason=\"") {
                if let Some(reason) = labels.strip_suffix("\"}") {
                    counts.ends.insert(reason.to_owned(), value);
                }
            } else if name == "voxline_smart_turn_evaluations_total" {
                counts.model_evaluations = value;
            } else if name == "voxline_smart_turn_saturated_total" {
                counts.model_saturated = value;
            }
        }
        counts
    }

    /// What grew since `before`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            ends: self
                .ends
                .iter()
                .map(|(reason, n)| {
                    let was = before.ends.get(reason).copied().unwrap_or(0);
                    (reason.clone(), n.saturating_sub(was))
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            model_evaluations: self
                .model_evaluations
                .saturating_sub(before.model_evaluations),
            model_saturated: self.model_saturated.saturating_sub(before.model_saturated),
        }
    }

    /// Share of turns that fell back to silence timing in smart mode, in percent.
    pub fn fallback_percent(&self) -> f64 {
        let total: u64 = self.ends.values().sum();
        let fallback = self.ends.get("silence_fallback").copied().unwrap_or(0);
        if total == 0 {
            0.0
        } else {
            fallback as f64 * 100.0 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_a_rendering_and_differenced() {
        let before = TurnCounts::parse(
            "# TYPE voxline_turn_ends_total counter\n\
             voxline_turn_ends_total{reason=\"text\"} 10\n\
             voxline_smart_turn_evaluations_total 3\n",
        );
        let after = TurnCounts::parse(
            "voxline_turn_ends_total{reason=\"text\"} 30\n\
             voxline_turn_ends_total{reason=\"silence_fallback\"} 5\n\
             voxline_smart_turn_evaluations_total 7\n\
             voxline_smart_turn_saturated_total 1\n",
        );
        let step = after.since(&before);
        assert_eq!(step.ends["text"], 20);
        assert_eq!(step.ends["silence_fallback"], 5);
        assert_eq!(step.model_evaluations, 4);
        assert_eq!(step.model_saturated, 1);
        assert!((step.fallback_percent() - 20.0).abs() < 1e-9);
    }
}

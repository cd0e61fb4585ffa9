//! Utterance endpointing over per-frame VAD decisions.
//!
//! Turns a stream of speech / non-speech frames into `SpeechStart` (used for
//! barge-in), `SpeechEnd` (hand the utterance to ASR / the LLM) and
//! `Discarded` (a cough or "mm-hm" too short to be a turn).

/// Endpointing thresholds, all in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointerConfig {
    /// Speech needed before `SpeechStart` is declared; shorter blips are ignored.
    pub start_speech_ms: u32,
    /// Utterances shorter than this end as `Discarded` instead of `SpeechEnd`.
    pub min_speech_ms: u32,
    /// Continuous silence that ends an utterance.
    pub end_silence_ms: u32,
    /// Silence inside a speech onset that still joins its parts: a gap this long before
    /// `start_speech_ms` of speech was heard means the blip was isolated. Longer than the
    /// start requirement, it lets a word that opens with a short burst and a stop's
    /// closure ("Ex-cuse me", about 250 ms of silence at 8 kHz) start an utterance.
    pub onset_gap_ms: u32,
}

impl Default for EndpointerConfig {
    fn default() -> Self {
        Self {
            start_speech_ms: 100,
            min_speech_ms: 300,
            end_silence_ms: 600,
            onset_gap_ms: 100,
        }
    }
}

/// What happened at a frame boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointEvent {
    /// The caller started talking (enough speech to be sure).
    SpeechStart,
    /// The utterance ended after `speech_ms` of speech (first speech frame to last, gaps included).
    SpeechEnd {
        /// Utterance length without the trailing silence.
        speech_ms: u32,
    },
    /// Speech that had started ended before reaching `min_speech_ms`: noise or a backchannel.
    Discarded {
        /// Length of the discarded speech.
        speech_ms: u32,
    },
}

/// Where the endpointer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointState {
    /// Nobody is talking.
    Silence,
    /// Speech frames seen, but not yet `start_speech_ms` of them.
    Pending {
        /// Time since the first speech frame, gaps included.
        speech_ms: u32,
        /// Speech frames alone, which decide the start.
        voiced_ms: u32,
        /// Silence since the last speech frame.
        silence_ms: u32,
    },
    /// Inside an utterance (`SpeechStart` was emitted).
    Speaking {
        /// Utterance length up to the last speech frame.
        speech_ms: u32,
        /// Silence since the last speech frame.
        silence_ms: u32,
    },
}

/// Per-stream endpointing state machine.
#[derive(Debug, Clone)]
pub struct Endpointer {
    config: EndpointerConfig,
    state: EndpointState,
}

impl Endpointer {
    /// An endpointer in the `Silence` state.
    pub fn new(config: EndpointerConfig) -> Self {
        Self {
            config,
            state: EndpointState::Silence,
        }
    }

    /// Current thresholds.
    pub fn config(&self) -> &EndpointerConfig {
        &self.config
    }

    /// Current state.
    pub fn state(&self) -> EndpointState {
        self.state
    }

    /// Whether an utterance is in progress (after `SpeechStart`, before its end).
    pub fn is_speaking(&self) -> bool {
        matches!(self.state, EndpointState::Speaking { .. })
    }

    /// Returns to `Silence` without emitting anything (e.g. the call was reset).
    pub fn reset(&mut self) {
        self.state = EndpointState::Silence;
    }

    /// Advances by one frame of `frame_ms` with its VAD decision; returns an event if one fired.
    pub fn push(&mut self, is_speech: bool, frame_ms: u32) -> Option<EndpointEvent> {
        let config = self.config;
        match (self.state, is_speech) {
            (EndpointState::Silence, false) => None,
            (EndpointState::Silence, true) => self.pending(frame_ms, frame_ms, frame_ms),
            (
                EndpointState::Pending {
                    speech_ms,
                    voiced_ms,
                    silence_ms,
                },
                true,
            ) => self.pending(
                speech_ms + silence_ms + frame_ms,
                voiced_ms + frame_ms,
                frame_ms,
            ),
            (
                EndpointState::Pending {
                    speech_ms,
                    voiced_ms,
                    silence_ms,
                },
                false,
            ) => {
                let silence_ms = silence_ms + frame_ms;
                self.state = if silence_ms >= config.onset_gap_ms.max(frame_ms) {
                    EndpointState::Silence
                } else {
                    EndpointState::Pending {
                        speech_ms,
                        voiced_ms,
                        silence_ms,
                    }
                };
                None
            }
            (
                EndpointState::Speaking {
                    speech_ms,
                    silence_ms,
                },
                true,
            ) => {
                // Pauses inside an utterance count towards its length.
                self.state = EndpointState::Speaking {
                    speech_ms: speech_ms + silence_ms + frame_ms,
                    silence_ms: 0,
                };
                None
            }
            (
                EndpointState::Speaking {
                    speech_ms,
                    silence_ms,
                },
                false,
            ) => {
                let silence_ms = silence_ms + frame_ms;
                if silence_ms < config.end_silence_ms {
                    self.state = EndpointState::Speaking {
                        speech_ms,
                        silence_ms,
                    };
                    return None;
                }
                self.state = EndpointState::Silence;
                Some(if speech_ms >= config.min_speech_ms {
                    EndpointEvent::SpeechEnd { speech_ms }
                } else {
                    EndpointEvent::Discarded { speech_ms }
                })
            }
        }
    }

    /// Sets the onset gap from now on (see [`EndpointerConfig::onset_gap_ms`]): the turn
    /// machine lengthens it while the agent talks, when a start only pauses the agent.
    pub fn set_onset_gap_ms(&mut self, onset_gap_ms: u32) {
        self.config.onset_gap_ms = onset_gap_ms;
    }

    /// Records speech in `Pending` (ending on a speech frame) and promotes it to
    /// `Speaking` once enough of it was voiced.
    fn pending(&mut self, speech_ms: u32, voiced_ms: u32, frame_ms: u32) -> Option<EndpointEvent> {
        // An onset is one start and at most one gap long: blips strung out further apart
        // (clicks on a noisy line) begin anew rather than add up to speech.
        let (speech_ms, voiced_ms) =
            if speech_ms > self.config.start_speech_ms + self.config.onset_gap_ms {
                (frame_ms, frame_ms)
            } else {
                (speech_ms, voiced_ms)
            };
        if voiced_ms >= self.config.start_speech_ms {
            self.state = EndpointState::Speaking {
                speech_ms,
                silence_ms: 0,
            };
            Some(EndpointEvent::SpeechStart)
        } else {
            self.state = EndpointState::Pending {
                speech_ms,
                voiced_ms,
                silence_ms: 0,
            };
            None
        }
    }
}

impl Default for Endpointer {
    fn default() -> Self {
        Self::new(EndpointerConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{SpeechLikeGenerator, WhiteNoiseGenerator};
    use crate::vad::VoiceActivityDetector;

    const FRAME_MS: u32 = 20;

    /// Feeds `(is_speech, duration_ms)` runs and collects events with the frame index they fired at.
    fn run(endpointer: &mut Endpointer, runs: &[(bool, u32)]) -> Vec<(usize, EndpointEvent)> {
        let mut events = Vec::new();
        let mut frame = 0;
        for &(is_speech, ms) in runs {
            for _ in 0..ms / FRAME_MS {
                if let Some(event) = endpointer.push(is_speech, FRAME_MS) {
                    events.push((frame, event));
                }
                frame += 1;
            }
        }
        events
    }

    #[test]
    fn utterance_with_pause_yields_one_start_and_end() {
        let mut endpointer = Endpointer::default();
        let events = run(
            &mut endpointer,
            &[
                (false, 200),
                (true, 800),
                (false, 300),
                (true, 400),
                (false, 1000),
            ],
        );
        assert_eq!(
            events,
            vec![
                (14, EndpointEvent::SpeechStart),
                (
                    114,
                    EndpointEvent::SpeechEnd {
                        speech_ms: 800 + 300 + 400
                    }
                ),
            ]
        );
        assert_eq!(endpointer.state(), EndpointState::Silence);
    }

    #[test]
    fn short_burst_is_discarded_and_blip_is_ignored() {
        let mut endpointer = Endpointer::default();
        let events = run(&mut endpointer, &[(true, 200), (false, 800)]);
        assert_eq!(
            events,
            vec![
                (4, EndpointEvent::SpeechStart),
                (39, EndpointEvent::Discarded { speech_ms: 200 })
            ]
        );
        // 60 ms never reaches the 100 ms start requirement.
        let events = run(&mut endpointer, &[(true, 60), (false, 800)]);
        assert!(events.is_empty());
        assert_eq!(endpointer.state(), EndpointState::Silence);
    }

    #[test]
    fn scattered_noise_frames_do_not_start_speech() {
        let mut endpointer = Endpointer::default();
        let pattern: Vec<(bool, u32)> = (0..50).flat_map(|_| [(true, 20), (false, 100)]).collect();
        assert!(run(&mut endpointer, &pattern).is_empty());
    }

    #[test]
    fn a_long_onset_gap_joins_a_burst_and_a_closure() {
        // "Ex-cuse": 60 ms of burst, 240 ms of closure, then the word goes on.
        let runs = [
            (false, 200),
            (true, 60),
            (false, 240),
            (true, 400),
            (false, 700),
        ];
        let mut joined = Endpointer::new(EndpointerConfig {
            onset_gap_ms: 300,
            ..EndpointerConfig::default()
        });
        let events = run(&mut joined, &runs);
        // 40 ms more of speech make 100 voiced: the start comes at 340 ms of onset.
        assert_eq!(
            events[0],
            (10 + 16, EndpointEvent::SpeechStart),
            "{events:?}"
        );
        assert!(
            matches!(events[1].1, EndpointEvent::SpeechEnd { speech_ms: 700 }),
            "{events:?}"
        );
        // The default gap drops the burst and waits for 100 ms more of speech.
        let events = run(&mut Endpointer::default(), &runs);
        assert_eq!(
            events[0],
            (10 + 3 + 12 + 4, EndpointEvent::SpeechStart),
            "{events:?}"
        );
    }

    #[test]
    fn a_long_onset_gap_does_not_add_up_scattered_clicks() {
        let mut endpointer = Endpointer::new(EndpointerConfig {
            onset_gap_ms: 300,
            ..EndpointerConfig::default()
        });
        let pattern: Vec<(bool, u32)> = (0..50).flat_map(|_| [(true, 20), (false, 280)]).collect();
        assert!(run(&mut endpointer, &pattern).is_empty());
    }

    #[test]
    fn state_reports_progress() {
        let mut endpointer = Endpointer::default();
        endpointer.push(true, FRAME_MS);
        assert_eq!(
            endpointer.state(),
            EndpointState::Pending {
                speech_ms: 20,
                voiced_ms: 20,
                silence_ms: 0
            }
        );
        run(&mut endpointer, &[(true, 100), (false, 40)]);
        assert!(endpointer.is_speaking());
        assert_eq!(
            endpointer.state(),
            EndpointState::Speaking {
                speech_ms: 120,
                silence_ms: 40
            }
        );
        endpointer.reset();
        assert_eq!(endpointer.state(), EndpointState::Silence);
    }

    #[test]
    fn vad_and_endpointer_segment_generated_speech_bursts() {
        let mut vad = VoiceActivityDetector::new(8000).unwrap();
        let mut endpointer = Endpointer::default();
        let mut noise = WhiteNoiseGenerator::new(1, -55.0);
        let mut frame = [0i16; 160];
        let mut events = Vec::new();
        // Three "turns" of 1.5 s, 0.8 s and a 2.4 s speech-like signal, 1.2 s of noise between.
        for (turn, seconds) in [1.5f32, 0.8, 2.4].into_iter().enumerate() {
            let mut speech = SpeechLikeGenerator::new(8000, turn as u64);
            for _ in 0..60 {
                noise.fill(&mut frame);
                events.extend(endpointer.push(vad.is_speech(&frame), FRAME_MS));
            }
            for _ in 0..(seconds * 50.0) as usize {
                speech.fill(&mut frame);
                noise.add_to(&mut frame);
                events.extend(endpointer.push(vad.is_speech(&frame), FRAME_MS));
            }
        }
        for _ in 0..60 {
            noise.fill(&mut frame);
            events.extend(endpointer.push(vad.is_speech(&frame), FRAME_MS));
        }
        let ends: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                EndpointEvent::SpeechEnd { speech_ms } => Some(*speech_ms),
                _ => None,
            })
            .collect();
        let starts = events
            .iter()
            .filter(|e| **e == EndpointEvent::SpeechStart)
            .count();
        assert_eq!(starts, 3, "{events:?}");
        assert_eq!(ends.len(), 3, "{events:?}");
        for (measured, expected) in ends.iter().zip([1500u32, 800, 2400]) {
            assert!(
                measured.abs_diff(expected) <= 300,
                "{measured} vs {expected}"
            );
        }
    }
}

//! Answering machines: the detector's verdicts on the caller's audio and the carrier's,
//! merged (the first verdict wins), and what the agent does about a machine: hang up, or
//! wait for the beep, leave its message and hang up.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};
use voxline_media::amd::{AmdEvent, AmdSettings, AnsweringMachineDetector};

use super::CallLoop;
use super::keypad::KeypadPhase;
use super::turn::{Speech, TurnKind};
use crate::carrier::AnsweredBy;
use crate::conversation::VoicemailAction;
use crate::conversation::transport::MediaTransport;
use crate::ended_reason::EndedReason;
use crate::engine::MachineVerdicts;

/// How long the agent waits for a machine's beep when no detector gives up for it (the
/// carrier said "machine" but never "beep"): then it speaks anyway.
pub(super) const BEEP_WAIT: Duration = Duration::from_secs(20);

/// How much quiet on the line after a beep shows the tone is over (a detector may report a
/// beep while it still sounds).
const AFTER_BEEP_QUIET: u32 = 5;
/// The most the message waits for that quiet after the beep.
const AFTER_BEEP_WAIT: Duration = Duration::from_millis(1500);
/// A caller frame whose peak stays under this is quiet, where no VAD runs (announcement and
/// keypad engines): far below a machine's beep, above line noise.
const QUIET_PEAK: i16 = 1_000;

/// Where the call stands on answering machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MachinePhase {
    /// No verdict yet.
    Undecided,
    /// A person: nothing more to do.
    Human,
    /// A machine's greeting is playing; the agent is quiet, waiting for the beep (since).
    Greeting(Instant),
    /// The beep (or the greeting's end) was heard at `since`: the message starts once the
    /// line has been quiet for a moment.
    AfterBeep {
        /// When the beep was reported.
        since: Instant,
        /// Quiet caller frames in a row since.
        quiet_frames: u32,
    },
    /// The agent is leaving its message.
    Leaving,
}

impl MachinePhase {
    /// A machine answered: turn-taking is off.
    pub(super) fn is_machine(self) -> bool {
        matches!(
            self,
            Self::Greeting(_) | Self::AfterBeep { .. } | Self::Leaving
        )
    }
}

/// The engine's detector for a call at `rate`, unless detection is off or the rate is not one
/// it supports (the call then goes on without it, like a call with detection off).
pub(super) fn detector(detect: bool, rate: u32, call_id: &str) -> Option<AnsweringMachineDetector> {
    if !detect {
        return None;
    }
    let settings = AmdSettings {
        sample_rate: rate,
        ..AmdSettings::default()
    };
    match AnsweringMachineDetector::new(settings) {
        Ok(detector) => Some(detector),
        Err(error) => {
            warn!(%error, call_id, "answering-machine detection unavailable for this stream");
            None
        }
    }
}

/// The detector's event as a verdict.
pub(super) fn verdict(event: AmdEvent) -> AnsweredBy {
    match event {
        AmdEvent::Human => AnsweredBy::Human,
        AmdEvent::Machine => AnsweredBy::Machine,
        AmdEvent::Beep => AnsweredBy::Beep,
        AmdEvent::GreetingEnded => AnsweredBy::GreetingEnded,
    }
}

/// The carrier's next verdict; `None` once its channel closed (never again after that: the
/// slot is emptied by the caller).
pub(super) async fn next_carrier_verdict(
    verdicts: &mut Option<MachineVerdicts>,
) -> Option<AnsweredBy> {
    match verdicts {
        Some(verdicts) => verdicts.recv().await,
        None => std::future::pending().await,
    }
}

impl<T: MediaTransport> CallLoop<T> {
    /// A verdict from the detector or the carrier.
    pub(super) async fn on_machine_verdict(&mut self, verdict: AnsweredBy, now: Instant) {
        debug!(call_id = %self.call_id, ?verdict, phase = ?self.machine, "answering-machine verdict");
        match (self.machine, verdict) {
            (MachinePhase::Undecided, AnsweredBy::Human) => {
                self.machine = MachinePhase::Human;
                // The detector would go quiet by itself; the carrier's word settles it too.
                self.amd = None;
            }
            (MachinePhase::Undecided, AnsweredBy::Machine) => {
                self.machine_answered(now).await;
                if self.ended.is_none() {
                    self.machine = MachinePhase::Greeting(now);
                }
            }
            // A beep with no greeting heard first counts as both.
            (MachinePhase::Undecided, AnsweredBy::Beep | AnsweredBy::GreetingEnded) => {
                self.machine_answered(now).await;
                if self.ended.is_none() {
                    self.beep_heard(now);
                }
            }
            (MachinePhase::Greeting(_), AnsweredBy::Beep | AnsweredBy::GreetingEnded) => {
                self.beep_heard(now);
            }
            // The first verdict wins: a later "human" or a second "machine" changes nothing.
            _ => {}
        }
    }

    /// A machine answered: the agent stops talking and listening; `hangup` ends the call.
    async fn machine_answered(&mut self, now: Instant) {
        self.interrupt(true).await;
        self.keypad = KeypadPhase::Idle;
        self.listening = Default::default();
        self.turns.reset();
        self.verdict = None;
        self.last_activity = now;
        if self.voicemail.action == VoicemailAction::Hangup {
            self.end(EndedReason::Voicemail, None);
        }
    }

    /// The machine beeped: it records from the end of the tone.
    fn beep_heard(&mut self, now: Instant) {
        self.amd = None;
        self.machine = MachinePhase::AfterBeep {
            since: now,
            quiet_frames: 0,
        };
    }

    /// One caller frame while waiting for the beep to end: quiet by the VAD where one runs,
    /// else by its peak.
    pub(super) async fn after_beep_frame(&mut self, frame_is_quiet: bool, now: Instant) {
        let MachinePhase::AfterBeep {
            since,
            quiet_frames,
        } = self.machine
        else {
            return;
        };
        let quiet_frames = if frame_is_quiet { quiet_frames + 1 } else { 0 };
        self.machine = MachinePhase::AfterBeep {
            since,
            quiet_frames,
        };
        if quiet_frames >= AFTER_BEEP_QUIET || now >= since + AFTER_BEEP_WAIT {
            self.leave_message().await;
        }
    }

    /// The machine is recording: say the message (through the normal playback, so the
    /// recording holds it); the call ends when it has been heard.
    async fn leave_message(&mut self) {
        self.amd = None;
        match &self.voicemail.action {
            VoicemailAction::LeaveMessage(message) if !message.trim().is_empty() => {
                let message = message.trim().to_owned();
                self.machine = MachinePhase::Leaving;
                self.start_speaking(TurnKind::VoicemailMessage, Speech::Text(message), None)
                    .await;
            }
            _ => self.end(EndedReason::Voicemail, None),
        }
    }

    /// The clock's check: a machine whose beep never came gets the message anyway, and so
    /// does one whose line never went quiet after it.
    pub(super) async fn check_beep_wait(&mut self, now: Instant) {
        match self.machine {
            MachinePhase::Greeting(since) if now >= since + BEEP_WAIT => {
                self.leave_message().await;
            }
            MachinePhase::AfterBeep { since, .. } if now >= since + AFTER_BEEP_WAIT => {
                self.leave_message().await;
            }
            _ => {}
        }
    }
}

/// Whether a caller frame is quiet by its peak (where no VAD runs).
pub(super) fn quiet_by_peak(frame: &[i16]) -> bool {
    frame
        .iter()
        .all(|sample| sample.unsigned_abs() < QUIET_PEAK.unsigned_abs())
}

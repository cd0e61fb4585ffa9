//! Bulk calling: batches (items from the client's own system) and campaigns
//! (a batch built from an uploaded CSV), their state machine (decisions §7),
//! the feed through which the engine pulls one call at a time, and the
//! scheduler that starts scheduled batches, notices completed ones and keeps
//! running ones fed across restarts.

pub mod csv_upload;
pub mod feed;
pub mod service;
pub mod student_sheet;

use std::fmt;

/// What a row of the `batches` table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    /// Items posted by the client: `/api/batches`.
    Batch,
    /// Students uploaded as CSV: `/api/campaigns`.
    Campaign,
}

impl BatchKind {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Batch => "batch",
            Self::Campaign => "campaign",
        }
    }

    /// The word used in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Batch => "Batch",
            Self::Campaign => "Campaign",
        }
    }
}

/// A batch's status (decisions §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchStatus {
    /// Created, not started; items may be added.
    Draft,
    /// Starts by itself at `scheduledStartAt`; items may be added.
    Scheduled,
    /// Dialing.
    Running,
    /// Not dialing; pending items wait for resume.
    Paused,
    /// Every item reached an outcome.
    Completed,
    /// Ended by the client; pending items were dropped.
    Stopped,
}

impl BatchStatus {
    /// The stored and returned form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Draft => "draft",
            Self::Scheduled => "scheduled",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Stopped => "stopped",
        }
    }

    /// Parses the stored form; unknown text reads as stopped (never dialed).
    pub fn from_stored(raw: &str) -> Self {
        match raw {
            "draft" => Self::Draft,
            "scheduled" => Self::Scheduled,
            "running" => Self::Running,
            "paused" => Self::Paused,
            "completed" => Self::Completed,
            _ => Self::Stopped,
        }
    }

    /// Whether items may still be added and the schedule changed.
    pub fn is_unstarted(self) -> bool {
        matches!(self, Self::Draft | Self::Scheduled)
    }
}

impl fmt::Display for BatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The operations of the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchAction {
    /// draft | scheduled → running.
    Start,
    /// running → paused.
    Pause,
    /// paused → running.
    Resume,
    /// scheduled | running | paused → stopped.
    Stop,
    /// running | paused | completed | stopped: failed items become pending again.
    Retry,
}

impl BatchAction {
    /// The statuses the action is allowed from.
    pub fn allowed_from(self) -> &'static [BatchStatus] {
        use BatchStatus::*;
        match self {
            Self::Start => &[Draft, Scheduled],
            Self::Pause => &[Running],
            Self::Resume => &[Paused],
            Self::Stop => &[Scheduled, Running, Paused],
            Self::Retry => &[Running, Paused, Completed, Stopped],
        }
    }

    /// The verb used in messages.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Start => "started",
            Self::Pause => "paused",
            Self::Resume => "resumed",
            Self::Stop => "stopped",
            Self::Retry => "retried",
        }
    }

    /// Whether the action is allowed from `status`.
    pub fn allowed(self, status: BatchStatus) -> bool {
        self.allowed_from().contains(&status)
    }
}

/// Stored forms of `statuses`, for conditional updates.
pub fn stored(statuses: &[BatchStatus]) -> Vec<&'static str> {
    statuses.iter().map(|s| s.as_str()).collect()
}

/// Progress counts of a batch from its per-status item counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Every item, skipped ones included.
    pub total: i64,
    /// Latest call completed.
    pub completed: i64,
    /// Latest call failed, unanswered, busy, canceled or reached voicemail; or skipped; or
    /// dropped by a stop.
    pub failed: i64,
    /// Waiting to be dialed or on a live call.
    pub pending: i64,
    /// Of pending: on a live call (queued in the engine, ringing, in progress).
    pub live: i64,
    /// Of pending: waiting for the callee's calling hours to open.
    pub waiting: i64,
    /// Of failed: malformed numbers never dialed.
    pub skipped: i64,
    /// Of failed: no answer.
    pub no_answer: i64,
    /// Of failed: busy.
    pub busy: i64,
    /// Of failed: canceled or dropped by a stop.
    pub canceled: i64,
}

impl Progress {
    /// Sums per-status counts.
    pub fn from_counts(counts: &[(String, i64)]) -> Self {
        let mut p = Self::default();
        for (status, n) in counts {
            p.total += n;
            match status.as_str() {
                "completed" => p.completed += n,
                "pending" => p.pending += n,
                "waiting" => {
                    p.pending += n;
                    p.waiting += n;
                }
                "queued" | "ringing" | "in-progress" => {
                    p.pending += n;
                    p.live += n;
                }
                "skipped" => {
                    p.failed += n;
                    p.skipped += n;
                }
                "no-answer" => {
                    p.failed += n;
                    p.no_answer += n;
                }
                "busy" => {
                    p.failed += n;
                    p.busy += n;
                }
                "canceled" => {
                    p.failed += n;
                    p.canceled += n;
                }
                _ => p.failed += n,
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_follow_decisions_7() {
        use BatchStatus::*;
        assert!(BatchAction::Start.allowed(Draft));
        assert!(BatchAction::Start.allowed(Scheduled));
        assert!(!BatchAction::Start.allowed(Running));
        assert!(!BatchAction::Resume.allowed(Running));
        assert!(BatchAction::Resume.allowed(Paused));
        assert!(!BatchAction::Pause.allowed(Paused));
        assert!(!BatchAction::Stop.allowed(Completed));
        assert!(!BatchAction::Retry.allowed(Draft));
        assert_eq!(BatchStatus::from_stored("paused"), Paused);
    }

    #[test]
    fn progress_sums_item_statuses() {
        let counts: Vec<(String, i64)> = [
            ("completed", 5),
            ("pending", 3),
            ("waiting", 2),
            ("ringing", 2),
            ("no-answer", 1),
            ("busy", 1),
            ("failed", 1),
            ("skipped", 2),
            ("canceled", 4),
        ]
        .into_iter()
        .map(|(s, n)| (s.to_string(), n))
        .collect();
        let p = Progress::from_counts(&counts);
        assert_eq!(p.total, 21);
        assert_eq!(p.completed, 5);
        assert_eq!(p.pending, 7);
        assert_eq!(p.waiting, 2);
        assert_eq!(p.live, 2);
        assert_eq!(p.failed, 9);
        assert_eq!(p.total, p.completed + p.failed + p.pending);
    }
}

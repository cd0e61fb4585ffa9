//! What a sim callee measured of its call, as the load generator reports it: latencies,
//! the agent audio's pacing and jitter, marks, clears and barge-ins, keys, and how it ended.

use std::time::Duration;

/// What the callee measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CalleeReport {
    /// The websocket connected and `start` was sent.
    pub connected: bool,
    /// `start` → the agent's first audio frame.
    pub greeting_latency: Option<Duration>,
    /// For each line said: its end → the agent's next audio frame.
    pub turn_latencies: Vec<Duration>,
    /// Agent audio frames received.
    pub agent_frames: u64,
    /// Agent audio received, in time.
    pub agent_audio: Duration,
    /// Mean playback stall before agent frames within talk spurts: how long the callee's
    /// playback buffer had been empty when each frame came (0 for audio sent ahead).
    pub mean_jitter: Duration,
    /// Longest such stall within a talk spurt.
    pub max_jitter: Duration,
    /// Agent frames that came more than 40 ms after the playback buffer ran dry in a spurt.
    pub late_frames: u64,
    /// Marks echoed back.
    pub marks_echoed: u64,
    /// `clear` commands received.
    pub clears: u64,
    /// For each line said over the agent (`interrupt` steps) that stopped it: the line's
    /// start → the agent's `clear`, the moment its audio stops at the phone.
    pub barge_in_stops: Vec<Duration>,
    /// Lines said.
    pub lines_said: usize,
    /// Backchannels said over the agent (`backchannel` steps).
    pub backchannels_said: usize,
    /// Keys pressed.
    pub digits_sent: usize,
    /// Keys the agent pressed, as a menu step heard them in its audio.
    pub digits_heard: String,
    /// The agent closed the stream.
    pub agent_hung_up: bool,
    /// The call ran to its natural end: agent or scripted hang-up, no error, no timeout.
    pub ended_cleanly: bool,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// `start` → end.
    pub duration: Duration,
}

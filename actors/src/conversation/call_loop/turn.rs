//! The agent's turn as data: what it is for, its sentences (segments) with
//! their audio and playback marks, and how much of it the caller heard when
//! it ends early.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::ACK_GRACE;
use crate::conversation::text::leading_words;
use crate::providers::{LlmRequest, ToolCallRequest};

/// What an agent turn is for; decides what follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TurnKind {
    /// The welcome message.
    Welcome,
    /// An LLM reply.
    Reply,
    /// The keypad menu.
    KeypadPrompt,
    /// The chosen option's text.
    KeypadChoice,
    /// One play of the announcement.
    Announcement,
    /// The message left on an answering machine after its beep.
    VoicemailMessage,
}

/// What an agent turn says.
pub(super) enum Speech {
    /// A known text, synthesized sentence by sentence.
    Text(String),
    /// A known text with its audio already synthesized at 8 kHz.
    Cached(String, Arc<[i16]>),
    /// An LLM reply.
    Reply(LlmRequest),
}

/// One sentence of an agent turn and its playback state.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) text: String,
    pub(super) mark: String,
    /// Carrier-rate samples not yet sent.
    pub(super) audio: VecDeque<i16>,
    /// All its audio has arrived.
    pub(super) synthesized: bool,
    pub(super) sent_samples: usize,
    /// How long the text should take to say, for cutting it before all audio arrived.
    pub(super) expected_samples: usize,
    /// When its first frame starts playing at the carrier (it is sent up to
    /// [`PLAYBACK_LEAD`](super::PLAYBACK_LEAD) earlier).
    pub(super) first_sent_at: Option<Instant>,
    pub(super) acked_at: Option<Instant>,
    /// Keys to send as telephone events when the segment's first frame goes out (SIP); its
    /// audio is then the silence they take.
    pub(super) keys: Option<String>,
}

/// Timestamps of a reply in the making, for its latency record.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingLatency {
    pub(super) speech_end_at: Instant,
    pub(super) endpoint_at: Instant,
    pub(super) transcript_at: Instant,
    pub(super) llm_first_token: Duration,
    pub(super) tts_first_byte: Duration,
}

/// A transfer the model asked for: it starts once its message has been heard.
#[derive(Debug)]
pub(super) struct PendingTransfer {
    pub(super) call: ToolCallRequest,
    pub(super) arguments: serde_json::Value,
    pub(super) number: String,
}

/// The agent's current turn.
#[derive(Debug)]
pub(super) struct AgentTurn {
    pub(super) id: u64,
    pub(super) kind: TurnKind,
    pub(super) segments: Vec<Segment>,
    /// Index of the segment being sent.
    pub(super) playing: usize,
    /// No more segments will be added.
    pub(super) source_done: bool,
    /// Hang up once the turn has been heard.
    pub(super) end_call: bool,
    /// The callee opted out: hang up with `opt-out` once the turn has been heard.
    pub(super) opt_out: bool,
    /// The tool calls the turn made (it is kept in the transcript even when silent).
    pub(super) tool_ids: Vec<String>,
    /// Bridge the callee once the turn has been heard.
    pub(super) transfer: Option<PendingTransfer>,
    pub(super) latency: Option<PendingLatency>,
    pub(super) first_frame_at: Option<Instant>,
    /// When the last frame sent finishes playing at the carrier.
    pub(super) last_frame_at: Option<Instant>,
    /// Cached 8 kHz audio not yet moved into the last segment (a cached welcome): it is
    /// shared by every call that says the text, so each call copies only what it is about to
    /// send rather than the whole message.
    pub(super) cached: Option<CachedAudio>,
}

/// Audio synthesized once and shared, and how far this turn has taken it.
#[derive(Debug)]
pub(super) struct CachedAudio {
    /// The samples, at 8 kHz.
    pub(super) audio: Arc<[i16]>,
    /// The first sample not yet queued.
    pub(super) next: usize,
}

impl AgentTurn {
    /// Everything the turn will say has been sent.
    fn all_sent(&self) -> bool {
        self.source_done && self.playing >= self.segments.len()
    }

    /// Everything has been sent and played (marks echoed, or the grace period is over).
    pub(super) fn all_heard(&self, now: Instant) -> bool {
        self.all_sent()
            && (self.segments.iter().all(|s| s.acked_at.is_some())
                || self
                    .last_frame_at
                    .is_none_or(|last| now >= last + ACK_GRACE))
    }

    /// The whole text of the turn.
    pub(super) fn text(&self) -> String {
        join_texts(self.segments.iter().map(|s| s.text.as_str()))
    }

    /// The part of the turn the caller heard by `now`: acknowledged segments whole, and the
    /// share of the segment then playing that its elapsed playback covers.
    pub(super) fn heard_text(&self, now: Instant, rate: u32) -> String {
        let seconds = |samples: usize| samples as f64 / f64::from(rate);
        let mut parts: Vec<String> = Vec::new();
        let mut previous_ack: Option<Instant> = None;
        for segment in &self.segments {
            if let Some(acked) = segment.acked_at {
                parts.push(segment.text.clone());
                previous_ack = Some(acked);
                continue;
            }
            let Some(first_sent) = segment.first_sent_at else {
                break;
            };
            // It began playing when the previous one finished, or when its first frame went out.
            let began = previous_ack.map_or(first_sent, |ack| ack.max(first_sent));
            let played = now
                .saturating_duration_since(began)
                .as_secs_f64()
                .min(seconds(segment.sent_samples));
            let whole = if segment.synthesized {
                segment.sent_samples + segment.audio.len()
            } else {
                segment
                    .expected_samples
                    .max(segment.sent_samples + segment.audio.len())
            };
            let fraction = if whole == 0 {
                0.0
            } else {
                played / seconds(whole)
            };
            parts.push(leading_words(&segment.text, fraction));
            break;
        }
        join_texts(parts.iter().map(String::as_str))
    }

    /// A mark came back: it and every segment before it have played.
    pub(super) fn acknowledge(&mut self, name: &str, now: Instant) {
        if let Some(index) = self.segments.iter().position(|s| s.mark == name) {
            for segment in &mut self.segments[..=index] {
                segment.acked_at.get_or_insert(now);
            }
        }
    }
}

/// Joins non-empty texts with single spaces.
fn join_texts<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for text in texts.filter(|t| !t.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(text);
    }
    out
}

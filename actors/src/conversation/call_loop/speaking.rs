//! The agent speaking: starting a turn, pacing its audio to the carrier
//! (kept [`PLAYBACK_LEAD`] ahead on the tick, topped up at once when
//! starved; held back while turn-taking has the agent paused), the
//! responder's events, recording the turn's latency, closing a heard turn and
//! moving the engine on, and stopping mid-turn on barge-in.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};
use voxline_media::synth::{samples_for_duration, speech_duration_for_text};
use voxline_media::turn_taking::{AnswerKind, TurnAction};
use voxline_media::wav::RECORDING_SAMPLE_RATE;

use super::keypad::KeypadPhase;
use super::turn::{
    AgentTurn, CachedAudio, PendingLatency, PendingTransfer, Segment, Speech, TurnKind,
};
use super::{CallLoop, FRAME, PLAYBACK_LEAD, STARVED_LEAD};
use crate::conversation::responder::{Responder, ResponderEvent, ResponsePlan, Voice};
use crate::conversation::text::{contains_phrase, split_sentences};
use crate::conversation::transport::MediaTransport;
use crate::conversation::{ConversationEngine, Speaker, TurnLatency};
use crate::ended_reason::EndedReason;
use crate::providers::{ChatMessage, ChatRole, ProviderError, ProviderKind};

/// The next event of the running responder, if any.
pub(super) async fn next_responder(responder: &mut Option<Responder>) -> Option<ResponderEvent> {
    match responder {
        Some(responder) => responder.events.recv().await,
        None => std::future::pending().await,
    }
}

impl<T: MediaTransport> CallLoop<T> {
    /// Starts an agent turn, replacing any running one without ceremony (callers interrupt
    /// first when the old one was audible).
    pub(super) async fn start_speaking(
        &mut self,
        kind: TurnKind,
        speech: Speech,
        latency: Option<PendingLatency>,
    ) {
        self.responder = None;
        if let Some(transfer) = self.turn.take().and_then(|old| old.transfer) {
            // A transfer that has begun survives the turn that asked for it.
            self.start_transfer(transfer);
        }
        let id = self.next_turn_id;
        self.next_turn_id += 1;
        let mut turn = AgentTurn {
            id,
            kind,
            segments: Vec::new(),
            playing: 0,
            source_done: false,
            end_call: false,
            opt_out: false,
            tool_ids: Vec::new(),
            transfer: None,
            latency,
            first_frame_at: None,
            last_frame_at: None,
            cached: None,
        };
        let voice = Voice {
            llm: Arc::clone(&self.providers.llm),
            tts: Arc::clone(&self.providers.tts),
            voice: self.voice.clone(),
            sample_rate: self.playback.rate(),
            tools: self.tool_run(),
            max_sentences: self.max_reply_sentences,
        };
        match speech {
            Speech::Text(text) => {
                self.responder = Some(Responder::spawn(
                    ResponsePlan::Say(split_sentences(&text)),
                    voice,
                ));
            }
            Speech::Reply(request) => {
                self.responder = Some(Responder::spawn(ResponsePlan::Reply(request), voice));
            }
            Speech::Cached(text, audio) => {
                // Queued a little at a time by `top_up_cached`, as the playback takes it.
                let rate = self.playback.rate() as usize;
                turn.segments.push(Segment {
                    text,
                    mark: format!("t{id}s0"),
                    audio: VecDeque::new(),
                    synthesized: false,
                    sent_samples: 0,
                    expected_samples: audio.len() * rate / RECORDING_SAMPLE_RATE as usize,
                    first_sent_at: None,
                    acked_at: None,
                    keys: None,
                });
                turn.cached = Some(CachedAudio { audio, next: 0 });
                turn.source_done = true;
            }
        }
        self.turn = Some(turn);
        let actions = self.turns.agent_started();
        if actions.contains(&TurnAction::YieldTurn) {
            // The caller was already saying more than a backchannel: the new turn gives way.
            self.interrupt(true).await;
            return;
        }
        // The first audio goes out at once (unless the caller's talk has it paused); the
        // clock keeps the carrier's buffer topped up.
        self.fill_playback().await;
    }

    /// Sends the current turn's audio until the carrier holds [`PLAYBACK_LEAD`] of it (and a
    /// segment's mark after its last frame), all in one write.
    pub(super) async fn fill_playback(&mut self) {
        self.top_up_cached();
        let now = Instant::now();
        // The carrier's buffer ran dry: playback resumes with the next frame.
        self.playout_end = self.playout_end.max(now);
        let horizon = now + PLAYBACK_LEAD;
        let mut first_frame_of_turn = false;
        while self.playout_end < horizon && self.queue_frame(now, &mut first_frame_of_turn) {}
        if first_frame_of_turn {
            self.record_turn_latency(now);
        }
        if !self.outbound.is_empty() {
            self.flush_outbound().await;
        }
    }

    /// Moves the turn's cached audio into its segment until
    /// [`AUDIO_AHEAD`](super::AUDIO_AHEAD) of it is queued, and marks the segment synthesized
    /// once all of it is.
    fn top_up_cached(&mut self) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let (Some(cached), Some(segment)) = (turn.cached.as_mut(), turn.segments.last_mut()) else {
            return;
        };
        let rate = self.playback.rate() as usize;
        let ahead = samples_for_duration(self.playback.rate(), super::AUDIO_AHEAD);
        let room = ahead.saturating_sub(segment.audio.len());
        // The cached audio is at 8 kHz; round up so a partial sample still moves.
        let take = (room * RECORDING_SAMPLE_RATE as usize).div_ceil(rate);
        let end = (cached.next + take).min(cached.audio.len());
        let mut moved = self.playback.ingest(
            &cached.audio[cached.next..end],
            RECORDING_SAMPLE_RATE,
            &mut segment.audio,
        );
        cached.next = end;
        if end == cached.audio.len() {
            moved = moved.and_then(|()| self.playback.flush(&mut segment.audio));
            segment.synthesized = true;
            turn.cached = None;
        }
        if let Err(error) = moved {
            warn!(%error, "cached welcome audio unusable");
        }
    }

    /// The carrier holds less than [`STARVED_LEAD`] of agent audio: new TTS audio should go
    /// out now rather than at the next tick.
    fn playback_starved(&self) -> bool {
        self.playout_end.saturating_duration_since(Instant::now()) < STARVED_LEAD
    }

    /// Queues the current turn's next 20 ms frame; false when no whole frame is ready.
    fn queue_frame(&mut self, now: Instant, first_frame_of_turn: &mut bool) -> bool {
        if self.turns.agent_paused() {
            // The unsent audio waits where it is; resuming sends it from there.
            return false;
        }
        let Some(turn) = self.turn.as_mut() else {
            return false;
        };
        let frame_len = self.playback.frame.len();
        while let Some(segment) = turn.segments.get_mut(turn.playing) {
            if segment.audio.len() >= frame_len
                || (segment.synthesized && !segment.audio.is_empty())
            {
                let take = segment.audio.len().min(frame_len);
                for (slot, sample) in self
                    .playback
                    .frame
                    .iter_mut()
                    .zip(segment.audio.drain(..take))
                {
                    *slot = sample;
                }
                self.playback.frame[take..].fill(0);
                segment.sent_samples += take;
                segment.first_sent_at.get_or_insert(self.playout_end);
                if let Some(keys) = segment.keys.take() {
                    // Telephone events start where the segment's silence starts.
                    self.codec.encode_dtmf(&keys, &mut self.outbound);
                }
                let wire = self.playback.encode_frame();
                self.codec.encode_media(wire, &mut self.outbound);
                if segment.synthesized && segment.audio.is_empty() {
                    self.codec.encode_mark(&segment.mark, &mut self.outbound);
                    turn.playing += 1;
                    // Sent in full: its queue's room goes back rather than staying with the
                    // turn until the next one.
                    segment.audio = VecDeque::new();
                }
                if turn.first_frame_at.is_none() {
                    turn.first_frame_at = Some(now);
                    *first_frame_of_turn = true;
                }
                self.playout_end += FRAME;
                turn.last_frame_at = Some(self.playout_end);
                if let Some(recorder) = self.recorder.as_mut() {
                    match self.playback.recording_frame() {
                        Ok(frame) => recorder.agent(frame),
                        Err(error) => debug!(%error, "agent audio not recorded"),
                    }
                }
                return true;
            } else if segment.synthesized {
                // A sentence that produced no audio still gets its mark, in order.
                self.codec.encode_mark(&segment.mark, &mut self.outbound);
                turn.playing += 1;
            } else {
                // Waiting for TTS.
                return false;
            }
        }
        false
    }

    /// The turn's first audio went out at `now`: the greeting or reply latency is known.
    fn record_turn_latency(&mut self, now: Instant) {
        if self.greeting_latency.is_none() {
            self.greeting_latency = Some(now.saturating_duration_since(self.started));
        }
        let Some(pending) = self.turn.as_mut().and_then(|turn| turn.latency.take()) else {
            return;
        };
        let total = now.saturating_duration_since(pending.speech_end_at);
        let endpointing = pending
            .endpoint_at
            .saturating_duration_since(pending.speech_end_at);
        let asr = pending
            .transcript_at
            .saturating_duration_since(pending.endpoint_at);
        let latency = TurnLatency {
            total,
            endpointing,
            asr,
            llm_first_token: pending.llm_first_token,
            tts_first_byte: pending.tts_first_byte,
            engine_overhead: total.saturating_sub(
                endpointing + asr + pending.llm_first_token + pending.tts_first_byte,
            ),
        };
        self.observer.on_latency(&latency);
        self.latencies.push(latency);
    }

    pub(super) async fn on_responder(&mut self, event: Option<ResponderEvent>) {
        let Some(turn) = self.turn.as_mut() else {
            self.responder = None;
            return;
        };
        let Some(event) = event else {
            // The task ended without `Finished` (it panicked): say what was synthesized.
            warn!(call_id = %self.call_id, "responder task ended early");
            self.responder = None;
            turn.source_done = true;
            return;
        };
        match event {
            ResponderEvent::FirstToken(elapsed) => {
                if let Some(latency) = turn.latency.as_mut() {
                    latency.llm_first_token = elapsed;
                }
            }
            ResponderEvent::FirstAudio(elapsed) => {
                if let Some(latency) = turn.latency.as_mut() {
                    latency.tts_first_byte = elapsed;
                }
            }
            ResponderEvent::Segment(text) => {
                let index = turn.segments.len();
                let expected_samples =
                    samples_for_duration(self.playback.rate(), speech_duration_for_text(&text));
                turn.segments.push(Segment {
                    text,
                    mark: format!("t{}s{index}", turn.id),
                    // Room for the sentence as its text predicts: growing by doubling from
                    // empty left up to half of a queue unused, in every speaking call.
                    audio: VecDeque::with_capacity(expected_samples),
                    synthesized: false,
                    sent_samples: 0,
                    expected_samples,
                    first_sent_at: None,
                    acked_at: None,
                    keys: None,
                });
            }
            ResponderEvent::Audio { samples, rate } => {
                let Some(segment) = turn.segments.last_mut() else {
                    return;
                };
                if let Err(error) = self.playback.ingest(&samples, rate, &mut segment.audio) {
                    self.fail(ProviderError::Stream {
                        provider: ProviderKind::Tts,
                        message: error.to_string(),
                    });
                    return;
                }
                if turn.first_frame_at.is_none() || self.playback_starved() {
                    self.fill_playback().await;
                }
            }
            ResponderEvent::SegmentDone => {
                if let Some(segment) = turn.segments.last_mut() {
                    if let Err(error) = self.playback.flush(&mut segment.audio) {
                        debug!(%error, "resampler tail lost");
                    }
                    segment.synthesized = true;
                }
                if self.playback_starved() {
                    self.fill_playback().await;
                }
            }
            ResponderEvent::EndCall => turn.end_call = true,
            ResponderEvent::OptOut => {
                turn.opt_out = true;
                self.opted_out = true;
            }
            ResponderEvent::ToolStarted { id, counted } => self.on_tool_started(id, counted),
            ResponderEvent::Dtmf(digits) => {
                self.queue_keys(&digits);
                if self.playback_starved() {
                    self.fill_playback().await;
                }
            }
            ResponderEvent::Transfer {
                call,
                arguments,
                number,
            } => {
                turn.transfer = Some(PendingTransfer {
                    call,
                    arguments,
                    number,
                });
            }
            ResponderEvent::Finished => {
                turn.source_done = true;
                self.responder = None;
                self.check_turn_complete(Instant::now()).await;
            }
            ResponderEvent::Failed(error) => self.fail(error),
        }
    }

    /// Closes the current turn once it has been heard, and moves the engine on.
    pub(super) async fn check_turn_complete(&mut self, now: Instant) {
        if !self.turn.as_ref().is_some_and(|turn| turn.all_heard(now)) {
            return;
        }
        let Some(mut turn) = self.turn.take() else {
            return;
        };
        self.turns.agent_stopped();
        self.responder = None;
        let text = turn.text();
        let says_end_phrase = turn.kind == TurnKind::Reply
            && self
                .end_call_phrases
                .iter()
                .chain(&self.closing_phrases)
                .any(|phrase| contains_phrase(&text, phrase));
        self.keep_agent_turn(&mut turn, text, now);
        self.last_activity = now;
        if let Some(transfer) = turn.transfer.take() {
            self.start_transfer(transfer);
            return;
        }
        if turn.opt_out {
            self.end(EndedReason::OptOut, None);
            return;
        }
        if turn.end_call
            || says_end_phrase
            || (turn.kind == TurnKind::Reply && self.hangup_after_reply)
        {
            self.end(EndedReason::AgentHangup, None);
            return;
        }
        match turn.kind {
            TurnKind::Welcome if self.engine == ConversationEngine::Keypad => {
                self.keypad_prompt(false).await;
            }
            TurnKind::Welcome | TurnKind::Reply => {}
            TurnKind::Announcement => match self.welcome_speech() {
                Some(message) if self.announcements_left > 0 => {
                    self.announcements_left -= 1;
                    self.start_speaking(TurnKind::Announcement, message, None)
                        .await;
                }
                _ => self.end(EndedReason::AgentHangup, None),
            },
            TurnKind::KeypadPrompt => {
                let wait = self
                    .keypad_menu
                    .as_ref()
                    .map_or(Duration::from_secs(5), |menu| menu.timeout);
                self.keypad = KeypadPhase::Waiting {
                    deadline: now + wait,
                };
            }
            TurnKind::KeypadChoice => self.end(EndedReason::AgentHangup, None),
            TurnKind::VoicemailMessage => self.end(EndedReason::Voicemail, None),
        }
    }

    /// Stops the agent mid-turn: clears the carrier's buffer, cancels the responder and keeps
    /// what the caller heard in the transcript and the LLM history.
    pub(super) async fn interrupt(&mut self, send_clear: bool) {
        let now = Instant::now();
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.turns.agent_stopped();
        self.responder = None;
        self.playback.reset();
        if send_clear && turn.first_frame_at.is_some() {
            self.codec.encode_clear(&mut self.outbound);
            self.flush_outbound().await;
            // The carrier dropped what it had not played; so does the recording.
            self.playout_end = now;
            if let Some(recorder) = self.recorder.as_mut() {
                recorder.drop_agent_backlog();
            }
        }
        let heard = turn.heard_text(now, self.playback.rate());
        debug!(call_id = %self.call_id, heard = %heard, "agent interrupted");
        let mut turn = turn;
        self.keep_agent_turn(&mut turn, heard, now);
        self.last_activity = now;
        if let Some(transfer) = turn.transfer.take() {
            self.start_transfer(transfer);
        }
        // The callee talked over the confirmation of their opt-out: it stands.
        if turn.opt_out {
            self.end(EndedReason::OptOut, None);
        }
    }

    /// Records what the caller heard of an agent turn in the transcript and the model's
    /// history; a turn that called tools is kept even when it said nothing, so its calls
    /// have a turn to show on.
    fn keep_agent_turn(&mut self, turn: &mut AgentTurn, text: String, now: Instant) {
        if text.is_empty() && turn.tool_ids.is_empty() {
            return;
        }
        if !text.is_empty() && matches!(turn.kind, TurnKind::Welcome | TurnKind::Reply) {
            // What the agent just asked decides which unfinished answers mean "wait".
            self.turns.expect_answer(AnswerKind::asked_by(&text));
            self.history
                .push(ChatMessage::new(ChatRole::Assistant, text.clone()));
        }
        let index = self.transcript.len();
        self.place_tool_calls(std::mem::take(&mut turn.tool_ids), index);
        self.push_turn(Speaker::Assistant, text, now);
    }
}

//! The loop's side of in-call tools: recording finished calls and telling the model about
//! them, pressing keys as tones after what has been said, and the transfer (asked of the
//! carrier once its message has been heard; a refusal goes back to the model, which tells
//! the callee, and the call goes on).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::{Instant, timeout};
use tracing::{debug, warn};
use voxline_media::carrier::sip;
use voxline_media::rtp::telephone_event::dtmf_event_code;
use voxline_media::synth::{DtmfToneGenerator, samples_for_duration};

use super::CallLoop;
use super::turn::{PendingTransfer, Segment, Speech, TurnKind};
use crate::conversation::responder::{FinishedTool, ToolEvent, ToolRun};
use crate::conversation::transport::MediaTransport;
use crate::ended_reason::EndedReason;
use crate::providers::{ChatMessage, END_CALL_TOOL, LlmRequest, OPT_OUT_TOOL};
use crate::tools::{ToolCallRecord, ToolError};

/// How long each key's tone lasts: as long as the SIP transport holds a key's event.
const KEY_TONE: Duration = Duration::from_millis(sip::KEY_TONE_MS as u64);
/// The silence after each key, so a detector hears two presses of the same key.
const KEY_GAP: Duration = Duration::from_millis(sip::KEY_GAP_MS as u64);

impl<T: MediaTransport> CallLoop<T> {
    /// The tools a new reply may call.
    pub(super) fn tool_run(&self) -> ToolRun {
        ToolRun {
            tools: self.tools.clone(),
            records: self.tool_tx.clone(),
            calls_left: self
                .tools
                .limits
                .per_call
                .saturating_sub(self.tool_calls_made),
        }
    }

    /// The model called a tool during the current turn.
    pub(super) fn on_tool_started(&mut self, id: String, counted: bool) {
        if counted {
            self.tool_calls_made += 1;
        }
        self.tools_in_flight += 1;
        if let Some(turn) = self.turn.as_mut() {
            turn.tool_ids.push(id);
        }
    }

    /// The agent turn at `index` of the transcript made `ids`' calls.
    pub(super) fn place_tool_calls(&mut self, ids: Vec<String>, index: usize) {
        for id in ids {
            self.tool_turns.insert(id, index);
        }
    }

    pub(super) async fn on_tool_event(&mut self, event: ToolEvent) {
        match event {
            ToolEvent::Finished(tool) => {
                self.record_tool(&tool);
                if tool.for_history {
                    self.history
                        .push(ChatMessage::tool_calls(vec![tool.call.clone()]));
                    self.history.push(tool.result_message());
                }
            }
            ToolEvent::Transferred { tool, number } => {
                self.transferring = false;
                self.record_tool(&tool);
                match tool.outcome {
                    Ok(_) => {
                        self.transfer = Some((number, tool.at + tool.latency));
                        self.end(EndedReason::Transferred, None);
                    }
                    Err(_) if self.ended.is_none() => {
                        // The callee is still here: the model says what happened.
                        self.history
                            .push(ChatMessage::tool_calls(vec![tool.call.clone()]));
                        self.history.push(tool.result_message());
                        let request = self.reply_request();
                        self.start_speaking(TurnKind::Reply, Speech::Reply(request), None)
                            .await;
                    }
                    Err(_) => {}
                }
            }
        }
    }

    /// The request for a reply to the conversation so far.
    pub(super) fn reply_request(&self) -> LlmRequest {
        LlmRequest {
            system_prompt: self.prompt.clone(),
            history: self.history.clone(),
            tools: {
                let mut tools = self.tools.specs();
                if self.tool_calls_made >= self.tools.limits.per_call {
                    // Out of calls: the agent can still hang up, and still honour an opt-out.
                    tools.retain(|tool| tool.name == END_CALL_TOOL || tool.name == OPT_OUT_TOOL);
                }
                tools
            },
            sim_script: Arc::clone(&self.sim_script),
            sim_questions: Arc::clone(&self.sim_questions),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            ..LlmRequest::default()
        }
    }

    fn record_tool(&mut self, tool: &FinishedTool) {
        self.tools_in_flight = self.tools_in_flight.saturating_sub(1);
        if let Err(error) = &tool.outcome {
            debug!(call_id = %self.call_id, tool = %tool.call.name, %error, "tool failed");
        }
        self.tool_records.push(ToolCallRecord {
            id: tool.call.id.clone(),
            name: tool.call.name.clone(),
            arguments: tool.arguments.clone(),
            result: tool.outcome.as_ref().ok().cloned(),
            error: tool.outcome.as_ref().err().cloned(),
            latency: tool.latency,
            at: tool.at,
            turn_index: 0,
        });
    }

    /// Queues the tones of `digits` after what the turn has said so far. A carrier that sends
    /// keys as telephone events (SIP) gets silence of the same length instead, behind a
    /// `dtmf` command that goes out with its first frame, so the events play where the tones
    /// would have.
    pub(super) fn queue_keys(&mut self, digits: &str) {
        let rate = self.playback.rate();
        let events = self.codec.sends_dtmf_events();
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let tone = samples_for_duration(rate, KEY_TONE);
        let gap = samples_for_duration(rate, KEY_GAP);
        if events {
            let keys: String = digits
                .chars()
                .filter(|&digit| dtmf_event_code(digit).is_some())
                .collect();
            if keys.len() < digits.chars().count() {
                warn!(call_id = %self.call_id, digits, "keys that are not DTMF keys not pressed");
            }
            if keys.is_empty() {
                return;
            }
            let silence = (tone + gap) * keys.len();
            let index = turn.segments.len();
            turn.segments.push(Segment {
                text: String::new(),
                mark: format!("t{}s{index}", turn.id),
                expected_samples: silence,
                audio: std::iter::repeat_n(0, silence).collect(),
                synthesized: true,
                sent_samples: 0,
                first_sent_at: None,
                acked_at: None,
                keys: Some(keys),
            });
            return;
        }
        let mut audio = VecDeque::with_capacity((tone + gap) * digits.len());
        let mut generator = DtmfToneGenerator::new(rate);
        let mut buffer = vec![0_i16; tone + gap];
        for digit in digits.chars() {
            let tone_ms = u32::try_from(KEY_TONE.as_millis()).unwrap_or(u32::MAX);
            if let Err(error) = generator.start(digit, tone_ms) {
                warn!(call_id = %self.call_id, %error, "key not pressed");
                continue;
            }
            generator.fill(&mut buffer);
            audio.extend(buffer.iter().copied());
        }
        let index = turn.segments.len();
        turn.segments.push(Segment {
            text: String::new(),
            mark: format!("t{}s{index}", turn.id),
            expected_samples: audio.len(),
            audio,
            synthesized: true,
            sent_samples: 0,
            first_sent_at: None,
            acked_at: None,
            keys: None,
        });
    }

    /// Asks the carrier to bridge the callee, in a task of its own (a barge-in does not
    /// cancel a transfer that has begun).
    pub(super) fn start_transfer(&mut self, pending: PendingTransfer) {
        if self.ended.is_some() {
            self.record_tool(&FinishedTool {
                call: pending.call,
                arguments: pending.arguments,
                outcome: Err("the call ended before the transfer began".to_owned()),
                latency: Duration::ZERO,
                at: SystemTime::now(),
                for_history: false,
            });
            return;
        }
        self.transferring = true;
        let service = Arc::clone(&self.tools.service);
        let records = self.tool_tx.clone();
        let started = Instant::now();
        let at = SystemTime::now();
        tokio::spawn(async move {
            let outcome = service
                .transfer(&pending.number)
                .await
                .map(|()| serde_json::json!({ "transferredTo": pending.number }))
                .map_err(|ToolError(error)| error);
            let tool = FinishedTool {
                call: pending.call,
                arguments: pending.arguments,
                outcome,
                latency: started.elapsed(),
                at,
                for_history: true,
            };
            let _ = records.send(ToolEvent::Transferred {
                tool,
                number: pending.number,
            });
        });
    }

    /// At hang-up: waits a bounded time for tools still running, so their outcome (a
    /// booking, a transfer) is recorded; then places every record on its turn.
    pub(super) async fn drain_tools(&mut self) {
        let deadline = Instant::now() + self.tool_drain_timeout;
        while self.tools_in_flight > 0 || self.transferring {
            match timeout(
                deadline.saturating_duration_since(Instant::now()),
                self.tool_rx.recv(),
            )
            .await
            {
                Ok(Some(ToolEvent::Finished(tool))) => self.record_tool(&tool),
                Ok(Some(ToolEvent::Transferred { tool, number })) => {
                    self.transferring = false;
                    self.record_tool(&tool);
                    if tool.outcome.is_ok() {
                        self.transfer = Some((number, tool.at + tool.latency));
                        // The carrier may end the stream before it answers the transfer
                        // request (Twilio's `stop` can overtake its reply): that hang-up
                        // is the transfer.
                        if self.ended == Some(EndedReason::CallerHangup) {
                            self.ended = Some(EndedReason::Transferred);
                        }
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        let last_agent_turn = self.transcript.len().saturating_sub(1);
        for record in &mut self.tool_records {
            record.turn_index = self
                .tool_turns
                .get(&record.id)
                .copied()
                .unwrap_or(last_agent_turn);
        }
    }
}

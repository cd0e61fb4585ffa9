//! The callee's end of a Twilio Media Stream, as a phone behind Twilio has it: the websocket
//! to our `/media/twilio` endpoint, `connected` and `start`, a 20 ms media frame every tick,
//! the agent's audio and marks taken in and measured, `clear` obeyed, `stop` on hang-up.

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior, interval, sleep_until};
use tokio_tungstenite::connect_async_with_config;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use voxline_media::carrier::{OutboundFrame, ServerCommand};
use voxline_media::g711;

use super::{
    Callee, CalleeBehaviour, CalleeOptions, CalleeReport, FRAME, LATE_AFTER, MACHINE_GREETING,
    SPURT_GAP, ScriptStep, SimCallee, Voice,
};
use crate::conversation::{MediaTransport, TransportMessage, WebSocketTransport};

/// Read buffer of the callee's websocket: most of a burst of agent frames in one read.
pub const MEDIA_READ_BUFFER: usize = 4 * 1024;

impl SimCallee {
    /// Connects to `ws_url`, starts a Twilio stream with `params` as `customParameters` (the
    /// media token among them) and plays the call until it ends.
    pub async fn run(
        ws_url: String,
        params: Vec<(String, String)>,
        script: Vec<ScriptStep>,
        behaviour: CalleeBehaviour,
        options: CalleeOptions,
    ) -> CalleeReport {
        // tungstenite zero-fills its whole read buffer (128 KiB by default) before every read;
        // media messages are a few hundred bytes, so a small buffer saves that per frame and
        // its memory per call.
        let config = WebSocketConfig::default().read_buffer_size(MEDIA_READ_BUFFER);
        match connect_async_with_config(ws_url.as_str(), Some(config), false).await {
            Ok((socket, _response)) => {
                Self::run_on(
                    WebSocketTransport::new(socket),
                    params,
                    script,
                    behaviour,
                    options,
                )
                .await
            }
            Err(error) => CalleeReport {
                error: Some(format!("connecting to {ws_url}: {error}")),
                ..CalleeReport::default()
            },
        }
    }
}

impl<T: MediaTransport> Callee<T> {
    /// Sends the text in `self.text`.
    pub(super) async fn send_text(&mut self) -> bool {
        match self.transport.send(OutboundFrame::Text(&self.text)).await {
            Ok(()) => true,
            Err(error) => {
                self.finish_with_error(error.to_string());
                false
            }
        }
    }

    fn finish_with_error(&mut self, error: String) {
        if !self.done {
            self.report.error = Some(error);
            self.done = true;
        }
    }

    pub(super) async fn play(&mut self, params: &[(String, String)]) {
        self.side.connected(&mut self.text);
        if !self.send_text().await {
            return;
        }
        let params: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.side.start(&params, &mut self.text);
        if !self.send_text().await {
            return;
        }
        self.report.connected = true;
        self.started = Instant::now();
        self.my_turn_ended = self.started;
        if self.behaviour == CalleeBehaviour::AnsweringMachine {
            self.start_speaking(MACHINE_GREETING);
        }
        if self.script.is_empty() && self.behaviour != CalleeBehaviour::AnsweringMachine {
            self.script_done_at = Some(self.started);
        }
        let cancel = self.options.cancel.clone();
        let cancelled = cancel.cancelled();
        let hard_stop = sleep_until(self.started + self.options.max_call);
        tokio::pin!(cancelled, hard_stop);
        let mut ticker = interval(FRAME);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
        while !self.done {
            // Media first; the rare branches last, so a frame's wake-up does not poll the
            // cancellation token (a mutex) on its way.
            tokio::select! {
                biased;
                message = self.transport.recv() => self.on_message(message).await,
                _ = ticker.tick() => self.on_tick().await,
                () = &mut hard_stop => {
                    self.report.error = Some("call exceeded the callee's time bound".to_owned());
                    self.hang_up(false).await;
                }
                () = &mut cancelled => {
                    // The carrier leg was hung up from the service's side: to the callee that
                    // is the agent hanging up, however the close and the hang-up race.
                    self.report.agent_hung_up = true;
                    self.hang_up(self.report.error.is_none()).await;
                }
            }
        }
        self.report.duration = self.started.elapsed();
        if self.jitter_samples > 0 {
            self.report.mean_jitter = self.jitter_total / self.jitter_samples as u32;
        }
    }

    /// Sends `stop` and closes; `clean` when the script itself hung up.
    pub(super) async fn hang_up(&mut self, clean: bool) {
        self.side.stop(&mut self.text);
        // The agent may already have closed; a failed stop changes nothing.
        let _ = self.transport.send(OutboundFrame::Text(&self.text)).await;
        self.transport.close().await;
        self.report.ended_cleanly = clean && self.report.error.is_none();
        self.done = true;
    }

    async fn on_message(&mut self, message: Option<TransportMessage>) {
        let text = match message {
            Some(TransportMessage::Text(text)) => text,
            Some(TransportMessage::Binary(_)) => return,
            Some(TransportMessage::Closed) | None => {
                self.report.agent_hung_up = true;
                self.report.ended_cleanly = self.report.error.is_none();
                self.done = true;
                // Answers the agent's close frame, completing the closing handshake.
                self.transport.close().await;
                return;
            }
        };
        let now = Instant::now();
        match self.side.parse_server(&text, &mut self.server_audio) {
            Ok(ServerCommand::Media) => self.on_agent_audio(now),
            Ok(ServerCommand::Mark { name }) => {
                if self.playout_end <= now {
                    self.echo_mark(&name).await;
                } else {
                    self.pending_marks.push_back((self.playout_end, name));
                }
            }
            Ok(ServerCommand::Clear) => {
                self.report.clears += 1;
                if let Some(since) = self.interrupting_since.take() {
                    self.report
                        .barge_in_stops
                        .push(now.saturating_duration_since(since));
                }
                self.playout_end = now;
                while let Some((_, name)) = self.pending_marks.pop_front() {
                    self.echo_mark(&name).await;
                }
            }
            Ok(ServerCommand::Ignored) => {}
            Err(error) => self.report.error = Some(format!("unreadable server message: {error}")),
        }
    }

    async fn echo_mark(&mut self, name: &str) {
        self.side.mark(name, &mut self.text);
        if self.send_text().await {
            self.report.marks_echoed += 1;
        }
    }

    fn on_agent_audio(&mut self, now: Instant) {
        let played = Duration::from_micros(self.server_audio.len() as u64 * 1_000_000 / 8_000);
        self.report.agent_frames += 1;
        self.report.agent_audio += played;
        // Within a talk spurt, audio is late when the playback buffer ran dry before it came:
        // the listener heard a gap. Carriers buffer, so audio sent ahead is never late.
        let in_spurt = self
            .last_frame_at
            .is_some_and(|previous| now.saturating_duration_since(previous) < SPURT_GAP);
        if in_spurt && now > self.playout_end + LATE_AFTER {
            self.report.late_frames += 1;
        }
        if in_spurt {
            // How long the playback buffer had been empty when this audio came (0 when ahead).
            let gap = now.saturating_duration_since(self.playout_end);
            self.jitter_total += gap;
            self.jitter_samples += 1;
            self.report.max_jitter = self.report.max_jitter.max(gap);
        }
        self.playout_end = self.playout_end.max(now) + played;
        if self.report.greeting_latency.is_none() {
            self.report.greeting_latency = Some(now.saturating_duration_since(self.started));
        }
        if let Some(line_end) = self.awaiting_reply.take() {
            self.report
                .turn_latencies
                .push(now.saturating_duration_since(line_end));
        }
        self.agent_spoke = true;
        self.agent_started_at.get_or_insert(now);
        self.last_frame_at = Some(now);
        if let Some(menu) = self.menu.as_mut()
            && let Some(key) = menu.hear(&self.server_audio)
        {
            self.report.digits_heard.push(key);
        }
    }

    async fn on_tick(&mut self) {
        let now = Instant::now();
        while self
            .pending_marks
            .front()
            .is_some_and(|(due, _)| *due <= now)
        {
            if let Some((_, name)) = self.pending_marks.pop_front() {
                self.echo_mark(&name).await;
            }
        }
        if matches!(self.voice, Voice::Silence) {
            self.next_step(now).await;
            if self.done {
                return;
            }
        }
        let finished_line = self.fill_frame();
        g711::encode_mulaw_into(&self.pcm, &mut self.mulaw);
        self.side.media(&self.mulaw, &mut self.text);
        if !self.send_text().await {
            return;
        }
        if let Some(expects_reply) = finished_line {
            self.line_ended(Instant::now(), expects_reply);
        }
    }
}

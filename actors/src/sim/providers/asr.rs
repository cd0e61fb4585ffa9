//! The sim ASR: the caller's words come from the call's script, the caller's audio says how
//! much of the current line has been said.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep_until};

use super::{SimConfig, UseCounter};
use crate::providers::{AsrContext, AsrEvent, AsrProvider, AsrStream, ProviderError, ProviderKind};
use crate::sim::lines::{LineTiming, spoken_text};

/// Sim ASR: the loop's VAD and turn-taking find the utterances; each one's text is the next
/// line of the call's script (its words, see [`lines`](crate::sim::lines)).
///
/// It streams as a real one does: while the caller's audio arrives it sends interim
/// transcripts of the line's words in proportion to the speech heard so far (by the line's
/// [`LineTiming`], the pace the sim callee speaks at, whatever the audio is), then the whole
/// line as the final, `asr_latency` after `finalize`. A line the loop discards (a
/// backchannel over the agent) is skipped.
#[derive(Debug)]
pub struct SimAsr {
    latency: Duration,
    counter: Arc<UseCounter>,
    interim_results: bool,
}

impl SimAsr {
    /// A sim ASR with `config`'s latency and fault.
    pub fn new(config: SimConfig) -> Self {
        Self {
            latency: config.asr_latency,
            counter: Arc::new(UseCounter::new(ProviderKind::Asr, config.fail)),
            interim_results: config.interim_results,
        }
    }
}

#[async_trait]
impl AsrProvider for SimAsr {
    async fn open(&self, context: AsrContext) -> Result<Box<dyn AsrStream>, ProviderError> {
        let mut stream = SimAsrStream {
            script: context.sim_script,
            next_line: 0,
            latency: self.latency,
            counter: Arc::clone(&self.counter),
            pending: VecDeque::new(),
            closed: false,
            timing: None,
            hearing: Hearing::default(),
            interim_results: self.interim_results,
        };
        stream.start_line();
        Ok(Box::new(stream))
    }
}

/// Caller audio quieter than this (RMS of a frame) is not speech to the sim ASR.
const SIM_SPEECH_RMS: f64 = 200.0;
/// A gap in the speech shorter than this is part of it (between syllables and words); a
/// longer one is a pause, not counted as speech.
const SIM_GAP_MS: u32 = 300;
/// Quiet after which the speech of a part that has nearly all been heard counts as said
/// whole (the generated speech fades out before its nominal end).
const SIM_PART_END_QUIET_MS: u32 = 100;
/// How near its end a part must be for that quiet to complete it.
const SIM_PART_END_SLACK_MS: u32 = 300;

/// How much of the current line the sim ASR has heard.
#[derive(Debug, Default, Clone, Copy)]
struct Hearing {
    /// Speech heard, in ms (with the short gaps inside it).
    speech_ms: u32,
    /// Quiet since the last loud frame, in ms.
    gap_ms: u32,
    /// Words sent in interims.
    words_sent: usize,
}

/// One sim recognition session.
struct SimAsrStream {
    script: Arc<[String]>,
    next_line: usize,
    latency: Duration,
    counter: Arc<UseCounter>,
    /// Events with the time they become due, in order.
    pending: VecDeque<(Instant, Result<AsrEvent, ProviderError>)>,
    closed: bool,
    /// When the current line's words are said.
    timing: Option<LineTiming>,
    hearing: Hearing,
    /// Interim transcripts are sent (see [`SimConfig::interim_results`]).
    interim_results: bool,
}

impl SimAsrStream {
    /// Starts listening for the current line.
    fn start_line(&mut self) {
        self.timing = self
            .script
            .get(self.next_line)
            .map(|line| LineTiming::of(line));
        self.hearing = Hearing::default();
    }

    /// One frame of `ms` of the caller: counts its speech, sends the words it completed.
    fn hear(&mut self, loud: bool, ms: u32) {
        let Some(timing) = self.timing.as_ref() else {
            return;
        };
        let hearing = &mut self.hearing;
        if loud {
            if hearing.gap_ms < SIM_GAP_MS && hearing.speech_ms > 0 {
                hearing.speech_ms += hearing.gap_ms;
            }
            hearing.speech_ms += ms;
            hearing.gap_ms = 0;
        } else if hearing.speech_ms > 0 {
            let before = hearing.gap_ms;
            hearing.gap_ms = hearing.gap_ms.saturating_add(ms);
            if before < SIM_PART_END_QUIET_MS && hearing.gap_ms >= SIM_PART_END_QUIET_MS {
                // The part being said, if it was nearly over, is over.
                if let Some(&end) = timing
                    .part_ends
                    .iter()
                    .find(|&&end| end >= hearing.speech_ms)
                    && end - hearing.speech_ms <= SIM_PART_END_SLACK_MS
                {
                    hearing.speech_ms = end;
                }
            }
        }
        let heard = timing.words_heard(hearing.speech_ms);
        if heard > hearing.words_sent {
            hearing.words_sent = heard;
            if !self.interim_results {
                return;
            }
            let text = timing.first_words(heard).to_owned();
            self.pending
                .push_back((Instant::now(), Ok(AsrEvent::Interim(text))));
        }
    }
}

#[async_trait]
impl AsrStream for SimAsrStream {
    fn push_audio(&mut self, samples: &[i16], sample_rate: u32) -> Result<(), ProviderError> {
        // The text comes from the script; the audio only says how much of it was said.
        if samples.is_empty() || sample_rate == 0 {
            return Ok(());
        }
        let energy: f64 = samples.iter().map(|&s| f64::from(s).powi(2)).sum();
        let loud = (energy / samples.len() as f64).sqrt() > SIM_SPEECH_RMS;
        let ms = u32::try_from(samples.len() as u64 * 1000 / u64::from(sample_rate)).unwrap_or(0);
        self.hear(loud, ms);
        Ok(())
    }

    fn finalize(&mut self) -> Result<(), ProviderError> {
        let due = Instant::now() + self.latency;
        if self.counter.use_fails() {
            self.pending.push_back((due, Err(self.counter.injected())));
            return Ok(());
        }
        let line = self
            .script
            .get(self.next_line)
            .map(|line| spoken_text(line))
            .unwrap_or_default();
        self.next_line += 1;
        self.start_line();
        if !line.trim().is_empty() {
            self.pending
                .push_back((due, Ok(AsrEvent::Final { text: line })));
        }
        self.pending.push_back((due, Ok(AsrEvent::UtteranceEnd)));
        Ok(())
    }

    fn discard(&mut self) -> Result<(), ProviderError> {
        // The line that was being said was not a turn: the next utterance is the next line.
        if self.hearing.words_sent > 0 {
            self.next_line += 1;
            self.start_line();
        } else {
            self.hearing = Hearing::default();
        }
        Ok(())
    }

    async fn next_event(&mut self) -> Option<Result<AsrEvent, ProviderError>> {
        let Some(&(due, _)) = self.pending.front() else {
            if self.closed {
                return None;
            }
            // Nothing until the loop finalizes an utterance, which it does between polls.
            return std::future::pending().await;
        };
        sleep_until(due).await;
        self.pending.pop_front().map(|(_, event)| event)
    }

    async fn close(&mut self) -> Result<(), ProviderError> {
        self.closed = true;
        self.pending.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voxline_media::synth::SpeechLikeGenerator;

    /// Feeds `ms` of speech-like sound (or silence) in 20 ms frames.
    fn feed(stream: &mut dyn AsrStream, speech: Option<&mut SpeechLikeGenerator>, ms: u32) {
        let mut frame = [0i16; 160];
        let mut speech = speech;
        for _ in 0..ms / 20 {
            match speech.as_deref_mut() {
                Some(generator) => generator.fill(&mut frame),
                None => frame.fill(0),
            }
            stream.push_audio(&frame, 8_000).unwrap();
        }
    }

    /// The interims delivered so far.
    async fn interims(stream: &mut dyn AsrStream) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(Some(Ok(event))) =
            tokio::time::timeout(Duration::from_millis(1), stream.next_event()).await
        {
            if let AsrEvent::Interim(text) = event {
                seen.push(text);
            }
        }
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn sim_asr_streams_the_words_heard_so_far_and_skips_a_discarded_line() {
        let asr = SimAsr::new(SimConfig::default());
        let context = AsrContext {
            sim_script: vec![
                "[backchannel] uh-huh".to_owned(),
                "I live in [pause 1500] Pune".to_owned(),
            ]
            .into(),
            ..AsrContext::default()
        };
        let mut stream = asr.open(context).await.unwrap();
        // The backchannel, heard and then discarded: the next utterance is the next line.
        let mut voice = SpeechLikeGenerator::new(8_000, 3);
        feed(stream.as_mut(), Some(&mut voice), 400);
        feed(stream.as_mut(), None, 200);
        assert_eq!(interims(stream.as_mut()).await, ["uh-huh."]);
        stream.discard().unwrap();
        // "I live in" (643 ms), the pause, "Pune" (400 ms), as the sim callee says it.
        let mut voice = SpeechLikeGenerator::new(8_000, 4);
        feed(stream.as_mut(), Some(&mut voice), 640);
        feed(stream.as_mut(), None, 200);
        assert_eq!(
            interims(stream.as_mut()).await,
            ["I", "I live", "I live in"],
            "the words before the pause, by its middle"
        );
        feed(stream.as_mut(), None, 1300);
        feed(stream.as_mut(), Some(&mut voice), 400);
        feed(stream.as_mut(), None, 200);
        // The line's end closes the sentence, as a recognizer that punctuates writes it.
        assert_eq!(interims(stream.as_mut()).await, ["I live in Pune."]);
        stream.finalize().unwrap();
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::Final {
                text: "I live in Pune.".to_owned()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sim_asr_without_interim_results_sends_only_the_final() {
        let asr = SimAsr::new(SimConfig {
            interim_results: false,
            ..SimConfig::default()
        });
        let context = AsrContext {
            sim_script: vec!["I live in Pune".to_owned()].into(),
            ..AsrContext::default()
        };
        let mut stream = asr.open(context).await.unwrap();
        let mut voice = SpeechLikeGenerator::new(8_000, 5);
        feed(stream.as_mut(), Some(&mut voice), 1100);
        feed(stream.as_mut(), None, 200);
        assert!(interims(stream.as_mut()).await.is_empty());
        assert!(
            !stream.peek(false).unwrap(),
            "the sim ASR does not transcribe on request"
        );
        stream.finalize().unwrap();
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::Final {
                text: "I live in Pune.".to_owned()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sim_asr_delivers_script_lines_after_latency() {
        let asr = SimAsr::new(SimConfig::default());
        let context = AsrContext {
            sim_script: vec!["hello there".to_owned()].into(),
            ..AsrContext::default()
        };
        let mut stream = asr.open(context).await.unwrap();
        let started = Instant::now();
        stream.finalize().unwrap();
        let first = stream.next_event().await.unwrap().unwrap();
        assert_eq!(
            first,
            AsrEvent::Final {
                text: "hello there.".into()
            }
        );
        assert_eq!(started.elapsed(), SimConfig::default().asr_latency);
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::UtteranceEnd
        );
        // Past the script: an empty utterance, still closed by UtteranceEnd.
        stream.finalize().unwrap();
        assert_eq!(
            stream.next_event().await.unwrap().unwrap(),
            AsrEvent::UtteranceEnd
        );
    }
}

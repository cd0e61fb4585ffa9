//! OpenAI-compatible transcription per utterance, for servers that do not
//! stream (OpenAI Whisper, Groq, faster-whisper and whisper.cpp servers).
//!
//! Caller audio is kept in memory; when the call loop's endpointer ends an
//! utterance (`finalize`), the audio since the previous one goes as a WAV file
//! to `POST {base}/audio/transcriptions`, and the text comes back as one
//! `Final` followed by `UtteranceEnd`. At a pause the loop judges on words
//! (`peek`), the utterance so far goes the same way and comes back as an
//! `Interim`, so a number read out in groups is heard as unfinished.

use super::{HttpPolicy, send_with_retry};
use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::multipart::{Form, Part};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use voxline_actors::providers::{
    AsrContext, AsrEvent, AsrProvider, AsrStream, ProviderError, ProviderKind,
};

/// The longest utterance sent, in seconds; older audio is dropped first.
pub const MAX_UTTERANCE_SECONDS: usize = 30;

/// How a server wants the transcription form filled: servers that call
/// themselves OpenAI-compatible differ in the field that names the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TranscriptionForm {
    /// OpenAI, Groq and whisper.cpp: the model in `model`.
    #[default]
    OpenAi,
    /// faster-whisper-server: the model in `model_name` (it ignores `model`),
    /// and `response_format=text` refused, so `json` as everywhere.
    FasterWhisper,
}

impl TranscriptionForm {
    /// The form field that names the model.
    pub fn model_field(self) -> &'static str {
        match self {
            Self::OpenAi => "model",
            Self::FasterWhisper => "model_name",
        }
    }
}

/// An OpenAI-compatible transcription endpoint.
#[derive(Clone)]
pub struct OpenAiAsr {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    form: TranscriptionForm,
    policy: HttpPolicy,
}

impl std::fmt::Debug for OpenAiAsr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiAsr")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl OpenAiAsr {
    /// A client for `model` at `base_url` (up to `/v1`).
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        api_key: Option<String>,
        model: &str,
        policy: HttpPolicy,
    ) -> Self {
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            model: model.to_string(),
            form: TranscriptionForm::OpenAi,
            policy,
        }
    }

    /// The same client filling its form for `form`'s server.
    pub fn with_form(mut self, form: TranscriptionForm) -> Self {
        self.form = form;
        self
    }
}

#[async_trait]
impl AsrProvider for OpenAiAsr {
    async fn open(&self, context: AsrContext) -> Result<Box<dyn AsrStream>, ProviderError> {
        let (tx, events) = mpsc::unbounded_channel();
        // ISO 639-1, as Whisper expects: the primary subtag of the agent's language.
        let language = context
            .language
            .split(['-', '_'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        Ok(Box::new(OpenAiAsrStream {
            client: self.clone(),
            language,
            rate: context.sample_rate.max(8_000),
            audio: Vec::new(),
            tx,
            events,
            requests: Vec::new(),
            utterance: Arc::new(AtomicU64::new(0)),
            peeking: None,
            dropped: 0,
            peeked: Arc::default(),
        }))
    }
}

/// One call's recognition: audio buffered per utterance.
struct OpenAiAsrStream {
    client: OpenAiAsr,
    language: String,
    rate: u32,
    audio: Vec<i16>,
    tx: mpsc::UnboundedSender<Result<AsrEvent, ProviderError>>,
    events: mpsc::UnboundedReceiver<Result<AsrEvent, ProviderError>>,
    requests: Vec<JoinHandle<()>>,
    /// Counts utterances ended or dropped: a peek's answer about an earlier one is stale.
    utterance: Arc<AtomicU64>,
    /// The transcription of the utterance so far, while it runs.
    peeking: Option<JoinHandle<()>>,
    /// Samples dropped from the front of `audio` (past the cap) since it was last emptied,
    /// so positions stay comparable as the buffer slides.
    dropped: u64,
    /// The last peek's answer, kept to serve as the final when no speech followed it.
    peeked: Arc<Mutex<Option<PeekAnswer>>>,
}

/// What a peek heard, and of which sound.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PeekAnswer {
    /// The utterance it was about (see `OpenAiAsrStream::utterance`).
    utterance: u64,
    /// Where the speech it was given began and ended, in samples since the buffer emptied.
    speech: Option<(u64, u64)>,
    /// Its transcript.
    text: String,
}

impl OpenAiAsrStream {
    /// Where the buffered speech (its `loud` frames, from [`loud_frames`]) begins and ends,
    /// in samples since the buffer emptied.
    fn speech_span(&self, loud: Option<(usize, usize)>) -> Option<(u64, u64)> {
        let frame = frame_len(self.rate);
        loud.map(|(first, last)| {
            (
                self.dropped + (first * frame) as u64,
                self.dropped + ((last + 1) * frame) as u64,
            )
        })
    }

    /// The utterance is over (transcribed or dropped): a peek still running is about it.
    fn next_utterance(&mut self) {
        self.utterance.fetch_add(1, Ordering::SeqCst);
        if let Some(peek) = self.peeking.take() {
            peek.abort();
        }
    }
}

impl Drop for OpenAiAsrStream {
    fn drop(&mut self) {
        for request in &self.requests {
            request.abort();
        }
        if let Some(peek) = &self.peeking {
            peek.abort();
        }
    }
}

/// The prompt a peek at talk over the agent carries: Whisper primed with backchannel
/// spellings writes a short "uh-huh" as "Uh." instead of "Ah." or "Ow." (tiny.en, on an
/// 8 kHz call), and still writes "Wait, stop." as said.
const BACKCHANNEL_PROMPT: &str = "Uh-huh. Mm-hm. Okay. Yeah.";

async fn transcribe(
    client: &OpenAiAsr,
    language: &str,
    prompt: Option<&'static str>,
    wav: Vec<u8>,
) -> Result<String, ProviderError> {
    let wav = Bytes::from(wav);
    let url = format!("{}/audio/transcriptions", client.base_url);
    // A form is consumed by its request, so each attempt builds its own; the
    // audio is shared, not copied.
    let form = || {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("audio/wav"));
        let file = Part::stream_with_length(wav.clone(), wav.len() as u64)
            .file_name("utterance.wav")
            .headers(headers);
        // One decoding pass: Whisper's fallback to higher temperatures on an unsure answer
        // decodes the same audio up to six times, seconds on a CPU, while the caller waits.
        let form = Form::new()
            .text(client.form.model_field(), client.model.clone())
            .text("response_format", "json")
            .text("temperature", "0");
        let form = if language.is_empty() {
            form
        } else {
            form.text("language", language.to_string())
        };
        let form = match prompt {
            Some(prompt) => form.text("prompt", prompt),
            None => form,
        };
        form.part("file", file)
    };
    let response = send_with_retry(ProviderKind::Asr, "openai asr", &client.policy, || {
        let req = client.http.post(&url).multipart(form());
        match &client.api_key {
            Some(key) => req.bearer_auth(key),
            None => req,
        }
    })
    .await?;
    let answer = tokio::time::timeout(client.policy.read_timeout, response.json::<Value>())
        .await
        .map_err(|_| ProviderError::Timeout {
            provider: ProviderKind::Asr,
            after: client.policy.read_timeout,
        })?
        .map_err(|err| ProviderError::Stream {
            provider: ProviderKind::Asr,
            message: format!("openai asr answer: {err}"),
        })?;
    answer
        .get("text")
        .and_then(Value::as_str)
        .map(|t| t.trim().to_string())
        .ok_or_else(|| ProviderError::Stream {
            provider: ProviderKind::Asr,
            message: "openai asr answer has no text".into(),
        })
}

/// Quieter than this (RMS of a 20 ms frame, about -50 dBFS) is silence, not speech.
const SILENCE_RMS: f64 = 100.0;
/// Silence kept on each side of the speech, as a recognizer expects.
const PADDING_FRAMES: usize = 10;

/// The part of `samples` from 200 ms before the first 20 ms frame with sound to 200 ms after
/// the last. The buffer holds everything since the previous utterance, often seconds of the
/// caller listening to the agent; Whisper given long silence decodes slowly (it falls back
/// to higher temperatures, and may invent words), so only the speech is sent. `loud` is
/// [`loud_frames`] of `samples`, found once by the caller.
fn spoken_part(samples: &[i16], rate: u32, loud: Option<(usize, usize)>) -> &[i16] {
    let frame = frame_len(rate);
    let Some((first, last)) = loud else {
        return samples;
    };
    let start = first.saturating_sub(PADDING_FRAMES) * frame;
    let end = ((last + 1 + PADDING_FRAMES) * frame).min(samples.len());
    &samples[start..end]
}

/// Samples in one 20 ms frame at `rate`.
fn frame_len(rate: u32) -> usize {
    (rate as usize / 50).max(1)
}

/// The first and last 20 ms frames of `samples` with sound, if any.
fn loud_frames(samples: &[i16], rate: u32) -> Option<(usize, usize)> {
    let loud = |chunk: &[i16]| {
        let energy: f64 = chunk.iter().map(|&s| f64::from(s).powi(2)).sum();
        (energy / chunk.len().max(1) as f64).sqrt() > SILENCE_RMS
    };
    let frame = frame_len(rate);
    Some((
        samples.chunks(frame).position(loud)?,
        samples.chunks(frame).rposition(loud)?,
    ))
}

#[async_trait]
impl AsrStream for OpenAiAsrStream {
    fn push_audio(&mut self, samples: &[i16], sample_rate: u32) -> Result<(), ProviderError> {
        self.rate = sample_rate;
        self.audio.extend_from_slice(samples);
        let cap = MAX_UTTERANCE_SECONDS * sample_rate as usize;
        if self.audio.len() > cap {
            let excess = self.audio.len() - cap;
            self.audio.drain(..excess);
            self.dropped += excess as u64;
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<(), ProviderError> {
        // A peek that heard all of this speech (only silence came after) is the transcript:
        // no second request, and the reply starts a recognizer's round trip sooner.
        let current = self.utterance.load(Ordering::SeqCst);
        let loud = loud_frames(&self.audio, self.rate);
        let speech = self.speech_span(loud);
        let heard = self
            .peeked
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .filter(|answer| answer.utterance == current && answer.speech == speech);
        self.next_utterance();
        let samples = std::mem::take(&mut self.audio);
        self.dropped = 0;
        if let Some(answer) = heard {
            tracing::debug!("the utterance so far was all of it: its transcript is the final");
            if !answer.text.is_empty() {
                let _ = self.tx.send(Ok(AsrEvent::Final { text: answer.text }));
            }
            let _ = self.tx.send(Ok(AsrEvent::UtteranceEnd));
            return Ok(());
        }
        let spoken = spoken_part(&samples, self.rate, loud);
        tracing::debug!(
            buffered_ms = samples.len() as u64 * 1000 / u64::from(self.rate.max(1)),
            sent_ms = spoken.len() as u64 * 1000 / u64::from(self.rate.max(1)),
            "transcribing an utterance"
        );
        let wav = voxline_media::wav::mono_file(spoken, self.rate);
        let client = self.client.clone();
        let language = self.language.clone();
        let tx = self.tx.clone();
        self.requests.retain(|r| !r.is_finished());
        self.requests.push(tokio::spawn(async move {
            match transcribe(&client, &language, None, wav).await {
                Ok(text) => {
                    if !text.is_empty() {
                        let _ = tx.send(Ok(AsrEvent::Final { text }));
                    }
                    let _ = tx.send(Ok(AsrEvent::UtteranceEnd));
                }
                Err(err) => {
                    let _ = tx.send(Err(err));
                }
            }
        }));
        Ok(())
    }

    fn discard(&mut self) -> Result<(), ProviderError> {
        // A backchannel over the agent is not a turn: its audio must not open the next
        // utterance's transcript.
        self.next_utterance();
        self.audio.clear();
        self.dropped = 0;
        Ok(())
    }

    fn peek(&mut self, over_agent: bool) -> Result<bool, ProviderError> {
        // A newer pause supersedes the previous question: only the latest words matter.
        if let Some(previous) = self.peeking.take() {
            previous.abort();
        }
        let loud = loud_frames(&self.audio, self.rate);
        let wav =
            voxline_media::wav::mono_file(spoken_part(&self.audio, self.rate, loud), self.rate);
        let (client, language, tx) = (self.client.clone(), self.language.clone(), self.tx.clone());
        let utterance = Arc::clone(&self.utterance);
        let asked_in = utterance.load(Ordering::SeqCst);
        let speech = self.speech_span(loud);
        let peeked = Arc::clone(&self.peeked);
        self.peeking = Some(tokio::spawn(async move {
            let prompt = over_agent.then_some(BACKCHANNEL_PROMPT);
            let answer = transcribe(&client, &language, prompt, wav).await;
            if utterance.load(Ordering::SeqCst) != asked_in {
                return;
            }
            let text = match answer {
                Ok(text) => {
                    tracing::debug!(%text, "the utterance so far");
                    if let Ok(mut slot) = peeked.lock() {
                        *slot = Some(PeekAnswer {
                            utterance: asked_in,
                            speech,
                            text: text.clone(),
                        });
                    }
                    text
                }
                // A failed peek answers with no words, so the loop stops waiting for them,
                // and is never kept as the final; a dead server shows at the utterance's
                // own transcription.
                Err(error) => {
                    tracing::debug!(%error, "transcribing an utterance so far failed");
                    String::new()
                }
            };
            let _ = tx.send(Ok(AsrEvent::Interim(text)));
        }));
        Ok(true)
    }

    async fn next_event(&mut self) -> Option<Result<AsrEvent, ProviderError>> {
        // `self.tx` keeps the channel open, so this waits until the next answer.
        self.events.recv().await
    }

    async fn close(&mut self) -> Result<(), ProviderError> {
        for request in self.requests.drain(..) {
            request.abort();
        }
        if let Some(peek) = self.peeking.take() {
            peek.abort();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_speech_and_200_ms_around_it_is_sent() {
        let rate = 8_000;
        let mut samples = vec![0i16; 5 * rate as usize];
        let mut tone = voxline_media::synth::ToneGenerator::new(rate, 440.0, -12.0);
        let mut speech = vec![0i16; rate as usize];
        tone.fill(&mut speech);
        samples.extend_from_slice(&speech);
        samples.extend(std::iter::repeat_n(0i16, 2 * rate as usize));
        let sent = spoken_part(&samples, rate, loud_frames(&samples, rate));
        // One second of speech and 200 ms either side, to the frame.
        assert_eq!(sent.len(), 8_000 + 2 * 1_600);
        assert_eq!(sent.as_ptr(), samples[5 * 8_000 - 1_600..].as_ptr());
        // All silence: sent as it is (the recognizer says nothing).
        let quiet = vec![0i16; 800];
        assert_eq!(
            spoken_part(&quiet, rate, loud_frames(&quiet, rate)).len(),
            800
        );
    }
}

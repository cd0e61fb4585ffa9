//! OpenAI-compatible transcription per utterance, for servers that do not
//! stream (OpenAI Whisper, Groq, faster-whisper and whisper.cpp servers).
//!
//! Caller audio is kept in memory; when the call loop's endpointer ends an
//! utterance (`finalize`), the audio since the previous one goes as a WAV file
//! to `POST {base}/audio/transcriptions`, and the text comes back as one
//! `Final` followed by `UtteranceEnd`.

use super::{HttpPolicy, send_with_retry};
use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::multipart::{Form, Part};
use serde_json::Value;
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
}

impl Drop for OpenAiAsrStream {
    fn drop(&mut self) {
        for request in &self.requests {
            request.abort();
        }
    }
}

async fn transcribe(
    client: &OpenAiAsr,
    language: &str,
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
        let form = Form::new()
            .text(client.form.model_field(), client.model.clone())
            .text("response_format", "json");
        let form = if language.is_empty() {
            form
        } else {
            form.text("language", language.to_string())
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

#[async_trait]
impl AsrStream for OpenAiAsrStream {
    fn push_audio(&mut self, samples: &[i16], sample_rate: u32) -> Result<(), ProviderError> {
        self.rate = sample_rate;
        self.audio.extend_from_slice(samples);
        let cap = MAX_UTTERANCE_SECONDS * sample_rate as usize;
        if self.audio.len() > cap {
            let excess = self.audio.len() - cap;
            self.audio.drain(..excess);
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<(), ProviderError> {
        let samples = std::mem::take(&mut self.audio);
        let wav = voxline_media::wav::mono_file(&samples, self.rate);
        let client = self.client.clone();
        let language = self.language.clone();
        let tx = self.tx.clone();
        self.requests.retain(|r| !r.is_finished());
        self.requests.push(tokio::spawn(async move {
            match transcribe(&client, &language, wav).await {
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

    async fn next_event(&mut self) -> Option<Result<AsrEvent, ProviderError>> {
        // `self.tx` keeps the channel open, so this waits until the next answer.
        self.events.recv().await
    }

    async fn close(&mut self) -> Result<(), ProviderError> {
        for request in self.requests.drain(..) {
            request.abort();
        }
        Ok(())
    }
}

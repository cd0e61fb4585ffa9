//! The speaking side of one agent turn, as a task: streams the LLM reply (or takes a fixed
//! text), cuts it into sentences, synthesizes them in order and sends the audio to the loop.
//!
//! Running it as a task keeps vendor round trips off the loop, which must keep pacing frames.
//! Dropping the [`Responder`] aborts the task, which drops the LLM and TTS streams at once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::text::SentenceChunker;
use crate::providers::{
    END_CALL_TOOL, LlmEvent, LlmProvider, LlmRequest, LlmStream, ProviderError, TtsProvider,
    TtsStream,
};

/// Events buffered between the task and the loop; the loop drains them as they come.
const EVENT_BUFFER: usize = 32;

/// What the turn says.
#[derive(Debug)]
pub(crate) enum ResponsePlan {
    /// Known sentences (welcome, menu, announcement).
    Say(Vec<String>),
    /// An LLM reply to the conversation so far.
    Reply(LlmRequest),
}

/// What the task reports, in order.
#[derive(Debug)]
pub(crate) enum ResponderEvent {
    /// The LLM's first token arrived this long after the request.
    FirstToken(Duration),
    /// A sentence goes to TTS; the audio that follows belongs to it.
    Segment(String),
    /// The turn's first TTS audio arrived this long after its request.
    FirstAudio(Duration),
    /// Audio of the current sentence.
    Audio {
        /// 16-bit mono PCM.
        samples: Vec<i16>,
        /// Its rate.
        rate: u32,
    },
    /// The current sentence is fully synthesized.
    SegmentDone,
    /// The LLM called `end_call`.
    EndCall,
    /// Nothing more will come.
    Finished,
    /// A provider failed; the call ends.
    Failed(ProviderError),
}

/// Handle on a running responder task; dropping it cancels the task.
#[derive(Debug)]
pub(crate) struct Responder {
    pub(crate) events: mpsc::Receiver<ResponderEvent>,
    task: JoinHandle<()>,
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the task needs besides its plan.
pub(crate) struct Voice {
    pub(crate) llm: Arc<dyn LlmProvider>,
    pub(crate) tts: Arc<dyn TtsProvider>,
    pub(crate) voice: String,
    pub(crate) sample_rate: u32,
}

impl Responder {
    /// Starts a task speaking `plan`.
    pub(crate) fn spawn(plan: ResponsePlan, voice: Voice) -> Self {
        let (tx, events) = mpsc::channel(EVENT_BUFFER);
        let task = tokio::spawn(async move {
            if let Err(Stop::Failed(error)) = speak(plan, voice, &tx).await {
                // The loop may have abandoned the turn meanwhile; then nobody needs to know.
                let _ = tx.send(ResponderEvent::Failed(error)).await;
            }
        });
        Self { events, task }
    }
}

/// Why the task stopped before `Finished`.
enum Stop {
    /// The loop dropped the receiver: the turn was abandoned.
    Gone,
    /// A provider failed.
    Failed(ProviderError),
}

impl From<ProviderError> for Stop {
    fn from(error: ProviderError) -> Self {
        Stop::Failed(error)
    }
}

async fn emit(tx: &mpsc::Sender<ResponderEvent>, event: ResponderEvent) -> Result<(), Stop> {
    tx.send(event).await.map_err(|_| Stop::Gone)
}

async fn next_llm(
    stream: &mut Option<Box<dyn LlmStream>>,
) -> Option<Result<LlmEvent, ProviderError>> {
    match stream {
        Some(stream) => stream.next_event().await,
        None => std::future::pending().await,
    }
}

async fn next_tts(
    stream: &mut Option<Box<dyn TtsStream>>,
) -> Option<Result<Vec<i16>, ProviderError>> {
    match stream {
        Some(stream) => stream.next_chunk().await,
        None => std::future::pending().await,
    }
}

/// The task body: LLM tokens and TTS audio are read concurrently so synthesis of one sentence
/// overlaps generation of the next.
async fn speak(
    plan: ResponsePlan,
    voice: Voice,
    tx: &mpsc::Sender<ResponderEvent>,
) -> Result<(), Stop> {
    let mut sentences: VecDeque<String> = VecDeque::new();
    let mut chunker = SentenceChunker::default();
    let llm_started = Instant::now();
    let mut llm = match plan {
        ResponsePlan::Say(text) => {
            sentences.extend(text);
            None
        }
        ResponsePlan::Reply(request) => Some(voice.llm.stream(request).await?),
    };
    let mut tts: Option<Box<dyn TtsStream>> = None;
    let mut tts_started = Instant::now();
    let mut first_token = true;
    let mut first_audio = true;
    let mut first_segment = true;
    loop {
        if tts.is_none() {
            if first_segment && sentences.is_empty() && llm.is_some() {
                // Silence is what the caller notices: the reply's first words go to TTS as
                // soon as they exist, not when the first sentence is complete.
                sentences.extend(chunker.take_words());
            }
            if let Some(sentence) = sentences.pop_front() {
                first_segment = false;
                tts_started = Instant::now();
                let stream = voice
                    .tts
                    .synthesize(&sentence, &voice.voice, voice.sample_rate)
                    .await?;
                emit(tx, ResponderEvent::Segment(sentence)).await?;
                tts = Some(stream);
            } else if llm.is_none() {
                emit(tx, ResponderEvent::Finished).await?;
                return Ok(());
            }
        }
        tokio::select! {
            event = next_llm(&mut llm), if llm.is_some() => match event {
                Some(Ok(LlmEvent::Token(token))) => {
                    if first_token {
                        first_token = false;
                        emit(tx, ResponderEvent::FirstToken(llm_started.elapsed())).await?;
                    }
                    sentences.extend(chunker.push(&token));
                }
                Some(Ok(LlmEvent::ToolCall { name, .. })) => {
                    if name == END_CALL_TOOL {
                        emit(tx, ResponderEvent::EndCall).await?;
                    }
                }
                Some(Ok(LlmEvent::Done { .. })) | None => {
                    sentences.extend(chunker.finish());
                    llm = None;
                }
                Some(Err(error)) => return Err(Stop::Failed(error)),
            },
            chunk = next_tts(&mut tts), if tts.is_some() => match chunk {
                Some(Ok(samples)) => {
                    if first_audio {
                        first_audio = false;
                        emit(tx, ResponderEvent::FirstAudio(tts_started.elapsed())).await?;
                    }
                    let rate = tts.as_ref().map_or(voice.sample_rate, |s| s.sample_rate());
                    emit(tx, ResponderEvent::Audio { samples, rate }).await?;
                }
                Some(Err(error)) => return Err(Stop::Failed(error)),
                None => {
                    tts = None;
                    emit(tx, ResponderEvent::SegmentDone).await?;
                }
            },
        }
    }
}

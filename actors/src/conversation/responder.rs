//! The speaking side of one agent turn, as a task: streams the LLM reply (or takes a fixed
//! text), cuts it into sentences, synthesizes them in order and sends the audio to the loop.
//!
//! Running it as a task keeps vendor round trips off the loop, which must keep pacing frames.
//! Dropping the [`Responder`] aborts the task, which drops the LLM and TTS streams at once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::text::SentenceChunker;
use crate::providers::{
    ChatMessage, END_CALL_TOOL, LlmEvent, LlmProvider, LlmRequest, LlmStream, ProviderError,
    ToolCallRequest, TtsProvider, TtsStream,
};
use crate::tools::{CallTools, ToolBehavior, ToolError, valid_dtmf_digits};

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
    /// The callee opted out: hang up with `opt-out` once the turn has been heard.
    OptOut,
    /// The model called a tool; its record will arrive on the loop's tool channel.
    ToolStarted {
        /// The call's id.
        id: String,
        /// It counts against the per-call limit (hanging up never does).
        counted: bool,
    },
    /// Press these keys now, after what has been said so far.
    Dtmf(String),
    /// Bridge the callee to `number` once the turn has been heard.
    Transfer {
        /// The model's call.
        call: ToolCallRequest,
        /// Its arguments.
        arguments: Value,
        /// The destination.
        number: String,
    },
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
    pub(crate) tools: ToolRun,
    /// A reply is cut after this many sentences (a model that will not stop).
    pub(crate) max_sentences: usize,
}

/// The tools a reply may call, and where their records go.
#[derive(Clone)]
pub(crate) struct ToolRun {
    pub(crate) tools: CallTools,
    /// The loop's channel: every finished tool call is recorded there.
    pub(crate) records: mpsc::UnboundedSender<ToolEvent>,
    /// How many more tool calls the call may make.
    pub(crate) calls_left: u32,
}

/// A tool call that finished, sent to the loop by whoever finished it (the responder, or
/// the task running it, which outlives a barge-in).
#[derive(Debug)]
pub(crate) enum ToolEvent {
    /// A call finished (or was refused).
    Finished(FinishedTool),
    /// A transfer the loop started was accepted or refused by the carrier.
    Transferred {
        /// The call's record.
        tool: FinishedTool,
        /// The destination.
        number: String,
    },
}

/// One finished tool call.
#[derive(Debug, Clone)]
pub(crate) struct FinishedTool {
    pub(crate) call: ToolCallRequest,
    pub(crate) arguments: Value,
    pub(crate) outcome: Result<Value, String>,
    pub(crate) latency: Duration,
    pub(crate) at: SystemTime,
    /// The model is told the outcome (not for `end_call` or a fire-and-forget's late result).
    pub(crate) for_history: bool,
}

impl FinishedTool {
    /// The tool message that answers the call, for the model.
    pub(crate) fn result_message(&self) -> ChatMessage {
        let content = match &self.outcome {
            Ok(value) => value.to_string(),
            Err(error) => json!({ "error": error }).to_string(),
        };
        ChatMessage::tool_result(self.call.id.clone(), content)
    }
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
    let mut plan_request = None;
    let mut llm = match plan {
        ResponsePlan::Say(text) => {
            sentences.extend(text);
            None
        }
        ResponsePlan::Reply(request) => {
            let stream = voice.llm.stream(request.clone()).await?;
            plan_request = Some(request);
            Some(stream)
        }
    };
    let mut request = match &plan_request {
        Some(request) => request.clone(),
        None => LlmRequest::default(),
    };
    let mut tts: Option<Box<dyn TtsStream>> = None;
    let mut tts_started = Instant::now();
    let mut first_token = true;
    let mut first_audio = true;
    let mut first_segment = true;
    let mut called: Vec<ToolCallRequest> = Vec::new();
    let mut awaiting: Option<BoxFuture<'static, Vec<FinishedTool>>> = None;
    let mut tools = voice.tools.clone();
    let mut turn_calls = 0_u32;
    let mut spoken = 0_usize;
    loop {
        if llm.is_none() && tts.is_none() && sentences.is_empty() && !called.is_empty() {
            let calls = std::mem::take(&mut called);
            let run = run_tools(calls, &mut tools, &mut turn_calls, tx, &mut sentences).await?;
            awaiting = run;
        }
        if tts.is_none() {
            if first_segment && sentences.is_empty() && llm.is_some() {
                // Silence is what the caller notices: the reply's first words go to TTS as
                // soon as they exist, not when the first sentence is complete.
                sentences.extend(chunker.take_words());
            }
            if plan_request.is_some() && spoken >= voice.max_sentences {
                // Enough: the rest of this reply is never said, nor asked for.
                sentences.clear();
                llm = None;
                called.clear();
            }
            if let Some(sentence) = sentences.pop_front() {
                spoken += 1;
                first_segment = false;
                tts_started = Instant::now();
                let stream = voice
                    .tts
                    .synthesize(&sentence, &voice.voice, voice.sample_rate)
                    .await?;
                emit(tx, ResponderEvent::Segment(sentence)).await?;
                tts = Some(stream);
            } else if llm.is_none() && called.is_empty() && awaiting.is_none() {
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
                Some(Ok(LlmEvent::ToolCall { id, name, arguments_json })) => {
                    called.push(ToolCallRequest { id, name, arguments_json });
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
            results = next_results(&mut awaiting), if awaiting.is_some() => {
                awaiting = None;
                // The model goes on with the results; out of calls, it must answer in words.
                request.history.push(ChatMessage::tool_calls(
                    results.iter().map(|r| r.call.clone()).collect(),
                ));
                request
                    .history
                    .extend(results.iter().map(FinishedTool::result_message));
                if turn_calls >= tools.tools.limits.per_turn || tools.calls_left == 0 {
                    request.tools.retain(|tool| tool.name == END_CALL_TOOL);
                }
                llm = Some(voice.llm.stream(request.clone()).await?);
            }
        }
    }
}

async fn next_results(
    awaiting: &mut Option<BoxFuture<'static, Vec<FinishedTool>>>,
) -> Vec<FinishedTool> {
    match awaiting {
        Some(results) => results.await,
        None => std::future::pending().await,
    }
}

/// A finished call, now.
fn finished(
    call: ToolCallRequest,
    arguments: Value,
    outcome: Result<Value, String>,
    for_history: bool,
) -> FinishedTool {
    FinishedTool {
        call,
        arguments,
        outcome,
        latency: Duration::ZERO,
        at: SystemTime::now(),
        for_history,
    }
}

/// Runs the calls of one model answer, in order. Engine tools act at once (keys, hang-up,
/// transfer); service tools start in tasks of their own and their messages are queued to be
/// said meanwhile. Returns the results the model waits for, or `None` when the model does
/// not go on (nothing to wait for, a hang-up or a transfer).
async fn run_tools(
    calls: Vec<ToolCallRequest>,
    run: &mut ToolRun,
    turn_calls: &mut u32,
    tx: &mpsc::Sender<ResponderEvent>,
    sentences: &mut VecDeque<String>,
) -> Result<Option<BoxFuture<'static, Vec<FinishedTool>>>, Stop> {
    let mut waits: Vec<BoxFuture<'static, FinishedTool>> = Vec::new();
    let mut goes_on = true;
    for call in calls {
        let behavior = run.tools.get(&call.name).map(|tool| tool.behavior.clone());
        let counted = !matches!(
            behavior,
            Some(ToolBehavior::EndCall { .. } | ToolBehavior::OptOut)
        );
        emit(
            tx,
            ResponderEvent::ToolStarted {
                id: call.id.clone(),
                counted,
            },
        )
        .await?;
        let arguments = match call.arguments_json.trim() {
            "" => Ok(json!({})),
            text => serde_json::from_str::<Value>(text)
                .map_err(|error| format!("the arguments are not JSON: {error}")),
        };
        let limit_reached =
            counted && (*turn_calls >= run.tools.limits.per_turn || run.calls_left == 0);
        if counted {
            *turn_calls += 1;
            run.calls_left = run.calls_left.saturating_sub(1);
        }
        let (arguments, refusal) = match (arguments, behavior.as_ref()) {
            (_, None) => (
                json!({}),
                Some(format!("there is no tool named {}", call.name)),
            ),
            (Err(error), Some(_)) => (Value::String(call.arguments_json.clone()), Some(error)),
            (Ok(arguments), Some(_)) if limit_reached => (
                arguments,
                Some("the tool call limit is reached; answer without tools".to_owned()),
            ),
            (Ok(arguments), Some(_)) => (arguments, None),
        };
        if let Some(error) = refusal {
            let result = finished(call, arguments, Err(error), true);
            let _ = run.records.send(ToolEvent::Finished(result.clone()));
            waits.push(Box::pin(std::future::ready(result)));
            continue;
        }
        match behavior {
            None => {}
            Some(ToolBehavior::EndCall { goodbye }) => {
                if let Some(goodbye) = goodbye {
                    sentences.push_back(goodbye);
                }
                emit(tx, ResponderEvent::EndCall).await?;
                let _ = run.records.send(ToolEvent::Finished(finished(
                    call,
                    arguments,
                    Ok(json!({"ended": true})),
                    false,
                )));
                goes_on = false;
            }
            Some(ToolBehavior::OptOut) => {
                emit(tx, ResponderEvent::OptOut).await?;
                let _ = run.records.send(ToolEvent::Finished(finished(
                    call,
                    arguments,
                    Ok(json!({"ended": true, "optedOut": true})),
                    false,
                )));
                goes_on = false;
            }
            Some(ToolBehavior::Transfer { destinations }) => {
                let wanted = arguments
                    .get("destination")
                    .or_else(|| arguments.get("number"))
                    .and_then(Value::as_str);
                let chosen = match wanted {
                    Some(number) => destinations.iter().find(|d| d.number == number),
                    None if destinations.len() == 1 => destinations.first(),
                    None => None,
                };
                match chosen {
                    Some(destination) => {
                        if !destination.message.trim().is_empty() {
                            sentences.push_back(destination.message.clone());
                        }
                        emit(
                            tx,
                            ResponderEvent::Transfer {
                                call,
                                arguments,
                                number: destination.number.clone(),
                            },
                        )
                        .await?;
                        goes_on = false;
                    }
                    None => {
                        let error = format!(
                            "destination must be one of: {}",
                            destinations
                                .iter()
                                .map(|d| d.number.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                        let result = finished(call, arguments, Err(error), true);
                        let _ = run.records.send(ToolEvent::Finished(result.clone()));
                        waits.push(Box::pin(std::future::ready(result)));
                    }
                }
            }
            Some(ToolBehavior::Dtmf) => {
                let digits = arguments
                    .get("digits")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let outcome = match digits {
                    Some(digits) if valid_dtmf_digits(&digits) => {
                        emit(tx, ResponderEvent::Dtmf(digits.clone())).await?;
                        Ok(json!({ "pressed": digits }))
                    }
                    _ => Err("digits must be 1 to 32 of 0-9, * and #".to_owned()),
                };
                let result = finished(call, arguments, outcome, true);
                let _ = run.records.send(ToolEvent::Finished(result.clone()));
                waits.push(Box::pin(std::future::ready(result)));
            }
            Some(ToolBehavior::Service {
                message,
                fire_and_forget,
            }) => {
                if let Some(message) = message.filter(|m| !m.trim().is_empty()) {
                    sentences.push_back(message);
                }
                let service = Arc::clone(&run.tools.service);
                let records = run.records.clone();
                let (done_tx, done_rx) = oneshot::channel();
                let started = Instant::now();
                let at = SystemTime::now();
                let task_call = call.clone();
                let task_arguments = arguments.clone();
                // A task of its own: a barge-in drops this responder, never a booking that
                // has begun.
                tokio::spawn(async move {
                    let outcome = service
                        .run(&task_call, &task_arguments)
                        .await
                        .map_err(|ToolError(error)| error);
                    let result = FinishedTool {
                        call: task_call,
                        arguments: task_arguments,
                        outcome,
                        latency: started.elapsed(),
                        at,
                        for_history: !fire_and_forget,
                    };
                    let _ = done_tx.send(result.clone());
                    let _ = records.send(ToolEvent::Finished(result));
                });
                if fire_and_forget {
                    waits.push(Box::pin(std::future::ready(finished(
                        call,
                        arguments,
                        Ok(json!({"status": "started"})),
                        false,
                    ))));
                } else {
                    waits.push(Box::pin(async move {
                        done_rx.await.unwrap_or_else(|_| {
                            finished(call, arguments, Err("the tool task died".to_owned()), true)
                        })
                    }));
                }
            }
        }
    }
    if !goes_on || waits.is_empty() {
        return Ok(None);
    }
    Ok(Some(Box::pin(futures::future::join_all(waits))))
}

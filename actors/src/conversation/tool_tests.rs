//! In-call tools end to end: the loop against the simulated callee over an in-memory
//! connection on a paused clock, with the sim LLM choosing tools and a scripted service.

use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;
use crate::providers::{ToolCallRequest, ToolSpec};
use crate::sim::callee::{CalleeBehaviour, CalleeOptions, CalleeReport, ScriptStep, SimCallee};
use crate::sim::providers::SimConfig;
use crate::tools::{
    CallTool, CallTools, ToolBehavior, ToolError, ToolLimits, ToolService, TransferDestination,
};

const DESK: &str = "+14155550100";

/// A service that answers from a script and remembers what it was asked.
struct ScriptedService {
    answer: Result<Value, ToolError>,
    delay: Duration,
    transfer: Result<(), ToolError>,
    transfer_delay: Duration,
    asked: Mutex<Vec<(String, Value)>>,
    transfers: Mutex<Vec<String>>,
}

impl ScriptedService {
    fn new(answer: Result<Value, ToolError>, transfer: Result<(), ToolError>) -> Arc<Self> {
        Arc::new(Self {
            answer,
            delay: Duration::from_millis(300),
            transfer,
            transfer_delay: Duration::ZERO,
            asked: Mutex::new(Vec::new()),
            transfers: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl ToolService for ScriptedService {
    async fn run(&self, call: &ToolCallRequest, arguments: &Value) -> Result<Value, ToolError> {
        self.asked
            .lock()
            .unwrap()
            .push((call.name.clone(), arguments.clone()));
        tokio::time::sleep(self.delay).await;
        self.answer.clone()
    }

    async fn transfer(&self, number: &str) -> Result<(), ToolError> {
        self.transfers.lock().unwrap().push(number.to_owned());
        tokio::time::sleep(self.transfer_delay).await;
        self.transfer.clone()
    }
}

fn tools(service: Arc<ScriptedService>) -> CallTools {
    let desk = TransferDestination {
        number: DESK.to_owned(),
        description: "the front desk".to_owned(),
        message: "Let me connect you with the front desk now.".to_owned(),
    };
    CallTools {
        tools: vec![
            CallTool {
                spec: ToolSpec::end_call(),
                behavior: ToolBehavior::EndCall { goodbye: None },
            },
            CallTool {
                spec: ToolSpec::transfer_call(std::slice::from_ref(&desk)),
                behavior: ToolBehavior::Transfer {
                    destinations: vec![desk],
                },
            },
            CallTool {
                spec: ToolSpec::dtmf(),
                behavior: ToolBehavior::Dtmf,
            },
            CallTool {
                spec: ToolSpec {
                    name: "order_status".to_owned(),
                    description: "Look up the delivery status of an order".to_owned(),
                    parameters: json!({"type": "object",
                        "properties": {"orderId": {"type": "string"}}}),
                },
                behavior: ToolBehavior::Service {
                    message: Some("One moment while I look that up.".to_owned()),
                    fire_and_forget: false,
                },
            },
        ],
        service,
        limits: ToolLimits::default(),
    }
}

async fn call(
    script: Vec<ScriptStep>,
    service: Arc<ScriptedService>,
    prompt: &str,
) -> (ConversationOutcome, CalleeReport) {
    let config = ConversationConfig {
        call_id: "call-tools".to_owned(),
        welcome_message: "Hello, this is Voxline.".to_owned(),
        prompt: prompt.to_owned(),
        sim_script: crate::sim::callee::spoken_lines(&script),
        tools: tools(service),
        ..ConversationConfig::default()
    };
    let (server, client) = memory_pair(256);
    let params = vec![("token".to_owned(), "t0k".to_owned())];
    let callee = tokio::spawn(SimCallee::run_on(
        client,
        params,
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    ));
    let outcome = run_conversation(
        config,
        Providers::sim(SimConfig::default()),
        server,
        Arc::new(NoopObserver),
        CancellationToken::new(),
    )
    .await;
    (outcome, callee.await.unwrap())
}

fn say(line: &str) -> ScriptStep {
    ScriptStep::Say(line.to_owned())
}

fn agent_lines(outcome: &ConversationOutcome) -> Vec<&str> {
    outcome
        .transcript
        .iter()
        .filter(|t| t.speaker == Speaker::Assistant)
        .map(|t| t.text.as_str())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_phone_menu_hears_the_key_the_agent_presses() {
    let script = vec![
        ScriptStep::Menu {
            text: "For sales, press 1. For support, press 2.".to_owned(),
            expect: '2',
        },
        say("Support desk, how can I help?"),
        say("Okay, bye."),
    ];
    let service = ScriptedService::new(Ok(json!({})), Ok(()));
    let (outcome, report) = call(script, service, "Reach the support team.").await;
    assert_eq!(report.digits_heard, "2", "{report:?}");
    assert_eq!(report.error, None);
    let record = &outcome.tool_calls[0];
    assert_eq!(record.name, "dtmf");
    assert_eq!(record.result, Some(json!({"pressed": "2"})));
    // The silent turn that pressed the key is kept, and the call went on past the menu.
    assert_eq!(
        outcome.transcript[record.turn_index].speaker,
        Speaker::Assistant
    );
    assert!(
        outcome
            .transcript
            .iter()
            .any(|t| t.text == "Support desk, how can I help?")
    );
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
}

#[tokio::test(start_paused = true)]
async fn a_function_result_is_said_in_the_next_words() {
    let script = vec![
        say("What is the status of my order A-1234?"),
        say("Great, thanks. Bye!"),
    ];
    let service = ScriptedService::new(Ok(json!({"message": "It ships tomorrow"})), Ok(()));
    let (outcome, _) = call(script, Arc::clone(&service), "Help with orders.").await;
    assert_eq!(
        service.asked.lock().unwrap().as_slice(),
        [("order_status".to_owned(), json!({"orderId": "A-1234"}))]
    );
    let lines = agent_lines(&outcome);
    assert!(
        lines.iter().any(|l| l.starts_with(
            "One moment while I look that up. Here is what I found: It ships tomorrow."
        )),
        "{lines:?}"
    );
    let record = &outcome.tool_calls[0];
    assert_eq!(record.result, Some(json!({"message": "It ships tomorrow"})));
    assert!(record.latency >= Duration::from_millis(300));
    assert!(
        outcome.transcript[record.turn_index]
            .text
            .contains("It ships tomorrow")
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_function_is_told_and_the_call_goes_on() {
    let script = vec![
        say("What is the status of my order A-1234?"),
        say("Never mind. Bye!"),
    ];
    let service = ScriptedService::new(Err(ToolError("timed out after 5 s".into())), Ok(()));
    let (outcome, _) = call(script, service, "Help with orders.").await;
    let lines = agent_lines(&outcome);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("I could not get that: timed out after 5 s")),
        "{lines:?}"
    );
    assert_eq!(
        outcome.tool_calls[0].error.as_deref(),
        Some("timed out after 5 s")
    );
    assert!(
        outcome
            .transcript
            .iter()
            .any(|t| t.text == "Never mind. Bye!")
    );
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
}

#[tokio::test(start_paused = true)]
async fn asking_for_a_person_says_the_message_then_transfers() {
    let script = vec![say("Can I speak to a person please?"), say("Hello?")];
    let service = ScriptedService::new(Ok(json!({})), Ok(()));
    let (outcome, _) = call(script, Arc::clone(&service), "Be helpful.").await;
    assert_eq!(outcome.ended_reason, EndedReason::Transferred);
    assert_eq!(service.transfers.lock().unwrap().as_slice(), [DESK]);
    assert_eq!(outcome.transfer.as_ref().map(|t| t.0.as_str()), Some(DESK));
    assert_eq!(
        agent_lines(&outcome).last(),
        Some(&"Let me connect you with the front desk now.")
    );
    assert_eq!(outcome.tool_calls[0].name, "transfer_call");
    assert_eq!(
        outcome.tool_calls[0].arguments,
        json!({"destination": DESK})
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_transfer_is_told_and_the_call_goes_on() {
    let script = vec![
        say("Can I speak to a person please?"),
        say("Okay then, bye!"),
    ];
    let service = ScriptedService::new(Ok(json!({})), Err(ToolError("busy".into())));
    let (outcome, _) = call(script, service, "Be helpful.").await;
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
    assert_eq!(outcome.transfer, None);
    assert_eq!(outcome.tool_calls[0].error.as_deref(), Some("busy"));
    let lines = agent_lines(&outcome);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("I'm sorry, I could not transfer you right now.")),
        "{lines:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_per_call_limit_takes_tools_away() {
    let script = vec![
        say("What is the status of my order A-1?"),
        say("And the status of my order A-2?"),
        say("Bye!"),
    ];
    let service = ScriptedService::new(Ok(json!({"status": "shipped"})), Ok(()));
    let config_tools = {
        let mut t = tools(Arc::clone(&service));
        t.limits = ToolLimits {
            per_turn: 4,
            per_call: 1,
        };
        t
    };
    let config = ConversationConfig {
        call_id: "call-limit".to_owned(),
        welcome_message: "Hello.".to_owned(),
        sim_script: crate::sim::callee::spoken_lines(&script),
        tools: config_tools,
        ..ConversationConfig::default()
    };
    let (server, client) = memory_pair(256);
    let callee = tokio::spawn(SimCallee::run_on(
        client,
        Vec::new(),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    ));
    let outcome = run_conversation(
        config,
        Providers::sim(SimConfig::default()),
        server,
        Arc::new(NoopObserver),
        CancellationToken::new(),
    )
    .await;
    let _ = callee.await;
    assert_eq!(service.asked.lock().unwrap().len(), 1);
    let names: Vec<&str> = outcome.tool_calls.iter().map(|c| c.name.as_str()).collect();
    // Out of calls, the agent still hangs up.
    assert_eq!(names, ["order_status", "end_call"]);
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
}

#[tokio::test(start_paused = true)]
async fn a_barge_in_does_not_cancel_a_tool_that_has_begun() {
    // The caller talks over the tool's message: the reply is cut, the tool runs to its end
    // and is recorded, and the model hears its result with the caller's next words.
    let script = vec![
        say("What is the status of my order A-1234?"),
        ScriptStep::Interrupt {
            text: "Sorry, go on.".to_owned(),
            after: Duration::from_millis(300),
        },
        say("Okay, bye!"),
    ];
    let mut service = ScriptedService::new(Ok(json!({"message": "It ships tomorrow"})), Ok(()));
    Arc::get_mut(&mut service).unwrap().delay = Duration::from_secs(2);
    let (outcome, report) = call(script, Arc::clone(&service), "Help with orders.").await;
    assert!(report.clears >= 1, "the caller barged in: {report:?}");
    assert_eq!(service.asked.lock().unwrap().len(), 1);
    let record = outcome
        .tool_calls
        .iter()
        .find(|c| c.name == "order_status")
        .expect("the tool call is recorded");
    assert_eq!(record.result, Some(json!({"message": "It ships tomorrow"})));
    assert!(record.latency >= Duration::from_secs(2));
    // Its turn was kept (what was heard of it) and the call went on to the goodbye.
    assert_eq!(
        outcome.transcript[record.turn_index].speaker,
        Speaker::Assistant
    );
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_stops_before_the_carrier_answers_the_transfer_is_the_transfer() {
    // Carriers end the media stream as they bridge; the stop can overtake their answer.
    let script = vec![say("Can I speak to a person please?"), ScriptStep::Hangup];
    let mut service = ScriptedService::new(Ok(json!({})), Ok(()));
    Arc::get_mut(&mut service).unwrap().transfer_delay = Duration::from_secs(3);
    let (outcome, report) = call(script, Arc::clone(&service), "Be helpful.").await;
    assert!(report.ended_cleanly, "{report:?}");
    assert_eq!(outcome.ended_reason, EndedReason::Transferred);
    assert_eq!(outcome.transfer.as_ref().map(|t| t.0.as_str()), Some(DESK));
}

/// A call whose agent offers `end_call` and `opt_out`.
async fn opt_out_call(script: Vec<ScriptStep>) -> ConversationOutcome {
    let config = ConversationConfig {
        call_id: "call-opt-out".to_owned(),
        welcome_message: "Hello, this is Voxline.".to_owned(),
        prompt: "Remind the callee of their appointment.".to_owned(),
        sim_script: crate::sim::callee::spoken_lines(&script),
        tools: CallTools {
            tools: vec![
                CallTool {
                    spec: ToolSpec::end_call(),
                    behavior: ToolBehavior::EndCall { goodbye: None },
                },
                CallTool {
                    spec: ToolSpec::opt_out(),
                    behavior: ToolBehavior::OptOut,
                },
            ],
            service: ScriptedService::new(Ok(json!({})), Ok(())),
            limits: ToolLimits::default(),
        },
        ..ConversationConfig::default()
    };
    let (server, client) = memory_pair(256);
    let params = vec![("token".to_owned(), "t0k".to_owned())];
    let callee = tokio::spawn(SimCallee::run_on(
        client,
        params,
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    ));
    let outcome = run_conversation(
        config,
        Providers::sim(SimConfig::default()),
        server,
        Arc::new(NoopObserver),
        CancellationToken::new(),
    )
    .await;
    callee.await.unwrap();
    outcome
}

#[tokio::test(start_paused = true)]
async fn a_callee_who_opts_out_hears_a_confirmation_and_the_call_ends_opt_out() {
    let outcome = opt_out_call(vec![say("Mujhe dobara call mat karna.")]).await;
    assert_eq!(outcome.ended_reason, EndedReason::OptOut);
    assert_eq!(outcome.tool_calls.len(), 1, "{:?}", outcome.tool_calls);
    assert_eq!(outcome.tool_calls[0].name, crate::tools::OPT_OUT_TOOL);
    assert!(
        agent_lines(&outcome)
            .iter()
            .any(|l| l.contains("will not call you again")),
        "{:?}",
        agent_lines(&outcome)
    );
}

#[tokio::test(start_paused = true)]
async fn an_opt_out_stands_when_the_callee_talks_over_the_confirmation() {
    let outcome = opt_out_call(vec![
        say("Please stop calling me."),
        ScriptStep::Interrupt {
            text: "Did you hear me?".to_owned(),
            after: Duration::from_millis(600),
        },
    ])
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::OptOut);
}

/// Over SIP the agent's keys are a `dtmf` command for the RTP transport, placed where the
/// tones would have started and followed by their length of silence, not tones in the audio.
#[tokio::test(start_paused = true)]
async fn a_sip_call_presses_keys_as_a_command_before_their_silence() {
    use voxline_media::carrier::sip::{KEY_GAP_MS, KEY_TONE_MS};
    use voxline_media::carrier::{AudioFormat, OutboundFrame};
    use voxline_media::g711::linear_to_mulaw;
    use voxline_media::synth::{
        SpeechLikeGenerator, samples_for_duration, speech_duration_for_text,
    };

    let menu = "For sales, press 1. For support, press 2.";
    let start = StreamStart {
        stream_id: String::new(),
        call_id: None,
        account_id: None,
        from: None,
        to: None,
        custom_parameters: Vec::new(),
        format: AudioFormat::MULAW_8K,
    };
    let config = ConversationConfig {
        call_id: "call-sip-keys".to_owned(),
        carrier: CarrierSession::started(CarrierCodec::sip(AudioFormat::MULAW_8K), Box::new(start)),
        welcome_message: "Hello.".to_owned(),
        prompt: "Reach the support team.".to_owned(),
        sim_script: vec![menu.to_owned()],
        tools: tools(ScriptedService::new(Ok(json!({})), Ok(()))),
        ..ConversationConfig::default()
    };
    let (server, mut transport) = memory_pair(4096);
    let cancel = CancellationToken::new();
    let conversation = tokio::spawn(run_conversation(
        config,
        Providers::sim(SimConfig::default()),
        server,
        Arc::new(NoopObserver),
        cancel.clone(),
    ));
    // The RTP transport's side: 20 ms caller frames (silence, then the menu said as
    // speech-like sound from the 2nd second), and whatever the loop sends.
    let speech_from = 100;
    let speech_frames = samples_for_duration(8_000, speech_duration_for_text(menu)) / 160;
    let mut voice = SpeechLikeGenerator::new(8_000, 7);
    let mut pcm = [0i16; 160];
    let mut pacer = tokio::time::interval(Duration::from_millis(20));
    let mut received = Vec::new();
    let mut frame_index = 0;
    while frame_index < 1_500 {
        tokio::select! {
            _ = pacer.tick() => {
                let frame: Vec<u8> = if (speech_from..speech_from + speech_frames)
                    .contains(&frame_index)
                {
                    voice.fill(&mut pcm);
                    pcm.iter().map(|&s| linear_to_mulaw(s)).collect()
                } else {
                    vec![0xff; 160]
                };
                frame_index += 1;
                if transport.send(OutboundFrame::Binary(&frame)).await.is_err() {
                    break;
                }
            }
            message = transport.recv() => match message {
                Some(TransportMessage::Closed) | None => break,
                Some(message) => received.push(message),
            },
        }
    }
    cancel.cancel();
    conversation.await.unwrap();
    let dtmf = received
        .iter()
        .position(|m| matches!(m, TransportMessage::Text(t) if t.starts_with("dtmf")))
        .expect("a dtmf command");
    assert_eq!(received[dtmf], TransportMessage::Text("dtmf 2".into()));
    let silence: Vec<&Vec<u8>> = received[dtmf + 1..]
        .iter()
        .map_while(|m| match m {
            TransportMessage::Binary(frame) => Some(frame),
            _ => None,
        })
        .collect();
    let key_frames = ((KEY_TONE_MS + KEY_GAP_MS) / 20) as usize;
    assert_eq!(silence.len(), key_frames, "one key's length of audio");
    assert!(
        silence
            .iter()
            .all(|f| f.len() == 160 && f.iter().all(|&b| b == 0xff))
    );
    assert!(
        matches!(&received[dtmf + 1 + key_frames], TransportMessage::Text(t) if t.starts_with("mark ")),
        "the keys' segment ends with its mark"
    );
}

//! End-to-end tests of the conversation loop against the simulated callee, over an in-memory
//! connection on a paused clock (and once over a real loopback websocket).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use voxline_media::synth::speech_duration_for_text;
use voxline_media::wav::WavInfo;

use super::*;
use crate::providers::{
    AsrContext, AsrProvider, AsrStream, LlmProvider, LlmRequest, LlmStream, ProviderError,
    ProviderKind, TtsProvider, TtsStream,
};
use crate::sim::callee::{
    CalleeBehaviour, CalleeOptions, CalleeReport, DtmfMode, ScriptStep, SimCallee,
};
use crate::sim::providers::{SimAsr, SimConfig, SimFailure, SimLlm, SimTts};
use voxline_media::carrier::CarrierKind;

const WELCOME: &str = "Hello! This is Voxline calling about your appointment.";

/// Keeps what the observer hears.
#[derive(Default)]
struct Collect {
    answered: AtomicUsize,
    turns: Mutex<Vec<Turn>>,
    latencies: Mutex<Vec<TurnLatency>>,
}

impl ConversationObserver for Collect {
    fn on_answered(&self, _at: SystemTime) {
        self.answered.fetch_add(1, Ordering::Relaxed);
    }
    fn on_turn(&self, turn: &Turn) {
        self.turns.lock().unwrap().push(turn.clone());
    }
    fn on_latency(&self, latency: &TurnLatency) {
        self.latencies.lock().unwrap().push(*latency);
    }
}

/// Counts provider use, delegating to the sim providers.
#[derive(Default)]
struct Counts {
    asr_opens: AtomicUsize,
    llm_streams: AtomicUsize,
    tts_calls: AtomicUsize,
}

struct CountingAsr(Arc<Counts>, SimAsr);
struct CountingLlm(Arc<Counts>, SimLlm);
struct CountingTts(Arc<Counts>, SimTts);

#[async_trait]
impl AsrProvider for CountingAsr {
    async fn open(&self, context: AsrContext) -> Result<Box<dyn AsrStream>, ProviderError> {
        self.0.asr_opens.fetch_add(1, Ordering::Relaxed);
        self.1.open(context).await
    }
}

#[async_trait]
impl LlmProvider for CountingLlm {
    async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        self.0.llm_streams.fetch_add(1, Ordering::Relaxed);
        self.1.stream(request).await
    }
}

#[async_trait]
impl TtsProvider for CountingTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        self.0.tts_calls.fetch_add(1, Ordering::Relaxed);
        self.1.synthesize(text, voice, sample_rate).await
    }
}

fn counting_providers(config: SimConfig) -> (Providers, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let providers = Providers {
        asr: Arc::new(CountingAsr(
            Arc::clone(&counts),
            SimAsr::new(config.clone()),
        )),
        llm: Arc::new(CountingLlm(
            Arc::clone(&counts),
            SimLlm::new(config.clone()),
        )),
        tts: Arc::new(CountingTts(Arc::clone(&counts), SimTts::new(config))),
    };
    (providers, counts)
}

fn says(lines: &[&str]) -> Vec<ScriptStep> {
    lines
        .iter()
        .map(|line| ScriptStep::Say((*line).to_owned()))
        .collect()
}

fn pipeline(script: &[ScriptStep]) -> ConversationConfig {
    ConversationConfig {
        call_id: "call-test".to_owned(),
        welcome_message: WELCOME.to_owned(),
        prompt: "You are a helpful scheduling assistant.".to_owned(),
        sim_script: crate::sim::callee::spoken_lines(script),
        ..ConversationConfig::default()
    }
}

/// Runs one call: the loop against a sim callee over an in-memory connection.
async fn call(
    config: ConversationConfig,
    providers: Providers,
    script: Vec<ScriptStep>,
    behaviour: CalleeBehaviour,
    options: CalleeOptions,
) -> (ConversationOutcome, CalleeReport, Arc<Collect>) {
    let (server, client) = memory_pair(256);
    let params = vec![("token".to_owned(), "t0k".to_owned())];
    let callee = tokio::spawn(SimCallee::run_on(
        client, params, script, behaviour, options,
    ));
    let observer = Arc::new(Collect::default());
    let outcome = run_conversation(
        config,
        providers,
        server,
        Arc::clone(&observer) as Arc<dyn ConversationObserver>,
        CancellationToken::new(),
    )
    .await;
    let report = callee.await.unwrap();
    (outcome, report, observer)
}

fn texts(outcome: &ConversationOutcome) -> Vec<(Speaker, &str)> {
    outcome
        .transcript
        .iter()
        .map(|turn| (turn.speaker, turn.text.as_str()))
        .collect()
}

fn close_to(actual: Duration, expected: Duration, tolerance: Duration) -> bool {
    actual.abs_diff(expected) <= tolerance
}

#[tokio::test(start_paused = true)]
async fn greeting_is_heard_in_full() {
    let config = ConversationConfig {
        silence_timeout: Duration::from_secs(2),
        ..pipeline(&[])
    };
    let (outcome, report, observer) = call(
        config,
        Providers::sim(SimConfig::default()),
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(observer.answered.load(Ordering::Relaxed), 1);
    assert_eq!(texts(&outcome), [(Speaker::Assistant, WELCOME)]);
    // Each sentence is synthesized on its own, as long as it takes to say.
    let expected: Duration = super::text::split_sentences(WELCOME)
        .iter()
        .map(|sentence| speech_duration_for_text(sentence))
        .sum();
    assert!(
        close_to(report.agent_audio, expected, Duration::from_millis(40)),
        "heard {:?} of {expected:?}",
        report.agent_audio
    );
    // The greeting starts one TTS first byte after the answer.
    let greeting = report.greeting_latency.unwrap();
    assert!(greeting < Duration::from_millis(200), "{greeting:?}");
    assert!(outcome.greeting_latency.unwrap() <= greeting);
    assert!(report.marks_echoed >= 1);
    assert_eq!(report.late_frames, 0);
    assert!(report.max_jitter <= Duration::from_millis(1), "{report:?}");
}

/// A live call's task holds this future for the whole call, so its size is memory per call.
/// An async fn that takes the loop by value stores it twice (44 KiB before the loop was boxed
/// and its wrappers made plain fns, about 13 KiB after).
#[tokio::test]
async fn a_live_calls_future_stays_small() {
    let (server, _client) = memory_pair(1);
    let conversation = run_conversation(
        pipeline(&[]),
        Providers::sim(SimConfig::default()),
        server,
        Arc::new(NoopObserver),
        CancellationToken::new(),
    );
    let size = std::mem::size_of_val(&conversation);
    assert!(
        size <= 16 * 1024,
        "the conversation's future is {size} bytes"
    );
}

#[tokio::test(start_paused = true)]
async fn warm_welcome_audio_plays_without_tts() {
    let (providers, counts) = counting_providers(SimConfig::default());
    let audio: Arc<[i16]> = {
        let mut generator = voxline_media::synth::SpeechLikeGenerator::new(8000, 9);
        let mut samples = vec![0; 8000 * 2];
        generator.fill(&mut samples);
        samples.into()
    };
    let config = ConversationConfig {
        silence_timeout: Duration::from_secs(1),
        welcome_audio: Some(audio),
        ..pipeline(&[])
    };
    let (outcome, report, _) = call(
        config,
        providers,
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(counts.tts_calls.load(Ordering::Relaxed), 0);
    assert_eq!(report.greeting_latency, Some(Duration::ZERO));
    assert!(close_to(
        report.agent_audio,
        Duration::from_secs(2),
        Duration::from_millis(20)
    ));
    assert_eq!(texts(&outcome), [(Speaker::Assistant, WELCOME)]);
}

#[tokio::test(start_paused = true)]
async fn two_turn_conversation_produces_the_expected_transcript() {
    let script = says(&["Hi, who is calling please?", "Alright, thanks. Bye!"]);
    let (outcome, report, observer) = call(
        pipeline(&script),
        Providers::sim(SimConfig::default()),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(
        outcome.ended_reason,
        EndedReason::AgentHangup,
        "{outcome:?}"
    );
    assert_eq!(
        texts(&outcome),
        [
            (Speaker::Assistant, WELCOME),
            (Speaker::User, "Hi, who is calling please?"),
            (
                Speaker::Assistant,
                "Let me note that down for the team. Is there anything else I can help you with?"
            ),
            (Speaker::User, "Alright, thanks. Bye!"),
            (Speaker::Assistant, "Thank you for your time. Goodbye!"),
        ]
    );
    assert_eq!(*observer.turns.lock().unwrap(), outcome.transcript);
    assert!(report.agent_hung_up && report.ended_cleanly, "{report:?}");
    assert_eq!(report.clears, 0);
    assert_eq!(report.late_frames, 0, "{report:?}");

    // One latency record per reply, its parts adding up.
    let sim = SimConfig::default();
    assert_eq!(outcome.latencies.len(), 2);
    assert_eq!(*observer.latencies.lock().unwrap(), outcome.latencies);
    for latency in &outcome.latencies {
        assert!(close_to(
            latency.endpointing,
            Duration::from_millis(600),
            Duration::from_millis(40)
        ));
        assert_eq!(latency.asr, sim.asr_latency);
        assert_eq!(latency.llm_first_token, sim.llm_first_token);
        assert_eq!(latency.tts_first_byte, sim.tts_first_byte);
        assert_eq!(
            latency.total,
            latency.endpointing
                + latency.asr
                + latency.llm_first_token
                + latency.tts_first_byte
                + latency.engine_overhead
        );
        // On a paused clock the engine's own work takes no time, so anything left is a wait
        // the engine added (e.g. holding the reply until its first sentence is complete).
        assert!(
            latency.engine_overhead < Duration::from_millis(20),
            "{latency:?}"
        );
    }
    // The callee measures about the same from its side.
    assert_eq!(report.turn_latencies.len(), 2);
    for (seen, ours) in report.turn_latencies.iter().zip(&outcome.latencies) {
        assert!(
            close_to(*seen, ours.total, Duration::from_millis(150)),
            "{seen:?} vs {ours:?}"
        );
    }
    // Turn timestamps follow the call's clock.
    let offsets: Vec<_> = outcome.transcript.iter().map(|t| t.offset).collect();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
}

#[tokio::test(start_paused = true)]
async fn interruption_clears_playback_and_keeps_only_the_heard_text() {
    let welcome = "Good morning, this is Olivia from Voxline Dental. I am calling to confirm \
                   your appointment tomorrow at ten. Please let me know if that still works.";
    let script = vec![
        ScriptStep::Interrupt {
            text: "Sorry, can I stop you there?".to_owned(),
            after: Duration::from_millis(1500),
        },
        ScriptStep::Say("Okay, bye.".to_owned()),
    ];
    let config = ConversationConfig {
        welcome_message: welcome.to_owned(),
        ..pipeline(&script)
    };
    let (outcome, report, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(report.clears, 1, "{report:?}");
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
    let first = &outcome.transcript[0];
    assert_eq!(first.speaker, Speaker::Assistant);
    // Barge-in lands about 1.5 s + the 0.4 s minimum into the first 3.6 s sentence.
    let heard: Vec<&str> = first.text.split_whitespace().collect();
    let sentence: Vec<&str> = "Good morning, this is Olivia from Voxline Dental."
        .split_whitespace()
        .collect();
    assert!(
        (3..=6).contains(&heard.len()) && sentence.starts_with(&heard),
        "heard {:?}",
        first.text
    );
    assert_eq!(outcome.transcript[1].speaker, Speaker::User);
    assert_eq!(outcome.transcript[1].text, "Sorry, can I stop you there?");
    assert_eq!(
        outcome.transcript[2].text,
        "Let me note that down for the team. Is there anything else I can help you with?"
    );
}

#[tokio::test(start_paused = true)]
async fn short_backchannels_do_not_interrupt() {
    let script = vec![
        ScriptStep::Interrupt {
            text: "Mm.".to_owned(),
            after: Duration::from_millis(1000),
        },
        ScriptStep::Say("Bye.".to_owned()),
    ];
    let mut config = pipeline(&script);
    config.turns.interruption.duration_ms = 600;
    let (outcome, report, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(report.clears, 0);
    assert_eq!(outcome.transcript[0].text, WELCOME);
}

fn keypad_config() -> ConversationConfig {
    ConversationConfig {
        engine: ConversationEngine::Keypad,
        welcome_message: String::new(),
        keypad: Some(KeypadMenu {
            prompt: "Press 1 for sales or 2 for support.".to_owned(),
            options: vec![
                KeypadOption {
                    digit: '1',
                    say: "Connecting you to sales.".to_owned(),
                    value: "sales".into(),
                },
                KeypadOption {
                    digit: '2',
                    say: "Support it is.".to_owned(),
                    value: "support".into(),
                },
            ],
            timeout: Duration::from_secs(4),
            attempts: 2,
            opt_out_digit: None,
        }),
        ..ConversationConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn keypad_records_a_digit_from_in_band_tones_alone() {
    let (providers, counts) = counting_providers(SimConfig::default());
    let (outcome, report, _) = call(
        keypad_config(),
        providers,
        vec![ScriptStep::Dtmf('2')],
        CalleeBehaviour::Human,
        CalleeOptions {
            dtmf_mode: DtmfMode::InBandOnly,
            ..CalleeOptions::default()
        },
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
    assert_eq!(
        serde_json::Value::Object(outcome.extracted.clone()),
        serde_json::json!({"keypad": "support", "digit": "2"})
    );
    assert_eq!(
        texts(&outcome),
        [
            (Speaker::Assistant, "Press 1 for sales or 2 for support."),
            (Speaker::Assistant, "Support it is."),
        ]
    );
    assert!(report.agent_hung_up);
    assert_eq!(counts.asr_opens.load(Ordering::Relaxed), 0);
    assert_eq!(counts.llm_streams.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn keypad_opt_out_digit_confirms_and_ends_the_call_opt_out() {
    let mut config = keypad_config();
    if let Some(menu) = config.keypad.as_mut() {
        menu.opt_out_digit = Some('9');
    }
    let (outcome, report, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        vec![ScriptStep::Dtmf('9')],
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::OptOut);
    assert_eq!(
        serde_json::Value::Object(outcome.extracted.clone()),
        serde_json::json!({"keypad": "opt-out", "digit": "9"})
    );
    assert_eq!(
        texts(&outcome),
        [
            (Speaker::Assistant, "Press 1 for sales or 2 for support."),
            (
                Speaker::Assistant,
                "Understood, we will not call you again. Goodbye."
            ),
        ]
    );
    assert!(report.agent_hung_up);
}

#[tokio::test(start_paused = true)]
async fn keypad_reprompts_after_a_timeout_then_gives_up() {
    let (outcome, _, _) = call(
        keypad_config(),
        Providers::sim(SimConfig::default()),
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
    assert_eq!(
        outcome.extracted.get("keypad"),
        Some(&serde_json::Value::Null)
    );
    assert_eq!(outcome.transcript.len(), 2, "menu offered twice");
}

#[tokio::test(start_paused = true)]
async fn announcement_plays_and_hangs_up_without_asr_or_llm() {
    let (providers, counts) = counting_providers(SimConfig::default());
    let message = "This is a reminder that the office is closed on Friday.";
    let config = ConversationConfig {
        engine: ConversationEngine::Announcement,
        welcome_message: message.to_owned(),
        announcement_repeat: 2,
        ..ConversationConfig::default()
    };
    let (outcome, report, _) = call(
        config,
        providers,
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
    assert_eq!(
        texts(&outcome),
        [(Speaker::Assistant, message), (Speaker::Assistant, message)]
    );
    assert_eq!(counts.asr_opens.load(Ordering::Relaxed), 0);
    assert_eq!(counts.llm_streams.load(Ordering::Relaxed), 0);
    assert_eq!(counts.tts_calls.load(Ordering::Relaxed), 2);
    assert!(close_to(
        report.agent_audio,
        speech_duration_for_text(message) * 2,
        Duration::from_millis(60)
    ));
    assert!(report.agent_hung_up);
}

#[tokio::test(start_paused = true)]
async fn a_failing_provider_ends_the_call_with_its_reason() {
    let script = says(&["Hello, who is this?", "Bye."]);
    for (provider, after_uses, reason) in [
        (ProviderKind::Asr, 0, EndedReason::AsrError),
        (ProviderKind::Llm, 0, EndedReason::LlmError),
        (ProviderKind::Tts, 1, EndedReason::TtsError),
    ] {
        let sim = SimConfig {
            fail: Some(SimFailure {
                provider,
                after_uses,
            }),
            ..SimConfig::default()
        };
        let (outcome, report, _) = call(
            pipeline(&script),
            Providers::sim(sim),
            script.clone(),
            CalleeBehaviour::Human,
            CalleeOptions::default(),
        )
        .await;
        assert_eq!(outcome.ended_reason, reason, "{outcome:?}");
        assert!(outcome.error.is_some());
        assert!(report.agent_hung_up);
        // Greeting + first line + a second or two: never a hung call.
        assert!(
            outcome.duration < Duration::from_secs(10),
            "{:?}",
            outcome.duration
        );
    }
}

#[tokio::test(start_paused = true)]
async fn recording_lasts_as_long_as_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec/call.wav");
    let script = says(&["Hi there, go ahead.", "Good, bye."]);
    let config = ConversationConfig {
        recording_path: Some(path.clone()),
        ..pipeline(&script)
    };
    let (outcome, _, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    let recording = outcome.recording.clone().unwrap();
    assert_eq!(recording.path, path);
    assert!(
        close_to(
            recording.duration,
            outcome.duration,
            Duration::from_millis(40)
        ),
        "{:?} vs {:?}",
        recording.duration,
        outcome.duration
    );
    let bytes = std::fs::read(&path).unwrap();
    let info = WavInfo::read(std::io::Cursor::new(&bytes)).unwrap();
    assert_eq!((info.channels, info.sample_rate), (2, 8000));
    assert_eq!(info.duration(), recording.duration);
    // Both channels carry audio: caller left, agent right.
    let samples: Vec<i16> = bytes[44..]
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let energy = |channel: usize| {
        samples
            .iter()
            .skip(channel)
            .step_by(2)
            .map(|&s| i64::from(s).abs())
            .sum::<i64>()
    };
    assert!(energy(0) > 0 && energy(1) > 0);
}

#[tokio::test(start_paused = true)]
async fn silence_ends_the_call() {
    let config = ConversationConfig {
        silence_timeout: Duration::from_secs(3),
        ..pipeline(&[])
    };
    let (outcome, report, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::SilenceTimeout);
    let expected = SimConfig::default().tts_first_byte
        + speech_duration_for_text(WELCOME)
        + Duration::from_secs(3);
    assert!(
        close_to(outcome.duration, expected, Duration::from_millis(100)),
        "{:?} vs {expected:?}",
        outcome.duration
    );
    assert!(report.agent_hung_up);
}

#[tokio::test(start_paused = true)]
async fn max_duration_ends_the_call_mid_sentence() {
    let config = ConversationConfig {
        max_duration: Duration::from_secs(2),
        ..pipeline(&[])
    };
    let (outcome, report, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::MaxDuration);
    assert_eq!(outcome.duration, Duration::from_secs(2));
    // The greeting was cut: the transcript keeps what was said before the hang-up.
    let heard = &outcome.transcript[0].text;
    assert!(
        WELCOME.starts_with(heard.as_str()) && heard.len() < WELCOME.len(),
        "{heard:?}"
    );
    assert!(report.agent_hung_up);
}

#[tokio::test(start_paused = true)]
async fn cancel_hangs_up_with_canceled() {
    let (server, client) = memory_pair(256);
    let callee = tokio::spawn(SimCallee::run_on(
        client,
        Vec::new(),
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    ));
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        canceller.cancel();
    });
    let outcome = run_conversation(
        pipeline(&[]),
        Providers::sim(SimConfig::default()),
        server,
        Arc::new(NoopObserver),
        cancel,
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::Canceled);
    assert!(callee.await.unwrap().agent_hung_up);
}

#[tokio::test]
async fn a_call_over_a_real_websocket() {
    use tokio::net::TcpListener;

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/media/twilio", listener.local_addr().unwrap());
    let script = says(&["Bye."]);
    let config = ConversationConfig {
        welcome_message: "Hi.".to_owned(),
        ..pipeline(&script)
    };
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let socket = tokio_tungstenite::accept_async(stream).await.unwrap();
        run_conversation(
            config,
            Providers::sim(SimConfig::default()),
            WebSocketTransport::new(socket),
            Arc::new(NoopObserver),
            CancellationToken::new(),
        )
        .await
    });
    let report = SimCallee::run(
        url,
        vec![("token".to_owned(), "abc".to_owned())],
        script,
        CalleeBehaviour::Human,
        CalleeOptions {
            turn_gap: Duration::from_millis(300),
            ..CalleeOptions::default()
        },
    )
    .await;
    let outcome = server.await.unwrap();
    assert_eq!(
        outcome.ended_reason,
        EndedReason::AgentHangup,
        "{outcome:?}"
    );
    assert_eq!(
        texts(&outcome),
        [
            (Speaker::Assistant, "Hi."),
            (Speaker::User, "Bye."),
            (Speaker::Assistant, "Thank you for your time. Goodbye!"),
        ]
    );
    assert!(
        report.connected && report.agent_hung_up && report.ended_cleanly,
        "{report:?}"
    );
    assert_eq!(report.turn_latencies.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn wideband_vonage_stream_plays_binary_frames_and_records_at_8k() {
    let dir = tempfile::tempdir().unwrap();
    let message = "Your parcel arrives today.";
    let config = ConversationConfig {
        carrier: CarrierSession::new(CarrierKind::Vonage),
        engine: ConversationEngine::Announcement,
        welcome_message: message.to_owned(),
        recording_path: Some(dir.path().join("vonage.wav")),
        ..ConversationConfig::default()
    };
    let (server, mut client) = memory_pair(256);
    // A minimal Vonage: 16 kHz linear PCM in binary frames, notify echoed at once.
    let carrier = tokio::spawn(async move {
        use voxline_media::carrier::OutboundFrame;
        let connected = r#"{"event":"websocket:connected","content-type":"audio/l16;rate=16000"}"#;
        client.send(OutboundFrame::Text(connected)).await.unwrap();
        let silence = [0u8; 640];
        let mut ticker = tokio::time::interval(Duration::from_millis(20));
        let (mut frames, mut notifies) = (0usize, 0usize);
        loop {
            tokio::select! {
                message = client.recv() => match message {
                    Some(TransportMessage::Binary(audio)) => {
                        assert_eq!(audio.len(), 640);
                        frames += 1;
                    }
                    Some(TransportMessage::Text(text)) => {
                        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
                        if value["action"] == "notify" {
                            notifies += 1;
                            let echo = serde_json::json!({
                                "event": "websocket:notify",
                                "payload": value["payload"],
                            })
                            .to_string();
                            let _ = client.send(OutboundFrame::Text(&echo)).await;
                        }
                    }
                    Some(TransportMessage::Closed) | None => return (frames, notifies),
                },
                _ = ticker.tick() => {
                    let _ = client.send(OutboundFrame::Binary(&silence)).await;
                }
            }
        }
    });
    let outcome = run_conversation(
        config,
        Providers::sim(SimConfig::default()),
        server,
        Arc::new(NoopObserver),
        CancellationToken::new(),
    )
    .await;
    let (frames, notifies) = carrier.await.unwrap();
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
    assert_eq!(notifies, 1);
    let spoken = speech_duration_for_text(message);
    assert!(
        frames.abs_diff(spoken.as_millis() as usize / 20) <= 1,
        "{frames} frames"
    );
    let recording = outcome.recording.unwrap();
    let info = WavInfo::read(std::fs::File::open(&recording.path).unwrap()).unwrap();
    assert_eq!((info.channels, info.sample_rate), (2, 8000));
    assert_eq!(info.duration(), recording.duration);
    assert!(close_to(
        recording.duration,
        outcome.duration,
        Duration::from_millis(40)
    ));
}

/// A model that never stops talking.
struct TalkativeLlm;

struct TalkativeStream(u32);

#[async_trait]
impl LlmStream for TalkativeStream {
    async fn next_event(&mut self) -> Option<Result<crate::providers::LlmEvent, ProviderError>> {
        self.0 += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
        Some(Ok(crate::providers::LlmEvent::Token(format!(
            "This is sentence number {}. ",
            self.0
        ))))
    }
}

#[async_trait]
impl LlmProvider for TalkativeLlm {
    async fn stream(&self, _request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        Ok(Box::new(TalkativeStream(0)))
    }
}

#[tokio::test(start_paused = true)]
async fn a_model_that_will_not_stop_is_cut_at_the_sentence_limit() {
    let script = says(&["Tell me everything."]);
    let config = ConversationConfig {
        max_reply_sentences: 3,
        silence_timeout: Duration::from_secs(2),
        ..pipeline(&script)
    };
    let providers = Providers {
        llm: Arc::new(TalkativeLlm),
        ..Providers::sim(SimConfig::default())
    };
    let (outcome, _, _) = call(
        config,
        providers,
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    let reply = &outcome.transcript.last().unwrap();
    assert_eq!(reply.speaker, Speaker::Assistant);
    assert_eq!(
        reply.text,
        "This is sentence number 1. This is sentence number 2. This is sentence number 3."
    );
    assert_eq!(outcome.ended_reason, EndedReason::SilenceTimeout);
}

/// A model whose server ignores tools: it says goodbye but never calls `end_call`.
struct ToolDeafLlm;

#[async_trait]
impl LlmProvider for ToolDeafLlm {
    async fn stream(&self, _request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        Ok(Box::new(OneReply(Some(
            "Thanks for calling, goodbye!".to_owned(),
        ))))
    }
}

struct OneReply(Option<String>);

#[async_trait]
impl LlmStream for OneReply {
    async fn next_event(&mut self) -> Option<Result<crate::providers::LlmEvent, ProviderError>> {
        self.0
            .take()
            .map(|text| Ok(crate::providers::LlmEvent::Token(text)))
    }
}

#[tokio::test(start_paused = true)]
async fn a_closing_phrase_ends_the_call_when_the_model_ignores_tools() {
    let script = says(&["That is all, thanks.", "Hello? Are you there?"]);
    let providers = Providers {
        llm: Arc::new(ToolDeafLlm),
        ..Providers::sim(SimConfig::default())
    };
    let (outcome, _, _) = call(
        pipeline(&script),
        providers,
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
    assert_eq!(
        texts(&outcome).last(),
        Some(&(Speaker::Assistant, "Thanks for calling, goodbye!"))
    );
}

// ---------------------------------------------------------------- Answering machines

const VOICEMAIL_MESSAGE: &str = "Hi Asha, this is Voxline. Please call us back.";

fn detecting(action: VoicemailAction) -> ConversationConfig {
    ConversationConfig {
        voicemail: VoicemailPlan {
            detect: true,
            action,
        },
        ..pipeline(&[])
    }
}

/// Mean absolute level of each 20 ms window of one channel of a stereo recording.
fn channel_levels(bytes: &[u8], channel: usize) -> Vec<f64> {
    let samples: Vec<i16> = bytes[44..]
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .skip(channel)
        .step_by(2)
        .collect();
    samples
        .chunks(160)
        .map(|w| w.iter().map(|s| f64::from(*s).abs()).sum::<f64>() / w.len() as f64)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_machine_is_hung_up_on_without_a_reply() {
    let (providers, counts) = counting_providers(SimConfig::default());
    let (outcome, report, _) = call(
        detecting(VoicemailAction::Hangup),
        providers,
        Vec::new(),
        CalleeBehaviour::AnsweringMachine,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::Voicemail);
    // The greeting is 3.5 s: the verdict comes while it plays, not after the beep.
    assert!(
        outcome.duration < Duration::from_millis(3500),
        "{:?}",
        outcome.duration
    );
    assert_eq!(counts.llm_streams.load(Ordering::Relaxed), 0);
    assert!(
        outcome
            .transcript
            .iter()
            .all(|t| t.speaker == Speaker::Assistant)
    );
    assert!(report.agent_hung_up);
}

#[tokio::test(start_paused = true)]
async fn the_message_is_left_after_the_beep_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vm.wav");
    let (providers, counts) = counting_providers(SimConfig::default());
    let config = ConversationConfig {
        recording_path: Some(path.clone()),
        ..detecting(VoicemailAction::LeaveMessage(VOICEMAIL_MESSAGE.to_owned()))
    };
    let (outcome, report, _) = call(
        config,
        providers,
        Vec::new(),
        CalleeBehaviour::AnsweringMachine,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(outcome.ended_reason, EndedReason::Voicemail);
    assert_eq!(counts.llm_streams.load(Ordering::Relaxed), 0);
    let last = outcome.transcript.last().unwrap();
    assert_eq!(
        (last.speaker, last.text.as_str()),
        (Speaker::Assistant, VOICEMAIL_MESSAGE)
    );
    // The beep ends 4 s after the answer; the message, as long as its text, follows it.
    let message = speech_duration_for_text(VOICEMAIL_MESSAGE);
    assert!(
        last.offset >= Duration::from_secs(4) + message,
        "{:?} for a {message:?} message",
        last.offset
    );
    assert!(report.agent_hung_up);
    assert!(report.error.is_none(), "{:?}", report.error);

    let bytes = std::fs::read(&path).unwrap();
    let caller = channel_levels(&bytes, 0);
    let agent = channel_levels(&bytes, 1);
    let beep_end = caller.iter().rposition(|l| *l > 200.0).unwrap();
    assert!(
        (195..=205).contains(&beep_end),
        "beep ends in window {beep_end}"
    );
    // Quiet from the verdict through the beep, speech after it.
    assert!(
        agent[150..=beep_end].iter().all(|l| *l < 1.0),
        "{:?}",
        &agent[150..=beep_end]
    );
    let first_word = agent[beep_end..].iter().position(|l| *l > 200.0).unwrap();
    assert!(
        first_word < 50,
        "the message started {first_word} windows after the beep"
    );
    assert!(agent[beep_end..].iter().filter(|l| **l > 200.0).count() >= 50);
}

#[tokio::test(start_paused = true)]
async fn a_person_is_never_taken_for_a_machine() {
    // A long first reply after the greeting is a person taking their turn.
    let script = says(&[
        "Yes, hello, this is Asha speaking and I was expecting your call today.",
        "Thank you, goodbye!",
    ]);
    let (providers, counts) = counting_providers(SimConfig::default());
    let config = ConversationConfig {
        sim_script: crate::sim::callee::spoken_lines(&script),
        ..detecting(VoicemailAction::LeaveMessage(VOICEMAIL_MESSAGE.to_owned()))
    };
    let (outcome, report, _) = call(
        config,
        providers,
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_ne!(outcome.ended_reason, EndedReason::Voicemail);
    assert!(counts.llm_streams.load(Ordering::Relaxed) >= 1);
    assert!(
        outcome
            .transcript
            .iter()
            .any(|t| t.speaker == Speaker::User)
    );
    assert!(
        outcome
            .transcript
            .iter()
            .all(|t| t.text != VOICEMAIL_MESSAGE)
    );
    assert_eq!(report.lines_said, 2);
}

#[tokio::test(start_paused = true)]
async fn the_carriers_verdict_reaches_the_call_and_the_first_verdict_wins() {
    // A silent line (the engine's detector would call it a person after 4 s): the carrier
    // says machine, then beep, at 1 s and 2 s.
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = ConversationConfig {
        machine_verdicts: Some(rx),
        ..detecting(VoicemailAction::LeaveMessage(VOICEMAIL_MESSAGE.to_owned()))
    };
    let feeder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = tx.send(crate::carrier::AnsweredBy::Machine);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = tx.send(crate::carrier::AnsweredBy::Beep);
        // Late and contrary: ignored.
        let _ = tx.send(crate::carrier::AnsweredBy::Human);
    });
    let (outcome, _, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    feeder.await.unwrap();
    assert_eq!(outcome.ended_reason, EndedReason::Voicemail);
    let last = outcome.transcript.last().unwrap();
    assert_eq!(last.text, VOICEMAIL_MESSAGE);
    assert!(last.offset >= Duration::from_secs(2) + speech_duration_for_text(VOICEMAIL_MESSAGE));

    // The detector's "person" (a silent line, at 4 s) comes first: a later carrier
    // "machine" changes nothing, and the silence ends the call.
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = ConversationConfig {
        machine_verdicts: Some(rx),
        silence_timeout: Duration::from_secs(8),
        ..detecting(VoicemailAction::Hangup)
    };
    let feeder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(6)).await;
        let _ = tx.send(crate::carrier::AnsweredBy::Machine);
    });
    let (outcome, _, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        Vec::new(),
        CalleeBehaviour::Silent,
        CalleeOptions::default(),
    )
    .await;
    feeder.await.unwrap();
    assert_eq!(outcome.ended_reason, EndedReason::SilenceTimeout);
}

#[tokio::test(start_paused = true)]
async fn with_detection_off_a_machine_is_talked_to() {
    let (providers, _) = counting_providers(SimConfig::default());
    let config = ConversationConfig {
        silence_timeout: Duration::from_secs(3),
        ..pipeline(&[])
    };
    let (outcome, _, _) = call(
        config,
        providers,
        Vec::new(),
        CalleeBehaviour::AnsweringMachine,
        CalleeOptions::default(),
    )
    .await;
    assert_ne!(outcome.ended_reason, EndedReason::Voicemail);
}

// ---------------------------------------------------------------- Turn-taking

/// An end-of-turn model that answers every evaluation at once with `probability`, or is
/// saturated (`None`), and counts what it is asked.
struct FixedModel {
    probability: Option<f32>,
    asked: AtomicUsize,
}

impl FixedModel {
    fn new(probability: Option<f32>) -> Arc<Self> {
        Arc::new(Self {
            probability,
            asked: AtomicUsize::new(0),
        })
    }
}

impl crate::providers::EndOfTurnModel for FixedModel {
    fn submit(
        &self,
        audio: &[f32],
    ) -> Option<tokio::sync::oneshot::Receiver<crate::providers::EndOfTurnVerdict>> {
        assert!(!audio.is_empty() && audio.len() <= 8 * 16_000);
        self.asked.fetch_add(1, Ordering::Relaxed);
        let probability = self.probability?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = tx.send(crate::providers::EndOfTurnVerdict {
            probability,
            cpu: Duration::from_millis(60),
        });
        Some(rx)
    }
}

fn smart(script: &[ScriptStep], model: Option<Arc<FixedModel>>) -> ConversationConfig {
    ConversationConfig {
        turns: voxline_media::turn_taking::TurnConfig::smart(),
        end_of_turn: model.map(|m| m as Arc<dyn crate::providers::EndOfTurnModel>),
        ..pipeline(script)
    }
}

const LONG_WELCOME: &str = "Good morning, this is Olivia from Voxline Dental. I am calling to \
                            confirm your appointment tomorrow at ten in the morning.";

#[tokio::test(start_paused = true)]
async fn a_pause_in_an_answer_whose_words_say_wait_is_not_cut_in_on() {
    let script = says(&["I live in [pause 1500] Pune, near the station.", "Bye."]);
    // A model that calls every pause complete: only the words keep the agent waiting.
    let model = FixedModel::new(Some(0.9));
    let (outcome, report, _) = call(
        smart(&script, Some(Arc::clone(&model))),
        Providers::sim(SimConfig::default()),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(
        texts(&outcome),
        [
            (Speaker::Assistant, WELCOME),
            (Speaker::User, "I live in Pune, near the station."),
            (
                Speaker::Assistant,
                "Thank you for letting me know. Is there anything else I can help you with?"
            ),
            (Speaker::User, "Bye."),
            (Speaker::Assistant, "Thank you for your time. Goodbye!"),
        ]
    );
    // The agent never talked into the pause, so never had to be stopped.
    assert_eq!(report.clears, 0, "{report:?}");
    assert!(report.ended_cleanly, "{report:?}");
    // "I live in" says wait, and each line's end closes a sentence: the words settled
    // every pause, and the model was never asked.
    assert_eq!(model.asked.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn a_backchannel_over_the_agent_pauses_it_and_the_agent_is_heard_to_its_end() {
    let script = vec![
        ScriptStep::Backchannel {
            text: "uh-huh".to_owned(),
            after: Duration::from_millis(1000),
        },
        ScriptStep::Backchannel {
            text: "Okay.".to_owned(),
            after: Duration::from_millis(3500),
        },
        ScriptStep::Say("Bye.".to_owned()),
    ];
    let config = ConversationConfig {
        welcome_message: LONG_WELCOME.to_owned(),
        ..smart(&script, None)
    };
    let (outcome, report, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    assert_eq!(report.backchannels_said, 2);
    assert_eq!(report.clears, 0, "{report:?}");
    // Backchannels are not turns: the welcome is heard whole, then the caller's line.
    assert_eq!(
        texts(&outcome),
        [
            (Speaker::Assistant, LONG_WELCOME),
            (Speaker::User, "Bye."),
            (Speaker::Assistant, "Thank you for your time. Goodbye!"),
        ]
    );
    // Nothing was lost or repeated: all the welcome's audio reached the callee.
    let welcome: Duration = super::text::split_sentences(LONG_WELCOME)
        .iter()
        .map(|sentence| speech_duration_for_text(sentence))
        .sum();
    let goodbye = speech_duration_for_text("Thank you for your time. Goodbye!");
    assert!(
        close_to(
            report.agent_audio,
            welcome + goodbye,
            Duration::from_millis(80)
        ),
        "heard {:?} of {:?}",
        report.agent_audio,
        welcome + goodbye
    );
    assert!(report.ended_cleanly, "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn a_real_interruption_yields_within_400_ms_and_a_backchannel_before_it_does_not() {
    let script = vec![
        ScriptStep::Backchannel {
            text: "uh-huh".to_owned(),
            after: Duration::from_millis(800),
        },
        ScriptStep::Interrupt {
            text: "Wait, stop, I have a question.".to_owned(),
            after: Duration::from_millis(2500),
        },
        ScriptStep::Say("Bye.".to_owned()),
    ];
    let config = ConversationConfig {
        welcome_message: LONG_WELCOME.to_owned(),
        ..smart(&script, None)
    };
    let (outcome, report, _) = call(
        config,
        Providers::sim(SimConfig::default()),
        script,
        CalleeBehaviour::Human,
        CalleeOptions::default(),
    )
    .await;
    // Only the interruption stopped the agent, and soon after the caller began.
    assert_eq!(report.clears, 1, "{report:?}");
    assert_eq!(report.barge_in_stops.len(), 1, "{report:?}");
    let stop = report.barge_in_stops[0];
    assert!(stop <= Duration::from_millis(400), "yielded after {stop:?}");
    // The welcome keeps what was heard of it; the backchannel is no turn.
    let heard = &outcome.transcript[0].text;
    assert!(
        LONG_WELCOME.starts_with(heard.as_str()) && heard.len() < LONG_WELCOME.len(),
        "{heard:?}"
    );
    assert_eq!(
        texts(&outcome)[1],
        (Speaker::User, "Wait, stop, I have a question.")
    );
    assert!(
        outcome.transcript.iter().all(|t| t.text != "uh-huh"),
        "{:?}",
        texts(&outcome)
    );
}

#[tokio::test(start_paused = true)]
async fn with_no_words_the_model_holds_an_unfinished_pause_and_a_saturated_one_falls_back_to_silence()
 {
    let script = says(&["Hi, who is calling please?", "Alright, thanks. Bye!"]);
    let endpointing = |model: Arc<FixedModel>| {
        let script = script.clone();
        async move {
            // A recognizer without interim results: no words at the pause, so the model
            // judges it.
            let sim = SimConfig {
                interim_results: false,
                ..SimConfig::default()
            };
            let (outcome, _, _) = call(
                smart(&script, Some(Arc::clone(&model))),
                Providers::sim(sim),
                script,
                CalleeBehaviour::Human,
                CalleeOptions::default(),
            )
            .await;
            assert_eq!(outcome.ended_reason, EndedReason::AgentHangup);
            assert_eq!(model.asked.load(Ordering::Relaxed), 2);
            outcome
                .latencies
                .iter()
                .map(|l| l.endpointing)
                .collect::<Vec<_>>()
        }
    };
    // Complete: the silence rule's 600 ms (the model never ends a turn earlier).
    for waited in endpointing(FixedModel::new(Some(0.9))).await {
        assert!(
            close_to(
                waited,
                Duration::from_millis(600),
                Duration::from_millis(40)
            ),
            "{waited:?}"
        );
    }
    // Incomplete: held open to the longest pause.
    for waited in endpointing(FixedModel::new(Some(0.1))).await {
        assert!(
            close_to(
                waited,
                Duration::from_millis(2500),
                Duration::from_millis(40)
            ),
            "{waited:?}"
        );
    }
    // Saturated: the silence rule.
    for waited in endpointing(FixedModel::new(None)).await {
        assert!(
            close_to(
                waited,
                Duration::from_millis(600),
                Duration::from_millis(40)
            ),
            "{waited:?}"
        );
    }
}

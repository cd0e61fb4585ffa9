//! What one load step measured: latency histograms, frame pacing, outcomes and the
//! server's CPU and memory per concurrent call.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Highest latency a histogram holds (longer values are clamped): ten minutes.
const MAX_TRACKED_MICROS: u64 = 600_000_000;

/// A latency distribution in microseconds with three significant digits.
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Histogram<u64>);

impl Default for LatencyHistogram {
    #[expect(
        clippy::expect_used,
        reason = "constant bounds, checked by every loadgen test: no input reaches this"
    )]
    fn default() -> Self {
        Self(
            Histogram::new_with_bounds(1, MAX_TRACKED_MICROS, 3)
                .expect("constant bounds are within hdrhistogram's range"),
        )
    }
}

impl LatencyHistogram {
    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, MAX_TRACKED_MICROS);
        self.0.saturating_record(micros);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// p50/p95/p99/max in milliseconds; `None` when nothing was recorded.
    pub fn percentiles(&self) -> Option<Percentiles> {
        if self.0.is_empty() {
            return None;
        }
        let ms = |micros: u64| micros as f64 / 1000.0;
        Some(Percentiles {
            count: self.0.len(),
            p50_ms: ms(self.0.value_at_quantile(0.50)),
            p95_ms: ms(self.0.value_at_quantile(0.95)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            max_ms: ms(self.0.max()),
            mean_ms: self.0.mean() / 1000.0,
        })
    }
}

/// A turn's stages as the server measured them, over a step's turns.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStages {
    /// End of speech → first agent audio.
    pub total: Option<Percentiles>,
    /// End of speech → end of turn decided.
    pub endpointing: Option<Percentiles>,
    /// End of turn → final transcript.
    pub asr: Option<Percentiles>,
    /// LLM request → first token.
    pub llm_first_token: Option<Percentiles>,
    /// First TTS request → first audio.
    pub tts_first_audio: Option<Percentiles>,
}

/// Summary of one latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

/// The sim provider latencies and endpointing wait that are part of every turn by design;
/// the engine's share of a turn is what is left after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnBudget {
    /// End-of-turn silence the endpointer waits for.
    pub endpointing_ms: u64,
    /// Sim ASR latency.
    pub asr_ms: u64,
    /// Sim LLM time to first token.
    pub llm_first_token_ms: u64,
    /// Sim LLM time between tokens (the first sentence waits for its tokens).
    pub llm_token_interval_ms: u64,
    /// Sim TTS time to first byte.
    pub tts_first_byte_ms: u64,
}

impl TurnBudget {
    /// The designed wait from the caller's end of speech to the agent's first audio, not
    /// counting the first sentence's token stream.
    pub fn fixed(&self) -> Duration {
        Duration::from_millis(
            self.endpointing_ms + self.asr_ms + self.llm_first_token_ms + self.tts_first_byte_ms,
        )
    }
}

/// What the fleet saw of one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallObservation {
    /// The call was placed through the API.
    pub placed: bool,
    /// The callee's stream started (the call was answered).
    pub answered: bool,
    /// The server reports a terminal status for it.
    pub ended: bool,
    /// The terminal status the server reports.
    pub final_status: Option<String>,
    /// Answer → first agent audio.
    pub greeting_latency: Option<Duration>,
    /// Inbound calls: the carrier's webhook sent → the agent's first audio at the caller.
    pub answer_latency: Option<Duration>,
    /// Caller end of speech → first agent audio, per turn.
    pub turn_latencies: Vec<Duration>,
    /// The engine's own share of each turn as the server measured it.
    pub server_engine_overheads: Vec<Duration>,
    /// Each turn's stages as the server measured them.
    pub server_stages: Vec<StageTimes>,
    /// Agent frames received.
    pub agent_frames: u64,
    /// Agent frames later than 40 ms.
    pub late_frames: u64,
    /// Mean |inter-arrival − 20 ms|.
    pub mean_jitter: Duration,
    /// Largest |inter-arrival − 20 ms|.
    pub max_jitter: Duration,
    /// Why the call failed, if it did.
    pub failure: Option<String>,
    /// Still on the line when `--duration` ran out (hung up then; not a failure).
    pub live_at_end: bool,
    /// Why an answered call has no greeting latency, if it has none.
    pub greeting_missing: Option<String>,
    /// The callee said the line that asks for the load function (`--tool-latency-ms`).
    pub at_tool_line: bool,
    /// The load function's calls as the server stored them; `None` when not read (no
    /// `--tool-latency-ms`, or a `--target` server whose store the loadgen cannot see).
    pub tool_calls: Option<Vec<ToolCallSeen>>,
    /// What a SIP callee measured of the agent's RTP (`--carrier sip`).
    pub rtp: Option<RtpCallStats>,
}

/// Where one turn's time went, as the server's latency record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StageTimes {
    /// End of speech → first agent audio.
    pub total: Duration,
    /// End of speech → end of turn decided.
    pub endpointing: Duration,
    /// End of turn → final transcript.
    pub asr: Duration,
    /// LLM request → first token.
    pub llm_first_token: Duration,
    /// First TTS request → first audio.
    pub tts_first_byte: Duration,
}

/// One stored call of the load function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolCallSeen {
    /// From the call to its result, as the server measured it.
    pub latency: Duration,
    /// It ended in an error.
    pub failed: bool,
}

/// Running totals of one step, merged from every call.
#[derive(Debug, Default)]
pub struct StepMetrics {
    /// Calls placed.
    pub placed: u64,
    /// Calls answered.
    pub answered: u64,
    /// Calls ended.
    pub ended: u64,
    /// Calls failed, by reason.
    pub failures: BTreeMap<String, u64>,
    /// Calls still on the line when `--duration` ran out.
    pub live_at_end: u64,
    /// Answered calls without a greeting latency, by reason.
    pub greeting_missing: BTreeMap<String, u64>,
    /// Greeting latency.
    pub greeting: LatencyHistogram,
    /// Inbound calls' webhook → first agent audio.
    pub answer: LatencyHistogram,
    /// Turn latency.
    pub turn: LatencyHistogram,
    /// Turn latency minus the designed budget, measured at the callee.
    pub engine_share: LatencyHistogram,
    /// The server's own engine-overhead figure per turn.
    pub server_engine_overhead: LatencyHistogram,
    /// The server's per-stage figures per turn: total, endpointing, ASR, LLM first token,
    /// TTS first audio.
    pub server_stages: [LatencyHistogram; 5],
    /// Agent frames received.
    pub agent_frames: u64,
    /// Agent frames later than 40 ms.
    pub late_frames: u64,
    /// Sum of per-call mean jitter (µs) for averaging.
    jitter_sum_micros: u128,
    /// Calls with jitter measured.
    jitter_calls: u64,
    /// Largest jitter seen.
    pub max_jitter: Duration,
    /// Calls whose callee said the function's line.
    pub at_tool_line: u64,
    /// Calls whose stored tool calls were read.
    pub tool_calls_read: u64,
    /// The load function's stored calls.
    pub tool_calls: u64,
    /// Of those, ended in an error.
    pub tool_errors: u64,
    /// Their latency.
    pub tool_latency: LatencyHistogram,
    /// The smallest of them (the histogram rounds).
    pub tool_latency_min: Option<Duration>,
    /// The SIP callees' RTP figures (`--carrier sip`): calls with them, packets sent,
    /// received, expected, reordered.
    pub rtp_calls: u64,
    /// Packets the SIP callees sent.
    pub rtp_sent: u64,
    /// Agent packets received.
    pub rtp_received: u64,
    /// Agent packets lost.
    pub rtp_lost: u64,
    /// Agent packets reordered.
    pub rtp_reordered: u64,
    /// The RFC 3550 interarrival jitter after each agent packet.
    pub rtp_jitter: LatencyHistogram,
}

impl StepMetrics {
    /// Folds one call in.
    pub fn add(&mut self, call: &CallObservation, budget: &TurnBudget) {
        self.placed += u64::from(call.placed);
        self.answered += u64::from(call.answered);
        self.ended += u64::from(call.ended);
        if let Some(reason) = &call.failure {
            *self.failures.entry(reason.clone()).or_default() += 1;
        }
        self.live_at_end += u64::from(call.live_at_end);
        if let Some(reason) = &call.greeting_missing {
            *self.greeting_missing.entry(reason.clone()).or_default() += 1;
        }
        if let Some(answer) = call.answer_latency {
            self.answer.record(answer);
        }
        if let Some(greeting) = call.greeting_latency {
            self.greeting.record(greeting);
        }
        for turn in &call.turn_latencies {
            self.turn.record(*turn);
            self.engine_share
                .record(turn.saturating_sub(budget.fixed()));
        }
        for overhead in &call.server_engine_overheads {
            self.server_engine_overhead.record(*overhead);
        }
        for stages in &call.server_stages {
            let times = [
                stages.total,
                stages.endpointing,
                stages.asr,
                stages.llm_first_token,
                stages.tts_first_byte,
            ];
            for (histogram, time) in self.server_stages.iter_mut().zip(times) {
                histogram.record(time);
            }
        }
        self.agent_frames += call.agent_frames;
        self.late_frames += call.late_frames;
        if call.agent_frames > 1 {
            self.jitter_sum_micros += call.mean_jitter.as_micros();
            self.jitter_calls += 1;
        }
        self.max_jitter = self.max_jitter.max(call.max_jitter);
        self.at_tool_line += u64::from(call.at_tool_line);
        if let Some(rtp) = &call.rtp {
            self.rtp_calls += 1;
            self.rtp_sent += rtp.sent;
            self.rtp_received += rtp.received;
            self.rtp_lost += rtp.lost();
            self.rtp_reordered += rtp.reordered;
            for jitter in &rtp.jitter_us {
                self.rtp_jitter
                    .record(Duration::from_micros(u64::from(*jitter)));
            }
        }
        if let Some(tool_calls) = &call.tool_calls {
            self.tool_calls_read += 1;
            for tool_call in tool_calls {
                self.tool_calls += 1;
                self.tool_errors += u64::from(tool_call.failed);
                self.tool_latency.record(tool_call.latency);
                self.tool_latency_min = Some(
                    self.tool_latency_min
                        .map_or(tool_call.latency, |min| min.min(tool_call.latency)),
                );
            }
        }
    }

    /// Calls that failed.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    /// Mean over calls of each call's mean frame jitter.
    pub fn mean_jitter(&self) -> Duration {
        if self.jitter_calls == 0 {
            return Duration::ZERO;
        }
        let micros = self.jitter_sum_micros / u128::from(self.jitter_calls);
        Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
    }
}

/// One sample of the server's usage during a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageSample {
    /// Seconds since the step started.
    pub at_seconds: f64,
    /// Server CPU seconds so far.
    pub cpu_seconds: f64,
    /// Server RSS.
    pub rss_kib: u64,
    /// Calls in progress (answered, not yet ended).
    pub active_calls: u64,
}

/// The server's cost per concurrent call, from samples over the plateau of the step (the
/// samples with at least 90 % of the peak number of calls in progress).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PerCallUsage {
    /// Server CPU while idle, in cores.
    pub idle_cpu_cores: f64,
    /// Server RSS while idle.
    pub idle_rss_kib: u64,
    /// Most calls in progress at once.
    pub peak_active_calls: u64,
    /// Mean calls in progress over the plateau.
    pub plateau_active_calls: f64,
    /// Length of the plateau.
    pub plateau_seconds: f64,
    /// Server CPU over the plateau, in cores.
    pub plateau_cpu_cores: f64,
    /// Server CPU per concurrent call above idle, in percent of one core.
    pub cpu_percent_of_core_per_call: f64,
    /// Largest server RSS over the step.
    pub peak_rss_kib: u64,
    /// RSS per concurrent call above the idle baseline.
    pub rss_kib_per_call: f64,
}

/// Computes the per-call usage; `None` without two plateau samples.
pub fn per_call_usage(
    samples: &[UsageSample],
    idle_cpu_cores: f64,
    idle_rss_kib: u64,
) -> Option<PerCallUsage> {
    let peak_active = samples.iter().map(|s| s.active_calls).max()?;
    if peak_active == 0 {
        return None;
    }
    // Integer form of "at least 90 % of the peak".
    let on_plateau = |s: &UsageSample| s.active_calls * 10 >= peak_active * 9;
    let mut seconds = 0.0;
    let mut cpu = 0.0;
    let mut call_seconds = 0.0;
    for pair in samples.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if on_plateau(a) && on_plateau(b) && b.at_seconds > a.at_seconds {
            let dt = b.at_seconds - a.at_seconds;
            seconds += dt;
            cpu += (b.cpu_seconds - a.cpu_seconds).max(0.0);
            call_seconds += dt * (a.active_calls + b.active_calls) as f64 / 2.0;
        }
    }
    if seconds <= 0.0 {
        return None;
    }
    let plateau_cpu = cpu / seconds;
    let plateau_active = call_seconds / seconds;
    let peak_rss = samples
        .iter()
        .map(|s| s.rss_kib)
        .max()
        .unwrap_or(idle_rss_kib);
    Some(PerCallUsage {
        idle_cpu_cores,
        idle_rss_kib,
        peak_active_calls: peak_active,
        plateau_active_calls: plateau_active,
        plateau_seconds: seconds,
        plateau_cpu_cores: plateau_cpu,
        cpu_percent_of_core_per_call: (plateau_cpu - idle_cpu_cores).max(0.0) / plateau_active
            * 100.0,
        peak_rss_kib: peak_rss,
        rss_kib_per_call: peak_rss.saturating_sub(idle_rss_kib) as f64 / peak_active as f64,
    })
}

/// Frame pacing as the callees saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FramePacing {
    /// Agent frames received.
    pub frames: u64,
    /// Frames later than 40 ms.
    pub late_frames: u64,
    /// Mean over calls of the mean |inter-arrival − 20 ms|.
    pub mean_jitter_ms: f64,
    /// Largest |inter-arrival − 20 ms|.
    pub max_jitter_ms: f64,
}

/// The agent's RTP as the SIP callees received it (`--carrier sip`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RtpSummary {
    /// Calls whose callee measured RTP.
    pub calls: u64,
    /// Packets the callees sent.
    pub packets_sent: u64,
    /// Agent packets received.
    pub packets: u64,
    /// Agent packets lost (sequence gaps never filled).
    pub lost: u64,
    /// Lost, in % of those expected.
    pub loss_percent: f64,
    /// Agent packets that came after a later one.
    pub reordered: u64,
    /// RFC 3550 interarrival jitter, sampled after every agent packet.
    pub jitter: Option<Percentiles>,
}

impl RtpSummary {
    /// The step's RTP figures, when any callee measured some.
    pub fn new(metrics: &StepMetrics) -> Option<Self> {
        if metrics.rtp_calls == 0 {
            return None;
        }
        let expected = metrics.rtp_received + metrics.rtp_lost;
        Some(Self {
            calls: metrics.rtp_calls,
            packets_sent: metrics.rtp_sent,
            packets: metrics.rtp_received,
            lost: metrics.rtp_lost,
            loss_percent: if expected == 0 {
                0.0
            } else {
                metrics.rtp_lost as f64 * 100.0 / expected as f64
            },
            reordered: metrics.rtp_reordered,
            jitter: metrics.rtp_jitter.percentiles(),
        })
    }
}

/// The JSON summary of one step.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepSummary {
    /// Calls asked for.
    pub calls: u64,
    /// Concurrency asked for.
    pub concurrency: u64,
    /// How calls were placed.
    pub mode: String,
    /// Wall time of the step.
    pub elapsed_seconds: f64,
    /// Calls placed.
    pub placed: u64,
    /// Calls answered.
    pub answered: u64,
    /// Calls ended.
    pub ended: u64,
    /// Calls failed.
    pub failed: u64,
    /// Failures by reason.
    pub failures: BTreeMap<String, u64>,
    /// Calls still on the line when `--duration` ran out, hung up then (not failures).
    pub live_at_end: u64,
    /// Answered calls without a greeting latency, by reason (the others are all measured).
    pub greeting_missing: BTreeMap<String, u64>,
    /// Answer → first agent audio.
    pub greeting_latency: Option<Percentiles>,
    /// Inbound calls: the carrier's webhook sent → the agent's first audio at the caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_latency: Option<Percentiles>,
    /// Caller end of speech → first agent audio.
    pub turn_latency: Option<Percentiles>,
    /// Turn latency minus the designed budget, at the callee.
    pub engine_share: Option<Percentiles>,
    /// The server's own per-turn engine overhead.
    pub server_engine_overhead: Option<Percentiles>,
    /// The server's per-turn stages.
    pub server_stages: ServerStages,
    /// The designed budget subtracted.
    pub budget: TurnBudget,
    /// Outbound frame pacing.
    pub frames: FramePacing,
    /// Server CPU and memory per concurrent call.
    pub usage: Option<PerCallUsage>,
    /// How the usage figures were taken.
    pub usage_source: String,
    /// Who answered the calls: `sim-carrier` (the server's own sim carrier: with `--target`
    /// the usage figures include its callees), `twilio` (the load generator as Twilio: the
    /// callees are not in the server's figures) or `sip` (the SIP fleet of `--carrier sip`).
    pub fleet: String,
    /// What the `--fleet twilio` REST API saw since it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub twilio_rest: Option<TwilioRestCounts>,
    /// How the seeded analysis backlog drained (`--analysis-backlog`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisDrain>,
    /// The load function's requests and stored calls (`--tool-latency-ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsSummary>,
    /// Calls placed on each `--target`, when there are several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetCalls>,
    /// How the in-process server's turns ended (not read from a `--target`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<super::turn_counts::TurnCounts>,
    /// The agent's RTP at the SIP callees (`--carrier sip`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtp: Option<RtpSummary>,
}

/// What the `--fleet twilio` REST API and its callbacks saw, counted since the fleet started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TwilioRestCounts {
    /// Create-call requests accepted (valid Basic auth, the fleet's account): calls dialed.
    pub dials: u64,
    /// Requests refused for their Basic auth or account (401).
    pub unauthorized: u64,
    /// Update requests that hung a call up (`Status=completed` or `canceled`).
    pub hangups: u64,
    /// Update requests that replaced a live call's TwiML (a transfer's `<Dial>`).
    pub redirects: u64,
    /// Signed callbacks (status, answering machine, `<Dial>` action) the server accepted.
    pub callbacks: u64,
    /// Signed callbacks the server refused or did not answer.
    pub callbacks_refused: u64,
}

/// The calls one of several `--target` servers was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetCalls {
    /// The server's base URL.
    pub target: String,
    /// Calls it accepted.
    pub placed: u64,
}

/// The in-call function tool during a step (`--tool-latency-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsSummary {
    /// The function server's delay before each answer.
    pub server_delay_ms: u64,
    /// POSTs the function server received during the step.
    pub function_requests: u64,
    /// Calls whose callee said the line that asks for the function.
    pub calls_at_tool_line: u64,
    /// Calls whose stored tool calls were read (0 with `--target`: its store is not ours).
    pub calls_read: u64,
    /// The function's calls the server stored for those calls.
    pub tool_calls: u64,
    /// Of those, ended in an error (timeout, refused, bad answer).
    pub tool_errors: u64,
    /// Their latency as the server stored it (`latency_ms`): request to result.
    pub latency: Option<Percentiles>,
    /// The smallest stored latency, exact.
    pub min_latency_ms: Option<f64>,
}

impl ToolsSummary {
    /// The step's tool figures; `function_requests` counted by the function server.
    pub fn new(metrics: &StepMetrics, server_delay: Duration, function_requests: u64) -> Self {
        Self {
            server_delay_ms: u64::try_from(server_delay.as_millis()).unwrap_or(u64::MAX),
            function_requests,
            calls_at_tool_line: metrics.at_tool_line,
            calls_read: metrics.tool_calls_read,
            tool_calls: metrics.tool_calls,
            tool_errors: metrics.tool_errors,
            latency: metrics.tool_latency.percentiles(),
            min_latency_ms: metrics.tool_latency_min.map(|d| d.as_secs_f64() * 1000.0),
        }
    }
}

impl StepSummary {
    /// Builds the summary from a step's totals.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        calls: u64,
        concurrency: u64,
        mode: &str,
        elapsed: Duration,
        metrics: &StepMetrics,
        budget: TurnBudget,
        usage: Option<PerCallUsage>,
        usage_source: &str,
    ) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        Self {
            calls,
            concurrency,
            mode: mode.to_owned(),
            elapsed_seconds: elapsed.as_secs_f64(),
            placed: metrics.placed,
            answered: metrics.answered,
            ended: metrics.ended,
            failed: metrics.failed(),
            failures: metrics.failures.clone(),
            live_at_end: metrics.live_at_end,
            greeting_missing: metrics.greeting_missing.clone(),
            greeting_latency: metrics.greeting.percentiles(),
            answer_latency: metrics.answer.percentiles(),
            turn_latency: metrics.turn.percentiles(),
            engine_share: metrics.engine_share.percentiles(),
            server_engine_overhead: metrics.server_engine_overhead.percentiles(),
            server_stages: ServerStages {
                total: metrics.server_stages[0].percentiles(),
                endpointing: metrics.server_stages[1].percentiles(),
                asr: metrics.server_stages[2].percentiles(),
                llm_first_token: metrics.server_stages[3].percentiles(),
                tts_first_audio: metrics.server_stages[4].percentiles(),
            },
            budget,
            frames: FramePacing {
                frames: metrics.agent_frames,
                late_frames: metrics.late_frames,
                mean_jitter_ms: ms(metrics.mean_jitter()),
                max_jitter_ms: ms(metrics.max_jitter),
            },
            usage,
            usage_source: usage_source.to_owned(),
            fleet: "sim-carrier".to_owned(),
            twilio_rest: None,
            analysis: None,
            tools: None,
            targets: Vec::new(),
            turns: None,
            rtp: RtpSummary::new(metrics),
        }
    }
}

/// One count of the analysis backlog.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DrainSample {
    /// Seconds since the backlog was released to the worker.
    pub at_seconds: f64,
    /// Its analyses still pending.
    pub pending: u64,
}

/// How a seeded analysis backlog drained during a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisDrain {
    /// Analyses seeded.
    pub backlog: u64,
    /// Of those, no longer pending at the end of the step (done or failed).
    pub drained: u64,
    /// Of the drained, failed.
    pub failed: u64,
    /// Seconds from the release until none was pending; `None` if some still were at the end.
    pub seconds_to_drain: Option<f64>,
    /// Analyses finished per second while the backlog drained (until drained, or the end).
    pub per_second: f64,
    /// Kept from the worker for the whole run (`--hold-analysis-backlog`, the control run).
    pub held: bool,
}

impl AnalysisDrain {
    /// The drain of a `backlog` from counts taken since its release, the last at the step's
    /// end; `failed` of them failed.
    pub fn new(backlog: u64, samples: &[DrainSample], failed: u64) -> Self {
        let remaining = samples.last().map_or(backlog, |s| s.pending.min(backlog));
        let drained = backlog - remaining;
        let seconds_to_drain = samples
            .iter()
            .find(|s| s.pending == 0)
            .map(|s| s.at_seconds);
        let over = seconds_to_drain.unwrap_or_else(|| samples.last().map_or(0.0, |s| s.at_seconds));
        Self {
            backlog,
            drained,
            failed: failed.min(drained),
            seconds_to_drain,
            per_second: if over > 0.0 {
                drained as f64 / over
            } else {
                0.0
            },
            held: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> TurnBudget {
        TurnBudget {
            endpointing_ms: 600,
            asr_ms: 150,
            llm_first_token_ms: 200,
            llm_token_interval_ms: 0,
            tts_first_byte_ms: 120,
        }
    }

    #[test]
    fn percentiles_follow_the_recorded_values() {
        let mut histogram = LatencyHistogram::default();
        assert!(histogram.percentiles().is_none());
        for ms in 1..=100 {
            histogram.record(Duration::from_millis(ms));
        }
        let p = histogram.percentiles().unwrap();
        assert_eq!(p.count, 100);
        assert!((p.p50_ms - 50.0).abs() < 0.1, "{p:?}");
        assert!((p.p95_ms - 95.0).abs() < 0.1, "{p:?}");
        assert!((p.p99_ms - 99.0).abs() < 0.1, "{p:?}");
        assert!((p.max_ms - 100.0).abs() < 0.1, "{p:?}");
    }

    #[test]
    fn engine_share_is_turn_latency_minus_the_budget() {
        let mut metrics = StepMetrics::default();
        let call = CallObservation {
            placed: true,
            answered: true,
            ended: true,
            turn_latencies: vec![Duration::from_millis(1085), Duration::from_millis(1000)],
            agent_frames: 10,
            late_frames: 1,
            mean_jitter: Duration::from_millis(2),
            max_jitter: Duration::from_millis(9),
            ..CallObservation::default()
        };
        metrics.add(&call, &budget());
        let failed = CallObservation {
            placed: true,
            failure: Some("busy".into()),
            ..CallObservation::default()
        };
        metrics.add(&failed, &budget());
        let share = metrics.engine_share.percentiles().unwrap();
        // 1085 − 1070 = 15 ms; a turn faster than the budget counts as no engine time.
        assert!((share.max_ms - 15.0).abs() < 0.1, "{share:?}");
        assert_eq!(metrics.engine_share.count(), 2);
        assert_eq!((metrics.placed, metrics.answered, metrics.ended), (2, 1, 1));
        assert_eq!(metrics.failed(), 1);
        assert_eq!(metrics.failures["busy"], 1);
        assert_eq!(metrics.late_frames, 1);
        assert_eq!(metrics.mean_jitter(), Duration::from_millis(2));
        assert_eq!(metrics.max_jitter, Duration::from_millis(9));
    }

    fn sample(at: f64, cpu: f64, rss: u64, active: u64) -> UsageSample {
        UsageSample {
            at_seconds: at,
            cpu_seconds: cpu,
            rss_kib: rss,
            active_calls: active,
        }
    }

    #[test]
    fn per_call_usage_uses_the_plateau_only() {
        // Ramp up (ignored), a 3 s plateau of 100 calls burning 0.5 cores, ramp down.
        let samples = [
            sample(0.0, 10.0, 50_000, 0),
            sample(1.0, 10.1, 60_000, 40),
            sample(2.0, 10.3, 70_000, 100),
            sample(3.0, 10.8, 71_000, 100),
            sample(4.0, 11.3, 72_000, 95),
            sample(5.0, 11.8, 71_000, 100),
            sample(6.0, 11.9, 60_000, 10),
        ];
        let usage = per_call_usage(&samples, 0.01, 50_000).unwrap();
        assert_eq!(usage.peak_active_calls, 100);
        assert!((usage.plateau_seconds - 3.0).abs() < 1e-9);
        assert!((usage.plateau_cpu_cores - 0.5).abs() < 1e-9);
        // (0.5 − 0.01) cores over ~98.3 calls.
        let expected = 0.49 / usage.plateau_active_calls * 100.0;
        assert!((usage.cpu_percent_of_core_per_call - expected).abs() < 1e-9);
        assert!((usage.rss_kib_per_call - 220.0).abs() < 1e-9);
    }

    #[test]
    fn the_drain_rate_counts_until_the_backlog_is_empty() {
        let drain = |at_seconds, pending| DrainSample {
            at_seconds,
            pending,
        };
        let drained = AnalysisDrain::new(
            100,
            &[
                drain(0.0, 100),
                drain(1.0, 68),
                drain(2.0, 36),
                drain(3.0, 4),
                drain(4.0, 0),
                drain(9.0, 0),
            ],
            2,
        );
        assert_eq!(drained.drained, 100);
        assert_eq!(drained.failed, 2);
        assert_eq!(drained.seconds_to_drain, Some(4.0));
        assert!((drained.per_second - 25.0).abs() < 1e-9);
        let left = AnalysisDrain::new(
            1_000,
            &[drain(0.0, 1_000), drain(1.0, 968), drain(10.0, 680)],
            0,
        );
        assert_eq!(left.drained, 320);
        assert_eq!(left.seconds_to_drain, None);
        assert!((left.per_second - 32.0).abs() < 1e-9);
        let json = serde_json::to_value(left).unwrap();
        assert_eq!(json["secondsToDrain"], serde_json::Value::Null);
        assert_eq!(AnalysisDrain::new(5, &[], 0).per_second, 0.0);
    }

    #[test]
    fn per_call_usage_needs_a_plateau() {
        assert!(per_call_usage(&[], 0.0, 0).is_none());
        assert!(
            per_call_usage(&[sample(0.0, 1.0, 1, 0), sample(1.0, 1.0, 1, 0)], 0.0, 0).is_none()
        );
        assert!(per_call_usage(&[sample(0.0, 1.0, 1, 5)], 0.0, 0).is_none());
    }
}

/// What a SIP callee measured of the agent's RTP stream (and sent of its own).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RtpCallStats {
    /// Packets the callee sent.
    pub sent: u64,
    /// Agent audio packets received (duplicates included).
    pub received: u64,
    /// Packets the sequence numbers say were sent: highest − first + 1.
    pub expected: u64,
    /// Packets that came after a later one.
    pub reordered: u64,
    /// The RFC 3550 interarrival jitter estimate after each packet, µs.
    pub jitter_us: Vec<u32>,
}

impl RtpCallStats {
    /// Packets never received.
    pub fn lost(&self) -> u64 {
        self.expected.saturating_sub(self.received)
    }
}

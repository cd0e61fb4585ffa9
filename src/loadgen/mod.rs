//! `voxline loadgen` (decisions §12): a carrier fleet that places calls through the real API,
//! answers them as simulated callees over real websockets, and measures latency, frame pacing,
//! failures and the server's CPU and memory per concurrent call.

pub mod fleet;
pub mod metrics;
pub mod procstat;
pub mod sweep;

use crate::access::api_key::GeneratedKey;
use crate::admin::ops;
use crate::app::config::{Settings, SimSettings};
use crate::app::server::Server;
use crate::domain::clock::SystemClock;
use crate::domain::{ApiKeyId, Paise};
use crate::store::keys::NewApiKey;
use anyhow::Context;
use fleet::{Api, Fleet, PlaceMode, callee_number};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use metrics::{CallObservation, StepMetrics, StepSummary, TurnBudget, UsageSample};
use procstat::ProcessProbe;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use sweep::{SweepReport, SweepStep, Targets};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, MissedTickBehavior, interval, sleep, sleep_until, timeout_at};
use voxline_actors::callee::CalleeReport;
use voxline_actors::carrier::Carrier;
use voxline_actors::carrier::sim::{SimCarrier, SimCarrierConfig};
use voxline_media::endpoint::EndpointerConfig;

/// `voxline loadgen` options.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadgenArgs {
    /// Calls to place in all (per step with --sweep: the step's concurrency).
    #[arg(long, default_value_t = 10)]
    pub calls: u64,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 10)]
    pub concurrency: u64,
    /// Bound on each run in seconds: no call is placed after it and calls still up are hung up.
    #[arg(long, default_value_t = 120)]
    pub duration: u64,
    /// A running server's base URL (loopback); without it a server is started in-process.
    #[arg(long)]
    pub target: Option<String>,
    /// API key for --target.
    #[arg(long, env = "VOXLINE_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Agent to place calls with (default: one is created).
    #[arg(long)]
    pub agent: Option<String>,
    /// PID of the --target server, to sample its CPU and RSS from /proc.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// How calls are placed.
    #[arg(long, value_enum, default_value_t = PlaceMode::TestCall)]
    pub mode: PlaceMode,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Raise concurrency step by step until a target breaks; report the highest that held.
    #[arg(long)]
    pub sweep: bool,
    /// First sweep concurrency.
    #[arg(long, default_value_t = 100)]
    pub sweep_start: u64,
    /// Sweep increment.
    #[arg(long, default_value_t = 100)]
    pub sweep_step: u64,
    /// Highest sweep concurrency tried.
    #[arg(long, default_value_t = 2000)]
    pub sweep_max: u64,
    /// Sweep target: most frames allowed later than 40 ms per step.
    #[arg(long, default_value_t = 0)]
    pub max_late_frames: u64,
    /// Sweep target: highest turn-latency p99 (default: the designed budget + 50 ms).
    #[arg(long)]
    pub max_turn_p99_ms: Option<f64>,
    /// Sim ASR latency of the in-process server (ms); with --target, what the server uses.
    #[arg(long, default_value_t = 150)]
    pub sim_asr_ms: u64,
    /// Sim LLM time to first token (ms).
    #[arg(long, default_value_t = 200)]
    pub sim_llm_ms: u64,
    /// Sim LLM time between tokens (ms); 0 makes the budget exact.
    #[arg(long, default_value_t = 0)]
    pub sim_llm_token_ms: u64,
    /// Sim TTS time to first byte (ms).
    #[arg(long, default_value_t = 120)]
    pub sim_tts_ms: u64,
    /// Ringing time before the sim callee answers (ms).
    #[arg(long, default_value_t = 1000)]
    pub sim_answer_ms: u64,
    /// The caller script every callee plays (the `simScript` variable: a JSON array of lines
    /// and steps); default: the sim carrier's three-line script.
    #[arg(long)]
    pub script: Option<String>,
    /// Worker threads of the callee fleet (in-process). Two, so a thousand callees sending
    /// 50 frames a second each are not queued behind one another on one thread.
    #[arg(long, default_value_t = 2)]
    pub fleet_threads: usize,
}

/// Runs the load generator and prints its summary.
pub async fn run(args: LoadgenArgs) -> anyhow::Result<()> {
    let fleet_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.fleet_threads.max(1))
        .max_blocking_threads(2)
        .thread_name(fleet::FLEET_THREAD)
        .enable_all()
        .build()
        .context("starting the fleet runtime")?;
    let outcome = run_with_fleet_runtime(&args, fleet_runtime.handle()).await;
    fleet_runtime.shutdown_background();
    let output = outcome?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&output)?);
    } else {
        print_human(&output);
    }
    Ok(())
}

/// What a load run produced.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
pub enum LoadgenOutput {
    /// One run.
    Step(Box<StepSummary>),
    /// A sweep.
    Sweep(SweepReport),
}

/// Runs the load generator with its fleet on `fleet` and returns the summary (used by tests).
pub async fn run_with_fleet_runtime(
    args: &LoadgenArgs,
    fleet_runtime: &tokio::runtime::Handle,
) -> anyhow::Result<LoadgenOutput> {
    anyhow::ensure!(args.calls > 0, "--calls must be at least 1");
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    anyhow::ensure!(args.duration > 0, "--duration must be at least 1 second");
    let variables = match &args.script {
        Some(script) => {
            let script: Value = serde_json::from_str(script).context("--script is not JSON")?;
            voxline_actors::callee::parse_sim_script(&script).context("--script")?;
            serde_json::json!({ "simScript": script })
        }
        None => serde_json::json!({}),
    };
    let budget = TurnBudget {
        endpointing_ms: u64::from(EndpointerConfig::default().end_silence_ms),
        asr_ms: args.sim_asr_ms,
        llm_first_token_ms: args.sim_llm_ms,
        llm_token_interval_ms: args.sim_llm_token_ms,
        tts_first_byte_ms: args.sim_tts_ms,
    };
    let (answered_tx, answered_rx) = mpsc::unbounded_channel();
    let (server, fleet, api, probe, usage_source, data_dir) = match &args.target {
        Some(target) => {
            let key = args
                .key
                .as_deref()
                .context("--key (or VOXLINE_API_KEY) is required with --target")?;
            let probe = args.server_pid.map(ProcessProbe::process);
            let source = match args.server_pid {
                Some(pid) => format!("/proc/{pid} (the --target server)"),
                None => "not measured: pass --server-pid".to_owned(),
            };
            (None, None, Api::new(target, key)?, probe, source, None)
        }
        None => {
            let fleet = Fleet::new(fleet_runtime.clone(), answered_tx);
            let max_concurrency = if args.sweep {
                args.sweep_max.max(args.sweep_start)
            } else {
                args.concurrency
            };
            let data_dir = std::env::temp_dir()
                .join(format!("voxline-loadgen-{}", uuid::Uuid::new_v4().simple()));
            let (server, key) =
                start_in_process(args, &fleet, max_concurrency, data_dir.clone()).await?;
            let api = Api::new(&server.base_url(), &key)?;
            let probe = ProcessProbe::current_process(fleet::FLEET_THREAD);
            let source = format!(
                "/proc/self without the {} threads (server in-process; RSS includes the fleet)",
                fleet::FLEET_THREAD
            );
            (
                Some(server),
                Some(fleet),
                api,
                Some(probe),
                source,
                Some(data_dir),
            )
        }
    };
    let agent_id = match &args.agent {
        Some(agent) => agent.clone(),
        None => api
            .create_agent()
            .await
            .context("creating the load agent")?,
    };
    let run = Arc::new(LoadRun {
        api,
        agent_id,
        variables,
        mode: args.mode,
        fleet,
        answered_rx: Mutex::new(answered_rx),
        probe,
        usage_source,
        budget,
        next_number: AtomicU64::new(0),
        duration: Duration::from_secs(args.duration),
        show_progress: true,
    });
    let driver = {
        let run = Arc::clone(&run);
        let args = args.clone();
        fleet_runtime.spawn(async move { drive(run, &args).await })
    };
    let output = driver.await.context("the load driver panicked")?;
    if let Some(server) = server {
        server.shutdown().await;
    }
    if let Some(dir) = data_dir {
        // The data dir only held this run's throwaway database and recordings.
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(output)
}

async fn drive(run: Arc<LoadRun>, args: &LoadgenArgs) -> LoadgenOutput {
    if !args.sweep {
        let summary = Arc::clone(&run).step(args.calls, args.concurrency).await;
        return LoadgenOutput::Step(Box::new(summary));
    }
    let targets = Targets {
        max_late_frames: args.max_late_frames,
        max_turn_p99_ms: args
            .max_turn_p99_ms
            .unwrap_or(run.budget.fixed().as_secs_f64() * 1000.0 + 50.0),
        max_failed: 0,
    };
    let mut steps = Vec::new();
    for level in sweep::levels(args.sweep_start, args.sweep_step, args.sweep_max) {
        run.settle().await;
        let summary = Arc::clone(&run).step(level, level).await;
        let broken = sweep::broken_targets(&summary, &targets);
        let stop = !broken.is_empty();
        steps.push(SweepStep { summary, broken });
        if stop {
            break;
        }
    }
    let ceiling = sweep::ceiling(&steps);
    LoadgenOutput::Sweep(SweepReport {
        targets,
        steps,
        ceiling,
    })
}

/// Minute quota and request caps of the load workspace: far beyond any run.
const LARGE_QUOTA: i64 = 1_000_000_000;
/// Wallet credit of the load workspace (₹10 crore).
const LARGE_CREDIT_PAISE: Paise = Paise(10_000_000_000);

/// Starts a server in a temporary directory with a load workspace; returns it and the key.
async fn start_in_process(
    args: &LoadgenArgs,
    fleet: &Arc<Fleet>,
    max_concurrency: u64,
    data_dir: std::path::PathBuf,
) -> anyhow::Result<(Server, String)> {
    let mut settings = Settings::for_tests(data_dir, None);
    settings.storage.secret = Some(uuid::Uuid::new_v4().simple().to_string());
    settings.janitor_interval = Duration::from_secs(60);
    settings.dispatch_interval = Duration::from_secs(1);
    settings.sim = SimSettings {
        ring_seconds: 3,
        answer_after_ms: args.sim_answer_ms,
        asr_latency_ms: args.sim_asr_ms,
        llm_first_token_ms: args.sim_llm_ms,
        llm_token_interval_ms: args.sim_llm_token_ms,
        tts_first_byte_ms: args.sim_tts_ms,
    };
    let sim = SimCarrier::new(
        SimCarrierConfig {
            answer_after: Duration::from_millis(settings.sim.answer_after_ms),
            ring_timeout: Duration::from_secs(u64::from(settings.sim.ring_seconds)),
            ..SimCarrierConfig::default()
        },
        fleet.launcher(),
    );
    let mut carriers: HashMap<String, Arc<dyn Carrier>> = HashMap::new();
    carriers.insert("sim".into(), sim);
    let server = Server::start_with_carriers(settings, Arc::new(SystemClock), carriers).await?;
    let store = &server.state().store;
    let now = chrono::Utc::now();
    let concurrency = i64::try_from(max_concurrency).unwrap_or(i64::MAX);
    let org = ops::create_org(store, "Loadgen", Some(concurrency), Some(LARGE_QUOTA), now).await?;
    let generated = GeneratedKey::generate();
    store
        .insert_api_key(&NewApiKey {
            id: ApiKeyId::new(),
            org_id: org.id,
            name: "loadgen",
            prefix: &generated.prefix,
            key_hash: &generated.hash,
            daily_limit: LARGE_QUOTA,
            monthly_limit: LARGE_QUOTA,
            now_ms: now.timestamp_millis(),
        })
        .await?;
    ops::add_number(
        store,
        org.id,
        "+918035740101",
        "sim",
        true,
        Some(Paise::ZERO),
        now,
    )
    .await?;
    store
        .credit_wallet(org.id, LARGE_CREDIT_PAISE, now.timestamp_millis())
        .await?;
    Ok((server, generated.full))
}

/// Everything the steps of one load run share.
struct LoadRun {
    api: Api,
    agent_id: String,
    variables: Value,
    mode: PlaceMode,
    fleet: Option<Arc<Fleet>>,
    answered_rx: Mutex<mpsc::UnboundedReceiver<String>>,
    probe: Option<ProcessProbe>,
    usage_source: String,
    budget: TurnBudget,
    next_number: AtomicU64,
    duration: Duration,
    show_progress: bool,
}

/// Counters the progress line and the usage sampler read while a step runs.
#[derive(Default)]
struct Live {
    in_flight: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
}

impl LoadRun {
    /// Calls on the line now: callees playing (in-process) or calls placed and not ended.
    fn active_calls(&self, live: &Live) -> u64 {
        match &self.fleet {
            Some(fleet) => fleet.active_calls(),
            None => live.in_flight.load(Ordering::Relaxed),
        }
    }

    /// Waits (bounded) until no callee is left from a previous step.
    async fn settle(&self) {
        if let Some(fleet) = &self.fleet {
            let until = Instant::now() + Duration::from_secs(30);
            while fleet.active_calls() > 0 && Instant::now() < until {
                sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// The server's idle CPU (cores) and RSS, over one quiet second.
    async fn idle_baseline(&self) -> (f64, u64) {
        let Some(probe) = &self.probe else {
            return (0.0, 0);
        };
        let (Ok(first), started) = (probe.sample(), Instant::now()) else {
            return (0.0, 0);
        };
        sleep(Duration::from_secs(1)).await;
        match probe.sample() {
            Ok(second) => (
                (second.cpu_seconds - first.cpu_seconds).max(0.0) / started.elapsed().as_secs_f64(),
                second.rss_kib,
            ),
            Err(_) => (0.0, first.rss_kib),
        }
    }

    /// Places `calls` calls with at most `concurrency` in flight and measures them.
    async fn step(self: Arc<Self>, calls: u64, concurrency: u64) -> StepSummary {
        // Answers left over from an earlier step belong to no watcher of this one.
        while self.answered_rx.lock().await.try_recv().is_ok() {}
        let (idle_cpu, idle_rss) = self.idle_baseline().await;
        let started = Instant::now();
        let deadline = started + self.duration;
        let live = Arc::new(Live::default());
        let (observed_tx, mut observed_rx) = mpsc::unbounded_channel::<CallObservation>();

        let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = tokio::spawn(Arc::clone(&self).sample_usage(
            Arc::clone(&live),
            Arc::clone(&sampling),
            started,
        ));
        tokio::spawn(Arc::clone(&self).place_all(
            calls,
            concurrency,
            deadline,
            Arc::clone(&live),
            observed_tx,
        ));

        let bar = self.progress_bar(calls);
        let mut metrics = StepMetrics::default();
        let mut received = 0;
        let mut tick = interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        while received < calls {
            tokio::select! {
                observed = observed_rx.recv() => match observed {
                    Some(call) => {
                        metrics.add(&call, &self.budget);
                        received += 1;
                        bar.inc(1);
                    }
                    None => break,
                },
                _ = tick.tick() => bar.set_message(format!(
                    "on the line {} · answered {} · failed {}",
                    self.active_calls(&live),
                    live.answered.load(Ordering::Relaxed),
                    live.failed.load(Ordering::Relaxed),
                )),
            }
        }
        bar.finish_and_clear();
        let elapsed = started.elapsed();
        sampling.store(false, Ordering::Relaxed);
        let samples = sampler.await.unwrap_or_default();
        let usage = metrics::per_call_usage(&samples, idle_cpu, idle_rss);
        StepSummary::new(
            calls,
            concurrency,
            self.mode.as_str(),
            elapsed,
            &metrics,
            self.budget,
            usage,
            &self.usage_source,
        )
    }

    fn progress_bar(&self, calls: u64) -> ProgressBar {
        if !self.show_progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(calls), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} calls done · {msg}",
        ) {
            bar.set_style(style);
        }
        bar
    }

    /// Samples the server's usage four times a second until `sampling` turns false.
    async fn sample_usage(
        self: Arc<Self>,
        live: Arc<Live>,
        sampling: Arc<std::sync::atomic::AtomicBool>,
        started: Instant,
    ) -> Vec<UsageSample> {
        let Some(probe) = self.probe.clone() else {
            return Vec::new();
        };
        let mut samples = Vec::new();
        let mut tick = interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        while sampling.load(Ordering::Relaxed) {
            tick.tick().await;
            if let Ok(usage) = probe.sample() {
                samples.push(UsageSample {
                    at_seconds: started.elapsed().as_secs_f64(),
                    cpu_seconds: usage.cpu_seconds,
                    rss_kib: usage.rss_kib,
                    active_calls: self.active_calls(&live),
                });
            }
        }
        samples
    }

    /// Places every call of a step, keeping at most `concurrency` in flight.
    async fn place_all(
        self: Arc<Self>,
        calls: u64,
        concurrency: u64,
        deadline: Instant,
        live: Arc<Live>,
        observed: mpsc::UnboundedSender<CallObservation>,
    ) {
        if self.mode == PlaceMode::Batch {
            self.place_batch(calls, deadline, live, observed).await;
            return;
        }
        let permits = Arc::new(Semaphore::new(
            usize::try_from(concurrency).unwrap_or(usize::MAX),
        ));
        let mut remaining = calls;
        while remaining > 0 {
            let first = tokio::select! {
                permit = Arc::clone(&permits).acquire_owned() => permit.ok(),
                () = sleep_until(deadline) => None,
            };
            let Some(first) = first else {
                not_placed(&observed, &live, remaining, "not placed within --duration");
                return;
            };
            let mut held = vec![first];
            if self.mode == PlaceMode::Alert {
                let most = usize::try_from(remaining.min(1000)).unwrap_or(1000);
                while held.len() < most {
                    match Arc::clone(&permits).try_acquire_owned() {
                        Ok(permit) => held.push(permit),
                        Err(_) => break,
                    }
                }
            }
            remaining -= held.len() as u64;
            let numbers: Vec<String> = held
                .iter()
                .map(|_| callee_number(self.next_number.fetch_add(1, Ordering::Relaxed)))
                .collect();
            live.in_flight
                .fetch_add(held.len() as u64, Ordering::Relaxed);
            let run = Arc::clone(&self);
            let live = Arc::clone(&live);
            let observed = observed.clone();
            tokio::spawn(async move {
                match run
                    .api
                    .place(run.mode, &run.agent_id, &numbers, &run.variables)
                    .await
                {
                    Ok(ids) => {
                        let missing = held.len().saturating_sub(ids.len()) as u64;
                        for (call_id, permit) in ids.into_iter().zip(held) {
                            tokio::spawn(Arc::clone(&run).watch(
                                call_id,
                                deadline,
                                Arc::clone(&live),
                                observed.clone(),
                                Some(permit),
                            ));
                        }
                        live.in_flight.fetch_sub(missing, Ordering::Relaxed);
                        not_placed(
                            &observed,
                            &live,
                            missing,
                            "placing: fewer calls than numbers",
                        );
                    }
                    Err(error) => {
                        tracing::warn!(%error, "placing calls failed");
                        let count = held.len() as u64;
                        live.in_flight.fetch_sub(count, Ordering::Relaxed);
                        not_placed(&observed, &live, count, &error.reason());
                    }
                }
            });
        }
    }

    /// Batch mode: one batch of `calls` items; watchers start as the fleet answers.
    async fn place_batch(
        self: Arc<Self>,
        calls: u64,
        deadline: Instant,
        live: Arc<Live>,
        observed: mpsc::UnboundedSender<CallObservation>,
    ) {
        if self.fleet.is_none() {
            not_placed(
                &observed,
                &live,
                calls,
                "batch mode needs the in-process fleet",
            );
            return;
        }
        let numbers: Vec<String> = (0..calls)
            .map(|_| callee_number(self.next_number.fetch_add(1, Ordering::Relaxed)))
            .collect();
        if let Err(error) = self
            .api
            .place(PlaceMode::Batch, &self.agent_id, &numbers, &self.variables)
            .await
        {
            not_placed(&observed, &live, calls, &error.reason());
            return;
        }
        let mut answered_rx = self.answered_rx.lock().await;
        let mut watched = 0;
        while watched < calls {
            let call_id = tokio::select! {
                id = answered_rx.recv() => id,
                () = sleep_until(deadline) => None,
            };
            let Some(call_id) = call_id else { break };
            watched += 1;
            live.in_flight.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(Arc::clone(&self).watch(
                call_id,
                deadline,
                Arc::clone(&live),
                observed.clone(),
                None,
            ));
        }
        not_placed(
            &observed,
            &live,
            calls - watched,
            "batch call not answered within --duration",
        );
    }

    /// Follows one placed call to its end and reports what was seen.
    async fn watch(
        self: Arc<Self>,
        call_id: String,
        deadline: Instant,
        live: Arc<Live>,
        observed: mpsc::UnboundedSender<CallObservation>,
        _permit: Option<OwnedSemaphorePermit>,
    ) {
        let mut call = CallObservation {
            placed: true,
            ..CallObservation::default()
        };
        let mut cut_off = false;
        let report = match &self.fleet {
            Some(fleet) => match timeout_at(deadline, fleet.report(&call_id)).await {
                Ok(report) => report,
                Err(_) => {
                    cut_off = true;
                    self.api.cancel(&call_id).await;
                    let grace = Instant::now() + Duration::from_secs(5);
                    let report = timeout_at(grace, fleet.report(&call_id))
                        .await
                        .ok()
                        .flatten();
                    if report.is_none() {
                        fleet.forget(&call_id);
                    }
                    report
                }
            },
            None => None,
        };
        let settle = match (&self.fleet, cut_off) {
            (Some(_), false) => Instant::now() + Duration::from_secs(20),
            _ => deadline.max(Instant::now()) + Duration::from_secs(10),
        };
        let detail = self.await_terminal(&call_id, settle).await;
        if let Some(report) = &report {
            fill_from_report(&mut call, report);
        }
        if let Some(detail) = &detail {
            fill_from_detail(&mut call, detail, report.is_none());
        }
        if call.answered {
            live.answered.fetch_add(1, Ordering::Relaxed);
        }
        call.failure = if cut_off {
            Some("still on the line at --duration".to_owned())
        } else {
            failure_of(&call, report.as_ref(), self.fleet.is_some())
        };
        if call.failure.is_some() {
            live.failed.fetch_add(1, Ordering::Relaxed);
        }
        live.in_flight.fetch_sub(1, Ordering::Relaxed);
        let _ = observed.send(call);
    }

    /// Polls the call until the server reports a terminal status, or `until`.
    async fn await_terminal(&self, call_id: &str, until: Instant) -> Option<Value> {
        let every = if self.fleet.is_some() {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(2)
        };
        let mut last = None;
        loop {
            if let Ok(detail) = self.api.get(&format!("/api/calls/{call_id}")).await {
                let terminal = detail["rawStatus"]
                    .as_str()
                    .and_then(voxline_actors::engine::CallStatus::parse)
                    .is_some_and(voxline_actors::engine::CallStatus::is_terminal);
                if terminal {
                    return Some(detail);
                }
                last = Some(detail);
            }
            if Instant::now() + every > until {
                return last;
            }
            sleep(every).await;
        }
    }
}

/// Reports `count` calls that never reached the line.
fn not_placed(
    observed: &mpsc::UnboundedSender<CallObservation>,
    live: &Live,
    count: u64,
    reason: &str,
) {
    for _ in 0..count {
        live.failed.fetch_add(1, Ordering::Relaxed);
        let _ = observed.send(CallObservation {
            failure: Some(reason.to_owned()),
            ..CallObservation::default()
        });
    }
}

fn fill_from_report(call: &mut CallObservation, report: &CalleeReport) {
    call.answered = report.connected;
    call.greeting_latency = report.greeting_latency;
    call.turn_latencies = report.turn_latencies.clone();
    call.agent_frames = report.agent_frames;
    call.late_frames = report.late_frames;
    call.mean_jitter = report.mean_jitter;
    call.max_jitter = report.max_jitter;
}

/// Takes the server's view; `server_latencies` when no callee measured the turns.
fn fill_from_detail(call: &mut CallObservation, detail: &Value, server_latencies: bool) {
    let status = detail["rawStatus"].as_str().unwrap_or_default();
    call.ended = voxline_actors::engine::CallStatus::parse(status)
        .is_some_and(voxline_actors::engine::CallStatus::is_terminal);
    if call.ended {
        call.final_status = Some(match detail["endedReason"].as_str() {
            Some(reason) => format!("{status} ({reason})"),
            None => status.to_owned(),
        });
    }
    if !detail["answeredAt"].is_null() {
        call.answered = true;
    }
    let turns = detail["latencies"].as_array().cloned().unwrap_or_default();
    for turn in &turns {
        if let Some(ms) = turn["engineOverheadMs"].as_u64() {
            call.server_engine_overheads.push(Duration::from_millis(ms));
        }
        if server_latencies && let Some(ms) = turn["totalMs"].as_u64() {
            call.turn_latencies.push(Duration::from_millis(ms));
        }
    }
}

/// Why a call counts as failed, if it does.
fn failure_of(
    call: &CallObservation,
    report: Option<&CalleeReport>,
    expect_report: bool,
) -> Option<String> {
    if let Some(report) = report {
        if let Some(error) = &report.error {
            return Some(format!("callee: {error}"));
        }
        if !report.connected {
            return Some("callee could not start the stream".to_owned());
        }
        if !report.ended_cleanly {
            return Some("callee: the call did not end cleanly".to_owned());
        }
    } else if expect_report {
        return Some("never answered".to_owned());
    }
    match &call.final_status {
        None => Some("no terminal status from the API".to_owned()),
        Some(status) if !status.starts_with("completed") => Some(format!("ended {status}")),
        Some(_) => None,
    }
}

fn print_human(output: &LoadgenOutput) {
    match output {
        LoadgenOutput::Step(step) => print_step(step),
        LoadgenOutput::Sweep(sweep) => {
            for step in &sweep.steps {
                print_step(&step.summary);
                if step.broken.is_empty() {
                    println!("  held");
                } else {
                    println!("  broke: {}", step.broken.join("; "));
                }
                println!();
            }
            match sweep.ceiling {
                Some(ceiling) => println!("ceiling: {ceiling} concurrent calls held"),
                None => println!("ceiling: no step held"),
            }
        }
    }
}

fn print_step(step: &StepSummary) {
    let latency = |name: &str, p: &Option<metrics::Percentiles>| match p {
        Some(p) => println!(
            "  {name:<24} p50 {:>8.1} ms  p95 {:>8.1} ms  p99 {:>8.1} ms  max {:>8.1} ms  (n={})",
            p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms, p.count
        ),
        None => println!("  {name:<24} -"),
    };
    println!(
        "{} calls at concurrency {} ({}) in {:.1} s: placed {}, answered {}, ended {}, failed {}",
        step.calls,
        step.concurrency,
        step.mode,
        step.elapsed_seconds,
        step.placed,
        step.answered,
        step.ended,
        step.failed
    );
    for (reason, count) in &step.failures {
        println!("  failure: {count} × {reason}");
    }
    latency("greeting latency", &step.greeting_latency);
    latency("turn latency", &step.turn_latency);
    latency("engine share (callee)", &step.engine_share);
    latency("engine overhead (server)", &step.server_engine_overhead);
    println!(
        "  frames {}: late >40 ms {}, jitter mean {:.2} ms, max {:.1} ms",
        step.frames.frames,
        step.frames.late_frames,
        step.frames.mean_jitter_ms,
        step.frames.max_jitter_ms
    );
    match &step.usage {
        Some(u) => println!(
            "  server: {:.3} % of a core and {:.0} KiB per concurrent call ({:.1} calls on the plateau, {:.2} cores, idle {:.3} cores, peak RSS {} KiB) [{}]",
            u.cpu_percent_of_core_per_call,
            u.rss_kib_per_call,
            u.plateau_active_calls,
            u.plateau_cpu_cores,
            u.idle_cpu_cores,
            u.peak_rss_kib,
            step.usage_source
        ),
        None => println!("  server usage: - [{}]", step.usage_source),
    }
}

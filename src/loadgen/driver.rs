//! Driving a run: one step, or a sweep of steps until a target breaks. A
//! step places its calls (one by one, as alerts, or as one batch) under the
//! concurrency limit and the `--duration` bound, watches each call to its
//! end, samples the server's usage and shows progress.

use super::LoadgenOutput;
use super::args::LoadgenArgs;
use super::backlog::Backlog;
use super::fleet::{Api, Fleet, PlaceMode, callee_number};
use super::inbound::{self, InboundLine};
use super::metrics::{
    self, CallObservation, StepMetrics, StepSummary, TargetCalls, ToolCallSeen, ToolsSummary,
    TurnBudget, UsageSample,
};
use super::observation::{failure_of, fill_from_detail, fill_from_report, greeting_missing};
use super::sweep::{self, SweepReport, SweepStep, Targets};
use super::tools::{self, ToolServer};
use super::turn_counts::TurnCounts;
use super::twilio_fleet::TwilioFleet;
use crate::cluster::procstat::ProcessProbe;
use crate::domain::CallId;
use crate::store::Store;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, MissedTickBehavior, interval, sleep, sleep_until, timeout_at};

pub(super) async fn drive(run: Arc<LoadRun>, args: &LoadgenArgs) -> LoadgenOutput {
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

/// Everything the steps of one load run share.
pub(super) struct LoadRun {
    /// The (first) server: setup, batches and single-target runs go through it.
    pub(super) api: Api,
    /// The other `--target` servers, given calls in turn with the first.
    pub(super) other_targets: Vec<Api>,
    pub(super) agent_id: String,
    pub(super) variables: Value,
    pub(super) mode: PlaceMode,
    pub(super) fleet: Option<Arc<Fleet>>,
    pub(super) answered_rx: Mutex<mpsc::UnboundedReceiver<String>>,
    pub(super) probe: Option<ProcessProbe>,
    pub(super) usage_source: String,
    pub(super) budget: TurnBudget,
    pub(super) next_number: AtomicU64,
    pub(super) duration: Duration,
    pub(super) show_progress: bool,
    /// The seeded analysis backlog, released when the step starts (`--analysis-backlog`).
    pub(super) backlog: Option<Arc<Backlog>>,
    /// The load function and where its calls are read (`--tool-latency-ms`).
    pub(super) tools: Option<ToolRun>,
    /// What inbound callers ring (`--inbound`, `--mode mixed`).
    pub(super) inbound: Option<InboundLine>,
    /// The fleet files each callee's report under the number it was dialed on, not the
    /// call id (`--carrier sip`: a SIP INVITE carries the number, not our call id).
    pub(super) reports_by_number: bool,
    /// Who answers the calls, as the summary names it (`sim-carrier`, `twilio`, `sip`).
    pub(super) fleet_name: &'static str,
    /// The load generator's Twilio (`--fleet twilio`), whose REST counts the summary reports.
    pub(super) twilio: Option<Arc<TwilioFleet>>,
    /// The server runs in this process (no `--target`): its own metrics can be read.
    pub(super) server_in_process: bool,
}

/// The function tool of a run (`--tool-latency-ms`).
pub(super) struct ToolRun {
    /// The loopback function server.
    pub(super) server: Arc<ToolServer>,
    /// Which spoken line asks for it; `None` when the script has none.
    pub(super) line: Option<usize>,
    /// The in-process server's store, where each call's tool calls are read after it ends.
    pub(super) store: Option<Store>,
}

impl ToolRun {
    /// The function's calls stored for `call_id`; `None` when they cannot be read.
    async fn stored_calls(&self, call_id: &str) -> Option<Vec<ToolCallSeen>> {
        let store = self.store.as_ref()?;
        let id: CallId = call_id.parse().ok()?;
        match store.tool_calls(id).await {
            Ok(rows) => Some(
                rows.iter()
                    .filter(|row| row.name == tools::FUNCTION_NAME)
                    .map(|row| ToolCallSeen {
                        latency: Duration::from_millis(u64::try_from(row.latency_ms).unwrap_or(0)),
                        failed: row.error.is_some(),
                    })
                    .collect(),
            ),
            Err(error) => {
                tracing::warn!(%error, call = call_id, "reading the call's tool calls failed");
                None
            }
        }
    }
}

/// Counters the progress line and the usage sampler read while a step runs.
#[derive(Default)]
struct Live {
    in_flight: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
    /// Calls placed on each target, in `--target` order.
    placed_per_target: Vec<AtomicU64>,
}

impl Live {
    fn new(targets: usize) -> Self {
        Self {
            placed_per_target: (0..targets).map(|_| AtomicU64::new(0)).collect(),
            ..Self::default()
        }
    }
}

impl LoadRun {
    /// How many servers the run drives.
    fn target_count(&self) -> usize {
        1 + self.other_targets.len()
    }

    /// The server of turn `index` (0: the first target).
    fn target(&self, index: usize) -> &Api {
        index
            .checked_sub(1)
            .and_then(|other| self.other_targets.get(other))
            .unwrap_or(&self.api)
    }

    /// Calls on the line now: callees playing (in-process) or calls placed and not ended.
    fn active_calls(&self, live: &Live) -> u64 {
        match &self.fleet {
            Some(fleet) => fleet.active_calls(),
            None => live.in_flight.load(Ordering::Relaxed),
        }
    }

    /// Waits (bounded) until no callee is left from a previous step.
    pub(super) async fn settle(&self) {
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
    pub(super) async fn step(self: Arc<Self>, calls: u64, concurrency: u64) -> StepSummary {
        // Answers left over from an earlier step belong to no watcher of this one.
        while self.answered_rx.lock().await.try_recv().is_ok() {}
        let (idle_cpu, idle_rss) = self.idle_baseline().await;
        let turns_before = self.server_in_process.then(TurnCounts::read);
        let started = Instant::now();
        let deadline = started + self.duration;
        let requests_before = self.tools.as_ref().map_or(0, |t| t.server.requests());
        let live = Arc::new(Live::new(self.target_count()));
        let (observed_tx, mut observed_rx) = mpsc::unbounded_channel::<CallObservation>();

        let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = tokio::spawn(Arc::clone(&self).sample_usage(
            Arc::clone(&live),
            Arc::clone(&sampling),
            started,
        ));
        let backlog_pending = Arc::new(AtomicU64::new(0));
        let drain_stop = Arc::new(tokio::sync::Notify::new());
        let drain = self.backlog.as_ref().map(|backlog| {
            tokio::spawn(
                Arc::clone(backlog).drain(Arc::clone(&drain_stop), Arc::clone(&backlog_pending)),
            )
        });
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
                    "on the line {} · answered {} · failed {}{}",
                    self.active_calls(&live),
                    live.answered.load(Ordering::Relaxed),
                    live.failed.load(Ordering::Relaxed),
                    if drain.is_some() {
                        format!(" · analyses pending {}", backlog_pending.load(Ordering::Relaxed))
                    } else {
                        String::new()
                    },
                )),
            }
        }
        bar.finish_and_clear();
        let elapsed = started.elapsed();
        sampling.store(false, Ordering::Relaxed);
        drain_stop.notify_one();
        let samples = sampler.await.unwrap_or_default();
        let usage = metrics::per_call_usage(&samples, idle_cpu, idle_rss);
        let analysis = match (&self.backlog, drain) {
            (Some(backlog), Some(drain)) => match drain.await {
                Ok((released, drained)) => Some(backlog.summary(released, &drained).await),
                Err(error) => {
                    tracing::warn!(%error, "the analysis backlog sampler panicked");
                    None
                }
            },
            _ => None,
        };
        let mut summary = StepSummary::new(
            calls,
            concurrency,
            self.mode.as_str(),
            elapsed,
            &metrics,
            self.budget,
            usage,
            &self.usage_source,
        );
        summary.analysis = analysis;
        self.fleet_name.clone_into(&mut summary.fleet);
        summary.twilio_rest = self.twilio.as_ref().map(|twilio| twilio.counts());
        summary.turns = turns_before.map(|before| TurnCounts::read().since(&before));
        if self.target_count() > 1 {
            summary.targets = live
                .placed_per_target
                .iter()
                .enumerate()
                .map(|(index, placed)| TargetCalls {
                    target: self.target(index).base().to_owned(),
                    placed: placed.load(Ordering::Relaxed),
                })
                .collect();
        }
        summary.tools = self.tools.as_ref().map(|tools| {
            ToolsSummary::new(
                &metrics,
                tools.server.latency(),
                tools.server.requests().saturating_sub(requests_before),
            )
        });
        summary
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
        let mut turn = 0;
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
            let rung = match self.mode {
                PlaceMode::Inbound => true,
                PlaceMode::Mixed => turn % 2 == 1,
                _ => false,
            };
            if rung {
                turn += 1;
                live.in_flight.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(Arc::clone(&self).ring_and_watch(
                    deadline,
                    Arc::clone(&live),
                    observed.clone(),
                    held,
                ));
                continue;
            }
            // Round-robin over the targets, one placement request each.
            let target = turn % self.target_count();
            turn += 1;
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
                // Mixed runs dial their outbound half through `POST /api/calls`.
                let mode = match run.mode {
                    PlaceMode::Mixed => PlaceMode::Calls,
                    mode => mode,
                };
                match run
                    .target(target)
                    .place(mode, &run.agent_id, &numbers, &run.variables)
                    .await
                {
                    Ok(ids) => {
                        let missing = held.len().saturating_sub(ids.len()) as u64;
                        if let Some(placed) = live.placed_per_target.get(target) {
                            placed.fetch_add(ids.len().min(held.len()) as u64, Ordering::Relaxed);
                        }
                        for ((call_id, permit), number) in ids.into_iter().zip(held).zip(&numbers) {
                            let report_key = if run.reports_by_number {
                                number.clone()
                            } else {
                                call_id.clone()
                            };
                            tokio::spawn(Arc::clone(&run).watch(
                                target,
                                call_id,
                                report_key,
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
                0,
                call_id.clone(),
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

    /// Follows one call placed on `target` to its end and reports what was seen.
    #[allow(clippy::too_many_arguments)]
    async fn watch(
        self: Arc<Self>,
        target: usize,
        call_id: String,
        report_key: String,
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
            Some(fleet) => match timeout_at(deadline, fleet.report(&report_key)).await {
                Ok(report) => report,
                Err(_) => {
                    cut_off = true;
                    self.target(target).cancel(&call_id).await;
                    let grace = Instant::now() + Duration::from_secs(5);
                    let report = timeout_at(grace, fleet.report(&report_key))
                        .await
                        .ok()
                        .flatten();
                    if report.is_none() {
                        fleet.forget(&report_key);
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
        let detail = self.await_terminal(target, &call_id, settle).await;
        if let Some(report) = &report {
            fill_from_report(&mut call, report);
        }
        if let Some(fleet) = &self.fleet {
            call.rtp = fleet.take_rtp(&report_key);
        }
        if let Some(tools) = &self.tools {
            call.at_tool_line = match (tools.line, &report) {
                (Some(line), Some(report)) => report.lines_said > line,
                _ => false,
            };
            // Read once the call is terminal: the runner stores its tool calls before the
            // call ends.
            call.tool_calls = tools.stored_calls(&call_id).await;
        }
        if let Some(detail) = &detail {
            fill_from_detail(&mut call, detail, report.is_none());
        }
        if call.answered {
            live.answered.fetch_add(1, Ordering::Relaxed);
        }
        // A call cut at --duration was not a failed call: it was still talking. Only what
        // the callee itself saw go wrong counts against it.
        call.live_at_end = cut_off;
        call.failure = if cut_off {
            report
                .as_ref()
                .and_then(|report| report.error.as_ref())
                .map(|error| format!("callee: {error}"))
        } else {
            failure_of(&call, report.as_ref(), self.fleet.is_some())
        };
        call.greeting_missing = greeting_missing(&call, report.as_ref(), self.fleet.is_some());
        if call.failure.is_some() {
            live.failed.fetch_add(1, Ordering::Relaxed);
        }
        live.in_flight.fetch_sub(1, Ordering::Relaxed);
        let _ = observed.send(call);
    }

    /// Rings the load number as one inbound caller, follows the call to its end
    /// and reports what was seen.
    async fn ring_and_watch(
        self: Arc<Self>,
        deadline: Instant,
        live: Arc<Live>,
        observed: mpsc::UnboundedSender<CallObservation>,
        _permits: Vec<OwnedSemaphorePermit>,
    ) {
        let (Some(line), Some(fleet)) = (&self.inbound, &self.fleet) else {
            live.in_flight.fetch_sub(1, Ordering::Relaxed);
            not_placed(
                &observed,
                &live,
                1,
                "inbound calls need the in-process fleet",
            );
            return;
        };
        let caller = callee_number(self.next_number.fetch_add(1, Ordering::Relaxed));
        let outcome = line.call(fleet, caller).await;
        let mut call = CallObservation::default();
        inbound::observe(&outcome, &mut call);
        if let Some(call_id) = &outcome.call_id {
            let settle = Instant::now() + Duration::from_secs(20);
            if let Some(detail) = self.await_terminal(0, call_id, settle).await {
                fill_from_detail(&mut call, &detail, outcome.report.is_none());
            }
        }
        call.live_at_end = Instant::now() > deadline && outcome.report.is_some();
        call.failure = match &outcome.refused {
            Some(reason) => Some(reason.clone()),
            None => failure_of(&call, outcome.report.as_ref(), true),
        };
        call.greeting_missing = greeting_missing(&call, outcome.report.as_ref(), true);
        if call.answered {
            live.answered.fetch_add(1, Ordering::Relaxed);
        }
        if call.failure.is_some() {
            live.failed.fetch_add(1, Ordering::Relaxed);
        }
        live.in_flight.fetch_sub(1, Ordering::Relaxed);
        let _ = observed.send(call);
    }

    /// Polls the call on `target` until it reports a terminal status, or `until`.
    async fn await_terminal(&self, target: usize, call_id: &str, until: Instant) -> Option<Value> {
        let every = if self.fleet.is_some() {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(2)
        };
        let mut last = None;
        loop {
            if let Ok(detail) = self
                .target(target)
                .get(&format!("/api/calls/{call_id}"))
                .await
            {
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

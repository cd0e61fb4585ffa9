//! Load client of `benches/pipecat-floor`: N Twilio Media Streams callers against one
//! websocket server, each sending 50 `media` events a second (20 ms, 160 bytes of speech-like
//! μ-law), counting the `media` events that come back, and the server's CPU and memory per
//! call from `/proc` over the plateau, when every call is on.
//!
//! `run` is the whole measurement: an idle reading of the server, the calls, a warm-up, the
//! plateau between two readings, then the calls' end; it returns a `Report`, which the binary
//! prints as JSON.

pub mod audio;
pub mod call;
pub mod procfs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::time::{Instant, sleep, sleep_until};

use call::{CallCounters, CallPlan, FRAME};
use procfs::ProcSample;

/// Distinct audio frames the calls loop over (10 s).
const AUDIO_FRAMES: usize = 500;

/// Time kept between the plateau's end and the first call's last frame.
const PLATEAU_MARGIN: Duration = Duration::from_secs(1);

/// What one run does.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's Twilio media websocket, e.g. `ws://127.0.0.1:18765/ws`.
    pub url: String,
    /// Concurrent calls.
    pub calls: usize,
    /// How long each call sends media.
    pub duration: Duration,
    /// From the moment every call has started to the plateau's first reading.
    pub warmup: Duration,
    /// How long the server is watched before the calls, for its idle CPU.
    pub idle: Duration,
    /// How long a call waits for its last echoes after its last frame.
    pub drain: Duration,
    /// The server's process id: without it the report has no CPU or memory figures.
    pub server_pid: Option<u32>,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The server's websocket.
    pub url: String,
    /// Calls asked for.
    pub calls: usize,
    /// Seconds each call sent media.
    pub duration_seconds: f64,
    /// Calls that got as far as `start`.
    pub started: usize,
    /// Calls that ended early or never started.
    pub failed: usize,
    /// Why calls failed, with how many.
    pub failures: BTreeMap<String, usize>,
    /// `media` events sent, all calls.
    pub frames_sent: u64,
    /// `media` events returned, all calls.
    pub frames_returned: u64,
    /// Audio returned, all calls: μ-law bytes / 8000.
    pub audio_seconds_returned: f64,
    /// Between the two readings, when every call was on.
    pub plateau: Plateau,
}

/// The plateau's figures.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plateau {
    /// Its length.
    pub seconds: f64,
    /// Calls on at its end (started, not ended).
    pub live_calls: usize,
    /// `media` events sent per second per live call (50 when the client keeps time).
    pub frames_sent_per_second_per_call: f64,
    /// `media` events returned per second per live call, mean over the calls.
    pub frames_returned_per_second_per_call: f64,
    /// The slowest call's returned events per second.
    pub frames_returned_per_second_min: f64,
    /// The median call's returned events per second.
    pub frames_returned_per_second_p50: f64,
    /// The server's CPU and memory, when its pid was given.
    pub usage: Option<Usage>,
}

/// The server's cost, from `/proc/PID/stat` (utime + stime) and `/proc/PID/status` (VmRSS).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// The process read.
    pub server_pid: u32,
    /// CPU before the calls, in cores.
    pub idle_cpu_cores: f64,
    /// CPU over the plateau, in cores.
    pub plateau_cpu_cores: f64,
    /// (plateau − idle) CPU per live call, in percent of one core.
    pub cpu_percent_of_core_per_call: f64,
    /// RSS before the calls.
    pub idle_rss_kib: u64,
    /// RSS at the plateau's end.
    pub plateau_rss_kib: u64,
    /// (plateau − idle) RSS per live call.
    pub rss_kib_per_call: f64,
}

/// Runs the calls and measures them and the server.
pub async fn run(config: &Config) -> anyhow::Result<Report> {
    if config.calls == 0 {
        bail!("--calls must be at least 1");
    }
    let frames = u64::try_from(config.duration.as_millis() / FRAME.as_millis())
        .context("--duration is too long")?;
    if config.duration < config.warmup + PLATEAU_MARGIN + Duration::from_secs(1) {
        bail!("--duration must exceed the warm-up by at least 2 s");
    }
    let idle = match config.server_pid {
        Some(pid) => {
            let before = procfs::read(pid)?;
            let at = Instant::now();
            sleep(config.idle).await;
            let after = procfs::read(pid)?;
            Some((before, after, at.elapsed()))
        }
        None => None,
    };

    let payloads = Arc::new(audio::payloads(AUDIO_FRAMES, 0x5049_5045));
    let counters: Vec<Arc<CallCounters>> = (0..config.calls)
        .map(|_| Arc::new(CallCounters::default()))
        .collect();
    let spawned_at = Instant::now();
    let tasks: Vec<_> = counters
        .iter()
        .enumerate()
        .map(|(index, counters)| {
            let plan = CallPlan {
                url: config.url.clone(),
                index,
                frames,
                phase: FRAME * u32::try_from(index % 20).unwrap_or(0) / 20,
                drain: config.drain,
                payloads: Arc::clone(&payloads),
            };
            tokio::spawn(call::run(plan, Arc::clone(counters)))
        })
        .collect();

    // Every call on (or given up), then the warm-up, then the plateau; it must end before the
    // first calls stop sending.
    let plateau_end = spawned_at + config.duration - PLATEAU_MARGIN;
    while counters
        .iter()
        .any(|c| !c.started.load(Ordering::Acquire) && !c.ended.load(Ordering::Acquire))
        && Instant::now() + config.warmup + Duration::from_secs(1) < plateau_end
    {
        sleep(Duration::from_millis(10)).await;
    }
    let plateau_start = Instant::now() + config.warmup;
    let mut plateau = None;
    if plateau_start + Duration::from_secs(1) <= plateau_end {
        sleep_until(plateau_start).await;
        let first = Reading::take(&counters, config.server_pid)?;
        sleep_until(plateau_end).await;
        let last = Reading::take(&counters, config.server_pid)?;
        plateau = Some((first, last));
    }

    let mut failures = BTreeMap::new();
    for task in tasks {
        let outcome = task
            .await
            .unwrap_or_else(|join| Err(format!("call task: {join}")));
        if let Err(why) = outcome {
            *failures.entry(generic(&why)).or_insert(0) += 1;
        }
    }
    let Some((first, last)) = plateau else {
        bail!(
            "the calls took too long to start: no plateau of 1 s left in --duration ({failures:?})"
        );
    };
    let started = counters
        .iter()
        .filter(|c| c.started.load(Ordering::Acquire))
        .count();
    let not_started = config.calls - started;
    let sum = |field: fn(&CallCounters) -> u64| counters.iter().map(|c| field(c)).sum::<u64>();
    let returned_bytes = sum(|c| c.returned_bytes.load(Ordering::Relaxed));
    Ok(Report {
        url: config.url.clone(),
        calls: config.calls,
        duration_seconds: config.duration.as_secs_f64(),
        started,
        failed: failures.values().sum::<usize>().max(not_started),
        failures,
        frames_sent: sum(|c| c.sent.load(Ordering::Relaxed)),
        frames_returned: sum(|c| c.returned.load(Ordering::Relaxed)),
        audio_seconds_returned: returned_bytes as f64 / f64::from(audio::SAMPLE_RATE),
        plateau: plateau_figures(&first, &last, idle),
    })
}

/// An error without its call-specific numbers, so failures group.
fn generic(why: &str) -> String {
    why.split(" after ").next().unwrap_or(why).to_owned()
}

/// The calls' counters and the server's usage at one moment.
struct Reading {
    at: Instant,
    live: Vec<bool>,
    sent: Vec<u64>,
    returned: Vec<u64>,
    server: Option<(u32, ProcSample)>,
}

impl Reading {
    fn take(counters: &[Arc<CallCounters>], server_pid: Option<u32>) -> anyhow::Result<Self> {
        let server = match server_pid {
            Some(pid) => Some((pid, procfs::read(pid)?)),
            None => None,
        };
        Ok(Self {
            at: Instant::now(),
            live: counters
                .iter()
                .map(|c| c.started.load(Ordering::Acquire) && !c.ended.load(Ordering::Acquire))
                .collect(),
            sent: counters
                .iter()
                .map(|c| c.sent.load(Ordering::Relaxed))
                .collect(),
            returned: counters
                .iter()
                .map(|c| c.returned.load(Ordering::Relaxed))
                .collect(),
            server,
        })
    }
}

fn plateau_figures(
    first: &Reading,
    last: &Reading,
    idle: Option<(ProcSample, ProcSample, Duration)>,
) -> Plateau {
    let seconds = (last.at - first.at).as_secs_f64();
    let live: Vec<usize> = (0..last.live.len())
        .filter(|&i| first.live[i] && last.live[i])
        .collect();
    let per_second = |values: &[u64], earlier: &[u64], i: usize| {
        values[i].saturating_sub(earlier[i]) as f64 / seconds
    };
    let mut returned: Vec<f64> = live
        .iter()
        .map(|&i| per_second(&last.returned, &first.returned, i))
        .collect();
    returned.sort_by(f64::total_cmp);
    let sent: f64 = live
        .iter()
        .map(|&i| per_second(&last.sent, &first.sent, i))
        .sum();
    let calls = live.len().max(1) as f64;
    let usage = match (first.server, last.server, idle) {
        (Some((pid, a)), Some((_, b)), Some((idle_a, idle_b, idle_for))) => {
            let idle_cores = (idle_b.cpu_seconds - idle_a.cpu_seconds).max(0.0)
                / idle_for.as_secs_f64().max(1e-3);
            let plateau_cores = (b.cpu_seconds - a.cpu_seconds).max(0.0) / seconds;
            Some(Usage {
                server_pid: pid,
                idle_cpu_cores: idle_cores,
                plateau_cpu_cores: plateau_cores,
                cpu_percent_of_core_per_call: (plateau_cores - idle_cores).max(0.0) / calls * 100.0,
                idle_rss_kib: idle_b.rss_kib,
                plateau_rss_kib: b.rss_kib,
                rss_kib_per_call: b.rss_kib.saturating_sub(idle_b.rss_kib) as f64 / calls,
            })
        }
        _ => None,
    };
    Plateau {
        seconds,
        live_calls: live.len(),
        frames_sent_per_second_per_call: sent / calls,
        frames_returned_per_second_per_call: returned.iter().sum::<f64>() / calls,
        frames_returned_per_second_min: returned.first().copied().unwrap_or(0.0),
        frames_returned_per_second_p50: returned.get(returned.len() / 2).copied().unwrap_or(0.0),
        usage,
    }
}

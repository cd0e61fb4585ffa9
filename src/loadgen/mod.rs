//! `voxline loadgen` (decisions §12): a carrier fleet that places calls through the real API,
//! answers them as simulated callees over real websockets, and measures latency, frame pacing,
//! failures and the server's CPU and memory per concurrent call.
//!
//! This file is the command's entry and its output; `args` holds the options, `setup` what a
//! run goes against, `driver` the steps and the sweep, `observation` how one call is judged,
//! `report` the human-readable summary, `sip_fleet` the callees of `--carrier sip` (the
//! workspace's SIP trunk, audio on RTP), `twilio_fleet` the load generator as Twilio
//! (`--fleet twilio`: its REST API, signed callbacks and media websockets) and
//! `console_session` the console sign-in it stores a `--target`'s credential through, `backlog` the post-call analysis backlog seeded
//! and drained alongside the run (`--analysis-backlog`), `tools` the function server and
//! function tool of `--tool-latency-ms`, `turn_counts` how the in-process server's turns ended.

pub mod fleet;
pub mod metrics;
pub mod sip_fleet;
pub mod sweep;
pub mod turn_counts;
pub mod twilio_fleet;

mod args;
mod backlog;
mod console_session;
mod driver;
mod inbound;
mod observation;
mod report;
mod setup;
mod tools;

pub use args::{LoadCarrier, LoadFleet, LoadgenArgs};
pub use setup::run_with_fleet_runtime;

use anyhow::Context;
use metrics::StepSummary;
use report::print_human;
use sweep::SweepReport;

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

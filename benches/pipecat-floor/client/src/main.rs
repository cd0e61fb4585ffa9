//! `pipecat-floor-client`: N Twilio Media Streams callers against one websocket server; prints
//! the server's CPU and memory per call and the media frames it returned, as JSON.

use std::time::Duration;

use clap::Parser;

/// Twilio Media Streams load client of benches/pipecat-floor.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The server's Twilio media websocket.
    #[arg(long, default_value = "ws://127.0.0.1:18765/ws")]
    url: String,
    /// Concurrent calls.
    #[arg(long, default_value_t = 50)]
    calls: usize,
    /// Seconds each call sends media.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Seconds from the moment every call has started to the plateau's first reading.
    #[arg(long, default_value_t = 3.0)]
    warmup: f64,
    /// Seconds the server is watched before the calls, for its idle CPU.
    #[arg(long, default_value_t = 2.0)]
    idle: f64,
    /// Seconds a call waits for its last echoes after its last frame.
    #[arg(long, default_value_t = 1.0)]
    drain: f64,
    /// The server's process id, read in /proc; without it there are no CPU or memory figures.
    #[arg(long)]
    server_pid: Option<u32>,
}

fn seconds(value: f64, name: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| anyhow::anyhow!("--{name} {value} is not a duration"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = pipecat_floor_client::Config {
        url: args.url,
        calls: args.calls,
        duration: seconds(args.duration, "duration")?,
        warmup: seconds(args.warmup, "warmup")?,
        idle: seconds(args.idle, "idle")?,
        drain: seconds(args.drain, "drain")?,
        server_pid: args.server_pid,
    };
    let report = pipecat_floor_client::run(&config).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

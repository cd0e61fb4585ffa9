//! The `voxline` binary: `serve`, `admin` and `loadgen`.

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use voxline::admin::cli::{self as admin_cli, AdminCommand};
use voxline::app::server::{Server, ShutdownSignals};
use voxline::app::telemetry::init_logging;
use voxline::config::{ServeArgs, Settings, StorageArgs};
use voxline::domain::clock::SystemClock;
use voxline::loadgen::LoadgenArgs;

/// Voxline: automated AI voice calls over HTTP.
#[derive(Debug, Parser)]
#[command(name = "voxline", version, about)]
struct Cli {
    #[command(flatten)]
    storage: StorageArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP API, media endpoints, call engine and background jobs.
    Serve(Box<ServeArgs>),
    /// Platform administration; each command prints one JSON object.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Drive simulated calls through a server and measure latency, pacing and cost per call.
    Loadgen(Box<LoadgenArgs>),
}

#[tokio::main]
async fn main() -> ExitCode {
    // Loadgen and the admin CLI make TLS connections without a server.
    voxline::app::server::install_tls_provider();
    let cli = Cli::try_parse()
        .unwrap_or_else(|err| voxline::config::name_env_variable(err, &Cli::command()).exit());
    match cli.command {
        Command::Serve(serve) => match run_serve(&cli.storage, &serve).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("voxline serve: {err:#}");
                ExitCode::FAILURE
            }
        },
        Command::Admin(command) => match admin_cli::run(&cli.storage, command).await {
            Ok(value) => {
                println!("{value}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("voxline admin: {err:#}");
                ExitCode::FAILURE
            }
        },
        Command::Loadgen(args) => match voxline::loadgen::run(*args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("voxline loadgen: {err:#}");
                ExitCode::FAILURE
            }
        },
    }
}

async fn run_serve(storage: &StorageArgs, serve: &ServeArgs) -> anyhow::Result<()> {
    let settings = Settings::resolve(storage, serve)?;
    init_logging(settings.log_json);
    let mut signals = ShutdownSignals::listen()?;
    let server = Server::start(settings, Arc::new(SystemClock)).await?;
    if let Some(boot) = &server.bootstrapped {
        println!(
            "\nVoxline bootstrapped a Demo workspace ({org}).\n\n  API key (shown once, keep it): {key}\n  Caller number: {phone}\n",
            org = boot.org_id,
            key = boot.api_key,
            phone = boot.phone,
        );
        for (engine, id) in &boot.agents {
            println!("  {engine:<12} agent: {id}", engine = engine.as_str());
        }
        println!(
            "\n  Console: {base}/  sign in as {email} with the one-time password {password}\n  (shown once; change it under Your account)",
            base = server.base_url(),
            email = boot.owner_email,
            password = boot.owner_password,
        );
        println!(
            "\nTry: curl -H 'Authorization: Bearer {key}' {base}/api/agents\n",
            key = boot.api_key,
            base = server.base_url()
        );
    }
    signals.next().await;
    tracing::info!("shutting down: draining");
    // A second signal ends live calls at once; their results are still stored.
    let hurry = CancellationToken::new();
    let hurried = hurry.clone();
    let second = tokio::spawn(async move {
        signals.next().await;
        tracing::warn!("second signal: ending live calls now");
        hurried.cancel();
    });
    server.drain(hurry).await;
    second.abort();
    Ok(())
}

//! What a run goes against and with what: a `--target` server, or one
//! started in-process on a throwaway data dir with a load workspace (key,
//! number, credit) and the callee fleet as its sim carrier; the process
//! probe, the agent, and the driver started on the fleet runtime.

use super::LoadgenOutput;
use super::args::{LoadCarrier, LoadFleet, LoadgenArgs};
use super::backlog::{self, Backlog};
use super::console_session::ConsoleSession;
use super::driver::{LoadRun, ToolRun, drive};
use super::fleet::{self, Api, Fleet};
use super::inbound::InboundLine;
use super::metrics::TurnBudget;
use super::sip_fleet::SipFleet;
use super::tools::{self, ToolServer};
use super::twilio_fleet::TwilioFleet;
use crate::access::api_key::GeneratedKey;
use crate::admin::ops;
use crate::app::server::Server;
use crate::cluster::procstat::ProcessProbe;
use crate::config::{Settings, SimSettings};
use crate::domain::clock::SystemClock;
use crate::domain::{AgentId, ApiKeyId, OrgId, Paise};
use crate::providers::settings::ProviderSettings;
use crate::secrets::credentials::{CredentialCipher, CredentialKind};
use crate::secrets::workspace_credentials;
use crate::sip::rtp_ports::RtpPortRange;
use crate::sip::settings::{SipListen, SipSettings};
use crate::store::Store;
use crate::store::keys::NewApiKey;
use anyhow::Context;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::{Mutex, mpsc};
use voxline_actors::carrier::Carrier;
use voxline_actors::sim::carrier::{SimCarrier, SimCarrierConfig};
use voxline_media::endpoint::EndpointerConfig;

/// Runs the load generator with its fleet on `fleet` and returns the summary (used by tests).
pub async fn run_with_fleet_runtime(
    args: &LoadgenArgs,
    fleet_runtime: &tokio::runtime::Handle,
) -> anyhow::Result<LoadgenOutput> {
    anyhow::ensure!(args.calls > 0, "--calls must be at least 1");
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    anyhow::ensure!(args.duration > 0, "--duration must be at least 1 second");
    if args.analysis_backlog > 0 {
        anyhow::ensure!(
            args.target.is_empty(),
            "--analysis-backlog seeds the database of the in-process server; it cannot be used with --target"
        );
        anyhow::ensure!(
            !args.sweep,
            "--analysis-backlog measures one run; it cannot be used with --sweep"
        );
    }
    anyhow::ensure!(
        args.tool_latency_ms == 0 || args.agent.is_none(),
        "--tool-latency-ms gives the created load agent its function tool; it cannot be used with --agent"
    );
    let sip = args.carrier == LoadCarrier::Sip;
    if sip {
        anyhow::ensure!(
            args.target.is_empty(),
            "--carrier sip answers the in-process server's SIP calls; it cannot be used with --target"
        );
        anyhow::ensure!(
            matches!(
                args.mode,
                fleet::PlaceMode::TestCall | fleet::PlaceMode::Calls | fleet::PlaceMode::Alert
            ) && !args.inbound,
            "--carrier sip places outbound calls (--mode test-call, calls or alert)"
        );
    }
    let twilio = args.fleet == LoadFleet::Twilio;
    if twilio {
        anyhow::ensure!(
            !sip,
            "--fleet twilio answers the calls as Twilio; it cannot be used with --carrier sip"
        );
        anyhow::ensure!(
            !args.inbound
                && !matches!(
                    args.mode,
                    fleet::PlaceMode::Inbound | fleet::PlaceMode::Mixed
                ),
            "--fleet twilio answers outbound calls (--mode test-call, calls, alert or batch)"
        );
        anyhow::ensure!(
            args.target.is_empty()
                || (args.console_email.is_some() && args.console_password.is_some()),
            "--fleet twilio with --target stores the load workspace's twilio credential through the console: pass --console-email and --console-password (or VOXLINE_CONSOLE_EMAIL and VOXLINE_CONSOLE_PASSWORD) of a console admin"
        );
    }
    let script = match &args.script {
        Some(script) => {
            Some(serde_json::from_str::<Value>(script).context("--script is not JSON")?)
        }
        // The default script has no line that calls a function: the tool run gets one.
        None if args.tool_latency_ms > 0 => Some(tools::default_script()),
        None => None,
    };
    let (variables, tool_line) = match &script {
        Some(script) => {
            let steps =
                voxline_actors::sim::callee::parse_sim_script(script).context("--script")?;
            (
                serde_json::json!({ "simScript": script }),
                tools::tool_line_index(&steps),
            )
        }
        None => (serde_json::json!({}), None),
    };
    let tool_server = if args.tool_latency_ms > 0 {
        if tool_line.is_none() {
            tracing::warn!(
                "--script has no line that asks for the order status: the function tool will not be called"
            );
        }
        let server = ToolServer::start(Duration::from_millis(args.tool_latency_ms), fleet_runtime)
            .await
            .context("starting the function server")?;
        Some(Arc::new(server))
    } else {
        None
    };
    let budget = TurnBudget {
        endpointing_ms: u64::from(EndpointerConfig::default().end_silence_ms),
        asr_ms: args.sim_asr_ms,
        llm_first_token_ms: args.sim_llm_ms,
        llm_token_interval_ms: args.sim_llm_token_ms,
        tts_first_byte_ms: args.sim_tts_ms,
    };
    let (answered_tx, answered_rx) = mpsc::unbounded_channel();
    let mut sip_fleet = None;
    let mut twilio_fleet = None;
    let (server, org, fleet, apis, probe, usage_source, data_dir) = match args.target.first() {
        Some(_) => {
            let key = args
                .key
                .as_deref()
                .context("--key (or VOXLINE_API_KEY) is required with --target")?;
            let probe = args.server_pid.map(ProcessProbe::process);
            let source = match args.server_pid {
                Some(pid) => format!("/proc/{pid} (the --target server)"),
                None => "not measured: pass --server-pid".to_owned(),
            };
            let apis = args
                .target
                .iter()
                .map(|target| Api::new(target, key))
                .collect::<Result<Vec<_>, _>>()?;
            let fleet = if twilio {
                let providers = ProviderSettings::resolve(&args.providers, None);
                let voice = crate::calls::sim_callee::callee_voice(args.callee_voice, &providers)
                    .await
                    .context("--callee-voice")?;
                let fleet = Fleet::new(fleet_runtime.clone(), answered_tx, voice);
                twilio_fleet = Some(Arc::new(start_twilio_fleet(args, &fleet, &script).await?));
                Some(fleet)
            } else {
                None
            };
            (None, None, fleet, apis, probe, source, None)
        }
        None => {
            let providers = ProviderSettings::resolve(&args.providers, None);
            let voice = crate::calls::sim_callee::callee_voice(args.callee_voice, &providers)
                .await
                .context("--callee-voice")?;
            let fleet = Fleet::new(fleet_runtime.clone(), answered_tx, voice);
            if twilio {
                twilio_fleet = Some(Arc::new(start_twilio_fleet(args, &fleet, &script).await?));
            }
            let max_concurrency = if args.sweep {
                args.sweep_max.max(args.sweep_start)
            } else {
                args.concurrency
            };
            let data_dir = std::env::temp_dir()
                .join(format!("voxline-loadgen-{}", uuid::Uuid::new_v4().simple()));
            let trunk = if sip {
                let started = SipFleet::start(
                    Arc::clone(&fleet),
                    crate::calls::sim_callee::script_steps(&script),
                    Duration::from_millis(args.sim_answer_ms),
                )
                .await
                .context("starting the SIP fleet")?;
                let addr = started.addr;
                sip_fleet = Some(started);
                Some(addr)
            } else {
                None
            };
            let (server, org, key) = start_in_process(
                args,
                &fleet,
                max_concurrency,
                data_dir.clone(),
                trunk,
                twilio_fleet.as_deref(),
            )
            .await?;
            let api = Api::new(&server.base_url(), &key)?;
            let probe = ProcessProbe::current_process(fleet::FLEET_THREAD);
            let source = format!(
                "/proc/self without the {} threads (server in-process; RSS includes the fleet)",
                fleet::FLEET_THREAD
            );
            (
                Some(server),
                Some(org),
                Some(fleet),
                vec![api],
                Some(probe),
                source,
                Some(data_dir),
            )
        }
    };
    // Setup goes through the first target: with several, they share one database.
    let (api, other_targets) = split_first(apis)?;
    if let (Some(twilio_fleet), None) = (&twilio_fleet, &server) {
        put_twilio_on_target(args, &api, twilio_fleet).await?;
    }
    let agent_id = match &args.agent {
        Some(agent) if twilio => {
            let found = api
                .get(&format!("/api/agents/{agent}"))
                .await
                .context("reading --agent")?;
            anyhow::ensure!(
                found["telephonyProvider"] == "twilio",
                "--fleet twilio answers Twilio calls: --agent {agent} has telephonyProvider {}",
                found["telephonyProvider"]
            );
            agent.clone()
        }
        Some(agent) => agent.clone(),
        None => {
            let agent_tools: Vec<Value> = tool_server
                .iter()
                .map(|server| tools::function_tool(server.url()))
                .collect();
            let mut body = args
                .agent_body
                .as_deref()
                .map(serde_json::from_str::<Value>)
                .transpose()
                .context("--agent-body is not JSON")?;
            if sip || twilio {
                let mut carrier_body = body.unwrap_or_else(fleet::agent_body);
                carrier_body["telephonyProvider"] = Value::from(if sip { "sip" } else { "twilio" });
                body = Some(carrier_body);
            }
            api.create_agent(body.as_ref(), &agent_tools).await.context(if agent_tools.is_empty() {
                "creating the load agent"
            } else {
                // A --target server refuses a loopback function URL unless allow-listed.
                "creating the load agent with its function tool (a --target server must allow-list 127.0.0.1 in webhook_allow_hosts)"
            })?
        }
    };
    // The function's stored calls are read straight from the in-process server's store;
    // a --target server's store is not the loadgen's to read.
    let tool_store = match (&tool_server, &server) {
        (Some(_), Some(server)) => Some(server.state().store.clone()),
        _ => None,
    };
    let backlog = match (&server, org) {
        (Some(server), Some(org)) if args.analysis_backlog > 0 => Some(Arc::new(
            seed_backlog(
                server,
                &api,
                org,
                args.analysis_backlog,
                args.hold_analysis_backlog,
            )
            .await?,
        )),
        _ => None,
    };
    let mode = if args.inbound {
        fleet::PlaceMode::Inbound
    } else {
        args.mode
    };
    let inbound = match (mode, &server, org) {
        (fleet::PlaceMode::Inbound | fleet::PlaceMode::Mixed, Some(server), Some(org)) => {
            Some(inbound_line(server, &api, org, &agent_id, &variables).await?)
        }
        (fleet::PlaceMode::Inbound | fleet::PlaceMode::Mixed, _, _) => anyhow::bail!(
            "--inbound and --mode mixed ring the in-process server's number; they cannot be used with --target"
        ),
        _ => None,
    };
    let run = Arc::new(LoadRun {
        api,
        other_targets,
        agent_id,
        variables,
        mode,
        fleet,
        answered_rx: Mutex::new(answered_rx),
        probe,
        usage_source,
        budget,
        next_number: AtomicU64::new(0),
        duration: Duration::from_secs(args.duration),
        show_progress: true,
        backlog,
        tools: tool_server.map(|server| ToolRun {
            server,
            line: tool_line,
            store: tool_store,
        }),
        inbound,
        reports_by_number: sip,
        fleet_name: if sip { "sip" } else { args.fleet.as_str() },
        twilio: twilio_fleet,
        server_in_process: server.is_some(),
    });
    let driver = {
        let run = Arc::clone(&run);
        let args = args.clone();
        fleet_runtime.spawn(async move { drive(run, &args).await })
    };
    let output = driver.await.context("the load driver panicked")?;
    if let Some(backlog) = &run.backlog {
        backlog.close().await;
    }
    if let Some(server) = server {
        server.shutdown().await;
    }
    drop(sip_fleet);
    if let Some(dir) = data_dir {
        // The data dir only held this run's throwaway database and recordings.
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(output)
}

/// Starts the Twilio fleet (`--fleet twilio`) on `fleet`'s runtime with the run's script.
async fn start_twilio_fleet(
    args: &LoadgenArgs,
    fleet: &Arc<Fleet>,
    script: &Option<Value>,
) -> anyhow::Result<TwilioFleet> {
    TwilioFleet::start(
        Arc::clone(fleet),
        crate::calls::sim_callee::script_steps(script),
        Duration::from_millis(args.sim_answer_ms),
    )
    .await
    .context("starting the Twilio fleet")
}

/// Points the `--target` workspace at the Twilio fleet: its `twilio` credential (the fleet's
/// account, token and loopback base URL) stored through the console, and a Twilio caller
/// number rented there when the workspace has none.
async fn put_twilio_on_target(
    args: &LoadgenArgs,
    api: &Api,
    twilio: &TwilioFleet,
) -> anyhow::Result<()> {
    let (Some(email), Some(password)) = (&args.console_email, &args.console_password) else {
        anyhow::bail!("--fleet twilio with --target needs --console-email and --console-password");
    };
    let console = ConsoleSession::sign_in(api.base(), email, password).await?;
    let base_url = twilio.base_url();
    console
        .save_credential(
            "twilio",
            &[
                ("accountSid", twilio.account_sid()),
                ("authToken", twilio.auth_token()),
                ("baseUrl", &base_url),
            ],
        )
        .await?;
    let numbers = api
        .get("/api/numbers")
        .await
        .context("reading the load workspace's numbers")?;
    let has_twilio = numbers["rows"].as_array().is_some_and(|rows| {
        rows.iter()
            .any(|row| row["provider"] == "twilio" && row["status"] == "active")
    });
    if !has_twilio {
        console.rent_number(&args.twilio_number, "twilio").await?;
    }
    Ok(())
}

/// Puts the load agent on the load workspace's number (inbound on, busy callers
/// rejected) and returns what its callers ring, signed with the workspace's sim account.
async fn inbound_line(
    server: &Server,
    api: &Api,
    org: OrgId,
    agent_id: &str,
    variables: &Value,
) -> anyhow::Result<InboundLine> {
    let numbers = api
        .get("/api/numbers")
        .await
        .context("reading the load number")?;
    let number = &numbers["rows"][0];
    let (id, phone) = number["id"]
        .as_str()
        .zip(number["phone"].as_str())
        .context("the load workspace has no number")?;
    api.patch(
        &format!("/api/numbers/{id}"),
        &serde_json::json!({"inboundAgentId": agent_id, "inbound": {"enabled": true, "whenBusy": "reject"}}),
    )
    .await
    .context("putting the load agent on the load number")?;
    let script = variables.get("simScript").cloned();
    let steps = crate::calls::sim_callee::script_steps(&script);
    Ok(InboundLine {
        server: server.base_url(),
        phone: phone.to_owned(),
        account: crate::carriers::inbound::sim_account(&server.state().secret, &org.to_string()),
        script,
        steps,
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()
            .context("the callers' HTTP client")?,
    })
}

/// The first of `apis` and the rest.
fn split_first(mut apis: Vec<Api>) -> anyhow::Result<(Api, Vec<Api>)> {
    anyhow::ensure!(!apis.is_empty(), "no server to drive");
    let first = apis.remove(0);
    Ok((first, apis))
}

/// Minute quota and request caps of the load workspace: far beyond any run.
const LARGE_QUOTA: i64 = 1_000_000_000;
/// Wallet credit of the load workspace (₹10 crore).
const LARGE_CREDIT_PAISE: Paise = Paise(10_000_000_000);

/// Creates the screening agent and seeds `size` finished calls of it with pending analyses,
/// held until the run starts (for the whole run when `held`).
async fn seed_backlog(
    server: &Server,
    api: &Api,
    org: OrgId,
    size: u64,
    held: bool,
) -> anyhow::Result<Backlog> {
    let agent = api
        .post("/api/agents", &backlog::agent_body()?)
        .await
        .context("creating the analysis backlog agent")?;
    let agent_id: AgentId = agent["id"]
        .as_str()
        .context("the analysis backlog agent has no id")?
        .parse()
        .context("the analysis backlog agent's id")?;
    let started = std::time::Instant::now();
    // The backlog is counted every second over a connection of its own, so the sampling
    // does not take one of the server's few pooled connections while the calls run.
    let counter = Store::connect(&server.state().settings.storage.database_url, 1)
        .await
        .context("opening the backlog counter's connection")?;
    let seeded = Backlog::seed(&server.state().store, counter, org, agent_id, size, held).await?;
    tracing::info!(
        calls = size,
        seconds = started.elapsed().as_secs_f64(),
        "analysis backlog seeded"
    );
    Ok(seeded)
}

/// Starts a server in a temporary directory with a load workspace; returns it, the
/// workspace and its key.
async fn start_in_process(
    args: &LoadgenArgs,
    fleet: &Arc<Fleet>,
    max_concurrency: u64,
    data_dir: std::path::PathBuf,
    sip_trunk: Option<std::net::SocketAddr>,
    twilio: Option<&TwilioFleet>,
) -> anyhow::Result<(Server, OrgId, String)> {
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
        callee_voice: args.callee_voice,
    };
    settings.providers = ProviderSettings::resolve(&args.providers, None);
    if sip_trunk.is_some() {
        // The SIP carrier listens on a free loopback port; each call takes an even RTP port.
        settings.sip = SipSettings {
            listen: SipListen::On(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            public_ip: None,
            rtp_ports: RtpPortRange::new(20_000, 29_999).unwrap_or_default(),
            tls: Default::default(),
        };
    }
    settings.smart_turn = crate::providers::smart_turn::SmartTurnSettings::resolve(
        &args.smart_turn,
        &crate::config::FileConfig::default(),
        &settings.storage.data_dir,
    );
    if let Some(concurrency) = args.postcall_llm_concurrency {
        settings.ratings.postcall_llm_concurrency = concurrency;
    }
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
    // The loadgen's function server listens on loopback, which the egress guard refuses
    // unless allow-listed.
    if args.tool_latency_ms > 0
        && !settings
            .webhook_allow_hosts
            .iter()
            .any(|h| h == "127.0.0.1")
    {
        settings.webhook_allow_hosts.push("127.0.0.1".to_owned());
    }
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
    // The caller ID: the sim carrier's number, a `sip` one whose calls go out over the
    // workspace's trunk (the SIP fleet), or a `twilio` one (the Twilio fleet).
    let (phone, provider) = match (sip_trunk, twilio) {
        (Some(_), _) => ("+918035740101", "sip"),
        (None, Some(_)) => (args.twilio_number.as_str(), "twilio"),
        (None, None) => ("+918035740101", "sim"),
    };
    ops::add_number(store, org.id, phone, provider, true, Some(Paise::ZERO), now).await?;
    if let Some(twilio) = twilio {
        let cipher = CredentialCipher::new(&server.state().secret);
        workspace_credentials::store_credential(
            store,
            &cipher,
            org.id,
            CredentialKind::Twilio,
            &twilio.credential(),
            now.timestamp_millis(),
        )
        .await
        .context("the load workspace's twilio credential")?;
    }
    if let Some(trunk) = sip_trunk {
        let cipher = CredentialCipher::new(&server.state().secret);
        workspace_credentials::store_credential(
            store,
            &cipher,
            org.id,
            CredentialKind::Sip,
            &serde_json::json!({"host": trunk.ip().to_string(), "port": trunk.port(), "transport": "udp"}),
            now.timestamp_millis(),
        )
        .await
        .context("the load workspace's sip trunk")?;
    }
    store
        .credit_wallet(org.id, LARGE_CREDIT_PAISE, now.timestamp_millis())
        .await?;
    Ok((server, org.id, generated.full))
}

//! Configuration: flags override the environment, which overrides the TOML
//! file, which overrides the defaults (decisions §1).
//!
//! Every environment variable is read by clap (`env =` on a flag), so a value
//! that does not parse stops the start instead of falling back to a default;
//! [`name_env_variable`] makes that error name the variable.

use crate::domain::calling_hours::CallingHours;
use crate::providers::settings::{ProviderArgs, ProviderSettings};
use crate::providers::smart_turn::{MODEL_FILE, PoolSettings, RUNTIME_FILE, SmartTurnSettings};
use crate::recordings::RecordingsLocation;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Args};
use serde::Deserialize;
use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the database and data live; shared by `serve` and `admin`.
#[derive(Debug, Clone, Default, Args)]
pub struct StorageArgs {
    /// Optional TOML configuration file.
    #[arg(long, env = "VOXLINE_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Data directory: SQLite file, recordings, generated secret.
    #[arg(long, env = "VOXLINE_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// sqlite://… or postgres://…; defaults to SQLite in the data directory.
    #[arg(long, env = "DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// Server secret that signs media tokens and recording links.
    #[arg(long, env = "VOXLINE_SECRET", global = true, hide_env_values = true)]
    pub secret: Option<String>,
    /// Database pool size.
    #[arg(long, env = "VOXLINE_DB_POOL", global = true)]
    pub db_pool_size: Option<u32>,
}

/// Flags of `voxline serve`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// HTTP listen address.
    #[arg(long, env = "VOXLINE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Public base URL given to carriers for callbacks and media.
    #[arg(long, env = "VOXLINE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Admin listener (Prometheus /metrics).
    #[arg(long, env = "VOXLINE_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, env = "VOXLINE_LOG_JSON")]
    pub log_json: bool,
    /// Do not create the Demo workspace on an empty database.
    #[arg(long, env = "VOXLINE_NO_BOOTSTRAP")]
    pub no_bootstrap: bool,
    /// Days a call recording is kept (default 90).
    #[arg(long, env = "VOXLINE_RECORDING_RETENTION_DAYS")]
    pub recording_retention_days: Option<u64>,
    /// Where finished recordings are stored: `file:///directory` or
    /// `s3://bucket/prefix` (credentials, region and endpoint from the usual
    /// `AWS_*` variables); default `<data dir>/recordings`.
    #[arg(long, env = "VOXLINE_RECORDINGS_URL")]
    pub recordings_url: Option<crate::recordings::RecordingsLocation>,
    /// Webhook hosts allowed even though they resolve to loopback, private or
    /// link-local addresses (comma-separated).
    #[arg(long, env = "VOXLINE_WEBHOOK_ALLOW_HOSTS", value_delimiter = ',')]
    pub webhook_allow_hosts: Vec<String>,
    /// Seconds live calls may go on after SIGTERM before they are ended
    /// (default 30).
    #[arg(long, env = "VOXLINE_SHUTDOWN_GRACE_SECONDS")]
    pub shutdown_grace_seconds: Option<u64>,
    /// Calling hours of workspaces that set none, as JSON
    /// (`{"start":"09:00","end":"21:00","days":["mon",…],"timeZone":"callee"}`;
    /// default 09:00–21:00 every day in the callee's time zone).
    #[arg(long, env = "VOXLINE_CALLING_HOURS")]
    pub calling_hours: Option<CallingHours>,
    /// This node's id among several on one Postgres database (default:
    /// generated once and kept in the data directory as `node-id`).
    #[arg(long, env = "VOXLINE_NODE_ID")]
    pub node_id: Option<crate::domain::NodeId>,
    /// Live calls above which this node takes no new calls from the queue
    /// (default: no limit).
    #[arg(long, env = "VOXLINE_NODE_MAX_CALLS")]
    pub node_max_calls: Option<u32>,
    /// CPU use, in percent of one core, above which this node takes no new
    /// calls from the queue (default: no limit).
    #[arg(long, env = "VOXLINE_NODE_MAX_CPU_PERCENT")]
    pub node_max_cpu_percent: Option<u32>,
    /// Simulated provider timings.
    #[command(flatten)]
    pub sim: SimArgs,
    /// Post-call rating settings.
    #[command(flatten)]
    pub ratings: RatingArgs,
    /// Platform provider keys, addresses and timeouts.
    #[command(flatten)]
    pub providers: ProviderArgs,
    /// The Smart Turn end-of-turn model and its evaluation pool.
    #[command(flatten)]
    pub smart_turn: SmartTurnArgs,
    /// The SIP carrier's listener, public address and RTP ports.
    #[command(flatten)]
    pub sip: crate::sip::settings::SipArgs,
}

/// Flags (and variables) of the Smart Turn model; see [`SmartTurnSettings`].
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Smart Turn")]
pub struct SmartTurnArgs {
    /// The Smart Turn v3.2 model file (installed by scripts/smart-turn-model.sh; default
    /// `<data dir>/models/smart-turn-v3.2-cpu.onnx`). Missing: turns end on silence timing.
    #[arg(long = "smart-turn-model", env = "VOXLINE_SMART_TURN_MODEL")]
    pub model: Option<PathBuf>,
    /// The ONNX Runtime library that runs it (installed beside it by the same script;
    /// default: `libonnxruntime.so.1.24.3` in the model's directory).
    #[arg(long = "onnxruntime-lib", env = "VOXLINE_ONNXRUNTIME_LIB")]
    pub runtime: Option<PathBuf>,
    /// Threads evaluating the model (default: half the cores, at least 1).
    #[arg(long = "smart-turn-workers", env = "VOXLINE_SMART_TURN_WORKERS", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<u32>,
    /// Evaluations that may wait for a thread; past that a turn falls back to silence
    /// timing (default 8 per thread).
    #[arg(long = "smart-turn-queue", env = "VOXLINE_SMART_TURN_QUEUE", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub queue: Option<u32>,
    /// The most waiting evaluations a thread runs as one batch (default 4).
    #[arg(long = "smart-turn-max-batch", env = "VOXLINE_SMART_TURN_MAX_BATCH", value_parser = clap::value_parser!(u32).range(1..=32))]
    pub max_batch: Option<u32>,
}

/// Flags (and variables) of the simulated providers' timings; see [`SimSettings`].
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Simulated providers")]
pub struct SimArgs {
    /// Seconds an unanswered sim call rings.
    #[arg(long = "sim-ring-seconds", env = "VOXLINE_SIM_RING_SECONDS")]
    pub ring_seconds: Option<u32>,
    /// Milliseconds before a sim callee answers.
    #[arg(long = "sim-answer-ms", env = "VOXLINE_SIM_ANSWER_MS")]
    pub answer_ms: Option<u64>,
    /// Sim ASR: milliseconds from end of speech to the final transcript.
    #[arg(long = "sim-asr-ms", env = "VOXLINE_SIM_ASR_MS")]
    pub asr_ms: Option<u64>,
    /// Sim LLM: milliseconds to the first token.
    #[arg(long = "sim-llm-ms", env = "VOXLINE_SIM_LLM_MS")]
    pub llm_ms: Option<u64>,
    /// Sim LLM: milliseconds between tokens.
    #[arg(long = "sim-llm-token-ms", env = "VOXLINE_SIM_LLM_TOKEN_MS")]
    pub llm_token_ms: Option<u64>,
    /// Sim TTS: milliseconds to the first audio.
    #[arg(long = "sim-tts-ms", env = "VOXLINE_SIM_TTS_MS")]
    pub tts_ms: Option<u64>,
    /// What the sim callee sounds like: speech-like sound read by the sim ASR (`synthetic`),
    /// or real speech from `piper`, `espeak`, or `speech` (Piper when its server answers,
    /// else espeak-ng) for agents on a real ASR.
    #[arg(
        long = "sim-callee-voice",
        env = "VOXLINE_SIM_CALLEE_VOICE",
        value_enum
    )]
    pub callee_voice: Option<CalleeVoiceKind>,
}

/// Flags (and variables) of post-call ratings; see [`RatingSettings`].
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Ratings")]
pub struct RatingArgs {
    /// Seconds a rated call's `call.completed` waits for its scorecard.
    #[arg(long, env = "VOXLINE_RATING_WEBHOOK_WAIT_SECONDS")]
    pub rating_webhook_wait_seconds: Option<u64>,
    /// Base URL of the Google Sheets API v4.
    #[arg(long, env = "VOXLINE_SHEETS_BASE_URL")]
    pub sheets_base_url: Option<String>,
    /// Analysis and rating requests in flight at once per LLM endpoint (1-256).
    #[arg(long, env = "VOXLINE_POSTCALL_LLM_CONCURRENCY", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub postcall_llm_concurrency: Option<u32>,
}

/// The optional TOML file; every key mirrors a flag.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FileConfig {
    /// See [`ServeArgs::listen`].
    pub listen: Option<String>,
    /// See [`ServeArgs::public_url`].
    pub public_url: Option<String>,
    /// See [`StorageArgs::data_dir`].
    pub data_dir: Option<PathBuf>,
    /// See [`StorageArgs::database_url`].
    pub database_url: Option<String>,
    /// See [`StorageArgs::secret`].
    pub secret: Option<String>,
    /// See [`StorageArgs::db_pool_size`].
    pub db_pool_size: Option<u32>,
    /// See [`ServeArgs::admin_listen`].
    pub admin_listen: Option<String>,
    /// See [`ServeArgs::log_json`].
    pub log_json: Option<bool>,
    /// See [`ServeArgs::no_bootstrap`].
    pub no_bootstrap: Option<bool>,
    /// See [`ServeArgs::node_id`].
    pub node_id: Option<crate::domain::NodeId>,
    /// See [`ServeArgs::node_max_calls`].
    pub node_max_calls: Option<u32>,
    /// See [`ServeArgs::node_max_cpu_percent`].
    pub node_max_cpu_percent: Option<u32>,
    /// Seconds between background janitor passes (renewals, dormancy).
    pub janitor_interval_seconds: Option<u64>,
    /// Days of idleness before an agent turns dormant.
    pub dormant_after_days: Option<u32>,
    /// Days a call recording is kept (`VOXLINE_RECORDING_RETENTION_DAYS`, default 90).
    pub recording_retention_days: Option<u32>,
    /// See [`ServeArgs::recordings_url`].
    pub recordings_url: Option<String>,
    /// See [`ServeArgs::shutdown_grace_seconds`].
    pub shutdown_grace_seconds: Option<u64>,
    /// See [`ServeArgs::calling_hours`].
    pub calling_hours: Option<CallingHours>,
    /// See [`SimSettings::ring_seconds`].
    pub sim_ring_seconds: Option<u32>,
    /// See [`SimSettings::answer_after_ms`].
    pub sim_answer_ms: Option<u64>,
    /// See [`SimSettings::asr_latency_ms`].
    pub sim_asr_ms: Option<u64>,
    /// See [`SimSettings::llm_first_token_ms`].
    pub sim_llm_ms: Option<u64>,
    /// See [`SimSettings::llm_token_interval_ms`].
    pub sim_llm_token_ms: Option<u64>,
    /// See [`SimSettings::tts_first_byte_ms`].
    pub sim_tts_ms: Option<u64>,
    /// See [`SimSettings::callee_voice`].
    pub sim_callee_voice: Option<CalleeVoiceKind>,
    /// See [`SmartTurnArgs::model`].
    pub smart_turn_model: Option<PathBuf>,
    /// See [`SmartTurnArgs::runtime`].
    pub onnxruntime_lib: Option<PathBuf>,
    /// See [`SmartTurnArgs::workers`].
    pub smart_turn_workers: Option<u32>,
    /// See [`SmartTurnArgs::queue`].
    pub smart_turn_queue: Option<u32>,
    /// See [`SmartTurnArgs::max_batch`].
    pub smart_turn_max_batch: Option<u32>,
    /// Platform provider keys, base URLs and timeouts (`[providers]`).
    pub providers: Option<crate::providers::settings::ProvidersFile>,
}

/// Why configuration could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for us.
    #[error("invalid config file {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The TOML error.
        source: Box<toml::de::Error>,
    },
    /// An address setting does not parse.
    #[error("{setting} is not a socket address: {value}")]
    Address {
        /// Which setting.
        setting: &'static str,
        /// Its value.
        value: String,
    },
    /// A SIP setting cannot be used.
    #[error(transparent)]
    Sip(#[from] crate::sip::settings::SipSettingsError),
    /// The secret could not be created or read.
    #[error("server secret: {0}")]
    Secret(std::io::Error),
    /// The recordings URL does not name a store.
    #[error(transparent)]
    RecordingsUrl(#[from] crate::recordings::RecordingsLocationError),
    /// The data directory's `node-id` file does not hold a node id.
    #[error("{path} does not hold a node id (1 to 64 letters, digits, '.', '_' or '-')")]
    NodeId {
        /// The file.
        path: String,
    },
}

/// Storage settings after merging.
#[derive(Debug, Clone)]
pub struct StorageSettings {
    /// Data directory.
    pub data_dir: PathBuf,
    /// Database URL.
    pub database_url: String,
    /// Pool size.
    pub db_pool_size: u32,
    /// Explicit secret, if given.
    pub secret: Option<String>,
}

/// Timings of the simulated providers (decisions §11).
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// Seconds an unanswered sim call rings (`VOXLINE_SIM_RING_SECONDS`).
    pub ring_seconds: u32,
    /// Milliseconds before a sim callee answers.
    pub answer_after_ms: u64,
    /// Sim ASR: delay from end of speech to the final transcript.
    pub asr_latency_ms: u64,
    /// Sim LLM: time to first token.
    pub llm_first_token_ms: u64,
    /// Sim LLM: time between tokens.
    pub llm_token_interval_ms: u64,
    /// Sim TTS: time to first audio.
    pub tts_first_byte_ms: u64,
    /// What the sim callee sounds like.
    pub callee_voice: CalleeVoiceKind,
}

impl Default for SimSettings {
    fn default() -> Self {
        Self {
            ring_seconds: 3,
            answer_after_ms: 1000,
            asr_latency_ms: 150,
            llm_first_token_ms: 200,
            llm_token_interval_ms: 15,
            tts_first_byte_ms: 120,
            callee_voice: CalleeVoiceKind::Synthetic,
        }
    }
}

impl SimSettings {
    /// Flags and variables over the file over the defaults.
    fn resolve(args: &SimArgs, file: &FileConfig) -> Self {
        let d = Self::default();
        Self {
            ring_seconds: args
                .ring_seconds
                .or(file.sim_ring_seconds)
                .unwrap_or(d.ring_seconds),
            answer_after_ms: args
                .answer_ms
                .or(file.sim_answer_ms)
                .unwrap_or(d.answer_after_ms),
            asr_latency_ms: args.asr_ms.or(file.sim_asr_ms).unwrap_or(d.asr_latency_ms),
            llm_first_token_ms: args
                .llm_ms
                .or(file.sim_llm_ms)
                .unwrap_or(d.llm_first_token_ms),
            llm_token_interval_ms: args
                .llm_token_ms
                .or(file.sim_llm_token_ms)
                .unwrap_or(d.llm_token_interval_ms),
            tts_first_byte_ms: args
                .tts_ms
                .or(file.sim_tts_ms)
                .unwrap_or(d.tts_first_byte_ms),
            callee_voice: args
                .callee_voice
                .or(file.sim_callee_voice)
                .unwrap_or(d.callee_voice),
        }
    }
}

/// Days a recording is kept when nothing else is configured (decisions §9).
pub const DEFAULT_RECORDING_RETENTION_DAYS: u64 = 90;

/// Seconds live calls may go on after SIGTERM when nothing else is configured.
pub const DEFAULT_SHUTDOWN_GRACE_SECONDS: u64 = 30;

/// Everything `serve` needs, fully resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Storage.
    pub storage: StorageSettings,
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Public base URL (no trailing slash).
    pub public_url: Option<String>,
    /// Admin listen address.
    pub admin_listen: SocketAddr,
    /// JSON logs.
    pub log_json: bool,
    /// Skip first-run bootstrap.
    pub no_bootstrap: bool,
    /// Janitor period.
    pub janitor_interval: Duration,
    /// Dormancy window.
    pub dormant_after: Duration,
    /// How long recordings are kept before the janitor deletes them.
    pub recording_retention: Duration,
    /// Where finished recordings are stored.
    pub recordings: crate::recordings::RecordingsLocation,
    /// Simulated provider timings.
    pub sim: SimSettings,
    /// How often stored calls due for dialing are checked.
    pub dispatch_interval: Duration,
    /// Webhook hosts allowed even though they resolve to loopback, private
    /// or link-local addresses (`VOXLINE_WEBHOOK_ALLOW_HOSTS`, comma-separated).
    pub webhook_allow_hosts: Vec<String>,
    /// Platform provider keys, base URLs, timeouts and the platform fee.
    pub providers: crate::providers::settings::ProviderSettings,
    /// Post-call ratings: webhook wait and the spreadsheet export's API.
    pub ratings: RatingSettings,
    /// How long live calls may go on after the first SIGTERM or SIGINT
    /// before they are ended with `service-shutdown`
    /// (`VOXLINE_SHUTDOWN_GRACE_SECONDS`, default 30).
    pub shutdown_grace: Duration,
    /// Calling hours of workspaces that set none (`VOXLINE_CALLING_HOURS`,
    /// default 09:00–21:00 every day in the callee's time zone).
    pub calling_hours: CallingHours,
    /// This node among several on one database.
    pub node: NodeSettings,
    /// The Smart Turn model file and its evaluation pool.
    pub smart_turn: SmartTurnSettings,
    /// The SIP carrier's listener, public address and RTP ports.
    pub sip: crate::sip::settings::SipSettings,
}

/// Where the Smart Turn model is looked for when nothing says: `<data dir>/models/`, where
/// `scripts/smart-turn-model.sh` puts it by default.
pub fn default_smart_turn_model(data_dir: &Path) -> PathBuf {
    data_dir.join("models").join(MODEL_FILE)
}

/// Evaluation threads when none are configured: half the cores, so the model never takes
/// the cores the call loops pace frames on (1 on 2 cores).
fn default_smart_turn_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

impl SmartTurnSettings {
    /// Flags and variables over the file over the defaults.
    pub(crate) fn resolve(args: &SmartTurnArgs, file: &FileConfig, data_dir: &Path) -> Self {
        let workers = args
            .workers
            .or(file.smart_turn_workers)
            .map_or_else(default_smart_turn_workers, |n| n.max(1) as usize);
        let model = args
            .model
            .clone()
            .or_else(|| file.smart_turn_model.clone())
            .unwrap_or_else(|| default_smart_turn_model(data_dir));
        Self {
            runtime: args
                .runtime
                .clone()
                .or_else(|| file.onnxruntime_lib.clone())
                .unwrap_or_else(|| model.with_file_name(RUNTIME_FILE)),
            model,
            pool: PoolSettings {
                workers,
                queue: args
                    .queue
                    .or(file.smart_turn_queue)
                    .map_or(8 * workers, |n| n.max(1) as usize),
                max_batch: args
                    .max_batch
                    .or(file.smart_turn_max_batch)
                    .map_or(4, |n| n.max(1) as usize),
            },
        }
    }
}

/// A node's identity and load threshold.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Configured id; None: generated once and kept in the data directory.
    pub id: Option<crate::domain::NodeId>,
    /// Live calls above which the node takes no new calls.
    pub max_live_calls: Option<u32>,
    /// CPU percent of one core above which the node takes no new calls.
    pub max_cpu_percent: Option<u32>,
    /// How often the node stamps its heartbeat.
    pub heartbeat: Duration,
    /// Silence after which peers take a node for dead.
    pub lease: Duration,
}

impl Default for NodeSettings {
    fn default() -> Self {
        Self {
            id: None,
            max_live_calls: None,
            max_cpu_percent: None,
            heartbeat: Duration::from_secs(2),
            lease: Duration::from_secs(10),
        }
    }
}

impl NodeSettings {
    /// [`NodeSettings::lease`] in milliseconds, as the store compares heartbeats.
    pub fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// The node's id: configured, or read from (or generated into) the
    /// data directory's `node-id` file, so a restarted node is the same node
    /// and ends its own orphans as a restart, not as a lost peer.
    pub fn resolve_id(
        &self,
        storage: &StorageSettings,
    ) -> Result<crate::domain::NodeId, ConfigError> {
        if let Some(id) = &self.id {
            return Ok(id.clone());
        }
        let path = storage.data_dir.join("node-id");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                return text.parse().map_err(|_| ConfigError::NodeId {
                    path: path.display().to_string(),
                });
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(ConfigError::Secret(err)),
        }
        std::fs::create_dir_all(&storage.data_dir).map_err(ConfigError::Secret)?;
        let fresh = crate::domain::NodeId::generate();
        std::fs::write(&path, fresh.as_str()).map_err(ConfigError::Secret)?;
        Ok(fresh)
    }
}

/// Where Google's Sheets API lives.
pub const SHEETS_BASE_URL: &str = "https://sheets.googleapis.com";

/// Post-call rating settings.
#[derive(Debug, Clone)]
pub struct RatingSettings {
    /// How long a rated call's `call.completed` waits for its scorecard
    /// (decisions §8: 60 s; `VOXLINE_RATING_WEBHOOK_WAIT_SECONDS`).
    pub webhook_wait: Duration,
    /// Base URL of the Google Sheets API v4 (`VOXLINE_SHEETS_BASE_URL`).
    pub sheets_base_url: String,
    /// Post-call (analysis and rating) requests in flight at once per LLM
    /// endpoint (`VOXLINE_POSTCALL_LLM_CONCURRENCY`, default 4): well below
    /// what an endpoint serves, so live turns never wait behind them.
    pub postcall_llm_concurrency: u32,
}

impl Default for RatingSettings {
    fn default() -> Self {
        Self {
            webhook_wait: Duration::from_secs(60),
            sheets_base_url: SHEETS_BASE_URL.to_string(),
            postcall_llm_concurrency: 4,
        }
    }
}

impl RatingSettings {
    /// The defaults with the flags' (and variables') overrides.
    pub fn resolve(args: &RatingArgs) -> Self {
        let defaults = Self::default();
        Self {
            webhook_wait: args
                .rating_webhook_wait_seconds
                .map_or(defaults.webhook_wait, Duration::from_secs),
            sheets_base_url: args
                .sheets_base_url
                .as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map_or(defaults.sheets_base_url, |v| {
                    v.trim_end_matches('/').to_string()
                }),
            postcall_llm_concurrency: args
                .postcall_llm_concurrency
                .unwrap_or(defaults.postcall_llm_concurrency),
        }
    }
}

fn read_file(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

/// The pool size when none is configured. SQLite runs each connection on its
/// own worker thread and has one writer, so a few connections serve best: at
/// 64 concurrent keyed reads on 2 cores, 4 connections cut p99 from ~35 ms to
/// ~13 ms against 8, at the same throughput (benches/api_throughput.rs).
pub fn default_pool_size(database_url: &str) -> u32 {
    if database_url.starts_with("sqlite") {
        4
    } else {
        16
    }
}

/// A flag's address, else the file's (which may not parse), else `default`.
fn address(
    setting: &'static str,
    given: Option<SocketAddr>,
    file: Option<String>,
    default: &str,
) -> Result<SocketAddr, ConfigError> {
    if let Some(addr) = given {
        return Ok(addr);
    }
    let value = file.unwrap_or_else(|| default.to_string());
    value
        .parse()
        .map_err(|_| ConfigError::Address { setting, value })
}

impl StorageSettings {
    /// Merges storage flags/env with the file and defaults.
    pub fn resolve(args: &StorageArgs) -> Result<(Self, FileConfig), ConfigError> {
        let file = read_file(args.config.as_deref())?;
        let data_dir = args
            .data_dir
            .clone()
            .or_else(|| file.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from("./voxline-data"));
        let database_url = args
            .database_url
            .clone()
            .or_else(|| file.database_url.clone())
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("voxline.db").display()));
        let db_pool_size = args
            .db_pool_size
            .or(file.db_pool_size)
            .unwrap_or_else(|| default_pool_size(&database_url));
        let secret = args.secret.clone().or_else(|| file.secret.clone());
        Ok((
            Self {
                data_dir,
                database_url,
                db_pool_size,
                secret,
            },
            file,
        ))
    }

    /// The server secret: configured, or generated once and kept in the data directory.
    pub fn load_secret(&self) -> Result<Vec<u8>, ConfigError> {
        if let Some(secret) = &self.secret {
            return Ok(secret.as_bytes().to_vec());
        }
        let path = self.data_dir.join("secret");
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => return Ok(text.trim().as_bytes().to_vec()),
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(ConfigError::Secret(err)),
        }
        std::fs::create_dir_all(&self.data_dir).map_err(ConfigError::Secret)?;
        let fresh: String = (0..32)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        write_private(&path, &fresh).map_err(ConfigError::Secret)?;
        Ok(fresh.into_bytes())
    }
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)
}

impl Settings {
    /// Merges `serve` flags/env with the file and defaults.
    pub fn resolve(storage: &StorageArgs, serve: &ServeArgs) -> Result<Self, ConfigError> {
        let (storage, file) = StorageSettings::resolve(storage)?;
        let sim = SimSettings::resolve(&serve.sim, &file);
        let providers = ProviderSettings::resolve(&serve.providers, file.providers.as_ref());
        let smart_turn = SmartTurnSettings::resolve(&serve.smart_turn, &file, &storage.data_dir);
        let recordings = match (&serve.recordings_url, &file.recordings_url) {
            (Some(given), _) => given.clone(),
            (None, Some(text)) => text.parse()?,
            (None, None) => RecordingsLocation::in_data_dir(&storage.data_dir),
        }
        .with_aws_environment();
        Ok(Self {
            storage,
            listen: address("listen", serve.listen, file.listen, "127.0.0.1:8080")?,
            public_url: serve
                .public_url
                .clone()
                .or(file.public_url)
                .map(|u| u.trim_end_matches('/').to_string()),
            admin_listen: address(
                "admin_listen",
                serve.admin_listen,
                file.admin_listen,
                "127.0.0.1:9090",
            )?,
            log_json: serve.log_json || file.log_json.unwrap_or(false),
            no_bootstrap: serve.no_bootstrap || file.no_bootstrap.unwrap_or(false),
            janitor_interval: Duration::from_secs(file.janitor_interval_seconds.unwrap_or(60)),
            dormant_after: Duration::from_secs(
                u64::from(file.dormant_after_days.unwrap_or(7)) * 86_400,
            ),
            recording_retention: Duration::from_secs(
                serve
                    .recording_retention_days
                    .or(file.recording_retention_days.map(u64::from))
                    .unwrap_or(DEFAULT_RECORDING_RETENTION_DAYS)
                    .saturating_mul(86_400),
            ),
            recordings,
            sim,
            dispatch_interval: Duration::from_secs(1),
            webhook_allow_hosts: serve
                .webhook_allow_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            providers,
            ratings: RatingSettings::resolve(&serve.ratings),
            shutdown_grace: Duration::from_secs(
                serve
                    .shutdown_grace_seconds
                    .or(file.shutdown_grace_seconds)
                    .unwrap_or(DEFAULT_SHUTDOWN_GRACE_SECONDS),
            ),
            calling_hours: serve
                .calling_hours
                .or(file.calling_hours)
                .unwrap_or_else(CallingHours::workspace_default),
            node: NodeSettings {
                id: serve.node_id.clone().or(file.node_id),
                max_live_calls: serve.node_max_calls.or(file.node_max_calls),
                max_cpu_percent: serve.node_max_cpu_percent.or(file.node_max_cpu_percent),
                ..NodeSettings::default()
            },
            smart_turn,
            sip: crate::sip::settings::SipSettings::resolve(&serve.sip)?,
        })
    }

    /// Settings for tests: everything in `data_dir`, ephemeral ports.
    pub fn for_tests(data_dir: PathBuf, database_url: Option<String>) -> Self {
        let database_url = database_url
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("voxline.db").display()));
        let recordings = RecordingsLocation::in_data_dir(&data_dir);
        let smart_turn = SmartTurnSettings {
            model: default_smart_turn_model(&data_dir),
            runtime: data_dir.join("models").join(RUNTIME_FILE),
            pool: PoolSettings {
                workers: 1,
                queue: 8,
                max_batch: 4,
            },
        };
        // Tests run six at a time and a cluster test runs three nodes: at the
        // production 16 connections a node, two such tests beside the rest
        // exhausted Postgres's default 100 connections.
        let db_pool_size = default_pool_size(&database_url).min(6);
        Self {
            storage: StorageSettings {
                db_pool_size,
                database_url,
                data_dir,
                secret: Some("test-secret".into()),
            },
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            public_url: None,
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            log_json: false,
            no_bootstrap: true,
            janitor_interval: Duration::from_millis(100),
            dormant_after: Duration::from_secs(7 * 86_400),
            recording_retention: Duration::from_secs(DEFAULT_RECORDING_RETENTION_DAYS * 86_400),
            recordings,
            sim: SimSettings {
                ring_seconds: 1,
                answer_after_ms: 100,
                asr_latency_ms: 20,
                llm_first_token_ms: 20,
                llm_token_interval_ms: 2,
                tts_first_byte_ms: 20,
                callee_voice: CalleeVoiceKind::Synthetic,
            },
            dispatch_interval: Duration::from_millis(100),
            webhook_allow_hosts: vec!["127.0.0.1".into(), "localhost".into()],
            providers: ProviderSettings::default(),
            ratings: RatingSettings::default(),
            shutdown_grace: Duration::from_secs(DEFAULT_SHUTDOWN_GRACE_SECONDS),
            // Tests dial at whatever hour they run; those about calling hours set them.
            calling_hours: CallingHours::always(),
            node: NodeSettings::default(),
            smart_turn,
            sip: crate::sip::settings::SipSettings::for_tests(),
        }
    }
}

/// `err` naming the environment variable its bad value came from, when it
/// came from one: clap reports such a value as if it were the flag's
/// (clap-rs/clap#5202), which sends the reader looking for a flag nobody typed.
pub fn name_env_variable(err: clap::Error, cmd: &clap::Command) -> clap::Error {
    let argv: Vec<OsString> = std::env::args_os().collect();
    name_env_variable_in(err, cmd, &argv, |name| std::env::var_os(name))
}

/// [`name_env_variable`] with the command line and environment given.
fn name_env_variable_in(
    err: clap::Error,
    cmd: &clap::Command,
    argv: &[OsString],
    env: impl Fn(&OsStr) -> Option<OsString>,
) -> clap::Error {
    if !matches!(
        err.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return err;
    }
    let (Some(ContextValue::String(flag)), Some(ContextValue::String(value))) = (
        err.get(ContextKind::InvalidArg),
        err.get(ContextKind::InvalidValue),
    ) else {
        return err;
    };
    let Some(arg) = find_arg(cmd, flag) else {
        return err;
    };
    let Some(variable) = arg.get_env() else {
        return err;
    };
    let typed = arg.get_long().is_some_and(|long| {
        let exact = format!("--{long}");
        let with_value = format!("--{long}=");
        argv.iter()
            .filter_map(|a| a.to_str())
            .any(|a| a == exact || a.starts_with(&with_value))
    });
    if typed || env(variable).is_none_or(|v| v != value.as_str()) {
        return err;
    }
    let mut message = format!(
        "invalid value '{value}' in environment variable {} (read for '{flag}')",
        variable.to_string_lossy()
    );
    if let Some(reason) = std::error::Error::source(&err) {
        message.push_str(&format!(": {reason}"));
    }
    if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue) {
        message.push_str(&format!(" [possible values: {}]", valid.join(", ")));
    }
    message.push('\n');
    clap::Error::raw(err.kind(), message).with_cmd(cmd)
}

/// The argument clap printed as `shown` (e.g. `--db-pool-size <DB_POOL_SIZE>`),
/// in `cmd` or any of its subcommands, found by its long name.
fn find_arg<'a>(cmd: &'a clap::Command, shown: &str) -> Option<&'a Arg> {
    let long = shown
        .split([' ', '='])
        .next()
        .and_then(|flag| flag.strip_prefix("--"))?;
    cmd.get_arguments()
        .find(|arg| arg.get_long() == Some(long))
        .or_else(|| cmd.get_subcommands().find_map(|sub| find_arg(sub, shown)))
}

/// What the sim callee sounds like (`VOXLINE_SIM_CALLEE_VOICE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CalleeVoiceKind {
    /// Speech-like sound whose words the sim ASR reads from the script: the default, and
    /// what load tests run on.
    #[default]
    Synthetic,
    /// Real speech from the Piper server (`VOXLINE_PIPER_BASE_URL`).
    Piper,
    /// Real speech from espeak-ng.
    Espeak,
    /// Piper when its server answers at start-up, else espeak-ng.
    Speech,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    /// The shape of the binary's command line.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        storage: StorageArgs,
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        Serve(ServeArgs),
    }

    /// Clap's error for `flag value`, then as if `variable=value` had given it.
    fn from_variable(flag: &str, variable: &str, value: &str, typed: bool) -> String {
        let cmd = Cli::command();
        let err = cmd
            .clone()
            .try_get_matches_from(["voxline", "serve", flag, value])
            .unwrap_err();
        let argv: Vec<OsString> = if typed {
            ["voxline", "serve", flag, value]
                .map(OsString::from)
                .to_vec()
        } else {
            ["voxline", "serve"].map(OsString::from).to_vec()
        };
        name_env_variable_in(err, &cmd, &argv, |name| {
            (name == variable).then(|| OsString::from(value))
        })
        .to_string()
    }

    #[test]
    fn bad_values_from_the_environment_name_the_variable() {
        for (flag, variable, value) in [
            ("--db-pool-size", "VOXLINE_DB_POOL", "abc"),
            ("--listen", "VOXLINE_LISTEN", "nowhere"),
            ("--sim-ring-seconds", "VOXLINE_SIM_RING_SECONDS", "3s"),
            (
                "--recording-retention-days",
                "VOXLINE_RECORDING_RETENTION_DAYS",
                "x",
            ),
            (
                "--rating-webhook-wait-seconds",
                "VOXLINE_RATING_WEBHOOK_WAIT_SECONDS",
                "1m",
            ),
            ("--provider-retries", "VOXLINE_PROVIDER_RETRIES", "many"),
            (
                "--shutdown-grace-seconds",
                "VOXLINE_SHUTDOWN_GRACE_SECONDS",
                "30s",
            ),
            ("--platform-fee-paise", "VOXLINE_PLATFORM_FEE_PAISE", "1.5"),
            ("--recordings-url", "VOXLINE_RECORDINGS_URL", "ftp://calls"),
        ] {
            let message = from_variable(flag, variable, value, false);
            assert!(message.contains(variable), "{flag}: {message}");
            assert!(message.contains(value), "{flag}: {message}");
            let typed = from_variable(flag, variable, value, true);
            assert!(!typed.contains(variable), "{flag} was typed: {typed}");
        }
    }

    #[test]
    fn flags_override_file_and_defaults_apply() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("voxline.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:7000\"\nadmin_listen = \"127.0.0.1:7001\"\n",
        )
        .unwrap();
        let storage = StorageArgs {
            config: Some(file),
            data_dir: Some(dir.path().to_path_buf()),
            ..StorageArgs::default()
        };
        let serve = ServeArgs {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 7100))),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(&storage, &serve).unwrap();
        assert_eq!(s.listen.port(), 7100);
        assert_eq!(s.admin_listen.port(), 7001);
        assert!(s.storage.database_url.starts_with("sqlite://"));
        let secret = s.storage.load_secret().unwrap();
        assert_eq!(secret, s.storage.load_secret().unwrap());
    }

    #[test]
    fn recordings_go_to_the_data_dir_unless_a_url_says_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let storage = StorageArgs {
            data_dir: Some(dir.path().to_path_buf()),
            ..StorageArgs::default()
        };
        let s = Settings::resolve(&storage, &ServeArgs::default()).unwrap();
        assert_eq!(
            s.recordings,
            RecordingsLocation::Local(dir.path().join("recordings"))
        );

        let file = dir.path().join("voxline.toml");
        std::fs::write(&file, "recordings_url = \"file:///srv/recordings\"\n").unwrap();
        let storage = StorageArgs {
            config: Some(file.clone()),
            ..storage
        };
        let s = Settings::resolve(&storage, &ServeArgs::default()).unwrap();
        assert_eq!(
            s.recordings,
            RecordingsLocation::Local(PathBuf::from("/srv/recordings"))
        );
        let serve = ServeArgs {
            recordings_url: Some("s3://calls/prod".parse().unwrap()),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(&storage, &serve).unwrap();
        assert!(
            s.recordings.to_string() == "s3://calls/prod",
            "{:?}",
            s.recordings
        );

        std::fs::write(&file, "recordings_url = \"calls\"\n").unwrap();
        let err = Settings::resolve(&storage, &ServeArgs::default()).unwrap_err();
        assert!(matches!(err, ConfigError::RecordingsUrl(_)), "{err}");
        assert!(err.to_string().contains("\"calls\""), "{err}");
    }

    #[test]
    fn the_smart_turn_model_is_looked_for_in_the_data_dir_unless_a_setting_says_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let storage = StorageArgs {
            data_dir: Some(dir.path().to_path_buf()),
            ..StorageArgs::default()
        };
        let s = Settings::resolve(&storage, &ServeArgs::default()).unwrap();
        assert_eq!(
            s.smart_turn.model,
            dir.path().join("models/smart-turn-v3.2-cpu.onnx")
        );
        assert_eq!(
            s.smart_turn.runtime,
            dir.path().join("models/libonnxruntime.so.1.24.3")
        );
        assert!(s.smart_turn.pool.workers >= 1);
        assert_eq!(s.smart_turn.pool.queue, 8 * s.smart_turn.pool.workers);

        let file = dir.path().join("voxline.toml");
        std::fs::write(
            &file,
            "smart_turn_model = \"/srv/models/st.onnx\"\nsmart_turn_workers = 2\nsmart_turn_queue = 5\n",
        )
        .unwrap();
        let storage = StorageArgs {
            config: Some(file),
            ..storage
        };
        let s = Settings::resolve(&storage, &ServeArgs::default()).unwrap();
        assert_eq!(s.smart_turn.model, PathBuf::from("/srv/models/st.onnx"));
        assert_eq!(
            s.smart_turn.runtime,
            PathBuf::from("/srv/models/libonnxruntime.so.1.24.3")
        );
        assert_eq!(
            s.smart_turn.pool,
            PoolSettings {
                workers: 2,
                queue: 5,
                max_batch: 4
            }
        );
        let serve = ServeArgs {
            smart_turn: SmartTurnArgs {
                model: Some(PathBuf::from("/opt/st.onnx")),
                max_batch: Some(8),
                ..SmartTurnArgs::default()
            },
            ..ServeArgs::default()
        };
        let s = Settings::resolve(&storage, &serve).unwrap();
        assert_eq!(s.smart_turn.model, PathBuf::from("/opt/st.onnx"));
        assert_eq!(s.smart_turn.pool.max_batch, 8);
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "lisen = \"x\"\n").unwrap();
        let storage = StorageArgs {
            config: Some(file),
            ..StorageArgs::default()
        };
        assert!(matches!(
            StorageSettings::resolve(&storage),
            Err(ConfigError::Parse { .. })
        ));
    }
}

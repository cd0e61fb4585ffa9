//! The options of `voxline loadgen`: the run's size and bound, the server it
//! goes against, how calls are placed, the sweep and its targets, and the
//! sim providers' timings.

use super::fleet::PlaceMode;
use crate::calls::sim_callee::CalleeVoiceKind;
use crate::config::SmartTurnArgs;
use crate::providers::settings::ProviderArgs;

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
    /// Several (comma-separated or repeated): nodes sharing one database, given calls in
    /// turn; the summary counts the calls placed on each.
    #[arg(long, value_delimiter = ',')]
    pub target: Vec<String>,
    /// API key for --target.
    #[arg(long, env = "VOXLINE_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Agent to place calls with (default: one is created).
    #[arg(long)]
    pub agent: Option<String>,
    /// PID of the --target server (the first, with several), to sample its CPU and RSS from /proc.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The carrier the calls go over: `sim` (the sim carrier, callees on Twilio Media Streams
    /// websockets) or `sip` (real SIP calls with RTP to a fleet on the workspace's SIP trunk;
    /// in-process server, outbound modes only).
    #[arg(long, value_enum, default_value_t = LoadCarrier::Sim)]
    pub carrier: LoadCarrier,
    /// Who answers the calls. `sim-carrier`: the server's own sim carrier (with --target its
    /// callees run inside the server, so the server's /proc figures include them; in-process
    /// they run on the load generator's fleet threads). `twilio`: the load generator acts as
    /// Twilio: it serves a Twilio-compatible REST API on 127.0.0.1, puts a `twilio` credential
    /// pointing at it and a Twilio caller number on the load workspace, and plays each dialed
    /// callee over the media websocket the server's TwiML names, so a --target server runs
    /// only the agent side. With --target it signs in to the console (--console-email,
    /// --console-password) to store the credential; outbound modes only, not --carrier sip.
    #[arg(long, value_enum, default_value_t = LoadFleet::SimCarrier)]
    pub fleet: LoadFleet,
    /// A console admin's sign-in address on the --target server (--fleet twilio stores the
    /// load workspace's `twilio` credential and caller number through the console).
    #[arg(long, env = "VOXLINE_CONSOLE_EMAIL")]
    pub console_email: Option<String>,
    /// That admin's password.
    #[arg(long, env = "VOXLINE_CONSOLE_PASSWORD", hide_env_values = true)]
    pub console_password: Option<String>,
    /// The Twilio caller number --fleet twilio rents on the load workspace when it has no
    /// Twilio number yet.
    #[arg(long, default_value = "+918035740102")]
    pub twilio_number: String,
    /// How calls are placed.
    #[arg(long, value_enum, default_value_t = PlaceMode::TestCall)]
    pub mode: PlaceMode,
    /// Every call is a caller ringing the load number (`--mode inbound`): the signed
    /// inbound webhook, then the media stream, as Twilio delivers a call.
    #[arg(long, conflicts_with = "mode")]
    pub inbound: bool,
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
    /// Finished calls with a pending post-call analysis to seed before the run (in-process
    /// server only): the worker drains them with the sim LLM while the live calls run, and the
    /// summary reports how fast.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub analysis_backlog: u64,
    /// Seed the --analysis-backlog but keep it from the analysis worker for the whole run:
    /// the control run, with the same data in the workspace and no analysis.
    #[arg(long, requires = "analysis_backlog")]
    pub hold_analysis_backlog: bool,
    /// Give the load agent a `function` tool served by a loopback server that answers after
    /// this many ms, and a script line that calls it (0: no tool). Without --script the default
    /// script gains the line; a --script must have one ("What is the status of my order
    /// A-1234?") for the tool to be called. The summary reports the tool's calls.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub tool_latency_ms: u64,
    /// Worker threads of the callee fleet (in-process, or --fleet twilio's). Two, so a thousand
    /// callees sending 50 frames a second each are not queued behind one another on one thread.
    #[arg(long, default_value_t = 2)]
    pub fleet_threads: usize,
    /// What the callees sound like: `synthetic` (read by the sim ASR), or real speech from
    /// `piper`, `espeak` or `speech` (Piper if its server answers, else espeak-ng) for an agent
    /// on a real ASR (see --agent-body).
    #[arg(long, value_enum, default_value_t = CalleeVoiceKind::Synthetic)]
    pub callee_voice: CalleeVoiceKind,
    /// The load agent's create body (JSON) instead of the default sim agent: e.g. an agent on
    /// local models (`asrProvider` `whisper`, `llmProvider` `openai`, `ttsProvider` `piper`).
    #[arg(long)]
    pub agent_body: Option<String>,
    /// Provider settings of the in-process server (the same flags and variables as `serve`).
    #[command(flatten)]
    pub providers: ProviderArgs,
    /// Analysis and rating requests in flight at once per LLM endpoint in the in-process
    /// server, as `serve`'s flag (`scripts/local-models.sh` sets 1 for its one post-call slot).
    #[arg(long, env = "VOXLINE_POSTCALL_LLM_CONCURRENCY", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub postcall_llm_concurrency: Option<u32>,
    /// The in-process server's end-of-turn model (the same flags and variables as `serve`;
    /// unset, it looks in the run's temporary data directory and finds none).
    #[command(flatten)]
    pub smart_turn: SmartTurnArgs,
}

/// Who answers a load run's calls (`--fleet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadFleet {
    /// The server's own sim carrier answers (in a --target server's process, or on the
    /// in-process server's fleet threads).
    SimCarrier,
    /// The load generator is Twilio: REST API, signed status callbacks, media websockets.
    Twilio,
}

impl LoadFleet {
    /// The fleet's name in the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SimCarrier => "sim-carrier",
            Self::Twilio => "twilio",
        }
    }
}

/// The carrier a load run's calls go over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadCarrier {
    /// The sim carrier: the fleet's callees join over Twilio Media Streams websockets.
    Sim,
    /// SIP: the fleet is the workspace's SIP trunk and answers INVITEs, audio on RTP.
    Sip,
}

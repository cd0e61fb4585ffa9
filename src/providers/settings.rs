//! Platform (bundled) provider keys, base URLs, timeouts and the platform fee,
//! from the `[providers]` table of the config file and the flags or their
//! environment variables (which win, as everywhere in decisions §1).

use clap::Args;
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// Default OpenAI-compatible base URL (everything up to and including `/v1`).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Default Deepgram base URL for live transcription.
pub const DEEPGRAM_BASE_URL: &str = "wss://api.deepgram.com/v1";
/// Default ElevenLabs base URL.
pub const ELEVENLABS_BASE_URL: &str = "https://api.elevenlabs.io";
/// Default address of a local Whisper server (`scripts/local-models.sh` starts one there).
pub const WHISPER_BASE_URL: &str = "http://127.0.0.1:8102/v1";
/// Default address of a local Piper server (`scripts/local-models.sh` starts one there).
pub const PIPER_BASE_URL: &str = "http://127.0.0.1:8103";
/// Default per-minute platform fee (paise) billed when a workspace brings its own keys.
pub const DEFAULT_PLATFORM_FEE_PAISE: i64 = 100;

/// One vendor's key and address. `Debug` never prints the key.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct VendorAccount {
    /// The API key, when one is configured.
    pub api_key: Option<String>,
    /// Base URL without a trailing slash.
    pub base_url: String,
}

impl fmt::Debug for VendorAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VendorAccount")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("base_url", &self.base_url)
            .finish()
    }
}

/// Models used when the agent does not name one (TTS and ASR have no agent field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiModels {
    /// `/audio/speech` model.
    pub tts: String,
    /// `/audio/transcriptions` model.
    pub asr: String,
    /// Model for generate and prompt-assist.
    pub text: String,
}

impl Default for OpenAiModels {
    fn default() -> Self {
        Self {
            tts: "gpt-4o-mini-tts".into(),
            asr: "whisper-1".into(),
            text: "gpt-4o-mini".into(),
        }
    }
}

/// Every provider setting, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSettings {
    /// The platform's OpenAI-compatible account (LLM, speech, transcription).
    pub openai: VendorAccount,
    /// OpenAI-compatible model defaults.
    pub openai_models: OpenAiModels,
    /// The platform's Deepgram account.
    pub deepgram: VendorAccount,
    /// Deepgram model.
    pub deepgram_model: String,
    /// The platform's ElevenLabs account.
    pub elevenlabs: VendorAccount,
    /// ElevenLabs model.
    pub elevenlabs_model: String,
    /// The espeak-ng program (a name on PATH or a path).
    pub espeak_program: String,
    /// A local Whisper server (faster-whisper-server), keyless unless one is set.
    pub whisper: VendorAccount,
    /// The model the Whisper server loads (a local path when offline).
    pub whisper_model: String,
    /// A local Piper server.
    pub piper: VendorAccount,
    /// The Piper voice asked for when an agent names none (blank: the server's own).
    pub piper_voice: String,
    /// Time allowed to connect to a vendor.
    pub connect_timeout: Duration,
    /// Longest silence allowed between two pieces of a vendor's answer.
    pub read_timeout: Duration,
    /// Extra attempts for a request that failed before anything was spoken.
    pub retries: u32,
    /// First backoff between attempts; doubles each time.
    pub retry_backoff: Duration,
    /// Consecutive failures that open a provider's circuit for a workspace.
    pub breaker_threshold: u32,
    /// How long an open circuit refuses requests before one trial.
    pub breaker_cooldown: Duration,
    /// Per-minute rate (paise) of calls whose providers all run on the workspace's own keys.
    pub platform_fee_paise: i64,
    /// LLM for generate and prompt-assist: `sim` or `openai`.
    pub text_llm: String,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            openai: VendorAccount {
                api_key: None,
                base_url: OPENAI_BASE_URL.into(),
            },
            openai_models: OpenAiModels::default(),
            deepgram: VendorAccount {
                api_key: None,
                base_url: DEEPGRAM_BASE_URL.into(),
            },
            deepgram_model: "nova-2".into(),
            elevenlabs: VendorAccount {
                api_key: None,
                base_url: ELEVENLABS_BASE_URL.into(),
            },
            elevenlabs_model: "eleven_flash_v2_5".into(),
            espeak_program: "espeak-ng".into(),
            whisper: VendorAccount {
                api_key: None,
                base_url: WHISPER_BASE_URL.into(),
            },
            whisper_model: "tiny.en".into(),
            piper: VendorAccount {
                api_key: None,
                base_url: PIPER_BASE_URL.into(),
            },
            piper_voice: String::new(),
            connect_timeout: Duration::from_secs(3),
            read_timeout: Duration::from_secs(10),
            retries: 2,
            retry_backoff: Duration::from_millis(200),
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(30),
            platform_fee_paise: DEFAULT_PLATFORM_FEE_PAISE,
            text_llm: "sim".into(),
        }
    }
}

/// One vendor's table in the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorFile {
    /// API key.
    pub api_key: Option<String>,
    /// Base URL.
    pub base_url: Option<String>,
    /// Default model (LLM text model for openai, the recognizer or voice model otherwise).
    pub model: Option<String>,
    /// OpenAI only: the speech model.
    pub tts_model: Option<String>,
    /// OpenAI only: the transcription model.
    pub asr_model: Option<String>,
}

/// The `[providers]` table of the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvidersFile {
    /// `[providers.openai]`.
    pub openai: Option<VendorFile>,
    /// `[providers.deepgram]`.
    pub deepgram: Option<VendorFile>,
    /// `[providers.elevenlabs]`.
    pub elevenlabs: Option<VendorFile>,
    /// `[providers.whisper]`: a local Whisper server (`model` is its model).
    pub whisper: Option<VendorFile>,
    /// `[providers.piper]`: a local Piper server (`model` is its default voice).
    pub piper: Option<VendorFile>,
    /// The espeak-ng program.
    pub espeak_program: Option<String>,
    /// See [`ProviderSettings::connect_timeout`].
    pub connect_timeout_ms: Option<u64>,
    /// See [`ProviderSettings::read_timeout`].
    pub read_timeout_ms: Option<u64>,
    /// See [`ProviderSettings::retries`].
    pub retries: Option<u32>,
    /// See [`ProviderSettings::breaker_threshold`].
    pub breaker_threshold: Option<u32>,
    /// See [`ProviderSettings::breaker_cooldown`].
    pub breaker_cooldown_seconds: Option<u64>,
    /// See [`ProviderSettings::platform_fee_paise`].
    pub platform_fee_paise: Option<i64>,
    /// See [`ProviderSettings::text_llm`].
    pub text_llm: Option<String>,
}

/// Flags (and their variables) for the platform's providers; each overrides
/// its `[providers]` key in the config file. A blank key, address or model
/// counts as unset.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Providers")]
pub struct ProviderArgs {
    /// The platform's OpenAI-compatible API key.
    #[arg(long, env = "VOXLINE_OPENAI_API_KEY", hide_env_values = true)]
    pub openai_api_key: Option<String>,
    /// OpenAI-compatible base URL, up to and including `/v1`.
    #[arg(long, env = "VOXLINE_OPENAI_BASE_URL")]
    pub openai_base_url: Option<String>,
    /// OpenAI-compatible speech model.
    #[arg(long, env = "VOXLINE_OPENAI_TTS_MODEL")]
    pub openai_tts_model: Option<String>,
    /// OpenAI-compatible transcription model.
    #[arg(long, env = "VOXLINE_OPENAI_ASR_MODEL")]
    pub openai_asr_model: Option<String>,
    /// OpenAI-compatible model for generate and prompt-assist.
    #[arg(long, env = "VOXLINE_OPENAI_TEXT_MODEL")]
    pub openai_text_model: Option<String>,
    /// The platform's Deepgram API key.
    #[arg(long, env = "VOXLINE_DEEPGRAM_API_KEY", hide_env_values = true)]
    pub deepgram_api_key: Option<String>,
    /// Deepgram base URL.
    #[arg(long, env = "VOXLINE_DEEPGRAM_BASE_URL")]
    pub deepgram_base_url: Option<String>,
    /// Deepgram model.
    #[arg(long, env = "VOXLINE_DEEPGRAM_MODEL")]
    pub deepgram_model: Option<String>,
    /// The platform's ElevenLabs API key.
    #[arg(long, env = "VOXLINE_ELEVENLABS_API_KEY", hide_env_values = true)]
    pub elevenlabs_api_key: Option<String>,
    /// ElevenLabs base URL.
    #[arg(long, env = "VOXLINE_ELEVENLABS_BASE_URL")]
    pub elevenlabs_base_url: Option<String>,
    /// ElevenLabs model.
    #[arg(long, env = "VOXLINE_ELEVENLABS_MODEL")]
    pub elevenlabs_model: Option<String>,
    /// The espeak-ng program (a name on PATH or a path).
    #[arg(long, env = "VOXLINE_ESPEAK_PROGRAM")]
    pub espeak_program: Option<String>,
    /// A local Whisper server's base URL, up to and including `/v1`.
    #[arg(long, env = "VOXLINE_WHISPER_BASE_URL")]
    pub whisper_base_url: Option<String>,
    /// The model the Whisper server loads (its `model_name`; a local path offline).
    #[arg(long, env = "VOXLINE_WHISPER_MODEL")]
    pub whisper_model: Option<String>,
    /// A local Piper server's base URL.
    #[arg(long, env = "VOXLINE_PIPER_BASE_URL")]
    pub piper_base_url: Option<String>,
    /// The Piper voice used when an agent names none.
    #[arg(long, env = "VOXLINE_PIPER_VOICE")]
    pub piper_voice: Option<String>,
    /// Milliseconds allowed to connect to a vendor.
    #[arg(long, env = "VOXLINE_PROVIDER_CONNECT_TIMEOUT_MS")]
    pub provider_connect_timeout_ms: Option<u64>,
    /// Longest silence (ms) allowed between two pieces of a vendor's answer.
    #[arg(long, env = "VOXLINE_PROVIDER_READ_TIMEOUT_MS")]
    pub provider_read_timeout_ms: Option<u64>,
    /// Extra attempts for a request that failed before anything was spoken (at most 5).
    #[arg(long, env = "VOXLINE_PROVIDER_RETRIES")]
    pub provider_retries: Option<u32>,
    /// Per-minute platform fee (paise) of calls on the workspace's own keys.
    #[arg(
        long,
        env = "VOXLINE_PLATFORM_FEE_PAISE",
        allow_negative_numbers = true
    )]
    pub platform_fee_paise: Option<i64>,
    /// LLM for generate and prompt-assist: `sim` or `openai`.
    #[arg(long, env = "VOXLINE_TEXT_LLM")]
    pub text_llm: Option<String>,
}

/// A text setting unless blank: `VAR=` in a compose file means unset.
fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}

fn trimmed_url(url: String) -> String {
    url.trim_end_matches('/').to_string()
}

fn account(
    api_key: &Option<String>,
    base_url: &Option<String>,
    file: Option<&VendorFile>,
    default_url: &str,
) -> VendorAccount {
    VendorAccount {
        api_key: given(api_key).or_else(|| file.and_then(|f| f.api_key.clone())),
        base_url: trimmed_url(
            given(base_url)
                .or_else(|| file.and_then(|f| f.base_url.clone()))
                .unwrap_or_else(|| default_url.to_string()),
        ),
    }
}

impl ProviderSettings {
    /// Merges the flags (and variables) over the file over the defaults.
    pub fn resolve(args: &ProviderArgs, file: Option<&ProvidersFile>) -> Self {
        let d = Self::default();
        let empty = ProvidersFile::default();
        let file = file.unwrap_or(&empty);
        let openai_file = file.openai.as_ref();
        let models = OpenAiModels {
            tts: given(&args.openai_tts_model)
                .or_else(|| openai_file.and_then(|f| f.tts_model.clone()))
                .unwrap_or(d.openai_models.tts),
            asr: given(&args.openai_asr_model)
                .or_else(|| openai_file.and_then(|f| f.asr_model.clone()))
                .unwrap_or(d.openai_models.asr),
            text: given(&args.openai_text_model)
                .or_else(|| openai_file.and_then(|f| f.model.clone()))
                .unwrap_or(d.openai_models.text),
        };
        Self {
            openai: account(
                &args.openai_api_key,
                &args.openai_base_url,
                openai_file,
                OPENAI_BASE_URL,
            ),
            openai_models: models,
            deepgram: account(
                &args.deepgram_api_key,
                &args.deepgram_base_url,
                file.deepgram.as_ref(),
                DEEPGRAM_BASE_URL,
            ),
            deepgram_model: given(&args.deepgram_model)
                .or_else(|| file.deepgram.as_ref().and_then(|f| f.model.clone()))
                .unwrap_or(d.deepgram_model),
            elevenlabs: account(
                &args.elevenlabs_api_key,
                &args.elevenlabs_base_url,
                file.elevenlabs.as_ref(),
                ELEVENLABS_BASE_URL,
            ),
            elevenlabs_model: given(&args.elevenlabs_model)
                .or_else(|| file.elevenlabs.as_ref().and_then(|f| f.model.clone()))
                .unwrap_or(d.elevenlabs_model),
            espeak_program: given(&args.espeak_program)
                .or_else(|| file.espeak_program.clone())
                .unwrap_or(d.espeak_program),
            whisper: account(
                &None,
                &args.whisper_base_url,
                file.whisper.as_ref(),
                WHISPER_BASE_URL,
            ),
            whisper_model: given(&args.whisper_model)
                .or_else(|| file.whisper.as_ref().and_then(|f| f.model.clone()))
                .unwrap_or(d.whisper_model),
            piper: account(
                &None,
                &args.piper_base_url,
                file.piper.as_ref(),
                PIPER_BASE_URL,
            ),
            piper_voice: given(&args.piper_voice)
                .or_else(|| file.piper.as_ref().and_then(|f| f.model.clone()))
                .unwrap_or(d.piper_voice),
            connect_timeout: args
                .provider_connect_timeout_ms
                .or(file.connect_timeout_ms)
                .map_or(d.connect_timeout, Duration::from_millis),
            read_timeout: args
                .provider_read_timeout_ms
                .or(file.read_timeout_ms)
                .map_or(d.read_timeout, Duration::from_millis),
            retries: args
                .provider_retries
                .or(file.retries)
                .unwrap_or(d.retries)
                .min(5),
            retry_backoff: d.retry_backoff,
            breaker_threshold: file.breaker_threshold.unwrap_or(d.breaker_threshold).max(1),
            breaker_cooldown: file
                .breaker_cooldown_seconds
                .map_or(d.breaker_cooldown, Duration::from_secs),
            platform_fee_paise: args
                .platform_fee_paise
                .or(file.platform_fee_paise)
                .unwrap_or(d.platform_fee_paise)
                .max(0),
            text_llm: given(&args.text_llm)
                .or_else(|| file.text_llm.clone())
                .unwrap_or(d.text_llm),
        }
    }
}

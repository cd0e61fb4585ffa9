//! Chooses each call's ASR, LLM and TTS clients from the agent
//! (`asrProvider`, `llmProvider`/`llmModel`, `ttsProvider`/`voice`), with the
//! workspace's own credential when it has one for the vendor, else the
//! platform's bundled key and base URL from the config.
//!
//! A call is billed at the platform fee only (decisions §5) when every paid
//! vendor it uses runs on the workspace's own credential; the sim providers
//! and the local espeak-ng cost the platform nothing and do not count.

use super::HttpPolicy;
use super::deepgram::DeepgramAsr;
use super::elevenlabs::ElevenLabsTts;
use super::espeak::{self, EspeakTts};
use super::openai_asr::{OpenAiAsr, TranscriptionForm};
use super::openai_llm::OpenAiLlm;
use super::openai_tts::OpenAiTts;
use super::piper::PiperTts;
use super::resilience::{Breakers, CircuitBreaker, GuardedAsr, GuardedLlm, GuardedTts};
use super::settings::{OPENAI_BASE_URL, ProviderSettings, VendorAccount};
use crate::domain::agent::{AgentSpec, AsrVendor, LlmVendor, TtsVendor};
use crate::domain::{CallId, OrgId, Paise};
use crate::secrets::credentials::{CredentialCipher, CredentialKind};
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::Arc;
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::providers::{
    AsrProvider, LlmEvent, LlmProvider, LlmRequest, LlmStream, LlmUsage, ProviderError,
    ProviderKind, Providers, TtsProvider,
};
use voxline_actors::sim::providers::{SimAsr, SimConfig, SimLlm, SimTts};

/// Why a call's providers could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The vendor cannot be used: no key, an unreadable credential, a missing program.
    #[error("{kind} provider {vendor} is unavailable: {reason}")]
    Unavailable {
        /// Which provider.
        kind: ProviderKind,
        /// The vendor asked for.
        vendor: String,
        /// Why.
        reason: String,
    },
    /// Reading the workspace's credential failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SelectError {
    /// The provider kind at fault, if a provider (not storage) failed.
    pub fn provider(&self) -> Option<ProviderKind> {
        match self {
            Self::Unavailable { kind, .. } => Some(*kind),
            Self::Store(_) => None,
        }
    }
}

/// A vendor key and address resolved for one workspace.
#[derive(Clone)]
struct ResolvedAccount {
    api_key: Option<String>,
    base_url: String,
    /// The workspace's own credential, not the platform's.
    own: bool,
}

/// Adds up the LLM usage of one call's turns.
#[derive(Debug, Clone, Default)]
pub struct UsageMeter(Arc<Mutex<LlmUsage>>);

impl UsageMeter {
    /// The totals so far.
    pub fn total(&self) -> LlmUsage {
        *self.0.lock()
    }

    fn add(&self, usage: LlmUsage) {
        let mut total = self.0.lock();
        total.prompt_tokens = total.prompt_tokens.saturating_add(usage.prompt_tokens);
        total.completion_tokens = total
            .completion_tokens
            .saturating_add(usage.completion_tokens);
    }
}

/// An LLM whose `Done` usage is added to a [`UsageMeter`].
struct MeteredLlm {
    inner: Arc<dyn LlmProvider>,
    meter: UsageMeter,
}

#[async_trait]
impl LlmProvider for MeteredLlm {
    async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        Ok(Box::new(MeteredStream {
            inner: self.inner.stream(request).await?,
            meter: self.meter.clone(),
        }))
    }
}

struct MeteredStream {
    inner: Box<dyn LlmStream>,
    meter: UsageMeter,
}

#[async_trait]
impl LlmStream for MeteredStream {
    async fn next_event(&mut self) -> Option<Result<LlmEvent, ProviderError>> {
        let event = self.inner.next_event().await;
        if let Some(Ok(LlmEvent::Done { usage })) = &event {
            self.meter.add(*usage);
        }
        event
    }
}

/// What one call runs on.
pub struct CallProviders {
    /// The three clients.
    pub providers: Providers,
    /// Every paid vendor runs on the workspace's own credential.
    pub own_credentials: bool,
    /// The call's LLM token counts.
    pub usage: UsageMeter,
    /// `asr/llm/tts` vendor names, for logs.
    pub summary: String,
}

/// An LLM chosen for a workspace.
pub struct ChosenLlm {
    /// The client.
    pub llm: Arc<dyn LlmProvider>,
    /// It runs on the workspace's own credential.
    pub own: bool,
    /// Where its requests go (`sim`, or the base URL): post-call work shares
    /// one concurrency limit per endpoint.
    pub endpoint: String,
}

/// Builds provider clients for workspaces.
pub struct ProviderSelector {
    store: Store,
    settings: ProviderSettings,
    cipher: Option<CredentialCipher>,
    http: reqwest::Client,
    policy: HttpPolicy,
    breakers: Breakers,
    espeak_installed: tokio::sync::OnceCell<bool>,
}

impl ProviderSelector {
    /// A selector reading credentials from `store`, opened with the server
    /// `secret`, guarding vendors with the server's `breakers`.
    pub fn new(
        store: Store,
        settings: &ProviderSettings,
        secret: Option<&[u8]>,
        breakers: Breakers,
    ) -> Self {
        let policy = HttpPolicy::from_settings(settings);
        Self {
            store,
            settings: settings.clone(),
            cipher: secret.map(CredentialCipher::new),
            http: policy.client(),
            policy,
            breakers,
            espeak_installed: tokio::sync::OnceCell::new(),
        }
    }

    /// The provider settings in use.
    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    fn breaker(&self, vendor: &str, org_id: OrgId, kind: ProviderKind) -> CircuitBreaker {
        self.breakers.breaker(
            vendor,
            &org_id.to_string(),
            kind,
            self.settings.breaker_threshold,
            self.settings.breaker_cooldown,
        )
    }

    /// The workspace's credential of `credential_kind`, else the platform account.
    async fn account(
        &self,
        org_id: OrgId,
        kind: ProviderKind,
        credential_kind: CredentialKind,
        platform: &VendorAccount,
    ) -> Result<ResolvedAccount, SelectError> {
        let unavailable = |reason: String| SelectError::Unavailable {
            kind,
            vendor: credential_kind.to_string(),
            reason,
        };
        if let Some((nonce, sealed)) = self
            .store
            .credential(org_id, credential_kind.as_str())
            .await?
        {
            let cipher = self
                .cipher
                .as_ref()
                .ok_or_else(|| unavailable("the server secret is not loaded".into()))?;
            let plain = cipher.open(&nonce, &sealed).map_err(|_| {
                unavailable("the workspace credential does not open with this server secret".into())
            })?;
            let value: Value = serde_json::from_slice(&plain)
                .map_err(|_| unavailable("the workspace credential is not JSON".into()))?;
            let own_base_url = value
                .get("baseUrl")
                .and_then(Value::as_str)
                .filter(|u| !u.is_empty());
            let api_key = value
                .get("apiKey")
                .and_then(Value::as_str)
                .filter(|k| !k.is_empty());
            // A server of one's own may take no key (credentials allow that only with a
            // baseUrl that is not the vendor's).
            if api_key.is_none() && own_base_url.is_none() {
                return Err(unavailable("the workspace credential has no apiKey".into()));
            }
            let base_url = own_base_url.map_or_else(
                || platform.base_url.clone(),
                |u| u.trim_end_matches('/').to_string(),
            );
            return Ok(ResolvedAccount {
                api_key: api_key.map(str::to_string),
                base_url,
                own: true,
            });
        }
        Ok(ResolvedAccount {
            api_key: platform.api_key.clone(),
            base_url: platform.base_url.clone(),
            own: false,
        })
    }

    /// The OpenAI-compatible account; a key is needed only at OpenAI itself
    /// (local servers take none).
    async fn openai_account(
        &self,
        org_id: OrgId,
        kind: ProviderKind,
    ) -> Result<ResolvedAccount, SelectError> {
        let account = self
            .account(org_id, kind, CredentialKind::OpenAi, &self.settings.openai)
            .await?;
        if account.api_key.is_none() && account.base_url == OPENAI_BASE_URL {
            return Err(SelectError::Unavailable {
                kind,
                vendor: "openai".into(),
                reason: "no API key: set VOXLINE_OPENAI_API_KEY, or an openai workspace credential"
                    .into(),
            });
        }
        Ok(account)
    }

    /// The LLM `provider`/`model` for a workspace (chat, generate, calls).
    pub async fn llm(
        &self,
        org_id: OrgId,
        provider: LlmVendor,
        model: &str,
        sim: &SimConfig,
    ) -> Result<ChosenLlm, SelectError> {
        match provider {
            LlmVendor::Sim => Ok(ChosenLlm {
                llm: Arc::new(SimLlm::new(sim.clone())),
                own: false,
                endpoint: "sim".to_owned(),
            }),
            LlmVendor::OpenAi => {
                let account = self.openai_account(org_id, ProviderKind::Llm).await?;
                let client = OpenAiLlm::new(
                    self.http.clone(),
                    &account.base_url,
                    account.api_key,
                    model,
                    self.policy,
                );
                let endpoint = account.base_url.clone();
                Ok(ChosenLlm {
                    llm: Arc::new(GuardedLlm {
                        inner: Arc::new(client),
                        breaker: self.breaker("openai-llm", org_id, ProviderKind::Llm),
                    }),
                    own: account.own,
                    endpoint,
                })
            }
        }
    }

    /// Returns (client, paid vendor, own credential).
    async fn asr(
        &self,
        org_id: OrgId,
        spec: &AgentSpec,
        sim: &SimConfig,
    ) -> Result<(Arc<dyn AsrProvider>, Option<bool>), SelectError> {
        let kind = ProviderKind::Asr;
        match spec.asr_provider {
            AsrVendor::Sim => Ok((Arc::new(SimAsr::new(sim.clone())), None)),
            AsrVendor::Deepgram => {
                let account = self
                    .account(
                        org_id,
                        kind,
                        CredentialKind::Deepgram,
                        &self.settings.deepgram,
                    )
                    .await?;
                let api_key = account.api_key.ok_or_else(|| SelectError::Unavailable {
                    kind,
                    vendor: "deepgram".into(),
                    reason: "no API key: set VOXLINE_DEEPGRAM_API_KEY, or a deepgram workspace credential".into(),
                })?;
                let client = DeepgramAsr::new(
                    &account.base_url,
                    api_key,
                    &self.settings.deepgram_model,
                    self.policy,
                );
                Ok((
                    Arc::new(GuardedAsr {
                        inner: Arc::new(client),
                        breaker: self.breaker("deepgram", org_id, kind),
                    }),
                    Some(account.own),
                ))
            }
            AsrVendor::OpenAi => {
                let account = self.openai_account(org_id, kind).await?;
                let client = OpenAiAsr::new(
                    self.http.clone(),
                    &account.base_url,
                    account.api_key,
                    &self.settings.openai_models.asr,
                    self.policy,
                );
                Ok((
                    Arc::new(GuardedAsr {
                        inner: Arc::new(client),
                        breaker: self.breaker("openai-asr", org_id, kind),
                    }),
                    Some(account.own),
                ))
            }
            // The node's own server: nothing to pay for, like espeak-ng.
            AsrVendor::Whisper => {
                let whisper = &self.settings.whisper;
                let client = OpenAiAsr::new(
                    self.http.clone(),
                    &whisper.base_url,
                    whisper.api_key.clone(),
                    &self.settings.whisper_model,
                    self.policy,
                )
                .with_form(TranscriptionForm::FasterWhisper);
                Ok((
                    Arc::new(GuardedAsr {
                        inner: Arc::new(client),
                        breaker: self.breaker("whisper", org_id, kind),
                    }),
                    None,
                ))
            }
        }
    }

    /// Returns (client, paid vendor's own-credential flag when paid).
    async fn tts(
        &self,
        org_id: OrgId,
        spec: &AgentSpec,
        sim: &SimConfig,
    ) -> Result<(Arc<dyn TtsProvider>, Option<bool>), SelectError> {
        let kind = ProviderKind::Tts;
        match spec.tts_provider {
            TtsVendor::Sim => Ok((Arc::new(SimTts::new(sim.clone())), None)),
            TtsVendor::OpenAi => {
                let account = self.openai_account(org_id, kind).await?;
                let client = OpenAiTts::new(
                    self.http.clone(),
                    &account.base_url,
                    account.api_key,
                    &self.settings.openai_models.tts,
                    self.policy,
                );
                Ok((
                    Arc::new(GuardedTts {
                        inner: Arc::new(client),
                        breaker: self.breaker("openai-tts", org_id, kind),
                    }),
                    Some(account.own),
                ))
            }
            TtsVendor::ElevenLabs => {
                let account = self
                    .account(
                        org_id,
                        kind,
                        CredentialKind::ElevenLabs,
                        &self.settings.elevenlabs,
                    )
                    .await?;
                let api_key = account.api_key.ok_or_else(|| SelectError::Unavailable {
                    kind,
                    vendor: "elevenlabs".into(),
                    reason: "no API key: set VOXLINE_ELEVENLABS_API_KEY, or an elevenlabs workspace credential".into(),
                })?;
                let client = ElevenLabsTts::new(
                    self.http.clone(),
                    &account.base_url,
                    api_key,
                    &self.settings.elevenlabs_model,
                    self.policy,
                );
                Ok((
                    Arc::new(GuardedTts {
                        inner: Arc::new(client),
                        breaker: self.breaker("elevenlabs", org_id, kind),
                    }),
                    Some(account.own),
                ))
            }
            TtsVendor::Piper => {
                let client = PiperTts::new(
                    self.http.clone(),
                    &self.settings.piper.base_url,
                    &self.settings.piper_voice,
                    self.policy,
                );
                Ok((
                    Arc::new(GuardedTts {
                        inner: Arc::new(client),
                        breaker: self.breaker("piper", org_id, kind),
                    }),
                    None,
                ))
            }
            TtsVendor::Espeak => {
                let program = &self.settings.espeak_program;
                let installed = *self
                    .espeak_installed
                    .get_or_init(|| espeak::installed(program))
                    .await;
                if !installed {
                    return Err(SelectError::Unavailable {
                        kind,
                        vendor: "espeak".into(),
                        reason: format!("{program} is not installed on this server"),
                    });
                }
                let client = EspeakTts::new(program, &spec.language, self.policy.read_timeout);
                Ok((
                    Arc::new(GuardedTts {
                        inner: Arc::new(client),
                        breaker: self.breaker("espeak", org_id, kind),
                    }),
                    None,
                ))
            }
        }
    }

    /// The providers a call of `spec` in workspace `org_id` runs on.
    pub async fn for_call(
        &self,
        org_id: OrgId,
        spec: &AgentSpec,
        sim: SimConfig,
    ) -> Result<CallProviders, SelectError> {
        let (asr, asr_own) = self.asr(org_id, spec, &sim).await?;
        let chosen = self
            .llm(org_id, spec.llm_provider, &spec.llm_model, &sim)
            .await?;
        let llm_own = (spec.llm_provider != LlmVendor::Sim).then_some(chosen.own);
        let (tts, tts_own) = self.tts(org_id, spec, &sim).await?;
        let paid: Vec<bool> = [asr_own, llm_own, tts_own].into_iter().flatten().collect();
        let own_credentials = !paid.is_empty() && paid.iter().all(|own| *own);
        let usage = UsageMeter::default();
        Ok(CallProviders {
            providers: Providers {
                asr,
                llm: Arc::new(MeteredLlm {
                    inner: chosen.llm,
                    meter: usage.clone(),
                }),
                tts,
            },
            own_credentials,
            usage,
            summary: format!(
                "{}/{}/{}",
                spec.asr_provider, spec.llm_provider, spec.tts_provider
            ),
        })
    }
}

/// Sets up an answered call's providers: the clients, and the platform-fee
/// rate when they all run on the workspace's own keys. On failure, returns the
/// call's `endedReason` (`asr-error`, `llm-error`, `tts-error`), logged with
/// the call id.
pub async fn prepare_call(
    selector: &ProviderSelector,
    call_id: CallId,
    org_id: OrgId,
    spec: &AgentSpec,
    sim: SimConfig,
) -> Result<CallProviders, EndedReason> {
    let selected = match selector.for_call(org_id, spec, sim).await {
        Ok(selected) => selected,
        Err(err) => {
            tracing::warn!(call = %call_id, error = %err, "cannot set up the call's providers");
            return Err(err
                .provider()
                .map_or(EndedReason::EngineError, EndedReason::for_provider));
        }
    };
    if selected.own_credentials {
        let fee = selector.settings.platform_fee_paise;
        if let Err(err) = selector
            .store
            .bill_call_at_platform_fee(call_id, Paise(fee))
            .await
        {
            tracing::error!(call = %call_id, error = %err, "could not switch the call to the platform fee");
        }
    }
    tracing::debug!(call = %call_id, providers = %selected.summary, own_credentials = selected.own_credentials,
        "call providers ready");
    Ok(selected)
}

/// Stores a finished call's LLM usage.
pub async fn record_usage(store: &Store, call_id: CallId, usage: &UsageMeter) {
    let total = usage.total();
    if total == LlmUsage::default() {
        return;
    }
    if let Err(err) = store
        .set_call_llm_usage(
            call_id,
            i64::from(total.prompt_tokens),
            i64::from(total.completion_tokens),
        )
        .await
    {
        tracing::warn!(call = %call_id, error = %err, "could not store the call's LLM usage");
    }
}

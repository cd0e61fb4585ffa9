//! The simulated callee behind the sim carrier: joins answered calls over a
//! real websocket and plays the call's script (decisions §11), with
//! speech-like sound for the sim ASR or, for agents on a real ASR, a real
//! voice (Piper or espeak-ng).

use crate::providers::HttpPolicy;
use crate::providers::espeak::{self, EspeakTts};
use crate::providers::piper::PiperTts;
use crate::providers::settings::ProviderSettings;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use voxline_actors::sim::callee::{
    CalleeOptions, CalleeVoice, ScriptStep, SimCallee, default_sim_script, parse_sim_script,
};
use voxline_actors::sim::carrier::CalleeStart;

/// A breath between sentences: well under the engine's 600 ms end of turn.
pub const SENTENCE_PAUSE: Duration = Duration::from_millis(250);

pub use crate::config::CalleeVoiceKind;

/// Why the callee's voice cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum CalleeVoiceError {
    /// espeak-ng was asked for (or Piper is absent) and is not installed.
    #[error(
        "the sim callee's voice needs {0}, which is not installed (or set VOXLINE_SIM_CALLEE_VOICE=piper)"
    )]
    EspeakMissing(String),
}

/// Whether a Piper server answers at `base_url` (any HTTP answer counts).
async fn piper_answers(http: &reqwest::Client, base_url: &str) -> bool {
    let probe = http
        .get(format!("{}/voices", base_url.trim_end_matches('/')))
        .timeout(Duration::from_secs(2))
        .send();
    probe.await.is_ok()
}

/// The callee's voice for `kind`: `None` for the synthetic one.
pub async fn callee_voice(
    kind: CalleeVoiceKind,
    settings: &ProviderSettings,
) -> Result<Option<CalleeVoice>, CalleeVoiceError> {
    let policy = HttpPolicy::from_settings(settings);
    let http = policy.client();
    let piper = || -> Arc<dyn voxline_actors::providers::TtsProvider> {
        Arc::new(PiperTts::new(
            http.clone(),
            &settings.piper.base_url,
            &settings.piper_voice,
            policy,
        ))
    };
    let espeak = || async {
        let program = &settings.espeak_program;
        if !espeak::installed(program).await {
            return Err(CalleeVoiceError::EspeakMissing(program.clone()));
        }
        let tts: Arc<dyn voxline_actors::providers::TtsProvider> =
            Arc::new(EspeakTts::new(program, "en-US", policy.read_timeout));
        Ok(tts)
    };
    let tts = match kind {
        CalleeVoiceKind::Synthetic => return Ok(None),
        CalleeVoiceKind::Piper => piper(),
        CalleeVoiceKind::Espeak => espeak().await?,
        CalleeVoiceKind::Speech => {
            if piper_answers(&http, &settings.piper.base_url).await {
                piper()
            } else {
                espeak().await?
            }
        }
    };
    Ok(Some(CalleeVoice {
        tts,
        voice: String::new(),
        sentence_pause: SENTENCE_PAUSE,
    }))
}

/// The script a call plays: its `simScript` variable, else the default script.
/// The callee speaks it and the sim ASR transcribes it, so both read it here.
pub fn script_steps(script: &Option<Value>) -> Vec<ScriptStep> {
    script
        .as_ref()
        .and_then(|s| parse_sim_script(s).ok())
        .filter(|steps| !steps.is_empty())
        .unwrap_or_else(default_sim_script)
}

/// Joins an answered sim call as the callee and plays its script, in `voice` when given.
pub async fn run(start: CalleeStart, voice: Option<CalleeVoice>) {
    let steps = script_steps(&start.script);
    let options = CalleeOptions {
        call_sid: start.carrier_call_id.clone(),
        cancel: start.hangup.clone(),
        ..CalleeOptions::default()
    }
    .with_voice(voice);
    let report = SimCallee::run(
        start.media_url,
        start.params,
        steps,
        start.behaviour,
        options,
    )
    .await;
    tracing::debug!(call = %start.call_id, ?report, "sim callee finished");
}

//! The SIP carrier's answered legs, handed to their calls' conversations: the
//! [`MediaHandoff`] the engine's side of the service implements.

use crate::calls::media_stream::CallEngine;
use crate::sip::media_leg::{AnsweredLeg, MediaHandoff};
use std::sync::OnceLock;
use voxline_media::sdp::Negotiated;

/// Hands answered SIP legs to the engine, which is built after its carriers
/// (so it is connected once it runs).
#[derive(Default)]
pub struct EngineHandoff {
    engine: OnceLock<CallEngine>,
}

impl EngineHandoff {
    /// Connects the running engine.
    pub fn connect(&self, engine: CallEngine) {
        let _ = self.engine.set(engine);
    }
}

impl MediaHandoff for EngineHandoff {
    fn answered(&self, leg: AnsweredLeg) -> Result<(), String> {
        let _engine = self
            .engine
            .get()
            .ok_or_else(|| "the call engine is not running".to_owned())?;
        Err(format!("RTP media for {} is not wired yet", leg.call_id))
    }

    fn updated(&self, _call_id: &str, _negotiated: &Negotiated) {}
}

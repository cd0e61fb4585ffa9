//! The SIP carrier's answered legs, handed to their calls' conversations: the
//! [`MediaHandoff`] the engine's side of the service implements.

use crate::calls::media_stream::{CallEngine, MediaConnection, MediaStream, RtpControl, RtpLeg};
use crate::sip::media_leg::{AnsweredLeg, MediaHandoff};
use crate::sip::rtp_transport::RtpConfig;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::{Arc, Weak};
use voxline_actors::ids::CallId;
use voxline_media::carrier::{AudioFormat, CarrierCodec, StreamStart};
use voxline_media::sdp::{G711Codec, Negotiated};

/// Hands answered SIP legs to the engine, which is built after its carriers
/// (so it is connected once it runs).
#[derive(Default)]
pub struct EngineHandoff {
    engine: OnceLock<CallEngine>,
    /// Live legs' controls by call id, for re-INVITEs (dropped legs linger as dead `Weak`s
    /// until the next answered call sweeps them).
    controls: parking_lot::Mutex<HashMap<String, Weak<RtpControl>>>,
}

impl EngineHandoff {
    /// Connects the running engine.
    pub fn connect(&self, engine: CallEngine) {
        let _ = self.engine.set(engine);
    }
}

impl MediaHandoff for EngineHandoff {
    fn answered(&self, leg: AnsweredLeg) -> Result<(), String> {
        let engine = self
            .engine
            .get()
            .ok_or_else(|| "the call engine is not running".to_owned())?;
        let call_id: CallId = leg
            .call_id
            .parse()
            .map_err(|_| format!("{} is not a call id", leg.call_id))?;
        let remote = leg
            .negotiated
            .remote
            .ok_or_else(|| "the SDP gives no address to send RTP to".to_owned())?;
        let format = match leg.negotiated.codec {
            G711Codec::Pcmu => AudioFormat::MULAW_8K,
            G711Codec::Pcma => AudioFormat::ALAW_8K,
        };
        let events = leg.negotiated.dtmf_payload_type;
        let codec = match events {
            Some(_) => CarrierCodec::sip(format),
            None => CarrierCodec::sip_without_telephone_events(format),
        };
        let start = StreamStart {
            stream_id: leg.sip_call_id.clone(),
            call_id: Some(leg.sip_call_id),
            account_id: None,
            from: Some(leg.from),
            to: Some(leg.to),
            custom_parameters: Vec::new(),
            format,
        };
        let control = Arc::new(RtpControl::default());
        {
            let mut controls = self.controls.lock();
            controls.retain(|_, c| c.strong_count() > 0);
            controls.insert(call_id.to_string(), Arc::downgrade(&control));
        }
        let transport = RtpLeg::new(
            leg.leg.socket,
            RtpConfig::new(format, events, remote),
            leg.ended,
            control,
        );
        let stream = MediaStream {
            codec,
            transport: MediaConnection::Rtp(Box::new(transport)),
            start,
        };
        engine
            .attach_media(call_id, stream)
            .map_err(|_| format!("call {call_id} is not live"))
    }

    fn updated(&self, call_id: &str, negotiated: &Negotiated) {
        let control = self.controls.lock().get(call_id).and_then(Weak::upgrade);
        if let Some(control) = control {
            control.update(negotiated.peer_holds(), negotiated.remote);
        }
        tracing::info!(
            call = call_id,
            held = negotiated.peer_holds(),
            remote = ?negotiated.remote,
            "a re-INVITE changed the SIP call's media"
        );
    }
}

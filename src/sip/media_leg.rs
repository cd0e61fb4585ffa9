//! An answered SIP call's media: the RTP port reserved when the call is
//! placed, and the hand-off of the answered leg to the call's conversation.

use super::rtp_ports::RtpSocket;
use tokio_util::sync::CancellationToken;
use voxline_media::sdp::Negotiated;

/// An answered call's media leg, as the carrier hands it over.
#[derive(Debug)]
pub struct AnsweredLeg {
    /// Our call id.
    pub call_id: String,
    /// The SIP Call-ID.
    pub sip_call_id: String,
    /// The caller ID.
    pub from: String,
    /// The number called.
    pub to: String,
    /// The call's RTP socket.
    pub leg: RtpSocket,
    /// What the SDP exchange settled.
    pub negotiated: Negotiated,
    /// Cancelled when the dialog ends (a BYE either way): the media stops.
    pub ended: CancellationToken,
}

/// Where answered legs go: the call's conversation.
pub trait MediaHandoff: Send + Sync + 'static {
    /// Starts the conversation on an answered leg; an error when the call is
    /// no longer live (the carrier then hangs up).
    fn answered(&self, leg: AnsweredLeg) -> Result<(), String>;
    /// A re-INVITE changed the media (hold, resume, a new address).
    fn updated(&self, call_id: &str, negotiated: &Negotiated);
}

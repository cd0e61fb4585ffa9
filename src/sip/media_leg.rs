//! An answered SIP call's media: the RTP port reserved when the call is
//! placed, and the hand-off of the answered leg to the call's conversation.

use std::io;
use std::net::{IpAddr, SocketAddr};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use voxline_media::sdp::Negotiated;

/// Where calls' RTP sockets come from.
#[derive(Debug, Clone)]
pub struct RtpPool {
    bind_ip: IpAddr,
}

impl RtpPool {
    /// Sockets bound on `bind_ip`.
    pub fn new(bind_ip: IpAddr) -> Self {
        Self { bind_ip }
    }

    /// Reserves a socket for one call; `_advertised` is what the SDP will say.
    pub async fn bind(&self, _advertised: IpAddr) -> io::Result<RtpLeg> {
        let socket = UdpSocket::bind(SocketAddr::new(self.bind_ip, 0)).await?;
        let port = socket.local_addr()?.port();
        Ok(RtpLeg { socket, port })
    }
}

/// One call's RTP socket.
#[derive(Debug)]
pub struct RtpLeg {
    /// The socket.
    pub socket: UdpSocket,
    port: u16,
}

impl RtpLeg {
    /// Its local port (the SDP's `m=` port).
    pub fn port(&self) -> u16 {
        self.port
    }
}

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
    pub leg: RtpLeg,
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

//! Where the SIP user agent listens and what it advertises.

use super::rtp_ports::RtpPortRange;
use clap::Args;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// The default SIP listen address: loopback (like the HTTP listener), the
/// standard port; a trunk outside needs `VOXLINE_SIP_LISTEN=0.0.0.0:5060`.
pub const DEFAULT_SIP_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5060);

/// Flags (and variables) of the SIP carrier; see [`SipSettings`].
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "SIP")]
pub struct SipArgs {
    /// Where the SIP user agent listens, UDP and TCP on one port
    /// (default 127.0.0.1:5060), or `off` for no SIP carrier.
    #[arg(long, env = "VOXLINE_SIP_LISTEN")]
    pub sip_listen: Option<SipListen>,
    /// The address put in SIP Contact and Via headers and in SDP, when this
    /// node is reached through NAT (default: the listen address, or the
    /// outbound interface's address when it listens on every interface).
    #[arg(long, env = "VOXLINE_SIP_PUBLIC_IP")]
    pub sip_public_ip: Option<IpAddr>,
    /// The UDP ports RTP sockets are bound from, `low-high` (default
    /// 10000-20000); each call takes one even port.
    #[arg(long, env = "VOXLINE_RTP_PORTS")]
    pub rtp_ports: Option<RtpPortRange>,
}

/// Whether, and where, the SIP user agent listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SipListen {
    /// No SIP carrier on this node.
    Off,
    /// Listen here (port 0: a free port, for tests).
    On(SocketAddr),
}

impl FromStr for SipListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(Self::Off);
        }
        s.parse().map(Self::On).map_err(|_| {
            format!("VOXLINE_SIP_LISTEN must be host:port (an IP address) or off, not {s:?}")
        })
    }
}

impl fmt::Display for SipListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::On(addr) => addr.fmt(f),
        }
    }
}

/// The SIP carrier's settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SipSettings {
    /// Where the user agent listens.
    pub listen: SipListen,
    /// The address advertised in headers and SDP, when not the listen address.
    pub public_ip: Option<IpAddr>,
    /// The RTP port range.
    pub rtp_ports: RtpPortRange,
}

impl Default for SipSettings {
    fn default() -> Self {
        Self {
            listen: SipListen::On(DEFAULT_SIP_LISTEN),
            public_ip: None,
            rtp_ports: RtpPortRange::default(),
        }
    }
}

impl SipSettings {
    /// Settings from the flags, with the defaults where they say nothing.
    pub fn resolve(args: &SipArgs) -> Self {
        let default = Self::default();
        Self {
            listen: args.sip_listen.unwrap_or(default.listen),
            public_ip: args.sip_public_ip,
            rtp_ports: args.rtp_ports.unwrap_or(default.rtp_ports),
        }
    }

    /// Settings for tests: loopback, a free port.
    pub fn for_tests() -> Self {
        Self {
            listen: SipListen::On(SocketAddr::from(([127, 0, 0, 1], 0))),
            public_ip: None,
            rtp_ports: RtpPortRange::new(30_000, 39_999).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_reads_an_address_or_off() {
        assert_eq!("off".parse::<SipListen>(), Ok(SipListen::Off));
        assert_eq!(
            "127.0.0.1:5070".parse::<SipListen>(),
            Ok(SipListen::On("127.0.0.1:5070".parse().unwrap()))
        );
        let err = "sip.example.com".parse::<SipListen>().unwrap_err();
        assert!(err.contains("VOXLINE_SIP_LISTEN"), "{err}");
    }
}

//! The UDP port range of the SIP carrier's RTP media, and the allocator that binds one call's
//! RTP socket in it.
//!
//! The range comes from `VOXLINE_RTP_PORTS` (`first-last`, inclusive, e.g. `40000-40999`;
//! [`RtpPortRange::default`] is `10000-20000`), parsed once at the edge into an
//! [`RtpPortRange`]. Calls get even ports only (RTP's convention, RFC 3550 section 11, which
//! leaves the odd port above for RTCP), handed out round-robin so a port just released is the
//! last to be reused and late packets of an ended call do not land in a new one. A port that
//! another process (or call) holds is skipped; when every even port of the range is taken,
//! [`RtpPorts::bind`] says so.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::UdpSocket;

/// The variable that sets the range (read by the service's configuration).
pub const RTP_PORTS_VAR: &str = "VOXLINE_RTP_PORTS";

/// Why a range could not be read or a port could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum RtpPortsError {
    /// Not `first-last` with two port numbers.
    #[error("RTP port range {0:?} is not `first-last`, e.g. `40000-40999`")]
    Syntax(String),
    /// The range is backwards or reaches into the privileged ports.
    #[error("RTP port range {first}-{last} must have 1024 <= first <= last")]
    Bounds {
        /// The first port given.
        first: u16,
        /// The last port given.
        last: u16,
    },
    /// No even port in the range.
    #[error("RTP port range {first}-{last} holds no even port")]
    NoEvenPort {
        /// The first port given.
        first: u16,
        /// The last port given.
        last: u16,
    },
    /// Every even port of the range is in use.
    #[error("no free RTP port in {0}: all {1} even ports are in use")]
    Exhausted(RtpPortRange, usize),
    /// Binding failed for another reason than the port being taken (e.g. the address is
    /// not this host's).
    #[error("binding RTP port {0}: {1}")]
    Bind(SocketAddr, io::Error),
}

/// An inclusive range of UDP ports for RTP, holding at least one even port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpPortRange {
    first: u16,
    last: u16,
}

impl RtpPortRange {
    /// A range from its bounds, checked as [`from_str`](Self::from_str) checks them.
    pub fn new(first: u16, last: u16) -> Result<Self, RtpPortsError> {
        if first < 1024 || first > last {
            return Err(RtpPortsError::Bounds { first, last });
        }
        if first == last && first % 2 == 1 {
            return Err(RtpPortsError::NoEvenPort { first, last });
        }
        Ok(Self { first, last })
    }

    /// The first port of the range.
    pub fn first(self) -> u16 {
        self.first
    }

    /// The last port of the range.
    pub fn last(self) -> u16 {
        self.last
    }

    /// How many even ports (calls) the range holds.
    pub fn even_ports(self) -> usize {
        let first_even = usize::from(self.first.next_multiple_of(2));
        (usize::from(self.last) + 2).saturating_sub(first_even) / 2
    }

    /// The `index`th even port (`index < even_ports()`).
    fn even_port(self, index: usize) -> u16 {
        let first_even = usize::from(self.first.next_multiple_of(2));
        u16::try_from(first_even + 2 * index).unwrap_or(u16::MAX)
    }
}

impl Default for RtpPortRange {
    fn default() -> Self {
        Self {
            first: 10_000,
            last: 20_000,
        }
    }
}

impl fmt::Display for RtpPortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl FromStr for RtpPortRange {
    type Err = RtpPortsError;

    /// Reads `first-last` (spaces around the numbers allowed).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || RtpPortsError::Syntax(s.to_owned());
        let (first, last) = s.split_once('-').ok_or_else(syntax)?;
        let port = |text: &str| text.trim().parse::<u16>().map_err(|_| syntax());
        Self::new(port(first)?, port(last)?)
    }
}

/// One call's RTP socket and the port it is bound to (for the SDP's `m=` line).
#[derive(Debug)]
pub struct RtpSocket {
    /// The bound socket.
    pub socket: UdpSocket,
    /// Its port.
    pub port: u16,
}

/// Hands out the range's even ports round-robin; shared by every call of the process.
#[derive(Debug)]
pub struct RtpPorts {
    range: RtpPortRange,
    next: AtomicUsize,
}

impl RtpPorts {
    /// An allocator over `range`.
    pub fn new(range: RtpPortRange) -> Self {
        Self {
            range,
            next: AtomicUsize::new(0),
        }
    }

    /// The range it allocates from.
    pub fn range(&self) -> RtpPortRange {
        self.range
    }

    /// Binds a UDP socket on `ip` at the next free even port of the range. Must be called
    /// inside a tokio runtime. A port in use is skipped; every one in use is
    /// [`RtpPortsError::Exhausted`]; any other bind failure is returned as it is.
    pub fn bind(&self, ip: IpAddr) -> Result<RtpSocket, RtpPortsError> {
        let count = self.range.even_ports();
        for _ in 0..count {
            let index = self.next.fetch_add(1, Ordering::Relaxed) % count;
            let port = self.range.even_port(index);
            let address = SocketAddr::new(ip, port);
            match std::net::UdpSocket::bind(address) {
                Ok(socket) => {
                    let socket = socket
                        .set_nonblocking(true)
                        .and_then(|()| UdpSocket::from_std(socket))
                        .map_err(|error| RtpPortsError::Bind(address, error))?;
                    return Ok(RtpSocket { socket, port });
                }
                Err(error) if error.kind() == io::ErrorKind::AddrInUse => {}
                Err(error) => return Err(RtpPortsError::Bind(address, error)),
            }
        }
        Err(RtpPortsError::Exhausted(self.range, count))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn sip_rtp_ranges_parse() {
        let range: RtpPortRange = "40000-40999".parse().unwrap();
        assert_eq!((range.first(), range.last()), (40_000, 40_999));
        assert_eq!(range.even_ports(), 500);
        assert_eq!(range.to_string(), "40000-40999");
        assert_eq!(
            " 40001 - 40004 "
                .parse::<RtpPortRange>()
                .unwrap()
                .even_ports(),
            2
        );
        assert_eq!(
            "40000-40000".parse::<RtpPortRange>().unwrap().even_ports(),
            1
        );
        assert_eq!(RtpPortRange::default().to_string(), "10000-20000");
        assert_eq!(RtpPortRange::default().even_ports(), 5001);
    }

    #[test]
    fn sip_rtp_range_errors_are_explicit() {
        for text in [
            "",
            "40000",
            "40000-",
            "a-b",
            "40000-70000",
            "40000:40999",
            "-1-5",
        ] {
            assert!(
                matches!(text.parse::<RtpPortRange>(), Err(RtpPortsError::Syntax(_))),
                "{text:?}"
            );
        }
        assert!(matches!(
            "41000-40000".parse::<RtpPortRange>(),
            Err(RtpPortsError::Bounds { .. })
        ));
        assert!(matches!(
            "80-1000".parse::<RtpPortRange>(),
            Err(RtpPortsError::Bounds { .. })
        ));
        let odd = "40001-40001".parse::<RtpPortRange>().unwrap_err();
        assert!(matches!(odd, RtpPortsError::NoEvenPort { .. }));
        assert!(odd.to_string().contains("no even port"), "{odd}");
    }

    /// An even port the system has just shown to be free.
    fn free_even_port() -> u16 {
        loop {
            let probe = std::net::UdpSocket::bind((LOCALHOST, 0)).unwrap();
            let port = probe.local_addr().unwrap().port();
            drop(probe);
            let even = port & !1;
            if even >= 1024 && std::net::UdpSocket::bind((LOCALHOST, even)).is_ok() {
                return even;
            }
        }
    }

    #[tokio::test]
    async fn sip_rtp_ports_exhaust_then_free_up() {
        let port = free_even_port();
        let ports = RtpPorts::new(RtpPortRange::new(port, port + 1).unwrap());
        let first = ports.bind(LOCALHOST).unwrap();
        assert_eq!(first.port, port);
        assert_eq!(first.socket.local_addr().unwrap().port(), port);
        let exhausted = ports.bind(LOCALHOST).unwrap_err();
        assert!(
            matches!(exhausted, RtpPortsError::Exhausted(_, 1)),
            "{exhausted}"
        );
        assert!(exhausted.to_string().contains("no free RTP port"));
        drop(first);
        assert_eq!(ports.bind(LOCALHOST).unwrap().port, port);
    }

    #[tokio::test]
    async fn sip_rtp_ports_go_round_robin_and_skip_taken_ones() {
        let port = free_even_port();
        // Whichever of the two is taken by someone else is skipped.
        let range = RtpPortRange::new(port, port + 3).unwrap();
        let ports = RtpPorts::new(range);
        let Ok(a) = ports.bind(LOCALHOST) else {
            return; // Both ports taken by other processes: nothing to check here.
        };
        match ports.bind(LOCALHOST) {
            Ok(b) => {
                assert_ne!(a.port, b.port);
                assert_eq!(a.port % 2, 0);
                assert_eq!(b.port % 2, 0);
                drop(a);
                // Round-robin: the next try starts after `b`, at `a`'s freed port.
                let c = ports.bind(LOCALHOST).unwrap();
                assert_ne!(c.port, b.port);
            }
            Err(error) => assert!(matches!(error, RtpPortsError::Exhausted(_, 2))),
        }
    }

    #[tokio::test]
    async fn sip_rtp_ports_report_other_bind_failures() {
        let ports = RtpPorts::new(RtpPortRange::new(40_000, 40_001).unwrap());
        // TEST-NET-1 is no address of this host.
        let error = ports
            .bind(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))
            .unwrap_err();
        assert!(matches!(error, RtpPortsError::Bind(..)), "{error}");
    }
}

//! Where the SIP user agent listens and what it advertises.

use super::rtp_ports::RtpPortRange;
use clap::Args;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
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
    /// A PEM file of CA certificates trusted for trunks on `transport: tls`,
    /// besides the system's roots (a PBX with a private CA).
    #[arg(long, env = "VOXLINE_SIP_TLS_CA_FILE")]
    pub sip_tls_ca_file: Option<PathBuf>,
    /// Where to take SIP over TLS from trunks, host:port (e.g. 0.0.0.0:5061);
    /// needs the certificate and key files. Unset: no TLS listener.
    #[arg(long, env = "VOXLINE_SIP_TLS_LISTEN")]
    pub sip_tls_listen: Option<SocketAddr>,
    /// The TLS listener's certificate chain (PEM).
    #[arg(long, env = "VOXLINE_SIP_TLS_CERT_FILE")]
    pub sip_tls_cert_file: Option<PathBuf>,
    /// The TLS listener's private key (PEM, PKCS#8 or PKCS#1).
    #[arg(long, env = "VOXLINE_SIP_TLS_KEY_FILE")]
    pub sip_tls_key_file: Option<PathBuf>,
}

/// Why the SIP settings cannot be used; each names its variable.
#[derive(Debug, thiserror::Error)]
pub enum SipSettingsError {
    /// A PEM file could not be read.
    #[error("{variable}: cannot read {path}: {source}")]
    Read {
        /// The variable naming the file.
        variable: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A PEM file holds nothing of what it should.
    #[error("{variable}: {path} holds no PEM {what}")]
    NoPem {
        /// The variable naming the file.
        variable: &'static str,
        /// The file.
        path: PathBuf,
        /// What it should hold (`certificate`, `private key`).
        what: &'static str,
    },
    /// The TLS listener is asked for without its certificate or key.
    #[error(
        "VOXLINE_SIP_TLS_LISTEN={0} needs VOXLINE_SIP_TLS_CERT_FILE and VOXLINE_SIP_TLS_KEY_FILE"
    )]
    ListenWithoutCertificate(SocketAddr),
}

/// PEM text that must not be printed (a private key).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretPem(pub Vec<u8>);

impl fmt::Debug for SecretPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretPem(..)")
    }
}

/// A TLS listener for SIP: where, and the certificate it shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SipTlsListen {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The certificate chain (PEM).
    pub cert_pem: Vec<u8>,
    /// The private key (PEM).
    pub key_pem: SecretPem,
}

/// SIP over TLS: what a trunk's certificate is checked against, and the
/// optional listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SipTlsSettings {
    /// CA certificates (PEM) trusted besides the system's roots.
    pub extra_ca_pem: Option<Vec<u8>>,
    /// The TLS listener, when configured.
    pub listen: Option<SipTlsListen>,
}

impl SipTlsSettings {
    /// Reads and checks the files the flags name.
    pub fn resolve(args: &SipArgs) -> Result<Self, SipSettingsError> {
        let extra_ca_pem = match &args.sip_tls_ca_file {
            Some(path) => Some(read_pem(
                "VOXLINE_SIP_TLS_CA_FILE",
                path,
                PemKind::Certificate,
            )?),
            None => None,
        };
        let listen = match (
            args.sip_tls_listen,
            &args.sip_tls_cert_file,
            &args.sip_tls_key_file,
        ) {
            (None, _, _) => None,
            (Some(addr), Some(cert), Some(key)) => Some(SipTlsListen {
                addr,
                cert_pem: read_pem("VOXLINE_SIP_TLS_CERT_FILE", cert, PemKind::Certificate)?,
                key_pem: SecretPem(read_pem(
                    "VOXLINE_SIP_TLS_KEY_FILE",
                    key,
                    PemKind::PrivateKey,
                )?),
            }),
            (Some(addr), _, _) => return Err(SipSettingsError::ListenWithoutCertificate(addr)),
        };
        Ok(Self {
            extra_ca_pem,
            listen,
        })
    }
}

/// What a PEM file must hold.
#[derive(Clone, Copy)]
enum PemKind {
    Certificate,
    PrivateKey,
}

/// Reads `path` and checks it holds at least one PEM item of `kind`.
fn read_pem(
    variable: &'static str,
    path: &Path,
    kind: PemKind,
) -> Result<Vec<u8>, SipSettingsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bytes = std::fs::read(path).map_err(|source| SipSettingsError::Read {
        variable,
        path: path.to_path_buf(),
        source,
    })?;
    let (found, what) = match kind {
        PemKind::Certificate => (
            CertificateDer::pem_slice_iter(&bytes).any(|c| c.is_ok()),
            "certificate",
        ),
        PemKind::PrivateKey => (PrivateKeyDer::from_pem_slice(&bytes).is_ok(), "private key"),
    };
    if found {
        Ok(bytes)
    } else {
        Err(SipSettingsError::NoPem {
            variable,
            path: path.to_path_buf(),
            what,
        })
    }
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
    /// SIP over TLS.
    pub tls: SipTlsSettings,
}

impl Default for SipSettings {
    fn default() -> Self {
        Self {
            listen: SipListen::On(DEFAULT_SIP_LISTEN),
            public_ip: None,
            rtp_ports: RtpPortRange::default(),
            tls: SipTlsSettings::default(),
        }
    }
}

impl SipSettings {
    /// Settings from the flags, with the defaults where they say nothing;
    /// reads the TLS files they name.
    pub fn resolve(args: &SipArgs) -> Result<Self, SipSettingsError> {
        let default = Self::default();
        Ok(Self {
            listen: args.sip_listen.unwrap_or(default.listen),
            public_ip: args.sip_public_ip,
            rtp_ports: args.rtp_ports.unwrap_or(default.rtp_ports),
            tls: SipTlsSettings::resolve(args)?,
        })
    }

    /// Settings for tests: loopback, a free port.
    pub fn for_tests() -> Self {
        Self {
            listen: SipListen::On(SocketAddr::from(([127, 0, 0, 1], 0))),
            public_ip: None,
            rtp_ports: RtpPortRange::new(30_000, 39_999).unwrap_or_default(),
            tls: SipTlsSettings::default(),
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

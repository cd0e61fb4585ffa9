//! A workspace's SIP trunk (issue 33): where its `sip` numbers ring out, how
//! it authenticates, and which sources may ring in.
//!
//! It is stored as the workspace's `sip` provider credential (sealed like the
//! others, since it holds the digest password) and parsed here, once, into
//! [`SipTrunk`]: every later reader gets typed fields, and every refusal names
//! the field.

use ipnet::IpNet;
use serde_json::{Map, Value};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// The default SIP port (RFC 3261 §19.1.2); TLS uses 5061.
pub const DEFAULT_SIP_PORT: u16 = 5060;
/// The default SIPS port.
pub const DEFAULT_SIPS_PORT: u16 = 5061;
/// The refresh interval a registration asks for unless the trunk says otherwise.
pub const DEFAULT_REGISTER_EXPIRES: u32 = 3600;

/// Every field the `sip` credential takes (the console's form lists them).
pub const SIP_TRUNK_FIELDS: &[&str] = &[
    "host",
    "port",
    "transport",
    "username",
    "password",
    "fromDomain",
    "register",
    "registerExpires",
    "allowedSources",
    "codecs",
];

/// How SIP messages travel to the trunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SipTransport {
    /// UDP (the default of most trunks).
    Udp,
    /// TCP.
    Tcp,
    /// TLS (SIPS) over TCP, through rustls.
    Tls,
}

impl SipTransport {
    /// The wire name (`udp`, `tcp`, `tls`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Tls => "tls",
        }
    }
}

impl FromStr for SipTransport {
    type Err = SipTrunkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            "tls" => Ok(Self::Tls),
            _ => Err(SipTrunkError::field(
                "transport",
                "must be one of udp, tcp, tls",
            )),
        }
    }
}

impl fmt::Display for SipTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An audio codec a trunk may offer or accept (G.711 only: the carriers'
/// media streams and our pipeline are 8 kHz narrowband).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SipCodec {
    /// G.711 μ-law (payload type 0).
    Pcmu,
    /// G.711 A-law (payload type 8).
    Pcma,
}

impl SipCodec {
    /// The SDP encoding name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pcmu => "PCMU",
            Self::Pcma => "PCMA",
        }
    }
}

impl FromStr for SipCodec {
    type Err = SipTrunkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "PCMU" => Ok(Self::Pcmu),
            "PCMA" => Ok(Self::Pcma),
            other => Err(SipTrunkError::field(
                "codecs",
                format!("holds {other:?}; each must be PCMU or PCMA"),
            )),
        }
    }
}

/// Why a `sip` credential was refused: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sip credential {field} {problem}")]
pub struct SipTrunkError {
    /// The JSON field.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl SipTrunkError {
    fn field(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }
}

/// A parsed SIP trunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SipTrunk {
    /// The trunk's host name or IP address (its outbound proxy / registrar).
    pub host: String,
    /// Its SIP port.
    pub port: u16,
    /// How to reach it.
    pub transport: SipTransport,
    /// Digest user (and the From user when the trunk wants it), if the trunk authenticates.
    pub username: Option<String>,
    /// Digest password; never shown after it is stored.
    pub password: Option<String>,
    /// The domain in our From and To URIs; the host when unset.
    pub from_domain: Option<String>,
    /// Whether to REGISTER with the trunk (and keep the registration fresh).
    pub register: bool,
    /// The registration's requested lifetime, in seconds.
    pub register_expires: u32,
    /// Sources an inbound INVITE may come from; empty means only the trunk's host.
    pub allowed_sources: Vec<IpNet>,
    /// The codecs offered, in order of preference.
    pub codecs: Vec<SipCodec>,
}

impl SipTrunk {
    /// Parses the credential JSON; the error names the first bad field.
    pub fn from_json(value: &Value) -> Result<Self, SipTrunkError> {
        let obj = value.as_object().ok_or_else(|| SipTrunkError {
            field: "body",
            problem: "must be a JSON object".into(),
        })?;
        if let Some(unknown) = obj.keys().find(|k| !SIP_TRUNK_FIELDS.contains(&k.as_str())) {
            return Err(SipTrunkError {
                field: "body",
                problem: format!(
                    "has an unknown field {unknown:?} (known: {})",
                    SIP_TRUNK_FIELDS.join(", ")
                ),
            });
        }
        let host = text(obj, "host")?.ok_or_else(|| SipTrunkError::field("host", "is required"))?;
        if host.contains(|c: char| c.is_whitespace() || matches!(c, '@' | ';' | '<' | '>' | '/')) {
            return Err(SipTrunkError::field(
                "host",
                "must be a host name or IP address",
            ));
        }
        let transport = match text(obj, "transport")? {
            Some(t) => t.parse()?,
            None => SipTransport::Udp,
        };
        let port = match number(obj, "port")? {
            Some(p) => u16::try_from(p)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| SipTrunkError::field("port", "must be 1 to 65535"))?,
            None if transport == SipTransport::Tls => DEFAULT_SIPS_PORT,
            None => DEFAULT_SIP_PORT,
        };
        let username = text(obj, "username")?;
        let password = text(obj, "password")?;
        if password.is_some() && username.is_none() {
            return Err(SipTrunkError::field(
                "username",
                "is required when a password is given",
            ));
        }
        let register = match obj.get("register") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) if s == "true" || s == "false" => s == "true",
            Some(_) => return Err(SipTrunkError::field("register", "must be true or false")),
        };
        if register && username.is_none() {
            return Err(SipTrunkError::field(
                "username",
                "is required when register is true",
            ));
        }
        let register_expires = match number(obj, "registerExpires")? {
            Some(e) if (60..=86_400).contains(&e) => e as u32,
            Some(_) => {
                return Err(SipTrunkError::field(
                    "registerExpires",
                    "must be 60 to 86400 seconds",
                ));
            }
            None => DEFAULT_REGISTER_EXPIRES,
        };
        let allowed_sources = list(obj, "allowedSources")?
            .into_iter()
            .map(|s| parse_source(&s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut codecs = list(obj, "codecs")?
            .into_iter()
            .map(|s| s.parse::<SipCodec>())
            .collect::<Result<Vec<_>, _>>()?;
        codecs.dedup();
        if codecs.is_empty() {
            codecs = vec![SipCodec::Pcmu, SipCodec::Pcma];
        }
        Ok(Self {
            host,
            port,
            transport,
            username,
            password,
            from_domain: text(obj, "fromDomain")?,
            register,
            register_expires,
            allowed_sources,
            codecs,
        })
    }

    /// The domain of our From URI.
    pub fn domain(&self) -> &str {
        self.from_domain.as_deref().unwrap_or(&self.host)
    }

    /// Whether an inbound request from `source` is allowed: it is in
    /// `allowedSources`, or, when that is empty, it is the trunk's host
    /// address itself.
    pub fn allows_source(&self, source: IpAddr) -> bool {
        if self.allowed_sources.is_empty() {
            return self.host.parse::<IpAddr>().is_ok_and(|ip| ip == source);
        }
        self.allowed_sources.iter().any(|net| net.contains(&source))
    }
}

/// A CIDR, or a single address (as a /32 or /128).
fn parse_source(text: &str) -> Result<IpNet, SipTrunkError> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            SipTrunkError::field(
                "allowedSources",
                format!("holds {text:?}, which is not an IP address or CIDR"),
            )
        })
}

fn text(obj: &Map<String, Value>, field: &'static str) -> Result<Option<String>, SipTrunkError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) if s.len() <= 255 => Ok(Some(s.trim().to_owned())),
        Some(Value::String(_)) => Err(SipTrunkError::field(field, "is longer than 255 bytes")),
        Some(_) => Err(SipTrunkError::field(field, "must be a string")),
    }
}

/// A number, also accepted as a string of digits (forms send text).
fn number(obj: &Map<String, Value>, field: &'static str) -> Result<Option<u64>, SipTrunkError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| SipTrunkError::field(field, "must be a whole number")),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| SipTrunkError::field(field, "must be a whole number")),
        Some(_) => Err(SipTrunkError::field(field, "must be a whole number")),
    }
}

/// A list of strings, also accepted as one comma-separated string (forms send text).
fn list(obj: &Map<String, Value>, field: &'static str) -> Result<Vec<String>, SipTrunkError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()),
        Some(Value::Array(items)) if items.len() <= 64 => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| SipTrunkError::field(field, "must be a list of strings"))
            })
            .collect(),
        Some(Value::Array(_)) => Err(SipTrunkError::field(field, "holds more than 64 entries")),
        Some(_) => Err(SipTrunkError::field(field, "must be a list of strings")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_minimal_trunk_takes_the_defaults() {
        let trunk = SipTrunk::from_json(&json!({"host": "sip.example.net"})).unwrap();
        assert_eq!(trunk.port, 5060);
        assert_eq!(trunk.transport, SipTransport::Udp);
        assert_eq!(trunk.codecs, [SipCodec::Pcmu, SipCodec::Pcma]);
        assert!(!trunk.register);
        assert_eq!(trunk.domain(), "sip.example.net");
        let tls = SipTrunk::from_json(&json!({"host": "h", "transport": "TLS"})).unwrap();
        assert_eq!(tls.port, 5061);
    }

    #[test]
    fn a_full_trunk_parses_every_field() {
        let trunk = SipTrunk::from_json(&json!({
            "host": "pbx.example.com", "port": 5080, "transport": "tcp",
            "username": "voxline", "password": "s3cret", "fromDomain": "example.com",
            "register": true, "registerExpires": 600,
            "allowedSources": ["203.0.113.0/24", "198.51.100.7"], "codecs": ["PCMA"]
        }))
        .unwrap();
        assert_eq!(trunk.port, 5080);
        assert_eq!(trunk.transport, SipTransport::Tcp);
        assert_eq!(trunk.register_expires, 600);
        assert_eq!(trunk.codecs, [SipCodec::Pcma]);
        assert!(trunk.allows_source("203.0.113.9".parse().unwrap()));
        assert!(trunk.allows_source("198.51.100.7".parse().unwrap()));
        assert!(!trunk.allows_source("198.51.100.8".parse().unwrap()));
        assert_eq!(trunk.domain(), "example.com");
    }

    #[test]
    fn without_an_allow_list_only_the_trunk_host_may_ring_in() {
        let trunk = SipTrunk::from_json(&json!({"host": "127.0.0.1"})).unwrap();
        assert!(trunk.allows_source("127.0.0.1".parse().unwrap()));
        assert!(!trunk.allows_source("127.0.0.2".parse().unwrap()));
    }

    #[test]
    fn every_refusal_names_its_field() {
        let cases = [
            (json!({}), "host"),
            (json!({"host": "a b"}), "host"),
            (json!({"host": "h", "port": 0}), "port"),
            (json!({"host": "h", "port": 70000}), "port"),
            (json!({"host": "h", "transport": "sctp"}), "transport"),
            (json!({"host": "h", "password": "p"}), "username"),
            (json!({"host": "h", "register": true}), "username"),
            (json!({"host": "h", "register": "yes"}), "register"),
            (
                json!({"host": "h", "username": "u", "registerExpires": 5}),
                "registerExpires",
            ),
            (
                json!({"host": "h", "allowedSources": ["nope"]}),
                "allowedSources",
            ),
            (json!({"host": "h", "codecs": ["G729"]}), "codecs"),
            (json!({"host": "h", "proxy": "x"}), "body"),
        ];
        for (input, field) in cases {
            let err = SipTrunk::from_json(&input).unwrap_err();
            assert_eq!(err.field, field, "{input}");
            assert!(err.to_string().contains(field), "{err}");
        }
    }

    #[test]
    fn form_text_is_read_like_json_values() {
        let trunk = SipTrunk::from_json(&json!({
            "host": "h", "port": "5070", "register": "false",
            "allowedSources": "10.0.0.0/8, 192.168.1.1", "codecs": "pcmu,pcma"
        }))
        .unwrap();
        assert_eq!(trunk.port, 5070);
        assert_eq!(trunk.allowed_sources.len(), 2);
        assert_eq!(trunk.codecs, [SipCodec::Pcmu, SipCodec::Pcma]);
    }
}

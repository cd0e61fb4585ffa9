//! The address guard: resolves a URL's host once, refuses internal addresses
//! unless the host is allow-listed, and hands back the approved addresses so
//! the request connects to exactly those (no second DNS answer, no
//! rebinding between the check and the connect).

use futures::future::BoxFuture;
use reqwest::Url;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Why a URL may not be reached.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The URL does not parse, is not http(s) or has no host.
    #[error("bad url: {0}")]
    BadUrl(String),
    /// The host resolves into a network we do not send to, and is not allow-listed.
    #[error("address refused: {0}")]
    Refused(String),
    /// The host does not resolve (or resolves to nothing).
    #[error("could not resolve {host}: {reason}")]
    Resolve {
        /// The host looked up.
        host: String,
        /// What the resolver said.
        reason: String,
    },
    /// The pinned HTTP client could not be built.
    #[error("http client: {0}")]
    Client(String),
}

/// The AWS IMDS IPv6 endpoint. It lies inside fc00::/7 already; it is named
/// so the intent survives a change to the ranges.
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// Whether an IPv4 address lies where customer-chosen URLs must not reach.
fn is_internal_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        // 169.254/16, which holds the cloud metadata endpoint 169.254.169.254.
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        // 0/8 "this network": Linux connects 0.x.y.z to the local host.
        || a == 0
        // 100.64/10, carrier-grade NAT: inside the provider's network.
        || a == 100 && (b & 0xc0) == 64
        // 240/4, reserved.
        || a >= 240
}

/// Whether an address lies where customer-chosen URLs must not reach by default.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6 == AWS_METADATA_V6
                // fc00::/7, unique local.
                || (first & 0xfe00) == 0xfc00
                // fe80::/10, link-local.
                || (first & 0xffc0) == 0xfe80
                // IPv4 written as IPv6 reaches the IPv4 address: ::ffff:a.b.c.d
                // (mapped), ::a.b.c.d (compatible) and 64:ff9b::a.b.c.d (NAT64).
                || embedded_v4(v6).is_some_and(is_internal_v4)
        }
    }
}

/// The IPv4 address an IPv6 address stands for, if any.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let o = v6.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let compatible = s[..6] == [0; 6];
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (compatible || nat64).then_some(tail)
}

/// The URL's host as the allow-list spells it: lower case, no IPv6 brackets.
fn host_of(url: &Url) -> Result<String, EgressError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(EgressError::BadUrl(format!("scheme {}", url.scheme())));
    }
    let host = url
        .host_str()
        .ok_or_else(|| EgressError::BadUrl("no host".into()))?;
    Ok(host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase())
}

/// Resolves the URL's host and returns the addresses a request may connect
/// to: all of them when the host is allow-listed, otherwise only if none is
/// internal. Connect to these (see [`pinned`]) rather than resolving again.
pub async fn check_address(
    url: &Url,
    allow_hosts: &[String],
) -> Result<Vec<SocketAddr>, EgressError> {
    check_address_with(&SystemLookup, url, allow_hosts).await
}

/// [`check_address`] with the names resolved by `lookup`.
async fn check_address_with(
    lookup: &dyn Lookup,
    url: &Url,
    allow_hosts: &[String],
) -> Result<Vec<SocketAddr>, EgressError> {
    let host = host_of(url)?;
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs: Vec<SocketAddr> =
        lookup
            .lookup(&host, port)
            .await
            .map_err(|e| EgressError::Resolve {
                host: host.clone(),
                reason: e.to_string(),
            })?;
    if addrs.is_empty() {
        return Err(EgressError::Resolve {
            host,
            reason: "no addresses".into(),
        });
    }
    if allow_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        return Ok(addrs);
    }
    // One internal answer refuses the host: connecting to "the public ones
    // only" would still let a name mix in an internal address for later.
    if let Some(bad) = addrs.iter().find(|a| is_internal(a.ip())) {
        return Err(EgressError::Refused(format!(
            "{host} resolves to {}",
            bad.ip()
        )));
    }
    Ok(addrs)
}

/// Checks a URL before it is saved (a webhook or a function tool's URL):
/// it parses, is http or https, and resolves outside internal networks
/// unless its host is allow-listed. Requests check again when they are sent.
pub async fn check_url_for_storage(url: &str, allow_hosts: &[String]) -> Result<(), EgressError> {
    let url = Url::parse(url).map_err(|e| EgressError::BadUrl(e.to_string()))?;
    check_address(&url, allow_hosts).await.map(|_| ())
}

/// A client builder whose connections to the URL's host go only to `addrs`
/// (the output of [`check_address`]). It uses no proxy (a proxy would resolve
/// the name itself) and follows no redirects (a redirect would leave the
/// checked host).
pub fn pinned(url: &Url, addrs: &[SocketAddr]) -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none());
    match url.host_str() {
        // IP literals are connected to directly, never resolved.
        Some(host) if host.parse::<IpAddr>().is_err() && !host.starts_with('[') => {
            builder.resolve_to_addrs(host, addrs)
        }
        _ => builder,
    }
}

/// One HTTP client for every guarded request, so TLS roots are loaded once
/// (building a client per request reads the whole system certificate store,
/// which at a few hundred function calls a second starves the call loops).
///
/// Its resolver is the guard: a name that resolves into an internal network
/// fails to connect unless allow-listed, and the connection goes only to the
/// addresses the resolver checked, so DNS cannot answer differently between
/// the check and the connect. IP literals, which are never resolved, are
/// checked by [`GuardedClient::post`] before the request is built. No proxy
/// (it would resolve the name itself) and no redirects (they would leave the
/// checked host).
#[derive(Clone)]
pub struct GuardedClient {
    client: Result<reqwest::Client, String>,
    allow_hosts: Arc<[String]>,
    lookup: Arc<dyn Lookup>,
}

impl GuardedClient {
    /// A client that lets `allow_hosts` through even when they resolve to
    /// internal addresses.
    pub fn new(allow_hosts: Vec<String>) -> Self {
        Self::with_lookup(allow_hosts, Arc::new(SystemLookup))
    }

    /// A client whose names are resolved by `lookup` (the system resolver in
    /// [`GuardedClient::new`]).
    pub fn with_lookup(allow_hosts: Vec<String>, lookup: Arc<dyn Lookup>) -> Self {
        let allow_hosts: Arc<[String]> = allow_hosts
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver {
                allow_hosts: Arc::clone(&allow_hosts),
                lookup: Arc::clone(&lookup),
            }))
            .build()
            .map_err(|e| e.to_string());
        Self {
            client,
            allow_hosts,
            lookup,
        }
    }

    /// Checks `url` (scheme, host, the addresses it resolves to now, for a
    /// clear refusal) and starts a POST to it; the connection checks again.
    pub async fn post(&self, url: &Url) -> Result<reqwest::RequestBuilder, EgressError> {
        check_address_with(self.lookup.as_ref(), url, &self.allow_hosts).await?;
        let client = self
            .client
            .as_ref()
            .map_err(|e| EgressError::Client(e.clone()))?;
        Ok(client.post(url.clone()))
    }
}

/// How a host name becomes addresses: the system resolver in service; a test
/// scripts the answers (a name that answers public first and loopback next).
pub trait Lookup: Send + Sync + 'static {
    /// The addresses of `host`, with `port`.
    fn lookup(&self, host: &str, port: u16)
    -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>>;
}

/// The system resolver (`getaddrinfo` on tokio's blocking pool).
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

/// The resolver behind [`GuardedClient`]: the lookup's answer, refused when
/// any address is internal and the host is not allow-listed. The connection
/// goes only to the addresses this one answer held.
struct GuardedResolver {
    allow_hosts: Arc<[String]>,
    lookup: Arc<dyn Lookup>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_hosts = Arc::clone(&self.allow_hosts);
        let host = name.as_str().to_ascii_lowercase();
        let answer = self.lookup.lookup(&host, 0);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = answer.await?;
            if !allow_hosts.contains(&host)
                && let Some(bad) = addrs.iter().find(|a| is_internal(a.ip()))
            {
                let refused = EgressError::Refused(format!("{host} resolves to {}", bad.ip()));
                return Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "10.0.0.1",
            "192.168.0.9",
            "172.16.5.5",
            "169.254.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "ff02::1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_allow_listed() {
        let url = Url::parse("http://127.0.0.1:9/hook").unwrap();
        assert!(matches!(
            check_address(&url, &[]).await,
            Err(EgressError::Refused(_))
        ));
        let addrs = check_address(&url, &["127.0.0.1".to_string()])
            .await
            .unwrap();
        assert_eq!(addrs, vec!["127.0.0.1:9".parse().unwrap()]);
        let ftp = Url::parse("ftp://example.com/x").unwrap();
        assert!(matches!(
            check_address(&ftp, &[]).await,
            Err(EgressError::BadUrl(_))
        ));
    }

    #[tokio::test]
    async fn metadata_and_mapped_literals_are_refused() {
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fd00:ec2::254]/latest/meta-data/",
            "http://10.0.0.1/",
            "http://[::ffff:127.0.0.1]:8080/",
        ] {
            let url = Url::parse(url).unwrap();
            assert!(
                matches!(check_address(&url, &[]).await, Err(EgressError::Refused(_))),
                "{url}"
            );
        }
    }

    #[tokio::test]
    async fn storage_check_parses_and_refuses() {
        assert!(matches!(
            check_url_for_storage("not a url", &[]).await,
            Err(EgressError::BadUrl(_))
        ));
        assert!(matches!(
            check_url_for_storage("file:///etc/passwd", &[]).await,
            Err(EgressError::BadUrl(_))
        ));
        assert!(matches!(
            check_url_for_storage("http://localhost:9/x", &[]).await,
            Err(EgressError::Refused(_))
        ));
        assert!(
            check_url_for_storage("http://localhost:9/x", &["localhost".to_string()])
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn the_shared_clients_resolver_refuses_internal_names_at_connect_time() {
        use reqwest::dns::Resolve;
        use std::str::FromStr;
        let guard = GuardedResolver {
            allow_hosts: Arc::from(Vec::<String>::new()),
            lookup: Arc::new(SystemLookup),
        };
        let name = reqwest::dns::Name::from_str("localhost").unwrap();
        let refused = guard.resolve(name).await.err().unwrap();
        assert!(
            refused.to_string().contains("localhost resolves to"),
            "{refused}"
        );
        let allowed = GuardedResolver {
            allow_hosts: Arc::from(vec!["localhost".to_owned()]),
            lookup: Arc::new(SystemLookup),
        };
        let name = reqwest::dns::Name::from_str("localhost").unwrap();
        let addrs: Vec<SocketAddr> = allowed.resolve(name).await.unwrap().collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
        assert!(!addrs.is_empty());
    }

    /// A name that answers a public address to the first lookup and loopback
    /// to the next, as a rebinding attacker's DNS would.
    struct Rebinding {
        lookups: std::sync::atomic::AtomicUsize,
        loopback_port: u16,
    }

    impl Lookup for Rebinding {
        fn lookup(
            &self,
            _host: &str,
            port: u16,
        ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
            let n = self
                .lookups
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let addr = if n == 0 {
                SocketAddr::from(([93, 184, 216, 34], port))
            } else {
                SocketAddr::from(([127, 0, 0, 1], self.loopback_port))
            };
            Box::pin(async move { Ok(vec![addr]) })
        }
    }

    #[tokio::test]
    async fn a_name_rebound_to_loopback_after_the_check_is_never_connected_to() {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().fallback({
            let hits = Arc::clone(&hits);
            move || {
                hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "internal" }
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let lookup = Arc::new(Rebinding {
            lookups: std::sync::atomic::AtomicUsize::new(0),
            loopback_port: port,
        });
        let client = GuardedClient::with_lookup(Vec::new(), lookup.clone());
        let url = Url::parse(&format!("http://rebind.example:{port}/hook")).unwrap();
        // The check sees the public address and lets the request start...
        let request = client.post(&url).await.unwrap();
        // ...the connection resolves again, gets loopback, and is refused.
        let error = request.send().await.unwrap_err();
        let chain = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ");
        assert!(
            chain.contains("rebind.example resolves to 127.0.0.1"),
            "{chain}"
        );
        assert_eq!(lookup.lookups.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}

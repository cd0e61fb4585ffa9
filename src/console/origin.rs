//! Where a console request came from: the `Origin` a browser names, parsed
//! into the triple browsers compare, and "this site", which a state-changing
//! request must come from (the check itself is `csrf::refuse_cross_site`).

use axum::http::uri::{Authority, Uri};
use axum::http::{HeaderMap, header};

/// A web origin: the scheme (http or https), the lowercased host and the
/// port, the default one filled in, so `http://a:80` and `http://a` are one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    https: bool,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of `text`, an `Origin` header's `scheme://host[:port]` or
    /// a URL (its path is not part of the origin); None for anything else,
    /// `null` and schemes other than http and https included.
    pub fn parse(text: &str) -> Option<Self> {
        let uri: Uri = text.trim().parse().ok()?;
        let https = match uri.scheme_str()? {
            s if s.eq_ignore_ascii_case("https") => true,
            s if s.eq_ignore_ascii_case("http") => false,
            _ => return None,
        };
        Self::at(https, uri.authority()?)
    }

    /// The origin a request for `authority` (its `Host`) has under the
    /// scheme `https` or http.
    fn at(https: bool, authority: &Authority) -> Option<Self> {
        // An origin never carries credentials; a header that does is not one.
        if authority.as_str().contains('@') || authority.host().is_empty() {
            return None;
        }
        Some(Self {
            https,
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
        })
    }
}

/// This site, as the console decides whether a request is its own: the
/// origin of the public URL (`--public-url`, or the bound address when none
/// is set), and the origin the request's own `Host` names under the public
/// URL's scheme, so a console reached by another name of the same server
/// (`http://localhost:8080` while the public URL says `127.0.0.1`, a proxy
/// that keeps `Host`) is itself too. A browser always sends the `Host` of
/// the server it is talking to, so a page elsewhere cannot make its `Origin`
/// match. The scheme is held to the public URL's: with an https public URL an
/// http page on the same host (what a network attacker would forge) is
/// another site.
#[derive(Debug, Clone)]
pub struct Site {
    public: Option<Origin>,
    https: bool,
}

impl Site {
    /// The site of a service whose public URL is `public_url`.
    pub fn new(public_url: &str) -> Self {
        let public = Origin::parse(public_url);
        let https = public
            .as_ref()
            .map_or(public_url.starts_with("https://"), |o| o.https);
        Self { public, https }
    }

    /// Whether `origin` is this site for a request with `headers` (its
    /// `Host`) or, over HTTP/2, the request target's `authority`.
    pub fn is(&self, origin: &Origin, headers: &HeaderMap, authority: Option<&Authority>) -> bool {
        if self.public.as_ref() == Some(origin) {
            return true;
        }
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<Authority>().ok())
            .or_else(|| authority.cloned());
        host.and_then(|h| Origin::at(self.https, &h))
            .is_some_and(|own| own == *origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn host(h: &'static str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::HOST, HeaderValue::from_static(h));
        m
    }

    #[test]
    fn origins_parse_to_scheme_host_and_port() {
        assert_eq!(
            Origin::parse("http://Example.COM"),
            Origin::parse("http://example.com:80")
        );
        assert_eq!(
            Origin::parse("https://example.com/console/"),
            Origin::parse("https://example.com:443")
        );
        assert_ne!(
            Origin::parse("http://example.com"),
            Origin::parse("https://example.com")
        );
        assert_ne!(
            Origin::parse("http://127.0.0.1:8080"),
            Origin::parse("http://127.0.0.1:8081")
        );
        for bad in [
            "null",
            "",
            "example.com",
            "ftp://example.com",
            "http://u@x.example",
        ] {
            assert_eq!(Origin::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn this_site_is_the_public_origin_and_the_requests_own_host() {
        let site = Site::new("https://voxline.example");
        let none = HeaderMap::new();
        let o = |s| Origin::parse(s).unwrap();
        assert!(site.is(&o("https://voxline.example"), &none, None));
        assert!(site.is(&o("https://voxline.example:443"), &host("x"), None));
        // Another name of the same server, under the public URL's scheme.
        assert!(site.is(&o("https://10.0.0.5:8443"), &host("10.0.0.5:8443"), None));
        assert!(!site.is(&o("http://10.0.0.5:8443"), &host("10.0.0.5:8443"), None));
        assert!(!site.is(&o("http://voxline.example"), &none, None));
        assert!(!site.is(&o("https://evil.example"), &host("voxline.example"), None));
        assert!(!site.is(&o("https://a.voxline.example"), &none, None));
        // HTTP/2 names the host in the request target instead.
        let h2: Authority = "10.0.0.5:8443".parse().unwrap();
        assert!(site.is(&o("https://10.0.0.5:8443"), &none, Some(&h2)));

        let local = Site::new("http://127.0.0.1:8080");
        assert!(local.is(&o("http://localhost:8080"), &host("localhost:8080"), None));
        assert!(!local.is(&o("http://127.0.0.1:9999"), &host("127.0.0.1:8080"), None));
    }
}

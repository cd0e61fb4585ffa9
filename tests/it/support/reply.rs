//! One answered request as the tests read it.

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

/// One answered request, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub text: String,
    /// The body as JSON; `Null` when it is not JSON.
    pub body: Value,
}

impl Reply {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A header parsed as an integer; panics when absent.
    pub fn header_i64(&self, name: &str) -> i64 {
        self.header(name)
            .unwrap_or_else(|| panic!("missing header {name}: {self:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("header {name} is not an integer: {self:?}"))
    }

    /// The `message` field of an error body; panics when the body is not `{message}` JSON.
    pub fn message(&self) -> &str {
        assert!(
            self.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.starts_with("application/json")),
            "not JSON: {self:?}"
        );
        self.body["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no message field: {self:?}"))
    }

    /// Asserts the status, showing the body on failure.
    #[track_caller]
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text
        );
        self
    }
}

/// Turns a reqwest response into a [`Reply`].
pub async fn reply(resp: reqwest::Response) -> Reply {
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("read body");
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        text,
        body,
    }
}

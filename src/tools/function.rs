//! A customer's own function tool: the model's arguments are POSTed as JSON
//! to the tool's URL, signed like our webhooks, through the egress guard
//! (private addresses refused unless allow-listed, the connection pinned to
//! the checked addresses), within the tool's timeout, and the answer read up
//! to 64 KiB.
//!
//! The request body is `{callId, toolCallId, name, arguments, variables}`
//! with headers `x-service-timestamp` (Unix seconds) and
//! `x-service-signature: v1=<hex HMAC-SHA256 of "<timestamp>.<body>">`.

use crate::egress::{self, BodyError, EgressError};
use reqwest::Url;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// The largest answer a function may give.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Calls function tools on behalf of calls.
#[derive(Clone)]
pub struct FunctionCaller {
    /// One guarded client for every call (TLS roots loaded once).
    http: egress::GuardedClient,
}

/// One function call: where, how long, the signing secret and what to send.
#[derive(Debug, Clone, Copy)]
pub struct FunctionCall<'a> {
    /// The tool's URL (http or https).
    pub url: &'a str,
    /// How long the whole call may take (resolve, connect, answer).
    pub timeout: Duration,
    /// The workspace's signing secret.
    pub secret: &'a str,
    /// The call the tool runs in.
    pub call_id: &'a str,
    /// The tool's name as the model called it.
    pub tool_name: &'a str,
    /// The model's id for this tool call.
    pub tool_call_id: &'a str,
    /// The call's variables.
    pub variables: &'a Map<String, Value>,
    /// The model's arguments.
    pub arguments: &'a Value,
}

/// Why a function call gave no result. The messages are short and plain:
/// they are told to the model and stored with the tool call.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// The URL does not parse or is not http(s).
    #[error("bad url: {0}")]
    BadUrl(String),
    /// The URL resolves into a network we do not call, and is not allow-listed.
    #[error("address refused: {0}")]
    Refused(String),
    /// No full answer within the timeout.
    #[error("timed out after {} s", .0.as_secs_f32())]
    Timeout(Duration),
    /// The function answered with a non-2xx status.
    #[error("answered {0}")]
    Status(u16),
    /// The answer is longer than [`MAX_RESPONSE_BYTES`].
    #[error("response larger than 64 KiB")]
    TooLarge,
    /// The host does not resolve or the connection failed.
    #[error("could not reach it: {0}")]
    Unreachable(String),
}

impl From<EgressError> for FunctionError {
    fn from(err: EgressError) -> Self {
        match err {
            EgressError::BadUrl(why) => Self::BadUrl(why),
            EgressError::Refused(why) => Self::Refused(why),
            other @ (EgressError::Resolve { .. } | EgressError::Client(_)) => {
                Self::Unreachable(other.to_string())
            }
        }
    }
}

impl FunctionCaller {
    /// A caller that lets `allow_hosts` (the `webhook_allow_hosts` setting)
    /// through even when they resolve to private addresses.
    pub fn new(allow_hosts: Vec<String>) -> Self {
        Self {
            http: egress::GuardedClient::new(allow_hosts),
        }
    }

    /// Calls the function and returns its answer: the JSON it sent, or
    /// `{"result": "<text>"}` when a 2xx answer is not JSON.
    pub async fn call(&self, call: FunctionCall<'_>) -> Result<Value, FunctionError> {
        // One deadline over everything, DNS included, so a slow resolver
        // cannot stretch the wait the caller (and the model) was promised.
        tokio::time::timeout(call.timeout, self.send(&call))
            .await
            .map_err(|_| FunctionError::Timeout(call.timeout))?
    }

    async fn send(&self, call: &FunctionCall<'_>) -> Result<Value, FunctionError> {
        let url = Url::parse(call.url).map_err(|e| FunctionError::BadUrl(e.to_string()))?;
        let body = json!({
            "callId": call.call_id,
            "toolCallId": call.tool_call_id,
            "name": call.tool_name,
            "arguments": call.arguments,
            "variables": call.variables,
        })
        .to_string()
        .into_bytes();
        // Wall-clock seconds, as for webhooks: receivers compare them with theirs.
        let timestamp = chrono::Utc::now().timestamp();
        let response = self
            .http
            .post(&url)
            .await?
            .timeout(call.timeout)
            .header("content-type", "application/json")
            .header("x-service-timestamp", timestamp.to_string())
            .header(
                "x-service-signature",
                egress::signature(call.secret, timestamp, &body),
            )
            .body(body)
            .send()
            .await
            .map_err(|e| transport_error(e, call.timeout))?;
        let status = response.status();
        if !status.is_success() {
            return Err(FunctionError::Status(status.as_u16()));
        }
        let bytes = egress::read_limited(response, MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge { .. } => FunctionError::TooLarge,
                BodyError::Read(e) => transport_error(e, call.timeout),
            })?;
        Ok(serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!({ "result": String::from_utf8_lossy(&bytes) })))
    }
}

fn transport_error(err: reqwest::Error, timeout: Duration) -> FunctionError {
    if err.is_timeout() {
        FunctionError::Timeout(timeout)
    } else if err.is_connect() {
        FunctionError::Unreachable("connection failed".into())
    } else {
        // Without the URL: the error is told to the model, the URL is in the tool.
        FunctionError::Unreachable(err.without_url().to_string())
    }
}

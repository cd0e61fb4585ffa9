//! The workspace's inbound routing URL: asked, for each ringing call, which
//! agent answers it and with which variables, or whether to refuse it. The
//! request is signed like webhooks and function tools (`x-service-signature`),
//! goes only to addresses the egress guard allows, and is bounded to 2 s; any
//! failure leaves the call to the number's own agent.

use crate::egress::{self, BodyError, GuardedClient};
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// How long the routing URL may take, DNS and body included.
pub const ROUTING_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest answer read.
const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// What the routing URL is told about a ringing call.
#[derive(Debug, Clone)]
pub struct RoutingQuestion<'a> {
    /// The number rung.
    pub to: &'a str,
    /// The caller.
    pub from: &'a str,
    /// `sim`, `twilio`, …
    pub carrier: &'a str,
    /// The name and variables of this number's latest call to the caller, if any.
    pub known_caller: Option<(String, Value)>,
}

/// The routing URL's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum RoutingAnswer {
    /// Refuse the call.
    Reject,
    /// Answer with this agent (`None`: the number's) and these extra variables.
    Route {
        /// The agent chosen, as the URL named it.
        agent_id: Option<String>,
        /// Variables for the call's placeholders.
        variables: Map<String, Value>,
    },
}

/// The routing URL's JSON answer as sent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerBody {
    #[serde(default)]
    reject: bool,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    variables: Option<Map<String, Value>>,
}

/// Why the routing URL gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    /// Not answered within [`ROUTING_TIMEOUT`].
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The guard refused the address, or the URL does not parse.
    #[error("{0}")]
    Egress(#[from] egress::EgressError),
    /// The connection or the read failed.
    #[error("{0}")]
    Transport(String),
    /// A non-2xx answer.
    #[error("answered {0}")]
    Status(u16),
    /// The answer is not the JSON object expected.
    #[error("answer is not {{agentId, variables}} or {{reject: true}}: {0}")]
    Body(String),
}

/// Asks routing URLs; one client for all of them.
#[derive(Clone)]
pub struct RoutingUrlClient {
    http: GuardedClient,
}

impl RoutingUrlClient {
    /// A client that lets `allow_hosts` (the `webhook_allow_hosts` setting) through.
    pub fn new(allow_hosts: Vec<String>) -> Self {
        Self {
            http: GuardedClient::new(allow_hosts),
        }
    }

    /// Asks `url` about a ringing call, signing with `secret`.
    pub async fn ask(
        &self,
        url: &str,
        secret: &str,
        question: &RoutingQuestion<'_>,
    ) -> Result<RoutingAnswer, RoutingError> {
        tokio::time::timeout(ROUTING_TIMEOUT, self.send(url, secret, question))
            .await
            .map_err(|_| RoutingError::Timeout(ROUTING_TIMEOUT))?
    }

    async fn send(
        &self,
        url: &str,
        secret: &str,
        question: &RoutingQuestion<'_>,
    ) -> Result<RoutingAnswer, RoutingError> {
        let url = Url::parse(url).map_err(|e| egress::EgressError::BadUrl(e.to_string()))?;
        let body = json!({
            "to": question.to,
            "from": question.from,
            "carrier": question.carrier,
            "knownCaller": question.known_caller.as_ref().map(|(name, variables)| json!({
                "name": name,
                "variables": variables,
            })),
        })
        .to_string()
        .into_bytes();
        let timestamp = chrono::Utc::now().timestamp();
        let response = self
            .http
            .post(&url)
            .await?
            .timeout(ROUTING_TIMEOUT)
            .header("content-type", "application/json")
            .header("x-service-timestamp", timestamp.to_string())
            .header(
                "x-service-signature",
                egress::signature(secret, timestamp, &body),
            )
            .body(body)
            .send()
            .await
            .map_err(|e| RoutingError::Transport(e.without_url().to_string()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(RoutingError::Status(status.as_u16()));
        }
        let bytes = egress::read_limited(response, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge { .. } => RoutingError::Body("larger than 16 KiB".into()),
                BodyError::Read(e) => RoutingError::Transport(e.without_url().to_string()),
            })?;
        let answer: AnswerBody =
            serde_json::from_slice(&bytes).map_err(|e| RoutingError::Body(e.to_string()))?;
        if answer.reject {
            return Ok(RoutingAnswer::Reject);
        }
        Ok(RoutingAnswer::Route {
            agent_id: answer.agent_id.filter(|id| !id.trim().is_empty()),
            variables: answer.variables.unwrap_or_default(),
        })
    }
}

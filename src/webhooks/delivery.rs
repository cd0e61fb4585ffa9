//! Delivers the webhook outbox (decisions §8): signed POSTs of JSON, retried
//! with exponential backoff for up to 8 attempts over about a day, refusing
//! addresses inside private networks unless the host is allow-listed, and
//! connecting only to the addresses that were checked ([`crate::egress`]).

use crate::background::leased_worker::{JobError, LeasedJob, Retry};
use crate::calls::recording_link::recording_link;
use crate::calls::tool_call_view::ToolCallView;
use crate::domain::CallId;
use crate::domain::NodeId;
use crate::domain::clock::SharedClock;
use crate::egress::{EgressError, GuardedClient};
use crate::postcall::analysis::view::{AnalysisView, merged_extracted};
use crate::secrets::server_secret::ServerSecret;
use crate::store::Store;
use crate::store::leased_jobs::{JobTable, Settle};
use crate::store::webhook_outbox::{DELIVERY_JOBS, DueDelivery};
use crate::store::{StoreError, decode_json};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::time::Duration;

/// Attempts before a delivery is given up.
pub const MAX_ATTEMPTS: i64 = 8;

/// Wait after the n-th failed attempt (1-based): about 22 hours in all.
const BACKOFF: [Duration; 7] = [
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(900),
    Duration::from_secs(3_600),
    Duration::from_secs(10_800),
    Duration::from_secs(21_600),
    Duration::from_secs(43_200),
];

/// Deliveries attempted per pass.
const BATCH: i64 = 32;

/// Per-attempt timeout.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long a node holds the deliveries it claimed: a pass's attempts run
/// concurrently, each within [`TIMEOUT`], so a live node records them well
/// before; a node that died mid-pass has its deliveries sent by a peer after it.
pub const LEASE: Duration = Duration::from_secs(60);

/// Why one attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The URL resolves into a private network and is not allow-listed.
    #[error("address refused: {0}")]
    AddressRefused(String),
    /// The URL is not usable.
    #[error("bad url: {0}")]
    BadUrl(String),
    /// The receiver could not be reached or timed out.
    #[error("request failed: {0}")]
    Request(String),
    /// The receiver answered with a non-2xx status.
    #[error("receiver answered {0}")]
    Status(u16),
    /// The call behind the event is gone.
    #[error("call {0} not found")]
    MissingCall(CallId),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl DeliveryError {
    /// Whether another attempt could succeed.
    fn retryable(&self) -> bool {
        !matches!(
            self,
            Self::AddressRefused(_)
                | Self::BadUrl(_)
                | Self::MissingCall(_)
                // Stored JSON that no longer parses will not parse on the
                // next attempt either; the delivery log shows which row.
                | Self::Store(StoreError::CorruptColumn { .. })
        )
    }
}

/// The address guard and the request signature live in [`crate::egress`],
/// shared with function tools; re-exported under their old paths.
pub use crate::egress::{check_address, signature, signatures};

impl From<EgressError> for DeliveryError {
    fn from(err: EgressError) -> Self {
        match err {
            EgressError::Refused(why) => Self::AddressRefused(why),
            EgressError::BadUrl(why) => Self::BadUrl(why),
            // DNS and client failures may pass: retry them, as before.
            other @ (EgressError::Resolve { .. } | EgressError::Client(_)) => {
                Self::Request(other.to_string())
            }
        }
    }
}

fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The JSON column `table.column` of the call's row `call_id`.
fn json_column(
    table: &'static str,
    column: &'static str,
    call_id: CallId,
    text: &str,
) -> Result<Value, StoreError> {
    decode_json(table, column, call_id, text)
}

impl DeliveryJobs {
    /// The body of a delivery, by its event.
    pub async fn delivery_body(&self, d: &DueDelivery) -> Result<Value, DeliveryError> {
        match d.event.as_str() {
            "rating.completed" => self.rating_completed_body(d).await,
            "number.opted_out" => self.opted_out_body(d).await,
            _ => self.call_completed_body(d).await,
        }
    }

    /// The body of a `number.opted_out` delivery: the number the callee asked
    /// never to be called on again, the call in which they asked, and the
    /// list entry as it is now (null once the number was taken off it).
    pub async fn opted_out_body(&self, d: &DueDelivery) -> Result<Value, DeliveryError> {
        let detail = self
            .store
            .call_detail(d.org_id, d.call_id)
            .await?
            .ok_or(DeliveryError::MissingCall(d.call_id))?;
        let call = &detail.call;
        let listed = self.store.is_do_not_call(d.org_id, &call.phone).await?;
        Ok(json!({
            "event": d.event,
            "eventId": d.event_id,
            "createdAt": iso(d.created_at),
            "phone": call.phone,
            "callId": call.id,
            "agentId": call.agent_id,
            "batchId": call.batch_id,
            "campaignId": call.campaign_id,
            "source": "opt-out",
            "listed": listed,
        }))
    }

    /// The body of a `rating.completed` delivery: the call's scorecard as it is now.
    pub async fn rating_completed_body(&self, d: &DueDelivery) -> Result<Value, DeliveryError> {
        let rating = self
            .store
            .rating(d.org_id, d.call_id)
            .await?
            .ok_or(DeliveryError::MissingCall(d.call_id))?;
        Ok(json!({
            "event": d.event,
            "eventId": d.event_id,
            "createdAt": iso(d.created_at),
            "callId": rating.call_id,
            "agentId": rating.agent_id,
            "rating": {
                "overall": rating.overall,
                "status": rating.status,
                "columns": json_column("ratings", "columns", rating.call_id, &rating.columns)?,
                "ratedAt": rating.rated_at.map(iso),
            },
        }))
    }

    /// The body of a `call.completed` (or `call.analyzed`) delivery, read from the
    /// call as it is now: `analysis`, `summary`, `extracted` and `success` once the
    /// analysis is done, `rating` is `{overall}` once the scorecard is.
    pub async fn call_completed_body(&self, d: &DueDelivery) -> Result<Value, DeliveryError> {
        let detail = self
            .store
            .call_detail(d.org_id, d.call_id)
            .await?
            .ok_or(DeliveryError::MissingCall(d.call_id))?;
        let turns = self.store.call_turns(d.org_id, d.call_id).await?;
        let rating = self
            .store
            .rating_overall(d.call_id)
            .await?
            .map_or(Value::Null, |overall| json!({ "overall": overall }));
        let analysis = self.store.analysis(d.org_id, d.call_id).await?;
        let tool_calls = self.store.tool_calls(d.call_id).await?;
        let recording_url = self
            .store
            .recording_file(d.org_id, d.call_id)
            .await?
            .map(|file| {
                recording_link(
                    &self.secret,
                    &self.public_base,
                    d.org_id,
                    d.call_id,
                    &file.format,
                    self.clock.now().timestamp(),
                )
            });
        let keypad = json_column("calls", "extracted", d.call_id, &detail.extracted)?;
        let tool_calls = tool_calls
            .iter()
            .map(|row| ToolCallView::from_row(d.call_id, row).map(|view| (row.turn_seq, view)))
            .collect::<Result<Vec<_>, _>>()?;
        let analysis_view = analysis.as_ref().map(AnalysisView::from_row).transpose()?;
        let success = analysis
            .as_ref()
            .and_then(|a| a.success.as_deref())
            .map(|text| json_column("call_analyses", "success", d.call_id, text))
            .transpose()?
            .unwrap_or(Value::Null);
        let call = &detail.call;
        Ok(json!({
            "event": d.event,
            "eventId": d.event_id,
            "createdAt": iso(d.created_at),
            "callId": call.id,
            "status": call.status,
            "direction": call.direction,
            "phone": call.phone,
            "fromNumber": call.from_number,
            "toNumber": call.to_number,
            "durationSeconds": call.duration_seconds,
            "transcript": turns.iter().map(|t| json!({
                "speaker": t.speaker,
                "text": t.text,
                "createdAt": iso(t.created_at),
                "toolCalls": tool_calls
                    .iter()
                    .filter(|(turn_seq, _)| *turn_seq == t.seq)
                    .map(|(_, view)| view)
                    .collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "toolCalls": tool_calls.iter().map(|(_, view)| view).collect::<Vec<_>>(),
            "calendarStatus": call.calendar_status,
            "calendarEventUrl": call.calendar_event_url,
            "calendarError": call.calendar_error,
            "transferredTo": call.transferred_to,
            "transferredAt": call.transferred_at.map(iso),
            "transferStatus": call.transfer_status,
            "transferDurationSeconds": call.transfer_duration_seconds,
            "transcriptText": detail.transcript_text,
            "summary": call.summary,
            "extracted": merged_extracted(&keypad, analysis.as_ref())?,
            "success": success,
            "analysis": analysis_view,
            "rating": rating,
            "recordingUrl": recording_url,
            "costPaise": call.cost_paise,
            "endedReason": call.ended_reason,
            "agentId": call.agent_id,
            "batchId": call.batch_id,
            "campaignId": call.campaign_id,
            "variables": json_column("calls", "variables", d.call_id, &detail.variables)?,
        }))
    }

    /// Sends one delivery through the guarded client (only checked addresses are
    /// connected to).
    async fn attempt(&self, d: &DueDelivery) -> Result<(), DeliveryError> {
        let url = reqwest::Url::parse(&d.url).map_err(|e| DeliveryError::BadUrl(e.to_string()))?;
        let request = self.http.post(&url).await?;
        let body = serde_json::to_vec(&self.delivery_body(d).await?)
            .map_err(|e| DeliveryError::Request(e.to_string()))?;
        let now = self.clock.now();
        let timestamp = now.timestamp();
        let secrets = d.signing_secrets(now.timestamp_millis());
        let response = request
            .timeout(TIMEOUT)
            .header("content-type", "application/json")
            .header("x-service-event", &d.event)
            .header("x-service-delivery", d.id.to_string())
            .header("x-service-timestamp", timestamp.to_string())
            .header(
                "x-service-signature",
                signatures(&secrets, timestamp, &body),
            )
            .body(body)
            .send()
            .await
            .map_err(|e| DeliveryError::Request(e.to_string()))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeliveryError::Status(status.as_u16()))
        }
    }
}

/// Webhook deliveries as a [`LeasedJob`] of this node, sent
/// through `http` (a [`GuardedClient`] with the server's allow-list): each is
/// claimed for this node under a [`LEASE`], so peers running the same pass
/// never send the same delivery, and only the lease holder records an attempt.
pub struct DeliveryJobs {
    /// Where deliveries and the calls they tell of are stored.
    pub store: Store,
    /// Time source for signatures and attempts.
    pub clock: SharedClock,
    /// This node, the holder of the leases it claims.
    pub node_id: NodeId,
    /// The base URL recording links in bodies point at.
    pub public_base: String,
    /// Signs recording links.
    pub secret: ServerSecret,
    /// The guarded client deliveries go through.
    pub http: GuardedClient,
}

impl LeasedJob for DeliveryJobs {
    type Row = DueDelivery;
    type Outcome = ();
    type Failure = DeliveryError;
    const KIND: &'static str = "webhook delivery";
    const TABLE: &'static JobTable = &DELIVERY_JOBS;
    const LEASE: Duration = LEASE;
    const BATCH: i64 = BATCH;
    const RETRY: Option<Retry> = Some(Retry {
        max_attempts: MAX_ATTEMPTS,
        waits: &BACKOFF,
    });

    fn key(row: &DueDelivery) -> String {
        row.id.to_string()
    }

    fn attempts_made(row: &DueDelivery) -> i64 {
        row.attempts
    }

    async fn run(&self, d: &DueDelivery) -> Result<(), JobError<DeliveryError>> {
        self.attempt(d).await.map_err(|failure| JobError::Failed {
            retryable: failure.retryable(),
            failure,
        })
    }

    async fn complete(&self, d: &DueDelivery, _sent: &()) -> Result<bool, StoreError> {
        self.record(d, Settle::Done).await
    }

    async fn fail(
        &self,
        d: &DueDelivery,
        failure: &DeliveryError,
        retry_at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let error = failure.to_string();
        let to = match retry_at {
            Some(at_ms) => Settle::Retry {
                error: &error,
                at_ms,
            },
            None => Settle::Failed { error: &error },
        };
        self.record(d, to).await
    }
}

impl DeliveryJobs {
    /// Records this node's attempt of `d`.
    async fn record(&self, d: &DueDelivery, to: Settle<'_>) -> Result<bool, StoreError> {
        let now = self.clock.now().timestamp_millis();
        self.store
            .record_delivery_attempt(d.id, &self.node_id, to, now)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_of_timestamp_dot_body() {
        // Independent vector: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test
        let sig = signature("whsec_test", 1_700_000_000, br#"{"a":1}"#);
        assert_eq!(
            sig,
            "v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
        assert_ne!(sig, signature("whsec_other", 1_700_000_000, br#"{"a":1}"#));
        assert_ne!(sig, signature("whsec_test", 1_700_000_001, br#"{"a":1}"#));
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_allow_listed() {
        let url = reqwest::Url::parse("http://127.0.0.1:9/hook").unwrap();
        let refused = DeliveryError::from(check_address(&url, &[]).await.unwrap_err());
        assert!(matches!(refused, DeliveryError::AddressRefused(_)));
        assert!(!refused.retryable());
        assert!(
            check_address(&url, &["127.0.0.1".to_string()])
                .await
                .is_ok()
        );
        let ftp = reqwest::Url::parse("ftp://example.com/x").unwrap();
        let bad = DeliveryError::from(check_address(&ftp, &[]).await.unwrap_err());
        assert!(matches!(bad, DeliveryError::BadUrl(_)));
        assert!(!bad.retryable());
    }
}

//! Orders for a call's owner node: a carrier status callback or a cancel
//! that reached another node (through a load balancer) is sent on
//! [`CALLS_CHANNEL`] and carried out by the node whose engine holds the call.

use super::service::ClusterService;
use crate::carriers::store_wiring::StatusForwarder;
use crate::domain::{CallId, NodeId, OrgId};
use crate::store::StoreError;
use crate::store::nodes::CALLS_CHANNEL;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use voxline_actors::carrier::{AnsweredBy, CarrierStatus};

/// One order, as JSON on the channel.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct CallOrder {
    /// The node that must carry it out.
    node: NodeId,
    /// The call.
    call: CallId,
    /// The call's workspace.
    org: String,
    /// What to do.
    order: Order,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "camelCase")]
enum Order {
    /// Apply a carrier status.
    Status { status: StatusText },
    /// Cancel the call (hang it up).
    Cancel,
}

/// A carrier status as text on the wire.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "is", rename_all = "kebab-case")]
enum StatusText {
    Ringing,
    Answered,
    NoAnswer,
    Busy,
    Failed { reason: String },
    Completed,
    AnsweredBy { by: ByText },
}

/// An answering-machine verdict as text on the wire.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum ByText {
    Human,
    Machine,
    Beep,
    GreetingEnded,
}

impl From<AnsweredBy> for ByText {
    fn from(by: AnsweredBy) -> Self {
        match by {
            AnsweredBy::Human => Self::Human,
            AnsweredBy::Machine => Self::Machine,
            AnsweredBy::Beep => Self::Beep,
            AnsweredBy::GreetingEnded => Self::GreetingEnded,
        }
    }
}

impl From<ByText> for AnsweredBy {
    fn from(by: ByText) -> Self {
        match by {
            ByText::Human => Self::Human,
            ByText::Machine => Self::Machine,
            ByText::Beep => Self::Beep,
            ByText::GreetingEnded => Self::GreetingEnded,
        }
    }
}

impl From<&CarrierStatus> for StatusText {
    fn from(s: &CarrierStatus) -> Self {
        match s {
            CarrierStatus::Ringing => Self::Ringing,
            CarrierStatus::Answered => Self::Answered,
            CarrierStatus::NoAnswer => Self::NoAnswer,
            CarrierStatus::Busy => Self::Busy,
            CarrierStatus::Failed(reason) => Self::Failed {
                reason: reason.clone(),
            },
            CarrierStatus::Completed => Self::Completed,
            CarrierStatus::AnsweredBy(by) => Self::AnsweredBy { by: (*by).into() },
        }
    }
}

impl From<StatusText> for CarrierStatus {
    fn from(s: StatusText) -> Self {
        match s {
            StatusText::Ringing => Self::Ringing,
            StatusText::Answered => Self::Answered,
            StatusText::NoAnswer => Self::NoAnswer,
            StatusText::Busy => Self::Busy,
            StatusText::Failed { reason } => Self::Failed(reason),
            StatusText::Completed => Self::Completed,
            StatusText::AnsweredBy { by } => Self::AnsweredBy(by.into()),
        }
    }
}

/// Where an order went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarded {
    /// Sent to the live node that owns the call.
    ToOwner(NodeId),
    /// No live peer owns the call (no node claimed it, or its node is dead
    /// and the reaper will end it).
    NoOwner,
}

impl ClusterService {
    /// Sends a carrier status for a call this node does not hold to its owner.
    pub async fn forward_status(
        &self,
        call_id: CallId,
        status: &CarrierStatus,
    ) -> Result<Forwarded, StoreError> {
        self.forward(
            call_id,
            String::new(),
            Order::Status {
                status: status.into(),
            },
        )
        .await
    }

    /// Sends a cancel for a call of `org` this node does not hold to its owner.
    pub async fn forward_cancel(
        &self,
        call_id: CallId,
        org: &str,
    ) -> Result<Forwarded, StoreError> {
        self.forward(call_id, org.to_string(), Order::Cancel).await
    }

    async fn forward(
        &self,
        call: CallId,
        org: String,
        order: Order,
    ) -> Result<Forwarded, StoreError> {
        let Some(bus) = &self.bus else {
            return Ok(Forwarded::NoOwner);
        };
        let Some(node) = self.store.call_node(call).await? else {
            return Ok(Forwarded::NoOwner);
        };
        let now = self.clock.now().timestamp_millis();
        let lease_ms = self.node.lease_ms();
        if node == self.node_id || !self.store.node_is_alive(&node, now, lease_ms).await? {
            return Ok(Forwarded::NoOwner);
        }
        let payload = CallOrder {
            node: node.clone(),
            call,
            org,
            order,
        };
        bus.notify(CALLS_CHANNEL, &serde_json::to_string(&payload)?)
            .await?;
        Ok(Forwarded::ToOwner(node))
    }

    /// Carries out the orders addressed to this node until `stop` fires.
    pub async fn run_call_orders(&self, stop: CancellationToken) {
        let Some(mut orders) = self.bus.as_ref().and_then(|b| b.subscribe(CALLS_CHANNEL)) else {
            return;
        };
        loop {
            let payload = tokio::select! {
                _ = stop.cancelled() => return,
                next = orders.recv() => match next {
                    Ok(payload) => payload,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "call orders lagged");
                        continue;
                    }
                    Err(_) => return,
                },
            };
            let Ok(order) = serde_json::from_str::<CallOrder>(&payload) else {
                continue; // The bus's resync marker, or a newer node's order.
            };
            if order.node != self.node_id {
                continue;
            }
            self.carry_out(order).await;
        }
    }

    async fn carry_out(&self, order: CallOrder) {
        let call = order.call;
        match order.order {
            Order::Status { status } => {
                if let Err(err) = self.engine.carrier_status(call.into(), status.into()) {
                    tracing::debug!(%call, error = %err, "forwarded carrier status for a call not live here");
                }
            }
            Order::Cancel => {
                // A call claimed a moment ago may still be on its way to its actor.
                // The bus is input like any other: an order naming no workspace is dropped.
                let Ok(org) = order.org.parse::<OrgId>() else {
                    tracing::warn!(%call, org = %order.org, "forwarded cancel names no workspace");
                    return;
                };
                for _ in 0..5 {
                    match self.engine.cancel(org.into(), call.into()).await {
                        Ok(voxline_actors::engine::CancelOutcome::NotFound) => {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                        Ok(_) => return,
                        Err(err) => {
                            tracing::warn!(%call, error = %err, "forwarded cancel failed");
                            return;
                        }
                    }
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl StatusForwarder for ClusterService {
    async fn forward_status(&self, call_id: CallId, status: CarrierStatus) {
        match ClusterService::forward_status(self, call_id, &status).await {
            Ok(Forwarded::ToOwner(node)) => {
                tracing::debug!(call = %call_id, %node, "carrier status forwarded to the call's node");
            }
            Ok(Forwarded::NoOwner) => {}
            Err(err) => {
                tracing::warn!(call = %call_id, error = %err, "could not forward a carrier status")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_round_trip_as_json() {
        for status in [
            CarrierStatus::Ringing,
            CarrierStatus::Answered,
            CarrierStatus::NoAnswer,
            CarrierStatus::Busy,
            CarrierStatus::Failed("carrier said 503".into()),
            CarrierStatus::Completed,
            CarrierStatus::AnsweredBy(AnsweredBy::Human),
            CarrierStatus::AnsweredBy(AnsweredBy::Machine),
            CarrierStatus::AnsweredBy(AnsweredBy::Beep),
            CarrierStatus::AnsweredBy(AnsweredBy::GreetingEnded),
        ] {
            let order = CallOrder {
                node: "node-a".parse().unwrap(),
                call: CallId::new(),
                org: String::new(),
                order: Order::Status {
                    status: (&status).into(),
                },
            };
            let text = serde_json::to_string(&order).unwrap();
            let back: CallOrder = serde_json::from_str(&text).unwrap();
            assert_eq!(back, order);
            let Order::Status { status: again } = back.order else {
                panic!("a status order");
            };
            assert_eq!(CarrierStatus::from(again), status);
        }
    }
}

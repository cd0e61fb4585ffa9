//! Outgoing webhooks: the durable outbox's delivery worker and request
//! signing; deliveries pass the address guard in [`crate::egress`], which
//! keeps them off private networks.

pub mod delivery;
pub mod events;
pub mod subscriptions;

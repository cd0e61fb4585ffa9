//! Outgoing webhooks: the durable outbox's delivery worker, request signing
//! and the address guard that keeps deliveries off private networks.

pub mod delivery;
pub mod events;

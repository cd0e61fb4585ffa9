//! Inbound calling (issue 31): a person calls one of the workspace's numbers
//! and the number's agent answers, through the same engine, slots, records
//! and analysis as outbound calls. The carriers' side of the webhook is
//! `carriers::inbound`; this room decides and starts the call.

pub mod routing;
pub mod routing_url;
pub mod service;
pub mod sim_phone;
pub mod workspace_rules;

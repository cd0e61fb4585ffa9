//! Voxline: a service that places automated voice calls run by AI agents.
//!
//! The library holds everything the `voxline` binary runs; integration tests
//! start the same [`server::Server`] on port 0.

pub mod admin_cli;
pub mod admin_ops;
pub mod agent_cache;
pub mod api_key;
pub mod batches;
pub mod bootstrap;
pub mod calls;
pub mod carriers;
pub mod clock;
pub mod config;
pub mod credentials;
pub mod domain;
pub mod http;
pub mod janitor;
pub mod key_cache;
pub mod loadgen;
pub mod marked_cache;
pub mod providers;
pub mod rate_limit;
pub mod ratings;
pub mod server;
pub mod sim_callee;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod webhook_delivery;

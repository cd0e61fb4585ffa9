//! Voxline: a service that places automated voice calls run by AI agents.
//!
//! The library holds everything the `voxline` binary runs; integration tests
//! start the same [`app::server::Server`] on port 0. Each module is a room
//! with one reason to change; ARCHITECTURE.md draws them and the one-way
//! arrows between them.

pub mod access;
pub mod admin;
pub mod agents;
pub mod app;
pub mod background;
pub mod batches;
pub mod calls;
pub mod carriers;
pub mod cluster;
pub mod config;
pub mod console;
pub mod domain;
pub mod egress;
pub mod http;
pub mod inbound;
pub mod loadgen;
pub mod postcall;
pub mod providers;
pub mod recordings;
pub mod secrets;
pub mod sip;
pub mod store;
pub mod tools;
pub mod webhooks;

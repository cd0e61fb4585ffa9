//! Voxline's integration tests, one binary so the app is linked once: the
//! HTTP API suite, the carrier and provider clients against local fakes,
//! carrier media protocols through the real server, the loadgen binary, the
//! workspace's module graph, and the Smart Turn model on real speech. Every
//! test that runs the app spawns it through `support`.
//!
//! `cargo test` runs them all on SQLite; the Postgres pass is
//! `VOXLINE_TEST_DATABASE_URL=postgres://… cargo test --test it api:: -- --include-ignored`.

// Tests may unwrap: a panic there is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod carrier_transfers;
mod carriers;
mod console;
mod loadgen;
mod local_models;
mod media_protocols;
mod module_graph;
mod properties;
mod providers;
mod sip_calls;
mod sip_signaling;
mod smart_turn;
mod support;
mod telnyx_calls;
mod tools_calendar;
mod tools_function;

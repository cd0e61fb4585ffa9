//! Voxline call engine: the ractor supervision tree, carriers, provider
//! traits, the simulated providers and the per-call conversation loop.

pub mod callee;
pub mod carrier;
pub mod conversation;
pub mod ended_reason;
pub mod engine;
pub mod ids;
pub mod media_token;
pub mod providers;
pub mod signing;
pub mod tools;

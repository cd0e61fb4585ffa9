//! Voxline call engine: the ractor supervision tree, carriers, provider
//! traits and the per-call conversation loop; and, in [`sim`], the simulated
//! world the service runs on by default (carrier, callee, providers, analyst).

pub mod carrier;
pub mod conversation;
pub mod ended_reason;
pub mod engine;
pub mod ids;
pub mod media_token;
pub mod providers;
pub mod signing;
pub mod sim;
pub mod tools;

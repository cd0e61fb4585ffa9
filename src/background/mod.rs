//! Periodic upkeep that no request waits for: number renewals, agent
//! dormancy and retention.

pub mod janitor;

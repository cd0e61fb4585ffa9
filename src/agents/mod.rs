//! Agents on the service side: creating and editing them under the spec's
//! rules, their lifecycle (soft delete, restore, activate, deactivate), and the
//! text chat with one. The API and the console both call these, so an agent
//! saved from either passes exactly the same checks.

pub mod chat;
pub mod service;

//! The application: resolved settings, logging, the shared state handlers and
//! workers run on, and the startup and shutdown sequence that wires every
//! other room together.

pub mod server;
pub mod state;
pub mod telemetry;

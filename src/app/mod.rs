//! The application: logging and metrics, and the startup and shutdown
//! sequence that builds every service and wires the other rooms together.

pub mod server;
pub mod telemetry;

//! Several `voxline serve` nodes on one Postgres database acting as one
//! service: node heartbeats and leases, the message bus between nodes, and
//! the recovery of a dead node's work. SQLite is one node: the bus is absent
//! and recovery covers this node's own previous run.

pub mod bus;
pub mod call_orders;
pub mod dispatcher;
pub mod heartbeat;
pub mod node_status;
pub mod procstat;
pub mod recovery;
pub mod service;

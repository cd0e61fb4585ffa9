//! Platform administration: the `voxline admin` CLI, the operations it shares
//! with first-run bootstrap, and the Demo workspace bootstrap itself.

pub mod bootstrap;
pub mod cli;
pub mod ops;
pub mod people;
pub mod sim_call;

//! What this node knows of itself that its dispatcher needs at once: whether
//! an operator drained it and whether it is above its load threshold.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// This node's draining flag and load, shared by the heartbeat (which writes
/// them) and the dispatcher (which takes no call while either says stop).
#[derive(Debug, Default)]
pub struct NodeStatus {
    draining: AtomicBool,
    overloaded: AtomicBool,
    cpu_permille: AtomicI64,
}

impl NodeStatus {
    /// Whether the node may claim new calls from the queue.
    pub fn takes_calls(&self) -> bool {
        !self.draining.load(Ordering::SeqCst) && !self.overloaded.load(Ordering::SeqCst)
    }

    /// Whether an operator drained the node.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Sets the draining flag.
    pub fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::SeqCst);
    }

    /// Whether the node was above its load threshold at the last measure.
    pub fn is_overloaded(&self) -> bool {
        self.overloaded.load(Ordering::SeqCst)
    }

    /// Records the last measure of load.
    pub fn set_load(&self, cpu_permille: i64, overloaded: bool) {
        self.cpu_permille.store(cpu_permille, Ordering::SeqCst);
        self.overloaded.store(overloaded, Ordering::SeqCst);
    }

    /// CPU use at the last measure, per mille of one core.
    pub fn cpu_permille(&self) -> i64 {
        self.cpu_permille.load(Ordering::SeqCst)
    }
}

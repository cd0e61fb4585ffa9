//! What the calls room works with, gathered once at start: placing calls,
//! dispatching stored ones and ending those that can never be dialed all
//! go through a [`CallService`], so their signatures say what they touch.

use super::ledger::StoreLedger;
use super::media_stream::CallEngine;
use crate::domain::NodeId;
use crate::domain::calling_hours::CallingHours;
use crate::domain::clock::SharedClock;
use crate::store::Store;
use std::sync::Arc;

/// The calls room's dependencies; cheap to clone.
#[derive(Clone)]
pub struct CallService {
    /// Where calls are stored and claimed.
    pub(crate) store: Store,
    /// Time source for queue stamps and ends.
    pub(crate) clock: SharedClock,
    /// The engine that runs the calls.
    pub(crate) engine: CallEngine,
    /// Records outcomes, also of calls the engine never held.
    pub(crate) ledger: Arc<StoreLedger>,
    /// This node among the nodes sharing the database.
    pub(crate) node_id: NodeId,
    /// Seconds an unanswered sim call rings.
    pub(crate) ring_seconds: u32,
    /// Calling hours of workspaces that set none (the server's setting).
    pub(crate) default_calling_hours: CallingHours,
}

impl CallService {
    /// The service over these parts.
    pub fn new(
        store: Store,
        clock: SharedClock,
        engine: CallEngine,
        ledger: Arc<StoreLedger>,
        node_id: NodeId,
        ring_seconds: u32,
        default_calling_hours: CallingHours,
    ) -> Self {
        Self {
            store,
            clock,
            engine,
            ledger,
            node_id,
            ring_seconds,
            default_calling_hours,
        }
    }
}

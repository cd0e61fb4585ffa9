//! Stores the engine's progress reports (ringing, answered, the carrier's call
//! id) in batches, so a call actor does not wait on the database to go on.
//!
//! A burst of 1,000 placed calls brings about 3,000 such reports within a
//! second or two. Written one transaction each, on SQLite's single writer,
//! they queued for seconds, and an answered call's actor waited for its own
//! before it started the conversation: the greeting came seconds late. Here
//! one task takes whatever has queued, up to [`MAX_BATCH`], and writes it in
//! one transaction, in the order it was reported.
//!
//! A report that is queued and not yet written when the process dies is
//! lost; the call's end, which is what bills it and carries its answer time,
//! is written by the ledger itself after a [`ProgressWriter::flush`], and a
//! restart reconciles the calls that were live.

use crate::store::Store;
use crate::store::calls::CallProgress;
use tokio::sync::{mpsc, oneshot};

/// Reports written in one transaction at most.
pub const MAX_BATCH: usize = 256;

/// What the writer's task is asked to do, in order.
enum Order {
    /// Store this report.
    Write(CallProgress),
    /// Answer once everything ordered before is stored (or has failed).
    Flush(oneshot::Sender<()>),
}

/// The handle reports are sent through; cheap to clone. The task ends when
/// every handle is dropped, after writing what was queued.
#[derive(Clone)]
pub struct ProgressWriter {
    orders: mpsc::UnboundedSender<Order>,
}

impl ProgressWriter {
    /// Starts the writing task on the current runtime.
    pub fn start(store: Store) -> Self {
        let (orders, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_batches(store, queue));
        Self { orders }
    }

    /// Queues `report`; false when the task is gone (the runtime is shutting down).
    pub fn write(&self, report: CallProgress) -> bool {
        self.orders.send(Order::Write(report)).is_ok()
    }

    /// Returns once every report queued before this call is stored, or its
    /// write failed (and was logged).
    pub async fn flush(&self) {
        let (done, stored) = oneshot::channel();
        if self.orders.send(Order::Flush(done)).is_ok() {
            let _ = stored.await;
        }
    }
}

/// The task: takes what queued, writes it in one transaction, answers the flushes.
async fn write_batches(store: Store, mut queue: mpsc::UnboundedReceiver<Order>) {
    let mut orders = Vec::with_capacity(MAX_BATCH);
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut flushed = Vec::new();
    while queue.recv_many(&mut orders, MAX_BATCH).await > 0 {
        for order in orders.drain(..) {
            match order {
                Order::Write(report) => batch.push(report),
                Order::Flush(done) => flushed.push(done),
            }
        }
        write(&store, &batch).await;
        batch.clear();
        for done in flushed.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Writes `batch` in one transaction; should that fail, each report on its
/// own, so one report the database refuses does not lose the others.
async fn write(store: &Store, batch: &[CallProgress]) {
    let Err(err) = store.record_progress(batch).await else {
        return;
    };
    if batch.len() == 1 {
        tracing::warn!(report = ?batch[0], error = %err, "could not record a call's progress");
        return;
    }
    tracing::warn!(reports = batch.len(), error = %err, "a batch of call progress failed; writing each");
    for report in batch {
        if let Err(err) = store.record_progress(std::slice::from_ref(report)).await {
            tracing::warn!(report = ?report, error = %err, "could not record a call's progress");
        }
    }
}

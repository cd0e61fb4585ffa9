//! The nodes' message bus: Postgres `LISTEN/NOTIFY`, fanned out in-process.
//!
//! One listening connection per node; every subscriber gets a
//! [`tokio::sync::broadcast`] receiver of its channel's payloads. A
//! notification sent while the connection was down is lost, so after a
//! reconnect every channel receives [`RESYNC`]: whatever the subscriber
//! caches or waits for may have changed, and it must assume so.

use crate::store::{Store, StoreResult};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The payload every channel receives after the listener reconnected.
pub const RESYNC: &str = "*";

/// Fans Postgres notifications out to in-process subscribers; cheap to clone.
#[derive(Clone)]
pub struct ClusterBus {
    store: Store,
    channels: Arc<HashMap<String, broadcast::Sender<String>>>,
}

impl ClusterBus {
    /// Listens on `channels` until `stop` fires; None on SQLite (one node,
    /// nothing to hear).
    pub async fn start(
        store: &Store,
        channels: &[&'static str],
        tasks: &TaskTracker,
        stop: &CancellationToken,
    ) -> StoreResult<Option<Self>> {
        let Some(mut listener) = store.listen(channels).await? else {
            return Ok(None);
        };
        let senders: HashMap<String, broadcast::Sender<String>> = channels
            .iter()
            .map(|c| (c.to_string(), broadcast::channel(1024).0))
            .collect();
        let bus = Self {
            store: store.clone(),
            channels: Arc::new(senders),
        };
        let fanout = bus.channels.clone();
        let stop = stop.clone();
        let store = store.clone();
        tasks.spawn(async move {
            loop {
                let next = tokio::select! {
                    next = listener.try_recv() => next,
                    _ = stop.cancelled() => return,
                    // The listener holds a pooled connection; the close waits for it.
                    () = store.closed() => return,
                };
                match next {
                    Ok(Some(note)) => {
                        if let Some(tx) = fanout.get(note.channel()) {
                            let _ = tx.send(note.payload().to_string());
                        }
                    }
                    // The connection dropped; the next try_recv reconnects.
                    Ok(None) => {
                        tracing::warn!("cluster bus reconnected; subscribers resync");
                        for tx in fanout.values() {
                            let _ = tx.send(RESYNC.to_string());
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "cluster bus listener failed; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                            _ = stop.cancelled() => return,
                        }
                    }
                }
            }
        });
        Ok(Some(bus))
    }

    /// A receiver of `channel`'s payloads; None when the bus does not listen on it.
    pub fn subscribe(&self, channel: &str) -> Option<broadcast::Receiver<String>> {
        self.channels.get(channel).map(broadcast::Sender::subscribe)
    }

    /// Sends `payload` to every node listening on `channel`, this one included.
    pub async fn notify(&self, channel: &str, payload: &str) -> StoreResult<()> {
        self.store.notify(channel, payload).await
    }
}

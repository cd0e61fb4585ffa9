//! One concurrency limit per LLM endpoint for post-call work (analyses and
//! ratings), so a backlog of finished calls never floods the model the live
//! calls talk to. Live turns do not take a slot: they never queue behind it.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The per-endpoint slots.
#[derive(Debug)]
pub struct LlmSlots {
    per_endpoint: usize,
    endpoints: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl LlmSlots {
    /// Slots allowing `per_endpoint` requests in flight to each endpoint.
    pub fn new(per_endpoint: u32) -> Self {
        Self {
            per_endpoint: usize::try_from(per_endpoint.max(1)).unwrap_or(1),
            endpoints: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a slot of `endpoint`; the request holds it until dropped.
    /// (None only if the semaphore were closed, which it never is.)
    pub async fn acquire(&self, endpoint: &str) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut endpoints = self.endpoints.lock();
            Arc::clone(
                endpoints
                    .entry(endpoint.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(self.per_endpoint))),
            )
        };
        semaphore.acquire_owned().await.ok()
    }

    /// Requests in flight to `endpoint` now.
    pub fn in_flight(&self, endpoint: &str) -> usize {
        self.endpoints
            .lock()
            .get(endpoint)
            .map_or(0, |s| self.per_endpoint - s.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn each_endpoint_admits_its_own_limit() {
        let slots = Arc::new(LlmSlots::new(2));
        let a1 = slots.acquire("a").await;
        let _a2 = slots.acquire("a").await;
        let _b = slots.acquire("b").await;
        assert_eq!(slots.in_flight("a"), 2);
        assert_eq!(slots.in_flight("b"), 1);
        let waiting = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire("a").await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "a third request to a waits");
        drop(a1);
        let _a3 = waiting.await.unwrap();
        assert_eq!(slots.in_flight("a"), 2);
    }
}

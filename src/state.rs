//! Shared state handed to every HTTP handler and background job.

use crate::clock::SharedClock;
use crate::config::Settings;
use crate::rate_limit::RateLimiter;
use crate::store::Store;
use std::sync::Arc;

/// The application's shared state; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<AppInner>,
}

/// What [`AppState`] points at.
pub struct AppInner {
    /// Storage.
    pub store: Store,
    /// Time source.
    pub clock: SharedClock,
    /// Per-key request caps.
    pub limiter: Arc<RateLimiter>,
    /// Resolved settings.
    pub settings: Settings,
    /// Server secret for signatures.
    pub secret: Vec<u8>,
}

impl AppState {
    /// Wraps the parts.
    pub fn new(inner: AppInner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }
}

impl std::ops::Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.inner
    }
}

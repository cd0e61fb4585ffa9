//! The server secret: the key every signature this server makes (media
//! tokens, recording links, credential encryption) is derived from.

use crate::store::Store;
use anyhow::Context as _;
use std::sync::Arc;

/// The server's signing secret; cheap to clone, never printed.
#[derive(Clone)]
pub struct ServerSecret(Arc<[u8]>);

impl ServerSecret {
    /// Wraps the secret's bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes.into())
    }

    /// The secret this server signs with: the configured one (`configured`
    /// true, read by `load`), else the data directory's (also read by `load`).
    /// Nodes sharing a database share one secret (the first node's), so a
    /// media token or recording link signed by one verifies on the others; the
    /// admin CLI reads it the same way to sign as the server.
    pub async fn resolve(
        store: &Store,
        configured: bool,
        load: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    ) -> anyhow::Result<Vec<u8>> {
        if configured || !store.is_shared() {
            return load();
        }
        let fresh =
            String::from_utf8(load()?).context("the data directory's secret is not text")?;
        Ok(store.shared_secret(&fresh).await?.into_bytes())
    }
}

impl std::ops::Deref for ServerSecret {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for ServerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerSecret(..)")
    }
}

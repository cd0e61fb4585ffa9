//! The server secret: the key every signature this server makes (media
//! tokens, recording links, credential encryption) is derived from.

use std::sync::Arc;

/// The server's signing secret; cheap to clone, never printed.
#[derive(Clone)]
pub struct ServerSecret(Arc<[u8]>);

impl ServerSecret {
    /// Wraps the secret's bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes.into())
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

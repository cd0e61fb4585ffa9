//! The media crate's one error type.

/// Everything that can go wrong inside the media crate.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// An inbound carrier message could not be parsed.
    #[error("malformed carrier message: {0}")]
    Malformed(String),
}

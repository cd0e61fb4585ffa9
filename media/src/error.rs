//! The media crate's one error type.

/// Everything that can go wrong inside the media crate.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// An inbound carrier message could not be parsed.
    #[error("malformed carrier message: {0}")]
    Malformed(String),
    /// A sample rate outside the set a component supports.
    #[error("unsupported sample rate: {0} Hz")]
    UnsupportedSampleRate(u32),
    /// A caller-supplied buffer has the wrong length for the operation.
    #[error("buffer length {actual} does not fit, expected {expected}")]
    BufferLength {
        /// The length the operation needed (exact or minimum, see the call).
        expected: usize,
        /// The length that was passed.
        actual: usize,
    },
    /// The resampler backend refused to build or to process a chunk.
    #[error("resampler: {0}")]
    Resampler(String),
    /// A character that is not one of the sixteen DTMF keys.
    #[error("not a DTMF digit: {0:?}")]
    InvalidDtmfDigit(char),
    /// A WAV stream that this crate cannot read or that grew past the format's limits.
    #[error("invalid WAV: {0}")]
    InvalidWav(String),
    /// The Opus codec reported an error.
    #[error("opus: {0}")]
    Opus(String),
    /// Reading or writing an audio file failed.
    #[error("audio I/O: {0}")]
    Io(#[from] std::io::Error),
}

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
    /// A carrier name that is not one of the supported carriers.
    #[error("unknown carrier: {0:?}")]
    UnknownCarrier(String),
    /// A carrier announced an audio encoding this crate cannot carry.
    #[error("unsupported audio encoding: {0:?}")]
    UnsupportedEncoding(String),
    /// A carrier media payload that is not valid base64.
    #[error("invalid base64 audio payload: {0}")]
    InvalidBase64(base64::DecodeError),
    /// A websocket message of a kind the carrier never sends.
    #[error("unexpected {0} from this carrier")]
    UnexpectedFrame(&'static str),
}

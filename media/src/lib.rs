//! Voxline media: pure, synchronous signal processing and carrier wire formats.
//!
//! Nothing here touches tokio or the network. Every per-frame entry point works
//! on caller-owned buffers so the call engine never allocates per audio frame.

pub mod amd;
pub mod carrier;
pub mod dtmf;
pub mod endpoint;
pub mod error;
pub mod g711;
mod goertzel;
pub mod ogg;
#[cfg(feature = "opus")]
pub mod opus;
pub mod pcm;
pub mod resample;
pub mod rtp;
pub mod sdp;
pub mod synth;
pub mod turn_taking;
pub mod vad;
pub mod wav;
pub mod whisper_mel;

pub use error::MediaError;

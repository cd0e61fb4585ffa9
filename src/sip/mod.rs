//! The SIP carrier (issue 33): our own trunk, with RTP media instead of a carrier's websocket.
//!
//! `rtp_ports` binds each call's RTP socket in the configured port range; `rtp_transport` is
//! that socket as the conversation loop's `MediaTransport`, pacing our audio out and
//! playing the part a websocket carrier plays.

pub mod rtp_ports;
pub mod rtp_transport;

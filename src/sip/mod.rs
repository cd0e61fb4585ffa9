//! The `sip` carrier (issue 33): calls out and in over a workspace's own SIP
//! trunk or PBX, with the audio on RTP, and no websocket vendor between.
//!
//! - `settings`: where the user agent listens, the address it advertises, the
//!   RTP port range, SIP over TLS;
//! - `tls`: the trust store for trunks on TLS, and the TLS listener's config;
//! - `trunks`: a workspace's trunk, read from its sealed `sip` credential;
//! - `user_agent`: the one rsipstack endpoint (transactions, dialogs, digest
//!   auth) and its loop over requests from outside;
//! - `carrier`: [`SipCarrier`](carrier::SipCarrier), the engine's `Carrier`
//!   over INVITE, CANCEL and BYE;
//! - `inbound`: new INVITEs checked (flood limit, number, source) and answered
//!   through the inbound service;
//! - `invite_flood`: the per-source INVITE rate limit;
//! - `media_leg`: an answered call's RTP leg, as the carrier hands it over;
//! - `registrations`: REGISTER, and its refresh, with trunks that want it;
//! - `rtp_ports`: each call's RTP socket, bound in the configured port range;
//! - `rtp_transport`: that socket as the conversation loop's `MediaTransport`,
//!   pacing our audio out and playing the part a websocket carrier plays.

pub mod carrier;
pub mod inbound;
pub mod invite_flood;
pub mod media_leg;
pub mod registrations;
pub mod rtp_ports;
pub mod rtp_transport;
pub mod settings;
pub mod tls;
pub mod trunks;
pub mod user_agent;

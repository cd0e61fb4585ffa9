//! The sim room: the simulated world a call can run in end to end on one machine, with no
//! vendor. These are products, not test doubles: they are the default carrier and providers,
//! what the load generator drives and what the integration tests call through.
//!
//! - [`carrier`]: the sim carrier, which dials nobody and answers by opening a real media
//!   websocket to our own endpoint (and hands transferred callees to a simulated person);
//! - [`callee`]: the simulated person (or voicemail, or phone menu) at the other end: its
//!   script, its voice, its keypad, its end of the Twilio media stream and its load report;
//! - [`lines`]: how a script line with pauses and backchannels is said and heard, shared by
//!   the callee (which says it) and the sim ASR (which transcribes it);
//! - [`providers`]: the sim ASR, LLM (and how it uses tools) and TTS, and
//!   [`Providers::sim`](crate::providers::Providers::sim), which builds them;
//! - [`analyst`] and [`scorer`]: how the sim LLM answers the post-call analysis and
//!   scorecard requests, deterministically, from the transcript.
//!
//! The arrows point one way: the sim room uses the engine's traits and types (`carrier`,
//! `providers`, `tools`' names, `conversation`'s media transport), and no module of the
//! engine imports the sim room; the service picks it where it builds a call's carrier and
//! providers. `tests/it/module_graph.rs` holds the arrow.

pub mod analyst;
pub mod callee;
pub mod carrier;
pub mod lines;
pub mod providers;
pub mod scorer;

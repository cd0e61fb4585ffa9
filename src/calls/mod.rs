//! Calls on the service side: placing them, dispatching stored calls to the
//! engine, and the ledger through which the engine records their outcomes.

pub mod call_tools;
pub mod calling_hours;
pub mod dispatch;
pub mod do_not_call;
pub mod job;
pub mod ledger;
pub mod media_stream;
pub mod placement;
pub mod progress_writer;
pub mod recording_link;
pub mod runner;
pub mod service;
pub mod sim_callee;
pub mod sip_media;
pub mod test_call;
pub mod tool_call_view;
pub mod welcome_cache;

//! Post-call ratings (scorecards): which template a call is scored with, how a
//! model's scorecard is asked for and checked, the background worker that
//! rates pending calls, and the spreadsheet export.

pub mod export;
pub mod filter;
pub mod regenerate;
pub mod scoring;
pub mod sheets;
pub mod template;
pub mod worker;

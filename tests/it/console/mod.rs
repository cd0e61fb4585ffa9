//! The web console: plain HTTP tests of its rules (sessions, roles, CSRF,
//! escaping) and browser tests that drive a real headless Chromium through
//! chromedriver (skipped with a message when either is absent).

mod agents;
mod batches;
mod calls;
mod cross_site;
mod do_not_call;
mod foundation;
mod keys;
mod numbers;
mod ratings;
mod settings;
pub mod support;
mod team;
mod webhooks;

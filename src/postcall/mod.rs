//! The post-call pipeline: work that runs on a call after it ended, from a
//! durable job written with the call's end and claimed with a lease: the
//! analysis (summary, extracted data, success) and the rating (scorecard).
//! Both ask the agent's LLM through one per-endpoint limit.

pub mod analysis;
pub mod llm_slots;
pub mod ratings;
pub mod sim_delay;

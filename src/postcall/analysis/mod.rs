//! Post-call analysis: an agent's plan (summary, fields, success rubric)
//! asked of its LLM once the call ended, checked against the plan's schema,
//! and stored with the webhooks that waited for it.

pub mod analyst;
pub mod view;
pub mod worker;

//! The post-call pipeline: work that runs on a call after it ended, from a
//! durable job written with the call's end and claimed with a lease: the
//! analysis (summary, extracted data, success) and the rating (scorecard).
//! Both ask the agent's LLM through one per-endpoint limit.

pub mod analysis;
pub mod llm_slots;
pub mod ratings;
pub mod service;
pub mod sim_delay;

/// Why a post-call job (analysis or rating) failed, as its row records it.
/// Failures are final: the model was already retried within the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostcallFailure {
    /// Why, as the row's error shows it.
    pub reason: String,
    /// Model calls the job made before it gave up.
    pub attempts: i64,
}

impl PostcallFailure {
    /// The job's failure, for [`crate::background::leased_worker`].
    fn job_error(
        reason: String,
        attempts: i64,
    ) -> crate::background::leased_worker::JobError<Self> {
        crate::background::leased_worker::JobError::Failed {
            failure: Self { reason, attempts },
            retryable: false,
        }
    }
}

impl std::fmt::Display for PostcallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

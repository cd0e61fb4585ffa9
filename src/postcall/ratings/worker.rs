//! The rating worker: ratings are a [`LeasedJob`] of the one leased-job
//! worker ([`crate::background::leased_worker`]), which leases pending ones;
//! each is scored with its agent's LLM (the sim LLM by default) and the
//! scorecard, or the failure, is stored together with the webhooks that
//! waited for it.

use super::scoring::{score, scorecard_request};
use super::template::effective_template;
use crate::background::leased_worker::{JobError, LeasedJob, Settled, run_claimed};
use crate::domain::agent::LlmVendor;
use crate::domain::{CallId, OrgId};
use crate::postcall::PostcallFailure;
use crate::postcall::service::PostcallService;
use crate::postcall::sim_delay::sim_config;
use crate::store::StoreError;
use crate::store::leased_jobs::JobTable;
use crate::store::ratings::{ClaimedRating, CompletedRating, RATING_JOBS};
use std::time::Duration;

/// How long a job holds its rating before another worker may take it
/// (renewed while it runs).
pub const LEASE: Duration = Duration::from_secs(300);

/// Ratings scored per pass, concurrently.
pub const BATCH: i64 = 8;

/// The call variable that delays the sim LLM's scorecard (tests of the
/// late-rating webhook path), in milliseconds.
pub const SIM_DELAY_VARIABLE: &str = "simRatingDelayMs";

/// What one scoring job ended with.
#[derive(Debug, Clone, PartialEq)]
pub enum RatingOutcome {
    /// The scorecard is stored.
    Done {
        /// Its overall score.
        overall: f64,
    },
    /// The rating is marked failed.
    Failed {
        /// Why.
        reason: String,
    },
    /// The rating was re-queued while this job ran; its result was dropped.
    Stale,
}

fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// A scorecard the model produced, to store.
#[derive(Debug, Clone)]
pub struct ProducedRating {
    overall: f64,
    columns: String,
    template: String,
    attempts: i64,
}

/// Ratings as a [`LeasedJob`] of this node.
pub struct RatingJobs {
    /// What the jobs run on.
    pub postcall: PostcallService,
}

impl LeasedJob for RatingJobs {
    type Row = ClaimedRating;
    type Outcome = ProducedRating;
    type Failure = PostcallFailure;
    const KIND: &'static str = "rating";
    const TABLE: &'static JobTable = &RATING_JOBS;
    const LEASE: Duration = LEASE;
    const BATCH: i64 = BATCH;

    fn key(row: &ClaimedRating) -> String {
        row.call_id.to_string()
    }

    async fn run(
        &self,
        claim: &ClaimedRating,
    ) -> Result<ProducedRating, JobError<PostcallFailure>> {
        self.postcall.rate(claim).await
    }

    async fn complete(
        &self,
        claim: &ClaimedRating,
        r: &ProducedRating,
    ) -> Result<bool, StoreError> {
        self.postcall
            .store
            .complete_rating(&CompletedRating {
                call_id: claim.call_id,
                generation: claim.generation,
                overall: r.overall,
                columns: &r.columns,
                template: &r.template,
                attempts: r.attempts,
                now_ms: self.postcall.clock.now().timestamp_millis(),
            })
            .await
    }

    async fn fail(
        &self,
        claim: &ClaimedRating,
        failure: &PostcallFailure,
        _retry_at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let now = self.postcall.clock.now().timestamp_millis();
        self.postcall
            .store
            .fail_rating(
                claim.call_id,
                claim.generation,
                &failure.reason,
                failure.attempts,
                now,
            )
            .await
    }
}

impl PostcallService {
    /// Takes a call's rating for an immediate job; None when the call is not in
    /// the workspace.
    pub async fn take_rating_now(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> Result<Option<ClaimedRating>, StoreError> {
        let now = self.clock.now().timestamp_millis();
        self.store
            .take_rating_now(&self.node_id, org_id, call_id, now, now + lease_ms())
            .await
    }

    /// Scores one leased rating and stores the outcome.
    pub async fn rate_claimed(&self, claim: &ClaimedRating) -> Result<RatingOutcome, StoreError> {
        let jobs = RatingJobs {
            postcall: self.clone(),
        };
        Ok(
            match run_claimed(&self.worker_node(), &jobs, claim).await? {
                Settled::Done(rating) => RatingOutcome::Done {
                    overall: rating.overall,
                },
                Settled::Failed(failure) | Settled::Retrying { failure, .. } => {
                    RatingOutcome::Failed {
                        reason: failure.reason,
                    }
                }
                Settled::Stale => RatingOutcome::Stale,
            },
        )
    }

    /// The scorecard of one claimed call, by its agent's template and LLM
    /// (within the endpoint's post-call limit).
    async fn rate(
        &self,
        claim: &ClaimedRating,
    ) -> Result<ProducedRating, JobError<PostcallFailure>> {
        let fail = PostcallFailure::job_error;
        let store = &self.store;
        let Some(source) = store.rating_source(claim.call_id).await? else {
            return Err(fail("the call no longer exists".into(), 0));
        };
        let turns = store.call_turns(claim.org_id, claim.call_id).await?;
        // A stored value that no longer parses fails the job with the error
        // (its reason names the row); the call's agent or variables are never
        // guessed, which would score with the sim model.
        let agent = store.agent(claim.org_id, claim.agent_id).await?;
        let spec = match agent.map(|agent| agent.spec()).transpose() {
            Ok(spec) => spec,
            Err(err @ StoreError::CorruptColumn { .. }) => return Err(fail(err.to_string(), 0)),
            Err(err) => return Err(err.into()),
        };
        let template = effective_template(spec.as_ref().and_then(|s| s.rating_template.as_ref()));
        let (provider, model) = spec.as_ref().map_or((LlmVendor::Sim, ""), |s| {
            (s.llm_provider, s.llm_model.as_str())
        });
        let sim = match sim_config(claim.call_id, &source.variables, SIM_DELAY_VARIABLE) {
            Ok(sim) => sim,
            Err(err @ StoreError::CorruptColumn { .. }) => return Err(fail(err.to_string(), 0)),
            Err(err) => return Err(err.into()),
        };
        let chosen = match self
            .rater
            .selector()
            .llm(claim.org_id, provider, model, &sim)
            .await
        {
            Ok(chosen) => chosen,
            Err(crate::providers::select::SelectError::Store(err)) => return Err(err.into()),
            Err(err) => return Err(fail(err.to_string(), 0)),
        };
        let card = scorecard_request(
            &template,
            &turns,
            source.ended_reason.as_deref().unwrap_or_default(),
        );
        let (result, attempts) = {
            let _slot = self.postcall_slots.acquire(&chosen.endpoint).await;
            score(chosen.llm.as_ref(), &card, &template).await
        };
        let scorecard = result.map_err(|err| fail(err.to_string(), attempts))?;
        let encode = |err: serde_json::Error| JobError::Store(err.into());
        Ok(ProducedRating {
            overall: scorecard.overall,
            columns: serde_json::to_string(&scorecard.columns).map_err(encode)?,
            template: serde_json::to_string(&template).map_err(encode)?,
            attempts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sim_delay_comes_from_the_call_variables() {
        let delay = |variables: &str| {
            sim_config(CallId::new(), variables, SIM_DELAY_VARIABLE).map(|sim| sim.llm_first_token)
        };
        assert_eq!(delay("{}").unwrap(), Duration::ZERO);
        assert_eq!(
            delay(r#"{"simRatingDelayMs": 1500}"#).unwrap(),
            Duration::from_millis(1500)
        );
        assert!(delay("not json").is_err());
    }
}

//! The rating worker: leases pending ratings, scores each with its agent's
//! LLM (the sim LLM by default) and stores the scorecard, or the failure,
//! together with the webhooks that waited for it.

use super::scoring::{score, scorecard_request};
use super::template::effective_template;
use crate::domain::agent::LlmVendor;
use crate::domain::{CallId, OrgId};
use crate::http::state::AppState;
use crate::postcall::sim_delay::sim_config;
use crate::store::StoreError;
use crate::store::ratings::{ClaimedRating, CompletedRating};
use std::time::Duration;

/// How long a job holds its rating before another worker may take it.
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

/// One pass: leases due pending ratings for this node (peers running the
/// same pass claim others) and scores them; returns how many.
pub async fn rate_due(state: &AppState) -> Result<usize, StoreError> {
    let now = state.clock.now().timestamp_millis();
    let claimed = state
        .store
        .claim_due_ratings(&state.node_id, now, now + lease_ms(), BATCH)
        .await?;
    let jobs = claimed.iter().map(|claim| async move {
        match rate_claimed(state, claim).await {
            Ok(RatingOutcome::Failed { reason }) => {
                tracing::warn!(call = %claim.call_id, %reason, "rating failed");
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(call = %claim.call_id, error = %err, "rating job could not be stored; it will be retried");
            }
        }
    });
    futures::future::join_all(jobs).await;
    Ok(claimed.len())
}

/// Takes a call's rating for an immediate job; None when the call is not in
/// the workspace.
pub async fn take_now(
    state: &AppState,
    org_id: OrgId,
    call_id: CallId,
) -> Result<Option<ClaimedRating>, StoreError> {
    let now = state.clock.now().timestamp_millis();
    state
        .store
        .take_rating_now(&state.node_id, org_id, call_id, now, now + lease_ms())
        .await
}

/// Scores one leased rating and stores the outcome.
pub async fn rate_claimed(
    state: &AppState,
    claim: &ClaimedRating,
) -> Result<RatingOutcome, StoreError> {
    let store = &state.store;
    let fail = |reason: String, attempts: i64| async move {
        let now = state.clock.now().timestamp_millis();
        let stored = store
            .fail_rating(claim.call_id, claim.generation, &reason, attempts, now)
            .await?;
        Ok::<_, StoreError>(if stored {
            RatingOutcome::Failed { reason }
        } else {
            RatingOutcome::Stale
        })
    };
    let Some(source) = store.rating_source(claim.call_id).await? else {
        return fail("the call no longer exists".into(), 0).await;
    };
    let turns = store.call_turns(claim.org_id, claim.call_id).await?;
    // A stored value that no longer parses fails the job with the error
    // (its reason names the row); the call's agent or variables are never
    // guessed, which would score with the sim model.
    let agent = store.agent(claim.org_id, claim.agent_id).await?;
    let spec = match agent.map(|agent| agent.spec()).transpose() {
        Ok(spec) => spec,
        Err(err @ StoreError::CorruptColumn { .. }) => return fail(err.to_string(), 0).await,
        Err(err) => return Err(err),
    };
    let template = effective_template(spec.as_ref().and_then(|s| s.rating_template.as_ref()));
    let (provider, model) = spec.as_ref().map_or((LlmVendor::Sim, ""), |s| {
        (s.llm_provider, s.llm_model.as_str())
    });
    let sim = match sim_config(claim.call_id, &source.variables, SIM_DELAY_VARIABLE) {
        Ok(sim) => sim,
        Err(err @ StoreError::CorruptColumn { .. }) => return fail(err.to_string(), 0).await,
        Err(err) => return Err(err),
    };
    let chosen = match state
        .rater
        .selector()
        .llm(claim.org_id, provider, model, &sim)
        .await
    {
        Ok(chosen) => chosen,
        Err(crate::providers::select::SelectError::Store(err)) => return Err(err),
        Err(err) => return fail(err.to_string(), 0).await,
    };
    let card = scorecard_request(
        &template,
        &turns,
        source.ended_reason.as_deref().unwrap_or_default(),
    );
    let (result, attempts) = {
        let _slot = state.postcall_slots.acquire(&chosen.endpoint).await;
        score(chosen.llm.as_ref(), &card, &template).await
    };
    let scorecard = match result {
        Ok(scorecard) => scorecard,
        Err(err) => return fail(err.to_string(), attempts).await,
    };
    let columns = serde_json::to_string(&scorecard.columns)?;
    let template_json = serde_json::to_string(&template)?;
    let stored = store
        .complete_rating(&CompletedRating {
            call_id: claim.call_id,
            generation: claim.generation,
            overall: scorecard.overall,
            columns: &columns,
            template: &template_json,
            attempts,
            now_ms: state.clock.now().timestamp_millis(),
        })
        .await?;
    Ok(if stored {
        RatingOutcome::Done {
            overall: scorecard.overall,
        }
    } else {
        RatingOutcome::Stale
    })
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

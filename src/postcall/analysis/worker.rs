//! The analysis worker: leases pending analyses, asks each call's agent LLM
//! (the sim LLM by default) through the per-endpoint post-call limit, and
//! stores the analysis, or the failure, with the webhooks that waited for it.

use super::analyst::analyze;
use crate::domain::agent::LlmVendor;
use crate::domain::analysis::AnalysisPlan;
use crate::domain::{CallId, OrgId};
use crate::http::state::AppState;
use crate::postcall::sim_delay::sim_config;
use crate::store::analyses::{ClaimedAnalysis, CompletedAnalysis};
use crate::store::{StoreError, decode_json};
use serde_json::{Value, json};
use std::time::Duration;
use voxline_actors::providers::scorecard::{CALLEE, ScorecardTurn};

/// How long a job holds its analysis before another worker may take it.
pub const LEASE: Duration = Duration::from_secs(300);

/// Analyses leased per pass; they run concurrently up to the endpoint's limit.
pub const BATCH: i64 = 32;

/// The call variable that delays the sim LLM's analysis (tests of the late
/// webhook path), in milliseconds.
pub const SIM_DELAY_VARIABLE: &str = "simAnalysisDelayMs";

/// What one analysis job ended with.
#[derive(Debug, Clone, PartialEq)]
pub enum AnalysisOutcome {
    /// The analysis is stored.
    Done,
    /// The analysis is marked failed.
    Failed {
        /// Why.
        reason: String,
    },
    /// The analysis was re-queued while this job ran; its result was dropped.
    Stale,
}

fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// Runs due analyses until none is left: full batches follow each other at
/// once, so a backlog drains at the model's pace rather than one batch per
/// tick; returns how many ran.
pub async fn analyze_due(state: &AppState) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        let ran = analyze_batch(state).await?;
        total += ran;
        if i64::try_from(ran).unwrap_or(i64::MAX) < BATCH {
            return Ok(total);
        }
    }
}

/// One batch: leases up to [`BATCH`] due pending analyses for this node
/// (peers running the same pass claim others) and runs them; returns how many.
async fn analyze_batch(state: &AppState) -> Result<usize, StoreError> {
    let now = state.clock.now().timestamp_millis();
    let claimed = state
        .store
        .claim_due_analyses(&state.node_id, now, now + lease_ms(), BATCH)
        .await?;
    let jobs = claimed.iter().map(|claim| async move {
        match analyze_claimed(state, claim).await {
            Ok(AnalysisOutcome::Failed { reason }) => {
                tracing::warn!(call = %claim.call_id, %reason, "analysis failed");
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(call = %claim.call_id, error = %err, "analysis could not be stored; it will be retried");
            }
        }
    });
    futures::future::join_all(jobs).await;
    Ok(claimed.len())
}

/// Takes a call's analysis for an immediate re-run, with `plan` instead of
/// the agent's when given; None when the call is not in the workspace.
pub async fn take_now(
    state: &AppState,
    org_id: OrgId,
    call_id: CallId,
    plan: Option<&AnalysisPlan>,
) -> Result<Option<ClaimedAnalysis>, StoreError> {
    let now = state.clock.now().timestamp_millis();
    let plan = plan.map(serde_json::to_string).transpose()?;
    state
        .store
        .take_analysis_now(
            &state.node_id,
            org_id,
            call_id,
            plan.as_deref(),
            now,
            now + lease_ms(),
        )
        .await
}

/// Runs one leased analysis and stores the outcome.
pub async fn analyze_claimed(
    state: &AppState,
    claim: &ClaimedAnalysis,
) -> Result<AnalysisOutcome, StoreError> {
    let store = &state.store;
    let fail = |reason: String, attempts: i64| async move {
        let now = state.clock.now().timestamp_millis();
        let stored = store
            .fail_analysis(claim.call_id, claim.generation, &reason, attempts, now)
            .await?;
        Ok::<_, StoreError>(if stored {
            AnalysisOutcome::Failed { reason }
        } else {
            AnalysisOutcome::Stale
        })
    };
    let Some(source) = store.rating_source(claim.call_id).await? else {
        return fail("the call no longer exists".into(), 0).await;
    };
    let turns = store.call_turns(claim.org_id, claim.call_id).await?;
    // A stored value that no longer parses fails the job with the error
    // (its reason names the row); the call's agent or variables are never
    // guessed, which would analyze with the sim model.
    let agent = store.agent(claim.org_id, claim.agent_id).await?;
    let spec = match agent.map(|agent| agent.spec()).transpose() {
        Ok(spec) => spec,
        Err(err @ StoreError::CorruptColumn { .. }) => return fail(err.to_string(), 0).await,
        Err(err) => return Err(err),
    };
    let sim = match sim_config(claim.call_id, &source.variables, SIM_DELAY_VARIABLE) {
        Ok(sim) => sim,
        Err(err @ StoreError::CorruptColumn { .. }) => return fail(err.to_string(), 0).await,
        Err(err) => return Err(err),
    };
    let plan = match claim
        .plan
        .as_deref()
        .map(|text| decode_json::<AnalysisPlan>("call_analyses", "plan", claim.call_id, text))
    {
        Some(Ok(plan)) => plan,
        Some(Err(err)) => return fail(format!("the re-run's plan is unreadable: {err}"), 0).await,
        None => spec
            .as_ref()
            .map_or_else(AnalysisPlan::default, |s| s.analysis_plan()),
    };
    let (provider, model) = spec.as_ref().map_or((LlmVendor::Sim, "sim-1"), |s| {
        (s.llm_provider, s.llm_model.as_str())
    });
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
    let transcript = turns
        .iter()
        .map(|t| ScorecardTurn {
            speaker: if t.speaker == "user" { CALLEE } else { "agent" }.to_owned(),
            text: t.text.clone(),
        })
        .collect();
    let request = plan.engine_request(
        transcript,
        source.ended_reason.as_deref().unwrap_or_default(),
    );
    let (result, attempts) = {
        let _slot = state.postcall_slots.acquire(&chosen.endpoint).await;
        analyze(chosen.llm.as_ref(), &request).await
    };
    let analysis = match result {
        Ok(analysis) => analysis,
        Err(err) => return fail(err.to_string(), attempts).await,
    };
    let structured = serde_json::to_string(&analysis.reply.structured_data)?;
    let success = match (&plan.success, &analysis.reply.success) {
        (Some(success), Some(verdict)) => Some(serde_json::to_string(&json!({
            "rubric": success.rubric,
            "value": verdict.get("value").cloned().unwrap_or(Value::Null),
            "pass": analysis.pass,
            "reason": verdict.get("reason").cloned().unwrap_or(Value::Null),
        }))?),
        _ => None,
    };
    let summary = analysis
        .reply
        .summary
        .as_deref()
        .map(str::trim)
        .filter(|s| plan.summary.enabled && !s.is_empty());
    let stored = store
        .complete_analysis(&CompletedAnalysis {
            call_id: claim.call_id,
            generation: claim.generation,
            summary,
            structured_data: &structured,
            success: success.as_deref(),
            success_pass: analysis.pass,
            model,
            prompt_tokens: i64::from(analysis.usage.prompt_tokens),
            completion_tokens: i64::from(analysis.usage.completion_tokens),
            latency_ms: i64::try_from(analysis.latency.as_millis()).unwrap_or(i64::MAX),
            attempts,
            now_ms: state.clock.now().timestamp_millis(),
        })
        .await?;
    Ok(if stored {
        AnalysisOutcome::Done
    } else {
        AnalysisOutcome::Stale
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
            delay(r#"{"simAnalysisDelayMs": 1500}"#).unwrap(),
            Duration::from_millis(1500)
        );
    }
}

//! The analysis worker: analyses are a [`LeasedJob`] of the one leased-job
//! worker ([`crate::background::leased_worker`]), which leases pending ones;
//! each asks its call's agent LLM (the sim LLM by default) through the
//! per-endpoint post-call limit, and stores the analysis, or the failure,
//! with the webhooks that waited for it.

use super::analyst::analyze as ask_analyst;
use crate::background::leased_worker::{JobError, LeasedJob, Settled, run_claimed};
use crate::domain::agent::LlmVendor;
use crate::domain::analysis::AnalysisPlan;
use crate::domain::{CallId, OrgId};
use crate::postcall::PostcallFailure;
use crate::postcall::service::PostcallService;
use crate::postcall::sim_delay::sim_config;
use crate::store::analyses::{ANALYSIS_JOBS, ClaimedAnalysis, CompletedAnalysis};
use crate::store::leased_jobs::JobTable;
use crate::store::{StoreError, decode_json};
use serde_json::{Value, json};
use std::time::Duration;
use voxline_actors::providers::scorecard::{CALLEE, ScorecardTurn};

/// How long a job holds its analysis before another worker may take it
/// (renewed while it runs).
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

/// An analysis the model produced, to store.
#[derive(Debug, Clone)]
pub struct ProducedAnalysis {
    summary: Option<String>,
    structured_data: String,
    success: Option<String>,
    success_pass: Option<bool>,
    model: String,
    prompt_tokens: i64,
    completion_tokens: i64,
    latency_ms: i64,
    attempts: i64,
}

/// Analyses as a [`LeasedJob`] of this node.
pub struct AnalysisJobs {
    /// What the jobs run on.
    pub postcall: PostcallService,
}

impl LeasedJob for AnalysisJobs {
    type Row = ClaimedAnalysis;
    type Outcome = ProducedAnalysis;
    type Failure = PostcallFailure;
    const KIND: &'static str = "analysis";
    const TABLE: &'static JobTable = &ANALYSIS_JOBS;
    const LEASE: Duration = LEASE;
    const BATCH: i64 = BATCH;
    // Full batches follow each other at once, so a backlog drains at the
    // model's pace rather than one batch per tick.
    const DRAIN: bool = true;

    fn key(row: &ClaimedAnalysis) -> String {
        row.call_id.to_string()
    }

    async fn run(
        &self,
        claim: &ClaimedAnalysis,
    ) -> Result<ProducedAnalysis, JobError<PostcallFailure>> {
        self.postcall.analyze(claim).await
    }

    async fn complete(
        &self,
        claim: &ClaimedAnalysis,
        a: &ProducedAnalysis,
    ) -> Result<bool, StoreError> {
        self.postcall
            .store
            .complete_analysis(&CompletedAnalysis {
                call_id: claim.call_id,
                generation: claim.generation,
                summary: a.summary.as_deref(),
                structured_data: &a.structured_data,
                success: a.success.as_deref(),
                success_pass: a.success_pass,
                model: &a.model,
                prompt_tokens: a.prompt_tokens,
                completion_tokens: a.completion_tokens,
                latency_ms: a.latency_ms,
                attempts: a.attempts,
                now_ms: self.postcall.clock.now().timestamp_millis(),
            })
            .await
    }

    async fn fail(
        &self,
        claim: &ClaimedAnalysis,
        failure: &PostcallFailure,
        _retry_at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let now = self.postcall.clock.now().timestamp_millis();
        self.postcall
            .store
            .fail_analysis(
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
    /// Takes a call's analysis for an immediate re-run, with `plan` instead of
    /// the agent's when given; None when the call is not in the workspace.
    pub async fn take_analysis_now(
        &self,
        org_id: OrgId,
        call_id: CallId,
        plan: Option<&AnalysisPlan>,
    ) -> Result<Option<ClaimedAnalysis>, StoreError> {
        let now = self.clock.now().timestamp_millis();
        let plan = plan.map(serde_json::to_string).transpose()?;
        self.store
            .take_analysis_now(
                &self.node_id,
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
        &self,
        claim: &ClaimedAnalysis,
    ) -> Result<AnalysisOutcome, StoreError> {
        let jobs = AnalysisJobs {
            postcall: self.clone(),
        };
        Ok(
            match run_claimed(&self.worker_node(), &jobs, claim).await? {
                Settled::Done(_) => AnalysisOutcome::Done,
                Settled::Failed(failure) | Settled::Retrying { failure, .. } => {
                    AnalysisOutcome::Failed {
                        reason: failure.reason,
                    }
                }
                Settled::Stale => AnalysisOutcome::Stale,
            },
        )
    }

    /// The analysis of one claimed call: its transcript through the plan's
    /// request to the agent's LLM (within the endpoint's post-call limit).
    async fn analyze(
        &self,
        claim: &ClaimedAnalysis,
    ) -> Result<ProducedAnalysis, JobError<PostcallFailure>> {
        let fail = PostcallFailure::job_error;
        let store = &self.store;
        let Some(source) = store.rating_source(claim.call_id).await? else {
            return Err(fail("the call no longer exists".into(), 0));
        };
        let turns = store.call_turns(claim.org_id, claim.call_id).await?;
        // A stored value that no longer parses fails the job with the error
        // (its reason names the row); the call's agent or variables are never
        // guessed, which would analyze with the sim model.
        let agent = store.agent(claim.org_id, claim.agent_id).await?;
        let spec = match agent.map(|agent| agent.spec()).transpose() {
            Ok(spec) => spec,
            Err(err @ StoreError::CorruptColumn { .. }) => return Err(fail(err.to_string(), 0)),
            Err(err) => return Err(err.into()),
        };
        let sim = match sim_config(claim.call_id, &source.variables, SIM_DELAY_VARIABLE) {
            Ok(sim) => sim,
            Err(err @ StoreError::CorruptColumn { .. }) => return Err(fail(err.to_string(), 0)),
            Err(err) => return Err(err.into()),
        };
        let plan =
            match claim.plan.as_deref().map(|text| {
                decode_json::<AnalysisPlan>("call_analyses", "plan", claim.call_id, text)
            }) {
                Some(Ok(plan)) => plan,
                Some(Err(err)) => {
                    return Err(fail(format!("the re-run's plan is unreadable: {err}"), 0));
                }
                None => spec
                    .as_ref()
                    .map_or_else(AnalysisPlan::default, |s| s.analysis_plan()),
            };
        let (provider, model) = spec.as_ref().map_or((LlmVendor::Sim, "sim-1"), |s| {
            (s.llm_provider, s.llm_model.as_str())
        });
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
            let _slot = self.postcall_slots.acquire(&chosen.endpoint).await;
            ask_analyst(chosen.llm.as_ref(), &request).await
        };
        let analysis = result.map_err(|err| fail(err.to_string(), attempts))?;
        let encode = |err: serde_json::Error| JobError::Store(err.into());
        let structured_data =
            serde_json::to_string(&analysis.reply.structured_data).map_err(encode)?;
        let success = match (&plan.success, &analysis.reply.success) {
            (Some(success), Some(verdict)) => Some(
                serde_json::to_string(&json!({
                    "rubric": success.rubric,
                    "value": verdict.get("value").cloned().unwrap_or(Value::Null),
                    "pass": analysis.pass,
                    "reason": verdict.get("reason").cloned().unwrap_or(Value::Null),
                }))
                .map_err(encode)?,
            ),
            _ => None,
        };
        let summary = analysis
            .reply
            .summary
            .as_deref()
            .map(str::trim)
            .filter(|s| plan.summary.enabled && !s.is_empty())
            .map(str::to_owned);
        Ok(ProducedAnalysis {
            summary,
            structured_data,
            success,
            success_pass: analysis.pass,
            model: model.to_owned(),
            prompt_tokens: i64::from(analysis.usage.prompt_tokens),
            completion_tokens: i64::from(analysis.usage.completion_tokens),
            latency_ms: i64::try_from(analysis.latency.as_millis()).unwrap_or(i64::MAX),
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
            delay(r#"{"simAnalysisDelayMs": 1500}"#).unwrap(),
            Duration::from_millis(1500)
        );
    }
}

//! Scoring one call now, answered when done: `rate-now` (a call without a
//! scorecard yet) and `regenerate` (a new scorecard replaces the old one,
//! which stays readable meanwhile). The API and the console both call these.

use super::worker::RatingOutcome;
use crate::domain::{CallId, OrgId};
use crate::postcall::service::PostcallService;
use crate::store::StoreError;
use voxline_actors::engine::CallStatus;

/// Why a call was not scored now.
#[derive(Debug, thiserror::Error)]
pub enum RescoreError {
    /// No such call in the workspace.
    #[error("Call {0} not found")]
    CallNotFound(CallId),
    /// Regenerate of a call that was never rated.
    #[error("Call {0} has no rating to regenerate")]
    NoRating(CallId),
    /// The call is still live.
    #[error("Call {call_id} has not ended yet ({status}); it is rated when it does")]
    NotEnded {
        /// The call.
        call_id: CallId,
        /// Its current status.
        status: String,
    },
    /// The call never had a conversation.
    #[error("Call {0} has no conversation to rate: it did not complete with the callee speaking")]
    NoConversation(CallId),
    /// The model's scorecard failed; the rating is marked failed.
    #[error("Rating call {call_id} failed: {reason}")]
    Failed {
        /// The call.
        call_id: CallId,
        /// Why.
        reason: String,
    },
    /// Re-queued by someone else while this scoring ran; its result was dropped.
    #[error("The rating of call {0} was re-queued while it was being scored; try again")]
    Stale(CallId),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PostcallService {
    /// Whether a call can be scored: it ended, and (without a rating yet) it
    /// completed with the callee speaking.
    pub async fn check_rateable(&self, org: OrgId, call_id: CallId) -> Result<(), RescoreError> {
        let status = self
            .store
            .call_status(org, call_id)
            .await?
            .ok_or(RescoreError::CallNotFound(call_id))?;
        if !CallStatus::parse(&status).is_some_and(CallStatus::is_terminal) {
            return Err(RescoreError::NotEnded { call_id, status });
        }
        if !self.store.call_conversed(org, call_id).await? {
            return Err(RescoreError::NoConversation(call_id));
        }
        Ok(())
    }

    /// Scores a call now and returns its overall score.
    pub async fn rate_synchronously(
        &self,
        org: OrgId,
        call_id: CallId,
    ) -> Result<f64, RescoreError> {
        let claim = self
            .take_rating_now(org, call_id)
            .await?
            .ok_or(RescoreError::CallNotFound(call_id))?;
        match self.rate_claimed(&claim).await? {
            RatingOutcome::Done { overall } => Ok(overall),
            RatingOutcome::Failed { reason } => Err(RescoreError::Failed { call_id, reason }),
            RatingOutcome::Stale => Err(RescoreError::Stale(call_id)),
        }
    }

    /// Scores a rated call again with its agent's current template and LLM; returns
    /// the new overall score.
    pub async fn regenerate(&self, org: OrgId, call_id: CallId) -> Result<f64, RescoreError> {
        if self.store.rating(org, call_id).await?.is_none() {
            return Err(RescoreError::NoRating(call_id));
        }
        self.rate_synchronously(org, call_id).await
    }
}

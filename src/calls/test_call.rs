//! A test call: one number rung by one agent, refused while that number
//! already has a call in flight (so a double click does not ring twice).
//! The API's `POST /api/agents/{id}/test-call` and the console's test-call
//! form both place it here.

use super::placement::{self, CallSource, CallTarget, DialPlan, PlacementError};
use super::service::CallService;
use crate::domain::text::Variables;
use crate::domain::{CallId, OrgId, PhoneNumber};
use crate::store::StoreError;

/// Why a test call was not placed.
#[derive(Debug, thiserror::Error)]
pub enum TestCallError {
    /// The number already has a queued, ringing or live call.
    #[error("{phone} already has a call in flight")]
    InFlight {
        /// The number.
        phone: PhoneNumber,
        /// The call already in flight.
        live: CallId,
    },
    /// Refused before anything was stored (agent, wallet, quota, caller ID).
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// The store took the call but returned no id for it.
    #[error("no call was placed")]
    NotPlaced,
}

impl From<StoreError> for TestCallError {
    fn from(err: StoreError) -> Self {
        Self::Placement(PlacementError::Store(err))
    }
}

impl CallService {
    /// Rings `phone` with the workspace's agent `raw_agent_id`; returns the queued
    /// call's id and the plan it was placed under (the agent's row among it).
    pub async fn place_test_call(
        &self,
        org: OrgId,
        raw_agent_id: &str,
        phone: PhoneNumber,
        variables: Option<Variables>,
    ) -> Result<(CallId, DialPlan), TestCallError> {
        let agent_id = placement::agent_id(raw_agent_id)?;
        let plan = self.plan(org, agent_id, None).await?;
        self.check_do_not_call(org, &phone).await?;
        if let Some(live) = self.store.live_call_to(org, phone.as_str()).await? {
            return Err(TestCallError::InFlight { phone, live });
        }
        let (variables, email) = variables.map(Variables::into_parts).unwrap_or_default();
        let name = placement::target_name(&variables, None);
        let placed = self
            .place(
                &plan,
                vec![CallTarget {
                    phone,
                    name,
                    email,
                    variables,
                    // A test call rings its builder's own phone to try the
                    // agent: asked for now, so calling hours do not apply.
                    calling_hours_override: None,
                }],
                CallSource::TestCall,
            )
            .await?;
        let call_id = placed.single()?.ok_or(TestCallError::NotPlaced)?;
        Ok((call_id, plan))
    }
}

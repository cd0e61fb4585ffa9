//! Calling hours on every path that dials (issue 32): which window a call
//! keeps (its batch's, else its agent's, else its workspace's, else the
//! server's), the refusal of a single call outside it, and the dispatcher's
//! check of stored calls (retries, calls queued for any node) at dial time.
//!
//! Batch items are checked where they are claimed (`store::batches`), with
//! the window [`CallService::calling_hours_for`] resolves.

use super::placement::{DialPlan, PlacementError};
use super::service::CallService;
use crate::domain::PhoneNumber;
use crate::domain::agent::AgentSpec;
use crate::domain::calling_hours::{CallingHours, WindowCheck};
use crate::domain::hours_override::HoursOverride;
use crate::store::calls::DispatchRow;
use crate::store::{OrgRow, StoreError};
use chrono::{DateTime, SecondsFormat, Utc};
use voxline_actors::ended_reason::EndedReason;

/// The rule a refused, deferred or skipped dial names.
pub const RULE: &str = "calling-hours";

/// What the dispatcher does with a due stored call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueCall {
    /// Inside its window, or placed by a permitted override: dial it.
    Dial,
    /// Outside its window: handed back, due when the window opens.
    Deferred,
    /// Its window never opens: ended `calling-hours`, never dialed.
    Dropped,
}

/// ISO 8601 UTC, seconds.
fn iso(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// What a refusal says about a closed window.
pub fn closed_message(phone: &str, hours: &CallingHours, check: WindowCheck) -> String {
    match check {
        WindowCheck::ClosedUntil(opens) => format!(
            "{phone} is outside the calling hours ({hours}); they open at {}",
            iso(opens)
        ),
        _ => format!(
            "{phone} is never inside the calling hours ({hours}): its candidate time zones share no open time"
        ),
    }
}

impl CallService {
    /// The window a call keeps: `batch`'s own, else the agent's, else the
    /// workspace's, else the server's default.
    pub fn calling_hours_for(
        &self,
        org: &OrgRow,
        spec: &AgentSpec,
        batch: Option<CallingHours>,
    ) -> Result<CallingHours, StoreError> {
        if let Some(hours) = batch.or(spec.compliance.calling_hours) {
            return Ok(hours);
        }
        Ok(org.calling_hours()?.unwrap_or(self.default_calling_hours))
    }

    /// A single call (`POST /api/calls`) to `phone` now: None inside the
    /// window; outside it, the override when the request waived the hours
    /// (`respect: false`) and the agent allows it, else the refusal.
    pub fn check_single_call(
        &self,
        plan: &DialPlan,
        phone: &PhoneNumber,
        respect: bool,
    ) -> Result<Option<HoursOverride>, PlacementError> {
        let hours = self.calling_hours_for(&plan.org, &plan.spec, None)?;
        let check = hours.check(phone.as_str(), self.clock.now());
        if check == WindowCheck::Open {
            return Ok(None);
        }
        let closed = closed_message(phone.as_str(), &hours, check);
        if respect {
            return Err(PlacementError::OutsideCallingHours(format!(
                "{closed}. Place it then, or send \"respectCallingHours\": false if the agent allows overrides (compliance.allowCallingHoursOverride)"
            )));
        }
        if !plan.spec.compliance.allow_calling_hours_override {
            return Err(PlacementError::OutsideCallingHours(format!(
                "{closed}, and agent {} does not allow overrides: respectCallingHours: false needs compliance.allowCallingHoursOverride on the agent",
                plan.agent.id
            )));
        }
        Ok(Some(HoursOverride::Request))
    }

    /// Checks a due stored call against its window before it is dialed: one
    /// placed by an override dials; one outside its window is handed back,
    /// due when it opens; one whose window never opens is ended
    /// `calling-hours` (its batch item skipped) and never dialed.
    pub async fn due_call_hours(
        &self,
        row: &DispatchRow,
        org: &OrgRow,
        spec: &AgentSpec,
        batch: Option<CallingHours>,
    ) -> Result<DueCall, StoreError> {
        if row.calling_hours_override.is_some() {
            return Ok(DueCall::Dial);
        }
        let hours = self.calling_hours_for(org, spec, batch)?;
        match hours.check(&row.phone, self.clock.now()) {
            WindowCheck::Open => Ok(DueCall::Dial),
            WindowCheck::ClosedUntil(opens) => {
                self.store
                    .defer_call(row.id, opens.timestamp_millis())
                    .await?;
                tracing::info!(call = %row.id, opens = %iso(opens), "call deferred to its calling hours");
                Ok(DueCall::Deferred)
            }
            check @ WindowCheck::Never => {
                self.cancel_by_rule(
                    row.id,
                    EndedReason::CallingHours,
                    RULE,
                    Some(closed_message(&row.phone, &hours, check)),
                )
                .await;
                Ok(DueCall::Dropped)
            }
        }
    }

    /// The calling hours of a stored call's batch, when it has one and set its own.
    pub async fn batch_calling_hours(
        &self,
        row: &DispatchRow,
    ) -> Result<Option<CallingHours>, StoreError> {
        let Some(batch_id) = row.batch_id else {
            return Ok(None);
        };
        match self.store.batch_by_id(batch_id).await? {
            Some(batch) => batch.calling_hours(),
            None => Ok(None),
        }
    }
}

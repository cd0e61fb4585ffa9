//! Calendars the `checkAvailability` and `bookAppointment` tools use, behind
//! one small trait so the engine does not depend on a vendor (and tests can
//! stand one in). Cal.com is the only vendor today ([`calcom`]).

pub mod calcom;

pub use calcom::CalCom;

use chrono::{DateTime, Utc};
use serde::Serialize;
use std::time::Duration;

/// A calendar that can list free slots and book one.
#[async_trait::async_trait]
pub trait Calendar: Send + Sync {
    /// Free slots of an event type between two instants, in time order.
    async fn available_slots(&self, query: &SlotQuery) -> Result<Vec<Slot>, CalendarError>;
    /// Books one slot.
    async fn book(&self, request: &BookingRequest) -> Result<Booking, CalendarError>;
}

/// Which free slots to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotQuery {
    /// The event type searched.
    pub event_type_id: u64,
    /// IANA time zone the slots are returned in (`Asia/Kolkata`).
    pub time_zone: String,
    /// From this instant.
    pub start: DateTime<Utc>,
    /// Up to this instant.
    pub end: DateTime<Utc>,
}

/// One free slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Slot {
    /// Its start, RFC 3339 with the offset of the query's time zone, as the
    /// calendar returned it (kept as text so the model hears local time).
    pub start: String,
}

/// A slot to book and who it is for.
#[derive(Debug, Clone, PartialEq)]
pub struct BookingRequest {
    /// The event type booked.
    pub event_type_id: u64,
    /// When the booking starts.
    pub start: DateTime<Utc>,
    /// The attendee's IANA time zone.
    pub time_zone: String,
    /// The attendee's name.
    pub attendee_name: String,
    /// The attendee's email, when known.
    pub attendee_email: Option<String>,
    /// The attendee's phone number in E.164, when known.
    pub attendee_phone: Option<String>,
    /// Free-form data stored with the booking (call and agent ids, say).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// A booking the calendar made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Booking {
    /// The calendar's id for it.
    pub uid: String,
    /// Its state (`accepted`, or `pending` when the host must confirm).
    pub status: String,
    /// Where the booking (or its meeting) can be opened.
    pub event_url: Option<String>,
}

/// Why the calendar could not answer. The messages are short and plain:
/// they are told to the model and stored as the call's `calendarError`.
#[derive(Debug, thiserror::Error)]
pub enum CalendarError {
    /// The workspace holds no calendar credential.
    #[error("no credential of kind calcom")]
    NoCredential,
    /// The credential lacks a field or has a bad one.
    #[error("the calcom credential is unusable: {0}")]
    BadCredential(String),
    /// Neither an email nor a phone number to book for.
    #[error("the booking needs the callee's email or phone number")]
    NoContact,
    /// The calendar said no (an error body or a 4xx), with its reason.
    #[error("the calendar refused the {action}: {reason}")]
    Refused {
        /// `slot search` or `booking`.
        action: &'static str,
        /// The calendar's own words.
        reason: String,
    },
    /// The calendar failed (5xx).
    #[error("the calendar answered {0}")]
    Status(u16),
    /// No answer within the timeout.
    #[error("the calendar did not answer within {} s", .0.as_secs_f32())]
    Timeout(Duration),
    /// The connection failed; the detail is for logs, not for the model.
    #[error("the calendar could not be reached")]
    Unreachable(String),
    /// A success answer we could not read.
    #[error("the calendar's answer was not understood: {0}")]
    BadAnswer(String),
}

//! The wire forms of [`CallingHours`]: serde (a JSON object; a refusal names
//! the field), `FromStr` (JSON text, for `VOXLINE_CALLING_HOURS`), and the
//! OpenAPI schema bodies and views document it with.

use super::calling_hours::CallingHours;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::str::FromStr;
use utoipa::ToSchema;

impl Serialize for CallingHours {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for CallingHours {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        // The caller's path ("compliance.callingHours: …") precedes the message.
        Self::from_json(&value, "callingHours").map_err(serde::de::Error::custom)
    }
}

impl FromStr for CallingHours {
    type Err = super::calling_hours::CallingHoursError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // Text that is no JSON is refused as what it is: not an object.
        let value = serde_json::from_str(text)
            .unwrap_or_else(|_| serde_json::Value::String(text.to_string()));
        Self::from_json(&value, "callingHours")
    }
}

impl utoipa::PartialSchema for CallingHours {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <CallingHoursDoc as utoipa::PartialSchema>::schema()
    }
}

impl ToSchema for CallingHours {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <CallingHoursDoc as ToSchema>::schemas(schemas);
    }
}

/// A weekday in a calling-hours window.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Weekday {
    /// Monday.
    Mon,
    /// Tuesday.
    Tue,
    /// Wednesday.
    Wed,
    /// Thursday.
    Thu,
    /// Friday.
    Fri,
    /// Saturday.
    Sat,
    /// Sunday.
    Sun,
}

/// When calls may be dialed: from `start` (inclusive) to `end` (exclusive),
/// local time, on `days`, in the callee's time zone (from the number:
/// libphonenumber's time-zone data; where a number has several candidate
/// zones, only the times all of them allow) or a named IANA zone.
// Deserialize only so the schema reads serde's rules (no unknown fields).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallingHoursDoc {
    /// Local opening time, `HH:MM` (00:00–23:59).
    #[schema(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$", example = "09:00")]
    pub start: String,
    /// Local closing time, `HH:MM` (00:01–24:00), after `start`.
    #[schema(
        pattern = r"^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$",
        example = "21:00"
    )]
    pub end: String,
    /// Weekdays the window applies to (default every day).
    #[schema(min_items = 1)]
    pub days: Option<Vec<Weekday>>,
    /// `callee` (default) or an IANA time zone name such as `Asia/Kolkata`.
    #[schema(example = "callee")]
    pub time_zone: Option<String>,
}

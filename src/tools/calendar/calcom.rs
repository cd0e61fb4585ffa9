//! Cal.com API v2: `GET /v2/slots` (`cal-api-version: 2024-09-04`) for free
//! slots and `POST /v2/bookings` (`cal-api-version: 2024-08-13`) to book,
//! authenticated with `Authorization: Bearer <apiKey>`. Answers are
//! `{"status": "success", "data": ...}` or
//! `{"status": "error", "error": {"message": ...}}`.

use super::{Booking, BookingRequest, Calendar, CalendarError, Slot, SlotQuery};
use crate::egress::{BodyError, read_limited};
use chrono::SecondsFormat;
use reqwest::{RequestBuilder, Url};
use serde_json::{Value, json};
use std::time::Duration;

/// The version header value `GET /v2/slots` requires.
const SLOTS_API_VERSION: &str = "2024-09-04";
/// The version header value `POST /v2/bookings` requires.
const BOOKINGS_API_VERSION: &str = "2024-08-13";
/// The largest answer read; a week of 15-minute slots is about 40 KiB.
const MAX_BODY: usize = 1 << 20;
/// The longest calendar reason passed on to the model.
const MAX_REASON_CHARS: usize = 200;

/// A Cal.com account, from a workspace credential of kind `calcom`.
#[derive(Debug, Clone)]
pub struct CalCom {
    client: reqwest::Client,
    api_key: String,
    base_url: Url,
    web_url: String,
    timeout: Duration,
}

impl CalCom {
    /// Cal.com's hosted API.
    pub const DEFAULT_BASE_URL: &str = "https://api.cal.com";
    /// How long one request may take, answer included.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// Reads a `calcom` credential: `apiKey`, optional `baseUrl` (default
    /// [`Self::DEFAULT_BASE_URL`]; a self-hosted Cal.com's API origin).
    pub fn from_credential(json: &Value, client: reqwest::Client) -> Result<Self, CalendarError> {
        let api_key = json
            .get("apiKey")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| CalendarError::BadCredential("apiKey is missing".into()))?;
        let base = json
            .get("baseUrl")
            .and_then(Value::as_str)
            .unwrap_or(Self::DEFAULT_BASE_URL);
        let base_url = Url::parse(base)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or_else(|| CalendarError::BadCredential("baseUrl is not an http(s) URL".into()))?;
        Ok(Self {
            client,
            api_key: api_key.to_owned(),
            web_url: web_url_for(&base_url),
            base_url,
            timeout: Self::DEFAULT_TIMEOUT,
        })
    }

    /// The same account with another per-request timeout (tests use a short one).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `{baseUrl}/v2/{endpoint}`, keeping any path the base URL has.
    fn endpoint(&self, endpoint: &str) -> Result<Url, CalendarError> {
        let mut url = self.base_url.clone();
        url.path_segments_mut()
            .map_err(|()| CalendarError::BadCredential("baseUrl cannot take a path".into()))?
            .pop_if_empty()
            .extend(["v2", endpoint]);
        Ok(url)
    }

    /// Sends a request and returns the `data` of a success answer.
    async fn send(
        &self,
        request: RequestBuilder,
        action: &'static str,
    ) -> Result<Value, CalendarError> {
        let response = request
            .bearer_auth(&self.api_key)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let body = read_limited(response, MAX_BODY)
            .await
            .map_err(|e| match e {
                BodyError::Read(e) => self.transport_error(&e),
                too_large @ BodyError::TooLarge { .. } => {
                    CalendarError::BadAnswer(too_large.to_string())
                }
            })?;
        let answer: Option<Value> = serde_json::from_slice(&body).ok();
        if status.is_server_error() {
            return Err(CalendarError::Status(status.as_u16()));
        }
        let said_error = answer
            .as_ref()
            .is_some_and(|a| a.get("status").and_then(Value::as_str) == Some("error"));
        if !status.is_success() || said_error {
            let reason = answer
                .as_ref()
                .and_then(error_reason)
                .unwrap_or_else(|| format!("HTTP {}", status.as_u16()));
            return Err(CalendarError::Refused { action, reason });
        }
        answer
            .and_then(|mut a| a.get_mut("data").map(Value::take))
            .ok_or_else(|| CalendarError::BadAnswer("no data".into()))
    }

    fn transport_error(&self, err: &reqwest::Error) -> CalendarError {
        if err.is_timeout() {
            CalendarError::Timeout(self.timeout)
        } else {
            // The URL is the calendar's, never the key (that is a header).
            CalendarError::Unreachable(err.to_string())
        }
    }
}

#[async_trait::async_trait]
impl Calendar for CalCom {
    async fn available_slots(&self, query: &SlotQuery) -> Result<Vec<Slot>, CalendarError> {
        let mut url = self.endpoint("slots")?;
        url.query_pairs_mut()
            .append_pair("eventTypeId", &query.event_type_id.to_string())
            .append_pair("start", &utc(query.start))
            .append_pair("end", &utc(query.end))
            .append_pair("timeZone", &query.time_zone);
        let request = self
            .client
            .get(url)
            .header("cal-api-version", SLOTS_API_VERSION);
        let data = self.send(request, "slot search").await?;
        parse_slots(&data)
    }

    async fn book(&self, request: &BookingRequest) -> Result<Booking, CalendarError> {
        let email = attendee_email(request)?;
        let mut attendee = json!({
            "name": request.attendee_name,
            "email": email,
            "timeZone": request.time_zone,
        });
        if let Some(phone) = &request.attendee_phone {
            attendee["phoneNumber"] = json!(phone);
        }
        let body = json!({
            "start": utc(request.start),
            "eventTypeId": request.event_type_id,
            "attendee": attendee,
            "metadata": request.metadata,
        });
        let post = self
            .client
            .post(self.endpoint("bookings")?)
            .header("cal-api-version", BOOKINGS_API_VERSION)
            .json(&body);
        let data = self.send(post, "booking").await?;
        parse_booking(&data, &self.web_url)
    }
}

/// An instant as Cal.com asks for it: ISO 8601 in UTC (`2026-12-01T09:00:00Z`).
fn utc(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Cal.com requires an attendee email. A callee reached by phone often has
/// none, so one is made from the phone's digits under `.invalid`, a name
/// reserved never to resolve (RFC 2606): `919812345678@phone.invalid`. No
/// mail can reach it, and the host can still tell whom it stands for.
fn attendee_email(request: &BookingRequest) -> Result<String, CalendarError> {
    if let Some(email) = request.attendee_email.as_deref().filter(|e| !e.is_empty()) {
        return Ok(email.to_owned());
    }
    let digits: String = request
        .attendee_phone
        .as_deref()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    if digits.is_empty() {
        return Err(CalendarError::NoContact);
    }
    Ok(format!("{digits}@phone.invalid"))
}

/// The Cal.com web app that shows a booking: `app.` in place of `api.` for
/// Cal.com's own hosts (`https://api.cal.com` → `https://app.cal.com`), the
/// base URL's origin for a self-hosted one.
fn web_url_for(base: &Url) -> String {
    let mut web = base.clone();
    if let Some(rest) = base.host_str().and_then(|h| h.strip_prefix("api."))
        && web.set_host(Some(&format!("app.{rest}"))).is_err()
    {
        // Unreachable for a host taken from an http(s) URL; keep the API origin.
        return base.origin().ascii_serialization();
    }
    web.origin().ascii_serialization()
}

/// The reason in an error answer: `error.message` (the v2 envelope) or a
/// bare `message` (framework errors), a string or a list of strings.
fn error_reason(answer: &Value) -> Option<String> {
    let message = answer
        .pointer("/error/message")
        .or_else(|| answer.get("message"))?;
    let text = match message {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("; "),
        _ => return None,
    };
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(MAX_REASON_CHARS).collect())
}

/// `data` of `GET /v2/slots`: slots grouped by date,
/// `{"2026-12-01": [{"start": "2026-12-01T09:00:00.000+05:30"}]}`, returned
/// in date order (and in the calendar's order within a date).
fn parse_slots(data: &Value) -> Result<Vec<Slot>, CalendarError> {
    let days = data
        .as_object()
        .ok_or_else(|| CalendarError::BadAnswer("slots are not grouped by date".into()))?;
    let mut dates: Vec<&String> = days.keys().collect();
    dates.sort();
    let mut slots = Vec::new();
    for date in dates {
        let day = days
            .get(date)
            .and_then(Value::as_array)
            .ok_or_else(|| CalendarError::BadAnswer(format!("slots of {date} are not a list")))?;
        for slot in day {
            let start = slot
                .get("start")
                .and_then(Value::as_str)
                .ok_or_else(|| CalendarError::BadAnswer("a slot has no start".into()))?;
            slots.push(Slot {
                start: start.to_owned(),
            });
        }
    }
    Ok(slots)
}

/// `data` of `POST /v2/bookings`: one booking, or a list of them for a
/// recurring event type (the first is the one booked now).
fn parse_booking(data: &Value, web_url: &str) -> Result<Booking, CalendarError> {
    let booking = match data {
        Value::Array(items) => items.first().unwrap_or(&Value::Null),
        other => other,
    };
    let uid = booking
        .get("uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| CalendarError::BadAnswer("the booking has no uid".into()))?;
    let status = booking
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("accepted");
    // Cal.com returns the meeting link as `meetingUrl` (deprecated) or
    // `location` (which may also be a street address or a phone number).
    // When neither is a link, the booking's own page is built:
    // `{web}/booking/{uid}`, where Cal.com shows (and lets the attendee
    // manage) a booking.
    let link = ["meetingUrl", "location"]
        .iter()
        .filter_map(|field| booking.get(*field).and_then(Value::as_str))
        .find(|v| v.starts_with("https://") || v.starts_with("http://"))
        .map(str::to_owned);
    Ok(Booking {
        uid: uid.to_owned(),
        status: status.to_owned(),
        event_url: Some(link.unwrap_or_else(|| format!("{web_url}/booking/{uid}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_url_follows_the_api_host() {
        let web = |base: &str| web_url_for(&Url::parse(base).unwrap());
        assert_eq!(web("https://api.cal.com"), "https://app.cal.com");
        assert_eq!(web("https://api.cal.eu/"), "https://app.cal.eu");
        assert_eq!(web("http://127.0.0.1:3003/api"), "http://127.0.0.1:3003");
    }

    #[test]
    fn placeholder_email_is_made_from_the_phone() {
        let mut request = BookingRequest {
            event_type_id: 1,
            start: chrono::Utc::now(),
            time_zone: "Asia/Kolkata".into(),
            attendee_name: "Asha".into(),
            attendee_email: None,
            attendee_phone: Some("+91 98123-45678".into()),
            metadata: serde_json::Map::new(),
        };
        assert_eq!(
            attendee_email(&request).unwrap(),
            "919812345678@phone.invalid"
        );
        request.attendee_email = Some("asha@example.com".into());
        assert_eq!(attendee_email(&request).unwrap(), "asha@example.com");
        request.attendee_email = None;
        request.attendee_phone = None;
        assert!(matches!(
            attendee_email(&request),
            Err(CalendarError::NoContact)
        ));
    }

    #[test]
    fn error_reasons_are_read_from_both_shapes() {
        assert_eq!(
            error_reason(&json!({"status": "error", "error": {"message": "slot taken"}})),
            Some("slot taken".into())
        );
        assert_eq!(
            error_reason(&json!({"statusCode": 400, "message": ["a", "b"]})),
            Some("a; b".into())
        );
        assert_eq!(error_reason(&json!({"status": "error"})), None);
    }
}

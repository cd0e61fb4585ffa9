//! The Cal.com client against a wiremock fake that speaks Cal.com API v2 as
//! documented: `GET /v2/slots` (`cal-api-version: 2024-09-04`) and
//! `POST /v2/bookings` (`cal-api-version: 2024-08-13`), bearer key, the
//! `{status, data}` and `{status: "error", error: {message}}` envelopes.

use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use voxline::tools::calendar::{
    Booking, BookingRequest, CalCom, Calendar, CalendarError, Slot, SlotQuery,
};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "cal_test_key";

fn calcom(server: &MockServer) -> CalCom {
    CalCom::from_credential(
        &json!({"apiKey": KEY, "baseUrl": server.uri()}),
        reqwest::Client::new(),
    )
    .unwrap()
}

fn query() -> SlotQuery {
    SlotQuery {
        event_type_id: 4242,
        time_zone: "Asia/Kolkata".into(),
        start: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
        end: Utc.with_ymd_and_hms(2026, 12, 2, 18, 30, 0).unwrap(),
    }
}

fn booking_request(email: Option<&str>) -> BookingRequest {
    let mut metadata = serde_json::Map::new();
    metadata.insert("callId".into(), json!("call_123"));
    BookingRequest {
        event_type_id: 4242,
        start: Utc.with_ymd_and_hms(2026, 12, 1, 4, 30, 0).unwrap(),
        time_zone: "Asia/Kolkata".into(),
        attendee_name: "Asha Rao".into(),
        attendee_email: email.map(str::to_owned),
        attendee_phone: Some("+919812345678".into()),
        metadata,
    }
}

/// A slots endpoint that answers only the documented request.
fn slots_mock(response: ResponseTemplate) -> Mock {
    Mock::given(method("GET"))
        .and(path("/v2/slots"))
        .and(header("cal-api-version", "2024-09-04"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(query_param("eventTypeId", "4242"))
        .and(query_param("start", "2026-12-01T00:00:00Z"))
        .and(query_param("end", "2026-12-02T18:30:00Z"))
        .and(query_param("timeZone", "Asia/Kolkata"))
        .respond_with(response)
}

/// A bookings endpoint that answers only the documented request for `email`.
fn booking_mock(email: &str, response: ResponseTemplate) -> Mock {
    Mock::given(method("POST"))
        .and(path("/v2/bookings"))
        .and(header("cal-api-version", "2024-08-13"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(body_json(json!({
            "start": "2026-12-01T04:30:00Z",
            "eventTypeId": 4242,
            "attendee": {
                "name": "Asha Rao",
                "email": email,
                "timeZone": "Asia/Kolkata",
                "phoneNumber": "+919812345678",
            },
            "metadata": {"callId": "call_123"},
        })))
        .respond_with(response)
}

fn booked(data: Value) -> ResponseTemplate {
    ResponseTemplate::new(201).set_body_json(json!({"status": "success", "data": data}))
}

#[tokio::test]
async fn slots_are_listed_in_date_order() {
    let server = MockServer::start().await;
    slots_mock(ResponseTemplate::new(200).set_body_json(json!({
        "status": "success",
        "data": {
            "2026-12-02": [{"start": "2026-12-02T10:00:00.000+05:30"}],
            "2026-12-01": [
                {"start": "2026-12-01T10:00:00.000+05:30"},
                {"start": "2026-12-01T10:30:00.000+05:30"},
            ],
        },
    })))
    .expect(1)
    .mount(&server)
    .await;
    let slots = calcom(&server).available_slots(&query()).await.unwrap();
    let starts: Vec<&str> = slots.iter().map(|s| s.start.as_str()).collect();
    assert_eq!(
        starts,
        [
            "2026-12-01T10:00:00.000+05:30",
            "2026-12-01T10:30:00.000+05:30",
            "2026-12-02T10:00:00.000+05:30",
        ]
    );
    assert_eq!(
        slots[0],
        Slot {
            start: "2026-12-01T10:00:00.000+05:30".into()
        }
    );
}

#[tokio::test]
async fn no_free_slots_is_an_empty_list() {
    let server = MockServer::start().await;
    slots_mock(ResponseTemplate::new(200).set_body_json(json!({"status": "success", "data": {}})))
        .mount(&server)
        .await;
    assert!(
        calcom(&server)
            .available_slots(&query())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_booking_returns_its_uid_status_and_meeting_url() {
    let server = MockServer::start().await;
    booking_mock(
        "asha@example.com",
        booked(json!({
            "id": 9,
            "uid": "bk_abc123",
            "status": "accepted",
            "start": "2026-12-01T04:30:00.000Z",
            "meetingUrl": "https://app.cal.com/video/bk_abc123",
            "location": "https://app.cal.com/video/bk_abc123",
        })),
    )
    .expect(1)
    .mount(&server)
    .await;
    let booking = calcom(&server)
        .book(&booking_request(Some("asha@example.com")))
        .await
        .unwrap();
    assert_eq!(
        booking,
        Booking {
            uid: "bk_abc123".into(),
            status: "accepted".into(),
            event_url: Some("https://app.cal.com/video/bk_abc123".into()),
        }
    );
}

#[tokio::test]
async fn a_callee_without_email_is_booked_with_a_phone_placeholder() {
    let server = MockServer::start().await;
    // `location` is an address, not a link: the booking page is built.
    booking_mock(
        "919812345678@phone.invalid",
        booked(json!({"uid": "bk_9", "status": "pending", "location": "12 MG Road"})),
    )
    .expect(1)
    .mount(&server)
    .await;
    let booking = calcom(&server).book(&booking_request(None)).await.unwrap();
    assert_eq!(booking.status, "pending");
    let web = server.uri();
    assert_eq!(
        booking.event_url.as_deref(),
        Some(format!("{web}/booking/bk_9").as_str())
    );
}

#[tokio::test]
async fn an_error_body_is_a_refusal_with_its_reason() {
    let server = MockServer::start().await;
    booking_mock(
        "asha@example.com",
        ResponseTemplate::new(400).set_body_json(json!({
            "status": "error",
            "error": {"code": "BadRequestException", "message": "User either already has booking at this time or is not available"},
        })),
    )
    .mount(&server)
    .await;
    let err = calcom(&server)
        .book(&booking_request(Some("asha@example.com")))
        .await
        .unwrap_err();
    assert!(matches!(err, CalendarError::Refused { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the calendar refused the booking: User either already has booking at this time or is not available"
    );
}

#[tokio::test]
async fn a_wrong_key_is_a_refusal() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/slots"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "status": "error",
            "error": {"code": "UnauthorizedException", "message": "Invalid API Key"},
        })))
        .mount(&server)
        .await;
    let err = calcom(&server).available_slots(&query()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the calendar refused the slot search: Invalid API Key"
    );
}

#[tokio::test]
async fn a_server_error_is_reported_by_status() {
    let server = MockServer::start().await;
    slots_mock(ResponseTemplate::new(500).set_body_string("upstream exploded"))
        .mount(&server)
        .await;
    let err = calcom(&server).available_slots(&query()).await.unwrap_err();
    assert!(matches!(err, CalendarError::Status(500)), "{err:?}");
    assert_eq!(err.to_string(), "the calendar answered 500");
}

#[tokio::test]
async fn a_slow_calendar_times_out() {
    let server = MockServer::start().await;
    slots_mock(
        ResponseTemplate::new(200)
            .set_body_json(json!({"status": "success", "data": {}}))
            .set_delay(Duration::from_secs(5)),
    )
    .mount(&server)
    .await;
    let started = Instant::now();
    let err = calcom(&server)
        .with_timeout(Duration::from_millis(200))
        .available_slots(&query())
        .await
        .unwrap_err();
    assert!(matches!(err, CalendarError::Timeout(_)), "{err:?}");
    assert_eq!(err.to_string(), "the calendar did not answer within 0.2 s");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn credentials_are_read_and_checked() {
    let client = reqwest::Client::new();
    assert!(CalCom::from_credential(&json!({"apiKey": "cal_live_x"}), client.clone()).is_ok());
    let missing = CalCom::from_credential(&json!({"baseUrl": "https://x.y"}), client.clone());
    assert!(matches!(missing, Err(CalendarError::BadCredential(_))));
    let bad_base = CalCom::from_credential(&json!({"apiKey": "k", "baseUrl": "ftp://x"}), client);
    assert!(matches!(bad_base, Err(CalendarError::BadCredential(_))));
    assert_eq!(
        CalendarError::NoCredential.to_string(),
        "no credential of kind calcom"
    );
}

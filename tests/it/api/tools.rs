//! In-call tools through the whole service (issue 17): sim calls whose
//! callee asks for a person, names a day and a time, or asks about an order,
//! against the sim carrier, a Cal.com fake that checks what the v2 API
//! requires, and a customer function on loopback that checks our signature.

use crate::support::{TestApp, Workspace, eventually};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const DESK: &str = "+14155550123";

async fn place(app: &TestApp, ws: &Workspace, agent: &str, to: &str, script: Value) -> String {
    app.post(
        &ws.key,
        "/api/calls",
        json!({"agentId": agent, "to": to, "name": "Asha", "variables": {"simScript": script}}),
    )
    .await
    .expect(201)
    .body["callId"]
        .as_str()
        .expect("callId")
        .to_string()
}

async fn agent(app: &TestApp, ws: &Workspace, tools: Value) -> String {
    app.create_agent(
        &ws.key,
        json!({"name": "Tooled", "welcomeMessage": "Hello, this is Voxline.",
               "prompt": "Help the caller.", "tools": tools}),
    )
    .await["id"]
        .as_str()
        .expect("agent id")
        .to_string()
}

/// The call read once the call has ended.
async fn ended(app: &TestApp, key: &str, call_id: &str) -> Value {
    eventually(Duration::from_secs(60), "the call to end", || async {
        let r = app.get(key, &format!("/api/calls/{call_id}")).await;
        (r.body["rawStatus"] == "completed").then_some(r.body)
    })
    .await
}

fn bot_lines(call: &Value) -> Vec<String> {
    call["transcript"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["speaker"] == "Bot")
        .map(|t| t["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn said(call: &Value, line: &str) -> bool {
    call["transcript"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["text"] == line)
}

#[tokio::test]
async fn a_sim_callee_who_asks_for_a_person_is_transferred() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Transfers", 5).await;
    let agent = agent(
        &app,
        &ws,
        json!([{"type": "transferCall", "destinations": [{"number": DESK,
            "description": "the front desk", "message": "Let me connect you with the front desk."}]}]),
    )
    .await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845014001",
        json!(["Hello, yes.", "Can I speak to a person please?"]),
    )
    .await;
    let read = ended(&app, &ws.key, &call).await;
    assert_eq!(read["endedReason"], "transferred", "{read}");
    assert_eq!(read["transferredTo"], DESK);
    assert!(read["transferredAt"].is_string());
    assert_eq!(
        bot_lines(&read).last().map(String::as_str),
        Some("Let me connect you with the front desk.")
    );
    // The AI part is billed up to the transfer: a call this short is one minute.
    assert!(read["durationSeconds"].as_i64().unwrap() < 60, "{read}");
    // The sim model's tokens for its replies show per stage.
    let conversation = &read["usage"]["conversation"];
    assert!(conversation["promptTokens"].as_i64().unwrap() > 0, "{read}");
    assert!(
        conversation["completionTokens"].as_i64().unwrap() > 0,
        "{read}"
    );
    let transcript = app
        .get(&ws.key, &format!("/api/calls/{call}/transcript"))
        .await
        .expect(200)
        .body;
    let calls: Vec<&Value> = transcript["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["speaker"] == "assistant")
        .flat_map(|t| t["toolCalls"].as_array().unwrap().iter())
        .collect();
    assert_eq!(calls.len(), 1, "{transcript}");
    assert_eq!(calls[0]["name"], "transfer_call");
    assert_eq!(calls[0]["arguments"], json!({"destination": DESK}));
    assert_eq!(calls[0]["result"], json!({"transferredTo": DESK}));
    // The simulated person answers, talks for 3 s and hangs up; the sim carrier reports it.
    let leg = eventually(Duration::from_secs(30), "the bridged leg", || async {
        let r = app.get(&ws.key, &format!("/api/calls/{call}")).await;
        r.body["transferStatus"].is_string().then_some(r.body)
    })
    .await;
    assert_eq!(leg["transferStatus"], "completed");
    assert_eq!(leg["transferDurationSeconds"], 3);
}

/// A Cal.com fake for the v2 API: slots for any day (one at 15:00 local), and a booking
/// that checks the version header, the key and the body.
async fn calcom(booking: ResponseTemplate) -> (MockServer, Arc<Mutex<Vec<Value>>>) {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/slots"))
        .and(header("cal-api-version", "2024-09-04"))
        .and(header("authorization", "Bearer cal_live_test"))
        .and(query_param("eventTypeId", "42"))
        .and(query_param("timeZone", "Asia/Kolkata"))
        .respond_with(|request: &Request| {
            let start = request
                .url
                .query_pairs()
                .find(|(k, _)| k == "start")
                .map(|(_, v)| v.to_string())
                .unwrap_or_default();
            // The day asked for, as its local date: the start is local midnight in UTC.
            let day = chrono::DateTime::parse_from_rfc3339(&start)
                .map(|t| (t + chrono::Duration::hours(6)).date_naive().to_string())
                .unwrap_or_default();
            ResponseTemplate::new(200).set_body_json(json!({"status": "success", "data": {
                day.clone(): [{"start": format!("{day}T10:00:00.000+05:30")},
                              {"start": format!("{day}T15:00:00.000+05:30")}]}}))
        })
        .mount(&server)
        .await;
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&bodies);
    Mock::given(method("POST"))
        .and(path("/v2/bookings"))
        .and(header("cal-api-version", "2024-08-13"))
        .and(header("authorization", "Bearer cal_live_test"))
        .respond_with(move |request: &Request| {
            seen.lock()
                .unwrap()
                .push(serde_json::from_slice::<Value>(&request.body).unwrap_or_default());
            booking.clone()
        })
        .mount(&server)
        .await;
    (server, bodies)
}

async fn calendar_agent(app: &TestApp, ws: &Workspace, calcom: &MockServer) -> String {
    let credential = json!({"apiKey": "cal_live_test", "baseUrl": calcom.uri()});
    app.set_credential(ws, "calcom", &credential).await;
    let calendar = json!({"eventTypeId": 42, "timeZone": "Asia/Kolkata"});
    let mut check = calendar.clone();
    check["type"] = json!("checkAvailability");
    let mut book = calendar;
    book["type"] = json!("bookAppointment");
    book["message"] = json!("Let me book that for you.");
    agent(app, ws, json!([check, book])).await
}

#[tokio::test]
async fn a_callee_who_names_a_day_and_time_is_booked_through_calcom() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Bookings", 5).await;
    let (server, bodies) = calcom(ResponseTemplate::new(201).set_body_json(json!({
        "status": "success",
        "data": {"uid": "bk_123", "status": "accepted", "meetingUrl": "https://cal.com/video/bk_123"}
    })))
    .await;
    let agent = calendar_agent(&app, &ws, &server).await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845014002",
        json!(["Hello.", "Tomorrow at 3 pm works for me.", "Thanks, bye!"]),
    )
    .await;
    let read = ended(&app, &ws.key, &call).await;
    assert_eq!(read["calendarStatus"], "booked", "{read}");
    assert_eq!(read["calendarEventUrl"], "https://cal.com/video/bk_123");
    assert!(read["calendarError"].is_null());
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(body["eventTypeId"], 42, "{body}");
    assert_eq!(body["attendee"]["name"], "Asha");
    assert_eq!(body["attendee"]["timeZone"], "Asia/Kolkata");
    assert_eq!(body["attendee"]["phoneNumber"], "+919845014002");
    // The 15:00 slot the callee named, in UTC.
    assert!(
        body["start"].as_str().unwrap().ends_with("T09:30:00Z")
            || body["start"].as_str().unwrap().ends_with("T09:30:00.000Z"),
        "{body}"
    );
    assert!(
        bot_lines(&read)
            .iter()
            .any(|l| l.starts_with("Let me book that for you. You are booked for")),
        "{read}"
    );
    let names: Vec<&str> = read["toolCalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["check_availability", "book_appointment", "end_call"],
        "{read}"
    );
}

#[tokio::test]
async fn a_failed_booking_is_told_and_the_call_goes_on() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Bookings", 5).await;
    let (server, _) = calcom(ResponseTemplate::new(400).set_body_json(json!({
        "status": "error", "error": {"code": "BAD_REQUEST", "message": "slot no longer available"}
    })))
    .await;
    let agent = calendar_agent(&app, &ws, &server).await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845014003",
        json!([
            "Hello.",
            "Friday at 10 am please.",
            "Okay, another time then. Bye!"
        ]),
    )
    .await;
    let read = ended(&app, &ws.key, &call).await;
    assert_eq!(read["calendarStatus"], "failed", "{read}");
    let error = read["calendarError"].as_str().unwrap();
    assert!(error.contains("slot no longer available"), "{error}");
    assert!(read["calendarEventUrl"].is_null());
    assert!(
        bot_lines(&read)
            .iter()
            .any(|l| l.contains("I could not book that appointment")),
        "{read}"
    );
    // The callee's next line was heard: the failure did not end the call.
    assert!(said(&read, "Okay, another time then. Bye!"), "{read}");
    assert_eq!(read["endedReason"], "agent-hangup");
}

#[derive(Clone, Default)]
struct Received {
    requests: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    delay: Duration,
}

async fn order_status(State(seen): State<Received>, headers: HeaderMap, body: Bytes) -> String {
    seen.requests.lock().unwrap().push((headers, body));
    tokio::time::sleep(seen.delay).await;
    json!({"message": "Your order A-1234 ships tomorrow"}).to_string()
}

async fn function_server(delay: Duration) -> (String, Received) {
    let seen = Received {
        delay,
        ..Received::default()
    };
    let app = Router::new()
        .route("/order-status", post(order_status))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/order-status"), seen)
}

fn order_tool(url: &str) -> Value {
    json!([{"type": "function", "name": "order_status",
        "description": "Look up the delivery status of an order",
        "parameters": {"type": "object", "properties": {"orderId": {"type": "string"}},
                       "required": ["orderId"]},
        "url": url, "timeoutSeconds": 1, "message": "One moment while I check."}])
}

#[tokio::test]
async fn a_function_gets_a_signed_request_and_its_answer_is_said() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Functions", 5).await;
    let (url, seen) = function_server(Duration::ZERO).await;
    let agent = agent(&app, &ws, order_tool(&url)).await;
    let secret = app.get(&ws.key, &format!("/api/agents/{agent}")).await.body["tools"][0]["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845014004",
        json!([
            "Hello.",
            "What is the status of my order A-1234?",
            "Great, bye!"
        ]),
    )
    .await;
    let read = ended(&app, &ws.key, &call).await;
    let (headers, body) = seen.requests.lock().unwrap()[0].clone();
    let timestamp = headers["x-service-timestamp"].to_str().unwrap();
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(&body);
    let expected = format!("v1={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(headers["x-service-signature"].to_str().unwrap(), expected);
    let request: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(request["callId"], call.as_str());
    assert_eq!(request["name"], "order_status");
    assert_eq!(request["arguments"], json!({"orderId": "A-1234"}));
    assert_eq!(request["variables"]["simScript"][0], "Hello.");
    let lines = bot_lines(&read);
    let answer = lines
        .iter()
        .position(|l| l.contains("Here is what I found: Your order A-1234 ships tomorrow."))
        .unwrap_or_else(|| panic!("{read}"));
    assert!(lines[answer].starts_with("One moment while I check."));
    let tool = &read["toolCalls"][0];
    assert_eq!(
        tool["result"]["message"],
        "Your order A-1234 ships tomorrow"
    );
    assert!(tool["error"].is_null());
}

#[tokio::test]
async fn a_function_that_times_out_gives_the_model_an_error_and_the_call_goes_on() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Functions", 5).await;
    let (url, _) = function_server(Duration::from_secs(3)).await;
    let agent = agent(&app, &ws, order_tool(&url)).await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845014005",
        json!([
            "Hello.",
            "What is the status of my order A-1234?",
            "Never mind, bye!"
        ]),
    )
    .await;
    let read = ended(&app, &ws.key, &call).await;
    let tool = &read["toolCalls"][0];
    assert_eq!(tool["name"], "order_status");
    assert!(tool["result"].is_null());
    let error = tool["error"].as_str().unwrap();
    assert!(error.contains("timed out"), "{error}");
    assert!(
        bot_lines(&read)
            .iter()
            .any(|l| l.contains("I could not get that")),
        "{read}"
    );
    assert!(said(&read, "Never mind, bye!"), "{read}");
    assert_eq!(read["endedReason"], "agent-hangup");
}

#[tokio::test]
async fn arguments_that_break_the_schema_never_leave_the_server() {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Functions", 5).await;
    let (url, seen) = function_server(Duration::ZERO).await;
    // The sim model fills `orderId` from the caller's words; a pattern it cannot meet makes
    // its arguments invalid.
    let mut tools = order_tool(&url);
    tools[0]["parameters"]["properties"]["orderId"]["pattern"] = json!("^ORD-[0-9]+$");
    let agent = agent(&app, &ws, tools).await;
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845014006",
        json!([
            "Hello.",
            "What is the status of my order A-1234?",
            "Okay, bye!"
        ]),
    )
    .await;
    let read = ended(&app, &ws.key, &call).await;
    assert!(seen.requests.lock().unwrap().is_empty());
    let error = read["toolCalls"][0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("invalid arguments at /orderId"),
        "{error}"
    );
    assert!(said(&read, "Okay, bye!"), "{read}");
}

/// A callee that is a phone menu: it reads its options, listens for a key in the agent's
/// audio (the media crate's DTMF detector) and goes on only when it hears `expect`.
async fn menu_call(expect: &str) -> Value {
    let app = TestApp::spawn().await;
    let ws = app.calling_workspace("Menus", 5).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Menu walker", "welcomeMessage": "Hello.",
                   "prompt": "Reach the support team and report the outage.",
                   "tools": [{"type": "dtmf"}]}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let call = place(
        &app,
        &ws,
        &agent,
        "+919845014007",
        json!([{"menu": "For sales, press 1. For support, press 2.", "expect": expect},
               "Support desk, how can I help?", "Thanks, bye!"]),
    )
    .await;
    ended(&app, &ws.key, &call).await
}

#[tokio::test]
async fn the_dtmf_tool_presses_the_key_the_sim_menu_hears() {
    let read = menu_call("2").await;
    let tool = &read["toolCalls"][0];
    assert_eq!(tool["name"], "dtmf", "{read}");
    assert_eq!(tool["arguments"], json!({"digits": "2"}));
    // The menu heard the 2 in the agent's audio and put the call through.
    assert!(said(&read, "Support desk, how can I help?"), "{read}");
    assert_eq!(read["endedReason"], "agent-hangup");
}

#[tokio::test]
async fn a_menu_that_hears_another_key_hangs_up() {
    // The agent presses 2 (support), but this menu waits for 3: it hears the 2 and hangs up.
    let read = menu_call("3").await;
    assert_eq!(read["toolCalls"][0]["arguments"], json!({"digits": "2"}));
    assert!(!said(&read, "Support desk, how can I help?"), "{read}");
    assert_eq!(read["endedReason"], "caller-hangup", "{read}");
}

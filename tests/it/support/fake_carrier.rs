//! One fake carrier for every test that talks to a carrier's REST API: an axum
//! server on a loopback port that records each request Voxline sends (method,
//! path, headers, body) and answers it as the carrier documents
//! (`../shared/spec/telephony-protocols.md`): Twilio's Calls resource, Plivo's
//! Call and Request resources, Exotel's connect, Vonage's calls and Telnyx's
//! Call Control commands. A test that needs another answer (an error, an ended
//! call, Exotel's XML) sets it for one method and path; a path the carrier
//! does not have gets the carrier's own 404.
//!
//! Every call resource answers as a live call whatever its id, so a test that
//! means "this call already ended" says so with [`FakeCarrier::answer`] rather
//! than relying on which ids the fake has seen.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::carriers::CarrierKind;

/// One request the fake received, as Voxline sent it.
#[derive(Debug, Clone)]
pub struct CarrierRequest {
    /// The HTTP method.
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The raw body.
    pub body: Bytes,
}

impl CarrierRequest {
    /// A header as text; empty when absent, so a comparison with the expected value fails.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The body as JSON; panics when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|err| {
            panic!(
                "{} {} sent no JSON ({err}): {:?}",
                self.method, self.path, self.body
            )
        })
    }

    /// The form-encoded body's fields, in the order sent (repeated names repeat).
    pub fn form(&self) -> Vec<(String, String)> {
        form_urlencoded::parse(&self.body).into_owned().collect()
    }

    /// Every value of the form field `name`, in the order sent.
    pub fn form_values(&self, name: &str) -> Vec<String> {
        self.form()
            .into_iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v)
            .collect()
    }

    /// The form field `name`; panics unless it was sent exactly once.
    #[track_caller]
    pub fn form_value(&self, name: &str) -> String {
        let values = self.form_values(name);
        assert_eq!(values.len(), 1, "field {name} once in {:?}", self.form());
        values.into_iter().next().unwrap()
    }
}

/// What the fake answers a request with.
#[derive(Debug, Clone)]
pub struct Answer {
    status: StatusCode,
    content_type: Option<&'static str>,
    body: Bytes,
}

impl Answer {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap(),
            content_type: Some("application/json"),
            body: Bytes::from(body.to_string()),
        }
    }

    /// `status` with an XML body (Exotel answers in XML unless asked for JSON).
    pub fn xml(status: u16, body: &str) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap(),
            content_type: Some("application/xml"),
            body: Bytes::from(body.to_string()),
        }
    }

    /// `status` with no body.
    pub fn empty(status: u16) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap(),
            content_type: None,
            body: Bytes::new(),
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        // A `Body`, not `Bytes`, so an empty answer carries no content type, as the carriers' do not.
        let mut response = (self.status, axum::body::Body::from(self.body)).into_response();
        if let Some(content_type) = self.content_type {
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(content_type),
            );
        }
        response
    }
}

/// A test's answer for one method and path, used `times` more times (`None`: always).
struct Rule {
    method: Method,
    path: String,
    answer: Answer,
    times: Option<usize>,
}

/// What the server and the test share.
struct Shared {
    kind: CarrierKind,
    call_id: String,
    authorization: Option<String>,
    rules: Vec<Rule>,
    requests: Vec<CarrierRequest>,
}

impl Shared {
    /// The account's check first, as the carrier does; then the first of the
    /// test's rules that still applies, in the order they were set; then the
    /// carrier's own answer.
    fn answer(&mut self, request: &CarrierRequest) -> Answer {
        if let Some(expected) = &self.authorization
            && request.header("authorization") != expected.as_str()
        {
            return carrier_error(self.kind, 401, "Authentication failed");
        }
        if let Some(rule) = self.rules.iter_mut().find(|rule| {
            rule.method == request.method && rule.path == request.path && rule.times != Some(0)
        }) {
            if let Some(times) = &mut rule.times {
                *times -= 1;
            }
            return rule.answer.clone();
        }
        match self.kind {
            CarrierKind::Twilio => twilio(&self.call_id, request),
            CarrierKind::Plivo => plivo(&self.call_id, request),
            CarrierKind::Exotel => exotel(&self.call_id, request),
            CarrierKind::Vonage => vonage(&self.call_id, request),
            CarrierKind::Telnyx => telnyx(&self.call_id, request),
        }
    }
}

/// A recording fake of one carrier's REST API on `127.0.0.1`, alive as long as the test's runtime.
pub struct FakeCarrier {
    /// `http://127.0.0.1:<port>`, the credential's `baseUrl`.
    pub base: String,
    shared: Arc<Mutex<Shared>>,
}

impl FakeCarrier {
    /// Starts a fake of `kind` whose create-call answers with `call_id`.
    pub async fn start(kind: CarrierKind, call_id: &str) -> Self {
        let shared = Arc::new(Mutex::new(Shared {
            kind,
            call_id: call_id.to_string(),
            authorization: None,
            rules: Vec::new(),
            requests: Vec::new(),
        }));
        let app = Router::new()
            .fallback(record)
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base: format!("http://{addr}"),
            shared,
        }
    }

    /// Refuses, with the carrier's 401, every request whose `Authorization` is not `value`.
    pub fn require_authorization(&self, value: &str) {
        self.shared.lock().unwrap().authorization = Some(value.to_string());
    }

    /// Answers every `method` request to `path` with `answer` from now on.
    pub fn answer(&self, method: Method, path: &str, answer: Answer) {
        self.add_rule(method, path, answer, None);
    }

    /// Answers the next `method` request to `path` with `answer`, then as before.
    pub fn answer_once(&self, method: Method, path: &str, answer: Answer) {
        self.add_rule(method, path, answer, Some(1));
    }

    fn add_rule(&self, method: Method, path: &str, answer: Answer, times: Option<usize>) {
        self.shared.lock().unwrap().rules.push(Rule {
            method,
            path: path.to_string(),
            answer,
            times,
        });
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<CarrierRequest> {
        self.shared.lock().unwrap().requests.clone()
    }

    /// The one request received; panics unless there was exactly one.
    #[track_caller]
    pub fn only(&self) -> CarrierRequest {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "one request: {requests:?}");
        requests.into_iter().next().unwrap()
    }

    /// The `method` requests to `path` received so far, in order.
    pub fn requests_to(&self, method: Method, path: &str) -> Vec<CarrierRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }

    /// The first request `wanted` accepts, polled for up to `timeout`.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&CarrierRequest) -> bool,
    ) -> CarrierRequest {
        super::eventually(timeout, what, || {
            let found = self.requests().into_iter().find(|r| wanted(r));
            async move { found }
        })
        .await
    }
}

async fn record(
    State(shared): State<Arc<Mutex<Shared>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = CarrierRequest {
        method,
        path: uri.path().to_string(),
        headers,
        body,
    };
    let mut shared = shared.lock().unwrap();
    let answer = shared.answer(&request);
    shared.requests.push(request);
    answer.into_response()
}

/// The carrier's error body for `status`.
fn carrier_error(kind: CarrierKind, status: u16, message: &str) -> Answer {
    let body = match kind {
        // Twilio's REST errors carry a numeric code: 20404 not found, 20003 authentication.
        CarrierKind::Twilio => {
            let code = match status {
                401 => 20003,
                404 => 20404,
                _ => 20001,
            };
            json!({"code": code, "message": message, "status": status})
        }
        CarrierKind::Plivo => json!({"api_id": PLIVO_API_ID, "error": message}),
        CarrierKind::Exotel => json!({"RestException": {"Status": status, "Message": message}}),
        CarrierKind::Vonage => json!({"title": message, "detail": message}),
        CarrierKind::Telnyx => {
            let code = match status {
                401 => "10009",
                404 => "10005",
                _ => "10015",
            };
            json!({"errors": [{"code": code, "title": message, "detail": message}]})
        }
    };
    Answer::json(status, body)
}

const PLIVO_API_ID: &str = "97ceeb52-58b6-11e1-86da-77300b68f8bb";

fn segments(path: &str) -> Vec<&str> {
    path.trim_start_matches('/').split('/').collect()
}

/// `POST …/Calls.json` creates the call (201, queued); `POST …/Calls/{sid}.json`
/// updates one (200): `Status=completed` hangs it up, `Twiml` redirects it.
fn twilio(call_id: &str, request: &CarrierRequest) -> Answer {
    let not_found = || {
        carrier_error(
            CarrierKind::Twilio,
            404,
            "The requested resource was not found",
        )
    };
    if request.method != Method::POST {
        return not_found();
    }
    match segments(&request.path).as_slice() {
        ["2010-04-01", "Accounts", account, "Calls.json"] => Answer::json(
            201,
            json!({"sid": call_id, "account_sid": account, "status": "queued"}),
        ),
        ["2010-04-01", "Accounts", account, "Calls", call] if call.ends_with(".json") => {
            let status = if request.form_values("Status") == ["completed"] {
                "completed"
            } else {
                "in-progress"
            };
            Answer::json(
                200,
                json!({"sid": call.trim_end_matches(".json"), "account_sid": account, "status": status}),
            )
        }
        _ => not_found(),
    }
}

/// `POST …/Call/` fires the call (201, its `request_uuid`), `POST …/Call/{uuid}/`
/// transfers a leg (202), `DELETE …/Call/{uuid}/` and `…/Request/{uuid}/` end a
/// live call or cancel a ringing one (204).
fn plivo(call_id: &str, request: &CarrierRequest) -> Answer {
    match (&request.method, segments(&request.path).as_slice()) {
        (&Method::POST, ["v1", "Account", _, "Call", ""]) => Answer::json(
            201,
            json!({"api_id": PLIVO_API_ID, "message": "call fired", "request_uuid": call_id}),
        ),
        (&Method::POST, ["v1", "Account", _, "Call", _, ""]) => Answer::json(
            202,
            json!({"api_id": PLIVO_API_ID, "message": "call transferred"}),
        ),
        (&Method::DELETE, ["v1", "Account", _, "Call" | "Request", _, ""]) => Answer::empty(204),
        _ => carrier_error(CarrierKind::Plivo, 404, "not found"),
    }
}

/// `POST …/Calls/connect` connects the call (200, its `Call.Sid`), answered in
/// JSON as Voxline asks for.
fn exotel(call_id: &str, request: &CarrierRequest) -> Answer {
    match (&request.method, segments(&request.path).as_slice()) {
        (&Method::POST, ["v1", "Accounts", account, "Calls", "connect"]) => Answer::json(
            200,
            json!({"Call": {
                "Sid": call_id,
                "AccountSid": account,
                "From": request.form_values("From").first(),
                "Status": "in-progress",
            }}),
        ),
        _ => carrier_error(CarrierKind::Exotel, 404, "Not Found"),
    }
}

/// `POST /v1/calls` starts the call (201, its `uuid`); `PUT /v1/calls/{uuid}`
/// modifies one, a hang-up or a transfer (204).
fn vonage(call_id: &str, request: &CarrierRequest) -> Answer {
    match (&request.method, segments(&request.path).as_slice()) {
        (&Method::POST, ["v1", "calls"]) => Answer::json(
            201,
            json!({
                "uuid": call_id,
                "status": "started",
                "direction": "outbound",
                "conversation_uuid": "CON-f972836a-550f-45fa-956c-12a2ab5b7d22",
            }),
        ),
        (&Method::PUT, ["v1", "calls", _]) => Answer::empty(204),
        _ => carrier_error(CarrierKind::Vonage, 404, "Not found"),
    }
}

/// `POST /v2/calls` dials (200, its `call_control_id`; 422 without the fields a
/// streaming call needs); `POST /v2/calls/{id}/actions/{answer|reject|hangup|transfer}`
/// answers `ok` (422 for an answer's stream without a track, or a reject's unknown cause).
fn telnyx(call_id: &str, request: &CarrierRequest) -> Answer {
    match (&request.method, segments(&request.path).as_slice()) {
        (&Method::POST, ["v2", "calls"]) => {
            let dial: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let missing: Vec<&str> = ["connection_id", "to", "from", "stream_url", "stream_track"]
                .into_iter()
                .filter(|f| dial[*f].as_str().is_none_or(str::is_empty))
                .collect();
            if !missing.is_empty() {
                return carrier_error(
                    CarrierKind::Telnyx,
                    422,
                    &format!("missing {}", missing.join(", ")),
                );
            }
            Answer::json(
                200,
                json!({"data": {
                    "record_type": "call",
                    "call_control_id": call_id,
                    "call_leg_id": "2dc6fc34-f9e0-11ea-b68e-02420a0f7768",
                    "call_session_id": "2dc1b3c8-f9e0-11ea-bc5a-02420a0f7768",
                    "is_alive": false,
                }}),
            )
        }
        (&Method::POST, ["v2", "calls", _, "actions", "answer"]) => {
            // An answer that streams needs its URL and track, as Telnyx checks.
            let answer: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            if answer["stream_url"]
                .as_str()
                .is_some_and(|u| !u.starts_with("ws"))
                || (answer["stream_url"].is_string() && answer["stream_track"].as_str().is_none())
            {
                return carrier_error(
                    CarrierKind::Telnyx,
                    422,
                    "invalid stream_url or stream_track",
                );
            }
            Answer::json(200, json!({"data": {"result": "ok"}}))
        }
        (&Method::POST, ["v2", "calls", _, "actions", "reject"]) => {
            let reject: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            if !matches!(
                reject["cause"].as_str(),
                Some("CALL_REJECTED" | "USER_BUSY")
            ) {
                return carrier_error(
                    CarrierKind::Telnyx,
                    422,
                    "cause must be CALL_REJECTED or USER_BUSY",
                );
            }
            Answer::json(200, json!({"data": {"result": "ok"}}))
        }
        (&Method::POST, ["v2", "calls", _, "actions", "hangup" | "transfer"]) => {
            Answer::json(200, json!({"data": {"result": "ok"}}))
        }
        _ => carrier_error(CarrierKind::Telnyx, 404, "Resource not found"),
    }
}

//! The Twilio fleet (`--fleet twilio`): the load generator acts as Twilio, so the server under
//! test runs only the agent side. It serves the part of Twilio's Calls REST API that
//! Voxline's Twilio carrier uses (`src/carriers/twilio.rs`) on 127.0.0.1, checking HTTP Basic
//! auth against its own account SID and auth token:
//!
//! - `POST /2010-04-01/Accounts/{sid}/Calls.json` (form: `To`, `From`, `Twiml`,
//!   `StatusCallback`, `StatusCallbackEvent`…, `Timeout`, `TimeLimit`, `MachineDetection`…)
//!   answers 201 with the call (`sid` `CA` + 32 hex, status `queued`);
//! - `POST /2010-04-01/Accounts/{sid}/Calls/{CallSid}.json` with `Status=completed` (or
//!   `canceled`) hangs the call up, with a new `Twiml` (a transfer's `<Dial>`) ends the media
//!   stream and bridges the dialed person; an unknown call is 404 with code 20404.
//!
//! Each dialed call then does what Twilio does: signed status callbacks
//! (`X-Twilio-Signature`, HMAC-SHA1 keyed with the auth token) for the events the request asked
//! for (`initiated`, `ringing`, then after the ring `in-progress`), the asynchronous
//! answering-machine verdict when asked, and the media websocket of the TwiML's
//! `<Connect><Stream url>` with its `<Parameter>`s, where the run's [`SimCallee`] plays the
//! callee (`connected`, `start`, 20 ms frames) as the in-process fleet's do; its report is
//! filed with the [`Fleet`] under the `callId` parameter. When either side hangs up, the final
//! `completed` callback carries `CallDuration`. The dialed number's last two digits choose the
//! callee as the sim carrier's do ([`SimOutcome`]).
//!
//! The REST server, the callbacks and the callees all run on the fleet's runtime, so in-process
//! their CPU is told apart from the server's; against a `--target` they are not in its process.

use super::fleet::{Fleet, seed_for};
use super::metrics::TwilioRestCounts;
use crate::carriers::twilio::signature;
use crate::carriers::xml_unescape;
use crate::inbound::sim_phone::{self, RingAnswer};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use voxline_actors::sim::callee::{
    CalleeBehaviour, CalleeOptions, CalleeReport, ScriptStep, SimCallee,
};
use voxline_actors::sim::carrier::{SIM_TRANSFER_TALK, SimOutcome};

/// Twilio's error code for a request whose credentials do not authenticate.
const CODE_AUTHENTICATE: i64 = 20003;
/// Twilio's error code for a resource that does not exist (an ended call).
const CODE_NOT_FOUND: i64 = crate::carriers::twilio::CODE_NOT_FOUND;
/// How long a `<Dial>` rings before `no-answer` when its TwiML sets no `timeout` (Twilio's
/// default).
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the answering-machine detection takes to call a human.
const HUMAN_VERDICT_AFTER: Duration = Duration::from_millis(1500);
/// How long it takes to hear a machine's greeting end with its beep (the sim machine's greeting
/// and beep).
const MACHINE_VERDICT_AFTER: Duration = Duration::from_millis(4000);

/// The load generator's Twilio: its REST API on loopback and the calls dialed through it.
pub struct TwilioFleet {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl TwilioFleet {
    /// Starts the REST API on 127.0.0.1 (a free port) on `fleet`'s runtime, with a fresh
    /// account SID and auth token. Its callees play `script` after ringing for `ring`.
    pub async fn start(
        fleet: Arc<Fleet>,
        script: Vec<ScriptStep>,
        ring: Duration,
    ) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            account_sid: format!("AC{}", uuid::Uuid::new_v4().simple()),
            auth_token: uuid::Uuid::new_v4().simple().to_string(),
            fleet: Arc::clone(&fleet),
            script,
            ring,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(256)
                .build()?,
            calls: Mutex::new(HashMap::new()),
            counts: Counters::default(),
        });
        let stop = CancellationToken::new();
        let router = Router::new()
            .route(
                "/2010-04-01/Accounts/{account}/Calls.json",
                post(create_call),
            )
            .route(
                "/2010-04-01/Accounts/{account}/Calls/{call}",
                post(update_call),
            )
            .with_state(Arc::clone(&shared));
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let stopped = stop.clone();
        // Bound and served on the fleet runtime, so its sockets are driven by the fleet's threads.
        fleet.runtime().spawn(async move {
            let listener = match tokio::net::TcpListener::bind(("127.0.0.1", 0)).await {
                Ok(listener) => listener,
                Err(error) => {
                    let _ = bound_tx.send(Err(error));
                    return;
                }
            };
            let _ = bound_tx.send(listener.local_addr());
            if let Err(error) = axum::serve(listener, router)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await
            {
                tracing::warn!(%error, "the Twilio fleet's REST API stopped");
            }
        });
        let addr = bound_rx
            .await
            .map_err(|_| anyhow::anyhow!("the Twilio fleet's REST API did not start"))??;
        Ok(Self { addr, shared, stop })
    }

    /// `http://127.0.0.1:<port>`: the credential's `baseUrl`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The account SID (`AC` + 32 hex).
    pub fn account_sid(&self) -> &str {
        &self.shared.account_sid
    }

    /// The auth token (Basic auth password and callback signing key).
    pub fn auth_token(&self) -> &str {
        &self.shared.auth_token
    }

    /// The workspace's `twilio` credential that points the server's Twilio carrier here.
    pub fn credential(&self) -> Value {
        json!({
            "accountSid": self.account_sid(),
            "authToken": self.auth_token(),
            "baseUrl": self.base_url(),
        })
    }

    /// What the REST API and the callbacks saw so far.
    pub fn counts(&self) -> TwilioRestCounts {
        self.shared.counts.snapshot()
    }
}

impl Drop for TwilioFleet {
    fn drop(&mut self) {
        self.stop.cancel();
        // Calls still up end with their callee's stream.
        for (_, call) in self.shared.calls.lock().drain() {
            call.end.cancel();
        }
    }
}

/// The running counts behind [`TwilioRestCounts`].
#[derive(Default)]
struct Counters {
    dials: AtomicU64,
    unauthorized: AtomicU64,
    hangups: AtomicU64,
    redirects: AtomicU64,
    callbacks: AtomicU64,
    callbacks_refused: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> TwilioRestCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        TwilioRestCounts {
            dials: read(&self.dials),
            unauthorized: read(&self.unauthorized),
            hangups: read(&self.hangups),
            redirects: read(&self.redirects),
            callbacks: read(&self.callbacks),
            callbacks_refused: read(&self.callbacks_refused),
        }
    }
}

/// What the REST handlers and the calls share.
struct Shared {
    account_sid: String,
    auth_token: String,
    fleet: Arc<Fleet>,
    script: Vec<ScriptStep>,
    ring: Duration,
    http: reqwest::Client,
    /// Calls not yet ended, by SID.
    calls: Mutex<HashMap<String, Arc<LiveCall>>>,
    counts: Counters,
}

/// A dialed call while it lasts: how an update request reaches it.
struct LiveCall {
    /// Cancelled to end the call (or, with `dial` set, its media stream for the bridge).
    end: CancellationToken,
    /// The `<Dial>` a transfer's TwiML asked for.
    dial: Mutex<Option<DialOrder>>,
}

/// A `<Dial>` of a live call's new TwiML.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DialOrder {
    /// The person dialed (`<Number>`).
    number: String,
    /// Where the bridged leg's outcome is posted (`action`), if anywhere.
    action: Option<String>,
}

/// The `<Connect><Stream>` of a call's TwiML.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamOrder {
    /// The websocket URL.
    url: String,
    /// The `<Parameter>`s, sent in `start.customParameters`.
    params: Vec<(String, String)>,
}

/// A create-call request, as read.
#[derive(Debug, Clone)]
struct Dialed {
    sid: String,
    to: String,
    from: String,
    stream: Option<StreamOrder>,
    status_callback: Option<String>,
    events: Vec<String>,
    ring_timeout: Duration,
    time_limit: Option<Duration>,
    /// Where the asynchronous answering-machine verdict goes, when detection was asked for.
    amd_callback: Option<String>,
}

impl Dialed {
    fn asked_for(&self, event: &str) -> bool {
        self.events.iter().any(|e| e.eq_ignore_ascii_case(event))
    }

    /// The key the callee's report is filed under: our call id (the TwiML's `callId`).
    fn report_key(&self) -> String {
        self.stream
            .as_ref()
            .and_then(|stream| {
                stream
                    .params
                    .iter()
                    .find(|(name, _)| name == "callId")
                    .map(|(_, value)| value.clone())
            })
            .unwrap_or_else(|| self.sid.clone())
    }
}

/// Twilio's error body.
fn twilio_error(status: StatusCode, code: Option<i64>, message: &str) -> Response {
    let mut body = json!({"message": message, "status": status.as_u16()});
    if let Some(code) = code {
        body["code"] = json!(code);
        body["more_info"] = json!(format!("https://www.twilio.com/docs/errors/{code}"));
    }
    (status, axum::Json(body)).into_response()
}

impl Shared {
    /// Whether the request is this account's, with its SID and auth token as Basic auth.
    fn authorized(&self, account: &str, headers: &HeaderMap) -> bool {
        let expected = format!("{}:{}", self.account_sid, self.auth_token);
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Basic "))
            .and_then(|encoded| STANDARD.decode(encoded.trim()).ok());
        account == self.account_sid && given.as_deref() == Some(expected.as_bytes())
    }

    fn refuse_auth(&self) -> Response {
        self.counts.unauthorized.fetch_add(1, Ordering::Relaxed);
        twilio_error(
            StatusCode::UNAUTHORIZED,
            Some(CODE_AUTHENTICATE),
            "Authenticate",
        )
    }

    /// The fields every callback about `dialed` carries.
    fn call_fields(&self, dialed: &Dialed) -> Vec<(String, String)> {
        vec![
            ("AccountSid".into(), self.account_sid.clone()),
            ("ApiVersion".into(), "2010-04-01".into()),
            ("CallSid".into(), dialed.sid.clone()),
            ("Direction".into(), "outbound-api".into()),
            ("From".into(), dialed.from.clone()),
            ("To".into(), dialed.to.clone()),
        ]
    }

    /// Posts `params` to `url`, signed as Twilio signs (`X-Twilio-Signature`).
    async fn post_signed(&self, url: &str, params: &[(String, String)]) {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params.iter())
            .finish();
        let sent = self
            .http
            .post(url)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(
                "X-Twilio-Signature",
                signature(&self.auth_token, url, params),
            )
            .body(body)
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                self.counts.callbacks.fetch_add(1, Ordering::Relaxed);
            }
            Ok(response) => {
                self.counts
                    .callbacks_refused
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(url, status = %response.status(), "the server refused a Twilio fleet callback");
            }
            Err(error) => {
                self.counts
                    .callbacks_refused
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(url, %error, "a Twilio fleet callback was not answered");
            }
        }
    }

    /// The status callback for `status` (the `sequence`-th), when the dial asked for `event`.
    async fn status(
        &self,
        dialed: &Dialed,
        event: &str,
        status: &str,
        sequence: &mut u32,
        duration: Option<Duration>,
    ) {
        let Some(url) = dialed.status_callback.as_deref() else {
            return;
        };
        if !dialed.asked_for(event) {
            return;
        }
        let mut params = self.call_fields(dialed);
        params.push(("CallStatus".into(), status.into()));
        params.push(("CallbackSource".into(), "call-progress-events".into()));
        params.push(("SequenceNumber".into(), sequence.to_string()));
        if let Some(duration) = duration {
            params.push(("CallDuration".into(), whole_seconds(duration).to_string()));
        }
        *sequence += 1;
        self.post_signed(url, &params).await;
    }

    /// Plays one dialed call from its first callback to its last.
    async fn play(self: Arc<Self>, dialed: Dialed, live: Arc<LiveCall>) {
        let mut sequence = 0;
        self.status(&dialed, "initiated", "initiated", &mut sequence, None)
            .await;
        self.status(&dialed, "ringing", "ringing", &mut sequence, None)
            .await;
        let (wait, outcome) = match SimOutcome::for_number(&dialed.to) {
            SimOutcome::Answer(behaviour) if self.ring < dialed.ring_timeout => {
                (self.ring, Some(behaviour))
            }
            SimOutcome::Answer(_) | SimOutcome::NoAnswer => (dialed.ring_timeout, None),
            SimOutcome::Busy => (Duration::from_millis(500), None),
            SimOutcome::Failure => (Duration::from_millis(300), None),
        };
        let rang = tokio::select! {
            () = tokio::time::sleep(wait) => true,
            () = live.end.cancelled() => false,
        };
        let (final_status, duration) = match (rang, outcome) {
            (false, _) => ("canceled", None),
            (true, None) => (
                match SimOutcome::for_number(&dialed.to) {
                    SimOutcome::Busy => "busy",
                    SimOutcome::Failure => "failed",
                    _ => "no-answer",
                },
                None,
            ),
            (true, Some(behaviour)) => {
                let answered = Instant::now();
                Arc::clone(&self)
                    .talk(&dialed, &live, behaviour, &mut sequence)
                    .await;
                ("completed", Some(answered.elapsed()))
            }
        };
        self.calls.lock().remove(&dialed.sid);
        self.status(&dialed, "completed", final_status, &mut sequence, duration)
            .await;
    }

    /// The answered call: the `answered` callback, the verdict when asked, the callee on the
    /// media stream, and the bridge a transfer asked for.
    async fn talk(
        self: Arc<Self>,
        dialed: &Dialed,
        live: &Arc<LiveCall>,
        behaviour: CalleeBehaviour,
        sequence: &mut u32,
    ) {
        self.status(dialed, "answered", "in-progress", sequence, None)
            .await;
        if let Some(url) = dialed.amd_callback.clone() {
            tokio::spawn(Arc::clone(&self).machine_verdict(
                dialed.clone(),
                url,
                behaviour,
                live.end.clone(),
            ));
        }
        let key = dialed.report_key();
        self.fleet.answered(key.clone());
        let report = match &dialed.stream {
            Some(stream) => {
                let mut options = CalleeOptions {
                    stream_sid: format!("MZ{}", uuid::Uuid::new_v4().simple()),
                    call_sid: dialed.sid.clone(),
                    account_sid: self.account_sid.clone(),
                    seed: seed_for(&key),
                    cancel: live.end.clone(),
                    ..CalleeOptions::default()
                }
                .with_voice(self.fleet.voice());
                if let Some(limit) = dialed.time_limit {
                    options.max_call = limit;
                }
                self.fleet
                    .on_line(SimCallee::run(
                        stream.url.clone(),
                        stream.params.clone(),
                        self.script.clone(),
                        behaviour,
                        options,
                    ))
                    .await
            }
            None => CalleeReport {
                error: Some("the call's TwiML has no <Connect><Stream url>".to_owned()),
                ..CalleeReport::default()
            },
        };
        self.fleet.deliver(key, report, None);
        let dial = live.dial.lock().take();
        if let Some(dial) = dial {
            self.bridge(dialed, dial).await;
        }
    }

    /// A transfer's `<Dial>`: the person answers or not as their number says, talks for
    /// [`SIM_TRANSFER_TALK`], and the leg's outcome goes to the `action` URL.
    async fn bridge(&self, dialed: &Dialed, dial: DialOrder) {
        let (after, status, talked) = match SimOutcome::for_number(&dial.number) {
            SimOutcome::Answer(_) => (self.ring + SIM_TRANSFER_TALK, "completed", true),
            SimOutcome::NoAnswer => (DIAL_TIMEOUT, "no-answer", false),
            SimOutcome::Busy => (Duration::from_millis(500), "busy", false),
            SimOutcome::Failure => (Duration::from_millis(300), "failed", false),
        };
        tokio::time::sleep(after).await;
        let Some(action) = dial.action else {
            return;
        };
        let mut params = self.call_fields(dialed);
        params.push(("CallStatus".into(), "in-progress".into()));
        params.push(("DialCallSid".into(), sim_phone::new_call_sid()));
        params.push(("DialCallStatus".into(), status.into()));
        let seconds = if talked {
            whole_seconds(SIM_TRANSFER_TALK)
        } else {
            0
        };
        params.push(("DialCallDuration".into(), seconds.to_string()));
        self.post_signed(&action, &params).await;
    }

    /// The asynchronous answering-machine verdict (`DetectMessageEnd`): a person after a
    /// moment, a machine once its greeting ended with the beep, `unknown` for silence.
    async fn machine_verdict(
        self: Arc<Self>,
        dialed: Dialed,
        url: String,
        behaviour: CalleeBehaviour,
        ended: CancellationToken,
    ) {
        let (after, answered_by) = match behaviour {
            CalleeBehaviour::Human => (HUMAN_VERDICT_AFTER, "human"),
            CalleeBehaviour::AnsweringMachine => (MACHINE_VERDICT_AFTER, "machine_end_beep"),
            CalleeBehaviour::Silent => (MACHINE_VERDICT_AFTER, "unknown"),
        };
        tokio::select! {
            () = tokio::time::sleep(after) => {}
            () = ended.cancelled() => return,
        }
        let mut params = self.call_fields(&dialed);
        params.push(("AnsweredBy".into(), answered_by.into()));
        params.push((
            "MachineDetectionDuration".into(),
            after.as_millis().to_string(),
        ));
        self.post_signed(&url, &params).await;
    }
}

/// A duration in whole seconds, a started second counted.
fn whole_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// The value of the first field `name`.
fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
        .filter(|value| !value.is_empty())
}

/// A field of whole seconds.
fn seconds_field(fields: &[(String, String)], name: &str) -> Option<Duration> {
    field(fields, name)
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// `POST /2010-04-01/Accounts/{account}/Calls.json`: places a call.
async fn create_call(
    State(shared): State<Arc<Shared>>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !shared.authorized(&account, &headers) {
        return shared.refuse_auth();
    }
    let fields: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let Some(to) = field(&fields, "To") else {
        return twilio_error(
            StatusCode::BAD_REQUEST,
            Some(21201),
            "No 'To' number is specified",
        );
    };
    let Some(from) = field(&fields, "From") else {
        return twilio_error(
            StatusCode::BAD_REQUEST,
            Some(21603),
            "A 'From' phone number is required.",
        );
    };
    let Some(twiml) = field(&fields, "Twiml") else {
        return twilio_error(
            StatusCode::BAD_REQUEST,
            None,
            "the load fleet plays only calls with inline Twiml",
        );
    };
    let amd = field(&fields, "MachineDetection").is_some()
        && field(&fields, "AsyncAmd").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let dialed = Dialed {
        sid: sim_phone::new_call_sid(),
        to: to.to_owned(),
        from: from.to_owned(),
        stream: connect_stream(twiml),
        status_callback: field(&fields, "StatusCallback").map(str::to_owned),
        // Twilio's default is `completed` alone.
        events: {
            let asked: Vec<String> = fields
                .iter()
                .filter(|(key, _)| key == "StatusCallbackEvent")
                .flat_map(|(_, value)| value.split_whitespace().map(str::to_owned))
                .collect();
            if asked.is_empty() {
                vec!["completed".to_owned()]
            } else {
                asked
            }
        },
        ring_timeout: seconds_field(&fields, "Timeout").unwrap_or(Duration::from_secs(60)),
        time_limit: seconds_field(&fields, "TimeLimit"),
        amd_callback: amd
            .then(|| field(&fields, "AsyncAmdStatusCallback").map(str::to_owned))
            .flatten(),
    };
    shared.counts.dials.fetch_add(1, Ordering::Relaxed);
    let live = Arc::new(LiveCall {
        end: CancellationToken::new(),
        dial: Mutex::new(None),
    });
    shared
        .calls
        .lock()
        .insert(dialed.sid.clone(), Arc::clone(&live));
    let body = json!({
        "sid": dialed.sid,
        "account_sid": shared.account_sid,
        "to": dialed.to,
        "from": dialed.from,
        "status": "queued",
        "direction": "outbound-api",
        "api_version": "2010-04-01",
        "uri": format!("/2010-04-01/Accounts/{}/Calls/{}.json", shared.account_sid, dialed.sid),
    });
    tokio::spawn(Arc::clone(&shared).play(dialed, live));
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

/// `POST /2010-04-01/Accounts/{account}/Calls/{sid}.json`: hangs a call up or gives it new
/// TwiML.
async fn update_call(
    State(shared): State<Arc<Shared>>,
    Path((account, call)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !shared.authorized(&account, &headers) {
        return shared.refuse_auth();
    }
    let sid = call.strip_suffix(".json").unwrap_or(&call);
    let live = shared.calls.lock().get(sid).cloned();
    let Some(live) = live.filter(|_| call.ends_with(".json")) else {
        return twilio_error(
            StatusCode::NOT_FOUND,
            Some(CODE_NOT_FOUND),
            &format!(
                "The requested resource /2010-04-01/Accounts/{account}/Calls/{call} was not found"
            ),
        );
    };
    let fields: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let status = match (field(&fields, "Status"), field(&fields, "Twiml")) {
        (Some(status), _) if matches!(status, "completed" | "canceled") => {
            shared.counts.hangups.fetch_add(1, Ordering::Relaxed);
            live.end.cancel();
            status
        }
        (_, Some(twiml)) => {
            shared.counts.redirects.fetch_add(1, Ordering::Relaxed);
            // New TwiML ends the `<Connect><Stream>`; a `<Dial>` bridges the person after it.
            *live.dial.lock() = dial_order(twiml);
            live.end.cancel();
            "in-progress"
        }
        _ => {
            return twilio_error(
                StatusCode::BAD_REQUEST,
                None,
                "the load fleet updates a call with Status=completed or new Twiml",
            );
        }
    };
    axum::Json(json!({"sid": sid, "account_sid": shared.account_sid, "status": status}))
        .into_response()
}

/// The opening tags `<name …>` in `xml`, each as the text between `<name` and `>`.
fn tags<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name}");
    xml.match_indices(open.as_str())
        .filter_map(|(at, _)| {
            let rest = &xml[at + open.len()..];
            let next = rest.chars().next()?;
            if next.is_whitespace() || next == '>' || next == '/' {
                rest.find('>').map(|end| &rest[..end])
            } else {
                None
            }
        })
        .collect()
}

/// The unescaped value of attribute `name` in a tag's text.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let needle = format!("{name}=\"");
    let mut from = 0;
    while let Some(found) = tag[from..].find(&needle) {
        let at = from + found;
        let preceded_by_space = tag[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        let start = at + needle.len();
        if preceded_by_space {
            let len = tag[start..].find('"')?;
            return Some(xml_unescape(&tag[start..start + len]));
        }
        from = start;
    }
    None
}

/// The `<Connect><Stream url>` of a TwiML document and its `<Parameter>`s, read as the sim
/// phone reads an inbound answer.
fn connect_stream(twiml: &str) -> Option<StreamOrder> {
    match sim_phone::read_twiml(twiml) {
        RingAnswer::Stream { url, params } => Some(StreamOrder { url, params }),
        RingAnswer::Refused { .. } => None,
    }
}

/// The `<Dial>` of a TwiML document, when it dials a `<Number>`.
fn dial_order(twiml: &str) -> Option<DialOrder> {
    let dial_tag = tags(twiml, "Dial").first().copied()?;
    let open = twiml.find("<Number")?;
    let after = &twiml[open..];
    let start = after.find('>')? + 1;
    let len = after[start..].find("</Number>")?;
    Some(DialOrder {
        number: xml_unescape(after[start..start + len].trim()),
        action: attribute(dial_tag, "action"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carriers::twilio::{connect_twiml, transfer_twiml};
    use voxline_actors::carrier::TransferRequest;

    #[test]
    fn the_stream_and_its_parameters_are_read_from_the_carriers_twiml() {
        let twiml = connect_twiml("ws://127.0.0.1:9/media/twilio", "to&ken\"1", "call_1");
        assert_eq!(
            connect_stream(&twiml),
            Some(StreamOrder {
                url: "ws://127.0.0.1:9/media/twilio".into(),
                params: vec![
                    ("token".into(), "to&ken\"1".into()),
                    ("callId".into(), "call_1".into()),
                ],
            })
        );
        assert_eq!(connect_stream("<Response><Hangup/></Response>"), None);
    }

    #[test]
    fn a_transfer_twiml_names_the_number_and_the_action() {
        let twiml = transfer_twiml(&TransferRequest {
            call_id: "call_1".into(),
            org_id: "org".into(),
            carrier_call_id: "CA1".into(),
            to: "+919845012345".into(),
            from: "+918035740102".into(),
            leg_status_url: "http://127.0.0.1:9/carrier/twilio/transfer-status/call_1?a=1&b=2"
                .into(),
        });
        assert_eq!(
            dial_order(&twiml),
            Some(DialOrder {
                number: "+919845012345".into(),
                action: Some(
                    "http://127.0.0.1:9/carrier/twilio/transfer-status/call_1?a=1&b=2".into()
                ),
            })
        );
    }

    #[test]
    fn attributes_match_whole_names() {
        assert_eq!(
            attribute(r#" xurl="no" url="yes""#, "url").as_deref(),
            Some("yes")
        );
    }

    /// The REST API as the carrier meets it: Basic auth with the fleet's account or 401 (code
    /// 20003), a created call's `CA` SID, a hang-up of a live call, and 404 (code 20404) for one
    /// that is not.
    #[tokio::test]
    async fn the_rest_api_checks_basic_auth_and_answers_as_twilio() {
        let (answered_tx, _answered_rx) = tokio::sync::mpsc::unbounded_channel();
        let fleet = Fleet::new(tokio::runtime::Handle::current(), answered_tx, None);
        let twilio = TwilioFleet::start(fleet, Vec::new(), Duration::from_secs(60))
            .await
            .unwrap();
        let calls = format!(
            "{}/2010-04-01/Accounts/{}/Calls.json",
            twilio.base_url(),
            twilio.account_sid()
        );
        let form = [
            ("To", "+919845012310"),
            ("From", "+918035740102"),
            ("Twiml", "<Response><Hangup/></Response>"),
        ];
        let http = reqwest::Client::new();
        let refused = http
            .post(&calls)
            .basic_auth(twilio.account_sid(), Some("not-the-token"))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["code"], CODE_AUTHENTICATE);
        let created = http
            .post(&calls)
            .basic_auth(twilio.account_sid(), Some(twilio.auth_token()))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
        let call: Value = created.json().await.unwrap();
        assert_eq!(call["status"], "queued");
        let sid = call["sid"].as_str().unwrap();
        assert!(
            sid.len() == 34
                && sid.starts_with("CA")
                && sid[2..].chars().all(|c| c.is_ascii_hexdigit()),
            "{sid}"
        );
        let call_url = format!(
            "{}/2010-04-01/Accounts/{}/Calls/{sid}.json",
            twilio.base_url(),
            twilio.account_sid()
        );
        let hung_up = http
            .post(&call_url)
            .basic_auth(twilio.account_sid(), Some(twilio.auth_token()))
            .form(&[("Status", "completed")])
            .send()
            .await
            .unwrap();
        assert_eq!(hung_up.status(), 200);
        // Ended while ringing: the call is gone once its last callback would have gone.
        wait_until(|| twilio.shared.calls.lock().is_empty()).await;
        let gone = http
            .post(&call_url)
            .basic_auth(twilio.account_sid(), Some(twilio.auth_token()))
            .form(&[("Status", "completed")])
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), 404);
        let body: Value = gone.json().await.unwrap();
        assert_eq!(body["code"], CODE_NOT_FOUND);
        assert_eq!(
            twilio.counts(),
            TwilioRestCounts {
                dials: 1,
                unauthorized: 1,
                hangups: 1,
                ..TwilioRestCounts::default()
            }
        );
    }

    /// Polls `done` every 10 ms, for at most 5 s.
    async fn wait_until(done: impl Fn() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("still waiting after 5 s");
    }

    #[test]
    fn started_seconds_count() {
        assert_eq!(whole_seconds(Duration::from_millis(4_000)), 4);
        assert_eq!(whole_seconds(Duration::from_millis(4_001)), 5);
    }
}

//! Real carrier clients against the shared fake carrier (`support::FakeCarrier`),
//! which speaks each carrier's documented REST protocol, and status-callback
//! verification and mapping.
//!
//! Expected signatures are computed here independently (plain HMAC over the
//! documented signing string) or taken from published vectors, never from the
//! code under test.

use crate::support::{Answer, FakeCarrier};
use axum::body::{Bytes, to_bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tower::ServiceExt;
use voxline::carriers::callbacks::{self, CallbackHost, CallbackRequest};
use voxline::carriers::{
    CarrierCredentials, CarrierKind, ExotelCarrier, PlivoCarrier, StaticCredentials, TelnyxAccount,
    TwilioCarrier, VonageCarrier, http_client, plivo, twilio,
};
use voxline_actors::carrier::{
    AnsweredBy, Carrier, CarrierError, CarrierStatus, DialRequest, StatusSink,
};

/// A throwaway 2048-bit test key; it signs nothing outside these tests.
pub(crate) const VONAGE_PRIVATE_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDujxVtC8hzKp1B
ZZKjr6M6PRTZmmjo4jTaLyVIPISnTulU7ubXUrRlroMkSGSMTH4IrSiErnZ8b/1w
F3Emifdrh4TqcEobGjCAMVK9/w405hhphFEAHrpUOeiOWrMVefYEX+eiMv7xorD/
Ozuot3T6wQqWrtLyVIgkZ6VVtSj+hmqEqcvxia7GbJ5YaT2qd7TVX8ewM66WgJb/
CAEcC4pZMKefu4MpoAmLFVXpd5kKoigtU+IfdF65di2zXvWJu1td+B+85pfIFION
yXCboOxSe9jBlQwqfkQa3ldI9XxjjdASiC7SRY0m4fzwOtUYjMzrAJQ6bvKWg+GP
+jQsV4mjAgMBAAECggEADGYaZ5+UzHAffvUkc1QxaEb83zfhf9ragxaK7HHcyAUO
lNSSKwis5Szj35c+xplm4rAhRg76+a6WZ1JkA8eNOQBwy5LRyFdBn6SeV6qoewLv
9OEkuy6CPWkl8sZvmfDL4s3kZwr1DjR12LhtMSd0+s1vSRhYB7JxeLbqD+FlDNcn
O5yb4yUjt+rzwIHcE2rv0bebtU4GG6sHPy1XQnkg1u232vGrzTnXC6tNs9+fRaWm
LPaJM/ji2C0RXDpvsbDE8vtBwSwnhToZpYQC79Efw8ouIFx4JQu/Xn3SozMPuDjJ
eqb6tYZRXLokLscuZKUGbZsi8on4jKtASXuLhWGdhQKBgQD4fm3JxcGMsF47zos7
2CI8f+AfGXVOr8YxPtMhTHTloHbuN4OHDZDaR2Xswb1SfTWd7ZtCtIbZVGXaeU55
cGmjzuChK0WVU4jL4wfNmCSRuQBH+Z2DPBKTJ0lfx/jjd62AL95ZODoNLoHtAyEd
Mc8eNNsohSFy1wwrD7eswFBjvQKBgQD1w9RGsIRuuyLLFwpworBcFb6N40zZ/V9M
Ovqvq73iTCr/ELJZLtD+VM+Q5llcWsC2eyCfL60Wgy5u8rlFbG9A/bZfyAh9xmHl
mF5ilyBqOlafH0lZEkoN4YZE84K53Jjw5E8rDf5gnwC7jtvXO7pX38c1LfZZHhl/
GSmtvcnI3wKBgQCZJCl7ERHQJ51blFXAgtnOmSxBXkoqPS+Sh9pMCjd8kKDa/IFl
iNm9fAT3nQqVPK7/bkCiIml8pIPE2b+gHcQs/MD48pcGiR2kMX1MmjfnSrE+qjoF
d88muy6ABdiALvBRMK8CIyG7n+7YZ3ZP7LNtNTvfQ/SyNo+8NgqHP1oLrQKBgC6W
I3wO49u1n3/N6020mSere4ab6qp7y//AQlrgfEsUUyYsfRJIvJcpbnsyHwhRr6wn
pORn/jCBR2ECo7oUNvaj4VlAqtNkspP6ERIxQZTBYEAjhxzaSa1d7bzOSB6BQYCQ
Vq17ppecLGBhUSz4hnc31SQwhT0ZZo3gMDVd/40TAoGBAIgvMUatsMuOQ4xgeKMR
IE8zUUaMaqwwMRVtP/skbk0cXwy7W5YR73pQMzf1uCIgeFKzgxsYhYLUUPQGgwFD
rxLdQFXqtDsQP3u7AhgQJosUXXhhRNtMRCWqiztHXSsy4+9q7TbQn8NeWCSYkdna
toA1ZR7vtVhpi1BmqPI4VJbN
-----END PRIVATE KEY-----";
pub(crate) const VONAGE_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA7o8VbQvIcyqdQWWSo6+j
Oj0U2Zpo6OI02i8lSDyEp07pVO7m11K0Za6DJEhkjEx+CK0ohK52fG/9cBdxJon3
a4eE6nBKGxowgDFSvf8ONOYYaYRRAB66VDnojlqzFXn2BF/nojL+8aKw/zs7qLd0
+sEKlq7S8lSIJGelVbUo/oZqhKnL8YmuxmyeWGk9qne01V/HsDOuloCW/wgBHAuK
WTCnn7uDKaAJixVV6XeZCqIoLVPiH3ReuXYts171ibtbXfgfvOaXyBSDjclwm6Ds
UnvYwZUMKn5EGt5XSPV8Y43QEogu0kWNJuH88DrVGIzM6wCUOm7yloPhj/o0LFeJ
owIDAQAB
-----END PUBLIC KEY-----";

const PUBLIC: &str = "https://voxline.example.com";
const CALL_ID: &str = "call-0001";
const MEDIA_TOKEN: &str = "call-0001.1900000000.abcdef";

fn dial_request(provider: &str) -> DialRequest {
    DialRequest {
        call_id: CALL_ID.into(),
        org_id: "org-1".into(),
        to: "+919876543210".into(),
        from: "+14155550100".into(),
        media_url: format!("wss://voxline.example.com/media/{provider}"),
        media_token: MEDIA_TOKEN.into(),
        status_url: format!("{PUBLIC}/carrier/{provider}/status/{CALL_ID}"),
        ring_timeout_seconds: 30,
        time_limit_seconds: 600,
        sim_script: None,
        detect_machine: false,
    }
}

fn credentials(kind: CarrierKind, value: Value) -> Arc<dyn CarrierCredentials> {
    Arc::new(StaticCredentials(HashMap::from([(kind, value)])))
}

fn no_credentials() -> Arc<dyn CarrierCredentials> {
    Arc::new(StaticCredentials(HashMap::new()))
}

fn sink() -> StatusSink {
    StatusSink::new(|_| {})
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

fn hmac_sha1_b64(key: &str, data: &str) -> String {
    let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(data.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

fn hmac_sha256_b64(key: &str, data: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(data.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Our `sig` for unsigned carriers, as documented: hex HMAC-SHA256 of
/// "voxline/carrier-callback/v1\0" + callId.
fn our_sig(key: &str, call_id: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(b"voxline/carrier-callback/v1\0");
    mac.update(call_id.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn callback(method: Method, url: &str, headers: &[(&str, &str)], body: &[u8]) -> CallbackRequest {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    CallbackRequest {
        method,
        url: url.to_string(),
        headers: map,
        body: Bytes::copy_from_slice(body),
    }
}

/// Runs the status handler with a fixed credential; returns the HTTP status,
/// body and the statuses delivered.
async fn run_status(
    provider: &str,
    credential: Option<Value>,
    request: CallbackRequest,
) -> (StatusCode, Value, Vec<CarrierStatus>) {
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&delivered);
    let response = callbacks::status_callback(
        provider,
        CALL_ID,
        request,
        |_| async move { credential },
        move |status| sink.lock().unwrap().push(status),
    )
    .await;
    let (status, body) = split(response).await;
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let delivered = delivered.lock().unwrap().clone();
    (status, body, delivered)
}

async fn split(response: Response) -> (StatusCode, Bytes) {
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, body)
}

// ---------------------------------------------------------------- Twilio

/// The Calls resource of Twilio account `AC123`.
const TWILIO_CALLS: &str = "/2010-04-01/Accounts/AC123/Calls.json";

fn twilio_credential(fake: &FakeCarrier) -> Value {
    json!({"accountSid": "AC123", "authToken": "twilio-token", "baseUrl": fake.base})
}

#[tokio::test]
async fn twilio_places_a_call_with_connect_stream_twiml() {
    let fake = FakeCarrier::start(CarrierKind::Twilio, "CA0001").await;
    let carrier = TwilioCarrier::new(
        credentials(CarrierKind::Twilio, twilio_credential(&fake)),
        http_client(),
    );
    let mut req = dial_request("twilio");
    // A token with XML-special characters must arrive escaped in the TwiML.
    req.media_token = "a&b<c>\"d'".into();
    let sid = carrier.place(req, sink()).await.unwrap();
    assert_eq!(sid, "CA0001");

    let create = fake.only();
    assert_eq!(create.method, Method::POST);
    assert_eq!(create.path, TWILIO_CALLS);
    assert_eq!(
        create.header("authorization"),
        basic("AC123", "twilio-token")
    );
    assert_eq!(
        create.header("content-type"),
        "application/x-www-form-urlencoded"
    );
    assert_eq!(create.form_value("To"), "+919876543210");
    assert_eq!(create.form_value("From"), "+14155550100");
    assert_eq!(
        create.form_value("Twiml"),
        "<Response><Connect><Stream url=\"wss://voxline.example.com/media/twilio\">\
         <Parameter name=\"token\" value=\"a&amp;b&lt;c&gt;&quot;d&apos;\"/>\
         <Parameter name=\"callId\" value=\"call-0001\"/></Stream></Connect></Response>"
    );
    assert_eq!(
        create.form_value("StatusCallback"),
        "https://voxline.example.com/carrier/twilio/status/call-0001"
    );
    assert_eq!(
        create.form_values("StatusCallbackEvent"),
        vec!["initiated", "ringing", "answered", "completed"]
    );
    assert_eq!(create.form_value("Timeout"), "30");
    assert_eq!(create.form_value("TimeLimit"), "600");
}

#[tokio::test]
async fn twilio_hangup_posts_completed_and_treats_20404_as_ended() {
    let fake = FakeCarrier::start(CarrierKind::Twilio, "CA0001").await;
    let carrier = TwilioCarrier::new(
        credentials(CarrierKind::Twilio, twilio_credential(&fake)),
        http_client(),
    );
    let call = "/2010-04-01/Accounts/AC123/Calls/CA0001.json";
    let sid = carrier.place(dial_request("twilio"), sink()).await.unwrap();

    carrier.hangup(&sid).await.unwrap();
    let hangup = fake.requests().last().unwrap().clone();
    assert_eq!(hangup.method, Method::POST);
    assert_eq!(hangup.path, call);
    assert_eq!(
        hangup.header("authorization"),
        basic("AC123", "twilio-token")
    );
    assert_eq!(
        hangup.form(),
        vec![("Status".to_string(), "completed".to_string())]
    );

    // Already ended: Twilio answers 404 with code 20404.
    let sid = carrier.place(dial_request("twilio"), sink()).await.unwrap();
    fake.answer(
        Method::POST,
        call,
        Answer::json(
            404,
            json!({"code": 20404, "message": "The requested resource was not found", "status": 404}),
        ),
    );
    carrier.hangup(&sid).await.unwrap();
    assert_eq!(
        fake.requests_to(Method::POST, call).len(),
        2,
        "the second hang-up was answered 404"
    );
}

#[tokio::test]
async fn twilio_errors_map_to_carrier_errors() {
    let fake = FakeCarrier::start(CarrierKind::Twilio, "CA0001").await;
    fake.answer_once(
        Method::POST,
        TWILIO_CALLS,
        Answer::json(400, json!({"code": 21211, "message": "Invalid 'To'"})),
    );
    fake.answer(Method::POST, TWILIO_CALLS, Answer::empty(503));
    let carrier = TwilioCarrier::new(
        credentials(CarrierKind::Twilio, twilio_credential(&fake)),
        http_client(),
    );
    let err = carrier
        .place(dial_request("twilio"), sink())
        .await
        .unwrap_err();
    assert!(
        matches!(err, CarrierError::Rejected(ref m) if m.contains("21211")),
        "{err}"
    );
    let err = carrier
        .place(dial_request("twilio"), sink())
        .await
        .unwrap_err();
    assert!(matches!(err, CarrierError::Unreachable(_)), "{err}");

    // A 404 that is not 20404 (e.g. wrong account) is still an error.
    let other = FakeCarrier::start(CarrierKind::Twilio, "CA9").await;
    other.answer(
        Method::POST,
        "/2010-04-01/Accounts/AC123/Calls/CA9.json",
        Answer::json(404, json!({"code": 20003})),
    );
    let carrier = TwilioCarrier::new(
        credentials(CarrierKind::Twilio, twilio_credential(&other)),
        http_client(),
    );
    let sid = carrier.place(dial_request("twilio"), sink()).await.unwrap();
    assert!(carrier.hangup(&sid).await.is_err());

    // No credentials for the workspace, and a call this process never placed.
    let carrier = TwilioCarrier::new(no_credentials(), http_client());
    let err = carrier
        .place(dial_request("twilio"), sink())
        .await
        .unwrap_err();
    assert!(matches!(err, CarrierError::NotConfigured(_)), "{err}");
    assert!(matches!(
        carrier.hangup("CA-unknown").await,
        Err(CarrierError::NotConfigured(_))
    ));

    // An invalid credential (missing authToken) is a configuration error.
    let carrier = TwilioCarrier::new(
        credentials(CarrierKind::Twilio, json!({"accountSid": "AC1"})),
        http_client(),
    );
    let err = carrier
        .place(dial_request("twilio"), sink())
        .await
        .unwrap_err();
    assert!(
        matches!(err, CarrierError::NotConfigured(ref m) if m.contains("authToken")),
        "{err}"
    );
}

#[test]
fn twilio_signature_matches_the_published_vector() {
    // The example from Twilio's "Validating requests" documentation.
    let params: Vec<(String, String)> = [
        ("CallSid", "CA1234567890ABCDE"),
        ("Caller", "+12349013030"),
        ("Digits", "1234"),
        ("From", "+12349013030"),
        ("To", "+18005551212"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
    assert_eq!(
        twilio::signature("12345", url, &params),
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    );
    assert!(twilio::verify_params(
        "12345",
        url,
        &params,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));
    // Signed with the explicit port, received without it (and the reverse).
    let with_port = "https://mycompany.com:443/myapp.php?foo=1&bar=2";
    assert!(twilio::verify_params(
        "12345",
        url,
        &params,
        "EpDEmp1PyjDYp77YxYU3GILBWzE="
    ));
    assert!(twilio::verify_params(
        "12345",
        with_port,
        &params,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));
    // Wrong token, changed parameter, garbage header.
    assert!(!twilio::verify_params(
        "54321",
        url,
        &params,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));
    let mut changed = params.clone();
    changed[2].1 = "9999".into();
    assert!(!twilio::verify_params(
        "12345",
        url,
        &changed,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));
    assert!(!twilio::verify_params("12345", url, &params, "not base64!"));
}

#[test]
fn twilio_json_body_signature_uses_body_sha256() {
    // The JSON-body example of Twilio's helper libraries.
    let body = br#"{"property": "value", "boolean": true}"#;
    let hash = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620";
    assert_eq!(hex::encode(Sha256::digest(body)), hash);
    let url = format!("https://mycompany.com/myapp.php?foo=1&bar=2&bodySHA256={hash}");
    assert!(twilio::verify_form(
        "12345",
        &url,
        body,
        "a9nBmqA0ju/hNViExpshrM61xv4="
    ));
    assert!(twilio::verify_json_body(
        "12345",
        &url,
        body,
        "a9nBmqA0ju/hNViExpshrM61xv4="
    ));
    // A different body no longer matches the signed hash.
    assert!(!twilio::verify_form(
        "12345",
        &url,
        b"{}",
        "a9nBmqA0ju/hNViExpshrM61xv4="
    ));
}

#[test]
fn url_port_variants_add_and_remove_the_port() {
    assert_eq!(
        twilio::url_port_variants("https://a.example/x?y=1"),
        vec!["https://a.example/x?y=1", "https://a.example:443/x?y=1"]
    );
    assert_eq!(
        twilio::url_port_variants("http://a.example:8080/x"),
        vec!["http://a.example:8080/x", "http://a.example/x"]
    );
    assert_eq!(
        twilio::url_port_variants("http://[::1]/x"),
        vec!["http://[::1]/x", "http://[::1]:80/x"]
    );
}

fn twilio_status_request(
    token: &str,
    fields: &[(&str, &str)],
    signed_url: &str,
) -> CallbackRequest {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter().copied())
        .finish();
    // The documented algorithm: URL, then each parameter sorted by name, name then value.
    let mut sorted: Vec<&(&str, &str)> = fields.iter().collect();
    sorted.sort();
    let mut signing = signed_url.to_string();
    for (k, v) in sorted {
        signing.push_str(k);
        signing.push_str(v);
    }
    let signature = hmac_sha1_b64(token, &signing);
    callback(
        Method::POST,
        &format!("{PUBLIC}/carrier/twilio/status/{CALL_ID}"),
        &[
            ("x-twilio-signature", &signature),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        body.as_bytes(),
    )
}

#[tokio::test]
async fn twilio_status_callbacks_are_verified_and_mapped() {
    let credential = json!({"accountSid": "AC123", "authToken": "twilio-token"});
    let url = format!("{PUBLIC}/carrier/twilio/status/{CALL_ID}");
    let cases: Vec<(&str, Option<CarrierStatus>)> = vec![
        ("queued", None),
        ("initiated", None),
        ("ringing", Some(CarrierStatus::Ringing)),
        ("in-progress", Some(CarrierStatus::Answered)),
        ("completed", Some(CarrierStatus::Completed)),
        ("busy", Some(CarrierStatus::Busy)),
        ("failed", Some(CarrierStatus::Failed("failed".into()))),
        ("no-answer", Some(CarrierStatus::NoAnswer)),
        ("canceled", Some(CarrierStatus::Failed("canceled".into()))),
    ];
    for (call_status, expected) in cases {
        let request = twilio_status_request(
            "twilio-token",
            &[
                ("AccountSid", "AC123"),
                ("CallSid", "CA0001"),
                ("CallStatus", call_status),
                ("StatusCallbackEvent", "x"),
            ],
            &url,
        );
        let (status, _, delivered) = run_status("twilio", Some(credential.clone()), request).await;
        assert_eq!(status, StatusCode::OK, "{call_status}");
        assert_eq!(
            delivered,
            expected.into_iter().collect::<Vec<_>>(),
            "{call_status}"
        );
    }
    for answered_by in [
        "human",
        "machine_start",
        "machine_end_beep",
        "machine_end_silence",
        "machine_end_other",
        "fax",
        "unknown",
    ] {
        assert_eq!(
            twilio::map_status("in-progress", Some(answered_by)),
            Some(CarrierStatus::Answered)
        );
    }

    // Signed over the URL with the default port: still accepted.
    let request = twilio_status_request(
        "twilio-token",
        &[("CallStatus", "ringing")],
        &format!("https://voxline.example.com:443/carrier/twilio/status/{CALL_ID}"),
    );
    let (status, _, delivered) = run_status("twilio", Some(credential.clone()), request).await;
    assert_eq!(
        (status, delivered),
        (StatusCode::OK, vec![CarrierStatus::Ringing])
    );

    // Wrong token, tampered body, missing header, unknown workspace: 403 {message}, nothing delivered.
    let request = twilio_status_request("other-token", &[("CallStatus", "completed")], &url);
    let (status, body, delivered) = run_status("twilio", Some(credential.clone()), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("X-Twilio-Signature")
    );
    assert!(delivered.is_empty());

    let mut request = twilio_status_request("twilio-token", &[("CallStatus", "ringing")], &url);
    request.body = Bytes::from_static(b"CallStatus=completed");
    let (status, _, delivered) = run_status("twilio", Some(credential.clone()), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(delivered.is_empty());

    let mut request = twilio_status_request("twilio-token", &[("CallStatus", "ringing")], &url);
    request.headers.remove("x-twilio-signature");
    let (status, body, _) = run_status("twilio", Some(credential.clone()), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["message"].is_string());

    let request = twilio_status_request("twilio-token", &[("CallStatus", "ringing")], &url);
    let (status, body, _) = run_status("twilio", None, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["message"], "callback cannot be verified");

    // Unknown provider.
    let request = twilio_status_request("twilio-token", &[("CallStatus", "ringing")], &url);
    let (status, _, _) = run_status("carrier-pigeon", Some(credential), request).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

// ---------------------------------------------------------------- Plivo

/// One form field of a fake callback.
type FormPair = (&'static str, &'static str);

/// The Call resource of Plivo account `MA123`.
const PLIVO_CALLS: &str = "/v1/Account/MA123/Call/";

fn plivo_credential(fake: &FakeCarrier) -> Value {
    json!({"authId": "MA123", "authToken": "plivo-token", "baseUrl": fake.base})
}

#[tokio::test]
async fn plivo_places_a_call_with_answer_ring_and_hangup_urls() {
    let fake = FakeCarrier::start(CarrierKind::Plivo, "75b6b0f5-ec1a-4f0c-9d66-2b0d3d5c6b1a").await;
    let answer_url = format!(
        "{PUBLIC}/carrier/plivo/answer/{CALL_ID}?media=wss%3A%2F%2Fvoxline.example.com%2Fmedia%2Fplivo&token={MEDIA_TOKEN}"
    );
    let status_url = format!("{PUBLIC}/carrier/plivo/status/{CALL_ID}");
    let carrier = PlivoCarrier::new(
        credentials(CarrierKind::Plivo, plivo_credential(&fake)),
        http_client(),
    );
    let uuid = carrier.place(dial_request("plivo"), sink()).await.unwrap();
    assert_eq!(uuid, "75b6b0f5-ec1a-4f0c-9d66-2b0d3d5c6b1a");

    let create = fake.only();
    assert_eq!(create.method, Method::POST);
    assert_eq!(create.path, PLIVO_CALLS);
    assert_eq!(
        create.header("authorization"),
        basic("MA123", "plivo-token")
    );
    assert_eq!(
        create.json(),
        json!({
            "from": "+14155550100",
            "to": "+919876543210",
            "answer_url": answer_url,
            "answer_method": "POST",
            "hangup_url": status_url,
            "ring_url": status_url,
            "ring_timeout": 30,
            "time_limit": 600,
        })
    );
}

#[tokio::test]
async fn plivo_hangup_deletes_the_call_then_the_request_and_accepts_ended_calls() {
    let fake = FakeCarrier::start(CarrierKind::Plivo, "u-1").await;
    let carrier = PlivoCarrier::new(
        credentials(CarrierKind::Plivo, plivo_credential(&fake)),
        http_client(),
    );
    let call = "/v1/Account/MA123/Call/u-1/";
    let request = "/v1/Account/MA123/Request/u-1/";

    // Live call: DELETE …/Call/{uuid}/ answers 204.
    let uuid = carrier.place(dial_request("plivo"), sink()).await.unwrap();
    carrier.hangup(&uuid).await.unwrap();
    let deletes = fake.requests_to(Method::DELETE, call);
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(
        deletes[0].header("authorization"),
        basic("MA123", "plivo-token")
    );

    // Still ringing: the call is unknown (404), the request is cancelled (204).
    let uuid = carrier.place(dial_request("plivo"), sink()).await.unwrap();
    fake.answer(
        Method::DELETE,
        call,
        Answer::json(404, json!({"error": "not found"})),
    );
    carrier.hangup(&uuid).await.unwrap();
    assert_eq!(fake.requests_to(Method::DELETE, request).len(), 1);

    // Already ended: both answer 404, which is success.
    let uuid = carrier.place(dial_request("plivo"), sink()).await.unwrap();
    fake.answer(Method::DELETE, request, Answer::empty(404));
    carrier.hangup(&uuid).await.unwrap();
    assert_eq!(fake.requests_to(Method::DELETE, request).len(), 2);

    // A refused hang-up (401) is an error.
    let refusing = FakeCarrier::start(CarrierKind::Plivo, "u-2").await;
    for resource in ["Call", "Request"] {
        refusing.answer(
            Method::DELETE,
            &format!("/v1/Account/MA123/{resource}/u-2/"),
            Answer::empty(401),
        );
    }
    let carrier = PlivoCarrier::new(
        credentials(CarrierKind::Plivo, plivo_credential(&refusing)),
        http_client(),
    );
    let uuid = carrier.place(dial_request("plivo"), sink()).await.unwrap();
    assert!(matches!(
        carrier.hangup(&uuid).await,
        Err(CarrierError::Rejected(_))
    ));
}

#[test]
fn plivo_signature_matches_independent_vectors() {
    let params: Vec<(String, String)> = [
        ("CallUUID", "abc"),
        ("CallStatus", "completed"),
        ("Event", "Hangup"),
        ("From", "+911234567890"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let url = "https://voxline.example.com/carrier/plivo/status/call-1";
    let nonce = "12345678901234567890";
    // Computed with Plivo's published signing rules (POST: URL, "?", sorted params as namevalue).
    let expected = "kSvKdhLmUmM4oj7nc1d1s6fYrXDXxyjcWbZn1wD1/sg=";
    assert_eq!(
        hmac_sha256_b64(
            "plivo-token",
            "https://voxline.example.com/carrier/plivo/status/call-1?CallStatuscompletedCallUUIDabcEventHangupFrom+911234567890.12345678901234567890"
        ),
        expected
    );
    assert_eq!(
        plivo::signature_v3("plivo-token", "POST", url, &params, nonce),
        expected
    );
    assert!(plivo::verify_v3(
        "plivo-token",
        "POST",
        url,
        &params,
        nonce,
        expected
    ));
    // Several signatures in the header: any one may match.
    let header = format!("bm90LXRoaXM=,{expected}");
    assert!(plivo::verify_v3(
        "plivo-token",
        "POST",
        url,
        &params,
        nonce,
        &header
    ));
    assert!(!plivo::verify_v3(
        "plivo-token",
        "POST",
        url,
        &params,
        "other-nonce",
        expected
    ));
    assert!(!plivo::verify_v3(
        "wrong", "POST", url, &params, nonce, expected
    ));
    assert!(!plivo::verify_v3(
        "plivo-token",
        "POST",
        url,
        &params,
        nonce,
        ""
    ));
    // Only the URL as given to Plivo: as in Plivo's own validate_v3_signature,
    // a signature over the URL with the port added or removed is refused.
    let with_port = "https://voxline.example.com:443/carrier/plivo/status/call-1";
    assert!(!plivo::verify_v3(
        "plivo-token",
        "POST",
        with_port,
        &params,
        nonce,
        expected
    ));
    let over_port = plivo::signature_v3("plivo-token", "POST", with_port, &params, nonce);
    assert!(plivo::verify_v3(
        "plivo-token",
        "POST",
        with_port,
        &params,
        nonce,
        &over_port
    ));
    assert!(!plivo::verify_v3(
        "plivo-token",
        "POST",
        url,
        &params,
        nonce,
        &over_port
    ));

    // With a query on the URL: sorted decoded query, ".", then the parameters.
    let answer = "https://voxline.example.com/carrier/plivo/answer/call-1?media=ws%3A%2F%2Fh%2Fmedia%2Fplivo&token=t.1.ab";
    let answer_params = vec![
        ("Event".to_string(), "StartApp".to_string()),
        ("CallStatus".to_string(), "in-progress".to_string()),
    ];
    assert_eq!(
        plivo::signature_v3("plivo-token", "POST", answer, &answer_params, "n2"),
        "VhB+TfJ7fOTJ1jcNlvJeRGDN+8+FHfGHOGVnF9QlfwU="
    );

    // GET without query (the websocket upgrade): the spec's url + "." + nonce.
    let ws = "wss://voxline.example.com/media/plivo/tok";
    let expected = hmac_sha256_b64("plivo-token", &format!("{ws}.n3"));
    assert_eq!(expected, "r5FfZB3qQ9+VXKoGtPzA8klDDXQVW9uJn4N9MU6EYjo=");
    assert!(plivo::verify_v3(
        "plivo-token",
        "GET",
        ws,
        &[],
        "n3",
        &expected
    ));
}

fn plivo_request(url: &str, fields: &[(&str, &str)], nonce: &str, token: &str) -> CallbackRequest {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter().copied())
        .finish();
    let params: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let signature = plivo::signature_v3(token, "POST", url, &params, nonce);
    callback(
        Method::POST,
        url,
        &[
            ("x-plivo-signature-v3", &signature),
            ("x-plivo-signature-v3-nonce", nonce),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        body.as_bytes(),
    )
}

#[tokio::test]
async fn plivo_status_callbacks_are_verified_and_mapped() {
    let credential = json!({"authId": "MA123", "authToken": "plivo-token"});
    let url = format!("{PUBLIC}/carrier/plivo/status/{CALL_ID}");
    let cases: Vec<(&[FormPair], Option<CarrierStatus>)> = vec![
        (
            &[("Event", "Ring"), ("CallStatus", "ringing")],
            Some(CarrierStatus::Ringing),
        ),
        (
            &[("Event", "StartApp"), ("CallStatus", "in-progress")],
            Some(CarrierStatus::Answered),
        ),
        (
            &[("Event", "Hangup"), ("CallStatus", "completed")],
            Some(CarrierStatus::Completed),
        ),
        (
            &[("Event", "Hangup"), ("CallStatus", "busy")],
            Some(CarrierStatus::Busy),
        ),
        (
            &[("Event", "Hangup"), ("CallStatus", "failed")],
            Some(CarrierStatus::Failed("failed".into())),
        ),
        (
            &[("Event", "Hangup"), ("CallStatus", "timeout")],
            Some(CarrierStatus::NoAnswer),
        ),
        (
            &[("Event", "Hangup"), ("CallStatus", "no-answer")],
            Some(CarrierStatus::NoAnswer),
        ),
        (
            &[("Event", "Hangup"), ("CallStatus", "cancel")],
            Some(CarrierStatus::Failed("cancel".into())),
        ),
        (&[("Event", "Ring")], Some(CarrierStatus::Ringing)),
        (&[("Event", "Hangup")], Some(CarrierStatus::Completed)),
        (&[("Event", "Something")], None),
    ];
    for (fields, expected) in cases {
        let request = plivo_request(&url, fields, "nonce-1", "plivo-token");
        let (status, _, delivered) = run_status("plivo", Some(credential.clone()), request).await;
        assert_eq!(status, StatusCode::OK, "{fields:?}");
        assert_eq!(
            delivered,
            expected.into_iter().collect::<Vec<_>>(),
            "{fields:?}"
        );
    }

    // A JSON body with the same fields is read too (signed over its fields).
    let params = vec![("CallStatus".to_string(), "busy".to_string())];
    let signature = plivo::signature_v3("plivo-token", "POST", &url, &params, "n");
    let request = callback(
        Method::POST,
        &url,
        &[
            ("x-plivo-signature-v3", &signature),
            ("x-plivo-signature-v3-nonce", "n"),
        ],
        br#"{"CallStatus":"busy"}"#,
    );
    let (status, _, delivered) = run_status("plivo", Some(credential.clone()), request).await;
    assert_eq!(
        (status, delivered),
        (StatusCode::OK, vec![CarrierStatus::Busy])
    );

    // Signed with another token, missing nonce: 403.
    let request = plivo_request(&url, &[("CallStatus", "completed")], "n", "other");
    let (status, body, delivered) = run_status("plivo", Some(credential.clone()), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["message"].as_str().unwrap().contains("Plivo"));
    assert!(delivered.is_empty());
    let mut request = plivo_request(&url, &[("CallStatus", "completed")], "n", "plivo-token");
    request.headers.remove("x-plivo-signature-v3-nonce");
    let (status, _, _) = run_status("plivo", Some(credential.clone()), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Verified but unreadable: 400.
    let request = plivo_request(&url, &[("Foo", "bar")], "n", "plivo-token");
    let (status, _, _) = run_status("plivo", Some(credential), request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Signs a Plivo status callback over `url` and posts it to the server at
/// `base` (the path and query of `url`); returns the answer's status.
async fn post_plivo_status(
    http: &reqwest::Client,
    base: &str,
    url: &str,
    fields: &[(&str, &str)],
) -> u16 {
    let signed = plivo_request(url, fields, "nonce-9", "pl-token");
    let path = &url[url.find("/carrier/").expect("a callback path")..];
    let mut request = http
        .post(format!("{base}{path}"))
        .body(signed.body.to_vec());
    for (name, value) in &signed.headers {
        request = request.header(name.as_str(), value.as_bytes());
    }
    request.send().await.expect("send").status().as_u16()
}

#[tokio::test]
async fn plivo_callbacks_are_verified_over_exactly_the_url_plivo_was_given() {
    // A public URL with an explicit port: the callback URLs Plivo gets carry it.
    let public = "https://voxline.example.com:8443";
    let plivo_api = FakeCarrier::start(CarrierKind::Plivo, "u-88").await;
    let app = crate::support::TestApp::spawn_with_settings(|settings| {
        settings.public_url = Some(public.to_string());
    })
    .await;
    let ws = app.calling_workspace("Plivo", 2).await;
    app.add_number(&ws, "+918035740188", "plivo").await;
    let credential = json!({"authId": "MA88", "authToken": "pl-token", "baseUrl": plivo_api.base});
    app.set_credential(&ws, "plivo", &credential).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Plivo", "welcomeMessage": "Hi.", "prompt": "Be brief.", "telephonyProvider": "plivo"}),
        )
        .await["id"]
        .as_str()
        .expect("agent id")
        .to_string();
    let id = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": "+919845012388"}),
        )
        .await
        .expect(201)
        .body["callId"]
        .as_str()
        .expect("callId")
        .to_string();
    let created = plivo_api
        .wait_for(
            "the Plivo API to be called",
            std::time::Duration::from_secs(10),
            |r| r.method == Method::POST,
        )
        .await
        .json();
    let given = created["hangup_url"].as_str().expect("hangup_url");
    assert_eq!(given, format!("{public}/carrier/plivo/status/{id}"));
    let status = || async {
        app.get(&ws.key, &format!("/api/calls/{id}"))
            .await
            .expect(200)
            .body["rawStatus"]
            .clone()
    };

    // Signed over the same URL without its port: not what Plivo was given.
    let without_port = given.replacen(":8443", "", 1);
    let hangup = [
        ("CallUUID", "u-88"),
        ("Event", "Hangup"),
        ("CallStatus", "busy"),
    ];
    assert_eq!(
        post_plivo_status(&app.http, &app.base, &without_port, &hangup).await,
        403
    );
    assert_eq!(status().await, "ringing");

    // Signed over the URL as given: accepted, and the call ends busy.
    assert_eq!(
        post_plivo_status(&app.http, &app.base, given, &hangup).await,
        200
    );
    crate::support::eventually(
        std::time::Duration::from_secs(10),
        "the call to end busy",
        || async { (status().await == "busy").then_some(()) },
    )
    .await;
    app.shutdown().await;
    assert_eq!(
        plivo_api
            .requests_to(Method::POST, "/v1/Account/MA88/Call/")
            .len(),
        1,
        "one call placed"
    );
}

#[tokio::test]
async fn plivo_answer_returns_stream_xml_and_reports_answered() {
    let credential = json!({"authId": "MA123", "authToken": "plivo-token"});
    let answer_url = plivo::answer_url(&dial_request("plivo"));
    assert_eq!(
        answer_url,
        format!(
            "{PUBLIC}/carrier/plivo/answer/{CALL_ID}?media=wss%3A%2F%2Fvoxline.example.com%2Fmedia%2Fplivo&token={MEDIA_TOKEN}"
        )
    );
    let request = plivo_request(
        &answer_url,
        &[
            ("CallUUID", "u-1"),
            ("CallStatus", "in-progress"),
            ("Event", "StartApp"),
        ],
        "nonce-a",
        "plivo-token",
    );
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&delivered);
    let cred = credential.clone();
    let response = callbacks::plivo_answer(
        CALL_ID,
        request,
        |kind| async move {
            assert_eq!(kind, CarrierKind::Plivo);
            Some(cred)
        },
        move |s| sink.lock().unwrap().push(s),
    )
    .await;
    assert_eq!(response.headers()["content-type"], "application/xml");
    let (status, body) = split(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Stream bidirectional=\"true\" keepCallAlive=\"true\" contentType=\"audio/x-mulaw;rate=8000\">wss://voxline.example.com/media/plivo/{MEDIA_TOKEN}</Stream></Response>"
        )
    );
    assert_eq!(*delivered.lock().unwrap(), vec![CarrierStatus::Answered]);

    // An unsigned answer request gets no stream.
    let request = callback(Method::GET, &answer_url, &[], b"");
    let response = callbacks::plivo_answer(
        CALL_ID,
        request,
        |_| async move { Some(credential) },
        |_| panic!("no status for an unverified answer"),
    )
    .await;
    let (status, body) = split(response).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert!(body["message"].is_string());
}

// ---------------------------------------------------------------- Exotel

fn exotel_credential(fake: &FakeCarrier) -> Value {
    json!({"accountSid": "exo1", "apiKey": "exo-key", "apiToken": "exo-token", "baseUrl": fake.base})
}

#[tokio::test]
async fn exotel_connects_a_bidirectional_stream() {
    let fake = FakeCarrier::start(CarrierKind::Exotel, "b6cf3d1a2c").await;
    let carrier = ExotelCarrier::new(
        credentials(CarrierKind::Exotel, exotel_credential(&fake)),
        http_client(),
    );
    let sid = carrier.place(dial_request("exotel"), sink()).await.unwrap();
    assert_eq!(sid, "b6cf3d1a2c");
    let connect = fake.only();
    assert_eq!(connect.method, Method::POST);
    assert_eq!(connect.path, "/v1/Accounts/exo1/Calls/connect");
    assert_eq!(
        connect.header("authorization"),
        basic("exo-key", "exo-token")
    );
    assert_eq!(connect.form_value("From"), "+919876543210");
    assert_eq!(connect.form_value("CallerId"), "+14155550100");
    assert_eq!(
        connect.form_value("StreamUrl"),
        format!("wss://voxline.example.com/media/exotel/{MEDIA_TOKEN}")
    );
    assert_eq!(connect.form_value("StreamType"), "bidirectional");
    assert_eq!(
        connect.form_value("StatusCallback"),
        format!(
            "{PUBLIC}/carrier/exotel/status/{CALL_ID}?sig={}",
            our_sig("exo-token", CALL_ID)
        )
    );
    assert_eq!(connect.form_value("TimeOut"), "30");
    assert_eq!(connect.form_value("TimeLimit"), "600");
    // No REST hang-up: it succeeds without a request.
    carrier.hangup(&sid).await.unwrap();
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn exotel_reads_the_xml_answer_and_uses_the_subdomain() {
    // The fake's own JSON answer names another call, so the SID read can only come from the XML.
    let fake = FakeCarrier::start(CarrierKind::Exotel, "json-sid").await;
    fake.answer(
        Method::POST,
        "/v1/Accounts/exo1/Calls/connect",
        Answer::xml(
            200,
            "<?xml version=\"1.0\"?><TwilioResponse><Call><Sid>xml-sid-1</Sid><Status>in-progress</Status></Call></TwilioResponse>",
        ),
    );
    // `subdomain` may be a full origin (tests) or a host name (production).
    let credential =
        json!({"accountSid": "exo1", "apiKey": "k", "apiToken": "t", "subdomain": fake.base});
    let carrier = ExotelCarrier::new(credentials(CarrierKind::Exotel, credential), http_client());
    assert_eq!(
        carrier.place(dial_request("exotel"), sink()).await.unwrap(),
        "xml-sid-1"
    );
    let account = voxline::carriers::ExotelAccount::from_credential(
        &json!({"accountSid": "a", "apiKey": "k", "apiToken": "t", "subdomain": "api.in.exotel.com"}),
    )
    .unwrap();
    assert_eq!(account.base_url, "https://api.in.exotel.com");
}

#[tokio::test]
async fn exotel_status_callbacks_carry_our_sig_and_are_mapped() {
    let credential = json!({"accountSid": "exo1", "apiKey": "exo-key", "apiToken": "exo-token"});
    let url = format!(
        "{PUBLIC}/carrier/exotel/status/{CALL_ID}?sig={}",
        our_sig("exo-token", CALL_ID)
    );
    let cases: Vec<(&str, Option<CarrierStatus>)> = vec![
        ("Status=queued", None),
        ("Status=ringing", Some(CarrierStatus::Ringing)),
        (
            "Status=in-progress&EventType=answered",
            Some(CarrierStatus::Answered),
        ),
        (
            "Status=completed&EventType=terminal",
            Some(CarrierStatus::Completed),
        ),
        ("Status=busy&EventType=terminal", Some(CarrierStatus::Busy)),
        (
            "Status=no-answer&EventType=terminal",
            Some(CarrierStatus::NoAnswer),
        ),
        (
            "Status=failed&EventType=terminal",
            Some(CarrierStatus::Failed("failed".into())),
        ),
        (
            "Status=canceled",
            Some(CarrierStatus::Failed("canceled".into())),
        ),
        ("EventType=answered", Some(CarrierStatus::Answered)),
        (
            r#"{"CallSid":"x","Status":"completed"}"#,
            Some(CarrierStatus::Completed),
        ),
    ];
    for (body, expected) in cases {
        let request = callback(Method::POST, &url, &[], body.as_bytes());
        let (status, _, delivered) = run_status("exotel", Some(credential.clone()), request).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            delivered,
            expected.into_iter().collect::<Vec<_>>(),
            "{body}"
        );
    }
    // Missing sig, sig of another call, sig under another token.
    for bad in [
        format!("{PUBLIC}/carrier/exotel/status/{CALL_ID}"),
        format!(
            "{PUBLIC}/carrier/exotel/status/{CALL_ID}?sig={}",
            our_sig("exo-token", "call-0002")
        ),
        format!(
            "{PUBLIC}/carrier/exotel/status/{CALL_ID}?sig={}",
            our_sig("other", CALL_ID)
        ),
    ] {
        let request = callback(Method::POST, &bad, &[], b"Status=completed");
        let (status, body, delivered) =
            run_status("exotel", Some(credential.clone()), request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{bad}");
        assert!(body["message"].is_string());
        assert!(delivered.is_empty());
    }
}

// ---------------------------------------------------------------- Vonage

fn vonage_credential(fake: &FakeCarrier) -> Value {
    json!({"applicationId": "app-1", "privateKey": VONAGE_PRIVATE_KEY, "baseUrl": fake.base})
}

fn decode_app_jwt(authorization: &str) -> Value {
    let token = authorization.strip_prefix("Bearer ").unwrap();
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(VONAGE_PUBLIC_KEY.as_bytes()).unwrap();
    let validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    jsonwebtoken::decode::<Value>(token, &key, &validation)
        .unwrap()
        .claims
}

#[tokio::test]
async fn vonage_places_a_call_with_a_websocket_ncco_and_an_rs256_jwt() {
    let fake =
        FakeCarrier::start(CarrierKind::Vonage, "63f61863-4a51-4f6b-86e1-46edebcf9356").await;
    let event_url = format!(
        "{PUBLIC}/carrier/vonage/status/{CALL_ID}?sig={}",
        our_sig(VONAGE_PRIVATE_KEY, CALL_ID)
    );
    let create_body = json!({
        "to": [{"type": "phone", "number": "919876543210"}],
        "from": {"type": "phone", "number": "14155550100"},
        "ncco": [{
            "action": "connect",
            "endpoint": [{
                "type": "websocket",
                "uri": "wss://voxline.example.com/media/vonage",
                "content-type": "audio/l16;rate=16000",
                "headers": {"token": MEDIA_TOKEN, "callId": CALL_ID}
            }]
        }],
        "event_url": [event_url],
        "event_method": "POST",
        "ringing_timer": 30,
        "length_timer": 600
    });
    let carrier = VonageCarrier::new(
        credentials(CarrierKind::Vonage, vonage_credential(&fake)),
        http_client(),
    );
    let uuid = carrier.place(dial_request("vonage"), sink()).await.unwrap();
    assert_eq!(uuid, "63f61863-4a51-4f6b-86e1-46edebcf9356");

    let received = fake.requests();
    assert_eq!(received[0].method, Method::POST);
    assert_eq!(received[0].path, "/v1/calls");
    assert_eq!(received[0].json(), create_body);
    let claims = decode_app_jwt(received[0].header("authorization"));
    assert_eq!(claims["application_id"], "app-1");
    let iat = claims["iat"].as_i64().unwrap();
    assert!((iat - chrono::Utc::now().timestamp()).abs() < 60);
    assert!(claims["exp"].as_i64().unwrap() > iat);
    assert!(claims["jti"].as_str().is_some_and(|j| !j.is_empty()));

    // Hang up: PUT {"action":"hangup"} with a fresh JWT; then an ended call (404) is success.
    let call = format!("/v1/calls/{uuid}");
    carrier.hangup(&uuid).await.unwrap();
    let received = fake.requests();
    assert_eq!(received.len(), 2, "{received:?}");
    assert_eq!(received[1].method, Method::PUT);
    assert_eq!(received[1].path, call);
    assert_eq!(received[1].json(), json!({"action": "hangup"}));
    let claims = decode_app_jwt(received[1].header("authorization"));
    assert_eq!(claims["application_id"], "app-1");

    let uuid = carrier.place(dial_request("vonage"), sink()).await.unwrap();
    fake.answer(
        Method::PUT,
        &call,
        Answer::json(404, json!({"title": "Not found"})),
    );
    carrier.hangup(&uuid).await.unwrap();
    assert_eq!(fake.requests_to(Method::PUT, &call).len(), 2);
    // Both dials sent the same documented body.
    let creates = fake.requests_to(Method::POST, "/v1/calls");
    assert_eq!(creates.len(), 2, "{creates:?}");
    assert!(
        creates.iter().all(|c| c.json() == create_body),
        "{creates:?}"
    );
}

#[tokio::test]
async fn vonage_rejects_a_private_key_that_is_not_rsa_pem() {
    let fake = FakeCarrier::start(CarrierKind::Vonage, "63f61863").await;
    let carrier = VonageCarrier::new(
        credentials(
            CarrierKind::Vonage,
            json!({"applicationId": "app-1", "privateKey": "not a key", "baseUrl": fake.base}),
        ),
        http_client(),
    );
    let err = carrier
        .place(dial_request("vonage"), sink())
        .await
        .unwrap_err();
    assert!(
        matches!(err, CarrierError::NotConfigured(ref m) if m.contains("privateKey")),
        "{err}"
    );
    assert!(fake.requests().is_empty());
}

fn vonage_webhook_jwt(secret: &str, body: &[u8]) -> String {
    vonage_webhook_jwt_with(secret, body, json!({}))
}

/// A signed-webhook JWT as Vonage makes one (issued now), with `changes`
/// over its claims (a `null` removes the claim).
fn vonage_webhook_jwt_with(secret: &str, body: &[u8], changes: Value) -> String {
    let mut claims = json!({
        "iat": chrono::Utc::now().timestamp(),
        "jti": "j-1",
        "iss": "Vonage",
        "payload_hash": hex::encode(Sha256::digest(body)),
        "application_id": "app-1"
    });
    for (name, value) in changes.as_object().expect("claims to change") {
        match value {
            Value::Null => claims.as_object_mut().unwrap().remove(name),
            value => claims
                .as_object_mut()
                .unwrap()
                .insert(name.clone(), value.clone()),
        };
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

#[tokio::test]
async fn vonage_events_are_verified_and_mapped() {
    let credential = json!({"applicationId": "app-1", "privateKey": VONAGE_PRIVATE_KEY});
    let url = format!(
        "{PUBLIC}/carrier/vonage/status/{CALL_ID}?sig={}",
        our_sig(VONAGE_PRIVATE_KEY, CALL_ID)
    );
    let cases: Vec<(&str, Option<CarrierStatus>)> = vec![
        ("started", None),
        ("ringing", Some(CarrierStatus::Ringing)),
        ("answered", Some(CarrierStatus::Answered)),
        ("completed", Some(CarrierStatus::Completed)),
        ("busy", Some(CarrierStatus::Busy)),
        ("failed", Some(CarrierStatus::Failed("failed".into()))),
        ("unanswered", Some(CarrierStatus::NoAnswer)),
        ("timeout", Some(CarrierStatus::NoAnswer)),
        ("rejected", Some(CarrierStatus::Failed("rejected".into()))),
        ("cancelled", Some(CarrierStatus::Failed("cancelled".into()))),
        // A bare machine verdict (advanced machine detection without its beep yet).
        (
            "machine",
            Some(CarrierStatus::AnsweredBy(AnsweredBy::Machine)),
        ),
    ];
    for (vonage_status, expected) in cases {
        let body = json!({
            "uuid": "63f61863", "conversation_uuid": "CON-1", "status": vonage_status,
            "direction": "outbound", "timestamp": "2024-01-01T00:00:00.000Z"
        })
        .to_string();
        let request = callback(
            Method::POST,
            &url,
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        let (status, _, delivered) = run_status("vonage", Some(credential.clone()), request).await;
        assert_eq!(status, StatusCode::OK, "{vonage_status}");
        assert_eq!(
            delivered,
            expected.into_iter().collect::<Vec<_>>(),
            "{vonage_status}"
        );
    }

    // Without our sig: 403.
    let bare = format!("{PUBLIC}/carrier/vonage/status/{CALL_ID}");
    let request = callback(Method::POST, &bare, &[], br#"{"status":"completed"}"#);
    let (status, _, delivered) = run_status("vonage", Some(credential), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(delivered.is_empty());

    // Signed webhooks: with a signatureSecret the HS256 JWT and its payload_hash must match.
    let signed = json!({"applicationId": "app-1", "privateKey": VONAGE_PRIVATE_KEY, "signatureSecret": "sig-secret"});
    let body = br#"{"uuid":"63f61863","status":"answered"}"#;
    let bearer = format!("Bearer {}", vonage_webhook_jwt("sig-secret", body));
    let request = callback(Method::POST, &url, &[("authorization", &bearer)], body);
    let (status, _, delivered) = run_status("vonage", Some(signed.clone()), request).await;
    assert_eq!(
        (status, delivered),
        (StatusCode::OK, vec![CarrierStatus::Answered])
    );

    let wrong = format!("Bearer {}", vonage_webhook_jwt("other-secret", body));
    let request = callback(Method::POST, &url, &[("authorization", &wrong)], body);
    let (status, _, _) = run_status("vonage", Some(signed.clone()), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let request = callback(
        Method::POST,
        &url,
        &[("authorization", &bearer)],
        br#"{"uuid":"63f61863","status":"completed"}"#,
    );
    let (status, _, _) = run_status("vonage", Some(signed.clone()), request).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "payload_hash must cover the body"
    );

    let request = callback(Method::POST, &url, &[], body);
    let (status, _, _) = run_status("vonage", Some(signed.clone()), request).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "signed webhooks need the JWT"
    );

    // A captured callback cannot be replayed later: the token's exp is
    // honoured and its iat may be at most 5 minutes old (a minute of clock
    // skew forgiven the other way).
    let now = chrono::Utc::now().timestamp();
    let cases = [
        (
            json!({"exp": now - 30 * 60}),
            StatusCode::FORBIDDEN,
            "expired 30 minutes ago",
        ),
        (
            json!({"exp": now - 1}),
            StatusCode::FORBIDDEN,
            "expired a second ago",
        ),
        (
            json!({"exp": now + 60}),
            StatusCode::OK,
            "expiring in a minute",
        ),
        (
            json!({"iat": now - 6 * 60}),
            StatusCode::FORBIDDEN,
            "issued 6 minutes ago",
        ),
        (
            json!({"iat": now - 4 * 60}),
            StatusCode::OK,
            "issued 4 minutes ago",
        ),
        (
            json!({"iat": now + 30}),
            StatusCode::OK,
            "issued 30 s ahead (skew)",
        ),
        (
            json!({"iat": now + 5 * 60}),
            StatusCode::FORBIDDEN,
            "issued 5 minutes ahead",
        ),
        (
            json!({"iat": null}),
            StatusCode::FORBIDDEN,
            "no iat: its age is unknown",
        ),
        (
            json!({"iat": "yesterday"}),
            StatusCode::FORBIDDEN,
            "an iat that is no time",
        ),
        (
            json!({"nbf": now + 5 * 60}),
            StatusCode::FORBIDDEN,
            "not valid before 5 minutes from now",
        ),
    ];
    for (claims, expected, case) in cases {
        let bearer = format!(
            "Bearer {}",
            vonage_webhook_jwt_with("sig-secret", body, claims)
        );
        let request = callback(Method::POST, &url, &[("authorization", &bearer)], body);
        let (status, reply, _) = run_status("vonage", Some(signed.clone()), request).await;
        assert_eq!(status, expected, "{case}: {reply}");
    }
}

#[test]
fn vonage_signed_webhook_age_is_judged_against_the_given_time() {
    use voxline::carriers::vonage::{SignedWebhookError, verify_signed_webhook};
    let body = br#"{"status":"answered"}"#;
    let issued = 1_700_000_000;
    let token = format!(
        "Bearer {}",
        vonage_webhook_jwt_with("sig-secret", body, json!({"iat": issued}))
    );
    let at = |now| verify_signed_webhook("sig-secret", &token, body, now);
    assert_eq!(at(issued), Ok(()));
    assert_eq!(at(issued + 300), Ok(()), "5 minutes old");
    assert_eq!(at(issued + 301), Err(SignedWebhookError::Stale));
    assert_eq!(at(issued - 60), Ok(()), "a minute of skew");
    assert_eq!(at(issued - 61), Err(SignedWebhookError::NotYetValid));
    let expiring = format!(
        "Bearer {}",
        vonage_webhook_jwt_with(
            "sig-secret",
            body,
            json!({"iat": issued, "exp": issued + 10})
        )
    );
    let at = |now| verify_signed_webhook("sig-secret", &expiring, body, now);
    assert_eq!(at(issued + 9), Ok(()));
    assert_eq!(at(issued + 10), Err(SignedWebhookError::Expired));
    assert_eq!(
        verify_signed_webhook("sig-secret", &token, b"{}", issued),
        Err(SignedWebhookError::BodyMismatch)
    );
    assert_eq!(
        verify_signed_webhook("other", &token, body, issued),
        Err(SignedWebhookError::Mismatch)
    );
    assert_eq!(
        verify_signed_webhook("sig-secret", "Basic abc", body, issued),
        Err(SignedWebhookError::Missing)
    );
}

// ---------------------------------------------------------------- router

struct TestHost {
    credentials: HashMap<CarrierKind, Value>,
    delivered: Mutex<Vec<(String, CarrierStatus)>>,
}

#[async_trait::async_trait]
impl CallbackHost for TestHost {
    fn public_base_url(&self) -> Option<String> {
        Some(PUBLIC.to_string())
    }

    async fn credential_for_call(&self, call_id: &str, kind: CarrierKind) -> Option<Value> {
        (call_id == CALL_ID)
            .then(|| self.credentials.get(&kind).cloned())
            .flatten()
    }

    fn carrier_status(&self, call_id: &str, status: CarrierStatus) {
        self.delivered
            .lock()
            .unwrap()
            .push((call_id.to_string(), status));
    }

    async fn record_transfer_leg(
        &self,
        _leg: voxline_actors::carrier::TransferLeg,
    ) -> Result<bool, voxline::carriers::CarriersError> {
        // These tests post no leg reports; tests/it/carrier_transfers.rs does.
        Ok(false)
    }
}

#[tokio::test]
async fn router_mounts_status_and_answer_routes() {
    let host = Arc::new(TestHost {
        credentials: HashMap::from([
            (
                CarrierKind::Twilio,
                json!({"accountSid": "AC123", "authToken": "twilio-token"}),
            ),
            (
                CarrierKind::Plivo,
                json!({"authId": "MA123", "authToken": "plivo-token"}),
            ),
        ]),
        delivered: Mutex::new(Vec::new()),
    });
    let app: axum::Router = callbacks::router(host.clone());

    // Twilio status through the router: the URL is rebuilt from the public base.
    let signed = twilio_status_request(
        "twilio-token",
        &[("CallSid", "CA1"), ("CallStatus", "in-progress")],
        &format!("{PUBLIC}/carrier/twilio/status/{CALL_ID}"),
    );
    let mut request = axum::http::Request::builder()
        .method("POST")
        .uri(format!("/carrier/twilio/status/{CALL_ID}"))
        .body(axum::body::Body::from(signed.body.clone()))
        .unwrap();
    *request.headers_mut() = signed.headers.clone();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // Plivo answer through the router (POST with a query).
    let answer_url = plivo::answer_url(&dial_request("plivo"));
    let signed = plivo_request(
        &answer_url,
        &[("CallUUID", "u-1"), ("Event", "StartApp")],
        "n",
        "plivo-token",
    );
    let uri: Uri = answer_url.strip_prefix(PUBLIC).unwrap().parse().unwrap();
    let mut request = axum::http::Request::builder()
        .method("POST")
        .uri(uri)
        .body(axum::body::Body::from(signed.body.clone()))
        .unwrap();
    *request.headers_mut() = signed.headers.clone();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // A call the host does not know: 403.
    let request = axum::http::Request::builder()
        .method("POST")
        .uri("/carrier/twilio/status/other-call")
        .body(axum::body::Body::from("CallStatus=completed"))
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    assert_eq!(
        *host.delivered.lock().unwrap(),
        vec![
            (CALL_ID.to_string(), CarrierStatus::Answered),
            (CALL_ID.to_string(), CarrierStatus::Answered)
        ]
    );
}

#[test]
fn callback_request_rebuilds_the_public_url() {
    let uri: Uri = "/carrier/twilio/status/c1?x=1".parse().unwrap();
    let request = CallbackRequest::new(
        Some("https://pub.example/"),
        Method::POST,
        &uri,
        HeaderMap::new(),
        Bytes::new(),
    );
    assert_eq!(
        request.url,
        "https://pub.example/carrier/twilio/status/c1?x=1"
    );
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
    headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
    let request = CallbackRequest::new(None, Method::POST, &uri, headers, Bytes::new());
    assert_eq!(
        request.url,
        "https://127.0.0.1:8080/carrier/twilio/status/c1?x=1"
    );
}

// ---------------------------------------------------------------- Answering-machine detection

/// A dial request of an agent that wants answering machines detected.
fn detecting(provider: &str) -> DialRequest {
    DialRequest {
        detect_machine: true,
        ..dial_request(provider)
    }
}

#[tokio::test]
async fn twilio_asks_for_async_amd_and_reads_its_callback() {
    let fake = FakeCarrier::start(CarrierKind::Twilio, "CA0001").await;
    let carrier = TwilioCarrier::new(
        credentials(CarrierKind::Twilio, twilio_credential(&fake)),
        http_client(),
    );
    carrier.place(detecting("twilio"), sink()).await.unwrap();
    carrier.place(dial_request("twilio"), sink()).await.unwrap();
    let received = fake.requests_to(Method::POST, TWILIO_CALLS);
    assert_eq!(received.len(), 2, "{received:?}");
    let detect = &received[0];
    assert_eq!(detect.form_value("MachineDetection"), "DetectMessageEnd");
    assert_eq!(detect.form_value("AsyncAmd"), "true");
    assert_eq!(
        detect.form_value("AsyncAmdStatusCallback"),
        format!("{PUBLIC}/carrier/twilio/status/{CALL_ID}")
    );
    assert_eq!(detect.form_value("AsyncAmdStatusCallbackMethod"), "POST");
    // An agent with detection off does not pay for it.
    let plain = &received[1];
    assert!(plain.form_values("MachineDetection").is_empty());
    assert!(plain.form_values("AsyncAmd").is_empty());

    // The AMD callback (signed like every callback, no CallStatus) becomes a verdict.
    let credential = json!({"accountSid": "AC123", "authToken": "twilio-token"});
    let url = format!("{PUBLIC}/carrier/twilio/status/{CALL_ID}");
    let cases = [
        ("human", Some(AnsweredBy::Human)),
        ("machine_start", Some(AnsweredBy::Machine)),
        ("machine_end_beep", Some(AnsweredBy::Beep)),
        ("machine_end_silence", Some(AnsweredBy::GreetingEnded)),
        ("machine_end_other", Some(AnsweredBy::GreetingEnded)),
        ("fax", None),
        ("unknown", None),
    ];
    for (answered_by, expected) in cases {
        let request = twilio_status_request(
            "twilio-token",
            &[
                ("AccountSid", "AC123"),
                ("CallSid", "CA0001"),
                ("AnsweredBy", answered_by),
                ("MachineDetectionDuration", "4200"),
            ],
            &url,
        );
        let (status, _, delivered) = run_status("twilio", Some(credential.clone()), request).await;
        assert_eq!(status, StatusCode::OK, "{answered_by}");
        assert_eq!(
            delivered,
            expected
                .map(CarrierStatus::AnsweredBy)
                .into_iter()
                .collect::<Vec<_>>(),
            "{answered_by}"
        );
    }
    // A forged verdict is refused like any forged callback.
    let request = twilio_status_request(
        "other-token",
        &[("CallSid", "CA0001"), ("AnsweredBy", "machine_end_beep")],
        &url,
    );
    let (status, _, delivered) = run_status("twilio", Some(credential), request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(delivered.is_empty());
}

#[tokio::test]
async fn plivo_asks_for_machine_detection_and_reads_its_callback() {
    let fake = FakeCarrier::start(CarrierKind::Plivo, "75b6b0f5-ec1a-4f0c-9d66-2b0d3d5c6b1a").await;
    let status_url = format!("{PUBLIC}/carrier/plivo/status/{CALL_ID}");
    let carrier = PlivoCarrier::new(
        credentials(CarrierKind::Plivo, plivo_credential(&fake)),
        http_client(),
    );
    carrier.place(detecting("plivo"), sink()).await.unwrap();
    let received = fake.requests_to(Method::POST, PLIVO_CALLS);
    assert_eq!(received.len(), 1, "{received:?}");
    let body = received[0].json();
    assert_eq!(body["machine_detection"], "true");
    assert_eq!(body["machine_detection_url"], status_url.as_str());
    assert_eq!(body["machine_detection_method"], "POST");

    let credential = json!({"authId": "MA123", "authToken": "plivo-token"});
    for (machine, expected) in [("true", AnsweredBy::Machine), ("false", AnsweredBy::Human)] {
        let request = plivo_request(
            &status_url,
            &[
                ("Event", "MachineDetection"),
                ("Machine", machine),
                ("CallStatus", "in-progress"),
                ("CallUUID", "75b6b0f5"),
                ("IfMachine", "continue"),
            ],
            "nonce-amd",
            "plivo-token",
        );
        let (status, _, delivered) = run_status("plivo", Some(credential.clone()), request).await;
        assert_eq!(
            (status, delivered),
            (StatusCode::OK, vec![CarrierStatus::AnsweredBy(expected)]),
            "{machine}"
        );
    }
}

#[test]
fn telnyx_asks_for_beep_detection_and_reads_its_webhooks() {
    use voxline::carriers::telnyx;
    let account =
        TelnyxAccount::from_credential(&json!({"apiKey": "KEY123", "connectionId": "conn-1"}))
            .unwrap();
    let body = telnyx::dial_body(&detecting("telnyx"), &account).unwrap();
    assert_eq!(body["answering_machine_detection"], "detect_beep");
    let plain = telnyx::dial_body(&dial_request("telnyx"), &account).unwrap();
    assert!(plain.get("answering_machine_detection").is_none());

    let event = |event_type: &str, result: &str| {
        let body = json!({"data": {"event_type": event_type, "occurred_at": "2024-01-01T00:00:00Z",
            "payload": {"call_control_id": "v3:abc", "result": result}}});
        telnyx::parse_event(body.to_string().as_bytes()).unwrap()
    };
    let cases = [
        (
            "call.machine.detection.ended",
            "human",
            Some(AnsweredBy::Human),
        ),
        (
            "call.machine.detection.ended",
            "machine",
            Some(AnsweredBy::Machine),
        ),
        ("call.machine.detection.ended", "not_sure", None),
        (
            "call.machine.greeting.ended",
            "beep_detected",
            Some(AnsweredBy::Beep),
        ),
        (
            "call.machine.greeting.ended",
            "ended",
            Some(AnsweredBy::GreetingEnded),
        ),
        ("call.machine.greeting.ended", "not_sure", None),
    ];
    for (event_type, result, expected) in cases {
        assert_eq!(
            telnyx::map_status(&event(event_type, result)),
            expected.map(CarrierStatus::AnsweredBy),
            "{event_type} {result}"
        );
    }
}

#[tokio::test]
async fn vonage_asks_for_advanced_machine_detection_and_reads_its_events() {
    let fake =
        FakeCarrier::start(CarrierKind::Vonage, "63f61863-4a51-4f6b-86e1-46edebcf9356").await;
    let carrier = VonageCarrier::new(
        credentials(CarrierKind::Vonage, vonage_credential(&fake)),
        http_client(),
    );
    carrier.place(detecting("vonage"), sink()).await.unwrap();
    let received = fake.requests_to(Method::POST, "/v1/calls");
    assert_eq!(received.len(), 1, "{received:?}");
    let body = received[0].json();
    assert_eq!(
        body["advanced_machine_detection"],
        json!({"behavior": "continue", "mode": "detect_beep"})
    );

    let credential = json!({"applicationId": "app-1", "privateKey": VONAGE_PRIVATE_KEY});
    let url = format!(
        "{PUBLIC}/carrier/vonage/status/{CALL_ID}?sig={}",
        our_sig(VONAGE_PRIVATE_KEY, CALL_ID)
    );
    let cases = [
        (json!({"status": "human"}), AnsweredBy::Human),
        (json!({"status": "machine"}), AnsweredBy::Machine),
        (
            json!({"status": "machine", "sub_state": "beep_start"}),
            AnsweredBy::Beep,
        ),
        (
            json!({"status": "machine", "sub_state": "beep_timeout"}),
            AnsweredBy::GreetingEnded,
        ),
    ];
    for (mut event, expected) in cases {
        event["uuid"] = json!("63f61863");
        event["call_uuid"] = json!("63f61863");
        let body = event.to_string();
        let request = callback(
            Method::POST,
            &url,
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        let (status, _, delivered) = run_status("vonage", Some(credential.clone()), request).await;
        assert_eq!(
            (status, delivered),
            (StatusCode::OK, vec![CarrierStatus::AnsweredBy(expected)]),
            "{body}"
        );
    }
}

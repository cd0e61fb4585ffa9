//! Function tools against a local axum server on 127.0.0.1: the signed
//! request as documented (body `{callId, toolCallId, name, arguments,
//! variables}`, `x-service-timestamp`, `x-service-signature: v1=<hex
//! HMAC-SHA256 of "<timestamp>.<body>">`, checked here with `hmac`
//! independently of the signing code), answers, timeouts, oversize bodies
//! and the egress guard (refusal, allow-list, pinning).

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use voxline::egress::{self, EgressError};
use voxline::tools::function::{FunctionCall, FunctionCaller, FunctionError};

const SECRET: &str = "fsec_test";

/// What the fake function saw.
type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

/// A function at `/fn` that records each request and answers with `answer`.
async fn function_server<F, R>(answer: F) -> (SocketAddr, Seen)
where
    F: Fn() -> R + Clone + Send + Sync + 'static,
    R: std::future::Future<Output = Response> + Send + 'static,
{
    let seen: Seen = Arc::default();
    let app = Router::new().route(
        "/fn",
        post({
            let seen = seen.clone();
            move |headers: HeaderMap, body: Bytes| {
                seen.lock().unwrap().push((headers, body));
                answer()
            }
        }),
    );
    (serve(app).await, seen)
}

fn local() -> Vec<String> {
    vec!["127.0.0.1".into()]
}

fn variables() -> Map<String, Value> {
    let mut vars = Map::new();
    vars.insert("customerName".into(), json!("Asha"));
    vars
}

/// A call to `url` with the test's secret, ids and arguments.
fn call<'a>(
    url: &'a str,
    timeout: Duration,
    vars: &'a Map<String, Value>,
    args: &'a Value,
) -> FunctionCall<'a> {
    FunctionCall {
        url,
        timeout,
        secret: SECRET,
        call_id: "call_1",
        tool_name: "lookup_order",
        tool_call_id: "tc_9",
        variables: vars,
        arguments: args,
    }
}

fn hmac_hex(secret: &str, message: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(message);
    hex::encode(mac.finalize().into_bytes())
}

#[tokio::test]
async fn the_request_is_signed_and_the_json_answer_returned() {
    let (addr, seen) = function_server(|| async {
        axum::Json(json!({"status": "shipped", "eta": "Friday"})).into_response()
    })
    .await;
    let url = format!("http://{addr}/fn");
    let (vars, args) = (variables(), json!({"orderId": "A-17"}));
    let answer = FunctionCaller::new(local())
        .call(call(&url, Duration::from_secs(5), &vars, &args))
        .await
        .unwrap();
    assert_eq!(answer, json!({"status": "shipped", "eta": "Friday"}));

    let (headers, body) = seen.lock().unwrap().first().cloned().unwrap();
    let header = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_owned();
    assert_eq!(header("content-type"), "application/json");
    let timestamp: i64 = header("x-service-timestamp").parse().unwrap();
    assert!((chrono::Utc::now().timestamp() - timestamp).abs() < 60);
    let signed = [timestamp.to_string().as_bytes(), b".", &body[..]].concat();
    assert_eq!(
        header("x-service-signature"),
        format!("v1={}", hmac_hex(SECRET, &signed))
    );
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body,
        json!({
            "callId": "call_1",
            "toolCallId": "tc_9",
            "name": "lookup_order",
            "arguments": {"orderId": "A-17"},
            "variables": {"customerName": "Asha"},
        })
    );
}

#[tokio::test]
async fn a_text_answer_becomes_a_result() {
    let (addr, _) = function_server(|| async { "order A-17 shipped".into_response() }).await;
    let url = format!("http://{addr}/fn");
    let (vars, args) = (variables(), json!({}));
    let answer = FunctionCaller::new(local())
        .call(call(&url, Duration::from_secs(5), &vars, &args))
        .await
        .unwrap();
    assert_eq!(answer, json!({"result": "order A-17 shipped"}));
}

#[tokio::test]
async fn a_non_2xx_answer_is_an_error() {
    let (addr, _) =
        function_server(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response() })
            .await;
    let url = format!("http://{addr}/fn");
    let (vars, args) = (variables(), json!({}));
    let err = FunctionCaller::new(local())
        .call(call(&url, Duration::from_secs(5), &vars, &args))
        .await
        .unwrap_err();
    assert!(matches!(err, FunctionError::Status(500)), "{err:?}");
    assert_eq!(err.to_string(), "answered 500");
}

#[tokio::test]
async fn a_slow_function_times_out() {
    let (addr, _) = function_server(|| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        "late".into_response()
    })
    .await;
    let url = format!("http://{addr}/fn");
    let (vars, args) = (variables(), json!({}));
    let started = Instant::now();
    let err = FunctionCaller::new(local())
        .call(call(&url, Duration::from_millis(300), &vars, &args))
        .await
        .unwrap_err();
    assert!(matches!(err, FunctionError::Timeout(_)), "{err:?}");
    assert_eq!(err.to_string(), "timed out after 0.3 s");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn an_oversize_answer_is_refused() {
    // Declared length over the bound.
    let (addr, _) = function_server(|| async { vec![b'x'; 65 * 1024].into_response() }).await;
    let url = format!("http://{addr}/fn");
    let (vars, args) = (variables(), json!({}));
    let caller = FunctionCaller::new(local());
    let err = caller
        .call(call(&url, Duration::from_secs(5), &vars, &args))
        .await
        .unwrap_err();
    assert!(matches!(err, FunctionError::TooLarge), "{err:?}");
    assert_eq!(err.to_string(), "response larger than 64 KiB");

    // No length, an endless stream: reading stops at the bound, long before
    // the timeout.
    let (addr, _) = function_server(|| async {
        let chunks =
            futures::stream::repeat_with(|| Ok::<_, std::io::Error>(Bytes::from(vec![b'y'; 4096])));
        Response::new(Body::from_stream(chunks))
    })
    .await;
    let url = format!("http://{addr}/fn");
    let started = Instant::now();
    let err = caller
        .call(call(&url, Duration::from_secs(10), &vars, &args))
        .await
        .unwrap_err();
    assert!(matches!(err, FunctionError::TooLarge), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_answer_at_the_bound_is_read() {
    let (addr, _) = function_server(|| async {
        let text = "z".repeat(64 * 1024 - 2);
        Response::new(Body::from(format!("\"{text}\"")))
    })
    .await;
    let url = format!("http://{addr}/fn");
    let (vars, args) = (variables(), json!({}));
    let answer = FunctionCaller::new(local())
        .call(call(&url, Duration::from_secs(5), &vars, &args))
        .await
        .unwrap();
    assert_eq!(answer.as_str().map(str::len), Some(64 * 1024 - 2));
}

#[tokio::test]
async fn loopback_is_refused_unless_allow_listed() {
    let (addr, seen) = function_server(|| async { "ok".into_response() }).await;
    let (vars, args) = (variables(), json!({}));
    for url in [
        format!("http://{addr}/fn"),
        format!("http://localhost:{}/fn", addr.port()),
    ] {
        let err = FunctionCaller::new(vec![])
            .call(call(&url, Duration::from_secs(5), &vars, &args))
            .await
            .unwrap_err();
        assert!(matches!(err, FunctionError::Refused(_)), "{url}: {err:?}");
        assert!(err.to_string().starts_with("address refused: "), "{err}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the server"
    );

    // Allow-listed by name: resolved once and connected to the checked address.
    let url = format!("http://localhost:{}/fn", addr.port());
    let answer = FunctionCaller::new(vec!["localhost".into()])
        .call(call(&url, Duration::from_secs(5), &vars, &args))
        .await
        .unwrap();
    assert_eq!(answer, json!({"result": "ok"}));
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn metadata_private_and_mapped_addresses_are_refused() {
    for ip in [
        "169.254.169.254",
        "fd00:ec2::254",
        "10.0.0.1",
        "::ffff:127.0.0.1",
    ] {
        assert!(egress::is_internal(ip.parse().unwrap()), "{ip}");
    }
    let (vars, args) = (variables(), json!({}));
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://10.0.0.1/fn",
        "http://[::ffff:127.0.0.1]:9/fn",
    ] {
        let err = FunctionCaller::new(vec![])
            .call(call(url, Duration::from_secs(5), &vars, &args))
            .await
            .unwrap_err();
        assert!(matches!(err, FunctionError::Refused(_)), "{url}: {err:?}");
        assert!(matches!(
            egress::check_url_for_storage(url, &[]).await,
            Err(EgressError::Refused(_))
        ));
    }
    let err = FunctionCaller::new(vec![])
        .call(call(
            "gopher://example.com/",
            Duration::from_secs(5),
            &vars,
            &args,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, FunctionError::BadUrl(_)), "{err:?}");
}

#[tokio::test]
async fn a_pinned_client_connects_to_the_checked_address_without_dns() {
    // `.invalid` never resolves (RFC 2606): the request can only reach the
    // server through the pinned address, which is what defeats rebinding.
    let (addr, seen) = function_server(|| async { "pinned".into_response() }).await;
    let url = reqwest::Url::parse(&format!("http://fn.invalid:{}/fn", addr.port())).unwrap();
    assert!(matches!(
        egress::check_address(&url, &[]).await,
        Err(EgressError::Resolve { .. })
    ));
    let client = egress::pinned(&url, &[addr]).build().unwrap();
    let text = client.post(url).send().await.unwrap().text().await.unwrap();
    assert_eq!(text, "pinned");
    let (headers, _) = seen.lock().unwrap().first().cloned().unwrap();
    assert_eq!(
        headers.get("host").unwrap(),
        &format!("fn.invalid:{}", addr.port())
    );
}

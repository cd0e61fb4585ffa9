//! The SIP carrier's signaling against `support::SipPeer`, a scripted SIP user
//! agent on loopback (issue 33): digest auth, final failure codes, the ring
//! timeout's CANCEL, BYE either way, garbage on the app's SIP port, and SIP
//! over TLS (the trunk's certificate checked, the TLS listener).
//!
//! Each test spawns the real app and a workspace with a `sip` number whose
//! `sip` trunk credential points at the peer; calls are placed through the API
//! and their outcome read back from `GET /api/calls/{id}`.

use crate::support::{
    DigestAuth, SipAnswer as Answer, SipPeer, TestApp, Workspace, call_detail, call_ended,
    eventually, set_sip_trunk, sip_agent, sip_trunk_workspace,
};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::net::UdpSocket;

const CALLEE: &str = "+14155550199";
const WAIT: Duration = Duration::from_secs(20);
/// The SIP carrier's ring timeout (30 s for every non-sim call, `calls::job`),
/// then the CANCEL and its 487.
const RING_WAIT: Duration = Duration::from_secs(45);

/// A workspace whose `sip` trunk is 127.0.0.1:`port` (with `credentials` for digest
/// auth) and whose caller ID is a `sip` number of its own.
async fn sip_workspace(app: &TestApp, port: u16, credentials: Option<(&str, &str)>) -> Workspace {
    // A number of its own: one app may hold several of these workspaces.
    static NEXT: AtomicU32 = AtomicU32::new(1_000);
    let our_number = format!("+1415555{:04}", NEXT.fetch_add(1, Ordering::Relaxed));
    let mut trunk = json!({"host": "127.0.0.1", "port": port, "transport": "udp"});
    if let Some((username, password)) = credentials {
        trunk["username"] = json!(username);
        trunk["password"] = json!(password);
    }
    sip_trunk_workspace(app, "SIP signaling", &our_number, &trunk)
        .await
        .0
}

/// Places a call to `CALLEE` with `agent`; returns the call id.
async fn place(app: &TestApp, ws: &Workspace, agent: &str) -> String {
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": CALLEE}),
        )
        .await
        .expect(201);
    placed.body["callId"].as_str().expect("callId").to_string()
}

async fn detail(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    call_detail(app, ws, id).await
}

/// The call once it has ended.
async fn ended(app: &TestApp, ws: &Workspace, id: &str, within: Duration) -> Value {
    call_ended(app, ws, id, within).await
}

/// A workspace, trunk and agent on `peer`, one call placed; (workspace, call id).
async fn call_through(
    app: &TestApp,
    peer: &SipPeer,
    credentials: Option<(&str, &str)>,
) -> (Workspace, String) {
    let ws = sip_workspace(app, peer.addr.port(), credentials).await;
    let agent = sip_agent(app, &ws).await;
    let id = place(app, &ws, &agent).await;
    (ws, id)
}

fn auth() -> DigestAuth {
    DigestAuth {
        username: "voxline".into(),
        password: "s3cret-pass".into(),
        realm: "peer.test".into(),
        qop: false,
        proxy: false,
    }
}

#[tokio::test]
async fn sip_signaling_digest_auth_answers_the_challenge_with_a_valid_digest() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::Ok { bye_after: None }, Some(auth())).await;
    let (ws, id) = call_through(&app, &peer, Some(("voxline", "s3cret-pass"))).await;

    let invites = peer.wait_for("INVITE", 2, WAIT).await;
    assert_eq!(
        invites[0].digest, None,
        "the first INVITE is unauthenticated"
    );
    assert_eq!(
        invites[1].digest,
        Some(true),
        "the second INVITE carries a valid digest: {:?}",
        invites[1].header("Authorization")
    );
    let offer = String::from_utf8_lossy(&invites[1].body);
    assert!(
        offer.contains("m=audio"),
        "the INVITE carries an SDP offer: {offer}"
    );
    // The digest covers the INVITE's own request-URI.
    let authorization = invites[1].header("Authorization").expect("Authorization");
    let params = crate::support::digest_params(
        authorization
            .trim()
            .strip_prefix("Digest")
            .expect("a Digest header"),
    );
    let uri = params
        .iter()
        .find(|(n, _)| n == "uri")
        .map(|(_, v)| v.clone());
    assert_eq!(
        uri.as_deref(),
        Some(invites[1].uri.as_str()),
        "{authorization}"
    );
    assert_eq!(
        invites[0].header("Call-ID"),
        invites[1].header("Call-ID"),
        "the challenge is answered within the same call"
    );
    // Answered: the 200 is ACKed and the call is seen answered.
    peer.wait_for("ACK", 1, WAIT).await;
    let call = eventually(WAIT, "the call to be answered", || async {
        let call = detail(&app, &ws, &id).await;
        call["answeredAt"].is_string().then_some(call)
    })
    .await;
    assert_eq!(call["provider"], "sip", "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_digest_auth_with_qop_auth() {
    let app = TestApp::spawn().await;
    let demanded = DigestAuth {
        qop: true,
        ..auth()
    };
    let peer = SipPeer::start(Answer::Ok { bye_after: None }, Some(demanded)).await;
    let (_ws, _id) = call_through(&app, &peer, Some(("voxline", "s3cret-pass"))).await;

    let invites = peer.wait_for("INVITE", 2, WAIT).await;
    assert_eq!(invites[0].digest, None);
    let authorization = invites[1].header("Authorization").unwrap_or_default();
    assert_eq!(
        invites[1].digest,
        Some(true),
        "the qop=auth form of the digest: {authorization}"
    );
    assert!(authorization.contains("cnonce="), "{authorization}");
    peer.wait_for("ACK", 1, WAIT).await;
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_proxy_auth_407_is_answered_in_proxy_authorization() {
    let app = TestApp::spawn().await;
    let demanded = DigestAuth {
        proxy: true,
        ..auth()
    };
    let peer = SipPeer::start(Answer::Ok { bye_after: None }, Some(demanded)).await;
    let (_ws, _id) = call_through(&app, &peer, Some(("voxline", "s3cret-pass"))).await;

    let invites = peer.wait_for("INVITE", 2, WAIT).await;
    assert_eq!(invites[0].digest, None);
    assert_eq!(
        invites[1].digest,
        Some(true),
        "{:?}",
        invites[1].header("Proxy-Authorization")
    );
    peer.wait_for("ACK", 1, WAIT).await;
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_a_200_without_an_sdp_answer_fails_the_call_and_hangs_up() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::OkWithoutSdp, None).await;
    let (ws, id) = call_through(&app, &peer, None).await;

    peer.wait_for("ACK", 1, WAIT).await;
    peer.wait_for("BYE", 1, WAIT).await;
    let call = ended(&app, &ws, &id, WAIT).await;
    assert_eq!(call["rawStatus"], "failed", "{call}");
    assert_eq!(call["endedReason"], "carrier-error", "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_a_wrong_password_fails_the_call() {
    let logs = crate::support::logs();
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::Ok { bye_after: None }, Some(auth())).await;
    let (ws, id) = call_through(&app, &peer, Some(("voxline", "not-the-password"))).await;

    let call = ended(&app, &ws, &id, WAIT).await;
    assert_eq!(call["rawStatus"], "failed", "{call}");
    assert_eq!(call["endedReason"], "carrier-error", "{call}");
    let invites = peer.requests_of("INVITE");
    assert!(
        invites.len() >= 2,
        "challenged, then re-sent once: {:?}",
        peer.methods()
    );
    assert_eq!(
        invites[1].digest,
        Some(false),
        "a digest over the wrong password"
    );
    assert!(
        invites.iter().all(|i| i.digest != Some(true)),
        "no INVITE passed"
    );
    assert!(
        peer.requests_of("ACK").len() >= invites.len().min(2),
        "every 401 is ACKed"
    );
    // The API keeps only `failed`; the SIP code is in the log, naming the call.
    let logged = String::from_utf8_lossy(&logs.0.lock().unwrap()).to_string();
    assert!(
        logged
            .lines()
            .any(|l| l.contains(&id) && l.contains("code=401")),
        "the 401 is logged with the call"
    );
    app.shutdown().await;
}

/// Places one call per `(code, rawStatus, endedReason)`, each through its own
/// peer answering `code`, and checks how each ends.
async fn final_codes_end_as(cases: &[(u16, &str, &str)]) {
    let app = TestApp::spawn().await;
    let mut calls = Vec::new();
    for (code, status, reason) in cases {
        let peer = SipPeer::start(Answer::Final(*code), None).await;
        let (ws, id) = call_through(&app, &peer, None).await;
        calls.push((peer, ws, id, *code, *status, *reason));
    }
    for (peer, ws, id, code, status, reason) in &calls {
        let call = ended(&app, ws, id, WAIT).await;
        assert_eq!(call["rawStatus"], *status, "SIP {code}: {call}");
        assert_eq!(call["endedReason"], *reason, "SIP {code}: {call}");
        assert_eq!(peer.requests_of("INVITE").len(), 1, "SIP {code}");
        // The call record keeps the SIP Call-ID and the final code.
        let call = eventually(WAIT, "the SIP code on the call", || async {
            let call = detail(&app, ws, id).await;
            call["carrierCode"].is_number().then_some(call)
        })
        .await;
        assert_eq!(call["carrierCode"], *code, "{call}");
        assert_eq!(
            call["carrierCallId"].as_str(),
            peer.requests_of("INVITE")[0].header("Call-ID"),
            "{call}"
        );
        peer.wait_for("ACK", 1, WAIT).await;
        assert!(
            peer.requests_of("CANCEL").is_empty() && peer.requests_of("BYE").is_empty(),
            "SIP {code}: nothing after the final answer but its ACK: {:?}",
            peer.methods()
        );
    }
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_busy_codes_end_the_call_busy() {
    final_codes_end_as(&[
        (486, "busy", "busy"),
        (600, "busy", "busy"),
        (603, "busy", "busy"),
    ])
    .await;
}

#[tokio::test]
async fn sip_signaling_480_is_no_answer_and_503_404_are_failures() {
    final_codes_end_as(&[
        (480, "no-answer", "no-answer"),
        (503, "failed", "carrier-error"),
        (404, "failed", "carrier-error"),
    ])
    .await;
}

#[tokio::test]
async fn sip_signaling_no_answer_within_the_ring_timeout_sends_cancel() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::Ring, None).await;
    let (ws, id) = call_through(&app, &peer, None).await;

    peer.wait_for("INVITE", 1, WAIT).await;
    eventually(WAIT, "the call to ring", || async {
        let call = detail(&app, &ws, &id).await;
        (call["rawStatus"] == "ringing").then_some(())
    })
    .await;
    let cancels = peer.wait_for("CANCEL", 1, RING_WAIT).await;
    let invite = &peer.requests_of("INVITE")[0];
    assert_eq!(
        cancels[0].uri, invite.uri,
        "CANCEL names the INVITE's request-URI"
    );
    assert_eq!(cancels[0].header("Call-ID"), invite.header("Call-ID"));
    let call = ended(&app, &ws, &id, WAIT).await;
    assert_eq!(call["rawStatus"], "no-answer", "{call}");
    assert_eq!(call["endedReason"], "no-answer", "{call}");
    assert!(peer.requests_of("BYE").is_empty(), "{:?}", peer.methods());
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_a_cancel_never_answered_still_ends_the_call_no_answer() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::RingDeaf, None).await;
    let (ws, id) = call_through(&app, &peer, None).await;

    peer.wait_for("CANCEL", 1, RING_WAIT).await;
    // The carrier bounds its wait for the INVITE's 487 (5 s): a far end that
    // never sends it does not leave the call ringing for ever.
    let call = ended(&app, &ws, &id, Duration::from_secs(15)).await;
    assert_eq!(call["rawStatus"], "no-answer", "{call}");
    assert_eq!(call["endedReason"], "no-answer", "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_a_trunk_that_never_responds_fails_the_call() {
    let app = TestApp::spawn().await;
    // A socket nobody reads: the INVITE gets no response at all, not even 100.
    let black_hole = UdpSocket::bind("127.0.0.1:0").await.expect("a UDP socket");
    let port = black_hole.local_addr().expect("its address").port();
    let ws = sip_workspace(&app, port, None).await;
    let agent = sip_agent(&app, &ws).await;
    let id = place(&app, &ws, &agent).await;

    // Not the callee failing to answer: the trunk is dead or misconfigured.
    let call = ended(&app, &ws, &id, RING_WAIT).await;
    assert_eq!(call["rawStatus"], "failed", "{call}");
    assert_eq!(call["endedReason"], "carrier-error", "{call}");
    drop(black_hole);
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_bye_from_the_callee_completes_the_call() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(
        Answer::Ok {
            bye_after: Some(Duration::from_secs(4)),
        },
        None,
    )
    .await;
    let (ws, id) = call_through(&app, &peer, None).await;

    peer.wait_for("ACK", 1, WAIT).await;
    let call = ended(&app, &ws, &id, WAIT).await;
    // The callee hung up: we sent no BYE of our own before theirs.
    assert!(
        peer.requests_of("BYE").is_empty(),
        "the call was up until the callee's BYE, but we sent BYE first: {:?}\n{call}",
        peer.methods()
    );
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["endedReason"], "caller-hangup", "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_ending_an_answered_call_sends_bye() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::Ok { bye_after: None }, None).await;
    let (ws, id) = call_through(&app, &peer, None).await;

    peer.wait_for("ACK", 1, WAIT).await;
    eventually(WAIT, "the call to be answered", || async {
        let call = detail(&app, &ws, &id).await;
        call["answeredAt"].is_string().then_some(())
    })
    .await;
    // Still up a moment after the answer: no BYE until we end it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        peer.requests_of("BYE").is_empty(),
        "the answered call was hung up before anyone ended it: {:?}\n{}",
        peer.methods(),
        detail(&app, &ws, &id).await
    );
    let reply = app
        .post_empty(&ws.key, &format!("/api/calls/{id}/cancel"))
        .await;
    assert_eq!(reply.status.as_u16(), 200, "{:?}", reply.body);
    let byes = peer.wait_for("BYE", 1, WAIT).await;
    let invite = &peer.requests_of("INVITE")[0];
    assert_eq!(byes[0].header("Call-ID"), invite.header("Call-ID"));
    let call = ended(&app, &ws, &id, WAIT).await;
    assert!(call["answeredAt"].is_string(), "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_ending_a_ringing_call_sends_cancel() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::Ring, None).await;
    let (ws, id) = call_through(&app, &peer, None).await;

    peer.wait_for("INVITE", 1, WAIT).await;
    eventually(WAIT, "the call to ring", || async {
        let call = detail(&app, &ws, &id).await;
        (call["rawStatus"] == "ringing").then_some(())
    })
    .await;
    let reply = app
        .post_empty(&ws.key, &format!("/api/calls/{id}/cancel"))
        .await;
    assert_eq!(reply.status.as_u16(), 200, "{:?}", reply.body);
    // Well before the 30 s ring timeout.
    peer.wait_for("CANCEL", 1, Duration::from_secs(10)).await;
    let call = ended(&app, &ws, &id, WAIT).await;
    assert!(peer.requests_of("BYE").is_empty(), "{:?}", peer.methods());
    assert!(call["answeredAt"].is_null(), "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_an_answer_crossing_our_cancel_is_acked_and_hung_up() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::OkOnCancel, None).await;
    let (ws, id) = call_through(&app, &peer, None).await;

    eventually(WAIT, "the call to ring", || async {
        let call = detail(&app, &ws, &id).await;
        (call["rawStatus"] == "ringing").then_some(())
    })
    .await;
    let reply = app
        .post_empty(&ws.key, &format!("/api/calls/{id}/cancel"))
        .await;
    assert_eq!(reply.status.as_u16(), 200, "{:?}", reply.body);
    peer.wait_for("CANCEL", 1, WAIT).await;
    // The 200 that crossed the CANCEL is ACKed, then ended with BYE: no
    // dialog is left up at the far end.
    peer.wait_for("ACK", 1, WAIT).await;
    peer.wait_for("BYE", 1, WAIT).await;
    let call = ended(&app, &ws, &id, WAIT).await;
    assert_eq!(call["rawStatus"], "canceled", "{call}");
    assert_eq!(call["endedReason"], "canceled", "{call}");
    assert!(call["answeredAt"].is_null(), "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_an_answer_crossing_the_ring_timeout_cancel_is_hung_up() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::OkOnCancel, None).await;
    let (ws, id) = call_through(&app, &peer, None).await;

    peer.wait_for("CANCEL", 1, RING_WAIT).await;
    // The carrier reads it as no answer and leaves the ACK and the BYE to
    // rsipstack: the far end must see both.
    peer.wait_for("ACK", 1, WAIT).await;
    peer.wait_for("BYE", 1, WAIT).await;
    let call = ended(&app, &ws, &id, WAIT).await;
    assert_eq!(call["rawStatus"], "no-answer", "{call}");
    assert!(call["answeredAt"].is_null(), "{call}");
    app.shutdown().await;
}

/// A port free on loopback for both UDP and TCP right now (the agent listens
/// on both, on one port number).
fn free_sip_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
        let port = udp.local_addr().expect("its address").port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// An OPTIONS request from `from` to `to`, with a fresh branch and Call-ID.
fn options(from: SocketAddr, to: SocketAddr, tag: &str) -> String {
    format!(
        "OPTIONS sip:{to} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {from};branch=z9hG4bK-{tag}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:probe@{from}>;tag={tag}\r\n\
         To: <sip:{to}>\r\n\
         Call-ID: {tag}@probe\r\n\
         CSeq: 1 OPTIONS\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// Sends OPTIONS and waits for its final response's status line.
async fn options_answer(socket: &UdpSocket, to: SocketAddr, tag: &str) -> Option<String> {
    let from = socket.local_addr().expect("probe address");
    socket
        .send_to(options(from, to, tag).as_bytes(), to)
        .await
        .expect("OPTIONS sent");
    let mut buffer = vec![0u8; 65_536];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (read, _) = tokio::time::timeout_at(deadline, socket.recv_from(&mut buffer))
            .await
            .ok()?
            .ok()?;
        let text = String::from_utf8_lossy(&buffer[..read]).into_owned();
        if text.contains(&format!("branch=z9hG4bK-{tag}")) {
            return text.lines().next().map(str::to_owned);
        }
    }
}

#[tokio::test]
async fn sip_signaling_garbage_on_the_sip_port_leaves_the_agent_answering() {
    // The harness cannot read the user agent's bound port, so the app listens
    // where the test says.
    let port = free_sip_port();
    let sip = SocketAddr::from(([127, 0, 0, 1], port));
    let app = TestApp::spawn_with_settings(|settings| {
        settings.sip.listen = voxline::sip::settings::SipListen::On(sip);
    })
    .await;
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("a probe socket");
    let from = socket.local_addr().expect("probe address");
    assert_eq!(
        options_answer(&socket, sip, "before").await.as_deref(),
        Some("SIP/2.0 200 OK"),
        "the agent answers OPTIONS"
    );

    let invite_head = format!(
        "INVITE sip:{CALLEE}@{sip} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {from};branch=z9hG4bK-garbage1\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:probe@{from}>;tag=g1\r\n\
         To: <sip:{CALLEE}@{sip}>\r\n\
         Call-ID: garbage1@probe\r\n\
         CSeq: 1 INVITE\r\n"
    );
    let oversized = {
        let mut text = options(from, sip, "oversized")
            .replace("Content-Length: 0\r\n\r\n", "Content-Length: 9000\r\n\r\n");
        text.push_str(&"x".repeat(9_000));
        text
    };
    let garbage: Vec<Vec<u8>> = vec![
        // Not SIP at all.
        b"\x00\xff\xfe garbage \x01\x02\x03\r\n\r\n".to_vec(),
        (0..1_500u32).map(|i| (i * 7 % 256) as u8).collect(),
        // ~9 KB in one datagram.
        oversized.into_bytes(),
        vec![b'A'; 9_000],
        // A truncated INVITE: the head cut mid-header, no blank line.
        invite_head.as_bytes()[..invite_head.len() / 2].to_vec(),
        // A Content-Length longer than the body.
        format!("{invite_head}Content-Type: application/sdp\r\nContent-Length: 500\r\n\r\nv=0\r\n")
            .into_bytes(),
        // Broken headers: a CSeq that is not a number, a Via without a host.
        invite_head
            .replace("CSeq: 1 INVITE", "CSeq: one INVITE")
            .replace("garbage1", "garbage2")
            .into_bytes()
            .into_iter()
            .chain(b"Content-Length: 0\r\n\r\n".iter().copied())
            .collect(),
        format!(
            "{}Content-Length: 0\r\n\r\n",
            invite_head
                .replace(&format!("SIP/2.0/UDP {from}"), "SIP/2.0/UDP")
                .replace("garbage1", "garbage3")
        )
        .into_bytes(),
        // A header line without a colon, and a request line without a version.
        format!(
            "{}This is not a header\r\nContent-Length: 0\r\n\r\n",
            invite_head.replace("garbage1", "garbage4")
        )
        .into_bytes(),
        b"INVITE\r\n\r\n".to_vec(),
    ];
    for datagram in &garbage {
        socket.send_to(datagram, sip).await.expect("sent");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    assert_eq!(
        options_answer(&socket, sip, "after").await.as_deref(),
        Some("SIP/2.0 200 OK"),
        "the agent still answers OPTIONS after the garbage"
    );
    // The HTTP side is up too.
    let health = app.get("", "/healthz").await;
    assert_eq!(health.status.as_u16(), 200, "{:?}", health.body);
    app.shutdown().await;
}

/// Sends OPTIONS over a fresh TCP connection and returns the response's status line.
async fn options_over_tcp(to: SocketAddr, tag: &str) -> Option<String> {
    let stream = tokio::net::TcpStream::connect(to).await.ok()?;
    let from = stream.local_addr().ok()?;
    let request = options(from, to, tag).replace("SIP/2.0/UDP", "SIP/2.0/TCP");
    status_line_of(stream, &request).await
}

/// Writes `request` on `stream` and returns the status line of the response.
async fn status_line_of(
    mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    request: &str,
) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut buffer = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&buffer).into_owned();
        if text.contains("\r\n\r\n") {
            return text.lines().next().map(str::to_owned);
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

#[tokio::test]
async fn sip_signaling_garbage_over_tcp_leaves_the_agent_answering() {
    use tokio::io::AsyncWriteExt;
    let port = free_sip_port();
    let sip = SocketAddr::from(([127, 0, 0, 1], port));
    let app = TestApp::spawn_with_settings(|settings| {
        settings.sip.listen = voxline::sip::settings::SipListen::On(sip);
    })
    .await;
    assert_eq!(
        options_over_tcp(sip, "tcp-before").await.as_deref(),
        Some("SIP/2.0 200 OK"),
        "the agent answers OPTIONS over TCP"
    );

    // Garbage, then the connection closed.
    let mut stream = tokio::net::TcpStream::connect(sip).await.expect("connect");
    stream
        .write_all(b"\x00\xff garbage\r\n\r\nmore garbage\r\n\r\n")
        .await
        .expect("sent");
    drop(stream);
    // A Content-Length far longer than what follows, the connection left open.
    let mut promised = tokio::net::TcpStream::connect(sip).await.expect("connect");
    let from = promised.local_addr().expect("address");
    let head = options(from, sip, "tcp-promise")
        .replace("SIP/2.0/UDP", "SIP/2.0/TCP")
        .replace("Content-Length: 0", "Content-Length: 99999999");
    promised.write_all(head.as_bytes()).await.expect("sent");
    promised.write_all(b"short body").await.expect("sent");
    // 2 MB of header that never ends, the connection left open.
    let mut endless = tokio::net::TcpStream::connect(sip).await.expect("connect");
    endless
        .write_all(b"OPTIONS sip:x SIP/2.0\r\nX-Long: ")
        .await
        .expect("sent");
    let chunk = vec![b'a'; 64 * 1024];
    for _ in 0..32 {
        if endless.write_all(&chunk).await.is_err() {
            break; // the agent closed it: fine
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    assert_eq!(
        options_over_tcp(sip, "tcp-after").await.as_deref(),
        Some("SIP/2.0 200 OK"),
        "the agent still answers OPTIONS over TCP after the garbage"
    );
    let socket = UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("a probe socket");
    assert_eq!(
        options_answer(&socket, sip, "udp-after").await.as_deref(),
        Some("SIP/2.0 200 OK"),
        "and over UDP"
    );
    drop((promised, endless));
    app.shutdown().await;
}

#[tokio::test]
async fn sip_signaling_a_trunk_that_wants_it_is_registered_with_digest_and_refreshed() {
    let app = TestApp::spawn().await;
    let peer = SipPeer::start(Answer::Ok { bye_after: None }, Some(auth())).await;
    let ws = app.calling_workspace("SIP registration", 1).await;
    let trunk = json!({
        "host": "127.0.0.1", "port": peer.addr.port(), "username": "voxline",
        "password": "s3cret-pass", "register": true, "registerExpires": 300,
    });
    set_sip_trunk(&app, &ws, &trunk).await;
    // The first REGISTER is challenged; the answer carries a valid digest; the
    // registrar grants a few seconds, so a refresh follows well before they run out.
    let registers = peer.wait_for("REGISTER", 3, WAIT).await;
    assert_eq!(
        registers[0].digest, None,
        "the first REGISTER is unauthenticated"
    );
    assert_eq!(
        registers[1].digest,
        Some(true),
        "{:?}",
        registers[1].header("Authorization")
    );
    assert!(
        registers[1]
            .header("Contact")
            .is_some_and(|c| c.contains("voxline@")),
        "our Contact names the trunk's user: {:?}",
        registers[1].header("Contact")
    );
    assert!(
        registers[1]
            .header("Expires")
            .is_some_and(|e| e.trim() == "300")
            || registers[1]
                .header("Contact")
                .is_some_and(|c| c.contains("expires=300")),
        "the REGISTER asks for registerExpires: {:?}",
        registers[1].headers
    );
    app.shutdown().await;
}

/// The test CA, and the certificate and key it signed for 127.0.0.1 and
/// localhost (`tests/it/fixtures/sip_tls`, made with openssl, valid to 2126).
fn tls_fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/sip_tls")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A workspace whose trunk is the peer's TLS port, `transport: tls`, and a call
/// placed through it; (workspace, call id).
async fn call_over_tls(app: &TestApp, peer: &SipPeer) -> (Workspace, String) {
    let port = peer.tls_addr.expect("a TLS peer").port();
    let trunk = json!({"host": "127.0.0.1", "port": port, "transport": "tls"});
    let (ws, _) = sip_trunk_workspace(app, "SIP over TLS", "+14155557001", &trunk).await;
    let agent = sip_agent(app, &ws).await;
    let id = place(app, &ws, &agent).await;
    (ws, id)
}

#[tokio::test]
async fn sip_tls_a_trunk_on_tls_is_called_over_tls_trusting_the_operators_ca() {
    let app = TestApp::spawn_with_settings(|s| {
        s.sip.tls.extra_ca_pem = Some(tls_fixture("ca.pem"));
    })
    .await;
    let peer = SipPeer::start_tls(
        Answer::Ok {
            bye_after: Some(Duration::from_secs(3)),
        },
        tls_fixture("peer.pem"),
        tls_fixture("peer.key"),
    )
    .await;
    let (ws, id) = call_over_tls(&app, &peer).await;

    let invites = peer.wait_for("INVITE", 1, WAIT).await;
    let via = invites[0].header("Via").unwrap_or_default();
    assert!(
        via.starts_with("SIP/2.0/TLS"),
        "the INVITE came over TLS: Via {via}"
    );
    assert!(
        invites[0]
            .uri
            .to_ascii_lowercase()
            .contains("transport=tls"),
        "the request-URI asks for TLS: {}",
        invites[0].uri
    );
    peer.wait_for("ACK", 1, WAIT).await;
    let call = ended(&app, &ws, &id, WAIT).await;
    assert!(call["answeredAt"].is_string(), "{call}");
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["endedReason"], "caller-hangup", "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn sip_tls_a_certificate_from_an_unknown_ca_fails_the_call_before_any_invite() {
    // No operator CA: the peer's certificate chains to nothing the system trusts.
    let app = TestApp::spawn().await;
    let peer = SipPeer::start_tls(
        Answer::Ok { bye_after: None },
        tls_fixture("peer.pem"),
        tls_fixture("peer.key"),
    )
    .await;
    let (ws, id) = call_over_tls(&app, &peer).await;

    // At once, not after the transaction's 32 s of retries.
    let call = ended(&app, &ws, &id, Duration::from_secs(10)).await;
    assert_eq!(call["rawStatus"], "failed", "{call}");
    assert!(call["answeredAt"].is_null(), "{call}");
    assert_eq!(call["endedReason"], "carrier-error", "{call}");
    assert!(
        peer.requests().is_empty(),
        "nothing reached the peer over a connection we refused: {:?}",
        peer.methods()
    );
    app.shutdown().await;
}

#[tokio::test]
async fn sip_tls_the_tls_listener_answers_with_its_certificate() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let app = TestApp::spawn_with_settings(|s| {
        s.sip.tls.listen = Some(voxline::sip::settings::SipTlsListen {
            addr: listen,
            cert_pem: tls_fixture("peer.pem"),
            key_pem: voxline::sip::settings::SecretPem(tls_fixture("peer.key")),
        });
    })
    .await;

    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&tls_fixture("ca.pem")) {
        roots.add(cert.expect("the test CA")).expect("a root");
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(listen)
        .await
        .expect("the TLS listener takes connections");
    let from = tcp.local_addr().expect("local address");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("a server name");
    let tls = connector
        .connect(name, tcp)
        .await
        .expect("the handshake verifies the listener's certificate against the test CA");
    let request = options(from, listen, "tls").replace("SIP/2.0/UDP", "SIP/2.0/TLS");
    assert_eq!(
        status_line_of(tls, &request).await.as_deref(),
        Some("SIP/2.0 200 OK"),
        "OPTIONS over TLS is answered"
    );
    app.shutdown().await;
}

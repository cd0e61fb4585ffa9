//! `SipPeer`: a scripted SIP user agent on loopback, the far end of the SIP
//! carrier's signaling tests. It is built on rsipstack (the stack the carrier
//! uses, but none of the carrier's code): it records every request it gets and
//! answers INVITEs as the test scripts it ([`Answer`]), optionally demanding
//! digest auth, which it checks itself (RFC 2617 MD5, computed here).

use md5::{Digest, Md5};
use parking_lot::Mutex;
use rsipstack::EndpointBuilder;
use rsipstack::dialog::dialog::Dialog;
use rsipstack::dialog::dialog_layer::DialogLayer;
use rsipstack::sip::{
    Header, HeadersExt, Method, ProxyAuthenticate, SipMessage, StatusCode, WwwAuthenticate,
};
use rsipstack::transaction::endpoint::MessageInspector;
use rsipstack::transaction::transaction::Transaction;
use rsipstack::transport::udp::UdpConnection;
use rsipstack::transport::{SipAddr, TransportLayer};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use voxline_media::sdp::{self, G711Codec, LocalMedia, MediaDirection};

/// How the peer answers every INVITE (after any digest challenge).
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// 180, then 200 with an SDP answer; BYE of its own after `bye_after`.
    Ok {
        /// When set, the peer hangs up this long after answering.
        bye_after: Option<Duration>,
    },
    /// 180, then a 200 without the SDP answer our offer needs.
    OkWithoutSdp,
    /// 100 and 180, then this final code.
    Final(u16),
    /// 180 and never a final answer: only a CANCEL ends it (200, then 487).
    Ring,
    /// 180, then on CANCEL a 200 with an SDP answer instead of the 487: the
    /// answer that crosses the CANCEL (RFC 3261 §9.1 allows it).
    OkOnCancel,
    /// 180 and never a final answer, not even after a CANCEL: the stack
    /// answers the CANCEL 200, but the INVITE never gets its 487.
    RingDeaf,
}

/// Digest credentials the peer demands: (username, password, realm).
#[derive(Debug, Clone)]
pub struct DigestAuth {
    /// The username.
    pub username: String,
    /// The password.
    pub password: String,
    /// The realm the challenge names.
    pub realm: String,
    /// Whether the challenge asks for `qop="auth"` (then the answer must use it).
    pub qop: bool,
    /// Challenge as a proxy: 407 with `Proxy-Authenticate`, answered in
    /// `Proxy-Authorization` (else 401, `WWW-Authenticate`, `Authorization`).
    pub proxy: bool,
}

impl DigestAuth {
    /// The header the answer to our challenge comes in.
    fn answer_header(&self) -> &'static str {
        if self.proxy {
            "Proxy-Authorization"
        } else {
            "Authorization"
        }
    }
}

/// One request the peer received (retransmissions recorded once).
#[derive(Debug, Clone)]
pub struct PeerRequest {
    /// The method, e.g. `INVITE`.
    pub method: String,
    /// The request-URI.
    pub uri: String,
    /// Every header, name and value.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// For an INVITE when the peer demands auth: whether it carried a valid
    /// digest (`None`: no Authorization, or Proxy-Authorization, header at all).
    pub digest: Option<bool>,
}

impl PeerRequest {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the recorder and the request loop share.
struct Shared {
    auth: Option<DigestAuth>,
    nonce: String,
    answer: Answer,
    requests: Mutex<Vec<PeerRequest>>,
    seen: Mutex<HashSet<String>>,
    rtp: Mutex<Vec<Arc<UdpSocket>>>,
}

/// The running peer; stops when dropped.
pub struct SipPeer {
    /// Where it takes SIP over UDP.
    pub addr: SocketAddr,
    /// Where it takes SIP over TLS (peers started with [`SipPeer::start_tls`]).
    pub tls_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    _endpoint: rsipstack::transaction::Endpoint,
}

impl SipPeer {
    /// Starts a peer on 127.0.0.1 (a free UDP port) answering as `answer`,
    /// demanding `auth` when given.
    pub async fn start(answer: Answer, auth: Option<DigestAuth>) -> Self {
        Self::start_on(answer, auth, None).await
    }

    /// Starts a peer that also takes SIP over TLS on a free loopback port,
    /// showing the certificate chain `cert_pem` (with `key_pem`).
    pub async fn start_tls(answer: Answer, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        Self::start_on(answer, None, Some((cert_pem, key_pem))).await
    }

    async fn start_on(
        answer: Answer,
        auth: Option<DigestAuth>,
        tls: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Self {
        let cancel = CancellationToken::new();
        let shared = Arc::new(Shared {
            auth,
            nonce: format!("{:032x}", rand::random::<u128>()),
            answer,
            requests: Mutex::new(Vec::new()),
            seen: Mutex::new(HashSet::new()),
            rtp: Mutex::new(Vec::new()),
        });
        let transport = TransportLayer::new(cancel.clone());
        let udp = UdpConnection::create_connection(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            None,
            Some(cancel.child_token()),
        )
        .await
        .expect("the peer's UDP socket");
        let addr = udp.get_addr().get_socketaddr().expect("the peer's address");
        transport.add_transport(udp.into());
        let tls_addr = match tls {
            Some((cert, key)) => {
                // rsipstack binds the TLS listener when it starts serving: a
                // port found free here.
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .expect("a free TCP port")
                    .port();
                let tls_addr = SocketAddr::from(([127, 0, 0, 1], port));
                let config = rsipstack::transport::tls::TlsConfig {
                    cert: Some(cert),
                    key: Some(key),
                    ..Default::default()
                };
                let listener =
                    rsipstack::transport::tls::TlsListenerConnection::new(tls_addr, None, config)
                        .await
                        .expect("the peer's TLS listener");
                transport.add_transport(listener.into());
                Some(tls_addr)
            }
            None => None,
        };
        let endpoint = EndpointBuilder::new()
            .with_cancel_token(cancel.clone())
            .with_transport_layer(transport)
            .with_user_agent("voxline-test-peer")
            .with_inspector(Box::new(Recorder(Arc::clone(&shared))))
            .build();
        let incoming = endpoint
            .incoming_transactions()
            .expect("the peer's transactions");
        let dialogs = Arc::new(DialogLayer::new(endpoint.inner.clone()));
        let serving = endpoint.inner.clone();
        tokio::spawn(async move {
            let _ = serving.serve().await;
        });
        let contact_text = match tls_addr {
            Some(tls) => format!("sip:peer@{tls};transport=tls"),
            None => format!("sip:peer@{addr}"),
        };
        let contact =
            rsipstack::sip::Uri::try_from(contact_text.as_str()).expect("the peer's contact");
        tokio::spawn(serve_requests(
            Arc::clone(&shared),
            dialogs,
            incoming,
            contact,
            cancel.clone(),
        ));
        Self {
            addr,
            tls_addr,
            shared,
            cancel,
            _endpoint: endpoint,
        }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<PeerRequest> {
        self.shared.requests.lock().clone()
    }

    /// The requests of one method received so far.
    pub fn requests_of(&self, method: &str) -> Vec<PeerRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method.eq_ignore_ascii_case(method))
            .collect()
    }

    /// Waits until `count` requests of `method` arrived, or panics after `timeout`
    /// listing what did arrive.
    pub async fn wait_for(
        &self,
        method: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<PeerRequest> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let seen = self.requests_of(method);
            if seen.len() >= count {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the peer did not get {count} {method} within {timeout:?}; it got: {:?}",
                self.methods()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The methods received so far, in order (for failure messages).
    pub fn methods(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.method).collect()
    }
}

impl Drop for SipPeer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Records requests as they arrive (before the transaction layer routes them).
struct Recorder(Arc<Shared>);

impl MessageInspector for Recorder {
    fn before_send(&self, msg: SipMessage, _dest: Option<&SipAddr>) -> SipMessage {
        msg
    }

    fn after_received(&self, msg: SipMessage, _from: Option<&SipAddr>) -> SipMessage {
        if let SipMessage::Request(req) = &msg {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| (h.name().to_string(), h.value().trim().to_string()))
                .collect();
            let value = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            // A retransmission repeats the Via branch, CSeq and method.
            let key = format!(
                "{} {} {} {}",
                req.method,
                value("Via"),
                value("CSeq"),
                value("Call-ID")
            );
            if self.0.seen.lock().insert(key) {
                let digest = match (&self.0.auth, req.method) {
                    (Some(auth), Method::Invite) => req
                        .header_value(auth.answer_header())
                        .map(|h| digest_valid(&h, "INVITE", auth, &self.0.nonce)),
                    (Some(auth), Method::Register) => req
                        .header_value(auth.answer_header())
                        .map(|h| digest_valid(&h, "REGISTER", auth, &self.0.nonce)),
                    _ => None,
                };
                self.0.requests.lock().push(PeerRequest {
                    method: req.method.to_string(),
                    uri: req.uri.to_string(),
                    headers,
                    body: req.body.clone(),
                    digest,
                });
            }
        }
        msg
    }
}

/// Answers new requests until the peer stops.
async fn serve_requests(
    shared: Arc<Shared>,
    dialogs: Arc<DialogLayer>,
    mut incoming: rsipstack::transaction::TransactionReceiver,
    contact: rsipstack::sip::Uri,
    cancel: CancellationToken,
) {
    let (states, mut state_rx) = dialogs.new_dialog_state_channel();
    // Dialog states are not scripted; drained so the channel never fills.
    tokio::spawn(async move { while state_rx.recv().await.is_some() {} });
    loop {
        let mut tx = tokio::select! {
            () = cancel.cancelled() => return,
            tx = incoming.recv() => match tx { Some(tx) => tx, None => return },
        };
        if tx.original.method != Method::Invite
            && let Some(Dialog::Invite(mut dialog)) = dialogs.match_dialog(&tx)
        {
            // BYE, ACK, re-INVITE … of a dialog we answered: the stack replies.
            tokio::spawn(async move {
                let _ = dialog.handle(&mut tx).await;
            });
            continue;
        }
        match tx.original.method {
            Method::Invite => {
                let shared = Arc::clone(&shared);
                let dialogs = Arc::clone(&dialogs);
                let states = states.clone();
                let contact = contact.clone();
                tokio::spawn(async move {
                    invite(shared, dialogs, states, contact, tx).await;
                });
            }
            Method::Ack => {}
            Method::Register => {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move { register(shared, tx).await });
            }
            Method::Options => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::OK).await;
                });
            }
            // A BYE of a dialog the stack does not hold (the 200 that crossed a
            // CANCEL was sent by the transaction alone): recorded, and 200.
            Method::Bye => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::OK).await;
                });
            }
            Method::Cancel => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::CallTransactionDoesNotExist).await;
                });
            }
            _ => {
                tokio::spawn(async move {
                    let _ = tx.reply(StatusCode::MethodNotAllowed).await;
                });
            }
        }
    }
}

/// How long the peer, as a registrar, grants a registration: short, so a
/// test sees the refresh.
pub const GRANTED_EXPIRES: u32 = 4;

/// Answers a REGISTER as a registrar: challenged like an INVITE when the peer
/// demands digest auth, then 200 granting [`GRANTED_EXPIRES`] seconds.
async fn register(shared: Arc<Shared>, mut tx: Transaction) {
    if let Some(auth) = &shared.auth {
        let valid = tx
            .original
            .header_value(auth.answer_header())
            .is_some_and(|h| digest_valid(&h, "REGISTER", auth, &shared.nonce));
        if !valid {
            let challenge = format!(
                "Digest realm=\"{}\", nonce=\"{}\", algorithm=MD5",
                auth.realm, shared.nonce
            );
            let header = Header::WwwAuthenticate(WwwAuthenticate::new(challenge));
            let _ = tx
                .reply_with(StatusCode::Unauthorized, vec![header], None)
                .await;
            return;
        }
    }
    let contact = tx.original.header_value("Contact").unwrap_or_default();
    let headers = vec![
        Header::Other(
            "Contact".into(),
            format!("{contact};expires={GRANTED_EXPIRES}"),
        ),
        Header::Other("Expires".into(), GRANTED_EXPIRES.to_string()),
    ];
    let _ = tx.reply_with(StatusCode::OK, headers, None).await;
}

/// Answers one INVITE as scripted.
async fn invite(
    shared: Arc<Shared>,
    dialogs: Arc<DialogLayer>,
    states: rsipstack::dialog::dialog::DialogStateSender,
    contact: rsipstack::sip::Uri,
    mut tx: Transaction,
) {
    if let Some(auth) = &shared.auth {
        let valid = tx
            .original
            .header_value(auth.answer_header())
            .is_some_and(|h| digest_valid(&h, "INVITE", auth, &shared.nonce));
        if !valid {
            let mut challenge = format!(
                "Digest realm=\"{}\", nonce=\"{}\", algorithm=MD5",
                auth.realm, shared.nonce
            );
            if auth.qop {
                challenge.push_str(", qop=\"auth\"");
            }
            let (code, header) = if auth.proxy {
                (
                    StatusCode::ProxyAuthenticationRequired,
                    Header::ProxyAuthenticate(ProxyAuthenticate::new(challenge)),
                )
            } else {
                (
                    StatusCode::Unauthorized,
                    Header::WwwAuthenticate(WwwAuthenticate::new(challenge)),
                )
            };
            let _ = tx.reply_with(code, vec![header], None).await;
            drain(tx).await;
            return;
        }
    }
    match shared.answer {
        Answer::Final(code) => {
            let _ = tx.send_trying().await;
            let _ = tx.reply(StatusCode::Ringing).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = tx.reply(StatusCode::from(code)).await;
            drain(tx).await;
        }
        Answer::Ring => {
            let _ = tx.send_trying().await;
            let _ = tx.reply(StatusCode::Ringing).await;
            // The transaction answers the CANCEL itself (200); the INVITE gets 487.
            while let Some(msg) = tx.receive().await {
                if let SipMessage::Request(req) = msg
                    && req.method == Method::Cancel
                {
                    let _ = tx.reply(StatusCode::RequestTerminated).await;
                }
            }
        }
        Answer::OkOnCancel => {
            let _ = tx.send_trying().await;
            let _ = tx.reply(StatusCode::Ringing).await;
            let offer = String::from_utf8_lossy(&tx.original.body).into_owned();
            let local = rtp_media(&shared).await;
            while let Some(msg) = tx.receive().await {
                if let SipMessage::Request(req) = msg
                    && req.method == Method::Cancel
                {
                    let (body, _) = sdp::answer(&offer, &local).expect("an SDP answer");
                    let headers = vec![
                        Header::Contact(format!("<{contact}>").into()),
                        Header::ContentType("application/sdp".into()),
                    ];
                    let _ = tx
                        .reply_with(StatusCode::OK, headers, Some(body.into_bytes()))
                        .await;
                }
            }
        }
        Answer::OkWithoutSdp => {
            let dialog = dialogs
                .get_or_create_server_invite(&tx, states, None, Some(contact))
                .expect("a server dialog");
            let mut handling = dialog.clone();
            tokio::spawn(async move {
                let _ = handling.handle(&mut tx).await;
            });
            let _ = dialog.ringing(None, None);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = dialog.accept(None, None);
        }
        Answer::RingDeaf => {
            let _ = tx.send_trying().await;
            let _ = tx.reply(StatusCode::Ringing).await;
            while tx.receive().await.is_some() {}
        }
        Answer::Ok { bye_after } => {
            let local = rtp_media(&shared).await;
            let offer = String::from_utf8_lossy(&tx.original.body).into_owned();
            let dialog = match dialogs.get_or_create_server_invite(&tx, states, None, Some(contact))
            {
                Ok(dialog) => dialog,
                Err(err) => {
                    eprintln!("sip peer: no server dialog: {err}");
                    let _ = tx.reply(StatusCode::ServerInternalError).await;
                    return;
                }
            };
            let mut handling = dialog.clone();
            tokio::spawn(async move {
                let _ = handling.handle(&mut tx).await;
            });
            let _ = dialog.ringing(None, None);
            tokio::time::sleep(Duration::from_millis(100)).await;
            match sdp::answer(&offer, &local) {
                Ok((body, _)) => {
                    let _ = dialog.accept(
                        Some(vec![Header::ContentType("application/sdp".into())]),
                        Some(body.into_bytes()),
                    );
                }
                Err(err) => {
                    eprintln!("sip peer: the offer does not take an answer: {err}");
                    let _ = dialog.reject(Some(StatusCode::NotAcceptableHere), None);
                    return;
                }
            }
            if let Some(after) = bye_after {
                tokio::time::sleep(after).await;
                if let Err(err) = dialog.bye().await {
                    eprintln!("sip peer: BYE failed: {err}");
                }
            }
        }
    }
}

/// An RTP socket of the peer's own (kept while the peer runs) and its media.
async fn rtp_media(shared: &Shared) -> LocalMedia {
    let rtp = Arc::new(
        UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("the peer's RTP socket"),
    );
    let local = LocalMedia {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: rtp.local_addr().expect("RTP address").port(),
        session_id: u64::from(rand::random::<u32>()),
        version: 1,
        codecs: vec![G711Codec::Pcmu, G711Codec::Pcma],
        dtmf_payload_type: 101,
        direction: MediaDirection::SendRecv,
    };
    shared.rtp.lock().push(rtp);
    local
}

/// Keeps a transaction running (ACK of a final answer, retransmits) until it ends.
async fn drain(mut tx: Transaction) {
    let _ = tokio::time::timeout(Duration::from_secs(40), async {
        while tx.receive().await.is_some() {}
    })
    .await;
}

/// Whether an `Authorization` header holds a valid RFC 2617 MD5 digest for
/// `method`, our nonce and `auth`'s credentials.
pub fn digest_valid(header: &str, method: &str, auth: &DigestAuth, nonce: &str) -> bool {
    let Some(params) = header.trim().strip_prefix("Digest") else {
        return false;
    };
    let params = digest_params(params);
    let get = |name: &str| {
        params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let (Some(username), Some(realm), Some(their_nonce), Some(uri), Some(response)) = (
        get("username"),
        get("realm"),
        get("nonce"),
        get("uri"),
        get("response"),
    ) else {
        return false;
    };
    if username != auth.username || realm != auth.realm || their_nonce != nonce {
        return false;
    }
    if get("algorithm").is_some_and(|a| !a.eq_ignore_ascii_case("MD5")) {
        return false;
    }
    let ha1 = md5_hex(&format!(
        "{}:{}:{}",
        auth.username, auth.realm, auth.password
    ));
    let ha2 = md5_hex(&format!("{method}:{uri}"));
    if auth.qop && get("qop") != Some("auth") {
        return false;
    }
    let expected = match get("qop") {
        Some(qop) => {
            let (Some(nc), Some(cnonce)) = (get("nc"), get("cnonce")) else {
                return false;
            };
            md5_hex(&format!("{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}"))
        }
        None => md5_hex(&format!("{ha1}:{nonce}:{ha2}")),
    };
    response.eq_ignore_ascii_case(&expected)
}

/// The `name=value` pairs of a digest header, quotes removed.
pub fn digest_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars().chain(std::iter::once(',')) {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                if let Some((name, value)) = current.split_once('=') {
                    params.push((name.trim().to_string(), value.trim().to_string()));
                }
                current.clear();
            }
            _ => current.push(c),
        }
    }
    params
}

fn md5_hex(text: &str) -> String {
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

//! [`SipCarrier`]: the engine's [`Carrier`] over a workspace's SIP trunk.
//!
//! `place` reserves the call's RTP port, sends an INVITE with a G.711 offer
//! (answering a 401/407 with digest auth through rsipstack), and returns the
//! SIP Call-ID as the carrier's call id. A task per call then follows it:
//! - 180/183 report ringing (early media is not played or recorded: the
//!   conversation starts at 200, as it does on the websocket carriers);
//! - 200 is ACKed by the stack, the answer's SDP chooses the codec and where
//!   RTP goes, and the RTP leg is handed to the call's conversation;
//! - a final failure maps to busy (486, 600, 603), no-answer (408, 480, 487
//!   after our ring timeout) or failed (anything else), each with the code;
//! - no final answer within the ring timeout sends CANCEL (no 487 within
//!   5 s after it still ends the call no-answer); no response at all, not
//!   even 100, within the ring timeout fails the call: the trunk is down;
//! - BYE from the callee ends the media and reports the call completed.
//!
//! `hangup` sends CANCEL while ringing and BYE once answered.

use async_trait::async_trait;
use parking_lot::Mutex;
use rsipstack::dialog::authenticate::Credential;
use rsipstack::dialog::dialog::DialogState;
use rsipstack::dialog::invitation::InviteOption;
use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::{HostWithPort, StatusCodeKind, Transport, Uri};
use rsipstack::transport::SipAddr;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use voxline_actors::carrier::{
    Carrier, CarrierError, CarrierStatus, DialRequest, StatusSink, TransferLeg, TransferRequest,
};
use voxline_actors::sim::carrier::TransferLegSink;
use voxline_media::sdp::{self, LocalMedia, MediaDirection};

use super::invite_flood::InviteFlood;
use super::media_leg::{AnsweredLeg, MediaHandoff};
use super::rtp_ports::RtpPorts;
use super::trunks::SipTrunks;
use super::user_agent::SipUserAgent;
use crate::carriers::inbound::InboundHost;
use crate::domain::sip_trunk::{SipCodec, SipTransport, SipTrunk};
use std::sync::OnceLock;

/// The RFC 4733 `telephone-event` payload type we offer.
pub(super) const DTMF_PAYLOAD_TYPE: u8 = 101;
/// INVITEs one source may send per second, after a burst of [`INVITE_BURST`].
const INVITES_PER_SECOND: f64 = 10.0;
/// The burst of INVITEs one source may send at once.
const INVITE_BURST: u32 = 40;
/// How long a transferred call's leg waits for the REFER's final NOTIFY.
const TRANSFER_NOTIFY_WAIT: Duration = Duration::from_secs(120);
/// How long after a CANCEL the INVITE's final answer (487) is awaited.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The SIP carrier.
pub struct SipCarrier {
    pub(super) agent: Option<Arc<SipUserAgent>>,
    trunks: Arc<dyn SipTrunks>,
    pub(super) rtp: RtpPorts,
    pub(super) media: Arc<dyn MediaHandoff>,
    /// Live calls both ways, by SIP Call-ID (what `hangup` is given).
    pub(super) calls: Arc<Mutex<HashMap<String, LiveCall>>>,
    /// The INVITE flood limit, per source.
    pub(super) flood: InviteFlood,
    /// What decides inbound calls; set once the inbound service runs.
    pub(super) inbound: OnceLock<Arc<dyn InboundHost>>,
    /// Where transferred calls' legs are reported.
    pub(super) legs: Arc<OnceLock<TransferLegSink>>,
    /// Where calls' final SIP codes are recorded.
    codes: Arc<OnceLock<CarrierCodeSink>>,
}

/// Records a call's final carrier code (our call id, the SIP status code).
pub type CarrierCodeSink = Arc<dyn Fn(&str, u16) + Send + Sync>;

/// A live call's dialog, either direction.
pub(super) struct LiveCall {
    /// Its dialog (CANCEL or BYE go through it).
    pub(super) dialog: InviteDialog,
    /// Our call id.
    pub(super) call_id: String,
    /// Set once a REFER was accepted: the far end is calling the transfer
    /// target, and our leg ends when its NOTIFY says how that went.
    pub(super) transferred: bool,
}

impl SipCarrier {
    /// A carrier over the user agent (`None`: SIP is off on this node, and
    /// every call is refused saying so).
    pub fn new(
        agent: Option<Arc<SipUserAgent>>,
        trunks: Arc<dyn SipTrunks>,
        rtp: RtpPorts,
        media: Arc<dyn MediaHandoff>,
    ) -> Arc<Self> {
        Arc::new(Self {
            agent,
            trunks,
            rtp,
            media,
            calls: Arc::new(Mutex::new(HashMap::new())),
            flood: InviteFlood::new(INVITES_PER_SECOND, INVITE_BURST),
            inbound: OnceLock::new(),
            legs: Arc::new(OnceLock::new()),
            codes: Arc::new(OnceLock::new()),
        })
    }

    /// Sends inbound calls to `host` from now on (before it, INVITEs get 503).
    pub fn connect_inbound(&self, host: Arc<dyn InboundHost>) {
        let _ = self.inbound.set(host);
    }

    /// Its user agent, when SIP is on.
    pub fn user_agent(&self) -> Option<&Arc<SipUserAgent>> {
        self.agent.as_ref()
    }

    /// Where its user agent listens, when SIP is on.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.agent.as_ref().map(|agent| agent.local_addr())
    }

    fn agent(&self) -> Result<&Arc<SipUserAgent>, CarrierError> {
        self.agent.as_ref().ok_or_else(|| {
            CarrierError::NotConfigured("SIP is off on this node (VOXLINE_SIP_LISTEN=off)".into())
        })
    }
}

#[async_trait]
impl Carrier for SipCarrier {
    async fn place(&self, req: DialRequest, status: StatusSink) -> Result<String, CarrierError> {
        let agent = Arc::clone(self.agent()?);
        let trunk = self.trunks.trunk(&req.org_id).await.ok_or_else(|| {
            CarrierError::NotConfigured(format!(
                "workspace {} has no sip trunk (a provider credential of kind sip)",
                req.org_id
            ))
        })?;
        let leg = self
            .rtp
            .bind(agent.local_addr().ip())
            .map_err(|e| CarrierError::Rejected(format!("no RTP port for the call: {e}")))?;
        let local = local_media(&agent, &trunk, leg.port);
        let sip_call_id = format!("{}@voxline", uuid::Uuid::new_v4().simple());
        let option = invite_option(&agent, &trunk, &req, &local, &sip_call_id)?;
        if trunk.transport != SipTransport::Udp
            && let Some(destination) = &option.destination
        {
            connect_stream(&agent, destination, &trunk).await?;
        }
        let (state_tx, state_rx) = agent.dialogs().new_dialog_state_channel();
        let (dialog, invite) = agent
            .dialogs()
            .do_invite_async(option, state_tx)
            .map_err(|e| CarrierError::Rejected(format!("the INVITE could not be built: {e}")))?;
        self.calls.lock().insert(
            sip_call_id.clone(),
            LiveCall {
                dialog: dialog.clone(),
                call_id: req.call_id.clone(),
                transferred: false,
            },
        );
        let call = PlacedCall {
            req,
            sip_call_id: sip_call_id.clone(),
            dialog,
            local,
            status,
        };
        let media = Arc::clone(&self.media);
        let calls = Arc::clone(&self.calls);
        let legs = Arc::clone(&self.legs);
        let codes = Arc::clone(&self.codes);
        tokio::spawn(async move {
            let forget = call.sip_call_id.clone();
            let call_id = call.req.call_id.clone();
            let code = follow(
                call,
                invite,
                state_rx,
                leg,
                media,
                agent,
                Arc::clone(&calls),
                legs,
            )
            .await;
            if let (Some(code), Some(sink)) = (code, codes.get()) {
                sink(&call_id, code);
            }
            calls.lock().remove(&forget);
        });
        Ok(sip_call_id)
    }

    async fn hangup(&self, carrier_call_id: &str) -> Result<(), CarrierError> {
        let dialog = self
            .calls
            .lock()
            .get(carrier_call_id)
            // A transferred call's leg is ended by the REFER's final NOTIFY (or its
            // deadline): a BYE now could cut the transfer short.
            .filter(|call| !call.transferred)
            .map(|call| call.dialog.clone());
        let Some(dialog) = dialog else {
            return Ok(());
        };
        dialog
            .hangup()
            .await
            .map_err(|e| CarrierError::Unreachable(format!("hanging up {carrier_call_id}: {e}")))
    }

    /// Sends REFER (RFC 3515) asking the far end to call `req.to` through the
    /// trunk; its NOTIFYs report the new call's progress, and the final one
    /// ends our leg and is reported as the transfer's leg.
    async fn transfer(&self, req: TransferRequest) -> Result<(), CarrierError> {
        let dialog = self
            .calls
            .lock()
            .get(&req.carrier_call_id)
            .map(|call| call.dialog.clone())
            .ok_or_else(|| {
                CarrierError::Rejected(format!("no live SIP call {}", req.carrier_call_id))
            })?;
        let trunk = self.trunks.trunk(&req.org_id).await.ok_or_else(|| {
            CarrierError::NotConfigured(format!("workspace {} has no sip trunk", req.org_id))
        })?;
        let target = Uri::try_from(format!(
            "sip:{}@{}",
            req.to,
            host_port(&trunk.host, trunk.port)
        ))
        .map_err(|e| CarrierError::Rejected(format!("bad transfer target {}: {e}", req.to)))?;
        let response = dialog
            .refer(target, None, None)
            .await
            .map_err(|e| CarrierError::Unreachable(format!("REFER failed: {e}")))?;
        let code = response.as_ref().map(|r| r.status_code.code());
        tracing::info!(call = %req.call_id, sip_call_id = %req.carrier_call_id, ?code, to = %req.to, "REFER answered");
        match code {
            Some(200..=299) => {
                if let Some(call) = self.calls.lock().get_mut(&req.carrier_call_id) {
                    call.transferred = true;
                }
                // Should no final NOTIFY come, our leg still ends.
                let dialog = dialog.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(TRANSFER_NOTIFY_WAIT).await;
                    let _ = dialog.hangup().await;
                });
                Ok(())
            }
            Some(code) => Err(CarrierError::Rejected(format!(
                "the far end refused the REFER with {code}"
            ))),
            None => Err(CarrierError::Unreachable("no answer to the REFER".into())),
        }
    }
}

impl SipCarrier {
    /// Reports transferred calls' legs to `sink` (the store).
    pub fn report_transfers_to(&self, sink: TransferLegSink) {
        let _ = self.legs.set(sink);
    }

    /// Records calls' final SIP codes with `sink` (the store).
    pub fn record_codes_to(&self, sink: CarrierCodeSink) {
        let _ = self.codes.set(sink);
    }
}

/// A NOTIFY of a transferred call's REFER: a final status ends our leg (BYE)
/// and is reported as the transfer's leg.
pub(super) async fn refer_progress(
    calls: &Mutex<HashMap<String, LiveCall>>,
    legs: &OnceLock<TransferLegSink>,
    sip_call_id: &str,
    code: u16,
) {
    if code < 200 {
        return;
    }
    let live = calls
        .lock()
        .get(sip_call_id)
        .filter(|call| call.transferred)
        .map(|call| (call.dialog.clone(), call.call_id.clone()));
    let Some((dialog, call_id)) = live else {
        return;
    };
    let leg_status = match final_failure(code, false) {
        _ if (200..300).contains(&code) => "completed",
        CarrierStatus::Busy => "busy",
        CarrierStatus::NoAnswer => "no-answer",
        _ => "failed",
    };
    tracing::info!(call = %call_id, %sip_call_id, code, leg_status, "the transfer's final NOTIFY");
    if let Some(sink) = legs.get() {
        sink(TransferLeg {
            call_id,
            status: leg_status.into(),
            duration_seconds: None,
        });
    }
    let _ = dialog.hangup().await;
}

/// The status code of a NOTIFY's `message/sipfrag` body (RFC 3420), whose
/// first line is the referred call's status line (`SIP/2.0 180 Ringing`).
/// Read here rather than by rsipstack's `ReferStatus`, which looks for the
/// Event header among untyped headers only and misses it once it is typed.
fn sipfrag_status(body: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(body.get(..body.len().min(256))?).ok()?;
    let line = text.lines().next()?.trim();
    let rest = line.strip_prefix("SIP/2.0 ")?;
    let code: u16 = rest.get(..3)?.parse().ok()?;
    (100..700).contains(&code).then_some(code)
}

/// One placed call, as its task follows it.
struct PlacedCall {
    req: DialRequest,
    sip_call_id: String,
    dialog: InviteDialog,
    local: LocalMedia,
    status: StatusSink,
}

/// Follows a placed call from INVITE to its end; see the module doc.
#[allow(clippy::too_many_arguments)]
async fn follow(
    call: PlacedCall,
    mut invite: tokio::task::JoinHandle<rsipstack::dialog::invitation::InviteAsyncResult>,
    mut states: rsipstack::dialog::dialog::DialogStateReceiver,
    leg: super::rtp_ports::RtpSocket,
    media: Arc<dyn MediaHandoff>,
    agent: Arc<SipUserAgent>,
    calls: Arc<Mutex<HashMap<String, LiveCall>>>,
    legs: Arc<OnceLock<TransferLegSink>>,
) -> Option<u16> {
    let PlacedCall {
        req,
        sip_call_id,
        dialog,
        local,
        status,
    } = call;
    let ring = tokio::time::sleep(Duration::from_secs(u64::from(req.ring_timeout_seconds)));
    tokio::pin!(ring);
    let mut rang = false;
    // Any provisional response (100 included): the trunk is there.
    let mut heard = false;
    let mut timed_out = false;
    // Until the INVITE's final answer.
    let result = loop {
        tokio::select! {
            result = &mut invite => break result,
            Some(state) = states.recv() => {
                heard |= matches!(state, DialogState::Trying(..) | DialogState::Early(..));
                if matches!(state, DialogState::Early(..)) && !rang {
                    rang = true;
                    status.send(CarrierStatus::Ringing);
                }
            }
            () = &mut ring => {
                if !heard {
                    // Not even a 100 Trying within the ring timeout: the trunk is down
                    // or misconfigured, which is no callee's failure to answer (and a
                    // CANCEL may not be sent before a provisional response).
                    tracing::debug!(%sip_call_id, "the trunk sent no response to the INVITE");
                    invite.abort();
                    agent.dialogs().remove_dialog(&dialog.id());
                    status.send(CarrierStatus::Failed(format!(
                        "sip: the trunk sent no response to the INVITE within {} s",
                        req.ring_timeout_seconds
                    )));
                    return None;
                }
                if timed_out {
                    // The far end never ended the INVITE after our CANCEL (no 487):
                    // the call ends here, unanswered.
                    tracing::debug!(%sip_call_id, "no final answer to the INVITE after our CANCEL");
                    invite.abort();
                    agent.dialogs().remove_dialog(&dialog.id());
                    status.send(CarrierStatus::NoAnswer);
                    return None;
                }
                timed_out = true;
                tracing::debug!(%sip_call_id, "no answer within the ring timeout; sending CANCEL");
                if let Err(err) = dialog.cancel().await {
                    tracing::debug!(%sip_call_id, error = %err, "CANCEL failed");
                }
                // Should the far end never answer the CANCEL, this bounds our wait.
                ring.as_mut().reset(tokio::time::Instant::now() + CANCEL_WAIT);
            }
        }
    };
    let response = match result {
        Ok(Ok((_, response))) => response,
        Ok(Err(err)) => {
            tracing::info!(call = %req.call_id, %sip_call_id, error = %err, timed_out, "the INVITE failed");
            let outcome = if timed_out {
                CarrierStatus::NoAnswer
            } else {
                CarrierStatus::Failed(format!("sip: {err}"))
            };
            status.send(outcome);
            return None;
        }
        Err(join) => {
            status.send(CarrierStatus::Failed(format!(
                "sip: the INVITE task failed: {join}"
            )));
            return None;
        }
    };
    let Some(response) = response else {
        status.send(if timed_out {
            CarrierStatus::NoAnswer
        } else {
            CarrierStatus::Failed("sip: the INVITE ended without a final response".into())
        });
        return None;
    };
    let code = response.status_code.code();
    if response.status_code.kind() != StatusCodeKind::Successful {
        let outcome = final_failure(code, timed_out);
        // The engine keeps only busy/no-answer/failed; the SIP code is said here.
        tracing::info!(call = %req.call_id, %sip_call_id, code, ?outcome, "the INVITE ended without an answer");
        status.send(outcome);
        return Some(code);
    }
    if timed_out {
        // A 200 that crossed our CANCEL: the stack ACKs and BYEs it.
        status.send(CarrierStatus::NoAnswer);
        return Some(code);
    }
    let negotiated = match std::str::from_utf8(&response.body)
        .map_err(|_| sdp::SdpError::Parse("the answer is not UTF-8".into()))
        .and_then(|body| sdp::read_answer(body, &local))
    {
        Ok(negotiated) => negotiated,
        Err(err) => {
            tracing::warn!(%sip_call_id, error = %err, "the 200's SDP answer is unusable; hanging up");
            let _ = dialog.hangup().await;
            status.send(CarrierStatus::Failed(format!(
                "sip 200 with an unusable SDP answer: {err}"
            )));
            return Some(code);
        }
    };
    let ended = CancellationToken::new();
    let answered = AnsweredLeg {
        call_id: req.call_id.clone(),
        sip_call_id: sip_call_id.clone(),
        from: req.from.clone(),
        to: req.to.clone(),
        leg,
        negotiated,
        ended: ended.clone(),
    };
    // The media first: a call whose conversation is gone is hung up as failed,
    // not reported answered and then ended as if the callee had hung up.
    if let Err(err) = media.answered(answered) {
        tracing::warn!(%sip_call_id, error = %err, "an answered SIP call has no conversation; hanging up");
        let _ = dialog.hangup().await;
        status.send(CarrierStatus::Failed(format!("sip: answered, but {err}")));
        return Some(code);
    }
    status.send(CarrierStatus::Answered);
    follow_answered(
        &agent,
        &sip_call_id,
        &req.call_id,
        &local,
        states,
        media.as_ref(),
        &calls,
        &legs,
    )
    .await;
    ended.cancel();
    status.send(CarrierStatus::Completed);
    Some(code)
}

/// Follows an answered call's dialog (either direction) until either side
/// ends it: answers re-INVITEs with our media and reports what they change,
/// and takes the other in-dialog requests.
#[allow(clippy::too_many_arguments)]
pub(super) async fn follow_answered(
    agent: &SipUserAgent,
    sip_call_id: &str,
    call_id: &str,
    local: &LocalMedia,
    mut states: rsipstack::dialog::dialog::DialogStateReceiver,
    media: &dyn MediaHandoff,
    calls: &Mutex<HashMap<String, LiveCall>>,
    legs: &OnceLock<TransferLegSink>,
) {
    while let Some(state) = states.recv().await {
        match state {
            DialogState::Terminated(id, reason) => {
                tracing::debug!(%sip_call_id, ?reason, "SIP dialog ended");
                agent.dialogs().remove_dialog(&id);
                break;
            }
            DialogState::Updated(_, request, handle) => {
                // A re-INVITE (hold, resume, a new address): answered with our media,
                // the conversation's leg keeps its socket.
                let offer = std::str::from_utf8(&request.body).unwrap_or_default();
                match sdp::answer(offer, local) {
                    Ok((body, update)) => {
                        media.updated(call_id, &update);
                        let headers = vec![rsipstack::sip::Header::ContentType(
                            "application/sdp".into(),
                        )];
                        let _ = handle
                            .respond(
                                rsipstack::sip::StatusCode::OK,
                                Some(headers),
                                Some(body.into_bytes()),
                            )
                            .await;
                    }
                    Err(err) => {
                        tracing::debug!(%sip_call_id, error = %err, "re-INVITE refused");
                        let _ = handle
                            .reply(rsipstack::sip::StatusCode::NotAcceptableHere)
                            .await;
                    }
                }
            }
            DialogState::Notify(_, request, handle) => {
                let _ = handle.reply(rsipstack::sip::StatusCode::OK).await;
                if let Some(code) = sipfrag_status(&request.body) {
                    refer_progress(calls, legs, sip_call_id, code).await;
                }
            }
            DialogState::Info(_, _, handle)
            | DialogState::Options(_, _, handle)
            | DialogState::Message(_, _, handle) => {
                let _ = handle.reply(rsipstack::sip::StatusCode::OK).await;
            }
            DialogState::Refer(_, _, handle) | DialogState::Publish(_, _, handle) => {
                let _ = handle
                    .reply(rsipstack::sip::StatusCode::MethodNotAllowed)
                    .await;
            }
            _ => {}
        }
    }
}

/// What a final non-2xx answer to our INVITE means for the call.
fn final_failure(code: u16, after_our_cancel: bool) -> CarrierStatus {
    match code {
        486 | 600 | 603 => CarrierStatus::Busy,
        408 | 480 => CarrierStatus::NoAnswer,
        487 if after_our_cancel => CarrierStatus::NoAnswer,
        _ => CarrierStatus::Failed(format!("sip {code}")),
    }
}

/// Our side of a call's SDP: the advertised address, the call's RTP port,
/// the trunk's codecs and `telephone-event`.
pub(super) fn local_media(agent: &SipUserAgent, trunk: &SipTrunk, port: u16) -> LocalMedia {
    LocalMedia {
        address: agent.advertised_ip(),
        port,
        session_id: rand::random::<u32>().into(),
        version: 1,
        codecs: trunk.codecs.iter().map(|c| g711(*c)).collect(),
        dtmf_payload_type: DTMF_PAYLOAD_TYPE,
        direction: MediaDirection::SendRecv,
    }
}

/// `;transport=…` for a URI toward the trunk (nothing for UDP, the default).
pub(super) fn transport_param(transport: SipTransport) -> &'static str {
    match transport {
        SipTransport::Udp => "",
        SipTransport::Tcp => ";transport=tcp",
        SipTransport::Tls => ";transport=tls",
    }
}

/// The INVITE for one call through `trunk`.
fn invite_option(
    agent: &SipUserAgent,
    trunk: &SipTrunk,
    req: &DialRequest,
    local: &LocalMedia,
    sip_call_id: &str,
) -> Result<InviteOption, CarrierError> {
    let transport_param = transport_param(trunk.transport);
    let uri = |text: String| {
        Uri::try_from(text.as_str())
            .map_err(|e| CarrierError::Rejected(format!("bad SIP URI {text}: {e}")))
    };
    let host = host_port(&trunk.host, trunk.port);
    let callee = uri(format!("sip:{}@{host}{transport_param}", req.to))?;
    let caller = uri(format!("sip:{}@{}", req.from, trunk.domain()))?;
    let contact = uri(format!(
        "sip:{}@{}{transport_param}",
        req.from,
        SocketAddrText(agent.advertised_ip(), agent.local_addr().port())
    ))?;
    let destination = SipAddr::new(
        match trunk.transport {
            SipTransport::Udp => Transport::Udp,
            SipTransport::Tcp => Transport::Tcp,
            SipTransport::Tls => Transport::Tls,
        },
        HostWithPort::try_from(host.as_str())
            .map_err(|e| CarrierError::Rejected(format!("bad trunk address {host}: {e}")))?,
    );
    let credential = trunk.username.as_ref().map(|username| Credential {
        username: username.clone(),
        password: trunk.password.clone().unwrap_or_default(),
        realm: None,
        auth_username: None,
    });
    Ok(InviteOption {
        caller,
        callee,
        destination: Some(destination),
        content_type: Some("application/sdp".into()),
        offer: Some(sdp::offer(local).into_bytes()),
        contact,
        credential,
        call_id: Some(sip_call_id.to_owned()),
        ..Default::default()
    })
}

/// How long a TCP or TLS connection to a trunk may take to open.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// Opens (or reuses) the TCP or TLS connection to the trunk before the INVITE.
/// rsipstack's transaction would retry a connection that fails on its timer
/// until Timer B (32 s) and say only that no response came; a refused port or
/// a certificate we do not trust fails the call now, saying why.
async fn connect_stream(
    agent: &SipUserAgent,
    destination: &SipAddr,
    trunk: &SipTrunk,
) -> Result<(), CarrierError> {
    let endpoint = agent.endpoint_inner();
    let host = host_port(&trunk.host, trunk.port);
    let kind = match trunk.transport {
        SipTransport::Tls => "TLS",
        SipTransport::Tcp | SipTransport::Udp => "TCP",
    };
    match tokio::time::timeout(
        CONNECT_WAIT,
        endpoint.transport_layer.lookup(destination, None),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(CarrierError::Rejected(format!(
            "sip: could not connect to the trunk {host} over {kind}: {err}"
        ))),
        Err(_) => Err(CarrierError::Rejected(format!(
            "sip: no {kind} connection to the trunk {host} within {} s",
            CONNECT_WAIT.as_secs()
        ))),
    }
}

/// `host:port`, with an IPv6 host in brackets.
pub(super) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An IP and port written as a URI host part.
struct SocketAddrText(std::net::IpAddr, u16);

impl std::fmt::Display for SocketAddrText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::net::SocketAddr::new(self.0, self.1).fmt(f)
    }
}

pub(super) fn g711(codec: SipCodec) -> sdp::G711Codec {
    match codec {
        SipCodec::Pcmu => sdp::G711Codec::Pcmu,
        SipCodec::Pcma => sdp::G711Codec::Pcma,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_answers_map_to_the_issue_s_outcomes() {
        for code in [486, 600, 603] {
            assert_eq!(final_failure(code, false), CarrierStatus::Busy, "{code}");
        }
        for code in [408, 480] {
            assert_eq!(
                final_failure(code, false),
                CarrierStatus::NoAnswer,
                "{code}"
            );
        }
        assert_eq!(final_failure(487, true), CarrierStatus::NoAnswer);
        assert_eq!(
            final_failure(404, false),
            CarrierStatus::Failed("sip 404".into())
        );
        assert_eq!(
            final_failure(503, false),
            CarrierStatus::Failed("sip 503".into())
        );
    }

    #[test]
    fn sipfrag_bodies_give_the_referred_call_s_status() {
        assert_eq!(sipfrag_status(b"SIP/2.0 100 Trying\r\n"), Some(100));
        assert_eq!(sipfrag_status(b"SIP/2.0 404 Not Found"), Some(404));
        assert_eq!(sipfrag_status(b"SIP/2.0 200 OK\r\nContact: x"), Some(200));
        assert_eq!(sipfrag_status(b"INVITE sip:a@b SIP/2.0"), None);
        assert_eq!(sipfrag_status(b"SIP/2.0 9"), None);
        assert_eq!(sipfrag_status(&[0xff, 0xfe]), None);
        assert_eq!(sipfrag_status(b""), None);
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(host_port("2001:db8::1", 5060), "[2001:db8::1]:5060");
        assert_eq!(host_port("sip.example.com", 5061), "sip.example.com:5061");
    }
}

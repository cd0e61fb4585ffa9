//! Calls into a workspace's SIP numbers: a new INVITE, checked and answered
//! through the same inbound path as the websocket carriers' calls (the
//! number's inbound agent, the workspace's slots, its routing URL, its records).
//!
//! In order, an INVITE is refused with:
//! - 503 when its source sends INVITEs faster than the flood limit;
//! - 404 when no workspace has the called number on `sip`;
//! - 403 when its source is not the trunk's host or in its `allowedSources`;
//! - 488 when its SDP offers nothing we speak (G.711);
//! - the inbound decision's code otherwise (busy 486, unavailable 480, …).
//!
//! An accepted call rings (180), is answered with 200 and our SDP, and once
//! ACKed its RTP leg goes to the call's conversation like an outbound call's.

use rsipstack::dialog::dialog::DialogState;
use rsipstack::sip::prelude::HeadersExt;
use rsipstack::sip::{Header, Request, StatusCode, ToTypedHeader};
use rsipstack::transaction::transaction::Transaction;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use voxline_media::sdp;

use super::carrier::{LiveCall, SipCarrier, follow_answered, local_media};
use super::media_leg::AnsweredLeg;
use super::user_agent::InviteHook;
use crate::carriers::inbound::{InboundAnswer, InboundCarrier, InboundRing, Refusal};
use crate::domain::sip_trunk::SipTrunk;

/// How long the caller's ACK of our 200 is awaited.
const ACK_WAIT: Duration = Duration::from_secs(32);

/// The user agent's INVITE hook: hands new INVITEs to the SIP carrier, which
/// is built after the user agent it uses.
#[derive(Default)]
pub struct InboundInvites {
    carrier: OnceLock<Weak<SipCarrier>>,
}

impl InboundInvites {
    /// A hook with no carrier yet (INVITEs get 503 until [`Self::serve`]).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Sends INVITEs to `carrier` from now on.
    pub fn serve(&self, carrier: &Arc<SipCarrier>) {
        let _ = self.carrier.set(Arc::downgrade(carrier));
    }
}

#[async_trait::async_trait]
impl InviteHook for InboundInvites {
    async fn invite(&self, mut tx: Transaction) {
        match self.carrier.get().and_then(Weak::upgrade) {
            Some(carrier) => carrier.take_invite(tx).await,
            None => {
                let _ = tx.reply(StatusCode::ServiceUnavailable).await;
            }
        }
    }
}

/// The address a request came from: the top Via's `received`, which the
/// stack sets when the packet's source differs from what the Via says, else
/// the Via's own host.
pub(super) fn source_ip(request: &Request) -> Option<IpAddr> {
    let via = request.via_header().ok()?.typed().ok()?;
    let received = via.params.iter().find_map(|p| match p {
        rsipstack::sip::Param::Received(r) => r.to_string().parse().ok(),
        _ => None,
    });
    let via_host = match via.uri.host_with_port.host {
        rsipstack::sip::Host::IpAddr(ip) => Some(ip),
        rsipstack::sip::Host::Domain(_) => None,
    };
    received.or(via_host)
}

/// The called number: the Request-URI's user part, as E.164 (`+` added to a
/// bare run of digits, as trunks often send them).
fn called_number(request: &Request) -> Option<String> {
    let user = request.uri.auth.as_ref()?.user.trim().to_owned();
    if user.starts_with('+') {
        Some(user)
    } else if !user.is_empty() && user.bytes().all(|b| b.is_ascii_digit()) {
        Some(format!("+{user}"))
    } else {
        None
    }
}

/// The caller's number or name from From (`anonymous` when withheld).
fn caller(request: &Request) -> String {
    request
        .from_header()
        .ok()
        .and_then(|from| from.uri().ok())
        .and_then(|uri| uri.auth.map(|auth| auth.user))
        .filter(|user| !user.is_empty())
        .unwrap_or_else(|| "anonymous".to_owned())
}

/// The SIP answer to an inbound refusal.
fn refusal_code(refusal: Refusal) -> StatusCode {
    match refusal {
        Refusal::UnknownNumber => StatusCode::NotFound,
        Refusal::Busy | Refusal::CallerCap => StatusCode::BusyHere,
        Refusal::Blocked | Refusal::Routed => StatusCode::Forbidden,
        Refusal::Unavailable | Refusal::WaitOver => StatusCode::TemporarilyUnavailable,
    }
}

impl SipCarrier {
    /// Checks and answers one new INVITE; see the module doc.
    pub(super) async fn take_invite(self: &Arc<Self>, mut tx: Transaction) {
        let source = source_ip(&tx.original);
        if let Some(ip) = source
            && !self.flood.allow(ip, Instant::now())
        {
            tracing::warn!(%ip, "INVITE flood: refused with 503");
            let retry = vec![Header::Other("Retry-After".into(), "5".into())];
            let _ = tx
                .reply_with(StatusCode::ServiceUnavailable, retry, None)
                .await;
            return;
        }
        let (Some(agent), Some(host)) = (self.agent.clone(), self.inbound.get().cloned()) else {
            let _ = tx.reply(StatusCode::ServiceUnavailable).await;
            return;
        };
        let Some(to) = called_number(&tx.original) else {
            let _ = tx.reply(StatusCode::NotFound).await;
            return;
        };
        let Some(credential) = host.number_credential(InboundCarrier::Sip, &to).await else {
            tracing::info!(%to, ?source, "INVITE for a number no workspace has on sip: 404");
            let _ = tx.reply(StatusCode::NotFound).await;
            return;
        };
        let trunk = match SipTrunk::from_json(&credential) {
            Ok(trunk) if source.is_some_and(|ip| trunk.allows_source(ip)) => trunk,
            _ => {
                tracing::warn!(%to, ?source, "INVITE from a source the trunk does not allow: 403");
                let _ = tx.reply(StatusCode::Forbidden).await;
                return;
            }
        };
        let leg = match self.rtp.bind(agent.local_addr().ip()) {
            Ok(leg) => leg,
            Err(err) => {
                tracing::warn!(error = %err, "no RTP port for an inbound SIP call");
                let _ = tx.reply(StatusCode::ServiceUnavailable).await;
                return;
            }
        };
        let local = local_media(&agent, &trunk, leg.port);
        let offer = std::str::from_utf8(&tx.original.body).unwrap_or_default();
        let (answer, negotiated) = match sdp::answer(offer, &local) {
            Ok(answered) => answered,
            Err(err) => {
                tracing::info!(%to, error = %err, "INVITE offers no media we speak: 488");
                let _ = tx.reply(StatusCode::NotAcceptableHere).await;
                return;
            }
        };
        let sip_call_id = tx
            .original
            .call_id_header()
            .map(|h| h.value().to_owned())
            .unwrap_or_default();
        let from = caller(&tx.original);
        let (state_tx, mut states) = agent.dialogs().new_dialog_state_channel();
        let dialog = match agent
            .dialogs()
            .get_or_create_server_invite(&tx, state_tx, None, None)
        {
            Ok(dialog) => dialog,
            Err(err) => {
                tracing::warn!(error = %err, "an inbound dialog could not be made");
                let _ = tx.reply(StatusCode::ServerInternalError).await;
                return;
            }
        };
        let mut serving = dialog.clone();
        tokio::spawn(async move {
            if let Err(err) = serving.handle(&mut tx).await {
                tracing::debug!(error = %err, "an inbound INVITE transaction ended badly");
            }
        });
        let _ = dialog.ringing(None, None);
        let ring = InboundRing {
            carrier: InboundCarrier::Sip,
            carrier_call_id: sip_call_id.clone(),
            to: to.clone(),
            from: from.clone(),
            sim_script: None,
        };
        let call_id = match host.ring(ring).await {
            InboundAnswer::Connect { call_id, .. } => call_id,
            InboundAnswer::Hold { .. } => {
                let _ = dialog.reject(Some(StatusCode::BusyHere), None);
                agent.dialogs().remove_dialog(&dialog.id());
                return;
            }
            InboundAnswer::Refuse(refusal) => {
                tracing::info!(%to, refusal = refusal.as_str(), "inbound SIP call refused");
                let _ = dialog.reject(Some(refusal_code(refusal)), None);
                agent.dialogs().remove_dialog(&dialog.id());
                return;
            }
        };
        let headers = vec![Header::ContentType("application/sdp".into())];
        if let Err(err) = dialog.accept(Some(headers), Some(answer.into_bytes())) {
            tracing::warn!(%sip_call_id, error = %err, "answering an inbound SIP call failed");
            return;
        }
        self.calls.lock().insert(
            sip_call_id.clone(),
            LiveCall {
                dialog: dialog.clone(),
                call_id: call_id.clone(),
                transferred: false,
            },
        );
        // Until the caller's ACK confirms the dialog (or it ends first).
        let confirmed = tokio::time::timeout(ACK_WAIT, async {
            while let Some(state) = states.recv().await {
                match state {
                    DialogState::Confirmed(..) => return true,
                    DialogState::Terminated(..) => return false,
                    _ => {}
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        if !confirmed {
            tracing::info!(%sip_call_id, "the inbound call ended before its ACK");
            agent.dialogs().remove_dialog(&dialog.id());
            self.calls.lock().remove(&sip_call_id);
            return;
        }
        let ended = CancellationToken::new();
        let answered = AnsweredLeg {
            call_id: call_id.clone(),
            sip_call_id: sip_call_id.clone(),
            from,
            to,
            leg,
            negotiated,
            ended: ended.clone(),
        };
        if let Err(err) = self.media.answered(answered) {
            tracing::warn!(%sip_call_id, error = %err, "an inbound SIP call has no conversation; hanging up");
            let _ = dialog.hangup().await;
        } else {
            follow_answered(
                &agent,
                &sip_call_id,
                &call_id,
                &local,
                states,
                self.media.as_ref(),
                &self.calls,
                &self.legs,
            )
            .await;
        }
        ended.cancel();
        self.calls.lock().remove(&sip_call_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> Request {
        match rsipstack::sip::SipMessage::try_from(text) {
            Ok(rsipstack::sip::SipMessage::Request(request)) => request,
            other => panic!("not a request: {other:?}"),
        }
    }

    const INVITE: &str = "INVITE sip:14155550142@10.0.0.1:5060 SIP/2.0\r\n\
        Via: SIP/2.0/UDP 198.51.100.7:5060;branch=z9hG4bK776asdhds;received=203.0.113.9\r\n\
        Max-Forwards: 70\r\n\
        To: <sip:14155550142@10.0.0.1>\r\n\
        From: \"Ann\" <sip:+14155550199@198.51.100.7>;tag=1928301774\r\n\
        Call-ID: a84b4c76e66710@pc33\r\n\
        CSeq: 314159 INVITE\r\n\
        Content-Length: 0\r\n\r\n";

    #[test]
    fn the_source_is_the_received_address_else_the_via_host() {
        assert_eq!(
            source_ip(&request(INVITE)),
            Some("203.0.113.9".parse().unwrap())
        );
        let plain = INVITE.replace(";received=203.0.113.9", "");
        assert_eq!(
            source_ip(&request(&plain)),
            Some("198.51.100.7".parse().unwrap())
        );
    }

    #[test]
    fn numbers_are_read_as_e164() {
        let invite = request(INVITE);
        assert_eq!(called_number(&invite).as_deref(), Some("+14155550142"));
        assert_eq!(caller(&invite), "+14155550199");
        let named = INVITE.replace("sip:14155550142@10.0.0.1:5060", "sip:reception@10.0.0.1");
        assert_eq!(called_number(&request(&named)), None);
    }

    #[test]
    fn refusals_have_sip_codes() {
        assert_eq!(refusal_code(Refusal::UnknownNumber), StatusCode::NotFound);
        assert_eq!(refusal_code(Refusal::Busy), StatusCode::BusyHere);
        assert_eq!(refusal_code(Refusal::Blocked), StatusCode::Forbidden);
        assert_eq!(
            refusal_code(Refusal::Unavailable),
            StatusCode::TemporarilyUnavailable
        );
    }
}

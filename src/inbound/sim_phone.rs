//! A phone that calls one of our numbers the way Twilio delivers such a call:
//! the signed Voice URL request (`POST /carrier/{provider}/inbound`, form
//! fields `CallSid`, `AccountSid`, `From`, `To`, …, `X-Twilio-Signature`), the
//! TwiML answer read, then, when it says `<Connect><Stream>`, the media stream
//! opened and the caller's script played by the sim callee. What
//! `voxline admin sim call` and `voxline loadgen --inbound` ring with.

use crate::carriers::inbound::SIM_SCRIPT_FIELD;
use crate::carriers::twilio::{self, TwilioAccount};
use crate::carriers::xml_unescape;
use std::time::{Duration, Instant};
use voxline_actors::sim::callee::{
    CalleeBehaviour, CalleeOptions, CalleeReport, ScriptStep, SimCallee,
};

/// Bound on the Voice URL request: Twilio gives up on a webhook after 15 s.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(15);

/// One call to place.
#[derive(Debug, Clone)]
pub struct Ring {
    /// The server's base URL as the carrier reaches it (what the request is signed for).
    pub server: String,
    /// `sim` or `twilio`: the number's provider.
    pub provider: String,
    /// The account the number belongs to (`{accountSid, authToken}`).
    pub account: serde_json::Value,
    /// The number rung, E.164.
    pub to: String,
    /// The caller's number.
    pub from: String,
    /// The carrier's id of the call (`CA…`).
    pub call_sid: String,
    /// The caller's script, sent as `SimScript` to `sim` numbers (the sim ASR hears it).
    pub sim_script: Option<serde_json::Value>,
}

/// What the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingAnswer {
    /// `<Connect><Stream url>` with its `<Parameter>`s.
    Stream {
        /// The media websocket.
        url: String,
        /// `customParameters` of the stream's `start` (the token, the call id).
        params: Vec<(String, String)>,
    },
    /// Anything else: a `<Reject>`, or a `<Say>` and `<Hangup>`.
    Refused {
        /// The TwiML as answered.
        twiml: String,
    },
}

impl RingAnswer {
    /// Our call id, from the stream's `callId` parameter.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            Self::Stream { params, .. } => params
                .iter()
                .find(|(name, _)| name == "callId")
                .map(|(_, value)| value.as_str()),
            Self::Refused { .. } => None,
        }
    }
}

/// Why a ring could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The account is not a Twilio-shaped one.
    #[error("the number's account: {0}")]
    Account(String),
    /// The server could not be reached.
    #[error("the inbound webhook: {0}")]
    Http(#[from] reqwest::Error),
    /// The server answered with an error status.
    #[error("the inbound webhook answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Its body.
        body: String,
    },
}

/// Most asks a held caller makes before hanging up (the server lets go sooner).
const MAX_HOLD_ROUNDS: u32 = 1_000;

/// Sends the Voice URL request for `ring` and reads the TwiML answer,
/// following hold answers (`<Pause>` then `<Redirect>`) as Twilio does until
/// the call is connected or refused. Also returns how long that took.
pub async fn ring(
    http: &reqwest::Client,
    ring: &Ring,
) -> Result<(RingAnswer, Duration), RingError> {
    let account = TwilioAccount::from_credential(&ring.account)
        .map_err(|e| RingError::Account(e.to_string()))?;
    let url = format!(
        "{}/carrier/{}/inbound",
        ring.server.trim_end_matches('/'),
        ring.provider
    );
    let fields: Vec<(String, String)> = [
        ("AccountSid", account.account_sid.as_str()),
        ("ApiVersion", "2010-04-01"),
        ("CallSid", ring.call_sid.as_str()),
        ("CallStatus", "ringing"),
        ("Called", ring.to.as_str()),
        ("Caller", ring.from.as_str()),
        ("Direction", "inbound"),
        ("From", ring.from.as_str()),
        ("To", ring.to.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut fields = fields;
    if let Some(script) = ring.sim_script.as_ref().filter(|_| ring.provider == "sim") {
        fields.push((SIM_SCRIPT_FIELD.to_string(), script.to_string()));
    }
    let started = Instant::now();
    let mut url = url;
    for _ in 0..MAX_HOLD_ROUNDS {
        let body = post_signed(http, &account.auth_token, &url, &fields).await?;
        match read_hold(&body) {
            Some((pause, next)) => {
                tokio::time::sleep(pause).await;
                url = next;
            }
            None => return Ok((read_twiml(&body), started.elapsed())),
        }
    }
    Ok((
        RingAnswer::Refused {
            twiml: "the caller hung up on hold".into(),
        },
        started.elapsed(),
    ))
}

/// One webhook request signed as Twilio signs it; the answer's body.
async fn post_signed(
    http: &reqwest::Client,
    auth_token: &str,
    url: &str,
    fields: &[(String, String)],
) -> Result<String, RingError> {
    let signature = twilio::signature(auth_token, url, fields);
    let response = http
        .post(url)
        .header("X-Twilio-Signature", signature)
        .form(fields)
        .timeout(WEBHOOK_TIMEOUT)
        .send()
        .await?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        return Err(RingError::Status {
            status: status.as_u16(),
            body,
        });
    }
    Ok(body)
}

/// A hold answer's pause and where to ask next; `None` for any other answer.
pub fn read_hold(twiml: &str) -> Option<(Duration, String)> {
    let at = twiml.find("<Redirect")?;
    let tag = &twiml[at..];
    let start = tag.find('>')? + 1;
    let len = tag[start..].find("</Redirect>")?;
    let next = xml_unescape(tag[start..start + len].trim());
    let pause = twiml
        .find("<Pause")
        .and_then(|at| attribute(&twiml[at..], "length"))
        .and_then(|secs| secs.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    Some((pause, next))
}

/// Reads a TwiML answer: a `<Stream>` with its parameters, or a refusal.
pub fn read_twiml(twiml: &str) -> RingAnswer {
    let refused = || RingAnswer::Refused {
        twiml: twiml.to_string(),
    };
    let Some(stream_at) = twiml.find("<Stream") else {
        return refused();
    };
    let stream = &twiml[stream_at..];
    let Some(url) = attribute(stream, "url") else {
        return refused();
    };
    let params = stream
        .match_indices("<Parameter")
        .filter_map(|(at, _)| {
            let tag = &stream[at..];
            Some((attribute(tag, "name")?, attribute(tag, "value")?))
        })
        .collect();
    RingAnswer::Stream { url, params }
}

/// The unescaped value of `name="…"` in the first tag of `tag`.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let end = tag.find('>')?;
    let tag = &tag[..end];
    let marker = format!(" {name}=\"");
    let start = tag.find(&marker)? + marker.len();
    let len = tag[start..].find('"')?;
    Some(xml_unescape(&tag[start..start + len]))
}

/// Opens the media stream an answer names and plays `script` as the caller.
pub async fn talk(
    answer: &RingAnswer,
    call_sid: &str,
    script: Vec<ScriptStep>,
    options: CalleeOptions,
) -> Option<CalleeReport> {
    let RingAnswer::Stream { url, params } = answer else {
        return None;
    };
    let options = CalleeOptions {
        call_sid: call_sid.to_string(),
        ..options
    };
    Some(
        SimCallee::run(
            url.clone(),
            params.clone(),
            script,
            CalleeBehaviour::Human,
            options,
        )
        .await,
    )
}

/// A fresh Twilio-shaped call SID.
pub fn new_call_sid() -> String {
    format!("CA{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_answer_gives_its_url_and_parameters() {
        let twiml = twilio::connect_twiml("ws://h/media/twilio", "t.1&2", "call-1");
        let answer = read_twiml(&twiml);
        assert_eq!(
            answer,
            RingAnswer::Stream {
                url: "ws://h/media/twilio".into(),
                params: vec![
                    ("token".into(), "t.1&2".into()),
                    ("callId".into(), "call-1".into())
                ],
            }
        );
        assert_eq!(answer.call_id(), Some("call-1"));
    }

    #[test]
    fn a_hold_answer_gives_its_pause_and_next_url() {
        let twiml = twilio::hold_twiml(
            Some("Please hold."),
            1,
            "http://h/carrier/sim/inbound/hold/c?round=2&x=1",
        );
        assert_eq!(
            read_hold(&twiml),
            Some((
                Duration::from_secs(1),
                "http://h/carrier/sim/inbound/hold/c?round=2&x=1".into()
            ))
        );
        assert_eq!(read_hold(&twilio::reject_twiml(true)), None);
    }

    #[test]
    fn a_reject_is_a_refusal() {
        let twiml = twilio::reject_twiml(true);
        assert_eq!(
            read_twiml(&twiml),
            RingAnswer::Refused {
                twiml: twiml.clone()
            }
        );
    }
}

//! The `sip` codec: the internal wire between the SIP carrier's RTP transport and the
//! conversation loop.
//!
//! A SIP call has no carrier between us and the RTP peer, so the RTP transport
//! (`src/sip/rtp_transport.rs`) plays the carrier's role: it paces our audio out at 20 ms,
//! echoes our marks when its playout passes them, drops queued audio on `clear`, and sends
//! DTMF as RFC 4733 telephone events. This codec speaks to that transport, never to the
//! network, so its wire is as plain as it can be:
//!
//! | direction | message | meaning |
//! |---|---|---|
//! | transport → loop | binary | caller audio, one or more 20 ms G.711 frames → [`InboundEvent::Media`] |
//! | transport → loop | text `mark <name>` | playout passed our mark → [`InboundEvent::Mark`] |
//! | transport → loop | text `dtmf <digit>` | the caller pressed a key → [`InboundEvent::Dtmf`] |
//! | transport → loop | text `cleared` | a `clear` was carried out → [`InboundEvent::Cleared`] |
//! | transport → loop | text `stop` | the stream ended → [`InboundEvent::Stop`] |
//! | loop → transport | binary | our audio, queued for playout ([`CarrierCodec::encode_media`](super::CarrierCodec::encode_media)) |
//! | loop → transport | text `mark <name>` | echo `name` once the audio before it has played |
//! | loop → transport | text `clear` | drop queued audio and pending digits (barge-in) |
//! | loop → transport | text `dtmf <digits>` | send `digits` as telephone events at this point of playout |
//!
//! The audio format is PCMU or PCMA at 8 kHz, whichever the SDP answer chose; the same
//! format both ways. Keys go out as events rather than in-band tones (unless the answer has
//! no `telephone-event`: [`SipCodec::without_telephone_events`]): each digit is a
//! [`KEY_TONE_MS`] event followed by [`KEY_GAP_MS`] of nothing, and the loop queues silence
//! of that length per digit right after the `dtmf` command, so the playout clock (and the
//! marks after the keys) keep the timing the tones would have had.
//!
//! `sip` is not a websocket carrier: it is not in [`CarrierKind::ALL`](super::CarrierKind::ALL),
//! so `/media/sip` does not parse as a carrier and no websocket can claim it.

use super::{AudioEncoding, AudioFormat, InboundEvent, Outbound};
use crate::MediaError;

/// How long the transport holds each key's telephone event, in milliseconds.
pub const KEY_TONE_MS: u32 = 120;
/// The pause after each key before the next one, in milliseconds, so the far end sees two
/// presses of the same key as two.
pub const KEY_GAP_MS: u32 = 100;

/// Our end of the internal RTP-transport wire.
#[derive(Debug)]
pub struct SipCodec {
    /// Always empty: an RTP stream has no stream id on this wire (kept for the dispatch).
    pub(crate) stream_id: String,
    pub(crate) format: AudioFormat,
    /// The SDP answer has a `telephone-event` payload type: keys go out as events.
    pub(crate) telephone_events: bool,
}

impl Default for SipCodec {
    fn default() -> Self {
        Self::new(AudioFormat::MULAW_8K)
    }
}

impl SipCodec {
    /// A codec for `format`; anything but PCMU or PCMA at 8 kHz is taken as PCMU, the only
    /// other payload the SDP answer can have chosen.
    pub fn new(format: AudioFormat) -> Self {
        let format = match format.encoding {
            AudioEncoding::Alaw => AudioFormat::ALAW_8K,
            AudioEncoding::Mulaw | AudioEncoding::Pcm16Le => AudioFormat::MULAW_8K,
        };
        Self {
            stream_id: String::new(),
            format,
            telephone_events: true,
        }
    }

    /// The same codec for a peer that did not accept `telephone-event`: the loop's keys go
    /// out as in-band tones in the audio, as on websocket carriers.
    pub fn without_telephone_events(mut self) -> Self {
        self.telephone_events = false;
        self
    }

    /// Whether keys go out as telephone events.
    pub(crate) fn sends_dtmf_events(&self) -> bool {
        self.telephone_events
    }

    /// Reads one text command from the transport.
    pub(crate) fn parse_text(
        &mut self,
        text: &str,
        _audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        let (command, argument) = text.split_once(' ').unwrap_or((text, ""));
        Ok(match command {
            "mark" => InboundEvent::Mark {
                name: argument.to_owned(),
            },
            "dtmf" => {
                let mut chars = argument.chars();
                let digit = super::wire::dtmf_key(chars.next())?;
                if chars.next().is_some() {
                    return Err(MediaError::Malformed(format!("dtmf {argument}")));
                }
                InboundEvent::Dtmf { digit }
            }
            "cleared" => InboundEvent::Cleared,
            "stop" => InboundEvent::Stop { reason: None },
            _ => InboundEvent::Ignored,
        })
    }

    /// Takes one binary message: caller audio in the stream's format.
    pub(crate) fn parse_binary(&mut self, data: &[u8], audio: &mut Vec<u8>) -> InboundEvent {
        audio.extend_from_slice(data);
        InboundEvent::Media { timestamp_ms: None }
    }

    pub(crate) fn encode_media(&mut self, audio: &[u8], out: &mut Outbound) {
        out.push_binary(&[audio], 0, 0);
    }

    pub(crate) fn encode_mark(&mut self, name: &str, out: &mut Outbound) {
        out.push_text(|text| {
            text.push_str("mark ");
            text.push_str(name);
        });
    }

    pub(crate) fn encode_clear(&mut self, out: &mut Outbound) {
        out.push_text(|text| text.push_str("clear"));
    }

    /// Writes `dtmf <digits>`; false (and nothing written) when no digit is a DTMF key or the
    /// peer takes no telephone events.
    pub(crate) fn encode_dtmf(&mut self, digits: &str, out: &mut Outbound) -> bool {
        let is_key = |d: char| super::wire::dtmf_key(Some(d)).is_ok();
        if !self.telephone_events || !digits.chars().any(is_key) {
            return false;
        }
        out.push_text(|text| {
            text.push_str("dtmf ");
            text.extend(digits.chars().filter(|&d| is_key(d)));
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carrier::{CarrierCodec, CarrierKind, OutboundFrame};

    fn frames(out: &Outbound) -> Vec<OutboundFrame<'_>> {
        out.frames().collect()
    }

    #[test]
    fn sip_is_a_carrier_kind_but_not_a_websocket_one() {
        assert_eq!(CarrierKind::Sip.as_str(), "sip");
        assert!(!CarrierKind::ALL.contains(&CarrierKind::Sip));
        assert!("sip".parse::<CarrierKind>().is_err());
        assert_eq!(CarrierCodec::new(CarrierKind::Sip).kind(), CarrierKind::Sip);
    }

    #[test]
    fn sip_format_comes_from_the_sdp_answer() {
        let pcmu = CarrierCodec::new(CarrierKind::Sip);
        assert_eq!(pcmu.audio_format(), AudioFormat::MULAW_8K);
        let pcma = CarrierCodec::sip(AudioFormat::ALAW_8K);
        assert_eq!(pcma.audio_format(), AudioFormat::ALAW_8K);
        assert_eq!(pcma.stream_id(), None);
    }

    #[test]
    fn sip_inbound_audio_and_commands() {
        let mut codec = CarrierCodec::sip(AudioFormat::MULAW_8K);
        let mut audio = Vec::new();
        let event = codec.parse_binary(&[0x7f; 320], &mut audio).unwrap();
        assert_eq!(event, InboundEvent::Media { timestamp_ms: None });
        assert_eq!(audio, [0x7f; 320]);
        let mut parse = |text: &str| codec.parse_text(text, &mut audio);
        assert_eq!(
            parse("mark t1s0").unwrap(),
            InboundEvent::Mark {
                name: "t1s0".into()
            }
        );
        assert_eq!(parse("dtmf #").unwrap(), InboundEvent::Dtmf { digit: '#' });
        assert_eq!(parse("dtmf a").unwrap(), InboundEvent::Dtmf { digit: 'A' });
        assert!(parse("dtmf x").is_err());
        assert!(parse("dtmf 12").is_err());
        assert!(parse("dtmf").is_err());
        assert_eq!(parse("cleared").unwrap(), InboundEvent::Cleared);
        assert_eq!(parse("stop").unwrap(), InboundEvent::Stop { reason: None });
        assert_eq!(parse("hello").unwrap(), InboundEvent::Ignored);
    }

    #[test]
    fn sip_outbound_commands() {
        let mut codec = CarrierCodec::sip(AudioFormat::ALAW_8K);
        let mut out = Outbound::new();
        codec.encode_media(&[0xd5; 160], &mut out);
        codec.encode_mark("t2s1", &mut out);
        assert!(codec.encode_dtmf("1x#", &mut out));
        assert!(!codec.encode_dtmf("xy", &mut out));
        codec.encode_clear(&mut out);
        assert_eq!(
            frames(&out),
            [
                OutboundFrame::Binary(&[0xd5; 160]),
                OutboundFrame::Text("mark t2s1"),
                OutboundFrame::Text("dtmf 1#"),
                OutboundFrame::Text("clear"),
            ]
        );
    }

    #[test]
    fn websocket_carriers_refuse_dtmf_events() {
        for kind in CarrierKind::ALL {
            let mut codec = CarrierCodec::new(kind);
            let mut out = Outbound::new();
            assert!(!codec.encode_dtmf("123", &mut out), "{kind}");
            assert!(out.is_empty());
            assert!(!codec.sends_dtmf_events());
        }
        assert!(CarrierCodec::new(CarrierKind::Sip).sends_dtmf_events());
    }

    #[test]
    fn sip_without_telephone_events_keeps_keys_in_band() {
        let mut codec = CarrierCodec::sip_without_telephone_events(AudioFormat::ALAW_8K);
        assert_eq!(codec.kind(), CarrierKind::Sip);
        assert_eq!(codec.audio_format(), AudioFormat::ALAW_8K);
        assert!(!codec.sends_dtmf_events());
        let mut out = Outbound::new();
        assert!(!codec.encode_dtmf("1", &mut out));
        assert!(out.is_empty());
    }
}

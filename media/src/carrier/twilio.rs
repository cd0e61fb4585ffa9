//! Twilio Media Streams: our server-side codec, and [`TwilioCarrierSide`], the carrier's half
//! used by the simulated carrier and the load generator.

use serde::Deserialize;

use super::wire::{self, WireStr};
use super::{AudioFormat, InboundEvent, Outbound, StreamStart};
use crate::MediaError;

/// One Twilio message in either direction; every sub-object is optional so one parse pass
/// serves all events, and media frames borrow their payload.
#[derive(Deserialize)]
struct TwilioMessage<'a> {
    #[serde(borrow)]
    event: WireStr<'a>,
    #[serde(rename = "streamSid", default, borrow)]
    stream_sid: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    media: Option<TwilioMedia<'a>>,
    #[serde(default, borrow)]
    start: Option<TwilioStart<'a>>,
    #[serde(default)]
    dtmf: Option<TwilioDtmf>,
    #[serde(default, borrow)]
    mark: Option<TwilioMark<'a>>,
}

#[derive(Deserialize)]
struct TwilioMedia<'a> {
    #[serde(default, borrow)]
    payload: WireStr<'a>,
    #[serde(default, deserialize_with = "wire::lenient_u64")]
    timestamp: Option<u64>,
    #[serde(default, deserialize_with = "wire::track_is_outbound")]
    track: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TwilioStart<'a> {
    #[serde(default, borrow)]
    stream_sid: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    call_sid: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    account_sid: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    from: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    to: Option<WireStr<'a>>,
    #[serde(default)]
    media_format: Option<TwilioMediaFormat>,
    #[serde(default)]
    custom_parameters: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TwilioMediaFormat {
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default, deserialize_with = "wire::lenient_rate")]
    sample_rate: Option<u32>,
}

#[derive(Deserialize)]
struct TwilioDtmf {
    #[serde(default, deserialize_with = "wire::lenient_digit")]
    digit: Option<char>,
}

#[derive(Deserialize)]
struct TwilioMark<'a> {
    #[serde(default, borrow)]
    name: Option<WireStr<'a>>,
}

fn mark_name(mark: Option<TwilioMark<'_>>) -> String {
    wire::owned(mark.and_then(|m| m.name)).unwrap_or_default()
}

/// Our end of a Twilio media stream.
#[derive(Debug)]
pub(crate) struct TwilioCodec {
    pub(crate) stream_id: String,
    pub(crate) format: AudioFormat,
}

impl Default for TwilioCodec {
    fn default() -> Self {
        Self {
            stream_id: String::new(),
            format: AudioFormat::MULAW_8K,
        }
    }
}

impl TwilioCodec {
    pub(crate) fn parse_text(
        &mut self,
        text: &str,
        audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        let message: TwilioMessage<'_> = serde_json::from_str(text).map_err(wire::malformed)?;
        Ok(match message.event.as_str() {
            "media" => match message.media {
                Some(media) if !media.track => {
                    wire::decode_payload(media.payload.as_str(), audio)?;
                    InboundEvent::Media {
                        timestamp_ms: media.timestamp,
                    }
                }
                _ => InboundEvent::Ignored,
            },
            "connected" => InboundEvent::Connected,
            "start" => {
                let start = message
                    .start
                    .ok_or_else(|| MediaError::Malformed("start without a start object".into()))?;
                let format = match start.media_format {
                    Some(TwilioMediaFormat {
                        encoding,
                        sample_rate,
                    }) => AudioFormat::from_wire(
                        encoding.as_deref().unwrap_or("audio/x-mulaw"),
                        sample_rate,
                    )?,
                    None => AudioFormat::MULAW_8K,
                };
                let stream_id =
                    wire::owned(start.stream_sid.or(message.stream_sid)).unwrap_or_default();
                self.stream_id.clone_from(&stream_id);
                self.format = format;
                InboundEvent::Start(Box::new(StreamStart {
                    stream_id,
                    call_id: wire::owned(start.call_sid),
                    account_id: wire::owned(start.account_sid),
                    from: wire::owned(start.from),
                    to: wire::owned(start.to),
                    custom_parameters: wire::custom_parameters(start.custom_parameters),
                    format,
                }))
            }
            "dtmf" => InboundEvent::Dtmf {
                digit: wire::dtmf_key(message.dtmf.and_then(|d| d.digit))?,
            },
            "mark" => InboundEvent::Mark {
                name: mark_name(message.mark),
            },
            "stop" => InboundEvent::Stop { reason: None },
            _ => InboundEvent::Ignored,
        })
    }

    pub(crate) fn encode_media(&mut self, audio: &[u8], out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"media","streamSid":"#);
            wire::push_json_str(json, &self.stream_id);
            json.push_str(r#","media":{"payload":""#);
            wire::push_base64(json, audio);
            json.push_str(r#""}}"#);
        });
    }

    pub(crate) fn encode_mark(&mut self, name: &str, out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"mark","streamSid":"#);
            wire::push_json_str(json, &self.stream_id);
            json.push_str(r#","mark":{"name":"#);
            wire::push_json_str(json, name);
            json.push_str("}}");
        });
    }

    pub(crate) fn encode_clear(&mut self, out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"clear","streamSid":"#);
            wire::push_json_str(json, &self.stream_id);
            json.push('}');
        });
    }
}

/// A message our server sends to Twilio, as read by the carrier side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerCommand {
    /// Audio to play; the μ-law bytes are in the parse call's `audio` buffer.
    Media,
    /// A mark to echo back once the audio queued before it has played.
    Mark {
        /// The mark's name.
        name: String,
    },
    /// Drop all queued audio and echo every pending mark.
    Clear,
    /// Anything else, including messages for another stream.
    Ignored,
}

/// Twilio's half of a media stream: builds the inbound messages Twilio sends and reads the
/// messages our server sends back. Counters follow Twilio: one `sequenceNumber` across all
/// events, `chunk` and `timestamp` across media.
#[derive(Debug, Clone)]
pub struct TwilioCarrierSide {
    stream_sid: String,
    call_sid: String,
    account_sid: String,
    sequence: u64,
    chunk: u64,
    sent_bytes: u64,
}

impl TwilioCarrierSide {
    /// A stream with the given Twilio identifiers (`MZ…`, `CA…`, `AC…`).
    pub fn new(stream_sid: &str, call_sid: &str, account_sid: &str) -> Self {
        Self {
            stream_sid: stream_sid.to_owned(),
            call_sid: call_sid.to_owned(),
            account_sid: account_sid.to_owned(),
            sequence: 0,
            chunk: 0,
            sent_bytes: 0,
        }
    }

    /// The stream's `streamSid`.
    pub fn stream_sid(&self) -> &str {
        &self.stream_sid
    }

    fn begin_event(&mut self, event: &str, out: &mut String) {
        self.sequence += 1;
        out.clear();
        out.push_str(r#"{"event":"#);
        wire::push_json_str(out, event);
        out.push_str(r#","sequenceNumber":""#);
        wire::push_u64(out, self.sequence);
        out.push_str(r#"","streamSid":"#);
        wire::push_json_str(out, &self.stream_sid);
    }

    /// Writes the `connected` message into `out`, replacing its contents.
    pub fn connected(&mut self, out: &mut String) {
        out.clear();
        out.push_str(r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#);
    }

    /// Writes the `start` message, with `custom_parameters` as `customParameters`.
    pub fn start(&mut self, custom_parameters: &[(&str, &str)], out: &mut String) {
        self.begin_event("start", out);
        out.push_str(r#","start":{"accountSid":"#);
        wire::push_json_str(out, &self.account_sid);
        out.push_str(r#","streamSid":"#);
        wire::push_json_str(out, &self.stream_sid);
        out.push_str(r#","callSid":"#);
        wire::push_json_str(out, &self.call_sid);
        out.push_str(
            r#","tracks":["inbound"],"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1},"customParameters":{"#,
        );
        for (i, (name, value)) in custom_parameters.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            wire::push_json_str(out, name);
            out.push(':');
            wire::push_json_str(out, value);
        }
        out.push_str("}}}");
    }

    /// Writes a `media` message carrying `mulaw` (8 kHz μ-law); the timestamp is the audio
    /// time already sent, so real-time senders match Twilio's clock.
    pub fn media(&mut self, mulaw: &[u8], out: &mut String) {
        self.begin_event("media", out);
        self.chunk += 1;
        out.push_str(r#","media":{"track":"inbound","chunk":""#);
        wire::push_u64(out, self.chunk);
        out.push_str(r#"","timestamp":""#);
        wire::push_u64(out, AudioFormat::MULAW_8K.ms_for_bytes(self.sent_bytes));
        out.push_str(r#"","payload":""#);
        wire::push_base64(out, mulaw);
        out.push_str(r#""}}"#);
        self.sent_bytes += mulaw.len() as u64;
    }

    /// Writes a `dtmf` message for one key.
    pub fn dtmf(&mut self, digit: char, out: &mut String) {
        self.begin_event("dtmf", out);
        out.push_str(r#","dtmf":{"track":"inbound_track","digit":"#);
        wire::push_json_str(out, digit.encode_utf8(&mut [0; 4]));
        out.push_str("}}");
    }

    /// Writes a `mark` message echoing a mark the server sent.
    pub fn mark(&mut self, name: &str, out: &mut String) {
        self.begin_event("mark", out);
        out.push_str(r#","mark":{"name":"#);
        wire::push_json_str(out, name);
        out.push_str("}}");
    }

    /// Writes the `stop` message.
    pub fn stop(&mut self, out: &mut String) {
        self.begin_event("stop", out);
        out.push_str(r#","stop":{"accountSid":"#);
        wire::push_json_str(out, &self.account_sid);
        out.push_str(r#","callSid":"#);
        wire::push_json_str(out, &self.call_sid);
        out.push_str("}}");
    }

    /// Reads one message from our server; `audio` is cleared and receives the μ-law of a
    /// `media` command.
    pub fn parse_server(
        &mut self,
        text: &str,
        audio: &mut Vec<u8>,
    ) -> Result<ServerCommand, MediaError> {
        audio.clear();
        let message: TwilioMessage<'_> = serde_json::from_str(text).map_err(wire::malformed)?;
        if message
            .stream_sid
            .as_ref()
            .is_some_and(|sid| sid.as_str() != self.stream_sid)
        {
            return Ok(ServerCommand::Ignored);
        }
        Ok(match message.event.as_str() {
            "media" => match message.media {
                Some(media) => {
                    wire::decode_payload(media.payload.as_str(), audio)?;
                    ServerCommand::Media
                }
                None => return Err(MediaError::Malformed("media without a media object".into())),
            },
            "mark" => ServerCommand::Mark {
                name: mark_name(message.mark),
            },
            "clear" => ServerCommand::Clear,
            _ => ServerCommand::Ignored,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carrier::{CarrierCodec, CarrierKind, OutboundFrame};
    use serde_json::{Value, json};

    const CONNECTED: &str = r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#;
    const START: &str = r#"{"event":"start","sequenceNumber":"1","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","start":{"accountSid":"AC123","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","callSid":"CA456","tracks":["inbound"],"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1},"customParameters":{"k":"v"}}}"#;
    const MEDIA: &str = r#"{"event":"media","sequenceNumber":"4","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","media":{"track":"inbound","chunk":"2","timestamp":"5","payload":"/////w=="}}"#;
    const DTMF: &str = r#"{"event":"dtmf","sequenceNumber":"5","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","dtmf":{"track":"inbound_track","digit":"1"}}"#;
    const MARK: &str = r#"{"event":"mark","sequenceNumber":"6","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","mark":{"name":"utt-3"}}"#;
    const STOP: &str = r#"{"event":"stop","sequenceNumber":"7","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","stop":{"accountSid":"AC123","callSid":"CA456"}}"#;
    const SID: &str = "MZ18ad3ab5a668481ce02b83e7395059f0";

    fn started() -> CarrierCodec {
        let mut codec = CarrierCodec::new(CarrierKind::Twilio);
        codec.parse_text(START, &mut Vec::new()).unwrap();
        codec
    }

    fn texts(out: &Outbound) -> Vec<Value> {
        out.frames()
            .map(|frame| match frame {
                OutboundFrame::Text(text) => serde_json::from_str(text).unwrap(),
                OutboundFrame::Binary(_) => panic!("twilio never sends binary"),
            })
            .collect()
    }

    #[test]
    fn carrier_twilio_parses_every_inbound_event() {
        let mut codec = CarrierCodec::new(CarrierKind::Twilio);
        let mut audio = Vec::new();
        assert_eq!(
            codec.parse_text(CONNECTED, &mut audio).unwrap(),
            InboundEvent::Connected
        );
        let InboundEvent::Start(start) = codec.parse_text(START, &mut audio).unwrap() else {
            panic!("expected start");
        };
        assert_eq!(start.stream_id, SID);
        assert_eq!(start.call_id.as_deref(), Some("CA456"));
        assert_eq!(start.account_id.as_deref(), Some("AC123"));
        assert_eq!(start.custom_parameter("k"), Some("v"));
        assert_eq!(start.format, AudioFormat::MULAW_8K);
        assert_eq!(codec.stream_id(), Some(SID));

        assert_eq!(
            codec.parse_text(MEDIA, &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(5)
            }
        );
        assert_eq!(audio, [0xff; 4]);
        assert_eq!(
            codec.parse_text(DTMF, &mut audio).unwrap(),
            InboundEvent::Dtmf { digit: '1' }
        );
        assert!(audio.is_empty(), "audio is cleared for non-media events");
        assert_eq!(
            codec.parse_text(MARK, &mut audio).unwrap(),
            InboundEvent::Mark {
                name: "utt-3".into()
            }
        );
        assert_eq!(
            codec.parse_text(STOP, &mut audio).unwrap(),
            InboundEvent::Stop { reason: None }
        );
    }

    #[test]
    fn carrier_twilio_is_lenient_and_rejects_garbage() {
        let mut codec = started();
        let mut audio = Vec::new();
        let numeric = r#"{"event":"media","sequenceNumber":4,"media":{"chunk":2,"timestamp":5,"payload":"//8"}}"#;
        assert_eq!(
            codec.parse_text(numeric, &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(5)
            }
        );
        assert_eq!(audio, [0xff, 0xff]);
        let escaped = r#"{"event":"media","media":{"payload":"\/\/8="}}"#;
        codec.parse_text(escaped, &mut audio).unwrap();
        assert_eq!(audio, [0xff, 0xff]);
        let outbound = r#"{"event":"media","media":{"track":"outbound","payload":"//8="}}"#;
        assert_eq!(
            codec.parse_text(outbound, &mut audio).unwrap(),
            InboundEvent::Ignored
        );
        assert_eq!(
            codec
                .parse_text(r#"{"event":"other"}"#, &mut audio)
                .unwrap(),
            InboundEvent::Ignored
        );
        assert!(codec.parse_text("not json", &mut audio).is_err());
        let bad = r#"{"event":"media","media":{"payload":"!!"}}"#;
        assert!(matches!(
            codec.parse_text(bad, &mut audio),
            Err(MediaError::InvalidBase64(_))
        ));
    }

    #[test]
    fn carrier_twilio_builds_every_outbound_message() {
        let mut codec = started();
        let mut out = Outbound::new();
        codec.encode_media(&[0xff, 0x7f, 0x00], &mut out);
        codec.encode_mark("utt-3", &mut out);
        codec.encode_clear(&mut out);
        assert_eq!(
            texts(&out),
            vec![
                json!({"event":"media","streamSid":SID,"media":{"payload":"/38A"}}),
                json!({"event":"mark","streamSid":SID,"mark":{"name":"utt-3"}}),
                json!({"event":"clear","streamSid":SID}),
            ]
        );
        out.clear();
        assert!(out.is_empty());
    }

    #[test]
    fn carrier_twilio_side_round_trips_with_the_server_codec() {
        let mut carrier = TwilioCarrierSide::new(SID, "CA456", "AC123");
        let mut server = CarrierCodec::new(CarrierKind::Twilio);
        let (mut msg, mut audio, mut out) = (String::new(), Vec::new(), Outbound::new());

        carrier.connected(&mut msg);
        assert_eq!(
            server.parse_text(&msg, &mut audio).unwrap(),
            InboundEvent::Connected
        );
        carrier.start(&[("token", "tok\"1"), ("simScript", r#"["hi"]"#)], &mut msg);
        let InboundEvent::Start(start) = server.parse_text(&msg, &mut audio).unwrap() else {
            panic!("expected start");
        };
        assert_eq!(start.custom_parameter("token"), Some("tok\"1"));
        assert_eq!(start.custom_parameter("simScript"), Some(r#"["hi"]"#));
        assert_eq!(start.call_id.as_deref(), Some("CA456"));

        for i in 0..3u64 {
            carrier.media(&[0x55; 160], &mut msg);
            let parsed: Value = serde_json::from_str(&msg).unwrap();
            assert_eq!(parsed["sequenceNumber"], json!((i + 2).to_string()));
            assert_eq!(parsed["media"]["chunk"], json!((i + 1).to_string()));
            assert_eq!(
                server.parse_text(&msg, &mut audio).unwrap(),
                InboundEvent::Media {
                    timestamp_ms: Some(i * 20)
                }
            );
            assert_eq!(audio, [0x55; 160]);
        }
        carrier.dtmf('#', &mut msg);
        assert_eq!(
            server.parse_text(&msg, &mut audio).unwrap(),
            InboundEvent::Dtmf { digit: '#' }
        );

        server.encode_media(&[1, 2, 3], &mut out);
        server.encode_mark("utt-1", &mut out);
        server.encode_clear(&mut out);
        let mut commands = Vec::new();
        for frame in out.frames() {
            let OutboundFrame::Text(text) = frame else {
                panic!("binary")
            };
            commands.push(carrier.parse_server(text, &mut audio).unwrap());
            if commands.len() == 1 {
                assert_eq!(audio, [1, 2, 3]);
            }
        }
        assert_eq!(
            commands,
            vec![
                ServerCommand::Media,
                ServerCommand::Mark {
                    name: "utt-1".into()
                },
                ServerCommand::Clear
            ]
        );

        carrier.mark("utt-1", &mut msg);
        assert_eq!(
            server.parse_text(&msg, &mut audio).unwrap(),
            InboundEvent::Mark {
                name: "utt-1".into()
            }
        );
        carrier.stop(&mut msg);
        assert_eq!(
            server.parse_text(&msg, &mut audio).unwrap(),
            InboundEvent::Stop { reason: None }
        );
        let stop: Value = serde_json::from_str(&msg).unwrap();
        assert_eq!(
            stop["stop"],
            json!({"accountSid":"AC123","callSid":"CA456"})
        );
    }

    #[test]
    fn carrier_twilio_side_ignores_other_streams() {
        let mut carrier = TwilioCarrierSide::new(SID, "CA456", "AC123");
        let other = r#"{"event":"clear","streamSid":"MZother"}"#;
        assert_eq!(
            carrier.parse_server(other, &mut Vec::new()).unwrap(),
            ServerCommand::Ignored
        );
    }
}

//! Plivo bidirectional audio streams.

use serde::Deserialize;

use super::wire::{self, WireStr};
use super::{AudioEncoding, AudioFormat, InboundEvent, Outbound, StreamStart};
use crate::MediaError;

/// Plivo's media timestamps are epoch milliseconds; anything this large is wall-clock time
/// and is rebased onto the first media frame.
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

#[derive(Deserialize)]
struct PlivoMessage<'a> {
    #[serde(borrow)]
    event: WireStr<'a>,
    #[serde(rename = "streamId", default, borrow)]
    stream_id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    media: Option<PlivoMedia<'a>>,
    #[serde(default, borrow)]
    start: Option<PlivoStart<'a>>,
    #[serde(default)]
    dtmf: Option<PlivoDtmf>,
    #[serde(default, borrow)]
    name: Option<WireStr<'a>>,
    #[serde(default)]
    extra_headers: Option<serde_json::Value>,
    #[serde(default, borrow)]
    reason: Option<WireStr<'a>>,
}

#[derive(Deserialize)]
struct PlivoMedia<'a> {
    #[serde(default, borrow)]
    payload: WireStr<'a>,
    #[serde(default, deserialize_with = "wire::lenient_u64")]
    timestamp: Option<u64>,
    #[serde(default, deserialize_with = "wire::track_is_outbound")]
    track: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlivoStart<'a> {
    #[serde(default, borrow)]
    call_id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    stream_id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    account_id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    from: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    to: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    content_type: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    media_format: Option<PlivoMediaFormat<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlivoMediaFormat<'a> {
    #[serde(default, borrow)]
    encoding: Option<WireStr<'a>>,
    #[serde(default, deserialize_with = "wire::lenient_rate")]
    sample_rate: Option<u32>,
}

#[derive(Deserialize)]
struct PlivoDtmf {
    #[serde(default, deserialize_with = "wire::lenient_digit")]
    digit: Option<char>,
}

/// Reads `extra_headers`, documented as `a=1;b=2` but tolerated as a JSON object too.
fn extra_headers(value: Option<serde_json::Value>) -> Vec<(String, String)> {
    match value {
        Some(serde_json::Value::String(text)) if !text.trim_start().starts_with('{') => text
            .split(';')
            .filter_map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                let name = name.trim();
                (!name.is_empty()).then(|| (name.to_owned(), value.trim().to_owned()))
            })
            .collect(),
        other => wire::custom_parameters(other),
    }
}

/// Our end of a Plivo audio stream.
#[derive(Debug)]
pub(crate) struct PlivoCodec {
    pub(crate) stream_id: String,
    pub(crate) format: AudioFormat,
    timestamp_origin: Option<u64>,
}

impl Default for PlivoCodec {
    fn default() -> Self {
        Self {
            stream_id: String::new(),
            format: AudioFormat::MULAW_8K,
            timestamp_origin: None,
        }
    }
}

impl PlivoCodec {
    pub(crate) fn parse_text(
        &mut self,
        text: &str,
        audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        let message: PlivoMessage<'_> = serde_json::from_str(text).map_err(wire::malformed)?;
        Ok(match message.event.as_str() {
            "media" => match message.media {
                Some(media) if !media.track => {
                    wire::decode_payload(media.payload.as_str(), audio)?;
                    InboundEvent::Media {
                        timestamp_ms: media.timestamp.map(|ts| self.rebase(ts)),
                    }
                }
                _ => InboundEvent::Ignored,
            },
            "start" => {
                let start = message
                    .start
                    .ok_or_else(|| MediaError::Malformed("start without a start object".into()))?;
                let (encoding, rate) = match &start.media_format {
                    Some(format) => (format.encoding.as_ref(), format.sample_rate),
                    None => (None, None),
                };
                let format = match encoding.or(start.content_type.as_ref()) {
                    Some(encoding) => AudioFormat::from_wire(encoding.as_str(), rate)?,
                    None => AudioFormat::MULAW_8K,
                };
                let stream_id =
                    wire::owned(start.stream_id.or(message.stream_id)).unwrap_or_default();
                self.stream_id.clone_from(&stream_id);
                self.format = format;
                self.timestamp_origin = None;
                InboundEvent::Start(Box::new(StreamStart {
                    stream_id,
                    call_id: wire::owned(start.call_id),
                    account_id: wire::owned(start.account_id),
                    from: wire::owned(start.from),
                    to: wire::owned(start.to),
                    custom_parameters: extra_headers(message.extra_headers),
                    format,
                }))
            }
            "dtmf" => InboundEvent::Dtmf {
                digit: wire::dtmf_key(message.dtmf.and_then(|d| d.digit))?,
            },
            "playedStream" => InboundEvent::Mark {
                name: wire::owned(message.name).unwrap_or_default(),
            },
            "clearedAudio" => InboundEvent::Cleared,
            "stop" => InboundEvent::Stop {
                reason: wire::owned(message.reason),
            },
            _ => InboundEvent::Ignored,
        })
    }

    fn rebase(&mut self, timestamp: u64) -> u64 {
        let origin = *self
            .timestamp_origin
            .get_or_insert(if timestamp >= EPOCH_MS_FLOOR {
                timestamp
            } else {
                0
            });
        timestamp.saturating_sub(origin)
    }

    pub(crate) fn encode_media(&mut self, audio: &[u8], out: &mut Outbound) {
        let content_type = match self.format.encoding {
            AudioEncoding::Mulaw => "audio/x-mulaw",
            AudioEncoding::Alaw => "audio/x-alaw",
            AudioEncoding::Pcm16Le => "audio/x-l16",
        };
        out.push_text(|json| {
            json.push_str(r#"{"event":"playAudio","media":{"contentType":""#);
            json.push_str(content_type);
            json.push_str(r#"","sampleRate":"#);
            wire::push_u64(json, u64::from(self.format.sample_rate));
            json.push_str(r#","payload":""#);
            wire::push_base64(json, audio);
            json.push_str(r#""}}"#);
        });
    }

    pub(crate) fn encode_mark(&mut self, name: &str, out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"checkpoint","streamId":"#);
            wire::push_json_str(json, &self.stream_id);
            json.push_str(r#","name":"#);
            wire::push_json_str(json, name);
            json.push('}');
        });
    }

    pub(crate) fn encode_clear(&mut self, out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"clearAudio","streamId":"#);
            wire::push_json_str(json, &self.stream_id);
            json.push('}');
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::MediaError;
    use crate::carrier::{
        AudioFormat, CarrierCodec, CarrierKind, InboundEvent, Outbound, OutboundFrame,
    };
    use serde_json::{Value, json};

    const STREAM: &str = "20170ada-f610-433b-8758-c02a2aab3662";
    const START: &str = r#"{"event":"start","sequenceNumber":1,"start":{"callId":"0c4b8e5e-3b8a-4a4e-9d4b-1a2b3c4d5e6f","streamId":"20170ada-f610-433b-8758-c02a2aab3662","accountId":"MA123456789","tracks":["inbound"],"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000}},"extra_headers":"a=1;b=2"}"#;
    const MEDIA: &str = r#"{"event":"media","sequenceNumber":42,"streamId":"20170ada-f610-433b-8758-c02a2aab3662","media":{"track":"inbound","timestamp":"1705312200000","chunk":41,"payload":"//8="}}"#;
    const MEDIA_LATER: &str = r#"{"event":"media","sequenceNumber":43,"streamId":"20170ada-f610-433b-8758-c02a2aab3662","media":{"track":"inbound","timestamp":"1705312200020","chunk":42,"payload":"//8="}}"#;
    const DTMF: &str = r#"{"event":"dtmf","sequenceNumber":50,"streamId":"20170ada-f610-433b-8758-c02a2aab3662","dtmf":{"track":"inbound","digit":"5","timestamp":"1705312201000"}}"#;
    const PLAYED: &str = r#"{"event":"playedStream","sequenceNumber":75,"streamId":"20170ada-f610-433b-8758-c02a2aab3662","name":"utt-3"}"#;
    const CLEARED: &str = r#"{"event":"clearedAudio","sequenceNumber":80,"streamId":"20170ada-f610-433b-8758-c02a2aab3662"}"#;

    fn texts(out: &Outbound) -> Vec<Value> {
        out.frames()
            .map(|frame| match frame {
                OutboundFrame::Text(text) => serde_json::from_str(text).unwrap(),
                OutboundFrame::Binary(_) => panic!("plivo never sends binary"),
            })
            .collect()
    }

    #[test]
    fn carrier_plivo_parses_every_inbound_event() {
        let mut codec = CarrierCodec::new(CarrierKind::Plivo);
        let mut audio = Vec::new();
        let InboundEvent::Start(start) = codec.parse_text(START, &mut audio).unwrap() else {
            panic!("expected start");
        };
        assert_eq!(start.stream_id, STREAM);
        assert_eq!(
            start.call_id.as_deref(),
            Some("0c4b8e5e-3b8a-4a4e-9d4b-1a2b3c4d5e6f")
        );
        assert_eq!(start.account_id.as_deref(), Some("MA123456789"));
        assert_eq!(start.custom_parameter("a"), Some("1"));
        assert_eq!(start.custom_parameter("b"), Some("2"));
        assert_eq!(start.format, AudioFormat::MULAW_8K);

        assert_eq!(
            codec.parse_text(MEDIA, &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(0)
            }
        );
        assert_eq!(audio, [0xff, 0xff]);
        assert_eq!(
            codec.parse_text(MEDIA_LATER, &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(20)
            }
        );
        assert_eq!(
            codec.parse_text(DTMF, &mut audio).unwrap(),
            InboundEvent::Dtmf { digit: '5' }
        );
        assert_eq!(
            codec.parse_text(PLAYED, &mut audio).unwrap(),
            InboundEvent::Mark {
                name: "utt-3".into()
            }
        );
        assert_eq!(
            codec.parse_text(CLEARED, &mut audio).unwrap(),
            InboundEvent::Cleared
        );
        assert_eq!(
            codec
                .parse_text(r#"{"event":"stop","sequenceNumber":81}"#, &mut audio)
                .unwrap(),
            InboundEvent::Stop { reason: None }
        );
    }

    #[test]
    fn carrier_plivo_reads_l16_formats() {
        let mut codec = CarrierCodec::new(CarrierKind::Plivo);
        let start = r#"{"event":"start","sequenceNumber":"1","start":{"callId":"c","streamId":"s","mediaFormat":{"encoding":"audio/x-l16","sampleRate":"16000"}}}"#;
        codec.parse_text(start, &mut Vec::new()).unwrap();
        assert_eq!(codec.audio_format(), AudioFormat::PCM16_16K);
        let content_type =
            r#"{"event":"start","start":{"streamId":"s","contentType":"audio/x-l16;rate=8000"}}"#;
        codec.parse_text(content_type, &mut Vec::new()).unwrap();
        assert_eq!(codec.audio_format(), AudioFormat::PCM16_8K);
        let unsupported =
            r#"{"event":"start","start":{"streamId":"s","mediaFormat":{"encoding":"audio/ogg"}}}"#;
        assert!(matches!(
            codec.parse_text(unsupported, &mut Vec::new()),
            Err(MediaError::UnsupportedEncoding(_))
        ));
    }

    #[test]
    fn carrier_plivo_builds_every_outbound_message() {
        let mut codec = CarrierCodec::new(CarrierKind::Plivo);
        codec.parse_text(START, &mut Vec::new()).unwrap();
        let mut out = Outbound::new();
        codec.encode_media(&[0xff, 0x7f, 0x00], &mut out);
        codec.encode_mark("utt-3", &mut out);
        codec.encode_clear(&mut out);
        assert_eq!(
            texts(&out),
            vec![
                json!({"event":"playAudio","media":{"contentType":"audio/x-mulaw","sampleRate":8000,"payload":"/38A"}}),
                json!({"event":"checkpoint","streamId":STREAM,"name":"utt-3"}),
                json!({"event":"clearAudio","streamId":STREAM}),
            ]
        );
    }
}

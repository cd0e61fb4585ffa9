//! Exotel bidirectional voicebot streams.

use serde::Deserialize;

use super::wire::{self, WireStr};
use super::{AudioFormat, InboundEvent, Outbound, StreamStart};
use crate::MediaError;

/// Outbound chunks must be a whole number of these bytes.
const CHUNK_UNIT: usize = 320;
/// The smallest outbound chunk Exotel accepts (3.2 KB).
const MIN_CHUNK: usize = 3_200;
/// The largest multiple of [`CHUNK_UNIT`] within Exotel's 100 KB limit.
const MAX_CHUNK: usize = 100_000 / CHUNK_UNIT * CHUNK_UNIT;

#[derive(Deserialize)]
struct ExotelMessage<'a> {
    #[serde(borrow)]
    event: WireStr<'a>,
    #[serde(default, borrow, alias = "streamSid")]
    stream_sid: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    media: Option<ExotelMedia<'a>>,
    #[serde(default, borrow)]
    start: Option<ExotelStart<'a>>,
    #[serde(default)]
    dtmf: Option<ExotelDtmf>,
    #[serde(default, borrow)]
    mark: Option<ExotelMark<'a>>,
    #[serde(default, borrow)]
    stop: Option<ExotelStop<'a>>,
}

#[derive(Deserialize)]
struct ExotelMedia<'a> {
    #[serde(default, borrow)]
    payload: WireStr<'a>,
    #[serde(default, deserialize_with = "wire::lenient_u64")]
    timestamp: Option<u64>,
    #[serde(default, deserialize_with = "wire::track_is_outbound")]
    track: bool,
}

#[derive(Deserialize)]
struct ExotelStart<'a> {
    #[serde(default, borrow, alias = "streamSid")]
    stream_sid: Option<WireStr<'a>>,
    #[serde(default, borrow, alias = "callSid")]
    call_sid: Option<WireStr<'a>>,
    #[serde(default, borrow, alias = "accountSid")]
    account_sid: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    from: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    to: Option<WireStr<'a>>,
    #[serde(default, alias = "customParameters")]
    custom_parameters: Option<serde_json::Value>,
    #[serde(default, borrow, alias = "mediaFormat")]
    media_format: Option<ExotelMediaFormat<'a>>,
}

#[derive(Deserialize)]
struct ExotelMediaFormat<'a> {
    #[serde(default, borrow)]
    encoding: Option<WireStr<'a>>,
    #[serde(default, alias = "sampleRate", deserialize_with = "wire::lenient_rate")]
    sample_rate: Option<u32>,
}

#[derive(Deserialize)]
struct ExotelDtmf {
    #[serde(default, deserialize_with = "wire::lenient_digit")]
    digit: Option<char>,
}

#[derive(Deserialize)]
struct ExotelMark<'a> {
    #[serde(default, borrow)]
    name: Option<WireStr<'a>>,
}

#[derive(Deserialize)]
struct ExotelStop<'a> {
    #[serde(default, borrow)]
    reason: Option<WireStr<'a>>,
}

/// Our end of an Exotel stream; outbound audio is aggregated into chunks Exotel accepts.
#[derive(Debug)]
pub(crate) struct ExotelCodec {
    pub(crate) stream_id: String,
    pub(crate) format: AudioFormat,
    pending: Vec<u8>,
}

impl ExotelCodec {
    pub(crate) fn new(format: AudioFormat) -> Self {
        Self {
            stream_id: String::new(),
            format,
            pending: Vec::with_capacity(2 * MIN_CHUNK),
        }
    }

    pub(crate) fn parse_text(
        &mut self,
        text: &str,
        audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        let message: ExotelMessage<'_> = serde_json::from_str(text).map_err(wire::malformed)?;
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
                if let Some(media_format) = &start.media_format {
                    let encoding = media_format
                        .encoding
                        .as_ref()
                        .map_or("audio/x-raw", WireStr::as_str);
                    let rate = media_format.sample_rate.or(Some(self.format.sample_rate));
                    self.format = AudioFormat::from_wire(encoding, rate)?;
                }
                let stream_id =
                    wire::owned(start.stream_sid.or(message.stream_sid)).unwrap_or_default();
                self.stream_id.clone_from(&stream_id);
                InboundEvent::Start(Box::new(StreamStart {
                    stream_id,
                    call_id: wire::owned(start.call_sid),
                    account_id: wire::owned(start.account_sid),
                    from: wire::owned(start.from),
                    to: wire::owned(start.to),
                    custom_parameters: wire::custom_parameters(start.custom_parameters),
                    format: self.format,
                }))
            }
            "dtmf" => InboundEvent::Dtmf {
                digit: wire::dtmf_key(message.dtmf.and_then(|d| d.digit))?,
            },
            "mark" => InboundEvent::Mark {
                name: wire::owned(message.mark.and_then(|m| m.name)).unwrap_or_default(),
            },
            "stop" => InboundEvent::Stop {
                reason: wire::owned(message.stop.and_then(|s| s.reason)),
            },
            _ => InboundEvent::Ignored,
        })
    }

    /// Holds audio until at least [`MIN_CHUNK`] bytes are waiting, then sends the largest
    /// whole number of [`CHUNK_UNIT`]s that fits in [`MAX_CHUNK`].
    pub(crate) fn encode_media(&mut self, audio: &[u8], out: &mut Outbound) {
        self.pending.extend_from_slice(audio);
        let mut sent = 0;
        while self.pending.len() - sent >= MIN_CHUNK {
            let size = (self.pending.len() - sent).min(MAX_CHUNK) / CHUNK_UNIT * CHUNK_UNIT;
            push_media(&self.stream_id, &self.pending[sent..sent + size], out);
            sent += size;
        }
        self.pending.drain(..sent);
    }

    /// Sends held audio, padded with silence up to a valid chunk size.
    pub(crate) fn flush(&mut self, out: &mut Outbound) {
        if self.pending.is_empty() {
            return;
        }
        let size = self.pending.len().div_ceil(CHUNK_UNIT) * CHUNK_UNIT;
        self.pending
            .resize(size.max(MIN_CHUNK), self.format.silence_byte());
        push_media(&self.stream_id, &self.pending, out);
        self.pending.clear();
    }

    pub(crate) fn encode_mark(&mut self, name: &str, out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"mark","stream_sid":"#);
            wire::push_json_str(json, &self.stream_id);
            json.push_str(r#","mark":{"name":"#);
            wire::push_json_str(json, name);
            json.push_str("}}");
        });
    }

    pub(crate) fn encode_clear(&mut self, out: &mut Outbound) {
        self.pending.clear();
        out.push_text(|json| {
            json.push_str(r#"{"event":"clear","stream_sid":"#);
            wire::push_json_str(json, &self.stream_id);
            json.push('}');
        });
    }
}

fn push_media(stream_id: &str, chunk: &[u8], out: &mut Outbound) {
    out.push_text(|json| {
        json.push_str(r#"{"event":"media","stream_sid":"#);
        wire::push_json_str(json, stream_id);
        json.push_str(r#","media":{"payload":""#);
        wire::push_base64(json, chunk);
        json.push_str(r#""}}"#);
    });
}

#[cfg(test)]
mod tests {
    use super::{CHUNK_UNIT, MAX_CHUNK, MIN_CHUNK};
    use crate::carrier::{
        AudioFormat, CarrierCodec, CarrierKind, InboundEvent, Outbound, OutboundFrame,
    };
    use base64::Engine as _;
    use serde_json::{Value, json};

    const SID: &str = "b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19";
    const CONNECTED: &str = r#"{"event":"connected"}"#;
    const START: &str = r#"{"event":"start","sequence_number":"1","stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","start":{"stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","call_sid":"a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6","account_sid":"voxline1","from":"+919876543210","to":"+918012345678","custom_parameters":{},"media_format":{"encoding":"audio/x-raw","sample_rate":"8000","bit_rate":"16"}}}"#;
    const MEDIA: &str = r#"{"event":"media","sequence_number":"3","stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","media":{"chunk":"2","timestamp":"200","payload":"AQACAA=="}}"#;
    const DTMF: &str = r#"{"event":"dtmf","sequence_number":"7","stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","dtmf":{"digit":"5","duration":"100"}}"#;
    const MARK: &str = r#"{"event":"mark","sequence_number":"15","stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","mark":{"name":"utt-3"}}"#;
    const STOP: &str = r#"{"event":"stop","sequence_number":"20","stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","stop":{"call_sid":"a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6","account_sid":"voxline1","reason":"callended"}}"#;

    fn started() -> CarrierCodec {
        let mut codec = CarrierCodec::new(CarrierKind::Exotel);
        codec.parse_text(START, &mut Vec::new()).unwrap();
        codec
    }

    fn texts(out: &Outbound) -> Vec<Value> {
        out.frames()
            .map(|frame| match frame {
                OutboundFrame::Text(text) => serde_json::from_str(text).unwrap(),
                OutboundFrame::Binary(_) => panic!("exotel never sends binary"),
            })
            .collect()
    }

    fn media_sizes(out: &Outbound) -> Vec<usize> {
        texts(out)
            .iter()
            .filter(|m| m["event"] == "media")
            .map(|m| {
                let payload = m["media"]["payload"].as_str().unwrap();
                base64::engine::general_purpose::STANDARD
                    .decode(payload)
                    .unwrap()
                    .len()
            })
            .collect()
    }

    #[test]
    fn carrier_exotel_parses_every_inbound_event() {
        let mut codec = CarrierCodec::new(CarrierKind::Exotel);
        let mut audio = Vec::new();
        assert_eq!(
            codec.parse_text(CONNECTED, &mut audio).unwrap(),
            InboundEvent::Connected
        );
        let InboundEvent::Start(start) = codec.parse_text(START, &mut audio).unwrap() else {
            panic!("expected start");
        };
        assert_eq!(start.stream_id, SID);
        assert_eq!(
            start.call_id.as_deref(),
            Some("a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6")
        );
        assert_eq!(start.from.as_deref(), Some("+919876543210"));
        assert_eq!(start.to.as_deref(), Some("+918012345678"));
        assert!(start.custom_parameters.is_empty());
        assert_eq!(start.format, AudioFormat::PCM16_8K);
        assert_eq!(
            codec.parse_text(MEDIA, &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(200)
            }
        );
        assert_eq!(audio, [1, 0, 2, 0]);
        assert_eq!(
            codec.parse_text(DTMF, &mut audio).unwrap(),
            InboundEvent::Dtmf { digit: '5' }
        );
        assert_eq!(
            codec.parse_text(MARK, &mut audio).unwrap(),
            InboundEvent::Mark {
                name: "utt-3".into()
            }
        );
        assert_eq!(
            codec.parse_text(STOP, &mut audio).unwrap(),
            InboundEvent::Stop {
                reason: Some("callended".into())
            }
        );
    }

    #[test]
    fn carrier_exotel_accepts_camel_case() {
        let mut codec =
            CarrierCodec::with_url_query(CarrierKind::Exotel, "sample-rate=16000").unwrap();
        let start = r#"{"event":"start","sequenceNumber":1,"streamSid":"S1","start":{"streamSid":"S1","callSid":"C1","accountSid":"A1","customParameters":{"token":"t"},"mediaFormat":{"encoding":"audio/x-raw","sampleRate":16000}}}"#;
        let InboundEvent::Start(start) = codec.parse_text(start, &mut Vec::new()).unwrap() else {
            panic!("expected start");
        };
        assert_eq!(start.stream_id, "S1");
        assert_eq!(start.call_id.as_deref(), Some("C1"));
        assert_eq!(start.custom_parameter("token"), Some("t"));
        assert_eq!(start.format, AudioFormat::PCM16_16K);
        let media = r#"{"event":"media","sequenceNumber":3,"streamSid":"S1","media":{"chunk":2,"timestamp":200,"payload":"AQA="}}"#;
        let mut audio = Vec::new();
        assert_eq!(
            codec.parse_text(media, &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(200)
            }
        );
        assert_eq!(audio, [1, 0]);
    }

    #[test]
    fn carrier_exotel_keeps_the_url_rate_when_start_omits_it() {
        let mut codec =
            CarrierCodec::with_url_query(CarrierKind::Exotel, "sample-rate=24000").unwrap();
        let start = r#"{"event":"start","stream_sid":"S1","start":{"stream_sid":"S1","media_format":{"encoding":"audio/x-raw"}}}"#;
        codec.parse_text(start, &mut Vec::new()).unwrap();
        assert_eq!(codec.audio_format(), AudioFormat::PCM16_24K);
    }

    #[test]
    fn carrier_exotel_builds_every_outbound_message() {
        let mut codec = started();
        let mut out = Outbound::new();
        codec.encode_media(&[7; MIN_CHUNK], &mut out);
        codec.encode_mark("utt-3", &mut out);
        codec.encode_clear(&mut out);
        let messages = texts(&out);
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["event"], "media");
        assert_eq!(messages[0]["stream_sid"], SID);
        assert_eq!(
            messages[0]["media"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["payload"]
        );
        assert_eq!(
            messages[1],
            json!({"event":"mark","stream_sid":SID,"mark":{"name":"utt-3"}})
        );
        assert_eq!(messages[2], json!({"event":"clear","stream_sid":SID}));
    }

    #[test]
    fn carrier_exotel_aggregates_outbound_into_valid_chunks() {
        let mut codec = started();
        let mut out = Outbound::new();
        // 20 ms frames accumulate until a full 3.2 KB chunk is waiting.
        for _ in 0..9 {
            codec.encode_media(&[1; 320], &mut out);
        }
        assert!(out.is_empty());
        codec.encode_media(&[1; 320], &mut out);
        assert_eq!(media_sizes(&out), [MIN_CHUNK]);
        out.clear();

        // A large burst is split into chunks no bigger than the limit; the remainder waits.
        codec.encode_media(&vec![2; 250_000], &mut out);
        let sizes = media_sizes(&out);
        let rest = 250_000 - 2 * MAX_CHUNK;
        assert_eq!(
            sizes,
            [MAX_CHUNK, MAX_CHUNK, rest / CHUNK_UNIT * CHUNK_UNIT]
        );
        for size in &sizes {
            assert_eq!(size % CHUNK_UNIT, 0);
            assert!((MIN_CHUNK..=100_000).contains(size));
        }
        out.clear();

        // The remainder is flushed, padded to the minimum, before a mark.
        codec.encode_mark("utt-4", &mut out);
        let messages = texts(&out);
        assert_eq!(media_sizes(&out), [MIN_CHUNK]);
        assert_eq!(messages[1]["event"], "mark");
        out.clear();

        // Flushing with nothing held sends nothing; clear drops held audio.
        codec.flush(&mut out);
        assert!(out.is_empty());
        codec.encode_media(&[3; 1000], &mut out);
        codec.encode_clear(&mut out);
        codec.flush(&mut out);
        assert_eq!(texts(&out), vec![json!({"event":"clear","stream_sid":SID})]);
    }

    #[test]
    fn carrier_exotel_flush_pads_with_silence() {
        let mut codec = started();
        let mut out = Outbound::new();
        codec.encode_media(&[9; 1000], &mut out);
        codec.flush(&mut out);
        let message = &texts(&out)[0];
        let payload = base64::engine::general_purpose::STANDARD
            .decode(message["media"]["payload"].as_str().unwrap())
            .unwrap();
        assert_eq!(payload.len(), MIN_CHUNK);
        assert!(payload[..1000].iter().all(|&b| b == 9));
        assert!(payload[1000..].iter().all(|&b| b == 0));
    }
}

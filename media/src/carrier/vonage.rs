//! Vonage Voice API websockets: JSON text for control, binary 20 ms PCM frames for audio.

use serde::Deserialize;

use super::wire::{self, WireStr};
use super::{AudioEncoding, AudioFormat, InboundEvent, Outbound, StreamStart};
use crate::MediaError;

/// Every Vonage audio frame carries exactly this much audio.
const FRAME_MS: u32 = 20;

#[derive(Deserialize)]
struct VonageMessage<'a> {
    #[serde(borrow)]
    event: WireStr<'a>,
    #[serde(default, deserialize_with = "wire::lenient_digit")]
    digit: Option<char>,
    #[serde(default, borrow)]
    payload: Option<VonageNotify<'a>>,
}

#[derive(Deserialize)]
struct VonageNotify<'a> {
    #[serde(default, borrow)]
    name: Option<WireStr<'a>>,
}

/// Our end of a Vonage websocket; outbound audio is cut into exact 20 ms binary frames.
#[derive(Debug)]
pub(crate) struct VonageCodec {
    /// Vonage has no stream id; kept empty so the codecs share one shape.
    pub(crate) stream_id: String,
    pub(crate) format: AudioFormat,
    received_bytes: u64,
    pending: Vec<u8>,
}

impl Default for VonageCodec {
    fn default() -> Self {
        let format = AudioFormat::PCM16_16K;
        Self {
            stream_id: String::new(),
            format,
            received_bytes: 0,
            pending: Vec::with_capacity(format.bytes_for_ms(FRAME_MS)),
        }
    }
}

impl VonageCodec {
    fn frame_bytes(&self) -> usize {
        self.format.bytes_for_ms(FRAME_MS)
    }

    pub(crate) fn parse_text(
        &mut self,
        text: &str,
        _audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        let message: VonageMessage<'_> = serde_json::from_str(text).map_err(wire::malformed)?;
        Ok(match message.event.as_str() {
            "websocket:connected" => self.connected(text)?,
            "websocket:dtmf" => InboundEvent::Dtmf {
                digit: wire::dtmf_key(message.digit)?,
            },
            "websocket:notify" => InboundEvent::Mark {
                name: wire::owned(message.payload.and_then(|p| p.name)).unwrap_or_default(),
            },
            "websocket:cleared" => InboundEvent::Cleared,
            _ => InboundEvent::Ignored,
        })
    }

    /// Reads the first frame: the audio format plus the NCCO headers flattened beside it.
    fn connected(&mut self, text: &str) -> Result<InboundEvent, MediaError> {
        let fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(wire::malformed)?;
        let format = match fields.get("content-type").and_then(|v| v.as_str()) {
            Some(content_type) => AudioFormat::from_wire(content_type, None)?,
            None => AudioFormat::PCM16_16K,
        };
        if format.encoding != AudioEncoding::Pcm16Le {
            return Err(MediaError::UnsupportedEncoding(format!("{format:?}")));
        }
        if !matches!(format.sample_rate, 8_000 | 16_000) {
            return Err(MediaError::UnsupportedSampleRate(format.sample_rate));
        }
        self.format = format;
        self.received_bytes = 0;
        self.pending.clear();
        let text_of = |key: &str| {
            fields
                .get(key)
                .cloned()
                .map(wire::scalar_text)
                .filter(|v| !v.is_empty())
        };
        let call_id = text_of("call_uuid").or_else(|| text_of("uuid"));
        let (from, to) = (text_of("from"), text_of("to"));
        let custom_parameters = fields
            .into_iter()
            .filter(|(key, _)| key != "event" && key != "content-type")
            .map(|(key, value)| (key, wire::scalar_text(value)))
            .collect();
        Ok(InboundEvent::Start(Box::new(StreamStart {
            stream_id: String::new(),
            call_id,
            account_id: None,
            from,
            to,
            custom_parameters,
            format,
        })))
    }

    /// Passes a binary audio frame through, timestamped by the audio received before it.
    pub(crate) fn parse_binary(&mut self, data: &[u8], audio: &mut Vec<u8>) -> InboundEvent {
        audio.extend_from_slice(data);
        let timestamp_ms = self.format.ms_for_bytes(self.received_bytes);
        self.received_bytes += data.len() as u64;
        InboundEvent::Media {
            timestamp_ms: Some(timestamp_ms),
        }
    }

    /// Sends every whole frame; a partial tail waits in `pending` for more audio.
    pub(crate) fn encode_media(&mut self, mut audio: &[u8], out: &mut Outbound) {
        let frame = self.frame_bytes();
        if !self.pending.is_empty() {
            let take = (frame - self.pending.len()).min(audio.len());
            self.pending.extend_from_slice(&audio[..take]);
            audio = &audio[take..];
            if self.pending.len() < frame {
                return;
            }
            out.push_binary(&[&self.pending], 0, 0);
            self.pending.clear();
        }
        let mut frames = audio.chunks_exact(frame);
        for whole in &mut frames {
            out.push_binary(&[whole], 0, 0);
        }
        self.pending.extend_from_slice(frames.remainder());
    }

    /// Sends a held partial frame, padded with silence to a full frame.
    pub(crate) fn flush(&mut self, out: &mut Outbound) {
        if self.pending.is_empty() {
            return;
        }
        let pad = self.frame_bytes() - self.pending.len();
        out.push_binary(&[&self.pending], pad, self.format.silence_byte());
        self.pending.clear();
    }

    pub(crate) fn encode_mark(&mut self, name: &str, out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"action":"notify","payload":{"name":"#);
            wire::push_json_str(json, name);
            json.push_str("}}");
        });
    }

    pub(crate) fn encode_clear(&mut self, out: &mut Outbound) {
        self.pending.clear();
        out.push_text(|json| json.push_str(r#"{"action":"clear"}"#));
    }
}

#[cfg(test)]
mod tests {
    use crate::MediaError;
    use crate::carrier::{
        AudioFormat, CarrierCodec, CarrierKind, InboundEvent, Outbound, OutboundFrame,
    };
    use serde_json::{Value, json};

    const CONNECTED: &str = r#"{"event":"websocket:connected","content-type":"audio/l16;rate=16000","call_uuid":"aaaaaaaa-bbbb-cccc-dddd-0123456789ab","token":"v1.tok.sig","from":"447700900000","to":"447700900001"}"#;
    const DTMF: &str = r#"{"event":"websocket:dtmf","digit":"5","duration":260}"#;
    const NOTIFY: &str = r#"{"event":"websocket:notify","payload":{"name":"utt-3"}}"#;
    const CLEARED: &str = r#"{"event":"websocket:cleared"}"#;

    fn connected(text: &str) -> CarrierCodec {
        let mut codec = CarrierCodec::new(CarrierKind::Vonage);
        codec.parse_text(text, &mut Vec::new()).unwrap();
        codec
    }

    fn sizes(out: &Outbound) -> Vec<usize> {
        out.frames()
            .map(|frame| match frame {
                OutboundFrame::Binary(bytes) => bytes.len(),
                OutboundFrame::Text(text) => panic!("unexpected text {text}"),
            })
            .collect()
    }

    #[test]
    fn carrier_vonage_parses_every_inbound_event() {
        let mut codec = CarrierCodec::new(CarrierKind::Vonage);
        let mut audio = Vec::new();
        let InboundEvent::Start(start) = codec.parse_text(CONNECTED, &mut audio).unwrap() else {
            panic!("expected start");
        };
        assert_eq!(start.format, AudioFormat::PCM16_16K);
        assert_eq!(
            start.call_id.as_deref(),
            Some("aaaaaaaa-bbbb-cccc-dddd-0123456789ab")
        );
        assert_eq!(start.custom_parameter("token"), Some("v1.tok.sig"));
        assert_eq!(start.from.as_deref(), Some("447700900000"));
        assert_eq!(start.custom_parameter("event"), None);
        assert_eq!(codec.stream_id(), None);

        for i in 0..2u64 {
            assert_eq!(
                codec.parse_binary(&[i as u8; 640], &mut audio).unwrap(),
                InboundEvent::Media {
                    timestamp_ms: Some(i * 20)
                }
            );
            assert_eq!(audio, [i as u8; 640]);
        }
        assert_eq!(
            codec.parse_text(DTMF, &mut audio).unwrap(),
            InboundEvent::Dtmf { digit: '5' }
        );
        assert_eq!(
            codec.parse_text(NOTIFY, &mut audio).unwrap(),
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
                .parse_text(r#"{"event":"websocket:media:update"}"#, &mut audio)
                .unwrap(),
            InboundEvent::Ignored
        );
    }

    #[test]
    fn carrier_vonage_rejects_formats_it_cannot_frame() {
        let mut codec = CarrierCodec::new(CarrierKind::Vonage);
        let wide = r#"{"event":"websocket:connected","content-type":"audio/l16;rate=24000"}"#;
        assert!(matches!(
            codec.parse_text(wide, &mut Vec::new()),
            Err(MediaError::UnsupportedSampleRate(24_000))
        ));
    }

    #[test]
    fn carrier_vonage_builds_control_messages() {
        let mut codec = connected(CONNECTED);
        let mut out = Outbound::new();
        codec.encode_mark("utt-3", &mut out);
        codec.encode_clear(&mut out);
        let texts: Vec<Value> = out
            .frames()
            .map(|frame| match frame {
                OutboundFrame::Text(text) => serde_json::from_str(text).unwrap(),
                OutboundFrame::Binary(_) => panic!("no audio was queued"),
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                json!({"action":"notify","payload":{"name":"utt-3"}}),
                json!({"action":"clear"}),
            ]
        );
    }

    #[test]
    fn carrier_vonage_frames_outbound_audio_exactly() {
        let mut codec = connected(CONNECTED);
        let mut out = Outbound::new();
        codec.encode_media(&[1; 1000], &mut out);
        assert_eq!(sizes(&out), [640]);
        codec.encode_media(&[2; 300], &mut out);
        assert_eq!(sizes(&out), [640, 640]);
        let OutboundFrame::Binary(second) = out.frames().nth(1).unwrap() else {
            panic!("binary expected");
        };
        assert_eq!(&second[..360], &[1; 360][..]);
        assert_eq!(&second[360..], &[2; 280][..]);
        codec.encode_media(&[3; 10], &mut out);
        assert_eq!(out.len(), 2);
        out.clear();

        // A mark flushes the 30-byte tail as one padded frame before the notify.
        codec.encode_mark("utt-1", &mut out);
        let frames: Vec<OutboundFrame<'_>> = out.frames().collect();
        let OutboundFrame::Binary(tail) = frames[0] else {
            panic!("binary expected");
        };
        assert_eq!(tail.len(), 640);
        assert_eq!(&tail[..30], [[2; 20].as_slice(), &[3; 10]].concat());
        assert!(tail[30..].iter().all(|&b| b == 0));
        assert!(matches!(frames[1], OutboundFrame::Text(_)));
        out.clear();

        // Clear drops a held tail; flush then has nothing to send.
        codec.encode_media(&[4; 100], &mut out);
        codec.encode_clear(&mut out);
        codec.flush(&mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn carrier_vonage_uses_320_byte_frames_at_8k() {
        let narrow = r#"{"event":"websocket:connected","content-type":"audio/l16;rate=8000"}"#;
        let mut codec = connected(narrow);
        assert_eq!(codec.audio_format(), AudioFormat::PCM16_8K);
        let mut out = Outbound::new();
        codec.encode_media(&[1; 700], &mut out);
        codec.flush(&mut out);
        assert_eq!(sizes(&out), [320, 320, 320]);
    }
}

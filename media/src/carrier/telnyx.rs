//! Telnyx media streaming, including reordering of frames that arrive out of sequence.

use serde::Deserialize;

use super::wire::{self, WireStr};
use super::{AudioFormat, InboundEvent, Outbound, StreamStart};
use crate::MediaError;

/// How many sequence numbers ahead of the next expected one are held for reordering. A lost
/// frame delays audio by at most this many frames before it is given up on.
const REORDER_WINDOW: usize = 8;

#[derive(Deserialize)]
struct TelnyxMessage<'a> {
    #[serde(borrow)]
    event: WireStr<'a>,
    #[serde(default, deserialize_with = "wire::lenient_u64")]
    sequence_number: Option<u64>,
    #[serde(default, borrow)]
    stream_id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    media: Option<TelnyxMedia<'a>>,
    #[serde(default, borrow)]
    start: Option<TelnyxStart<'a>>,
    #[serde(default)]
    dtmf: Option<TelnyxDtmf>,
    #[serde(default, borrow)]
    mark: Option<TelnyxMark<'a>>,
    #[serde(default, borrow)]
    stop: Option<TelnyxStop<'a>>,
    #[serde(default, borrow)]
    payload: Option<TelnyxError<'a>>,
}

#[derive(Deserialize)]
struct TelnyxMedia<'a> {
    #[serde(default, borrow)]
    payload: WireStr<'a>,
    #[serde(default, deserialize_with = "wire::lenient_u64")]
    timestamp: Option<u64>,
    #[serde(default, deserialize_with = "wire::track_is_outbound")]
    track: bool,
}

#[derive(Deserialize)]
struct TelnyxStart<'a> {
    #[serde(default, borrow)]
    call_control_id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    call_session_id: Option<WireStr<'a>>,
    #[serde(default, borrow, alias = "account_id")]
    user_id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    from: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    to: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    client_state: Option<WireStr<'a>>,
    #[serde(default)]
    custom_parameters: Option<serde_json::Value>,
    #[serde(default, borrow)]
    media_format: Option<TelnyxMediaFormat<'a>>,
}

#[derive(Deserialize)]
struct TelnyxMediaFormat<'a> {
    #[serde(default, borrow)]
    encoding: Option<WireStr<'a>>,
    #[serde(default, deserialize_with = "wire::lenient_rate")]
    sample_rate: Option<u32>,
}

#[derive(Deserialize)]
struct TelnyxDtmf {
    #[serde(default, deserialize_with = "wire::lenient_digit")]
    digit: Option<char>,
}

#[derive(Deserialize)]
struct TelnyxMark<'a> {
    #[serde(default, borrow)]
    name: Option<WireStr<'a>>,
}

#[derive(Deserialize)]
struct TelnyxStop<'a> {
    #[serde(default, borrow)]
    reason: Option<WireStr<'a>>,
}

#[derive(Deserialize)]
struct TelnyxError<'a> {
    #[serde(default, borrow)]
    code: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    title: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    detail: Option<WireStr<'a>>,
}

impl TelnyxError<'_> {
    fn message(self) -> String {
        let parts: Vec<String> = [self.code, self.title, self.detail]
            .into_iter()
            .filter_map(wire::owned)
            .collect();
        if parts.is_empty() {
            "unknown error".to_owned()
        } else {
            parts.join(": ")
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    #[default]
    Empty,
    /// A non-media message took this sequence number; nothing to play.
    Seen,
    /// A decoded media frame waiting for the frames before it.
    Media,
}

#[derive(Debug, Default)]
struct Slot {
    state: SlotState,
    timestamp_ms: Option<u64>,
    /// Reused between frames so holding a frame does not allocate once warmed up.
    audio: Vec<u8>,
}

/// Orders media by sequence number. Every sequenced message counts, so control events
/// interleaved with media do not look like gaps.
#[derive(Debug, Default)]
struct ReorderWindow {
    next: Option<u64>,
    slots: [Slot; REORDER_WINDOW],
}

impl ReorderWindow {
    fn reset(&mut self, last_seen: Option<u64>) {
        self.next = last_seen.map(|seq| seq + 1);
        for slot in &mut self.slots {
            slot.state = SlotState::Empty;
        }
    }

    fn slot(&mut self, seq: u64) -> &mut Slot {
        // The modulo result is below REORDER_WINDOW, so the cast cannot truncate.
        &mut self.slots[(seq % REORDER_WINDOW as u64) as usize]
    }

    /// Records a non-media message so its sequence number is not waited for.
    fn note_control(&mut self, seq: Option<u64>) {
        let Some(seq) = seq else { return };
        let next = *self.next.get_or_insert(seq);
        if seq == next {
            self.next = Some(next + 1);
        } else if seq > next && seq - next < REORDER_WINDOW as u64 {
            let slot = self.slot(seq);
            if slot.state == SlotState::Empty {
                slot.state = SlotState::Seen;
            }
        }
    }

    /// Accepts a media frame and appends to `audio` every frame now playable in order.
    /// Returns the timestamp of the first frame released, or `None` if nothing was.
    fn accept_media(
        &mut self,
        seq: Option<u64>,
        timestamp_ms: Option<u64>,
        payload: &str,
        audio: &mut Vec<u8>,
    ) -> Result<Option<Option<u64>>, MediaError> {
        let Some(seq) = seq else {
            wire::decode_payload(payload, audio)?;
            return Ok(Some(timestamp_ms));
        };
        let window = REORDER_WINDOW as u64;
        let mut next = *self.next.get_or_insert(seq);
        if seq < next {
            // Too late or a duplicate: its place in the audio has already gone.
            return Ok(None);
        }
        let mut first = None;
        // A frame beyond the window means the gaps before it are lost: play what is held.
        let mut released = 0;
        while seq - next >= window && released < REORDER_WINDOW {
            next = self.release(next, audio, &mut first);
            released += 1;
        }
        if seq - next >= window {
            // Everything held is out; a jump this large is a resynchronisation.
            next = seq;
        }
        if seq == next {
            wire::decode_payload(payload, audio)?;
            first.get_or_insert(timestamp_ms);
            next += 1;
        } else {
            let slot = self.slot(seq);
            if slot.state == SlotState::Empty {
                slot.audio.clear();
                wire::decode_payload(payload, &mut slot.audio)?;
                slot.state = SlotState::Media;
                slot.timestamp_ms = timestamp_ms;
            }
        }
        while self.slot(next).state != SlotState::Empty {
            next = self.release(next, audio, &mut first);
        }
        self.next = Some(next);
        Ok(first)
    }

    /// Empties the slot of `seq` into `audio` and returns the sequence number after it.
    fn release(&mut self, seq: u64, audio: &mut Vec<u8>, first: &mut Option<Option<u64>>) -> u64 {
        let slot = self.slot(seq);
        if slot.state == SlotState::Media {
            audio.extend_from_slice(&slot.audio);
            first.get_or_insert(slot.timestamp_ms);
        }
        slot.state = SlotState::Empty;
        seq + 1
    }
}

/// Our end of a Telnyx media stream.
#[derive(Debug)]
pub(crate) struct TelnyxCodec {
    pub(crate) stream_id: String,
    pub(crate) format: AudioFormat,
    /// Boxed so every codec variant stays small.
    reorder: Box<ReorderWindow>,
}

impl Default for TelnyxCodec {
    fn default() -> Self {
        Self {
            stream_id: String::new(),
            format: AudioFormat::MULAW_8K,
            reorder: Box::default(),
        }
    }
}

impl TelnyxCodec {
    pub(crate) fn parse_text(
        &mut self,
        text: &str,
        audio: &mut Vec<u8>,
    ) -> Result<InboundEvent, MediaError> {
        let message: TelnyxMessage<'_> = serde_json::from_str(text).map_err(wire::malformed)?;
        let seq = message.sequence_number;
        if message.event.as_str() == "media" {
            return Ok(match message.media {
                Some(media) if !media.track => {
                    let released = self.reorder.accept_media(
                        seq,
                        media.timestamp,
                        media.payload.as_str(),
                        audio,
                    )?;
                    match released {
                        Some(timestamp_ms) => InboundEvent::Media { timestamp_ms },
                        None => InboundEvent::Ignored,
                    }
                }
                _ => {
                    self.reorder.note_control(seq);
                    InboundEvent::Ignored
                }
            });
        }
        if message.event.as_str() == "start" {
            self.reorder.reset(seq);
        } else {
            self.reorder.note_control(seq);
        }
        Ok(match message.event.as_str() {
            "connected" => InboundEvent::Connected,
            "start" => {
                let start = message
                    .start
                    .ok_or_else(|| MediaError::Malformed("start without a start object".into()))?;
                let format = match &start.media_format {
                    Some(media_format) => AudioFormat::from_wire(
                        media_format
                            .encoding
                            .as_ref()
                            .map_or("PCMU", WireStr::as_str),
                        media_format.sample_rate,
                    )?,
                    None => AudioFormat::MULAW_8K,
                };
                let stream_id = wire::owned(message.stream_id).unwrap_or_default();
                self.stream_id.clone_from(&stream_id);
                self.format = format;
                let mut custom_parameters = wire::custom_parameters(start.custom_parameters);
                if let Some(client_state) = wire::owned(start.client_state) {
                    custom_parameters.push(("client_state".to_owned(), client_state));
                }
                if let Some(session) = wire::owned(start.call_session_id) {
                    custom_parameters.push(("call_session_id".to_owned(), session));
                }
                InboundEvent::Start(Box::new(StreamStart {
                    stream_id,
                    call_id: wire::owned(start.call_control_id),
                    account_id: wire::owned(start.user_id),
                    from: wire::owned(start.from),
                    to: wire::owned(start.to),
                    custom_parameters,
                    format,
                }))
            }
            "dtmf" => InboundEvent::Dtmf {
                digit: wire::dtmf_key(message.dtmf.and_then(|d| d.digit))?,
            },
            "mark" => InboundEvent::Mark {
                name: wire::owned(message.mark.and_then(|m| m.name)).unwrap_or_default(),
            },
            "error" => InboundEvent::Error {
                message: message
                    .payload
                    .map_or_else(|| "unknown error".to_owned(), TelnyxError::message),
            },
            "stop" => InboundEvent::Stop {
                reason: wire::owned(message.stop.and_then(|s| s.reason)),
            },
            _ => InboundEvent::Ignored,
        })
    }

    pub(crate) fn encode_media(&mut self, audio: &[u8], out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"media","media":{"payload":""#);
            wire::push_base64(json, audio);
            json.push_str(r#""}}"#);
        });
    }

    pub(crate) fn encode_mark(&mut self, name: &str, out: &mut Outbound) {
        out.push_text(|json| {
            json.push_str(r#"{"event":"mark","mark":{"name":"#);
            wire::push_json_str(json, name);
            json.push_str("}}");
        });
    }

    pub(crate) fn encode_clear(&mut self, out: &mut Outbound) {
        out.push_text(|json| json.push_str(r#"{"event":"clear"}"#));
    }
}

#[cfg(test)]
mod tests {
    use super::REORDER_WINDOW;
    use crate::carrier::{
        AudioFormat, CarrierCodec, CarrierKind, InboundEvent, Outbound, OutboundFrame,
    };
    use base64::Engine as _;
    use serde_json::{Value, json};

    const STREAM: &str = "32de0dea-53cb-4b21-89a4-9e1819c043bc";
    const CONNECTED: &str = r#"{"event":"connected","version":"1.0.0"}"#;
    const START: &str = r#"{"event":"start","sequence_number":"1","start":{"user_id":"3e6f995f-85f7-4705-9741-53b116d28237","call_control_id":"v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg","call_session_id":"428c31b6-7af4-4bcb-b7f5-5013ef9657c1","from":"+13122010094","to":"+13122010095","client_state":"dm94bGluZQ==","custom_parameters":{"token":"tok-1"},"media_format":{"encoding":"PCMU","sample_rate":8000,"channels":1}},"stream_id":"32de0dea-53cb-4b21-89a4-9e1819c043bc"}"#;
    const DTMF: &str = r#"{"event":"dtmf","stream_id":"32de0dea-53cb-4b21-89a4-9e1819c043bc","occurred_at":"2024-01-15T10:00:00.000000Z","sequence_number":"5","dtmf":{"digit":"1"}}"#;
    const MARK: &str = r#"{"event":"mark","sequence_number":"6","stream_id":"32de0dea-53cb-4b21-89a4-9e1819c043bc","mark":{"name":"utt-3"}}"#;
    const ERROR: &str = r#"{"event":"error","sequence_number":"7","stream_id":"32de0dea-53cb-4b21-89a4-9e1819c043bc","payload":{"code":100003,"title":"malformed_frame","detail":"The received frame was not formed correctly"}}"#;
    const STOP: &str = r#"{"event":"stop","sequence_number":"8","stop":{"user_id":"3e6f995f-85f7-4705-9741-53b116d28237","call_control_id":"v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg"},"stream_id":"32de0dea-53cb-4b21-89a4-9e1819c043bc"}"#;

    fn media(seq: u64, byte: u8) -> String {
        let payload = base64::engine::general_purpose::STANDARD.encode([byte; 4]);
        format!(
            r#"{{"event":"media","sequence_number":"{seq}","media":{{"track":"inbound","chunk":"{seq}","timestamp":"{}","payload":"{payload}"}},"stream_id":"{STREAM}"}}"#,
            seq * 20
        )
    }

    fn started() -> CarrierCodec {
        let mut codec = CarrierCodec::new(CarrierKind::Telnyx);
        codec.parse_text(START, &mut Vec::new()).unwrap();
        codec
    }

    #[test]
    fn carrier_telnyx_parses_every_inbound_event() {
        let mut codec = CarrierCodec::new(CarrierKind::Telnyx);
        let mut audio = Vec::new();
        assert_eq!(
            codec.parse_text(CONNECTED, &mut audio).unwrap(),
            InboundEvent::Connected
        );
        let InboundEvent::Start(start) = codec.parse_text(START, &mut audio).unwrap() else {
            panic!("expected start");
        };
        assert_eq!(start.stream_id, STREAM);
        assert_eq!(
            start.call_id.as_deref(),
            Some("v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg")
        );
        assert_eq!(start.from.as_deref(), Some("+13122010094"));
        assert_eq!(start.custom_parameter("token"), Some("tok-1"));
        assert_eq!(start.custom_parameter("client_state"), Some("dm94bGluZQ=="));
        assert_eq!(start.format, AudioFormat::MULAW_8K);

        for seq in 2..5 {
            assert_eq!(
                codec
                    .parse_text(&media(seq, seq as u8), &mut audio)
                    .unwrap(),
                InboundEvent::Media {
                    timestamp_ms: Some(seq * 20)
                }
            );
            assert_eq!(audio, [seq as u8; 4]);
        }
        assert_eq!(
            codec.parse_text(DTMF, &mut audio).unwrap(),
            InboundEvent::Dtmf { digit: '1' }
        );
        assert_eq!(
            codec.parse_text(MARK, &mut audio).unwrap(),
            InboundEvent::Mark {
                name: "utt-3".into()
            }
        );
        assert_eq!(
            codec.parse_text(ERROR, &mut audio).unwrap(),
            InboundEvent::Error {
                message: "100003: malformed_frame: The received frame was not formed correctly"
                    .into()
            }
        );
        assert_eq!(
            codec.parse_text(STOP, &mut audio).unwrap(),
            InboundEvent::Stop { reason: None }
        );
    }

    #[test]
    fn carrier_telnyx_reads_l16_and_pcma() {
        let mut codec = CarrierCodec::new(CarrierKind::Telnyx);
        let l16 = r#"{"event":"start","sequence_number":1,"stream_id":"s","start":{"media_format":{"encoding":"L16","sample_rate":"16000","channels":1}}}"#;
        codec.parse_text(l16, &mut Vec::new()).unwrap();
        assert_eq!(codec.audio_format(), AudioFormat::PCM16_16K);
        let pcma = r#"{"event":"start","sequence_number":1,"stream_id":"s","start":{"media_format":{"encoding":"PCMA","sample_rate":8000}}}"#;
        codec.parse_text(pcma, &mut Vec::new()).unwrap();
        assert_eq!(codec.audio_format(), AudioFormat::ALAW_8K);
    }

    #[test]
    fn carrier_telnyx_reorders_out_of_order_frames() {
        let mut codec = started();
        let mut audio = Vec::new();
        // 3 and 4 arrive before 2: held, then released in order when 2 lands.
        for seq in [3, 4] {
            assert_eq!(
                codec
                    .parse_text(&media(seq, seq as u8), &mut audio)
                    .unwrap(),
                InboundEvent::Ignored
            );
            assert!(audio.is_empty());
        }
        assert_eq!(
            codec.parse_text(&media(2, 2), &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(40)
            }
        );
        assert_eq!(audio, [[2u8; 4], [3; 4], [4; 4]].concat());
        // A duplicate or late frame is dropped.
        assert_eq!(
            codec.parse_text(&media(3, 3), &mut audio).unwrap(),
            InboundEvent::Ignored
        );
        assert!(audio.is_empty());
    }

    #[test]
    fn carrier_telnyx_control_events_do_not_look_like_gaps() {
        let mut codec = started();
        let mut audio = Vec::new();
        codec.parse_text(&media(2, 2), &mut audio).unwrap();
        // Sequence 3 is a DTMF that arrives after media 4.
        assert_eq!(
            codec.parse_text(&media(4, 4), &mut audio).unwrap(),
            InboundEvent::Ignored
        );
        let dtmf = r#"{"event":"dtmf","sequence_number":"3","dtmf":{"digit":"9"}}"#;
        assert_eq!(
            codec.parse_text(dtmf, &mut audio).unwrap(),
            InboundEvent::Dtmf { digit: '9' }
        );
        assert_eq!(
            codec.parse_text(&media(5, 5), &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(80)
            }
        );
        assert_eq!(audio, [[4u8; 4], [5; 4]].concat());
        // A mark taking sequence 6 before media 7 keeps the stream flowing.
        codec.parse_text(MARK, &mut audio).unwrap();
        assert_eq!(
            codec.parse_text(&media(7, 7), &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(140)
            }
        );
    }

    #[test]
    fn carrier_telnyx_gives_up_on_a_lost_frame_after_the_window() {
        let mut codec = started();
        let mut audio = Vec::new();
        // Sequence 2 never arrives; 3.. are held until the window is exceeded.
        let window = REORDER_WINDOW as u64;
        for seq in 3..2 + window {
            assert_eq!(
                codec
                    .parse_text(&media(seq, seq as u8), &mut audio)
                    .unwrap(),
                InboundEvent::Ignored
            );
        }
        let last = 2 + window;
        assert_eq!(
            codec
                .parse_text(&media(last, last as u8), &mut audio)
                .unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(60)
            }
        );
        let expected: Vec<u8> = (3..=last).flat_map(|seq| [seq as u8; 4]).collect();
        assert_eq!(audio, expected);
        // The stream continues in order afterwards.
        assert_eq!(
            codec.parse_text(&media(last + 1, 1), &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some((last + 1) * 20)
            }
        );
        // A huge jump flushes nothing stale and resynchronises.
        assert_eq!(
            codec.parse_text(&media(1_000, 9), &mut audio).unwrap(),
            InboundEvent::Media {
                timestamp_ms: Some(20_000)
            }
        );
        assert_eq!(audio, [9; 4]);
    }

    #[test]
    fn carrier_telnyx_builds_every_outbound_message() {
        let mut codec = started();
        let mut out = Outbound::new();
        codec.encode_media(&[0xff, 0x7f, 0x00], &mut out);
        codec.encode_mark("utt-3", &mut out);
        codec.encode_clear(&mut out);
        let texts: Vec<Value> = out
            .frames()
            .map(|frame| match frame {
                OutboundFrame::Text(text) => serde_json::from_str(text).unwrap(),
                OutboundFrame::Binary(_) => panic!("telnyx never sends binary"),
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                json!({"event":"media","media":{"payload":"/38A"}}),
                json!({"event":"mark","mark":{"name":"utt-3"}}),
                json!({"event":"clear"}),
            ]
        );
    }
}

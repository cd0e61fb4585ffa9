//! Properties of the five carrier codecs over generated input (issue 19, fuzzing): any
//! text or bytes a carrier (or an attacker holding a media token) sends decode to an
//! event or an error, never a panic; audio a carrier sends comes out byte for byte; and
//! audio we encode reaches the carrier whole, padded only with silence.

// A panic in a test is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use proptest::prelude::*;
use serde_json::Value;
use voxline_media::carrier::{CarrierCodec, CarrierKind, InboundEvent, Outbound, OutboundFrame};

const TWILIO_START: &str = r#"{"event":"start","sequenceNumber":"1","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","start":{"accountSid":"AC123","streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0","callSid":"CA456","tracks":["inbound"],"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1},"customParameters":{"k":"v"}}}"#;
const PLIVO_START: &str = r#"{"event":"start","sequenceNumber":1,"start":{"callId":"0c4b8e5e-3b8a-4a4e-9d4b-1a2b3c4d5e6f","streamId":"20170ada-f610-433b-8758-c02a2aab3662","accountId":"MA123456789","tracks":["inbound"],"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000}},"extra_headers":"a=1;b=2"}"#;
const EXOTEL_START: &str = r#"{"event":"start","sequence_number":"1","stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","start":{"stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","call_sid":"a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6","account_sid":"voxline1","from":"+919876543210","to":"+918012345678","custom_parameters":{},"media_format":{"encoding":"audio/x-raw","sample_rate":"8000","bit_rate":"16"}}}"#;
const VONAGE_START: &str = r#"{"event":"websocket:connected","content-type":"audio/l16;rate=16000","call_uuid":"aaaaaaaa-bbbb-cccc-dddd-0123456789ab","token":"v1.tok.sig","from":"447700900000","to":"447700900001"}"#;
const TELNYX_START: &str = r#"{"event":"start","sequence_number":"1","start":{"user_id":"3e6f995f-85f7-4705-9741-53b116d28237","call_control_id":"v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg","call_session_id":"428c31b6-7af4-4bcb-b7f5-5013ef9657c1","from":"+13122010094","to":"+13122010095","client_state":"dm94bGluZQ==","custom_parameters":{"token":"tok-1"},"media_format":{"encoding":"PCMU","sample_rate":8000,"channels":1}},"stream_id":"32de0dea-53cb-4b21-89a4-9e1819c043bc"}"#;

fn start_of(kind: CarrierKind) -> &'static str {
    match kind {
        CarrierKind::Twilio => TWILIO_START,
        CarrierKind::Plivo => PLIVO_START,
        CarrierKind::Exotel => EXOTEL_START,
        CarrierKind::Vonage => VONAGE_START,
        CarrierKind::Telnyx => TELNYX_START,
        CarrierKind::Sip => unreachable!("sip is no websocket carrier: not in CarrierKind::ALL"),
    }
}

/// A codec for `kind` that has seen its carrier's start message.
fn started(kind: CarrierKind) -> CarrierCodec {
    let mut codec = CarrierCodec::new(kind);
    let event = codec.parse_text(start_of(kind), &mut Vec::new());
    assert!(
        matches!(event, Ok(InboundEvent::Start(_) | InboundEvent::Connected)),
        "{kind}: {event:?}"
    );
    codec
}

fn kinds() -> impl Strategy<Value = CarrierKind> {
    prop::sample::select(CarrierKind::ALL.to_vec())
}

/// Text shaped like a carrier message: JSON with the events and fields the codecs look
/// at, holding values of the wrong types, and plain noise.
fn carrier_text() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("null".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| if n.is_finite() {
            n.to_string()
        } else {
            "1e400".to_owned()
        }),
        ".{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
        Just(r#"{"payload":"//8=","track":"inbound","chunk":"x","timestamp":"-1"}"#.to_owned()),
        Just("[]".to_owned()),
    ];
    let event = prop::sample::select(vec![
        "connected",
        "start",
        "media",
        "mark",
        "stop",
        "dtmf",
        "clear",
        "error",
        "playedStream",
        "clearedAudio",
        "websocket:connected",
        "websocket:notify",
        "websocket:cleared",
        "",
    ]);
    let field = prop::sample::select(vec![
        "media",
        "start",
        "stop",
        "mark",
        "dtmf",
        "payload",
        "sequence_number",
        "sequenceNumber",
        "stream_id",
        "streamSid",
        "content-type",
        "name",
    ]);
    prop_oneof![
        ".{0,64}",
        (event, prop::collection::vec((field, value), 0..5)).prop_map(|(event, fields)| {
            let mut json = format!(
                r#"{{"event":{}"#,
                serde_json::to_string(event).unwrap_or_default()
            );
            for (name, value) in fields {
                json.push_str(&format!(r#","{name}":{value}"#));
            }
            json.push('}');
            json
        }),
    ]
}

/// What the carrier receives from `out`: the audio of every media message, in order.
fn sent_audio(out: &Outbound) -> Vec<u8> {
    let mut audio = Vec::new();
    for frame in out.frames() {
        match frame {
            OutboundFrame::Binary(bytes) => audio.extend_from_slice(bytes),
            OutboundFrame::Text(text) => {
                let json: Value = serde_json::from_str(text).expect("outbound text is JSON");
                if let Some(payload) = json["media"]["payload"].as_str() {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(payload)
                        .expect("payload is base64");
                    audio.extend_from_slice(&bytes);
                }
            }
        }
    }
    audio
}

/// The carrier's inbound media message number `seq` carrying `audio`.
fn inbound_media(kind: CarrierKind, seq: u64, audio: &[u8]) -> String {
    let payload = base64::engine::general_purpose::STANDARD.encode(audio);
    match kind {
        CarrierKind::Twilio => format!(
            r#"{{"event":"media","sequenceNumber":"{seq}","media":{{"track":"inbound","chunk":"{seq}","timestamp":"{}","payload":"{payload}"}},"streamSid":"MZ18ad3ab5a668481ce02b83e7395059f0"}}"#,
            seq * 20
        ),
        CarrierKind::Plivo => format!(
            r#"{{"event":"media","sequenceNumber":{seq},"streamId":"20170ada-f610-433b-8758-c02a2aab3662","media":{{"track":"inbound","timestamp":"{}","chunk":{seq},"payload":"{payload}"}}}}"#,
            1_705_312_200_000 + seq * 20
        ),
        CarrierKind::Exotel => format!(
            r#"{{"event":"media","sequence_number":"{seq}","stream_sid":"b4c9a2f1e0d34c5a8b7e6f5d4c3b2a19","media":{{"chunk":"{seq}","timestamp":"{}","payload":"{payload}"}}}}"#,
            seq * 20
        ),
        CarrierKind::Telnyx => format!(
            r#"{{"event":"media","sequence_number":"{seq}","media":{{"track":"inbound","chunk":"{seq}","timestamp":"{}","payload":"{payload}"}},"stream_id":"32de0dea-53cb-4b21-89a4-9e1819c043bc"}}"#,
            seq * 20
        ),
        CarrierKind::Vonage => unreachable!("Vonage sends audio as binary messages"),
        CarrierKind::Sip => unreachable!("sip is no websocket carrier: not in CarrierKind::ALL"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever text arrives, before or after the start, decoding answers without panicking.
    #[test]
    fn decoding_any_text_never_panics(kind in kinds(), after_start in any::<bool>(), texts in prop::collection::vec(carrier_text(), 1..6)) {
        let mut codec = if after_start { started(kind) } else { CarrierCodec::new(kind) };
        let mut audio = Vec::new();
        for text in &texts {
            audio.clear();
            let _ = codec.parse_text(text, &mut audio);
        }
    }

    /// Whatever bytes arrive as a binary message, decoding answers without panicking.
    #[test]
    fn decoding_any_bytes_never_panics(kind in kinds(), after_start in any::<bool>(), bytes in prop::collection::vec(any::<u8>(), 0..700)) {
        let mut codec = if after_start { started(kind) } else { CarrierCodec::new(kind) };
        let mut audio = Vec::new();
        let _ = codec.parse_binary(&bytes, &mut audio);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            audio.clear();
            let _ = codec.parse_text(text, &mut audio);
        }
    }

    /// Audio a carrier sends in its media messages comes out of the codec unchanged.
    #[test]
    fn inbound_audio_decodes_byte_for_byte(kind in kinds(), frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..160).prop_map(|mut v| { v.truncate(v.len() & !1); v }), 1..8)) {
        let mut codec = started(kind);
        let mut heard = Vec::new();
        let mut audio = Vec::new();
        for (i, frame) in frames.iter().filter(|f| !f.is_empty()).enumerate() {
            audio.clear();
            let event = if kind == CarrierKind::Vonage {
                codec.parse_binary(frame, &mut audio)
            } else {
                codec.parse_text(&inbound_media(kind, i as u64 + 2, frame), &mut audio)
            };
            prop_assert!(matches!(event, Ok(InboundEvent::Media { .. })), "{kind}: {event:?}");
            heard.extend_from_slice(&audio);
        }
        let sent: Vec<u8> = frames.concat();
        prop_assert_eq!(heard, sent);
    }

    /// Audio we encode for a carrier reaches it whole and in order; fixed-size carriers
    /// pad only the last message, and only with silence.
    #[test]
    fn outbound_audio_round_trips(kind in kinds(), chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..900).prop_map(|mut v| { v.truncate(v.len() & !1); v }), 1..6)) {
        let mut codec = started(kind);
        let mut out = Outbound::new();
        for chunk in &chunks {
            codec.encode_media(chunk, &mut out);
        }
        codec.flush(&mut out);
        let sent = sent_audio(&out);
        let audio: Vec<u8> = chunks.concat();
        prop_assert!(sent.len() >= audio.len(), "{kind}: {} < {}", sent.len(), audio.len());
        prop_assert_eq!(&sent[..audio.len()], &audio[..]);
        let silence = codec.audio_format().silence_byte();
        prop_assert!(sent[audio.len()..].iter().all(|&b| b == silence), "{kind}: padding is not silence");
    }
}

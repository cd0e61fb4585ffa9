//! The SIP carrier's parsers of untrusted input never panic (issue 33): any
//! datagram through the RTP parse, the jitter buffer and the telephone-event
//! reader; any text as an SDP offer or answer. `fuzz/` holds the same entry
//! points as `cargo fuzz` targets (`rtp_packet`, `sdp_body`).

use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr};
use voxline_media::rtp::{FRAME_BYTES, JitterBuffer, TelephoneEventReceiver, parse_rtp};
use voxline_media::sdp::{self, G711Codec, LocalMedia, MediaDirection};

fn local() -> LocalMedia {
    LocalMedia {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 40_000,
        session_id: 1,
        version: 1,
        codecs: vec![G711Codec::Pcmu, G711Codec::Pcma],
        dtmf_payload_type: 101,
        direction: MediaDirection::SendRecv,
    }
}

/// Text that looks like SDP often enough to reach the negotiation.
fn sdp_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("v=0".to_owned()),
        Just("o=- 1 1 IN IP4 10.0.0.1".to_owned()),
        Just("s=-".to_owned()),
        Just("c=IN IP4 10.0.0.1".to_owned()),
        Just("c=IN IP4 0.0.0.0".to_owned()),
        Just("t=0 0".to_owned()),
        "m=audio [0-9]{1,6} RTP/AVP( [0-9]{1,3}){0,4}",
        "a=rtpmap:[0-9]{1,3} [A-Za-z0-9-]{1,16}/[0-9]{1,6}",
        "a=(sendrecv|sendonly|recvonly|inactive|ptime:[0-9]{1,4})",
        "[ -~]{0,40}",
    ];
    prop::collection::vec(line, 0..14).prop_map(|lines| lines.join("\r\n"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any datagram: parsed or refused; a parsed one's payload goes to the jitter buffer
    /// and the telephone-event reader, which refuse what is not theirs.
    #[test]
    fn any_datagram_is_read_or_refused(datagram in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut jitter = JitterBuffer::new(8, 3).unwrap();
        let mut events = TelephoneEventReceiver::new();
        if let Ok(packet) = parse_rtp(&datagram) {
            prop_assert!(packet.payload.len() <= datagram.len());
            let _ = jitter.push(packet.sequence, packet.timestamp, packet.payload);
            let _ = events.push(packet.timestamp, packet.payload);
            let mut frame = [0u8; FRAME_BYTES];
            let _ = jitter.pop(&mut frame);
        }
    }

    /// Any text as a peer's offer or answer: negotiated or refused with a reason.
    #[test]
    fn any_sdp_is_negotiated_or_refused(text in sdp_text()) {
        let local = local();
        if let Ok((answer, negotiated)) = sdp::answer(&text, &local) {
            prop_assert!(answer.contains("m=audio 40000"));
            prop_assert!(local.codecs.contains(&negotiated.codec));
        }
        let _ = sdp::read_answer(&text, &local);
    }

    /// Bytes that are not even text, as a body.
    #[test]
    fn any_bytes_as_sdp_are_refused_without_panic(body in prop::collection::vec(any::<u8>(), 0..300)) {
        let text = String::from_utf8_lossy(&body);
        let _ = sdp::answer(&text, &local());
        let _ = sdp::read_answer(&text, &local());
    }
}

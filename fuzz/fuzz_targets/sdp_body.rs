//! Any SIP message body as a peer's SDP offer (an inbound INVITE, a re-INVITE)
//! or answer (a 200 to our INVITE): negotiated or refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};
use voxline_media::sdp::{self, G711Codec, LocalMedia, MediaDirection};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let local = LocalMedia {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 40_000,
        session_id: 1,
        version: 1,
        codecs: vec![G711Codec::Pcmu, G711Codec::Pcma],
        dtmf_payload_type: 101,
        direction: MediaDirection::SendRecv,
    };
    let _ = sdp::answer(text, &local);
    let _ = sdp::read_answer(text, &local);
});

//! Any message on a carrier media socket: the first byte picks the carrier and whether
//! the stream has started; the rest is sent as text (when UTF-8) and as binary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxline_media::carrier::{CarrierCodec, CarrierKind, Outbound};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let kind = CarrierKind::ALL[usize::from(first) % CarrierKind::ALL.len()];
    let mut codec = CarrierCodec::new(kind);
    let mut audio = Vec::new();
    // Split the rest into messages at newlines, so a start can precede media.
    for message in rest.split(|&b| b == b'\n') {
        audio.clear();
        if let Ok(text) = std::str::from_utf8(message) {
            let _ = codec.parse_text(text, &mut audio);
        }
        audio.clear();
        let _ = codec.parse_binary(message, &mut audio);
    }
    let mut out = Outbound::new();
    if first & 0x80 != 0 {
        codec.encode_media(rest, &mut out);
        codec.flush(&mut out);
    }
});

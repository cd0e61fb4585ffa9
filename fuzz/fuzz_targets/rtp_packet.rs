//! Any UDP datagram on a SIP call's RTP port: parsed or refused, and a parsed
//! packet's payload offered to the jitter buffer and the RFC 4733 reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxline_media::rtp::{FRAME_BYTES, JitterBuffer, TelephoneEventReceiver, parse_rtp};

fuzz_target!(|data: &[u8]| {
    let (Ok(mut jitter), mut events) = (JitterBuffer::new(8, 3), TelephoneEventReceiver::new())
    else {
        return;
    };
    // Several datagrams per input, split at a marker, so reordering and loss are reached.
    for datagram in data.split(|&b| b == 0xA5) {
        if let Ok(packet) = parse_rtp(datagram) {
            let _ = jitter.push(packet.sequence, packet.timestamp, packet.payload);
            let _ = events.push(packet.timestamp, packet.payload);
        }
        let mut frame = [0u8; FRAME_BYTES];
        let _ = jitter.pop(&mut frame);
    }
});

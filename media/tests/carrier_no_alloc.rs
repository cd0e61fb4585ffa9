//! Proves the carrier codecs', the RTP wire formats' and the answering-machine detector's
//! per-frame paths do not allocate once their buffers are warm.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use voxline_media::amd::{AmdSettings, AnsweringMachineDetector};
use voxline_media::carrier::{AudioFormat, CarrierCodec, CarrierKind, Outbound, TwilioCarrierSide};
use voxline_media::rtp::{
    DigitSender, EventStream, JitterBuffer, RtpOut, TelephoneEventReceiver, parse_rtp, write_rtp,
};
use voxline_media::synth::{SpeechLikeGenerator, ToneGenerator, WhiteNoiseGenerator};

/// Counts allocations per thread so parallel tests do not disturb each other.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations_during(mut work: impl FnMut()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    work();
    ALLOCATIONS.with(Cell::get) - before
}

/// Runs `frame` a few times to warm buffers, then checks further runs allocate nothing.
fn assert_steady_state_free(mut frame: impl FnMut()) {
    for _ in 0..16 {
        frame();
    }
    assert_eq!(allocations_during(|| (0..64).for_each(|_| frame())), 0);
}

#[test]
fn carrier_twilio_round_trip_does_not_allocate_per_frame() {
    let mut carrier = TwilioCarrierSide::new("MZ1", "CA1", "AC1");
    let mut server = CarrierCodec::new(CarrierKind::Twilio);
    let (mut msg, mut audio, mut out) = (String::new(), Vec::new(), Outbound::new());
    carrier.start(&[("token", "t")], &mut msg);
    server.parse_text(&msg, &mut audio).unwrap();
    let mut played = Vec::new();
    let frame = [0x55u8; 160];
    assert_steady_state_free(|| {
        carrier.media(&frame, &mut msg);
        server.parse_text(&msg, &mut audio).unwrap();
        out.clear();
        server.encode_media(&audio, &mut out);
        for outbound in out.frames() {
            if let voxline_media::carrier::OutboundFrame::Text(text) = outbound {
                carrier.parse_server(text, &mut played).unwrap();
            }
        }
    });
}

#[test]
fn carrier_text_codecs_do_not_allocate_per_frame() {
    let cases = [
        (
            CarrierKind::Plivo,
            r#"{"event":"start","sequenceNumber":1,"start":{"callId":"c","streamId":"s","mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000}}}"#,
            r#"{"event":"media","sequenceNumber":42,"streamId":"s","media":{"track":"inbound","timestamp":"1705312200000","chunk":41,"payload":"//////////8="}}"#,
        ),
        (
            CarrierKind::Exotel,
            r#"{"event":"start","sequence_number":"1","stream_sid":"s","start":{"stream_sid":"s","media_format":{"encoding":"audio/x-raw","sample_rate":"8000","bit_rate":"16"}}}"#,
            r#"{"event":"media","sequence_number":"3","stream_sid":"s","media":{"chunk":"2","timestamp":"200","payload":"AQACAAMABAA="}}"#,
        ),
    ];
    for (kind, start, media) in cases {
        let mut codec = CarrierCodec::new(kind);
        let (mut audio, mut out) = (Vec::new(), Outbound::new());
        codec.parse_text(start, &mut audio).unwrap();
        assert_steady_state_free(|| {
            codec.parse_text(media, &mut audio).unwrap();
            out.clear();
            codec.encode_media(&[0; 320], &mut out);
        });
    }
}

#[test]
fn carrier_telnyx_reordering_does_not_allocate_per_frame() {
    let mut codec = CarrierCodec::new(CarrierKind::Telnyx);
    let (mut audio, mut out) = (Vec::new(), Outbound::new());
    let start = r#"{"event":"start","sequence_number":"1","stream_id":"s","start":{"media_format":{"encoding":"PCMU","sample_rate":8000,"channels":1}}}"#;
    codec.parse_text(start, &mut audio).unwrap();
    let frames: Vec<String> = (2..2_000u64)
        .map(|seq| {
            format!(
                r#"{{"event":"media","sequence_number":"{seq}","media":{{"track":"inbound","chunk":"{seq}","timestamp":"{}","payload":"//////////8="}},"stream_id":"s"}}"#,
                seq * 20
            )
        })
        .collect();
    // Deliver pairs swapped so every other frame is held and released.
    let mut pairs = frames.chunks_exact(2).cycle();
    assert_steady_state_free(|| {
        let pair = pairs.next().unwrap();
        codec.parse_text(&pair[1], &mut audio).unwrap();
        codec.parse_text(&pair[0], &mut audio).unwrap();
        out.clear();
        codec.encode_media(&audio, &mut out);
    });
}

#[test]
fn carrier_vonage_binary_path_does_not_allocate_per_frame() {
    let mut codec = CarrierCodec::new(CarrierKind::Vonage);
    let (mut audio, mut out) = (Vec::new(), Outbound::new());
    codec
        .parse_text(
            r#"{"event":"websocket:connected","content-type":"audio/l16;rate=16000"}"#,
            &mut audio,
        )
        .unwrap();
    let inbound = [1u8; 640];
    let outbound = [2u8; 500];
    assert_steady_state_free(|| {
        codec.parse_binary(&inbound, &mut audio).unwrap();
        out.clear();
        codec.encode_media(&outbound, &mut out);
    });
}

#[test]
fn carrier_sip_wire_does_not_allocate_per_frame() {
    let mut codec = CarrierCodec::sip(AudioFormat::ALAW_8K);
    let (mut audio, mut out) = (Vec::new(), Outbound::new());
    let inbound = [0xd5u8; 160];
    let outbound = [0x55u8; 480];
    assert_steady_state_free(|| {
        codec.parse_binary(&inbound, &mut audio).unwrap();
        codec.parse_text("dtmf 5", &mut audio).unwrap();
        out.clear();
        codec.encode_media(&outbound, &mut out);
        codec.encode_dtmf("12#", &mut out);
        codec.encode_clear(&mut out);
    });
}

#[test]
fn rtp_packets_jitter_buffer_and_dtmf_events_do_not_allocate_per_packet() {
    let mut jitter = JitterBuffer::new(8, 2).unwrap();
    let mut receiver = TelephoneEventReceiver::new();
    let (mut datagram, mut frame) = ([0u8; 256], [0u8; 160]);
    let audio = [0x55u8; 160];
    let mut sequence = 0u16;
    let mut digits = 0;
    assert_steady_state_free(|| {
        // Two audio packets delivered swapped, so the buffer reorders, then two ticks.
        for offset in [1u16, 0] {
            let header = RtpOut {
                payload_type: 0,
                sequence: sequence.wrapping_add(offset),
                timestamp: 160 * u32::from(sequence.wrapping_add(offset)),
                ssrc: 7,
                marker: false,
            };
            let len = write_rtp(&header, &audio, &mut datagram).unwrap();
            let packet = parse_rtp(&datagram[..len]).unwrap();
            jitter
                .push(packet.sequence, packet.timestamp, packet.payload)
                .unwrap();
        }
        std::hint::black_box(jitter.pop(&mut frame));
        std::hint::black_box(jitter.pop(&mut frame));
        sequence = sequence.wrapping_add(2);
        // One short digit, sent and received.
        let stream = EventStream {
            payload_type: 101,
            ssrc: 7,
            timestamp: 160 * u32::from(sequence),
        };
        let mut sender = DigitSender::new('5', 40, stream).unwrap();
        while let Some(len) = sender.write_next(sequence, &mut datagram).unwrap() {
            sequence = sequence.wrapping_add(1);
            let packet = parse_rtp(&datagram[..len]).unwrap();
            digits += receiver
                .push(packet.timestamp, packet.payload)
                .unwrap()
                .map_or(0, |_| 1);
        }
    });
    assert_eq!(digits, 16 + 64);
    assert!(jitter.counters().reordered > 0);
}

#[test]
fn amd_detector_does_not_allocate_per_frame() {
    // Settings that never decide, so every frame runs the whole analysis: the VAD, and the
    // beep filter bank on speech and on a steady tone.
    let settings = AmdSettings {
        machine_greeting_ms: u32::MAX,
        reply_pause_ms: u32::MAX,
        decision_ms: u32::MAX,
        beep_min_ms: u32::MAX,
        ..AmdSettings::default()
    };
    let mut detector = AnsweringMachineDetector::new(settings).unwrap();
    let mut speech = SpeechLikeGenerator::new(8000, 3);
    let mut tone = ToneGenerator::new(8000, 1000.0, -10.0);
    let mut noise = WhiteNoiseGenerator::new(4, -50.0);
    let mut frame = [0i16; 160];
    let mut n = 0usize;
    assert_steady_state_free(|| {
        n += 1;
        match n % 40 {
            0..=19 => speech.fill(&mut frame),
            20..=29 => tone.fill(&mut frame),
            _ => noise.fill(&mut frame),
        }
        std::hint::black_box(detector.push(&frame));
        // Odd slice lengths take the partial-frame path too.
        std::hint::black_box(detector.push(&frame[..37]));
    });
}

#[test]
fn carrier_allocation_counter_sees_allocations() {
    assert!(allocations_during(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
}

#[test]
fn turn_taking_does_not_allocate_per_frame() {
    use voxline_media::turn_taking::{TurnAction, TurnConfig, TurnTaking};
    // 400 ms of speech then a second of silence, over and over: onsets, pauses of the
    // agent and its resumption (talk over it), the model asked and the silence rule ending
    // the turn (talk to it); every path a frame takes.
    let speech = |at: usize| at % 70 < 20;
    let mut seen = Vec::new();
    for agent in [true, false] {
        let mut machine = TurnTaking::new(TurnConfig::smart(), true);
        if agent {
            machine.agent_started();
        }
        let mut at = 0;
        let mut kinds = [false; 3];
        assert_steady_state_free(|| {
            for action in machine.push_frame(speech(at)) {
                match action {
                    TurnAction::ResumeAgent => kinds[0] = true,
                    TurnAction::AskModel { .. } => kinds[1] = true,
                    TurnAction::EndOfTurn { .. } => kinds[2] = true,
                    _ => {}
                }
            }
            at += 1;
        });
        seen.push(kinds);
    }
    assert_eq!(seen, [[true, false, false], [false, true, true]]);
}

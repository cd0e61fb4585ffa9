//! Per-frame media cost: what one call's engine spends per 20 ms frame and per call-second,
//! on the same path the call loop runs for a Twilio (8 kHz μ-law) stream.
//!
//! Inbound: a Twilio `media` JSON message → parse + base64 decode → μ-law decode → DTMF →
//! VAD at 8 kHz → the stereo WAV recording.
//! Outbound: 20 ms of 24 kHz TTS PCM → resample to 8 kHz → μ-law encode → a Twilio `media`
//! JSON message (base64) → the recording.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::io::{Seek, SeekFrom, Write};

use criterion::{Criterion, criterion_group, criterion_main};
use voxline_media::carrier::{CarrierCodec, CarrierKind, Outbound, TwilioCarrierSide};
use voxline_media::dtmf::DtmfDetector;
use voxline_media::g711::{decode_mulaw_into, encode_mulaw_into};
use voxline_media::resample::StreamResampler;
use voxline_media::rtp::{JitterBuffer, RtpOut, parse_rtp, write_rtp};
use voxline_media::synth::{SpeechLikeGenerator, WhiteNoiseGenerator};
use voxline_media::vad::{VadConfig, VoiceActivityDetector};
use voxline_media::wav::WavWriter;

/// Frames per second of call audio.
const FRAMES_PER_SECOND: usize = 50;

/// One call's media state, as the call loop holds it.
struct CallMedia {
    codec: CarrierCodec,
    wire_in: Vec<u8>,
    caller: [i16; 160],
    vad: VoiceActivityDetector,
    dtmf: DtmfDetector,
    downsampler: StreamResampler,
    agent: [i16; 160],
    mulaw_out: [u8; 160],
    outbound: Outbound,
    recording: WavWriter<DiscardingFile>,
}

/// A file that forgets what is written to it: the recording's cost without disk I/O (the
/// call loop writes through a 64 KiB buffer, one system call per two seconds of audio).
struct DiscardingFile;

impl Write for DiscardingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(black_box(buf).len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for DiscardingFile {
    fn seek(&mut self, _: SeekFrom) -> std::io::Result<u64> {
        Ok(0)
    }
}

impl CallMedia {
    fn new() -> Self {
        Self::with_vad(VadConfig::default())
    }

    fn with_vad(vad: VadConfig) -> Self {
        let mut codec = CarrierCodec::new(CarrierKind::Twilio);
        let mut side = TwilioCarrierSide::new("MZbench", "CAbench", "ACbench");
        let mut start = String::new();
        side.start(&[("token", "t")], &mut start);
        let mut scratch = Vec::new();
        codec
            .parse_text(&start, &mut scratch)
            .expect("the start message parses");
        Self {
            codec,
            wire_in: Vec::with_capacity(320),
            caller: [0; 160],
            vad: VoiceActivityDetector::with_config(8000, vad).expect("8 kHz VAD"),
            dtmf: DtmfDetector::new(8000).expect("8 kHz DTMF"),
            downsampler: StreamResampler::new(24000, 8000).expect("24k→8k resampler"),
            agent: [0; 160],
            mulaw_out: [0; 160],
            outbound: Outbound::new(),
            recording: WavWriter::new(DiscardingFile).expect("WAV header"),
        }
    }

    /// One inbound carrier message: what the loop does with a caller frame.
    fn inbound(&mut self, message: &str) -> (bool, Option<char>) {
        self.codec
            .parse_text(message, &mut self.wire_in)
            .expect("a media message");
        decode_mulaw_into(&self.wire_in, &mut self.caller);
        let digit = self.dtmf.push(&self.caller);
        let speech = self.vad.is_speech(&self.caller);
        // Millions of iterations would pass the 4 GiB a WAV can hold; a real
        // call never does, so the bench starts a new recording every hour.
        if self.recording.duration() >= std::time::Duration::from_secs(3600) {
            self.recording = WavWriter::new(DiscardingFile).expect("WAV header");
        }
        self.recording
            .write_frames(&self.caller, &self.agent)
            .expect("sink write");
        (speech, digit)
    }

    /// One outbound frame: what the loop does with 20 ms of TTS audio.
    fn outbound(&mut self, tts: &[i16]) -> usize {
        self.downsampler
            .process(tts, &mut self.agent)
            .expect("fixed-size chunk");
        encode_mulaw_into(&self.agent, &mut self.mulaw_out);
        self.codec.encode_media(&self.mulaw_out, &mut self.outbound);
        let queued = self.outbound.len();
        self.outbound.clear();
        queued
    }
}

/// One second of μ-law frames from `pcm`, as Twilio `media` messages.
fn twilio_messages(mut fill: impl FnMut(&mut [i16; 160])) -> Vec<String> {
    let mut side = TwilioCarrierSide::new("MZbench", "CAbench", "ACbench");
    let mut pcm = [0i16; 160];
    let mut mulaw = [0u8; 160];
    (0..FRAMES_PER_SECOND)
        .map(|_| {
            fill(&mut pcm);
            encode_mulaw_into(&pcm, &mut mulaw);
            let mut message = String::new();
            side.media(&mulaw, &mut message);
            message
        })
        .collect()
}

/// One second of agent TTS at 24 kHz, in 20 ms chunks.
fn agent_tts_24k() -> Vec<[i16; 480]> {
    let mut generator = SpeechLikeGenerator::new(24000, 7);
    (0..FRAMES_PER_SECOND)
        .map(|_| {
            let mut chunk = [0i16; 480];
            generator.fill(&mut chunk);
            chunk
        })
        .collect()
}

fn bench_media(c: &mut Criterion) {
    let mut voice = SpeechLikeGenerator::new(8000, 42);
    let speech = twilio_messages(|pcm| voice.fill(pcm));
    let mut line_noise = WhiteNoiseGenerator::new(3, -62.0);
    let quiet = twilio_messages(|pcm| line_noise.fill(pcm));
    let tts = agent_tts_24k();

    let mut call = CallMedia::new();
    let mut i = 0;
    c.bench_function("inbound_frame_speech", |b| {
        b.iter(|| {
            i = (i + 1) % speech.len();
            black_box(call.inbound(black_box(&speech[i])))
        })
    });

    let mut call = CallMedia::new();
    let mut i = 0;
    c.bench_function("inbound_frame_quiet_line", |b| {
        b.iter(|| {
            i = (i + 1) % quiet.len();
            black_box(call.inbound(black_box(&quiet[i])))
        })
    });

    let mut call = CallMedia::new();
    let mut j = 0;
    c.bench_function("outbound_frame", |b| {
        b.iter(|| {
            j = (j + 1) % tts.len();
            black_box(call.outbound(black_box(&tts[j])))
        })
    });

    // Components of the inbound frame, to see where the time goes.
    let mut codec = CallMedia::new().codec;
    let mut wire = Vec::with_capacity(160);
    c.bench_function("component_twilio_parse_160", |b| {
        b.iter(|| codec.parse_text(black_box(&speech[3]), &mut wire))
    });
    let mut pcm8 = [0i16; 160];
    decode_mulaw_into(&wire, &mut pcm8);
    c.bench_function("component_mulaw_decode_160", |b| {
        b.iter(|| decode_mulaw_into(black_box(&wire), black_box(&mut pcm8)))
    });
    let mut vad = VoiceActivityDetector::new(8000).expect("8 kHz VAD");
    c.bench_function("component_vad_8k_speech", |b| {
        b.iter(|| vad.analyze(black_box(&pcm8)))
    });
    let neural_only = VadConfig {
        use_periodicity: false,
        ..VadConfig::default()
    };
    let mut vad = VoiceActivityDetector::with_config(8000, neural_only).expect("8 kHz VAD");
    c.bench_function("component_vad_8k_neural_model", |b| {
        b.iter(|| vad.analyze(black_box(&pcm8)))
    });
    let mut dtmf = DtmfDetector::new(8000).expect("8 kHz DTMF");
    c.bench_function("component_dtmf_8k", |b| {
        b.iter(|| dtmf.push(black_box(&pcm8)))
    });

    // The SIP carrier's inbound packet: parse the RTP datagram, push its G.711 frame into
    // the jitter buffer and pop the tick's frame.
    let mut datagram = [0u8; 172];
    let header = RtpOut {
        payload_type: 0,
        sequence: 0,
        timestamp: 0,
        ssrc: 0x5eed,
        marker: false,
    };
    write_rtp(&header, &wire, &mut datagram).expect("a 172-byte packet");
    let mut jitter = JitterBuffer::new(8, 2).expect("jitter buffer");
    let mut played = [0u8; 160];
    let mut sequence = 0u16;
    c.bench_function("component_rtp_parse_jitter_160", |b| {
        b.iter(|| {
            sequence = sequence.wrapping_add(1);
            datagram[2..4].copy_from_slice(&sequence.to_be_bytes());
            let packet = parse_rtp(black_box(&datagram)).expect("an RTP packet");
            jitter
                .push(packet.sequence, packet.timestamp, packet.payload)
                .expect("a 160-byte frame");
            black_box(jitter.pop(&mut played))
        })
    });

    // Typical turn-taking second: the caller talks 40 % of the time over a quiet line, the
    // agent's TTS plays for half of it.
    let mut call = CallMedia::new();
    c.bench_function("call_second_typical", |b| {
        b.iter(|| {
            for (k, chunk) in tts.iter().enumerate() {
                let message = if k % 5 < 2 { &speech[k] } else { &quiet[k] };
                black_box(call.inbound(message));
                if k % 2 == 0 {
                    black_box(call.outbound(chunk));
                }
            }
        })
    });

    // Worst case: caller and agent both speaking for the whole second.
    let mut call = CallMedia::new();
    c.bench_function("call_second_50_frames_each_way", |b| {
        b.iter(|| {
            for (message, chunk) in speech.iter().zip(&tts) {
                black_box(call.inbound(message));
                black_box(call.outbound(chunk));
            }
        })
    });

    // The bound for speech with no voiced frames at all: the neural model on every frame.
    let mut call = CallMedia::with_vad(neural_only);
    c.bench_function("call_second_50_frames_each_way_neural_every_frame", |b| {
        b.iter(|| {
            for (message, chunk) in speech.iter().zip(&tts) {
                black_box(call.inbound(message));
                black_box(call.outbound(chunk));
            }
        })
    });
}

criterion_group!(benches, bench_media);
criterion_main!(benches);

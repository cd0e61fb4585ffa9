//! Per-frame media cost: what one call spends per 20 ms frame and per second.
//!
//! Inbound: μ-law decode 160 bytes → resample 8k→16k → VAD → DTMF.
//! Outbound: 20 ms of 24 kHz TTS PCM → resample to 8 kHz → μ-law encode.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use voxline_media::dtmf::DtmfDetector;
use voxline_media::g711::{decode_mulaw_into, encode_mulaw_into};
use voxline_media::resample::StreamResampler;
use voxline_media::synth::{SpeechLikeGenerator, WhiteNoiseGenerator};
use voxline_media::vad::VoiceActivityDetector;

/// Frames per second of call audio.
const FRAMES_PER_SECOND: usize = 50;

/// One call's inbound chain with its buffers.
struct Inbound {
    pcm8: [i16; 160],
    pcm16: [i16; 320],
    upsampler: StreamResampler,
    vad: VoiceActivityDetector,
    dtmf: DtmfDetector,
}

impl Inbound {
    fn new() -> Self {
        Self {
            pcm8: [0; 160],
            pcm16: [0; 320],
            upsampler: StreamResampler::new(8000, 16000).expect("8k→16k resampler"),
            vad: VoiceActivityDetector::new(16000).expect("16 kHz VAD"),
            dtmf: DtmfDetector::new(8000).expect("8 kHz DTMF"),
        }
    }

    fn frame(&mut self, mulaw: &[u8]) -> (bool, Option<char>) {
        decode_mulaw_into(mulaw, &mut self.pcm8);
        let digit = self.dtmf.push(&self.pcm8);
        self.upsampler
            .process(&self.pcm8, &mut self.pcm16)
            .expect("fixed-size chunk");
        (self.vad.is_speech(&self.pcm16), digit)
    }
}

/// One call's outbound chain with its buffers.
struct Outbound {
    pcm8: [i16; 160],
    mulaw: [u8; 160],
    downsampler: StreamResampler,
}

impl Outbound {
    fn new() -> Self {
        Self {
            pcm8: [0; 160],
            mulaw: [0; 160],
            downsampler: StreamResampler::new(24000, 8000).expect("24k→8k resampler"),
        }
    }

    fn frame(&mut self, tts: &[i16]) -> &[u8] {
        self.downsampler
            .process(tts, &mut self.pcm8)
            .expect("fixed-size chunk");
        encode_mulaw_into(&self.pcm8, &mut self.mulaw);
        &self.mulaw
    }
}

/// One second of caller speech as μ-law frames.
fn caller_speech_mulaw() -> Vec<[u8; 160]> {
    let mut generator = SpeechLikeGenerator::new(8000, 42);
    let mut pcm = [0i16; 160];
    (0..FRAMES_PER_SECOND)
        .map(|_| {
            generator.fill(&mut pcm);
            let mut frame = [0u8; 160];
            encode_mulaw_into(&pcm, &mut frame);
            frame
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
    let speech = caller_speech_mulaw();
    let silence = vec![[0xFFu8; 160]; FRAMES_PER_SECOND];
    let tts = agent_tts_24k();

    let mut inbound = Inbound::new();
    let mut i = 0;
    c.bench_function("inbound_frame_speech", |b| {
        b.iter(|| {
            i = (i + 1) % speech.len();
            black_box(inbound.frame(black_box(&speech[i])))
        })
    });

    let mut inbound = Inbound::new();
    c.bench_function("inbound_frame_silence", |b| {
        b.iter(|| black_box(inbound.frame(black_box(&silence[0]))))
    });

    let mut outbound = Outbound::new();
    let mut j = 0;
    c.bench_function("outbound_frame", |b| {
        b.iter(|| {
            j = (j + 1) % tts.len();
            black_box(outbound.frame(black_box(&tts[j]))[0])
        })
    });

    // Components of the inbound frame, to see where the time goes.
    let mut pcm8 = [0i16; 160];
    decode_mulaw_into(&speech[3], &mut pcm8);
    let mut pcm16 = [0i16; 320];
    let mut upsampler = StreamResampler::new(8000, 16000).expect("8k→16k resampler");
    upsampler
        .process(&pcm8, &mut pcm16)
        .expect("fixed-size chunk");
    c.bench_function("component_mulaw_decode_160", |b| {
        b.iter(|| decode_mulaw_into(black_box(&speech[3]), black_box(&mut pcm8)))
    });
    c.bench_function("component_resample_8k_16k", |b| {
        b.iter(|| upsampler.process(black_box(&pcm8), black_box(&mut pcm16)))
    });
    let mut vad = VoiceActivityDetector::new(16000).expect("16 kHz VAD");
    c.bench_function("component_vad_16k_speech", |b| {
        b.iter(|| vad.analyze(black_box(&pcm16)))
    });
    let mut dtmf = DtmfDetector::new(8000).expect("8 kHz DTMF");
    c.bench_function("component_dtmf_8k", |b| {
        b.iter(|| dtmf.push(black_box(&pcm8)))
    });

    // Typical turn-taking second: the caller talks 40% of the time over a
    // quiet line, the agent's TTS plays for half of it.
    let mut line_noise = WhiteNoiseGenerator::new(3, -62.0);
    let quiet: Vec<[u8; 160]> = (0..FRAMES_PER_SECOND)
        .map(|_| {
            let mut pcm = [0i16; 160];
            line_noise.fill(&mut pcm);
            let mut frame = [0u8; 160];
            encode_mulaw_into(&pcm, &mut frame);
            frame
        })
        .collect();
    let mut inbound = Inbound::new();
    let mut outbound = Outbound::new();
    c.bench_function("call_second_typical", |b| {
        b.iter(|| {
            for (k, chunk) in tts.iter().enumerate() {
                let mulaw = if k % 5 < 2 { &speech[k] } else { &quiet[k] };
                black_box(inbound.frame(mulaw));
                if k % 2 == 0 {
                    black_box(outbound.frame(chunk)[0]);
                }
            }
        })
    });

    // Worst case: caller and agent both active for the whole second.
    let mut inbound = Inbound::new();
    let mut outbound = Outbound::new();
    c.bench_function("call_second_50_frames_each_way", |b| {
        b.iter(|| {
            for (mulaw, chunk) in speech.iter().zip(&tts) {
                black_box(inbound.frame(mulaw));
                black_box(outbound.frame(chunk)[0]);
            }
        })
    });
}

criterion_group!(benches, bench_media);
criterion_main!(benches);

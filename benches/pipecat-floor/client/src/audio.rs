//! The callers' audio: speech-like 8 kHz μ-law in 20 ms frames of 160 bytes, base64 as in a
//! Twilio `media` event, made once and shared by every call.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use voxline_media::g711::encode_mulaw_into;
use voxline_media::synth::SpeechLikeGenerator;

/// Samples per 20 ms frame at 8 kHz: also the μ-law bytes per frame.
pub const FRAME_SAMPLES: usize = 160;

/// Twilio's sample rate for `audio/x-mulaw`.
pub const SAMPLE_RATE: u32 = 8000;

/// `frames` consecutive 20 ms frames of speech-like audio (seeded, so every run sends the same
/// bytes), each μ-law encoded and base64.
pub fn payloads(frames: usize, seed: u64) -> Vec<String> {
    let mut voice = SpeechLikeGenerator::new(SAMPLE_RATE, seed);
    let mut pcm = [0i16; FRAME_SAMPLES];
    let mut mulaw = [0u8; FRAME_SAMPLES];
    (0..frames)
        .map(|_| {
            voice.fill(&mut pcm);
            encode_mulaw_into(&pcm, &mut mulaw);
            STANDARD.encode(mulaw)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_160_mulaw_bytes_of_sound() {
        let frames = payloads(50, 7);
        assert_eq!(frames.len(), 50);
        let decoded: Vec<Vec<u8>> = frames.iter().map(|p| STANDARD.decode(p).unwrap()).collect();
        assert!(decoded.iter().all(|f| f.len() == FRAME_SAMPLES));
        // Not all silence (μ-law 0xFF and 0x7F are zero): speech-like audio has energy.
        let loud = decoded
            .iter()
            .flatten()
            .filter(|&&b| b != 0xFF && b != 0x7F)
            .count();
        assert!(loud > 50 * FRAME_SAMPLES / 4);
        assert_eq!(payloads(50, 7), frames);
    }
}

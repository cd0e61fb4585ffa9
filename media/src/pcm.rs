//! PCM16 little-endian byte streams to and from `i16` samples.
//!
//! Carriers and TTS vendors ship raw `s16le`; these conversions write into
//! caller-owned buffers so the per-frame path never allocates.

/// Decodes little-endian PCM16 bytes into samples; converts `min(bytes / 2, output)` samples and returns that count.
///
/// A trailing odd byte is ignored: it is half a sample and the caller keeps it for the next chunk.
pub fn decode_pcm16le_into(bytes: &[u8], output: &mut [i16]) -> usize {
    let n = (bytes.len() / 2).min(output.len());
    for (out, pair) in output[..n].iter_mut().zip(bytes.chunks_exact(2)) {
        *out = i16::from_le_bytes([pair[0], pair[1]]);
    }
    n
}

/// Encodes samples as little-endian PCM16 bytes; converts `min(samples, output / 2)` samples and returns that count.
pub fn encode_pcm16le_into(samples: &[i16], output: &mut [u8]) -> usize {
    let n = samples.len().min(output.len() / 2);
    for (pair, &sample) in output.chunks_exact_mut(2).zip(&samples[..n]) {
        pair.copy_from_slice(&sample.to_le_bytes());
    }
    n
}

/// Number of bytes needed to hold `samples` PCM16 samples.
pub const fn pcm16_byte_len(samples: usize) -> usize {
    samples * 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_a_tone() {
        let tone: Vec<i16> = (0..320)
            .map(|n| (30_000.0 * (n as f32 * 0.3).sin()) as i16)
            .chain([i16::MIN, i16::MAX, -1, 0, 1])
            .collect();
        let mut bytes = vec![0u8; pcm16_byte_len(tone.len())];
        assert_eq!(encode_pcm16le_into(&tone, &mut bytes), tone.len());
        let mut back = vec![0i16; tone.len()];
        assert_eq!(decode_pcm16le_into(&bytes, &mut back), tone.len());
        assert_eq!(back, tone);
    }

    #[test]
    fn byte_order_is_little_endian() {
        let mut bytes = [0u8; 4];
        encode_pcm16le_into(&[0x1234, -2], &mut bytes);
        assert_eq!(bytes, [0x34, 0x12, 0xFE, 0xFF]);
    }

    #[test]
    fn odd_trailing_byte_and_short_output_are_handled() {
        let mut out = [0i16; 8];
        assert_eq!(decode_pcm16le_into(&[1, 0, 2, 0, 3], &mut out), 2);
        assert_eq!(&out[..2], &[1, 2]);
        let mut small = [0i16; 1];
        assert_eq!(decode_pcm16le_into(&[1, 0, 2, 0], &mut small), 1);
        let mut bytes = [0u8; 3];
        assert_eq!(encode_pcm16le_into(&[5, 6], &mut bytes), 1);
    }
}

//! ITU-T G.711 μ-law and A-law codecs, fully table driven.
//!
//! Decoding uses 256-entry tables; encoding uses tables indexed by the
//! truncated linear value (14 bits for μ-law, 13 bits for A-law), which is
//! exactly the resolution the reference encoder looks at, so the tables agree
//! bit for bit with the G.711 reference algorithm for every `i16`. All tables
//! are built at compile time, so there is no first-call cost on the hot path.

/// Bias added before μ-law segment search (the reference `BIAS`, 0x84).
const MULAW_BIAS: i32 = 0x84;
/// Largest magnitude μ-law represents before clipping, in 16-bit units.
const MULAW_CLIP: i32 = 32635;

/// Decodes one μ-law byte with the reference expansion formula.
const fn mulaw_expand(code: u8) -> i16 {
    let u = !code;
    let mut t = (((u & 0x0F) as i32) << 3) + MULAW_BIAS;
    t <<= ((u & 0x70) >> 4) as i32;
    if u & 0x80 != 0 {
        (MULAW_BIAS - t) as i16
    } else {
        (t - MULAW_BIAS) as i16
    }
}

/// Encodes one linear sample with the reference μ-law compression formula.
const fn mulaw_compress(sample: i16) -> u8 {
    let mut value = sample as i32;
    let sign = if value < 0 { 0x80 } else { 0 };
    if value < 0 {
        value = -value;
    }
    if value > MULAW_CLIP {
        value = MULAW_CLIP;
    }
    value += MULAW_BIAS;
    // Segment = position of the highest set bit above bit 7.
    let mut exponent = 7;
    let mut mask = 0x4000;
    while exponent > 0 && value & mask == 0 {
        exponent -= 1;
        mask >>= 1;
    }
    let mantissa = (value >> (exponent + 3)) & 0x0F;
    !((sign | (exponent << 4) | mantissa) as u8)
}

/// Decodes one A-law byte with the reference expansion formula.
const fn alaw_expand(code: u8) -> i16 {
    let a = code ^ 0x55;
    let mut t = ((a & 0x0F) as i32) << 4;
    let segment = ((a & 0x70) >> 4) as i32;
    match segment {
        0 => t += 8,
        1 => t += 0x108,
        _ => {
            t += 0x108;
            t <<= segment - 1;
        }
    }
    if a & 0x80 != 0 { t as i16 } else { -t as i16 }
}

/// Encodes one linear sample with the reference A-law compression formula.
const fn alaw_compress(sample: i16) -> u8 {
    let mut value = (sample as i32) >> 3;
    let mask: i32 = if value >= 0 {
        0xD5
    } else {
        value = -value - 1;
        0x55
    };
    // Segment ends of the 13-bit magnitude.
    let ends: [i32; 8] = [0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF];
    let mut segment = 0;
    while segment < 8 && value > ends[segment] {
        segment += 1;
    }
    if segment >= 8 {
        return (0x7F ^ mask) as u8;
    }
    let mut code = (segment as i32) << 4;
    if segment < 2 {
        code |= (value >> 1) & 0x0F;
    } else {
        code |= (value >> segment) & 0x0F;
    }
    (code ^ mask) as u8
}

/// Builds the 256-entry μ-law decode table.
const fn build_mulaw_decode() -> [i16; 256] {
    let mut table = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = mulaw_expand(i as u8);
        i += 1;
    }
    table
}

/// Builds the 256-entry A-law decode table.
const fn build_alaw_decode() -> [i16; 256] {
    let mut table = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = alaw_expand(i as u8);
        i += 1;
    }
    table
}

/// Number of μ-law encode table entries: one per 14-bit linear value.
const MULAW_ENCODE_LEN: usize = 1 << 14;
/// Number of A-law encode table entries: one per 13-bit linear value.
const ALAW_ENCODE_LEN: usize = 1 << 13;

/// Builds the μ-law encode table indexed by `(sample >> 2) & 0x3FFF`.
const fn build_mulaw_encode() -> [u8; MULAW_ENCODE_LEN] {
    let mut table = [0u8; MULAW_ENCODE_LEN];
    let mut i = 0;
    while i < MULAW_ENCODE_LEN {
        // Sign-extend the 14-bit index back to a 16-bit sample; the low two
        // bits never change the reference encoder's output.
        let sample = (((i as i32) << 18) >> 16) as i16;
        table[i] = mulaw_compress(sample);
        i += 1;
    }
    table
}

/// Builds the A-law encode table indexed by `(sample >> 3) & 0x1FFF`.
const fn build_alaw_encode() -> [u8; ALAW_ENCODE_LEN] {
    let mut table = [0u8; ALAW_ENCODE_LEN];
    let mut i = 0;
    while i < ALAW_ENCODE_LEN {
        let sample = (((i as i32) << 19) >> 16) as i16;
        table[i] = alaw_compress(sample);
        i += 1;
    }
    table
}

/// μ-law byte to linear PCM16.
pub static MULAW_DECODE: [i16; 256] = build_mulaw_decode();
/// A-law byte to linear PCM16.
pub static ALAW_DECODE: [i16; 256] = build_alaw_decode();
/// 14-bit linear value (`sample >> 2`) to μ-law byte.
static MULAW_ENCODE: [u8; MULAW_ENCODE_LEN] = build_mulaw_encode();
/// 13-bit linear value (`sample >> 3`) to A-law byte.
static ALAW_ENCODE: [u8; ALAW_ENCODE_LEN] = build_alaw_encode();

/// The μ-law byte for silence (what a carrier sends when nobody speaks).
pub const MULAW_SILENCE: u8 = 0xFF;
/// The A-law byte for silence.
pub const ALAW_SILENCE: u8 = 0xD5;

/// Decodes one μ-law byte to linear PCM16.
#[inline]
pub fn mulaw_to_linear(code: u8) -> i16 {
    MULAW_DECODE[code as usize]
}

/// Encodes one linear PCM16 sample to μ-law.
#[inline]
pub fn linear_to_mulaw(sample: i16) -> u8 {
    MULAW_ENCODE[((sample >> 2) as usize) & (MULAW_ENCODE_LEN - 1)]
}

/// Decodes one A-law byte to linear PCM16.
#[inline]
pub fn alaw_to_linear(code: u8) -> i16 {
    ALAW_DECODE[code as usize]
}

/// Encodes one linear PCM16 sample to A-law.
#[inline]
pub fn linear_to_alaw(sample: i16) -> u8 {
    ALAW_ENCODE[((sample >> 3) as usize) & (ALAW_ENCODE_LEN - 1)]
}

/// Decodes μ-law bytes into `output`; converts `min(len)` samples and returns that count.
pub fn decode_mulaw_into(input: &[u8], output: &mut [i16]) -> usize {
    let n = input.len().min(output.len());
    for (out, &code) in output[..n].iter_mut().zip(&input[..n]) {
        *out = mulaw_to_linear(code);
    }
    n
}

/// Encodes PCM16 samples into μ-law `output`; converts `min(len)` samples and returns that count.
pub fn encode_mulaw_into(input: &[i16], output: &mut [u8]) -> usize {
    let n = input.len().min(output.len());
    for (out, &sample) in output[..n].iter_mut().zip(&input[..n]) {
        *out = linear_to_mulaw(sample);
    }
    n
}

/// Decodes A-law bytes into `output`; converts `min(len)` samples and returns that count.
pub fn decode_alaw_into(input: &[u8], output: &mut [i16]) -> usize {
    let n = input.len().min(output.len());
    for (out, &code) in output[..n].iter_mut().zip(&input[..n]) {
        *out = alaw_to_linear(code);
    }
    n
}

/// Encodes PCM16 samples into A-law `output`; converts `min(len)` samples and returns that count.
pub fn encode_alaw_into(input: &[i16], output: &mut [u8]) -> usize {
    let n = input.len().min(output.len());
    for (out, &sample) in output[..n].iter_mut().zip(&input[..n]) {
        *out = linear_to_alaw(sample);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sun/CCITT reference `linear2ulaw`, written independently of the const builders
    /// (segment search over a table of segment ends, 14-bit input).
    fn reference_linear2ulaw(pcm: i16) -> u8 {
        let seg_uend: [i32; 8] = [0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF];
        let mut pcm_val = (pcm as i32) >> 2;
        let mask: i32 = if pcm_val < 0 {
            pcm_val = -pcm_val;
            0x7F
        } else {
            0xFF
        };
        if pcm_val > 8159 {
            pcm_val = 8159;
        }
        pcm_val += 0x84 >> 2;
        let seg = seg_uend.iter().position(|&end| pcm_val <= end).unwrap_or(8);
        if seg >= 8 {
            (0x7F ^ mask) as u8
        } else {
            let uval = ((seg as i32) << 4) | ((pcm_val >> (seg + 1)) & 0xF);
            (uval ^ mask) as u8
        }
    }

    /// Reference `ulaw2linear`.
    fn reference_ulaw2linear(u: u8) -> i16 {
        let u = !u as i32;
        let mut t = ((u & 0x0F) << 3) + 0x84;
        t <<= (u & 0x70) >> 4;
        (if u & 0x80 != 0 { 0x84 - t } else { t - 0x84 }) as i16
    }

    /// Reference `linear2alaw`.
    fn reference_linear2alaw(pcm: i16) -> u8 {
        let seg_aend: [i32; 8] = [0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF];
        let mut pcm_val = (pcm as i32) >> 3;
        let mask: i32 = if pcm_val >= 0 {
            0xD5
        } else {
            pcm_val = -pcm_val - 1;
            0x55
        };
        let seg = seg_aend.iter().position(|&end| pcm_val <= end).unwrap_or(8);
        if seg >= 8 {
            return (0x7F ^ mask) as u8;
        }
        let mut aval = (seg as i32) << 4;
        aval |= if seg < 2 {
            (pcm_val >> 1) & 0xF
        } else {
            (pcm_val >> seg) & 0xF
        };
        (aval ^ mask) as u8
    }

    /// Reference `alaw2linear`.
    fn reference_alaw2linear(a: u8) -> i16 {
        let a = (a ^ 0x55) as i32;
        let mut t = (a & 0xF) << 4;
        let seg = (a & 0x70) >> 4;
        match seg {
            0 => t += 8,
            1 => t += 0x108,
            _ => {
                t += 0x108;
                t <<= seg - 1;
            }
        }
        (if a & 0x80 != 0 { t } else { -t }) as i16
    }

    #[test]
    fn mulaw_tables_match_reference_for_every_input() {
        for code in 0..=255u8 {
            assert_eq!(
                mulaw_to_linear(code),
                reference_ulaw2linear(code),
                "code {code:#x}"
            );
        }
        for sample in i16::MIN..=i16::MAX {
            assert_eq!(
                linear_to_mulaw(sample),
                reference_linear2ulaw(sample),
                "sample {sample}"
            );
        }
    }

    #[test]
    fn alaw_tables_match_reference_for_every_input() {
        for code in 0..=255u8 {
            assert_eq!(
                alaw_to_linear(code),
                reference_alaw2linear(code),
                "code {code:#x}"
            );
        }
        for sample in i16::MIN..=i16::MAX {
            assert_eq!(
                linear_to_alaw(sample),
                reference_linear2alaw(sample),
                "sample {sample}"
            );
        }
    }

    #[test]
    fn known_code_points() {
        assert_eq!(mulaw_to_linear(0xFF), 0);
        assert_eq!(mulaw_to_linear(0x80), 32124);
        assert_eq!(mulaw_to_linear(0x00), -32124);
        assert_eq!(linear_to_mulaw(0), MULAW_SILENCE);
        assert_eq!(alaw_to_linear(0xD5), 8);
        assert_eq!(alaw_to_linear(0x55), -8);
        assert_eq!(alaw_to_linear(0xAA), 32256);
        assert_eq!(linear_to_alaw(0), ALAW_SILENCE);
    }

    #[test]
    fn codes_round_trip_through_linear() {
        for code in 0..=255u8 {
            // 0x7F is μ-law's "negative zero"; it decodes to 0, which encodes as 0xFF.
            if code != 0x7F {
                assert_eq!(
                    linear_to_mulaw(mulaw_to_linear(code)),
                    code,
                    "μ-law {code:#x}"
                );
            }
            assert_eq!(
                linear_to_alaw(alaw_to_linear(code)),
                code,
                "A-law {code:#x}"
            );
        }
    }

    #[test]
    fn tone_round_trip_error_is_within_segment_step() {
        let input: Vec<i16> = (0..800)
            .map(|n| {
                (20_000.0 * (2.0 * std::f32::consts::PI * 1000.0 * n as f32 / 8000.0).sin()) as i16
            })
            .collect();
        let mut mu = vec![0u8; input.len()];
        let mut al = vec![0u8; input.len()];
        let mut back = vec![0i16; input.len()];
        assert_eq!(encode_mulaw_into(&input, &mut mu), input.len());
        decode_mulaw_into(&mu, &mut back);
        for (&a, &b) in input.iter().zip(&back) {
            // Quantisation error is at most half a step; steps grow with the segment (≤ 1024).
            let step = (a.unsigned_abs() as i32 / 16).max(8);
            assert!((a as i32 - b as i32).abs() <= step, "{a} vs {b}");
        }
        encode_alaw_into(&input, &mut al);
        decode_alaw_into(&al, &mut back);
        for (&a, &b) in input.iter().zip(&back) {
            let step = (a.unsigned_abs() as i32 / 16).max(16);
            assert!((a as i32 - b as i32).abs() <= step, "{a} vs {b}");
        }
    }

    #[test]
    fn slice_functions_stop_at_shorter_buffer() {
        let mut out = [0i16; 4];
        assert_eq!(decode_mulaw_into(&[0xFF; 10], &mut out), 4);
        let mut bytes = [0u8; 2];
        assert_eq!(encode_alaw_into(&[0i16; 5], &mut bytes), 2);
        assert_eq!(bytes, [ALAW_SILENCE; 2]);
    }
}

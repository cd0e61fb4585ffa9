#!/usr/bin/env python3
"""Reference features and probabilities of the Smart Turn clips, from Pipecat's own code.

Reads the clips media/examples/smart_turn_clips.rs wrote (raw f32 LE, 16 kHz) from CLIPS_DIR
and writes, into media/tests/fixtures/smart_turn/:
- reference.json: per clip, the probability LocalSmartTurnAnalyzerV3._predict_endpoint
  gives (onnxruntime, one thread, the model bundled in the pinned pipecat-ai wheel), and
  summaries of the whole [80, 800] feature matrix Pipecat's numpy extractor computes
  (`compute_whisper_log_mel_features`): each frame's mean over the bands, each band's mean
  over the frames, the maximum and the minimum;
- features.i16: per clip in manifest order, the last TAIL_FRAMES frames of every band
  ([80][TAIL_FRAMES], band-major), as little-endian i16 of round(value * 8192).

Run through scripts/smart-turn-reference.sh, which pins the packages.
"""

import csv
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pipecat
from pipecat.audio.turn.smart_turn._whisper_features import compute_whisper_log_mel_features
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

TAIL_FRAMES = 128
SCALE = 8192.0
N_SAMPLES = 8 * 16000


def last_eight_seconds(audio: np.ndarray) -> np.ndarray:
    """What _predict_endpoint does before the features: keep the end, pad the front."""
    if len(audio) > N_SAMPLES:
        return audio[-N_SAMPLES:]
    return np.pad(audio, (N_SAMPLES - len(audio), 0), mode="constant", constant_values=0)


def cpu_kernels() -> str:
    """Which int8 kernels onnxruntime picks on this CPU (they round differently), named as
    tests/it/smart_turn.rs names them."""
    flags: list[str] = []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line.split()
                break
    for flag, name in [
        ("amx_int8", "amx"),
        ("avx512_vnni", "avx512-vnni"),
        ("avx_vnni", "avx-vnni"),
        ("avx512f", "avx512"),
    ]:
        if flag in flags:
            return name
    return "avx2"


def main() -> None:
    clips_dir = Path(sys.argv[1])
    out_dir = Path(sys.argv[2])
    with open(out_dir / "clips.tsv", newline="") as f:
        rows = [r for r in csv.reader(f, delimiter="\t") if r and not r[0].startswith("#")]
    names = [r[0] for r in rows[1:]]

    analyzer = LocalSmartTurnAnalyzerV3(cpu_count=1)
    analyzer._sample_rate = 16000  # the clips are at the model's rate: no resampling

    clips = []
    tails = []
    for name in names:
        audio = np.fromfile(clips_dir / f"{name}.f32", dtype="<f4")
        features = compute_whisper_log_mel_features(last_eight_seconds(audio), do_normalize=True)
        probability = analyzer._predict_endpoint(audio)["probability"]
        clips.append(
            {
                "name": name,
                "samples": int(len(audio)),
                "probability": round(float(probability), 7),
                "max": round(float(features.max()), 7),
                "min": round(float(features.min()), 7),
                "frame_means": [round(float(v), 7) for v in features.mean(axis=0, dtype=np.float64)],
                "band_means": [round(float(v), 7) for v in features.mean(axis=1, dtype=np.float64)],
            }
        )
        tails.append(np.round(features[:, -TAIL_FRAMES:].astype(np.float64) * SCALE).astype("<i2"))
        print(f"{name}: probability {probability:.4f}")

    reference = {
        "generated_by": "scripts/smart-turn-reference.sh",
        "pipecat_ai": pipecat.__version__ if hasattr(pipecat, "__version__") else "1.14.0",
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "cpu_kernels": cpu_kernels(),
        "tail_frames": TAIL_FRAMES,
        "tail_scale": SCALE,
        "clips": clips,
    }
    # One clip a line: readable headers, compact numbers.
    head = json.dumps({k: v for k, v in reference.items() if k != "clips"}, indent=1)[:-2]
    body = ",\n  ".join(json.dumps(c, separators=(",", ":")) for c in clips)
    (out_dir / "reference.json").write_text(f'{head},\n "clips": [\n  {body}\n ]\n}}\n')
    np.concatenate([t.ravel() for t in tails]).tofile(out_dir / "features.i16")


if __name__ == "__main__":
    main()

"""Row (c) of the turn-taking benchmark: Smart Turn v3.2 alone, through Pipecat's own code.

Run by pipecat-row.sh inside its pinned venv (pipecat-ai 1.14.0 with the Silero VAD and
Smart Turn v3.2 it ships). Usage:

    python pipecat_row.py CORPUS_DIR OUT_JSON

Each clip goes through what a Pipecat 1.14 phone bot with its defaults runs:
- Twilio's serializer path: mu-law decoded and resampled 8 -> 16 kHz by Pipecat's
  stream resampler (ulaw_to_pcm), one 20 ms carrier packet at a time;
- the Silero VAD analyzer with the default VADParams (confidence 0.7, start 0.2 s,
  stop 0.2 s, min volume 0.6), turned into user started/stopped speaking events as
  Pipecat's VADController does (a change to SPEAKING or to QUIET);
- the default user turn stop strategy, TurnAnalyzerUserTurnStopStrategy over
  LocalSmartTurnAnalyzerV3 (the bundled smart-turn-v3.2-cpu.onnx, one CPU thread):
  every audio frame is appended with the VAD's speaking flag (the analyzer's own 3 s
  silence rule ends a turn), and when the VAD reports a stop the model is asked;
  COMPLETE ends the turn. Transcripts are not waited for (wait_for_transcript=False,
  as in Pipecat's realtime mode), as the benchmark's other rows do not wait for one;
- the default user turn start strategy, VADUserTurnStartStrategy: a VAD start while
  the bot speaks interrupts it (Pipecat's default; no minimum word count).

Audio time, not wall time: the analyzer's buffer is stamped with the clip's clock
(BaseSmartTurn reads time.monotonic() for its pre-speech window, which is replaced
in that module by the clip's clock). An end of turn the model called is placed at the
end of the frame it was asked at plus the model's measured CPU time for that
evaluation (what a live bot would wait), so this row alone is not bit-for-bit
repeatable; the evaluations' times are reported.

Writes OUT_JSON: per clip the end-of-turn times, the times the bot was interrupted,
and the model's evaluations; benches/turn_taking.rs scores it with the same code as
the other rows.
"""

import asyncio
import importlib.metadata
import json
import math
import os
import sys
import time
import types

from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.audio.turn.smart_turn import base_smart_turn
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.utils import create_stream_resampler, ulaw_to_pcm
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

IN_RATE = 8000
RATE = 16000
PACKET = 160  # one 20 ms mu-law packet, as Twilio sends them
FRAME_MS = 20
HOLD_MS = 4000  # as benches/turn_taking/harness.rs: run 4 s past the true end or the agent's end


class ClipClock:
    """The clip's audio clock, standing in for time.monotonic() in base_smart_turn."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now


def run_ms(label):
    anchor = label["end_of_turn_ms"]
    if anchor is None and label["agent_speaking"]:
        anchor = label["agent_speaking"][1]
    if anchor is None:
        anchor = label["caller_onset_ms"]
    return math.ceil((anchor + HOLD_MS) / FRAME_MS) * FRAME_MS


def held(wire, label):
    """The clip's bytes extended with its last second, to the run length."""
    want = run_ms(label) * IN_RATE // 1000
    tail = wire[-IN_RATE:]
    out = bytearray(wire)
    while len(out) < want:
        out += tail[: want - len(out)]
    return bytes(out[:want]) if len(out) > want else bytes(out)


async def run_clip(label, wire, analyzer, clock):
    vad = SileroVADAnalyzer(params=VADParams())
    vad.set_sample_rate(RATE)
    analyzer.set_sample_rate(RATE)
    analyzer.clear()
    resampler = create_stream_resampler()
    agent = label["agent_speaking"]
    agent_state = "silent"
    vad_state = VADState.QUIET
    user_speaking = False
    ends, interrupts, evaluations = [], [], []
    audio = held(wire, label)
    for i in range(len(audio) // PACKET):
        t_ms = (i + 1) * FRAME_MS
        clock.now = t_ms / 1000
        if agent:
            if agent_state == "silent" and agent[0] < t_ms <= agent[1]:
                agent_state = "speaking"
            elif agent_state == "speaking" and t_ms > agent[1]:
                agent_state = "silent"
        pcm = await ulaw_to_pcm(audio[i * PACKET : (i + 1) * PACKET], IN_RATE, RATE, resampler)
        if not pcm:
            continue
        # VADController: only a change to SPEAKING or QUIET is an event.
        new_state = vad._run_analyzer(pcm)
        started = stopped = False
        if new_state != vad_state and new_state not in (VADState.STARTING, VADState.STOPPING):
            started = new_state == VADState.SPEAKING
            stopped = new_state == VADState.QUIET
            vad_state = new_state
        if started:
            user_speaking = True
            analyzer.update_vad_start_secs(vad.params.start_secs)
            if agent_state == "speaking":
                interrupts.append(t_ms)
                agent_state = "yielded"
        state = analyzer.append_audio(pcm, user_speaking)
        if state == EndOfTurnState.COMPLETE:
            # The analyzer's own stop_secs silence ran out.
            ends.append(t_ms)
        if stopped:
            user_speaking = False
            started_at = time.process_time()
            state, metrics = await analyzer.analyze_end_of_turn()
            cpu_ms = (time.process_time() - started_at) * 1000
            evaluations.append({
                "at_ms": t_ms,
                "complete": state == EndOfTurnState.COMPLETE,
                "probability": round(metrics.probability, 4) if metrics else None,
                "cpu_ms": round(cpu_ms, 2),
            })
            if state == EndOfTurnState.COMPLETE:
                ends.append(t_ms + math.ceil(cpu_ms))
    return {"id": label["id"], "end_of_turn_ms": ends, "interrupt_ms": interrupts, "evaluations": evaluations}


async def main():
    if len(sys.argv) != 3:
        sys.exit("usage: pipecat_row.py CORPUS_DIR OUT_JSON")
    corpus_dir, out_path = sys.argv[1], sys.argv[2]
    clock = ClipClock()
    # BaseSmartTurn stamps its buffer with time.monotonic(); give it the clip's clock
    # (and keep perf_counter, which it uses to time the model).
    base_smart_turn.time = types.SimpleNamespace(monotonic=clock.monotonic, perf_counter=time.perf_counter)
    analyzer = LocalSmartTurnAnalyzerV3(cpu_count=1)
    with open(os.path.join(corpus_dir, "labels.jsonl")) as f:
        labels = [json.loads(line) for line in f if line.strip()]
    clips = []
    for n, label in enumerate(labels):
        with open(os.path.join(corpus_dir, label["file"]), "rb") as f:
            wire = f.read()
        clips.append(await run_clip(label, wire, analyzer, clock))
        print(f"[{n + 1:3d}/{len(labels)}] {label['id']}: ends {clips[-1]['end_of_turn_ms']}", flush=True)
    cpu = sorted(e["cpu_ms"] for c in clips for e in c["evaluations"])
    out = {
        "row": "Smart Turn v3.2 alone (Pipecat 1.14.0 defaults: Silero VAD, LocalSmartTurnAnalyzerV3)",
        "pipecat_ai": importlib.metadata.version("pipecat-ai"),
        "onnxruntime": importlib.metadata.version("onnxruntime"),
        "evaluations": len(cpu),
        "cpu_ms_per_evaluation_p50": cpu[len(cpu) // 2] if cpu else None,
        "cpu_ms_per_evaluation_mean": round(sum(cpu) / len(cpu), 2) if cpu else None,
        "clips": clips,
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{len(clips)} clips, {len(cpu)} evaluations, CPU per evaluation p50 {out['cpu_ms_per_evaluation_p50']} ms -> {out_path}")


if __name__ == "__main__":
    asyncio.run(main())

#!/usr/bin/env bash
# Regenerates media/tests/fixtures/smart_turn/{reference.json,features.i16}: the Whisper
# features and the Smart Turn probabilities of the clips in clips.tsv, computed by Pipecat's
# own code (its numpy feature extractor and LocalSmartTurnAnalyzerV3 on onnxruntime) from
# the exact 16 kHz samples the Rust tests build. media/tests/whisper_mel.rs and
# tests/it/smart_turn.rs compare against them; CI does not run this.
#
#   scripts/smart-turn-reference.sh
#
# The packages are pinned and installed from PyPI into a venv kept at
# ~/.cache/voxline/smart-turn-reference-venv (pipecat-ai without its dependencies: only what
# the smart-turn module imports).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VOXLINE_CACHE_DIR:-$HOME/.cache/voxline}/smart-turn-reference-venv"
PACKAGES=(
  numpy==2.2.6 onnxruntime==1.24.3 protobuf==6.33.0 flatbuffers==25.12.19 packaging==26.4
  sympy==1.14.0 mpmath==1.3.0 coloredlogs==15.0.1 humanfriendly==10.0
  loguru==0.7.3 soxr==1.0.0 wait_for2==0.4.1 pydantic==2.12.5
)
if [ ! -f "$VENV/.installed" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --no-deps "${PACKAGES[@]}" \
    pydantic-core==2.41.5 typing-extensions==4.15.0 typing-inspection==0.4.2 annotated-types==0.7.0
  "$VENV/bin/pip" install -q --no-deps pipecat-ai==1.14.0
  touch "$VENV/.installed"
fi
CLIPS=target/smart-turn-clips
cargo run -q -p voxline-media --example smart_turn_clips -- "$CLIPS"
"$VENV/bin/python" scripts/smart-turn-reference.py "$CLIPS" media/tests/fixtures/smart_turn

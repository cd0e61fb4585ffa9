#!/usr/bin/env bash
# Records row (c) of the turn-taking benchmark: Smart Turn v3.2 alone, through
# Pipecat 1.14.0's own VAD and analyzer (pipecat_row.py says exactly what runs), over
# the corpus in media/tests/fixtures/turns/, into
# benches/turn_taking/pipecat-smart-turn-v3.json, which `cargo bench --bench
# turn_taking` scores with the same code as its other rows.
#
#   scripts/turn-corpus/pipecat-row.sh
#
# Needs python3 >= 3.10 with venv. pipecat-ai and its dependencies are pinned in
# requirements-pipecat.txt and constraints-pipecat.txt beside this script and
# installed from PyPI into ${VOXLINE_PIPECAT_VENV:-~/.cache/voxline/turn-corpus/venv-pipecat}
# (once; reinstalled when a pin changes). The model runs on one CPU thread; its measured
# CPU time per evaluation is added to each end of turn it calls, so reruns differ by
# a few milliseconds.
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
VENV=${VOXLINE_PIPECAT_VENV:-$HOME/.cache/voxline/turn-corpus/venv-pipecat}
PYTHON=${VOXLINE_PYTHON:-python3}
die() { echo "pipecat-row: error: $*" >&2; exit 1; }
[[ -f $ROOT/media/tests/fixtures/turns/labels.jsonl ]] || die "no corpus; run scripts/turn-corpus/generate.sh"
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 DO_NOT_TRACK=1 PIPECAT_SMART_TURN_LOG_DATA=0
if [[ ! -x $VENV/bin/python ]]; then
  command -v "$PYTHON" >/dev/null || die "needs $PYTHON (>= 3.10, with venv); set VOXLINE_PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
STAMP=$VENV/.voxline-pipecat-row
want=$(cat "$SCRIPT_DIR/requirements-pipecat.txt" "$SCRIPT_DIR/constraints-pipecat.txt" | sha256sum | cut -d' ' -f1)
if [[ ! -f $STAMP || $(<"$STAMP") != "$want" ]]; then
  "$VENV/bin/python" -m pip install --no-input -q -r "$SCRIPT_DIR/requirements-pipecat.txt" \
    -c "$SCRIPT_DIR/constraints-pipecat.txt"
  echo "$want" >"$STAMP"
fi
# Pipecat logs every VAD and turn decision at debug level; warnings are enough here.
export LOGURU_LEVEL=WARNING
"$VENV/bin/python" "$SCRIPT_DIR/pipecat_row.py" "$ROOT/media/tests/fixtures/turns" \
  "$ROOT/benches/turn_taking/pipecat-smart-turn-v3.json"

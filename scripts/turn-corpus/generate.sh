#!/usr/bin/env bash
# Regenerates the turn-taking corpus in media/tests/fixtures/turns/: 154 labelled
# clips of a caller's side of a call (complete answers, thinking pauses, dictated
# numbers, dates, amounts and emails, backchannels and interruptions over the agent),
# spoken by Piper (en_US-joe-medium, the voice scripts/local-models.sh serves) and
# espeak-ng, band-limited to the telephone band, with line noise at 25-35 dB SNR,
# stored as raw 8 kHz G.711 mu-law, plus labels.jsonl (one JSON record per clip: the
# words with their times, the segments, the pauses, the true end of the turn, the
# agent's speaking interval and the caller's onset). What each clip says is in
# corpus.py; how it is rendered in generate.py. benches/turn_taking.rs and
# tests/it/turn_corpus.rs read them; CI does not run this.
#
#   scripts/turn-corpus/generate.sh
#
# Needs python3 >= 3.10 with venv, espeak-ng and sox (Debian: apt-get install
# espeak-ng sox). The Python packages are pinned in requirements.txt and
# constraints.txt beside this script and installed from PyPI into
# ${VOXLINE_TURN_CORPUS_VENV:-~/.cache/voxline/turn-corpus/venv} (once; reinstalled
# when a pin changes). Deterministic given the pins and the Debian versions of
# espeak-ng and sox (the committed corpus: espeak-ng 1.51, SoX 14.4.2): Piper's noise
# and the line noise are seeded per clip.
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
OUT=$ROOT/media/tests/fixtures/turns
VENV=${VOXLINE_TURN_CORPUS_VENV:-$HOME/.cache/voxline/turn-corpus/venv}
PYTHON=${VOXLINE_PYTHON:-python3}
die() { echo "turn-corpus: error: $*" >&2; exit 1; }
for tool in espeak-ng sox; do
  command -v "$tool" >/dev/null || die "needs $tool (Debian: apt-get install espeak-ng sox)"
done
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1
if [[ ! -x $VENV/bin/python ]]; then
  command -v "$PYTHON" >/dev/null || die "needs $PYTHON (>= 3.10, with venv); set VOXLINE_PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
STAMP=$VENV/.voxline-turn-corpus
want=$(cat "$SCRIPT_DIR/requirements.txt" "$SCRIPT_DIR/constraints.txt" | sha256sum | cut -d' ' -f1)
if [[ ! -f $STAMP || $(<"$STAMP") != "$want" ]]; then
  "$VENV/bin/python" -m pip install --no-input -q -r "$SCRIPT_DIR/requirements.txt" -c "$SCRIPT_DIR/constraints.txt"
  echo "$want" >"$STAMP"
fi
echo "turn-corpus: $(espeak-ng --version | head -n 1); $(sox --version)"
cd "$SCRIPT_DIR"
"$VENV/bin/python" generate.py "$OUT"
echo "turn-corpus: $(du -sh --apparent-size "$OUT" | cut -f1) in $OUT"

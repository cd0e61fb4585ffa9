#!/usr/bin/env bash
# Pipecat's per-call CPU floor beside Voxline's per-call CPU (issue 34, point 4).
#
#   benches/pipecat-floor/run.sh
#
# 1. Installs pipecat-ai (requirements.txt: every package pinned with its sha256) into
#    ${VOXLINE_CACHE:-~/.cache/voxline}/pipecat-floor-venv, once; later runs reuse it and fetch
#    nothing.
# 2. Pipecat: for each count in PIPECAT_CALLS, a fresh echo_server.py (one process, one worker)
#    and pipecat-floor-client with that many Twilio callers; the client reads the server's /proc.
# 3. Voxline: for each count in VOXLINE_CALLS, a fresh `voxline serve` (release build, temporary
#    data directory, SQLite, VOXLINE_SIP_LISTEN=off), a workspace made with the admin CLI, and
#    `voxline loadgen --fleet twilio`, whose callees run in the load generator's process, so the
#    server's /proc figures are the agent side alone.
# 4. Prints a table of both and the ratio Pipecat / Voxline of CPU per call at every pairing.
#
# Settings (environment):
#   PIPECAT_CALLS="50 100"     Pipecat's call counts        PIPECAT_DURATION=60 seconds per run
#   VOXLINE_CALLS="300 1000"   Voxline's call counts        VOXLINE_DURATION=60 seconds per run
#   PIPECAT_ONLY=1             skip Voxline                 VOXLINE_ONLY=1 skip Pipecat
#   VOXLINE_FLEET=twilio       loadgen's --fleet; empty: no --fleet flag (a --target server's own
#                              sim carrier plays the callees inside it, so its figures include them)
#   VOXLINE_LOADGEN_ARGS=...   more loadgen flags (word-split), e.g. "--fleet-threads 2"
#   SKIP_BUILD=1               use the binaries already built (CARGO_TARGET_DIR or ./target)
#   OUT=DIR                    keep each run's JSON and logs there (default: a new temp dir)
#   PYTHON=python3.11          the interpreter the venv is made with (CPython 3.11: the hashes)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${VOXLINE_CACHE:-$HOME/.cache/voxline}
VENV=$CACHE/pipecat-floor-venv
PYTHON=${PYTHON:-python3}
PIPECAT_CALLS=${PIPECAT_CALLS:-50 100}
VOXLINE_CALLS=${VOXLINE_CALLS:-300 1000}
PIPECAT_DURATION=${PIPECAT_DURATION:-60}
VOXLINE_DURATION=${VOXLINE_DURATION:-60}
VOXLINE_FLEET=${VOXLINE_FLEET-twilio}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
CLIENT=${CLIENT:-$TARGET_DIR/release/pipecat-floor-client}
BIN=${BIN:-$TARGET_DIR/release/voxline}
OUT=${OUT:-$(mktemp -d -t pipecat-floor.XXXXXX)}
mkdir -p "$OUT"

PIDS=()
TEMP_DIRS=()
cleanup() {
  local pid dir
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for dir in "${TEMP_DIRS[@]}"; do rm -rf "$dir"; done
}
trap cleanup EXIT

say() { printf '%s\n' "$*" >&2; }

# A free TCP port on 127.0.0.1.
free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits for a URL to answer 200, or fails after 30 s.
wait_healthy() {
  local url=$1 pid=$2
  for _ in $(seq 1 150); do
    curl -sf "$url" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { say "the server (pid $pid) exited before answering $url"; return 1; }
    sleep 0.2
  done
  say "no answer from $url after 30 s"
  return 1
}

stop_server() {
  local pid=$1 p remaining=()
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for p in "${PIDS[@]}"; do [ "$p" = "$pid" ] || remaining+=("$p"); done
  PIDS=("${remaining[@]}")
}

load_average() { cut -d' ' -f1-3 /proc/loadavg; }

# --- the venv, once -------------------------------------------------------------------------
install_venv() {
  local stamp=$VENV/.requirements.sha256 want
  want=$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  local version
  version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$version" != "3.11" ]; then
    say "requirements.txt pins the CPython 3.11 wheels; $PYTHON is $version (set PYTHON=python3.11)"
    exit 2
  fi
  say "installing pipecat-ai into $VENV (once)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r "$HERE/requirements.txt"
  "$VENV/bin/pip" check --disable-pip-version-check >/dev/null
  printf '%s\n' "$want" >"$stamp"
}

# --- builds ---------------------------------------------------------------------------------
build() {
  [ "${SKIP_BUILD:-}" = 1 ] && return 0
  local packages=(-p pipecat-floor-client)
  [ "${PIPECAT_ONLY:-}" = 1 ] || packages+=(-p voxline)
  say "cargo build --release ${packages[*]}"
  (cd "$ROOT" && cargo build --quiet --release "${packages[@]}")
}

# --- Pipecat --------------------------------------------------------------------------------
run_pipecat() {
  local calls=$1 port pid
  port=$(free_port)
  "$VENV/bin/python" "$HERE/echo_server.py" --port "$port" >"$OUT/pipecat-$calls.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_healthy "http://127.0.0.1:$port/healthz" "$pid"
  say "pipecat: $calls calls for ${PIPECAT_DURATION}s (server pid $pid, load $(load_average))"
  "$CLIENT" --url "ws://127.0.0.1:$port/ws" --calls "$calls" --duration "$PIPECAT_DURATION" \
    --server-pid "$pid" >"$OUT/pipecat-$calls.json"
  stop_server "$pid"
}

# --- Voxline --------------------------------------------------------------------------------
run_voxline() {
  local calls=$1 port admin_port data pid org created key key_id person fleet=()
  [ -z "$VOXLINE_FLEET" ] || fleet=(--fleet "$VOXLINE_FLEET")
  port=$(free_port)
  admin_port=$(free_port)
  data=$(mktemp -d -t voxline-floor.XXXXXX)
  TEMP_DIRS+=("$data")
  VOXLINE_SIP_LISTEN=off "$BIN" --data-dir "$data" --secret pipecat-floor serve --no-bootstrap \
    --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin_port" \
    >"$OUT/voxline-$calls.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_healthy "http://127.0.0.1:$port/healthz" "$pid"
  admin() { "$BIN" --data-dir "$data" --secret pipecat-floor admin "$@"; }
  json_field() { "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
  org=$(admin org create --name "Pipecat floor" --concurrency $((calls + 200)) \
    --minute-quota 100000000 | json_field id)
  created=$(admin key create --org "$org" --name pipecat-floor)
  key=$(json_field key <<<"$created")
  key_id=$(json_field id <<<"$created")
  admin key limits "$key_id" --daily 10000000 --monthly 100000000 >/dev/null
  admin number add --org "$org" --phone +918035740199 --provider sim --default >/dev/null
  admin wallet credit --org "$org" --paise 100000000000 >/dev/null
  # --fleet twilio stores the workspace's twilio credential through the console.
  person=$(admin user create --org "$org" --email pipecat-floor@example.com --role admin)
  export VOXLINE_CONSOLE_EMAIL=pipecat-floor@example.com
  VOXLINE_CONSOLE_PASSWORD=$(json_field password <<<"$person")
  export VOXLINE_CONSOLE_PASSWORD
  say "voxline: $calls calls for ${VOXLINE_DURATION}s (server pid $pid, load $(load_average))"
  # shellcheck disable=SC2086 # VOXLINE_LOADGEN_ARGS is word-split on purpose.
  "$BIN" loadgen --target "http://127.0.0.1:$port" --key "$key" --server-pid "$pid" \
    "${fleet[@]}" --calls "$calls" --concurrency "$calls" --duration "$VOXLINE_DURATION" --json \
    --script '["Yes, I have a minute.", "Thank you, goodbye!"]' ${VOXLINE_LOADGEN_ARGS:-} \
    >"$OUT/voxline-$calls.json" 2>"$OUT/voxline-$calls.loadgen.log" || {
      say "voxline loadgen failed at $calls calls:"
      tail -20 "$OUT/voxline-$calls.loadgen.log" >&2
      rm -f "$OUT/voxline-$calls.json"
      print_table # what did run
      exit 1
    }
  stop_server "$pid"
}

# --- the table ------------------------------------------------------------------------------
print_table() {
  "$PYTHON" - "$OUT" <<'PY'
import glob, json, os, re, sys

out = sys.argv[1]

def runs(server):
    found = []
    for path in glob.glob(os.path.join(out, f"{server}-*.json")):
        match = re.fullmatch(rf"{server}-(\d+)\.json", os.path.basename(path))
        if match:
            with open(path) as f:
                found.append((int(match.group(1)), json.load(f)))
    return sorted(found, key=lambda run: run[0])

def fmt(value, digits):
    return "–" if value is None else f"{value:.{digits}f}"

rows, pipecat, voxline = [], [], []
for calls, r in runs("pipecat"):
    p = r["plateau"]
    u = p.get("usage") or {}
    cpu = u.get("cpuPercentOfCorePerCall")
    pipecat.append((calls, cpu, p["framesReturnedPerSecondPerCall"]))
    rows.append(("Pipecat 1.14.0 echo", calls, cpu, u.get("rssKibPerCall"),
                 f'{p["framesReturnedPerSecondPerCall"]:.1f} (min {p["framesReturnedPerSecondMin"]:.1f}) of {p["framesSentPerSecondPerCall"]:.1f} sent',
                 f'{r["started"]}/{r["calls"]} started, {r["failed"]} failed, {p["liveCalls"]} on the plateau, {u.get("plateauCpuCores", 0):.2f} cores'))
for calls, r in runs("voxline"):
    u = r.get("usage") or {}
    cpu = u.get("cpuPercentOfCorePerCall")
    voxline.append((calls, cpu))
    frames = r.get("frames") or {}
    rows.append((f'Voxline, fleet {r.get("fleet", "of the server (no --fleet)")}', calls, cpu, u.get("rssKibPerCall"),
                 "– (agent speech, not an echo)",
                 f'{r.get("answered")}/{r.get("calls")} answered, {r.get("failed")} failed, late frames {frames.get("lateFrames")} of {frames.get("frames")}, {u.get("plateauCpuCores", 0):.2f} cores'
                 + (f', {r["twilioRest"]["dials"]} dials to the fleet\'s REST' if r.get("twilioRest") else "")))

print("| server | calls | CPU % of a core per call | RSS KiB per call | media frames/s returned per call | notes |")
print("|---|---|---|---|---|---|")
for server, calls, cpu, rss, frames, notes in rows:
    print(f"| {server} | {calls} | {fmt(cpu, 3)} | {fmt(rss, 0)} | {frames} | {notes} |")
if pipecat and voxline:
    print()
    print("| Pipecat calls | Voxline calls | Pipecat CPU per call | Voxline CPU per call | Pipecat / Voxline |")
    print("|---|---|---|---|---|")
    for p_calls, p_cpu, p_rate in pipecat:
        # A Pipecat process that returns fewer than 49 of 50 frames a second is saturated: its
        # CPU per call is then what it could spend, not what a call costs.
        saturated = f" (Pipecat saturated: {p_rate:.1f} of 50 frames/s returned)" if p_rate < 49 else ""
        for v_calls, v_cpu in voxline:
            ratio = "–" if not p_cpu or not v_cpu else f"{p_cpu / v_cpu:.1f}×{saturated}"
            print(f"| {p_calls} | {v_calls} | {fmt(p_cpu, 3)} % | {fmt(v_cpu, 3)} % | {ratio} |")
PY
}

say "results in $OUT (load $(load_average))"
[ "${VOXLINE_ONLY:-}" = 1 ] || install_venv
build
if [ "${VOXLINE_ONLY:-}" != 1 ]; then
  for calls in $PIPECAT_CALLS; do run_pipecat "$calls"; done
fi
if [ "${PIPECAT_ONLY:-}" != 1 ]; then
  for calls in $VOXLINE_CALLS; do run_voxline "$calls"; done
fi
print_table

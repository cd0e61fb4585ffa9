#!/usr/bin/env bash
# Checks the served OpenAPI document against the server itself: starts a fresh
# server (SQLite in a temp data dir, a free port, the Demo workspace's key),
# validates /openapi.json with openapi-spec-validator, then runs schemathesis
# with every check, stateless and stateful, bounded in time. Any 5xx, schema
# mismatch, undocumented status or valid request refused fails the run.
#
# Usage: .ci/schemathesis.sh [path/to/voxline]   (default: target/debug/voxline)
# Known failures are in .ci/schemathesis-baseline.json: rules JSON Schema
# cannot state (a number libphonenumber calls valid, a schedule in the
# future, minScore <= maxScore, a stored credential), each with its reason;
# anything else fails. SCHEMATHESIS_EXTRA=--baseline-update records new ones.
# Tunables: SCHEMATHESIS_MAX_EXAMPLES (default 50), SCHEMATHESIS_BUDGET_SECONDS
# (default 240, the whole run's ceiling), SCHEMATHESIS_VENV (default a venv
# under target/).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-target/debug/voxline}
max_examples=${SCHEMATHESIS_MAX_EXAMPLES:-50}
budget=${SCHEMATHESIS_BUDGET_SECONDS:-240}
venv=${SCHEMATHESIS_VENV:-target/schemathesis-venv}

# Pinned: a new release can add checks and fail a build that did not change.
if [ ! -x "$venv/bin/schemathesis" ]; then
  # Debian's python3 needs python3-venv for this; CI runs as root.
  python3 -m venv "$venv" 2>/dev/null || {
    rm -rf "$venv"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  }
  "$venv/bin/pip" install -q "schemathesis==4.32.5" "openapi-spec-validator==0.9.0"
fi

venv=$(cd "$venv" && pwd)

data=$(mktemp -d)
server_pid=""
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  [ -z "$server_pid" ] || wait "$server_pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
admin_port=$(free_port)
api="http://127.0.0.1:$port"

# Sim calls ring and end quickly, so placed calls do not pile up.
VOXLINE_SIM_RING_SECONDS=1 "$bin" --data-dir "$data" serve \
  --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin_port" \
  >"$data/server.log" 2>&1 &
server_pid=$!

key=""
for _ in $(seq 1 100); do
  key=$(grep -o 'acai_[A-Za-z0-9]*' "$data/server.log" | head -n1 || true)
  [ -n "$key" ] && curl -sf "$api/healthz" >/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$data/server.log"; exit 1; }
  sleep 0.2
done
[ -n "$key" ] || { echo "no API key in the server log"; cat "$data/server.log"; exit 1; }
# The Demo key's daily cap (5,000) would end the run early; lift it.
org=$(grep -o 'Demo workspace ([0-9a-f-]*)' "$data/server.log" | tr -d '()' | cut -d' ' -f3)
key_id=$("$bin" --data-dir "$data" admin key list --org "$org" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["keys"][0]["id"])')
"$bin" --data-dir "$data" admin key limits "$key_id" --daily 10000000 --monthly 100000000 >/dev/null

curl -sf "$api/openapi.json" -o "$data/openapi.json"
"$venv/bin/openapi-spec-validator" "$data/openapi.json"

# From the temp dir: schemathesis keeps its working files (.schemathesis/)
# in the current directory.
root=$PWD
status=0
(cd "$data" && timeout --signal=INT --kill-after=20 "$budget" \
  "$venv/bin/schemathesis" run "$api/openapi.json" \
  --url "$api" \
  --header "Authorization: Bearer $key" \
  --checks all \
  --phases examples,coverage,fuzzing,stateful \
  --max-examples "$max_examples" \
  --max-failures 50 \
  --request-timeout 20 \
  --no-color \
  --seed 1 \
  --generation-database none \
  --baseline "$root/.ci/schemathesis-baseline.json" \
  ${SCHEMATHESIS_EXTRA:-}) \
  || status=$?
if [ "$status" -ne 0 ]; then
  echo "schemathesis failed (exit $status); the server's log:"
  tail -n 50 "$data/server.log"
fi
exit "$status"

#!/usr/bin/env bash
# Measures N `voxline serve` nodes on one Postgres database, for N = 1, 2, 3
# (or the counts given), all on this machine: calls carried per node, the
# nodes' CPU per call, and Postgres' transactions, rows written and CPU per
# call. Each N gets a fresh database; loadgen places the calls round-robin
# over the nodes' URLs.
#
#   scripts/scale-out-bench.sh [CALLS] [NODE_COUNTS...]
#   e.g. scripts/scale-out-bench.sh 300 1 2 3
#
# Needs target/release/voxline (cargo build --release) and a Postgres server
# at $PG_ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres) that
# this user may create databases on; reads Postgres' CPU from /proc, so run it
# on the database's machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/voxline}
PG_ADMIN_URL=${PG_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
CALLS=${1:-300}
shift || true
COUNTS=("${@:-1 2 3}")
[ "${#COUNTS[@]}" -gt 0 ] || COUNTS=(1 2 3)
read -r -a COUNTS <<<"${COUNTS[*]}"
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 2; }
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

ticks() { # utime+stime of a process, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}
pg_ticks() { # every postgres process' CPU, in clock ticks
  local total=0 pid
  for pid in $(pgrep -x postgres || true); do total=$((total + $(ticks "$pid"))); done
  echo "$total"
}
psql_admin() { psql "$PG_ADMIN_URL" -Atq -c "$1"; }
HZ=$(getconf CLK_TCK)

printf '| nodes | calls ended | calls per node | node CPU per call (ms) | Postgres CPU per call (ms) | Postgres transactions per call | rows written per call |\n'
printf '|---|---|---|---|---|---|---|\n'
for n in "${COUNTS[@]}"; do
  db="voxline_bench_$$_$n"
  psql_admin "CREATE DATABASE $db"
  url="${PG_ADMIN_URL%/*}/$db"
  PIDS=()
  targets=()
  for i in $(seq 0 $((n - 1))); do
    port=$((18180 + i))
    mkdir -p "$WORK/n$n-$i"
    VOXLINE_SIM_LLM_TOKEN_MS=0 "$BIN" --data-dir "$WORK/n$n-$i" --database-url "$url" --secret bench \
      serve --no-bootstrap --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((19180 + i))" \
      --node-id "bench-$i" >"$WORK/n$n-$i.log" 2>&1 &
    PIDS+=($!)
    targets+=("http://127.0.0.1:$port")
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
  done
  admin() { "$BIN" --database-url "$url" --secret bench admin "$@"; }
  org=$(admin org create --name Bench --concurrency 2000 --minute-quota 100000000 | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  key=$(admin key create --org "$org" --name bench | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("key") or d["apiKey"])')
  admin number add --org "$org" --phone "+9180357$((40000 + n))" --default >/dev/null
  admin wallet credit --org "$org" --paise 100000000000 >/dev/null
  node_before=0; for pid in "${PIDS[@]}"; do node_before=$((node_before + $(ticks "$pid"))); done
  pg_before=$(pg_ticks)
  read -r xact_before rows_before < <(psql "$url" -Atq -F ' ' -c \
    "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = current_database()")
  target_list=$(IFS=,; echo "${targets[*]}")
  "$BIN" loadgen --target "$target_list" --key "$key" --calls "$CALLS" --concurrency "$CALLS" \
    --duration 60 --sim-llm-token-ms 0 --json \
    --script '["Yes, I have a minute.", "Thank you, goodbye!"]' >"$WORK/loadgen-$n.json" 2>"$WORK/loadgen-$n.err" || {
      echo "loadgen failed for $n node(s):" >&2; tail -20 "$WORK/loadgen-$n.err" >&2; exit 1; }
  sleep 3 # let post-call work and the outbox settle into the counters
  node_after=0; for pid in "${PIDS[@]}"; do node_after=$((node_after + $(ticks "$pid"))); done
  pg_after=$(pg_ticks)
  read -r xact_after rows_after < <(psql "$url" -Atq -F ' ' -c \
    "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = current_database()")
  ended=$(psql "$url" -Atq -c "SELECT COUNT(*) FROM calls WHERE status NOT IN ('queued', 'ringing', 'in-progress')")
  per_node=$(psql "$url" -Atq -c "SELECT string_agg(node_id || ': ' || n, ', ' ORDER BY node_id) FROM (SELECT node_id, COUNT(*) n FROM calls GROUP BY node_id) t")
  python3 - "$n" "$ended" "$per_node" "$node_before" "$node_after" "$pg_before" "$pg_after" \
    "$xact_before" "$xact_after" "$rows_before" "$rows_after" "$HZ" <<'PY'
import sys
n, ended, per_node = sys.argv[1], int(sys.argv[2]), sys.argv[3]
nb, na, pb, pa, xb, xa, rb, ra, hz = map(int, sys.argv[4:13])
per = max(ended, 1)
ms = lambda t: t * 1000 / hz / per
print(f"| {n} | {ended} | {per_node} | {ms(na - nb):.1f} | {ms(pa - pb):.1f} | {(xa - xb) / per:.1f} | {(ra - rb) / per:.1f} |")
PY
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
  psql_admin "DROP DATABASE IF EXISTS $db WITH (FORCE)"
done

#!/usr/bin/env bash
# Closed-loop throughput and generator CPU against one Redis node vs a 3-primary Redis
# Cluster on this machine, same run: every server pinned to core 0 (so both targets get one
# core of server CPU), one generator shard pinned to core 1, 50 connections (per node, in
# the cluster), pipeline 16, SET:GET 1:10, 32-byte values, 100,000 keys prefilled.
# Prints each target's throughput, the generator's CPU seconds per million requests, and
# the ratios; the cluster run must route (3 nodes in the report, no errors) or it is no
# measurement.
#
#   bench/cluster-throughput.sh [REQUESTS]      default 1,000,000
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
SERVER=${CREST_SERVER:-redis-server}
cargo build --release --bins -q
work=$(mktemp -d); pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
server() { # port, extra args...
  local p=$1; shift; mkdir -p "$work/$p"
  taskset -c 0 "$SERVER" --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/$p" "$@" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 150); do redis-cli -p "$p" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "cluster-throughput.sh: $SERVER on $p did not start" >&2; exit 1
}
SINGLE=$(port); server "$SINGLE"
# A cluster node also listens on port + 10000 (its bus): keep that a valid, free port.
bus_port() { while :; do local p; p=$(port); [ "$p" -lt 55000 ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null && { echo "$p"; return; }; done; }
C=(); for _ in 1 2 3; do p=$(bus_port); C+=("$p"); server "$p" --cluster-enabled yes --cluster-config-file nodes.conf; done
redis-cli --cluster create "${C[@]/#/127.0.0.1:}" --cluster-yes >/dev/null
for _ in $(seq 100); do
  ok=1; for p in "${C[@]}"; do redis-cli -p "$p" cluster info | grep -q cluster_state:ok || ok=0; done
  [ $ok = 1 ] && break; sleep 0.2
done
[ $ok = 1 ] || { echo "cluster-throughput.sh: the cluster did not become ok" >&2; exit 1; }

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# One measured closed-loop run against $1 (extra crest args after it); prints
# "<report.json> <worker CPU ticks in the run's window>".
measure() {
  local target=$1 tag=$2; shift 2
  local cp; cp=$(port)
  taskset -c 0 target/release/crest run --listen "127.0.0.1:$cp" --workers 1 --wait-timeout 30s \
    --target "$target" --rate max --requests "$N" --pipeline 16 --connections 50 --ratio 1:10 \
    --keys 100000 --prefill --seed 1 --out "$work/$tag" "$@" >/dev/null 2>"$work/$tag.err" &
  local cpid=$!; pids+=($cpid)
  target/release/crest-worker --coordinator "http://127.0.0.1:$cp" --cpus 1 --threads 1 2>"$work/$tag.worker.err" &
  local wpid=$!; pids+=($wpid)
  # The window opens at "crest: run <id>:" (after the prefill; the start is 1 s ahead).
  local seen=
  for _ in $(seq 1200); do grep -q "^crest: run " "$work/$tag.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
  [ -n "$seen" ] || { echo "cluster-throughput.sh: the $tag run did not start within 60 s; no CPU window" >&2; cat "$work/$tag.err" >&2; exit 1; }
  local c0 c1; c0=$(cpu "$wpid"); wait "$cpid"; c1=$(cpu "$wpid")
  grep -q "crest: report written" "$work/$tag.err" || { echo "cluster-throughput.sh: the $tag run wrote no report" >&2; cat "$work/$tag.err" >&2; exit 1; }
  kill "$wpid" 2>/dev/null || true
  echo "$work/$tag/report.json $((c1 - c0))"
}
read -r single_json single_ticks < <(measure "127.0.0.1:$SINGLE" single --no-cluster)
read -r cluster_json cluster_ticks < <(measure "127.0.0.1:${C[1]}" cluster --cluster)
python3 - "$single_json" "$single_ticks" "$cluster_json" "$cluster_ticks" "$(getconf CLK_TCK)" <<'PY'
import json, sys
hz = int(sys.argv[5])
rows = []
for path, ticks, name in ((sys.argv[1], int(sys.argv[2]), "single node"), (sys.argv[3], int(sys.argv[4]), "3-node cluster")):
    r = json.load(open(path)); t = r["totals"]
    if t["errors"] or t["completed"] == 0:
        sys.exit(f"cluster-throughput.sh: {name}: {t['errors']} errors, {t['completed']} completed: no measurement")
    cpu = ticks / hz
    rows.append((name, t["achieved_rate"], cpu / t["completed"] * 1e6, t["latency_us"]["p99"], len(r["nodes"])))
if rows[1][4] != 3:
    sys.exit(f"cluster-throughput.sh: the cluster run reached {rows[1][4]} nodes, not 3: no measurement")
for name, rps, cpm, p99, nodes in rows:
    print(f"{name:15} {rps:>10,.0f} req/s  {cpm:6.2f} generator CPU s per million  p99 {p99/1000:.2f} ms  ({nodes} node(s))")
print(f"cluster/single: throughput {rows[1][1] / rows[0][1]:.3f}, generator CPU per request {rows[1][2] / rows[0][2]:.3f}")
PY

#!/usr/bin/env bash
# Core benchmark (issue "Crest core"): 20,000 req/s, SET:GET 1:10, 1 KB values, 50
# connections, pipeline 1, against Valkey pinned to core 0, one crest-worker shard pinned
# to core 1. Prints the achieved rate over the run and per second, schedule lag p99, and
# the worker's CPU seconds (user + sys, from /proc) per million requests.
#
#   bench/core.sh [RATE] [DURATION_S] [PACER]     defaults: 20000 20 sleep
#   PIPELINE=16 bench/core.sh 200000 10          pipelined (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-20000}
SECS=${2:-20}
PACER=${3:-sleep}
PIPELINE=${PIPELINE:-1}
SERVER=${CREST_SERVER:-valkey-server}
cargo build --release --bins -q
BIN=target/release
work=$(mktemp -d)
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
pids=()
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SP=$(port); CP=$(port)
taskset -c 0 "$SERVER" --port "$SP" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done

taskset -c 0 "$BIN/crest" run --listen "127.0.0.1:$CP" --workers 1 --wait-timeout 30s \
  --target "127.0.0.1:$SP" --rate "$RATE" --duration "${SECS}s" --ratio 1:10 --keys 100000 \
  --value-size 1024 --connections 50 --pipeline "$PIPELINE" --pacer "$PACER" --seed 1 \
  --out "$work/out" >"$work/table.txt" 2>"$work/crest.err" &
cpid=$!
pids+=($cpid)
"$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus "${WORKER_CPU:-1}" --threads 1 2>"$work/worker.err" &
wpid=$!
pids+=($wpid)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# CPU is sampled from just before the start to just after the end of the run: crest prints
# "crest: run <id>: ..." when it has sent the start instant (1 s ahead), so the window opens
# before the first request. A window that did not open on that line is not a measurement.
seen=
for _ in $(seq 600); do grep -q "^crest: run " "$work/crest.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
[ -n "$seen" ] || { echo "core.sh: the run did not start within 30 s (no 'crest: run' line); no CPU window" >&2; cat "$work/crest.err" >&2; exit 1; }
c0=$(cpu "$wpid")
t0=$(date +%s.%N)
wait "$cpid"
c1=$(cpu "$wpid")
t1=$(date +%s.%N)
HZ=$(getconf CLK_TCK)
cat "$work/table.txt"
[ -n "${KEEP:-}" ] && cp "$work/out/report.json" "$KEEP"
python3 - "$work/out/report.json" "$c0" "$c1" "$HZ" "$RATE" "$t0" "$t1" "$SECS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c0, c1, hz, rate = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
window, secs = float(sys.argv[7]) - float(sys.argv[6]), float(sys.argv[8])
# The window must hold the whole run (lead + schedule + drain), and not much more.
if not (secs <= window <= secs + 10):
    sys.exit(f"core.sh: CPU window {window:.1f} s does not cover a {secs:.0f} s run; no figure")
t = r["totals"]
reqs = t["completed"] + t["errors"]
cpu_s = (c1 - c0) / hz
per_sec = [p["achieved_rate"] / p["target_rate"] for p in r["timeline"][:-1]]  # last second holds the drain
print(f"achieved/target over the run: {t['achieved_rate'] / t['target_rate']:.4f}")
print(f"per-second achieved/target: min {min(per_sec):.4f} max {max(per_sec):.4f}")
print(f"schedule lag p50 {t['schedule_lag_us']['p50']} us  p99 {t['schedule_lag_us']['p99']} us  p99.9 {t['schedule_lag_us']['p999']} us")
print(f"latency p50 {t['latency_us']['p50']} us  p99 {t['latency_us']['p99']} us; service time p99 {t['service_time_us']['p99']} us")
print(f"CPU window: {window:.1f} s for a {secs:.0f} s schedule")
print(f"worker CPU: {cpu_s:.2f} s for {reqs} requests = {cpu_s / reqs * 1e6:.2f} CPU s per million")
# The report's own figure (shard threads only, per interval) beside the process's: a check
# that what Crest prints about its cost is true (it must be at most the process's).
g = t["generator_cpu_s"]
print(f"report: shard threads {g:.2f} CPU s = {g / reqs * 1e6:.2f} per million ({g / cpu_s:.0%} of the worker process's); busiest shard {t['busiest_shard']:.0%} busy at most")
PY

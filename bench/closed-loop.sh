#!/usr/bin/env bash
# Closed loop against valkey-benchmark (VALKEY_BENCHMARK=, default valkey-benchmark, else
# redis-benchmark: the same program), same server, same run: 50 connections, pipeline
# PIPELINE (default 16), 1 KB SET, one generator thread pinned to core 1, the server
# (Valkey, or CREST_SERVER) pinned to core 0. Prints each tool's throughput and CPU seconds
# (user + sys) per million requests, and the ratios.
#
# Both tools write the same keys: without -r the benchmark SETs one key over and over, so
# crest gets --keys 1; KEYS=100000 gives both a 100,000-key space (-r / --keys).
#
#   bench/closed-loop.sh [REQUESTS]      default 2,000,000
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000000}
KEYS=${KEYS:-1}
PIPELINE=${PIPELINE:-16}
if [ "$KEYS" = 1 ]; then RB_KEYS=(); else RB_KEYS=(-r "$KEYS"); fi
SERVER=${CREST_SERVER:-valkey-server}
VB=${VALKEY_BENCHMARK:-$(command -v valkey-benchmark || command -v redis-benchmark || true)}
[[ -x $VB ]] || { echo "closed-loop.sh: no valkey-benchmark or redis-benchmark (apt-get install redis-tools, or VALKEY_BENCHMARK=PATH)" >&2; exit 2; }
RB=$(basename "$VB")
source bench/lib.sh
SP=$(port); CP=$(port)
taskset -c 0 "$SERVER" --port "$SP" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done

# The benchmark: CPU from GNU time's user+sys, throughput from its own summary.
/usr/bin/time -f "%U %S" -o "$work/rb.time" taskset -c 1 "$VB" -p "$SP" -c 50 -P "$PIPELINE" \
  -t set -d 1024 -n "$N" --threads 1 "${RB_KEYS[@]}" -q > "$work/rb.out" 2>&1
rb_rps=$(grep -oE 'SET: [0-9.]+' "$work/rb.out" | awk '{print $2}')
rb_cpu=$(awk '{print $1 + $2}' "$work/rb.time")
redis-cli -p "$SP" flushall >/dev/null

# Crest: a remote-style worker process so its CPU is the generator's alone.
taskset -c 0 "$BIN/crest" run --listen "127.0.0.1:$CP" --workers 1 --wait-timeout 30s \
  --target "127.0.0.1:$SP" --rate max --requests "$N" --pipeline "$PIPELINE" --connections 50 \
  --ratio 1:0 --value-size 1024 --keys "$KEYS" --key-prefix key: --seed 1 --out "$work/out" >/dev/null 2>"$work/crest.err" &
cpid=$!; pids+=($cpid)
"$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus 1 --threads 1 2>"$work/worker.err" &
wpid=$!; pids+=($wpid)
# The CPU window opens on "crest: run <id>: ..." (printed when the start instant is sent,
# 1 s ahead of the first request); a window that did not open there is not a measurement.
seen=
for _ in $(seq 600); do grep -q "^crest: run " "$work/crest.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
[ -n "$seen" ] || { echo "closed-loop.sh: the run did not start within 30 s; no CPU window" >&2; cat "$work/crest.err" >&2; exit 1; }
c0=$(cpu "$wpid"); wait "$cpid"; c1=$(cpu "$wpid")
grep -q "crest: report written" "$work/crest.err" || { echo "closed-loop.sh: the run wrote no report; no figure" >&2; cat "$work/crest.err" >&2; exit 1; }
python3 - "$work/out/report.json" "$c0" "$c1" "$(getconf CLK_TCK)" "$rb_rps" "$rb_cpu" "$N" "$RB" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c0, c1, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rb_rps, rb_cpu, n, rb = float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
t = r["totals"]
crest_cpu = (c1 - c0) / hz
crest_rps = t["achieved_rate"]
print(f"{rb + ':':<16} {rb_rps:,.0f} SET/s, {rb_cpu:.2f} CPU s = {rb_cpu / n * 1e6:.2f} CPU s per million")
print(f"{'crest:':<16} {crest_rps:,.0f} SET/s, {crest_cpu:.2f} CPU s = {crest_cpu / t['completed'] * 1e6:.2f} CPU s per million "
      f"(completed {t['completed']}, errors {t['errors']})")
print(f"throughput crest/{rb} = {crest_rps / rb_rps:.3f}; CPU per request crest/{rb} = "
      f"{(crest_cpu / t['completed']) / (rb_cpu / n):.3f}")
PY

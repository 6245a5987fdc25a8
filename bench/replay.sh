#!/usr/bin/env bash
# Replay at scale (issue #27): a generated Twitter trace of N lines (default 20 million,
# far more than the streaming window) replayed by a coordinator and one remote worker
# (one shard, pinned to core 1) against the built-in RESP target (`crest sink`, core 0),
# the trace's clock at RATE requests/s (default 100,000). Prints:
#   - the coordinator's and the worker's peak RSS (/usr/bin/time %M) beside the bound the
#     README documents (exit 1 when over);
#   - the coordinator's CPU per line and lines per CPU second (read, parse, time,
#     partition, chunk, encode and send, all in one process);
#   - the worker's CPU per request, and the schedule lag p50/p99/p99.9 at RATE from the
#     report (the lag from each request's intended time to its write).
#
# The measurement window checks itself: the report's replay section must have read all N
# records and sent N requests, the worker completed N with no error, nothing unsent, and
# the timeline's `scheduled` must sum to N; otherwise the case is "not measured" (exit 1).
#
#   bench/replay.sh [LINES] [RATE]       defaults: 20000000 100000
#   PROFILE=dev bench/replay.sh 2000000  the dev build (tests' binaries), no release build
#   CONNS=4 bench/replay.sh              the worker's shard on 4 connections (key lanes)
#
# The schedule lag here is mostly requests waiting for a free pipeline slot: the target
# shares core 0 with the streaming coordinator, and its latency tail fills one
# connection's 32 slots (the report's `backlogged` says how many waited); CONNS=4 gives
# them room.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000000}
RATE=${2:-100000}
# The bounds the README states for this benchmark, MB.
COORD_BOUND=${COORD_BOUND:-96}
WORKER_BOUND=${WORKER_BOUND:-128}
source bench/common.sh
PROFILE=${PROFILE:-release}
if [[ $PROFILE == release ]]; then
  nice -n 10 cargo build --release -q --bin crest --bin crest-worker
  BIN=$(build_dir release)
else
  nice -n 10 cargo build -q --bin crest --bin crest-worker
  BIN=$(build_dir debug)
fi

# The trace: RATE lines per whole second, keys k0..k99999, 90% get, 9% set (32-200
# bytes, every tenth with a TTL), 1% delete.
trace="$work/trace.csv"
awk -v n="$N" -v r="$RATE" 'BEGIN {
  srand(7);
  for (i = 0; i < n; i++) {
    k = int(rand() * 100000); u = rand();
    if (u < 0.90) { op = "get"; size = 0; ttl = 0 }
    else if (u < 0.99) { op = "set"; size = 32 + int(rand() * 168); ttl = (i % 10 == 0) ? 3600 : 0 }
    else { op = "delete"; size = 0; ttl = 0 }
    printf "%d,k%d,%d,%d,1,%s,%d\n", 1000 + int(i / r), k, length("k" k), size, op, ttl
  }
}' >"$trace"
echo "trace: $N lines, $(( N / RATE )) s at $RATE/s, $(du -m "$trace" | cut -f1) MB"

SP=$(port); CP=$(port)
taskset -c 0 "$BIN/crest" sink --listen "127.0.0.1:$SP" 2>"$work/sink.err" &
pids+=($!)
sleep 0.3
taskset -c 0 /usr/bin/time -f "%M %U %S %e" -o "$work/coord.time" \
  "$BIN/crest" replay "$trace" --format twitter --listen "127.0.0.1:$CP" --workers 1 \
  --wait-timeout 30s --target "127.0.0.1:$SP" --no-server-stats --pipeline 32 \
  --connections "${CONNS:-1}" \
  --out "$work/out" >"$work/table.txt" 2>"$work/crest.err" &
cpid=$!
pids+=($cpid)
sleep 0.3
/usr/bin/time -f "%M %U %S %e" -o "$work/worker.time" \
  "$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus 1 --threads 1 --one-run \
  2>"$work/worker.err" &
wpid=$!
pids+=($wpid)
code=0
wait "$cpid" || code=$?
wait "$wpid" || true
if (( code != 0 )); then
  echo "crest exited $code:"; tail -5 "$work/crest.err"; exit 1
fi
read -r crss cu cs cwall <"$work/coord.time"
read -r wrss wu ws _ <"$work/worker.time"
python3 - "$work/out/report.json" "$N" "$crss" "$cu" "$cs" "$cwall" "$wrss" "$wu" "$ws" \
  "$COORD_BOUND" "$WORKER_BOUND" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
crss, cu, cs, cwall, wrss, wu, ws = map(float, sys.argv[3:10])
cbound, wbound = float(sys.argv[10]), float(sys.argv[11])
t, rp = r["totals"], r["replay"]
rows = sum(p["scheduled"] for p in r["timeline"])
window = (rp["records"] == n and rp["sent"] == n and t["completed"] == n
          and t["errors"] == 0 and t["unsent"] == 0 and rows == n)
if not window:
    print(f"not measured: records {rp['records']} sent {rp['sent']} completed {t['completed']} "
          f"errors {t['errors']} unsent {t['unsent']} timeline {rows} (want {n} each, 0 errors)")
    sys.exit(1)
ccpu = cu + cs
lag = t["schedule_lag_us"]
print(f"coordinator: peak RSS {crss/1024:.1f} MB (bound {cbound:.0f}), CPU {ccpu:.1f} s = "
      f"{ccpu*1e9/n:.0f} ns/line = {n/ccpu/1e6:.2f} M lines per CPU s, wall {cwall:.1f} s")
print(f"worker: peak RSS {wrss/1024:.1f} MB (bound {wbound:.0f}), CPU {wu+ws:.1f} s = "
      f"{(wu+ws)*1e9/n:.0f} ns/request")
print(f"schedule lag at {n/r['duration_s']:.0f}/s: p50 {lag['p50']} us, p99 {lag['p99']} us, "
      f"p99.9 {lag['p999']} us, max {lag['max']} us; latency p99 {t['latency_us']['p99']} us")
backlogged = sum(c.get("backlogged", 0) for c in r["commands"].values())
conns = r["settings"]["classes"][0]["connections"]
print(f"replay: {rp['chunks']} chunks, {n/max(rp['chunks'],1):.0f} requests per chunk; "
      f"{conns} connection(s), {backlogged} requests waited for a pipeline slot")
over = [w for w, rss, b in (("coordinator", crss, cbound), ("worker", wrss, wbound)) if rss / 1024 > b]
if over:
    print("OVER the bound:", ", ".join(over))
    sys.exit(1)
PYEOF

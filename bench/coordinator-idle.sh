#!/usr/bin/env bash
# What a fleet costs the coordinator when nothing runs (issue #12, item 4): WORKERS
# simulated workers (coordinator/examples/sim_workers.rs, the real gRPC session: register,
# heartbeats) connect to a `crest run` that waits for one more; its CPU (utime + stime from
# /proc) is read over a 20 s window once every worker has registered. This is the floor
# under every interval's merge cost: heartbeats both ways and HTTP/2 keepalive.
#
#   bench/coordinator-idle.sh                 1,000 workers
#   WORKERS=200 bench/coordinator-idle.sh
#   BIN_DIR=/tmp/a bench/...                  crest and examples/sim_workers of another build
#   PROFILE=dev bench/...                     the dev build
#
# The window checks itself: every worker must have registered before it opens (the
# coordinator's own "registered: N/M" line) and the coordinator must still be waiting when
# it closes; otherwise it says NOT MEASURED.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${WORKERS:-1000}
WINDOW=20
NAME=coordinator-idle
source bench/fleet.sh
CP=$(port)
"$BIN/crest" run --listen "127.0.0.1:$CP" --workers "$((W + 1))" --wait-timeout 120s \
  --target 127.0.0.1:1 --rate 1000 --duration 3s --out "$work/out" >/dev/null 2>"$work/crest.err" &
cpid=$!
pids+=($cpid)
sleep 0.5
"$BIN/examples/sim_workers" "http://127.0.0.1:$CP" "$W" 3 "$work/out/timeline.csv" >/dev/null 2>"$work/sim.err" &
pids+=($!)
for _ in $(seq 600); do
  grep -q "registered: $W/" "$work/crest.err" 2>/dev/null && break
  sleep 0.1
done
if ! grep -q "registered: $W/" "$work/crest.err"; then
  echo "NOT MEASURED: $W workers did not all register within 60 s" >&2
  tail -n 3 "$work/crest.err" "$work/sim.err" | cut -c1-300 >&2
  exit 1
fi
sleep 2
ticks=$(getconf CLK_TCK)
t0=$(cpu "$cpid")
s0=$(date +%s.%N)
sleep "$WINDOW"
t1=$(cpu "$cpid")
s1=$(date +%s.%N)
if ! kill -0 "$cpid" 2>/dev/null || grep -q "waited" "$work/crest.err"; then
  echo "NOT MEASURED: the coordinator stopped waiting inside the window" >&2
  exit 1
fi
awk -v w="$W" -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v hz="$ticks" \
  'BEGIN { ms = (t1 - t0) / hz * 1000 / (s1 - s0); printf "%d workers connected, idle: coordinator CPU %.0f ms per second (%.1f µs per worker-second), window %.1f s\n", w, ms, ms * 1000 / w, s1 - s0 }'

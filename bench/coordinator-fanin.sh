#!/usr/bin/env bash
# What a fleet dialling the coordinator directly costs it per interval of wall time (issue
# #26, item 5): WORKERS (1,000) simulated workers (coordinator/examples/sim_workers.rs, the
# real gRPC session) send each 1 s interval when it ends (SIM_PACE=1: interval k at the
# run's start + (k + 1) s, every worker at once, as a fleet with a common start does), with
# heartbeats as a real worker sends them, SIM_PER_INTERVAL (100) requests per command of a
# 10-command mix. Unlike bench/coordinator-memory.sh, which streams intervals as fast as
# the coordinator takes them, every second here carries what a real run pays: the merge,
# the interval messages, the heartbeats both ways and HTTP/2 keepalive.
#
# The coordinator's CPU (utime + stime from /proc) and RSS are read when its live
# timeline.csv reaches row SKIP (5) and again at row INTERVALS - 2, so the window is whole
# intervals of the steady state; CPU per interval = the CPU between / the rows between.
#
#   bench/coordinator-fanin.sh [INTERVALS]        default 40 (a 40 s run)
#   WORKERS=200 bench/...                         another fleet
#   BIN_DIR=/tmp/a bench/...                      crest and examples/sim_workers of another build
#   SIM_BEATS=always bench/...                    workers beat every 1 s whatever else they send
#                                                 (what workers did before an interval counted
#                                                 as their heartbeat: an A/B of builds)
#   PROFILE=dev bench/...                         the dev build
#
# The window checks itself: the report must hold exactly INTERVALS rows, each with every
# worker's requests, no late intervals, books that balance; the window must hold at least
# 10 rows that came about 1 s apart (0.9–1.1 s per row: intervals paced, the coordinator
# keeping up); otherwise it says NOT MEASURED.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-40}
W=${WORKERS:-1000}
SKIP=5
NAME=coordinator-fanin
source bench/fleet.sh
MIX="GET=6,SET=3,INCR=1,HSET=1,ZADD=1,LPUSH=1,SADD=1,EXISTS=1,DEL=1,MGET=1"
export SIM_PER_INTERVAL=${SIM_PER_INTERVAL:-100} SIM_PACE=1
(( N >= SKIP + 12 )) || { echo "coordinator-fanin.sh: at least $((SKIP + 12)) intervals" >&2; exit 2; }
CP=$(port)
out="$work/out"
"$BIN/crest" run --listen "127.0.0.1:$CP" --workers "$W" --wait-timeout 60s \
  --target 127.0.0.1:1 --rate 10000 --duration "${N}s" --interval 1s --mix "$MIX" \
  --connections "$(( W > 16 ? W : 16 ))" --out "$out" >"$work/table" 2>"$work/crest.err" &
cpid=$!
pids+=($cpid)
sleep 0.5
"$BIN/examples/sim_workers" "http://127.0.0.1:$CP" "$W" "$N" "$out/timeline.csv" 2>"$work/sim.err" &
spid=$!
pids+=($spid)
rows() { local n; n=$( { wc -l <"$out/timeline.csv"; } 2>/dev/null) || n=1; echo $(( n > 0 ? n - 1 : 0 )); }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# Waits for row $1 (the timeline's header excluded), then prints "rows cpu_ticks sim_ticks
# wall_s rss_kb" read at once.
at_row() {
  while kill -0 "$cpid" 2>/dev/null; do
    local r
    r=$(rows)
    if (( r >= $1 )); then
      echo "$r $(cpu "$cpid") $(cpu "$spid") $(date +%s.%N) $(rss "$cpid")"
      return
    fi
    sleep 0.01
  done
  echo "coordinator-fanin.sh: the coordinator ended before row $1" >&2
  return 1
}
read -r r0 c0 s0 t0 m0 < <(at_row "$SKIP")
read -r r1 c1 s1 t1 m1 < <(at_row "$(( N - 2 ))")
code=0
wait "$cpid" || code=$?
wait "$spid" 2>/dev/null || true
verdict=$(python3 bench/fleet-check.py "$out/report.json" "$W" "$N" "$SIM_PER_INTERVAL" "$r0" "$r1" "$t0" "$t1")
if [[ $code -ne 0 || $verdict != ok ]]; then
  echo "$W workers: exit $code, $verdict" >&2
  tail -5 "$work/crest.err" | cut -c1-300 >&2
  grep -m1 -A1 panicked "$work/sim.err" | cut -c1-300 >&2
  grep -v '^ ' "$work/sim.err" | tail -3 | cut -c1-300 >&2
  exit 1
fi
awk -v w="$W" -v r0="$r0" -v r1="$r1" -v c0="$c0" -v c1="$c1" -v s0="$s0" -v s1="$s1" \
  -v t0="$t0" -v t1="$t1" -v m0="$m0" -v m1="$m1" -v hz="$(getconf CLK_TCK)" 'BEGIN {
  rows = r1 - r0
  printf "%d workers, 1 s intervals, rows %d..%d (%d rows in %.1f s): coordinator CPU %.1f ms per interval (%.1f µs per worker-interval), RSS %.0f -> %.0f MB; simulated workers %.0f ms per interval\n",
    w, r0, r1, rows, t1 - t0, (c1 - c0) / hz * 1000 / rows, (c1 - c0) / hz * 1e6 / rows / w,
    m0 / 1024, m1 / 1024, (s1 - s0) / hz * 1000 / rows }'

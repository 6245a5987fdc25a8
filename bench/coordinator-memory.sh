#!/usr/bin/env bash
# Coordinator memory and CPU over a 1-hour-equivalent run (issue #8): 3,600 intervals of a
# 10-command mix from 1 and from 16 simulated workers, at --interval 1s and 100ms. The
# simulated workers (coordinator/examples/sim_workers.rs) speak the real gRPC session
# protocol and stream synthetic intervals (1,000 requests per command per interval, real
# histograms) as fast as the coordinator takes them (at most 16 intervals ahead of the rows
# it has finalized in its live timeline.csv), then finals that add up, so an hour of
# intervals takes seconds to minutes. Prints, per case, the coordinator's peak RSS (/usr/bin/time
# %M) beside the README's bound for it (exit 1 when a case is over), and its CPU (user + sys)
# per interval and per worker-interval.
#
# The measurement window checks itself: the report must hold exactly 3,600 timeline rows,
# each with every worker's requests (workers × 10 commands × 1,000), no late intervals,
# and books that balance; otherwise the case is reported as not measured.
#
#   bench/coordinator-memory.sh [INTERVALS]     default: 3600
#   PROFILE=dev bench/coordinator-memory.sh      the dev build (tests' binaries), no release build
#   WORKERS="16" LENGTHS="100ms" bench/...       one case
#   WORKERS=1000 LENGTHS=1s bench/coordinator-memory.sh 60   a fleet: 1,000 workers (one connection each)
#   SIM_PER_INTERVAL=100 ...                     requests per command per interval (default 1,000):
#                                                merge cost follows the histograms' nonzero buckets
#   RELAYS=10 WORKERS=1000 LENGTHS=1s ...        the workers dial 10 `crest relay`s (100 each),
#                                                the coordinator sees 10 workers; prints the
#                                                relays' CPU per interval beside the coordinator's
#   BIN_DIR=/tmp/a bench/...                     run the crest and examples/sim_workers binaries
#                                                in that directory, unbuilt (an A/B of two builds
#                                                in one sitting: copy one build's pair aside)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-3600}
NAME=coordinator-memory
source bench/fleet.sh
MIX="GET=6,SET=3,INCR=1,HSET=1,ZADD=1,LPUSH=1,SADD=1,EXISTS=1,DEL=1,MGET=1"

RELAYS=${RELAYS:-0}
printf '%-8s %-9s %10s %12s %10s %14s %16s %8s' workers interval intervals "peak RSS MB" "bound MB" "CPU/interval" "CPU/worker-iv" "wall s"
(( RELAYS > 0 )) && printf ' %14s' "relays CPU/iv"
printf '\n'
HZ=$(getconf CLK_TCK)
for W in ${WORKERS:-1 16}; do
  for IV in ${LENGTHS:-1s 100ms}; do
    case $IV in
      1s) D=$N ;;
      100ms) D=$(awk "BEGIN{print $N/10}") ;;
      *) echo "interval $IV: this benchmark runs 1s or 100ms" >&2; exit 2 ;;
    esac
    CP=$(port)
    out="$work/out-$W-$IV"
    # With relays the coordinator sees one worker per relay.
    members=$W
    (( RELAYS > 0 )) && members=$RELAYS
    /usr/bin/time -f "%M %U %S %e" -o "$work/time-$W-$IV" \
      "$BIN/crest" run --listen "127.0.0.1:$CP" --workers "$members" --wait-timeout 60s \
      --target 127.0.0.1:1 --rate 10000 --duration "${D}s" --interval "$IV" --mix "$MIX" \
      --connections "$(( W > 16 ? W : 16 ))" --out "$out" >"$work/table-$W-$IV" 2>"$work/crest-$W-$IV.err" &
    cpid=$!
    pids+=($cpid)
    sleep 0.5
    dial="http://127.0.0.1:$CP"
    rpids=()
    if (( RELAYS > 0 )); then
      (( W % RELAYS == 0 )) || { echo "coordinator-memory.sh: RELAYS=$RELAYS does not divide $W workers" >&2; exit 2; }
      dial=
      for r in $(seq "$RELAYS"); do
        RP=$(port)
        "$BIN/crest" relay --coordinator "http://127.0.0.1:$CP" --listen "127.0.0.1:$RP" \
          --workers $(( W / RELAYS )) --name "relay$r" 2>"$work/relay$r-$W-$IV.err" &
        rpids+=($!)
        pids+=($!)
        dial="${dial:+$dial,}http://127.0.0.1:$RP"
      done
      sleep 0.3
    fi
    "$BIN/examples/sim_workers" "$dial" "$W" "$N" "$out/timeline.csv" 2>"$work/sim-$W-$IV.err" &
    spid=$!
    pids+=($spid)
    code=0
    wait "$cpid" || code=$?
    relay_ticks=0
    for r in "${rpids[@]}"; do
      relay_ticks=$(( relay_ticks + $(cpu "$r") ))
      kill "$r" 2>/dev/null || true
    done
    wait "$spid" 2>/dev/null || true
    read -r rss_kb user sys wall <"$work/time-$W-$IV"
    verdict=$(python3 bench/fleet-check.py "$out/report.json" "$W" "$N" "${SIM_PER_INTERVAL:-1000}")
    if [[ $code -ne 0 || $verdict != ok ]]; then
      echo "$W workers, $IV: exit $code, $verdict" >&2
      tail -5 "$work/crest-$W-$IV.err" | cut -c1-300 >&2
      # The simulator's first panic (a backtrace's tail says nothing), then its last lines.
      grep -m1 -A1 panicked "$work/sim-$W-$IV.err" | cut -c1-300 >&2
      grep -v '^ ' "$work/sim-$W-$IV.err" | tail -3 | cut -c1-300 >&2
      continue
    fi
    cpu_us=$(awk "BEGIN{printf \"%.0f µs\", ($user + $sys) / $N * 1e6}")
    per_worker=$(awk "BEGIN{printf \"%.0f µs\", ($user + $sys) / $N / $W * 1e6}")
    # The README's bound: 40 MB + 1 MB per (class, command) + 2.5 MB per worker + 0.3 KB
    # per interval (10 commands, one class).
    bound=$(awk "BEGIN{printf \"%.1f\", 40 + 10 + 2.5 * $W + 0.3 * $N / 1024}")
    rss_mb=$(awk "BEGIN{printf \"%.1f\", $rss_kb / 1024}")
    printf '%-8s %-9s %10s %12s %10s %14s %16s %8s' "$W" "$IV" "$N" "$rss_mb" "$bound" "$cpu_us" "$per_worker" "$wall"
    (( RELAYS > 0 )) && printf ' %14s' "$(awk "BEGIN{printf \"%.0f µs\", $relay_ticks / $HZ / $N * 1e6}")"
    printf '\n'
    if awk "BEGIN{exit !($rss_mb > $bound)}"; then
      echo "$W workers, $IV: peak RSS $rss_mb MB is over the README's bound of $bound MB" >&2
      over=1
    fi
  done
done
exit "${over:-0}"

#!/usr/bin/env bash
# How long `crest search` takes to find a knee, how many windows it uses, and how much
# three searches agree (issue #11, "Numbers"). Two targets, each searched three times with
# the default windows (climb 2 s, bisect/confirm 5 s, warm-up 1 s, tolerance 2%):
#   sleep   redis-server whose every request is DEBUG SLEEP <S> (a fixed cost: capacity
#           C = 1e6 / its own usec_per_call, printed beside the knees)
#   get     redis-server answering GET (SET:GET 1:10, 32-byte values): the knee of the
#           server and this machine's generator together, or "the clients are the limit"
# Prints per search: the outcome, windows, wall time; then per target the knees' spread.
#
#   bench/knee.sh [SLEEP_S] [GET_MIN_RPS]      defaults: 0.001 10000
#   CASES=sleep bench/knee.sh                   one target only (sleep or get)
#   SLEEP_LAG=50ms GET_LAG=1ms                  each case's --lag-limit (defaults shown): the
#       sleep case is about the server's knee (2 cores shared by the server, the shards and
#       the coordinator put the generator's lag p99 near 1 ms at any rate here); the get
#       case keeps the default, so a generator limit is said as one
set -euo pipefail
cd "$(dirname "$0")/.."
SLEEP=${1:-0.001}
GET_MIN=${2:-10000}
source bench/lib.sh
command -v redis-server >/dev/null || { echo "knee.sh: needs redis-server (scripts/install-test-deps.sh)" >&2; exit 1; }
P=$(port)
redis-server --port "$P" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --enable-debug-command yes >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$P" ping >/dev/null 2>&1 && break; sleep 0.1; done

search() { # name, then crest search flags
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN/crest" search --target "127.0.0.1:$P" --out "$work/$name" "$@" >"$work/$name.out" 2>"$work/$name.err" || true
  t1=$(date +%s.%N)
  python3 - "$work/$name/search.json" "$t0" "$t1" "$name" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])
print(f"{sys.argv[4]:<8} {len(s['probes']):>2} windows  {wall:6.1f} s  knee {s['knee_rps'] or 0:>9.0f}/s  {s['outcome']}")
PY
}
spread() { # names
  python3 - "$work" "$@" <<'PY'
import json, sys
knees = [json.load(open(f"{sys.argv[1]}/{n}/search.json"))["knee_rps"] for n in sys.argv[2:]]
k = [x for x in knees if x]
if len(k) == len(knees):
    print(f"  knees {k}: spread {(max(k) - min(k)) / min(k) * 100:.1f}% (max/min - 1)")
else:
    print(f"  knees {knees}: not every search found one")
PY
}

CASES=${CASES:-sleep get}
if [[ $CASES == *sleep* ]]; then
echo "== DEBUG SLEEP $SLEEP, SLO p50<=20ms"
for i in 1 2 3; do
  search "sleep$i" --command "DEBUG SLEEP $SLEEP" --slo "p50<=20ms" --min 100 --max 1000000 \
    --lag-limit "${SLEEP_LAG:-50ms}"
done
spread sleep1 sleep2 sleep3
usec=$(redis-cli -p "$P" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_debug:.*usec_per_call=\([0-9.]*\).*/\1/p')
python3 -c "print(f'  capacity C = 1e6 / {float(\"$usec\"):.1f} us = {1e6/float(\"$usec\"):.0f}/s')"
fi
[[ $CASES == *get* ]] || exit 0

redis-cli -p "$P" flushall >/dev/null
echo "== GET/SET 1:10, SLO p99<=10ms, from $GET_MIN/s"
for i in 1 2 3; do
  search "get$i" --slo "p99<=10ms" --min "$GET_MIN" --max 2000000 --keys 100000 \
    --lag-limit "${GET_LAG:-1ms}"
done
spread get1 get2 get3

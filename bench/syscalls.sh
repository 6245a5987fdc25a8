#!/usr/bin/env bash
# What one request costs in syscalls and sleeps (issue #12's floor): Crest with each pacer
# in PACERS and, when MEMTIER names its binary, memtier_benchmark (--rate-limiting), one
# after the other at RATE against one prefilled Valkey on core 0, the generator on core 1,
# one thread, 50 connections, SET:GET 1:10, 1 KB values, pipeline 1. Counts come from
# the kernel's syscall tracepoints (`perf stat -e syscalls:sys_enter_*`, whole process) and
# its context switches, divided by the requests the server counted (INFO commandstats).
#
#   bench/syscalls.sh [RATE] [SECS]           defaults: 20000 5
#   MEMTIER=/root/.cache/peers/memtier_benchmark PACERS="sleep sleep:200us" bench/syscalls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-20000}
SECS=${2:-5}
PACERS=${PACERS:-sleep sleep:200us spin}
MEMTIER=${MEMTIER:-}
SERVER=${CREST_SERVER:-valkey-server}
command -v perf >/dev/null || { echo "syscalls.sh: needs perf (Debian's linux-perf)" >&2; exit 1; }
[[ $(perf list 2>/dev/null | grep -c syscalls:sys_enter_sendto) -gt 0 ]] \
  || { echo "syscalls.sh: this kernel has no syscall tracepoints for perf" >&2; exit 1; }
source bench/lib.sh

start_prefilled syscalls.sh

calls() { # GET + SET calls the server has counted
  redis-cli -p "$SP" info commandstats | tr -d '\r' \
    | sed -n 's/^cmdstat_\(get\|set\):calls=\([0-9]*\).*/\2/p' | awk '{s += $1} END {print s + 0}'
}
EV=context-switches
for s in sendto sendmsg recvfrom recvmsg read readv write writev epoll_wait epoll_pwait epoll_pwait2 epoll_ctl clock_nanosleep nanosleep; do
  EV+=",syscalls:sys_enter_$s"
done

report() { # name, perf output, requests
  python3 - "$@" <<'PY'
import sys
name, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for line in open(path):
    f = line.strip().split(",")
    if len(f) > 3 and f[0].replace(".", "").isdigit() and float(f[0]) > 0:
        rows.append((f[2].replace("syscalls:sys_enter_", ""), float(f[0]) / n))
print(f"{name:<18} {n:>8} requests  " + "  ".join(f"{k} {v:.3f}" for k, v in rows))
PY
}

echo "per request (server-counted), $RATE/s for ${SECS}s:"
for pacer in $PACERS; do
  before=$(calls)
  perf stat -x, -e "$EV" -o "$work/perf-$pacer" taskset -c 1 "$BIN/crest" run \
    --target "127.0.0.1:$SP" --rate "$RATE" --duration "${SECS}s" --ratio 1:10 --keys 100000 \
    --key-prefix crest: --value-size 1024 --connections 50 --threads 1 --pacer "$pacer" \
    --no-cluster --no-server-stats --out "$work/out-$pacer" >"$work/run-$pacer.log" 2>&1
  report "crest $pacer" "$work/perf-$pacer" $(( $(calls) - before ))
done
if [[ -n $MEMTIER ]]; then
  before=$(calls)
  perf stat -x, -e "$EV" -o "$work/perf-memtier" taskset -c 1 "$MEMTIER" -s 127.0.0.1 -p "$SP" \
    -t 1 -c 50 --rate-limiting $(( RATE / 50 )) --ratio 1:10 --data-size 1024 \
    --key-prefix crest: --key-minimum 1 --key-maximum 99999 --test-time "$SECS" \
    --hide-histogram >"$work/memtier.log" 2>&1
  report "memtier" "$work/perf-memtier" $(( $(calls) - before ))
fi

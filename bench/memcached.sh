#!/usr/bin/env bash
# Crest against memcached, beside memtier_benchmark's memcache_text when MEMTIER names its
# binary (issue #28), one after the other against the same server in one run. memcached
# (one thread, 256 MB) pinned to core 0 and prefilled (keys crest:0..crest:99999 of
# VALUE_SIZE bytes, default 32, so every GET hits; checked with its curr_items), the
# generator pinned to core 1, one generator thread, 50 connections, SET:GET 1:10.
#
# 1. Fixed rates: per RATE:PIPELINE case (default "20000:1 100000:16"), each tool runs SECS
#    seconds at the rate; printed: the rate memcached counted (cmd_get + cmd_set over the
#    tool's window), the generator's whole-process CPU seconds (user + sys) per million
#    server-counted requests, Crest's schedule lag p99, and the ratio of CPU per request.
# 2. Closed loop: N requests of SET (1 KB) at pipeline 16 on 50 connections, each tool as
#    fast as it goes; printed: throughput as memcached counted it and CPU per million.
#
# Crest's CPU is its worker process's (a remote-style worker: the coordinator's own is
# not the generator's), read over the run's window, which opens when the coordinator
# prints "crest: run <id>" (checked: no window, no figure).
#
#   bench/memcached.sh [CASES] [SECS] [N]    defaults: "20000:1 100000:16" 10 2000000
#                                             (N=0: no closed loop)
#   MEMTIER=$(../shared/peers/build-memtier.sh | tail -1) bench/memcached.sh
#   META=1 bench/memcached.sh                 Crest speaks the meta protocol (memtier: text)
#   PACERS="sleep sleep:1ms"                  default: Crest's pacers, each a row (sleep keeps
#                                             every send within ~100 µs of its time; sleep:1ms
#                                             lets one wake-up serve 1 ms of sends, nearer
#                                             memtier's coarse rate limiting)
set -euo pipefail
cd "$(dirname "$0")/.."
CASES=${1:-20000:1 100000:16}
SECS=${2:-10}
N=${3:-2000000}
VALUE_SIZE=${VALUE_SIZE:-32}
MEMTIER=${MEMTIER:-}
META=${META:-}
PACERS=${PACERS:-sleep sleep:1ms}
if [[ -n $MEMTIER && ! -x $MEMTIER ]]; then
  echo "memcached.sh: MEMTIER=$MEMTIER is not an executable; build one with ../shared/peers/build-memtier.sh" >&2
  exit 2
fi
command -v memcached >/dev/null || { echo "memcached.sh: no memcached (apt-get install memcached)" >&2; exit 2; }
source bench/lib.sh
HZ=$(getconf CLK_TCK)
SP=$(port)
taskset -c 0 memcached -l 127.0.0.1 -p "$SP" -U 0 -t 1 -m 256 -u root >/dev/null 2>&1 &
pids+=($!)

# memcached's stats as "name value" lines; one counter with `mc NAME`.
mc() {
  python3 - "$SP" "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
b = b""
while not b.endswith(b"END\r\n"):
    b += s.recv(65536)
st = {p[1]: p[2] for p in (l.split() for l in b.decode().splitlines()) if len(p) == 3}
print(sum(int(st[k]) for k in sys.argv[2].split("+")))
PY
}
for _ in $(seq 50); do mc cmd_get >/dev/null 2>&1 && break; sleep 0.1; done
# The prefill: every key once, pipelined sets.
python3 - "$SP" "$VALUE_SIZE" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
v = b"x" * int(sys.argv[2])
for base in range(0, 100000, 1000):
    s.sendall(b"".join(b"set crest:%d 0 0 %d noreply\r\n%s\r\n" % (k, len(v), v) for k in range(base, base + 1000)))
s.sendall(b"mn\r\n")
b = b""
while not b.endswith(b"MN\r\n"):
    b += s.recv(65536)
PY
items=$(mc curr_items)
[[ $items == 100000 ]] || { echo "memcached.sh: the prefill made $items items, not 100000" >&2; exit 1; }
target="memcache://127.0.0.1:$SP"
meta=(); [[ -n $META ]] && meta=(--meta)

# Runs crest ARGS with a remote-style worker; prints "cpu_s lag_p99_us completed".
run_crest() {
  local CP out c0 c1
  CP=$(port); out="$work/crest-$RANDOM"
  taskset -c 0 "$BIN/crest" run --listen "127.0.0.1:$CP" --workers 1 --wait-timeout 30s \
    --target "$target" "${meta[@]}" --connections 50 --keys 100000 --seed 1 \
    --no-server-stats --out "$out" "$@" >"$out.table" 2>"$out.err" &
  local cpid=$!
  "$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus 1 --threads 1 2>"$out.worker" &
  local wpid=$!
  local seen=
  for _ in $(seq 600); do grep -q "^crest: run " "$out.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
  [[ -n $seen ]] || { echo "memcached.sh: crest did not start; no figure" >&2; cat "$out.err" >&2; kill $cpid $wpid; exit 1; }
  c0=$(cpu "$wpid"); wait "$cpid"; c1=$(cpu "$wpid")
  kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true
  grep -q "crest: report written" "$out.err" || { echo "memcached.sh: crest wrote no report; no figure" >&2; cat "$out.err" >&2; exit 1; }
  python3 - "$out/report.json" "$c0" "$c1" "$HZ" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print((int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]), r["totals"]["schedule_lag_us"]["p99"], r["totals"]["completed"])
PY
}

# Runs memtier ARGS under GNU time; prints its CPU seconds (uniform random keys over the
# prefilled space: memtier's keys start at 1).
run_memtier() {
  /usr/bin/time -f "%U %S" -o "$work/mt.time" taskset -c 1 "$MEMTIER" -P memcache_text \
    -s 127.0.0.1 -p "$SP" -t 1 -c 50 --key-prefix crest: --key-minimum 1 --key-maximum 99999 \
    --key-pattern R:R --distinct-client-seed --hide-histogram "$@" >"$work/mt.out" 2>&1 \
    || { echo "memcached.sh: memtier failed; no figure" >&2; head -3 "$work/mt.out" >&2; exit 1; }
  tail -1 "$work/mt.time" | awk '{print $1 + $2}'
}

# "server /s": what memcached counted over the case, per second of the asked length (a
# tool that fell behind shows it here); "misses": get_misses (0 with every key prefilled).
printf '%-8s %9s %5s %12s %12s %10s %8s  %s\n' tool target pipe "server /s" "CPU s/1M" "lag p99" misses pacer
for case in $CASES; do
  rate=${case%%:*}; pipe=${case##*:}
  declare -A crest_per=()
  for pacer in $PACERS; do
    s0=$(mc cmd_get+cmd_set); m0=$(mc get_misses)
    read -r ccpu lag _ < <(run_crest --rate "$rate" --duration "${SECS}s" --pipeline "$pipe" \
      --ratio 1:10 --value-size "$VALUE_SIZE" --pacer "$pacer")
    s1=$(mc cmd_get+cmd_set); m1=$(mc get_misses)
    crest_per[$pacer]=$(python3 -c "print($ccpu / max(1, $s1 - $s0) * 1e6)")
    printf '%-8s %9s %5s %12.0f %12.2f %8.0fµs %8s  %s\n' crest "$rate" "$pipe" \
      "$(python3 -c "print(($s1 - $s0) / $SECS)")" "${crest_per[$pacer]}" "$lag" $((m1 - m0)) "$pacer"
  done
  if [[ -n $MEMTIER ]]; then
    s0=$(mc cmd_get+cmd_set); m0=$(mc get_misses)
    mcpu=$(run_memtier --ratio 1:10 -d "$VALUE_SIZE" --pipeline "$pipe" \
      --rate-limiting $((rate / 50)) --test-time "$SECS")
    s1=$(mc cmd_get+cmd_set); m1=$(mc get_misses)
    mt_per=$(python3 -c "print($mcpu / max(1, $s1 - $s0) * 1e6)")
    printf '%-8s %9s %5s %12.0f %12.2f %10s %8s\n' memtier "$rate" "$pipe" \
      "$(python3 -c "print(($s1 - $s0) / $SECS)")" "$mt_per" "–" $((m1 - m0))
    for pacer in $PACERS; do
      python3 -c "print(f'CPU per request crest ($pacer)/memtier at $rate/s, pipeline $pipe: {${crest_per[$pacer]} / $mt_per:.2f}')"
    done
  fi
done

[[ $N == 0 ]] && exit 0
echo "closed loop: $N SET of 1 KB, pipeline 16, 50 connections"
s0=$(mc cmd_set); t0=$(date +%s.%N)
read -r ccpu _ done_ < <(run_crest --rate max --requests "$N" --pipeline 16 --ratio 1:0 --value-size 1024)
s1=$(mc cmd_set); t1=$(date +%s.%N)
crest_n=$((s1 - s0))
[[ $crest_n == "$done_" ]] || echo "memcached.sh: memcached counted $crest_n SET, crest completed $done_" >&2
crest_rps=$(python3 - "$work" <<'PY'
import glob, json, sys
r = json.load(open(sorted(glob.glob(sys.argv[1] + "/crest-*/report.json"), key=lambda p: __import__("os").path.getmtime(p))[-1]))
print(r["totals"]["achieved_rate"])
PY
)
printf 'crest:   %12.0f SET/s  %6.2f CPU s per million\n' "$crest_rps" "$(python3 -c "print($ccpu / $crest_n * 1e6)")"
if [[ -n $MEMTIER ]]; then
  s0=$(mc cmd_set)
  mcpu=$(run_memtier --ratio 1:0 -d 1024 --pipeline 16 -n $((N / 50)))
  s1=$(mc cmd_set)
  mt_n=$((s1 - s0))
  mt_rps=$(grep -E '^Totals' "$work/mt.out" | awk '{print $2}')
  printf 'memtier: %12.0f SET/s  %6.2f CPU s per million\n' "$mt_rps" "$(python3 -c "print($mcpu / $mt_n * 1e6)")"
  python3 -c "print(f'throughput crest/memtier = {$crest_rps / $mt_rps:.2f}; CPU per request crest/memtier = {($ccpu / $crest_n) / ($mcpu / $mt_n):.2f}')"
fi

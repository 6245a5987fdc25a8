#!/usr/bin/env bash
# Side by side at fixed rates (issue #12): Crest (each pacer in PACERS) and, when MEMTIER
# names its binary, memtier_benchmark (--rate-limiting), when RPCPERF names its binary,
# rpc-perf (its rate limit), one after the other against the same server in one run. Valkey pinned to core 0 and prefilled (DEBUG POPULATE: 100,000
# keys crest:0..crest:99999 of 1 KB, so every GET hits; checked), the generator pinned to
# core 1, one generator thread, 50 connections, SET:GET 1:10, 1 KB values, pipeline 1.
#
# Per case: the rate the *server* counted (INFO commandstats, sampled every second by this
# script, steady seconds only), the generator's whole-process CPU seconds (user + sys) per
# million server-counted requests, schedule lag p99 (Crest; memtier has no schedule), the
# worst steady second's deviation from the target as the server counted it, latency p50
# (Crest: from intended send time; memtier: from its own send), GET misses, and the
# hypervisor's steal on the generator's core over the case (a VM's stolen milliseconds are
# late sends no pacer can prevent: read lag p99 beside it), and Crest's intervals off pace
# (lag p99 past the pacer's bound) with the causes its report gives and the shard's
# preemptions. Then the ratios to memtier's CPU per request.
#
# Then one client core's open-loop ceiling at the same pipeline, up the ladder
# CEILING_RATES, against Valkey and against the built-in target (`crest sink`), memtier's
# beside it, and valkey-benchmark's closed-loop throughput (see the section below).
#
#   bench/side-by-side.sh [RATES] [SECS]       defaults: "5000 20000 40000" 10
#   MEMTIER=$(../shared/peers/build-memtier.sh | tail -1) bench/side-by-side.sh
#   RPCPERF=/path/to/rpc-perf                  adds rpc-perf 5.x (bench/rpcperf.sh says how)
#   PACERS="sleep sleep:200us spin"            default; CEILING_RATES="" skips the ladder
#   CEILING_TARGETS="valkey sink" CEILING_LAG=1000    defaults (lag bound of a rung, µs)
#   PIPELINE=16 VALUE_SIZE=32 bench/side-by-side.sh "100000 200000 400000" 8
#                                              pipelined (both tools), values (and the
#                                              prefill) of 32 B instead of 1 KB
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${1:-5000 20000 40000}
SECS=${2:-10}
PACERS=${PACERS:-sleep sleep:200us spin}
CEILING_RATES=${CEILING_RATES-20000 30000 40000 50000 60000 80000 100000}
RPCPERF=${RPCPERF:-}
SERVER=${CREST_SERVER:-valkey-server}
PIPELINE=${PIPELINE:-1}
VALUE_SIZE=${VALUE_SIZE:-1024}
MEMTIER=${MEMTIER:-}
if [[ -n $MEMTIER && ! -x $MEMTIER ]]; then
  echo "side-by-side.sh: MEMTIER=$MEMTIER is not an executable; build one with ../shared/peers/build-memtier.sh" >&2
  exit 2
fi
if [[ -n $RPCPERF && ! -x $RPCPERF ]]; then
  echo "side-by-side.sh: RPCPERF=$RPCPERF is not an executable (iopsystems/rpc-perf 5.x; see bench/rpcperf.sh)" >&2
  exit 2
fi
source bench/lib.sh
HZ=$(getconf CLK_TCK)
[[ -n $RPCPERF ]] && source bench/rpcperf.sh

start_prefilled side-by-side.sh

# Samples the server's GET+SET calls and keyspace misses once a second until killed, on
# the server's core (not the generator's).
sampler() {
  # Its stdout is not the caller's: $(sampler ...) would wait for it to end.
  taskset -c 0 python3 - "$SP" "$1" >/dev/null 2>&1 <<'PY' &
import socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def info():
    s.sendall(b"*3\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n$5\r\nstats\r\n")
    n = int(f.readline()[1:])
    body = f.read(n + 2).decode()
    calls = misses = 0
    for line in body.splitlines():
        if line.startswith(("cmdstat_get:", "cmdstat_set:")):
            calls += int(line.split("calls=")[1].split(",")[0])
        elif line.startswith("keyspace_misses:"):
            misses = int(line.split(":")[1])
    return calls, misses
with open(out, "w", buffering=1) as o:
    t0 = time.monotonic()
    k = 0
    while True:
        c, m = info()
        o.write(f"{time.monotonic():.6f} {c} {m}\n")
        k += 1
        time.sleep(max(0.0, t0 + k - time.monotonic()))
PY
  echo $!
}

# Steady seconds of a sample file: server-counted rate, worst second's deviation from RATE,
# misses over the whole case.
judge() {
  python3 - "$1" "$2" <<'PY'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
rate = float(sys.argv[2])
per = []
for (t0, c0, _), (t1, c1, _) in zip(rows, rows[1:]):
    per.append((c1 - c0) / (t1 - t0))
# Seconds with traffic, without the first and last (ramp and tail).
busy = [i for i, r in enumerate(per) if r > 0.05 * rate]
steady = per[busy[0] + 1:busy[-1]] if len(busy) > 2 else []
if not steady:
    print("nan nan nan"); sys.exit()
mean = sum(steady) / len(steady)
worst = max(abs(r - rate) / rate for r in steady) * 100
misses = rows[-1][2] - rows[0][2]
print(f"{mean:.0f} {worst:.2f} {misses:.0f}")
PY
}

# The hypervisor's steal on the generator's core (/proc/stat), in ticks: on a VM a stolen
# millisecond is a late send that no pacer can prevent, so each case prints its share.
steal1() { awk '$1=="cpu1"{print $9}' /proc/stat; }
printf '%-10s %-12s %8s %12s %12s %10s %12s %10s %8s %7s  %s\n' tool pacer target "server /s" "CPU s/1M" "lag p99" "worst sec" "lat p50" misses steal "off pace (why)"
declare -A MEMTIER_CPU
results=()
run_crest() { # RATE PACER
  local rate=$1 pacer=$2 CP out s0 s1 c0 c1 t0 t1
  CP=$(port)
  out="$work/crest-$rate-${pacer//[:]/_}"
  local sp; sp=$(sampler "$out.samples")
  taskset -c 0 "$BIN/crest" run --listen "127.0.0.1:$CP" --workers 1 --wait-timeout 30s \
    --target "127.0.0.1:$SP" --rate "$rate" --duration "${SECS}s" --ratio 1:10 --keys 100000 \
    --value-size "$VALUE_SIZE" --connections 50 --pipeline "$PIPELINE" --pacer "$pacer" --seed 1 \
    --no-server-stats --out "$out" >"$out.table" 2>"$out.err" &
  local cpid=$!
  "$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus 1 --threads 1 2>"$out.worker" &
  local wpid=$!
  local seen=
  for _ in $(seq 600); do grep -q "^crest: run " "$out.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
  [[ -n $seen ]] || { echo "side-by-side.sh: crest did not start; no figure" >&2; cat "$out.err" >&2; kill "$sp" $cpid $wpid; return; }
  c0=$(cpu "$wpid"); t0=$(date +%s.%N); s0=$(steal1)
  wait "$cpid" || true
  c1=$(cpu "$wpid"); t1=$(date +%s.%N); s1=$(steal1)
  kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true
  sleep 1.2; kill "$sp"; wait "$sp" 2>/dev/null || true
  read -r srv worst misses < <(judge "$out.samples" "$rate")
  python3 - "$out/report.json" "$c0" "$c1" "$HZ" "$t0" "$t1" "$SECS" "$srv" "$worst" "$misses" "$rate" "$pacer" "$s0" "$s1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c0, c1, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
window, secs = float(sys.argv[6]) - float(sys.argv[5]), float(sys.argv[7])
srv, worst, misses, rate, pacer = sys.argv[8], sys.argv[9], sys.argv[10], float(sys.argv[11]), sys.argv[12]
steal = (int(sys.argv[14]) - int(sys.argv[13])) / hz / window * 100
if not (secs <= window <= secs + 10):
    sys.exit(f"side-by-side.sh: CPU window {window:.1f} s does not cover a {secs:.0f} s run; no figure")
t = r["totals"]
reqs = t["completed"] + t["errors"]
cpu = (c1 - c0) / hz
# Intervals whose lag p99 passed the pacer's bound, and the causes the report gives.
off = [p["off_pace"] for p in r["timeline"] if p["off_pace"]]
why = ",".join(f"{c}:{off.count(c)}" for c in sorted(set(off)))
pre = sum(p["preemptions"] for p in r["timeline"])
print(f"{'crest':<10} {pacer:<12} {rate:>8.0f} {srv:>12} {cpu / reqs * 1e6:>12.2f} {t['schedule_lag_us']['p99']:>8.0f}µs {worst:>11}% {t['latency_us']['p50']:>8.0f}µs {misses:>8} {steal:>6.1f}%  {len(off)}/{len(r['timeline'])} {why} (preemptions {pre})")
PY
}
run_memtier() { # RATE
  local rate=$1 out="$work/memtier-$1" sp s0 s1 t0 t1
  sp=$(sampler "$out.samples")
  s0=$(steal1); t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$out.time" taskset -c 1 "$MEMTIER" -s 127.0.0.1 -p "$SP" \
    -t 1 -c 50 --pipeline="$PIPELINE" --ratio=1:10 -d "$VALUE_SIZE" --key-prefix=crest: --key-minimum=1 \
    --key-maximum=99999 --key-pattern=R:R --distinct-client-seed \
    --rate-limiting=$((rate / 50)) --test-time="$SECS" --hide-histogram >"$out.out" 2>&1 || true
  s1=$(steal1); t1=$(date +%s.%N)
  sleep 1.2; kill "$sp"; wait "$sp" 2>/dev/null || true
  read -r srv worst misses < <(judge "$out.samples" "$rate")
  local cpu p50 reqs
  cpu=$(awk '{print $1 + $2}' "$out.time")
  # memtier's requests: the server's count over the whole case (the sampler's first and last).
  reqs=$(awk 'NR==1{a=$2} {b=$2} END{print b - a}' "$out.samples")
  p50=$(awk '/^Totals/{print $6 * 1000}' "$out.out")
  awk -v rate="$rate" -v srv="$srv" -v cpu="$cpu" -v reqs="$reqs" -v worst="$worst" -v p50="$p50" -v misses="$misses" \
    -v steal="$(python3 -c "print(($s1 - $s0) / $HZ / ($t1 - $t0) * 100)")" \
    'BEGIN{printf "%-10s %-12s %8.0f %12s %12.2f %10s %11s%% %8.0fµs %8s %6.1f%%\n", "memtier", "rate-limit", rate, srv, cpu / reqs * 1e6, "-", worst, p50, misses, steal}'
}

for rate in $RATES; do
  for pacer in $PACERS; do
    run_crest "$rate" "$pacer" | tee -a "$work/rows"
  done
  if [[ -n $MEMTIER ]]; then
    run_memtier "$rate" | tee -a "$work/rows"
  fi
  if [[ -n $RPCPERF ]]; then
    run_rpcperf "$rate" | tee -a "$work/rows"
  fi
done
if [[ -n $MEMTIER ]]; then
  echo
  echo "CPU per request / memtier's (same rate, same run):"
  awk '$1=="memtier"{m[$3]=$5} $1!="memtier"{k=$3" "$1" "$2; c[k]=$5; r[k]=$3}
       END{for (k in c) if (m[r[k]] > 0) printf "  %-30s %.2fx\n", k, c[k] / m[r[k]]}' "$work/rows" | sort -n
else
  echo "(memtier skipped: MEMTIER= names its binary; ../shared/peers/build-memtier.sh builds one)"
fi

[[ -z $CEILING_RATES ]] && exit 0
# The ceiling of one client core, open loop, up the ladder CEILING_RATES until a rung does
# not hold (every steady second within 1% of the target as the server counted it, and,
# for Crest, lag p99 <= CEILING_LAG µs), against each of CEILING_TARGETS: `valkey` (the
# prefilled server on core 0: the figure a user gets, bounded by what one Valkey core
# answers) and `sink` (Crest's built-in target on core 0, cheaper than Valkey: the client
# core's own ceiling). memtier climbs the same ladder against Valkey; valkey-benchmark
# (VALKEY_BENCHMARK=, default valkey-benchmark or else redis-benchmark: the same program)
# has no rate limit, so it gives its closed-loop throughput on one thread at the same
# pipeline, the same server and key space (its own SETs fill its keys first: 2,000,000 SETs
# then as many GETs; CPU per request over both phases).
CEILING_TARGETS=${CEILING_TARGETS-valkey sink}
CEILING_LAG=${CEILING_LAG:-1000}
holds() { # ROW (a run_crest or run_memtier row) RATE: does it hold the rung?
  awk -v lag="$CEILING_LAG" '{ l = $6; sub(/µs/, "", l); w = $7; sub(/%/, "", w)
    ok = ($4 != "nan" && w + 0 <= 1.0 && (l == "-" || l + 0 <= lag)); exit ok ? 0 : 1 }' <<<"$1"
}
ladder() { # TOOL (crest|memtier) LABEL: climbs, prints each rung, then the ceiling
  local tool=$1 label=$2 best=0 row
  for rate in $CEILING_RATES; do
    if [[ $tool == crest ]]; then row=$(run_crest "$rate" sleep); else row=$(run_memtier "$rate"); fi
    echo "$row" | sed "s/^\(crest\|memtier\) */\1@$label /"
    if holds "$row"; then best=$rate; else break; fi
  done
  echo "ceiling $tool@$label pipeline $PIPELINE: ${best}/s" | tee -a "$work/ceilings"
}
echo
echo "One client core's open-loop ceiling, pipeline $PIPELINE (lag p99 <= ${CEILING_LAG} µs for Crest, every second within 1%):"
for tgt in $CEILING_TARGETS; do
  case $tgt in
    valkey) ladder crest valkey; [[ -n $MEMTIER ]] && ladder memtier valkey ;;
    sink)
      saved=$SP; SP=$(port)
      taskset -c 0 "$BIN/crest" sink --listen "127.0.0.1:$SP" >/dev/null 2>&1 &
      sinkpid=$!; pids+=($sinkpid)
      for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done
      ladder crest sink
      kill "$sinkpid"; SP=$saved ;;
    *) echo "side-by-side.sh: CEILING_TARGETS takes valkey and sink, not $tgt" >&2; exit 2 ;;
  esac
done
VB=${VALKEY_BENCHMARK:-$(command -v valkey-benchmark || command -v redis-benchmark || true)}
if [[ -n $VB ]]; then
  N=2000000
  calls() { redis-cli -p "$SP" info commandstats | tr -d '\r' \
    | sed -n 's/^cmdstat_\(get\|set\):calls=\([0-9]*\).*/\2/p' | awk '{s += $1} END {print s + 0}'; }
  s0=$(calls)
  /usr/bin/time -f "%U %S" -o "$work/vb.time" taskset -c 1 "$VB" -h 127.0.0.1 -p "$SP" -c 50 -P "$PIPELINE" \
    --threads 1 -t set,get -d "$VALUE_SIZE" -r 100000 -n "$N" -q >"$work/vb.out" 2>&1 || true
  s1=$(calls)
  python3 - "$work/vb.out" "$work/vb.time" "$((s1 - s0))" "$N" "$(basename "$VB")" <<'PY2'
import re, sys
out = open(sys.argv[1]).read().replace("\r", "\n")
rps = {k: float(v) for k, v in re.findall(r"(SET|GET): ([0-9.]+) requests per second", out)}
u, s = map(float, open(sys.argv[2]).read().split()[-2:])
counted, n, name = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if counted < 2 * n or "GET" not in rps:
    sys.exit(f"side-by-side.sh: {name}: the server counted {counted} calls, not {2 * n}; no figure")
print(f"{name} (closed loop, 1 thread, 50 connections): GET {rps['GET']:,.0f}/s, SET {rps.get('SET', 0):,.0f}/s, "
      f"{(u + s) / counted * 1e6:.2f} CPU s per 1M (server-counted)")
PY2
else
  echo "(valkey-benchmark skipped: neither valkey-benchmark nor redis-benchmark is on the PATH)"
fi

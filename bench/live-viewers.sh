#!/usr/bin/env bash
# What watching a run costs the coordinator (issue #30): three runs side by side, against
# one Valkey on core 0, each a coordinator (`--admin`, 100 ms intervals) with one
# crest-worker process, watched by 0, 1 and 20 viewers of the live page's feed (`curl -N
# GET /events`, what the page reads). The three run at once so they share the host alike.
# For each coordinator: CPU (utime + stime from /proc) over its measured phase (from the
# first /status that says running to the first that says done) and peak RSS (VmHWM) at
# the end; for the viewers: bytes received per interval each.
#
#   bench/live-viewers.sh [SECS] [RATE]        defaults: 600 2000
#
# The window checks itself: each run must report SECS / 0.1 intervals, every viewer must
# still be connected at the end (the feed's own count), and every viewer must have
# received the `end` frame; otherwise it says NOT MEASURED.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-600}
RATE=${2:-2000}
source bench/lib.sh
HZ=$(getconf CLK_TCK)
SP=$(port)
taskset -c 0 valkey-server --port "$SP" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done

status() { curl -s --max-time 2 "http://127.0.0.1:$1/status" || true; }
field() { python3 -c 'import json,sys
try: d=json.load(sys.stdin)
except Exception: print(""); sys.exit()
v=d
for k in sys.argv[1].split("."): v=(v or {}).get(k) if isinstance(v,dict) else None
print("" if v is None else v)' "$1"; }

declare -A AP CPID
for n in 0 1 20; do
  LP=$(port); AP[$n]=$(port)
  "$BIN/crest" run --listen "127.0.0.1:$LP" --workers 1 --wait-timeout 60s --target "127.0.0.1:$SP" \
    --rate "$RATE" --duration "${SECS}s" --interval 100ms --admin "127.0.0.1:${AP[$n]}" \
    --admin-linger 5s --out "$work/out$n" >/dev/null 2>"$work/crest$n.err" &
  CPID[$n]=$!; pids+=($!)
  taskset -c 1 "$BIN/crest-worker" --coordinator "http://127.0.0.1:$LP" --name "w$n" --cpus 1 \
    >/dev/null 2>"$work/worker$n.err" &
  pids+=($!)
done
# The viewers connect once the admin API answers.
for n in 0 1 20; do
  for _ in $(seq 300); do [[ -n $(status "${AP[$n]}") ]] && break; sleep 0.1; done
  for v in $(seq "$n"); do
    curl -sN --max-time $((SECS + 120)) "http://127.0.0.1:${AP[$n]}/events" > "$work/view$n.$v" 2>/dev/null &
    pids+=($!)
  done
done
declare -A C0 C1 HWM INTERVALS VIEWERS
left=3
while (( left > 0 )); do
  sleep 0.5
  left=0
  for n in 0 1 20; do
    [[ -n ${C1[$n]:-} ]] && continue
    left=$((left + 1))
    s=$(status "${AP[$n]}")
    phase=$(echo "$s" | field phase)
    if [[ -z ${C0[$n]:-} && $phase == running ]]; then C0[$n]=$(cpu "${CPID[$n]}"); fi
    if [[ $phase == done ]]; then
      C1[$n]=$(cpu "${CPID[$n]}")
      HWM[$n]=$(awk '/VmHWM/ {print $2}' "/proc/${CPID[$n]}/status")
      INTERVALS[$n]=$(echo "$s" | field intervals)
      VIEWERS[$n]=$(echo "$s" | field feed.viewers)
    fi
  done
done
# The feed closes (each viewer gets `end`) when the API stops after its linger.
for n in 0 1 20; do wait "${CPID[$n]}" || true; done
sleep 1
want=$((SECS * 10))
ok=1
printf 'viewers  intervals  coordinator CPU s  CPU ms per s  peak RSS MB  bytes per interval per viewer\n'
for n in 0 1 20; do
  cpu_s=$(python3 -c "print(round(($((C1[$n])) - $((C0[$n]))) / $HZ, 2))")
  per_s=$(python3 -c "print(round(1000 * $cpu_s / $SECS, 2))")
  bytes=0; ends=0
  for v in $(seq "$n"); do
    b=$(stat -c %s "$work/view$n.$v"); bytes=$((bytes + b))
    grep -q '^event: end' "$work/view$n.$v" && ends=$((ends + 1))
  done
  per_view=$([[ $n -gt 0 ]] && python3 -c "print(round($bytes / $n / ${INTERVALS[$n]}, 1))" || echo -)
  printf '%7s  %9s  %17s  %12s  %11s  %s\n' "$n" "${INTERVALS[$n]}" "$cpu_s" "$per_s" \
    "$(python3 -c "print(round(${HWM[$n]} / 1024, 1))")" "$per_view"
  [[ ${INTERVALS[$n]} == "$want" ]] || { echo "NOT MEASURED: run with $n viewers has ${INTERVALS[$n]} intervals, not $want"; ok=0; }
  [[ ${VIEWERS[$n]} == "$n" ]] || { echo "NOT MEASURED: $n viewers asked, the feed counted ${VIEWERS[$n]} at the end"; ok=0; }
  [[ $ends == "$n" ]] || { echo "NOT MEASURED: $ends of $n viewers got the end frame"; ok=0; }
done
(( ok )) || exit 1

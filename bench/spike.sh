#!/usr/bin/env bash
# A 10x spike, 5,000 -> 50,000 req/s, against Valkey pinned to core 0, one worker shard on
# core 1, timeline at 100 ms resolution. Prints the intervals around the step: the first
# 100 ms interval after it should already carry the new rate.
#
#   bench/spike.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins -q
work=$(mktemp -d); pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SP=$(port)
taskset -c 0 valkey-server --port "$SP" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done
taskset -c 1 target/release/crest run --target "127.0.0.1:$SP" --stages "3s:5000, 3s:50000" \
  --interval 100ms --ratio 1:10 --value-size 1024 --connections 50 --cpus 1 --threads 1 \
  --seed 1 --out "$work/out" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
python3 - "$work/out/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("t_s   target   achieved   latency p99 (us)")
for p in r["timeline"]:
    if 2.5 <= p["t_s"] <= 3.55:
        print(f'{p["t_s"]:4.1f} {p["target_rate"]:8.0f} {p["achieved_rate"]:10.0f} {p["latency_us"]["p99"]:12.1f}')
# The measurement window is the report's timeline: 6 s at 100 ms is 60 intervals, and the
# books must balance, or the figures below mean nothing.
if len(r["timeline"]) != 60 or not r["checks"]["intervals_match_totals"]:
    sys.exit(f'spike.sh: timeline has {len(r["timeline"])} intervals (want 60), checks {r["checks"]}; no figure')
first = next(p for p in r["timeline"] if abs(p["t_s"] - 3.0) < 1e-6)
print(f'first 100 ms interval after the step: achieved {first["achieved_rate"]:.0f}/s = {first["achieved_rate"] / first["target_rate"]:.3f} of target')
PY

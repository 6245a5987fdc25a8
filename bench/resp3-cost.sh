#!/usr/bin/env bash
# RESP2 vs RESP3 cost (issue #9's numbers): the same fixed-rate run twice, one after the
# other, against the same server (pinned to core 0), one shard (--threads 1) with crest
# pinned to core 1: once --resp 2, once --resp 3. Prints each run's whole-process CPU
# (user + sys of the crest process, coordinator and in-process worker, from wait4 via
# /usr/bin/time) per million requests, and its latency.
#
#   bench/resp3-cost.sh [RATE] [DURATION_S] [MIX]
#     defaults: 20000 10 "GET=10,SET=1"
#   e.g. a mix whose replies differ between the protocols:
#     bench/resp3-cost.sh 20000 10 "GET=4,SET=1,HGETALL=1,ZADD=1,ZRANGE __key__ 0 9 WITHSCORES=1"
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-20000}
SECS=${2:-10}
MIX=${3:-GET=10,SET=1}
SERVER=${CREST_SERVER:-valkey-server}
cargo build --release --bins -q
BIN=target/release
work=$(mktemp -d)
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
pids=()
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SP=$(port)
taskset -c 0 "$SERVER" --port "$SP" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done

for resp in 2 3; do
  redis-cli -p "$SP" flushall >/dev/null
  taskset -c "${CREST_CPU:-1}" /usr/bin/time -f "%U %S" -o "$work/time-$resp" \
    "$BIN/crest" run --target "127.0.0.1:$SP" --resp "$resp" --rate "$RATE" --duration "${SECS}s" \
    --mix "$MIX" --keys 10000 --value-size 64 --prefill --connections 50 --pipeline 1 --threads 1 \
    --seed 1 --out "$work/out-$resp" >"$work/table-$resp.txt" 2>"$work/crest-$resp.err"
  python3 - "$work/out-$resp/report.json" "$work/time-$resp" "$resp" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
user, sys_ = map(float, open(sys.argv[2]).read().split()[-2:])
t = r["totals"]
reqs = t["completed"] + t["errors"]
cpu = user + sys_
assert r["resp"] == int(sys.argv[3]), r["resp"]
print(f"RESP{sys.argv[3]}: {reqs} requests, errors {t['errors']}, misses {t['misses']}, "
      f"crest CPU {cpu:.2f} s (user {user:.2f}, sys {sys_:.2f}) = {cpu / reqs * 1e6:.2f} CPU s per million; "
      f"latency p50 {t['latency_us']['p50']} us p99 {t['latency_us']['p99']} us; "
      f"generator-bound intervals {len(r['checks']['generator_bound_intervals'])}")
PY
done

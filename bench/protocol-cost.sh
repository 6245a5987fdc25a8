#!/usr/bin/env bash
# What each way of speaking to the server costs the generator (issue #9, "Numbers"): one
# crest-worker shard pinned to core 1, redis-server 7.0 pinned to core 0 with a plaintext
# and a TLS port, the same fixed-rate run (SET:GET 1:10, 1 KB values, 50 connections,
# pipeline 1) once per mode, one after the other:
#   plain   plaintext RESP2
#   tls     --tls (TLS 1.3, certificate verified)
#   resp3   --resp 3 (when this crest has it)
# Prints, per mode, the worker's CPU seconds (user + sys, from /proc, over a window that
# must cover the run) per million requests, the server-counted requests (which must equal
# the schedule), schedule lag p99 and latency p99, then each mode's CPU relative to plain.
#
#   bench/protocol-cost.sh [RATE] [DURATION_S]     defaults: 10000 10
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-10000}
SECS=${2:-10}
source bench/lib.sh

command -v redis-server >/dev/null || { echo "protocol-cost.sh: needs redis-server (scripts/install-test-deps.sh)" >&2; exit 1; }

# A CA and a server certificate for 127.0.0.1.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bench CA" \
  -keyout "$work/ca.key" -out "$work/ca.pem" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$work/srv.key" -out "$work/srv.csr" >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$work/ext.cnf"
openssl x509 -req -in "$work/srv.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -days 2 -extfile "$work/ext.cnf" -out "$work/srv.pem" >/dev/null 2>&1

SP=$(port); TP=$(port)
taskset -c 0 redis-server --port "$SP" --tls-port "$TP" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --tls-cert-file "$work/srv.pem" --tls-key-file "$work/srv.key" \
  --tls-ca-cert-file "$work/ca.pem" --tls-auth-clients no >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$SP" ping >/dev/null || { echo "protocol-cost.sh: redis-server did not start (built without TLS?)" >&2; exit 1; }

modes=(plain tls)
"$BIN/crest" run --help | grep -q -- '--resp' && modes+=(resp3)
HZ=$(getconf CLK_TCK)
calls() { redis-cli -p "$SP" info commandstats | python3 -c '
import sys
n = 0
for l in sys.stdin:
    if l.startswith(("cmdstat_get:", "cmdstat_set:")):
        n += int(l.split("calls=")[1].split(",")[0])
print(n)'; }

results="$work/results.txt"
: >"$results"
for mode in "${modes[@]}"; do
  case $mode in
    plain) target="127.0.0.1:$SP"; extra=() ;;
    tls) target="127.0.0.1:$TP"; extra=(--tls --cacert "$work/ca.pem") ;;
    resp3) target="127.0.0.1:$SP"; extra=(--resp 3) ;;
  esac
  CP=$(port)
  redis-cli -p "$SP" flushall >/dev/null
  redis-cli -p "$SP" config resetstat >/dev/null
  taskset -c 0 "$BIN/crest" run --listen "127.0.0.1:$CP" --workers 1 --wait-timeout 30s \
    --target "$target" "${extra[@]}" --rate "$RATE" --duration "${SECS}s" --ratio 1:10 \
    --keys 100000 --value-size 1024 --connections 50 --pipeline 1 --seed 1 \
    --out "$work/out-$mode" >"$work/table-$mode.txt" 2>"$work/crest-$mode.err" &
  cpid=$!
  "$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus 1 --threads 1 2>"$work/worker-$mode.err" &
  wpid=$!
  seen=
  for _ in $(seq 600); do grep -q "^crest: run " "$work/crest-$mode.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
  [ -n "$seen" ] || { echo "protocol-cost.sh: $mode: the run did not start (no 'crest: run' line)" >&2; cat "$work/crest-$mode.err" >&2; exit 1; }
  c0=$(cpu "$wpid"); t0=$(date +%s.%N)
  wait "$cpid"
  c1=$(cpu "$wpid"); t1=$(date +%s.%N)
  kill "$wpid" 2>/dev/null || true
  wait "$wpid" 2>/dev/null || true
  echo "$mode $c0 $c1 $t0 $t1 $(calls)" >>"$results"
done

python3 - "$results" "$work" "$HZ" "$RATE" "$SECS" <<'PY'
import json, sys
results, work, hz, rate, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
rows = {}
for line in open(results):
    mode, c0, c1, t0, t1, served = line.split()
    window = float(t1) - float(t0)
    if not (secs <= window <= secs + 10):
        sys.exit(f"protocol-cost.sh: {mode}: CPU window {window:.1f} s does not cover a {secs:.0f} s run; no figure")
    r = json.load(open(f"{work}/out-{mode}/report.json"))
    t = r["totals"]
    want = int(rate * secs)
    if int(served) != want:
        sys.exit(f"protocol-cost.sh: {mode}: the server counted {served} requests, the schedule had {want}; no figure")
    cpu_s = (int(c1) - int(c0)) / hz
    rows[mode] = cpu_s / want * 1e6
    extra = f", TLS {r['tls']['version']} {r['tls']['cipher']}" if r.get("tls") else ""
    print(f"{mode:6} {cpu_s:6.2f} CPU s for {want} requests = {rows[mode]:6.2f} CPU s per million; "
          f"server counted {served}; lag p99 {t['schedule_lag_us']['p99']} us; latency p99 {t['latency_us']['p99']} us{extra}")
for mode, v in rows.items():
    if mode != "plain":
        print(f"{mode} / plain CPU per request: {v / rows['plain']:.2f}")
PY

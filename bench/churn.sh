#!/usr/bin/env bash
# The client CPU one reconnection costs (issue #29): the same open-loop load twice in one
# sitting, alternated, once with connections that live the whole run and once with
# --conn-lifetime LIFE, against Valkey (plaintext) and, when redis-server has TLS, against
# its TLS port with a test CA. The worker's CPU (a remote-style worker process, user + sys
# over the run's window, which opens on "crest: run <id>") is read for each; the extra CPU
# over the reconnects the churned run made is the cost of one reconnect (connect, TLS
# handshake, setup, and the requests that waited for it).
#
#   bench/churn.sh [RATE] [SECS] [LIFE] [PAIRS]     defaults: 5000 10 100ms 3
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-5000}
SECS=${2:-10}
LIFE=${3:-100ms}
PAIRS=${4:-3}
source bench/lib.sh
HZ=$(getconf CLK_TCK)
SP=$(port)
taskset -c 0 valkey-server --port "$SP" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done

# A TLS server when redis-server has TLS (Debian's does): a test CA and a server
# certificate for 127.0.0.1 made here with openssl.
TLS_TARGET=
if command -v openssl >/dev/null && command -v redis-server >/dev/null; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" -days 2 \
    -subj "/CN=crest-bench-ca" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -keyout "$work/srv.key" -out "$work/srv.csr" \
    -subj "/CN=127.0.0.1" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\n' > "$work/san.ext"
  openssl x509 -req -in "$work/srv.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -out "$work/srv.pem" -days 2 -extfile "$work/san.ext" >/dev/null 2>&1
  TP=$(port); PP=$(port)
  taskset -c 0 redis-server --port "$PP" --tls-port "$TP" --bind 127.0.0.1 --save "" \
    --appendonly no --tls-cert-file "$work/srv.pem" --tls-key-file "$work/srv.key" \
    --tls-ca-cert-file "$work/ca.pem" --tls-auth-clients no --dir "$work" >"$work/tls.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$PP" ping >/dev/null 2>&1 && { TLS_TARGET="127.0.0.1:$TP"; break; }; sleep 0.1; done
fi

# One run: ARGS after the common ones; prints "cpu_s reconnects completed errors".
one() {
  local CP out c0 c1
  CP=$(port); out="$work/run-$RANDOM"
  taskset -c 0 "$BIN/crest" run --listen "127.0.0.1:$CP" --workers 1 --wait-timeout 30s \
    --rate "$RATE" --duration "${SECS}s" --connections 50 --seed 1 --no-server-stats \
    --out "$out" "$@" >/dev/null 2>"$out.err" &
  local cpid=$!
  "$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus 1 --threads 1 2>"$out.worker" &
  local wpid=$!
  local seen=
  for _ in $(seq 600); do grep -q "^crest: run " "$out.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
  [[ -n $seen ]] || { echo "churn.sh: the run did not start; no figure" >&2; cat "$out.err" >&2; kill $cpid $wpid; exit 1; }
  c0=$(cpu "$wpid"); wait "$cpid"; c1=$(cpu "$wpid")
  kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true
  grep -q "crest: report written" "$out.err" || { echo "churn.sh: no report; no figure" >&2; cat "$out.err" >&2; exit 1; }
  python3 - "$out/report.json" "$c0" "$c1" "$HZ" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r.get("connections", {})
t = r["totals"]
print((int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]), c.get("opened", 0), t["completed"], t["errors"])
PY
}

measure() { # NAME ARGS...
  local name=$1; shift
  local base=() churn=()
  for _ in $(seq "$PAIRS"); do
    base+=("$(one "$@")")
    churn+=("$(one "$@" --conn-lifetime "$LIFE")")
  done
  python3 - "$name" "$LIFE" "${base[@]}" -- "${churn[@]}" <<'PY'
import sys
name, life = sys.argv[1], sys.argv[2]
rest = sys.argv[3:]
cut = rest.index("--")
base = [tuple(map(float, r.split())) for r in rest[:cut]]
churn = [tuple(map(float, r.split())) for r in rest[cut + 1:]]
for b, c in zip(base, churn):
    extra = c[0] - b[0]
    print(f"{name}: steady {b[0]:.2f} CPU s ({b[1]:.0f} reconnects), --conn-lifetime {life} {c[0]:.2f} CPU s "
          f"({c[1]:.0f} reconnects, {c[3]:.0f} errors): {extra / max(c[1], 1) * 1e6:.1f} µs of client CPU per reconnect")
b = sorted(x[0] for x in base)[len(base) // 2]
c = sorted(x[0] for x in churn)[len(churn) // 2]
n = sorted(x[1] for x in churn)[len(churn) // 2]
print(f"{name}: median {(c - b) / max(n, 1) * 1e6:.1f} µs per reconnect")
PY
}

measure plain --target "127.0.0.1:$SP"
if [[ -n $TLS_TARGET ]]; then
  measure tls --target "$TLS_TARGET" --tls --cacert "$work/ca.pem"
else
  echo "churn.sh: no TLS redis-server here; the TLS figure was not measured" >&2
fi

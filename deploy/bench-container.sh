#!/usr/bin/env bash
# Container vs bare metal: the same crest-worker binary (the stripped static one that is in
# the image), given one core either as a container cpuset (`docker run --cpuset-cpus 1`) or
# as a bare process (`taskset -c 1`). Same coordinator, same target, same workload, same
# machine; runs alternate container/bare so background load hits both alike.
#
#   deploy/bench-container.sh                   # rates "20000 max", 10 s, 2 rounds
#   BENCH_RATES="20000 50000 max" BENCH_DURATION=20s BENCH_REPEAT=3 deploy/bench-container.sh
#
# Target: valkey-server pinned to core 0 (CREST_SERVER picks another binary), or crest's
# built-in sink when no valkey-server is installed. The coordinator also runs on core 0.
# The worker (container or bare) gets core BENCH_WORKER_CPU (default 1) only. Workload as in
# bench/core.sh: SET:GET 1:10, 1 KB values, 100k keys, 50 connections, pipeline 1, seed 1.
# The container sits on its own bridge network and reaches the coordinator and target
# through the bridge's gateway address; the bare worker dials the same address.
#
# Prints, per rate: achieved rate, schedule lag p99, latency p99 and the worker's CPU seconds
# per million requests, container vs bare, and the ratio container/bare (median of rounds;
# the median, because a 2-core machine shared with other work has outliers).
# Skips loudly (exit 0) when no Docker engine answers. SKIP_BUILD=1 reuses the image;
# BENCH_KEEP=1 keeps every run's report.json (the folder is printed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

if ! timeout 30 docker info >/dev/null 2>&1; then
    echo "bench-container: SKIPPED -- no Docker engine answers (docker info failed); nothing measured" >&2
    exit 0
fi

IMAGE_REF="${IMAGE:-crest}:latest"
BIN="${CARGO_TARGET_DIR:-$ROOT/target/static}/image/bin"
RATES="${BENCH_RATES:-20000 max}"
DURATION="${BENCH_DURATION:-10s}"
REPEAT="${BENCH_REPEAT:-2}"
SIDE_CPU="${BENCH_SERVER_CPU:-0}"
WORKER_CPU="${BENCH_WORKER_CPU:-1}"
SERVER="${CREST_SERVER:-valkey-server}"

if [[ "${SKIP_BUILD:-0}" != 1 || ! -x "$BIN/crest-worker" ]]; then
    "$ROOT/deploy/build-image.sh"
fi
# The bare runs must use the very binary that is in the image.
for b in crest crest-worker; do
    want="$(docker run --rm --entrypoint "$b" "$IMAGE_REF" --version)"
    have="$("$BIN/$b" --version)"
    [[ "$want" == "$have" ]] || { echo "bench-container: $BIN/$b ($have) is not the image's ($want); run without SKIP_BUILD" >&2; exit 1; }
done

WORK="$(mktemp -d /tmp/crest-bench.XXXXXX)"
NET="crestbench$$"
WNAME="crestbench$$w"
pids=()
cleanup() {
    local rc=$?
    docker rm -f "$WNAME" >/dev/null 2>&1 || true
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    docker network rm "$NET" >/dev/null 2>&1 || true
    if [[ "${BENCH_KEEP:-0}" == 1 ]]; then echo "bench-container: reports kept in $WORK" >&2; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

docker network create "$NET" >/dev/null
GW="$(docker network inspect "$NET" --format '{{range .IPAM.Config}}{{.Gateway}}{{end}}')"
[[ -n "$GW" ]] || { echo "bench-container: no gateway address for network $NET" >&2; exit 1; }

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])'; }
SP="$(port)"
if command -v "$SERVER" >/dev/null 2>&1; then
    TARGET_DESC="$SERVER ($("$SERVER" --version | awk '{print $3}'))"
    taskset -c "$SIDE_CPU" "$SERVER" --port "$SP" --bind 0.0.0.0 --protected-mode no --save "" \
        --appendonly no --dir "$WORK" >"$WORK/server.log" 2>&1 &
else
    TARGET_DESC="crest sink"
    taskset -c "$SIDE_CPU" "$BIN/crest" sink --listen "0.0.0.0:$SP" >"$WORK/server.log" 2>&1 &
fi
pids+=($!)
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/$GW/$SP") 2>/dev/null && break
    sleep 0.1
done

# One run: $1 = container|bare, $2 = rate, $3 = output folder. Prints "achieved lag99 lat99 cpu_per_M gb_seconds cpus".
one_run() {
    local mode=$1 rate=$2 out=$3 cp cpid wpid c0 c1 hz
    cp="$(port)"
    taskset -c "$SIDE_CPU" "$BIN/crest" run --listen "0.0.0.0:$cp" --workers 1 --wait-timeout 30s \
        --target "$GW:$SP" --rate "$rate" --duration "$DURATION" --ratio 1:10 --keys 100000 \
        --value-size 1024 --connections 50 --pipeline 1 --seed 1 --out "$out" \
        >"$out.table" 2>"$out.err" &
    cpid=$!
    pids+=($cpid)
    if [[ $mode == container ]]; then
        docker run -d --rm --name "$WNAME" --network "$NET" --cpuset-cpus "$WORKER_CPU" \
            -e CREST_COORDINATOR="http://$GW:$cp" -e CREST_NAME=container "$IMAGE_REF" >/dev/null
        wpid="$(docker inspect -f '{{.State.Pid}}' "$WNAME")"
    else
        taskset -c "$WORKER_CPU" env CREST_NAME=bare "$BIN/crest-worker" --coordinator "http://$GW:$cp" \
            2>"$out.worker.err" &
        wpid=$!
        pids+=($wpid)
    fi
    # "crest: run <uuid>: 1 worker(s), ..." is printed as the plan goes out, just before t = 0.
    for _ in $(seq 600); do grep -qE 'crest: run [0-9a-f-]{36}:' "$out.err" 2>/dev/null && break; sleep 0.05; done
    c0="$(awk '{print $14 + $15}' "/proc/$wpid/stat")"
    local rc=0
    timeout 120 tail --pid="$cpid" -f /dev/null || kill "$cpid" 2>/dev/null || true
    wait "$cpid" || rc=$?
    c1="$(awk '{print $14 + $15}' "/proc/$wpid/stat" 2>/dev/null || echo "$c0")"
    if [[ $mode == container ]]; then docker rm -f "$WNAME" >/dev/null 2>&1 || true; else kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
    if [[ $rc != 0 || ! -f "$out/report.json" ]]; then
        echo "bench-container: $mode run at $rate exited $rc:" >&2
        tail -5 "$out.err" >&2
        return 1
    fi
    hz="$(getconf CLK_TCK)"
    python3 - "$out/report.json" "$c0" "$c1" "$hz" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c0, c1, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = r["totals"]
reqs = max(1, t["completed"] + t["errors"])
w = r["workers"][0]
print(t["achieved_rate"], t["schedule_lag_us"]["p99"], t["latency_us"]["p99"],
      round((c1 - c0) / hz / reqs * 1e6, 2),
      len(r["checks"]["generator_bound_intervals"]),
      ",".join(map(str, w["cpus"])))
PY
}

read -r LOAD1 _ </proc/loadavg
if awk -v l="$LOAD1" -v n="$(nproc)" 'BEGIN{exit !(l > n / 2)}'; then
    echo "bench-container: WARNING: load average $LOAD1 on $(nproc) cores: other work shares these cores, so lag and latency below are mostly its noise; the ratio is meaningful only on an otherwise idle machine" >&2
fi
echo "bench-container: target $TARGET_DESC on core $SIDE_CPU (coordinator there too); worker on core $WORKER_CPU; $DURATION per run, $REPEAT round(s); load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %-9s %5s %12s %12s %12s %10s %4s %5s\n' rate mode round achieved/s lag_p99_us lat_p99_us cpu_s/M gb cpus
for rate in $RATES; do
    for i in $(seq "$REPEAT"); do
        if ((i % 2)); then order="container bare"; else order="bare container"; fi
        for mode in $order; do
            out="$WORK/$rate-$mode-$i"
            res="$(one_run "$mode" "$rate" "$out")" || exit 1
            echo "$rate $mode $i $res" >>"$WORK/results.txt"
            read -r a l p c g cpus <<<"$res"
            printf '%-7s %-9s %5s %12s %12s %12s %10s %4s %5s\n' "$rate" "$mode" "$i" "$a" "$l" "$p" "$c" "$g" "$cpus"
        done
    done
done

echo
echo "container / bare (median over rounds; 1.00 = no difference):"
python3 - "$WORK/results.txt" <<'PY'
import sys
from collections import defaultdict
rows = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    rate, mode, _, a, l, p, c, g, cpus = line.split()
    rows[rate][mode].append((float(a), float(l), float(p), float(c)))
import statistics
mean = statistics.median
print(f"{'rate':<7} {'achieved':>9} {'lag p99':>9} {'lat p99':>9} {'cpu/req':>9}   (container values / bare values)")
for rate, m in rows.items():
    ct, bt = m["container"], m["bare"]
    ratios = [mean([x[k] for x in ct]) / mean([x[k] for x in bt]) if mean([x[k] for x in bt]) else float("nan") for k in range(4)]
    print(f"{rate:<7} {ratios[0]:>9.3f} {ratios[1]:>9.2f} {ratios[2]:>9.2f} {ratios[3]:>9.2f}")
    for mode, xs in (("container", ct), ("bare", bt)):
        print(f"          {mode:<9} achieved {mean([x[0] for x in xs]):>10.0f}/s  lag p99 {mean([x[1] for x in xs]):>9.1f} us  latency p99 {mean([x[2] for x in xs]):>9.1f} us  cpu {mean([x[3] for x in xs]):.2f} s/M")
PY

#!/usr/bin/env bash
# Container test: the image and deploy/compose.yaml, for real, on this machine's Docker engine.
#
#   deploy/test-compose.sh
#
# 1. builds the image (deploy/build-image.sh; SKIP_BUILD=1 reuses crest:latest) and prints
#    its size;
# 2. `compose up` with 3 workers and the built-in sink; a 10 s run; checks that report.json
#    lists the 3 worker containers, none lost, achieved rate within 2% of the target, books
#    balanced; prints the time from `compose up` to the first worker registered. The run
#    itself proves name resolution inside the scratch containers: workers dialled
#    http://coordinator:7600 and connected to sink:6379 by service name (Docker's DNS); the
#    test also checks that each worker's "run accepted ... target=IP:6379" log line names
#    the sink container's address;
# 3. a second run on the same (idle, long-lived) workers: `docker kill` one worker mid-run;
#    checks that crest exits 3 and that this worker, and only it, is marked lost;
# 4. the per-run Kubernetes form (deploy/k8s-run) in containers: an overlay (2 workers of
#    1 CPU, the sink as target) rendered with `kubectl kustomize` and turned into Compose
#    by deploy/k8s-run/compose_from_k8s.py, which gives each container what Kubernetes
#    would (the image and user, read-only root, dropped capabilities, a cpuset per worker,
#    JOB_COMPLETION_INDEX, the Services' names); the coordinator's exit code is the verdict
#    (0), each worker takes part in the one run and exits 0, and the report names them
#    worker-0 and worker-1 on hosts crest-workers-0 and -1; a worker killed in a second
#    such run makes the verdict 3;
# 5. `compose down`; checks that no container or network of the project remains.
#
# Skips (exit 0, loudly) only when no Docker engine answers. Every wait is bounded; the
# project is always taken down, even on failure (trap). Environment: CREST_COMPOSE (compose
# command, default `docker compose` else `docker-compose`), TEST_RATE (default 6000),
# SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

log() { echo "test-compose: $*" >&2; }
fail() {
    echo "test-compose: FAIL: $*" >&2
    exit 1
}

if ! timeout 30 docker info >/dev/null 2>&1; then
    cat >&2 <<'EOF'

################################################################################
##                                                                            ##
##   SKIPPED: deploy/test-compose.sh -- no Docker engine answers here         ##
##   (`docker info` failed). The container image and compose file were NOT    ##
##   tested. Run this on a machine with a Docker engine to test them.         ##
##                                                                            ##
################################################################################

EOF
    # A skip is not a pass: scripts/test.sh reports it, and CREST_REQUIRE_DOCKER=1 fails.
    [[ "${CREST_REQUIRE_DOCKER:-0}" == 1 ]] && fail "CREST_REQUIRE_DOCKER=1 but no Docker engine answers"
    echo "SKIP: deploy/test-compose.sh (no Docker engine)" >&2
    exit 77
fi

if [[ -n "${CREST_COMPOSE:-}" ]]; then
    read -r -a COMPOSE_CMD <<<"$CREST_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
    COMPOSE_CMD=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE_CMD=(docker-compose)
else
    fail "a Docker engine answers but neither 'docker compose' nor 'docker-compose' is installed"
fi
command -v python3 >/dev/null || fail "python3 is needed to read report.json"

PROJECT="cresttest$$x$(date +%s)"
WORK="$(mktemp -d /tmp/crest-compose.XXXXXX)"
IMAGE_REF="${IMAGE:-crest}:latest"
COMPOSE_FILE="$ROOT/deploy/compose.yaml"
WORKERS=3
RATE="${TEST_RATE:-6000}"
UP=0
: >"$WORK/empty.env"

# An empty env file: a deploy/.env left by a user must not change what is tested.
compose() { timeout 120 "${COMPOSE_CMD[@]}" --env-file "$WORK/empty.env" -p "$PROJECT" -f "$COMPOSE_FILE" "$@"; }

K8S_UP=0
K8S_PROJECT="${PROJECT}k"
k8s_compose() { timeout 120 "${COMPOSE_CMD[@]}" --env-file "$WORK/empty.env" -p "$K8S_PROJECT" -f "$WORK/k8s/compose.yaml" "$@"; }
cleanup() {
    local rc=$?
    if [[ $K8S_UP == 1 ]]; then
        if [[ $rc != 0 ]]; then k8s_compose logs --no-color --tail 40 >&2 || true; fi
        k8s_compose down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    fi
    if [[ $UP == 1 ]]; then
        if [[ $rc != 0 ]]; then
            log "logs of the failed test (last 40 lines per service):"
            compose logs --no-color --tail 40 >&2 || true
        fi
        compose down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The results folders must be writable by the image's user (65532).
mkresults() {
    mkdir -p "$1"
    if [[ $(id -u) == 0 ]]; then chown 65532:65532 "$1"; else chmod 0777 "$1"; fi
}

# Unix time (s, fractional) of a `docker logs -t` timestamp such as 2025-11-30T13:10:01.123456789Z.
ts_epoch() { date -u -d "$1" +%s.%N; }

# Waits (at most $3 s) until container $1's log has a line matching the ERE $2; sets LOG_LINE
# to it (with its `docker logs -t` timestamp). Runs in this shell, so a signal stops it at once.
LOG_LINE=""
wait_log() {
    local cid=$1 re=$2 limit=$3 deadline
    deadline=$((SECONDS + limit))
    while ((SECONDS < deadline)); do
        LOG_LINE="$(docker logs -t "$cid" 2>&1 | grep -E -m1 -- "$re" || true)"
        [[ -n "$LOG_LINE" ]] && return 0
        sleep 0.2
    done
    return 1
}

# Waits (at most $2 s) for container $1 to exit; sets EXIT_CODE. `wait` on a background job
# keeps the script responsive to INT/TERM (the trap then takes the project down).
EXIT_CODE=""
wait_exit() {
    timeout "$2" docker wait "$1" >"$WORK/exit-code" &
    wait $! || fail "container $1 still running after $2 s"
    EXIT_CODE="$(cat "$WORK/exit-code")"
}

# ---------------------------------------------------------------------------------------
log "1/5 building the image"
if [[ "${SKIP_BUILD:-0}" == 1 ]]; then
    docker image inspect "$IMAGE_REF" >/dev/null 2>&1 || fail "SKIP_BUILD=1 but no image $IMAGE_REF"
else
    "$ROOT/deploy/build-image.sh"
fi
IMAGE_BYTES="$(docker image inspect -f '{{.Size}}' "$IMAGE_REF")"
log "image $IMAGE_REF: $IMAGE_BYTES bytes ($(awk -v b="$IMAGE_BYTES" 'BEGIN{printf "%.1f", b/1048576}') MiB)"

export CREST_IMAGE="$IMAGE_REF" WORKERS CREST_RATE="$RATE" CREST_DURATION=10s
export CREST_TARGET=sink:6379 CREST_ARGS="--wait-timeout 60s"
unset CREST_CPUS CREST_THREADS CREST_NAME CREST_TOKEN CREST_COORDINATOR WORKER_CPUSET SINK_CPUSET \
    CREST_RATIO CREST_CONNECTIONS CREST_WAIT_TIMEOUT RUST_LOG

# ---------------------------------------------------------------------------------------
log "2/5 compose up: sink, coordinator, $WORKERS workers; 10 s at $RATE req/s (project $PROJECT, ${COMPOSE_CMD[*]})"
mkresults "$WORK/run1"
export CREST_RESULTS="$WORK/run1"
UP=1
T_UP="$(date +%s.%N)"
compose up -d --scale worker=$WORKERS >/dev/null 2>&1 || fail "compose up failed"
COORD="$(compose ps -q coordinator)"
[[ -n "$COORD" ]] || fail "no coordinator container"
wait_log "$COORD" 'worker .* registered: 1/' 60 || fail "no worker registered within 60 s"
first="$LOG_LINE"
wait_log "$COORD" "registered: $WORKERS/$WORKERS" 60 || fail "not all $WORKERS workers registered within 60 s"
all="$LOG_LINE"
FIRST_S="$(awk -v a="$(ts_epoch "${first%% *}")" -v b="$T_UP" 'BEGIN{printf "%.2f", a-b}')"
ALL_S="$(awk -v a="$(ts_epoch "${all%% *}")" -v b="$T_UP" 'BEGIN{printf "%.2f", a-b}')"
COORD_START="$(docker inspect -f '{{.State.StartedAt}}' "$COORD")"
FROM_START_S="$(awk -v a="$(ts_epoch "${first%% *}")" -v b="$(ts_epoch "$COORD_START")" 'BEGIN{printf "%.2f", a-b}')"
log "compose up -> first worker registered: ${FIRST_S} s; all $WORKERS: ${ALL_S} s (coordinator container start -> first registered: ${FROM_START_S} s)"

wait_exit "$COORD" 90
[[ "$EXIT_CODE" == 0 ]] || fail "crest run exited $EXIT_CODE, expected 0"
mapfile -t WORKER_IDS < <(compose ps -q worker)
[[ ${#WORKER_IDS[@]} == "$WORKERS" ]] || fail "expected $WORKERS worker containers, found ${#WORKER_IDS[@]}"
HOSTNAMES=()
for c in "${WORKER_IDS[@]}"; do HOSTNAMES+=("$(docker inspect -f '{{.Config.Hostname}}' "$c")"); done

python3 - "$WORK/run1/report.json" "$RATE" "${HOSTNAMES[@]}" <<'EOF' || fail "run 1 report check failed"
import json, sys
path, rate, hosts = sys.argv[1], float(sys.argv[2]), sorted(sys.argv[3:])
r = json.load(open(path))
ws = r["workers"]
def check(ok, msg):
    if not ok:
        sys.exit(f"test-compose: report: {msg}")
check(len(ws) == 3, f"{len(ws)} workers in the report, expected 3")
check(sorted(w["name"] for w in ws) == hosts, f"worker names {[w['name'] for w in ws]} are not the worker containers {hosts}")
check(not any(w["lost"] for w in ws), "a worker is marked lost")
check(all(w["completed"] > 0 for w in ws), "a worker completed nothing")
t = r["totals"]
check(t["target_rate"] == rate, f"target_rate {t['target_rate']} != {rate}")
check(abs(t["achieved_rate"] - rate) <= 0.02 * rate, f"achieved_rate {t['achieved_rate']} not within 2% of {rate}")
check(r["checks"]["problems"] == [], f"problems: {r['checks']['problems']}")
check(r["target"] == "sink:6379", f"target {r['target']}")
lag = t["schedule_lag_us"]["p99"]
c = r["checks"]  # informational only; the key was renamed once (seconds -> intervals)
gb = c["generator_bound_intervals"]
print(f"test-compose: run 1 ok: 3 workers {hosts}, achieved {t['achieved_rate']}/s of {rate:.0f}/s, "
      f"latency p99 {t['latency_us']['p99']} us, schedule lag p99 {lag} us, "
      f"generator-bound intervals {gb}", file=sys.stderr)
EOF
# Name resolution inside the scratch image (static glibc, files+dns back ends, Docker's
# embedded DNS): each worker registered through http://coordinator:7600 (the report lists
# them) and resolved sink:6379 itself, which its log shows as "run accepted ... target=IP:6379".
SINK_IP="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(compose ps -q sink)")"
for c in "${WORKER_IDS[@]}"; do
    # Read the whole log first: under pipefail, `docker logs | grep -q` fails whenever grep
    # stops at its match before docker has written everything (SIGPIPE).
    logs="$(docker logs "$c" 2>&1)"
    grep -q "run accepted.* target=$SINK_IP:6379" <<<"$logs" ||
        fail "worker $c did not resolve sink:6379 to the sink's address $SINK_IP"
done
log "name resolution via Docker's DNS works in the FROM scratch image: every worker reached coordinator:7600 by name and resolved sink:6379 to $SINK_IP"

# ---------------------------------------------------------------------------------------
log "3/5 second run on the same workers; docker kill one worker mid-run"
mkresults "$WORK/run2"
export CREST_RESULTS="$WORK/run2"
compose up -d --no-deps --force-recreate coordinator >/dev/null 2>&1 || fail "compose up coordinator (run 2) failed"
COORD="$(compose ps -q coordinator)"
wait_log "$COORD" "registered: $WORKERS/$WORKERS" 60 || fail "run 2: the idle workers did not re-register within 60 s"
# Progress lines look like "<docker timestamp>   3.1s/10s  target ..."; kill once 3 s of the
# schedule have run.
wait_log "$COORD" 'Z +[3-9]\.[0-9]s/10s' 40 || fail "run 2 did not reach 3 s"
VICTIM="${WORKER_IDS[0]}"
VICTIM_NAME="$(docker inspect -f '{{.Config.Hostname}}' "$VICTIM")"
docker kill "$VICTIM" >/dev/null
log "killed worker container $VICTIM_NAME"
wait_exit "$COORD" 90
[[ "$EXIT_CODE" == 3 ]] || fail "crest run exited $EXIT_CODE after a worker was killed, expected 3"
python3 - "$WORK/run2/report.json" "$VICTIM_NAME" <<'EOF' || fail "run 2 report check failed"
import json, sys
r = json.load(open(sys.argv[1]))
victim = sys.argv[2]
ws = {w["name"]: w for w in r["workers"]}
def check(ok, msg):
    if not ok:
        sys.exit(f"test-compose: report: {msg}")
check(len(ws) == 3, f"{len(ws)} workers in the report, expected 3")
check(victim in ws, f"killed worker {victim} not in the report ({list(ws)})")
check(ws[victim]["lost"] and ws[victim]["lost_reason"], f"killed worker {victim} is not marked lost")
others = [w for n, w in ws.items() if n != victim]
check(not any(w["lost"] for w in others), "a surviving worker is marked lost")
check(all(w["completed"] > 0 for w in others), "a surviving worker completed nothing")
check(ws[victim]["completed"] > 0, "the killed worker's intervals before its death are missing")
print(f"test-compose: run 2 ok: exit 3, {victim} lost ({ws[victim]['lost_reason']}), "
      f"{len(others)} others complete; achieved {r['totals']['achieved_rate']}/s", file=sys.stderr)
EOF
[[ "$(docker inspect -f '{{.State.Running}}' "$VICTIM")" == false ]] || fail "the killed worker was restarted"

# ---------------------------------------------------------------------------------------
log "4/5 the per-run Kubernetes form (deploy/k8s-run) in containers"
command -v kubectl >/dev/null || fail "kubectl (kustomize) is needed to render deploy/k8s-run"
# The overlay a user would write: two workers of one CPU, the sink as the target.
mkdir -p "$WORK/deploy/test"
cp -r "$ROOT/deploy/k8s" "$ROOT/deploy/k8s-run" "$WORK/deploy/"
cat >"$WORK/deploy/test/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../k8s-run
# An overlay that changes completions copies it again (k8s-run's replacements ran before).
replacements:
  - source: {kind: Job, name: crest-workers, fieldPath: spec.completions}
    targets:
      - select: {kind: Job, name: crest-coordinator}
        fieldPaths:
          - spec.template.spec.containers.[name=crest].env.[name=CREST_WORKERS].value
      - select: {kind: Job, name: crest-workers}
        fieldPaths:
          - spec.parallelism
patches:
  - patch: |-
      apiVersion: batch/v1
      kind: Job
      metadata: {name: crest-workers}
      spec:
        completions: 2
        template:
          spec:
            containers:
              - name: worker
                resources:
                  requests: {cpu: "1", memory: 256Mi}
                  limits: {cpu: "1", memory: 256Mi}
  - patch: |-
      apiVersion: batch/v1
      kind: Job
      metadata: {name: crest-coordinator}
      spec:
        template:
          spec:
            containers:
              - name: crest
                env:
                  - {name: CREST_TARGET, value: "sink:6379"}
                  - {name: CREST_RATE, value: "4000"}
                  - {name: CREST_DURATION, value: "8s"}
                  - {name: CREST_WAIT_TIMEOUT, value: "60s"}
YAML
cat >"$WORK/sink.yaml" <<YAML
sink:
  image: $IMAGE_REF
  entrypoint: ["crest"]
  command: ["sink", "--listen", "0.0.0.0:6379"]
  user: "65532:65532"
  read_only: true
  stop_signal: SIGINT
YAML
kubectl kustomize "$WORK/deploy/test" >"$WORK/run.yaml" || fail "kubectl kustomize of the per-run overlay failed"
per_run() { # per_run RESULTS: the Compose file from the manifests, started; sets COORD, WORKER_IDS
    mkresults "$1"
    rm -rf "$WORK/k8s"
    python3 "$ROOT/deploy/k8s-run/compose_from_k8s.py" "$WORK/run.yaml" "$WORK/k8s" --image "$IMAGE_REF" \
        --results "$1" --extra "$WORK/sink.yaml" >/dev/null || fail "compose_from_k8s.py failed"
    K8S_UP=1
    # The target is up before the run, as a cluster's server would be.
    k8s_compose up -d sink >/dev/null 2>&1 || fail "compose up of the sink failed"
    wait_log "$(k8s_compose ps -q sink)" 'listening on' 30 || fail "the sink did not listen within 30 s"
    k8s_compose up -d >/dev/null 2>&1 || fail "compose up of the per-run form failed"
    COORD="$(k8s_compose ps -aq crest-coordinator)"
    WORKER_IDS=("$(k8s_compose ps -aq crest-workers-0)" "$(k8s_compose ps -aq crest-workers-1)")
    [[ -n "$COORD" && -n "${WORKER_IDS[0]}" && -n "${WORKER_IDS[1]}" ]] || fail "per-run containers missing"
}
per_run "$WORK/run3"
for i in 0 1; do
    c="${WORKER_IDS[$i]}"
    got="$(docker inspect -f '{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CpusetCpus}} {{.Config.Hostname}} {{.HostConfig.CapDrop}}' "$c")"
    [[ "$got" == "65532:65532 true $i crest-workers-$i [ALL]" ]] || fail "worker $i runs as '$got', not as its pod would"
    envs="$(docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$c")"
    grep -qx "JOB_COMPLETION_INDEX=$i" <<<"$envs" || fail "worker $i has no JOB_COMPLETION_INDEX=$i"
done
wait_exit "$COORD" 120
[[ "$EXIT_CODE" == 0 ]] || fail "per-run form: the coordinator (the verdict) exited $EXIT_CODE, expected 0"
for c in "${WORKER_IDS[@]}"; do
    wait_exit "$c" 30
    [[ "$EXIT_CODE" == 0 ]] || fail "per-run form: worker $c exited $EXIT_CODE after its one run, expected 0"
done
python3 - "$WORK/run3/report.json" <<'PY' || fail "per-run report check failed"
import json, sys
r = json.load(open(sys.argv[1]))
ws = sorted((w["name"], w["host"]) for w in r["workers"])
def check(ok, msg):
    if not ok:
        sys.exit(f"test-compose: per-run report: {msg}")
check(ws == [("worker-0", "crest-workers-0"), ("worker-1", "crest-workers-1")], f"workers {ws}")
check(not any(w["lost"] for w in r["workers"]), "a worker is marked lost")
t = r["totals"]
check(t["scheduled"] == t["completed"] + t["errors"] + t["in_flight"] + t["unsent"], f"books: {t}")
check(t["errors"] == 0 and t["completed"] > 0, f"totals: {t}")
print(f"test-compose: per-run ok: verdict 0, workers {ws} exited 0, achieved {t['achieved_rate']}/s", file=sys.stderr)
PY
k8s_compose down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || fail "down of the per-run form failed"
# The verdict fails when the run does: a worker killed mid-run.
per_run "$WORK/run4"
wait_log "$COORD" 'Z +[3-7]\.[0-9]s/8s' 60 || fail "per-run form, run 2 did not reach 3 s"
docker kill "${WORKER_IDS[1]}" >/dev/null
wait_exit "$COORD" 120
[[ "$EXIT_CODE" == 3 ]] || fail "per-run form: the coordinator exited $EXIT_CODE after a worker was killed, expected 3"
k8s_compose down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || fail "down of the per-run form failed"
K8S_UP=0
log "per-run form: verdict 0 for a complete run (workers named by index, exited 0), 3 when a worker is killed"

# ---------------------------------------------------------------------------------------
log "5/5 compose down"
compose down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || fail "compose down failed"
UP=0
left_c="$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")"
left_n="$(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT"; docker network ls -q --filter "name=${PROJECT}")"
[[ -z "$left_c" ]] || fail "containers left after down: $left_c"
[[ -z "$left_n" ]] || fail "networks left after down: $left_n"

log "PASS: image ${IMAGE_BYTES} bytes; compose up -> first worker registered ${FIRST_S} s (all 3: ${ALL_S} s; coordinator start -> first: ${FROM_START_S} s); 3-worker run within 2% of ${RATE}/s; killed worker marked lost, exit 3; nothing left after down"

#!/usr/bin/env bash
# The end-to-end suite under load: N runs in a row (default 3) of `cargo test -p crest
# --test e2e` while two busy loops hog the machine's cores, as a CI machine that is busy
# or stolen from would, two tests at a time as scripts/test.sh runs them
# (CREST_TEST_THREADS=1: one at a time). A test that asserts a timing a busy core breaks
# fails here first.
#
#   scripts/e2e-under-load.sh [N]
#
# Prints each run's result line and the failures, and exits non-zero if any run failed.
# The busy loops are stopped however the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
hogs=()
stop() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
cargo build --workspace --bins --tests >/dev/null
for _ in 1 2; do
    ( while :; do :; done ) &
    hogs+=($!)
done
failed=0
for i in $(seq 1 "$runs"); do
    log=$(mktemp /tmp/crest-e2e-load.XXXXXX)
    t0=$(date +%s)
    if cargo test -p crest --test e2e -- --test-threads="${CREST_TEST_THREADS:-2}" --include-ignored >"$log" 2>&1; then
        rc=0
    else
        rc=$?
        failed=1
    fi
    echo "e2e-under-load: run $i/$runs: exit $rc in $(( $(date +%s) - t0 )) s: $(grep -E '^test result' "$log" | tail -1)"
    grep -E '^test .* FAILED$' "$log" || true
    [[ $rc == 0 ]] && rm -f "$log" || echo "e2e-under-load: log kept in $log"
done
exit "$failed"

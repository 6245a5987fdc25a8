# Sourced by the simulated-fleet benches (coordinator-memory.sh, coordinator-idle.sh), from
# the repository root, with NAME set to the script's name: picks the crest and
# examples/sim_workers binaries (BIN_DIR=, else a PROFILE=release|dev build), checks both
# are there, raises the open-file limit (one socket per simulated worker, on both sides),
# and sets up bench/common.sh (work directory, processes to stop, free port, CPU ticks).
ulimit -n 65536 2>/dev/null || true
source bench/common.sh
PROFILE=${PROFILE:-release}
if [[ -n ${BIN_DIR:-} ]]; then
  BIN=$BIN_DIR
elif [[ $PROFILE == release ]]; then
  nice -n 10 cargo build --release -q --bin crest --example sim_workers
  BIN=$(build_dir release)
else
  nice -n 10 cargo build -q --bin crest --example sim_workers
  BIN=$(build_dir debug)
fi
for b in "$BIN/crest" "$BIN/examples/sim_workers"; do
  [[ -x $b ]] || { echo "$NAME: $b is missing; BIN_DIR needs crest and examples/sim_workers from one build" >&2; exit 2; }
done

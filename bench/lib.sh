# Sourced by the bench scripts, from the repository root: the release build, a work
# directory and the processes to stop on exit (append PIDs to `pids`), a free port, and a
# process's CPU ticks (user + sys, in CLK_TCK units), and a prefilled server on core 0.
cargo build --release --bins -q
source bench/common.sh
BIN=$(build_dir release)

# Starts $SERVER (default valkey-server) on core 0 at a free port, sets SP to it, and
# prefills it with DEBUG POPULATE: keys crest:0 .. crest:99999 of VALUE_SIZE bytes (default
# 1 KB; DEBUG POPULATE adds the colon: Crest's --keys 100000 with its default prefix), so
# every GET hits. Checked: exits 1 naming the script ($1) when the prefill did not happen.
start_prefilled() {
  SP=$(port)
  taskset -c 0 "${SERVER:-valkey-server}" --port "$SP" --bind 127.0.0.1 --save "" \
    --appendonly no --enable-debug-command yes --dir "$work" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$SP" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$SP" DEBUG POPULATE 100000 crest "${VALUE_SIZE:-1024}" >/dev/null
  local n; n=$(redis-cli -p "$SP" DBSIZE)
  [[ $n == 100000 ]] || { echo "$1: prefill made $n keys, not 100000" >&2; exit 1; }
  [[ $(redis-cli -p "$SP" STRLEN crest:99999) == "${VALUE_SIZE:-1024}" ]] || { echo "$1: prefill values are not ${VALUE_SIZE:-1024} B" >&2; exit 1; }
}

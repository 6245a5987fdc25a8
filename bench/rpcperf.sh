# Sourced by bench/side-by-side.sh when RPCPERF names an rpc-perf binary (iopsystems/rpc-perf,
# the open-loop load generator): defines run_rpcperf RATE, the rpc-perf case beside Crest's
# and memtier's. Not needed otherwise: nothing here runs unless side-by-side.sh calls it.
# Uses side-by-side.sh's sampler, judge, steal1, HZ, SECS, SP, PIPELINE and VALUE_SIZE.
#
# What it measures, as run_memtier does: rpc-perf on core 1 (taskset) against the prefilled
# server $SP at RATE requests/s for SECS seconds, one client thread, one generator thread, 50
# connections, GET:SET 10:1, VALUE_SIZE-byte values; the rate the server counted (`sampler`,
# `judge`: steady seconds only), CPU seconds (user + sys, /usr/bin/time) per million
# server-counted requests, "-" for schedule lag (rpc-perf has no schedule to lag), the worst
# steady second, latency p50 (rpc-perf's "Client Response Latency (us)", timed from its own
# send, over the seconds at the rate), GET misses and the generator core's steal.
#
# Written against rpc-perf 5.25.2-alpha.0 (github iopsystems/rpc-perf at 83a2744, 2026-06;
# crates.io only has the 2017 rpc-perf 2.0.3, which no longer builds). Config keys used:
#   [general]  protocol = "resp", interval, duration (whole seconds), admin (required),
#              initial_seed
#   [debug]    log_level
#   [target]   endpoints
#   [client]   threads, poolsize (connections), concurrency (requests in flight on each
#              connection: its pipeline depth, set to PIPELINE), connect_timeout and
#              request_timeout (ms)
#   [workload] threads; [workload.ratelimit] start, end, step, interval;
#              [[workload.keyspace]] nkeys, klen, vlen, vkind,
#              commands = [{ verb = "get", weight = 10 }, { verb = "set", weight = 1 }]
#
# Where it differs from memtier's case, and why:
# - Keys. rpc-perf cannot name keys crest:N: a keyspace is nkeys random alphanumeric strings
#   of klen bytes from a PRNG seeded by initial_seed, so against the DEBUG POPULATE prefill
#   alone every GET would miss (at first all of them, ~91% of its requests; its own SETs fill
#   its keyspace slowly). So before each case rpcperf_prefill computes that same key set
#   (SHA-512 of initial_seed -> Xoshiro512++ -> rand's Alphanumeric, as rpc-perf 5.x does;
#   klen 11, the length of most crest:N) and SETs each key to a VALUE_SIZE value before the
#   sampler starts; after the case it deletes them, so the server is back to crest:0..99999.
#   The misses column checks it: should a later rpc-perf draw its keys otherwise, misses show
#   ~10/11 of the requests and the case warns that rpc-perf created keys of its own.
# - Start-up. rpc-perf spends seconds of CPU before its first request (it shuffles a 100 MB
#   value buffer). That CPU (read from /proc when its admin listener opens, right after) is
#   left out of the CPU column and printed at the end of the row with the whole process's.
#   Its token bucket starts filling before that work (up to 64 s of tokens) and would send
#   the backlog in a burst, so the rate ramps 1/s -> RATE after one second: setting a rate
#   caps the bucket at one second's tokens, and at 1/s it holds no backlog.
# - Duration. duration = interval = SECS+1: one reporting window, opening with the switch to
#   RATE, so SECS+1 s at the rate less the fraction of a second rpc-perf starts at (its
#   window is aligned to the wall clock's seconds). CPU and requests are both whole-case.
# - Pacing: a token bucket polled with 100 µs tokio sleeps (a 1 ms timer wheel) feeding a
#   64-deep queue to the connections: an open loop until the queue is full, closed after.
# - Pipelining: concurrency N keeps up to N requests in flight on each redis-rs multiplexed
#   connection, the nearest rpc-perf has to memtier's --pipeline=N.

# Sets rpc-perf's keys (the keyspace of the config below) to VALUE_SIZE-byte values, from
# core 1 (the generator's, idle between cases). Before the sampler starts: these SETs are not
# counted.
rpcperf_prefill() { # SEED NKEYS KLEN
  taskset -c 1 python3 - "$SP" "$1" "$2" "$3" "${VALUE_SIZE:-1024}" "$work/rpcperf-keys-$1-$2-$3" <<'PY'
import hashlib, os, socket, sys
port, seed, nkeys, klen, vsize, cache = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
M = (1 << 64) - 1
def rotl(x, k): return ((x << k) | (x >> (64 - k))) & M
class Xoshiro512pp:  # rand_xoshiro's Xoshiro512PlusPlus
    def __init__(self, seed): self.s = [int.from_bytes(seed[i:i + 8], "little") for i in range(0, 64, 8)]
    def u64(self):
        s = self.s
        r = (rotl((s[2] + s[0]) & M, 17) + s[2]) & M
        t = (s[1] << 11) & M
        s[2] ^= s[0]; s[5] ^= s[1]; s[1] ^= s[2]; s[7] ^= s[3]
        s[3] ^= s[4]; s[4] ^= s[5]; s[0] ^= s[6]; s[6] ^= s[7]
        s[6] ^= t; s[7] = rotl(s[7], 21)
        return r
x = Xoshiro512pp(b"".join(i.to_bytes(8, "little") for i in range(1, 9)))
assert [x.u64() for _ in range(3)] == [524291, 1048578, 539099140]  # the crate's reference
if os.path.exists(cache):
    keys = open(cache, "rb").read().split(b"\n")
else:
    # rpc-perf's Keyspace::new: Xoshiro512++ from SHA-512(initial_seed); its first 64 bytes
    # seed the key PRNG; each key is klen draws of rand's Alphanumeric (the top 6 bits of
    # next_u32, which is next_u64 >> 32, rejected at 62 and above), duplicates skipped.
    g = Xoshiro512pp(hashlib.sha512(seed.encode()).digest())
    k = Xoshiro512pp(b"".join(g.u64().to_bytes(8, "little") for _ in range(8)))
    cs = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    keys, seen = [], set()
    while len(keys) < nkeys:
        b = bytearray()
        while len(b) < klen:
            v = k.u64() >> 58
            if v < 62: b.append(cs[v])
        b = bytes(b)
        if b not in seen: seen.add(b); keys.append(b)
    open(cache, "wb").write(b"\n".join(keys))
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
val = b"x" * vsize
for i in range(0, len(keys), 1000):
    batch = keys[i:i + 1000]
    s.sendall(b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, vsize, val) for k in batch))
    for _ in batch:
        line = f.readline()
        if line != b"+OK\r\n": sys.exit(f"rpcperf.sh: prefill SET answered {line!r}")
PY
}

# Deletes rpc-perf's keys again (DEL is not a GET or SET: the sampler does not count it).
rpcperf_unfill() { # SEED NKEYS KLEN
  taskset -c 1 python3 - "$SP" "$work/rpcperf-keys-$1-$2-$3" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = s.makefile("rb")
keys = open(sys.argv[2], "rb").read().split(b"\n")
for i in range(0, len(keys), 1000):
    batch = keys[i:i + 1000]
    s.sendall(b"*%d\r\n$3\r\nDEL\r\n" % (len(batch) + 1) + b"".join(b"$%d\r\n%s\r\n" % (len(k), k) for k in batch))
    f.readline()
PY
}

run_rpcperf() { # RATE
  local rate=$1 out="$work/rpcperf-$1" cfg="$work/rpcperf-$1.toml" seed=crest klen=11
  local ap sp s0 s1 t0 t1 tp rp="" c0="" n0 n1
  (( rate >= 2 )) || { echo "rpcperf.sh: a rate of at least 2/s, not $rate (it ramps from 1/s)" >&2; return; }
  ap=$(port)
  cat >"$cfg" <<EOF
# rpc-perf 5.x config written by bench/rpcperf.sh: side-by-side case at $rate/s for ${SECS}s.
[general]
protocol = "resp"
# One reporting window, over the whole run at the rate (it opens when the rate is reached,
# one second in): its p50. Runs SECS+1 s, less the fraction of a second it starts at.
interval = $((SECS + 1))
duration = $((SECS + 1))
admin = "127.0.0.1:$ap"
# Fixed, so the keyspace is the one rpcperf_prefill wrote.
initial_seed = "$seed"

[debug]
log_level = "error"

[target]
endpoints = ["127.0.0.1:$SP"]

[client]
threads = 1
poolsize = 50
concurrency = $PIPELINE
connect_timeout = 10000
request_timeout = 1000

[workload]
threads = 1

# 1/s for the first second, then $rate/s: the change of rate caps the token bucket at one
# second and drops what built up during start-up (a plain "start = $rate" would send that
# backlog in a burst at the start).
[workload.ratelimit]
start = 1
end = $rate
step = $((rate - 1))
interval = 1

[[workload.keyspace]]
nkeys = 100000
klen = $klen
vlen = $VALUE_SIZE
vkind = "bytes"
commands = [
  { verb = "get", weight = 10 },
  { verb = "set", weight = 1 },
]
EOF
  rpcperf_prefill "$seed" 100000 "$klen" || { echo "rpcperf.sh: prefill failed; no figure" >&2; return; }
  n0=$(redis-cli -p "$SP" DBSIZE)
  sleep 1
  sp=$(sampler "$out.samples")
  s0=$(steal1); t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$out.time" taskset -c 1 "$RPCPERF" "$cfg" >"$out.out" 2>&1 &
  tp=$!
  # rpc-perf's CPU at the end of its start-up (its admin listener opens right after it has
  # built the workload), to tell it apart from the CPU of the run.
  for _ in $(seq 1000); do
    [[ -z $rp ]] && rp=$(awk '{print $1}' "/proc/$tp/task/$tp/children" 2>/dev/null || true)
    if [[ -n $rp ]] && (: <>"/dev/tcp/127.0.0.1/$ap") 2>/dev/null; then c0=$(cpu "$rp" 2>/dev/null || true); break; fi
    kill -0 "$tp" 2>/dev/null || break
    sleep 0.01
  done
  wait "$tp" || true
  s1=$(steal1); t1=$(date +%s.%N)
  sleep 1.2; kill "$sp"; wait "$sp" 2>/dev/null || true
  n1=$(redis-cli -p "$SP" DBSIZE)
  [[ $n1 == "$n0" ]] || echo "rpcperf.sh: rpc-perf created $((n1 - n0)) keys the prefill did not: its key set is not the one rpcperf_prefill computes (misses show it)" >&2
  rpcperf_unfill "$seed" 100000 "$klen"
  read -r srv worst misses < <(judge "$out.samples" "$rate")
  python3 - "$out.time" "$out.samples" "$out.out" "$rate" "$srv" "$worst" "$misses" "$s0" "$s1" "$t0" "$t1" "$HZ" "${c0:--1}" <<'PY'
import re, sys
tf, sf, of, rate, srv, worst, misses = sys.argv[1:8]
s0, s1, t0, t1, hz, c0 = int(sys.argv[8]), int(sys.argv[9]), float(sys.argv[10]), float(sys.argv[11]), int(sys.argv[12]), int(sys.argv[13])
try:
    u, s = map(float, open(tf).read().split()[-2:])
    cpu = u + s
except ValueError:
    sys.exit("rpcperf.sh: no CPU time from /usr/bin/time; no figure (see rpc-perf's output)")
rows = [l.split() for l in open(sf) if l.strip()]
reqs = int(rows[-1][1]) - int(rows[0][1])  # the server's count over the whole case
# Its start-up (building the keyspace, shuffling a 100 MB value buffer) is not the cost of a
# request: left out of the CPU column, and shown at the end of the row.
if c0 >= 0:
    start = c0 / hz
    note = f"start-up {start:.2f} s CPU not counted (whole process {cpu:.2f} s)"
    cpu -= start
else:
    note = "start-up not told apart: whole-process CPU"
# The last "Client Response Latency (us): ... p50: N ..." line (one window per run).
p50 = None
for line in open(of, errors="replace"):
    m = re.search(r"Client Response Latency \(us\):.*\bp50: (\d+)", line)
    if m: p50 = float(m.group(1))
steal = (s1 - s0) / hz / (t1 - t0) * 100
lat = f"{p50:>8.0f}µs" if p50 is not None else f"{'-':>10}"
per = f"{cpu / reqs * 1e6:>12.2f}" if reqs > 0 else f"{'nan':>12}"
print(f"{'rpc-perf':<10} {'ratelimit':<12} {float(rate):>8.0f} {srv:>12} {per} {'-':>10} {worst:>11}% {lat} {misses:>8} {steal:>6.1f}%  {note}")
PY
}

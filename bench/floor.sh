#!/usr/bin/env bash
# The floor under an evenly paced generator on this machine (issue #12: "what one wake-up,
# one syscall and one TCP round trip cost here, and how many of each a request needs").
# A C program with nothing else in it, pinned to core 1, against the same prefilled Valkey
# on core 0 that bench/side-by-side.sh uses; CPU is the process's user + sys
# (getrusage) over exactly the measured loop:
#
#   syscall    one getppid() (the cheapest syscall): the price of a user/kernel crossing
#   wake-up    one 50 µs clock_nanosleep with 1 µs slack: one sleep/wake cycle
#   paced      the least a paced open-loop generator does per request: sleep until the
#              request's time (absolute deadline, 1/RATE apart), send one GET of a 1 KB
#              key on one of CONNS connections, and read without blocking whatever replies
#              have arrived (as Crest reads replies when it wakes to send); one wake-up,
#              one send and about one recv per request
#   closed     send one GET, block in recv for its reply: a request and a round trip, the
#              client sleeping while the server works (two crossings, one wake-up)
#
# Then Crest's default pacer (`sleep`) at the same rate, connections and key, its worker's
# CPU per server-counted request the same way, so Crest reads as a multiple of the floor.
#
#   budget     pipelined (PIPELINE > 1): wake every W µs (each of BUDGETS, default "60
#              200": the lag a wake-up adds to its first request, before its overshoot),
#              send every request due by then in one write per connection, up to PIPELINE
#              in flight on each (the batch starts on the next connection each wake-up),
#              read whatever replies have arrived; the least a generator that keeps a lag
#              budget does per request, where memtier sends bursts every 20 ms
#
#   bench/floor.sh [RATE] [SECS]        defaults: 20000 5
#   PIPELINE=16 VALUE_SIZE=32 bench/floor.sh 100000 8       the budget floor, pipelined
#   PACER=sleep:200us ...               Crest's pacer in the comparison (default sleep)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-20000}
SECS=${2:-5}
CONNS=${CONNS:-50}
PIPELINE=${PIPELINE:-1}
BUDGETS=${BUDGETS:-60 200}
PACER=${PACER:-sleep}
source bench/lib.sh
HZ=$(getconf CLK_TCK)
start_prefilled floor.sh

cat > "$work/floor.c" <<'C'
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double cpu(void) {
  struct rusage r; getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}
static const char GET[] = "*2\r\n$3\r\nGET\r\n$7\r\ncrest:1\r\n";
static const long REPLY = 1024 + 9; /* $1024\r\n + value + \r\n */

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); exit(1); }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* Requests due by now, of n at `rate` per second from s0 (ns, CLOCK_MONOTONIC). */
static long due_now(long long s0, long rate, long n) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  long due = (t.tv_sec * 1000000000LL + t.tv_nsec - s0) / (1000000000LL / rate) + 1;
  return due > n ? n : due;
}

/* Prints one figure; fails (no figure) when the window did not hold the work. */
static void report(const char *what, long n, double c0, double t0, double min_wall) {
  double c = cpu() - c0, w = now() - t0;
  if (w < min_wall) { fprintf(stderr, "floor: %s: %ld took %.3f s < %.3f s; no figure\n", what, n, w, min_wall); exit(1); }
  printf("%-8s %9ld x  CPU %7.2f us each   wall %.2f s\n", what, n, c / n * 1e6, w);
}

#ifdef HAVE_URING
/* io_uring, the least a lag-budget generator does with it: per wake-up ONE io_uring_enter
   that submits the wake-up's sends (one per connection batch, registered files, no
   completion on success) and waits, with an absolute timer, for the next wake-up; replies
   arrive by a multishot receive per connection into a ring of provided buffers and are
   reaped from the completion ring without a syscall (DEFER_TASKRUN: the kernel copies
   them in when this thread enters, so nothing wakes it early). W = 1e9/RATE and
   PIPELINE 1 is one wake-up per request, as `paced`. */
#include <liburing.h>
#include <sys/mman.h>
#ifndef IORING_ENTER_ABS_TIMER
#define IORING_ENTER_ABS_TIMER (1U << 5)
#endif
#define NBUF 1024
#define BUFSZ 4096
static void uring_budget(int port, long rate, int conns, long secs, long w, int pipe, long vsize, const char *name) {
  char head[32]; long reply = vsize + snprintf(head, sizeof head, "$%ld\r\n", vsize) + 2;
  static char batch[64 * (sizeof GET - 1)];
  for (int k = 0; k < 64; k++) memcpy(batch + k * (sizeof GET - 1), GET, sizeof GET - 1);
  int fds[4096]; long inflight[4096] = {0}, rbytes[4096] = {0};
  for (int i = 0; i < conns; i++) fds[i] = dial(port);
  struct io_uring ring; struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE;
  p.cq_entries = 8192;
  int e = io_uring_queue_init_params(1024, &ring, &p);
  if (e < 0) { fprintf(stderr, "floor: io_uring refused: %s; no figure\n", strerror(-e)); exit(3); }
  if ((e = io_uring_register_files(&ring, fds, conns)) < 0) { fprintf(stderr, "floor: register files: %s\n", strerror(-e)); exit(1); }
  struct io_uring_buf_ring *br = mmap(NULL, NBUF * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  char *bufs = malloc((size_t)NBUF * BUFSZ);
  struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = NBUF, .bgid = 0};
  if ((e = io_uring_register_buf_ring(&ring, &reg, 0)) < 0) { fprintf(stderr, "floor: buffer ring: %s\n", strerror(-e)); exit(1); }
  io_uring_buf_ring_init(br);
  for (int b = 0; b < NBUF; b++) io_uring_buf_ring_add(br, bufs + (size_t)b * BUFSZ, BUFSZ, b, io_uring_buf_ring_mask(NBUF), b);
  io_uring_buf_ring_advance(br, NBUF);
  for (int i = 0; i < conns; i++) {
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    io_uring_prep_recv_multishot(s, i, NULL, 0, 0);
    s->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT; s->buf_group = 0; s->user_data = i;
  }
  io_uring_submit(&ring);
  long n = rate * secs, sent = 0, done = 0, wakes = 0, writes = 0, enters = 0, cqes = 0; int cur = 0;
  double c0 = cpu(), t0 = now();
  struct timespec start; clock_gettime(CLOCK_MONOTONIC, &start);
  long long s0 = start.tv_sec * 1000000000LL + start.tv_nsec;
  while (sent < n) {
    /* Reap: replies and re-arms; recycle every buffer. */
    unsigned h, k = 0, nb = 0; struct io_uring_cqe *c;
    io_uring_for_each_cqe(&ring, h, c) {
      k++; int i = (int)c->user_data;
      if (c->res > 0) {
        rbytes[i] += c->res; long m = rbytes[i] / reply; rbytes[i] -= m * reply; inflight[i] -= m; done += m;
      } else if (c->res != -ENOBUFS) { fprintf(stderr, "floor: recv on %d: %s\n", i, strerror(-c->res)); exit(1); }
      if (c->flags & IORING_CQE_F_BUFFER) {
        int b = c->flags >> IORING_CQE_BUFFER_SHIFT;
        io_uring_buf_ring_add(br, bufs + (size_t)b * BUFSZ, BUFSZ, b, io_uring_buf_ring_mask(NBUF), nb++);
      }
      if (!(c->flags & IORING_CQE_F_MORE)) {
        struct io_uring_sqe *s = io_uring_get_sqe(&ring);
        io_uring_prep_recv_multishot(s, i, NULL, 0, 0);
        s->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT; s->buf_group = 0; s->user_data = i;
      }
    }
    io_uring_cq_advance(&ring, k); cqes += k;
    if (nb) io_uring_buf_ring_advance(br, nb);
    /* Sends due by now. */
    long due = due_now(s0, rate, n);
    for (int tries = 0; sent < due && tries < conns; tries++, cur = (cur + 1) % conns) {
      long chunk = pipe - inflight[cur]; if (chunk > due - sent) chunk = due - sent; if (chunk > 64) chunk = 64;
      if (chunk <= 0) continue;
      struct io_uring_sqe *s = io_uring_get_sqe(&ring);
      io_uring_prep_send(s, cur, batch, chunk * (sizeof GET - 1), 0);
      s->flags |= IOSQE_FIXED_FILE | IOSQE_CQE_SKIP_SUCCESS; s->user_data = cur;
      inflight[cur] += chunk; sent += chunk; writes++;
      if (sent >= due) { cur = (cur + 1) % conns; break; }
    }
    /* One enter: submit, then sleep to the next wake-up (absolute), whatever completes. */
    long long dl = s0 + (long long)(++wakes) * w;
    struct __kernel_timespec ts = {dl / 1000000000LL, dl % 1000000000LL};
    unsigned tail = ring.sq.sqe_tail, sub = tail - ring.sq.sqe_head;
    ring.sq.sqe_head = tail; io_uring_smp_store_release(ring.sq.ktail, tail);
    struct io_uring_getevents_arg arg = {.ts = (unsigned long)&ts};
    int r = syscall(__NR_io_uring_enter, ring.ring_fd, sub, 8192,
                    IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG | IORING_ENTER_ABS_TIMER, &arg, sizeof arg);
    enters++;
    if (r < 0 && errno != ETIME && errno != EINTR) { perror("io_uring_enter"); exit(1); }
  }
  report(name, n, c0, t0, secs * 0.99);
  printf("         %.1f requests per wake-up, %.1f per send, %.2f enters and %.2f completions per request (W %ld us, pipeline %d)\n",
         (double)n / wakes, (double)n / writes, (double)enters / n, (double)cqes / n, w / 1000, pipe);
}
#endif

int main(int argc, char **argv) {
  const char *mode = argv[1];
  prctl(PR_SET_TIMERSLACK, 1000);
  char buf[1 << 16];
  if (!strcmp(mode, "syscall")) {
    long n = 2000000; double c0 = cpu(), t0 = now();
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    report("syscall", n, c0, t0, 0);
  } else if (!strcmp(mode, "wake-up")) {
    long n = 20000; struct timespec ts = {0, 50000}; double c0 = cpu(), t0 = now();
    for (long i = 0; i < n; i++) clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
    report("wake-up", n, c0, t0, n * 50e-6);
  } else if (!strcmp(mode, "paced")) {
    int port = atoi(argv[2]), conns = atoi(argv[4]); long rate = atol(argv[3]), secs = atol(argv[5]);
    int fds[4096]; for (int i = 0; i < conns; i++) fds[i] = dial(port);
    long n = rate * secs, got = 0, gap = 1000000000L / rate;
    struct timespec next; clock_gettime(CLOCK_MONOTONIC, &next);
    double c0 = cpu(), t0 = now();
    for (long i = 0; i < n; i++) {
      next.tv_nsec += gap; while (next.tv_nsec >= 1000000000L) { next.tv_nsec -= 1000000000L; next.tv_sec++; }
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
      int fd = fds[i % conns];
      if (send(fd, GET, sizeof GET - 1, 0) != (ssize_t)(sizeof GET - 1)) { perror("send"); exit(1); }
      /* Replies that have arrived, on the connection last written before this one. */
      int prev = fds[(i + conns - 1) % conns]; ssize_t r;
      while ((r = recv(prev, buf, sizeof buf, MSG_DONTWAIT)) > 0) got += r;
    }
    for (int i = 0; i < conns; i++) { ssize_t r; while ((r = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT)) > 0) got += r; }
    report("paced", n, c0, t0, secs * 0.99);
    if (got < (n - conns) * REPLY) { fprintf(stderr, "floor: paced: %ld reply bytes for %ld requests; no figure\n", got, n); exit(1); }
  } else if (!strcmp(mode, "budget")) {
    /* Pipelined, within a lag budget: wake every W ns (absolute deadlines), send every
       request due by then in one write per connection (up to PIPELINE in flight on each,
       the batch starting on the next connection each wake-up), read without blocking
       whatever replies have arrived on connections with requests in flight. */
    int port = atoi(argv[2]), conns = atoi(argv[4]), pipe = atoi(argv[7]);
    long rate = atol(argv[3]), secs = atol(argv[5]), w = atol(argv[6]), vsize = atol(argv[8]);
    char head[32]; long reply = vsize + snprintf(head, sizeof head, "$%ld\r\n", vsize) + 2;
    static char batch[64 * (sizeof GET - 1)];
    for (int k = 0; k < 64; k++) memcpy(batch + k * (sizeof GET - 1), GET, sizeof GET - 1);
    int fds[4096]; long inflight[4096] = {0}, rbytes[4096] = {0};
    for (int i = 0; i < conns; i++) fds[i] = dial(port);
    long n = rate * secs, sent = 0, done = 0, wakes = 0, writes = 0; int cur = 0;
    double c0 = cpu(), t0 = now();
    struct timespec start; clock_gettime(CLOCK_MONOTONIC, &start);
    long long s0 = start.tv_sec * 1000000000LL + start.tv_nsec;
    while (sent < n) {
      long long dl = s0 + (long long)(++wakes) * w;
      struct timespec ts = {dl / 1000000000LL, dl % 1000000000LL};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
      long due = due_now(s0, rate, n);
      for (int tries = 0; sent < due && tries < conns; tries++, cur = (cur + 1) % conns) {
        long chunk = pipe - inflight[cur]; if (chunk > due - sent) chunk = due - sent; if (chunk > 64) chunk = 64;
        if (chunk <= 0) continue;
        ssize_t len = chunk * (sizeof GET - 1);
        if (send(fds[cur], batch, len, 0) != len) { perror("send"); exit(1); }
        inflight[cur] += chunk; sent += chunk; writes++;
        if (sent >= due) { cur = (cur + 1) % conns; break; }
      }
      for (int i = 0; i < conns; i++) {
        if (!inflight[i]) continue;
        ssize_t r;
        while ((r = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT)) > 0) {
          rbytes[i] += r; long k = rbytes[i] / reply; rbytes[i] -= k * reply; inflight[i] -= k; done += k;
          if (r < (ssize_t)sizeof buf) break;
        }
      }
    }
    report("budget", n, c0, t0, secs * 0.99);
    printf("         %.1f requests per wake-up, %.1f per write (W %ld us, pipeline %d)\n", (double)n / wakes, (double)n / writes, w / 1000, pipe);
    for (int i = 0; i < conns; i++) while (inflight[i] > 0) { ssize_t r = recv(fds[i], buf, sizeof buf, 0); if (r <= 0) break; rbytes[i] += r; long k = rbytes[i] / reply; rbytes[i] -= k * reply; inflight[i] -= k; }
  } else if (!strcmp(mode, "uring")) {
#ifdef HAVE_URING
    uring_budget(atoi(argv[2]), atol(argv[3]), atoi(argv[4]), atol(argv[5]), atol(argv[6]), atoi(argv[7]), atol(argv[8]), argv[9]);
#else
    fprintf(stderr, "floor: built without liburing (apt-get install liburing-dev); no io_uring figure\n"); return 3;
#endif
  } else if (!strcmp(mode, "closed")) {
    int port = atoi(argv[2]); long n = atol(argv[3]); int fd = dial(port);
    double c0 = cpu(), t0 = now();
    for (long i = 0; i < n; i++) {
      if (send(fd, GET, sizeof GET - 1, 0) != (ssize_t)(sizeof GET - 1)) { perror("send"); exit(1); }
      long got = 0; while (got < REPLY) { ssize_t r = recv(fd, buf, sizeof buf, 0); if (r <= 0) { perror("recv"); exit(1); } got += r; }
    }
    report("closed", n, c0, t0, 0);
  }
  return 0;
}
C
if [[ -f /usr/include/liburing.h ]]; then
  gcc -O2 -DHAVE_URING -o "$work/floor" "$work/floor.c" -luring
else
  echo "floor.sh: no liburing-dev here: the io_uring figures are skipped" >&2
  gcc -O2 -o "$work/floor" "$work/floor.c"
fi
uring() { # the same load through io_uring; a kernel that refuses it skips the figure
  local rc=0; taskset -c 1 "$work/floor" uring "$@" || rc=$?
  (( rc == 0 || rc == 3 )) || exit "$rc"
}

calls() { # GET + SET calls the server has counted
  redis-cli -p "$SP" info commandstats | tr -d '\r' \
    | sed -n 's/^cmdstat_\(get\|set\):calls=\([0-9]*\).*/\2/p' | awk '{s += $1} END {print s + 0}'
}

echo "floor on core 1, Valkey (prefilled, ${VALUE_SIZE:-1024} B values) on core 0; $RATE/s for ${SECS}s, $CONNS connections, pipeline $PIPELINE"
taskset -c 1 "$work/floor" syscall
taskset -c 1 "$work/floor" wake-up
if (( PIPELINE == 1 )); then
  g0=$(calls)
  taskset -c 1 "$work/floor" paced "$SP" "$RATE" "$CONNS" "$SECS"
  g1=$(calls)
  [[ $((g1 - g0)) -eq $((RATE * SECS)) ]] \
    || { echo "floor.sh: the server counted $((g1 - g0)) GETs, not $((RATE * SECS)); no figure" >&2; exit 1; }
  g0=$(calls)
  uring "$SP" "$RATE" "$CONNS" "$SECS" "$((1000000000 / RATE))" 1 "${VALUE_SIZE:-1024}" uring
  g1=$(calls)
  [[ $((g1 - g0)) -eq $((RATE * SECS)) || $((g1 - g0)) -eq 0 ]] \
    || { echo "floor.sh: the server counted $((g1 - g0)) GETs, not $((RATE * SECS)); no figure" >&2; exit 1; }
  taskset -c 1 "$work/floor" closed "$SP" 100000
else
  for w in $BUDGETS; do
    g0=$(calls)
    taskset -c 1 "$work/floor" budget "$SP" "$RATE" "$CONNS" "$SECS" "$((w * 1000))" "$PIPELINE" "${VALUE_SIZE:-1024}"
    g1=$(calls)
    [[ $((g1 - g0)) -eq $((RATE * SECS)) ]] \
      || { echo "floor.sh: the server counted $((g1 - g0)) GETs, not $((RATE * SECS)); no figure" >&2; exit 1; }
    g0=$(calls)
    uring "$SP" "$RATE" "$CONNS" "$SECS" "$((w * 1000))" "$PIPELINE" "${VALUE_SIZE:-1024}" "uring"
    g1=$(calls)
    [[ $((g1 - g0)) -eq $((RATE * SECS)) || $((g1 - g0)) -eq 0 ]] \
      || { echo "floor.sh: the server counted $((g1 - g0)) GETs, not $((RATE * SECS)); no figure" >&2; exit 1; }
  done
fi

# Crest's default pacer, same rate, connections and key, GET only; its worker on core 1.
CP=$(port)
taskset -c 0 "$BIN/crest" run --listen "127.0.0.1:$CP" --workers 1 --wait-timeout 30s \
  --target "127.0.0.1:$SP" --rate "$RATE" --duration "${SECS}s" --command "GET crest:1" \
  --connections "$CONNS" --pipeline "$PIPELINE" --pacer "$PACER" --seed 1 --no-server-stats --out "$work/crest" >"$work/crest.table" 2>"$work/crest.err" &
cpid=$!
"$BIN/crest-worker" --coordinator "http://127.0.0.1:$CP" --cpus 1 --threads 1 2>"$work/worker.err" &
wpid=$!
seen=
for _ in $(seq 600); do grep -q "^crest: run " "$work/crest.err" 2>/dev/null && { seen=1; break; }; sleep 0.05; done
[[ -n $seen ]] || { echo "floor.sh: crest did not start; no figure" >&2; cat "$work/crest.err" >&2; exit 1; }
g0=$(calls); c0=$(cpu "$wpid"); t0=$(date +%s.%N)
wait "$cpid" || true
g1=$(calls); c1=$(cpu "$wpid"); t1=$(date +%s.%N)
kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true
python3 - "$c0" "$c1" "$HZ" "$t0" "$t1" "$SECS" "$((g1 - g0))" "$RATE" "$PACER" <<'PY'
import sys
c0, c1, hz = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
window, secs, n, rate = float(sys.argv[5]) - float(sys.argv[4]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
if not (secs <= window <= secs + 10):
    sys.exit(f"floor.sh: CPU window {window:.1f} s does not cover a {secs:.0f} s run; no figure")
if abs(n - rate * secs) > 0.01 * rate * secs:
    sys.exit(f"floor.sh: the server counted {n} GETs from Crest, not {rate * secs:.0f}; no figure")
print(f"{'crest':<8} {n:>9} x  CPU {(c1 - c0) / hz / n * 1e6:>7.2f} us each   (worker process, --pacer {sys.argv[9]}, server-counted requests)")
PY

//! One shard: an OS thread pinned to a core, with its own connections, epoll loop, RNG and
//! histograms. Nothing here is shared with other shards except the stop flag and the
//! channel that carries finished intervals out.
//!
//! A shard runs every class of the run side by side, each with its own connections,
//! pipeline, schedule, backlog and results. The loop, each turn:
//! 1. every request whose intended time has come is scheduled: it goes to a connection of
//!    its class with a free pipeline slot, or waits in the class's backlog keeping its
//!    intended time (closed-loop classes instead fill every free slot at once);
//! 2. each connection with new requests gets one `send` (all its requests batched);
//! 3. epoll waits until the next intended time (precise sleep, `epoll_pwait2` with 1 µs
//!    timer slack) or returns at once (`--pacer spin`);
//! 4. readable connections get one `read` each and every complete reply is matched with
//!    its request (replies come back in order on a connection).
//!
//! Connections are non-blocking sockets registered once, level-triggered for reads: a
//! read that fills less than the buffer means the socket is drained, so no extra read is
//! spent to see `EAGAIN`. Syscalls and wake-ups are what cost here, so each turn makes as
//! few as it can.
//!
//! Requests due before the warm-up ends are sent but not measured: they count nowhere.

use crest_model::hist;
use crest_model::plan::Pacer;
use crest_model::rng::Rng;
use crest_model::schedule::Schedule;
use crest_model::stats::{ErrorCounts, Stats, add_error, add_error_bytes};
use crest_model::workload::{Cursor, Mixer, Workload};
use crest_resp::{self as resp, ReplyKind, Scan};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// One class as one shard runs it.
pub struct ShardClass {
    /// What to send.
    pub workload: Arc<Workload>,
    /// Open loop: intended send times (already scaled to this shard's share).
    pub schedule: Option<Schedule>,
    /// Closed loop: stop sending at this time since the start (None: only the budget).
    pub closed_until: Option<Duration>,
    /// Closed loop: requests to send in all (u64::MAX: unbounded).
    pub budget: u64,
    /// Connections this shard opens for the class.
    pub connections: u32,
    /// Requests in flight per connection.
    pub pipeline: u32,
}

/// Everything one shard needs for one run.
pub struct ShardConfig {
    /// Index within the worker.
    pub index: u32,
    /// Index within the cluster (sequential keys and members interleave by it).
    pub global_index: u32,
    /// Shards in the cluster.
    pub total_shards: u32,
    /// Server address.
    pub target: SocketAddr,
    /// The classes.
    pub classes: Vec<ShardClass>,
    /// This shard's RNG seed.
    pub seed: u64,
    /// How to wait.
    pub pacer: Pacer,
    /// Local instant of the run's t = 0 (warm-up included).
    pub start: Instant,
    /// Requests due before this are not measured; intervals count from here.
    pub warmup: Duration,
    /// Length of one reported interval.
    pub interval: Duration,
    /// A request unanswered this long after its write fails as `timeout`.
    pub timeout: Duration,
    /// After the schedule ends, wait at most this long for outstanding replies.
    pub drain: Duration,
    /// Requests allowed to wait for a free connection, per class; beyond that they fail as
    /// `backlog_full`.
    pub backlog_limit: usize,
    /// Core to pin to, if any.
    pub core: Option<core_affinity::CoreId>,
    /// Set by the worker to stop at once (abort, lost coordinator).
    pub stop: Arc<AtomicBool>,
    /// Where intervals and the final totals go.
    pub out: UnboundedSender<ShardEvent>,
}

/// What a shard reports.
#[derive(Debug)]
pub enum ShardEvent {
    /// First connection attempts are done (before the start instant when possible).
    Connected {
        /// Shard index.
        shard: u32,
        /// Connections up.
        up: u32,
        /// Connections asked for.
        want: u32,
        /// The first connect error, if any connection failed.
        error: Option<String>,
    },
    /// Results of one interval (1 s by default), by completion time, one [`Stats`] per class.
    Interval {
        /// Shard index.
        shard: u32,
        /// Interval since the end of the warm-up.
        index: u32,
        /// Results of that second, per class.
        stats: Vec<Stats>,
    },
    /// The run is over for this shard.
    Finished {
        /// Shard index.
        shard: u32,
        /// Results of the whole run per class (the sum of this shard's intervals).
        totals: Vec<Stats>,
        /// Sent, unanswered at the end.
        in_flight: u64,
        /// Scheduled, never written at the end.
        unsent: u64,
        /// Intervals this shard reported.
        intervals: u32,
        /// Connection failures not tied to one request (refused, reset, eof...).
        connection_errors: ErrorCounts,
    },
}

const NS_PER_S: u64 = 1_000_000_000;
const READ_CHUNK: usize = 64 * 1024;
/// Largest reply the read buffer grows for in one step (Redis's largest bulk plus framing).
const MAX_FRAME: usize = resp::MAX_BULK_LEN as usize + 64;
const MAX_EVENTS: usize = 256;
/// Longest epoll sleep: bounds how late the stop flag is seen.
const MAX_SLEEP_NS: u64 = 20_000_000;
/// Below this, the sleep pacer polls instead of sleeping: it is about the wake-up latency
/// of a sleeping thread on a VM (bench/wakeup-cost.sh measures it), so a shorter sleep
/// would only overshoot. `bench/core.sh` at 20k req/s: lag p99 98 µs with it, 110 without.
const SPIN_WINDOW_NS: u64 = 40_000;
/// How often unanswered requests are checked for timeouts.
const SWEEP_NS: u64 = 10_000_000;
const BACKOFF_MIN_NS: u64 = 10_000_000;
const BACKOFF_MAX_NS: u64 = 1_000_000_000;

/// Why the requests on a closed connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Unanswered past the timeout: each waited at least that long, so it stays in latency.
    Timeout,
    /// The connection broke under them.
    Disconnected,
}

impl Failure {
    fn kind(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Disconnected => "disconnected",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    intended: u64,
    written: u64,
    cmd: u16,
    measured: bool,
}

#[derive(Debug, Clone, Copy)]
struct Queued {
    intended: u64,
    cmd: u16,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum ConnState {
    Connecting { since: u64 },
    Up,
    Down { retry_at: u64 },
}

struct Conn {
    class: usize,
    sock: Option<socket2::Socket>,
    state: ConnState,
    backoff: u64,
    wbuf: Vec<u8>,
    wpos: usize,
    want_out: bool,
    /// Requests in order; the last `unwritten` are in `wbuf` but not yet written.
    inflight: VecDeque<Pending>,
    unwritten: usize,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Do not scan again until `rend` reaches this.
    need: usize,
    dirty: bool,
}

impl Conn {
    fn new(class: usize) -> Self {
        Self {
            class,
            sock: None,
            state: ConnState::Down { retry_at: 0 },
            backoff: BACKOFF_MIN_NS,
            wbuf: Vec::with_capacity(16 * 1024),
            wpos: 0,
            want_out: false,
            inflight: VecDeque::new(),
            unwritten: 0,
            rbuf: vec![0; READ_CHUNK],
            rstart: 0,
            rend: 0,
            need: 0,
            dirty: false,
        }
    }

    fn fd(&self) -> RawFd {
        self.sock.as_ref().map_or(-1, |s| s.as_raw_fd())
    }
}

/// Per-class state of a running shard.
struct ClassState {
    workload: Arc<Workload>,
    schedule: Option<Schedule>,
    closed_until: Option<u64>,
    budget: u64,
    pipeline: usize,
    next_due: Option<u64>,
    mixer: Mixer,
    cursor: Cursor,
    /// One token per free pipeline slot (a connection index); stale tokens are skipped.
    free: VecDeque<u32>,
    backlog: VecDeque<Queued>,
    interval: Stats,
    totals: Stats,
}

impl ClassState {
    fn closed(&self) -> bool {
        self.schedule.is_none()
    }

    /// Whether this class may still start requests at `now`.
    fn sending(&self, now: u64) -> bool {
        if self.closed() {
            self.budget > 0 && self.closed_until.is_none_or(|u| now < u)
        } else {
            self.next_due.is_some()
        }
    }
}

struct Epoll {
    fd: RawFd,
    precise: bool,
}

impl Epoll {
    fn new() -> io::Result<Self> {
        // SAFETY: plain syscall, no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd, precise: true })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: ev lives across the call; fd validity is the kernel's to check.
        let r = unsafe { libc::epoll_ctl(self.fd, op, fd, &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Waits up to `timeout_ns` (0 = poll) for events.
    fn wait(&mut self, events: &mut [libc::epoll_event], timeout_ns: u64) -> usize {
        let n = if self.precise {
            let ts = libc::timespec {
                tv_sec: (timeout_ns / NS_PER_S) as libc::time_t,
                tv_nsec: (timeout_ns % NS_PER_S) as libc::c_long,
            };
            // SAFETY: events and ts outlive the call; lengths match.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd,
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                // Kernels before 5.11: millisecond epoll_wait, rounded down, then the loop
                // polls until the time comes.
                self.precise = false;
                return 0;
            }
            r as i64
        } else {
            let ms = (timeout_ns / 1_000_000) as libc::c_int;
            // SAFETY: as above.
            (unsafe {
                libc::epoll_wait(
                    self.fd,
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    ms,
                )
            }) as i64
        };
        if n < 0 { 0 } else { n as usize }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}

struct Shard {
    cfg: ShardConfig,
    ep: Epoll,
    conns: Vec<Conn>,
    classes: Vec<ClassState>,
    dirty: Vec<u32>,
    rng: Rng,
    warmup: u64,
    interval_ns: u64,
    interval_index: u32,
    last_interval: u32,
    intervals_sent: u32,
    conn_errors: ErrorCounts,
}

/// Runs a shard to the end of its schedule (or until stopped) on the calling thread.
pub fn run(mut cfg: ShardConfig) {
    if let Some(core) = cfg.core {
        core_affinity::set_for_current(core);
    }
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0) };
    let index = cfg.index;
    let out = cfg.out.clone();
    let want = cfg.classes.iter().map(|c| c.connections).sum();
    let classes = std::mem::take(&mut cfg.classes);
    match Shard::new(cfg, classes) {
        Ok(mut s) => s.run(),
        Err(e) => {
            let _ = out.send(ShardEvent::Connected {
                shard: index,
                up: 0,
                want,
                error: Some(format!("epoll: {e}")),
            });
        }
    }
}

impl Shard {
    fn new(cfg: ShardConfig, classes: Vec<ShardClass>) -> io::Result<Self> {
        let warmup = cfg.warmup.as_nanos() as u64;
        let mut end = 0u64;
        let mut conns = Vec::new();
        let mut states = Vec::new();
        for (ci, c) in classes.into_iter().enumerate() {
            let n = c.workload.names().len();
            let class_end = match (&c.schedule, c.closed_until) {
                (Some(s), _) => s.profile().duration_ns(),
                (None, Some(u)) => u.as_nanos() as u64,
                (None, None) => warmup,
            };
            end = end.max(class_end);
            for _ in 0..c.connections {
                conns.push(Conn::new(ci));
            }
            states.push(ClassState {
                mixer: c.workload.mixer(),
                cursor: Cursor {
                    key: u64::from(cfg.global_index),
                    member: u64::from(cfg.global_index),
                    stride: u64::from(cfg.total_shards.max(1)),
                },
                workload: c.workload,
                schedule: c.schedule,
                closed_until: c.closed_until.map(|u| u.as_nanos() as u64),
                budget: c.budget,
                pipeline: c.pipeline.max(1) as usize,
                next_due: None,
                free: VecDeque::new(),
                backlog: VecDeque::new(),
                interval: Stats::new(n),
                totals: Stats::new(n),
            });
        }
        let measured = end.saturating_sub(warmup);
        let interval_ns = (cfg.interval.as_nanos() as u64).max(1_000_000);
        // A closed loop bounded only by its count has no known end: intervals run on.
        let open_ended = states
            .iter()
            .any(|c| c.closed() && c.closed_until.is_none());
        Ok(Self {
            ep: Epoll::new()?,
            conns,
            classes: states,
            dirty: Vec::new(),
            rng: Rng::new(cfg.seed),
            warmup,
            interval_index: 0,
            interval_ns,
            last_interval: if open_ended {
                u32::MAX - 1
            } else {
                (measured.div_ceil(interval_ns).max(1) - 1) as u32
            },
            intervals_sent: 0,
            conn_errors: Vec::new(),
            cfg,
        })
    }

    /// ns since the run's start (0 before it).
    #[inline]
    fn now(&self) -> u64 {
        self.cfg.start.elapsed().as_nanos() as u64
    }

    fn stopped(&self) -> bool {
        self.cfg.stop.load(Ordering::Relaxed)
    }

    fn sending(&self, now: u64) -> bool {
        self.classes.iter().any(|c| c.sending(now))
    }

    fn outstanding(&self) -> bool {
        self.classes.iter().any(|c| !c.backlog.is_empty())
            || self.conns.iter().any(|c| !c.inflight.is_empty())
    }

    fn run(&mut self) {
        self.connect_all();
        if self.stopped() {
            return;
        }
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        for c in &mut self.classes {
            if let Some(s) = c.schedule.as_mut() {
                c.next_due = s.next(&mut self.rng);
            }
        }
        let mut next_sweep = SWEEP_NS;
        // Wait for the start instant (connections were opened before it).
        loop {
            let until = self.cfg.start.saturating_duration_since(Instant::now());
            if until.is_zero() || self.stopped() {
                break;
            }
            let t = until.as_nanos().min(MAX_SLEEP_NS as u128) as u64;
            self.ep.wait(&mut events[..1], t);
        }
        let mut drain_end: Option<u64> = None;
        loop {
            if self.stopped() {
                return;
            }
            let mut now = self.now();
            // 1. Schedule everything that is due; closed-loop classes fill free slots.
            for ci in 0..self.classes.len() {
                if self.classes[ci].closed() {
                    self.fill_closed(ci, now);
                    continue;
                }
                while let Some(t) = self.classes[ci].next_due {
                    if t > now {
                        break;
                    }
                    self.schedule(ci, t);
                    let c = &mut self.classes[ci];
                    c.next_due = c.schedule.as_mut().and_then(|s| s.next(&mut self.rng));
                }
            }
            // 2. One write per connection with new requests.
            self.flush_dirty();
            if !self.sending(now) {
                let end = *drain_end.get_or_insert(now + self.cfg.drain.as_nanos() as u64);
                if !self.outstanding() || now >= end {
                    break;
                }
            }
            // 3. Wait.
            let mut wake = now + MAX_SLEEP_NS;
            for c in &self.classes {
                if let Some(t) = c.next_due {
                    wake = wake.min(t);
                }
                if let Some(u) = c.closed_until {
                    wake = wake.min(u.max(now));
                }
            }
            wake = wake.min(next_sweep).min(self.next_interval_boundary());
            if let Some(end) = drain_end {
                wake = wake.min(end);
            }
            let timeout = match self.cfg.pacer {
                Pacer::Spin => 0,
                Pacer::Sleep => {
                    // A sleep shorter than the wake-up latency only adds lag (and a wake-up
                    // costs ~25 µs of CPU on a VM, more than spinning that long).
                    let t = wake.saturating_sub(now);
                    if t < SPIN_WINDOW_NS { 0 } else { t }
                }
            };
            let n = self.ep.wait(&mut events, timeout);
            // 4. Handle readiness.
            if n > 0 {
                now = self.now();
                for ev in &events[..n] {
                    self.on_event(ev.u64 as usize, ev.events, now);
                }
            }
            for ci in 0..self.classes.len() {
                if !self.classes[ci].backlog.is_empty() {
                    self.drain_backlog(ci);
                }
            }
            now = self.now();
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP_NS;
            }
            if now >= self.warmup {
                let idx = (((now - self.warmup) / self.interval_ns) as u32).min(self.last_interval);
                if idx != self.interval_index {
                    self.ship_interval();
                    self.interval_index = idx;
                }
            }
        }
        self.finish();
    }

    fn next_interval_boundary(&self) -> u64 {
        if self.interval_index >= self.last_interval {
            u64::MAX
        } else {
            self.warmup + u64::from(self.interval_index + 1) * self.interval_ns
        }
    }

    fn ship_interval(&mut self) {
        let mut stats = Vec::with_capacity(self.classes.len());
        for c in &mut self.classes {
            let n = c.interval.cmds.len();
            let s = std::mem::replace(&mut c.interval, Stats::new(n));
            c.totals += &s;
            stats.push(s);
        }
        self.intervals_sent += 1;
        let _ = self.cfg.out.send(ShardEvent::Interval {
            shard: self.cfg.index,
            index: self.interval_index,
            stats,
        });
    }

    fn finish(&mut self) {
        let (mut in_flight, mut unsent) = (0u64, 0u64);
        for c in &self.classes {
            unsent += c
                .backlog
                .iter()
                .filter(|q| q.intended >= self.warmup)
                .count() as u64;
        }
        for c in &self.conns {
            for (i, p) in c.inflight.iter().enumerate() {
                if !p.measured {
                    continue;
                }
                if i >= c.inflight.len() - c.unwritten {
                    unsent += 1;
                } else {
                    in_flight += 1;
                }
            }
        }
        self.ship_interval();
        let totals = self
            .classes
            .iter_mut()
            .map(|c| std::mem::take(&mut c.totals))
            .collect();
        let _ = self.cfg.out.send(ShardEvent::Finished {
            shard: self.cfg.index,
            totals,
            in_flight,
            unsent,
            intervals: self.intervals_sent,
            connection_errors: std::mem::take(&mut self.conn_errors),
        });
    }

    // ---- connections -------------------------------------------------------------

    /// Opens every connection before the start, waiting up to the start instant (or 5 s).
    fn connect_all(&mut self) {
        for ci in 0..self.conns.len() {
            self.start_connect(ci, 0);
        }
        let deadline = Instant::now()
            .max(self.cfg.start)
            .min(Instant::now() + Duration::from_secs(5))
            .max(Instant::now() + Duration::from_millis(500));
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        while self
            .conns
            .iter()
            .any(|c| matches!(c.state, ConnState::Connecting { .. }))
            && Instant::now() < deadline
            && !self.stopped()
        {
            let t = deadline.saturating_duration_since(Instant::now());
            let n = self
                .ep
                .wait(&mut events, t.as_nanos().min(MAX_SLEEP_NS as u128) as u64);
            for ev in &events[..n] {
                self.on_event(ev.u64 as usize, ev.events, 0);
            }
        }
        let up = self
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Up)
            .count() as u32;
        let want = self.conns.len() as u32;
        let error = (up < want).then(|| {
            self.conn_errors
                .first()
                .map(|e| e.0.clone())
                .unwrap_or_else(|| "connect timed out".into())
        });
        let _ = self.cfg.out.send(ShardEvent::Connected {
            shard: self.cfg.index,
            up,
            want,
            error,
        });
    }

    fn start_connect(&mut self, ci: usize, now: u64) {
        let addr = self.cfg.target;
        let res = (|| -> io::Result<socket2::Socket> {
            let sock = socket2::Socket::new(
                socket2::Domain::for_address(addr),
                socket2::Type::STREAM.nonblocking().cloexec(),
                Some(socket2::Protocol::TCP),
            )?;
            sock.set_nodelay(true)?;
            match sock.connect(&addr.into()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                Err(e) => return Err(e),
            }
            Ok(sock)
        })();
        match res {
            Ok(sock) => {
                let fd = sock.as_raw_fd();
                let c = &mut self.conns[ci];
                c.sock = Some(sock);
                c.state = ConnState::Connecting { since: now };
                if let Err(e) = self.ep.ctl(
                    libc::EPOLL_CTL_ADD,
                    fd,
                    (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP) as u32,
                    ci as u64,
                ) {
                    tracing::debug!(error = %e, "epoll_ctl failed");
                    self.conn_down(ci, now, "epoll", Failure::Disconnected);
                }
            }
            Err(e) => {
                let kind = format!("connect: {}", error_kind(&e));
                self.conn_down(ci, now, &kind, Failure::Disconnected);
            }
        }
    }

    fn on_connected(&mut self, ci: usize, now: u64) {
        let err = self.conns[ci]
            .sock
            .as_ref()
            .map(|s| s.take_error())
            .unwrap_or(Ok(None));
        match err {
            Ok(None) => {
                let fd = self.conns[ci].fd();
                let _ = self.ep.ctl(
                    libc::EPOLL_CTL_MOD,
                    fd,
                    (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
                    ci as u64,
                );
                let c = &mut self.conns[ci];
                c.state = ConnState::Up;
                c.backoff = BACKOFF_MIN_NS;
                c.want_out = false;
                let class = &mut self.classes[c.class];
                for _ in 0..class.pipeline {
                    class.free.push_back(ci as u32);
                }
            }
            Ok(Some(e)) | Err(e) => {
                let kind = format!("connect: {}", error_kind(&e));
                self.conn_down(ci, now, &kind, Failure::Disconnected);
            }
        }
    }

    /// Closes a connection; every request on it fails with `failure`.
    fn conn_down(&mut self, ci: usize, now: u64, conn_error: &str, failure: Failure) {
        add_error(&mut self.conn_errors, conn_error, 1);
        let c = &mut self.conns[ci];
        // Closing the fd removes it from the epoll set.
        drop(c.sock.take());

        let class = &mut self.classes[c.class];
        for p in c.inflight.drain(..) {
            if !p.measured {
                continue;
            }
            let s = &mut class.interval.cmds[p.cmd as usize];
            add_error(&mut s.errors, failure.kind(), 1);
            if failure == Failure::Timeout {
                // A request given up on waited at least this long: keep it in the latency
                // histogram so timing out can never make the percentiles look better.
                hist::record(&mut s.latency, now.saturating_sub(p.intended));
            }
        }
        c.unwritten = 0;
        c.wbuf.clear();
        c.wpos = 0;
        c.rstart = 0;
        c.rend = 0;
        c.need = 0;
        c.dirty = false;
        c.want_out = false;
        c.state = ConnState::Down {
            retry_at: now + c.backoff,
        };
        c.backoff = (c.backoff * 2).min(BACKOFF_MAX_NS);
    }

    fn on_event(&mut self, ci: usize, flags: u32, now: u64) {
        let Some(c) = self.conns.get(ci) else { return };
        match c.state {
            ConnState::Connecting { .. } => {
                if flags & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                    self.on_connected(ci, now);
                }
            }
            ConnState::Up => {
                // Readable, or the peer is gone (then the read sees EOF or the error).
                if flags
                    & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP | libc::EPOLLRDHUP) as u32
                    != 0
                {
                    self.on_readable(ci);
                }
                if self.conns[ci].state == ConnState::Up
                    && flags & libc::EPOLLOUT as u32 != 0
                    && self.conns[ci].want_out
                {
                    let now = self.now();
                    self.flush(ci, now);
                }
            }
            ConnState::Down { .. } => {}
        }
    }

    // ---- sending -----------------------------------------------------------------

    fn schedule(&mut self, ci: usize, intended: u64) {
        let c = &mut self.classes[ci];
        let cmd = c.mixer.pick() as u16;
        let measured = intended >= self.warmup;
        if measured {
            c.interval.cmds[cmd as usize].scheduled += 1;
        }
        let q = Queued { intended, cmd };
        if !c.backlog.is_empty() || !self.dispatch(ci, q) {
            let c = &mut self.classes[ci];
            let full = c.backlog.len() >= self.cfg.backlog_limit;
            if measured {
                let s = &mut c.interval.cmds[cmd as usize];
                if full {
                    add_error(&mut s.errors, "backlog_full", 1);
                } else {
                    s.backlogged += 1;
                }
            }
            if !full {
                c.backlog.push_back(q);
            }
        }
    }

    /// Closed loop: every free slot gets a request now, within the budget and the time.
    fn fill_closed(&mut self, ci: usize, now: u64) {
        while self.classes[ci].sending(now) && !self.classes[ci].free.is_empty() {
            let cmd = self.classes[ci].mixer.pick() as u16;
            if !self.dispatch(ci, Queued { intended: now, cmd }) {
                // Only stale tokens were left; the mixer's pick is simply not used.
                break;
            }
            // Warm-up requests do not use the budget: --requests counts measured requests.
            if now >= self.warmup {
                let c = &mut self.classes[ci];
                c.budget -= 1;
                c.interval.cmds[cmd as usize].scheduled += 1;
            }
        }
    }

    /// Puts a request on a connection of its class with a free slot; false when none has one.
    fn dispatch(&mut self, ci: usize, q: Queued) -> bool {
        let class = &mut self.classes[ci];
        while let Some(conn) = class.free.pop_front() {
            let c = &mut self.conns[conn as usize];
            if c.state != ConnState::Up || c.inflight.len() >= class.pipeline {
                continue; // stale token
            }
            class.workload.encode(
                q.cmd as usize,
                &mut self.rng,
                &mut class.cursor,
                &mut c.wbuf,
            );
            c.inflight.push_back(Pending {
                intended: q.intended,
                written: 0,
                cmd: q.cmd,
                measured: q.intended >= self.warmup,
            });
            c.unwritten += 1;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(conn);
            }
            return true;
        }
        false
    }

    fn drain_backlog(&mut self, ci: usize) {
        while let Some(q) = self.classes[ci].backlog.front().copied() {
            if !self.dispatch(ci, q) {
                break;
            }
            self.classes[ci].backlog.pop_front();
        }
        self.flush_dirty();
    }

    fn flush_dirty(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let now = self.now();
        let mut dirty = std::mem::take(&mut self.dirty);
        for &ci in &dirty {
            self.conns[ci as usize].dirty = false;
            if !self.conns[ci as usize].want_out {
                self.flush(ci as usize, now);
            }
        }
        dirty.clear();
        self.dirty = dirty;
    }

    fn flush(&mut self, ci: usize, now: u64) {
        let c = &mut self.conns[ci];
        while c.wpos < c.wbuf.len() {
            let buf = &c.wbuf[c.wpos..];
            // SAFETY: buf is a live slice; the fd is ours.
            let r =
                unsafe { libc::send(c.fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
            if r >= 0 {
                c.wpos += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {
                    if !c.want_out {
                        c.want_out = true;
                        let fd = c.fd();
                        let _ = self.ep.ctl(
                            libc::EPOLL_CTL_MOD,
                            fd,
                            (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP) as u32,
                            ci as u64,
                        );
                    }
                    return;
                }
                _ => {
                    let kind = error_kind(&e);
                    self.conn_down(ci, now, &kind, Failure::Disconnected);
                    return;
                }
            }
        }
        c.wbuf.clear();
        c.wpos = 0;
        if c.want_out {
            c.want_out = false;
            let fd = c.fd();
            let _ = self.ep.ctl(
                libc::EPOLL_CTL_MOD,
                fd,
                (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
                ci as u64,
            );
        }
        let c = &mut self.conns[ci];
        let class = &mut self.classes[c.class];
        let first = c.inflight.len() - c.unwritten;
        for p in c.inflight.range_mut(first..) {
            p.written = now;
            if p.measured {
                let s = &mut class.interval.cmds[p.cmd as usize];
                s.sent += 1;
                hist::record(&mut s.schedule_lag, now.saturating_sub(p.intended));
            }
        }
        c.unwritten = 0;
    }

    // ---- receiving ---------------------------------------------------------------

    fn on_readable(&mut self, ci: usize) {
        loop {
            let c = &mut self.conns[ci];
            if c.rbuf.len() - c.rend < READ_CHUNK / 4 {
                if c.rstart > 0 {
                    c.rbuf.copy_within(c.rstart..c.rend, 0);
                    c.rend -= c.rstart;
                    c.need = c.need.saturating_sub(c.rstart);
                    c.rstart = 0;
                }
                if c.rbuf.len() - c.rend < READ_CHUNK / 4 {
                    let want = (c.rbuf.len() * 2).max(c.need.min(MAX_FRAME) + READ_CHUNK);
                    c.rbuf.resize(want, 0);
                }
            }
            let space = c.rbuf.len() - c.rend;
            let fd = c.fd();
            let buf = &mut c.rbuf[c.rend..];
            // SAFETY: buf is a live, writable slice of `space` bytes.
            let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), space) };
            if r == 0 {
                let now = self.now();
                self.conn_down(ci, now, "eof", Failure::Disconnected);
                return;
            }
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => return,
                    _ => {
                        let now = self.now();
                        self.conn_down(ci, now, &error_kind(&e), Failure::Disconnected);
                        return;
                    }
                }
            }
            let r = r as usize;
            c.rend += r;
            if c.rend >= c.need {
                let now = self.now();
                if !self.parse_replies(ci, now) {
                    return;
                }
            }
            // A short read drained the socket: no need to spend a syscall seeing EAGAIN.
            if r < space {
                return;
            }
        }
    }

    /// Matches complete replies with their requests. False when the connection was closed.
    fn parse_replies(&mut self, ci: usize, now: u64) -> bool {
        loop {
            let c = &mut self.conns[ci];
            if c.rstart == c.rend {
                c.rstart = 0;
                c.rend = 0;
                c.need = 0;
                return true;
            }
            match resp::scan_reply(&c.rbuf[c.rstart..c.rend]) {
                Ok(Scan::Incomplete { need }) => {
                    c.need = c.rstart + need;
                    return true;
                }
                Ok(Scan::Reply { kind, len }) => {
                    let Some(p) = c.inflight.pop_front() else {
                        self.conn_down(ci, now, "unexpected_reply", Failure::Disconnected);
                        return false;
                    };
                    let class = &mut self.classes[c.class];
                    let early = c.inflight.len() < c.unwritten;
                    if early {
                        // A reply for a request whose write had not finished: the server
                        // answered early (e.g. an error for a partial command). It was sent.
                        c.unwritten = c.inflight.len();
                    }
                    if p.measured {
                        let s = &mut class.interval.cmds[p.cmd as usize];
                        if early {
                            s.sent += 1;
                            hist::record(&mut s.schedule_lag, now.saturating_sub(p.intended));
                        }
                        match kind {
                            ReplyKind::Value => {
                                s.completed += 1;
                                hist::record(&mut s.latency, now.saturating_sub(p.intended));
                                let written = if p.written == 0 {
                                    p.intended
                                } else {
                                    p.written
                                };
                                hist::record(&mut s.service_time, now.saturating_sub(written));
                            }
                            ReplyKind::Error(k) => add_error_bytes(&mut s.errors, k),
                        }
                    }
                    c.rstart += len;
                    if class.schedule.is_some() {
                        class.free.push_back(ci as u32);
                    } else if c.inflight.is_empty() {
                        // Closed loop refills a connection's whole pipeline at once, as
                        // valkey-benchmark does: one write of `pipeline` requests instead of
                        // a trickle of small ones, which the server reads more cheaply too.
                        for _ in 0..class.pipeline {
                            class.free.push_back(ci as u32);
                        }
                    }
                }
                Err(_) => {
                    self.conn_down(ci, now, "protocol_error", Failure::Disconnected);
                    return false;
                }
            }
        }
    }

    /// Fails requests unanswered for longer than the timeout, and reconnects closed
    /// connections whose backoff has passed.
    fn sweep(&mut self, now: u64) {
        let timeout = self.cfg.timeout.as_nanos() as u64;
        for ci in 0..self.conns.len() {
            match self.conns[ci].state {
                ConnState::Up => {
                    if let Some(p) = self.conns[ci].inflight.front() {
                        let since = if p.written == 0 {
                            p.intended
                        } else {
                            p.written
                        };
                        if now.saturating_sub(since) > timeout {
                            self.conn_down(ci, now, "timeout", Failure::Timeout);
                        }
                    }
                }
                ConnState::Connecting { since } if now.saturating_sub(since) > timeout => {
                    self.conn_down(ci, now, "connect: timed_out", Failure::Disconnected);
                }
                ConnState::Down { retry_at } if now >= retry_at => self.start_connect(ci, now),
                _ => {}
            }
        }
    }
}

/// A short, stable name for an I/O error (counted by kind, so no free text).
fn error_kind(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "refused".into(),
        Some(libc::ECONNRESET) => "reset".into(),
        Some(libc::EPIPE) => "broken_pipe".into(),
        Some(libc::ETIMEDOUT) => "timed_out".into(),
        Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => "unreachable".into(),
        Some(code) => format!("errno_{code}"),
        None => e.kind().to_string(),
    }
}

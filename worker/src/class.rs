//! One class as a shard runs it: where its requests come from (an open-loop schedule or
//! a closed loop with a budget), which of its connections takes the next one, the backlog
//! of requests that found every connection full, and its results.
//!
//! Free pipeline slots are tokens: a connection's id, pushed once per slot when it comes
//! up and once per reply (open loop) or `pipeline` times when its pipeline empties (closed
//! loop). A token can go stale (its connection closed, or refilled through another token);
//! dispatch skips those, so tokens never need to be withdrawn.
//!
//! A request that finds no free slot waits in the backlog keeping its intended time, so
//! the wait shows in its latency; beyond the backlog limit it fails as `backlog_full`.
//! A request whose intended time is more than the timeout ago is given up whether or not it
//! was written: from the backlog (or at once, when it is scheduled that late) it fails as
//! `timeout_unsent`, and its wait goes into the latency histogram like any timeout's.
//!
//! A turn schedules at most [`MAX_PER_TURN`] requests per class, so a rate the shard
//! cannot keep up with still lets the loop do I/O, roll intervals and see the stop flag;
//! what it could not schedule by the class's end is dropped (the interval's `scheduled`
//! falls short of its target, which marks it generator-bound).

use crate::conn::{Conn, ConnId, Pending, Reply};
use crate::shard::Load;
use crest_model::hist;
use crest_model::rng::Rng;
use crest_model::schedule::Schedule;
use crest_model::stats::{Kinds, Stats, add_error};
use crest_model::workload::{Cursor, Mixer, Workload};
use crest_resp::ReplyKind;
use std::collections::VecDeque;
use std::sync::Arc;

/// A class's index within the run (and within each shard's results).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassId(pub u32);

impl ClassId {
    /// Position in the shard's class list.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Most requests one class schedules in one loop turn.
pub const MAX_PER_TURN: usize = 4096;

/// Why a request failed without a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Written, unanswered past the timeout: it waited that long, so it stays in latency.
    Timeout,
    /// Never written, and its intended time passed the timeout ago (it waited in the
    /// backlog, or in a write buffer): in latency too.
    TimeoutUnsent,
    /// The connection broke under it.
    Disconnected,
    /// Its reply was larger than the connection may buffer.
    TooLarge,
}

impl Failure {
    /// The error kind the requests are counted under.
    pub fn kind(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::TimeoutUnsent => "timeout_unsent",
            Failure::Disconnected => "disconnected",
            Failure::TooLarge => "reply_too_large",
        }
    }

    /// How a request on a connection closed for `self` fails: timeouts of requests never
    /// written are `timeout_unsent`.
    pub fn of(self, written: bool) -> Self {
        match self {
            Failure::Timeout if !written => Failure::TimeoutUnsent,
            f => f,
        }
    }
}

/// A request waiting for a free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Queued {
    intended: u64,
    cmd: u32,
}

/// Where a running class's requests come from.
enum Arrivals {
    /// On schedule; `next_due` is the next intended time (None: the schedule is over).
    Open {
        schedule: Schedule,
        next_due: Option<u64>,
    },
    /// As fast as replies come, until `until` (ns) and within `budget` (None: no bound).
    Closed {
        until: Option<u64>,
        budget: Option<u64>,
    },
}

/// The shard-wide things a class sends with: the connections (each class uses only its
/// own), the RNG, and the list of connections to flush this turn.
pub struct Outbox<'a> {
    /// Every connection of the shard.
    pub conns: &'a mut [Conn],
    /// The shard's RNG (keys, values, Poisson gaps), drawn in a fixed order so a seed
    /// repeats a run.
    pub rng: &'a mut Rng,
    /// Connections with requests to write this turn.
    pub dirty: &'a mut Vec<ConnId>,
}

/// Per-class state of a running shard.
pub struct ClassState {
    workload: Arc<Workload>,
    arrivals: Arrivals,
    pipeline: usize,
    /// Requests intended before this (ns) are sent but not measured.
    warmup: u64,
    backlog_limit: usize,
    mixer: Mixer,
    cursor: Cursor,
    free: VecDeque<ConnId>,
    backlog: VecDeque<Queued>,
    interval: Stats,
    totals: Stats,
}

impl ClassState {
    /// A class that sends `workload` as `load` says, `pipeline` requests deep per
    /// connection.
    pub fn new(
        workload: Arc<Workload>,
        load: Load,
        pipeline: u32,
        warmup: u64,
        backlog_limit: usize,
        cursor: Cursor,
    ) -> Self {
        let n = workload.names().len();
        let arrivals = match load {
            Load::Open(schedule) => Arrivals::Open {
                schedule,
                next_due: None,
            },
            Load::Closed { until, budget } => Arrivals::Closed {
                until: until.map(|u| u.as_nanos() as u64),
                budget,
            },
        };
        Self {
            mixer: workload.mixer(),
            workload,
            arrivals,
            pipeline: pipeline.max(1) as usize,
            warmup,
            backlog_limit,
            cursor,
            free: VecDeque::new(),
            backlog: VecDeque::new(),
            interval: Stats::new(n),
            totals: Stats::new(n),
        }
    }

    /// When the class stops sending, ns since the start: the end of its schedule or of
    /// its closed-loop time; `None` when only a request count bounds it (no known end).
    pub fn end(&self) -> Option<u64> {
        match &self.arrivals {
            Arrivals::Open { schedule, .. } => Some(schedule.profile().duration_ns()),
            Arrivals::Closed { until, .. } => *until,
        }
    }

    /// Draws the first intended time (open loop).
    pub fn start(&mut self, rng: &mut Rng) {
        if let Arrivals::Open { schedule, next_due } = &mut self.arrivals {
            *next_due = schedule.next(rng);
        }
    }

    /// Whether this class may still start requests at `now`.
    #[inline]
    pub fn sending(&self, now: u64) -> bool {
        match &self.arrivals {
            Arrivals::Open { next_due, .. } => next_due.is_some(),
            Arrivals::Closed { until, budget } => {
                budget.is_none_or(|b| b > 0) && until.is_none_or(|u| now < u)
            }
        }
    }

    /// The time this class next needs the loop awake for, if any.
    #[inline]
    pub fn wake_at(&self, now: u64) -> Option<u64> {
        match &self.arrivals {
            Arrivals::Open { next_due, .. } => *next_due,
            Arrivals::Closed { until, .. } => until.map(|u| u.max(now)),
        }
    }

    /// Whether requests wait in the backlog.
    #[inline]
    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Step 1 of a turn: every request due by `due` is scheduled (open loop), at most
    /// [`MAX_PER_TURN`] of them, or every free slot gets one (closed loop). `now` is the
    /// clock: a request already `timeout` old is given up instead of sent. Past the class's
    /// end, what the bound left unscheduled is dropped.
    #[inline]
    pub fn send_due(&mut self, due: u64, now: u64, timeout: u64, out: &mut Outbox<'_>) {
        if matches!(self.arrivals, Arrivals::Closed { .. }) {
            self.fill_closed(due, out);
            return;
        }
        for _ in 0..MAX_PER_TURN {
            let t = match self.arrivals {
                Arrivals::Open {
                    next_due: Some(t), ..
                } if t <= due => t,
                _ => return,
            };
            self.schedule(t, now, timeout, out);
            if let Arrivals::Open { schedule, next_due } = &mut self.arrivals {
                *next_due = schedule.next(out.rng);
            }
        }
        // The bound was hit: the shard cannot keep this rate. Once the class's time is
        // over, nothing more of its schedule is created (a frozen shard that thaws, or an
        // unschedulable rate, must not keep the run going past its end).
        if let Arrivals::Open { schedule, next_due } = &mut self.arrivals
            && next_due.is_some_and(|t| t <= due)
            && now >= schedule.profile().duration_ns()
        {
            *next_due = None;
        }
    }

    /// A request not written yet, measured when intended after the warm-up.
    #[inline]
    fn unwritten(&self, q: Queued) -> Pending {
        Pending {
            intended: q.intended,
            written: 0,
            cmd: q.cmd,
            measured: q.intended >= self.warmup,
        }
    }

    /// One open-loop request intended at `intended`: given up when it is already older
    /// than the timeout, else onto a free slot, else into the backlog (behind any already
    /// waiting, so order holds), else `backlog_full`.
    #[inline]
    fn schedule(&mut self, intended: u64, now: u64, timeout: u64, out: &mut Outbox<'_>) {
        let cmd = self.mixer.pick() as u32;
        let measured = intended >= self.warmup;
        if measured {
            self.interval.cmds[cmd as usize].scheduled += 1;
        }
        if now.saturating_sub(intended) > timeout {
            let p = self.unwritten(Queued { intended, cmd });
            self.on_failed(p, Failure::TimeoutUnsent, now);
            return;
        }
        let q = Queued { intended, cmd };
        if self.backlog.is_empty() && self.dispatch(q, out) {
            return;
        }
        let full = self.backlog.len() >= self.backlog_limit;
        if measured {
            let s = &mut self.interval.cmds[cmd as usize];
            if full {
                add_error(&mut s.errors, "backlog_full", 1);
            } else {
                s.backlogged += 1;
            }
        }
        if !full {
            self.backlog.push_back(q);
        }
    }

    /// Closed loop: every free slot gets a request now, within the budget and the time.
    #[inline]
    fn fill_closed(&mut self, now: u64, out: &mut Outbox<'_>) {
        while self.sending(now) && !self.free.is_empty() {
            let cmd = self.mixer.pick() as u32;
            if !self.dispatch(Queued { intended: now, cmd }, out) {
                // Only stale tokens were left; the mixer's pick is simply not used.
                break;
            }
            // Warm-up requests do not use the budget: --requests counts measured requests.
            if now >= self.warmup {
                if let Arrivals::Closed {
                    budget: Some(b), ..
                } = &mut self.arrivals
                {
                    *b -= 1;
                }
                self.interval.cmds[cmd as usize].scheduled += 1;
            }
        }
    }

    /// Puts a request on a connection with a free slot; false when none has one.
    #[inline]
    fn dispatch(&mut self, q: Queued, out: &mut Outbox<'_>) -> bool {
        while let Some(id) = self.free.pop_front() {
            let conn = &mut out.conns[id.index()];
            if !conn.has_room(self.pipeline) {
                continue; // stale token
            }
            let req = self.unwritten(q);
            let (workload, cursor, rng) = (&self.workload, &mut self.cursor, &mut *out.rng);
            if conn.enqueue(req, |buf| {
                workload.encode_to(q.cmd as usize, rng, cursor, buf)
            }) {
                out.dirty.push(id);
            }
            return true;
        }
        false
    }

    /// Gives up backlogged requests intended more than `timeout` before `now`, as
    /// `timeout_unsent` (the backlog is in intended order: only its front can be due).
    pub fn expire_backlog(&mut self, now: u64, timeout: u64) {
        while let Some(&q) = self.backlog.front() {
            if now.saturating_sub(q.intended) <= timeout {
                break;
            }
            self.backlog.pop_front();
            let p = self.unwritten(q);
            self.on_failed(p, Failure::TimeoutUnsent, now);
        }
    }

    /// Moves backlogged requests, oldest first, onto slots that came free.
    pub fn drain_backlog(&mut self, out: &mut Outbox<'_>) {
        while let Some(&q) = self.backlog.front() {
            if !self.dispatch(q, out) {
                break;
            }
            self.backlog.pop_front();
        }
    }

    /// A connection of this class came up: all its slots are free.
    pub fn on_up(&mut self, id: ConnId) {
        for _ in 0..self.pipeline {
            self.free.push_back(id);
        }
    }

    /// A request's write completed at `now`.
    #[inline]
    pub fn on_sent(&mut self, p: &Pending, now: u64) {
        if p.measured {
            let s = &mut self.interval.cmds[p.cmd as usize];
            s.sent += 1;
            hist::record(&mut s.schedule_lag, now.saturating_sub(p.intended));
        }
    }

    /// A reply on connection `id` at `now`: results, and the slot it frees. Error replies
    /// count under the kind `kinds` (the shard's bounded set) names.
    #[inline]
    pub fn on_reply(&mut self, id: ConnId, r: Reply<'_>, now: u64, kinds: &mut Kinds) {
        let p = r.req;
        if p.measured {
            let s = &mut self.interval.cmds[p.cmd as usize];
            if r.early {
                s.sent += 1;
                hist::record(&mut s.schedule_lag, now.saturating_sub(p.intended));
            }
            match r.kind {
                ReplyKind::Value | ReplyKind::Nil => {
                    s.completed += 1;
                    s.misses += u64::from(r.misses);
                    hist::record(&mut s.latency, now.saturating_sub(p.intended));
                    hist::record(&mut s.service_time, now.saturating_sub(p.since()));
                }
                ReplyKind::Error { kind, message } => {
                    add_error(&mut s.errors, kinds.resolve(kind, message), 1);
                }
            }
        }
        match self.arrivals {
            Arrivals::Open { .. } => self.free.push_back(id),
            // Closed loop refills a connection's whole pipeline at once, as
            // valkey-benchmark does: one write of `pipeline` requests instead of a trickle
            // of small ones, which the server reads more cheaply too.
            Arrivals::Closed { .. } if r.idle => self.on_up(id),
            Arrivals::Closed { .. } => {}
        }
    }

    /// RESP3 push frames arrived on the class's connections, `invalidations` of them
    /// client-side caching invalidations. They answer no request; they are counted, warm-up
    /// included (a push carries no intended time).
    #[inline]
    pub fn on_pushes(&mut self, pushes: u64, invalidations: u64) {
        self.interval.pushes += pushes;
        self.interval.invalidations += invalidations;
    }

    /// A request that failed without a reply (its connection closed under it, or it was
    /// given up).
    pub fn on_failed(&mut self, p: Pending, failure: Failure, now: u64) {
        if !p.measured {
            return;
        }
        let s = &mut self.interval.cmds[p.cmd as usize];
        add_error(&mut s.errors, failure.kind(), 1);
        if matches!(failure, Failure::Timeout | Failure::TimeoutUnsent) {
            // A request given up on waited at least this long: keep it in the latency
            // histogram so timing out can never make the percentiles look better.
            hist::record(&mut s.latency, now.saturating_sub(p.intended));
        }
    }

    /// Ends the current interval: returns its results and adds them to the totals.
    pub fn take_interval(&mut self) -> Stats {
        let n = self.interval.cmds.len();
        let s = std::mem::replace(&mut self.interval, Stats::new(n));
        self.totals += &s;
        s
    }

    /// The results of every interval taken so far.
    pub fn take_totals(&mut self) -> Stats {
        std::mem::take(&mut self.totals)
    }

    /// Measured requests still waiting in the backlog (never written).
    pub fn unsent(&self) -> u64 {
        self.backlog
            .iter()
            .filter(|q| q.intended >= self.warmup)
            .count() as u64
    }

    /// Results of the interval so far.
    #[cfg(test)]
    pub fn interval(&self) -> &Stats {
        &self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crest_model::schedule::{Arrival, Profile};
    use crest_model::shapes::{KeyDist, KeySpace, ValueSizes};
    use crest_model::workload::CmdDef;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn workload(mix: &[(&str, u32)]) -> Arc<Workload> {
        let commands = mix
            .iter()
            .map(|(name, w)| (CmdDef::parse(name, 1, None, 1).unwrap(), *w))
            .collect();
        let keys = KeySpace::new(100, "key:", KeyDist::Uniform).unwrap();
        Arc::new(Workload::new(commands, keys, ValueSizes::Fixed(8), 1, false, None, 1).unwrap())
    }

    /// An open-loop class sending `n` requests 1 ms apart from t = 0.
    fn open(n: u64, pipeline: u32, warmup: u64, backlog_limit: usize) -> ClassState {
        let profile = Profile::constant(1_000.0, n * MS).unwrap();
        let load = Load::Open(Schedule::new(profile, Arrival::Uniform, 0.0));
        let mut c = ClassState::new(
            workload(&[("GET", 1)]),
            load,
            pipeline,
            warmup,
            backlog_limit,
            Cursor::default(),
        );
        c.start(&mut Rng::new(1));
        c
    }

    fn closed(until: Option<Duration>, budget: Option<u64>, pipeline: u32) -> ClassState {
        ClassState::new(
            workload(&[("SET", 1), ("GET", 1)]),
            Load::Closed { until, budget },
            pipeline,
            0,
            16,
            Cursor::default(),
        )
    }

    /// Connections that are up, without sockets, plus the RNG and flush list.
    struct Rig {
        conns: Vec<Conn>,
        rng: Rng,
        dirty: Vec<ConnId>,
    }

    impl Rig {
        fn new(n: u32, class: &mut ClassState) -> Self {
            let conns = (0..n)
                .map(|i| {
                    let mut c = Conn::for_tests(ClassId(0));
                    c.set_up();
                    class.on_up(ConnId(i));
                    c
                })
                .collect();
            Self {
                conns,
                rng: Rng::new(7),
                dirty: Vec::new(),
            }
        }

        fn out(&mut self) -> Outbox<'_> {
            Outbox {
                conns: &mut self.conns,
                rng: &mut self.rng,
                dirty: &mut self.dirty,
            }
        }

        /// Writes every dirty connection at `now` (no socket: the buffer counts as written).
        fn flush(&mut self, class: &mut ClassState, now: u64) {
            let ep = crate::sys::epoll::Epoll::new().unwrap();
            for id in self.dirty.drain(..) {
                let c = &mut self.conns[id.index()];
                c.clear_dirty();
                c.flush(id, &ep, now, |p| class.on_sent(p, now)).unwrap();
            }
        }

        /// The server answers `n` requests on `id` with `reply` at `now`.
        fn answer(&mut self, class: &mut ClassState, id: ConnId, n: usize, reply: &[u8], now: u64) {
            let c = &mut self.conns[id.index()];
            c.feed(&reply.repeat(n));
            c.take_replies(
                |r| class.on_reply(id, r, now, &mut Kinds::default()),
                |_| {},
            )
            .unwrap();
        }

        fn in_flight(&self) -> Vec<usize> {
            self.conns.iter().map(Conn::in_flight).collect()
        }
    }

    fn errors(s: &Stats, kind: &str) -> u64 {
        s.cmds
            .iter()
            .flat_map(|c| &c.errors)
            .filter(|(k, _)| k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    #[test]
    fn a_full_backlog_fails_requests_as_backlog_full_and_keeps_order() {
        let mut class = open(5, 1, 0, 2);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(10 * MS, 10 * MS, u64::MAX, &mut rig.out());
        let s = &class.interval().cmds[0];
        assert_eq!(s.scheduled, 5);
        assert_eq!(s.backlogged, 2);
        assert_eq!(errors(class.interval(), "backlog_full"), 2);
        assert_eq!(rig.in_flight(), vec![1]);
        assert_eq!(rig.dirty, vec![ConnId(0)]);
        assert_eq!(class.unsent(), 2);
        assert!(!class.sending(10 * MS), "the schedule is over");

        rig.flush(&mut class, 10 * MS);
        rig.answer(&mut class, ConnId(0), 1, b"$-1\r\n", 12 * MS);
        class.drain_backlog(&mut rig.out());
        // The first backlogged request (intended at 1 ms) went next, keeping its time.
        let next = rig.conns[0].requests().next().unwrap();
        assert_eq!(next.intended, MS);
        assert_eq!(class.unsent(), 1);
        rig.flush(&mut class, 13 * MS);
        rig.answer(&mut class, ConnId(0), 1, b"$-1\r\n", 20 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!((s.sent, s.completed), (2, 2));
        // Latency runs from the intended time, so the backlog wait is in it: 12 ms and
        // 19 ms; the service times are 2 ms and 7 ms.
        assert!(s.latency.max() >= 19 * MS - 20_000, "{}", s.latency.max());
        assert!(s.service_time.max() < 8 * MS);
        assert!(s.schedule_lag.max() >= 12 * MS - 20_000);
    }

    #[test]
    fn warm_up_requests_are_sent_but_counted_nowhere() {
        let mut class = open(4, 1, 2 * MS, 1);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(10 * MS, 10 * MS, u64::MAX, &mut rig.out());
        // Requests at 0 and 1 ms are warm-up: one sent, one backlogged, neither counted.
        // The warm-up one holds the backlog's only place, so those at 2 and 3 ms fail.
        let s = &class.interval().cmds[0];
        assert_eq!(s.scheduled, 2);
        assert_eq!(s.backlogged, 0);
        assert_eq!(errors(class.interval(), "backlog_full"), 2);
        assert_eq!(class.unsent(), 0, "the backlogged one is warm-up");
        rig.flush(&mut class, 10 * MS);
        assert_eq!(class.interval().cmds[0].sent, 0);
    }

    #[test]
    fn a_timed_out_request_keeps_its_latency_a_disconnected_one_does_not() {
        let mut class = open(2, 1, 0, 4);
        let mut rig = Rig::new(2, &mut class);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        rig.flush(&mut class, MS);
        let mut failed = Vec::new();
        rig.conns[0].close(500 * MS, |p, _| failed.push(p));
        rig.conns[1].close(500 * MS, |p, _| failed.push(p));
        assert_eq!(failed.len(), 2);
        class.on_failed(failed[0], Failure::Timeout, 500 * MS);
        class.on_failed(failed[1], Failure::Disconnected, 500 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!(errors(class.interval(), "timeout"), 1);
        assert_eq!(errors(class.interval(), "disconnected"), 1);
        assert_eq!(s.completed, 0);
        assert_eq!(s.latency.len(), 1, "only the timed-out one");
        // Intended at 0 ms, given up on at 500 ms.
        let l = s.latency.max();
        assert!((499 * MS..=501 * MS).contains(&l), "{l}");
    }

    #[test]
    fn stale_tokens_are_skipped_and_a_reconnect_frees_slots_again() {
        let mut class = open(3, 2, 0, 8);
        let mut rig = Rig::new(1, &mut class);
        rig.conns[0].close(0, |_, _| {});
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        // Two tokens remain for a closed connection: the request waits.
        assert_eq!(class.unsent(), 1);
        assert_eq!(rig.in_flight(), vec![0]);
        rig.conns[0].set_up();
        class.on_up(ConnId(0));
        class.drain_backlog(&mut rig.out());
        class.send_due(2 * MS, 2 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![2], "pipeline 2 is full");
        assert_eq!(class.unsent(), 1);
        assert_eq!(class.interval().cmds[0].backlogged, 2);
    }

    #[test]
    fn closed_loop_budget_is_exact_and_refills_whole_pipelines() {
        let mut class = closed(None, Some(10), 4);
        let mut rig = Rig::new(2, &mut class);
        assert_eq!(class.end(), None, "only a count bounds it");
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![4, 4], "every slot filled at once");
        rig.flush(&mut class, 0);
        // Replies trickle in: no refill until a connection's pipeline is empty.
        rig.answer(&mut class, ConnId(0), 3, b"+OK\r\n", MS);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![1, 4]);
        rig.answer(&mut class, ConnId(0), 1, b"+OK\r\n", MS);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        assert_eq!(
            rig.in_flight(),
            vec![2, 4],
            "only 2 of the budget were left"
        );
        assert!(!class.sending(MS));
        rig.flush(&mut class, MS);
        rig.answer(&mut class, ConnId(0), 2, b"+OK\r\n", 2 * MS);
        rig.answer(&mut class, ConnId(1), 4, b"+OK\r\n", 2 * MS);
        class.send_due(3 * MS, 3 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![0, 0], "the budget is spent");
        let total: u64 = class.interval().cmds.iter().map(|c| c.scheduled).sum();
        let done: u64 = class.interval().cmds.iter().map(|c| c.completed).sum();
        assert_eq!((total, done), (10, 10));
        // The mix holds at 1:1 across the refills.
        assert_eq!(class.interval().cmds[0].completed, 5);
    }

    #[test]
    fn closed_loop_stops_at_its_time_and_warm_up_does_not_use_the_budget() {
        let mut class = ClassState::new(
            workload(&[("GET", 1)]),
            Load::Closed {
                until: Some(Duration::from_millis(10)),
                budget: Some(3),
            },
            2,
            5 * MS,
            16,
            Cursor::default(),
        );
        let mut rig = Rig::new(1, &mut class);
        assert_eq!(class.end(), Some(10 * MS));
        assert_eq!(class.wake_at(0), Some(10 * MS));
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        rig.flush(&mut class, 0);
        rig.answer(&mut class, ConnId(0), 2, b"+OK\r\n", MS);
        assert_eq!(class.interval().cmds[0].scheduled, 0, "warm-up");
        assert_eq!(class.interval().cmds[0].completed, 0, "warm-up");
        class.send_due(6 * MS, 6 * MS, u64::MAX, &mut rig.out());
        rig.flush(&mut class, 6 * MS);
        rig.answer(&mut class, ConnId(0), 2, b"+OK\r\n", 7 * MS);
        class.send_due(11 * MS, 11 * MS, u64::MAX, &mut rig.out());
        assert!(!class.sending(11 * MS));
        assert_eq!(rig.in_flight(), vec![0], "past its time");
        assert_eq!(class.interval().cmds[0].completed, 2);
        assert_eq!(class.wake_at(11 * MS), Some(11 * MS));
    }

    #[test]
    fn open_loop_frees_one_slot_per_reply_and_counts_early_replies_as_sent() {
        let mut class = open(3, 3, 0, 8);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(2 * MS, 2 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![3]);
        // The server answers the first request with an error before any write finished.
        rig.answer(&mut class, ConnId(0), 1, b"-ERR Protocol error\r\n", 3 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!(s.sent, 1, "the early reply's request was sent");
        assert_eq!(errors(class.interval(), "ERR"), 1);
        rig.flush(&mut class, 4 * MS);
        assert_eq!(class.interval().cmds[0].sent, 3, "the rest counted once");
        rig.answer(&mut class, ConnId(0), 1, b"+OK\r\n", 5 * MS);
        assert_eq!(class.free.len(), 2, "one token per reply");
    }

    #[test]
    fn intervals_move_into_totals() {
        let mut class = open(2, 1, 0, 8);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        let first = class.take_interval();
        assert_eq!(first.cmds[0].scheduled, 1);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        class.take_interval();
        assert_eq!(class.interval().cmds[0].scheduled, 0);
        assert_eq!(class.take_totals().cmds[0].scheduled, 2);
    }

    /// Issue #8: requests waiting in the backlog (every connection full or down) are
    /// given up once their intended time is more than the timeout ago: `timeout_unsent`,
    /// with their wait in latency; younger ones keep waiting.
    #[test]
    fn backlogged_requests_expire_as_timeout_unsent_with_their_wait_in_latency() {
        let mut class = open(10, 1, 0, 100);
        let mut rig = Rig::new(1, &mut class);
        rig.conns[0].close(0, |_, _| {});
        class.send_due(9 * MS, 9 * MS, u64::MAX, &mut rig.out());
        assert_eq!(class.unsent(), 10, "all wait: the only connection is down");
        // At 12 ms with a 5 ms timeout: those intended at 0..=6 ms are over it.
        class.expire_backlog(12 * MS, 5 * MS);
        assert_eq!(errors(class.interval(), "timeout_unsent"), 7);
        assert_eq!(class.unsent(), 3);
        let s = &class.interval().cmds[0];
        assert_eq!(s.latency.len(), 7);
        assert!(s.latency.min() >= 5 * MS, "{}", s.latency.min());
        assert!(s.latency.max() >= 12 * MS - 20_000);
        // Books: scheduled = errors + unsent.
        assert_eq!(s.scheduled, s.error_total() + class.unsent());
    }

    /// A request whose intended time is already past the timeout when the shard gets to
    /// it (a shard that was frozen, then thawed) is given up, not sent.
    #[test]
    fn a_request_scheduled_later_than_the_timeout_is_never_sent() {
        let mut class = open(10, 1, 0, 100);
        let mut rig = Rig::new(1, &mut class);
        // The shard thaws at 8.5 ms with a 3 ms timeout: 0..=5 ms are given up.
        class.send_due(8 * MS + MS / 2, 8 * MS + MS / 2, 3 * MS, &mut rig.out());
        assert_eq!(errors(class.interval(), "timeout_unsent"), 6);
        assert_eq!(rig.in_flight(), vec![1]);
        assert_eq!(class.unsent(), 2);
        assert_eq!(class.interval().cmds[0].scheduled, 9);
    }

    /// A rate the shard cannot schedule: each turn creates at most MAX_PER_TURN requests,
    /// and once the class's time is over the rest of its schedule is dropped, so the loop
    /// ends instead of generating forever.
    #[test]
    fn an_unschedulable_rate_is_bounded_per_turn_and_dropped_at_the_end() {
        // 1e9 req/s for 10 ms: 10 million requests.
        let profile = Profile::constant(1e9, 10 * MS).unwrap();
        let load = Load::Open(Schedule::new(profile, Arrival::Uniform, 0.0));
        let mut class = ClassState::new(workload(&[("GET", 1)]), load, 1, 0, 16, Cursor::default());
        class.start(&mut Rng::new(1));
        let mut rig = Rig::new(1, &mut class);
        class.send_due(5 * MS, 5 * MS, 1_000, &mut rig.out());
        assert_eq!(class.interval().cmds[0].scheduled, MAX_PER_TURN as u64);
        assert!(class.sending(5 * MS), "still behind, within its time");
        class.send_due(20 * MS, 20 * MS, 1_000, &mut rig.out());
        assert_eq!(class.interval().cmds[0].scheduled, 2 * MAX_PER_TURN as u64);
        assert!(!class.sending(20 * MS), "past its end: the rest is dropped");
        let s = &class.interval().cmds[0];
        let in_flight = rig.in_flight()[0] as u64;
        assert_eq!(s.scheduled, s.error_total() + class.unsent() + in_flight);
    }

    #[test]
    fn error_replies_count_under_bounded_kinds_with_the_first_message() {
        let mut class = open(40, 1, 0, 100);
        let mut rig = Rig::new(1, &mut class);
        let mut kinds = Kinds::default();
        for i in 0..40u64 {
            class.send_due(i * MS, i * MS, u64::MAX, &mut rig.out());
            rig.flush(&mut class, i * MS);
            let reply = format!("-E{i} code {i}\r\n");
            let c = &mut rig.conns[0];
            c.feed(reply.as_bytes());
            c.take_replies(|r| class.on_reply(ConnId(0), r, i * MS, &mut kinds), |_| {})
                .unwrap();
        }
        let s = &class.interval().cmds[0];
        assert_eq!(s.errors.len(), crest_model::stats::MAX_KINDS + 1);
        assert_eq!(errors(class.interval(), "other"), 40 - 32);
        assert_eq!(kinds.message("E3"), Some("E3 code 3"));
        assert_eq!(kinds.message("other"), Some("E32 code 32"));
    }
}

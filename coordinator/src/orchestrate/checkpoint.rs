//! Checkpoints (`--checkpoint-every N`): the one closed-loop class pauses after every N
//! requests. Each shard stops at its share of k × N (the split adds up exactly), lets its
//! replies come in and says so; each worker says so once every shard has; once every
//! worker still running has, the coordinator reads `INFO memory` (and sends `--probe`) on
//! a connection of its own, then releases the checkpoint to everyone. So the server holds
//! exactly k × N requests' work, nothing in flight, when it is read — the sorted-set
//! study's "memory every 1,000,000 members", not an estimate between two samples.
//!
//! A memcached target is read with `stats` instead, on a connection to every server of
//! the ring ([`Checkpoints::memcache`]): `bytes` (summed) is the row's memory, and
//! `curr_items` its probe line; `--probe` (a RESP command) is refused for memcached.

use super::member::Member;
use super::target;
use crate::server_stats::sampler::ask_within;
use crest_engine::probe::Control;
use crest_engine::probe::Dial;
use crest_proto::pb::{self, coordinator_message::Msg as Out};
use crest_report::CheckpointRow;
use crest_report::server::info::Info;
use crest_resp::Frame;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The connection's name in `CLIENT LIST`.
pub const NAME: &str = "crest-checkpoint";
/// How long one checkpoint's `INFO memory` and probe may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest reply read (INFO memory is ~2 KB; a probe's reply is cut to its first 200 bytes).
const MAX_REPLY: usize = 1 << 20;

/// The checkpoints of one run.
#[derive(Debug)]
pub struct Checkpoints {
    every: u64,
    total: u32,
    /// How to open the connection again when a checkpoint lost it (a probe that blocked
    /// past its deadline, a server that closed it); None in unit tests.
    dial: Option<Dial>,
    conn: Option<Control>,
    probe: Vec<String>,
    /// Per worker: checkpoints it has reached (one past the highest index).
    reached: Vec<u32>,
    next: u32,
    start: Instant,
    since: Instant,
    /// The checkpoints taken.
    pub rows: Vec<CheckpointRow>,
    /// Commands this sent the server, lower case → calls (kept out of the truth check).
    pub calls: BTreeMap<String, u64>,
    /// A memcached target: every server of the ring, read with `stats` (then `conn` is
    /// unused).
    ring: Option<Vec<crate::server_stats::memcache::Server>>,
}

impl Checkpoints {
    /// `total_requests` of the class, a checkpoint every `every`; `conn` is set up as the
    /// shards' connections are.
    pub fn new(
        dial: impl Into<Option<Dial>>,
        conn: Control,
        every: u64,
        total_requests: u64,
        probe: Vec<String>,
    ) -> Self {
        Self {
            dial: dial.into(),
            conn: Some(conn),
            probe,
            ..Self::empty(every, total_requests)
        }
    }

    /// Checkpoints of a memcached target: `stats` of every server of `ring` (connected or
    /// connected at the first checkpoint, again after a failed one).
    pub(crate) fn memcache(
        ring: Vec<crate::server_stats::memcache::Server>,
        every: u64,
        total_requests: u64,
    ) -> Self {
        Self {
            ring: Some(ring),
            ..Self::empty(every, total_requests)
        }
    }

    /// No connection yet, none taken: the checkpoints of `total_requests` every `every`.
    fn empty(every: u64, total_requests: u64) -> Self {
        let now = Instant::now();
        Self {
            every,
            total: u32::try_from(total_requests / every.max(1)).unwrap_or(u32::MAX),
            dial: None,
            conn: None,
            probe: Vec::new(),
            reached: Vec::new(),
            next: 0,
            start: now,
            since: now,
            rows: Vec::new(),
            calls: BTreeMap::new(),
            ring: None,
        }
    }

    /// The ring's memory (`bytes`, summed) and items, into `row`.
    async fn sample_memcache(
        ring: &mut [crate::server_stats::memcache::Server],
        row: &mut CheckpointRow,
    ) {
        use crate::server_stats::memcache;
        if let Err(e) = memcache::open(ring, REPLY_TIMEOUT).await {
            row.error = Some(format!("stats: {e}"));
            return;
        }
        match memcache::ask_all(ring, memcache::STATS, REPLY_TIMEOUT).await {
            Ok(replies) => {
                let all: Vec<_> = replies
                    .iter()
                    .map(|t| crest_report::server::memcache::Stats::parse(t))
                    .collect();
                match crest_report::server::memcache::Stats::sum(&all) {
                    Some(s) => {
                        row.used_memory = s.uint("bytes");
                        row.probe = s.uint("curr_items").map(|n| format!("curr_items {n}"));
                    }
                    None => row.error = Some("stats: no server answered".into()),
                }
            }
            Err(e) => row.error = Some(format!("stats: {}", e.words())),
        }
    }

    /// The measured phase starts at `start` (the first stretch's rate counts from there).
    pub fn started(&mut self, start: Instant, workers: usize) {
        self.start = start;
        self.since = start;
        self.reached = vec![0; workers];
    }

    /// Worker `w` says its shards all reached checkpoint `index`.
    pub fn reached(&mut self, w: usize, index: u32) {
        if let Some(r) = self.reached.get_mut(w) {
            *r = (*r).max(index.saturating_add(1));
        }
    }

    /// Takes and releases every checkpoint that each worker still running has reached.
    pub async fn advance(&mut self, members: &[Member], run_id: &str) {
        while self.next < self.total {
            let k = self.next;
            let running: Vec<usize> = (0..members.len())
                .filter(|&w| !members[w].done && !members[w].lost())
                .collect();
            if running.is_empty()
                || running
                    .iter()
                    .any(|&w| self.reached.get(w).is_none_or(|r| *r <= k))
            {
                return;
            }
            let reached = Instant::now();
            let row = self.sample(k, reached).await;
            self.rows.push(row);
            for m in members {
                m.link
                    .send(Out::Release(pb::ReleaseCheckpoint {
                        run_id: run_id.into(),
                        index: k,
                    }))
                    .await;
            }
            let released = Instant::now();
            if let Some(r) = self.rows.last_mut() {
                r.paused_ms = round(released.duration_since(reached).as_secs_f64() * 1e3, 1e3);
            }
            self.since = released;
            self.next += 1;
        }
    }

    async fn ask(&mut self, args: &[&[u8]]) -> Result<Frame, String> {
        if self.conn.is_none() {
            // An earlier checkpoint lost it: a new one, so one blocked probe or a server
            // that closed the connection costs one reading, not every later one.
            let Some(dial) = &self.dial else {
                return Err("no connection (an earlier checkpoint lost it)".into());
            };
            self.conn = Some(
                target::open(dial)
                    .await
                    .map_err(|e| format!("no connection: {e}"))?,
            );
        }
        let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
        *self.calls.entry(name).or_insert(0) += 1;
        ask_within(&mut self.conn, args, REPLY_TIMEOUT, MAX_REPLY).await
    }

    async fn sample(&mut self, k: u32, reached: Instant) -> CheckpointRow {
        let span = reached.duration_since(self.since).as_secs_f64();
        let mut row = CheckpointRow {
            index: k,
            requests: u64::from(k + 1) * self.every,
            at_s: round(
                reached.saturating_duration_since(self.start).as_secs_f64(),
                1e6,
            ),
            rate: if span > 0.0 {
                round(self.every as f64 / span, 100.0)
            } else {
                0.0
            },
            paused_ms: 0.0,
            used_memory: None,
            used_memory_rss: None,
            used_memory_dataset: None,
            mem_fragmentation_ratio: None,
            probe: None,
            error: None,
        };
        if let Some(ring) = self.ring.as_mut() {
            Self::sample_memcache(ring, &mut row).await;
            return row;
        }
        match self.ask(&[b"INFO", b"memory"]).await {
            Ok(Frame::Bulk(b) | Frame::Verbatim { data: b, .. }) => {
                let info = Info::parse(&String::from_utf8_lossy(&b));
                row.used_memory = info.uint("used_memory");
                row.used_memory_rss = info.uint("used_memory_rss");
                row.used_memory_dataset = info.uint("used_memory_dataset");
                row.mem_fragmentation_ratio = info.float("mem_fragmentation_ratio");
            }
            Ok(other) => row.error = Some(format!("INFO memory answered {}", text(&other))),
            Err(e) => row.error = Some(format!("INFO memory: {e}")),
        }
        if !self.probe.is_empty() {
            let words: Vec<Vec<u8>> = self.probe.iter().map(|w| w.as_bytes().to_vec()).collect();
            let args: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            row.probe = Some(match self.ask(&args).await {
                Ok(f) => text(&f),
                Err(e) => {
                    row.error.get_or_insert_with(|| format!("probe: {e}"));
                    String::new()
                }
            });
        }
        row
    }
}

/// A reply as one short line: an integer's digits, a string's text, an error's words.
fn text(f: &Frame) -> String {
    let s = match f {
        Frame::Integer(n) => n.to_string(),
        Frame::Bulk(b)
        | Frame::Simple(b)
        | Frame::Double(b)
        | Frame::BigNumber(b)
        | Frame::Verbatim { data: b, .. } => String::from_utf8_lossy(b).into_owned(),
        Frame::Error(e) | Frame::BlobError(e) => {
            format!("error: {}", crest_model::stats::clean_message(e))
        }
        Frame::Array(v) | Frame::Set(v) => format!("{} elements", v.len()),
        Frame::Map(m) => format!("{} entries", m.len()),
        other => format!("{other:?}"),
    };
    let s: String = s.chars().filter(|c| !c.is_control()).collect();
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...", &s[..cut])
    } else {
        s
    }
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_resp::{Act, bulk, commands, reply, serve};
    use crate::orchestrate::member::{Inbox, fake_fleet as fleet};

    use crest_model::target::Session;
    use std::net::SocketAddr;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| (*s).to_string()).collect()
    }

    /// `INFO memory` of a server holding a little.
    const MEMORY: &str = "# Memory\r\nused_memory:12345\r\nused_memory_human:12.06K\r\n\
        used_memory_rss:65536\r\nused_memory_dataset:4321\r\nmem_fragmentation_ratio:5.31\r\n";

    /// A server that answers `INFO` with [`MEMORY`] and the rest as `other` says.
    fn memory_then(other: fn(&[String]) -> Act) -> impl Fn(&[String]) -> Act + Send + Sync {
        move |args| {
            if args[0] == "INFO" {
                bulk(MEMORY)
            } else {
                other(args)
            }
        }
    }

    async fn checkpoints(addr: SocketAddr, every: u64, total: u64, probe: &[&str]) -> Checkpoints {
        let conn = crest_engine::probe::control(addr, "fake", &Session::default(), None, NAME)
            .await
            .unwrap();
        Checkpoints::new(None, conn, every, total, words(probe))
    }

    /// The checkpoints a worker was told to release, in order.
    fn released(rx: &mut Inbox) -> Vec<u32> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let Some(Out::Release(r)) = m.msg {
                assert_eq!(r.run_id, "r");
                out.push(r.index);
            }
        }
        out
    }

    fn calls(c: &Checkpoints) -> Vec<(&str, u64)> {
        c.calls.iter().map(|(k, v)| (k.as_str(), *v)).collect()
    }

    /// A checkpoint is read only once every worker still running has reached it, once,
    /// and released to every worker; done and lost workers are not waited for, and with
    /// none running nothing is read.
    #[tokio::test]
    async fn a_checkpoint_is_read_once_every_running_worker_reached_it() {
        let (addr, mut seen) = serve(memory_then(|_| Act::Silent)).await;
        let mut cp = checkpoints(addr, 100, 350, &[]).await;
        let (mut members, mut inboxes) = fleet(3);
        cp.started(Instant::now(), 3);
        cp.reached(0, 0);
        cp.reached(1, 0);
        cp.reached(7, 0); // no such worker: ignored
        cp.advance(&members, "r").await;
        assert!(cp.rows.is_empty(), "read before worker 2 got there");
        assert!(cp.calls.is_empty());
        assert!(inboxes.iter_mut().all(|rx| released(rx).is_empty()));

        cp.reached(2, 0);
        cp.advance(&members, "r").await;
        cp.advance(&members, "r").await;
        assert_eq!(cp.rows.len(), 1, "{:?}", cp.rows);
        let row = &cp.rows[0];
        assert_eq!((row.index, row.requests), (0, 100));
        assert_eq!(row.used_memory, Some(12345));
        assert_eq!((row.probe.as_deref(), row.error.as_deref()), (None, None));
        for rx in &mut inboxes {
            assert_eq!(released(rx), vec![0]);
        }
        assert_eq!(commands(&mut seen), vec![words(&["INFO", "memory"])]);

        // Worker 2 is done and worker 1 lost: worker 0 alone decides.
        members[2].done = true;
        members[1].lost = Some("gone".into());
        cp.reached(0, 1);
        cp.advance(&members, "r").await;
        assert_eq!(cp.rows.len(), 2);
        assert_eq!((cp.rows[1].index, cp.rows[1].requests), (1, 200));
        for rx in &mut inboxes {
            assert_eq!(released(rx), vec![1]);
        }

        // Nobody running: checkpoint 2 (of 3) is never read.
        members[0].done = true;
        cp.reached(0, 2);
        cp.advance(&members, "r").await;
        assert_eq!(cp.rows.len(), 2);
        assert_eq!(calls(&cp), vec![("info", 2)]);
        assert_eq!(commands(&mut seen).len(), 1);
    }

    /// Workers ahead by several checkpoints let them all go in order in one call, but
    /// never past the class's total (whole multiples of `every`: 25 / 10 is 2).
    #[tokio::test]
    async fn checkpoints_reached_together_go_in_order_up_to_the_total() {
        let (addr, mut seen) = serve(memory_then(|_| Act::Silent)).await;
        let mut cp = checkpoints(addr, 10, 25, &[]).await;
        let (members, mut inboxes) = fleet(2);
        cp.started(Instant::now(), 2);
        cp.reached(0, 7);
        cp.reached(1, 4);
        cp.reached(1, 1); // an older message: the highest stands
        cp.advance(&members, "r").await;
        let taken: Vec<(u32, u64)> = cp.rows.iter().map(|r| (r.index, r.requests)).collect();
        assert_eq!(taken, vec![(0, 10), (1, 20)]);
        for rx in &mut inboxes {
            assert_eq!(released(rx), vec![0, 1]);
        }
        assert_eq!(calls(&cp), vec![("info", 2)]);
        assert_eq!(commands(&mut seen).len(), 2);
    }

    /// A row carries the `INFO memory` gauges, the probe's reply, when it was reached
    /// (seconds since the measured start) and the rate from the start to there.
    #[tokio::test]
    async fn a_row_carries_the_memory_gauges_and_the_probe_reply() {
        let (addr, mut seen) = serve(memory_then(|_| reply(Frame::Integer(42)))).await;
        let mut cp = checkpoints(addr, 1000, 1000, &["ZCARD", "z"]).await;
        let (members, _inboxes) = fleet(1);
        let start = Instant::now().checked_sub(Duration::from_secs(10)).unwrap();
        cp.started(start, 1);
        cp.reached(0, 0);
        cp.advance(&members, "r").await;
        assert_eq!(cp.rows.len(), 1);
        let row = &cp.rows[0];
        assert_eq!(row.used_memory, Some(12345));
        assert_eq!(row.used_memory_rss, Some(65536));
        assert_eq!(row.used_memory_dataset, Some(4321));
        assert_eq!(row.mem_fragmentation_ratio, Some(5.31));
        assert_eq!(row.probe.as_deref(), Some("42"));
        assert_eq!(row.error, None);
        assert!(row.at_s >= 10.0, "{}", row.at_s);
        // 1000 requests over at least 10 s.
        assert!(row.rate > 0.0 && row.rate <= 100.0, "{}", row.rate);
        assert!(row.paused_ms >= 0.0);
        assert_eq!(calls(&cp), vec![("info", 1), ("zcard", 1)]);
        assert_eq!(
            commands(&mut seen),
            vec![words(&["INFO", "memory"]), words(&["ZCARD", "z"])]
        );
    }

    /// An error reply to `INFO memory` is the row's error, in words, with no gauges; the
    /// connection stays for the probe, whose long reply is cut to its first 200 bytes.
    #[tokio::test]
    async fn an_info_error_is_reported_and_a_long_probe_reply_is_cut() {
        let (addr, _seen) = serve(|args: &[String]| {
            if args[0] == "INFO" {
                reply(Frame::Error(b"ERR unknown section".to_vec()))
            } else {
                bulk(&"x".repeat(500))
            }
        })
        .await;
        let mut cp = checkpoints(addr, 10, 10, &["GET", "k"]).await;
        let (members, _inboxes) = fleet(1);
        cp.started(Instant::now(), 1);
        cp.reached(0, 0);
        cp.advance(&members, "r").await;
        let row = &cp.rows[0];
        assert_eq!(
            row.error.as_deref(),
            Some("INFO memory answered error: ERR unknown section")
        );
        assert_eq!((row.used_memory, row.mem_fragmentation_ratio), (None, None));
        assert_eq!(row.probe, Some(format!("{}...", "x".repeat(200))));
    }

    /// A probe answered with an error gets the error's words as its reply; the row is
    /// not failed for it.
    #[tokio::test]
    async fn a_probe_error_reply_is_its_text_not_a_failed_row() {
        let (addr, _seen) = serve(memory_then(|_| {
            reply(Frame::Error(
                b"WRONGTYPE Operation against a key holding the wrong kind of value".to_vec(),
            ))
        }))
        .await;
        let mut cp = checkpoints(addr, 10, 10, &["ZCARD", "s"]).await;
        let (members, _inboxes) = fleet(1);
        cp.started(Instant::now(), 1);
        cp.reached(0, 0);
        cp.advance(&members, "r").await;
        let row = &cp.rows[0];
        assert_eq!(
            row.probe.as_deref(),
            Some("error: WRONGTYPE Operation against a key holding the wrong kind of value")
        );
        assert_eq!(row.error, None);
        assert_eq!(row.used_memory, Some(12345));
    }

    /// A server closing the connection on the probe fails the row with `probe: …` (the
    /// gauges read before it kept); the next checkpoint says the connection is gone
    /// without asking, and is still released.
    #[tokio::test]
    async fn a_closed_connection_fails_this_row_and_the_next_says_so() {
        let (addr, mut seen) = serve(memory_then(|_| Act::Close)).await;
        let mut cp = checkpoints(addr, 10, 20, &["DBSIZE"]).await;
        let (members, mut inboxes) = fleet(1);
        cp.started(Instant::now(), 1);
        cp.reached(0, 1);
        cp.advance(&members, "r").await;
        assert_eq!(cp.rows.len(), 2);
        let first = &cp.rows[0];
        assert_eq!(
            first.error.as_deref(),
            Some("probe: the server closed the connection or sent no RESP")
        );
        assert_eq!(first.probe.as_deref(), Some(""));
        assert_eq!(first.used_memory, Some(12345));
        let second = &cp.rows[1];
        assert_eq!(
            second.error.as_deref(),
            Some("INFO memory: no connection (an earlier checkpoint lost it)")
        );
        assert_eq!(
            (second.used_memory, second.probe.as_deref()),
            (None, Some(""))
        );
        assert_eq!(released(&mut inboxes[0]), vec![0, 1]);
        assert_eq!(calls(&cp), vec![("dbsize", 1), ("info", 1)]);
        assert_eq!(commands(&mut seen).len(), 2);
    }

    /// A server that never answers fails the row at the reply timeout instead of holding
    /// the load paused, and the checkpoint is still released (time paused: no real wait).
    #[tokio::test]
    async fn a_silent_server_fails_the_row_at_the_timeout() {
        let (addr, _seen) = serve(|_| Act::Silent).await;
        let mut cp = checkpoints(addr, 10, 10, &["DBSIZE"]).await;
        let (members, mut inboxes) = fleet(1);
        cp.started(Instant::now(), 1);
        cp.reached(0, 0);
        tokio::time::pause();
        let t0 = tokio::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(60), cp.advance(&members, "r"))
            .await
            .expect("the checkpoint hung on a silent server");
        assert!(t0.elapsed() >= REPLY_TIMEOUT);
        let row = &cp.rows[0];
        assert_eq!(
            row.error.as_deref(),
            Some("INFO memory: no reply within 5s")
        );
        assert_eq!((row.used_memory, row.probe.as_deref()), (None, Some("")));
        assert_eq!(released(&mut inboxes[0]), vec![0]);
        assert_eq!(calls(&cp), vec![("info", 1)]);
        assert!(cp.conn.is_none());
    }

    /// `text` words each kind of reply on one line, drops control characters, and cuts a
    /// long one after 200 bytes on a character boundary.
    #[test]
    fn text_is_one_short_line_per_reply() {
        assert_eq!(text(&Frame::Integer(-7)), "-7");
        assert_eq!(text(&Frame::Simple(b"OK".to_vec())), "OK");
        assert_eq!(text(&Frame::Bulk(b"a\r\nb\tc".to_vec())), "abc");
        assert_eq!(text(&Frame::Double(b"1.5".to_vec())), "1.5");
        assert_eq!(
            text(&Frame::Verbatim {
                format: *b"txt",
                data: b"hi".to_vec()
            }),
            "hi"
        );
        assert_eq!(
            text(&Frame::Error(b"ERR no\x01pe".to_vec())),
            "error: ERR no?pe"
        );
        assert_eq!(
            text(&Frame::BlobError(b"SYNTAX bad".to_vec())),
            "error: SYNTAX bad"
        );
        assert_eq!(
            text(&Frame::Array(vec![Frame::Integer(1), Frame::Null])),
            "2 elements"
        );
        assert_eq!(
            text(&Frame::Map(vec![(Frame::Integer(1), Frame::Integer(2))])),
            "1 entries"
        );
        assert_eq!(text(&Frame::NullBulk), "NullBulk");
        let exact = "y".repeat(200);
        assert_eq!(text(&Frame::Bulk(exact.clone().into_bytes())), exact);
        // 3-byte characters: 200 is not a boundary, 198 is.
        let euros = "€".repeat(100);
        assert_eq!(
            text(&Frame::Bulk(euros.into_bytes())),
            format!("{}...", "€".repeat(66))
        );
    }

    /// `round` rounds to the nearest multiple of 1 / scale, halves away from zero.
    #[test]
    fn round_keeps_scale_digits() {
        assert_eq!(round(1.23456, 100.0), 1.23);
        assert_eq!(round(1234.5678, 1e3), 1234.568);
        assert_eq!(round(0.0004, 1e3), 0.0);
        assert_eq!(round(2.5, 1.0), 3.0);
        assert_eq!(round(-2.5, 1.0), -3.0);
        assert_eq!(round(7.0, 1e6), 7.0);
    }
}

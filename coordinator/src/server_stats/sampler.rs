//! The sampler's connection and clock: [`Sampler::connect`] (a Redis-protocol target) or
//! [`Sampler::connect_memcache`] (a memcached server or ring), [`Sampler::sample`] (one
//! `INFO`, or one `stats` of every server), [`Sampler::clock`] (a task sampling at every
//! boundary) and [`Running::finish`] (stop, one last sample, the [`Series`]).

use super::memcache::{self, Failure};
use crest_engine::probe::{Control, Dial};
use crest_engine::target_tls::Client;
use crest_model::target::Session;
use crest_report::server::info::{Info, Snap};
use crest_report::server::series::{Mark, Sample, Series};
use crest_resp::Frame;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The sampler's name in `CLIENT LIST`.
pub const NAME: &str = "crest-sampler";
/// How long connecting (TLS and setup included) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one `INFO` may take before the sample is given up (and the connection with
/// it: a late reply would answer the next question).
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest `INFO` reply read (a server with thousands of command kinds stays far below).
const MAX_INFO: usize = 4 << 20;
/// The sections, in one call (redis 7.0+, valkey).
const SECTIONS: &[&[u8]] = &[
    b"INFO",
    b"server",
    b"clients",
    b"memory",
    b"stats",
    b"cpu",
    b"commandstats",
    b"errorstats",
    b"keyspace",
];
/// The final sample adds this section: the server's latency percentiles (read once: every
/// boundary sample would cost the server their formatting and the series their memory).
const FINAL_SECTION: &[u8] = b"latencystats";
/// For servers that take one section argument only (Redis < 7).
const EVERYTHING: &[&[u8]] = &[b"INFO", b"everything"];

/// The server as its latest two samples show it, for the live page and `/metrics`
/// ([`Sampler::now`]): published after every sample on the clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Now {
    /// When the latest sample's reply came, seconds since the measured start.
    pub at_s: f64,
    /// Commands the server ran per second between the two samples, the sampler's own
    /// `INFO`s left out.
    pub ops_per_s: f64,
    /// `used_memory` (memcached: `bytes`), bytes.
    pub used_memory: Option<u64>,
    /// The server's CPU time (user + system) per command between the samples, µs.
    pub cpu_us_per_op: Option<f64>,
    /// The server's CPU time per second of wall time between the samples (1 = one core).
    pub cpu_cores: Option<f64>,
    /// Keys (memcached: items) at the latest sample.
    pub keys: u64,
    /// `connected_clients` (memcached: `curr_connections`).
    pub clients: Option<u64>,
}

/// The sampler between samples.
#[derive(Debug)]
pub struct Sampler {
    link: Link,
    timeout: Duration,
    series: Series,
    /// When each sample's reply came, beside `series.samples`.
    at: Vec<Instant>,
    /// `INFO`s written so far.
    seq: u64,
    missed: u32,
}

/// What the sampler asks, and on which connections.
#[derive(Debug)]
enum Link {
    /// A Redis-protocol target: `INFO` on one control connection.
    Resp {
        /// How its connection is opened, and opened again after a failed sample (boxed:
        /// the largest part by far).
        dial: Box<Dial>,
        conn: Option<Control>,
        ask: &'static [&'static [u8]],
    },
    /// memcached: `stats` on one connection to every server of the ring, summed.
    Memcache(Vec<memcache::Server>),
}

/// One request on `conn` and its reply within `timeout` (at most `max` bytes); a timeout,
/// a broken connection or a reply that is no RESP drops the connection (a late reply
/// would answer the next question).
///
/// # Errors
/// What went wrong, in words.
pub(crate) async fn ask_within(
    conn: &mut Option<Control>,
    args: &[&[u8]],
    timeout: Duration,
    max: usize,
) -> Result<Frame, String> {
    let Some(c) = conn.as_mut() else {
        return Err("not connected".into());
    };
    let res = match tokio::time::timeout(timeout, c.ask(args, max)).await {
        Ok(Ok(Some(f))) => return Ok(f),
        Ok(Ok(None)) => Err("the server closed the connection or sent no RESP".to_string()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no reply within {timeout:?}")),
    };
    *conn = None;
    res
}

/// `INFO`'s text out of its reply: a bulk string (RESP2) or a verbatim one (RESP3).
fn text(f: Frame) -> Result<String, String> {
    match f {
        Frame::Bulk(b) | Frame::Verbatim { data: b, .. } => {
            Ok(String::from_utf8_lossy(&b).into_owned())
        }
        Frame::Error(e) | Frame::BlobError(e) => Err(crest_model::stats::clean_message(&e)),
        _ => Err("INFO answered something other than text".into()),
    }
}

impl Sampler {
    /// Connects to `addr` (`target` as the user named it) as every shard connection does,
    /// reads `io-threads`, and checks that the server answers `INFO`.
    ///
    /// # Errors
    /// Why the target cannot be sampled, in one line.
    pub async fn connect(
        addr: SocketAddr,
        target: &str,
        session: &Session,
        tls: Option<&crest_model::target::Tls>,
        interval: Duration,
    ) -> Result<Self, String> {
        let tls = tls.map(Client::new).transpose()?;
        let dial = Dial::new(addr, target, session, tls, NAME);
        let conn = Some(dial.open(CONNECT_TIMEOUT).await?);
        let mut s = Sampler::new(
            Link::Resp {
                dial: Box::new(dial),
                conn,
                ask: SECTIONS,
            },
            interval,
        );
        if let Err(first) = s.info().await {
            // A server that is silent or gone: no sampling. One that refuses the
            // sections (an older server takes one): try `INFO everything`.
            let Link::Resp { conn, ask, .. } = &mut s.link else {
                return Err(first);
            };
            if conn.is_none() {
                return Err(format!("the target does not answer INFO ({first})"));
            }
            *ask = EVERYTHING;
            s.info()
                .await
                .map_err(|_| format!("the target does not answer INFO ({first})"))?;
        }
        s.series.io_threads = match s.request(&[b"CONFIG", b"GET", b"io-threads"]).await {
            Ok(Frame::Array(v)) => v.get(1).and_then(|f| match f {
                Frame::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            }),
            Ok(Frame::Map(m)) => m.first().and_then(|(_, f)| match f {
                Frame::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            }),
            _ => None,
        };
        // Only the calls from the baseline on are the run's.
        s.series.unanswered = 0;
        Ok(s)
    }

    /// Connects to every server of a memcached target (`addrs`: its ring, in order;
    /// `target` as the user named it), over `tls` when given, checks that each answers
    /// `stats` with memcached's counters, and reads `stats settings` once (the worker
    /// threads, as the report's `io_threads` when every server has the same number).
    ///
    /// # Errors
    /// Why the target cannot be sampled, in one line.
    pub async fn connect_memcache(
        addrs: &[SocketAddr],
        target: &str,
        tls: Option<&crest_model::target::Tls>,
        interval: Duration,
    ) -> Result<Self, String> {
        if addrs.is_empty() {
            return Err(format!("{target}: no server to sample"));
        }
        let tls = tls.map(Client::new).transpose()?;
        let mut ring: Vec<memcache::Server> = addrs
            .iter()
            .map(|a| memcache::Server::new(*a, tls.clone()))
            .collect();
        memcache::open(&mut ring, CONNECT_TIMEOUT).await?;
        let mut s = Sampler::new(Link::Memcache(ring), interval);
        s.info()
            .await
            .map_err(|e| format!("the target does not answer stats ({e})"))?;
        if let Link::Memcache(ring) = &mut s.link {
            // Connections dropped by a failed settings request open again at the next
            // sample; the settings are then unknown, nothing else.
            if let Ok(replies) = memcache::ask_all(ring, memcache::SETTINGS, s.timeout).await {
                let threads: Vec<Option<u64>> = replies
                    .iter()
                    .map(|t| crest_report::server::memcache::settings_threads(t))
                    .collect();
                s.series.io_threads = threads
                    .first()
                    .copied()
                    .flatten()
                    .filter(|n| threads.iter().all(|t| *t == Some(*n)));
            }
        }
        s.series.unanswered = 0;
        Ok(s)
    }

    /// A sampler on `link` before its first sample; its reply timeout follows `interval`.
    fn new(link: Link, interval: Duration) -> Self {
        Sampler {
            link,
            timeout: REPLY_TIMEOUT.min(interval.max(Duration::from_millis(100))),
            series: Series::default(),
            at: Vec::new(),
            seq: 0,
            missed: 0,
        }
    }

    /// One request and its reply on a Redis-protocol target; a timeout or a broken
    /// connection drops the connection.
    async fn request(&mut self, args: &[&[u8]]) -> Result<Frame, String> {
        match &mut self.link {
            Link::Resp { conn, .. } => ask_within(conn, args, self.timeout, MAX_INFO).await,
            Link::Memcache(_) => Err("not a Redis-protocol target".into()),
        }
    }

    /// One sample's reply, counted in `seq` (and in `unanswered` when no reply came): an
    /// `INFO` (`last` asks for the latency percentiles too, and keeps them), or one
    /// `stats` of every memcached server, summed.
    async fn info_at(&mut self, last: bool) -> Result<Snap, String> {
        let (dial, conn, ask) = match &mut self.link {
            Link::Resp { dial, conn, ask } => (dial, conn, *ask),
            Link::Memcache(ring) => {
                memcache::open(ring, CONNECT_TIMEOUT).await?;
                self.seq += 1;
                return match memcache::sample(ring, self.timeout).await {
                    Ok(snap) => Ok(snap),
                    Err(Failure::Unanswered(e)) => {
                        self.series.unanswered += 1;
                        Err(e)
                    }
                    Err(e) => Err(e.words()),
                };
            }
        };
        if conn.is_none() {
            *conn = Some(dial.open(CONNECT_TIMEOUT).await?);
        }
        self.seq += 1;
        let mut args = ask.to_vec();
        if last && ask == SECTIONS {
            args.push(FINAL_SECTION);
        }
        match ask_within(conn, &args, self.timeout, MAX_INFO).await {
            Ok(f) => text(f).and_then(|t| {
                // A server that understood the question lists its commands under this
                // header, even when it has run none yet.
                if !t
                    .lines()
                    .any(|l| l.trim().eq_ignore_ascii_case("# commandstats"))
                {
                    return Err("its INFO reply has no commandstats section".into());
                }
                let mut info = Info::parse(&t);
                if !last {
                    info.latency.clear();
                }
                Ok(Snap::from(info))
            }),
            Err(e) => {
                self.series.unanswered += 1;
                Err(e)
            }
        }
    }

    /// One sample's reply (`INFO` of the usual sections).
    async fn info(&mut self) -> Result<Snap, String> {
        self.info_at(false).await
    }

    /// Takes one sample marked `mark`; `due` is when it was due (a boundary). A failed
    /// sample leaves a note and no sample.
    pub async fn sample(&mut self, mark: Mark, due: Option<Instant>) {
        let seq = self.seq;
        match self.info_at(mark == Mark::Final).await {
            Ok(info) => {
                let now = Instant::now();
                let late_us = due.map_or(0.0, |d| {
                    now.saturating_duration_since(d).as_secs_f64() * 1e6
                });
                self.at.push(now);
                self.series.samples.push(Sample {
                    mark,
                    at_s: 0.0,
                    late_us: (late_us * 10.0).round() / 10.0,
                    seq,
                    info,
                });
            }
            Err(e) => {
                if self.series.notes.len() < 20 {
                    self.series
                        .notes
                        .push(format!("sample {mark:?} failed: {e}"));
                }
            }
        }
    }

    /// The server as the latest two samples show it (None before there are two, or when
    /// they span no time); `start` is the measured start.
    pub fn now(&self, start: Instant) -> Option<Now> {
        let n = self.series.samples.len();
        let (a, b) = (
            self.series.samples.get(n.checked_sub(2)?)?,
            self.series.samples.get(n - 1)?,
        );
        let (ta, tb) = (*self.at.get(n - 2)?, *self.at.get(n - 1)?);
        let dt = tb.saturating_duration_since(ta).as_secs_f64();
        if dt <= 0.0 {
            return None;
        }
        let calls = |s: &Snap| s.commands.values().map(|c| c.calls).sum::<u64>();
        // The sampler's own INFOs count among a Redis-protocol server's commands (memcached
        // counts no `stats` among its command families).
        let own = match self.link {
            Link::Resp { .. } => b.seq.saturating_sub(a.seq),
            Link::Memcache(_) => 0,
        };
        let ops = calls(&b.info)
            .saturating_sub(calls(&a.info))
            .saturating_sub(own);
        let cpu = b
            .info
            .cpu_us()
            .zip(a.info.cpu_us())
            .map(|(y, x)| y.saturating_sub(x));
        Some(Now {
            at_s: tb.saturating_duration_since(start).as_secs_f64(),
            ops_per_s: ops as f64 / dt,
            used_memory: b.info.uint("used_memory"),
            cpu_us_per_op: cpu.filter(|_| ops > 0).map(|c| c as f64 / ops as f64),
            cpu_cores: cpu.map(|c| c as f64 / 1e6 / dt),
            keys: b.info.keys(),
            clients: b.info.uint("connected_clients"),
        })
    }

    /// Samples at `start + k·interval` for k = `first`, `first + 1`, … in a task of its
    /// own until [`Running::finish`]; after each sample, the server as it stands
    /// ([`Sampler::now`]) goes to `live` when given.
    pub fn clock(
        self,
        start: Instant,
        interval: Duration,
        first: u32,
        live: Option<tokio::sync::watch::Sender<Option<Now>>>,
    ) -> Running {
        let (stop, mut stopped) = oneshot::channel();
        let handle = tokio::spawn(async move {
            let mut s = self;
            let mut k = first;
            loop {
                let due = start + interval.saturating_mul(k);
                tokio::select! {
                    _ = &mut stopped => break,
                    () = tokio::time::sleep_until(due.into()) => {}
                }
                s.sample(Mark::Boundary(k), Some(due)).await;
                if let Some(tx) = &live
                    && let Some(now) = s.now(start)
                {
                    tx.send_replace(Some(now));
                }
                k += 1;
                let now = Instant::now();
                while start + interval.saturating_mul(k) <= now {
                    s.missed += 1;
                    k += 1;
                }
            }
            s
        });
        Running {
            stop: Some(stop),
            handle: Some(handle),
            start,
        }
    }
}

/// A sampler on the clock. Dropped without [`Running::finish`] (a run that failed), its
/// task is aborted: no sampling outlives the run.
#[derive(Debug)]
pub struct Running {
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<Sampler>>,
    start: Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

impl Running {
    /// Stops the clock, takes the final sample, and returns every sample with its time
    /// since the measured start.
    pub async fn finish(mut self) -> Series {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(handle) = self.handle.take() else {
            return Series::default();
        };
        let mut s = match handle.await {
            Ok(s) => s,
            Err(e) => {
                return Series {
                    notes: vec![format!("the sampler task failed: {e}")],
                    ..Series::default()
                };
            }
        };
        s.sample(Mark::Final, None).await;
        if s.missed > 0 {
            s.series.notes.push(format!(
                "{} boundary sample(s) skipped: the previous reply came after them",
                s.missed
            ));
        }
        let start = self.start;
        for (sample, at) in s.series.samples.iter_mut().zip(&s.at) {
            let secs = if *at >= start {
                at.duration_since(start).as_secs_f64()
            } else {
                -start.duration_since(*at).as_secs_f64()
            };
            sample.at_s = (secs * 1e6).round() / 1e6;
        }
        s.series
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_resp::{Act, Seen, bulk, commands, error, next, reply, serve};

    use std::sync::atomic::{AtomicUsize, Ordering};

    fn words(w: &[&[u8]]) -> Vec<String> {
        w.iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect()
    }

    /// An `INFO` reply: a few fields of each section, latency percentiles included.
    const INFO: &str = "# Server\r\nredis_version:7.2.4\r\n\r\n\
        # Clients\r\nconnected_clients:3\r\n\r\n\
        # Memory\r\nused_memory:12345\r\nused_memory_rss:65536\r\nmem_fragmentation_ratio:5.31\r\n\r\n\
        # CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n\r\n\
        # Commandstats\r\ncmdstat_get:calls=10,usec=20,usec_per_call=2.00,rejected_calls=1,failed_calls=2\r\n\r\n\
        # Latencystats\r\nlatency_percentiles_usec_get:p50=1.003,p99=3.007,p99.9=5.023\r\n\r\n\
        # Keyspace\r\ndb0:keys=5,expires=1,avg_ttl=0\r\n";

    /// A Redis 7: `INFO` any sections, `CONFIG GET io-threads` 4.
    fn redis(args: &[String]) -> Act {
        match args[0].as_str() {
            "INFO" => bulk(INFO),
            "CONFIG" => reply(Frame::Array(vec![
                Frame::Bulk(b"io-threads".to_vec()),
                Frame::Bulk(b"4".to_vec()),
            ])),
            _ => error("ERR unknown command"),
        }
    }

    /// Like [`redis`], but `INFO` number `i` (from 0, over all connections) gets `act()`
    /// when `which(i)`.
    fn redis_but(which: fn(usize) -> bool, act: fn() -> Act) -> impl Fn(&[String]) -> Act {
        let infos = AtomicUsize::new(0);
        move |args| {
            if args[0] == "INFO" && which(infos.fetch_add(1, Ordering::SeqCst)) {
                act()
            } else {
                redis(args)
            }
        }
    }

    /// The interval of most tests, and so the reply timeout (1 s, the most): generous,
    /// as the fake server answers at once, and only a silent one is waited out.
    const INTERVAL: Duration = Duration::from_secs(1);

    async fn connect(addr: SocketAddr, interval: Duration) -> Result<Sampler, String> {
        Sampler::connect(addr, "fake", &Session::default(), None, interval).await
    }

    impl Sampler {
        /// What a Redis-protocol sampler asks.
        fn ask(&self) -> &'static [&'static [u8]] {
            match &self.link {
                Link::Resp { ask, .. } => ask,
                Link::Memcache(_) => &[],
            }
        }

        /// Every connection is open.
        fn connected(&self) -> bool {
            match &self.link {
                Link::Resp { conn, .. } => conn.is_some(),
                Link::Memcache(ring) => ring.iter().all(memcache::Server::connected),
            }
        }
    }

    /// `connect` asks for the sections in one `INFO` and reads `io-threads`; a sample
    /// keeps the fields the series reads, the latency percentiles only in the final one.
    #[tokio::test]
    async fn connect_then_a_sample_reads_the_fields() {
        let (addr, mut seen) = serve(redis).await;
        let mut s = connect(addr, INTERVAL).await.unwrap();
        assert_eq!(s.series.io_threads, Some(4));
        assert_eq!(s.ask(), SECTIONS);
        assert_eq!(s.timeout, INTERVAL);
        assert_eq!(
            commands(&mut seen),
            vec![words(SECTIONS), words(&[b"CONFIG", b"GET", b"io-threads"])]
        );
        s.sample(Mark::BeforeLoad, None).await;
        s.sample(Mark::Final, None).await;
        assert_eq!(s.series.notes, Vec::<String>::new());
        assert_eq!(s.series.unanswered, 0);
        let [before, last] = &s.series.samples[..] else {
            panic!("{:?}", s.series.samples)
        };
        assert_eq!(
            (before.mark, before.seq, before.late_us),
            (Mark::BeforeLoad, 1, 0.0)
        );
        assert_eq!((last.mark, last.seq), (Mark::Final, 2));
        let i = &before.info;
        assert_eq!(i.uint("used_memory"), Some(12345));
        assert_eq!(i.uint("used_memory_rss"), Some(65536));
        assert_eq!(i.uint("connected_clients"), Some(3));
        assert_eq!(i.float("mem_fragmentation_ratio"), Some(5.31));
        assert_eq!(i.text("redis_version"), Some("7.2.4"));
        assert_eq!(i.cpu_us(), Some(1_750_000));
        assert_eq!(i.commands["get"].calls, 10);
        assert_eq!(i.commands["get"].failed_calls, 2);
        assert_eq!(i.keys(), 5);
        assert!(i.latency.is_empty(), "{:?}", i.latency);
        assert_eq!(last.info.latency["get"]["p99"], 3.007);
        let mut last_ask = words(SECTIONS);
        last_ask.push("latencystats".into());
        assert_eq!(commands(&mut seen), vec![words(SECTIONS), last_ask]);
    }

    /// RESP3 replies are read too: a verbatim `INFO` and a map for `CONFIG GET`.
    #[tokio::test]
    async fn connect_takes_a_verbatim_info_and_a_config_map() {
        let (addr, _seen) = serve(|args: &[String]| match args[0].as_str() {
            "INFO" => reply(Frame::Verbatim {
                format: *b"txt",
                data: INFO.as_bytes().to_vec(),
            }),
            _ => reply(Frame::Map(vec![(
                Frame::Bulk(b"io-threads".to_vec()),
                Frame::Bulk(b"8".to_vec()),
            )])),
        })
        .await;
        let mut s = connect(addr, INTERVAL).await.unwrap();
        assert_eq!(s.series.io_threads, Some(8));
        s.sample(Mark::BeforeLoad, None).await;
        assert_eq!(s.series.samples.len(), 1);
        assert_eq!(s.series.samples[0].info.uint("used_memory"), Some(12345));
    }

    /// A server that refuses several sections in one `INFO` (Redis < 7) is asked for
    /// `INFO everything` from then on, the final sample too; no `io-threads` is no value.
    #[tokio::test]
    async fn a_server_refusing_the_sections_is_asked_for_everything() {
        let (addr, mut seen) = serve(|args: &[String]| match (args[0].as_str(), args.len()) {
            ("INFO", 2) if args[1] == "everything" => bulk(INFO),
            ("INFO", _) => error("ERR wrong number of arguments for 'info' command"),
            _ => error("ERR unknown subcommand"),
        })
        .await;
        let mut s = connect(addr, INTERVAL).await.unwrap();
        assert_eq!(s.ask(), EVERYTHING);
        assert_eq!(s.series.io_threads, None);
        assert_eq!(s.series.unanswered, 0);
        s.sample(Mark::Final, None).await;
        assert_eq!(s.series.samples.len(), 1);
        assert_eq!(s.series.samples[0].seq, 2);
        let asked = commands(&mut seen);
        assert_eq!(asked[0], words(SECTIONS));
        assert_eq!(asked[1], words(EVERYTHING));
        assert_eq!(asked.last(), Some(&words(EVERYTHING)));
        assert_eq!(asked.len(), 4, "{asked:?}");
    }

    /// A target that refuses `INFO` either way, or whose `INFO` has no commandstats
    /// section, cannot be sampled: `connect` says why in the server's words.
    #[tokio::test]
    async fn connect_fails_when_info_is_refused_or_without_commandstats() {
        let (addr, _seen) = serve(|_| error("ERR unknown command 'INFO'")).await;
        assert_eq!(
            connect(addr, INTERVAL).await.unwrap_err(),
            "the target does not answer INFO (ERR unknown command 'INFO')"
        );
        let (addr, _seen) = serve(|_| bulk("# Server\r\nredis_version:7.2.4\r\n")).await;
        assert_eq!(
            connect(addr, INTERVAL).await.unwrap_err(),
            "the target does not answer INFO (its INFO reply has no commandstats section)"
        );
    }

    /// A silent server fails `connect` at the reply timeout (the interval, 100 ms here)
    /// and one that closes the connection fails it at once; neither is asked again.
    #[tokio::test]
    async fn connect_fails_on_a_silent_or_closing_server() {
        let (addr, mut seen) = serve(|_| Act::Silent).await;
        assert_eq!(
            connect(addr, Duration::from_millis(100)).await.unwrap_err(),
            "the target does not answer INFO (no reply within 100ms)"
        );
        assert_eq!(next(&mut seen).await, Seen::Command(0, words(SECTIONS)));
        assert_eq!(next(&mut seen).await, Seen::Closed(0));
        let (addr, mut seen) = serve(|_| Act::Close).await;
        assert_eq!(
            connect(addr, INTERVAL).await.unwrap_err(),
            "the target does not answer INFO (the server closed the connection or sent no RESP)"
        );
        assert_eq!(commands(&mut seen), vec![words(SECTIONS)]);
    }

    /// The reply timeout is the interval, at least 100 ms and at most 1 s.
    #[tokio::test]
    async fn the_reply_timeout_follows_the_interval() {
        let (addr, _seen) = serve(redis).await;
        for (interval, timeout) in [(10, 100), (300, 300), (5_000, 1_000)] {
            let s = connect(addr, Duration::from_millis(interval))
                .await
                .unwrap();
            assert_eq!(s.timeout, Duration::from_millis(timeout), "{interval} ms");
        }
    }

    /// A sample the server does not answer leaves a note and no sample, counts as
    /// unanswered and drops the connection; the next sample connects again.
    #[tokio::test]
    async fn a_failed_sample_is_noted_and_the_next_one_reconnects() {
        let (addr, mut seen) = serve(redis_but(|i| i == 1, || Act::Silent)).await;
        let mut s = connect(addr, Duration::from_millis(250)).await.unwrap();
        s.sample(Mark::BeforeLoad, None).await;
        assert!(!s.connected());
        assert_eq!(s.series.unanswered, 1);
        assert_eq!(
            s.series.notes,
            vec!["sample BeforeLoad failed: no reply within 250ms".to_string()]
        );
        assert!(s.series.samples.is_empty());
        // The server answers again (on a new connection).
        s.sample(Mark::Boundary(1), Some(Instant::now())).await;
        assert_eq!(s.series.notes.len(), 1);
        assert_eq!(s.series.unanswered, 1);
        assert_eq!(s.series.samples.len(), 1);
        assert_eq!(s.series.samples[0].mark, Mark::Boundary(1));
        assert_eq!(s.series.samples[0].seq, 2);
        let conns: Vec<usize> = std::iter::from_fn(|| seen.try_recv().ok())
            .filter_map(|s| match s {
                Seen::Command(n, _) => Some(n),
                Seen::Closed(_) => None,
            })
            .collect();
        // INFO and CONFIG GET, the silent INFO, then the answered one on a new connection.
        assert_eq!(conns, vec![0, 0, 0, 1]);
    }

    /// Failed samples leave at most 20 notes, but every unanswered `INFO` is counted.
    #[tokio::test]
    async fn notes_stop_at_twenty_but_every_unanswered_info_counts() {
        let (addr, _seen) = serve(redis_but(|i| i >= 1, || Act::Close)).await;
        let mut s = connect(addr, INTERVAL).await.unwrap();
        for k in 0..25 {
            s.sample(Mark::Boundary(k), None).await;
        }
        assert!(s.series.samples.is_empty());
        assert_eq!(s.series.unanswered, 25);
        assert_eq!(s.series.notes.len(), 20);
        assert_eq!(
            s.series.notes[0],
            "sample Boundary(0) failed: the server closed the connection or sent no RESP"
        );
        assert_eq!(s.seq, 26);
    }

    /// The clock samples a boundary that is due, skips the ones its reply came after
    /// (and says so), and `finish` adds the final sample and each sample's time since
    /// the start.
    #[tokio::test]
    async fn the_clock_samples_due_boundaries_and_finish_adds_the_final_sample() {
        let (addr, mut seen) = serve(redis).await;
        let s = connect(addr, INTERVAL).await.unwrap();
        assert_eq!(commands(&mut seen).len(), 2);
        // Boundaries 0, 1 and 2 are past; 3 is 10 s away.
        let interval = Duration::from_secs(20);
        let start = Instant::now().checked_sub(Duration::from_secs(50)).unwrap();
        let running = s.clock(start, interval, 0, None);
        assert_eq!(next(&mut seen).await, Seen::Command(0, words(SECTIONS)));
        let series = running.finish().await;
        let marks: Vec<Mark> = series.samples.iter().map(|s| s.mark).collect();
        assert_eq!(marks, vec![Mark::Boundary(0), Mark::Final]);
        let (boundary, last) = (&series.samples[0], &series.samples[1]);
        assert!(boundary.late_us >= 50e6, "{}", boundary.late_us);
        assert!(boundary.at_s >= 50.0, "{}", boundary.at_s);
        assert!(last.at_s >= boundary.at_s);
        assert_eq!((boundary.seq, last.seq), (1, 2));
        assert_eq!(last.late_us, 0.0);
        assert!(boundary.info.latency.is_empty());
        assert!(!last.info.latency.is_empty());
        assert_eq!(last.info.uint("used_memory"), Some(12345));
        assert_eq!(
            series.notes,
            vec!["2 boundary sample(s) skipped: the previous reply came after them".to_string()]
        );
        assert_eq!(series.unanswered, 0);
        assert_eq!(
            commands(&mut seen).last().map(|c| c.len()),
            Some(SECTIONS.len() + 1)
        );
    }

    /// `now`: commands per second and CPU per command between the latest two samples.
    #[test]
    fn now_reads_the_latest_two_samples() {
        let mut s = Sampler::new(Link::Memcache(Vec::new()), INTERVAL);
        let start = Instant::now();
        assert_eq!(s.now(start), None, "one sample is not a rate");
        let info = |calls: u64, cpu: &str, mem: u64| {
            Snap::from(Info::parse(&format!(
                "# Memory\r\nused_memory:{mem}\r\n# CPU\r\nused_cpu_user:{cpu}\r\nused_cpu_sys:0.000000\r\n# Commandstats\r\ncmdstat_get:calls={calls},usec=1,usec_per_call=0.01,rejected_calls=0,failed_calls=0\r\n# Keyspace\r\ndb0:keys=7,expires=0,avg_ttl=0\r\n"
            )))
        };
        for (k, (calls, cpu, mem)) in [(1_000, "1.000000", 10), (3_000, "1.500000", 20)]
            .into_iter()
            .enumerate()
        {
            s.at.push(start + Duration::from_millis(500 * k as u64 + 500));
            s.series.samples.push(Sample {
                mark: Mark::Boundary(k as u32),
                at_s: 0.0,
                late_us: 0.0,
                seq: k as u64,
                info: info(calls, cpu, mem),
            });
        }
        let n = s.now(start).unwrap();
        assert!((n.ops_per_s - 4_000.0).abs() < 1e-6, "{n:?}");
        assert!((n.at_s - 1.0).abs() < 1e-9, "{n:?}");
        assert_eq!(n.used_memory, Some(20));
        assert_eq!(n.keys, 7);
        assert!((n.cpu_us_per_op.unwrap() - 250.0).abs() < 1e-6, "{n:?}");
        assert!((n.cpu_cores.unwrap() - 1.0).abs() < 1e-6, "{n:?}");
    }

    /// A sample taken before the measured start has a negative time.
    #[tokio::test]
    async fn a_sample_before_the_start_has_a_negative_time() {
        let (addr, _seen) = serve(redis).await;
        let mut s = connect(addr, INTERVAL).await.unwrap();
        s.sample(Mark::BeforeLoad, None).await;
        let start = Instant::now() + Duration::from_secs(3600);
        let series = s
            .clock(start, Duration::from_secs(60), 1, None)
            .finish()
            .await;
        let marks: Vec<Mark> = series.samples.iter().map(|s| s.mark).collect();
        assert_eq!(marks, vec![Mark::BeforeLoad, Mark::Final]);
        assert!(series.samples.iter().all(|s| s.at_s <= -3599.0));
        assert!(series.samples[0].at_s <= series.samples[1].at_s);
        assert!(series.notes.is_empty(), "{:?}", series.notes);
    }

    /// A clock dropped without `finish` (a run that failed) stops: its task is aborted
    /// and its connection closed, with no further `INFO`.
    #[tokio::test]
    async fn a_dropped_clock_stops_sampling_and_closes_its_connection() {
        let (addr, mut seen) = serve(redis).await;
        let s = connect(addr, INTERVAL).await.unwrap();
        assert_eq!(commands(&mut seen).len(), 2);
        let running = s.clock(Instant::now(), Duration::from_secs(20), 1, None);
        tokio::task::yield_now().await;
        drop(running);
        assert_eq!(next(&mut seen).await, Seen::Closed(0));
    }

    /// `ask_within`: an error reply is a reply (the connection kept); no reply within the
    /// timeout, or a reply past the size limit, is an error and drops the connection.
    #[tokio::test]
    async fn ask_within_drops_the_connection_only_when_the_reply_fails() {
        let (addr, _seen) = serve(|args: &[String]| match args[0].as_str() {
            "BAD" => error("ERR nope"),
            "BIG" => bulk(&"z".repeat(10_000)),
            _ => Act::Silent,
        })
        .await;
        let session = Session::default();
        let open = || crest_engine::probe::control(addr, "fake", &session, None, NAME);
        let limit = Duration::from_secs(1);
        let mut conn = Some(open().await.unwrap());
        assert_eq!(
            ask_within(&mut conn, &[b"BAD"], limit, 1024).await,
            Ok(Frame::Error(b"ERR nope".to_vec()))
        );
        assert!(conn.is_some());
        assert_eq!(
            ask_within(&mut conn, &[b"BIG"], limit, 16).await,
            Err("the server closed the connection or sent no RESP".into())
        );
        assert!(conn.is_none());
        assert_eq!(
            ask_within(&mut conn, &[b"BAD"], limit, 1024).await,
            Err("not connected".into())
        );
        let mut conn = Some(open().await.unwrap());
        assert_eq!(
            ask_within(&mut conn, &[b"WAIT"], Duration::from_millis(50), 1024).await,
            Err("no reply within 50ms".into())
        );
        assert!(conn.is_none());
    }

    /// `INFO`'s text comes out of a bulk or verbatim string; an error is its words;
    /// anything else is not text.
    #[test]
    fn text_reads_bulk_and_verbatim_and_words_errors() {
        assert_eq!(text(Frame::Bulk(b"a:1".to_vec())), Ok("a:1".into()));
        assert_eq!(
            text(Frame::Verbatim {
                format: *b"txt",
                data: b"b:2".to_vec()
            }),
            Ok("b:2".into())
        );
        assert_eq!(
            text(Frame::Error(b"NOPERM no\r\n".to_vec())),
            Err("NOPERM no??".into())
        );
        assert_eq!(
            text(Frame::BlobError(b"ERR x".to_vec())),
            Err("ERR x".into())
        );
        assert_eq!(
            text(Frame::Integer(1)),
            Err("INFO answered something other than text".into())
        );
    }

    /// What a fake memcached does with its `stats` number `i` (from 0, over all its
    /// connections).
    #[derive(Clone, Copy)]
    enum Mc {
        /// Answers a `stats` whose `cmd_get` is `base + i`.
        Counts(u64),
        /// Never answers.
        Silent,
        /// Writes `STAT` lines without end (past the size limit), then nothing.
        Endless,
        /// Answers as a Redis server would.
        Resp,
        /// Answers a `stats` with no memcached counters.
        NotMemcached,
    }

    /// A fake memcached on 127.0.0.1: `stats` as `act(i)` says, `stats settings` with
    /// `threads`; the number of `stats` it was asked.
    async fn memcached(
        act: impl Fn(usize) -> Mc + Send + Sync + 'static,
        threads: u64,
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let (act, count) = (Arc::new(act), asked.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (act, count) = (act.clone(), count.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    loop {
                        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                            let line: Vec<u8> = buf.drain(..=nl).collect();
                            let out = if line.starts_with(b"stats settings") {
                                format!(
                                    "STAT maxconns 1024\r\nSTAT num_threads {threads}\r\nSTAT item_size_max 1048576\r\nEND\r\n"
                                )
                            } else {
                                match act(count.fetch_add(1, Ordering::SeqCst)) {
                                    Mc::Counts(n) => {
                                        let i = count.load(Ordering::SeqCst) as u64;
                                        format!(
                                            "STAT pid 42\r\nSTAT uptime 5\r\nSTAT time 105\r\nSTAT version 1.6.18\r\nSTAT rusage_user 0.100000\r\nSTAT rusage_system 0.000000\r\nSTAT curr_connections 1\r\nSTAT cmd_get {}\r\nSTAT cmd_set 0\r\nSTAT bytes 64\r\nEND\r\n",
                                            n + i
                                        )
                                    }
                                    Mc::Silent => String::new(),
                                    Mc::Endless => "STAT x 1\r\n".repeat(8000),
                                    Mc::Resp => "-ERR unknown command 'stats'\r\n".into(),
                                    Mc::NotMemcached => "STAT pid 1\r\nEND\r\n".into(),
                                }
                            };
                            if s.write_all(out.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                    }
                });
            }
        });
        (addr, asked)
    }

    use std::sync::Arc;

    /// A ring of two: each asked `stats` at every sample, the replies summed; the threads
    /// read once; nothing taken out of the counts (memcached counts no `stats`).
    #[tokio::test]
    async fn memcache_a_ring_is_sampled_whole_and_summed() {
        let (a, asked_a) = memcached(|_| Mc::Counts(100), 4).await;
        let (b, asked_b) = memcached(|_| Mc::Counts(1000), 4).await;
        let mut s = Sampler::connect_memcache(&[a, b], "memcache://fake", None, INTERVAL)
            .await
            .unwrap();
        assert_eq!(s.series.io_threads, Some(4));
        assert_eq!(s.series.unanswered, 0);
        assert!(s.connected());
        s.sample(Mark::BeforeLoad, None).await;
        s.sample(Mark::Final, None).await;
        assert_eq!(s.series.notes, Vec::<String>::new());
        let [before, last] = &s.series.samples[..] else {
            panic!("{:?}", s.series.samples)
        };
        assert_eq!((before.seq, last.seq), (1, 2));
        // The second stats of each: 100 + 2 and 1000 + 2.
        assert_eq!(before.info.commands["cmd_get"].calls, 1104);
        assert_eq!(last.info.commands["cmd_get"].calls, 1106);
        assert_eq!(before.info.cpu_us(), Some(200_000));
        assert_eq!(before.info.uint("used_memory"), Some(128));
        assert_eq!(before.info.text("memcached_version"), Some("1.6.18"));
        assert_eq!(before.info.text("run_id"), Some("42@100,42@100"));
        assert_eq!(asked_a.load(Ordering::SeqCst), 3);
        assert_eq!(asked_b.load(Ordering::SeqCst), 3);
        // Servers that disagree on their threads: none said.
        let (c, _) = memcached(|_| Mc::Counts(0), 8).await;
        let s = Sampler::connect_memcache(&[a, c], "memcache://fake", None, INTERVAL)
            .await
            .unwrap();
        assert_eq!(s.series.io_threads, None);
    }

    /// A silent server fails the ring's sample at the reply timeout: noted, counted
    /// unanswered, every connection dropped; the next sample connects again.
    #[tokio::test]
    async fn memcache_a_silent_server_fails_the_sample_and_the_ring_reconnects() {
        let (a, _) = memcached(|_| Mc::Counts(0), 1).await;
        let (b, _) = memcached(|i| if i == 1 { Mc::Silent } else { Mc::Counts(0) }, 1).await;
        let interval = Duration::from_millis(200);
        let mut s = Sampler::connect_memcache(&[a, b], "memcache://fake", None, interval)
            .await
            .unwrap();
        s.sample(Mark::BeforeLoad, None).await;
        assert!(s.series.samples.is_empty());
        assert_eq!(s.series.unanswered, 1);
        assert!(!s.connected());
        assert_eq!(
            s.series.notes,
            vec![format!(
                "sample BeforeLoad failed: {b}: no reply within the deadline"
            )]
        );
        s.sample(Mark::Final, None).await;
        assert_eq!(s.series.samples.len(), 1);
        assert_eq!(s.series.samples[0].seq, 2);
        assert!(s.connected());
    }

    /// A reply that never ends is read to the size limit, not further; a Redis server,
    /// or a reply without memcached's counters, is not sampled; each in one line.
    #[tokio::test]
    async fn memcache_connect_refuses_what_is_not_memcached() {
        let connect = |a: SocketAddr| async move {
            Sampler::connect_memcache(&[a], "memcache://fake", None, INTERVAL)
                .await
                .unwrap_err()
        };
        let (a, _) = memcached(|_| Mc::Endless, 1).await;
        assert_eq!(
            connect(a).await,
            format!("the target does not answer stats ({a}: a reply past 65536 bytes without END)")
        );
        let (a, _) = memcached(|_| Mc::Resp, 1).await;
        assert_eq!(
            connect(a).await,
            format!("the target does not answer stats ({a}: -ERR unknown command 'stats')")
        );
        let (a, _) = memcached(|_| Mc::NotMemcached, 1).await;
        assert_eq!(
            connect(a).await,
            format!("the target does not answer stats ({a}: its stats reply has no cmd_get)")
        );
        let (a, _) = memcached(|_| Mc::Silent, 1).await;
        let e = Sampler::connect_memcache(&[a], "t", None, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            format!("the target does not answer stats ({a}: no reply within the deadline)")
        );
        assert_eq!(
            Sampler::connect_memcache(&[], "memcache://", None, INTERVAL)
                .await
                .unwrap_err(),
            "memcache://: no server to sample"
        );
    }
}

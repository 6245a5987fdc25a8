//! The sampler's connection and clock: [`Sampler::connect`], [`Sampler::sample`] (one
//! `INFO`), [`Sampler::clock`] (a task sampling at every boundary) and
//! [`Running::finish`] (stop, one last sample, the [`Series`]).

use crest_engine::probe::{self, Control};
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

/// The sampler between samples.
#[derive(Debug)]
pub struct Sampler {
    addr: SocketAddr,
    target: String,
    session: Session,
    tls: Option<Client>,
    conn: Option<Control>,
    ask: &'static [&'static [u8]],
    timeout: Duration,
    series: Series,
    /// When each sample's reply came, beside `series.samples`.
    at: Vec<Instant>,
    /// `INFO`s written so far.
    seq: u64,
    missed: u32,
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
        let mut s = Sampler {
            addr,
            target: target.to_string(),
            session: session.clone(),
            tls,
            conn: None,
            ask: SECTIONS,
            timeout: REPLY_TIMEOUT.min(interval.max(Duration::from_millis(100))),
            series: Series::default(),
            at: Vec::new(),
            seq: 0,
            missed: 0,
        };
        s.open().await?;
        if let Err(first) = s.info().await {
            // A server that is silent or gone: no sampling. One that refuses the
            // sections (an older server takes one): try `INFO everything`.
            if s.conn.is_none() {
                return Err(format!("the target does not answer INFO ({first})"));
            }
            s.ask = EVERYTHING;
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

    async fn open(&mut self) -> Result<(), String> {
        let c = tokio::time::timeout(
            CONNECT_TIMEOUT,
            probe::control(
                self.addr,
                &self.target,
                &self.session,
                self.tls.as_ref(),
                NAME,
            ),
        )
        .await
        .map_err(|_| {
            format!(
                "no connection to {} within {CONNECT_TIMEOUT:?}",
                self.target
            )
        })??;
        self.conn = Some(c);
        Ok(())
    }

    /// One request and its reply; a timeout or a broken connection drops the connection.
    async fn request(&mut self, args: &[&[u8]]) -> Result<Frame, String> {
        ask_within(&mut self.conn, args, self.timeout, MAX_INFO).await
    }

    /// One `INFO`, counted in `seq` (and in `unanswered` when no reply came); `last`
    /// asks for the latency percentiles too (and keeps them).
    async fn info_at(&mut self, last: bool) -> Result<Snap, String> {
        if self.conn.is_none() {
            self.open().await?;
        }
        self.seq += 1;
        let mut ask = self.ask.to_vec();
        if last && self.ask == SECTIONS {
            ask.push(FINAL_SECTION);
        }
        match self.request(&ask).await {
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

    /// One `INFO` of the usual sections.
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

    /// Samples at `start + k·interval` for k = `first`, `first + 1`, … in a task of its
    /// own until [`Running::finish`].
    pub fn clock(self, start: Instant, interval: Duration, first: u32) -> Running {
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

//! The live page's feed: `GET /events`, the run as server-sent events, one frame per
//! finalized interval for every viewer.
//!
//! - `hello`: on connecting (and again after a viewer fell behind): the points so far and
//!   how they are folded (below), so a page opened late draws the whole run.
//! - `point`: each finalized interval ([`Point`]: rate, the exact merged percentiles p50 …
//!   max, schedule lag, errors by kind, the verdicts, the server's latest figures).
//! - `state`: the board after every publication (phase, rates, workers, counters per class
//!   and command, changes, the server now, the feed's own figures).
//! - `end`: the admin API is closing (the run, or this run of a compare, is over).
//!
//! **Bounded whatever the run's length and the number of viewers.** The feed keeps at
//! most [`POINTS`] points: when full, neighbours are folded in pairs ([`Point::fold`]:
//! counts add, rates average, percentiles and lag keep the higher, so a spike survives)
//! and later intervals are folded `stride` at a time; a page folds the same way. Frames go
//! out through one broadcast ring of [`BACKLOG`] frames shared by every viewer; each
//! viewer's connection holds at most [`QUEUE`] frames more. A viewer that stops reading
//! falls behind the ring, costs nothing more, and gets a fresh `hello` when it reads
//! again: the run never waits for a viewer. Memory: about 300 bytes per kept point (≤
//! 0.4 MB) + the ring (≤ 256 frames of ~1-3 kB) + per viewer ≤ 8 frames and a `hello` in
//! flight.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, watch};

/// Points kept for the page (folded in pairs past this).
pub const POINTS: usize = 1024;
/// Frames the broadcast ring holds for viewers that read slowly.
pub const BACKLOG: usize = 256;
/// Frames queued per viewer connection beyond the ring.
pub const QUEUE: usize = 8;
/// Error kinds a point names (the rest add up as `other`).
const KINDS: usize = 8;

/// One interval (or a run of folded ones) as the page draws it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Point {
    /// Start, seconds since the measured start.
    pub t: f64,
    /// Span, seconds.
    pub dt: f64,
    /// Target rate, per second.
    pub target: f64,
    /// Achieved rate (non-error replies), per second.
    pub achieved: f64,
    /// Requests scheduled.
    pub scheduled: u64,
    /// Failed requests.
    pub errors: u64,
    /// `errors` by kind.
    pub kinds: BTreeMap<String, u64>,
    /// Latency from the intended send time, µs: p50, p90, p99, p99.9, p99.99, max.
    pub p50: f64,
    /// p90, µs.
    pub p90: f64,
    /// p99, µs.
    pub p99: f64,
    /// p99.9, µs.
    pub p999: f64,
    /// p99.99, µs.
    pub p9999: f64,
    /// Highest, µs.
    pub max: f64,
    /// Schedule lag p99, µs.
    pub lag: f64,
    /// The generator limited it.
    pub generator_bound: bool,
    /// Why schedule lag passed the pacer's bound, or empty.
    pub off_pace: String,
    /// What limited it (`generator`, `server`, `connections`), or empty.
    pub bound: String,
    /// The server's commands per second at its latest sample (None: not sampled).
    pub server_ops: Option<f64>,
}

impl Point {
    /// `p` as drawn, with the server's latest commands per second.
    pub fn of(p: &crest_report::TimelinePoint, dt: f64, server_ops: Option<f64>) -> Self {
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        let mut by_count: Vec<_> = p.errors_by_kind.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1));
        for (i, (k, n)) in by_count.into_iter().enumerate() {
            let name = if i < KINDS { k.clone() } else { "other".into() };
            *kinds.entry(name).or_default() += n;
        }
        let l = &p.latency_us;
        Self {
            t: p.t_s,
            dt,
            target: p.target_rate,
            achieved: p.achieved_rate,
            scheduled: p.scheduled,
            errors: p.errors,
            kinds,
            p50: l.p50,
            p90: l.p90,
            p99: l.p99,
            p999: l.p999,
            p9999: l.p9999,
            max: l.max,
            lag: p.schedule_lag_p99_us,
            generator_bound: p.generator_bound,
            off_pace: p.off_pace.to_string(),
            bound: p.bound.to_string(),
            server_ops: server_ops.map(|v| (v * 100.0).round() / 100.0),
        }
    }

    /// Folds the next interval `o` into this one: counts add, rates are averaged over the
    /// span, percentiles and lag keep the higher (a spike stays visible), a verdict holds
    /// if either had it.
    pub fn fold(&mut self, o: &Point) {
        let (a, b) = (self.dt, o.dt);
        let span = (a + b).max(1e-9);
        let avg = |x: f64, y: f64| (x * a + y * b) / span;
        self.target = avg(self.target, o.target);
        self.achieved = avg(self.achieved, o.achieved);
        self.server_ops = match (self.server_ops, o.server_ops) {
            (Some(x), Some(y)) => Some(avg(x, y)),
            (x, y) => x.or(y),
        };
        self.dt = a + b;
        self.scheduled += o.scheduled;
        self.errors += o.errors;
        for (k, n) in &o.kinds {
            *self.kinds.entry(k.clone()).or_default() += n;
        }
        for (x, y) in [
            (&mut self.p50, o.p50),
            (&mut self.p90, o.p90),
            (&mut self.p99, o.p99),
            (&mut self.p999, o.p999),
            (&mut self.p9999, o.p9999),
            (&mut self.max, o.max),
            (&mut self.lag, o.lag),
        ] {
            *x = x.max(y);
        }
        self.generator_bound |= o.generator_bound;
        if self.off_pace.is_empty() {
            self.off_pace.clone_from(&o.off_pace);
        }
        if self.bound.is_empty() {
            self.bound.clone_from(&o.bound);
        }
    }
}

/// The kept points: at most [`POINTS`], each `stride` intervals folded; `pending` folds
/// the next `stride`.
#[derive(Debug, Default, Serialize)]
struct Ring {
    points: Vec<Point>,
    stride: u32,
    pending: Option<Point>,
    pending_n: u32,
    /// The latest interval as it was (not folded): the page's figures of the moment.
    last: Option<Point>,
    /// Timeline rows taken so far.
    #[serde(skip)]
    seen: usize,
}

impl Ring {
    fn push(&mut self, p: Point) {
        self.stride = self.stride.max(1);
        self.last = Some(p.clone());
        match &mut self.pending {
            Some(q) => q.fold(&p),
            None => self.pending = Some(p),
        }
        self.pending_n += 1;
        if self.pending_n < self.stride {
            return;
        }
        if let Some(q) = self.pending.take() {
            self.points.push(q);
        }
        self.pending_n = 0;
        if self.points.len() >= POINTS {
            let old = std::mem::take(&mut self.points);
            let mut it = old.into_iter();
            while let Some(mut a) = it.next() {
                if let Some(b) = it.next() {
                    a.fold(&b);
                }
                self.points.push(a);
            }
            self.stride *= 2;
        }
    }
}

/// The feed: the kept points, the broadcast ring of frames, its viewers.
#[derive(Debug)]
pub struct Feed {
    ring: Mutex<Ring>,
    tx: broadcast::Sender<Arc<str>>,
    over: watch::Sender<bool>,
    viewers: AtomicUsize,
    /// Frame bytes broadcast (each reaches every viewer reading).
    bytes: AtomicU64,
    /// Points broadcast.
    points: AtomicU64,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            ring: Mutex::new(Ring {
                stride: 1,
                ..Ring::default()
            }),
            tx: broadcast::channel(BACKLOG).0,
            over: watch::channel(false).0,
            viewers: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            points: AtomicU64::new(0),
        }
    }
}

/// The feed's own figures, as `/status` shows them.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct FeedStats {
    /// Viewers connected now.
    pub viewers: usize,
    /// Points sent.
    pub points: u64,
    /// Bytes of `point` and `state` frames sent to each viewer so far (a `hello` is extra).
    pub bytes: u64,
}

fn frame(event: &str, json: &str) -> Arc<str> {
    Arc::from(format!("event: {event}\ndata: {json}\n\n"))
}

impl Feed {
    /// Takes the timeline rows not yet taken (each `dt` seconds), keeps and sends them.
    pub fn points(&self, timeline: &[crest_report::TimelinePoint], dt: f64, ops: Option<f64>) {
        let Ok(mut ring) = self.ring.lock() else {
            return;
        };
        for p in timeline.get(ring.seen..).unwrap_or_default() {
            let point = Point::of(p, dt, ops);
            if self.tx.receiver_count() > 0
                && let Ok(json) = serde_json::to_string(&point)
            {
                self.send(frame("point", &json));
            }
            self.points.fetch_add(1, Ordering::Relaxed);
            ring.push(point);
        }
        ring.seen = timeline.len();
    }

    /// Sends the board's state (`json`) to every viewer.
    pub fn state(&self, json: &str) {
        if self.tx.receiver_count() > 0 {
            self.send(frame("state", json));
        }
    }

    fn send(&self, f: Arc<str>) {
        self.bytes.fetch_add(f.len() as u64, Ordering::Relaxed);
        let _ = self.tx.send(f);
    }

    /// Ends every viewer's stream (with an `end` frame).
    pub fn close(&self) {
        self.over.send_replace(true);
    }

    /// The feed's figures.
    pub fn stats(&self) -> FeedStats {
        FeedStats {
            viewers: self.viewers.load(Ordering::Relaxed),
            points: self.points.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    /// The `hello` frame: the kept points and how they fold.
    fn hello(&self) -> Arc<str> {
        let json = self
            .ring
            .lock()
            .ok()
            .and_then(|r| serde_json::to_string(&*r).ok())
            .unwrap_or_else(|| "{}".into());
        frame("hello", &json)
    }

    /// A new viewer: its frames, starting with `hello` and `state` (`state` is the board's
    /// state now), until the feed closes or the viewer goes.
    pub fn subscribe(self: &Arc<Self>, state: String) -> mpsc::Receiver<Arc<str>> {
        let (out, rx) = mpsc::channel(QUEUE);
        // Subscribed before the hello is taken: no point falls between the two.
        let mut frames = self.tx.subscribe();
        let mut over = self.over.subscribe();
        let feed = Arc::clone(self);
        feed.viewers.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _ = feed_viewer(&feed, &out, &mut frames, &mut over, state).await;
            feed.viewers.fetch_sub(1, Ordering::Relaxed);
        });
        rx
    }
}

/// One viewer's frames until it goes (`Err`) or the feed closes.
async fn feed_viewer(
    feed: &Feed,
    out: &mpsc::Sender<Arc<str>>,
    frames: &mut broadcast::Receiver<Arc<str>>,
    over: &mut watch::Receiver<bool>,
    state: String,
) -> Result<(), mpsc::error::SendError<Arc<str>>> {
    out.send(feed.hello()).await?;
    out.send(frame("state", &state)).await?;
    loop {
        if *over.borrow() {
            return out.send(frame("end", "{}")).await;
        }
        tokio::select! {
            f = frames.recv() => match f {
                Ok(f) => out.send(f).await?,
                // Fell behind the ring: start again from what is kept now.
                Err(broadcast::error::RecvError::Lagged(_)) => out.send(feed.hello()).await?,
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = over.changed() => {}
            () = out.closed() => return Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn p(t: f64, p99: f64) -> Point {
        Point {
            t,
            dt: 1.0,
            target: 100.0,
            achieved: t,
            scheduled: 100,
            p99,
            ..Point::default()
        }
    }

    #[test]
    fn a_long_run_keeps_at_most_points_folded_with_its_spikes() {
        let mut r = Ring {
            stride: 1,
            ..Ring::default()
        };
        let n = 10 * POINTS + 3;
        for i in 0..n {
            let spike = if i == 5_000 { 9_999.0 } else { 10.0 };
            r.push(p(i as f64, spike));
            assert!(r.points.len() < POINTS, "{} kept at {i}", r.points.len());
        }
        assert_eq!(r.stride, 16);
        let kept: u64 = r.points.iter().map(|q| q.scheduled).sum::<u64>()
            + r.pending.as_ref().map_or(0, |q| q.scheduled);
        assert_eq!(kept, 100 * n as u64, "every interval's count is kept");
        let span: f64 = r.points.iter().map(|q| q.dt).sum();
        assert_eq!(span, (r.points.len() as u32 * r.stride) as f64);
        assert_eq!(
            r.points.iter().map(|q| q.p99).fold(0.0, f64::max),
            9_999.0,
            "the spike survives folding"
        );
        // Rates are averaged over the folded span: intervals 0..16 achieved 0..15.
        assert_eq!(r.points[0].t, 0.0);
        assert!(
            (r.points[0].achieved - 7.5).abs() < 1e-9,
            "{}",
            r.points[0].achieved
        );
    }

    #[test]
    fn the_page_folds_as_the_feed_does() {
        let page = crest_report::html::live::PAGE;
        assert!(page.contains(&format!("var POINTS = {POINTS};")));
        for f in ["p50", "p90", "p99", "p999", "p9999", "max", "lag"] {
            assert!(page.contains(&format!("\"{f}\"")), "the page folds {f}");
        }
    }

    #[tokio::test]
    async fn a_viewer_gets_hello_state_then_points_and_one_that_falls_behind_starts_again() {
        let feed = Arc::new(Feed::default());
        let tl = |n: usize| -> Vec<crest_report::TimelinePoint> {
            (0..n)
                .map(|i| crest_report::TimelinePoint {
                    t_s: i as f64,
                    ..crest_report::TimelinePoint::default()
                })
                .collect()
        };
        feed.points(&tl(2), 1.0, None);
        let mut rx = feed.subscribe("{\"phase\":\"running\"}".into());
        let hello = rx.recv().await.unwrap();
        assert!(hello.starts_with("event: hello\n"), "{hello}");
        assert!(hello.contains("\"points\":[{\"t\":0.0"), "{hello}");
        assert!(rx.recv().await.unwrap().starts_with("event: state\n"));
        tokio::task::yield_now().await;
        feed.points(&tl(3), 1.0, Some(5.0));
        let f = rx.recv().await.unwrap();
        assert!(f.starts_with("event: point\ndata: {\"t\":2.0"), "{f}");
        assert!(f.contains("\"server_ops\":5.0"), "{f}");
        assert_eq!(feed.stats().viewers, 1);
        // A viewer that does not read: the feed goes on; the viewer restarts from hello.
        for n in 4..(4 + BACKLOG + 2 * QUEUE + 10) {
            feed.points(&tl(n), 1.0, None);
        }
        let mut saw_hello = false;
        while let Ok(Some(f)) =
            tokio::time::timeout(std::time::Duration::from_millis(200), rx.recv()).await
        {
            saw_hello |= f.starts_with("event: hello\n");
        }
        assert!(saw_hello, "a lagging viewer is sent the kept points again");
        feed.close();
        // Closing ends the stream with `end`.
        let mut last = String::new();
        while let Ok(Some(f)) =
            tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv()).await
        {
            last = f.to_string();
        }
        assert!(last.starts_with("event: end\n"), "{last}");
        drop(rx);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(feed.stats().viewers, 0);
    }
}

//! The coordinator's admin HTTP API (`--admin ADDR`, off by default): a live view of the
//! merged run and its runtime control.
//!
//! - `GET /metrics`: the Prometheus/OpenMetrics text format. Counters per class, command
//!   and error kind; latency from the intended send time as one fixed-bucket histogram per
//!   class *merged across workers* (the coordinator's exact merged HDR histograms, binned at
//!   scrape time: histograms add, per-worker summaries would not); and the last finished
//!   interval's exact quantiles as gauges.
//! - `GET /status`: JSON: phase, elapsed, rates in force, the last interval, workers,
//!   changes.
//! - `PUT /rate` (body: a rate per second; `?class=NAME` for one class), `POST /pause`,
//!   `POST /resume`, `POST /stop`: runtime control ([`crate::orchestrate::steer`]).
//!
//! Data flow: the collect loop publishes a [`Board`] after every finalized interval; the
//! HTTP handlers read it, and pass control requests to the collect loop over a channel,
//! which answers each once it has sent the change to every worker. Off loopback every
//! request must carry the run's token (`Authorization: Bearer <token>`).

use crate::control::{Action, Refusal, Request};
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use crest_model::hist::{Dense, Hist};
use crest_report::ChangeRow;
use crest_report::TimelinePoint;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Upper bounds of the latency histogram's buckets, seconds (then +Inf): 10 µs to 10 s,
/// 1-2.5-5 steps.
pub const BUCKETS_S: [f64; 19] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0,
];

/// How long a control request waits for the collect loop's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// One (class, command)'s counters, run so far, every worker.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Counters {
    /// Class.
    pub class: String,
    /// Command.
    pub command: String,
    /// Requests the schedule created.
    pub scheduled: u64,
    /// Requests written.
    pub sent: u64,
    /// Non-error replies.
    pub completed: u64,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
}

/// One class's latency histogram, binned.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Binned {
    /// Class.
    pub class: String,
    /// Counts per bucket of [`BUCKETS_S`] (not cumulative), the last one +Inf.
    pub buckets: Vec<u64>,
    /// Sum of the values, seconds (from the histogram's mean: exact to its 0.1%).
    pub sum_s: f64,
    /// Values.
    pub count: u64,
}

impl Binned {
    /// `h` in [`BUCKETS_S`].
    pub fn of(class: &str, h: &Hist) -> Self {
        let mut b = Self::empty(class);
        b.add(h);
        b
    }

    /// No values yet.
    pub fn empty(class: &str) -> Self {
        Self {
            class: class.to_string(),
            buckets: vec![0; BUCKETS_S.len() + 1],
            sum_s: 0.0,
            count: 0,
        }
    }

    /// Adds `h`'s values: binning each command's histogram into its class's buckets is
    /// the merge (bins add), with no full-size histogram built per scrape.
    pub fn add(&mut self, h: &Hist) {
        for v in h.iter_recorded() {
            // A value counts in the first bucket whose bound it does not pass, read at the
            // lowest value of its HDR bucket (the histogram's own 0.1% resolution).
            let s = h.lowest_equivalent(v.value_iterated_to()) as f64 / 1e9;
            let i = BUCKETS_S.partition_point(|&b| b < s);
            self.buckets[i] += v.count_at_value();
        }
        self.sum_s += h.mean() * h.len() as f64 / 1e9;
        self.count += h.len();
    }

    /// Adds `d`'s values, as [`Binned::add`] does a [`Hist`]'s.
    pub fn add_dense(&mut self, d: &Dense) {
        for (lowest, count) in d.iter() {
            let i = BUCKETS_S.partition_point(|&b| b < lowest as f64 / 1e9);
            self.buckets[i] += count;
        }
        self.sum_s += d.sum_ns() / 1e9;
        self.count += d.len();
    }
}

/// One worker, as the API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerView {
    /// Name.
    pub name: String,
    /// Host.
    pub host: String,
    /// Shards.
    pub shards: u32,
    /// Why it was lost, if it was.
    pub lost: Option<String>,
}

/// One class's rate in force.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassRate {
    /// Class.
    pub class: String,
    /// Rate now, per second (None: closed loop).
    pub rate: Option<f64>,
}

/// What the API serves: the run as the collect loop last published it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Board {
    /// `starting`, `prefill`, `running`, `stopping` (a stop was accepted: the phase drains
    /// and ends), `done`.
    pub phase: &'static str,
    /// Run id (empty before the measured phase).
    pub run_id: String,
    /// Seconds since the measured start.
    pub elapsed_s: f64,
    /// The measured span, seconds (0: bounded by a count).
    pub duration_s: f64,
    /// A pause is in force.
    pub paused: bool,
    /// Rates in force.
    pub rates: Vec<ClassRate>,
    /// The last finished interval.
    pub last_interval: Option<TimelinePoint>,
    /// Finished intervals.
    pub intervals: usize,
    /// Workers.
    pub workers: Vec<WorkerView>,
    /// Changes so far.
    pub changes: Vec<ChangeRow>,
    /// Counters per (class, command).
    #[serde(skip)]
    pub counters: Vec<Counters>,
    /// Latency per class.
    #[serde(skip)]
    pub latency: Vec<Binned>,
}

/// The shared state between the run and the HTTP handlers.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The run's latest published state.
    pub board: Arc<Mutex<Board>>,
    requests: mpsc::Sender<Request>,
    token: String,
    loopback: bool,
}

impl Admin {
    /// Publishes `f`'s edit of the board.
    pub fn publish(&self, f: impl FnOnce(&mut Board)) {
        if let Ok(mut b) = self.board.lock() {
            f(&mut b);
        }
    }

    fn board(&self) -> Board {
        self.board.lock().map(|b| b.clone()).unwrap_or_default()
    }

    /// Off loopback, the run's token is required.
    fn allowed(&self, headers: &HeaderMap) -> bool {
        if self.loopback {
            return true;
        }
        let want = format!("Bearer {}", self.token);
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| !self.token.is_empty() && v == want)
    }

    /// A board and the receiving end of its control requests (the collect loop's).
    /// `loopback`: the API is reachable from this host only (no token asked).
    pub fn new(token: &str, loopback: bool) -> (Self, mpsc::Receiver<Request>) {
        let (tx, rx) = mpsc::channel(16);
        let admin = Self {
            board: Arc::new(Mutex::new(Board {
                phase: "starting",
                ..Board::default()
            })),
            requests: tx,
            token: token.to_string(),
            loopback,
        };
        (admin, rx)
    }

    /// Whether `token` is the run's (any is, when the run has none).
    pub fn token_ok(&self, token: &str) -> bool {
        self.token.is_empty() || token == self.token
    }

    /// The board as `GET /status` shows it.
    pub fn status_json(&self) -> String {
        serde_json::to_string(&self.board()).unwrap_or_default()
    }

    /// Passes `action` (asked by `by`) to the running phase; the change as carried out.
    ///
    /// # Errors
    /// [`Refusal`] when it does not apply now or is wrong.
    pub async fn request(&self, action: Action, by: &'static str) -> Result<ChangeRow, Refusal> {
        let phase = self.board.lock().map(|b| b.phase).unwrap_or("done");
        // A stopping run still answers: the phase itself says why nothing more applies.
        if phase != "running" && phase != "stopping" {
            return Err(Refusal::Conflict(format!(
                "the run is {phase}: changes apply to its measured phase only"
            )));
        }
        let (reply, answer) = oneshot::channel();
        let req = Request { action, by, reply };
        if self.requests.send(req).await.is_err() {
            return Err(Refusal::Conflict("the run is over".into()));
        }
        match tokio::time::timeout(ANSWER_WAIT, answer).await {
            Ok(Ok(r)) => r,
            _ => Err(Refusal::Conflict(
                "the run ended before it could answer".into(),
            )),
        }
    }
}

/// Binds `addr` and serves the HTTP API on `admin` until `stop` resolves; returns the
/// bound address.
///
/// # Errors
/// One line naming `--admin` when the address cannot be bound.
pub async fn serve(
    admin: Admin,
    addr: SocketAddr,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--admin {addr}: cannot listen: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/rate", put(rate))
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .route("/stop", post(stop_run))
        .with_state(admin);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::warn!(error = %e, "admin API stopped");
        }
    });
    Ok(bound)
}

fn refused() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        "the admin API off loopback needs the run's token: send Authorization: Bearer <--token>\n",
    )
        .into_response()
}

async fn metrics(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    let mut text = String::new();
    let board = a.board();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Exported(board)));
    if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode\n").into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn status(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    axum::Json(a.board()).into_response()
}

async fn rate(
    State(a): State<Admin>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
    body: String,
) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    let text = body.trim();
    let Ok(rps) = text.parse::<f64>() else {
        return (
            StatusCode::BAD_REQUEST,
            format!(
                "rate {text:?}: give the new rate as a number of requests per second, e.g. 80000\n"
            ),
        )
            .into_response();
    };
    let class = q.get("class").cloned();
    ask(&a, Action::Rate { rps, class }).await
}

async fn pause(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    ask(&a, Action::Pause).await
}

async fn resume(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    ask(&a, Action::Resume).await
}

async fn stop_run(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    ask(&a, Action::Stop).await
}

/// Passes `action` to the running phase and answers with the change as carried out.
async fn ask(a: &Admin, action: Action) -> Response {
    match a.request(action, "admin").await {
        Ok(row) => axum::Json(row).into_response(),
        Err(Refusal::Bad(why)) => (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
        Err(Refusal::Conflict(why)) => (StatusCode::CONFLICT, format!("{why}\n")).into_response(),
    }
}

/// The board as Prometheus metrics.
#[derive(Debug)]
struct Exported(Board);

impl prometheus_client::collector::Collector for Exported {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let b = &self.0;
        requests(b, &mut enc)?;
        latency(b, &mut enc)?;
        let rates: Vec<_> = b
            .rates
            .iter()
            .filter_map(|r| r.rate.map(|v| (vec![("class", r.class.clone())], v)))
            .collect();
        gauge(
            &mut enc,
            "crest_target_rate",
            "The rate in force, requests per second (runtime changes included).",
            &rates,
        )?;
        if let Some(p) = &b.last_interval {
            last_interval(p, &mut enc)?;
        }
        let alive = b.workers.iter().filter(|w| w.lost.is_none()).count();
        gauge(
            &mut enc,
            "crest_workers",
            "Workers taking part and not lost.",
            &[(Labels::new(), alive as f64)],
        )?;
        gauge(
            &mut enc,
            "crest_elapsed_seconds",
            "Seconds since the measured start.",
            &[(Labels::new(), b.elapsed_s)],
        )?;
        Ok(())
    }
}

/// A metric's labels.
type Labels = Vec<(&'static str, String)>;

/// One counter family, a value per label set.
fn counter(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// One gauge family, a value per label set.
fn gauge(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// The request counters per class and command: scheduled, sent, completed, errors by kind.
fn requests(b: &Board, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let cmd = |c: &Counters| vec![("class", c.class.clone()), ("command", c.command.clone())];
    for (name, help, get) in [
        (
            "crest_requests_scheduled",
            "Requests the open-loop schedule (or the closed loop) created, every worker.",
            (|c: &Counters| c.scheduled) as fn(&Counters) -> u64,
        ),
        (
            "crest_requests_sent",
            "Requests written to the target.",
            |c| c.sent,
        ),
        (
            "crest_requests_completed",
            "Requests answered with a non-error reply.",
            |c| c.completed,
        ),
    ] {
        let rows: Vec<_> = b.counters.iter().map(|c| (cmd(c), get(c))).collect();
        counter(enc, name, help, &rows)?;
    }
    let errors: Vec<_> = b
        .counters
        .iter()
        .flat_map(|c| {
            c.errors.iter().map(move |(k, n)| {
                let mut l = cmd(c);
                l.push(("kind", k.clone()));
                (l, *n)
            })
        })
        .collect();
    counter(
        enc,
        "crest_request_errors",
        "Failed requests by kind (server error words, timeout, disconnected, ...).",
        &errors,
    )
}

/// Each class's latency histogram, binned at scrape time.
fn latency(b: &Board, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "crest_latency_seconds",
        "Latency from the intended send time, every worker merged (exact HDR histograms binned at scrape time).",
        None,
        MetricType::Histogram,
    )?;
    for h in &b.latency {
        let mut bounds: Vec<(f64, u64)> = BUCKETS_S
            .iter()
            .copied()
            .zip(h.buckets.iter().copied())
            .collect();
        bounds.push((f64::MAX, h.buckets.last().copied().unwrap_or(0)));
        let labels = vec![("class", h.class.clone())];
        m.encode_family(&labels)?
            .encode_histogram::<()>(h.sum_s, h.count, &bounds, None)?;
    }
    Ok(())
}

/// The last finished interval's gauges: latency quantiles, rate, lag, the verdicts.
fn last_interval(
    p: &crest_report::TimelinePoint,
    enc: &mut DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    let q = |q: &str, v: f64| (vec![("quantile", q.to_string())], v / 1e6);
    gauge(
        enc,
        "crest_interval_latency_seconds",
        "The last finished interval's exact latency quantiles, every worker merged.",
        &[
            q("0.5", p.latency_us.p50),
            q("0.99", p.latency_us.p99),
            q("0.999", p.latency_us.p999),
        ],
    )?;
    let one = |v: f64| [(Labels::new(), v)];
    let flag = |on: bool| if on { 1.0 } else { 0.0 };
    for (name, help, v) in [
        (
            "crest_interval_achieved_rate",
            "The last finished interval's non-error replies per second.",
            p.achieved_rate,
        ),
        (
            "crest_interval_schedule_lag_p99_seconds",
            "The last finished interval's schedule lag p99.",
            p.schedule_lag_p99_us / 1e6,
        ),
        (
            "crest_interval_generator_bound",
            "1 when the generator, not the server, limited the last finished interval.",
            flag(p.generator_bound),
        ),
        (
            "crest_interval_off_pace",
            "1 when the last finished interval's schedule lag p99 passed the pacer's bound (the report's off_pace says why).",
            flag(p.off_pace.is_some()),
        ),
        (
            "crest_interval_shard_preemptions",
            "Times the scheduler gave a shard's core to another thread in the last finished interval, every shard summed.",
            p.preemptions as f64,
        ),
    ] {
        gauge(enc, name, help, &one(v))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bins_hold_every_value_in_the_first_bucket_it_does_not_pass() {
        let mut h = crest_model::hist::new_hist();
        for ns in [5_000u64, 10_000, 80_000, 2_000_000, 20_000_000_000] {
            h.record(ns).unwrap();
        }
        let b = Binned::of("c", &h);
        assert_eq!(b.count, 5);
        assert_eq!(b.buckets.iter().sum::<u64>(), 5);
        assert_eq!(b.buckets[0], 2, "5 µs and 10 µs are ≤ 10 µs");
        assert_eq!(b.buckets[3], 1, "80 µs: ≤ 100 µs");
        assert_eq!(b.buckets[7], 1, "2 ms: ≤ 2.5 ms");
        assert_eq!(*b.buckets.last().unwrap(), 1, "20 s: +Inf");
        assert!((b.sum_s - 20.002095).abs() < 0.03);
        // The same values summed bucket by bucket bin the same.
        let mut d = crest_model::hist::Dense::default();
        d.add(&crest_model::hist::Sparse::of(&h));
        let mut from_dense = Binned::empty("c");
        from_dense.add_dense(&d);
        assert_eq!(from_dense.buckets, b.buckets);
        assert_eq!(from_dense.count, b.count);
        assert!(
            (from_dense.sum_s - b.sum_s).abs() < 1e-9,
            "{} vs {}",
            from_dense.sum_s,
            b.sum_s
        );
    }

    #[test]
    fn the_text_has_counters_the_histogram_and_gauges() {
        let mut h = crest_model::hist::new_hist();
        h.record(150_000).unwrap();
        let board = Board {
            phase: "running",
            counters: vec![Counters {
                class: "main".into(),
                command: "GET".into(),
                scheduled: 3,
                sent: 2,
                completed: 1,
                errors: [("timeout".to_string(), 1)].into(),
            }],
            latency: vec![Binned::of("main", &h)],
            ..Board::default()
        };
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Exported(board)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "crest_requests_scheduled_total{class=\"main\",command=\"GET\"} 3",
            "crest_request_errors_total{class=\"main\",command=\"GET\",kind=\"timeout\"} 1",
            "crest_latency_seconds_bucket{le=\"0.0001\",class=\"main\"} 0",
            "crest_latency_seconds_bucket{le=\"0.00025\",class=\"main\"} 1",
            "crest_latency_seconds_bucket{le=\"+Inf\",class=\"main\"} 1",
            "crest_latency_seconds_count{class=\"main\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}

//! The coordinator's admin HTTP API (`--admin ADDR`, off by default): a live view of the
//! merged run and its runtime control.
//!
//! - `GET /`: the live page (`crest_report::html::live`): the run as it goes, drawn in the
//!   browser from `GET /events` ([`live`]: server-sent events, one small frame per
//!   interval), with the controls below; once the run is over and its report is built,
//!   `GET /report` is its `report.html`, which the page then shows.
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
//! Data flow: the collect loop publishes a [`Board`] after every finalized interval (and
//! the timeline's new rows to the [`live::Feed`]); the sampler publishes the server's
//! figures ([`crate::server_stats::Now`]); the HTTP handlers read them, and pass control
//! requests to the collect loop over a channel, which answers each once it has sent the
//! change to every worker. Off loopback every request but the page itself (which holds no
//! data: it asks for the token, typed in, and sends it as a header, never in a URL) must
//! carry the run's token (`Authorization: Bearer <token>`).

pub mod board;
pub mod live;
pub mod metrics;

pub use board::{BUCKETS_S, Binned, Board, ClassRate, Counters, WorkerView};

use crate::control::{Action, Refusal, Request};
use crate::server_stats::Now;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use crest_report::ChangeRow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Changes a live page's `state` frame carries (the latest).
const STATE_CHANGES: usize = 50;

/// How long a control request waits for the collect loop's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// The shared state between the run and the HTTP handlers.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The run's latest published state.
    pub board: Arc<Mutex<Board>>,
    /// The live page's feed.
    pub feed: Arc<live::Feed>,
    server: Arc<watch::Sender<Option<Now>>>,
    report: Arc<Mutex<Option<Arc<str>>>>,
    /// The workers as the last `state` frame to every viewer had them.
    last_workers: Arc<Mutex<String>>,
    requests: mpsc::Sender<Request>,
    token: String,
    loopback: bool,
}

impl Admin {
    /// Publishes `f`'s edit of the board, and the board to the live page's viewers.
    pub fn publish(&self, f: impl FnOnce(&mut Board)) {
        if let Ok(mut b) = self.board.lock() {
            f(&mut b);
        }
        if self.feed.stats().viewers > 0 {
            self.feed.state(&self.state_json(false));
        }
    }

    /// Where the sampler publishes the server's figures.
    pub fn server_feed(&self) -> watch::Sender<Option<Now>> {
        (*self.server).clone()
    }

    /// The server's figures now.
    pub fn server_now(&self) -> Option<Now> {
        *self.server.borrow()
    }

    /// Keeps the run's `report.html` for `GET /report` and tells the viewers.
    pub fn set_report(&self, html: String) {
        if let Ok(mut r) = self.report.lock() {
            *r = Some(Arc::from(html));
        }
        self.publish(|b| b.report = true);
    }

    fn board(&self) -> Board {
        let mut b = self.board.lock().map(|b| b.clone()).unwrap_or_default();
        b.server = self.server_now();
        b.feed = self.feed.stats();
        b
    }

    /// The board as the live page's `state` frame: `/status` without the last interval (the
    /// `point` frames carry it) and with the counters, the last
    /// [`STATE_CHANGES`] changes without their per-worker rows, and the workers only when
    /// they changed since the last frame sent to every viewer (or `whole`, for a new
    /// viewer): a run of many workers does not resend them every interval.
    fn state_json(&self, whole: bool) -> String {
        let mut board = self.board();
        let counters = std::mem::take(&mut board.counters);
        let skip = board.changes.len().saturating_sub(STATE_CHANGES);
        board.changes.drain(..skip);
        for c in &mut board.changes {
            c.workers.clear();
        }
        let Ok(serde_json::Value::Object(mut m)) = serde_json::to_value(&board) else {
            return String::new();
        };
        // The page has the last interval from its `point` frame.
        m.remove("last_interval");
        m.insert(
            "counters".into(),
            serde_json::to_value(&counters).unwrap_or_default(),
        );
        let workers = m
            .get("workers")
            .map(ToString::to_string)
            .unwrap_or_default();
        if let Ok(mut last) = self.last_workers.lock()
            && !whole
        {
            if *last == workers {
                m.remove("workers");
            } else {
                *last = workers;
            }
        }
        serde_json::Value::Object(m).to_string()
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
            feed: Arc::new(live::Feed::default()),
            server: Arc::new(watch::channel(None).0),
            report: Arc::new(Mutex::new(None)),
            last_workers: Arc::new(Mutex::new(String::new())),
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
    // The feed's streams end first, or the graceful shutdown would wait for them.
    let feed = Arc::clone(&admin.feed);
    let stop = async move {
        stop.await;
        feed.close();
    };
    let app = Router::new()
        .route("/", get(page))
        .route("/events", get(events))
        .route("/report", get(report))
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

/// The live page: static (it holds no data, so it is served without the token; it asks
/// for the token when the feed refuses it).
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        crest_report::html::live::PAGE,
    )
        .into_response()
}

/// The live page's server-sent events ([`live`]).
async fn events(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    let rx = a.feed.subscribe(a.state_json(true));
    let frames = tokio_stream::wrappers::ReceiverStream::new(rx);
    let body = axum::body::Body::from_stream(tokio_stream::StreamExt::map(frames, |f| {
        Ok::<_, std::convert::Infallible>(axum::body::Bytes::copy_from_slice(f.as_bytes()))
    }));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// The finished run's report.html.
async fn report(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    let html = a.report.lock().ok().and_then(|r| r.clone());
    match html {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            h.to_string(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "the report is built when the run is over (give --admin-linger to keep the page up after it)\n",
        )
            .into_response(),
    }
}

async fn metrics(State(a): State<Admin>, headers: HeaderMap) -> Response {
    if !a.allowed(&headers) {
        return refused();
    }
    let Ok(text) = metrics::text(a.board()) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode\n").into_response();
    };
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

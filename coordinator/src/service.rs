//! The gRPC side of the coordinator: accepts worker sessions, checks them, and turns the
//! stream into plain [`HubEvent`]s for the run orchestrator. No run logic lives here.
//!
//! Connections come through our own accept loop, not tonic's: it looks at the first byte
//! a client sends (0x16 opens a TLS handshake) so that a listener of one kind tells a
//! client of the other kind what is wrong instead of failing in silence, and logs one
//! line per peer and cause (at most one a minute), never a storm from a retrying worker.
//! - TLS listener (`--control-cert`): a TLS client is handshaken (with a client
//!   certificate check under `--control-client-ca`); a plaintext one gets an HTTP/2
//!   GOAWAY with `INADEQUATE_SECURITY` and nothing else: no plaintext request is ever
//!   read, let alone answered.
//! - Plaintext listener: a TLS client is closed (it sees a handshake that never
//!   completes); a plaintext client is served.

use crest_engine::control_tls::{self, ServerTls};
use crest_model::convert::Registration;
use crest_proto::PROTOCOL_VERSION;
use crest_proto::pb::{
    self, coordinator_message::Msg as Out, coordinator_server::Coordinator,
    worker_message::Msg as In,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// A worker must register this soon after opening its session.
const REGISTER_WITHIN: Duration = Duration::from_secs(5);
/// Messages queued to one worker before sends wait.
const OUTBOX: usize = 256;
/// Events (worker messages above all) queued for the run loop. A full queue stops the
/// sessions from reading their streams, so HTTP/2 flow control pushes back on the workers
/// instead of the coordinator's memory growing when merging falls behind.
pub const EVENTS: usize = 128;
/// A client must send its first byte (TLS ClientHello or HTTP/2 preface) this soon.
const FIRST_BYTE_WITHIN: Duration = Duration::from_secs(5);
/// And finish its TLS handshake this soon.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);
/// One log line per peer address and cause of refusal per this long.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);
/// Connections being sniffed or handshaken at once; more wait in the kernel's backlog.
const MAX_PENDING: usize = 256;
/// HTTP/2 streams one connection may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`):
/// a worker's session is one stream, an admin client's calls a few. A client that opens
/// more has them refused (`RST_STREAM`) instead of costing the coordinator ~500 B each
/// before any token is checked (3,000 connections × 1,000 streams grew it by 1.5 GB).
const MAX_STREAMS: u32 = 8;
/// Connections served at once (workers, relays, admin clients); more wait, handshaken,
/// until one closes. With [`MAX_STREAMS`] this bounds what clients that never present a
/// token can make the coordinator hold: a fleet larger than this goes through relays.
const MAX_CONNECTIONS: usize = 4096;

/// A registered worker as the coordinator sees it.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    /// Worker uuid.
    pub id: String,
    /// Name shown in reports.
    pub name: String,
    /// Host the worker says it runs on.
    pub host: String,
    /// Pinned shards.
    pub shards: u32,
    /// Cores of those shards.
    pub cpus: Vec<u32>,
    /// Crest version of the worker.
    pub version: String,
    /// Worker's address as seen from here.
    pub peer: Option<SocketAddr>,
    /// Our address as the worker dialled it (reachable from that worker).
    pub local: Option<SocketAddr>,
}

/// A registered worker and the way to talk to it.
#[derive(Debug, Clone)]
pub struct WorkerLink {
    /// Who.
    pub info: WorkerInfo,
    /// Messages to the worker.
    pub tx: mpsc::Sender<pb::CoordinatorMessage>,
}

impl WorkerLink {
    /// A worker named `w{i}` (id `id-{i}`, one shard) and the receiving end of what the
    /// coordinator sends it: for the orchestrator's unit tests.
    #[cfg(test)]
    pub fn fake(i: usize) -> (Self, mpsc::Receiver<pb::CoordinatorMessage>) {
        let (tx, rx) = mpsc::channel(64);
        let info = WorkerInfo {
            id: format!("id-{i}"),
            name: format!("w{i}"),
            host: "test".into(),
            shards: 1,
            cpus: vec![0],
            version: String::new(),
            peer: None,
            local: None,
        };
        (WorkerLink { info, tx }, rx)
    }

    /// Sends a message; false when the worker's stream is gone.
    pub async fn send(&self, m: Out) -> bool {
        self.tx
            .send(pb::CoordinatorMessage { msg: Some(m) })
            .await
            .is_ok()
    }
}

/// What the hub reports to the orchestrator.
#[derive(Debug)]
pub enum HubEvent {
    /// A worker registered.
    Joined(WorkerLink),
    /// A worker was refused (version, token, ...).
    Refused {
        /// Its name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A message from a registered worker.
    Message(String, In),
    /// A registered worker's stream ended.
    Left(String, String),
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct Hub {
    events: mpsc::Sender<HubEvent>,
    token: String,
    coordinator_id: String,
    /// Every session's outbound queue, for the heartbeats: one timer beats for the whole
    /// fleet (a timer task per session was 1,000 wake-ups per beat at 1,000 workers).
    beats: Arc<Mutex<Vec<mpsc::Sender<pb::CoordinatorMessage>>>>,
    /// Whether the heartbeat task runs (started with the first session, inside the runtime).
    beating: Arc<AtomicBool>,
}

impl Hub {
    /// A hub that reports to `events` and requires `token` (empty = none).
    pub fn new(events: mpsc::Sender<HubEvent>, token: String) -> Self {
        Self {
            events,
            token,
            coordinator_id: uuid::Uuid::new_v4().to_string(),
            beats: Arc::default(),
            beating: Arc::default(),
        }
    }

    /// Adds a session's queue to the heartbeats, starting the heartbeat task once. The task
    /// sends every [`crest_proto::HEARTBEAT`] to every open session (a full queue already
    /// has words for its worker; a closed one is dropped) and ends with the hub.
    fn beat(&self, tx: mpsc::Sender<pb::CoordinatorMessage>) {
        if let Ok(mut b) = self.beats.lock() {
            b.push(tx);
        }
        if self.beating.swap(true, Ordering::AcqRel) {
            return;
        }
        let beats = Arc::downgrade(&self.beats);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(crest_proto::HEARTBEAT);
            loop {
                tick.tick().await;
                let Some(beats) = beats.upgrade() else { break };
                let Ok(mut txs) = beats.lock() else { break };
                txs.retain(|tx| {
                    let m = pb::CoordinatorMessage {
                        msg: Some(Out::Heartbeat(pb::Heartbeat {})),
                    };
                    !matches!(tx.try_send(m), Err(mpsc::error::TrySendError::Closed(_)))
                });
            }
        });
    }

    /// Checks a registration: every field in range (`crest_model::convert`), then the
    /// protocol version and the token. `Err` carries the refusal reason.
    ///
    /// # Errors
    /// The refusal reason, naming the worker and what would be right.
    pub fn check(&self, r: &pb::Register) -> Result<Registration, String> {
        let name: String = r.name.chars().take(64).collect();
        if r.protocol_version != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version mismatch: worker {name} speaks version {} (crest {}), this coordinator speaks version {} (crest {}); run the same Crest release on both",
                r.protocol_version,
                r.crest_version.chars().take(32).collect::<String>(),
                PROTOCOL_VERSION,
                env!("CARGO_PKG_VERSION")
            ));
        }
        if !self.token.is_empty() && r.token != self.token {
            return Err(format!(
                "worker {name} gave {} token; start it with the coordinator's --token (or CREST_TOKEN)",
                if r.token.is_empty() { "no" } else { "a wrong" }
            ));
        }
        Registration::try_from(r).map_err(|e| format!("worker {name}: registration refused: {e}"))
    }
}

type OutStream = Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Coordinator for Hub {
    type SessionStream = OutStream;

    async fn session(
        &self,
        req: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<OutStream>, Status> {
        let peer = req.remote_addr();
        let local = req.local_addr();
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(REGISTER_WITHIN, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Register within 5 s"))??;
        let Some(pb::WorkerMessage {
            msg: Some(In::Register(reg)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "the first message of a session must be Register",
            ));
        };
        let (tx, rx) = mpsc::channel::<pb::CoordinatorMessage>(OUTBOX);
        let reg = match self.check(&reg) {
            Ok(checked) => checked,
            Err(reason) => {
                let _ = self
                    .events
                    .send(HubEvent::Refused {
                        name: reg.name.clone(),
                        reason: reason.clone(),
                    })
                    .await;
                let _ = tx
                    .send(pb::CoordinatorMessage {
                        msg: Some(Out::Refused(pb::Refused { reason })),
                    })
                    .await;
                drop(tx);
                return Ok(Response::new(Box::pin(ReceiverStream::new(rx).map_ok())));
            }
        };
        let _ = tx
            .send(pb::CoordinatorMessage {
                msg: Some(Out::Welcome(pb::Welcome {
                    coordinator_id: self.coordinator_id.clone(),
                })),
            })
            .await;
        let info = WorkerInfo {
            id: reg.worker_id.clone(),
            name: reg.name.clone(),
            host: reg.host.clone(),
            shards: reg.shards,
            cpus: reg.cpus.clone(),
            version: reg.crest_version.clone(),
            peer,
            local,
        };
        let id = info.id.clone();
        let _ = self
            .events
            .send(HubEvent::Joined(WorkerLink {
                info,
                tx: tx.clone(),
            }))
            .await;
        // Heartbeats keep the worker's dead man's switch from firing while idle.
        self.beat(tx.clone());
        let events = self.events.clone();
        tokio::spawn(async move {
            let reason = loop {
                match inbound.message().await {
                    Ok(Some(pb::WorkerMessage { msg: Some(m) })) => {
                        if events.send(HubEvent::Message(id.clone(), m)).await.is_err() {
                            break "coordinator stopped".to_string();
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break "session closed".to_string(),
                    Err(s) => break crest_proto::broken_session("the worker", s.message()),
                }
            };
            let _ = events.send(HubEvent::Left(id, reason)).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx).map_ok())))
    }
}

type Wrap = fn(pb::CoordinatorMessage) -> Result<pb::CoordinatorMessage, Status>;

trait MapOk: Stream<Item = pb::CoordinatorMessage> + Sized {
    fn map_ok(self) -> tokio_stream::adapters::Map<Self, Wrap> {
        tokio_stream::StreamExt::map(self, Ok as Wrap)
    }
}
impl<S: Stream<Item = pb::CoordinatorMessage>> MapOk for S {}

/// Serves the hub on `listener` until `shutdown` resolves: TLS when `tls` is given,
/// plaintext otherwise (see the module docs for what each tells a client of the other kind).
///
/// # Errors
/// Transport errors from tonic.
pub async fn serve(
    hub: Hub,
    listener: tokio::net::TcpListener,
    tls: Option<ServerTls>,
    control: Option<crate::admin::Admin>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(MAX_STREAMS))
        .http2_keepalive_interval(Some(crest_proto::SERVER_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(crest_proto::KEEPALIVE_TIMEOUT))
        .add_service(pb::coordinator_server::CoordinatorServer::new(hub))
        .add_optional_service(control.map(|a| pb::control_server::ControlServer::new(Control(a))));
    let log = Arc::new(RefusalLog::default());
    match tls {
        None => {
            serve_from(router, listener, log, shutdown, |stream, peer, log, tx| async move {
                match first_byte(&stream).await {
                    Some(TLS_HANDSHAKE) => log.refused(
                        peer,
                        "tls-on-plaintext",
                        "a TLS client on this plaintext listener; start crest run with --control-cert/--control-key, or dial the worker with http://",
                    ),
                    Some(_) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    None => {}
                }
            })
            .await
        }
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
            let mutual = tls.mutual;
            serve_from(router, listener, log, shutdown, move |stream, peer, log, tx| {
                let acceptor = acceptor.clone();
                async move {
                    match first_byte(&stream).await {
                        Some(TLS_HANDSHAKE) => {
                            match tokio::time::timeout(
                                HANDSHAKE_WITHIN,
                                acceptor.accept(stream).into_fallible(),
                            )
                            .await
                            {
                                Ok(Ok(s)) => {
                                    let _ = tx.send(Ok(s)).await;
                                }
                                Ok(Err((e, stream))) => {
                                    let (kind, why) = handshake_refusal(&e, mutual);
                                    log.refused(peer, kind, &why);
                                    // The alert is sent; a close now would make the
                                    // client's next write (TLS 1.3: its HTTP/2 preface
                                    // follows its certificate at once) draw a reset that
                                    // can discard the unread alert.
                                    linger_close(stream).await;
                                }
                                Err(_) => log.refused(
                                    peer,
                                    "tls-timeout",
                                    &format!(
                                        "no TLS handshake within {} s",
                                        HANDSHAKE_WITHIN.as_secs()
                                    ),
                                ),
                            }
                        }
                        Some(_) => {
                            log.refused(
                                peer,
                                "plaintext-on-tls",
                                "a plaintext client on this TLS listener; dial the worker with --coordinator https://… and --control-ca (the CA that signed --control-cert)",
                            );
                            refuse_plaintext(stream).await;
                        }
                        None => {}
                    }
                }
            })
            .await
        }
    }
}

/// Serves `router` on the connections `handle` admits: [`accept_loop`] hands it each
/// accepted connection and a sender, and what it sends is served until `shutdown`.
async fn serve_from<IO, F, Fut>(
    router: tonic::transport::server::Router,
    listener: tokio::net::TcpListener,
    log: Arc<RefusalLog>,
    shutdown: impl std::future::Future<Output = ()>,
    handle: F,
) -> Result<(), tonic::transport::Error>
where
    IO: tonic::transport::server::Connected
        + tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + Send
        + Unpin
        + 'static,
    F: Fn(TcpStream, SocketAddr, Arc<RefusalLog>, mpsc::Sender<Result<IO, std::io::Error>>) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, mut admitted) = mpsc::channel::<Result<IO, std::io::Error>>(16);
    let accept = tokio::spawn(accept_loop(listener, log, move |stream, peer, log| {
        handle(stream, peer, log, tx.clone())
    }));
    // Each connection served holds one of MAX_CONNECTIONS permits until tonic drops it.
    let (serve_tx, serve_rx) = mpsc::channel::<Result<Counted<IO>, std::io::Error>>(1);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let gate = tokio::spawn(async move {
        while let Some(io) = admitted.recv().await {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let counted = io.map(|io| Counted { io, _slot: permit });
            if serve_tx.send(counted).await.is_err() {
                return;
            }
        }
    });
    let res = router
        .serve_with_incoming_shutdown(ReceiverStream::new(serve_rx), shutdown)
        .await;
    accept.abort();
    gate.abort();
    res
}

/// A served connection and its place among [`MAX_CONNECTIONS`], given back when tonic
/// drops it (closed, or the server stopped).
struct Counted<IO> {
    io: IO,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Counted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counted<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Accepts connections and hands each to `handle` on its own task, at most
/// [`MAX_PENDING`] at once.
async fn accept_loop<F, Fut>(listener: tokio::net::TcpListener, log: Arc<RefusalLog>, handle: F)
where
    F: Fn(TcpStream, SocketAddr, Arc<RefusalLog>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING));
    loop {
        let Ok(permit) = pending.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: try again shortly.
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let fut = handle(stream, peer, log.clone());
        tokio::spawn(async move {
            fut.await;
            drop(permit);
        });
    }
}

/// The first byte the client sent, without consuming it; `None` when it sent nothing
/// in time or closed.
async fn first_byte(stream: &TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match tokio::time::timeout(FIRST_BYTE_WITHIN, stream.peek(&mut b)).await {
        Ok(Ok(1)) => Some(b[0]),
        _ => None,
    }
}

/// Answers a plaintext HTTP/2 client on the TLS listener: a SETTINGS frame (the server
/// preface the client waits for) and a GOAWAY with `INADEQUATE_SECURITY` (RFC 9113 §7)
/// saying TLS is required, then the close. Whatever the client sent is read and thrown
/// away unparsed, so the close is a FIN the client reads after the GOAWAY, not a reset.
async fn refuse_plaintext(mut stream: TcpStream) {
    const DEBUG: &[u8] = b"this coordinator requires TLS: dial https:// with --control-ca";
    let mut out = Vec::with_capacity(9 + 9 + 8 + DEBUG.len());
    // SETTINGS, empty: length 0, type 0x4, flags 0, stream 0.
    out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    // GOAWAY: type 0x7, stream 0; last stream id 0, the error code, debug data.
    let len = (8 + DEBUG.len()) as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&control_tls::INADEQUATE_SECURITY.to_be_bytes());
    out.extend_from_slice(DEBUG);
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.write_all(&out)).await;
    linger_close(stream).await;
}

/// Closes `stream` so that what was last written reaches the client: our side's FIN
/// first, then whatever the client still sends is read and thrown away (at most 64 KiB
/// or 2 s), so the client is not answered with a reset that discards unread data.
async fn linger_close(mut stream: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let mut total = 0usize;
        while total < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}

/// Why a TLS handshake was refused, in words, and a short kind for the log's rate limit.
fn handshake_refusal(e: &std::io::Error, mutual: bool) -> (&'static str, String) {
    use tokio_rustls::rustls::Error as R;
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<R>());
    match inner {
        Some(R::NoCertificatesPresented) => (
            "no-client-cert",
            "the worker presented no client certificate, and --control-client-ca requires one; give the worker --control-client-cert/--control-client-key".to_string(),
        ),
        Some(R::InvalidCertificate(c)) if mutual => (
            "bad-client-cert",
            format!(
                "the worker's client certificate was rejected ({c:?}); it must be signed by --control-client-ca"
            ),
        ),
        Some(R::AlertReceived(a)) => (
            "alert",
            format!(
                "the worker ended the TLS handshake ({a:?}): it does not trust this coordinator's certificate; give it --control-ca with the CA that signed --control-cert"
            ),
        ),
        Some(other) => ("tls", format!("TLS handshake failed: {other}")),
        None => ("tls", format!("TLS handshake failed: {e}")),
    }
}

/// Logs refused connections: one line per peer address and cause per
/// [`REFUSAL_LOG_EVERY`], so a worker retrying with backoff is told once, not in a storm.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Mutex<HashMap<(std::net::IpAddr, &'static str), std::time::Instant>>,
}

impl RefusalLog {
    fn refused(&self, peer: SocketAddr, kind: &'static str, why: &str) {
        if self.should_log(peer, kind) {
            tracing::warn!("refused a control connection from {peer}: {why}");
        }
    }

    fn should_log(&self, peer: SocketAddr, kind: &'static str) -> bool {
        let Ok(mut last) = self.last.lock() else {
            return true;
        };
        // Bounded: a flood of distinct addresses forgets the oldest news, not memory.
        if last.len() >= 4096 {
            last.clear();
        }
        let now = std::time::Instant::now();
        match last.get(&(peer.ip(), kind)) {
            Some(t) if now.duration_since(*t) < REFUSAL_LOG_EVERY => false,
            _ => {
                last.insert((peer.ip(), kind), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(version: u32, token: &str) -> pb::Register {
        pb::Register {
            protocol_version: version,
            worker_id: "id".into(),
            name: "w1".into(),
            host: "h".into(),
            shards: 2,
            token: token.into(),
            crest_version: "9.9.9".into(),
            cpus: vec![0, 1],
        }
    }

    #[test]
    fn a_worker_of_another_protocol_version_is_refused_naming_both() {
        let (tx, _rx) = mpsc::channel(EVENTS);
        let hub = Hub::new(tx, String::new());
        assert!(hub.check(&reg(PROTOCOL_VERSION, "")).is_ok());
        let e = hub.check(&reg(PROTOCOL_VERSION + 1, "")).unwrap_err();
        assert!(
            e.contains(&format!("version {}", PROTOCOL_VERSION + 1)),
            "{e}"
        );
        assert!(
            e.contains(&format!("speaks version {PROTOCOL_VERSION}")),
            "{e}"
        );
    }

    #[test]
    fn a_retrying_peer_is_logged_once_per_cause() {
        let log = RefusalLog::default();
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let a2: SocketAddr = "10.0.0.1:5001".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        assert!(log.should_log(a, "plaintext-on-tls"));
        assert!(
            !log.should_log(a2, "plaintext-on-tls"),
            "same host, new port: still quiet"
        );
        assert!(log.should_log(a, "no-client-cert"), "a new cause is told");
        assert!(
            log.should_log(b, "plaintext-on-tls"),
            "another host is told"
        );
    }

    #[test]
    fn the_token_is_required_when_set() {
        let (tx, _rx) = mpsc::channel(EVENTS);
        let hub = Hub::new(tx, "s3cret".into());
        assert!(hub.check(&reg(PROTOCOL_VERSION, "s3cret")).is_ok());
        assert!(
            hub.check(&reg(PROTOCOL_VERSION, ""))
                .unwrap_err()
                .contains("no token")
        );
        assert!(
            hub.check(&reg(PROTOCOL_VERSION, "x"))
                .unwrap_err()
                .contains("wrong token")
        );
    }
}

/// The gRPC `Control` service: the admin API's runtime control on the workers' listener,
/// behind the run's token.
#[derive(Debug, Clone)]
pub struct Control(pub crate::admin::Admin);

impl Control {
    fn refused() -> Status {
        Status::unauthenticated("give the run's --token in the request's token field")
    }

    async fn change(
        &self,
        token: &str,
        action: crate::control::Action,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        use crate::control::Refusal;
        if !self.0.token_ok(token) {
            return Err(Self::refused());
        }
        match self.0.request(action, "grpc").await {
            Ok(r) => Ok(Response::new(pb::ChangeReply {
                seq: r.seq,
                action: r.action.to_string(),
                asked_s: r.asked_s,
                at_s: r.at_s,
                from_rps: r.from_rps,
                to_rps: r.to_rps,
            })),
            Err(Refusal::Bad(why)) => Err(Status::invalid_argument(why)),
            Err(Refusal::Conflict(why)) => Err(Status::failed_precondition(why)),
        }
    }
}

#[tonic::async_trait]
impl pb::control_server::Control for Control {
    async fn set_rate(
        &self,
        req: Request<pb::SetRateRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        let r = req.into_inner();
        let class = (!r.class.is_empty()).then_some(r.class);
        self.change(&r.token, crate::control::Action::Rate { rps: r.rps, class })
            .await
    }

    async fn pause(
        &self,
        req: Request<pb::ControlRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        let t = req.into_inner().token;
        self.change(&t, crate::control::Action::Pause).await
    }

    async fn resume(
        &self,
        req: Request<pb::ControlRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        let t = req.into_inner().token;
        self.change(&t, crate::control::Action::Resume).await
    }

    async fn stop(
        &self,
        req: Request<pb::ControlRequest>,
    ) -> Result<Response<pb::ChangeReply>, Status> {
        let t = req.into_inner().token;
        self.change(&t, crate::control::Action::Stop).await
    }

    async fn status(
        &self,
        req: Request<pb::ControlRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        if !self.0.token_ok(&req.into_inner().token) {
            return Err(Self::refused());
        }
        Ok(Response::new(pb::StatusReply {
            json: self.0.status_json(),
        }))
    }
}

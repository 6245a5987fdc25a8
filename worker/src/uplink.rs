//! One session with whoever this process reports to (a coordinator, or a relay between):
//! the loop `crest-worker` and `crest relay` share. It dials, registers, answers the clock
//! pings, keeps the dead man's switch (nothing heard for [`DEAD_MAN`] ends the session, and
//! with it any run), sends a heartbeat each [`WORKER_HEARTBEAT`] in which nothing else went
//! up, and queues what goes up in a bounded [`Outbox`], so the work below never blocks on a
//! slow coordinator.
//!
//! What differs is the work below the session, a [`Below`]: a worker's shards
//! ([`crate::agent`]), or a relay's own workers (`crest relay`). It gets the orders the
//! session does not handle itself (`StartRun`, `Abort`, `ReleaseCheckpoint`, `Steer`) and
//! its own events, and answers through the outbox.

use crate::control_tls::{self, DialFailure};
use crest_model::clock::unix_ns;
use crest_proto::pb::{
    self, coordinator_client::CoordinatorClient, coordinator_message::Msg as In,
    worker_message::Msg as Out,
};
use crest_proto::{DEAD_MAN, WORKER_HEARTBEAT};
use std::collections::VecDeque;
use std::future::Future;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Most bytes of encoded messages a session queues while the coordinator is not taking
/// them (HTTP/2 flow control pushes back when its merging falls behind).
pub const MAX_OUTBOX_BYTES: usize = 64 << 20;

/// How long a dial may take, from the TCP connect to the coordinator's answer to the
/// session (TLS and HTTP/2 handshakes included): a coordinator on the same network
/// answers in milliseconds.
pub const DIAL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a session ended other than normally.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The coordinator refused this process: retrying cannot fix it.
    #[error("refused: {0}")]
    Refused(String),
    /// No session came up: the dial or the first exchange failed.
    #[error("{}", .0.line)]
    Dial(DialFailure),
    /// The session broke while a run was active (that run is discarded).
    #[error("the session broke during a run ({0}); the run was stopped and discarded")]
    LostMidRun(String),
    /// Nothing heard from above for [`DEAD_MAN`].
    #[error("coordinator silent for more than {DEAD_MAN:?}")]
    Silent,
    /// The outbound stream is gone.
    #[error("outbound stream closed")]
    Closed,
    /// The coordinator stopped taking messages while results kept coming.
    #[error(
        "the coordinator took no message while {0} bytes of results queued up (more than {MAX_OUTBOX_BYTES}); the run was stopped: a longer --interval or fewer workers per coordinator would let it keep up"
    )]
    Backlog(usize),
    /// The work below lost its run (a relay whose worker left mid-run): the session ends
    /// so the coordinator marks this process lost.
    #[error("{0}")]
    Lost(String),
}

/// The work below a session.
pub trait Below {
    /// What happens below (a shard's event, a relay's hub event).
    type Event;

    /// The next event (pending when none can come; `None` when none ever will again,
    /// which ends the session normally).
    fn next(&mut self) -> impl Future<Output = Option<Self::Event>>;

    /// An order from above the session does not handle itself.
    fn order(&mut self, m: In, out: &mut Outbox) -> impl Future<Output = Result<(), SessionError>>;

    /// An event from below; `Ok(Some(why))` ends the session normally (the relay's
    /// workers changed and it registers again).
    fn event(
        &mut self,
        ev: Self::Event,
        out: &mut Outbox,
    ) -> impl Future<Output = Result<Option<String>, SessionError>>;

    /// Ten times a second, with the dead man's switch (a relay checks its workers, a
    /// worker acknowledges the trace its shards took); `Ok(Some(why))` ends the session
    /// normally.
    fn watch(
        &mut self,
        out: &mut Outbox,
    ) -> impl Future<Output = Result<Option<String>, SessionError>>;

    /// Whether a run is in progress: a session that ends now breaks it.
    fn busy(&self) -> bool;
}

/// Where the session dials: the coordinator's URL (for messages), its endpoint, and
/// whether it is TLS.
#[derive(Debug, Clone, Copy)]
pub struct Dial<'a> {
    /// The URL as given.
    pub url: &'a str,
    /// The endpoint made from it.
    pub endpoint: &'a tonic::transport::Endpoint,
    /// `https://`.
    pub tls: bool,
}

/// One session: registers with `register`, then carries orders down to `below` and its
/// messages up until the session ends. `Ok` carries why it ended normally (the
/// coordinator closed it while no run was active: the usual end of a `crest run`).
///
/// # Errors
/// [`SessionError`]: a refusal, a failed dial, a broken or silent session, a backlog.
pub async fn session<B: Below>(
    dial: Dial<'_>,
    register: pb::Register,
    below: &mut B,
) -> Result<String, SessionError> {
    let failed = |e: &(dyn std::error::Error + 'static)| {
        SessionError::Dial(control_tls::explain_dial(dial.url, dial.tls, e))
    };
    // A peer that accepts the connection and never answers (a TLS dial to a plaintext
    // port that waits for a line, a plaintext dial to a port that waits for a TLS hello)
    // would hold the dial forever and say nothing: it gets DIAL_DEADLINE in all.
    let deadline = tokio::time::Instant::now() + DIAL_DEADLINE;
    let channel = tokio::time::timeout_at(deadline, dial.endpoint.connect())
        .await
        .map_err(|_| SessionError::Dial(control_tls::no_answer(dial.url, dial.tls, DIAL_DEADLINE)))?
        .map_err(|e| failed(&e))?;
    let mut client = CoordinatorClient::new(channel);
    let (tx, rx) = mpsc::channel::<pb::WorkerMessage>(256);
    let mut out = Outbox::new(tx);
    out.push(Out::Register(register))?;
    let mut inbound = tokio::time::timeout_at(deadline, client.session(ReceiverStream::new(rx)))
        .await
        .map_err(|_| SessionError::Dial(control_tls::no_session(dial.url, DIAL_DEADLINE)))?
        .map_err(|e| failed(&e))?
        .into_inner();
    let mut heartbeat = tokio::time::interval(WORKER_HEARTBEAT);
    // Checked ten times a second, so load stops at most 1.1 s after the last word.
    let mut watchdog = tokio::time::interval(DEAD_MAN / 10);
    let mut last_heard = Instant::now();
    let mut welcomed = false;
    loop {
        tokio::select! {
            m = inbound.message() => {
                let m = match m {
                    Ok(Some(m)) => m,
                    Ok(None) if below.busy() => {
                        return Err(SessionError::LostMidRun("the coordinator closed the session".into()));
                    }
                    Ok(None) => return Ok("the coordinator closed the session".into()),
                    // Before the welcome it is a dial problem (a TLS alert, a GOAWAY).
                    Err(e) if !welcomed => return Err(failed(&e)),
                    Err(e) if below.busy() => return Err(SessionError::LostMidRun(crest_proto::broken_session("the coordinator", e.message()))),
                    // The coordinator went away between runs: its `crest run` is over.
                    Err(e) => return Ok(crest_proto::broken_session("the coordinator", e.message())),
                };
                last_heard = Instant::now();
                match m.msg {
                    Some(In::Welcome(_)) => {
                        welcomed = true;
                        tracing::info!(coordinator = %dial.url, "registered");
                    }
                    Some(In::Refused(r)) => return Err(SessionError::Refused(r.reason)),
                    Some(In::Ping(p)) => {
                        let t2_unix_ns = unix_ns();
                        let (seq, t1_unix_ns) = (p.seq, p.t1_unix_ns);
                        out.push(Out::Pong(pb::Pong { seq, t1_unix_ns, t2_unix_ns }))?;
                    }
                    Some(In::Heartbeat(_)) | None => {}
                    Some(order) => below.order(order, &mut out).await?,
                }
            }
            ev = below.next() => {
                let Some(ev) = ev else { return Ok("the work below stopped".into()) };
                if let Some(why) = below.event(ev, &mut out).await? {
                    return Ok(why);
                }
            }
            _ = watchdog.tick() => {
                if last_heard.elapsed() > DEAD_MAN {
                    return Err(SessionError::Silent);
                }
                if let Some(why) = below.watch(&mut out).await? {
                    return Ok(why);
                }
            }
            r = out.flush_one() => r?,
            _ = heartbeat.tick() => if welcomed {
                out.beat()?;
            }
        }
    }
}

/// The session's outbound messages in order: handed to the stream when it has room, queued
/// (encoded size counted, at most [`MAX_OUTBOX_BYTES`]) when it has none, so the work below
/// never blocks on a slow coordinator and keeps draining its results, which would
/// otherwise pile up unmerged (full histograms) in its own channels.
#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::Sender<pb::WorkerMessage>,
    /// Messages waiting for room, each with its encoded size (counted in `bytes`).
    queue: VecDeque<(pb::WorkerMessage, usize)>,
    bytes: usize,
    /// Whether a message was pushed since the heartbeat timer last looked.
    sent: bool,
}

impl Outbox {
    /// An outbox in front of `tx`.
    pub fn new(tx: mpsc::Sender<pb::WorkerMessage>) -> Self {
        Self {
            tx,
            queue: VecDeque::new(),
            bytes: 0,
            sent: false,
        }
    }

    /// Sends `m` after everything queued before it.
    ///
    /// # Errors
    /// [`SessionError::Closed`] when the stream is gone, [`SessionError::Backlog`] when
    /// the queue passes [`MAX_OUTBOX_BYTES`].
    pub fn push(&mut self, m: Out) -> Result<(), SessionError> {
        let m = pb::WorkerMessage { msg: Some(m) };
        self.sent = true;
        if self.queue.is_empty() {
            match self.tx.try_send(m) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Closed(_)) => return Err(SessionError::Closed),
                Err(mpsc::error::TrySendError::Full(m)) => self.enqueue(m)?,
            }
        } else {
            self.enqueue(m)?;
        }
        Ok(())
    }

    /// A heartbeat tick: a heartbeat goes up unless something else went up since the last
    /// tick (an interval a second, in a run) or messages wait for room: either already
    /// tells the coordinator this process is alive.
    ///
    /// # Errors
    /// As [`Outbox::push`].
    fn beat(&mut self) -> Result<(), SessionError> {
        if std::mem::take(&mut self.sent) || !self.queue.is_empty() {
            return Ok(());
        }
        self.push(Out::Heartbeat(pb::Heartbeat {}))?;
        self.sent = false;
        Ok(())
    }

    fn enqueue(&mut self, m: pb::WorkerMessage) -> Result<(), SessionError> {
        use prost::Message as _;
        let size = m.encoded_len();
        self.bytes += size;
        self.queue.push_back((m, size));
        if self.bytes > MAX_OUTBOX_BYTES {
            return Err(SessionError::Backlog(self.bytes));
        }
        Ok(())
    }

    /// Waits for room in the stream while messages are queued (never resolves otherwise),
    /// then hands it the oldest.
    async fn flush_one(&mut self) -> Result<(), SessionError> {
        if self.queue.is_empty() {
            return std::future::pending().await;
        }
        let permit = self.tx.reserve().await.map_err(|_| SessionError::Closed)?;
        if let Some((m, size)) = self.queue.pop_front() {
            self.bytes -= size;
            permit.send(m);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(n: u64) -> Out {
        Out::Pong(pb::Pong {
            seq: n,
            t1_unix_ns: 0,
            t2_unix_ns: 0,
        })
    }

    fn seq(m: &pb::WorkerMessage) -> u64 {
        match &m.msg {
            Some(Out::Pong(p)) => p.seq,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_full_stream_queues_in_order_and_a_runaway_queue_ends_the_session() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut out = Outbox::new(tx);
        for n in 0..5 {
            out.push(hb(n)).unwrap();
        }
        assert_eq!(out.queue.len(), 3, "two in the stream, three queued");
        assert_eq!(seq(&rx.recv().await.unwrap()), 0);
        out.flush_one().await.unwrap();
        out.push(hb(5)).unwrap();
        assert_eq!(out.queue.len(), 3, "a new message waits behind the queue");
        let mut got = vec![seq(&rx.recv().await.unwrap())];
        while !out.queue.is_empty() {
            out.flush_one().await.unwrap();
            got.push(seq(&rx.recv().await.unwrap()));
        }
        got.push(seq(&rx.recv().await.unwrap()));
        assert_eq!(got, vec![1, 2, 3, 4, 5], "in order");
        assert_eq!(out.bytes, 0);
        // Nobody reads: the queue grows to its cap, then the session ends with a reason.
        let big = Out::Failed(pb::RunFailed {
            run_id: String::new(),
            reason: "x".repeat(1 << 20),
            kind: 0,
        });
        let mut err = None;
        for _ in 0..(MAX_OUTBOX_BYTES >> 20) + 4 {
            if let Err(e) = out.push(big.clone()) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("the cap ends the session").to_string();
        assert!(e.contains("a longer --interval"), "{e}");
        drop(rx);
        assert!(matches!(out.flush_one().await, Err(SessionError::Closed)));
    }

    fn beats(rx: &mut mpsc::Receiver<pb::WorkerMessage>) -> usize {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter(|m| matches!(m.msg, Some(Out::Heartbeat(_))))
            .count()
    }

    #[test]
    fn a_heartbeat_goes_only_on_a_tick_with_nothing_else_sent_since_the_last() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut out = Outbox::new(tx);
        out.beat().unwrap();
        assert_eq!(beats(&mut rx), 1, "nothing went up: a beat");
        out.beat().unwrap();
        assert_eq!(beats(&mut rx), 1, "its own beat does not count as news");
        out.push(hb(1)).unwrap();
        out.beat().unwrap();
        assert_eq!(
            beats(&mut rx),
            0,
            "a message since the last tick is proof of life"
        );
        out.beat().unwrap();
        assert_eq!(beats(&mut rx), 1, "a tick with nothing since: a beat again");
        // Messages waiting for room tell the same.
        for n in 0..20 {
            out.push(hb(n)).unwrap();
        }
        out.sent = false;
        out.beat().unwrap();
        assert_eq!(out.queue.len(), 4, "no beat queued behind them");
    }
}

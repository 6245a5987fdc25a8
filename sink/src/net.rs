//! What both protocols' servers share, below both: the accept loop with backoff and
//! shutdown ([`accept_loop`]), and the budget of request bytes a connection has read and
//! not yet run ([`Held`]), counted per connection and over all of them against
//! [`crate::Limits`].
//!
//! It knows nothing of RESP or memcached: each server hands it a function that serves one
//! accepted connection, and says what a connection past a limit is told.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::state::Limits;

/// Bytes a connection asks the kernel for per read, and its buffers' starting size.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// A connection's buffer above this size is given back once it is empty, so one large
/// value does not pin its memory for the connection's lifetime. What a connection may
/// hold at most is in [`crate::Limits`].
pub(crate) const MAX_IDLE_BUFFER: usize = 1024 * 1024;

/// Accept errors such as EMFILE are retried after a pause that doubles up to this bound.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(1);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Repeated accept warnings are logged at most this often.
const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// What woke the accept loop.
enum Event {
    Shutdown,
    Accepted(io::Result<(TcpStream, SocketAddr)>),
    /// A connection task finished; reaping it keeps the set from growing.
    Reaped,
}

/// Accepts connections until `shutdown` resolves, running `serve` on each in a task of
/// its own; then stops accepting and closes every connection (see [`crate::serve`]).
pub(crate) async fn accept_loop<F, Fut>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    mut serve: F,
) -> io::Result<()>
where
    F: FnMut(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut shutdown = pin!(shutdown);
    // Dropping the set aborts every connection task, which closes its socket: that is
    // how connections end on shutdown, and on the error return below.
    let mut connections = JoinSet::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut last_warning: Option<Instant> = None;
    loop {
        let event = tokio::select! {
            () = &mut shutdown => Event::Shutdown,
            accepted = listener.accept() => Event::Accepted(accepted),
            Some(_) = connections.join_next(), if !connections.is_empty() => Event::Reaped,
        };
        match event {
            Event::Shutdown => break,
            Event::Reaped => {}
            Event::Accepted(Ok((stream, _peer))) => {
                backoff = ACCEPT_BACKOFF_MIN;
                connections.spawn(serve(stream));
            }
            Event::Accepted(Err(error)) if is_transient(&error) => {
                if last_warning.is_none_or(|at| at.elapsed() >= WARN_INTERVAL) {
                    tracing::warn!(%error, retry_in = ?backoff, "sink: accept failed");
                    last_warning = Some(Instant::now());
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
            Event::Accepted(Err(error)) => return Err(error),
        }
    }
    drop(listener);
    connections.shutdown().await;
    Ok(())
}

/// Accept errors that say something about one connection or about momentary resource
/// pressure, not about the listener; accept(2) on Linux says to retry these.
fn is_transient(error: &io::Error) -> bool {
    use io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted, TimedOut, WouldBlock};
    matches!(
        error.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | TimedOut | WouldBlock
    ) || matches!(
        error.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EPERM
                | libc::ENETDOWN
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::EHOSTUNREACH
                | libc::ENOPROTOOPT
                | libc::EOPNOTSUPP
        )
    )
}

/// One connection's unrun request bytes, counted in the server's total for as long as it
/// holds them, however the connection ends.
pub(crate) struct Held<'a> {
    /// Unrun request bytes over every connection.
    total: &'a AtomicUsize,
    /// The most one connection has held.
    peak: &'a AtomicUsize,
    limits: Limits,
    bytes: usize,
}

impl<'a> Held<'a> {
    /// Nothing held yet, counted into `total` and `peak` against `limits`.
    pub(crate) fn new(total: &'a AtomicUsize, peak: &'a AtomicUsize, limits: Limits) -> Self {
        Held {
            total,
            peak,
            limits,
            bytes: 0,
        }
    }

    /// The connection now holds `len` bytes; past a limit, why it must be closed.
    pub(crate) fn set(&mut self, len: usize) -> Result<(), String> {
        if len <= self.bytes {
            self.total.fetch_sub(self.bytes - len, Ordering::Relaxed);
            self.bytes = len;
            return Ok(());
        }
        let all = self.total.fetch_add(len - self.bytes, Ordering::Relaxed) + (len - self.bytes);
        self.bytes = len;
        self.peak.fetch_max(len, Ordering::Relaxed);
        let limits = &self.limits;
        if len > limits.query_buffer {
            Err(format!(
                "Protocol error: an unfinished request of {len} bytes passes the sink's \
                 query buffer limit of {} bytes (client-query-buffer-limit)",
                limits.query_buffer
            ))
        } else if all > limits.clients_input {
            Err(format!(
                "unfinished requests of all clients take {all} bytes, past the sink's \
                 limit of {} bytes (this client holds {len})",
                limits.clients_input
            ))
        } else {
            Ok(())
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

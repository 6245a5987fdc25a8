//! The network side: the accept loop with backoff, and each connection's
//! read → parse → dispatch → write cycle. The top of the crate under [`crate::serve`], its
//! only user: it drives [`crate::cmd::execute`] on the state in [`crate::state`].
//!
//! Each connection parses every pipelined request it has read, appends all replies to one
//! buffer and writes it once. Its counters are added to the shared ones after the batch is
//! run and before its replies are written (see [`crate::stats`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crest_resp::{Frame, parse_request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::cmd;
use crate::state::{Conn, Flow, Sink};

/// Bytes a connection asks the kernel for per read, and its buffers' starting size.
const READ_CHUNK: usize = 64 * 1024;

/// A connection's buffer above this size is given back once it is empty, so one large
/// value does not pin its memory for the connection's lifetime.
const MAX_IDLE_BUFFER: usize = 1024 * 1024;

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

/// Accepts and serves connections until `shutdown` resolves (see [`crate::serve`]).
pub(crate) async fn run(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    sink: Arc<Sink>,
) -> io::Result<()> {
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
                connections.spawn(connection(stream, Arc::clone(&sink)));
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

/// Runs one connection to its end. Errors end this connection only.
async fn connection(mut stream: TcpStream, sink: Arc<Sink>) {
    // Replies already leave in one write per batch; Nagle would only delay them. If this
    // fails the connection still works, just slower.
    let _ = stream.set_nodelay(true);
    let _connected = ConnectedClient::new(&sink);
    let id = sink.next_client_id.fetch_add(1, Ordering::Relaxed) + 1;
    let mut conn = Conn::new(id, &sink.stats);
    if let Err(error) = serve_connection(&mut stream, &sink, &mut conn).await {
        tracing::debug!(%error, client_id = conn.id, "sink: connection ended with an error");
    }
    conn.stats.flush(&sink.stats);
}

async fn serve_connection(stream: &mut TcpStream, sink: &Sink, conn: &mut Conn) -> io::Result<()> {
    let mut input = Vec::with_capacity(READ_CHUNK);
    let mut output = Vec::with_capacity(READ_CHUNK);
    loop {
        if input.capacity() - input.len() < READ_CHUNK / 2 {
            input.reserve(READ_CHUNK);
        }
        if stream.read_buf(&mut input).await? == 0 {
            // EOF. Anything left in `input` is a request cut off mid-frame, and nobody is
            // left to answer it.
            return Ok(());
        }
        let mut consumed = 0;
        let mut close = false;
        loop {
            match parse_request(&input[consumed..]) {
                Ok(None) => break,
                Ok(Some((args, used))) => {
                    consumed += used;
                    if let Flow::Close = cmd::execute(sink, args, conn, &mut output) {
                        close = true;
                        break;
                    }
                }
                Err(error) => {
                    let message = format!("ERR Protocol error: {error}");
                    Frame::Error(message.into_bytes()).encode(&mut output);
                    close = true;
                    break;
                }
            }
        }
        input.drain(..consumed);
        conn.stats.flush(&sink.stats);
        if !output.is_empty() {
            stream.write_all(&output).await?;
            output.clear();
        }
        if close {
            return stream.shutdown().await;
        }
        if output.capacity() > MAX_IDLE_BUFFER {
            output = Vec::with_capacity(READ_CHUNK);
        }
        if input.is_empty() && input.capacity() > MAX_IDLE_BUFFER {
            input = Vec::with_capacity(READ_CHUNK);
        }
    }
}

/// Counts a connection in `connected_clients` for as long as it lives, however it ends.
struct ConnectedClient<'a>(&'a Sink);

impl<'a> ConnectedClient<'a> {
    fn new(sink: &'a Sink) -> Self {
        sink.connected_clients.fetch_add(1, Ordering::Relaxed);
        sink.total_connections.fetch_add(1, Ordering::Relaxed);
        ConnectedClient(sink)
    }
}

impl Drop for ConnectedClient<'_> {
    fn drop(&mut self) {
        self.0.connected_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::{Server, TIMEOUT, bulk, err, simple};
    use crest_resp::encode_command;

    #[tokio::test]
    async fn set_then_get_round_trips() {
        let server = Server::start().await;
        let mut client = server.client().await;
        assert_eq!(
            client.call(&["SET", "greeting", "hello"]).await,
            simple("OK")
        );
        assert_eq!(client.call(&["get", "greeting"]).await, bulk("hello"));
        assert_eq!(client.call(&["GET", "missing"]).await, Frame::NullBulk);
        assert_eq!(
            client
                .call(&["EXISTS", "greeting", "missing", "greeting"])
                .await,
            Frame::Integer(2)
        );
        assert_eq!(
            client.call(&["DEL", "greeting", "missing"]).await,
            Frame::Integer(1)
        );
        assert_eq!(client.call(&["GET", "greeting"]).await, Frame::NullBulk);
    }

    #[tokio::test]
    async fn pipelined_requests_in_one_write_get_all_replies_in_order() {
        let server = Server::start().await;
        let mut client = server.client().await;
        let mut batch = Vec::new();
        let mut expected = Vec::new();
        for i in 0..500 {
            let (key, value) = (format!("k{i}"), format!("v{i}"));
            encode_command(&mut batch, &[b"SET", key.as_bytes(), value.as_bytes()]);
            encode_command(&mut batch, &[b"GET", key.as_bytes()]);
            encode_command(&mut batch, &[b"INCR", b"counter"]);
            expected.extend([simple("OK"), bulk(&value), Frame::Integer(i + 1)]);
        }
        client.send_raw(&batch).await;
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(client.read().await.as_ref(), Some(want), "reply {i}");
        }
    }

    #[tokio::test]
    async fn unknown_command_is_an_error_like_redis() {
        let server = Server::start().await;
        let mut client = server.client().await;
        assert_eq!(
            client.call(&["FOO", "a", "b c"]).await,
            err("ERR unknown command 'FOO', with args beginning with: 'a' 'b c' ")
        );
        assert_eq!(
            client.call(&["nope"]).await,
            err("ERR unknown command 'nope', with args beginning with: ")
        );
        // The connection is still usable.
        assert_eq!(client.call(&["PING"]).await, simple("PONG"));
    }

    #[tokio::test]
    async fn ten_megabyte_value_set_then_get() {
        const SIZE: usize = 10 * 1024 * 1024;
        let server = Server::start().await;
        let mut client = server.client().await;
        let value: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
        let mut request = Vec::new();
        encode_command(&mut request, &[b"SET", b"big", &value]);
        client.send_raw(&request).await;
        assert_eq!(client.read().await, Some(simple("OK")));
        client.send(&["GET", "big"]).await;
        assert_eq!(client.read().await, Some(Frame::Bulk(value)));
        assert_eq!(client.call(&["DBSIZE"]).await, Frame::Integer(1));
    }

    #[tokio::test]
    async fn shutdown_resolves_serve_and_closes_connections() {
        let server = Server::start().await;
        let addr = server.addr;
        let mut client = server.client().await;
        assert_eq!(client.call(&["PING"]).await, simple("PONG"));
        server.stop.send(()).expect("server running");
        let result = tokio::time::timeout(TIMEOUT, server.task)
            .await
            .expect("serve returned");
        assert!(matches!(result, Ok(Ok(()))), "{result:?}");
        assert_eq!(client.read().await, None, "connection closed");
        assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
    }

    #[tokio::test]
    async fn inline_commands_from_telnet_work() {
        let server = Server::start().await;
        let mut client = server.client().await;
        client.send_raw(b"PING\r\nset a hello\r\n\r\nGET a\n").await;
        assert_eq!(client.read().await, Some(simple("PONG")));
        assert_eq!(client.read().await, Some(simple("OK")));
        assert_eq!(client.read().await, Some(bulk("hello")));
    }

    #[tokio::test]
    async fn protocol_error_is_reported_then_only_that_connection_closes() {
        let server = Server::start().await;
        let mut bad = server.client().await;
        bad.send_raw(b"PING\r\n*1\r\n:1\r\n").await;
        assert_eq!(
            bad.read().await,
            Some(simple("PONG")),
            "requests before the error are answered"
        );
        assert_eq!(
            bad.read().await,
            Some(err("ERR Protocol error: expected '$', got ':'"))
        );
        assert_eq!(bad.read().await, None);

        let mut good = server.client().await;
        assert_eq!(good.call(&["PING"]).await, simple("PONG"));
    }

    #[tokio::test]
    async fn quit_replies_ok_then_closes() {
        let server = Server::start().await;
        let mut client = server.client().await;
        assert_eq!(client.call(&["QUIT"]).await, simple("OK"));
        assert_eq!(client.read().await, None);
    }
}

//! The RESP server: each connection's read → parse → dispatch → write cycle, run by the
//! accept loop in [`crate::net`]. The top of the crate under [`crate::serve`], its only
//! user: it drives [`crate::cmd::execute`] on the state in [`crate::state`].
//!
//! Each connection parses every pipelined request it has read, appends all replies to one
//! buffer and writes it once (or each time it passes [`crate::Limits::output_chunk`]). Its
//! counters are added to the shared ones before its replies are written (see
//! [`crate::stats`]). Past a [`crate::Limits`] bound on the requests it holds unrun, a
//! connection gets one error and is closed.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crest_resp::{Frame, Scan, parse_request, scan_reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::cmd;
use crate::net::{self, Held, MAX_IDLE_BUFFER, READ_CHUNK};
use crate::state::{Conn, Flow, Sink};

/// Accepts and serves connections until `shutdown` resolves (see [`crate::serve`]).
pub(crate) async fn run(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    sink: Arc<Sink>,
) -> io::Result<()> {
    net::accept_loop(listener, shutdown, move |stream| {
        connection(stream, Arc::clone(&sink))
    })
    .await
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
    let limits = sink.limits;
    let mut input = Vec::with_capacity(READ_CHUNK);
    let mut output = Vec::with_capacity(READ_CHUNK);
    let mut held = Held::new(&sink.buffered_input, &sink.peak_input, limits);
    // How long `input` must be before an unfinished request there can be complete: a
    // request of many elements arriving over many reads is scanned again only once that
    // many bytes are in (parsing it from its start after every read was quadratic, and
    // copied its elements each time).
    let mut complete_at = 0usize;
    loop {
        if input.capacity() - input.len() < READ_CHUNK / 2 {
            input.reserve(READ_CHUNK);
        }
        // At most READ_CHUNK a read, whatever the buffer's spare capacity: the limits
        // below are checked after each read.
        if (&mut *stream)
            .take(READ_CHUNK as u64)
            .read_buf(&mut input)
            .await?
            == 0
        {
            // EOF. Anything left in `input` is a request cut off mid-frame, and nobody is
            // left to answer it.
            return Ok(());
        }
        if let Err(why) = held.set(input.len()) {
            tracing::warn!(client_id = conn.id, "sink: closing a client: {why}");
            Frame::Error(format!("ERR {why}").into_bytes()).encode(&mut output);
            stream.write_all(&output).await?;
            return stream.shutdown().await;
        }
        if input.len() < complete_at {
            continue;
        }
        complete_at = 0;
        let mut consumed = 0;
        let mut close = false;
        loop {
            match parse_request(&input[consumed..]) {
                Ok(None) => {
                    // An array cut off: the least it can still need, without copying.
                    if let Ok(Scan::Incomplete { need }) = scan_reply(&input[consumed..]) {
                        complete_at = need;
                    }
                    break;
                }
                Ok(Some((args, used))) => {
                    consumed += used;
                    if let Flow::Close = cmd::execute(sink, args, conn, &mut output) {
                        close = true;
                        break;
                    }
                    if output.len() >= limits.output_chunk {
                        // Written before the batch goes on: a client that does not read
                        // holds this task in the write, not the sink's memory.
                        write_replies(stream, sink, conn, &mut output).await?;
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
        // Going down never passes a limit.
        let _ = held.set(input.len());
        write_replies(stream, sink, conn, &mut output).await?;
        if close {
            return stream.shutdown().await;
        }
        if input.is_empty() && input.capacity() > MAX_IDLE_BUFFER {
            input = Vec::with_capacity(READ_CHUNK);
        }
    }
}

/// Counts the batch's calls, then writes its replies (if any) and empties the buffer,
/// giving back a large one.
async fn write_replies(
    stream: &mut TcpStream,
    sink: &Sink,
    conn: &mut Conn,
    output: &mut Vec<u8>,
) -> io::Result<()> {
    conn.stats.flush(&sink.stats);
    if output.is_empty() {
        return Ok(());
    }
    sink.peak_output.fetch_max(output.len(), Ordering::Relaxed);
    stream.write_all(output).await?;
    output.clear();
    if output.capacity() > MAX_IDLE_BUFFER {
        *output = Vec::with_capacity(READ_CHUNK);
    }
    Ok(())
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
    use std::time::{Duration, Instant};

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

    /// Waits (bounded) until `f` holds.
    async fn eventually(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Reads until EOF or a reset and checks that exactly one frame came: an error
    /// containing `needle`.
    async fn one_error_then_eof(client: &mut crate::test_support::Client, needle: &str) {
        let mut frames = Vec::new();
        while let Some(frame) = client.read().await {
            frames.push(frame);
        }
        match frames.as_slice() {
            [Frame::Error(e)] => {
                let e = String::from_utf8_lossy(e);
                assert!(e.contains(needle), "{e}");
            }
            other => panic!("expected one error, then EOF: {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_endless_multibulk_is_cut_at_the_query_buffer_limit() {
        const LIMIT: usize = 1 << 20;
        let server = Server::start_with(crate::Limits {
            query_buffer: LIMIT,
            ..crate::Limits::default()
        })
        .await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(b"*2147483647\r\n").await.unwrap();
        let element = b"$1\r\nx\r\n".repeat(8 * 1024);
        // Up to 64 MiB of elements (the sink held them all before); it closes long before.
        let mut sent = 0;
        while sent < 64 << 20 {
            if stream.write_all(&element).await.is_err() {
                break;
            }
            sent += element.len();
        }
        assert!(sent < 64 << 20, "the sink never closed the connection");
        let peak = server.sink.peak_input.load(Ordering::Relaxed);
        assert!(peak <= LIMIT + READ_CHUNK, "held {peak} bytes");
        eventually("the closed client's bytes are given back", || {
            server.sink.buffered_input.load(Ordering::Relaxed) == 0
        })
        .await;
        let mut good = server.client().await;
        assert_eq!(good.call(&["PING"]).await, simple("PONG"));
    }

    /// A request of 40,001 elements in 100-byte writes is waited for, not parsed from its
    /// start after every read, and runs whole once its last byte is in.
    #[tokio::test]
    async fn a_large_request_in_small_pieces_runs_whole() {
        let server = Server::start().await;
        let mut client = server.client().await;
        let pairs = 20_000;
        let mut req = format!("*{}\r\n$4\r\nMSET\r\n", 1 + 2 * pairs).into_bytes();
        for i in 0..pairs {
            let (k, v) = (format!("k{i}"), format!("v{i}"));
            req.extend(format!("${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()).bytes());
        }
        for piece in req.chunks(100) {
            client.send_raw(piece).await;
        }
        assert_eq!(client.read().await, Some(simple("OK")));
        assert_eq!(
            client.call(&["GET", "k19999"]).await,
            Frame::Bulk(b"v19999".to_vec())
        );
        assert_eq!(server.sink.buffered_input.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn an_unfinished_request_past_the_limit_gets_an_error_then_is_closed() {
        let server = Server::start_with(crate::Limits {
            query_buffer: 100_000,
            ..crate::Limits::default()
        })
        .await;
        let mut client = server.client().await;
        // A SET announcing 1 MB, of which 150 KB arrive: past the limit, and nothing more
        // is sent, so the error is read before any reset.
        let mut partial = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000000\r\n".to_vec();
        partial.extend(std::iter::repeat_n(b'v', 150_000));
        client.send_raw(&partial).await;
        one_error_then_eof(&mut client, "query buffer limit of 100000 bytes").await;
    }

    #[tokio::test]
    async fn unfinished_requests_of_all_clients_are_bounded_together() {
        let server = Server::start_with(crate::Limits {
            clients_input: 1_000_000,
            ..crate::Limits::default()
        })
        .await;
        let head = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$800000\r\n".to_vec();
        let body = vec![b'v'; 600_000];
        let mut first = server.client().await;
        first.send_raw(&head).await;
        first.send_raw(&body).await;
        eventually("the first client's bytes are counted", || {
            server.sink.buffered_input.load(Ordering::Relaxed) >= 600_000
        })
        .await;
        // The second passes the total: it is the one closed.
        let mut second = server.client().await;
        second.send_raw(&head).await;
        second.send_raw(&body).await;
        one_error_then_eof(&mut second, "past the sink's limit of 1000000 bytes").await;
        // The first finishes its SET.
        first.send_raw(&vec![b'v'; 200_000]).await;
        first.send_raw(b"\r\n").await;
        assert_eq!(first.read().await, Some(simple("OK")));
        assert_eq!(server.sink.buffered_input.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_its_replies_is_held_back_not_buffered() {
        const VALUE: usize = 256 * 1024;
        const GETS: usize = 400; // 100 MiB of replies
        let limits = crate::Limits::default();
        let server = Server::start_with(limits).await;
        let mut client = server.client().await;
        let value = vec![b'v'; VALUE];
        let mut set = Vec::new();
        encode_command(&mut set, &[b"SET", b"big", &value]);
        client.send_raw(&set).await;
        assert_eq!(client.read().await, Some(simple("OK")));
        let mut gets = Vec::new();
        for _ in 0..GETS {
            encode_command(&mut gets, &[b"GET", b"big"]);
        }
        client.send_raw(&gets).await;
        // Not reading: the sink fills the socket buffers and waits in its write.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let peak = server.sink.peak_output.load(Ordering::Relaxed);
        assert!(
            peak <= limits.output_chunk + VALUE + 64,
            "{peak} bytes of replies held at once"
        );
        // Every reply arrives, in order, once read.
        for i in 0..GETS {
            assert_eq!(
                client.read().await,
                Some(Frame::Bulk(value.clone())),
                "reply {i}"
            );
        }
        let (calls, _, _) = server.sink.stats.of(cmd::lookup(b"GET").unwrap());
        assert_eq!(calls, GETS as u64);
    }
}

//! One memcached connection's I/O around its [`Session`]: read up to
//! [`crate::net::READ_CHUNK`] at a time, run what was read, write the replies once per
//! batch (or each time a chunk of them waits), counting them before they are written.
//! Past a [`crate::Limits`] bound on the request bytes it holds unrun (a multi-get line
//! that never ends), a connection gets memcached's `SERVER_ERROR out of memory reading
//! request` and is closed.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::session::{Event, Session};
use super::state::State;
use super::stats::{Counter, Counts};
use crate::net::{Held, MAX_IDLE_BUFFER, READ_CHUNK};

/// Counts an accepted connection, then returns the task that runs it to its end. Errors
/// end this connection only.
pub(crate) fn connection(
    stream: TcpStream,
    state: Arc<State>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // Counted on accept, as memcached counts it, not when the task first runs.
    let open = Open::new(Arc::clone(&state));
    run(stream, state, open)
}

async fn run(mut stream: TcpStream, state: Arc<State>, _open: Open) {
    // Replies already leave in one write per batch; Nagle would only delay them.
    let _ = stream.set_nodelay(true);
    let mut counts = Counts::default();
    if let Err(error) = serve(&mut stream, &state, &mut counts).await {
        tracing::debug!(%error, "sink: memcached connection ended with an error");
    }
    state.stats.flush(&mut counts);
}

async fn serve(stream: &mut TcpStream, state: &State, counts: &mut Counts) -> io::Result<()> {
    let mut input = Vec::with_capacity(READ_CHUNK);
    let mut out = Vec::with_capacity(READ_CHUNK);
    let mut held = Held::new(&state.buffered_input, &state.peak_input, state.limits);
    let mut session = Session::new();
    loop {
        if input.capacity() - input.len() < READ_CHUNK / 2 {
            input.reserve(READ_CHUNK);
        }
        let n = (&mut *stream)
            .take(READ_CHUNK as u64)
            .read_buf(&mut input)
            .await?;
        if n == 0 {
            // EOF: what is left is a request cut off, and nobody is left to answer it.
            return Ok(());
        }
        counts.add(Counter::BytesRead, n as u64);
        if let Err(why) = held.set(input.len()) {
            tracing::warn!("sink: closing a memcached client: {why}");
            out.extend_from_slice(b"SERVER_ERROR out of memory reading request\r\n");
            write(stream, state, counts, &mut out).await?;
            return stream.shutdown().await;
        }
        let mut at = 0;
        let event = loop {
            match session.run(state, counts, &mut out, &input, &mut at) {
                Event::Flush => write(stream, state, counts, &mut out).await?,
                event => break event,
            }
        };
        match event {
            Event::Quit => {
                write(stream, state, counts, &mut out).await?;
                return stream.shutdown().await;
            }
            // What memcached had not written yet is gone (the session dropped it).
            Event::Drop => return write(stream, state, counts, &mut out).await,
            Event::More | Event::Flush => {}
        }
        input.drain(..at);
        // Going down never passes a limit.
        let _ = held.set(input.len());
        write(stream, state, counts, &mut out).await?;
        if input.is_empty() && input.capacity() > MAX_IDLE_BUFFER {
            input = Vec::with_capacity(READ_CHUNK);
        }
    }
}

/// Counts what was run, then writes its replies (if any) and empties the buffer, giving
/// back a large one.
async fn write(
    stream: &mut TcpStream,
    state: &State,
    counts: &mut Counts,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    state.stats.flush(counts);
    if out.is_empty() {
        return Ok(());
    }
    state.peak_output.fetch_max(out.len(), Ordering::Relaxed);
    stream.write_all(out).await?;
    counts.add(Counter::BytesWritten, out.len() as u64);
    out.clear();
    if out.capacity() > MAX_IDLE_BUFFER {
        *out = Vec::with_capacity(READ_CHUNK);
    }
    Ok(())
}

/// Counts a connection in `curr_connections` for as long as it lives, however it ends,
/// and once in `total_connections`.
struct Open(Arc<State>);

impl Open {
    fn new(state: Arc<State>) -> Self {
        state.curr_connections.fetch_add(1, Ordering::Relaxed);
        state.total_connections.fetch_add(1, Ordering::Relaxed);
        Open(state)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.curr_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

//! Test helpers shared by every module's tests: a sink driven without sockets with a clock
//! the test moves, and a running server with a raw RESP client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crest_resp::{Frame, encode_command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::cmd;
use crate::state::{Conn, Sink};

/// How long a test waits for a reply.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// A bulk string reply.
pub(crate) fn bulk(s: &str) -> Frame {
    Frame::Bulk(s.as_bytes().to_vec())
}

/// A simple string reply.
pub(crate) fn simple(s: &str) -> Frame {
    Frame::Simple(s.as_bytes().to_vec())
}

/// An error reply.
pub(crate) fn err(s: &str) -> Frame {
    Frame::Error(s.as_bytes().to_vec())
}

/// An array of bulk strings.
pub(crate) fn bulks(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

/// The value of `field` in INFO text, e.g. `calls=3,...` for `cmdstat_get`.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.split("\r\n")
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
}

/// A sink driven without sockets, with a clock the test moves.
pub(crate) struct Harness {
    pub(crate) sink: Sink,
    pub(crate) conn: Conn,
    clock: Arc<Mutex<Instant>>,
}

impl Harness {
    /// A fresh sink; its connection has id 7.
    pub(crate) fn new() -> Harness {
        let clock = Arc::new(Mutex::new(Instant::now()));
        let read = Arc::clone(&clock);
        let sink = Sink::new(
            Box::new(move || *read.lock().expect("clock")),
            &cmd::NAMES,
            crate::Limits::default(),
        );
        let conn = Conn::new(7, &sink.stats);
        Harness { sink, conn, clock }
    }

    /// Moves the clock forward.
    pub(crate) fn advance(&self, by: Duration) {
        *self.clock.lock().expect("clock") += by;
    }

    /// Runs one command; returns its reply's bytes.
    pub(crate) fn raw(&mut self, args: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        let args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        cmd::execute(&self.sink, args, &mut self.conn, &mut out);
        out
    }

    /// Runs one command; returns its one reply.
    pub(crate) fn run(&mut self, args: &[&str]) -> Frame {
        let mut out = Vec::new();
        let args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        cmd::execute(&self.sink, args, &mut self.conn, &mut out);
        let (frame, used) = Frame::parse(&out).expect("valid RESP").expect("one reply");
        assert_eq!(used, out.len(), "exactly one reply");
        frame
    }

    /// (calls, rejected, failed) of command `name`, after flushing this connection's counts.
    pub(crate) fn counts(&mut self, name: &str) -> (u64, u64, u64) {
        self.conn.stats.flush(&self.sink.stats);
        let index = cmd::lookup(name.as_bytes()).expect("a known command");
        self.sink.stats.of(index)
    }
}

/// A running sink on a free port.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) stop: oneshot::Sender<()>,
    pub(crate) task: JoinHandle<io::Result<()>>,
    /// Its state, for what INFO does not show.
    pub(crate) sink: Arc<Sink>,
}

impl Server {
    /// Starts the sink on 127.0.0.1, port chosen by the kernel, with the default limits.
    pub(crate) async fn start() -> Server {
        Server::start_with(crate::Limits::default()).await
    }

    /// As [`Server::start`], with `limits`.
    pub(crate) async fn start_with(limits: crate::Limits) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let sink = Arc::new(Sink::new(Box::new(Instant::now), &cmd::NAMES, limits));
        let task = tokio::spawn(crate::server::run(
            listener,
            async {
                let _ = stopped.await;
            },
            Arc::clone(&sink),
        ));
        Server {
            addr,
            stop,
            task,
            sink,
        }
    }

    /// A new connection to it.
    pub(crate) async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }
}

/// A raw RESP client: writes bytes, reads frames with `Frame::parse`.
pub(crate) struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect");
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes `bytes` as they are.
    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Writes one command.
    pub(crate) async fn send(&mut self, args: &[&str]) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        encode_command(&mut out, &args);
        self.send_raw(&out).await;
    }

    /// The next frame, or `None` at EOF.
    pub(crate) async fn read(&mut self) -> Option<Frame> {
        loop {
            if let Some((frame, used)) = Frame::parse(&self.buf).expect("valid RESP") {
                self.buf.drain(..used);
                return Some(frame);
            }
            let read = tokio::time::timeout(TIMEOUT, self.stream.read_buf(&mut self.buf))
                .await
                .expect("reply in time");
            match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Sends one command and reads its reply.
    pub(crate) async fn call(&mut self, args: &[&str]) -> Frame {
        self.send(args).await;
        self.read().await.expect("a reply")
    }

    /// The text of `INFO section`.
    pub(crate) async fn info(&mut self, section: &str) -> String {
        match self.call(&["INFO", section]).await {
            Frame::Bulk(text) => String::from_utf8(text).expect("utf-8"),
            other => panic!("INFO replied {other:?}"),
        }
    }
}

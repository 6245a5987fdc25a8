//! The sampler's connections to a memcached target: one per server of the ring, each
//! asked `stats` at every sample (and `stats settings` once, at connect), its reply read
//! up to `END` within the sample's deadline and at most
//! [`MAX_STATS`](crest_report::server::memcache::MAX_STATS) bytes.
//!
//! - **A ring is sampled whole.** Every server is asked first, then every reply read, so
//!   the servers answer at about the same instant; the replies are summed into one
//!   snapshot ([`Stats::sum`]). A sample that fails on any server fails whole (a sum
//!   without one server would look like counters going down), and every connection of the
//!   ring is dropped with it (a reply still owed would answer the next question); the next
//!   sample connects again.
//! - **Plain TCP or TLS**, with the run's TLS client configuration (the one every shard
//!   connection uses); no setup: memcached has no `HELLO`, and `AUTH`/`SELECT` are refused
//!   for a memcached target before the run.
//! - **What fails how.** No reply within the deadline, a closed connection or a reply past
//!   the size limit: the request may or may not have reached the server (counted as
//!   unanswered, as an unanswered `INFO` is). An error line (`ERROR`, `CLIENT_ERROR`,
//!   `SERVER_ERROR`, or a RESP server's `-ERR`) is the server's answer: the target does
//!   not take `stats`.

use crest_engine::target_tls::{self, Client};
use crest_model::stats::clean_message;
use crest_report::server::info::Snap;
use crest_report::server::memcache::{MAX_STATS, Stats};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// The sample's request.
pub(crate) const STATS: &[u8] = b"stats\r\n";
/// Asked once at connect.
pub(crate) const SETTINGS: &[u8] = b"stats settings\r\n";

/// A byte stream to a server: TCP, or TLS over TCP.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Why a request got no usable reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No reply (a timeout, a closed connection, a reply past the limit): the request
    /// may or may not have run.
    Unanswered(String),
    /// The server answered with an error line, or could not be reached: the request never
    /// ran.
    Refused(String),
}

impl Failure {
    /// The words.
    pub(crate) fn words(self) -> String {
        match self {
            Failure::Unanswered(w) | Failure::Refused(w) => w,
        }
    }
}

/// An open connection and what it read past the last reply.
struct Conn {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
}

/// One server of the ring, its connection kept between samples.
pub(crate) struct Server {
    addr: SocketAddr,
    tls: Option<Client>,
    conn: Option<Conn>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .field("connected", &self.conn.is_some())
            .finish()
    }
}

/// Where the reply at the start of `buf` ends (just past its `END` line), scanning
/// complete lines from `*from` (a line start, moved on past each line scanned). An error
/// line first is the server's refusal, in its words.
///
/// # Errors
/// The error line, cleaned.
fn reply_end(buf: &[u8], from: &mut usize) -> Result<Option<usize>, String> {
    while let Some(nl) = buf
        .get(*from..)
        .and_then(|b| b.iter().position(|&c| c == b'\n'))
    {
        let line = &buf[*from..*from + nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let first = *from == 0;
        *from += nl + 1;
        if line == b"END" {
            return Ok(Some(*from));
        }
        if first
            && (line == b"ERROR"
                || line.starts_with(b"CLIENT_ERROR")
                || line.starts_with(b"SERVER_ERROR")
                || line.starts_with(b"-"))
        {
            return Err(clean_message(line));
        }
    }
    Ok(None)
}

impl Server {
    /// A server at `addr`, reached over `tls` when given; not connected yet.
    pub(crate) fn new(addr: SocketAddr, tls: Option<Client>) -> Self {
        Self {
            addr,
            tls,
            conn: None,
        }
    }

    /// Connected now.
    #[cfg(test)]
    pub(crate) fn connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The same server, not connected (a second connection to it).
    pub(crate) fn twin(&self) -> Self {
        Self::new(self.addr, self.tls.clone())
    }

    /// Drops the connection.
    pub(crate) fn drop_conn(&mut self) {
        self.conn = None;
    }

    /// Connects unless connected, within `within`.
    ///
    /// # Errors
    /// Why the server cannot be reached, in one line.
    pub(crate) async fn open(&mut self, within: Duration) -> Result<(), String> {
        if self.conn.is_some() {
            return Ok(());
        }
        let addr = self.addr;
        let tls = self.tls.clone();
        let connect = async move {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
            let _ = tcp.set_nodelay(true);
            let stream: Box<dyn Stream> = match &tls {
                None => Box::new(tcp),
                Some(c) => {
                    let connector = tokio_rustls::TlsConnector::from(c.config.clone());
                    match connector.connect(c.name.clone(), tcp).await {
                        Ok(s) => Box::new(s),
                        Err(e) => {
                            return Err(match target_tls::tls_error(&e) {
                                Some(t) => {
                                    target_tls::explain(&addr.to_string(), &c.server_name(), t)
                                }
                                None => format!("TLS to {addr} failed: {e}"),
                            });
                        }
                    }
                }
            };
            Ok::<_, String>(Conn {
                stream,
                buf: Vec::new(),
            })
        };
        let conn = tokio::time::timeout(within, connect)
            .await
            .map_err(|_| format!("no connection to {addr} within {within:?}"))??;
        self.conn = Some(conn);
        Ok(())
    }

    /// Writes `request` by `deadline`.
    async fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), Failure> {
        let addr = self.addr;
        let Some(c) = self.conn.as_mut() else {
            return Err(Failure::Refused(format!("{addr}: not connected")));
        };
        match tokio::time::timeout_at(deadline, c.stream.write_all(request)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::Unanswered(format!("{addr}: {e}"))),
            Err(_) => Err(Failure::Unanswered(format!(
                "{addr}: the request was not written in time"
            ))),
        }
    }

    /// Reads one reply up to its `END` by `deadline`, at most [`MAX_STATS`] bytes.
    async fn read(&mut self, deadline: Instant) -> Result<String, Failure> {
        let addr = self.addr;
        let Some(c) = self.conn.as_mut() else {
            return Err(Failure::Refused(format!("{addr}: not connected")));
        };
        let mut scanned = 0;
        let mut chunk = [0u8; 8192];
        loop {
            match reply_end(&c.buf, &mut scanned) {
                Ok(Some(end)) => {
                    let text = String::from_utf8_lossy(&c.buf[..end]).into_owned();
                    c.buf.drain(..end);
                    if !c.buf.is_empty() {
                        // Bytes nobody asked for: the connection is out of step.
                        self.conn = None;
                    }
                    return Ok(text);
                }
                Err(words) => {
                    c.buf.clear();
                    return Err(Failure::Refused(format!("{addr}: {words}")));
                }
                Ok(None) if c.buf.len() >= MAX_STATS => {
                    return Err(Failure::Unanswered(format!(
                        "{addr}: a reply past {MAX_STATS} bytes without END"
                    )));
                }
                Ok(None) => {}
            }
            match tokio::time::timeout_at(deadline, c.stream.read(&mut chunk)).await {
                Ok(Ok(0)) => {
                    return Err(Failure::Unanswered(format!(
                        "{addr}: the server closed the connection"
                    )));
                }
                Ok(Ok(n)) => c.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) => return Err(Failure::Unanswered(format!("{addr}: {e}"))),
                Err(_) => {
                    return Err(Failure::Unanswered(format!(
                        "{addr}: no reply within the deadline"
                    )));
                }
            }
        }
    }
}

impl Server {
    /// Reads one line (without its line end) by `deadline`, at most [`MAX_STATS`] bytes.
    async fn read_line(&mut self, deadline: Instant) -> Result<String, Failure> {
        let addr = self.addr;
        let Some(c) = self.conn.as_mut() else {
            return Err(Failure::Refused(format!("{addr}: not connected")));
        };
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(nl) = c.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = c.buf.drain(..=nl).collect();
                let line = line.strip_suffix(b"\n").unwrap_or(&line);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                return Ok(String::from_utf8_lossy(line).into_owned());
            }
            if c.buf.len() >= MAX_STATS {
                return Err(Failure::Unanswered(format!(
                    "{addr}: a line past {MAX_STATS} bytes"
                )));
            }
            match tokio::time::timeout_at(deadline, c.stream.read(&mut chunk)).await {
                Ok(Ok(0)) => {
                    return Err(Failure::Unanswered(format!(
                        "{addr}: the server closed the connection"
                    )));
                }
                Ok(Ok(n)) => c.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) => return Err(Failure::Unanswered(format!("{addr}: {e}"))),
                Err(_) => {
                    return Err(Failure::Unanswered(format!(
                        "{addr}: no reply within the deadline"
                    )));
                }
            }
        }
    }

    /// `request` (connected), and its one-line reply within `timeout` (a meta command's).
    ///
    /// # Errors
    /// The connection's failure; the connection is dropped.
    pub(crate) async fn ask_line(
        &mut self,
        request: &[u8],
        timeout: Duration,
    ) -> Result<String, Failure> {
        let deadline = Instant::now() + timeout;
        let res = match self.send(request, deadline).await {
            Ok(()) => self.read_line(deadline).await,
            Err(e) => Err(e),
        };
        if res.is_err() {
            self.drop_conn();
        }
        res
    }

    /// `request` (connected), and its reply's lines one by one to `each`, each within
    /// `timeout`, until `END` or `each` says stop (false): then the connection is dropped,
    /// the rest of the reply unread. Memory stays one line whatever the reply's length.
    ///
    /// # Errors
    /// The connection's failure; the connection is dropped.
    pub(crate) async fn lines(
        &mut self,
        request: &[u8],
        timeout: Duration,
        mut each: impl FnMut(&str) -> bool,
    ) -> Result<(), Failure> {
        if let Err(e) = self.send(request, Instant::now() + timeout).await {
            self.drop_conn();
            return Err(e);
        }
        loop {
            let line = match self.read_line(Instant::now() + timeout).await {
                Ok(l) => l,
                Err(e) => {
                    self.drop_conn();
                    return Err(e);
                }
            };
            if line == "END" {
                return Ok(());
            }
            if !each(&line) {
                self.drop_conn();
                return Ok(());
            }
        }
    }
}

/// `flush_all` to every server of `ring` (connecting those that are not), each answered
/// `OK` within `timeout` (`crest compare --between flush`).
///
/// # Errors
/// The first server that cannot be reached or does not answer `OK`, in one line.
pub(crate) async fn flush_all(ring: &mut [Server], timeout: Duration) -> Result<(), String> {
    open(ring, timeout).await?;
    let deadline = Instant::now() + timeout;
    for s in ring.iter_mut() {
        let addr = s.addr;
        s.send(b"flush_all\r\n", deadline)
            .await
            .map_err(Failure::words)?;
        let Some(c) = s.conn.as_mut() else {
            return Err(format!("{addr}: not connected"));
        };
        let mut chunk = [0u8; 256];
        let line = loop {
            if let Some(i) = c.buf.windows(2).position(|w| w == b"\r\n") {
                let line = clean_message(&c.buf[..i]);
                c.buf.drain(..i + 2);
                break line;
            }
            if c.buf.len() > 1024 {
                return Err(format!("{addr}: flush_all answered a line past 1 KB"));
            }
            match tokio::time::timeout_at(deadline, c.stream.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => c.buf.extend_from_slice(&chunk[..n]),
                Ok(Ok(_)) => return Err(format!("{addr}: closed the connection on flush_all")),
                Ok(Err(e)) => return Err(format!("{addr}: {e}")),
                Err(_) => return Err(format!("{addr}: no answer to flush_all in time")),
            }
        };
        if line != "OK" {
            return Err(format!("{addr}: flush_all answered {line:?}"));
        }
    }
    Ok(())
}

/// Connects every server of `ring` that is not connected, within `within` each.
///
/// # Errors
/// The first that cannot be reached, in one line.
pub(crate) async fn open(ring: &mut [Server], within: Duration) -> Result<(), String> {
    for s in ring.iter_mut() {
        s.open(within).await?;
    }
    Ok(())
}

/// `request` to every server of `ring` (connected), and each one's reply within
/// `timeout`, in ring order. Any failure drops every connection of the ring.
///
/// # Errors
/// The first failure.
pub(crate) async fn ask_all(
    ring: &mut [Server],
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<String>, Failure> {
    let deadline = Instant::now() + timeout;
    let mut replies = Vec::with_capacity(ring.len());
    let mut res = Ok(());
    for s in ring.iter_mut() {
        res = s.send(request, deadline).await;
        if res.is_err() {
            break;
        }
    }
    if res.is_ok() {
        for s in ring.iter_mut() {
            match s.read(deadline).await {
                Ok(t) => replies.push(t),
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
    }
    match res {
        Ok(()) => Ok(replies),
        Err(e) => {
            ring.iter_mut().for_each(Server::drop_conn);
            Err(e)
        }
    }
}

/// One sample of the ring: `stats` of every server, summed.
///
/// # Errors
/// The first failure; a reply without `cmd_get` (not memcached's `stats`) is refused.
pub(crate) async fn sample(ring: &mut [Server], timeout: Duration) -> Result<Snap, Failure> {
    let replies = ask_all(ring, STATS, timeout).await?;
    let mut all = Vec::with_capacity(replies.len());
    for (s, text) in ring.iter().zip(&replies) {
        let stats = Stats::parse(text);
        if stats.uint("cmd_get").is_none() {
            return Err(Failure::Refused(format!(
                "{}: its stats reply has no cmd_get",
                s.addr
            )));
        }
        all.push(stats);
    }
    Stats::sum(&all)
        .map(|s| s.snap())
        .ok_or_else(|| Failure::Refused("no server to sample".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(buf: &[u8]) -> Result<Option<usize>, String> {
        reply_end(buf, &mut 0)
    }

    #[test]
    fn a_reply_ends_at_its_end_line() {
        assert_eq!(end(b"STAT a 1\r\nEND\r\n"), Ok(Some(15)));
        assert_eq!(end(b"END\r\n"), Ok(Some(5)));
        assert_eq!(end(b"STAT a 1\r\nEN"), Ok(None));
        assert_eq!(end(b"STAT a END\r\n"), Ok(None), "END inside a line");
        assert_eq!(end(b"STAT a 1\nEND\n"), Ok(Some(13)), "LF alone");
        assert_eq!(end(b"garbage\r\nmore\r\nEND\r\nSTAT"), Ok(Some(20)));
        assert_eq!(end(b"ERROR\r\n"), Err("ERROR".into()));
        assert_eq!(
            end(b"-ERR unknown command 'stats'\r\n"),
            Err("-ERR unknown command 'stats'".into())
        );
        assert_eq!(
            end(b"STAT x 1\r\nERROR\r\n"),
            Ok(None),
            "an error line later is data"
        );
        // Scanning resumes where it stopped.
        let mut from = 0;
        assert_eq!(reply_end(b"STAT a 1\r\nST", &mut from), Ok(None));
        assert_eq!(from, 10);
        assert_eq!(
            reply_end(b"STAT a 1\r\nSTAT b 2\r\nEND\r\n", &mut from),
            Ok(Some(25))
        );
    }
}

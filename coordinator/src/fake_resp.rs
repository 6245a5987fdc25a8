//! A fake RESP server for the coordinator's unit tests: on 127.0.0.1, port 0, it answers
//! each command as a closure says (a reply, silence, a close) and reports what it saw.

use crest_resp::Frame;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the fake server does with one command.
pub(crate) enum Act {
    /// Writes these bytes.
    Reply(Vec<u8>),
    /// Never answers (and keeps the connection open).
    Silent,
    /// Closes the connection.
    Close,
}

/// What the fake server saw on its connection number `.0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A command, its arguments as text.
    Command(usize, Vec<String>),
    /// The client closed the connection.
    Closed(usize),
}

/// `f` encoded.
pub(crate) fn reply(f: Frame) -> Act {
    let mut out = Vec::new();
    f.encode(&mut out);
    Act::Reply(out)
}

pub(crate) fn bulk(s: &str) -> Act {
    reply(Frame::Bulk(s.as_bytes().to_vec()))
}

pub(crate) fn error(s: &str) -> Act {
    reply(Frame::Error(s.as_bytes().to_vec()))
}

/// A RESP server on 127.0.0.1 answering each command as `answer` says; what it sees
/// goes to the receiver (a command before it is answered).
pub(crate) async fn serve<F>(answer: F) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>)
where
    F: Fn(&[String]) -> Act + Send + Sync + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(connection(s, n, answer.clone(), tx.clone()));
            n += 1;
        }
    });
    (addr, rx)
}

async fn connection<F>(mut s: TcpStream, n: usize, answer: Arc<F>, tx: mpsc::UnboundedSender<Seen>)
where
    F: Fn(&[String]) -> Act,
{
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Ok(Some((frame, used))) = Frame::parse(&buf) {
            buf.drain(..used);
            let Frame::Array(parts) = frame else { return };
            let args: Vec<String> = parts
                .iter()
                .map(|p| match p {
                    Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect();
            let act = answer(&args);
            let _ = tx.send(Seen::Command(n, args));
            match act {
                Act::Reply(r) => {
                    if s.write_all(&r).await.is_err() {
                        return;
                    }
                }
                Act::Silent => {}
                Act::Close => return,
            }
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = tx.send(Seen::Closed(n));
                return;
            }
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
}

/// The next thing the fake server saw (waiting for it, generously).
pub(crate) async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the fake server saw nothing")
        .expect("the fake server is gone")
}

/// The commands the fake server has read so far (connection closes left out).
pub(crate) fn commands(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Vec<Vec<String>> {
    std::iter::from_fn(|| rx.try_recv().ok())
        .filter_map(|s| match s {
            Seen::Command(_, c) => Some(c),
            Seen::Closed(_) => None,
        })
        .collect()
}

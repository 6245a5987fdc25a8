//! Before a run's shards open their connections, one probe connection asks the target a
//! harmless question (`ECHO`, which no workload sends, so the server's counts of the
//! measured commands stay exact). A target that refuses the generator outright — it wants
//! a password, or has no room for more clients — fails the run before it starts, with the
//! server's own words, instead of a report full of `NOAUTH` errors.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the probe may take in all: well inside the start lead the coordinator gives.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// What the probe found that stops the run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The connection was refused or failed.
    #[error("cannot connect to target {addr}: {why}")]
    Unreachable {
        /// The target.
        addr: SocketAddr,
        /// The OS's reason.
        why: String,
    },
    /// The server answered with an error that every request would get.
    #[error("target {addr} refuses the generator: {message}{hint}")]
    Refused {
        /// The target.
        addr: SocketAddr,
        /// The server's error line.
        message: String,
        /// What would be right.
        hint: &'static str,
    },
}

/// The hint for an error reply that refuses every request, or None for one that does not.
fn refusal_hint(reply: &str) -> Option<&'static str> {
    let word = reply.split_whitespace().next().unwrap_or_default();
    match word {
        "NOAUTH" | "WRONGPASS" => Some(
            " (the server requires a password; Crest does not authenticate yet: load a server without requirepass)",
        ),
        "NOPERM" => Some(
            " (the default user may not run commands; allow it, e.g. ACL SETUSER default on nopass +@all ~*)",
        ),
        _ if reply.contains("max number of clients") => {
            Some(" (raise the server's maxclients, or use fewer --connections)")
        }
        _ => None,
    }
}

/// Probes `addr`. Slow or silent targets pass (the run measures them); only a refusal
/// every request would meet stops the run.
///
/// # Errors
/// [`Refusal`] when the connection is refused or the server refuses the generator.
pub async fn probe(addr: SocketAddr) -> Result<(), Refusal> {
    match tokio::time::timeout(PROBE_TIMEOUT, ask(addr)).await {
        Err(_elapsed) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(Refusal::Unreachable {
                addr,
                why: "connection refused".into(),
            })
        }
        // Other I/O trouble (a reset, a close): the shards meet it too and count it.
        Ok(Err(_)) => Ok(()),
        Ok(Ok(line)) => match line
            .strip_prefix('-')
            .and_then(|m| Some((m, refusal_hint(m)?)))
        {
            Some((message, hint)) => Err(Refusal::Refused {
                addr,
                message: message.to_string(),
                hint,
            }),
            None => Ok(()),
        },
    }
}

/// Connects, sends `ECHO`, returns the first line of the reply (at most 512 bytes).
async fn ask(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$11\r\ncrest-probe\r\n")
        .await?;
    let mut buf = [0u8; 512];
    let mut len = 0;
    while len < buf.len() {
        let n = s.read(&mut buf[len..]).await?;
        if n == 0 {
            break;
        }
        len += n;
        if buf[..len].contains(&b'\n') {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf[..len]);
    let line = text.lines().next().unwrap_or_default();
    // A server's message is printable text; control bytes are never echoed raw.
    Ok(line
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(300)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn server(reply: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 64];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(reply).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_password_or_full_server_refuses_with_its_own_words() {
        let a = server(b"-NOAUTH Authentication required.\r\n").await;
        let e = probe(a).await.unwrap_err().to_string();
        assert!(e.contains("NOAUTH Authentication required."), "{e}");
        assert!(e.contains("requirepass"), "{e}");
        let a = server(b"-ERR max number of clients reached\r\n").await;
        let e = probe(a).await.unwrap_err().to_string();
        assert!(e.contains("max number of clients reached"), "{e}");
        assert!(e.contains("maxclients"), "{e}");
    }

    #[tokio::test]
    async fn answers_silence_and_other_errors_pass() {
        probe(server(b"$11\r\ncrest-probe\r\n").await)
            .await
            .unwrap();
        probe(server(b"-ERR unknown command 'ECHO'\r\n").await)
            .await
            .unwrap();
        probe(server(b"").await).await.unwrap();
        // Accepts and never answers: the probe gives up quietly; the run measures it.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        probe(l.local_addr().unwrap()).await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        let e = probe(a).await.unwrap_err();
        assert!(matches!(e, Refusal::Unreachable { .. }), "{e}");
    }
}

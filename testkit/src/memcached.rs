//! A real memcached (Debian's 1.6, found on the PATH) on a free loopback port, stopped on
//! drop, and its own counters (`stats`), which tests compare Crest's report with.

use crate::net::free_port;
use crate::proc::{Proc, TempDir};
use crate::server::find_on_path;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A memcached of our own (`-U 0`: no UDP), stopped on drop.
pub struct Memcached {
    proc: Option<Proc>,
    _dir: TempDir,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Memcached {
    /// Starts one with one worker thread and 64 MB, and waits until it takes connections.
    pub fn start() -> Self {
        Self::with_args(&[])
    }

    /// Starts one with `extra` arguments after the defaults (e.g. `["-c", "10"]`).
    pub fn with_args(extra: &[&str]) -> Self {
        let dir = TempDir::new("memcached");
        let port = free_port();
        let p = port.to_string();
        let mut args = vec![
            "-l",
            "127.0.0.1",
            "-p",
            &p,
            "-U",
            "0",
            "-t",
            "1",
            "-m",
            "64",
            "-u",
            "root",
        ];
        args.extend_from_slice(extra);
        let proc = Proc::spawn(&find_on_path("memcached"), &args, dir.path(), "memcached");
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "memcached did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            proc: Some(proc),
            _dir: dir,
            port,
        }
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its `stats`, as name → value (numbers only; `version` and the like left out).
    pub fn stats(&self) -> HashMap<String, u64> {
        stats(&self.addr()).expect("memcached answers stats")
    }

    /// The one-line replies to meta commands sent on one connection, in order (each
    /// `line` without its CRLF, and answered by one line: `mg key t`, `mn`, …).
    pub fn meta_lines(&self, lines: &[String]) -> Vec<String> {
        let mut s = TcpStream::connect(self.addr()).expect("memcached accepts");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("a read timeout");
        let mut req = Vec::new();
        for l in lines {
            req.extend_from_slice(l.as_bytes());
            req.extend_from_slice(b"\r\n");
        }
        s.write_all(&req).expect("memcached reads");
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        while buf.iter().filter(|b| **b == b'\n').count() < lines.len() {
            let n = s.read(&mut chunk).expect("memcached answers");
            assert!(n > 0, "memcached closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&buf)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Stops it at once (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }
}

/// `stats` of the memcached at `addr`, numbers only (`rusage_*` in µs).
///
/// # Errors
/// The connection's.
pub fn stats(addr: &str) -> std::io::Result<HashMap<String, u64>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"stats\r\n")?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    while !buf.ends_with(b"END\r\n") {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut out = HashMap::new();
    for line in String::from_utf8_lossy(&buf).lines() {
        let mut w = line.split(' ');
        if let (Some("STAT"), Some(name), Some(v)) = (w.next(), w.next(), w.next()) {
            if let Ok(n) = v.parse::<u64>() {
                out.insert(name.to_string(), n);
            } else if let Ok(f) = v.parse::<f64>() {
                out.insert(name.to_string(), (f * 1e6) as u64);
            }
        }
    }
    Ok(out)
}

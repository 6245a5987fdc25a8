//! The codec against a real memcached 1.6 (Debian's, started here on a free loopback port):
//! every request the encoders write is taken as written, every reply scans to the kind the
//! reply table says, pipelined requests are answered one reply each in order, and the
//! server's own `stats` count what was sent (gets per key, misses, sets).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crest_memcache::meta::{self, Common, Get, Mode};
use crest_memcache::reply::Expect;
use crest_memcache::scan_reply;
use crest_memcache::text::{self, Retrieve, Store};
use crest_resp::{ReplyKind, Scan};
use crest_testkit::Memcached;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A connection to `m` with a read deadline.
fn connect(m: &Memcached) -> Conn {
    let s = TcpStream::connect(("127.0.0.1", m.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    Conn { s, buf: Vec::new() }
}

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Sends `out` and reads one reply per expectation, in order: (kind as owned words, nils).
    fn exchange(&mut self, out: &[u8], expects: &[Expect]) -> Vec<(String, u32)> {
        self.s.write_all(out).unwrap();
        let mut got = Vec::new();
        for &e in expects {
            loop {
                match scan_reply(&self.buf, e).unwrap() {
                    Scan::Reply { kind, len, nils } => {
                        let k = match kind {
                            ReplyKind::Value => "value".to_string(),
                            ReplyKind::Nil => "nil".to_string(),
                            ReplyKind::Error { kind, .. } => String::from_utf8_lossy(kind).into(),
                        };
                        got.push((k, nils));
                        self.buf.drain(..len);
                        break;
                    }
                    Scan::Incomplete { .. } => {
                        let mut chunk = [0u8; 65536];
                        let n = self.s.read(&mut chunk).unwrap();
                        assert!(n > 0, "memcached closed the connection");
                        self.buf.extend_from_slice(&chunk[..n]);
                    }
                    Scan::Push { .. } => panic!("a push from memcached"),
                }
            }
        }
        assert!(
            self.buf.is_empty(),
            "left over: {:?}",
            String::from_utf8_lossy(&self.buf)
        );
        got
    }

    /// `stats`, as name → value.
    fn stats(&mut self) -> HashMap<String, String> {
        self.s.write_all(b"stats\r\n").unwrap();
        let t0 = Instant::now();
        while !self.buf.ends_with(b"END\r\n") {
            assert!(t0.elapsed() < Duration::from_secs(5));
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).unwrap();
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8(std::mem::take(&mut self.buf)).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

fn kinds(v: &[(String, u32)]) -> Vec<&str> {
    v.iter().map(|(k, _)| k.as_str()).collect()
}

/// Every text command, pipelined on one connection: one reply each, of the kind the
/// reply table gives, and `stats` counting gets per key as memcached counts them.
#[test]
fn text_requests_are_answered_as_the_scanner_reads_them() {
    let m = Memcached::start();
    let mut c = connect(&m);
    let mut out = Vec::new();
    let v = b"hello";
    let e = vec![
        text::store(&mut out, Store::Set, b"a", 0, 0, v),
        text::store(&mut out, Store::Add, b"a", 0, 0, v),
        text::store(&mut out, Store::Replace, b"nope", 0, 0, v),
        text::store(&mut out, Store::Append, b"a", 0, 0, b"!"),
        text::store(&mut out, Store::Prepend, b"a", 0, 60, b">"),
        text::retrieve(&mut out, Retrieve::Get, [b"a".as_slice()]),
        text::retrieve(&mut out, Retrieve::Get, [b"missing".as_slice()]),
        text::retrieve(
            &mut out,
            Retrieve::Gets,
            [b"a".as_slice(), b"x".as_slice(), b"y".as_slice()],
        ),
        text::retrieve(&mut out, Retrieve::Gat(100), [b"a".as_slice()]),
        text::store(&mut out, Store::Cas(1), b"a", 0, 0, v),
        text::store(&mut out, Store::Set, b"n", 0, 0, b"10"),
        text::arith(&mut out, true, b"n", 5),
        text::arith(&mut out, false, b"n", 100),
        text::arith(&mut out, true, b"missing", 1),
        text::touch(&mut out, b"a", 30),
        text::touch(&mut out, b"missing", 30),
        text::delete(&mut out, b"a"),
        text::delete(&mut out, b"a"),
    ];
    // A command memcached does not know: its ERROR is an error reply like any.
    out.extend_from_slice(b"bogus\r\n");
    let mut e = e;
    e.push(Expect::Line);
    let got = c.exchange(&out, &e);
    assert_eq!(
        kinds(&got),
        [
            "value", "nil", "nil", "value", "value", "value", "nil", "value", "value", "nil",
            "value", "value", "value", "nil", "value", "nil", "value", "nil", "ERROR"
        ]
    );
    assert_eq!(got[7].1, 2, "two of the multi-get's three keys missing");
    let s = c.stats();
    // get a, get missing, gets a x y: 5 keys looked up, counted per key (a gat counts as a
    // touch, with the two touches).
    assert_eq!(s["cmd_get"], "5", "{s:?}");
    assert_eq!(s["get_misses"], "3", "{s:?}");
    assert_eq!(s["cmd_touch"], "3", "{s:?}");
    assert_eq!(s["delete_hits"], "1", "{s:?}");
    assert_eq!(s["delete_misses"], "1", "{s:?}");
    assert_eq!(s["incr_misses"], "1", "{s:?}");
}

/// Every meta command, and a quiet batch closed by `mn`: quiet requests that succeed say
/// nothing, a quiet miss says nothing, and the `MN` is the batch's last reply.
#[test]
fn meta_requests_are_answered_as_the_scanner_reads_them() {
    let m = Memcached::start();
    let mut c = connect(&m);
    let loud = Common::default();
    let value = Get {
        value: true,
        flags: true,
        cas: true,
        touch: None,
    };
    let mut out = Vec::new();
    let e = vec![
        meta::set(&mut out, b"a", b"hello", Some(60), Mode::Set, loud),
        meta::set(&mut out, b"a", b"x", None, Mode::Add, loud),
        meta::set(&mut out, b"a", b"!", None, Mode::Append, loud),
        meta::get(&mut out, b"a", value, loud),
        meta::get(&mut out, b"missing", value, loud),
        meta::get(
            &mut out,
            b"a",
            Get {
                touch: Some(5),
                ..Get::default()
            },
            loud,
        ),
        meta::set(&mut out, b"n", b"7", None, Mode::Set, loud),
        meta::arith(&mut out, b"n", true, 3, loud),
        meta::arith(&mut out, b"missing", false, 1, loud),
        meta::delete(&mut out, b"a", loud),
        meta::delete(&mut out, b"a", loud),
        meta::noop(&mut out),
    ];
    let got = c.exchange(&out, &e);
    assert_eq!(
        kinds(&got),
        [
            "value", "nil", "value", "value", "nil", "value", "value", "value", "nil", "value",
            "nil", "value"
        ]
    );
    // Quiet: a set and a hit answer nothing, a miss nothing; only the hit's VA and the MN.
    let quiet = Common {
        quiet: true,
        opaque: Some(9),
    };
    let mut out = Vec::new();
    meta::set(&mut out, b"q", b"v", None, Mode::Set, quiet);
    meta::get(&mut out, b"absent", value, quiet);
    let hit = meta::get(&mut out, b"q", value, quiet);
    let end = meta::noop(&mut out);
    let got = c.exchange(&out, &[hit, end]);
    assert_eq!(kinds(&got), ["value", "value"]);
    let s = c.stats();
    assert_eq!(s["get_misses"], "2", "{s:?}");
}

/// A value of 1 MB (memcached's default item limit is 1 MB, so just under it) comes back
/// whole after several reads, the scanner asking for its exact end.
#[test]
fn a_large_value_is_read_to_its_exact_end() {
    let m = Memcached::start();
    let mut c = connect(&m);
    let big = vec![b'v'; 1_000_000];
    let mut out = Vec::new();
    let set = text::store(&mut out, Store::Set, b"big", 0, 0, &big);
    let get = text::retrieve(&mut out, Retrieve::Get, [b"big".as_slice()]);
    let mg = meta::get(
        &mut out,
        b"big",
        Get {
            value: true,
            ..Get::default()
        },
        Common::default(),
    );
    assert_eq!(
        kinds(&c.exchange(&out, &[set, get, mg])),
        ["value", "value", "value"]
    );
}

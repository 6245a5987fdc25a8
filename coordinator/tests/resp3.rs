//! RESP3 (issue #9, item 3) against real servers: a `--resp 3` run's counts and misses
//! agree with the server, every RESP3 type `DEBUG PROTOCOL` sends decodes, push and
//! attribute frames never shift which reply answers which request, and client-side
//! caching invalidations arriving mid-run lose and mismatch nothing.

use crate::support::*;
use crest_resp::{Frame, ReplyKind, Scan, scan_reply};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// `name:N` of `INFO stats`.
fn stat(server: &Server, name: &str) -> u64 {
    let Frame::Bulk(text) = server.command(&[b"INFO", b"stats"]) else {
        panic!("INFO is a bulk string in RESP2");
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:"))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in INFO stats"))
}

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut b = Vec::new();
    crest_resp::encode_command(&mut b, args);
    b
}

/// A raw connection that said `HELLO 3`.
fn resp3_conn(server: &Server) -> TcpStream {
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&encode(&[b"HELLO", b"3"])).unwrap();
    let frames = read_frames(&mut s, 1);
    let Frame::Map(fields) = &frames[0].1 else {
        panic!("HELLO 3 answers with a map: {:?}", frames[0]);
    };
    assert!(fields.contains(&(Frame::Bulk(b"proto".to_vec()), Frame::Integer(3))));
    s
}

/// Reads until `n` top-level frames (replies and pushes) are in; each with its bytes and
/// its parsed tree, checked to agree with the scanner.
fn read_frames(s: &mut TcpStream, n: usize) -> Vec<(Vec<u8>, Frame)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while out.len() < n {
        match scan_reply(&buf).unwrap() {
            Scan::Incomplete { .. } => {
                let got = s.read(&mut chunk).unwrap();
                assert!(got > 0, "the server closed");
                buf.extend_from_slice(&chunk[..got]);
            }
            Scan::Reply { len, .. } | Scan::Push { len, .. } => {
                let (frame, used) = Frame::parse(&buf).unwrap().unwrap();
                assert_eq!(used, len);
                out.push((buf[..len].to_vec(), frame));
                buf.drain(..len);
            }
        }
    }
    out
}

/// A short `--resp 3` run: SET:GET 1:10 over keys mostly never written, so most GETs miss.
fn resp3_run(dir: &TempDir, server: &Server, extra: &[&str]) -> Value {
    CrestRun::new(dir)
        .args(&[
            "--target",
            &server.addr(),
            "--resp",
            "3",
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "4",
            "--keys",
            "100000",
        ])
        .args(extra)
        .run(0)
}

/// `--resp 3` on both servers: the counts match INFO commandstats; every connection (4)
/// and the probe said HELLO 3 once; the report's GET misses are the server's
/// keyspace_misses; the report records the protocol.
#[test]
fn a_resp3_run_matches_the_server_and_counts_its_misses() {
    for kind in [Kind::Redis, Kind::Valkey] {
        let server = Server::start(kind);
        let misses_before = stat(&server, "keyspace_misses");
        let dir = TempDir::new("resp3-run");
        let report = resp3_run(&dir, &server, &[]);
        let stats = server.commandstats();
        check_against_server(&report, &stats, 2000.0, 2.0);
        // 4 connections, the probe and the server sampler (HELLO 3 too, no tracking),
        // which reads INFO as a RESP3 verbatim string and agrees.
        assert_eq!(stats.get("hello"), Some(&6), "{kind:?}: {stats:?}");
        assert_eq!(
            report["checks"]["server_agrees"], true,
            "{kind:?}: {}",
            report["server_stats"]
        );
        let misses = stat(&server, "keyspace_misses") - misses_before;
        let get = &report["commands"]["GET"];
        let in_flight = u(&report["totals"], "in_flight") + u(&report["totals"], "unsent");
        let reported = u(get, "misses");
        assert!(
            reported > 0 && reported <= misses && misses <= reported + in_flight,
            "{kind:?}: report GET misses {reported}, server keyspace_misses {misses}, in flight {in_flight}"
        );
        assert_eq!(u(&report["commands"]["SET"], "misses"), 0);
        assert_eq!(report["resp"], 3);
        assert_eq!(report["classes"]["default"]["resp"], 3);
        assert_eq!(u(&report["classes"]["default"], "pushes"), 0);
        assert!(
            report["connection_errors"].as_object().unwrap().is_empty(),
            "{kind:?}: {}",
            report["connection_errors"]
        );
    }
}

/// MGET's missing keys are misses one by one, as the server counts them.
#[test]
fn mget_misses_are_counted_key_by_key() {
    let server = Server::start(Kind::Valkey);
    let before = stat(&server, "keyspace_misses");
    let dir = TempDir::new("resp3-mget");
    let report = resp3_run(&dir, &server, &["--mix", "MGET=1", "--batch", "4"]);
    let misses = stat(&server, "keyspace_misses") - before;
    let mget = &report["commands"]["MGET"];
    let in_flight = u(&report["totals"], "in_flight") + u(&report["totals"], "unsent");
    let reported = u(mget, "misses");
    assert_eq!(u(mget, "errors"), 0);
    assert!(
        reported > u(mget, "completed") && reported <= misses && misses <= reported + 4 * in_flight,
        "report MGET misses {reported} of {} calls, server keyspace_misses {misses}",
        u(mget, "completed")
    );
}

/// A `DEBUG PROTOCOL` type, how many frames it sends, and what each must be.
type TypeCheck = (&'static str, usize, fn(&Frame) -> bool);

/// Every RESP3 type as each server sends it for `DEBUG PROTOCOL <type>` decodes to the
/// right frame, and the scanner agrees with the parser on where it ends and what it is.
#[test]
fn every_debug_protocol_type_decodes_on_both_servers() {
    for kind in [Kind::Redis, Kind::Valkey] {
        let server = Server::start(kind);
        let mut s = resp3_conn(&server);
        let types: &[TypeCheck] = &[
            ("string", 1, |f| *f == Frame::Bulk(b"Hello World".to_vec())),
            ("integer", 1, |f| *f == Frame::Integer(12345)),
            ("double", 1, |f| *f == Frame::Double(b"3.141".to_vec())),
            ("bignum", 1, |f| {
                *f == Frame::BigNumber(b"1234567999999999999999999999999999999".to_vec())
            }),
            ("null", 1, |f| *f == Frame::Null),
            ("array", 1, |f| matches!(f, Frame::Array(v) if v.len() == 3)),
            ("set", 1, |f| matches!(f, Frame::Set(v) if v.len() == 3)),
            ("map", 1, |f| matches!(f, Frame::Map(v) if v.len() == 3)),
            ("attrib", 1, |f| {
                matches!(f, Frame::Attribute { attrs, value } if attrs.len() == 1
                    && **value == Frame::Bulk(b"Some real reply following the attribute".to_vec()))
            }),
            // A push and a reply, in either order (redis: push first; valkey: reply first).
            ("push", 2, |f| {
                matches!(f, Frame::Push(v) if v.first() == Some(&Frame::Bulk(b"server-cpu-usage".to_vec())))
                    || *f == Frame::Bulk(b"Some real reply following the push reply".to_vec())
            }),
            ("verbatim", 1, |f| {
                *f == Frame::Verbatim {
                    format: *b"txt",
                    data: b"This is a verbatim\nstring".to_vec(),
                }
            }),
            ("true", 1, |f| *f == Frame::Boolean(true)),
            ("false", 1, |f| *f == Frame::Boolean(false)),
        ];
        for (t, frames, ok) in types {
            s.write_all(&encode(&[b"DEBUG", b"PROTOCOL", t.as_bytes()]))
                .unwrap();
            let got = read_frames(&mut s, *frames);
            for (bytes, frame) in &got {
                assert!(ok(frame), "{kind:?} {t}: {frame:?}");
                // Every byte split: incomplete, then whole.
                for split in 0..bytes.len() {
                    assert!(
                        matches!(scan_reply(&bytes[..split]), Ok(Scan::Incomplete { .. })),
                        "{kind:?} {t} at {split}"
                    );
                }
            }
            if *t == "push" {
                let pushes = got
                    .iter()
                    .filter(|(b, _)| matches!(scan_reply(b), Ok(Scan::Push { .. })))
                    .count();
                assert_eq!(pushes, 1, "{kind:?}: one push frame");
            }
        }
    }
}

/// The research's live check, one pipelined write on one connection: GET k1, DEBUG
/// PROTOCOL push, GET k2, DEBUG PROTOCOL attrib, GET missing. Walking the bytes as the
/// engine does (pushes aside, the rest in order), each reply is its request's; one push;
/// the last is a nil (a miss).
#[test]
fn pushes_and_attributes_on_a_live_pipeline_answer_no_request() {
    for kind in [Kind::Redis, Kind::Valkey] {
        let server = Server::start(kind);
        server.command(&[b"SET", b"k1", b"v1"]);
        server.command(&[b"SET", b"k2", b"v2"]);
        let mut s = resp3_conn(&server);
        let pipeline = [
            encode(&[b"GET", b"k1"]),
            encode(&[b"DEBUG", b"PROTOCOL", b"push"]),
            encode(&[b"GET", b"k2"]),
            encode(&[b"DEBUG", b"PROTOCOL", b"attrib"]),
            encode(&[b"GET", b"missing"]),
        ]
        .concat();
        s.write_all(&pipeline).unwrap();
        let frames = read_frames(&mut s, 6);
        let mut replies = Vec::new();
        let mut pushes = 0;
        for (bytes, frame) in &frames {
            match scan_reply(bytes).unwrap() {
                Scan::Push { invalidate, .. } => {
                    assert!(!invalidate);
                    pushes += 1;
                }
                Scan::Reply { kind, .. } => replies.push((frame.clone(), kind == ReplyKind::Nil)),
                Scan::Incomplete { .. } => unreachable!(),
            }
        }
        assert_eq!(pushes, 1, "{kind:?}");
        let b = |s: &str| Frame::Bulk(s.as_bytes().to_vec());
        assert_eq!(replies.len(), 5, "{kind:?}: {replies:?}");
        assert_eq!(replies[0], (b("v1"), false));
        assert_eq!(
            replies[1],
            (b("Some real reply following the push reply"), false)
        );
        assert_eq!(replies[2], (b("v2"), false));
        assert!(
            matches!(&replies[3].0, Frame::Attribute { value, .. } if **value == b("Some real reply following the attribute")),
            "{kind:?}: {:?}",
            replies[3]
        );
        assert_eq!(replies[4], (Frame::Null, true));
    }
}

/// `--tracking`: every connection turns on client-side caching; another client SETs the
/// keys being read all through the run, so invalidation pushes arrive mid-run, between
/// and among replies. None is taken for a reply: no request is lost or mismatched (no
/// errors, no protocol faults, the books balance, the counts match the server).
#[test]
fn invalidations_mid_run_lose_and_mismatch_nothing() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("resp3-tracking");
    let p = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--resp",
            "3",
            "--tracking",
            "--rate",
            "2000",
            "--duration",
            "3s",
            "--connections",
            "4",
            "--mix",
            "GET=1",
            "--keys",
            "50",
            "--key-prefix",
            "tk:",
            "--prefill",
        ])
        .spawn();
    let addr = server.addr();
    let writer = std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(6);
        let mut sets = 0u64;
        while Instant::now() < end {
            for i in 0..50 {
                let key = format!("tk:{i}");
                if command(&addr, &[b"SET", key.as_bytes(), b"changed"]).is_ok() {
                    sets += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        sets
    });
    let mut p = p;
    let code = p.wait(Duration::from_secs(60));
    let sets = writer.join().unwrap();
    assert_eq!(code, 0, "{}", read_log(dir.path(), "crest", "stderr"));
    let report = read_report(&dir.path().join("out"));
    assert_eq!(report["tracking"], true);
    let class = &report["classes"]["default"];
    let (pushes, invalidations) = (u(class, "pushes"), u(class, "invalidations"));
    assert!(sets > 0);
    assert!(
        invalidations > 10 && pushes == invalidations,
        "pushes {pushes}, invalidations {invalidations} after {sets} SETs"
    );
    let get = &report["commands"]["GET"];
    assert_eq!(u(get, "errors"), 0, "{}", get["errors_by_kind"]);
    assert!(
        report["connection_errors"].as_object().unwrap().is_empty(),
        "{}",
        report["connection_errors"]
    );
    assert!(
        report["checks"]["intervals_match_totals"]
            .as_bool()
            .unwrap()
    );
    let totals = &report["totals"];
    assert_eq!(u(totals, "scheduled"), 6000);
    assert_eq!(
        u(totals, "completed") + u(totals, "in_flight") + u(totals, "unsent"),
        6000
    );
    let stats = server.commandstats();
    let server_gets = stats.get("get").copied().unwrap_or(0);
    let answered = u(get, "completed");
    assert!(
        answered <= server_gets
            && server_gets <= answered + u(totals, "in_flight") + u(totals, "unsent"),
        "report {answered} GETs, server {server_gets}"
    );
    // Every connection and the probe, of the prefill and of the run (4 + 1 each), said
    // HELLO 3 and turned tracking on once; the server sampler said HELLO 3, no tracking.
    let tracking = stats.get("client|tracking").copied().unwrap_or(0);
    assert_eq!((stats.get("hello"), tracking), (Some(&11), 10), "{stats:?}");
}

/// `--resp 3` against the built-in target: every type of reply in its RESP3 form (maps,
/// doubles, nulls), zero errors, misses counted.
#[test]
fn a_resp3_run_against_the_built_in_target_has_no_errors() {
    let dir = TempDir::new("resp3-builtin");
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        r#"duration = "2s"
[[class]]
name = "strings"
rate = 600
mix = { GET = 4, SET = 1, MGET = 1 }
keys = { count = 1000, prefix = "s:" }
[[class]]
name = "hashes"
rate = 300
mix = { HSET = 1, HGET = 1, HGETALL = 1 }
keys = { count = 100, prefix = "h:" }
[[class]]
name = "zsets"
rate = 300
mix = { ZADD = 1, ZRANGE = 1, ZRANGEBYSCORE = 1, "ZRANGE __key__ 0 -1 WITHSCORES" = 1, "ZSCORE __key__ __member__" = 1 }
keys = { count = 100, prefix = "z:" }
[[class]]
name = "lists"
rate = 200
mix = { LPUSH = 1, LPOP = 1, LRANGE = 1 }
keys = { count = 100, prefix = "l:" }
"#,
    )
    .unwrap();
    let report = CrestRun::new(&dir)
        .args(&["--resp", "3", "--profile", profile.to_str().unwrap()])
        .run(0);
    let totals = &report["totals"];
    assert_eq!(u(totals, "errors"), 0, "{}", totals["errors_by_kind"]);
    assert_eq!(u(totals, "scheduled"), 2800);
    assert!(report["connection_errors"].as_object().unwrap().is_empty());
    assert!(u(&report["classes"]["strings"]["commands"]["GET"], "misses") > 0);
    assert_eq!(report["resp"], 3);
}

/// A server older than RESP3 (it knows no HELLO, as Redis 5): `--resp 3` stops the run
/// before any load with one line that quotes the server and says what would be right,
/// exit 2.
#[test]
fn resp3_on_a_server_without_hello_stops_the_run_with_one_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0
                        || s.write_all(
                            b"-ERR unknown command 'HELLO', with args beginning with: '3' \r\n",
                        )
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    let dir = TempDir::new("resp3-old-server");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &addr,
            "--resp",
            "3",
            "--rate",
            "100",
            "--duration",
            "1s",
        ])
        .run(2);
    assert!(report.is_null());
    let err = read_log(dir.path(), "crest", "stderr");
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.contains("unknown command 'HELLO'") && last.contains("give --resp 2"),
        "{err}"
    );
}

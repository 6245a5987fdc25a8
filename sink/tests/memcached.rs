//! Ties the sink's memcached mode to memcached itself, so they cannot drift apart: one
//! script of requests (text and meta; hits, misses, errors, multi-gets, noreply, quiet
//! mode and `mn`, a value too large, a non-numeric incr, cas with a good and a bad unique,
//! touch and gat, expiry, flush_all, base64 keys, connections memcached closes) is sent to
//! a real memcached 1.6 (Debian's, started here on a free loopback port with `-U 0`) and
//! to the sink. Every reply must be byte-identical but for what legitimately differs (CAS
//! uniques, the `VERSION` text, `mg t` seconds), and after the script the counters in
//! `stats` must be equal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A memcached of our own (`crest_testkit::Memcached`, stopped on drop) at a socket
/// address. Its start's one readiness connection is in its `total_connections`, as the
/// sink's one readiness connection is in the sink's.
struct Memcached {
    _server: crest_testkit::Memcached,
    addr: SocketAddr,
}

impl Memcached {
    fn start() -> Self {
        let server = crest_testkit::Memcached::start();
        let addr: SocketAddr = server.addr().parse().unwrap();
        Memcached {
            _server: server,
            addr,
        }
    }
}

/// The sink's memcached mode on a runtime of its own, stopped on drop.
struct Sink {
    addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
    _runtime: tokio::runtime::Runtime,
}

impl Sink {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(crest_sink::serve_memcache(listener, async {
            let _ = stopped.await;
        }));
        // The one connection memcached's start makes to see it is up, so both count the
        // same connections (a round trip: counted before any later one).
        Client::connect(addr).step(b"", 0);
        Sink {
            addr,
            _stop: stop,
            _runtime: runtime,
        }
    }
}

/// A connection that sends a step, then `mn`, and reads up to that `MN`.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The last CAS unique a reply showed.
    cas: u64,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
            cas: 0,
        }
    }

    /// Sends `request` and `mn`; returns the replies before the `MN` that answers it
    /// (`request` sends `mns` of its own).
    fn step(&mut self, request: &[u8], mns: usize) -> Vec<u8> {
        let mut bytes = request.to_vec();
        bytes.extend_from_slice(b"mn\r\n");
        self.stream.write_all(&bytes).unwrap();
        let t0 = Instant::now();
        loop {
            if let Some(end) = nth_mn(&self.buf, mns + 1) {
                let mut reply: Vec<u8> = self.buf.drain(..end).collect();
                reply.truncate(reply.len() - 4);
                if let Some(cas) = last_cas(&reply) {
                    self.cas = cas;
                }
                return reply;
            }
            assert!(t0.elapsed() < TIMEOUT, "no MN after {:?}", shown(request));
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "closed after {:?}", shown(request));
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends `request` (which ends the connection); returns everything until EOF.
    fn last(mut self, request: &[u8]) -> Vec<u8> {
        self.stream.write_all(request).unwrap();
        let mut all = std::mem::take(&mut self.buf);
        let mut chunk = [0u8; 65536];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return all,
                Ok(n) => all.extend_from_slice(&chunk[..n]),
                // A close with unread input is a reset.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return all,
                Err(e) => panic!("after {:?}: {e}", shown(request)),
            }
        }
    }

    /// `stats` (or `stats <sub>`), as name → value.
    fn stats(&mut self, sub: &str) -> HashMap<String, String> {
        let request = format!("stats{sub}\r\n");
        let reply = self.step(request.as_bytes(), 0);
        let text = String::from_utf8(reply).unwrap();
        assert!(text.ends_with("END\r\n"), "{text}");
        text.lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// Where the `n`th `MN` line of `buf` ends.
fn nth_mn(buf: &[u8], n: usize) -> Option<usize> {
    let mut seen = 0;
    let mut at = 0;
    while at + 4 <= buf.len() {
        if &buf[at..at + 4] == b"MN\r\n" && (at == 0 || buf[at - 1] == b'\n') {
            seen += 1;
            if seen == n {
                return Some(at + 4);
            }
            at += 4;
        } else {
            at += 1;
        }
    }
    None
}

fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
    if bytes.len() > 300 {
        format!("{text}… ({} bytes)", bytes.len())
    } else {
        text
    }
}

/// The last CAS unique in `reply`: a `gets` value's fifth field, or a meta reply's `c`.
fn last_cas(reply: &[u8]) -> Option<u64> {
    let mut cas = None;
    for line in reply.split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let words: Vec<&str> = line.trim_end().split(' ').collect();
        match words.as_slice() {
            ["VALUE", _, _, _, c] => cas = c.parse().ok().or(cas),
            [status, flags @ ..] if is_meta_status(status) => {
                for f in flags {
                    if let Some(c) = f.strip_prefix('c').and_then(|c| c.parse().ok()) {
                        cas = Some(c);
                    }
                }
            }
            _ => {}
        }
    }
    cas
}

fn is_meta_status(word: &str) -> bool {
    matches!(word, "VA" | "HD" | "EN" | "NF" | "NS" | "EX")
}

/// `reply` with what legitimately differs masked: CAS uniques (`gets`, meta `c`, `me`'s
/// `cas=`), `mg t` seconds other than -1, the `VERSION` text.
fn normalized(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply);
    let mut out = String::new();
    for line in text.split_inclusive("\r\n") {
        let (body, end) = match line.strip_suffix("\r\n") {
            Some(body) => (body, "\r\n"),
            None => (line, ""),
        };
        let words: Vec<&str> = body.split(' ').collect();
        let masked: Vec<String> = match words.as_slice() {
            ["VALUE", k, f, l, _] => vec![
                "VALUE".into(),
                k.to_string(),
                f.to_string(),
                l.to_string(),
                "*".into(),
            ],
            ["VERSION", ..] => vec!["VERSION".into(), "*".into()],
            [status, ..] if is_meta_status(status) => words
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let number = |p: char| {
                        w.strip_prefix(p)
                            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    };
                    if i > 0 && number('c') {
                        "c*".to_string()
                    } else if i > 0 && number('t') {
                        "t*".to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect(),
            ["ME", ..] => words
                .iter()
                .map(|w| {
                    if w.starts_with("cas=") {
                        "cas=*".to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect(),
            _ => words.iter().map(|w| w.to_string()).collect(),
        };
        out.push_str(&masked.join(" "));
        out.push_str(end);
    }
    out
}

/// One step of the script.
enum Step {
    /// Bytes sent in one write, and the `mn`s among them.
    Send(Vec<u8>, usize),
    /// As `Send`, `{cas}` replaced by the last CAS unique this server showed.
    WithCas(&'static str),
    /// Bytes after which the server closes the connection (a new one follows).
    Closes(Vec<u8>),
}

fn send(s: &str) -> Step {
    let mns = s
        .split("\r\n")
        .filter(|l| *l == "mn" || l.starts_with("mn "))
        .count();
    Step::Send(s.as_bytes().to_vec(), mns)
}

fn bytes(parts: &[&[u8]]) -> Step {
    Step::Send(parts.concat(), 0)
}

fn script() -> Vec<Step> {
    let long_key = "k".repeat(251);
    let huge = vec![b'x'; 2_000_000];
    // "edge" takes the largest value memcached stores under a 4-byte key, flags 0.
    let edge = vec![b'e'; 1_048_513];
    let multiget: String = (0..400).map(|i| format!(" k{i}")).collect();
    vec![
        // flush_all first, while these two are the only items: memcached's LRU
        // maintainer reaps flushed items on its own time, so every one is looked up in
        // the same write (both count get_flushed).
        send("set f1 0 0 1\r\na\r\nset f2 0 0 1\r\nb\r\nflush_all\r\nget f1 f2\r\n"),
        send("flush_all abc\r\nflush_all 0 noreply\r\nverbosity\r\nverbosity 1\r\nverbosity x\r\n"),
        // Text storage, retrieval, multi-get.
        send("set a 5 0 5\r\nhello\r\nget a\r\nget a missing a\r\ngets a\r\nbget a\r\n"),
        send(
            "add a 0 0 1\r\nx\r\nadd b 0 0 1\r\ny\r\nreplace nope 0 0 1\r\nx\r\n\
             replace b 7 0 2\r\nyy\r\nappend b 0 0 1\r\n!\r\nprepend b 0 0 1\r\n<\r\n\
             append nope 0 0 1\r\nx\r\nprepend nope 0 0 1\r\nx\r\nget b\r\n",
        ),
        send("set big 4294967295 0 3\r\nbig\r\nset flags 4294967296 0 1\r\nx\r\nget big flags\r\n"),
        // noreply, and what it silences.
        send(
            "set n 0 0 2 noreply\r\n10\r\nincr n 5 noreply\r\ndecr n 1 noreply\r\n\
             delete zz noreply\r\ntouch n 100 noreply\r\nincr n abc noreply\r\n\
             set k 0 0 1 noreply\r\nxyz\r\nget n\r\n",
        ),
        // incr/decr: padding, wrapping, growing, misses, non-numeric values.
        send(
            "incr n 1\r\ndecr n 100\r\nget n\r\nincr nope 1\r\ndecr nope 1\r\nincr a 1\r\n\
             incr n abc\r\nincr n -1\r\nset max 0 0 20\r\n18446744073709551615\r\n\
             incr max 1\r\nget max\r\nset nine 0 0 1\r\n9\r\nincr nine 1\r\nget nine\r\n\
             set odd 0 0 5\r\n12 34\r\nincr odd 1\r\nget odd\r\nset empty 0 0 0\r\n\r\n\
             incr empty 1\r\nset neg 0 0 2\r\n-5\r\nincr neg 1\r\n",
        ),
        // cas with a good unique, then the same (now bad) one, then a missing key.
        send("gets a\r\n"),
        Step::WithCas(
            "cas a 0 0 3 {cas}\r\nnew\r\ncas a 0 0 3 {cas}\r\nold\r\ncas nope 0 0 1 1\r\nx\r\n\
             cas a 0 0 1 abc\r\nx\r\ncas a 0 0 1\r\nx\r\ngets a\r\n",
        ),
        // touch and gat.
        send(
            "touch a 100\r\ntouch nope 100\r\ntouch a abc\r\ngat 100 a nope\r\ngats 0 a\r\n\
             gat abc a\r\ngat 10\r\nmg a t v\r\n",
        ),
        // Expiry: negative, touched away, a unix time past; each looked up in its write.
        send(
            "set e1 0 -1 1\r\nx\r\nget e1\r\nset e2 0 0 1\r\nx\r\ntouch e2 -1\r\nget e2\r\n\
             set e3 0 0 1\r\nx\r\ngat -1 e3\r\nget e3\r\nset e4 0 1000000000 1\r\nx\r\nget e4\r\n\
             ms e5 1 T-1\r\nx\r\nmg e5 v\r\nset e6 0 -1 1\r\nx\r\nset e6 0 0 1\r\ny\r\nget e6\r\n",
        ),
        send("delete a\r\ndelete a\r\ndelete b 0\r\ndelete b 5\r\ndelete x y z w\r\ndelete\r\n"),
        // Errors.
        send("foo\r\n\r\nGET a\r\nget\r\nset k 0 0\r\nset k abc 0 1\r\nx\r\nset k 0 0 -1\r\nx\r\n"),
        send(&format!(
            "set {long_key} 0 0 1\r\nx\r\nset n2 0 0 1\r\n1\r\nget n2 {long_key} n2\r\n\
             mg {long_key} v\r\ntouch {long_key} 1\r\nset k 0 0 1\r\nxyz\r\n\
             set k 0 0 1 a b c d e f g h i j k l m n o p q r s t u v w x y z\r\nx\r\n\
             version\r\nshutdown\r\nmx a\r\nm\r\nmgx a\r\nmg\r\nget\ta\r\nget a\0junk\r\n"
        )),
        // A key too long in a get drops the replies memcached had not written yet.
        send(&format!(
            "set c 0 0 1\r\nx\r\nmn\r\nset d 0 0 1\r\ny\r\nget c {long_key}\r\n"
        )),
        send(&{
            let mut batch: String = (0..50)
                .map(|i| format!("set s{i} 0 0 1\r\nx\r\n"))
                .collect();
            batch.push_str(&format!("get s1 {long_key}\r\nget s2\r\n"));
            batch
        }),
        // A value too large is refused and swallowed; at the limit it is stored; a
        // refused set drops what the key held.
        bytes(&[b"set huge 0 0 2000000\r\n", &huge, b"\r\nget huge\r\n"]),
        bytes(&[b"set edge 0 0 1048513\r\n", &edge, b"\r\nmg edge s\r\n"]),
        bytes(&[b"set edge 0 0 1048514\r\n", &edge, b"e\r\nmg edge s\r\n"]),
        bytes(&[b"ms huge 2000000 T0\r\n", &huge, b"\r\nmg huge\r\n"]),
        bytes(&[
            b"set ap 0 0 1000000\r\n",
            &vec![b'a'; 1_000_000],
            b"\r\nappend ap 0 0 100000\r\n",
            &vec![b'b'; 100_000],
            b"\r\nmg ap s\r\n",
        ]),
        // A long multi-get in one write.
        send(&format!("set k7 0 0 2\r\nk7\r\nget{multiget}\r\n")),
        // Meta: mg's flags, misses, quiet mode and mn.
        send(
            "ms m1 5 T0 F3\r\nhello\r\nmg m1 v f s k c O42\r\nmg m1 s v f t k O99 c\r\n\
             mg nope v\r\nmg nope v k O5 c f s t\r\nmg nope v q\r\nmg m1 q\r\n\
             mg m1 v q k\r\nmn\r\nmg nope q O1\r\nmn extra\r\nmg m1 vxyz kk\r\n",
        ),
        send(
            "ms hh 1\r\n1\r\nmg hh h l\r\nmg hh h l\r\nmg hh u h\r\nmg m1 v v\r\nmg m1 v Z\r\n\
             mg m1 E5\r\nmg m1 Tx\r\nmg m1 T\r\nmg m1 v f s k t c h u q O1 P L\r\n\
             mg m1 v f s k t c h l u q O P L a b c d e f g h\r\n",
        ),
        // ms modes and errors.
        send(
            "ms m2 2 ME\r\nhi\r\nms m2 2 ME q O7\r\nhi\r\nms m2 1 MA\r\n!\r\nms m2 1 MP\r\n<\r\n\
             ms nope 1 MR\r\nx\r\nms nope 1 MA\r\nx\r\nms m2 1 MX\r\nx\r\nms m2 1 Z\r\nx\r\n\
             ms m2 1 T1 T2\r\nx\r\nms m2 1 MSS\r\nx\r\nms m2 1 Fx\r\nx\r\nms m2 abc\r\n\
             ms m2\r\nmg m2 v\r\nms m2 1\r\nxyz\r\nms m2 1 q\r\nxyz\r\nms m2 1 Ms\r\nx\r\n\
             ms m3 2 k c O77 T0 F3 s v f\r\nhi\r\nms m3 1 c k ME O5\r\ny\r\nms m2 1 I\r\nx\r\n\
             ms e 0\r\n\r\nmg e v s\r\nms m2 1 O0 O1 O2 O3 O4 O5 O6 O7 O8 O9 O10 O11 O12 O13 O14 O15 O16 O17\r\nx\r\n",
        ),
        send(&format!(
            "ms m2 1 O{}\r\nx\r\nmg m2 O{}\r\nmg nope O{}\r\n",
            "1".repeat(40),
            "2".repeat(40),
            "3".repeat(40)
        )),
        // ms with a CAS: good, then stale, then a missing key.
        send("ms c1 1\r\nx\r\nmg c1 c\r\n"),
        Step::WithCas(
            "ms c1 1 C{cas}\r\ny\r\nms c1 1 C{cas}\r\nz\r\nms nope2 1 C5\r\nx\r\nmg c1 v\r\nms c1 1 MA C1\r\nq\r\n",
        ),
        // md.
        send(
            "md m1\r\nmd m1\r\nmd m1 q\r\nmd m2 q\r\nmn\r\nmd m2 O5 k\r\nms d1 1\r\nx\r\nmd d1 C1\r\n\
             md x q q\r\nmd x Z\r\nmd\r\nmd d1 q O9 k\r\nmn\r\n",
        ),
        // ma, and its counters.
        send(
            "ms n3 2\r\n10\r\nma n3\r\nma n3 v\r\nma n3 MD D5 v\r\nma n3 M- v\r\nma n3 M+ D100 v\r\n\
             ma n3 MI v t k O3\r\nma nope\r\nma nope MD\r\nma nope q\r\nma n3 q\r\nma n3 v q\r\nmn\r\n\
             ms mm 3\r\nabc\r\nma mm v\r\nma n3 Mx\r\nma n3 D-1\r\nma n3 Dx\r\nma n3 J5\r\n\
             ma nv N0 J7 v t\r\nma nv v\r\nma n3 C1 v\r\nma n3 q q\r\nma nq N0 q\r\nmn\r\n\
             ms w 20\r\n18446744073709551615\r\nma w v\r\nmg w v\r\n",
        ),
        // Win tokens and stale items.
        send(
            "mg vv N0 v\r\nmg vv v\r\nmg vv v N0\r\nmg vv\r\nms rr 1 T100\r\nx\r\nmg rr R200 v\r\nmg rr R200 v\r\n\
             ms st 1\r\nx\r\nmd st I\r\nmg st v\r\nmg st v\r\nmd st I q\r\nmn\r\n",
        ),
        // Base64 keys.
        send(
            "ms YmluYXJ5 2 b k\r\nhi\r\nmg YmluYXJ5 b v k\r\nget binary\r\nmg binary k v\r\n\
             md YmluYXJ5 b k\r\nmg !!!! b v\r\nme YmluYXJ5 b\r\n",
        ),
        // me.
        send("set meitem 0 0 1\r\nx\r\nme meitem\r\nme nope\r\nme\r\nme a b\r\n"),
        // stats subcommands whose reply is the same.
        send("stats nope\r\nstats detail\r\nstats detail on\r\n"),
        // What memcached closes the connection after.
        Step::Closes(b"set q 0 0 1\r\nx\r\nquit\r\nget q\r\n".to_vec()),
        Step::Closes(b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec()),
        Step::Closes([b"get q\r\n".as_slice(), &[b'z'; 3000]].concat()),
        Step::Closes(
            [
                b"set q 0 0 1\r\nx\r\n".as_slice(),
                &[b' '; 101],
                b"get ",
                &[b'k'; 3000],
            ]
            .concat(),
        ),
        send("get q\r\n"),
    ]
}

/// Runs the script on the server at `addr`: its replies, normalized, step by step.
fn run(addr: SocketAddr) -> Vec<String> {
    let mut client = Client::connect(addr);
    let mut replies = Vec::new();
    for step in script() {
        let reply = match step {
            Step::Send(request, mns) => client.step(&request, mns),
            Step::WithCas(template) => {
                let request = template.replace("{cas}", &client.cas.to_string());
                client.step(request.as_bytes(), 0)
            }
            Step::Closes(request) => {
                std::mem::replace(&mut client, Client::connect(addr)).last(&request)
            }
        };
        replies.push(normalized(&reply));
    }
    replies
}

/// What `stats` says once the connections the script closed are gone.
fn settled_stats(addr: SocketAddr) -> HashMap<String, String> {
    let mut client = Client::connect(addr);
    let t0 = Instant::now();
    loop {
        let stats = client.stats("");
        if stats["curr_connections"] == "1" {
            return stats;
        }
        assert!(t0.elapsed() < TIMEOUT, "connections still open: {stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_sink_answers_and_counts_as_memcached_does() {
    let memcached = Memcached::start();
    let sink = Sink::start();
    let expected = run(memcached.addr);
    let got = run(sink.addr);
    let script = script();
    for (i, (want, got)) in expected.iter().zip(&got).enumerate() {
        let request = match &script[i] {
            Step::Send(r, _) | Step::Closes(r) => shown(r),
            Step::WithCas(t) => t.to_string(),
        };
        assert_eq!(got, want, "step {i}: {request:?}");
    }
    assert_eq!(got.len(), expected.len());

    let want = settled_stats(memcached.addr);
    let have = settled_stats(sink.addr);
    let counters = [
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "cmd_meta",
        "get_hits",
        "get_misses",
        "get_expired",
        "get_flushed",
        "delete_misses",
        "delete_hits",
        "incr_misses",
        "incr_hits",
        "decr_misses",
        "decr_hits",
        "cas_misses",
        "cas_hits",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "store_too_large",
        "curr_items",
        "total_items",
        "bytes",
        "curr_connections",
        "total_connections",
        "evictions",
    ];
    let mut differ = Vec::new();
    for name in counters {
        let (w, h) = (want.get(name), have.get(name));
        assert!(w.is_some(), "memcached has no {name}");
        if w != h {
            differ.push(format!("{name}: memcached {w:?}, sink {h:?}"));
        }
    }
    assert!(differ.is_empty(), "stats differ:\n{}", differ.join("\n"));
    // Counted at all, so the comparison means something.
    for name in [
        "cmd_get",
        "get_flushed",
        "get_expired",
        "cas_hits",
        "cas_badval",
        "touch_hits",
    ] {
        assert_ne!(want[name], "0", "{name}");
    }
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "rusage_user",
        "rusage_system",
        "threads",
    ] {
        assert!(have.contains_key(name), "the sink's stats lack {name}");
    }
    let mut client = Client::connect(sink.addr);
    let settings = client.stats(" settings");
    assert_eq!(settings["item_size_max"], "1048576");
}

/// `stats reset` zeroes the counters as memcached's does (checked after the script's
/// comparison, on fresh servers).
#[test]
fn stats_reset_zeroes_the_same_counters() {
    let memcached = Memcached::start();
    let sink = Sink::start();
    let mut after = Vec::new();
    for addr in [memcached.addr, sink.addr] {
        let mut client = Client::connect(addr);
        client.step(
            b"set a 0 0 1\r\nx\r\nget a b\r\nstats reset\r\nget a\r\n",
            0,
        );
        let stats = client.stats("");
        after.push(
            [
                "cmd_get",
                "get_hits",
                "get_misses",
                "cmd_set",
                "total_items",
                "curr_items",
                "total_connections",
            ]
            .map(|name| (name, stats[name].clone())),
        );
    }
    assert_eq!(after[0], after[1]);
}

/// A multi-get line that never ends is cut at the input budget, with memcached's error for
/// a read it cannot buffer, and only that connection is closed.
#[tokio::test]
async fn an_endless_multiget_is_cut_at_the_input_budget() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = crest_sink::Limits {
        query_buffer: 100_000,
        ..crest_sink::Limits::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crest_sink::serve_memcache_with(
        listener,
        async {
            let _ = stopped.await;
        },
        limits,
    ));
    let mut endless = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut line = b"get".to_vec();
    while line.len() < 120_000 {
        line.extend_from_slice(b" key");
    }
    endless.write_all(&line).await.unwrap();
    // Read to EOF, or to the reset a close with unread input sends after the reply.
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(TIMEOUT, endless.read(&mut chunk))
            .await
            .expect("closed in time")
        {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
        }
    }
    assert_eq!(reply, b"SERVER_ERROR out of memory reading request\r\n");

    let mut good = tokio::net::TcpStream::connect(addr).await.unwrap();
    good.write_all(b"version\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(TIMEOUT, good.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..n], b"VERSION 1.6.18-crest-sink\r\n");

    // Shutdown: serve returns and its connections close.
    stop.send(()).unwrap();
    let served = tokio::time::timeout(TIMEOUT, server)
        .await
        .unwrap()
        .unwrap();
    assert!(served.is_ok(), "{served:?}");
    let n = tokio::time::timeout(TIMEOUT, good.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "connection closed");
}

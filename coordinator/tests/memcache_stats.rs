//! The server sampler against real memcached 1.6 servers (issue #28): a known mix of text
//! or meta requests, sent here on plain connections, moves the sampler's snapshots by
//! exactly the counts the family table says (a multi-get per key, a meta touch's miss as a
//! get), the sampler's own `stats` move no command counter, a ring's servers are summed,
//! and the truth check agrees family by family.

use crest::server_stats::Sampler;
use crest_report::server::memcache::{Keys, McBooks};
use crest_report::server::series::{self, Books, Mark, Sent, Series};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A memcached of our own (`-U 0`), stopped on drop, at a socket address.
struct Memcached {
    _server: crest_testkit::Memcached,
    addr: SocketAddr,
}

impl Memcached {
    fn start() -> Self {
        let server = crest_testkit::Memcached::start();
        let addr = server.addr().parse().unwrap();
        Self {
            _server: server,
            addr,
        }
    }

    fn connect(&self) -> Client {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Client { s }
    }
}

/// A plain connection of the test's own.
struct Client {
    s: TcpStream,
}

impl Client {
    /// Sends `req` and an `mn` after it, and reads every reply up to that `MN` (memcached
    /// counts `mn` nowhere): the requests have all run when it returns.
    fn run(&mut self, req: &str) -> String {
        let own = req.lines().filter(|l| l.trim() == "mn").count();
        self.s.write_all(req.as_bytes()).unwrap();
        self.s.write_all(b"mn\r\n").unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let t0 = Instant::now();
        loop {
            let text = String::from_utf8_lossy(&buf);
            if text.lines().filter(|l| l.trim() == "MN").count() > own {
                return text.into_owned();
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "{text}");
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "memcached closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    }
}

const INTERVAL: Duration = Duration::from_secs(1);

/// Every request answered, `misses` of them nil (or missing keys).
fn all(sent: u64, misses: u64) -> Sent {
    Sent {
        sent,
        answered: sent,
        completed: sent,
        misses,
    }
}

fn books<'a>(
    commands: &'a BTreeMap<String, Sent>,
    coordinator_calls: &'a BTreeMap<String, u64>,
    mc: McBooks<'a>,
) -> Books<'a> {
    Books {
        commands,
        rows: 2,
        interval_s: 1.0,
        warmup: false,
        in_flight_max: 1,
        first_rate: 0.0,
        cluster: false,
        replica_reads: false,
        coordinator_calls,
        short: None,
        refused: None,
        memcache: Some(mc),
    }
}

/// Samples before the load, after it, twice more with nothing in between, and at the end.
async fn sampled(mut s: Sampler, load: impl FnOnce()) -> Series {
    s.sample(Mark::BeforeLoad, None).await;
    load();
    s.sample(Mark::Boundary(1), None).await;
    s.sample(Mark::Boundary(2), None).await;
    s.clock(Instant::now(), Duration::from_secs(3600), 3, None)
        .finish()
        .await
}

/// The text protocol on a ring of two servers: every family's counter moves by the
/// family table's count (the multi-gets per key, gat and touch in cmd_touch, deletes,
/// incrs and decrs in their hits and misses), the two servers' figures summed; the
/// sampler's `stats` alone move nothing; the truth check agrees with the exact counts.
#[tokio::test]
async fn a_text_mix_on_a_ring_moves_the_counters_the_table_says() {
    let (a, b) = (Memcached::start(), Memcached::start());
    let sampler = Sampler::connect_memcache(&[a.addr, b.addr], "memcache://ring", None, INTERVAL)
        .await
        .unwrap();
    let (mut ca, mut cb) = (a.connect(), b.connect());
    let series = sampled(sampler, || {
        let mut sets = String::new();
        for k in 1..=5 {
            sets.push_str(&format!("set k{k} 0 0 1\r\nv\r\n"));
        }
        ca.run(&sets);
        let r = ca.run(
            "add k1 0 0 1\r\nv\r\nadd k6 0 0 1\r\nv\r\nreplace k2 0 0 1\r\nw\r\nreplace nope 0 0 1\r\nw\r\n\
             append k1 0 0 1\r\n!\r\nprepend k1 0 0 1\r\n>\r\ncas k1 0 0 1 1\r\nz\r\n",
        );
        assert!(r.starts_with("NOT_STORED\r\nSTORED\r\nSTORED\r\nNOT_STORED\r\nSTORED\r\nSTORED\r\nEXISTS\r\n"), "{r}");
        ca.run("get k1\r\nget nope\r\ngets k2\r\nget k1 k2 nope\r\nget k3 k4 nope\r\n");
        let r = ca.run("gat 100 k3\r\ngats 100 nope\r\ntouch k4 100\r\ntouch nope 100\r\n");
        assert!(r.contains("TOUCHED\r\nNOT_FOUND\r\n"), "{r}");
        let r = ca.run("delete k5\r\ndelete k5\r\nset n 0 0 2\r\n10\r\nincr n 5\r\nincr nope 1\r\ndecr n 1\r\nversion\r\n");
        assert!(r.starts_with("DELETED\r\nNOT_FOUND\r\nSTORED\r\n15\r\nNOT_FOUND\r\n14\r\nVERSION 1.6"), "{r}");
        cb.run("set x 0 0 1\r\nv\r\nget x\r\nget x y z\r\n");
    })
    .await;
    assert_eq!(series.notes, Vec::<String>::new());
    assert_eq!(series.unanswered, 0);
    assert_eq!(series.io_threads, Some(1), "memcached -t 1 on both");
    let marks: Vec<Mark> = series.samples.iter().map(|s| s.mark).collect();
    assert_eq!(
        marks,
        [
            Mark::BeforeLoad,
            Mark::Boundary(1),
            Mark::Boundary(2),
            Mark::Final
        ]
    );
    // The load, as the server counted it.
    let load = series::row(&series.samples[0], &series.samples[1], Some(0), 0.0);
    let calls = |n: &str| load.commands.get(n).map_or(0, |d| d.calls);
    // cmd_get: get k1, get nope, gets k2, two multi-gets of 3 on a; get x, get x y z on b.
    assert_eq!(calls("cmd_get"), 2 + 1 + 6 + 1 + 3);
    // cmd_set: 5 sets, 2 adds, 2 replaces, append, prepend, cas, set n on a; set x on b.
    assert_eq!(calls("cmd_set"), 5 + 2 + 2 + 1 + 1 + 1 + 1 + 1);
    // cmd_touch: gat, gats (one key each), two touches.
    assert_eq!(calls("cmd_touch"), 4);
    assert_eq!(
        (
            calls("delete"),
            calls("incr"),
            calls("decr"),
            calls("cmd_flush")
        ),
        (2, 2, 1, 0)
    );
    assert_eq!(load.ops, Some(13 + 14 + 4 + 2 + 2 + 1));
    // Hits and misses, gets' and touches' together, per key: get k1 hit, nope miss, k2
    // hit, the multi-gets 4 hits and 2 misses, x hit, x hit and y z missing;
    // gat k3 hit, gats nope miss, touch k4 hit, touch nope miss.
    assert_eq!(load.keyspace_hits, Some(1 + 1 + 4 + 1 + 1 + 2));
    assert_eq!(load.keyspace_misses, Some(1 + 2 + 2 + 2));
    assert!(load.cpu_us.is_some());
    assert_eq!(
        load.keys,
        Some(6 + 1),
        "k1-k4, k6 and n on a (k5 deleted), x on b"
    );
    assert_eq!(
        load.connected_clients,
        Some(4),
        "ours and the sampler's, per server"
    );
    assert!(load.counter_reset.is_empty(), "{:?}", load.counter_reset);
    // Nothing but the sampler's stats between the later samples: no command counted.
    for (x, y) in [(1, 2), (2, 3)] {
        let idle = series::row(&series.samples[x], &series.samples[y], None, 0.0);
        assert_eq!(idle.ops, Some(0), "{:?}", idle.commands);
        assert!(idle.commands.is_empty(), "{:?}", idle.commands);
        assert_eq!(
            (idle.keyspace_hits, idle.keyspace_misses),
            (Some(0), Some(0))
        );
    }
    // The truth check, as the report would have these requests.
    let commands: BTreeMap<String, Sent> = [
        ("SET", all(7, 0)),
        ("ADD", all(2, 1)),
        ("REPLACE", all(2, 1)),
        ("APPEND", all(1, 0)),
        ("PREPEND", all(1, 0)),
        ("CAS", all(1, 1)),
        ("GET", all(3, 1)),
        ("GETS", all(1, 0)),
        ("MGET", all(3, 4)),
        ("GAT", all(1, 0)),
        ("GATS", all(1, 1)),
        ("TOUCH", all(2, 1)),
        ("DEL", all(2, 1)),
        ("INCR", all(2, 1)),
        ("DECR", all(1, 0)),
        ("PING", all(1, 0)),
    ]
    .map(|(c, s)| (c.to_string(), s))
    .into();
    let keys: BTreeMap<String, Keys> = [(
        "MGET".to_string(),
        Keys::per_request(commands["MGET"].sent, commands["MGET"].completed, 3),
    )]
    .into();
    let none = BTreeMap::new();
    let mc = McBooks {
        meta: false,
        keys: &keys,
    };
    let (r, problem) = series::report(&series, &books(&commands, &none, mc)).unwrap();
    assert!(problem.is_none(), "{problem:?}");
    assert_eq!(r.agrees, Some(true), "{:#?}", r.agreement);
    assert_eq!(r.identity.version, "memcached 1.6.18");
    let judged: Vec<(&str, u64, u64)> = r
        .agreement
        .iter()
        .filter(|a| a.judged)
        .map(|a| (a.command.as_str(), a.server, a.sent))
        .collect();
    assert_eq!(
        judged,
        [
            ("cmd_get (GET + GETS + MGET keys)", 13, 13),
            ("cmd_touch (GAT + GATS + TOUCH)", 4, 4),
            (
                "cmd_set (ADD + APPEND + CAS + PREPEND + REPLACE + SET)",
                14,
                14
            ),
            ("delete (DEL)", 2, 2),
            ("incr (INCR)", 2, 2),
            ("decr (DECR)", 1, 1),
        ]
    );
    // The server's misses beside the report's: the same, family by family.
    for a in r.agreement.iter().filter(|a| a.judged) {
        let m = a.memcache.as_ref().unwrap();
        if let Some(x) = m.server_misses {
            assert_eq!(x, m.misses, "{}", a.command);
        }
    }
    assert!(r.other_commands.is_empty(), "{:?}", r.other_commands);
    assert!(r.unchecked.is_none());
    assert!(r.drain.is_some_and(|d| d.ops == Some(0)));
}

/// The meta protocol on one server: `ms` in every mode moves cmd_set, a meta GAT or TOUCH
/// moves cmd_touch on a hit but cmd_get on a miss, so the text table disagrees and the
/// meta table (gets and touches together) agrees.
#[tokio::test]
async fn a_meta_mix_moves_gets_and_touches_together() {
    let m = Memcached::start();
    let sampler = Sampler::connect_memcache(&[m.addr], "memcache://one", None, INTERVAL)
        .await
        .unwrap();
    let mut c = m.connect();
    let series = sampled(sampler, || {
        let r = c.run(
            "ms a 1\r\nv\r\nms a 1 MS\r\nv\r\nms b 1 ME\r\nv\r\nms b 1 ME\r\nv\r\nms a 1 MA\r\n!\r\n\
             ms a 1 MP\r\n>\r\nms a 1 MR\r\nw\r\nms nope 1 MR\r\nw\r\nms a 1 C1\r\nz\r\nms n 2\r\n10\r\n",
        );
        assert!(r.starts_with("HD\r\nHD\r\nHD\r\nNS\r\nHD\r\nHD\r\nHD\r\nNS\r\nEX\r\nHD\r\n"), "{r}");
        // GET ×2 (one miss), GETS, an MGET of 3 (quiet, ended by its own mn).
        c.run("mg a v\r\nmg nope v\r\nmg a v c\r\nmg a v q\r\nmg b v q\r\nmg nope v q\r\nmn\r\n");
        // GAT hit and miss, GATS hit, TOUCH hit and miss.
        let r = c.run("mg a v T30\r\nmg nope v T30\r\nmg b v c T30\r\nmg a T30\r\nmg nope T30\r\n");
        assert_eq!(r.matches("EN\r\n").count(), 2, "{r}");
        c.run("md a\r\nmd a\r\nma n\r\nma nope\r\nma n MD\r\nmn\r\n");
    })
    .await;
    assert_eq!(series.notes, Vec::<String>::new());
    let load = series::row(&series.samples[0], &series.samples[1], Some(0), 0.0);
    let calls = |n: &str| load.commands.get(n).map_or(0, |d| d.calls);
    // cmd_get: mg ×2, mg c, 3 quiet, and the two touch misses; cmd_touch: the 3 hits.
    assert_eq!((calls("cmd_get"), calls("cmd_touch")), (3 + 3 + 2, 3));
    assert_eq!(calls("cmd_set"), 10);
    assert_eq!((calls("delete"), calls("incr"), calls("decr")), (2, 2, 1));
    let commands: BTreeMap<String, Sent> = [
        ("SET", all(3, 0)),
        ("ADD", all(2, 1)),
        ("APPEND", all(1, 0)),
        ("PREPEND", all(1, 0)),
        ("REPLACE", all(2, 1)),
        ("CAS", all(1, 1)),
        ("GET", all(2, 1)),
        ("GETS", all(1, 0)),
        ("MGET", all(1, 1)),
        ("GAT", all(2, 1)),
        ("GATS", all(1, 0)),
        ("TOUCH", all(2, 1)),
        ("DEL", all(2, 1)),
        ("INCR", all(2, 1)),
        ("DECR", all(1, 0)),
        ("PING", all(2, 0)),
    ]
    .map(|(c, s)| (c.to_string(), s))
    .into();
    let keys: BTreeMap<String, Keys> = [(
        "MGET".to_string(),
        Keys::per_request(commands["MGET"].sent, commands["MGET"].completed, 3),
    )]
    .into();
    let none = BTreeMap::new();
    let text = McBooks {
        meta: false,
        keys: &keys,
    };
    let (r, problem) = series::report(&series, &books(&commands, &none, text)).unwrap();
    assert_eq!(r.agrees, Some(false), "a meta touch's miss is no touch");
    assert!(
        problem
            .unwrap()
            .contains("cmd_touch (GAT + GATS + TOUCH) 3 by the server vs 5 sent")
    );
    let meta = McBooks { meta: true, ..text };
    let (r, problem) = series::report(&series, &books(&commands, &none, meta)).unwrap();
    assert!(problem.is_none(), "{problem:?}");
    assert_eq!(r.agrees, Some(true));
    let both = &r.agreement[0];
    assert_eq!(
        (both.command.as_str(), both.server, both.sent),
        (
            "cmd_get+cmd_touch (GAT + GATS + GET + GETS + MGET keys + TOUCH)",
            11,
            11
        )
    );
    let f = both.memcache.as_ref().unwrap();
    assert_eq!((f.server_misses, f.misses), (Some(4), 4));
}

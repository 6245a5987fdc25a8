//! Ties Crest's command vocabulary to what the sink answers, so they cannot drift apart:
//! every command in `crest_model::workload::BUILTINS`, encoded by the engine's own encoder
//! in every shape it sends (batch 1 and 3, with and without a TTL), is answered by the
//! sink without an error and counted in `INFO commandstats`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use crest_model::rng::Rng;
use crest_model::shapes::{KeyDist, KeySpace, ValueSizes};
use crest_model::workload::{BUILTINS, CmdDef, Cursor, Workload};
use crest_resp::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The keys a built-in works on: commands of one family share one key, so reads find what
/// the writes wrote, and no command meets a value of another type (which Redis would
/// answer with WRONGTYPE too). A new built-in must be placed here.
fn family(name: &str) -> &'static str {
    match name {
        "GET" | "SET" | "DEL" | "EXISTS" | "EXPIRE" | "MGET" | "MSET" => "string",
        // INCR needs an integer, which SET's random value is not.
        "INCR" => "counter",
        "HSET" | "HGET" | "HGETALL" => "hash",
        "LPUSH" | "RPUSH" | "LPOP" | "RPOP" | "LRANGE" => "list",
        "SADD" | "SREM" | "SISMEMBER" | "SPOP" => "set",
        "ZADD" | "ZREM" | "ZRANGE" | "ZRANGEBYSCORE" | "ZCARD" | "ZPOPMIN" => "zset",
        "XADD" => "stream",
        "PING" => "none",
        other => panic!(
            "BUILTINS has {other}, which this test does not know: add it to family() and phase()"
        ),
    }
}

/// Order within a family: writes first, then reads, then what removes data.
fn phase(name: &str) -> u8 {
    match name {
        "SET" | "MSET" | "INCR" | "HSET" | "LPUSH" | "RPUSH" | "SADD" | "ZADD" | "XADD" => 0,
        "DEL" | "LPOP" | "RPOP" | "SREM" | "ZREM" | "SPOP" | "ZPOPMIN" => 2,
        _ => 1,
    }
}

/// A sink on a free loopback port, stopped when dropped.
struct Sink {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

async fn start() -> Sink {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(crest_sink::serve(listener, async {
        let _ = stopped.await;
    }));
    Sink { addr, _stop: stop }
}

struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        Client {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    /// Sends one encoded request and reads its reply.
    async fn call_raw(&mut self, request: &[u8]) -> Frame {
        self.stream.write_all(request).await.unwrap();
        loop {
            if let Some((frame, used)) = Frame::parse(&self.buf).unwrap() {
                self.buf.drain(..used);
                return frame;
            }
            let n = tokio::time::timeout(TIMEOUT, self.stream.read_buf(&mut self.buf))
                .await
                .expect("reply in time")
                .unwrap();
            assert!(n > 0, "sink closed the connection");
        }
    }

    async fn call(&mut self, args: &[&str]) -> Frame {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut request = Vec::new();
        crest_resp::encode_command(&mut request, &args);
        self.call_raw(&request).await
    }

    /// `cmdstat_<name>` → (calls, rejected_calls, failed_calls), read with the parser
    /// every crate's tests share (`crest-testkit`).
    async fn commandstats(&mut self) -> HashMap<String, (u64, u64, u64)> {
        let reply = self.call(&["INFO", "commandstats"]).await;
        crest_testkit::parse_info(&reply, "cmdstat_")
            .into_iter()
            .map(|(name, f)| {
                let field = |k: &str| f.get(k).copied().unwrap();
                let stats = (
                    field("calls"),
                    field("rejected_calls"),
                    field("failed_calls"),
                );
                (name, stats)
            })
            .collect()
    }
}

/// One family's commands as the engine builds and encodes them.
fn workload(names: &[&str], batch: u32, ttl: Option<u64>, prefix: &str) -> Workload {
    let commands = names
        .iter()
        .map(|name| (CmdDef::parse(name, batch, ttl, 10).unwrap(), 1))
        .collect();
    Workload::new(
        commands,
        KeySpace::new(1, prefix, KeyDist::Uniform).unwrap(),
        ValueSizes::Fixed(8),
        3,
        false,
        ttl,
        42,
    )
    .unwrap()
}

/// Sends `rounds` passes over `workload`'s commands in order; asserts no reply is an error.
async fn drive(client: &mut Client, workload: &Workload, rounds: usize) -> Vec<String> {
    let names = workload.names();
    let mut rng = Rng::new(7);
    let mut cursor = Cursor::default();
    let mut sent = Vec::new();
    for _ in 0..rounds {
        for (i, name) in names.iter().enumerate() {
            let mut request = Vec::new();
            workload.encode(i, &mut rng, &mut cursor, &mut request);
            let reply = client.call_raw(&request).await;
            assert!(
                !matches!(reply, Frame::Error(_)),
                "{name} ({}) got {reply:?}",
                String::from_utf8_lossy(&request).escape_debug()
            );
            sent.push(name.clone());
        }
    }
    sent
}

fn counted(sent: &[String]) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for name in sent {
        *counts.entry(name.to_ascii_lowercase()).or_insert(0) += 1;
    }
    counts
}

#[tokio::test]
async fn every_builtin_as_the_engine_sends_it_is_answered_and_counted() {
    let sink = start().await;
    let mut client = Client::connect(sink.addr).await;
    let mut families: Vec<&str> = BUILTINS.iter().map(|name| family(name)).collect();
    families.sort_unstable();
    families.dedup();

    let mut sent = Vec::new();
    for (batch, ttl) in [(1, None), (3, Some(30)), (3, None)] {
        for family_name in &families {
            let mut names: Vec<&str> = BUILTINS
                .iter()
                .copied()
                .filter(|name| family(name) == *family_name)
                .collect();
            names.sort_by_key(|name| phase(name));
            let prefix = format!("{family_name}:{batch}:{ttl:?}:");
            let workload = workload(&names, batch, ttl, &prefix);
            sent.extend(drive(&mut client, &workload, 2).await);
        }
    }

    let stats = client.commandstats().await;
    for (name, calls) in counted(&sent) {
        assert_eq!(
            stats.get(&name),
            Some(&(calls, 0, 0)),
            "cmdstat_{name}: (calls, rejected, failed)"
        );
    }
    for name in BUILTINS {
        assert!(
            sent.iter().any(|s| s == name),
            "{name} was sent at least once"
        );
    }
}

#[tokio::test]
async fn user_templates_with_redis_options_are_answered() {
    // Forms a user's `--command` may send for the built-ins' commands, beyond the shapes
    // the engine builds itself.
    let templates: &[(&str, &str)] = &[
        ("string", "SET __key__ __value__ PX 60000 NX"),
        ("string", "SET __key__ __value__ EX __ttl__ GET"),
        ("string", "SET __key__ __value__ KEEPTTL XX"),
        ("string", "EXPIRE __key__ 100 GT"),
        ("string", "EXPIRE __key__ 50 LT"),
        ("string", "TTL __key__"),
        ("string", "PTTL __key__"),
        ("string", "TYPE __key__"),
        ("counter", "INCRBY __key__ 5"),
        ("counter", "DECRBY __key__ 2"),
        ("counter", "DECR __key__"),
        ("hash", "HSET __key__ __field__ __value__ f9 __value__"),
        ("hash", "HLEN __key__"),
        ("hash", "HDEL __key__ __field__"),
        (
            "list",
            "RPUSH __key__ __value__ __value__ __value__ __value__",
        ),
        ("list", "LPOP __key__ 2"),
        ("list", "RPOP __key__ 0"),
        ("list", "LRANGE __key__ -3 -1"),
        ("list", "LLEN __key__"),
        ("set", "SADD __key__ __member__ m1 m2"),
        ("set", "SMEMBERS __key__"),
        ("set", "SCARD __key__"),
        ("set", "SREM __key__ m1 m2"),
        (
            "zset",
            "ZADD __key__ __score__ __member__ 1.5 m1 -inf m2 +inf m3",
        ),
        ("zset", "ZADD __key__ GT CH __score__ __member__"),
        ("zset", "ZADD __key__ XX INCR 2 m1"),
        ("zset", "ZSCORE __key__ m1"),
        ("zset", "ZRANGE __key__ 0 -1 WITHSCORES"),
        ("zset", "ZRANGE __key__ 0 1 REV"),
        (
            "zset",
            "ZRANGE __key__ +inf (1 BYSCORE REV LIMIT 0 3 WITHSCORES",
        ),
        (
            "zset",
            "ZRANGEBYSCORE __key__ (0 +inf WITHSCORES LIMIT 0 10",
        ),
        ("zset", "ZRANGEBYSCORE __key__ -inf (3.5"),
        ("zset", "ZREM __key__ m1 m2 nope"),
    ];
    let sink = start().await;
    let mut client = Client::connect(sink.addr).await;
    let mut sent = Vec::new();
    for (family_name, template) in templates {
        let def = CmdDef::template(template).unwrap();
        let workload = Workload::new(
            vec![(def, 1)],
            KeySpace::new(1, &format!("{family_name}:"), KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(8),
            3,
            false,
            Some(60),
            1,
        )
        .unwrap();
        sent.extend(drive(&mut client, &workload, 1).await);
    }
    let stats = client.commandstats().await;
    for (name, calls) in counted(&sent) {
        assert_eq!(stats.get(&name), Some(&(calls, 0, 0)), "cmdstat_{name}");
    }
}

#[test]
fn every_builtin_is_in_the_dispatch_table() {
    let table: HashSet<&str> = crest_sink::commands().collect();
    for name in BUILTINS {
        assert!(
            table.contains(name.to_ascii_lowercase().as_str()),
            "the sink has no {name}, which Crest sends"
        );
    }
    assert!(
        crest_sink::commands()
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| w[0] < w[1]),
        "names are listed sorted and once"
    );
}

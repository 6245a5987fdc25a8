//! Crest's built-in in-memory RESP2 target (the sink).
//!
//! Its one job is to answer Redis-protocol requests as cheaply as possible. It exists so Crest
//! runs with no server installed (the default when no `--target` is given, or
//! `crest sink --listen ADDR`), and so a generator fleet's own ceiling can be measured against
//! a target that is not the bottleneck.
//!
//! It speaks enough of Redis 7.0 for Crest's workloads and for the handshakes clients send:
//! `PING ECHO GET SET DEL EXISTS INCR DECR INCRBY DECRBY MGET MSET DBSIZE FLUSHALL FLUSHDB
//! COMMAND HELLO CLIENT SELECT INFO QUIT`, with Redis's error texts. `INFO commandstats`
//! counts calls per command in Redis's format, so end-to-end tests check Crest's report
//! against the sink's own counters exactly as they do against Redis.
//!
//! Cost model: keys live in 64 `std::sync::Mutex`-guarded maps chosen by key hash (no
//! async lock on the hot path; a lock is held for one map operation). Each connection parses
//! every pipelined request it has read, appends all replies to one buffer and writes it once.
//! Per-command counters are kept per connection and added to shared atomics once per read
//! batch, before the replies are written, so a client never sees a reply whose call is not
//! counted yet, and connections do not contend on one counter per request.
//!
//! Differences from Redis, on purpose: expiry is lazy only (an expired key is removed when
//! touched, or by `DBSIZE` and `INFO keyspace`, which sweep); `SET` accepts
//! `EX PX NX XX GET KEEPTTL` but not `EXAT`/`PXAT`; `MSET` is not atomic across keys;
//! `INFO` with no section includes every section, `commandstats` too; subcommands are
//! counted under their command (`cmdstat_client`, where Redis 7 says `cmdstat_client|id`);
//! `usec` is always 0; `HELLO` ignores `AUTH` and `SETNAME`; only database 0 exists.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crest_resp::{
    Frame, encode_array_header, encode_bulk, encode_integer, parse_integer, parse_request,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Number of independently locked maps. A power of two well above the core counts of the
/// machines Crest runs on, so two connections rarely wait for the same lock.
const SHARDS: usize = 1 << SHARD_BITS;
const SHARD_BITS: u32 = 6;

/// Bytes a connection asks the kernel for per read, and its buffers' starting size.
const READ_CHUNK: usize = 64 * 1024;

/// A connection's buffer above this size is given back once it is empty, so one large
/// value does not pin its memory for the connection's lifetime.
const MAX_IDLE_BUFFER: usize = 1024 * 1024;

/// Accept errors such as EMFILE are retried after a pause that doubles up to this bound.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(1);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Repeated accept warnings are logged at most this often.
const WARN_INTERVAL: Duration = Duration::from_secs(10);

const OK: &[u8] = b"+OK\r\n";
const NIL: &[u8] = b"$-1\r\n";
const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
const SYNTAX_ERROR: &str = "ERR syntax error";
const INVALID_EXPIRE: &str = "ERR invalid expire time in 'set' command";
const INCR_OVERFLOW: &str = "ERR increment or decrement would overflow";
const DECR_OVERFLOW: &str = "ERR decrement would overflow";
const MSET_ARITY: &str = "ERR wrong number of arguments for 'mset' command";
const NOPROTO: &str = "NOPROTO sorry, this protocol version is not supported";
const BAD_PROTOVER: &str = "ERR Protocol version is not an integer or out of range";
const BAD_DB: &str = "ERR DB index is out of range";

/// Serves RESP2 clients on `listener` until `shutdown` resolves; then stops accepting and
/// closes connections.
///
/// Each call has its own empty store. A connection's I/O or protocol error closes that
/// connection only. Transient accept errors (out of file descriptors, a connection aborted
/// before it was accepted) are logged, rate-limited, and retried with backoff.
///
/// # Errors
///
/// An accept error that retrying cannot fix (e.g. the listener's socket is invalid). Open
/// connections are closed before it is returned.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    serve_sink(
        listener,
        shutdown,
        Arc::new(Sink::new(Box::new(Instant::now))),
    )
    .await
}

/// What woke the accept loop.
enum Event {
    Shutdown,
    Accepted(io::Result<(TcpStream, SocketAddr)>),
    /// A connection task finished; reaping it keeps the set from growing.
    Reaped,
}

async fn serve_sink(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    sink: Arc<Sink>,
) -> io::Result<()> {
    let mut shutdown = pin!(shutdown);
    // Dropping the set aborts every connection task, which closes its socket: that is
    // how connections end on shutdown, and on the error return below.
    let mut connections = JoinSet::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut last_warning: Option<Instant> = None;
    loop {
        let event = tokio::select! {
            () = &mut shutdown => Event::Shutdown,
            accepted = listener.accept() => Event::Accepted(accepted),
            Some(_) = connections.join_next(), if !connections.is_empty() => Event::Reaped,
        };
        match event {
            Event::Shutdown => break,
            Event::Reaped => {}
            Event::Accepted(Ok((stream, _peer))) => {
                backoff = ACCEPT_BACKOFF_MIN;
                connections.spawn(connection(stream, Arc::clone(&sink)));
            }
            Event::Accepted(Err(error)) if is_transient(&error) => {
                if last_warning.is_none_or(|at| at.elapsed() >= WARN_INTERVAL) {
                    tracing::warn!(%error, retry_in = ?backoff, "sink: accept failed");
                    last_warning = Some(Instant::now());
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
            Event::Accepted(Err(error)) => return Err(error),
        }
    }
    drop(listener);
    connections.shutdown().await;
    Ok(())
}

/// Accept errors that say something about one connection or about momentary resource
/// pressure, not about the listener; accept(2) on Linux says to retry these.
fn is_transient(error: &io::Error) -> bool {
    use io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted, TimedOut, WouldBlock};
    matches!(
        error.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | TimedOut | WouldBlock
    ) || matches!(
        error.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EPERM
                | libc::ENETDOWN
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::EHOSTUNREACH
                | libc::ENOPROTOOPT
                | libc::EOPNOTSUPP
        )
    )
}

/// Runs one connection to its end. Errors end this connection only.
async fn connection(mut stream: TcpStream, sink: Arc<Sink>) {
    // Replies already leave in one write per batch; Nagle would only delay them. If this
    // fails the connection still works, just slower.
    let _ = stream.set_nodelay(true);
    let _connected = ConnectedClient::new(&sink);
    let mut conn = Conn::new(sink.next_client_id.fetch_add(1, Ordering::Relaxed) + 1);
    if let Err(error) = serve_connection(&mut stream, &sink, &mut conn).await {
        tracing::debug!(%error, client_id = conn.id, "sink: connection ended with an error");
    }
    conn.stats.flush(&sink.stats);
}

async fn serve_connection(stream: &mut TcpStream, sink: &Sink, conn: &mut Conn) -> io::Result<()> {
    let mut input = Vec::with_capacity(READ_CHUNK);
    let mut output = Vec::with_capacity(READ_CHUNK);
    loop {
        if input.capacity() - input.len() < READ_CHUNK / 2 {
            input.reserve(READ_CHUNK);
        }
        if stream.read_buf(&mut input).await? == 0 {
            // EOF. Anything left in `input` is a request cut off mid-frame, and nobody is
            // left to answer it.
            return Ok(());
        }
        let mut consumed = 0;
        let mut close = false;
        loop {
            match parse_request(&input[consumed..]) {
                Ok(None) => break,
                Ok(Some((args, used))) => {
                    consumed += used;
                    if let Flow::Close = sink.execute(args, conn, &mut output) {
                        close = true;
                        break;
                    }
                }
                Err(error) => {
                    let message = format!("ERR Protocol error: {error}");
                    Frame::Error(message.into_bytes()).encode(&mut output);
                    close = true;
                    break;
                }
            }
        }
        input.drain(..consumed);
        conn.stats.flush(&sink.stats);
        if !output.is_empty() {
            stream.write_all(&output).await?;
            output.clear();
        }
        if close {
            return stream.shutdown().await;
        }
        if output.capacity() > MAX_IDLE_BUFFER {
            output = Vec::with_capacity(READ_CHUNK);
        }
        if input.is_empty() && input.capacity() > MAX_IDLE_BUFFER {
            input = Vec::with_capacity(READ_CHUNK);
        }
    }
}

/// Counts a connection in `connected_clients` for as long as it lives, however it ends.
struct ConnectedClient<'a>(&'a Sink);

impl<'a> ConnectedClient<'a> {
    fn new(sink: &'a Sink) -> Self {
        sink.connected_clients.fetch_add(1, Ordering::Relaxed);
        sink.total_connections.fetch_add(1, Ordering::Relaxed);
        ConnectedClient(sink)
    }
}

impl Drop for ConnectedClient<'_> {
    fn drop(&mut self) {
        self.0.connected_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the connection does after a command.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    /// Write the replies so far, then close (`QUIT`).
    Close,
}

/// Per-connection state.
struct Conn {
    /// What `CLIENT ID` returns; unique within one `serve`.
    id: u64,
    stats: LocalStats,
}

impl Conn {
    fn new(id: u64) -> Self {
        Conn {
            id,
            stats: LocalStats::default(),
        }
    }
}

/// The commands the sink knows, in the order `INFO commandstats` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Client,
    Command,
    Dbsize,
    Decr,
    Decrby,
    Del,
    Echo,
    Exists,
    Flushall,
    Flushdb,
    Get,
    Hello,
    Incr,
    Incrby,
    Info,
    Mget,
    Mset,
    Ping,
    Quit,
    Select,
    Set,
}

impl Cmd {
    const ALL: [Cmd; 21] = [
        Cmd::Client,
        Cmd::Command,
        Cmd::Dbsize,
        Cmd::Decr,
        Cmd::Decrby,
        Cmd::Del,
        Cmd::Echo,
        Cmd::Exists,
        Cmd::Flushall,
        Cmd::Flushdb,
        Cmd::Get,
        Cmd::Hello,
        Cmd::Incr,
        Cmd::Incrby,
        Cmd::Info,
        Cmd::Mget,
        Cmd::Mset,
        Cmd::Ping,
        Cmd::Quit,
        Cmd::Select,
        Cmd::Set,
    ];
    const COUNT: usize = Cmd::ALL.len();

    /// Finds a command by name, ignoring ASCII case, without allocating.
    fn lookup(name: &[u8]) -> Option<Cmd> {
        let mut upper = [0u8; 8]; // the longest name, FLUSHALL, has 8 bytes
        let upper = upper.get_mut(..name.len())?;
        upper.copy_from_slice(name);
        upper.make_ascii_uppercase();
        Some(match &*upper {
            b"CLIENT" => Cmd::Client,
            b"COMMAND" => Cmd::Command,
            b"DBSIZE" => Cmd::Dbsize,
            b"DECR" => Cmd::Decr,
            b"DECRBY" => Cmd::Decrby,
            b"DEL" => Cmd::Del,
            b"ECHO" => Cmd::Echo,
            b"EXISTS" => Cmd::Exists,
            b"FLUSHALL" => Cmd::Flushall,
            b"FLUSHDB" => Cmd::Flushdb,
            b"GET" => Cmd::Get,
            b"HELLO" => Cmd::Hello,
            b"INCR" => Cmd::Incr,
            b"INCRBY" => Cmd::Incrby,
            b"INFO" => Cmd::Info,
            b"MGET" => Cmd::Mget,
            b"MSET" => Cmd::Mset,
            b"PING" => Cmd::Ping,
            b"QUIT" => Cmd::Quit,
            b"SELECT" => Cmd::Select,
            b"SET" => Cmd::Set,
            _ => return None,
        })
    }

    /// The lowercase name Redis uses in `cmdstat_<name>` and in arity errors.
    fn name(self) -> &'static str {
        match self {
            Cmd::Client => "client",
            Cmd::Command => "command",
            Cmd::Dbsize => "dbsize",
            Cmd::Decr => "decr",
            Cmd::Decrby => "decrby",
            Cmd::Del => "del",
            Cmd::Echo => "echo",
            Cmd::Exists => "exists",
            Cmd::Flushall => "flushall",
            Cmd::Flushdb => "flushdb",
            Cmd::Get => "get",
            Cmd::Hello => "hello",
            Cmd::Incr => "incr",
            Cmd::Incrby => "incrby",
            Cmd::Info => "info",
            Cmd::Mget => "mget",
            Cmd::Mset => "mset",
            Cmd::Ping => "ping",
            Cmd::Quit => "quit",
            Cmd::Select => "select",
            Cmd::Set => "set",
        }
    }

    /// Least and most arguments, the name included (Redis's command table arity).
    fn arity(self) -> (usize, usize) {
        const ANY: usize = usize::MAX;
        match self {
            Cmd::Ping => (1, 2),
            Cmd::Echo | Cmd::Get | Cmd::Incr | Cmd::Decr | Cmd::Select => (2, 2),
            Cmd::Incrby | Cmd::Decrby => (3, 3),
            Cmd::Set | Cmd::Mset => (3, ANY),
            Cmd::Del | Cmd::Exists | Cmd::Mget | Cmd::Client => (2, ANY),
            Cmd::Dbsize => (1, 1),
            Cmd::Flushall | Cmd::Flushdb => (1, 2),
            Cmd::Command | Cmd::Hello | Cmd::Info | Cmd::Quit => (1, ANY),
        }
    }
}

/// Shared per-command counters, as `INFO commandstats` reports them.
#[derive(Default)]
struct CommandStats {
    /// Executed, successfully or not.
    calls: AtomicU64,
    /// Refused before running (wrong number of arguments).
    rejected: AtomicU64,
    /// Ran and replied with an error.
    failed: AtomicU64,
}

/// A connection's counts not yet added to the shared [`CommandStats`].
#[derive(Default)]
struct LocalStats {
    calls: [u64; Cmd::COUNT],
    rejected: [u64; Cmd::COUNT],
    failed: [u64; Cmd::COUNT],
}

impl LocalStats {
    fn flush(&mut self, shared: &[CommandStats; Cmd::COUNT]) {
        for (i, stats) in shared.iter().enumerate() {
            for (local, total) in [
                (&mut self.calls[i], &stats.calls),
                (&mut self.rejected[i], &stats.rejected),
                (&mut self.failed[i], &stats.failed),
            ] {
                if *local != 0 {
                    total.fetch_add(std::mem::take(local), Ordering::Relaxed);
                }
            }
        }
    }
}

/// A clock the sink reads for expiry; tests inject one they can move.
type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

/// The time of one command, read from the clock at most once and only if needed.
struct Now<'a> {
    clock: &'a (dyn Fn() -> Instant + Send + Sync),
    at: Option<Instant>,
}

impl Now<'_> {
    fn get(&mut self) -> Instant {
        *self.at.get_or_insert_with(|| (self.clock)())
    }
}

struct Entry {
    value: Vec<u8>,
    expires_at: Option<Instant>,
}

impl Entry {
    fn is_expired(&self, now: &mut Now<'_>) -> bool {
        self.expires_at.is_some_and(|at| at <= now.get())
    }
}

type Map = HashMap<Vec<u8>, Entry>;

/// The keyspace: [`SHARDS`] maps, each behind its own mutex.
struct Store {
    shards: Box<[Mutex<Map>]>,
}

impl Store {
    fn new() -> Self {
        Store {
            shards: (0..SHARDS).map(|_| Mutex::new(Map::new())).collect(),
        }
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Map> {
        lock(&self.shards[shard_of(key)])
    }

    fn all(&self) -> impl Iterator<Item = MutexGuard<'_, Map>> {
        self.shards.iter().map(lock)
    }
}

/// Locks a shard. A panic while holding the lock cannot leave a map half-updated in a way
/// that matters here, so a poisoned lock is used as is rather than taking the server down.
fn lock(shard: &Mutex<Map>) -> MutexGuard<'_, Map> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// FNV-1a of the key, then MurmurHash3's 64-bit finalizer; the top bits pick the shard.
/// FNV-1a alone leaves its top bits poorly mixed for keys that differ only in their last
/// digits (`key:00000001`, `key:00000002`, ...), which is what workloads generate.
/// Choosing a shard needs spread, not resistance to chosen keys: each shard's `HashMap`
/// keeps std's randomized SipHash.
fn shard_of(key: &[u8]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash >> (u64::BITS - SHARD_BITS)) as usize
}

/// Removes `key` if it has expired, so any entry left under it is live.
fn purge_expired(map: &mut Map, key: &[u8], now: &mut Now<'_>) {
    if map.get(key).is_some_and(|entry| entry.is_expired(now)) {
        map.remove(key);
    }
}

/// Options of `SET` after the value.
#[derive(Default)]
struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    ttl: Option<Duration>,
}

impl SetOptions {
    /// Parses options the way Redis's `parseExtendedStringArgumentsOrReply` does:
    /// case-insensitive, conflicting options are a syntax error.
    fn parse(options: &[Vec<u8>]) -> Result<Self, &'static str> {
        let mut parsed = SetOptions::default();
        let mut i = 0;
        while i < options.len() {
            let option = options[i].as_slice();
            let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
            if is("NX") && !parsed.xx {
                parsed.nx = true;
            } else if is("XX") && !parsed.nx {
                parsed.xx = true;
            } else if is("GET") {
                parsed.get = true;
            } else if is("KEEPTTL") && parsed.ttl.is_none() {
                parsed.keep_ttl = true;
            } else if (is("EX") || is("PX"))
                && parsed.ttl.is_none()
                && !parsed.keep_ttl
                && i + 1 < options.len()
            {
                i += 1;
                let amount = parse_integer(&options[i]).ok_or(NOT_AN_INTEGER)?;
                if amount <= 0 {
                    return Err(INVALID_EXPIRE);
                }
                let amount = amount.unsigned_abs();
                parsed.ttl = Some(if is("EX") {
                    Duration::from_secs(amount)
                } else {
                    Duration::from_millis(amount)
                });
            } else {
                return Err(SYNTAX_ERROR);
            }
            i += 1;
        }
        Ok(parsed)
    }

    /// Whether `SET` needs to look at the key's current entry.
    fn reads_old_entry(&self) -> bool {
        self.nx || self.xx || self.get || self.keep_ttl
    }
}

/// The sink's state, shared by all its connections. Commands run here, without sockets,
/// so tests can drive them directly.
struct Sink {
    store: Store,
    stats: [CommandStats; Cmd::COUNT],
    /// The last `CLIENT ID` handed out.
    next_client_id: AtomicU64,
    connected_clients: AtomicU64,
    total_connections: AtomicU64,
    started: Instant,
    clock: Clock,
}

impl Sink {
    fn new(clock: Clock) -> Self {
        Sink {
            store: Store::new(),
            stats: std::array::from_fn(|_| CommandStats::default()),
            next_client_id: AtomicU64::new(0),
            connected_clients: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            started: clock(),
            clock,
        }
    }

    /// Runs one request, appending its reply to `out`, and counts it in `conn.stats`.
    fn execute(&self, args: Vec<Vec<u8>>, conn: &mut Conn, out: &mut Vec<u8>) -> Flow {
        let Some(name) = args.first() else {
            return Flow::Continue; // an empty line or `*0`: Redis ignores it too
        };
        let Some(cmd) = Cmd::lookup(name) else {
            unknown_command(&args, out);
            return Flow::Continue;
        };
        let (least, most) = cmd.arity();
        if args.len() < least || args.len() > most {
            conn.stats.rejected[cmd as usize] += 1;
            let message = format!("ERR wrong number of arguments for '{}' command", cmd.name());
            error(out, &message);
            return Flow::Continue;
        }
        if cmd == Cmd::Info {
            // INFO must see this connection's own earlier calls.
            conn.stats.flush(&self.stats);
        }
        let mut now = Now {
            clock: &*self.clock,
            at: None,
        };
        let result = self.run(cmd, args, conn.id, &mut now, out);
        conn.stats.calls[cmd as usize] += 1;
        match result {
            Ok(flow) => flow,
            Err(message) => {
                conn.stats.failed[cmd as usize] += 1;
                error(out, message);
                Flow::Continue
            }
        }
    }

    /// Runs a command whose arity is checked. `Err` is an error reply, without the `-`.
    fn run(
        &self,
        cmd: Cmd,
        mut args: Vec<Vec<u8>>,
        client_id: u64,
        now: &mut Now<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Flow, &'static str> {
        match cmd {
            Cmd::Ping => match args.get(1) {
                Some(message) => encode_bulk(out, message),
                None => out.extend_from_slice(b"+PONG\r\n"),
            },
            Cmd::Echo => encode_bulk(out, &args[1]),
            Cmd::Get => self.get(&args[1], now, out),
            Cmd::Mget => {
                encode_array_header(out, args.len() - 1);
                for key in &args[1..] {
                    self.get(key, now, out);
                }
            }
            Cmd::Set => self.set(args, now, out)?,
            Cmd::Mset => {
                if args.len().is_multiple_of(2) {
                    return Err(MSET_ARITY);
                }
                for pair in args[1..].chunks_exact_mut(2) {
                    let value = std::mem::take(&mut pair[1]);
                    let key = std::mem::take(&mut pair[0]);
                    self.store.shard(&key).insert(
                        key,
                        Entry {
                            value,
                            expires_at: None,
                        },
                    );
                }
                out.extend_from_slice(OK);
            }
            Cmd::Del => {
                let mut deleted = 0;
                for key in &args[1..] {
                    let removed = self.store.shard(key).remove(key.as_slice());
                    deleted += i64::from(removed.is_some_and(|entry| !entry.is_expired(now)));
                }
                encode_integer(out, deleted);
            }
            Cmd::Exists => {
                let mut found = 0;
                for key in &args[1..] {
                    let map = self.store.shard(key);
                    let live = map
                        .get(key.as_slice())
                        .is_some_and(|entry| !entry.is_expired(now));
                    found += i64::from(live);
                }
                encode_integer(out, found);
            }
            Cmd::Incr => self.incr_by(&mut args[1], 1, now, out)?,
            Cmd::Decr => self.incr_by(&mut args[1], -1, now, out)?,
            Cmd::Incrby => {
                let delta = parse_integer(&args[2]).ok_or(NOT_AN_INTEGER)?;
                self.incr_by(&mut args[1], delta, now, out)?;
            }
            Cmd::Decrby => {
                let delta = parse_integer(&args[2]).ok_or(NOT_AN_INTEGER)?;
                let delta = delta.checked_neg().ok_or(DECR_OVERFLOW)?;
                self.incr_by(&mut args[1], delta, now, out)?;
            }
            Cmd::Dbsize => {
                let (keys, _) = self.sweep(now);
                encode_integer(out, i64::try_from(keys).unwrap_or(i64::MAX));
            }
            Cmd::Flushall | Cmd::Flushdb => {
                if let Some(mode) = args.get(1)
                    && !mode.eq_ignore_ascii_case(b"ASYNC")
                    && !mode.eq_ignore_ascii_case(b"SYNC")
                {
                    return Err(SYNTAX_ERROR);
                }
                for mut map in self.store.all() {
                    map.clear();
                }
                out.extend_from_slice(OK);
            }
            Cmd::Command => command(&args, out),
            Cmd::Hello => {
                if let Some(version) = args.get(1) {
                    match parse_integer(version) {
                        None => return Err(BAD_PROTOVER),
                        Some(2) => {}
                        Some(_) => return Err(NOPROTO),
                    }
                }
                hello(client_id).encode(out);
            }
            Cmd::Client => {
                if args[1].eq_ignore_ascii_case(b"ID") {
                    encode_integer(out, i64::try_from(client_id).unwrap_or(i64::MAX));
                } else {
                    out.extend_from_slice(OK);
                }
            }
            Cmd::Select => match parse_integer(&args[1]) {
                None => return Err(NOT_AN_INTEGER),
                Some(0) => out.extend_from_slice(OK),
                Some(_) => return Err(BAD_DB),
            },
            Cmd::Info => encode_bulk(out, self.info(&args[1..], now).as_bytes()),
            Cmd::Quit => {
                out.extend_from_slice(OK);
                return Ok(Flow::Close);
            }
        }
        Ok(Flow::Continue)
    }

    /// Appends the value under `key`, or nil. One map lookup when the key is live.
    fn get(&self, key: &[u8], now: &mut Now<'_>, out: &mut Vec<u8>) {
        let mut map = self.store.shard(key);
        let expired = match map.get(key) {
            Some(entry) if !entry.is_expired(now) => return encode_bulk(out, &entry.value),
            Some(_) => true,
            None => false,
        };
        if expired {
            map.remove(key);
        }
        out.extend_from_slice(NIL);
    }

    fn set(
        &self,
        mut args: Vec<Vec<u8>>,
        now: &mut Now<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), &'static str> {
        let options = SetOptions::parse(&args[3..])?;
        let deadline = match options.ttl {
            Some(ttl) => Some(now.get().checked_add(ttl).ok_or(INVALID_EXPIRE)?),
            None => None,
        };
        let value = std::mem::take(&mut args[2]);
        let key = std::mem::take(&mut args[1]);
        let mut map = self.store.shard(&key);
        if !options.reads_old_entry() {
            map.insert(
                key,
                Entry {
                    value,
                    expires_at: deadline,
                },
            );
            out.extend_from_slice(OK);
            return Ok(());
        }
        let (exists, old_deadline) = match map.get(&key) {
            Some(entry) if !entry.is_expired(now) => (true, entry.expires_at),
            _ => (false, None),
        };
        if (options.nx && exists) || (options.xx && !exists) {
            match map.get(&key) {
                Some(entry) if options.get && exists => encode_bulk(out, &entry.value),
                _ => out.extend_from_slice(NIL),
            }
            return Ok(());
        }
        let expires_at = if options.keep_ttl {
            old_deadline
        } else {
            deadline
        };
        let previous = map.insert(key, Entry { value, expires_at });
        match previous {
            Some(entry) if options.get && exists => encode_bulk(out, &entry.value),
            _ if options.get => out.extend_from_slice(NIL),
            _ => out.extend_from_slice(OK),
        }
        Ok(())
    }

    /// Adds `delta` to the integer under `key` (0 if absent), keeping its expiry, as Redis
    /// does. Takes the key to store it without copying when it is new.
    fn incr_by(
        &self,
        key: &mut Vec<u8>,
        delta: i64,
        now: &mut Now<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), &'static str> {
        let mut map = self.store.shard(key);
        purge_expired(&mut map, key, now);
        let value = match map.get_mut(key.as_slice()) {
            Some(entry) => {
                let current = parse_integer(&entry.value).ok_or(NOT_AN_INTEGER)?;
                let value = current.checked_add(delta).ok_or(INCR_OVERFLOW)?;
                entry.value.clear();
                write_decimal(&mut entry.value, value);
                value
            }
            None => {
                let mut text = Vec::with_capacity(20);
                write_decimal(&mut text, delta);
                map.insert(
                    std::mem::take(key),
                    Entry {
                        value: text,
                        expires_at: None,
                    },
                );
                delta
            }
        };
        encode_integer(out, value);
        Ok(())
    }

    /// Removes expired keys everywhere; returns how many keys remain and how many of them
    /// have an expiry.
    fn sweep(&self, now: &mut Now<'_>) -> (usize, usize) {
        let (mut keys, mut expiring) = (0, 0);
        for mut map in self.store.all() {
            map.retain(|_, entry| !entry.is_expired(now));
            keys += map.len();
            expiring += map
                .values()
                .filter(|entry| entry.expires_at.is_some())
                .count();
        }
        (keys, expiring)
    }

    /// The text of `INFO`, in Redis's layout: `# Section` headers, `field:value` lines,
    /// CRLF line ends, a blank line between sections.
    fn info(&self, sections: &[Vec<u8>], now: &mut Now<'_>) -> String {
        let all = sections.is_empty()
            || sections.iter().any(|s| {
                [&b"all"[..], b"everything", b"default"]
                    .iter()
                    .any(|a| s.eq_ignore_ascii_case(a))
            });
        let wanted = |name: &str| {
            all || sections
                .iter()
                .any(|s| s.eq_ignore_ascii_case(name.as_bytes()))
        };
        // Writing to a String cannot fail; the `let _`s below discard `fmt::Result`s.
        let section = |text: &mut String, title: &str| {
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            let _ = write!(text, "# {title}\r\n");
        };
        let mut text = String::new();
        if wanted("server") {
            section(&mut text, "Server");
            let uptime = now.get().saturating_duration_since(self.started).as_secs();
            let _ = write!(
                text,
                "redis_version:7.0.0\r\ncrest_sink:1\r\nredis_mode:standalone\r\n\
                 process_id:{}\r\nuptime_in_seconds:{uptime}\r\n",
                std::process::id(),
            );
        }
        if wanted("clients") {
            section(&mut text, "Clients");
            let connected = self.connected_clients.load(Ordering::Relaxed);
            let _ = write!(text, "connected_clients:{connected}\r\n");
        }
        if wanted("stats") {
            section(&mut text, "Stats");
            let connections = self.total_connections.load(Ordering::Relaxed);
            let commands: u64 = self
                .stats
                .iter()
                .map(|s| s.calls.load(Ordering::Relaxed))
                .sum();
            let _ = write!(
                text,
                "total_connections_received:{connections}\r\ntotal_commands_processed:{commands}\r\n"
            );
        }
        if wanted("commandstats") {
            section(&mut text, "Commandstats");
            for (cmd, stats) in Cmd::ALL.iter().zip(&self.stats) {
                let calls = stats.calls.load(Ordering::Relaxed);
                let rejected = stats.rejected.load(Ordering::Relaxed);
                let failed = stats.failed.load(Ordering::Relaxed);
                // Redis lists only commands that were called, rejected or failed.
                if calls + rejected + failed == 0 {
                    continue;
                }
                let _ = write!(
                    text,
                    "cmdstat_{}:calls={calls},usec=0,usec_per_call=0.00,\
                     rejected_calls={rejected},failed_calls={failed}\r\n",
                    cmd.name(),
                );
            }
        }
        if wanted("keyspace") {
            section(&mut text, "Keyspace");
            let (keys, expiring) = self.sweep(now);
            if keys > 0 {
                let _ = write!(text, "db0:keys={keys},expires={expiring},avg_ttl=0\r\n");
            }
        }
        text
    }
}

/// Appends an error reply; `message` must not contain CR or LF.
fn error(out: &mut Vec<u8>, message: &str) {
    out.push(b'-');
    out.extend_from_slice(message.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn write_decimal(out: &mut Vec<u8>, n: i64) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// Redis 7's reply to an unknown command, byte for byte: the name up to 128 bytes, then
/// quoted arguments until their list reaches 128 bytes, CR and LF shown as spaces.
fn unknown_command(args: &[Vec<u8>], out: &mut Vec<u8>) {
    const LIMIT: usize = 128;
    let name = &args[0];
    let mut message = b"ERR unknown command '".to_vec();
    message.extend_from_slice(&name[..name.len().min(LIMIT)]);
    message.extend_from_slice(b"', with args beginning with: ");
    let list_start = message.len();
    for arg in &args[1..] {
        let listed = message.len() - list_start;
        if listed >= LIMIT {
            break;
        }
        message.push(b'\'');
        message.extend_from_slice(&arg[..arg.len().min(LIMIT - listed)]);
        message.extend_from_slice(b"' ");
    }
    Frame::Error(message).encode(out);
}

/// `COMMAND` and its subcommands: the sink publishes no command table, harmlessly.
fn command(args: &[Vec<u8>], out: &mut Vec<u8>) {
    match args.get(1) {
        Some(sub) if sub.eq_ignore_ascii_case(b"COUNT") => encode_integer(out, 0),
        Some(sub) if sub.eq_ignore_ascii_case(b"INFO") => {
            // One nil per name asked about, as Redis answers for commands it lacks.
            encode_array_header(out, args.len() - 2);
            for _ in 2..args.len() {
                out.extend_from_slice(NIL);
            }
        }
        _ => encode_array_header(out, 0),
    }
}

/// `HELLO`'s reply in RESP2: its map flattened into an array, as Redis 7.0 sends it.
fn hello(client_id: u64) -> Frame {
    let text = |s: &str| Frame::Bulk(s.as_bytes().to_vec());
    Frame::Array(vec![
        text("server"),
        text("redis"),
        text("version"),
        text("7.0.0"),
        text("proto"),
        Frame::Integer(2),
        text("id"),
        Frame::Integer(i64::try_from(client_id).unwrap_or(i64::MAX)),
        text("mode"),
        text("standalone"),
        text("role"),
        text("master"),
        text("modules"),
        Frame::Array(Vec::new()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crest_resp::encode_command;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(s.as_bytes().to_vec())
    }

    fn simple(s: &str) -> Frame {
        Frame::Simple(s.as_bytes().to_vec())
    }

    fn err(s: &str) -> Frame {
        Frame::Error(s.as_bytes().to_vec())
    }

    /// A running sink on a free port.
    struct Server {
        addr: SocketAddr,
        stop: oneshot::Sender<()>,
        task: JoinHandle<io::Result<()>>,
    }

    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, async {
            let _ = stopped.await;
        }));
        Server { addr, stop, task }
    }

    /// A raw RESP client: writes bytes, reads frames with `Frame::parse`.
    struct Client {
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

        async fn send_raw(&mut self, bytes: &[u8]) {
            self.stream.write_all(bytes).await.expect("write");
        }

        async fn send(&mut self, args: &[&str]) {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let mut out = Vec::new();
            encode_command(&mut out, &args);
            self.send_raw(&out).await;
        }

        /// The next frame, or `None` at EOF.
        async fn read(&mut self) -> Option<Frame> {
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

        async fn call(&mut self, args: &[&str]) -> Frame {
            self.send(args).await;
            self.read().await.expect("a reply")
        }

        async fn info(&mut self, section: &str) -> String {
            match self.call(&["INFO", section]).await {
                Frame::Bulk(text) => String::from_utf8(text).expect("utf-8"),
                other => panic!("INFO replied {other:?}"),
            }
        }
    }

    /// The value of `field` in INFO text, e.g. `calls=3,...` for `cmdstat_get`.
    fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
        info.split("\r\n")
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
    }

    #[tokio::test]
    async fn set_then_get_round_trips() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        assert_eq!(
            client.call(&["SET", "greeting", "hello"]).await,
            simple("OK")
        );
        assert_eq!(client.call(&["get", "greeting"]).await, bulk("hello"));
        assert_eq!(client.call(&["GET", "missing"]).await, Frame::Null);
        assert_eq!(
            client
                .call(&["EXISTS", "greeting", "missing", "greeting"])
                .await,
            Frame::Integer(2)
        );
        assert_eq!(
            client.call(&["DEL", "greeting", "missing"]).await,
            Frame::Integer(1)
        );
        assert_eq!(client.call(&["GET", "greeting"]).await, Frame::Null);
    }

    #[tokio::test]
    async fn pipelined_requests_in_one_write_get_all_replies_in_order() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        let mut batch = Vec::new();
        let mut expected = Vec::new();
        for i in 0..500 {
            let (key, value) = (format!("k{i}"), format!("v{i}"));
            encode_command(&mut batch, &[b"SET", key.as_bytes(), value.as_bytes()]);
            encode_command(&mut batch, &[b"GET", key.as_bytes()]);
            encode_command(&mut batch, &[b"INCR", b"counter"]);
            expected.extend([simple("OK"), bulk(&value), Frame::Integer(i + 1)]);
        }
        client.send_raw(&batch).await;
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(client.read().await.as_ref(), Some(want), "reply {i}");
        }
    }

    #[tokio::test]
    async fn info_commandstats_counts_calls() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        for i in 0..3 {
            client.call(&["SET", &format!("k{i}"), "v"]).await;
        }
        for _ in 0..5 {
            client.call(&["GET", "k0"]).await;
        }
        client.call(&["GET"]).await; // rejected: wrong arity
        client.call(&["INCR", "k0"]).await; // failed: not an integer
        client.call(&["NOSUCHCOMMAND"]).await; // not listed, as in Redis

        let info = client.info("commandstats").await;
        assert!(info.starts_with("# Commandstats\r\n"), "{info}");
        assert_eq!(
            info_field(&info, "cmdstat_get"),
            Some("calls=5,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0")
        );
        assert_eq!(
            info_field(&info, "cmdstat_set"),
            Some("calls=3,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0")
        );
        assert_eq!(
            info_field(&info, "cmdstat_incr"),
            Some("calls=1,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=1")
        );
        // Like Redis, an INFO does not count itself; the next one sees it.
        assert_eq!(info_field(&info, "cmdstat_info"), None);
        assert!(!info.contains("nosuchcommand"), "{info}");

        // Counts are server-wide: another connection sees them, and its own.
        let mut other = Client::connect(server.addr).await;
        other.call(&["GET", "k1"]).await;
        let info = other.info("commandstats").await;
        assert_eq!(
            info_field(&info, "cmdstat_get").and_then(|v| v.split(',').next()),
            Some("calls=6")
        );
        assert_eq!(
            info_field(&info, "cmdstat_info").and_then(|v| v.split(',').next()),
            Some("calls=1")
        );
    }

    #[tokio::test]
    async fn info_has_server_and_keyspace_sections() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        client.call(&["SET", "a", "1"]).await;
        client.call(&["SET", "b", "2", "EX", "100"]).await;
        let info = client.info("everything").await;
        for header in [
            "# Server\r\n",
            "# Clients\r\n",
            "# Stats\r\n",
            "# Commandstats\r\n",
            "# Keyspace\r\n",
        ] {
            assert!(info.contains(header), "{header} missing from {info}");
        }
        assert_eq!(info_field(&info, "redis_version"), Some("7.0.0"));
        assert_eq!(info_field(&info, "crest_sink"), Some("1"));
        assert_eq!(info_field(&info, "connected_clients"), Some("1"));
        assert_eq!(info_field(&info, "db0"), Some("keys=2,expires=1,avg_ttl=0"));
        assert!(
            info.contains("\r\n\r\n# Keyspace\r\n"),
            "sections are separated by a blank line"
        );

        let server_only = client.info("server").await;
        assert!(server_only.starts_with("# Server\r\n") && !server_only.contains("# Keyspace"));
        // No section named: everything, commandstats included.
        match client.call(&["INFO"]).await {
            Frame::Bulk(text) => assert!(String::from_utf8_lossy(&text).contains("# Commandstats")),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn unknown_command_is_an_error_like_redis() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        assert_eq!(
            client.call(&["FOO", "a", "b c"]).await,
            err("ERR unknown command 'FOO', with args beginning with: 'a' 'b c' ")
        );
        assert_eq!(
            client.call(&["nope"]).await,
            err("ERR unknown command 'nope', with args beginning with: ")
        );
        // The connection is still usable.
        assert_eq!(client.call(&["PING"]).await, simple("PONG"));
    }

    #[tokio::test]
    async fn ten_megabyte_value_set_then_get() {
        const SIZE: usize = 10 * 1024 * 1024;
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        let value: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
        let mut request = Vec::new();
        encode_command(&mut request, &[b"SET", b"big", &value]);
        client.send_raw(&request).await;
        assert_eq!(client.read().await, Some(simple("OK")));
        client.send(&["GET", "big"]).await;
        assert_eq!(client.read().await, Some(Frame::Bulk(value)));
        assert_eq!(client.call(&["DBSIZE"]).await, Frame::Integer(1));
    }

    #[tokio::test]
    async fn shutdown_resolves_serve_and_closes_connections() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        assert_eq!(client.call(&["PING"]).await, simple("PONG"));
        server.stop.send(()).expect("server running");
        let result = tokio::time::timeout(TIMEOUT, server.task)
            .await
            .expect("serve returned");
        assert!(matches!(result, Ok(Ok(()))), "{result:?}");
        assert_eq!(client.read().await, None, "connection closed");
        assert!(
            TcpStream::connect(server.addr).await.is_err(),
            "listener closed"
        );
    }

    #[tokio::test]
    async fn inline_commands_from_telnet_work() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        client.send_raw(b"PING\r\nset a hello\r\n\r\nGET a\n").await;
        assert_eq!(client.read().await, Some(simple("PONG")));
        assert_eq!(client.read().await, Some(simple("OK")));
        assert_eq!(client.read().await, Some(bulk("hello")));
    }

    #[tokio::test]
    async fn protocol_error_is_reported_then_only_that_connection_closes() {
        let server = start().await;
        let mut bad = Client::connect(server.addr).await;
        bad.send_raw(b"PING\r\n*1\r\n:1\r\n").await;
        assert_eq!(
            bad.read().await,
            Some(simple("PONG")),
            "requests before the error are answered"
        );
        assert_eq!(
            bad.read().await,
            Some(err("ERR Protocol error: expected '$', got ':'"))
        );
        assert_eq!(bad.read().await, None);

        let mut good = Client::connect(server.addr).await;
        assert_eq!(good.call(&["PING"]).await, simple("PONG"));
    }

    #[tokio::test]
    async fn quit_replies_ok_then_closes() {
        let server = start().await;
        let mut client = Client::connect(server.addr).await;
        assert_eq!(client.call(&["QUIT"]).await, simple("OK"));
        assert_eq!(client.read().await, None);
    }

    /// A sink driven without sockets, with a clock the test moves.
    struct Harness {
        sink: Sink,
        conn: Conn,
        clock: Arc<Mutex<Instant>>,
    }

    impl Harness {
        fn new() -> Harness {
            let clock = Arc::new(Mutex::new(Instant::now()));
            let read = Arc::clone(&clock);
            let sink = Sink::new(Box::new(move || *read.lock().expect("clock")));
            Harness {
                sink,
                conn: Conn::new(7),
                clock,
            }
        }

        fn advance(&self, by: Duration) {
            *self.clock.lock().expect("clock") += by;
        }

        fn run(&mut self, args: &[&str]) -> Frame {
            let mut out = Vec::new();
            let args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            self.sink.execute(args, &mut self.conn, &mut out);
            let (frame, used) = Frame::parse(&out).expect("valid RESP").expect("one reply");
            assert_eq!(used, out.len(), "exactly one reply");
            frame
        }

        /// (calls, rejected, failed) of `cmd`, after flushing this connection's counts.
        fn counts(&mut self, cmd: Cmd) -> (u64, u64, u64) {
            self.conn.stats.flush(&self.sink.stats);
            let stats = &self.sink.stats[cmd as usize];
            let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
            (
                load(&stats.calls),
                load(&stats.rejected),
                load(&stats.failed),
            )
        }
    }

    #[test]
    fn set_with_ttl_expires_lazily() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SET", "s", "1", "EX", "10"]), simple("OK"));
        assert_eq!(h.run(&["SET", "p", "1", "px", "1500"]), simple("OK"));
        assert_eq!(h.run(&["SET", "forever", "1"]), simple("OK"));
        h.advance(Duration::from_millis(1499));
        assert_eq!(h.run(&["GET", "p"]), bulk("1"));
        h.advance(Duration::from_millis(1));
        assert_eq!(h.run(&["GET", "p"]), Frame::Null);
        assert_eq!(h.run(&["EXISTS", "s", "p"]), Frame::Integer(1));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(2));
        h.advance(Duration::from_secs(9));
        assert_eq!(
            h.run(&["DEL", "s"]),
            Frame::Integer(0),
            "expired keys are not counted as deleted"
        );
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(1));
        assert_eq!(h.run(&["GET", "forever"]), bulk("1"));
    }

    #[test]
    fn set_keepttl_and_incr_keep_the_expiry_and_plain_set_clears_it() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "1", "EX", "10"]);
        h.run(&["INCR", "k"]);
        h.run(&["SET", "k", "5", "KEEPTTL"]);
        h.advance(Duration::from_secs(10));
        assert_eq!(h.run(&["GET", "k"]), Frame::Null);
        assert_eq!(
            h.run(&["INCR", "k"]),
            Frame::Integer(1),
            "an expired key counts from 0"
        );

        h.run(&["SET", "j", "1", "EX", "10"]);
        h.run(&["SET", "j", "2"]);
        h.advance(Duration::from_secs(60));
        assert_eq!(h.run(&["GET", "j"]), bulk("2"));
    }

    #[test]
    fn set_options_nx_xx_get_and_their_errors() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SET", "k", "a", "XX"]), Frame::Null);
        assert_eq!(h.run(&["SET", "k", "a", "NX"]), simple("OK"));
        assert_eq!(h.run(&["SET", "k", "b", "NX"]), Frame::Null);
        assert_eq!(h.run(&["SET", "k", "b", "NX", "GET"]), bulk("a"));
        assert_eq!(h.run(&["SET", "k", "c", "xx", "get"]), bulk("a"));
        assert_eq!(h.run(&["SET", "new", "x", "GET"]), Frame::Null);
        assert_eq!(h.run(&["GET", "k"]), bulk("c"));

        assert_eq!(h.run(&["SET", "k", "v", "NX", "XX"]), err(SYNTAX_ERROR));
        assert_eq!(
            h.run(&["SET", "k", "v", "EX", "1", "PX", "1"]),
            err(SYNTAX_ERROR)
        );
        assert_eq!(h.run(&["SET", "k", "v", "EX"]), err(SYNTAX_ERROR));
        assert_eq!(h.run(&["SET", "k", "v", "EXAT", "1"]), err(SYNTAX_ERROR));
        assert_eq!(h.run(&["SET", "k", "v", "EX", "0"]), err(INVALID_EXPIRE));
        assert_eq!(h.run(&["SET", "k", "v", "PX", "ten"]), err(NOT_AN_INTEGER));
        assert_eq!(
            h.run(&["SET", "k", "v", "EX", &i64::MAX.to_string()]),
            err(INVALID_EXPIRE),
            "a deadline past what Instant holds is refused, not a panic"
        );
        assert_eq!(
            h.run(&["GET", "k"]),
            bulk("c"),
            "failed SETs change nothing"
        );
        assert_eq!(h.counts(Cmd::Set), (13, 0, 7));
    }

    #[test]
    fn incr_family_and_its_errors() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["INCR", "n"]), Frame::Integer(1));
        assert_eq!(h.run(&["INCRBY", "n", "41"]), Frame::Integer(42));
        assert_eq!(h.run(&["DECR", "n"]), Frame::Integer(41));
        assert_eq!(h.run(&["DECRBY", "n", "-9"]), Frame::Integer(50));
        assert_eq!(h.run(&["GET", "n"]), bulk("50"));
        assert_eq!(h.run(&["DECRBY", "fresh", "5"]), Frame::Integer(-5));

        h.run(&["SET", "text", "abc"]);
        assert_eq!(h.run(&["INCR", "text"]), err(NOT_AN_INTEGER));
        assert_eq!(h.run(&["INCRBY", "n", "1.5"]), err(NOT_AN_INTEGER));
        h.run(&["SET", "max", &i64::MAX.to_string()]);
        assert_eq!(h.run(&["INCR", "max"]), err(INCR_OVERFLOW));
        assert_eq!(
            h.run(&["DECRBY", "n", &i64::MIN.to_string()]),
            err(DECR_OVERFLOW)
        );
        assert_eq!(h.counts(Cmd::Incr), (3, 0, 2));
    }

    #[test]
    fn wrong_arity_is_rejected_and_counted_like_redis() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["GET"]),
            err("ERR wrong number of arguments for 'get' command")
        );
        assert_eq!(
            h.run(&["get", "a", "b"]),
            err("ERR wrong number of arguments for 'get' command")
        );
        assert_eq!(
            h.run(&["PING", "a", "b"]),
            err("ERR wrong number of arguments for 'ping' command")
        );
        assert_eq!(h.run(&["MSET", "a", "1", "b"]), err(MSET_ARITY));
        assert_eq!(h.counts(Cmd::Get), (0, 2, 0));
        // Redis checks MSET's pairing while running it: a failed call, not a rejected one.
        assert_eq!(h.counts(Cmd::Mset), (1, 0, 1));
    }

    #[test]
    fn mget_and_mset() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["MSET", "a", "1", "b", "2"]), simple("OK"));
        assert_eq!(
            h.run(&["MGET", "a", "missing", "b"]),
            Frame::Array(vec![bulk("1"), Frame::Null, bulk("2")])
        );
    }

    #[test]
    fn unknown_command_arguments_are_cut_at_128_bytes_like_redis() {
        let mut h = Harness::new();
        let long = "x".repeat(200);
        let expected = format!(
            "ERR unknown command '{}', with args beginning with: 'a' '{}' ",
            "N".repeat(128),
            "x".repeat(128 - 4)
        );
        assert_eq!(
            h.run(&[&"N".repeat(130), "a", &long, "never"]),
            err(&expected)
        );
        assert_eq!(
            h.run(&["BAD", "line\r\nbreak"]),
            err("ERR unknown command 'BAD', with args beginning with: 'line  break' ")
        );
    }

    #[test]
    fn handshake_commands_are_harmless() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["HELLO", "3"]),
            err("NOPROTO sorry, this protocol version is not supported")
        );
        assert_eq!(h.run(&["HELLO", "x"]), err(BAD_PROTOVER));
        let Frame::Array(fields) = h.run(&["HELLO", "2", "SETNAME", "me"]) else {
            panic!("HELLO 2 replies with an array");
        };
        assert_eq!(
            &fields[..6],
            [
                bulk("server"),
                bulk("redis"),
                bulk("version"),
                bulk("7.0.0"),
                bulk("proto"),
                Frame::Integer(2)
            ]
        );
        assert_eq!(fields[7], Frame::Integer(7), "the connection's id");
        assert_eq!(h.run(&["HELLO"]), h.run(&["HELLO", "2"]));

        assert_eq!(h.run(&["CLIENT", "ID"]), Frame::Integer(7));
        assert_eq!(h.run(&["client", "setname", "me"]), simple("OK"));
        assert_eq!(h.run(&["SELECT", "0"]), simple("OK"));
        assert_eq!(h.run(&["SELECT", "1"]), err(BAD_DB));
        assert_eq!(h.run(&["SELECT", "zero"]), err(NOT_AN_INTEGER));
        assert_eq!(h.run(&["COMMAND"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["COMMAND", "DOCS"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["COMMAND", "COUNT"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["COMMAND", "INFO", "get", "set"]),
            Frame::Array(vec![Frame::Null, Frame::Null])
        );
        assert_eq!(h.run(&["PING", "hi"]), bulk("hi"));
        assert_eq!(h.run(&["ECHO", "hi"]), bulk("hi"));
    }

    #[test]
    fn flush_empties_every_shard() {
        let mut h = Harness::new();
        for i in 0..1000 {
            h.run(&["SET", &format!("key:{i}"), "v"]);
        }
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(1000));
        assert_eq!(h.run(&["FLUSHALL", "ASYNC"]), simple("OK"));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
        assert_eq!(h.run(&["FLUSHDB", "LATER"]), err(SYNTAX_ERROR));
    }

    #[test]
    fn keys_spread_over_shards() {
        let mut used = [0usize; SHARDS];
        for i in 0..64_000 {
            used[shard_of(format!("key:{i:08}").as_bytes())] += 1;
        }
        // 1000 per shard if even; a uniform hash stays within about 4 standard deviations
        // (sqrt(1000) ~ 32) of that.
        assert!(used.iter().all(|&n| (850..1150).contains(&n)), "{used:?}");
    }

    #[test]
    fn command_lookup_ignores_case_and_rejects_long_names() {
        assert_eq!(Cmd::lookup(b"get"), Some(Cmd::Get));
        assert_eq!(Cmd::lookup(b"FlushAll"), Some(Cmd::Flushall));
        assert_eq!(Cmd::lookup(b"FLUSHALLX"), None);
        assert_eq!(Cmd::lookup(b""), None);
        for cmd in Cmd::ALL {
            assert_eq!(Cmd::lookup(cmd.name().as_bytes()), Some(cmd));
        }
        assert!(
            Cmd::ALL.windows(2).all(|w| w[0].name() < w[1].name()),
            "INFO lists them sorted"
        );
    }
}

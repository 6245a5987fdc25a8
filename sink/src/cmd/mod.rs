//! The command table and dispatch: one [`TABLE`] of {name, arity, handler} over one file of
//! handlers per command family, and [`execute`], which looks a request up, checks its
//! arity, runs its handler and counts the call. Nothing here is imported by the handlers.
//!
//! Below the table, each family file (`string`, `hash`, `list`, `set`, `zset`, `stream`,
//! `keys`, `server`) takes what it shares with the others from three modules that never
//! import this one: [`ctx`] (what a handler runs with), [`reply`] (what it answers) and
//! [`args`] (how it reads its arguments).
//!
//! A handler gets the arguments (the name first) already checked against its arity, and
//! appends exactly one reply to [`Ctx::out`], or returns the error it replies with. The
//! dispatcher counts every call in `INFO commandstats`: an arity mismatch as rejected, an
//! error reply as failed (and still a call), as Redis 7 does. The counters know commands
//! by table index: [`NAMES`] is what the shared state is built with.

mod args;
mod ctx;
mod reply;

mod hash;
mod keys;
mod list;
mod server;
mod set;
mod stream;
mod string;
mod zset;

use crest_resp::Frame;

use self::ctx::Ctx;
use self::reply::{Reply, wrong_arity};
use crate::resp3::{Shape, to_resp3};
use crate::state::{Conn, Flow, Sink};
use crate::store::Now;

/// A command's implementation.
type Handler = fn(&mut Ctx<'_>, &mut [Vec<u8>]) -> Reply;

/// One row of the command table.
struct Command {
    /// Lowercase, as `cmdstat_<name>` and arity errors spell it.
    name: &'static str,
    /// Argument count including the name, as Redis's command table defines it: `n` is
    /// exactly n, `-n` is at least n.
    arity: i32,
    /// The implementation.
    run: Handler,
}

impl Command {
    fn accepts(&self, argc: usize) -> bool {
        let wanted = self.arity.unsigned_abs() as usize;
        if self.arity < 0 {
            argc >= wanted
        } else {
            argc == wanted
        }
    }
}

/// Every command the sink answers, sorted by name: lookups binary-search it, and
/// `INFO commandstats` lists commands in this order.
static TABLE: &[Command] = &[
    row("client", -2, server::client),
    row("command", -1, server::command),
    row("dbsize", 1, server::dbsize),
    row("decr", 2, string::decr),
    row("decrby", 3, string::decrby),
    row("del", -2, keys::del),
    row("echo", 2, server::echo),
    row("exists", -2, keys::exists),
    row("expire", -3, keys::expire),
    row("flushall", -1, server::flush),
    row("flushdb", -1, server::flush),
    row("get", 2, string::get),
    row("hdel", -3, hash::hdel),
    row("hello", -1, server::hello),
    row("hget", 3, hash::hget),
    row("hgetall", 2, hash::hgetall),
    row("hlen", 2, hash::hlen),
    row("hset", -4, hash::hset),
    row("incr", 2, string::incr),
    row("incrby", 3, string::incrby),
    row("info", -1, server::info),
    row("llen", 2, list::llen),
    row("lpop", -2, list::lpop),
    row("lpush", -3, list::lpush),
    row("lrange", 4, list::lrange),
    row("mget", -2, string::mget),
    row("mset", -3, string::mset),
    row("persist", 2, keys::persist),
    row("pexpire", -3, keys::pexpire),
    row("ping", -1, server::ping),
    row("pttl", 2, keys::pttl),
    row("quit", -1, server::quit),
    row("rpop", -2, list::rpop),
    row("rpush", -3, list::rpush),
    row("sadd", -3, set::sadd),
    row("scard", 2, set::scard),
    row("select", 2, server::select),
    row("set", -3, string::set),
    row("sismember", 3, set::sismember),
    row("smembers", 2, set::smembers),
    row("spop", -2, set::spop),
    row("srem", -3, set::srem),
    row("ttl", 2, keys::ttl),
    row("type", 2, keys::type_),
    row("unlink", -2, keys::del),
    row("xadd", -5, stream::xadd),
    row("xlen", 2, stream::xlen),
    row("zadd", -4, zset::zadd),
    row("zcard", 2, zset::zcard),
    row("zpopmin", -2, zset::zpopmin),
    row("zrange", -4, zset::zrange),
    row("zrangebyscore", -4, zset::zrangebyscore),
    row("zrem", -3, zset::zrem),
    row("zscore", 3, zset::zscore),
];

/// Number of commands.
const COUNT: usize = TABLE.len();

/// The name of each command in [`TABLE`], at its index there: what the shared state's
/// per-command counters are built with (see `Sink::new`).
pub(crate) static NAMES: [&str; COUNT] = {
    let mut names = [""; COUNT];
    let mut i = 0;
    while i < COUNT {
        names[i] = TABLE[i].name;
        i += 1;
    }
    names
};

/// The longest command name, in bytes (`zrangebyscore`).
const MAX_NAME: usize = 16;

const fn row(name: &'static str, arity: i32, run: Handler) -> Command {
    Command { name, arity, run }
}

/// Names of every command, lowercase, sorted.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().copied()
}

/// The table index of the command called `name`, ignoring ASCII case, without allocating.
pub(crate) fn lookup(name: &[u8]) -> Option<usize> {
    let mut lower = [0u8; MAX_NAME];
    let lower = lower.get_mut(..name.len())?;
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    TABLE
        .binary_search_by(|command| command.name.as_bytes().cmp(lower))
        .ok()
}

/// Runs one request, appending its reply to `out`, and counts it in `conn.stats`.
pub(crate) fn execute(
    sink: &Sink,
    mut args: Vec<Vec<u8>>,
    conn: &mut Conn,
    out: &mut Vec<u8>,
) -> Flow {
    let Some(name) = args.first() else {
        return Flow::Continue; // an empty line or `*0`: Redis ignores it too
    };
    let Some(index) = lookup(name) else {
        unknown_command(&args, out);
        return Flow::Continue;
    };
    let command = &TABLE[index];
    if !command.accepts(args.len()) {
        conn.stats.rejected[index] += 1;
        error(out, &wrong_arity(command.name));
        return Flow::Continue;
    }
    // The reply's RESP3 shape depends on the arguments, which the command may take.
    let shape = (conn.resp3 || command.name == "hello").then(|| Shape::of(command.name, &args));
    let mut ctx = Ctx {
        sink,
        conn,
        now: Now::new(&*sink.clock),
        out,
        close: false,
    };
    let start = ctx.out.len();
    let result = (command.run)(&mut ctx, &mut args);
    let close = ctx.close;
    conn.stats.calls[index] += 1;
    match result {
        Err(message) => {
            conn.stats.failed[index] += 1;
            error(out, &message);
        }
        // `HELLO 3` answers in the protocol it switches to.
        Ok(()) => {
            if let Some(shape) = shape.filter(|_| conn.resp3) {
                to_resp3(shape, out, start);
            }
        }
    }
    if close { Flow::Close } else { Flow::Continue }
}

/// Appends an error reply; CR and LF in `message` become spaces.
fn error(out: &mut Vec<u8>, message: &str) {
    if message.bytes().any(|b| b == b'\r' || b == b'\n') {
        Frame::Error(message.as_bytes().to_vec()).encode(out);
        return;
    }
    out.push(b'-');
    out.extend_from_slice(message.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Redis 7's reply to an unknown command, byte for byte: the name up to 128 bytes, then
/// quoted arguments until their list reaches 128 bytes, CR and LF shown as spaces.
fn unknown_command(args: &[Vec<u8>], out: &mut Vec<u8>) {
    const LIMIT: usize = 128;
    let Some((name, rest)) = args.split_first() else {
        return;
    };
    let mut message = b"ERR unknown command '".to_vec();
    message.extend_from_slice(&name[..name.len().min(LIMIT)]);
    message.extend_from_slice(b"', with args beginning with: ");
    let list_start = message.len();
    for arg in rest {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::{Harness, err};

    #[test]
    fn table_is_sorted_unique_and_lookup_ignores_case() {
        assert!(
            TABLE.windows(2).all(|w| w[0].name < w[1].name),
            "sorted and unique, so lookup can binary-search and INFO lists them sorted"
        );
        for (i, command) in TABLE.iter().enumerate() {
            assert_eq!(
                NAMES[i], command.name,
                "the counters' names are the table's"
            );
            assert_eq!(lookup(command.name.as_bytes()), Some(i));
            assert_eq!(
                lookup(command.name.to_ascii_uppercase().as_bytes()),
                Some(i)
            );
            assert!(command.name.len() <= MAX_NAME);
            assert!(command.arity != 0);
        }
        assert_eq!(lookup(b"FlushAll"), lookup(b"flushall"));
        assert_eq!(lookup(b"FLUSHALLX"), None);
        assert_eq!(lookup(b""), None);
        assert_eq!(lookup(&[b'x'; 40]), None);
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
        assert_eq!(
            h.run(&["MSET", "a", "1", "b"]),
            err("ERR wrong number of arguments for 'mset' command")
        );
        assert_eq!(
            h.run(&["ZADD", "z", "1"]),
            err("ERR wrong number of arguments for 'zadd' command")
        );
        assert_eq!(h.counts("get"), (0, 2, 0));
        // Redis checks MSET's pairing while running it: a failed call, not a rejected one.
        assert_eq!(h.counts("mset"), (1, 0, 1));
        assert_eq!(h.counts("zadd"), (0, 1, 0));
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
}

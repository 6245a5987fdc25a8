//! The command table and dispatch: one [`TABLE`] of {name, arity, handler}, one file of
//! handlers per command family, and the argument parsing and error texts they share.
//!
//! A handler gets the arguments (the name first) already checked against its arity, and
//! appends exactly one reply to [`Ctx::out`], or returns the error it replies with. The
//! dispatcher counts every call in `INFO commandstats`: an arity mismatch as rejected, an
//! error reply as failed (and still a call), as Redis 7 does.

mod hash;
mod keys;
mod list;
mod server;
mod set;
mod stream;
mod string;
mod zset;

use std::borrow::Cow;
use std::sync::MutexGuard;

use crate::resp3::{Shape, to_resp3};
use crest_resp::{Frame, encode_bulk, parse_integer};

use crate::server::{Conn, Flow, Sink};
use crate::store::{Entry, Now, Shard};

/// An error reply's text, without the `-`; most are constants.
pub(crate) type Error = Cow<'static, str>;

/// What a handler returns: `Ok` once it has appended its reply.
pub(crate) type Reply = Result<(), Error>;

/// A command's implementation.
pub(crate) type Handler = fn(&mut Ctx<'_>, &mut [Vec<u8>]) -> Reply;

/// One row of the command table.
pub(crate) struct Command {
    /// Lowercase, as `cmdstat_<name>` and arity errors spell it.
    pub(crate) name: &'static str,
    /// Argument count including the name, as Redis's command table defines it: `n` is
    /// exactly n, `-n` is at least n.
    pub(crate) arity: i32,
    /// The implementation.
    pub(crate) run: Handler,
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
pub(crate) static TABLE: &[Command] = &[
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

/// Number of commands; per-command counters are arrays of this size.
pub(crate) const COUNT: usize = TABLE.len();

/// The longest command name, in bytes (`zrangebyscore`).
const MAX_NAME: usize = 16;

const fn row(name: &'static str, arity: i32, run: Handler) -> Command {
    Command { name, arity, run }
}

/// Names of every command, lowercase, sorted.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|command| command.name)
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

/// `+OK`.
pub(crate) const OK: &[u8] = b"+OK\r\n";
/// The nil bulk string: a missing key or field.
pub(crate) const NIL: &[u8] = b"$-1\r\n";
/// The nil array: `LPOP key count` on a missing key.
pub(crate) const NIL_ARRAY: &[u8] = b"*-1\r\n";
/// An empty array: a range over a missing key.
pub(crate) const EMPTY_ARRAY: &[u8] = b"*0\r\n";
/// `:0`.
pub(crate) const ZERO: &[u8] = b":0\r\n";
/// `:1`.
pub(crate) const ONE: &[u8] = b":1\r\n";

/// A command for one type met a key of another.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
/// An integer argument or value that `string2ll` refuses.
pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
/// A score that `strtod` refuses, or NaN.
pub(crate) const NOT_A_FLOAT: &str = "ERR value is not a valid float";
/// A negative count (`LPOP key -1`).
pub(crate) const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";
/// An option Redis does not know in that place, or conflicting options.
pub(crate) const SYNTAX_ERROR: &str = "ERR syntax error";

/// The state one command runs with.
pub(crate) struct Ctx<'a> {
    /// Shared state.
    pub(crate) sink: &'a Sink,
    /// The calling connection.
    pub(crate) conn: &'a mut Conn,
    /// The command's time.
    pub(crate) now: Now<'a>,
    /// Where the reply goes.
    pub(crate) out: &'a mut Vec<u8>,
    /// Set by `QUIT`: close after writing the replies.
    pub(crate) close: bool,
}

impl<'a> Ctx<'a> {
    /// Locks the shard holding `key`. The guard borrows the sink, not the context, so the
    /// handler can go on writing to `out` while it holds it.
    pub(crate) fn shard(&self, key: &[u8]) -> MutexGuard<'a, Shard> {
        self.sink.store.shard(key)
    }

    /// Runs `f` on the live entry under `key`, or appends `missing` when there is none;
    /// counts a keyspace hit or miss as Redis's read lookups do.
    pub(crate) fn read(
        &mut self,
        key: &[u8],
        missing: &[u8],
        f: impl FnOnce(&Entry, &mut Vec<u8>) -> Result<(), &'static str>,
    ) -> Reply {
        let mut shard = self.shard(key);
        let out = &mut *self.out;
        let found = shard.read(key, &mut self.now, |entry| f(entry, out));
        drop(shard);
        self.conn.stats.lookup(found.is_some());
        match found {
            Some(result) => Ok(result?),
            None => {
                self.out.extend_from_slice(missing);
                Ok(())
            }
        }
    }
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

/// Redis's text for a wrong argument count. Also replied by commands that check their
/// count while running (`MSET k`), which Redis counts as failed rather than rejected.
pub(crate) fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
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

/// Parses an integer argument as Redis's `string2ll` does: strict decimal, no `+`, no
/// spaces, no leading zeros (`007` and `-0` are not integers to Redis).
pub(crate) fn parse_int(arg: &[u8]) -> Option<i64> {
    let digits = arg.strip_prefix(b"-").unwrap_or(arg);
    if (digits.len() > 1 && digits.first() == Some(&b'0')) || arg == b"-0" {
        return None;
    }
    parse_integer(arg)
}

/// [`parse_int`], or Redis's "not an integer" error.
pub(crate) fn int_arg(arg: &[u8]) -> Result<i64, &'static str> {
    parse_int(arg).ok_or(NOT_AN_INTEGER)
}

/// Parses a float argument as Redis's `getDoubleFromObject` does (`strtod`, the whole
/// text, no leading space): `1.5`, `-2e3`, `inf`, `-inf`; `None` for NaN, for anything
/// else, and for a value out of `f64`'s range (`1e999`), which strtod reports as ERANGE.
pub(crate) fn parse_float(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    let value: f64 = text.parse().ok()?;
    if value.is_nan() {
        return None;
    }
    let unsigned = text.trim_start_matches(['+', '-']);
    let spelled_infinite =
        unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity");
    if value.is_infinite() && !spelled_infinite {
        return None; // overflow
    }
    let mantissa = unsigned.split(['e', 'E']).next().unwrap_or("");
    if value == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return None; // underflow to zero
    }
    Some(value)
}

/// Appends a float reply as Redis 7 writes scores in RESP2: a bulk string, `inf`/`-inf`
/// for infinities, otherwise the shortest text that reads back as the same `f64`, with
/// `%g`'s exponent form for very large or small magnitudes (`1e+20`, `1e-05`).
pub(crate) fn encode_float(out: &mut Vec<u8>, value: f64) {
    let text = format_float(value);
    encode_bulk(out, text.as_bytes());
}

fn format_float(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let magnitude = value.abs();
    if value == 0.0 || (1e-5..1e17).contains(&magnitude) {
        return format!("{value}");
    }
    // `{:e}` gives `1e20` / `1.5e-7`; %g writes the exponent signed, at least two digits.
    let text = format!("{value:e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => text,
    }
}

/// Resolves a `start stop` rank range (negative counts from the end) over `len` items, as
/// Redis's LRANGE and ZRANGE do: `None` when empty, else the half-open `start..end`.
pub(crate) fn rank_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 { start + len } else { start }.max(0);
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    // Both are within 0..len here.
    Some((
        usize::try_from(start).unwrap_or(0),
        usize::try_from(stop + 1).unwrap_or(0),
    ))
}

/// Whether `arg` is `word`, ignoring ASCII case.
pub(crate) fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// A length as a RESP integer.
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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

    #[test]
    fn integers_parse_like_string2ll() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b"007"[..],
            b"-0",
            b"+1",
            b" 1",
            b"1 ",
            b"",
            b"-",
            b"1.0",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_int(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_parse_like_strtod_and_format_like_redis() {
        assert_eq!(parse_float(b"1.5"), Some(1.5));
        assert_eq!(parse_float(b"-2e3"), Some(-2000.0));
        assert_eq!(parse_float(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_float(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float(b"0"), Some(0.0));
        assert_eq!(parse_float(b"0e5"), Some(0.0));
        for bad in [&b"nan"[..], b"abc", b" 1", b"1e999", b"1e-999", b"", b"1,5"] {
            assert_eq!(parse_float(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(1.5), "1.5");
        assert_eq!(format_float(-0.25), "-0.25");
        assert_eq!(format_float(0.1), "0.1");
        assert_eq!(format_float(1e20), "1e+20");
        assert_eq!(format_float(1.5e-7), "1.5e-07");
        assert_eq!(format_float(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn rank_ranges_follow_redis() {
        assert_eq!(rank_range(0, -1, 5), Some((0, 5)));
        assert_eq!(rank_range(0, 10, 5), Some((0, 5)));
        assert_eq!(rank_range(-2, -1, 5), Some((3, 5)));
        assert_eq!(rank_range(-100, 1, 5), Some((0, 2)));
        assert_eq!(rank_range(3, 2, 5), None);
        assert_eq!(rank_range(5, 10, 5), None);
        assert_eq!(rank_range(0, -1, 0), None);
        assert_eq!(rank_range(i64::MIN, i64::MAX, 3), Some((0, 3)));
    }
}

//! Strings: GET SET MGET MSET INCR DECR INCRBY DECRBY.

use std::io::Write as _;
use std::mem::take;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crest_resp::{encode_array_header, encode_bulk, encode_integer};

use super::args::{int_arg, is, parse_int};
use super::ctx::Ctx;
use super::reply::{NIL, NOT_AN_INTEGER, OK, Reply, SYNTAX_ERROR, WRONGTYPE, wrong_arity};
use crate::store::{Entry, Now, Value};

const INVALID_EXPIRE: &str = "ERR invalid expire time in 'set' command";
const INCR_OVERFLOW: &str = "ERR increment or decrement would overflow";
const DECR_OVERFLOW: &str = "ERR decrement would overflow";

/// `GET key`: the string, nil when absent, WRONGTYPE for other types.
pub(super) fn get(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], NIL, |entry, out| {
        let Value::Str(value) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_bulk(out, value);
        Ok(())
    })
}

/// `MGET key...`: one string or nil per key; keys of other types read as nil, as in Redis.
pub(super) fn mget(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    encode_array_header(ctx.out, args.len() - 1);
    for key in &args[1..] {
        ctx.read(key, NIL, |entry, out| {
            match &entry.value {
                Value::Str(value) => encode_bulk(out, value),
                _ => out.extend_from_slice(NIL),
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// `MSET key value [key value ...]`: sets every pair, whatever the keys held. Not atomic
/// across keys: each pair takes its own shard's lock.
pub(super) fn mset(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    if args.len().is_multiple_of(2) {
        return Err(wrong_arity("mset").into());
    }
    for pair in args[1..].chunks_exact_mut(2) {
        let value = take(&mut pair[1]);
        let key = take(&mut pair[0]);
        let mut shard = ctx.shard(&key);
        shard.insert(key, Entry::new(Value::Str(value), None), &mut ctx.now);
    }
    ctx.out.extend_from_slice(OK);
    Ok(())
}

/// How `SET` was told its deadline.
#[derive(Clone, Copy)]
enum Expire {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// Options of `SET` after the value.
#[derive(Default)]
struct SetOptions<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    expire: Option<(Expire, &'a [u8])>,
}

impl<'a> SetOptions<'a> {
    /// Parses options the way Redis's `parseExtendedStringArgumentsOrReply` does:
    /// case-insensitive, and an option that conflicts with an earlier one is a syntax error.
    /// The deadline's number is read later, as Redis does, so a bad option wins over it.
    fn parse(options: &'a [Vec<u8>]) -> Result<Self, &'static str> {
        let mut parsed = SetOptions::default();
        let mut i = 0;
        while let Some(option) = options.get(i) {
            let unit = [
                ("EX", Expire::Ex),
                ("PX", Expire::Px),
                ("EXAT", Expire::ExAt),
                ("PXAT", Expire::PxAt),
            ]
            .into_iter()
            .find_map(|(name, unit)| is(option, name).then_some(unit));
            if is(option, "NX") && !parsed.xx {
                parsed.nx = true;
            } else if is(option, "XX") && !parsed.nx {
                parsed.xx = true;
            } else if is(option, "GET") {
                parsed.get = true;
            } else if is(option, "KEEPTTL") && parsed.expire.is_none() {
                parsed.keep_ttl = true;
            } else if let Some(unit) = unit
                && parsed.expire.is_none()
                && !parsed.keep_ttl
                && let Some(amount) = options.get(i + 1)
            {
                parsed.expire = Some((unit, amount));
                i += 1;
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

    /// The deadline asked for, checked as Redis's `getExpireMillisecondsOrReply` does.
    fn deadline(&self, now: &mut Now<'_>) -> Result<Option<Instant>, &'static str> {
        let Some((unit, amount)) = self.expire else {
            return Ok(None);
        };
        let amount = int_arg(amount)?;
        let seconds = matches!(unit, Expire::Ex | Expire::ExAt);
        if amount <= 0 || (seconds && amount > i64::MAX / 1000) {
            return Err(INVALID_EXPIRE);
        }
        let millis = amount.unsigned_abs() * if seconds { 1000 } else { 1 };
        let wall = unix_millis();
        match unit {
            Expire::Ex | Expire::Px => {
                // Redis refuses a deadline past what its millisecond clock can hold.
                if millis > i64::MAX.unsigned_abs() - wall {
                    return Err(INVALID_EXPIRE);
                }
                let at = now.get().checked_add(Duration::from_millis(millis));
                at.map(Some).ok_or(INVALID_EXPIRE)
            }
            Expire::ExAt | Expire::PxAt => {
                let base = now.get();
                // Deadlines are kept on the monotonic clock; an absolute one is placed at its
                // distance from the wall clock now. One in the past is simply expired.
                Ok(Some(if millis >= wall {
                    base.checked_add(Duration::from_millis(millis - wall))
                        .ok_or(INVALID_EXPIRE)?
                } else {
                    base.checked_sub(Duration::from_millis(wall - millis))
                        .unwrap_or(base)
                }))
            }
        }
    }
}

/// Milliseconds since the Unix epoch by the wall clock; 0 if it is set before 1970.
fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL]`.
pub(super) fn set(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let (head, options) = args.split_at_mut(3);
    let options = SetOptions::parse(options)?;
    let deadline = options.deadline(&mut ctx.now)?;
    let value = take(&mut head[2]);
    let key = take(&mut head[1]);
    let mut shard = ctx.shard(&key);
    if !options.reads_old_entry() {
        shard.insert(key, Entry::new(Value::Str(value), deadline), &mut ctx.now);
        ctx.out.extend_from_slice(OK);
        return Ok(());
    }
    let old = shard.read(&key, &mut ctx.now, |entry| {
        (entry.expires_at, matches!(entry.value, Value::Str(_)))
    });
    if options.get {
        ctx.conn.stats.lookup(old.is_some());
        if let Some((_, false)) = old {
            return Err(WRONGTYPE.into());
        }
    }
    let exists = old.is_some();
    if (options.nx && exists) || (options.xx && !exists) {
        let out = &mut *ctx.out;
        let shown = options.get
            && shard
                .read(&key, &mut ctx.now, |entry| {
                    if let Value::Str(old) = &entry.value {
                        encode_bulk(out, old);
                    }
                })
                .is_some();
        if !shown {
            ctx.out.extend_from_slice(NIL);
        }
        return Ok(());
    }
    let expires_at = if options.keep_ttl {
        old.and_then(|(at, _)| at)
    } else {
        deadline
    };
    let previous = shard.insert(key, Entry::new(Value::Str(value), expires_at), &mut ctx.now);
    match previous {
        Some(Entry {
            value: Value::Str(old),
            ..
        }) if options.get => encode_bulk(ctx.out, &old),
        _ if options.get => ctx.out.extend_from_slice(NIL),
        _ => ctx.out.extend_from_slice(OK),
    }
    Ok(())
}

/// `INCR key`.
pub(super) fn incr(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    incr_by(ctx, &mut args[1], 1)
}

/// `DECR key`.
pub(super) fn decr(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    incr_by(ctx, &mut args[1], -1)
}

/// `INCRBY key delta`.
pub(super) fn incrby(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let delta = int_arg(&args[2])?;
    incr_by(ctx, &mut args[1], delta)
}

/// `DECRBY key delta`.
pub(super) fn decrby(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let delta = int_arg(&args[2])?;
    let delta = delta.checked_neg().ok_or(DECR_OVERFLOW)?;
    incr_by(ctx, &mut args[1], delta)
}

/// Adds `delta` to the integer under `key` (0 if absent), keeping its expiry, as Redis
/// does. Takes the key to store it without copying when it is new.
fn incr_by(ctx: &mut Ctx<'_>, key: &mut Vec<u8>, delta: i64) -> Reply {
    let key = take(key);
    let mut shard = ctx.shard(&key);
    // A new key starts as "0", so it takes the same path as an existing counter.
    let value = shard.upsert(
        key,
        &mut ctx.now,
        || Value::Str(b"0".to_vec()),
        |entry| {
            let Value::Str(text) = &mut entry.value else {
                return Err(WRONGTYPE);
            };
            let current = parse_int(text).ok_or(NOT_AN_INTEGER)?;
            let value = current.checked_add(delta).ok_or(INCR_OVERFLOW)?;
            text.clear();
            // Writing to a Vec cannot fail.
            let _ = write!(text, "{value}");
            Ok(value)
        },
    )?;
    encode_integer(ctx.out, value);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::{Harness, bulk, err, simple};
    use crest_resp::Frame;

    #[test]
    fn set_with_ttl_expires_lazily() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SET", "s", "1", "EX", "10"]), simple("OK"));
        assert_eq!(h.run(&["SET", "p", "1", "px", "1500"]), simple("OK"));
        assert_eq!(h.run(&["SET", "forever", "1"]), simple("OK"));
        h.advance(Duration::from_millis(1499));
        assert_eq!(h.run(&["GET", "p"]), bulk("1"));
        h.advance(Duration::from_millis(1));
        assert_eq!(h.run(&["GET", "p"]), Frame::NullBulk);
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
        assert_eq!(h.run(&["GET", "k"]), Frame::NullBulk);
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
        assert_eq!(h.run(&["SET", "k", "a", "XX"]), Frame::NullBulk);
        assert_eq!(h.run(&["SET", "k", "a", "NX"]), simple("OK"));
        assert_eq!(h.run(&["SET", "k", "b", "NX"]), Frame::NullBulk);
        assert_eq!(h.run(&["SET", "k", "b", "NX", "GET"]), bulk("a"));
        assert_eq!(h.run(&["SET", "k", "c", "xx", "get"]), bulk("a"));
        assert_eq!(h.run(&["SET", "new", "x", "GET"]), Frame::NullBulk);
        assert_eq!(h.run(&["GET", "k"]), bulk("c"));

        assert_eq!(h.run(&["SET", "k", "v", "NX", "XX"]), err(SYNTAX_ERROR));
        assert_eq!(
            h.run(&["SET", "k", "v", "EX", "1", "PX", "1"]),
            err(SYNTAX_ERROR)
        );
        assert_eq!(h.run(&["SET", "k", "v", "EX"]), err(SYNTAX_ERROR));
        assert_eq!(h.run(&["SET", "k", "v", "EXAT"]), err(SYNTAX_ERROR));
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
        assert_eq!(h.counts("set"), (13, 0, 7));
    }

    #[test]
    fn set_exat_and_pxat_place_the_deadline_by_the_wall_clock() {
        let mut h = Harness::new();
        let now_s = unix_millis() / 1000;
        h.run(&["SET", "a", "1", "EXAT", &(now_s + 100).to_string()]);
        let Frame::Integer(ttl) = h.run(&["TTL", "a"]) else {
            panic!("TTL is an integer");
        };
        assert!((98..=101).contains(&ttl), "{ttl}");
        h.run(&[
            "SET",
            "b",
            "1",
            "PXAT",
            &(unix_millis() + 5_000).to_string(),
        ]);
        h.advance(Duration::from_secs(6));
        assert_eq!(h.run(&["GET", "b"]), Frame::NullBulk);
        assert_eq!(
            h.run(&["SET", "c", "1", "PXAT", "1"]),
            simple("OK"),
            "a deadline in the past is accepted and the key is gone at once"
        );
        assert_eq!(h.run(&["GET", "c"]), Frame::NullBulk);
        assert_eq!(h.run(&["SET", "c", "1", "EXAT", "0"]), err(INVALID_EXPIRE));
        assert_eq!(
            h.run(&["SET", "c", "1", "EXAT", "1", "KEEPTTL"]),
            err(SYNTAX_ERROR)
        );
    }

    #[test]
    fn set_overwrites_any_type_but_get_option_and_get_check_it() {
        let mut h = Harness::new();
        h.run(&["RPUSH", "l", "x"]);
        assert_eq!(h.run(&["GET", "l"]), err(WRONGTYPE));
        assert_eq!(h.run(&["SET", "l", "v", "GET"]), err(WRONGTYPE));
        assert_eq!(
            h.run(&["LLEN", "l"]),
            Frame::Integer(1),
            "failed SET GET changes nothing"
        );
        assert_eq!(h.run(&["SET", "l", "v"]), simple("OK"));
        assert_eq!(h.run(&["GET", "l"]), bulk("v"));
        h.run(&["SADD", "s", "m"]);
        assert_eq!(h.run(&["MSET", "s", "1"]), simple("OK"));
        assert_eq!(
            h.run(&["MGET", "s", "l"]),
            Frame::Array(vec![bulk("1"), bulk("v")])
        );
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
        assert_eq!(h.counts("incr"), (3, 0, 2));

        h.run(&["SET", "padded", "007"]);
        assert_eq!(
            h.run(&["INCR", "padded"]),
            err(NOT_AN_INTEGER),
            "as string2ll"
        );
        h.run(&["HSET", "h", "f", "1"]);
        assert_eq!(h.run(&["INCR", "h"]), err(WRONGTYPE));
    }

    #[test]
    fn mget_and_mset() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["MSET", "a", "1", "b", "2"]), simple("OK"));
        assert_eq!(
            h.run(&["MGET", "a", "missing", "b"]),
            Frame::Array(vec![bulk("1"), Frame::NullBulk, bulk("2")])
        );
    }
}

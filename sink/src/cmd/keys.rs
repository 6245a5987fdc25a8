//! Commands on keys of any type: DEL UNLINK EXISTS EXPIRE PEXPIRE PERSIST TTL PTTL TYPE.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crest_resp::encode_integer;

use super::args::{int_arg, is};
use super::ctx::Ctx;
use super::reply::{Error, ONE, Reply, ZERO};

/// `DEL key...` and `UNLINK key...`: how many live keys were removed.
pub(super) fn del(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let mut deleted = 0;
    for key in &args[1..] {
        let removed = ctx.shard(key).remove(key, &mut ctx.now);
        deleted += i64::from(removed.is_some());
    }
    encode_integer(ctx.out, deleted);
    Ok(())
}

/// `EXISTS key...`: how many of the keys exist, a key named twice counting twice.
pub(super) fn exists(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let mut found = 0;
    for key in &args[1..] {
        let live = ctx.shard(key).read(key, &mut ctx.now, |_| ()).is_some();
        ctx.conn.stats.lookup(live);
        found += i64::from(live);
    }
    encode_integer(ctx.out, found);
    Ok(())
}

/// `EXPIRE key seconds [NX|XX|GT|LT]`.
pub(super) fn expire(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    expire_in(
        ctx,
        args,
        1000,
        "ERR invalid expire time in 'expire' command",
    )
}

/// `PEXPIRE key milliseconds [NX|XX|GT|LT]`.
pub(super) fn pexpire(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    expire_in(ctx, args, 1, "ERR invalid expire time in 'pexpire' command")
}

/// Conditions on the current deadline (`EXPIRE ... NX`).
#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl ExpireFlags {
    /// Parses them as Redis's `parseExtendedExpireArgumentsOrReply` does.
    fn parse(options: &[Vec<u8>]) -> Result<Self, Error> {
        let mut flags = ExpireFlags::default();
        for option in options {
            if is(option, "NX") {
                flags.nx = true;
            } else if is(option, "XX") {
                flags.xx = true;
            } else if is(option, "GT") {
                flags.gt = true;
            } else if is(option, "LT") {
                flags.lt = true;
            } else {
                let option = String::from_utf8_lossy(option);
                return Err(format!("ERR Unsupported option {option}").into());
            }
        }
        if flags.nx && (flags.xx || flags.gt || flags.lt) {
            return Err(
                "ERR NX and XX, GT or LT options at the same time are not compatible".into(),
            );
        }
        if flags.gt && flags.lt {
            return Err("ERR GT and LT options at the same time are not compatible".into());
        }
        Ok(flags)
    }

    /// Whether a key whose deadline is `current` takes `new` (`None`: in the past). A key
    /// without a deadline counts as expiring never, as in Redis.
    fn allow(&self, current: Option<Instant>, new: Option<Instant>) -> bool {
        if (self.nx && current.is_some()) || (self.xx && current.is_none()) {
            return false;
        }
        let Some(current) = current else {
            return !self.gt;
        };
        let later = new.is_some_and(|new| new > current);
        let earlier = new.is_none_or(|new| new < current);
        (!self.gt || later) && (!self.lt || earlier)
    }
}

/// Milliseconds since the Unix epoch by the wall clock; 0 if it is set before 1970.
fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// EXPIRE and PEXPIRE: `amount` times `unit` milliseconds from now. A deadline not in the
/// future deletes the key at once; 1 when the deadline was applied, 0 otherwise.
fn expire_in(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>], unit: i64, invalid: &'static str) -> Reply {
    let flags = ExpireFlags::parse(&args[3..])?;
    let amount = int_arg(&args[2])?;
    // Redis's overflow checks: the unit conversion, then adding its millisecond clock.
    let millis = amount.checked_mul(unit).ok_or(invalid)?;
    if millis > i64::MAX - unix_millis() {
        return Err(invalid.into());
    }
    let new = match u64::try_from(millis) {
        Ok(millis) if millis > 0 => Some(
            ctx.now
                .get()
                .checked_add(Duration::from_millis(millis))
                .ok_or(invalid)?,
        ),
        _ => None,
    };
    let key = &args[1];
    let mut shard = ctx.shard(key);
    let Some(current) = shard.read(key, &mut ctx.now, |entry| entry.expires_at) else {
        ctx.out.extend_from_slice(ZERO);
        return Ok(());
    };
    if !flags.allow(current, new) {
        ctx.out.extend_from_slice(ZERO);
        return Ok(());
    }
    match new {
        Some(at) => {
            shard.update(key, &mut ctx.now, |entry| entry.expires_at = Some(at));
        }
        None => {
            shard.remove(key, &mut ctx.now);
        }
    }
    ctx.out.extend_from_slice(ONE);
    Ok(())
}

/// `PERSIST key`: 1 when a deadline was removed.
pub(super) fn persist(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let key = &args[1];
    let removed = ctx
        .shard(key)
        .update(key, &mut ctx.now, |entry| entry.expires_at.take().is_some());
    ctx.out
        .extend_from_slice(if removed == Some(true) { ONE } else { ZERO });
    Ok(())
}

/// `TTL key`: seconds left, rounded; -1 without a deadline, -2 when absent.
pub(super) fn ttl(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    time_left(ctx, &args[1], false)
}

/// `PTTL key`: milliseconds left; -1 without a deadline, -2 when absent.
pub(super) fn pttl(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    time_left(ctx, &args[1], true)
}

fn time_left(ctx: &mut Ctx<'_>, key: &[u8], millis: bool) -> Reply {
    let now = ctx.now.get();
    ctx.read(key, b":-2\r\n", |entry, out| {
        let left = match entry.expires_at {
            None => -1,
            Some(at) => {
                // Up to the next millisecond, so PTTL right after `PX 100` is 100 as in Redis,
                // whose clock has no finer grain.
                let nanos = at.saturating_duration_since(now).as_nanos();
                let ms = i64::try_from(nanos.div_ceil(1_000_000)).unwrap_or(i64::MAX);
                if millis {
                    ms
                } else {
                    ms.saturating_add(500) / 1000
                }
            }
        };
        encode_integer(out, left);
        Ok(())
    })
}

/// `TYPE key`: `string`, `hash`, `list`, `set`, `zset`, or `none`.
pub(super) fn type_(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], b"+none\r\n", |entry, out| {
        out.push(b'+');
        out.extend_from_slice(entry.value.type_name().as_bytes());
        out.extend_from_slice(b"\r\n");
        Ok(())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use crate::test_support::{Harness, bulk, err, simple};
    use crest_resp::Frame;
    use std::time::Duration;

    fn int(n: i64) -> Frame {
        Frame::Integer(n)
    }

    #[test]
    fn expire_then_ttl_and_pttl_count_down() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["TTL", "k"]), int(-2));
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["TTL", "k"]), int(-1));
        assert_eq!(h.run(&["EXPIRE", "k", "10"]), int(1));
        assert_eq!(h.run(&["TTL", "k"]), int(10));
        assert_eq!(h.run(&["PTTL", "k"]), int(10_000));
        h.advance(Duration::from_millis(2_400));
        assert_eq!(h.run(&["TTL", "k"]), int(8), "7.6 s rounds to 8, as Redis");
        assert_eq!(h.run(&["PTTL", "k"]), int(7_600));
        assert_eq!(h.run(&["PEXPIRE", "k", "500"]), int(1));
        assert_eq!(h.run(&["PTTL", "k"]), int(500));
        h.advance(Duration::from_millis(500));
        assert_eq!(h.run(&["GET", "k"]), Frame::NullBulk);
        assert_eq!(h.run(&["EXPIRE", "k", "10"]), int(0), "no key");
    }

    #[test]
    fn expire_in_the_past_deletes_and_persist_clears() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["EXPIRE", "k", "0"]), int(1));
        assert_eq!(h.run(&["EXISTS", "k"]), int(0));
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["EXPIRE", "k", "-5"]), int(1));
        assert_eq!(h.run(&["EXISTS", "k"]), int(0));

        h.run(&["SET", "k", "v", "EX", "5"]);
        assert_eq!(h.run(&["PERSIST", "k"]), int(1));
        assert_eq!(h.run(&["PERSIST", "k"]), int(0));
        assert_eq!(h.run(&["PERSIST", "missing"]), int(0));
        assert_eq!(h.run(&["TTL", "k"]), int(-1));
    }

    #[test]
    fn expire_conditions_nx_xx_gt_lt() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        assert_eq!(
            h.run(&["EXPIRE", "k", "100", "XX"]),
            int(0),
            "no deadline yet"
        );
        assert_eq!(
            h.run(&["EXPIRE", "k", "100", "GT"]),
            int(0),
            "none counts as forever"
        );
        assert_eq!(h.run(&["EXPIRE", "k", "100", "NX"]), int(1));
        assert_eq!(h.run(&["EXPIRE", "k", "50", "NX"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "50", "GT"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "200", "gt"]), int(1));
        assert_eq!(h.run(&["EXPIRE", "k", "300", "LT"]), int(0));
        assert_eq!(h.run(&["EXPIRE", "k", "150", "LT", "XX"]), int(1));
        assert_eq!(h.run(&["TTL", "k"]), int(150));
        h.run(&["SET", "p", "v"]);
        assert_eq!(
            h.run(&["EXPIRE", "p", "10", "LT"]),
            int(1),
            "anything is less than forever"
        );

        assert_eq!(
            h.run(&["EXPIRE", "k", "1", "NX", "XX"]),
            err("ERR NX and XX, GT or LT options at the same time are not compatible")
        );
        assert_eq!(
            h.run(&["EXPIRE", "k", "1", "GT", "LT"]),
            err("ERR GT and LT options at the same time are not compatible")
        );
        assert_eq!(
            h.run(&["EXPIRE", "k", "1", "SOON"]),
            err("ERR Unsupported option SOON")
        );
        assert_eq!(
            h.run(&["EXPIRE", "k", "soon"]),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["EXPIRE", "k", &i64::MAX.to_string()]),
            err("ERR invalid expire time in 'expire' command")
        );
        assert_eq!(
            h.run(&["PEXPIRE", "k", &i64::MAX.to_string()]),
            err("ERR invalid expire time in 'pexpire' command")
        );
        assert_eq!(
            h.run(&["TTL", "k"]),
            int(150),
            "failed calls change nothing"
        );
    }

    #[test]
    fn type_del_exists_work_on_every_type() {
        let mut h = Harness::new();
        h.run(&["SET", "s", "v"]);
        h.run(&["HSET", "h", "f", "v"]);
        h.run(&["LPUSH", "l", "v"]);
        h.run(&["SADD", "S", "v"]);
        h.run(&["ZADD", "z", "1", "v"]);
        for (key, kind) in [
            ("s", "string"),
            ("h", "hash"),
            ("l", "list"),
            ("S", "set"),
            ("z", "zset"),
            ("x", "none"),
        ] {
            assert_eq!(h.run(&["TYPE", key]), simple(kind), "{key}");
        }
        assert_eq!(
            h.run(&["EXISTS", "s", "h", "l", "S", "z", "x", "s"]),
            int(6)
        );
        assert_eq!(h.run(&["EXPIRE", "z", "5"]), int(1));
        assert_eq!(h.run(&["DEL", "s", "h", "x"]), int(2));
        assert_eq!(h.run(&["UNLINK", "l", "S"]), int(2));
        h.advance(Duration::from_secs(5));
        assert_eq!(h.run(&["TYPE", "z"]), simple("none"));
        assert_eq!(h.run(&["DBSIZE"]), int(0));
        h.run(&["SET", "s", "back"]);
        assert_eq!(h.run(&["GET", "s"]), bulk("back"));
    }
}

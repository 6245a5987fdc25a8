//! Sets: SADD SREM SISMEMBER SMEMBERS SCARD SPOP.

use std::mem::take;

use crest_resp::{encode_array_header, encode_bulk, encode_integer};

use super::args::int_arg;
use super::ctx::Ctx;
use super::reply::{EMPTY_ARRAY, NIL, ONE, Reply, SYNTAX_ERROR, WRONGTYPE, ZERO, count};
use crate::store::{Set, Value};

/// `SADD key member...`: how many members are new.
pub(super) fn sadd(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let (head, members) = args.split_at_mut(2);
    let key = take(&mut head[1]);
    let added = ctx.shard(&key).upsert(
        key,
        &mut ctx.now,
        || Value::Set(Set::default()),
        |entry| {
            let Value::Set(set) = &mut entry.value else {
                return Err(WRONGTYPE);
            };
            let mut added = 0;
            for member in members {
                added += usize::from(set.insert(take(member)));
            }
            Ok(added)
        },
    )?;
    encode_integer(ctx.out, count(added));
    Ok(())
}

/// `SREM key member...`: how many members were removed; the key goes with its last.
pub(super) fn srem(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let (head, members) = args.split_at(2);
    let key = &head[1];
    let removed = ctx.shard(key).update(key, &mut ctx.now, |entry| {
        let Value::Set(set) = &mut entry.value else {
            return Err(WRONGTYPE);
        };
        Ok(members.iter().filter(|member| set.remove(member)).count())
    });
    encode_integer(ctx.out, count(removed.transpose()?.unwrap_or(0)));
    Ok(())
}

/// `SPOP key [count]`: a member (nil when the key is missing), or with a count up to that
/// many as an array; the key goes with its last member.
pub(super) fn spop(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let wanted = match args.get(2) {
        _ if args.len() > 3 => return Err(SYNTAX_ERROR.into()),
        None => None,
        Some(n) => Some(
            usize::try_from(int_arg(n)?)
                .map_err(|_| "ERR value is out of range, must be positive")?,
        ),
    };
    let key = &args[1];
    let mut shard = ctx.shard(key);
    let out = &mut *ctx.out;
    let popped = shard.update(key, &mut ctx.now, |entry| {
        let Value::Set(set) = &mut entry.value else {
            return Err(WRONGTYPE);
        };
        match wanted {
            None => match set.pop() {
                Some(m) => encode_bulk(out, &m),
                None => out.extend_from_slice(NIL),
            },
            Some(n) => {
                let n = n.min(set.len());
                encode_array_header(out, n);
                for _ in 0..n {
                    if let Some(m) = set.pop() {
                        encode_bulk(out, &m);
                    }
                }
            }
        }
        Ok(())
    });
    drop(shard);
    match popped {
        Some(r) => Ok(r?),
        None => {
            ctx.out
                .extend_from_slice(if wanted.is_some() { EMPTY_ARRAY } else { NIL });
            Ok(())
        }
    }
}

/// `SISMEMBER key member`: 1 or 0.
pub(super) fn sismember(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let member = &args[2];
    ctx.read(&args[1], ZERO, |entry, out| {
        let Value::Set(set) = &entry.value else {
            return Err(WRONGTYPE);
        };
        out.extend_from_slice(if set.contains(member) { ONE } else { ZERO });
        Ok(())
    })
}

/// `SMEMBERS key`: every member, in no particular order.
pub(super) fn smembers(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], EMPTY_ARRAY, |entry, out| {
        let Value::Set(set) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_array_header(out, set.len());
        for member in set.iter() {
            encode_bulk(out, member);
        }
        Ok(())
    })
}

/// `SCARD key`: number of members; 0 when absent.
pub(super) fn scard(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], ZERO, |entry, out| {
        let Value::Set(set) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_integer(out, count(set.len()));
        Ok(())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::{Harness, bulk, err};
    use crest_resp::Frame;

    #[test]
    fn sadd_srem_sismember_count_like_redis() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SADD", "s", "a", "b", "a"]), Frame::Integer(2));
        assert_eq!(h.run(&["SADD", "s", "b", "c"]), Frame::Integer(1));
        assert_eq!(h.run(&["SISMEMBER", "s", "a"]), Frame::Integer(1));
        assert_eq!(h.run(&["SISMEMBER", "s", "z"]), Frame::Integer(0));
        assert_eq!(h.run(&["SISMEMBER", "nope", "a"]), Frame::Integer(0));
        assert_eq!(h.run(&["SCARD", "s"]), Frame::Integer(3));
        let Frame::Array(mut members) = h.run(&["SMEMBERS", "s"]) else {
            panic!("SMEMBERS is an array");
        };
        members.sort_by_key(|m| format!("{m:?}"));
        assert_eq!(members, [bulk("a"), bulk("b"), bulk("c")]);
        assert_eq!(h.run(&["SREM", "s", "a", "z", "a"]), Frame::Integer(1));
        assert_eq!(h.run(&["SREM", "s", "b", "c"]), Frame::Integer(2));
        assert_eq!(
            h.run(&["EXISTS", "s"]),
            Frame::Integer(0),
            "the last member takes the key"
        );
        assert_eq!(h.run(&["SREM", "s", "a"]), Frame::Integer(0));
        assert_eq!(h.run(&["SMEMBERS", "s"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["SCARD", "s"]), Frame::Integer(0));
    }

    #[test]
    fn set_commands_check_types() {
        let mut h = Harness::new();
        h.run(&["ZADD", "z", "1", "m"]);
        for args in [
            &["SADD", "z", "x"][..],
            &["SREM", "z", "x"],
            &["SISMEMBER", "z", "m"],
            &["SMEMBERS", "z"],
            &["SCARD", "z"],
        ] {
            assert_eq!(h.run(args), err(WRONGTYPE), "{args:?}");
        }
    }
}

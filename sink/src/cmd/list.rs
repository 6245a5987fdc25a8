//! Lists: LPUSH RPUSH LPOP RPOP LRANGE LLEN.

use std::mem::take;

use crest_resp::{encode_array_header, encode_bulk, encode_integer};

use super::args::{int_arg, rank_range};
use super::ctx::Ctx;
use super::reply::{
    EMPTY_ARRAY, NIL, NIL_ARRAY, NOT_POSITIVE, Reply, WRONGTYPE, ZERO, count, wrong_arity,
};
use crate::store::{List, Value};

/// `LPUSH key value...`: each value in turn goes to the head; the new length.
pub(super) fn lpush(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    push(ctx, args, true)
}

/// `RPUSH key value...`: each value in turn goes to the tail; the new length.
pub(super) fn rpush(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    push(ctx, args, false)
}

fn push(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>], front: bool) -> Reply {
    let (head, values) = args.split_at_mut(2);
    let key = take(&mut head[1]);
    let len = ctx.shard(&key).upsert(
        key,
        &mut ctx.now,
        || Value::List(List::default()),
        |entry| {
            let Value::List(list) = &mut entry.value else {
                return Err(WRONGTYPE);
            };
            for value in values {
                list.push(take(value), front);
            }
            Ok(list.len())
        },
    )?;
    encode_integer(ctx.out, count(len));
    Ok(())
}

/// `LPOP key [count]`.
pub(super) fn lpop(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    pop(ctx, args, true, "lpop")
}

/// `RPOP key [count]`.
pub(super) fn rpop(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    pop(ctx, args, false, "rpop")
}

/// One item (bulk, or nil when absent), or with a count up to that many as an array (nil
/// array when absent, empty for a count of 0), as Redis 7 replies. The key goes with its
/// last item.
fn pop(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>], front: bool, name: &str) -> Reply {
    let wanted = match args.get(2) {
        _ if args.len() > 3 => return Err(wrong_arity(name).into()),
        None => None,
        Some(n) => {
            let n = int_arg(n)?;
            Some(usize::try_from(n).map_err(|_| NOT_POSITIVE)?)
        }
    };
    let key = &args[1];
    let mut shard = ctx.shard(key);
    let out = &mut *ctx.out;
    let popped = shard.update(key, &mut ctx.now, |entry| {
        let Value::List(list) = &mut entry.value else {
            return Err(WRONGTYPE);
        };
        match wanted {
            None => match list.pop(front) {
                Some(item) => encode_bulk(out, &item),
                None => out.extend_from_slice(NIL),
            },
            Some(wanted) => {
                let n = wanted.min(list.len());
                encode_array_header(out, n);
                for _ in 0..n {
                    if let Some(item) = list.pop(front) {
                        encode_bulk(out, &item);
                    }
                }
            }
        }
        Ok(())
    });
    drop(shard);
    match popped {
        Some(result) => Ok(result?),
        None => {
            let missing = if wanted.is_some() { NIL_ARRAY } else { NIL };
            ctx.out.extend_from_slice(missing);
            Ok(())
        }
    }
}

/// `LRANGE key start stop`: items by index, negative from the tail, both ends included.
pub(super) fn lrange(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let start = int_arg(&args[2])?;
    let stop = int_arg(&args[3])?;
    ctx.read(&args[1], EMPTY_ARRAY, |entry, out| {
        let Value::List(list) = &entry.value else {
            return Err(WRONGTYPE);
        };
        match rank_range(start, stop, list.len()) {
            None => out.extend_from_slice(EMPTY_ARRAY),
            Some((start, end)) => {
                encode_array_header(out, end - start);
                for item in list.range(start, end) {
                    encode_bulk(out, item);
                }
            }
        }
        Ok(())
    })
}

/// `LLEN key`: 0 when absent.
pub(super) fn llen(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], ZERO, |entry, out| {
        let Value::List(list) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_integer(out, count(list.len()));
        Ok(())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::{Harness, bulk, bulks, err};
    use crest_resp::Frame;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn push_order_and_lrange_indexes() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["LPUSH", "l", "a", "b", "c"]), Frame::Integer(3));
        assert_eq!(h.run(&["RPUSH", "l", "d", "e"]), Frame::Integer(5));
        assert_eq!(
            h.run(&["LRANGE", "l", "0", "-1"]),
            bulks(&["c", "b", "a", "d", "e"])
        );
        assert_eq!(h.run(&["LRANGE", "l", "1", "2"]), bulks(&["b", "a"]));
        assert_eq!(h.run(&["LRANGE", "l", "-2", "100"]), bulks(&["d", "e"]));
        assert_eq!(h.run(&["LRANGE", "l", "3", "1"]), bulks(&[]));
        assert_eq!(h.run(&["LRANGE", "nope", "0", "-1"]), bulks(&[]));
        assert_eq!(h.run(&["LLEN", "l"]), Frame::Integer(5));
        assert_eq!(h.run(&["LLEN", "nope"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["LRANGE", "l", "x", "1"]),
            err(super::super::reply::NOT_AN_INTEGER)
        );
    }

    #[test]
    fn pop_with_and_without_count() {
        let mut h = Harness::new();
        h.run(&["RPUSH", "l", "a", "b", "c", "d"]);
        assert_eq!(h.run(&["LPOP", "l"]), bulk("a"));
        assert_eq!(h.run(&["RPOP", "l"]), bulk("d"));
        assert_eq!(
            h.run(&["LPOP", "l", "0"]),
            bulks(&[]),
            "count 0: empty array"
        );
        assert_eq!(h.run(&["RPOP", "l", "5"]), bulks(&["c", "b"]));
        assert_eq!(
            h.run(&["EXISTS", "l"]),
            Frame::Integer(0),
            "the last pop removes the key"
        );
        assert_eq!(h.run(&["LPOP", "l"]), Frame::NullBulk);
        assert_eq!(h.run(&["LPOP", "l", "2"]), Frame::NullArray);

        assert_eq!(h.run(&["LPOP", "l", "-1"]), err(NOT_POSITIVE));
        assert_eq!(
            h.run(&["LPOP", "l", "x"]),
            err(super::super::reply::NOT_AN_INTEGER)
        );
        assert_eq!(
            h.run(&["LPOP", "l", "1", "2"]),
            err("ERR wrong number of arguments for 'lpop' command")
        );
        assert_eq!(h.counts("lpop"), (7, 0, 3));
    }

    #[test]
    fn list_commands_check_types() {
        let mut h = Harness::new();
        h.run(&["SET", "s", "v"]);
        for args in [
            &["LPUSH", "s", "x"][..],
            &["RPUSH", "s", "x"],
            &["LPOP", "s"],
            &["RPOP", "s", "0"],
            &["LRANGE", "s", "0", "1"],
            &["LLEN", "s"],
        ] {
            assert_eq!(h.run(args), err(WRONGTYPE), "{args:?}");
        }
    }

    proptest! {
        /// LPUSH/RPUSH/LPOP/RPOP in any order leave what a VecDeque would hold.
        #[test]
        fn lists_behave_like_a_vecdeque(ops in prop::collection::vec((0u8..4, 0u16..100), 1..60)) {
            let mut h = Harness::new();
            let mut model: VecDeque<String> = VecDeque::new();
            for (op, n) in ops {
                let v = n.to_string();
                let (reply, want) = match op {
                    0 => { model.push_front(v.clone()); (h.run(&["LPUSH", "l", &v]), Frame::Integer(model.len() as i64)) }
                    1 => { model.push_back(v.clone()); (h.run(&["RPUSH", "l", &v]), Frame::Integer(model.len() as i64)) }
                    2 => (h.run(&["LPOP", "l"]), model.pop_front().map_or(Frame::NullBulk, |s| bulk(&s))),
                    _ => (h.run(&["RPOP", "l"]), model.pop_back().map_or(Frame::NullBulk, |s| bulk(&s))),
                };
                prop_assert_eq!(reply, want);
            }
            let all: Vec<&str> = model.iter().map(String::as_str).collect();
            prop_assert_eq!(h.run(&["LRANGE", "l", "0", "-1"]), bulks(&all));
        }
    }
}

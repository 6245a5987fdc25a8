//! Hashes: HSET HGET HGETALL HDEL HLEN.

use std::mem::take;

use crest_resp::{encode_array_header, encode_bulk, encode_integer};

use super::ctx::Ctx;
use super::reply::{EMPTY_ARRAY, NIL, Reply, WRONGTYPE, ZERO, count, wrong_arity};
use crate::store::{Hash, Value};

/// `HSET key field value [field value ...]`: how many fields are new.
pub(super) fn hset(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    if !args.len().is_multiple_of(2) {
        return Err(wrong_arity("hset").into());
    }
    let (head, pairs) = args.split_at_mut(2);
    let key = take(&mut head[1]);
    let added = ctx.shard(&key).upsert(
        key,
        &mut ctx.now,
        || Value::Hash(Hash::default()),
        |entry| {
            let Value::Hash(hash) = &mut entry.value else {
                return Err(WRONGTYPE);
            };
            let mut added = 0;
            for pair in pairs.chunks_exact_mut(2) {
                added += usize::from(hash.insert(take(&mut pair[0]), take(&mut pair[1])));
            }
            Ok(added)
        },
    )?;
    encode_integer(ctx.out, count(added));
    Ok(())
}

/// `HGET key field`: the value, or nil.
pub(super) fn hget(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let field = &args[2];
    ctx.read(&args[1], NIL, |entry, out| {
        let Value::Hash(hash) = &entry.value else {
            return Err(WRONGTYPE);
        };
        match hash.get(field) {
            Some(value) => encode_bulk(out, value),
            None => out.extend_from_slice(NIL),
        }
        Ok(())
    })
}

/// `HGETALL key`: field, value, field, value...; empty when absent.
pub(super) fn hgetall(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], EMPTY_ARRAY, |entry, out| {
        let Value::Hash(hash) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_array_header(out, 2 * hash.len());
        for (field, value) in hash.iter() {
            encode_bulk(out, field);
            encode_bulk(out, value);
        }
        Ok(())
    })
}

/// `HDEL key field...`: how many fields were removed; the key goes with its last field.
pub(super) fn hdel(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let (head, fields) = args.split_at(2);
    let key = &head[1];
    let removed = ctx.shard(key).update(key, &mut ctx.now, |entry| {
        let Value::Hash(hash) = &mut entry.value else {
            return Err(WRONGTYPE);
        };
        Ok(fields.iter().filter(|field| hash.remove(field)).count())
    });
    encode_integer(ctx.out, count(removed.transpose()?.unwrap_or(0)));
    Ok(())
}

/// `HLEN key`: number of fields; 0 when absent.
pub(super) fn hlen(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], ZERO, |entry, out| {
        let Value::Hash(hash) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_integer(out, count(hash.len()));
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
    fn hset_counts_new_fields_and_hget_reads_them() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["HSET", "h", "a", "1", "b", "2"]), Frame::Integer(2));
        assert_eq!(
            h.run(&["HSET", "h", "a", "10", "c", "3"]),
            Frame::Integer(1),
            "overwriting a field does not count"
        );
        assert_eq!(h.run(&["HGET", "h", "a"]), bulk("10"));
        assert_eq!(h.run(&["HGET", "h", "nope"]), Frame::NullBulk);
        assert_eq!(h.run(&["HGET", "nope", "a"]), Frame::NullBulk);
        assert_eq!(h.run(&["HLEN", "h"]), Frame::Integer(3));
        assert_eq!(h.run(&["HLEN", "nope"]), Frame::Integer(0));

        let Frame::Array(items) = h.run(&["HGETALL", "h"]) else {
            panic!("HGETALL is an array");
        };
        let mut pairs: Vec<(Frame, Frame)> = items
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect();
        pairs.sort_by_key(|(f, _)| format!("{f:?}"));
        assert_eq!(
            pairs,
            [
                (bulk("a"), bulk("10")),
                (bulk("b"), bulk("2")),
                (bulk("c"), bulk("3"))
            ]
        );
        assert_eq!(h.run(&["HGETALL", "nope"]), Frame::Array(vec![]));
    }

    #[test]
    fn hdel_removes_fields_and_the_key_with_the_last() {
        let mut h = Harness::new();
        h.run(&["HSET", "h", "a", "1", "b", "2"]);
        assert_eq!(h.run(&["HDEL", "h", "a", "a", "zz"]), Frame::Integer(1));
        assert_eq!(h.run(&["HDEL", "h", "b"]), Frame::Integer(1));
        assert_eq!(h.run(&["EXISTS", "h"]), Frame::Integer(0));
        assert_eq!(h.run(&["HDEL", "h", "b"]), Frame::Integer(0));
    }

    #[test]
    fn hash_commands_check_types_and_pairing() {
        let mut h = Harness::new();
        h.run(&["SET", "s", "v"]);
        for args in [
            &["HSET", "s", "f", "v"][..],
            &["HGET", "s", "f"],
            &["HGETALL", "s"],
            &["HDEL", "s", "f"],
            &["HLEN", "s"],
        ] {
            assert_eq!(h.run(args), err(WRONGTYPE), "{args:?}");
        }
        assert_eq!(
            h.run(&["HSET", "h", "f", "v", "g"]),
            err("ERR wrong number of arguments for 'hset' command")
        );
        assert_eq!(h.counts("hset"), (2, 0, 2));
        assert_eq!(h.run(&["EXISTS", "h"]), Frame::Integer(0));
    }
}

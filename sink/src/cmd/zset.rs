//! Sorted sets: ZADD ZREM ZRANGE ZRANGEBYSCORE ZCARD ZSCORE ZPOPMIN.
//!
//! Members are ordered by (score, member bytes), as in Redis. `ZRANGE ... BYLEX` filters
//! that order by member, which is what Redis returns when all scores are equal (the only
//! case it defines); it costs a walk of the whole set.

use std::mem::take;

use crest_resp::{encode_array_header, encode_bulk, encode_integer};

use super::args::{int_arg, is, parse_float, rank_range};
use super::ctx::Ctx;
use super::reply::{
    EMPTY_ARRAY, Error, NIL, NOT_A_FLOAT, Reply, SYNTAX_ERROR, WRONGTYPE, ZERO, count, encode_float,
};
use crate::store::{Score, ScoreBound, Value, ZSet};

const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";
const BAD_SCORE_RANGE: &str = "ERR min or max is not a float";
const BAD_LEX_RANGE: &str = "ERR min or max not valid string range item";

/// `ZADD` options, before the score-member pairs.
#[derive(Default)]
struct ZaddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`: how many members
/// are new (with CH: new or rescored); with INCR, the member's new score, or nil when a
/// condition stopped it. Every score is checked before anything changes.
pub(super) fn zadd(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let mut flags = ZaddFlags::default();
    let mut first_pair = 2;
    for option in &args[2..] {
        let flag = match () {
            () if is(option, "NX") => &mut flags.nx,
            () if is(option, "XX") => &mut flags.xx,
            () if is(option, "GT") => &mut flags.gt,
            () if is(option, "LT") => &mut flags.lt,
            () if is(option, "CH") => &mut flags.ch,
            () if is(option, "INCR") => &mut flags.incr,
            () => break,
        };
        *flag = true;
        first_pair += 1;
    }
    let (head, pairs) = args.split_at_mut(first_pair);
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(SYNTAX_ERROR.into());
    }
    if flags.nx && flags.xx {
        return Err("ERR XX and NX options at the same time are not compatible".into());
    }
    if (flags.gt || flags.lt) && (flags.nx || (flags.gt && flags.lt)) {
        return Err("ERR GT, LT, and/or NX options at the same time are not compatible".into());
    }
    if flags.incr && pairs.len() > 2 {
        return Err("ERR INCR option supports a single increment-element pair".into());
    }
    let scores = pairs
        .chunks(2)
        .map(|pair| score_arg(&pair[0]))
        .collect::<Result<Vec<Score>, _>>()?;
    let key = take(&mut head[1]);
    let outcome = ctx.shard(&key).upsert(
        key,
        &mut ctx.now,
        || Value::ZSet(ZSet::default()),
        |entry| {
            let Value::ZSet(zset) = &mut entry.value else {
                return Err(WRONGTYPE);
            };
            let mut outcome = ZaddOutcome::default();
            for (pair, score) in pairs.chunks_exact_mut(2).zip(scores) {
                zadd_one(zset, take(&mut pair[1]), score, &flags, &mut outcome)?;
            }
            Ok(outcome)
        },
    )?;
    if flags.incr {
        match outcome.last_score {
            Some(score) => encode_float(ctx.out, score.get()),
            None => ctx.out.extend_from_slice(NIL),
        }
    } else {
        let changed = outcome.added + if flags.ch { outcome.updated } else { 0 };
        encode_integer(ctx.out, count(changed));
    }
    Ok(())
}

#[derive(Default)]
struct ZaddOutcome {
    added: usize,
    updated: usize,
    /// The score of the last member that was added or updated (for INCR's reply).
    last_score: Option<Score>,
}

/// One pair of ZADD, as Redis's `zsetAdd` decides it.
fn zadd_one(
    zset: &mut ZSet,
    member: Vec<u8>,
    score: Score,
    flags: &ZaddFlags,
    outcome: &mut ZaddOutcome,
) -> Result<(), &'static str> {
    match zset.score(&member) {
        Some(_) if flags.nx => {}
        Some(current) => {
            let score = if flags.incr {
                Score::new(current.get() + score.get()).ok_or(NAN_SCORE)?
            } else {
                score
            };
            if (flags.lt && score >= current) || (flags.gt && score <= current) {
                return Ok(());
            }
            outcome.last_score = Some(score);
            // Redis compares with `!=`, so -0 and 0 are the same score and nothing changes.
            if score.get() != current.get() {
                zset.insert(member, score);
                outcome.updated += 1;
            }
        }
        None if flags.xx => {}
        None => {
            zset.insert(member, score);
            outcome.added += 1;
            outcome.last_score = Some(score);
        }
    }
    Ok(())
}

fn score_arg(arg: &[u8]) -> Result<Score, &'static str> {
    parse_float(arg).and_then(Score::new).ok_or(NOT_A_FLOAT)
}

/// `ZREM key member...`: how many were removed; the key goes with its last member.
pub(super) fn zrem(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let (head, members) = args.split_at(2);
    let key = &head[1];
    let removed = ctx.shard(key).update(key, &mut ctx.now, |entry| {
        let Value::ZSet(zset) = &mut entry.value else {
            return Err(WRONGTYPE);
        };
        Ok(members.iter().filter(|member| zset.remove(member)).count())
    });
    encode_integer(ctx.out, count(removed.transpose()?.unwrap_or(0)));
    Ok(())
}

/// `ZCARD key`: number of members; 0 when absent.
pub(super) fn zcard(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], ZERO, |entry, out| {
        let Value::ZSet(zset) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_integer(out, count(zset.len()));
        Ok(())
    })
}

/// `ZPOPMIN key [count]`: the lowest members with their scores, flat (`member score
/// ...`), as an array (empty when the key is missing); the key goes with its last member.
pub(super) fn zpopmin(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let wanted = match args.get(2) {
        _ if args.len() > 3 => return Err(SYNTAX_ERROR.into()),
        None => 1,
        Some(n) => usize::try_from(int_arg(n)?)
            .map_err(|_| "ERR value is out of range, must be positive")?,
    };
    let key = &args[1];
    let mut shard = ctx.shard(key);
    let out = &mut *ctx.out;
    let popped = shard.update(key, &mut ctx.now, |entry| {
        let Value::ZSet(zset) = &mut entry.value else {
            return Err(WRONGTYPE);
        };
        let n = wanted.min(zset.len());
        encode_array_header(out, 2 * n);
        for _ in 0..n {
            if let Some((score, member)) = zset.pop_min() {
                encode_bulk(out, &member);
                encode_float(out, score.get());
            }
        }
        Ok(())
    });
    drop(shard);
    match popped {
        Some(r) => Ok(r?),
        None => {
            ctx.out.extend_from_slice(EMPTY_ARRAY);
            Ok(())
        }
    }
}

/// `ZSCORE key member`: the score, or nil.
pub(super) fn zscore(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let member = &args[2];
    ctx.read(&args[1], NIL, |entry, out| {
        let Value::ZSet(zset) = &entry.value else {
            return Err(WRONGTYPE);
        };
        match zset.score(member) {
            Some(score) => encode_float(out, score.get()),
            None => out.extend_from_slice(NIL),
        }
        Ok(())
    })
}

/// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]`.
pub(super) fn zrange(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let query = Query::parse(args, Kind::Auto)?;
    run(ctx, &args[1], &query)
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`.
pub(super) fn zrangebyscore(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let query = Query::parse(args, Kind::Score)?;
    run(ctx, &args[1], &query)
}

/// How a range is given.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Not said yet: ZRANGE without BYSCORE or BYLEX is by rank.
    Auto,
    Score,
    Lex,
}

/// One end of a BYLEX range.
enum LexBound {
    Min,
    Max,
    Included(Vec<u8>),
    Excluded(Vec<u8>),
}

impl LexBound {
    fn parse(arg: &[u8]) -> Result<LexBound, &'static str> {
        match arg.split_first() {
            Some((b'-', [])) => Ok(LexBound::Min),
            Some((b'+', [])) => Ok(LexBound::Max),
            Some((b'[', rest)) => Ok(LexBound::Included(rest.to_vec())),
            Some((b'(', rest)) => Ok(LexBound::Excluded(rest.to_vec())),
            _ => Err(BAD_LEX_RANGE),
        }
    }

    fn above_min(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Included(min) => member >= min.as_slice(),
            LexBound::Excluded(min) => member > min.as_slice(),
        }
    }

    fn below_max(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Included(max) => member <= max.as_slice(),
            LexBound::Excluded(max) => member < max.as_slice(),
        }
    }
}

/// Which members a range asks for.
enum Range {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

/// A parsed ZRANGE or ZRANGEBYSCORE.
struct Query {
    range: Range,
    rev: bool,
    /// Members skipped first (BYSCORE and BYLEX); negative gives nothing, as in Redis.
    offset: i64,
    /// Most members returned; negative is no limit.
    limit: i64,
    with_scores: bool,
}

impl Query {
    /// Parses the arguments after the key as Redis's `zrangeGenericCommand` does: options
    /// first, then conflicts, then the range itself.
    fn parse(args: &[Vec<u8>], mut kind: Kind) -> Result<Query, Error> {
        let preset = kind != Kind::Auto;
        let (mut rev, mut with_scores) = (false, false);
        let (mut offset, mut limit) = (0, -1);
        let mut i = 4;
        while let Some(option) = args.get(i) {
            if is(option, "WITHSCORES") {
                with_scores = true;
            } else if is(option, "LIMIT")
                && let (Some(o), Some(l)) = (args.get(i + 1), args.get(i + 2))
            {
                offset = int_arg(o)?;
                limit = int_arg(l)?;
                i += 2;
            } else if !preset && !rev && is(option, "REV") {
                rev = true;
            } else if kind == Kind::Auto && is(option, "BYSCORE") {
                kind = Kind::Score;
            } else if kind == Kind::Auto && is(option, "BYLEX") {
                kind = Kind::Lex;
            } else {
                return Err(SYNTAX_ERROR.into());
            }
            i += 1;
        }
        // Redis tells "no LIMIT" by a count of -1, so `LIMIT 0 -1` passes this check there too.
        if limit != -1 && kind == Kind::Auto {
            return Err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                    .into(),
            );
        }
        if with_scores && kind == Kind::Lex {
            return Err(
                "ERR syntax error, WITHSCORES not supported in combination with BYLEX".into(),
            );
        }
        // With REV, a score or lex range is written max first.
        let (min, max) = if rev && kind != Kind::Auto {
            (&args[3], &args[2])
        } else {
            (&args[2], &args[3])
        };
        let range = match kind {
            Kind::Auto => Range::Rank(int_arg(min)?, int_arg(max)?),
            Kind::Score => Range::Score(score_bound(min)?, score_bound(max)?),
            Kind::Lex => Range::Lex(LexBound::parse(min)?, LexBound::parse(max)?),
        };
        Ok(Query {
            range,
            rev,
            offset,
            limit,
            with_scores,
        })
    }

    /// The members asked for, in reply order.
    fn select<'z>(&'z self, zset: &'z ZSet) -> Vec<(Score, &'z [u8])> {
        let picked: Box<dyn Iterator<Item = (Score, &'z [u8])> + 'z> = match &self.range {
            Range::Rank(start, stop) => {
                let Some((start, end)) = rank_range(*start, *stop, zset.len()) else {
                    return Vec::new();
                };
                // Ranks count from the top with REV; no LIMIT is allowed here.
                let ordered: Box<dyn Iterator<Item = _>> = if self.rev {
                    Box::new(zset.iter().rev())
                } else {
                    Box::new(zset.iter())
                };
                return ordered.skip(start).take(end - start).collect();
            }
            Range::Score(min, max) => {
                let range = zset.range_by_score(*min, *max);
                if self.rev {
                    Box::new(range.rev())
                } else {
                    Box::new(range)
                }
            }
            Range::Lex(min, max) => {
                let ordered: Box<dyn Iterator<Item = _>> = if self.rev {
                    Box::new(zset.iter().rev())
                } else {
                    Box::new(zset.iter())
                };
                Box::new(ordered.filter(move |(_, m)| min.above_min(m) && max.below_max(m)))
            }
        };
        let Ok(offset) = usize::try_from(self.offset) else {
            return Vec::new();
        };
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        picked.skip(offset).take(limit).collect()
    }
}

/// One end of a score range: `5`, `(5` (excluded), `-inf`, `+inf`.
fn score_bound(arg: &[u8]) -> Result<ScoreBound, &'static str> {
    let (exclusive, number) = match arg.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, arg),
    };
    // Redis reads range ends with plain strtod: out-of-range values saturate to ±inf.
    let value = std::str::from_utf8(number)
        .ok()
        .and_then(|text| text.parse::<f64>().ok());
    let score = value.and_then(Score::new).ok_or(BAD_SCORE_RANGE)?;
    Ok(ScoreBound { score, exclusive })
}

/// Looks the key up and replies with the query's members (and scores).
fn run(ctx: &mut Ctx<'_>, key: &[u8], query: &Query) -> Reply {
    ctx.read(key, EMPTY_ARRAY, |entry, out| {
        let Value::ZSet(zset) = &entry.value else {
            return Err(WRONGTYPE);
        };
        let members = query.select(zset);
        let per_member = if query.with_scores { 2 } else { 1 };
        encode_array_header(out, members.len() * per_member);
        for (score, member) in members {
            encode_bulk(out, member);
            if query.with_scores {
                encode_float(out, score.get());
            }
        }
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

    fn int(n: i64) -> Frame {
        Frame::Integer(n)
    }

    fn seeded() -> Harness {
        let mut h = Harness::new();
        h.run(&[
            "ZADD", "z", "1", "a", "2", "b", "2", "c", "3", "d", "4.5", "e",
        ]);
        h
    }

    #[test]
    fn zadd_counts_added_and_with_ch_changed() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["ZADD", "z", "1", "a", "2", "b"]), int(2));
        assert_eq!(h.run(&["ZADD", "z", "1", "a", "5", "b", "3", "c"]), int(1));
        assert_eq!(
            h.run(&["ZADD", "z", "CH", "1", "a", "6", "b", "4", "d"]),
            int(2)
        );
        assert_eq!(h.run(&["ZCARD", "z"]), int(4));
        assert_eq!(h.run(&["ZSCORE", "z", "b"]), bulk("6"));
        assert_eq!(h.run(&["ZSCORE", "z", "nope"]), Frame::NullBulk);
        assert_eq!(h.run(&["ZSCORE", "nope", "a"]), Frame::NullBulk);
        assert_eq!(h.run(&["ZCARD", "nope"]), int(0));
    }

    #[test]
    fn zadd_conditions_nx_xx_gt_lt_and_incr() {
        let mut h = Harness::new();
        h.run(&["ZADD", "z", "5", "m"]);
        assert_eq!(h.run(&["ZADD", "z", "NX", "1", "m", "1", "n"]), int(1));
        assert_eq!(
            h.run(&["ZSCORE", "z", "m"]),
            bulk("5"),
            "NX leaves existing members"
        );
        assert_eq!(
            h.run(&["ZADD", "z", "XX", "CH", "7", "m", "1", "o"]),
            int(1)
        );
        assert_eq!(
            h.run(&["ZSCORE", "z", "o"]),
            Frame::NullBulk,
            "XX adds nothing new"
        );
        assert_eq!(h.run(&["ZADD", "z", "GT", "CH", "6", "m"]), int(0));
        assert_eq!(
            h.run(&["ZADD", "z", "GT", "CH", "8", "m", "2", "p"]),
            int(2),
            "GT still adds"
        );
        assert_eq!(h.run(&["ZADD", "z", "LT", "CH", "9", "m"]), int(0));
        assert_eq!(h.run(&["ZADD", "z", "lt", "ch", "3", "m"]), int(1));
        assert_eq!(h.run(&["ZADD", "z", "INCR", "2.5", "m"]), bulk("5.5"));
        assert_eq!(h.run(&["ZADD", "z", "INCR", "1", "fresh"]), bulk("1"));
        assert_eq!(
            h.run(&["ZADD", "z", "INCR", "NX", "1", "m"]),
            Frame::NullBulk
        );
        assert_eq!(
            h.run(&["ZADD", "z", "INCR", "GT", "-1", "m"]),
            Frame::NullBulk
        );
        assert_eq!(h.run(&["ZADD", "missing", "XX", "1", "m"]), int(0));
        assert_eq!(
            h.run(&["EXISTS", "missing"]),
            int(0),
            "XX on a new key creates nothing"
        );
        h.run(&["ZADD", "inf", "+inf", "m"]);
        assert_eq!(h.run(&["ZADD", "inf", "INCR", "-inf", "m"]), err(NAN_SCORE));
        assert_eq!(h.run(&["ZSCORE", "inf", "m"]), bulk("inf"));
    }

    #[test]
    fn zadd_errors_like_redis() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["ZADD", "z", "x", "m"]), err(NOT_A_FLOAT));
        assert_eq!(h.run(&["ZADD", "z", "nan", "m"]), err(NOT_A_FLOAT));
        assert_eq!(h.run(&["ZADD", "z", "1", "m", "2"]), err(SYNTAX_ERROR));
        assert_eq!(
            h.run(&["ZADD", "z", "NX", "XX", "1", "m"]),
            err("ERR XX and NX options at the same time are not compatible")
        );
        assert_eq!(
            h.run(&["ZADD", "z", "GT", "LT", "1", "m"]),
            err("ERR GT, LT, and/or NX options at the same time are not compatible")
        );
        assert_eq!(
            h.run(&["ZADD", "z", "NX", "GT", "1", "m"]),
            err("ERR GT, LT, and/or NX options at the same time are not compatible")
        );
        assert_eq!(
            h.run(&["ZADD", "z", "INCR", "1", "m", "2", "n"]),
            err("ERR INCR option supports a single increment-element pair")
        );
        assert_eq!(
            h.run(&["ZADD", "z", "1", "ok", "bad", "m"]),
            err(NOT_A_FLOAT),
            "every score is checked before any is added"
        );
        assert_eq!(h.run(&["EXISTS", "z"]), int(0));
        h.run(&["SET", "s", "v"]);
        assert_eq!(h.run(&["ZADD", "s", "1", "m"]), err(WRONGTYPE));
    }

    #[test]
    fn zrange_by_rank_rev_and_withscores() {
        let mut h = seeded();
        assert_eq!(
            h.run(&["ZRANGE", "z", "0", "-1"]),
            bulks(&["a", "b", "c", "d", "e"])
        );
        assert_eq!(h.run(&["ZRANGE", "z", "1", "2"]), bulks(&["b", "c"]));
        assert_eq!(h.run(&["ZRANGE", "z", "0", "1", "REV"]), bulks(&["e", "d"]));
        assert_eq!(
            h.run(&["ZRANGE", "z", "-2", "-1", "WITHSCORES"]),
            bulks(&["d", "3", "e", "4.5"])
        );
        assert_eq!(h.run(&["ZRANGE", "z", "5", "10"]), bulks(&[]));
        assert_eq!(h.run(&["ZRANGE", "nope", "0", "-1"]), bulks(&[]));
        assert_eq!(
            h.run(&["ZRANGE", "z", "0", "-1", "LIMIT", "0", "1"]),
            err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
            )
        );
        assert_eq!(
            h.run(&["ZRANGE", "z", "a", "1"]),
            err(super::super::reply::NOT_AN_INTEGER)
        );
        assert_eq!(
            h.run(&["ZRANGE", "z", "0", "1", "SIDEWAYS"]),
            err(SYNTAX_ERROR)
        );
    }

    #[test]
    fn zrangebyscore_bounds_limit_and_withscores() {
        let mut h = seeded();
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf"]),
            bulks(&["a", "b", "c", "d", "e"])
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "2", "3"]),
            bulks(&["b", "c", "d"])
        );
        assert_eq!(h.run(&["ZRANGEBYSCORE", "z", "(2", "3"]), bulks(&["d"]));
        assert_eq!(h.run(&["ZRANGEBYSCORE", "z", "1", "(2"]), bulks(&["a"]));
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "(1", "(4.5"]),
            bulks(&["b", "c", "d"])
        );
        assert_eq!(h.run(&["ZRANGEBYSCORE", "z", "(2", "(2"]), bulks(&[]));
        assert_eq!(h.run(&["ZRANGEBYSCORE", "z", "3", "1"]), bulks(&[]));
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "2"]),
            bulks(&["b", "c"])
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "3", "-1"]),
            bulks(&["d", "e"])
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "-1", "2"]),
            bulks(&[]),
            "a negative offset gives nothing, as in Redis"
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "4", "+inf", "WITHSCORES"]),
            bulks(&["e", "4.5"])
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "x", "1"]),
            err(BAD_SCORE_RANGE)
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "(nan", "1"]),
            err(BAD_SCORE_RANGE)
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "0", "1", "REV"]),
            err(SYNTAX_ERROR)
        );
        assert_eq!(
            h.run(&["ZRANGEBYSCORE", "z", "0", "1", "LIMIT", "1"]),
            err(SYNTAX_ERROR)
        );
    }

    #[test]
    fn zrange_byscore_rev_and_bylex() {
        let mut h = seeded();
        assert_eq!(
            h.run(&[
                "ZRANGE", "z", "(4.5", "2", "BYSCORE", "REV", "LIMIT", "0", "2"
            ]),
            bulks(&["d", "c"])
        );
        assert_eq!(
            h.run(&["ZRANGE", "z", "2", "3", "BYSCORE", "WITHSCORES"]),
            bulks(&["b", "2", "c", "2", "d", "3"])
        );
        h.run(&["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d"]);
        assert_eq!(
            h.run(&["ZRANGE", "lex", "[b", "(d", "BYLEX"]),
            bulks(&["b", "c"])
        );
        assert_eq!(
            h.run(&["ZRANGE", "lex", "-", "+", "BYLEX", "LIMIT", "1", "2"]),
            bulks(&["b", "c"])
        );
        assert_eq!(
            h.run(&["ZRANGE", "lex", "+", "(b", "BYLEX", "REV"]),
            bulks(&["d", "c"])
        );
        assert_eq!(
            h.run(&["ZRANGE", "lex", "b", "c", "BYLEX"]),
            err(BAD_LEX_RANGE)
        );
        assert_eq!(
            h.run(&["ZRANGE", "lex", "-", "+", "BYLEX", "WITHSCORES"]),
            err("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
        );
    }

    #[test]
    fn zrem_removes_and_the_key_goes_with_the_last_member() {
        let mut h = seeded();
        assert_eq!(h.run(&["ZREM", "z", "a", "nope", "a"]), int(1));
        assert_eq!(h.run(&["ZREM", "z", "b", "c", "d", "e"]), int(4));
        assert_eq!(h.run(&["EXISTS", "z"]), int(0));
        assert_eq!(h.run(&["ZREM", "z", "a"]), int(0));
    }

    #[test]
    fn zset_commands_check_types() {
        let mut h = Harness::new();
        h.run(&["SADD", "s", "m"]);
        for args in [
            &["ZADD", "s", "1", "m"][..],
            &["ZREM", "s", "m"],
            &["ZRANGE", "s", "0", "-1"],
            &["ZRANGEBYSCORE", "s", "-inf", "+inf"],
            &["ZCARD", "s"],
            &["ZSCORE", "s", "m"],
        ] {
            assert_eq!(h.run(args), err(WRONGTYPE), "{args:?}");
        }
    }

    proptest! {
        /// Whatever is added, ZRANGE 0 -1 lists each member once, ordered by (score, member),
        /// with the last score given to it; ZRANGEBYSCORE agrees with filtering that list.
        #[test]
        fn zrange_is_sorted_by_score_then_member(
            adds in prop::collection::vec((-50i32..50, 0u8..30), 1..80),
            lo in -60i32..60,
            span in 0i32..60,
            lo_open: bool,
            hi_open: bool,
        ) {
            let mut h = Harness::new();
            let mut model = std::collections::HashMap::new();
            for (score, member) in &adds {
                let (score, member) = (f64::from(*score) / 4.0, format!("m{member}"));
                h.run(&["ZADD", "z", &score.to_string(), &member]);
                model.insert(member, score);
            }
            let mut want: Vec<(f64, String)> = model.into_iter().map(|(m, s)| (s, m)).collect();
            want.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            let members: Vec<&str> = want.iter().map(|(_, m)| m.as_str()).collect();
            prop_assert_eq!(h.run(&["ZRANGE", "z", "0", "-1"]), bulks(&members));
            prop_assert_eq!(h.run(&["ZCARD", "z"]), int(members.len() as i64));

            let (lo, hi) = (f64::from(lo) / 4.0, f64::from(lo + span) / 4.0);
            let inside: Vec<&str> = want
                .iter()
                .filter(|(s, _)| if lo_open { *s > lo } else { *s >= lo })
                .filter(|(s, _)| if hi_open { *s < hi } else { *s <= hi })
                .map(|(_, m)| m.as_str())
                .collect();
            let bound = |open: bool, x: f64| if open { format!("({x}") } else { x.to_string() };
            prop_assert_eq!(
                h.run(&["ZRANGEBYSCORE", "z", &bound(lo_open, lo), &bound(hi_open, hi)]),
                bulks(&inside)
            );
        }
    }
}

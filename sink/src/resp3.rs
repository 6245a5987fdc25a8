//! RESP3 answers for connections that said `HELLO 3`: the commands answer in RESP2 as
//! always, and [`to_resp3`] rewrites the one reply just written into what Redis 7 sends in
//! RESP3 (checked byte for byte against redis-server 7.0.15):
//! - a nil (`$-1`, `*-1`) is `_`; so are `MGET`'s missing keys;
//! - `HELLO` and `HGETALL` are maps (`%`); `SMEMBERS` is a set (`~`);
//! - `ZSCORE` and `ZADD ... INCR` are doubles (`,1.5`), and `ZRANGE`/`ZRANGEBYSCORE ...
//!   WITHSCORES` are arrays of `[member, double]` pairs;
//! - `INFO` is a verbatim string (`=`, format `txt`).
//!
//! Everything else (integers, `+OK`, bulk strings, plain arrays, errors) is the same
//! bytes in both protocols. The rewrite costs nothing on a RESP2 connection and, on a
//! RESP3 one, a byte comparison for all but the few commands listed.

use crest_resp::Frame;

/// What a command's RESP3 reply needs beyond its RESP2 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The same bytes, but a nil is `_`.
    Plain,
    /// An array of key, value, key, value: a map.
    Map,
    /// An array of members: a set.
    Set,
    /// A bulk string holding a score: a double.
    Double,
    /// An array of member, score, member, score: `[member, double]` pairs.
    ScoredPairs,
    /// An array whose nil elements are `_`.
    NilElements,
    /// A bulk string of text: a verbatim string.
    Verbatim,
}

impl Shape {
    /// The shape of `name`'s reply given its arguments (`name` lowercase, as in the table).
    pub(crate) fn of(name: &str, args: &[Vec<u8>]) -> Self {
        let has = |word: &str| {
            args.iter()
                .skip(2)
                .any(|a| a.eq_ignore_ascii_case(word.as_bytes()))
        };
        match name {
            "hello" | "hgetall" => Shape::Map,
            "smembers" => Shape::Set,
            "zscore" => Shape::Double,
            "zadd" if has("INCR") => Shape::Double,
            "zrange" | "zrangebyscore" if has("WITHSCORES") => Shape::ScoredPairs,
            "mget" => Shape::NilElements,
            "info" => Shape::Verbatim,
            _ => Shape::Plain,
        }
    }
}

/// Rewrites the reply at `out[start..]` (one complete RESP2 reply) into its RESP3 form.
pub(crate) fn to_resp3(shape: Shape, out: &mut Vec<u8>, start: usize) {
    let reply = &out[start..];
    if reply == b"$-1\r\n" || reply == b"*-1\r\n" {
        out.truncate(start);
        out.extend_from_slice(b"_\r\n");
        return;
    }
    if shape == Shape::Plain || reply.first() == Some(&b'-') {
        return;
    }
    let Ok(Some((frame, _))) = Frame::parse(reply) else {
        return;
    };
    let converted = match (shape, frame) {
        (Shape::Map, Frame::Array(items)) => Frame::Map(pairs(items)),
        (Shape::Set, Frame::Array(items)) => Frame::Set(items),
        (Shape::Double, Frame::Bulk(score)) => Frame::Double(score),
        (Shape::ScoredPairs, Frame::Array(items)) => Frame::Array(
            pairs(items)
                .into_iter()
                .map(|(member, score)| Frame::Array(vec![member, double(score)]))
                .collect(),
        ),
        (Shape::NilElements, Frame::Array(items)) => Frame::Array(
            items
                .into_iter()
                .map(|f| match f {
                    Frame::NullBulk | Frame::NullArray => Frame::Null,
                    f => f,
                })
                .collect(),
        ),
        (Shape::Verbatim, Frame::Bulk(text)) => Frame::Verbatim {
            format: *b"txt",
            data: text,
        },
        _ => return,
    };
    out.truncate(start);
    converted.encode(out);
}

fn double(score: Frame) -> Frame {
    match score {
        Frame::Bulk(text) => Frame::Double(text),
        other => other,
    }
}

fn pairs(items: Vec<Frame>) -> Vec<(Frame, Frame)> {
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use crate::test_support::Harness;

    /// The bytes redis-server 7.0.15 sends a RESP3 client for the same commands (captured
    /// over a raw socket after `HELLO 3`), except where the sink's own state differs (its
    /// version, the connection id, the order of a hash's fields and a set's members).
    #[test]
    fn a_resp3_client_gets_redis_7s_resp3_bytes() {
        let mut h = Harness::new();
        let hello = h.raw(&["HELLO", "3"]);
        assert_eq!(
            String::from_utf8(hello).unwrap(),
            format!(
                "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n${}\r\n{}\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
                crate::info::REDIS_VERSION.len(),
                crate::info::REDIS_VERSION
            )
        );
        let cases: &[(&[&str], &[u8])] = &[
            (&["SET", "k", "v"], b"+OK\r\n"),
            (&["GET", "nokey"], b"_\r\n"),
            (&["GET", "k"], b"$1\r\nv\r\n"),
            (&["MGET", "k", "nokey"], b"*2\r\n$1\r\nv\r\n_\r\n"),
            // One field: the sink's field order is its hash map's, as Redis's is its own.
            (&["HSET", "h", "f", "v"], b":1\r\n"),
            (&["HGETALL", "h"], b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"),
            (&["HGETALL", "nohash"], b"%0\r\n"),
            (&["HGET", "h", "zz"], b"_\r\n"),
            (&["SADD", "s", "a"], b":1\r\n"),
            (&["SMEMBERS", "s"], b"~1\r\n$1\r\na\r\n"),
            (&["SMEMBERS", "noset"], b"~0\r\n"),
            (&["ZADD", "z", "1.5", "m", "2", "n"], b":2\r\n"),
            (&["ZSCORE", "z", "m"], b",1.5\r\n"),
            (&["ZSCORE", "z", "n"], b",2\r\n"),
            (&["ZSCORE", "z", "q"], b"_\r\n"),
            (&["ZADD", "z", "INCR", "1", "m"], b",2.5\r\n"),
            (
                &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
                b"*2\r\n*2\r\n$1\r\nn\r\n,2\r\n*2\r\n$1\r\nm\r\n,2.5\r\n",
            ),
            (
                &["ZRANGEBYSCORE", "z", "-inf", "+inf", "withscores"],
                b"*2\r\n*2\r\n$1\r\nn\r\n,2\r\n*2\r\n$1\r\nm\r\n,2.5\r\n",
            ),
            (&["ZRANGE", "z", "0", "-1"], b"*2\r\n$1\r\nn\r\n$1\r\nm\r\n"),
            (&["LPOP", "nolist"], b"_\r\n"),
            (&["LPOP", "nolist", "2"], b"_\r\n"),
            (&["RPOP", "nolist"], b"_\r\n"),
            (&["LRANGE", "nolist", "0", "1"], b"*0\r\n"),
            (&["SISMEMBER", "s", "a"], b":1\r\n"),
            (&["EXISTS", "k"], b":1\r\n"),
            (
                &["GET", "h"],
                b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            ),
        ];
        for (args, want) in cases {
            let got = h.raw(args);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(want),
                "{args:?}"
            );
        }
        let info = h.raw(&["INFO", "server"]);
        assert!(info.starts_with(b"="), "{}", String::from_utf8_lossy(&info));
        assert!(
            matches!(
                crest_resp::Frame::parse(&info),
                Ok(Some((
                    crest_resp::Frame::Verbatim {
                        format: [b't', b'x', b't'],
                        ..
                    },
                    _
                )))
            ),
            "INFO is verbatim text"
        );
        // HELLO 2 switches back: RESP2 bytes again.
        assert!(h.raw(&["HELLO", "2"]).starts_with(b"*14\r\n"));
        assert_eq!(h.raw(&["GET", "nokey"]), b"$-1\r\n");
        assert_eq!(h.raw(&["ZSCORE", "z", "m"]), b"$3\r\n2.5\r\n");
    }
}

//! A replayed trace's chunk ↔ `pb::TraceChunk` (issue #27). On arrival every array must
//! be as long as `at_ns`, the key and verbatim lengths must add up to their blobs, times
//! must not go backwards, ops must index the class's op table (from the plan), a verbatim
//! op must carry bytes and no other may; values, TTLs and counts are capped.

use super::check::{WireError, check_len, limits};
use crate::trace::{Batch, MAX_BATCH, TraceOp};
use crest_proto::pb;
use crest_trace::{MAX_VALUE, Verb};

/// The wire form of `b` for `shard` of class `class`.
pub fn batch_to_wire(run_id: &str, class: u32, shard: u32, b: Batch) -> pb::TraceChunk {
    let lens = |ends: &[u32]| {
        let mut prev = 0;
        ends.iter()
            .map(|&e| {
                let n = e - prev;
                prev = e;
                n
            })
            .collect::<Vec<u32>>()
    };
    pb::TraceChunk {
        run_id: run_id.to_string(),
        class_index: class,
        shard,
        seq: b.seq,
        last: b.last,
        key_len: lens(&b.key_end),
        resp_len: lens(&b.resp_end),
        at_ns: b.at_ns,
        op: b.op,
        keys: b.keys,
        value_size: b.value_size,
        ttl_s: b.ttl_s,
        resp: b.resp,
    }
}

/// Offsets of the ends of `lens`' spans, which must cover `blob` exactly.
fn ends(field: &str, lens: &[u32], blob: usize) -> Result<Vec<u32>, WireError> {
    let mut at: u64 = 0;
    let mut out = Vec::with_capacity(lens.len());
    for &n in lens {
        at += u64::from(n);
        if at > blob as u64 {
            break;
        }
        out.push(at as u32);
    }
    if at != blob as u64 || out.len() != lens.len() {
        return Err(WireError::new(
            field,
            format!("lengths adding to {at}"),
            format!("must add up to the blob's {blob} bytes"),
        ));
    }
    Ok(out)
}

/// The checked chunk of a class whose op table is `ops`.
///
/// # Errors
/// The first field out of shape, named.
pub fn batch_from_wire(c: pb::TraceChunk, ops: &[TraceOp]) -> Result<Batch, WireError> {
    let n = c.at_ns.len();
    check_len("at_ns", n, MAX_BATCH)?;
    for (field, len) in [
        ("op", c.op.len()),
        ("key_len", c.key_len.len()),
        ("value_size", c.value_size.len()),
        ("ttl_s", c.ttl_s.len()),
        ("resp_len", c.resp_len.len()),
    ] {
        if len != n {
            return Err(WireError::new(
                field,
                format!("{len} entries"),
                format!("must have one per request ({n})"),
            ));
        }
    }
    let key_end = ends("key_len", &c.key_len, c.keys.len())?;
    let resp_end = ends("resp_len", &c.resp_len, c.resp.len())?;
    let max_run = limits::MAX_RUN.as_nanos() as u64;
    let mut prev = 0;
    for (i, &t) in c.at_ns.iter().enumerate() {
        if t < prev || t > max_run {
            return Err(WireError::new(
                format!("at_ns[{i}]"),
                t,
                format!(
                    "must not be before the request before it ({prev}) nor past the longest run"
                ),
            ));
        }
        prev = t;
    }
    for i in 0..n {
        let Some(op) = ops.get(c.op[i] as usize) else {
            return Err(WireError::new(
                format!("op[{i}]"),
                c.op[i],
                format!("must index the op table ({} entries)", ops.len()),
            ));
        };
        let verbatim = op.verb() == Verb::Verbatim;
        if verbatim != (c.resp_len[i] > 0) {
            return Err(WireError::new(
                format!("resp_len[{i}]"),
                c.resp_len[i],
                "a command's bytes go with it, and no other request carries any",
            ));
        }
        if c.value_size[i] > MAX_VALUE {
            return Err(WireError::new(
                format!("value_size[{i}]"),
                c.value_size[i],
                format!("must be at most {MAX_VALUE}"),
            ));
        }
        if u64::from(c.ttl_s[i]) > limits::MAX_TTL_S {
            return Err(WireError::new(
                format!("ttl_s[{i}]"),
                c.ttl_s[i],
                format!("must be at most {}", limits::MAX_TTL_S),
            ));
        }
    }
    Ok(Batch {
        seq: c.seq,
        last: c.last,
        at_ns: c.at_ns,
        op: c.op,
        key_end,
        keys: c.keys,
        value_size: c.value_size,
        ttl_s: c.ttl_s,
        resp_end,
        resp: c.resp,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crest_trace::Op;

    fn sample() -> (Batch, Vec<TraceOp>) {
        let ops = vec![
            TraceOp::Op(Op::Get),
            TraceOp::Op(Op::Set),
            TraceOp::Command("PING".into()),
        ];
        let mut b = Batch {
            seq: 3,
            last: true,
            ..Batch::default()
        };
        b.push(10, 0, b"a", 0, 0, b"");
        b.push(10, 1, b"bb", 100, 30, b"");
        b.push(20, 2, b"", 0, 0, b"*1\r\n$4\r\nPING\r\n");
        (b, ops)
    }

    #[test]
    fn a_chunk_reads_back_as_sent() {
        let (b, ops) = sample();
        let wire = batch_to_wire("r", 0, 1, b.clone());
        assert_eq!((wire.class_index, wire.shard, wire.seq), (0, 1, 3));
        assert_eq!(batch_from_wire(wire, &ops).unwrap(), b);
    }

    #[test]
    fn a_chunk_out_of_shape_is_refused_naming_the_field() {
        let (b, ops) = sample();
        let good = batch_to_wire("r", 0, 1, b);
        type Spoil = Box<dyn Fn(&mut pb::TraceChunk)>;
        let cases: Vec<(&str, Spoil)> = vec![
            (
                "op",
                Box::new(|c| {
                    c.op.pop();
                }),
            ),
            ("key_len", Box::new(|c| c.key_len[0] = 9)),
            ("resp_len", Box::new(|c| c.resp.push(b'x'))),
            ("at_ns[2]", Box::new(|c| c.at_ns[2] = 5)),
            ("op[0]", Box::new(|c| c.op[0] = 7)),
            (
                "resp_len[1]",
                Box::new(|c| {
                    c.resp_len[1] = 1;
                    c.resp_len[2] -= 1;
                }),
            ),
            (
                "value_size[1]",
                Box::new(|c| c.value_size[1] = MAX_VALUE + 1),
            ),
        ];
        for (field, spoil) in cases {
            let mut c = good.clone();
            spoil(&mut c);
            let e = batch_from_wire(c, &ops).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
        // A table without the PING its third request names.
        let e = batch_from_wire(good, &ops[..2]).unwrap_err();
        assert_eq!(e.field, "op[2]");
    }
}

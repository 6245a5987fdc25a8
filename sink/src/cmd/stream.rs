//! Streams: XADD XLEN (what valkey-benchmark's XADD test and Crest's XADD send).

use std::mem::take;
use std::time::{SystemTime, UNIX_EPOCH};

use crest_resp::{encode_bulk, encode_integer};

use super::args::is;
use super::ctx::Ctx;
use super::reply::{NIL, Reply, WRONGTYPE, ZERO, count};
use crate::store::{Stream, Value};

const BAD_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const SMALL_ID: &str =
    "ERR The ID specified in XADD is equal or smaller than the target stream top item";

/// `ms-seq`, `ms` (sequence 0), or `*`/`ms-*` (None for the part to generate).
fn parse_id(s: &[u8]) -> Result<(Option<u64>, Option<u64>), &'static str> {
    if s == b"*" {
        return Ok((None, None));
    }
    let text = std::str::from_utf8(s).map_err(|_| BAD_ID)?;
    let (ms, seq) = text.split_once('-').unwrap_or((text, "0"));
    let ms = ms.parse().map_err(|_| BAD_ID)?;
    if seq == "*" {
        return Ok((Some(ms), None));
    }
    Ok((Some(ms), Some(seq.parse().map_err(|_| BAD_ID)?)))
}

/// `XADD key [NOMKSTREAM] <* | id> field value [field value ...]`: the new entry's ID.
/// Trimming (`MAXLEN`, `MINID`) is refused: nothing Crest sends uses it.
pub(super) fn xadd(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    let mut at = 2;
    let mut nomkstream = false;
    if is(&args[at], "NOMKSTREAM") {
        nomkstream = true;
        at += 1;
    }
    if is(&args[at], "MAXLEN") || is(&args[at], "MINID") {
        return Err("ERR the built-in target's XADD does not trim (MAXLEN, MINID)".into());
    }
    let fields = args.len().saturating_sub(at + 1);
    if fields == 0 || !fields.is_multiple_of(2) {
        return Err("ERR wrong number of arguments for 'xadd' command".into());
    }
    let (ms, seq) = parse_id(&args[at])?;
    let key = take(&mut args[1]);
    let values: Vec<Vec<u8>> = args[at + 1..].iter_mut().map(take).collect();
    let mut shard = ctx.shard(&key);
    let exists = shard.read(&key, &mut ctx.now, |_| ()).is_some();
    if nomkstream && !exists {
        drop(shard);
        ctx.out.extend_from_slice(NIL);
        return Ok(());
    }
    let id = shard.upsert(
        key,
        &mut ctx.now,
        || Value::Stream(Stream::default()),
        |entry| {
            let Value::Stream(stream) = &mut entry.value else {
                return Err(WRONGTYPE);
            };
            let last = stream.last_id();
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let id = match (ms, seq) {
                (None, _) if now > last.0 => (now, 0),
                (None, _) => (last.0, last.1.checked_add(1).ok_or(SMALL_ID)?),
                (Some(ms), None) if ms > last.0 => (ms, 0),
                (Some(ms), None) if ms == last.0 => (ms, last.1.checked_add(1).ok_or(SMALL_ID)?),
                (Some(_), None) => return Err(SMALL_ID),
                (Some(ms), Some(seq)) => {
                    if (ms, seq) == (0, 0) {
                        return Err("ERR The ID specified in XADD must be greater than 0-0");
                    }
                    if (ms, seq) <= last {
                        return Err(SMALL_ID);
                    }
                    (ms, seq)
                }
            };
            stream.push(id, values);
            Ok(id)
        },
    )?;
    drop(shard);
    encode_bulk(ctx.out, format!("{}-{}", id.0, id.1).as_bytes());
    Ok(())
}

/// `XLEN key`: entries (0 when missing).
pub(super) fn xlen(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    ctx.read(&args[1], ZERO, |entry, out| {
        let Value::Stream(stream) = &entry.value else {
            return Err(WRONGTYPE);
        };
        encode_integer(out, count(stream.len()));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use crate::test_support::Harness;
    use crest_resp::Frame;

    #[test]
    fn xadd_appends_with_rising_ids_and_xlen_counts() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["XADD", "s", "5-1", "f", "v"]),
            Frame::Bulk(b"5-1".to_vec())
        );
        assert_eq!(
            h.run(&["XADD", "s", "5-*", "f", "v"]),
            Frame::Bulk(b"5-2".to_vec())
        );
        let Frame::Error(e) = h.run(&["XADD", "s", "5-1", "f", "v"]) else {
            panic!("a smaller ID is refused");
        };
        assert!(String::from_utf8_lossy(&e).contains("equal or smaller"));
        let Frame::Bulk(id) = h.run(&["XADD", "s", "*", "f", "v", "g", "w"]) else {
            panic!("* makes an ID");
        };
        assert!(String::from_utf8_lossy(&id).ends_with("-0"));
        assert_eq!(h.run(&["XLEN", "s"]), Frame::Integer(3));
        assert_eq!(
            h.run(&["XADD", "n", "NOMKSTREAM", "*", "f", "v"]),
            Frame::NullBulk
        );
        assert_eq!(h.run(&["XLEN", "n"]), Frame::Integer(0));
        assert!(matches!(h.run(&["XADD", "s", "*", "f"]), Frame::Error(_)));
        assert!(matches!(
            h.run(&["XADD", "s", "MAXLEN", "5", "*", "f", "v"]),
            Frame::Error(_)
        ));
        h.run(&["SET", "k", "v"]);
        assert!(matches!(
            h.run(&["XADD", "k", "*", "f", "v"]),
            Frame::Error(_)
        ));
        assert_eq!(h.run(&["TYPE", "s"]), Frame::Simple(b"stream".to_vec()));
    }

    #[test]
    fn spop_and_zpopmin_take_members_out() {
        let mut h = Harness::new();
        h.run(&["SADD", "s", "a"]);
        assert_eq!(h.run(&["SPOP", "s"]), Frame::Bulk(b"a".to_vec()));
        assert_eq!(h.run(&["SPOP", "s"]), Frame::NullBulk);
        assert_eq!(h.run(&["EXISTS", "s"]), Frame::Integer(0));
        h.run(&["ZADD", "z", "2", "b", "1", "a"]);
        assert_eq!(
            h.run(&["ZPOPMIN", "z"]),
            Frame::Array(vec![Frame::Bulk(b"a".to_vec()), Frame::Bulk(b"1".to_vec())])
        );
        assert_eq!(
            h.run(&["ZPOPMIN", "z", "5"]),
            Frame::Array(vec![Frame::Bulk(b"b".to_vec()), Frame::Bulk(b"2".to_vec())])
        );
        assert_eq!(h.run(&["ZPOPMIN", "z"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["ZCARD", "z"]), Frame::Integer(0));
    }
}

//! One line of each format into a [`Record`], or the reason it cannot be replayed.

use crate::record::{MAX_VALUE, Op, Record};

fn record(at_us: u64, op: Op, key: &[u8]) -> Record {
    Record {
        line: 0,
        at_us,
        op,
        key: key.to_vec(),
        value_size: 0,
        ttl_s: 0,
        repeat: 1,
        args: Vec::new(),
    }
}

fn uint(b: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn op_of(b: &[u8]) -> Option<Op> {
    Some(match b.to_ascii_lowercase().as_slice() {
        b"get" | b"get_lease" => Op::Get,
        b"gets" => Op::Gets,
        b"set" | b"set_lease" => Op::Set,
        b"add" => Op::Add,
        b"replace" => Op::Replace,
        b"cas" => Op::Cas,
        b"append" => Op::Append,
        b"prepend" => Op::Prepend,
        b"delete" => Op::Delete,
        b"incr" => Op::Incr,
        b"decr" => Op::Decr,
        _ => return None,
    })
}

/// Reads ops write a value; reads and deletes do not.
fn writes(op: Op) -> bool {
    matches!(
        op,
        Op::Set | Op::Add | Op::Replace | Op::Cas | Op::Append | Op::Prepend
    )
}

/// `timestamp,key,key_size,value_size,client_id,operation,ttl`. A key may hold commas
/// (Twitter's anonymised keys do not, but namespaces may): the last five columns are read
/// from the right.
pub fn twitter(line: &[u8]) -> Result<Record, &'static str> {
    let cols: Vec<&[u8]> = line.split(|&b| b == b',').collect();
    if cols.len() < 7 {
        return Err("too few columns");
    }
    let n = cols.len();
    let secs = uint(cols[0]).ok_or("bad timestamp")?;
    let key_end = line.len() - cols[n - 5..].iter().map(|c| c.len() + 1).sum::<usize>();
    let key = &line[cols[0].len() + 1..key_end];
    if key.is_empty() {
        return Err("empty key");
    }
    let value = uint(cols[n - 4]).ok_or("bad value size")?;
    let op = op_of(cols[n - 2]).ok_or("unknown op")?;
    let ttl = uint(cols[n - 1]).ok_or("bad ttl")?;
    if value > MAX_VALUE {
        return Err("value over 512 MiB");
    }
    let mut r = record(secs.saturating_mul(1_000_000), op, key);
    r.value_size = if writes(op) { value } else { 0 };
    r.ttl_s = ttl;
    Ok(r)
}

/// cachebench's columns, from its header.
#[derive(Debug, Clone)]
pub struct Columns {
    key: usize,
    op: usize,
    size: usize,
    time: Option<usize>,
    count: Option<usize>,
    ttl: Option<usize>,
    n: usize,
}

impl Columns {
    /// The header line.
    ///
    /// # Errors
    /// Which required column it does not name.
    pub fn of(header: &[u8]) -> Result<Self, String> {
        let names: Vec<String> = header
            .split(|&b| b == b',')
            .map(|c| String::from_utf8_lossy(c).trim().to_ascii_lowercase())
            .collect();
        let at = |n: &str| names.iter().position(|c| c == n);
        let need = |n: &str| at(n).ok_or_else(|| format!("the header names no {n} column"));
        Ok(Self {
            key: need("key")?,
            op: need("op")?,
            size: need("size")?,
            time: at("op_time"),
            count: at("op_count"),
            ttl: at("ttl"),
            n: names.len(),
        })
    }
}

/// A cachebench row under `c`.
pub fn cachebench(c: &Columns, line: &[u8]) -> Result<Record, &'static str> {
    let cols: Vec<&[u8]> = line.split(|&b| b == b',').collect();
    if cols.len() != c.n {
        return Err("wrong number of columns");
    }
    let key = cols[c.key];
    if key.is_empty() {
        return Err("empty key");
    }
    let op = op_of(cols[c.op]).ok_or("unknown op")?;
    if !matches!(op, Op::Get | Op::Set | Op::Delete) {
        return Err("unknown op");
    }
    let size = uint(cols[c.size]).ok_or("bad size")?;
    if size > MAX_VALUE {
        return Err("value over 512 MiB");
    }
    let secs = match c.time {
        Some(i) => uint(cols[i]).ok_or("bad op_time")?,
        None => 0,
    };
    let mut r = record(secs.saturating_mul(1_000_000), op, key);
    r.value_size = if op == Op::Set { size } else { 0 };
    if let Some(i) = c.count {
        let n = uint(cols[i]).ok_or("bad op_count")?;
        r.repeat = u32::try_from(n).map_err(|_| "bad op_count")?.max(1);
    }
    if let Some(i) = c.ttl {
        r.ttl_s = uint(cols[i]).ok_or("bad ttl")?;
    }
    Ok(r)
}

/// `1700000000.123456 [0 127.0.0.1:6379] "SET" "k" "v"`: seconds with six decimals, the
/// database and client in brackets, then each argument quoted with C-style escapes (`\"`,
/// `\\`, `\n`, `\r`, `\t`, `\a`, `\b`, `\xHH`), as `redis-cli` writes them.
pub fn monitor(line: &[u8]) -> Result<Record, &'static str> {
    let sp = line
        .iter()
        .position(|&b| b == b' ')
        .ok_or("not a MONITOR line")?;
    let at_us = micros(&line[..sp]).ok_or("not a MONITOR line")?;
    let rest = &line[sp + 1..];
    if rest.first() != Some(&b'[') {
        return Err("not a MONITOR line");
    }
    let close = rest
        .iter()
        .position(|&b| b == b']')
        .ok_or("not a MONITOR line")?;
    let args = quoted(&rest[close + 1..])?;
    if args.is_empty() {
        return Err("no command");
    }
    let mut r = record(
        at_us,
        Op::Command,
        args.get(1).map_or(&[][..], Vec::as_slice),
    );
    r.args = args;
    Ok(r)
}

/// `1700000000.123456` as µs.
fn micros(b: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?;
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs = uint(whole.as_bytes())?;
    if frac.len() > 6 || !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let frac_us: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(6 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000)?.checked_add(frac_us)
}

/// The quoted arguments after the brackets.
fn quoted(mut b: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    let mut out = Vec::new();
    loop {
        while let [b' ', rest @ ..] = b {
            b = rest;
        }
        match b {
            [] => return Ok(out),
            [b'"', rest @ ..] => b = rest,
            _ => return Err("bad quoting"),
        }
        let mut arg = Vec::new();
        loop {
            match b {
                [] => return Err("bad quoting"),
                [b'"', rest @ ..] => {
                    b = rest;
                    break;
                }
                [b'\\', b'x', h, l, rest @ ..]
                    if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() =>
                {
                    let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                    arg.push(hex(*h) << 4 | hex(*l));
                    b = rest;
                }
                [b'\\', c, rest @ ..] => {
                    arg.push(match c {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'a' => 7,
                        b'b' => 8,
                        other => *other,
                    });
                    b = rest;
                }
                [c, rest @ ..] => {
                    arg.push(*c);
                    b = rest;
                }
            }
        }
        out.push(arg);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_twitter_key_with_commas_is_read_from_both_ends() {
        let r = twitter(b"5,ns,a,b,6,10,1,set,0").unwrap();
        assert_eq!(r.key, b"ns,a,b");
        assert_eq!((r.value_size, r.at_us), (10, 5_000_000));
        assert_eq!(twitter(b"5,,6,10,1,set,0"), Err("empty key"));
        assert_eq!(twitter(b"-5,k,6,10,1,set,0"), Err("bad timestamp"));
        assert_eq!(
            twitter(b"5,k,6,999999999999,1,set,0"),
            Err("value over 512 MiB")
        );
        // A read's value size is what came back, not what it sends.
        assert_eq!(twitter(b"5,k,1,10,1,get,0").unwrap().value_size, 0);
    }

    #[test]
    fn monitor_timestamps_are_exact_microseconds() {
        assert_eq!(micros(b"1.5"), Some(1_500_000));
        assert_eq!(micros(b"1700000000.000001"), Some(1_700_000_000_000_001));
        assert_eq!(micros(b"1.1234567"), None);
        assert_eq!(micros(b"x.1"), None);
    }

    proptest! {
        /// Whatever bytes an argument holds, written as redis-cli quotes them, it reads
        /// back the same.
        #[test]
        fn any_argument_quoted_as_redis_cli_does_reads_back(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..5)) {
            let mut line = b"1.000001 [0 127.0.0.1:1]".to_vec();
            for a in &args {
                line.extend_from_slice(b" \"");
                for &c in a {
                    match c {
                        b'\\' => line.extend_from_slice(b"\\\\"),
                        b'"' => line.extend_from_slice(b"\\\""),
                        b'\n' => line.extend_from_slice(b"\\n"),
                        b'\r' => line.extend_from_slice(b"\\r"),
                        b'\t' => line.extend_from_slice(b"\\t"),
                        7 => line.extend_from_slice(b"\\a"),
                        8 => line.extend_from_slice(b"\\b"),
                        c if c.is_ascii_graphic() || c == b' ' => line.push(c),
                        c => line.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
                    }
                }
                line.push(b'"');
            }
            let r = monitor(&line).unwrap();
            prop_assert_eq!(r.args, args);
        }
    }
}

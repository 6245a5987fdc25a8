//! The reply scanner: one reply at the front of a read buffer, as the request that asked
//! for it expects it ([`Expect`]), in RESP's terms ([`Scan`], [`ReplyKind`]).
//!
//! | reply | kind |
//! |---|---|
//! | `VALUE …` blocks then `END` | a value; the keys asked and not answered are its nils (a one-key `get` of a missing key: a nil) |
//! | `STORED`, `DELETED`, `TOUCHED`, `OK`, a number (`incr`/`decr`) | a value |
//! | `NOT_FOUND`, `NOT_STORED`, `EXISTS` | a nil: the command ran and found nothing to do (what Redis answers `SET NX` of a key that exists with) |
//! | meta `VA`, `HD`, `MN` | a value |
//! | meta `EN`, `NF`, `NS`, `EX` | a nil |
//! | `ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …` | an error counted by that word |

use crest_resp::{ReplyKind, Scan};
use thiserror::Error;

/// Longest reply line accepted, CRLF excluded. memcached's lines are short (a key is at
/// most 250 bytes; a `VALUE` header or a meta header with every flag a few hundred); 8 KiB
/// keeps any real one legal and stops a peer that never sends CRLF.
pub const MAX_LINE_LEN: usize = 8 * 1024;

/// Largest value accepted: 1 GiB, the most memcached's item size limit (`-I`) may be.
pub const MAX_VALUE_LEN: u64 = 1 << 30;

/// What a request's reply looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `get`/`gets`/`gat`/`gats` of this many keys: a `VALUE` block per key found (in the
    /// order asked, a missing key skipped), then `END`.
    Values {
        /// Keys asked for.
        keys: u32,
    },
    /// One status line: a storage command, `delete`, `touch`, `incr`/`decr`.
    Line,
    /// A meta command's reply: a header line, and the value after a `VA` header.
    Meta,
    /// `keys` quiet `mg`s then `mn`: a meta reply for each key that has something to say
    /// (a hit, an error; a quiet miss says nothing), then `MN`. The meta protocol's
    /// multi-get.
    MetaQuiet {
        /// Keys asked for.
        keys: u32,
    },
}

/// Bytes that can never become the reply the request expects.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum McError {
    /// A line longer than [`MAX_LINE_LEN`] without its CRLF.
    #[error("a reply line longer than {MAX_LINE_LEN} bytes without CRLF")]
    LineTooLong,
    /// A value announced larger than [`MAX_VALUE_LEN`].
    #[error("a value of {0} bytes announced; at most {MAX_VALUE_LEN}")]
    ValueTooLarge(u64),
    /// A value not followed by CRLF.
    #[error("a value not followed by CRLF")]
    ValueNotTerminated,
    /// More `VALUE` blocks than keys asked for.
    #[error("more values than the {0} key(s) asked for")]
    TooManyValues(u32),
    /// A header line that does not parse (`VALUE` or `VA` without a size).
    #[error("a malformed header {0:?}")]
    BadHeader(String),
    /// A line no request of this kind is answered with.
    #[error("an unexpected reply {0:?}")]
    Unexpected(String),
}

/// At most this much of a bad line is kept in an error.
const SHOWN: usize = 64;

fn shown(line: &[u8]) -> String {
    let cut = &line[..line.len().min(SHOWN)];
    let mut s = String::from_utf8_lossy(cut).into_owned();
    if line.len() > SHOWN {
        s.push('…');
    }
    s
}

/// One line from `at`: (the line without CRLF, the offset after its CRLF), or how many
/// bytes the buffer must hold to go on.
enum Line<'a> {
    Done(&'a [u8], usize),
    Need(usize),
}

fn line_at(buf: &[u8], at: usize) -> Result<Line<'_>, McError> {
    let rest = &buf[at.min(buf.len())..];
    let window = &rest[..rest.len().min(MAX_LINE_LEN + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Line::Done(&rest[..i], at + i + 2)),
        None if rest.len() >= MAX_LINE_LEN + 2 => Err(McError::LineTooLong),
        None => Ok(Line::Need(buf.len() + 1)),
    }
}

/// The error a line is, if it is one: `ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`.
fn error_of(line: &[u8]) -> Option<ReplyKind<'_>> {
    let word = line.split(|&b| b == b' ').next().unwrap_or(line);
    matches!(word, b"ERROR" | b"CLIENT_ERROR" | b"SERVER_ERROR").then_some(ReplyKind::Error {
        kind: word,
        message: line,
    })
}

/// A decimal number of at most 20 digits.
fn number(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Where a value of `size` bytes starting at `from` ends (after its CRLF), or what the
/// buffer must hold.
fn value_end(buf: &[u8], from: usize, size: u64) -> Result<Result<usize, usize>, McError> {
    if size > MAX_VALUE_LEN {
        return Err(McError::ValueTooLarge(size));
    }
    let end = from + size as usize + 2;
    if buf.len() < end {
        return Ok(Err(end));
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(McError::ValueNotTerminated);
    }
    Ok(Ok(end))
}

/// Scans one reply at the front of `buf`, as `expect` says the request is answered.
///
/// Allocates nothing. [`Scan::Incomplete`]'s `need` is the exact end of a value once its
/// header is in, so a large value is scanned O(1) times.
///
/// # Errors
/// A [`McError`] when the front of `buf` can never become such a reply.
pub fn scan_reply(buf: &[u8], expect: Expect) -> Result<Scan<'_>, McError> {
    match expect {
        Expect::Values { keys } => values(buf, keys),
        Expect::Line => status(buf),
        Expect::Meta => meta(buf, 0).map(|(s, _)| s),
        Expect::MetaQuiet { keys } => meta_quiet(buf, keys),
    }
}

/// Meta replies up to and including `MN`: hits are values, the keys that said nothing (or
/// `EN`) are nils, and the first error, if any, is the reply's kind (the others after it
/// still answered).
fn meta_quiet(buf: &[u8], keys: u32) -> Result<Scan<'_>, McError> {
    let (mut at, mut hits, mut answered) = (0usize, 0u32, 0u32);
    let mut error = None;
    loop {
        let (scan, code) = meta(buf, at)?;
        let (kind, len) = match scan {
            Scan::Reply { kind, len, .. } => (kind, len),
            other => return Ok(other),
        };
        if code == *b"MN" {
            let nils = keys.saturating_sub(hits);
            let kind = match error {
                Some(e) => e,
                None if hits == 0 && keys <= 1 => ReplyKind::Nil,
                None => ReplyKind::Value,
            };
            return Ok(Scan::Reply {
                kind,
                len,
                nils: if keys <= 1 { 0 } else { nils },
            });
        }
        answered += 1;
        if answered > keys.max(1) {
            return Err(McError::TooManyValues(keys));
        }
        match kind {
            ReplyKind::Error { .. } => {
                error.get_or_insert(kind);
            }
            ReplyKind::Nil => {}
            _ => hits += 1,
        }
        at = len;
    }
}

fn values(buf: &[u8], keys: u32) -> Result<Scan<'_>, McError> {
    let (mut at, mut hits) = (0usize, 0u32);
    loop {
        let (line, next) = match line_at(buf, at)? {
            Line::Done(l, n) => (l, n),
            Line::Need(need) => return Ok(Scan::Incomplete { need }),
        };
        if line == b"END" {
            let nils = keys.saturating_sub(hits);
            let kind = if hits == 0 && keys <= 1 {
                ReplyKind::Nil
            } else {
                ReplyKind::Value
            };
            let nils = if keys <= 1 { 0 } else { nils };
            return Ok(Scan::Reply {
                kind,
                len: next,
                nils,
            });
        }
        if let Some(kind) = error_of(line) {
            return Ok(Scan::Reply {
                kind,
                len: next,
                nils: 0,
            });
        }
        let Some(header) = line.strip_prefix(b"VALUE ") else {
            return Err(McError::Unexpected(shown(line)));
        };
        // VALUE <key> <flags> <bytes> [<cas unique>]
        let mut words = header.split(|&b| b == b' ').filter(|w| !w.is_empty());
        let size = match (words.next(), words.next(), words.next()) {
            (Some(_key), Some(flags), Some(bytes)) if number(flags).is_some() => number(bytes),
            _ => None,
        }
        .ok_or_else(|| McError::BadHeader(shown(line)))?;
        hits += 1;
        if hits > keys.max(1) {
            return Err(McError::TooManyValues(keys));
        }
        match value_end(buf, next, size)? {
            Ok(end) => at = end,
            Err(need) => return Ok(Scan::Incomplete { need }),
        }
    }
}

fn status(buf: &[u8]) -> Result<Scan<'_>, McError> {
    let (line, len) = match line_at(buf, 0)? {
        Line::Done(l, n) => (l, n),
        Line::Need(need) => return Ok(Scan::Incomplete { need }),
    };
    let kind = match line {
        b"STORED" | b"DELETED" | b"TOUCHED" | b"OK" => ReplyKind::Value,
        b"NOT_FOUND" | b"NOT_STORED" | b"EXISTS" => ReplyKind::Nil,
        n if number(n).is_some() || n.starts_with(b"VERSION ") => ReplyKind::Value,
        other => error_of(other).ok_or_else(|| McError::Unexpected(shown(other)))?,
    };
    Ok(Scan::Reply { kind, len, nils: 0 })
}

/// One meta reply starting at `from`: its scan (`len` counted from the buffer's start)
/// and its two-letter code.
fn meta(buf: &[u8], from: usize) -> Result<(Scan<'_>, [u8; 2]), McError> {
    let (line, next) = match line_at(buf, from)? {
        Line::Done(l, n) => (l, n),
        Line::Need(need) => return Ok((Scan::Incomplete { need }, [0; 2])),
    };
    let two = [
        line.first().copied().unwrap_or(0),
        line.get(1).copied().unwrap_or(0),
    ];
    let code = line.get(..2).unwrap_or(line);
    let flags_follow = line.len() == 2 || line.get(2) == Some(&b' ');
    let kind = match code {
        _ if !flags_follow => None,
        b"HD" | b"MN" => Some(ReplyKind::Value),
        b"EN" | b"NF" | b"NS" | b"EX" => Some(ReplyKind::Nil),
        b"VA" => {
            let size = line
                .get(3..)
                .and_then(|rest| rest.split(|&b| b == b' ').next())
                .and_then(number)
                .ok_or_else(|| McError::BadHeader(shown(line)))?;
            return Ok((
                match value_end(buf, next, size)? {
                    Ok(len) => Scan::Reply {
                        kind: ReplyKind::Value,
                        len,
                        nils: 0,
                    },
                    Err(need) => Scan::Incomplete { need },
                },
                two,
            ));
        }
        _ => None,
    };
    let kind = match kind {
        Some(k) => k,
        None => error_of(line).ok_or_else(|| McError::Unexpected(shown(line)))?,
    };
    Ok((
        Scan::Reply {
            kind,
            len: next,
            nils: 0,
        },
        two,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reply(buf: &[u8], e: Expect) -> (ReplyKind<'_>, usize, u32) {
        match scan_reply(buf, e).unwrap() {
            Scan::Reply { kind, len, nils } => (kind, len, nils),
            other => panic!("{other:?}"),
        }
    }

    fn need(buf: &[u8], e: Expect) -> usize {
        match scan_reply(buf, e).unwrap() {
            Scan::Incomplete { need } => need,
            other => panic!("{other:?}"),
        }
    }

    const ONE: Expect = Expect::Values { keys: 1 };

    #[test]
    fn a_get_is_a_value_a_miss_or_an_error() {
        let hit = b"VALUE k 0 5\r\nhello\r\nEND\r\nnext";
        assert_eq!(reply(hit, ONE), (ReplyKind::Value, hit.len() - 4, 0));
        assert_eq!(reply(b"END\r\n", ONE), (ReplyKind::Nil, 5, 0));
        let cas = b"VALUE k 7 2 99\r\nhi\r\nEND\r\n";
        assert_eq!(reply(cas, ONE).0, ReplyKind::Value);
        let err = b"SERVER_ERROR out of memory\r\n";
        assert_eq!(
            reply(err, ONE).0,
            ReplyKind::Error {
                kind: b"SERVER_ERROR",
                message: b"SERVER_ERROR out of memory"
            }
        );
        assert_eq!(
            reply(b"ERROR\r\n", Expect::Line).0,
            ReplyKind::Error {
                kind: b"ERROR",
                message: b"ERROR"
            }
        );
    }

    #[test]
    fn a_multi_get_counts_its_missing_keys_as_nils() {
        let three = Expect::Values { keys: 3 };
        let two_of_three = b"VALUE a 0 1\r\nx\r\nVALUE c 0 2\r\nyy\r\nEND\r\n";
        assert_eq!(reply(two_of_three, three), (ReplyKind::Value, 38, 1));
        assert_eq!(reply(b"END\r\n", three), (ReplyKind::Value, 5, 3));
        // Replies for keys never asked for: more values than keys.
        let four = b"VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\nx\r\nVALUE c 0 1\r\nx\r\nVALUE d 0 1\r\nx\r\nEND\r\n";
        assert_eq!(scan_reply(four, three), Err(McError::TooManyValues(3)));
    }

    #[test]
    fn an_incomplete_value_asks_for_its_exact_end() {
        let head = b"VALUE k 0 1000000\r\nabc";
        assert_eq!(need(head, ONE), 19 + 1_000_000 + 2);
        assert_eq!(need(b"VALUE k 0 5\r\nhello\r\nEN", ONE), 23);
        assert_eq!(need(b"STOR", Expect::Line), 5);
        assert_eq!(need(b"", Expect::Meta), 1);
        assert_eq!(need(b"VA 10 f1\r\n01234", Expect::Meta), 22);
    }

    #[test]
    fn status_lines_read_as_redis_would_count_them() {
        for (line, kind) in [
            (&b"STORED\r\n"[..], ReplyKind::Value),
            (b"DELETED\r\n", ReplyKind::Value),
            (b"TOUCHED\r\n", ReplyKind::Value),
            (b"42\r\n", ReplyKind::Value),
            (b"NOT_FOUND\r\n", ReplyKind::Nil),
            (b"NOT_STORED\r\n", ReplyKind::Nil),
            (b"EXISTS\r\n", ReplyKind::Nil),
        ] {
            assert_eq!(reply(line, Expect::Line), (kind, line.len(), 0));
        }
        assert!(matches!(
            scan_reply(b"YES\r\n", Expect::Line),
            Err(McError::Unexpected(_))
        ));
    }

    #[test]
    fn meta_replies_by_their_code() {
        assert_eq!(reply(b"HD\r\n", Expect::Meta).0, ReplyKind::Value);
        assert_eq!(reply(b"HD c123 t-1\r\n", Expect::Meta).0, ReplyKind::Value);
        assert_eq!(reply(b"MN\r\n", Expect::Meta).0, ReplyKind::Value);
        for miss in [&b"EN\r\n"[..], b"NF\r\n", b"NS\r\n", b"EX c9\r\n"] {
            assert_eq!(reply(miss, Expect::Meta), (ReplyKind::Nil, miss.len(), 0));
        }
        let va = b"VA 2 f30 c7\r\nhi\r\nMN\r\n";
        assert_eq!(reply(va, Expect::Meta), (ReplyKind::Value, 17, 0));
        assert!(matches!(
            scan_reply(b"VA x\r\n", Expect::Meta),
            Err(McError::BadHeader(_))
        ));
        assert!(matches!(
            scan_reply(b"HDX\r\n", Expect::Meta),
            Err(McError::Unexpected(_))
        ));
        assert_eq!(
            reply(b"CLIENT_ERROR bad command line format\r\n", Expect::Meta).0,
            ReplyKind::Error {
                kind: b"CLIENT_ERROR",
                message: b"CLIENT_ERROR bad command line format"
            }
        );
    }

    #[test]
    fn a_quiet_meta_multi_get_ends_at_mn_with_its_misses_as_nils() {
        let q = |keys| Expect::MetaQuiet { keys };
        // Three keys, one hit: two nils.
        let b = b"VA 2 t-1\r\nhi\r\nMN\r\n";
        assert_eq!(reply(b, q(3)), (ReplyKind::Value, b.len(), 2));
        // Nothing found: every key a nil; one key: the reply itself is a nil.
        assert_eq!(reply(b"MN\r\n", q(3)), (ReplyKind::Value, 4, 3));
        assert_eq!(reply(b"MN\r\n", q(1)), (ReplyKind::Nil, 4, 0));
        // An error for one key is the reply's kind; the rest is read to MN.
        let b = b"CLIENT_ERROR bad data chunk\r\nVA 1\r\nx\r\nMN\r\n";
        let (kind, len, nils) = reply(b, q(2));
        assert!(matches!(
            kind,
            ReplyKind::Error {
                kind: b"CLIENT_ERROR",
                ..
            }
        ));
        assert_eq!((len, nils), (b.len(), 1));
        // Incomplete anywhere before MN: wait for the exact bytes of a value.
        assert_eq!(need(b"VA 10\r\n01", q(2)), 19);
        assert_eq!(need(b"VA 1\r\nx\r\nM", q(2)), 11);
        // More answers than keys: refused.
        assert_eq!(
            scan_reply(b"HD\r\nHD\r\nHD\r\nMN\r\n", q(2)),
            Err(McError::TooManyValues(2))
        );
        // `version` answers a line.
        assert_eq!(
            reply(b"VERSION 1.6.18\r\n", Expect::Line).0,
            ReplyKind::Value
        );
    }

    /// The hostile replies: a 2 GB value announced, a line without CRLF, a value without
    /// its CRLF: each an error at once, nothing buffered without bound.
    #[test]
    fn hostile_replies_are_refused_not_buffered() {
        assert_eq!(
            scan_reply(b"VALUE k 0 2147483648\r\n", ONE),
            Err(McError::ValueTooLarge(2_147_483_648))
        );
        assert_eq!(
            scan_reply(b"VA 2147483648\r\n", Expect::Meta),
            Err(McError::ValueTooLarge(2_147_483_648))
        );
        let endless = vec![b'x'; MAX_LINE_LEN + 2];
        assert_eq!(
            scan_reply(&endless, Expect::Line),
            Err(McError::LineTooLong)
        );
        assert_eq!(scan_reply(&endless, ONE), Err(McError::LineTooLong));
        // Just under the cap it is still "read more".
        assert_eq!(
            need(&endless[..MAX_LINE_LEN], Expect::Line),
            MAX_LINE_LEN + 1
        );
        assert_eq!(
            scan_reply(b"VALUE k 0 2\r\nhiXX", ONE),
            Err(McError::ValueNotTerminated)
        );
        let long = [b"VALUE k 0 zz ".as_slice(), &[b'y'; 200]].concat();
        let e = scan_reply(&[long.as_slice(), b"\r\n"].concat(), ONE).unwrap_err();
        assert!(e.to_string().len() < 120, "{e}");
    }

    proptest! {
        /// No input panics, and a reply's length never passes the buffer.
        #[test]
        fn any_bytes_scan_without_panic(buf in proptest::collection::vec(any::<u8>(), 0..256), keys in 0u32..4) {
            for e in [Expect::Values { keys }, Expect::Line, Expect::Meta] {
                match scan_reply(&buf, e) {
                    Ok(Scan::Reply { len, .. }) => prop_assert!(len <= buf.len()),
                    Ok(Scan::Incomplete { need }) => prop_assert!(need > buf.len()),
                    Ok(Scan::Push { .. }) => prop_assert!(false, "no pushes in memcached"),
                    Err(_) => {}
                }
            }
        }
    }
}

//! What a handler answers: the [`Reply`] it returns, the canned replies and error texts
//! the command families share, and how Redis writes a score.
//!
//! A leaf: it imports nothing from the crate, and the family files take these from here,
//! never from the dispatch table.

use std::borrow::Cow;

use crest_resp::encode_bulk;

/// An error reply's text, without the `-`; most are constants.
pub(crate) type Error = Cow<'static, str>;

/// What a handler returns: `Ok` once it has appended its reply.
pub(crate) type Reply = Result<(), Error>;

/// `+OK`.
pub(crate) const OK: &[u8] = b"+OK\r\n";
/// The nil bulk string: a missing key or field.
pub(crate) const NIL: &[u8] = b"$-1\r\n";
/// The nil array: `LPOP key count` on a missing key.
pub(crate) const NIL_ARRAY: &[u8] = b"*-1\r\n";
/// An empty array: a range over a missing key.
pub(crate) const EMPTY_ARRAY: &[u8] = b"*0\r\n";
/// `:0`.
pub(crate) const ZERO: &[u8] = b":0\r\n";
/// `:1`.
pub(crate) const ONE: &[u8] = b":1\r\n";

/// A command for one type met a key of another.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
/// An integer argument or value that `string2ll` refuses.
pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
/// A score that `strtod` refuses, or NaN.
pub(crate) const NOT_A_FLOAT: &str = "ERR value is not a valid float";
/// A negative count (`LPOP key -1`).
pub(crate) const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";
/// An option Redis does not know in that place, or conflicting options.
pub(crate) const SYNTAX_ERROR: &str = "ERR syntax error";

/// Redis's text for a wrong argument count. Replied by the dispatcher for a count outside
/// the command's arity, and by commands that check their count while running (`MSET k`),
/// which Redis counts as failed rather than rejected.
pub(crate) fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// A length as a RESP integer.
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Appends a float reply as Redis 7 writes scores in RESP2: a bulk string, `inf`/`-inf`
/// for infinities, otherwise the shortest text that reads back as the same `f64`, with
/// `%g`'s exponent form for very large or small magnitudes (`1e+20`, `1e-05`).
pub(crate) fn encode_float(out: &mut Vec<u8>, value: f64) {
    let text = format_float(value);
    encode_bulk(out, text.as_bytes());
}

fn format_float(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let magnitude = value.abs();
    if value == 0.0 || (1e-5..1e17).contains(&magnitude) {
        return format!("{value}");
    }
    // `{:e}` gives `1e20` / `1.5e-7`; %g writes the exponent signed, at least two digits.
    let text = format!("{value:e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => text,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn floats_format_like_redis() {
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(1.5), "1.5");
        assert_eq!(format_float(-0.25), "-0.25");
        assert_eq!(format_float(0.1), "0.1");
        assert_eq!(format_float(1e20), "1e+20");
        assert_eq!(format_float(1.5e-7), "1.5e-07");
        assert_eq!(format_float(f64::NEG_INFINITY), "-inf");
    }
}

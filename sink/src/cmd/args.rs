//! How a handler reads its arguments, as Redis does: integers as `string2ll`, floats as
//! `strtod`, rank ranges as LRANGE and ZRANGE, keywords ignoring case.
//!
//! Depends only on [`super::reply`] (for the error an integer argument gets); the family
//! files take these from here, never from the dispatch table.

use crest_resp::parse_integer;

use super::reply::NOT_AN_INTEGER;

/// Parses an integer argument as Redis's `string2ll` does: strict decimal, no `+`, no
/// spaces, no leading zeros (`007` and `-0` are not integers to Redis).
pub(crate) fn parse_int(arg: &[u8]) -> Option<i64> {
    let digits = arg.strip_prefix(b"-").unwrap_or(arg);
    if (digits.len() > 1 && digits.first() == Some(&b'0')) || arg == b"-0" {
        return None;
    }
    parse_integer(arg)
}

/// [`parse_int`], or Redis's "not an integer" error.
pub(crate) fn int_arg(arg: &[u8]) -> Result<i64, &'static str> {
    parse_int(arg).ok_or(NOT_AN_INTEGER)
}

/// Parses a float argument as Redis's `getDoubleFromObject` does (`strtod`, the whole
/// text, no leading space): `1.5`, `-2e3`, `inf`, `-inf`; `None` for NaN, for anything
/// else, and for a value out of `f64`'s range (`1e999`), which strtod reports as ERANGE.
pub(crate) fn parse_float(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    let value: f64 = text.parse().ok()?;
    if value.is_nan() {
        return None;
    }
    let unsigned = text.trim_start_matches(['+', '-']);
    let spelled_infinite =
        unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity");
    if value.is_infinite() && !spelled_infinite {
        return None; // overflow
    }
    let mantissa = unsigned.split(['e', 'E']).next().unwrap_or("");
    if value == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return None; // underflow to zero
    }
    Some(value)
}

/// Resolves a `start stop` rank range (negative counts from the end) over `len` items, as
/// Redis's LRANGE and ZRANGE do: `None` when empty, else the half-open `start..end`.
pub(crate) fn rank_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 { start + len } else { start }.max(0);
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    // Both are within 0..len here.
    Some((
        usize::try_from(start).unwrap_or(0),
        usize::try_from(stop + 1).unwrap_or(0),
    ))
}

/// Whether `arg` is `word`, ignoring ASCII case.
pub(crate) fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_string2ll() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b"007"[..],
            b"-0",
            b"+1",
            b" 1",
            b"1 ",
            b"",
            b"-",
            b"1.0",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_int(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_parse_like_strtod() {
        assert_eq!(parse_float(b"1.5"), Some(1.5));
        assert_eq!(parse_float(b"-2e3"), Some(-2000.0));
        assert_eq!(parse_float(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_float(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float(b"0"), Some(0.0));
        assert_eq!(parse_float(b"0e5"), Some(0.0));
        for bad in [&b"nan"[..], b"abc", b" 1", b"1e999", b"1e-999", b"", b"1,5"] {
            assert_eq!(parse_float(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn rank_ranges_follow_redis() {
        assert_eq!(rank_range(0, -1, 5), Some((0, 5)));
        assert_eq!(rank_range(0, 10, 5), Some((0, 5)));
        assert_eq!(rank_range(-2, -1, 5), Some((3, 5)));
        assert_eq!(rank_range(-100, 1, 5), Some((0, 2)));
        assert_eq!(rank_range(3, 2, 5), None);
        assert_eq!(rank_range(5, 10, 5), None);
        assert_eq!(rank_range(0, -1, 0), None);
        assert_eq!(rank_range(i64::MIN, i64::MAX, 3), Some((0, 3)));
    }
}

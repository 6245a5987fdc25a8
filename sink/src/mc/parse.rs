//! Reading a request as memcached 1.6 reads it, byte for byte: where a line ends
//! ([`frame`]), how it splits into words ([`tokenize`]), how a word is a number (C's
//! `strtol`/`strtoul`/`strtoull` behind memcached's `safe_strto*`), and the base64 of the
//! meta protocol's `b` flag. Pure functions over bytes; no state, no I/O.
//!
//! memcached's quirks are kept on purpose, because a client that works against memcached
//! must see the same thing here: a line ends at LF (a CR before it is dropped), stops at
//! its first NUL, and splits on spaces only (a tab is part of a word); numbers take
//! leading white space and a sign, and a 64-bit parse is truncated to 32 bits where
//! memcached stores it in 32 (`set k 4294967296 0 1` stores flags 0).
//!
//! Bounds: a line is looked for in what was read; more than [`MAX_UNTERMINATED`] bytes
//! without LF end the connection, unless they begin a `get`/`gets` (memcached lets a
//! multi-get grow; the connection's input budget in [`crate::Limits`] bounds it here).
//! [`tokenize`] holds at most [`MAX_WORDS`] words and no allocation.

/// Bytes a line may have without its LF before memcached closes the connection (its
/// `try_read_command_ascii`: "we didn't have a '\n' in the first few k").
pub(crate) const MAX_UNTERMINATED: usize = 2048;

/// Leading spaces memcached skips before it looks for `get `/`gets ` in such a line.
const MAX_LEADING_SPACES: usize = 100;

/// Longest key (`KEY_MAX_LENGTH`).
pub(crate) const KEY_MAX_LENGTH: usize = 250;

/// Words [`tokenize`] splits off a line (memcached's `MAX_TOKENS` less its terminal
/// token); what follows the last of them is left whole, in [`Tokens::rest`].
pub(crate) const MAX_WORDS: usize = 23;

/// One request line at the front of a buffer, or why there is none yet.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A whole line, without its LF (and the CR before it), cut at its first NUL; `used`
    /// bytes of the buffer, LF included, are consumed.
    Line { line: &'a [u8], used: usize },
    /// No LF yet; the buffer's first `scanned` bytes hold none (look from there next time).
    Partial { scanned: usize },
    /// More than [`MAX_UNTERMINATED`] bytes and no LF, and not a multi-get: memcached
    /// closes the connection without a reply.
    TooLong,
}

/// The line at the front of `buf`, looking for its LF from `scanned` (bytes already known
/// to hold none), so a long line arriving in pieces is scanned once.
pub(crate) fn frame(buf: &[u8], scanned: usize) -> Frame<'_> {
    let from = scanned.min(buf.len());
    match buf[from..].iter().position(|&b| b == b'\n') {
        Some(i) => {
            let end = from + i;
            let mut line = &buf[..end];
            // memcached drops the CR only from a line of two bytes or more.
            if line.len() > 1 && line.ends_with(b"\r") {
                line = &line[..line.len() - 1];
            }
            // It reads the line as a C string.
            if let Some(nul) = line.iter().position(|&b| b == 0) {
                line = &line[..nul];
            }
            Frame::Line {
                line,
                used: end + 1,
            }
        }
        None if buf.len() > MAX_UNTERMINATED && !is_multiget(buf) => Frame::TooLong,
        None => Frame::Partial { scanned: buf.len() },
    }
}

/// A line memcached lets grow past [`MAX_UNTERMINATED`]: `get ` or `gets ` after at most
/// 100 spaces.
fn is_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    spaces <= MAX_LEADING_SPACES && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// A line's words, as memcached's `tokenize_command` splits it.
#[derive(Debug)]
pub(crate) struct Tokens<'a> {
    words: [&'a [u8]; MAX_WORDS],
    len: usize,
    /// What follows the 23rd word, unsplit, when more is there.
    pub(crate) rest: Option<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    /// The words.
    pub(crate) fn words(&self) -> &[&'a [u8]] {
        &self.words[..self.len]
    }

    /// memcached's `ntokens`: the words and its terminal token.
    pub(crate) fn ntokens(&self) -> usize {
        self.len + 1
    }

    /// Word `i`, or empty past the last (memcached's terminal token has length 0).
    pub(crate) fn get(&self, i: usize) -> &'a [u8] {
        self.words().get(i).copied().unwrap_or_default()
    }
}

/// Splits `line` on spaces (only), runs of them as one, into at most [`MAX_WORDS`] words.
pub(crate) fn tokenize(line: &[u8]) -> Tokens<'_> {
    let mut t = Tokens {
        words: [&[]; MAX_WORDS],
        len: 0,
        rest: None,
    };
    let mut start = 0;
    for (i, &b) in line.iter().enumerate() {
        if b != b' ' {
            continue;
        }
        if start != i {
            t.words[t.len] = &line[start..i];
            t.len += 1;
            if t.len == MAX_WORDS {
                t.rest = (i + 1 < line.len()).then(|| &line[i + 1..]);
                return t;
            }
        }
        start = i + 1;
    }
    if start < line.len() {
        t.words[t.len] = &line[start..];
        t.len += 1;
    }
    t
}

/// The words of `s`, split on spaces.
pub(crate) fn words(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&b| b == b' ').filter(|w| !w.is_empty())
}

/// Where `line`'s word `n` (from 0) ends: what follows `n + 1` words, from the space after
/// them (the whole line's length when there are fewer).
pub(crate) fn after_words(line: &[u8], n: usize) -> usize {
    let mut at = 0;
    for _ in 0..=n {
        while at < line.len() && line[at] == b' ' {
            at += 1;
        }
        while at < line.len() && line[at] != b' ' {
            at += 1;
        }
    }
    at
}

/// C's `isspace` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What C's `strtoull`/`strtol` read of `s`: (a minus sign, the magnitude or `None` past
/// 64 bits, where the number ends); `None` when there are no digits (`str == endptr`).
fn scan(s: &[u8]) -> Option<(bool, Option<u64>, usize)> {
    let mut i = s.iter().take_while(|&&b| is_space(b)).count();
    let negative = s.get(i) == Some(&b'-');
    if matches!(s.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = i;
    let mut magnitude = Some(0u64);
    while let Some(&d) = s.get(i).filter(|d| d.is_ascii_digit()) {
        magnitude = magnitude
            .and_then(|m| m.checked_mul(10))
            .and_then(|m| m.checked_add(u64::from(d - b'0')));
        i += 1;
    }
    (i > digits).then_some((negative, magnitude, i))
}

/// memcached's check after the digits: white space, or the end of the string.
fn ends_well(s: &[u8], end: usize) -> bool {
    s.get(end).is_none_or(|&b| is_space(b) || b == 0)
}

/// memcached's `safe_strtoull`: a 64-bit unsigned number; a minus sign wraps it, and is
/// refused only when the result is above `i64::MAX`.
pub(crate) fn strtoull(s: &[u8]) -> Option<u64> {
    let (negative, magnitude, end) = scan(s)?;
    let magnitude = magnitude?;
    if !ends_well(s, end) {
        return None;
    }
    let value = if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    if i64::try_from(value).is_err() && s.contains(&b'-') {
        return None;
    }
    Some(value)
}

/// memcached's `safe_strtoul` on a 64-bit machine: [`strtoull`], truncated to 32 bits.
pub(crate) fn strtoul(s: &[u8]) -> Option<u32> {
    // Truncation is memcached's: `*out = l` into a uint32_t.
    strtoull(s).map(|v| v as u32)
}

/// memcached's `safe_strtol` on a 64-bit machine: a signed 64-bit number, truncated to 32
/// bits.
pub(crate) fn strtol(s: &[u8]) -> Option<i32> {
    let (negative, magnitude, end) = scan(s)?;
    let magnitude = magnitude?;
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)?
    } else {
        i64::try_from(magnitude).ok()?
    };
    // Truncation is memcached's: `*out = l` into an int32_t.
    ends_well(s, end).then_some(value as i32)
}

/// Appends `n` in decimal.
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `n` in decimal, with its sign.
pub(crate) fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A base64 digit's value; `=` is 0, as in memcached's table. `None`: not a digit (skipped).
fn base64_value(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// memcached's `base64_decode`: bytes that are not base64 are skipped; the digits must
/// come in fours; `None` where memcached returns 0 (a failure: no key is empty).
pub(crate) fn base64_decode(src: &[u8]) -> Option<Vec<u8>> {
    let count = src.iter().filter(|&&b| base64_value(b).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &b in src {
        let Some(v) = base64_value(b) else { continue };
        if b == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            out.push((block[0] << 2) | (block[1] >> 4));
            out.push((block[1] << 4) | (block[2] >> 2));
            out.push((block[2] << 6) | block[3]);
            n = 0;
            if pad > 0 {
                match pad {
                    1 => out.truncate(out.len() - 1),
                    2 => out.truncate(out.len() - 2),
                    _ => return None,
                }
                break;
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Appends `src` in base64 with `=` padding, as memcached's `base64_encode` writes it.
pub(crate) fn base64_encode(src: &[u8], out: &mut Vec<u8>) {
    let digit = |v: u8| BASE64[usize::from(v & 0x3f)];
    let mut chunks = src.chunks_exact(3);
    for c in &mut chunks {
        out.extend_from_slice(&[
            digit(c[0] >> 2),
            digit((c[0] << 4) | (c[1] >> 4)),
            digit((c[1] << 2) | (c[2] >> 6)),
            digit(c[2]),
        ]);
    }
    match *chunks.remainder() {
        [a] => out.extend_from_slice(&[digit(a >> 2), digit(a << 4), b'=', b'=']),
        [a, b] => out.extend_from_slice(&[
            digit(a >> 2),
            digit((a << 4) | (b >> 4)),
            digit(b << 2),
            b'=',
        ]),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(buf: &[u8]) -> (&[u8], usize) {
        match frame(buf, 0) {
            Frame::Line { line, used } => (line, used),
            other => panic!("no line in {buf:?}: {other:?}"),
        }
    }

    #[test]
    fn a_line_ends_at_lf_drops_its_cr_and_stops_at_nul() {
        assert_eq!(line(b"get a\r\nrest"), (b"get a".as_slice(), 7));
        assert_eq!(line(b"get a\nrest"), (b"get a".as_slice(), 6));
        // A lone CR is a one-byte line: memcached keeps it (and answers ERROR).
        assert_eq!(line(b"\r\n"), (b"\r".as_slice(), 2));
        assert_eq!(line(b"\n"), (b"".as_slice(), 1));
        assert_eq!(line(b"get a\0junk\r\n"), (b"get a".as_slice(), 12));
        assert_eq!(line(b"get a\rb\r\n"), (b"get a\rb".as_slice(), 9));
    }

    #[test]
    fn an_unterminated_line_is_refused_past_2048_bytes_unless_a_multiget() {
        let junk = vec![b'x'; MAX_UNTERMINATED];
        assert_eq!(
            frame(&junk, 0),
            Frame::Partial {
                scanned: MAX_UNTERMINATED
            }
        );
        let junk = vec![b'x'; MAX_UNTERMINATED + 1];
        assert_eq!(frame(&junk, 0), Frame::TooLong);
        let mut set = b"set k 0 0 1".to_vec();
        set.resize(10_000, b' ');
        assert_eq!(frame(&set, 0), Frame::TooLong);

        let mut get = b"get ".to_vec();
        get.resize(1 << 20, b'k');
        assert_eq!(frame(&get, 0), Frame::Partial { scanned: 1 << 20 });
        let mut gets = vec![b' '; 100];
        gets.extend_from_slice(b"gets ");
        gets.resize(5000, b'k');
        assert!(matches!(frame(&gets, 0), Frame::Partial { .. }));
        // 101 spaces first: memcached gives up on it.
        let mut far = vec![b' '; 101];
        far.extend_from_slice(b"get ");
        far.resize(5000, b'k');
        assert_eq!(frame(&far, 0), Frame::TooLong);
        // `get` without its space is not a multi-get.
        let mut getx = b"getx".to_vec();
        getx.resize(5000, b'k');
        assert_eq!(frame(&getx, 0), Frame::TooLong);
    }

    #[test]
    fn a_long_line_with_its_lf_is_taken_whole() {
        let mut set = b"set k 0 0 1".to_vec();
        set.resize(10_000, b' ');
        set.extend_from_slice(b"\r\n");
        assert_eq!(line(&set).1, 10_002);
    }

    #[test]
    fn the_scan_goes_on_where_it_stopped() {
        let mut buf = b"get ".to_vec();
        buf.resize(3000, b'k');
        let Frame::Partial { scanned } = frame(&buf, 0) else {
            panic!()
        };
        buf.extend_from_slice(b" k\r\n");
        assert_eq!(line_from(&buf, scanned), 3004);
    }

    fn line_from(buf: &[u8], scanned: usize) -> usize {
        match frame(buf, scanned) {
            Frame::Line { used, .. } => used,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn words_split_on_spaces_only_and_stop_at_23() {
        let t = tokenize(b"  set\tk  0 0 1 ");
        assert_eq!(t.words(), [b"set\tk".as_slice(), b"0", b"0", b"1"]);
        assert_eq!(t.ntokens(), 5);
        assert_eq!(t.get(9), b"");
        assert!(t.rest.is_none());
        let many: Vec<u8> = (0..30)
            .flat_map(|i| format!("w{i} ").into_bytes())
            .collect();
        let t = tokenize(&many);
        assert_eq!(t.words().len(), MAX_WORDS);
        assert_eq!(t.get(22), b"w22");
        assert_eq!(t.rest, Some(b"w23 w24 w25 w26 w27 w28 w29 ".as_slice()));
        assert_eq!(tokenize(b"").ntokens(), 1);
        assert_eq!(tokenize(b"    ").ntokens(), 1);
        // Exactly 23 words and a trailing space leave no rest.
        let exact: Vec<u8> = (0..23)
            .flat_map(|i| format!("w{i} ").into_bytes())
            .collect();
        assert!(tokenize(&exact).rest.is_none());
        assert_eq!(after_words(b" gat 10  a b", 1), 7);
        assert_eq!(after_words(b"get", 0), 3);
        assert_eq!(after_words(b"get", 4), 3);
    }

    #[test]
    fn numbers_read_as_memcacheds_safe_strto_functions() {
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"-18446744073709551615"), Some(1));
        assert_eq!(strtoull(b"+7"), Some(7));
        assert_eq!(strtoull(b" \t12"), Some(12));
        assert_eq!(strtoull(b"12 34"), Some(12));
        assert_eq!(strtoull(b"12\r\n"), Some(12));
        assert_eq!(strtoull(b"12\0x"), Some(12));
        assert_eq!(strtoull(b"12abc"), None);
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"  "), None);
        assert_eq!(strtoull(b"+"), None);
        assert_eq!(strtoull(b"0x10"), None);
        assert_eq!(strtoull(b"000000000000000000000001"), Some(1));
        assert_eq!(strtoul(b"4294967296"), Some(0));
        assert_eq!(strtoul(b"4294967295"), Some(u32::MAX));
        assert_eq!(strtoul(b"-5"), None);
        assert_eq!(strtol(b"-1"), Some(-1));
        assert_eq!(strtol(b"4294967297"), Some(1));
        assert_eq!(strtol(b"9223372036854775807"), Some(-1));
        assert_eq!(strtol(b"9223372036854775808"), None);
        assert_eq!(strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(strtol(b"-9223372036854775809"), None);
        assert_eq!(strtol(b"abc"), None);
        assert_eq!(strtol(b"5x"), None);
    }

    #[test]
    fn base64_is_memcacheds() {
        let mut out = Vec::new();
        base64_encode(b"a key", &mut out);
        assert_eq!(out, b"YSBrZXk=");
        assert_eq!(
            base64_decode(b"YSBrZXk=").as_deref(),
            Some(b"a key".as_slice())
        );
        assert_eq!(base64_decode(b"YQ==").as_deref(), Some(b"a".as_slice()));
        assert_eq!(base64_decode(b"YWJj").as_deref(), Some(b"abc".as_slice()));
        // Non-digits are skipped; the digits must come in fours.
        assert_eq!(base64_decode(b"YW.Jj").as_deref(), Some(b"abc".as_slice()));
        assert_eq!(base64_decode(b"YWJ"), None);
        assert_eq!(base64_decode(b"!!!!"), None);
        assert_eq!(base64_decode(b"===="), None);
    }

    proptest! {
        #[test]
        fn base64_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1..300)) {
            let mut encoded = Vec::new();
            base64_encode(&bytes, &mut encoded);
            prop_assert_eq!(base64_decode(&encoded), Some(bytes));
        }

        #[test]
        fn no_bytes_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..4000)) {
            match frame(&bytes, 0) {
                Frame::Line { line, used } => {
                    prop_assert!(used <= bytes.len() && line.len() < used);
                    let t = tokenize(line);
                    prop_assert!(t.words().len() <= MAX_WORDS);
                    for w in t.words() {
                        let _ = (strtoull(w), strtoul(w), strtol(w), base64_decode(w));
                    }
                }
                Frame::Partial { scanned } => prop_assert_eq!(scanned, bytes.len()),
                Frame::TooLong => prop_assert!(bytes.len() > MAX_UNTERMINATED),
            }
        }
    }
}

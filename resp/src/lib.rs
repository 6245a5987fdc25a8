//! RESP2 codec: the wire format Crest speaks to Redis-protocol servers.
//!
//! Two readers over the same grammar, for two different users:
//! - [`scan_reply`] is the load engine's hot path. It finds where one reply ends and whether
//!   it is an error, without allocating, and tells the caller how many bytes to wait for so a
//!   large value is not rescanned on every read.
//! - [`Frame::parse`] builds an owned tree; the built-in sink and the tests use it.
//!
//! [`parse_request`] reads what clients send (arrays of bulk strings, or telnet-style inline
//! lines), and [`encode_command`] writes it.
//!
//! A frame that is not complete yet is "read more" (`Ok(None)` / [`Scan::Incomplete`]), never
//! an error; bytes that can never become a valid frame are a [`RespError`]. No input panics.
//! Limits follow Redis: bulk strings up to 512 MB (`proto-max-bulk-len`), inline requests up
//! to 64 KB (`PROTO_INLINE_MAX_SIZE`), arrays up to `i32::MAX` elements (`processMultibulkBuffer`).
//! A simple-string or error line may be at most [`MAX_LINE_LEN`] long, so a peer that never
//! sends CRLF cannot grow a reader's buffer forever. What a reader may *buffer* in all (an
//! array of `i32::MAX` small elements is legal but 6 GB) is the reader's own cap: the engine
//! bounds it per connection and per shard, and [`bulk_prefix`] lets it stream a large
//! top-level bulk string past without buffering it.

use thiserror::Error;

/// Largest bulk string accepted, in bytes: Redis's default `proto-max-bulk-len` (512 MB).
pub const MAX_BULK_LEN: u64 = 512 * 1024 * 1024;

/// Largest array accepted, in elements: Redis rejects multibulk lengths above `INT_MAX`.
pub const MAX_ARRAY_LEN: u64 = i32::MAX as u64;

/// Deepest nesting of arrays accepted. Real replies nest two or three levels (EXEC of
/// SCAN); the limit keeps a hostile peer from driving the recursive readers off the stack.
pub const MAX_DEPTH: usize = 64;

/// Longest inline request line, in bytes: Redis's `PROTO_INLINE_MAX_SIZE` (64 KB).
pub const MAX_INLINE_LEN: usize = 64 * 1024;

/// Longest simple-string or error line, CRLF excluded: 4 MiB. Real servers send lines of
/// a few hundred bytes (error messages, `+OK`); 4 MiB keeps a 1 MB error message legal.
pub const MAX_LINE_LEN: usize = 4 * 1024 * 1024;

/// Longest header of an integer, bulk or array frame between the type byte and CR.
/// `-9223372036854775808` is 20 bytes; a header longer than this without a CR is garbage,
/// and saying so early stops a peer that never sends CRLF from growing our buffer forever.
const MAX_NUMBER_LEN: usize = 20;

/// Smallest encoded frame (`+\r\n`): lets an incomplete array promise a lower bound of
/// three bytes for each element not read yet.
const MIN_FRAME_LEN: usize = 3;

/// A complete RESP2 frame, owned. Used by the built-in server and by tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `+OK\r\n`. Must not contain CR or LF; [`Frame::encode`] replaces them with spaces.
    Simple(Vec<u8>),
    /// `-ERR message\r\n`, without the `-`. Must not contain CR or LF, as for `Simple`.
    Error(Vec<u8>),
    /// `:42\r\n`.
    Integer(i64),
    /// `$5\r\nhello\r\n`: binary-safe.
    Bulk(Vec<u8>),
    /// The nil bulk string, `$-1\r\n`.
    Null,
    /// `*2\r\n...`: any frames, nested.
    Array(Vec<Frame>),
    /// The nil array, `*-1\r\n`.
    NullArray,
}

/// Bytes that can never become a valid RESP2 frame.
///
/// The `Display` texts are written after `ERR Protocol error: ` by the sink, so they read like
/// Redis's own protocol errors.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum RespError {
    /// A frame starts with a byte that is not one of `+ - : $ *`.
    #[error("invalid frame type byte {byte:#04x} ({shown})", byte = .0, shown = char::from(*.0).escape_default())]
    BadType(u8),
    /// A bulk or array length is not a decimal integer, or is negative other than `-1`.
    #[error("invalid length '{0}'")]
    BadLength(String),
    /// The payload of an integer frame (`:`) is not a decimal `i64`.
    #[error("invalid integer '{0}'")]
    BadInteger(String),
    /// A CR not followed by LF, or a bulk string's payload not followed by CRLF.
    #[error("expected CRLF")]
    MissingCrlf,
    /// Arrays nested deeper than [`MAX_DEPTH`].
    #[error("arrays nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// A bulk string longer than [`MAX_BULK_LEN`]; carries the announced length.
    #[error("bulk length {0} exceeds the {MAX_BULK_LEN} byte limit")]
    TooLarge(u64),
    /// An array with more than [`MAX_ARRAY_LEN`] elements; carries the announced count.
    #[error("array length {0} exceeds the {MAX_ARRAY_LEN} element limit")]
    TooManyElements(u64),
    /// A simple-string or error line with no CR in its first [`MAX_LINE_LEN`] bytes; carries
    /// the number of bytes seen.
    #[error("line of {0} bytes without CRLF exceeds the {MAX_LINE_LEN} byte limit")]
    LineTooLong(usize),
    /// An inline request line with no LF in its first [`MAX_INLINE_LEN`] bytes; carries the
    /// number of bytes seen.
    #[error("too big inline request ({0} bytes without a newline)")]
    InlineTooLong(usize),
    /// An element of a request array that is not a bulk string; carries its type byte.
    #[error("expected '$', got '{shown}'", shown = char::from(*.0).escape_default())]
    ExpectedBulk(u8),
}

/// What the load engine needs to know about one reply, without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind<'a> {
    /// Any non-error reply, including nil, integers and arrays (even arrays holding errors).
    Value,
    /// A top-level error reply.
    Error {
        /// The first word of its message, e.g. `b"ERR"`, `b"WRONGTYPE"`, `b"MOVED"`, which
        /// is what failures are counted by.
        kind: &'a [u8],
        /// The whole message after the `-`, CRLF excluded (`kind` is its prefix).
        message: &'a [u8],
    },
}

/// Outcome of scanning the front of a read buffer for one top-level reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan<'a> {
    /// A complete reply of `len` bytes.
    Reply {
        /// Whether the reply is an error, and its kind.
        kind: ReplyKind<'a>,
        /// Bytes the reply occupies at the front of the buffer.
        len: usize,
    },
    /// Not complete; do not scan again until the buffer holds at least `need` bytes in total.
    ///
    /// `need` is always more than the buffer's length and never more than the reply's full
    /// length. Once a bulk string's header is in, it is the exact end of that string, so a
    /// 10 MB value is scanned O(1) times, not once per read.
    Incomplete {
        /// Buffer length at which scanning again can make progress.
        need: usize,
    },
}

/// Progress of one reader over one frame starting at some offset.
enum Step {
    /// The frame ends at this offset (exclusive).
    Done(usize),
    /// The frame is incomplete; the buffer must reach at least this length.
    Need(usize),
}

/// Scans one top-level reply at the front of `buf`.
///
/// Allocates nothing. Handles nested arrays, nil bulk strings and arrays, integers, errors
/// and bulk strings of any size up to [`MAX_BULK_LEN`].
///
/// # Errors
///
/// A [`RespError`] when the front of `buf` can never become a valid reply: a bad type byte,
/// a malformed length or integer, a missing CRLF, nesting deeper than [`MAX_DEPTH`], or a
/// bulk string or array over its limit.
pub fn scan_reply(buf: &[u8]) -> Result<Scan<'_>, RespError> {
    match scan_at(buf, 0, 0)? {
        Step::Need(need) => Ok(Scan::Incomplete { need }),
        Step::Done(len) => {
            let kind = if buf[0] == b'-' {
                // The frame is `-message\r\n`; `len >= 3` since it was complete.
                let message = &buf[1..len - 2];
                ReplyKind::Error {
                    kind: first_word(message),
                    message,
                }
            } else {
                ReplyKind::Value
            };
            Ok(Scan::Reply { kind, len })
        }
    }
}

/// The top-level bulk string at the front of `buf` whose header is complete: (header
/// length, payload length). `None` for anything else (not a bulk, nil, header incomplete
/// or malformed; [`scan_reply`] says which). A reader can skip the payload without
/// buffering it and keep only the header and the final CRLF.
pub fn bulk_prefix(buf: &[u8]) -> Option<(usize, usize)> {
    if buf.first() != Some(&b'$') {
        return None;
    }
    match bulk_header(buf, 1) {
        Ok(Some((Some(len), start))) => Some((start, len)),
        _ => None,
    }
}

/// The error kind of an error message: everything before the first space.
fn first_word(message: &[u8]) -> &[u8] {
    match message.iter().position(|&b| b == b' ') {
        Some(end) => &message[..end],
        None => message,
    }
}

fn scan_at(buf: &[u8], pos: usize, depth: usize) -> Result<Step, RespError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(Step::Need(pos + 1));
    };
    match kind {
        b'+' | b'-' => Ok(match line_end(buf, pos + 1)? {
            Some(end) => Step::Done(end),
            None => Step::Need(buf.len() + 1),
        }),
        b':' => Ok(match integer(buf, pos + 1)? {
            Some((_, end)) => Step::Done(end),
            None => Step::Need(buf.len() + 1),
        }),
        b'$' => match bulk_header(buf, pos + 1)? {
            None => Ok(Step::Need(buf.len() + 1)),
            Some((None, end)) => Ok(Step::Done(end)),
            Some((Some(len), start)) => {
                let end = start.saturating_add(len);
                bulk_end(buf, end)
            }
        },
        b'*' => {
            let Some((count, mut at)) = array_header(buf, pos + 1, depth)? else {
                return Ok(Step::Need(buf.len() + 1));
            };
            let count = count.unwrap_or(0);
            for i in 0..count {
                match scan_at(buf, at, depth + 1)? {
                    Step::Done(end) => at = end,
                    Step::Need(need) => {
                        let rest = (count - i - 1).saturating_mul(MIN_FRAME_LEN);
                        return Ok(Step::Need(need.saturating_add(rest)));
                    }
                }
            }
            Ok(Step::Done(at))
        }
        other => Err(RespError::BadType(other)),
    }
}

/// Checks the CRLF after a bulk payload ending at `end`; the frame ends two bytes later.
fn bulk_end(buf: &[u8], end: usize) -> Result<Step, RespError> {
    let frame_end = end.saturating_add(2);
    if buf.len() < frame_end {
        return Ok(Step::Need(frame_end));
    }
    if &buf[end..frame_end] != b"\r\n" {
        return Err(RespError::MissingCrlf);
    }
    Ok(Step::Done(frame_end))
}

impl Frame {
    /// Parses one frame at the front of `buf`.
    ///
    /// Returns `Ok(None)` when the frame is incomplete (read more), or `Ok(Some((frame,
    /// consumed)))`. Never panics.
    ///
    /// # Errors
    ///
    /// A [`RespError`] when the front of `buf` can never become a valid frame, as for
    /// [`scan_reply`].
    pub fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, RespError> {
        parse_at(buf, 0, 0)
    }

    /// Appends the encoding of this frame to `out`.
    ///
    /// CR and LF inside `Simple` and `Error` cannot be represented; they are written as
    /// spaces (as Redis does for error messages) so the output always stays well-formed.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Simple(text) => {
                out.push(b'+');
                put_line(out, text);
            }
            Frame::Error(text) => {
                out.push(b'-');
                put_line(out, text);
            }
            Frame::Integer(n) => encode_integer(out, *n),
            Frame::Bulk(data) => encode_bulk(out, data),
            Frame::Null => out.extend_from_slice(b"$-1\r\n"),
            Frame::Array(items) => {
                encode_array_header(out, items.len());
                for item in items {
                    item.encode(out);
                }
            }
            Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
        }
    }
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> Result<Option<(Frame, usize)>, RespError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    match kind {
        b'+' | b'-' => {
            let Some(end) = line_end(buf, pos + 1)? else {
                return Ok(None);
            };
            let text = buf[pos + 1..end - 2].to_vec();
            let frame = if kind == b'+' {
                Frame::Simple(text)
            } else {
                Frame::Error(text)
            };
            Ok(Some((frame, end)))
        }
        b':' => Ok(integer(buf, pos + 1)?.map(|(n, end)| (Frame::Integer(n), end))),
        b'$' => match bulk_header(buf, pos + 1)? {
            None => Ok(None),
            Some((None, end)) => Ok(Some((Frame::Null, end))),
            Some((Some(len), start)) => {
                let end = start.saturating_add(len);
                match bulk_end(buf, end)? {
                    Step::Need(_) => Ok(None),
                    Step::Done(frame_end) => {
                        Ok(Some((Frame::Bulk(buf[start..end].to_vec()), frame_end)))
                    }
                }
            }
        },
        b'*' => {
            let Some((count, mut at)) = array_header(buf, pos + 1, depth)? else {
                return Ok(None);
            };
            let Some(count) = count else {
                return Ok(Some((Frame::NullArray, at)));
            };
            // Trust the announced count only as far as the bytes at hand can back it.
            let mut items = Vec::with_capacity(count.min((buf.len() - at) / MIN_FRAME_LEN));
            for _ in 0..count {
                let Some((item, end)) = parse_at(buf, at, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                at = end;
            }
            Ok(Some((Frame::Array(items), at)))
        }
        other => Err(RespError::BadType(other)),
    }
}

/// Finds the CRLF ending a line that starts at `start`; returns the offset just past the LF.
fn line_end(buf: &[u8], start: usize) -> Result<Option<usize>, RespError> {
    let rest = buf.get(start..).unwrap_or_default();
    let window = &rest[..rest.len().min(MAX_LINE_LEN + 1)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        if rest.len() > MAX_LINE_LEN {
            return Err(RespError::LineTooLong(rest.len()));
        }
        return Ok(None);
    };
    match rest.get(cr + 1) {
        None => Ok(None),
        Some(&b'\n') => Ok(Some(start + cr + 2)),
        Some(_) => Err(RespError::MissingCrlf),
    }
}

/// Outcome of reading a header line that must hold a number.
enum NumberLine<'a> {
    /// The digits (without CRLF) and the offset just past the LF.
    Complete(&'a [u8], usize),
    /// No CR yet, and few enough bytes that one may still come.
    Incomplete,
    /// More than [`MAX_NUMBER_LEN`] bytes without a CR; carries what was seen.
    TooLong(&'a [u8]),
}

fn number_line(buf: &[u8], start: usize) -> Result<NumberLine<'_>, RespError> {
    let rest = buf.get(start..).unwrap_or_default();
    let window = &rest[..rest.len().min(MAX_NUMBER_LEN + 1)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        return Ok(if rest.len() > MAX_NUMBER_LEN {
            NumberLine::TooLong(window)
        } else {
            NumberLine::Incomplete
        });
    };
    match rest.get(cr + 1) {
        None => Ok(NumberLine::Incomplete),
        Some(&b'\n') => Ok(NumberLine::Complete(&rest[..cr], start + cr + 2)),
        Some(_) => Err(RespError::MissingCrlf),
    }
}

/// Parses a strict decimal `i64`: an optional `-`, then digits only; no `+`, no spaces.
/// Returns `None` for anything else, including overflow. The sink parses arguments such as
/// `INCRBY`'s increment with it, so they are read exactly as the wire reads integers.
pub fn parse_integer(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulate negatively so that i64::MIN, whose magnitude has no positive i64, parses.
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative { Some(n) } else { n.checked_neg() }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Reads the `:` payload starting at `start`: the value and the offset past its CRLF.
fn integer(buf: &[u8], start: usize) -> Result<Option<(i64, usize)>, RespError> {
    match number_line(buf, start)? {
        NumberLine::Incomplete => Ok(None),
        NumberLine::TooLong(seen) => Err(RespError::BadInteger(lossy(seen))),
        NumberLine::Complete(digits, end) => match parse_integer(digits) {
            Some(n) => Ok(Some((n, end))),
            None => Err(RespError::BadInteger(lossy(digits))),
        },
    }
}

/// Reads a length header starting at `start`: `None` for `-1` (nil), else a non-negative
/// length, and the offset past the CRLF.
fn length(buf: &[u8], start: usize) -> Result<Option<(Option<u64>, usize)>, RespError> {
    match number_line(buf, start)? {
        NumberLine::Incomplete => Ok(None),
        NumberLine::TooLong(seen) => Err(RespError::BadLength(lossy(seen))),
        NumberLine::Complete(digits, end) => match parse_integer(digits) {
            Some(-1) => Ok(Some((None, end))),
            Some(n) if n >= 0 => Ok(Some((Some(n.unsigned_abs()), end))),
            _ => Err(RespError::BadLength(lossy(digits))),
        },
    }
}

/// Reads the header of a bulk string: its length (`None` for nil) and where its data starts.
fn bulk_header(buf: &[u8], start: usize) -> Result<Option<(Option<usize>, usize)>, RespError> {
    let Some((len, end)) = length(buf, start)? else {
        return Ok(None);
    };
    match len {
        None => Ok(Some((None, end))),
        Some(len) if len > MAX_BULK_LEN => Err(RespError::TooLarge(len)),
        // MAX_BULK_LEN fits in usize on every target Crest builds for.
        Some(len) => Ok(Some((
            Some(usize::try_from(len).unwrap_or(usize::MAX)),
            end,
        ))),
    }
}

/// Reads the header of an array at `depth`: its count (`None` for nil) and where its first
/// element starts.
fn array_header(
    buf: &[u8],
    start: usize,
    depth: usize,
) -> Result<Option<(Option<usize>, usize)>, RespError> {
    let Some((count, end)) = length(buf, start)? else {
        return Ok(None);
    };
    if depth >= MAX_DEPTH {
        return Err(RespError::TooDeep);
    }
    match count {
        None => Ok(Some((None, end))),
        Some(count) if count > MAX_ARRAY_LEN => Err(RespError::TooManyElements(count)),
        Some(count) => Ok(Some((
            Some(usize::try_from(count).unwrap_or(usize::MAX)),
            end,
        ))),
    }
}

/// A client request: its arguments, the command name first, and the bytes it took.
pub type ParsedRequest = (Vec<Vec<u8>>, usize);

/// Parses one client request at the front of `buf`, as the sink receives it.
///
/// A request is an array of bulk strings, or, when the first byte is not `*`, an inline
/// line (as typed in telnet) split on ASCII whitespace. Quotes in inline lines are not
/// interpreted, unlike Redis. Returns `Ok(None)` when the request is incomplete.
/// An empty line, `*0` and `*-1` give an empty argument list, which callers skip (Redis
/// does the same).
///
/// # Errors
///
/// A [`RespError`] when the request is malformed: an array element that is not a bulk
/// string, a bad or negative length, a bulk string or array over its limit, a missing CRLF,
/// or an inline line longer than [`MAX_INLINE_LEN`].
pub fn parse_request(buf: &[u8]) -> Result<Option<ParsedRequest>, RespError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf),
        Some(_) => parse_inline(buf),
    }
}

fn parse_multibulk(buf: &[u8]) -> Result<Option<ParsedRequest>, RespError> {
    let Some((count, mut at)) = length(buf, 1)? else {
        return Ok(None);
    };
    let count = match count {
        None | Some(0) => return Ok(Some((Vec::new(), at))),
        Some(count) if count > MAX_ARRAY_LEN => return Err(RespError::TooManyElements(count)),
        Some(count) => usize::try_from(count).unwrap_or(usize::MAX),
    };
    // Each argument takes at least six bytes (`$0\r\n\r\n`).
    let mut args = Vec::with_capacity(count.min((buf.len() - at) / 6));
    for _ in 0..count {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&other) => return Err(RespError::ExpectedBulk(other)),
        }
        let Some((len, start)) = bulk_header(buf, at + 1)? else {
            return Ok(None);
        };
        let Some(len) = len else {
            return Err(RespError::BadLength("-1".to_owned()));
        };
        let end = start.saturating_add(len);
        match bulk_end(buf, end)? {
            Step::Need(_) => return Ok(None),
            Step::Done(frame_end) => {
                args.push(buf[start..end].to_vec());
                at = frame_end;
            }
        }
    }
    Ok(Some((args, at)))
}

fn parse_inline(buf: &[u8]) -> Result<Option<ParsedRequest>, RespError> {
    let window = &buf[..buf.len().min(MAX_INLINE_LEN + 1)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_INLINE_LEN {
            return Err(RespError::InlineTooLong(buf.len()));
        }
        return Ok(None);
    };
    let args = buf[..lf]
        .split(|b| b.is_ascii_whitespace())
        .filter(|word| !word.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Ok(Some((args, lf + 1)))
}

/// Appends a command as a RESP array of bulk strings, e.g. `["GET", "k"]` as
/// `*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`. Reserves the exact size once; no formatting machinery.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let size = 1
        + decimal_len(args.len() as u64)
        + 2
        + args
            .iter()
            .map(|arg| 1 + decimal_len(arg.len() as u64) + 2 + arg.len() + 2)
            .sum::<usize>();
    out.reserve(size);
    encode_array_header(out, args.len());
    for arg in args {
        encode_bulk(out, arg);
    }
}

/// Appends a bulk string: `$<len>\r\n<data>\r\n`.
pub fn encode_bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    put_u64(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends an integer frame: `:<n>\r\n`.
pub fn encode_integer(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    if n < 0 {
        out.push(b'-');
    }
    put_u64(out, n.unsigned_abs());
    out.extend_from_slice(b"\r\n");
}

/// Appends an array header, `*<len>\r\n`; the caller appends `len` frames after it.
pub fn encode_array_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    put_u64(out, len as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends `text` and CRLF, writing any CR or LF in `text` as a space.
fn put_line(out: &mut Vec<u8>, text: &[u8]) {
    if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        out.extend(
            text.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    } else {
        out.extend_from_slice(text);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
fn put_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20]; // u64::MAX has 20 digits
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Number of decimal digits in `n`.
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encoded(frame: &Frame) -> Vec<u8> {
        let mut out = Vec::new();
        frame.encode(&mut out);
        out
    }

    fn scan_len(buf: &[u8]) -> usize {
        match scan_reply(buf) {
            Ok(Scan::Reply { len, .. }) => len,
            other => panic!("expected a complete reply, got {other:?}"),
        }
    }

    #[test]
    fn error_kind_is_the_first_word_of_the_message() {
        let cases: [(&[u8], &[u8]); 5] = [
            (
                b"-ERR unknown command 'FOO', with args beginning with: \r\n",
                b"ERR",
            ),
            (
                b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
                b"WRONGTYPE",
            ),
            (b"-MOVED 3999 127.0.0.1:6381\r\n", b"MOVED"),
            (b"-ERR\r\n", b"ERR"),
            (b"-\r\n", b""),
        ];
        for (reply, kind) in cases {
            assert_eq!(
                scan_reply(reply),
                Ok(Scan::Reply {
                    kind: ReplyKind::Error {
                        kind,
                        message: &reply[1..reply.len() - 2]
                    },
                    len: reply.len()
                }),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
    }

    #[test]
    fn errors_inside_arrays_are_values() {
        // EXEC replies carry per-command errors inside an array; the reply itself succeeded.
        let reply = b"*2\r\n+OK\r\n-ERR nope\r\n";
        assert_eq!(
            scan_reply(reply),
            Ok(Scan::Reply {
                kind: ReplyKind::Value,
                len: reply.len()
            })
        );
    }

    #[test]
    fn nil_bulk_nil_array_integer_and_empty_array_are_values() {
        for reply in [
            &b"$-1\r\n"[..],
            b"*-1\r\n",
            b":-42\r\n",
            b"*0\r\n",
            b"$0\r\n\r\n",
            b"+\r\n",
        ] {
            assert_eq!(
                scan_reply(reply),
                Ok(Scan::Reply {
                    kind: ReplyKind::Value,
                    len: reply.len()
                })
            );
        }
        assert_eq!(Frame::parse(b"$-1\r\n"), Ok(Some((Frame::Null, 5))));
        assert_eq!(Frame::parse(b"*-1\r\n"), Ok(Some((Frame::NullArray, 5))));
    }

    #[test]
    fn encode_command_matches_hand_written_resp() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"SET", b"key:1", b"hello world"]);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$11\r\nhello world\r\n"
        );

        out.clear();
        encode_command(&mut out, &[b"PING"]);
        assert_eq!(out, b"*1\r\n$4\r\nPING\r\n");

        out.clear();
        encode_command(&mut out, &[b"SET", b"", b"a\r\nb\0"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$5\r\na\r\nb\0\r\n");

        // Appends rather than overwrites, so pipelines can be built in one buffer.
        encode_command(&mut out, &[b"GET", b"k"]);
        assert!(out.ends_with(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"));
    }

    #[test]
    fn encode_command_reserves_exactly() {
        let value = vec![b'x'; 1234];
        let mut out = Vec::new();
        encode_command(&mut out, &[b"SET", b"k", &value]);
        assert_eq!(
            out.len(),
            "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1234\r\n\r\n".len() + 1234
        );
    }

    #[test]
    fn integers_at_the_extremes_round_trip() {
        for n in [i64::MIN, i64::MIN + 1, -1, 0, 1, 9, 10, i64::MAX] {
            let bytes = encoded(&Frame::Integer(n));
            assert_eq!(bytes, format!(":{n}\r\n").into_bytes());
            assert_eq!(
                Frame::parse(&bytes),
                Ok(Some((Frame::Integer(n), bytes.len())))
            );
        }
    }

    #[test]
    fn encode_writes_line_breaks_in_simple_strings_as_spaces() {
        assert_eq!(
            encoded(&Frame::Error(b"ERR a\r\nb".to_vec())),
            b"-ERR a  b\r\n"
        );
        assert_eq!(encoded(&Frame::Simple(b"x\ny".to_vec())), b"+x y\r\n");
    }

    #[test]
    fn ten_megabyte_bulk_needs_its_exact_length_once_the_header_is_in() {
        const SIZE: usize = 10 * 1024 * 1024;
        let mut reply = format!("${SIZE}\r\n").into_bytes();
        let header = reply.len();
        reply.resize(header + SIZE, b'v');
        reply.extend_from_slice(b"\r\n");
        let total = reply.len();

        assert_eq!(scan_reply(&reply[..3]), Ok(Scan::Incomplete { need: 4 }));
        assert_eq!(
            scan_reply(&reply[..header]),
            Ok(Scan::Incomplete { need: total })
        );
        assert_eq!(
            scan_reply(&reply[..total - 1]),
            Ok(Scan::Incomplete { need: total })
        );
        assert_eq!(scan_len(&reply), total);

        // Feed it as a socket would, 64 KB per read, scanning only when `need` is reached.
        let mut buf = Vec::new();
        let mut need = 0;
        let mut scans = 0;
        let mut found = None;
        for chunk in reply.chunks(64 * 1024) {
            buf.extend_from_slice(chunk);
            if buf.len() < need {
                continue;
            }
            scans += 1;
            match scan_reply(&buf) {
                Ok(Scan::Incomplete { need: more }) => need = more,
                Ok(Scan::Reply { len, .. }) => found = Some(len),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(found, Some(total));
        assert_eq!(
            scans, 2,
            "one scan to read the header, one when the value is in"
        );

        let (frame, consumed) = Frame::parse(&reply).unwrap().unwrap();
        assert_eq!(consumed, total);
        assert_eq!(frame, Frame::Bulk(vec![b'v'; SIZE]));
    }

    #[test]
    fn pipelined_replies_scan_one_after_another() {
        let replies: [&[u8]; 6] = [
            b"+OK\r\n",
            b"$5\r\nhello\r\n",
            b"-ERR unknown command\r\n",
            b":7\r\n",
            b"*2\r\n$1\r\na\r\n$-1\r\n",
            b"$-1\r\n",
        ];
        let buf = replies.concat();
        let mut at = 0;
        for reply in replies {
            let len = scan_len(&buf[at..]);
            assert_eq!(&buf[at..at + len], reply);
            at += len;
        }
        assert_eq!(at, buf.len());
        assert_eq!(scan_reply(&buf[at..]), Ok(Scan::Incomplete { need: 1 }));
    }

    #[test]
    fn malformed_input_is_an_error_that_quotes_it() {
        let cases: [(&[u8], RespError); 12] = [
            (b"HTTP/1.1 400\r\n", RespError::BadType(b'H')),
            (b"$abc\r\n", RespError::BadLength("abc".to_owned())),
            (b"$-2\r\n", RespError::BadLength("-2".to_owned())),
            (b"$\r\n", RespError::BadLength(String::new())),
            (b"*+1\r\n", RespError::BadLength("+1".to_owned())),
            (b":12a\r\n", RespError::BadInteger("12a".to_owned())),
            (
                b":9223372036854775808\r\n",
                RespError::BadInteger("9223372036854775808".to_owned()),
            ),
            (b"+OK\rX", RespError::MissingCrlf),
            (b"$3\r\nabcXY", RespError::MissingCrlf),
            (b"$536870913\r\n", RespError::TooLarge(MAX_BULK_LEN + 1)),
            (
                b"*2147483648\r\n",
                RespError::TooManyElements(MAX_ARRAY_LEN + 1),
            ),
            (
                b"$1111111111111111111111111",
                RespError::BadLength("111111111111111111111".to_owned()),
            ),
        ];
        for (input, error) in cases {
            let shown = String::from_utf8_lossy(input);
            assert_eq!(scan_reply(input), Err(error.clone()), "scan {shown}");
            assert_eq!(Frame::parse(input), Err(error), "parse {shown}");
        }
        // The largest allowed bulk is fine: just incomplete.
        assert_eq!(
            scan_reply(b"$536870912\r\n"),
            Ok(Scan::Incomplete {
                need: 12 + 536_870_912 + 2
            })
        );
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_an_error() {
        let nested = |depth: usize| {
            let mut buf = b"*1\r\n".repeat(depth);
            buf.extend_from_slice(b":1\r\n");
            buf
        };
        let ok = nested(MAX_DEPTH);
        assert_eq!(scan_len(&ok), ok.len());
        assert!(matches!(Frame::parse(&ok), Ok(Some((_, n))) if n == ok.len()));

        let deep = nested(MAX_DEPTH + 1);
        assert_eq!(scan_reply(&deep), Err(RespError::TooDeep));
        assert_eq!(Frame::parse(&deep), Err(RespError::TooDeep));
        // Far deeper input fails the same way instead of overflowing the stack.
        assert_eq!(scan_reply(&nested(100_000)), Err(RespError::TooDeep));
    }

    /// A line with no CRLF is read as incomplete up to the cap, and is garbage past it: a
    /// peer that never ends its line cannot make a reader buffer forever. A 1 MB error
    /// message is still an error reply.
    #[test]
    fn a_line_longer_than_the_cap_is_an_error_and_a_long_error_is_fine() {
        let mut endless = b"+".to_vec();
        endless.resize(1 + MAX_LINE_LEN, b'x');
        assert!(matches!(scan_reply(&endless), Ok(Scan::Incomplete { .. })));
        endless.push(b'x');
        assert_eq!(
            scan_reply(&endless),
            Err(RespError::LineTooLong(MAX_LINE_LEN + 1))
        );
        assert_eq!(
            Frame::parse(&endless),
            Err(RespError::LineTooLong(MAX_LINE_LEN + 1))
        );
        endless[0] = b'-';
        assert_eq!(
            scan_reply(&endless),
            Err(RespError::LineTooLong(MAX_LINE_LEN + 1))
        );
        let mut long = b"-BIG ".to_vec();
        long.resize(1_000_000, b'e');
        long.extend_from_slice(b"\r\n");
        match scan_reply(&long) {
            Ok(Scan::Reply {
                kind: ReplyKind::Error { kind, message },
                len,
            }) => {
                assert_eq!(kind, b"BIG");
                assert_eq!(message.len(), 1_000_000 - 1);
                assert_eq!(len, long.len());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bulk_prefix_finds_a_top_level_bulk_header_only() {
        assert_eq!(bulk_prefix(b"$10\r\nabc"), Some((5, 10)));
        assert_eq!(bulk_prefix(b"$536870912\r\n"), Some((12, 536_870_912)));
        assert_eq!(bulk_prefix(b"$0\r\n\r\n"), Some((4, 0)));
        assert_eq!(bulk_prefix(b"$10\r"), None, "header incomplete");
        assert_eq!(bulk_prefix(b"$-1\r\n"), None, "nil");
        assert_eq!(bulk_prefix(b"*1\r\n$3\r\nabc\r\n"), None, "inside an array");
        assert_eq!(bulk_prefix(b"$x\r\n"), None, "malformed");
        assert_eq!(bulk_prefix(b"$536870913\r\n"), None, "over the limit");
        assert_eq!(bulk_prefix(b""), None);
    }

    #[test]
    fn huge_announced_array_with_few_bytes_is_incomplete_not_an_allocation() {
        let buf = b"*2000000000\r\n:1\r\n";
        assert_eq!(Frame::parse(buf), Ok(None));
        assert_eq!(
            scan_reply(buf),
            Ok(Scan::Incomplete {
                need: buf.len() + 1 + 3 * (2_000_000_000 - 2)
            })
        );
    }

    #[test]
    fn parse_request_reads_arrays_of_bulk_strings() {
        let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        let (args, used) = parse_request(buf).unwrap().unwrap();
        assert_eq!(args, [b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(
            parse_request(&buf[used..]),
            Ok(Some((vec![b"PING".to_vec()], buf.len() - used)))
        );
    }

    #[test]
    fn parse_request_reads_inline_lines() {
        assert_eq!(
            parse_request(b"PING\r\n"),
            Ok(Some((vec![b"PING".to_vec()], 6)))
        );
        assert_eq!(
            parse_request(b"set  a\tb\nGET a\n"),
            Ok(Some((
                vec![b"set".to_vec(), b"a".to_vec(), b"b".to_vec()],
                9
            )))
        );
        assert_eq!(parse_request(b"\r\n"), Ok(Some((vec![], 2))));
        assert_eq!(parse_request(b"PIN"), Ok(None));
        let long = vec![b'a'; MAX_INLINE_LEN + 1];
        assert_eq!(
            parse_request(&long),
            Err(RespError::InlineTooLong(MAX_INLINE_LEN + 1))
        );
    }

    #[test]
    fn parse_request_treats_empty_arrays_as_empty_commands() {
        assert_eq!(parse_request(b"*0\r\n"), Ok(Some((vec![], 4))));
        assert_eq!(parse_request(b"*-1\r\n"), Ok(Some((vec![], 5))));
    }

    #[test]
    fn parse_request_rejects_what_redis_rejects() {
        assert_eq!(
            parse_request(b"*1\r\n:1\r\n"),
            Err(RespError::ExpectedBulk(b':'))
        );
        assert_eq!(
            parse_request(b"*1\r\n$-1\r\n"),
            Err(RespError::BadLength("-1".to_owned()))
        );
        assert_eq!(
            parse_request(b"*x\r\n"),
            Err(RespError::BadLength("x".to_owned()))
        );
        assert_eq!(
            parse_request(b"*1\r\n$600000000\r\n"),
            Err(RespError::TooLarge(600_000_000))
        );
    }

    #[test]
    fn protocol_errors_read_like_redis() {
        assert_eq!(
            RespError::ExpectedBulk(b':').to_string(),
            "expected '$', got ':'"
        );
        assert_eq!(
            RespError::BadType(b'\n').to_string(),
            "invalid frame type byte 0x0a (\\n)"
        );
    }

    /// Simple and error text: anything but CR and LF, which RESP2 cannot carry there.
    fn line_text() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'),
            0..24,
        )
    }

    fn frame() -> impl Strategy<Value = Frame> {
        let leaf = prop_oneof![
            line_text().prop_map(Frame::Simple),
            line_text().prop_map(Frame::Error),
            any::<i64>().prop_map(Frame::Integer),
            prop::collection::vec(any::<u8>(), 0..64).prop_map(Frame::Bulk),
            Just(Frame::Null),
            Just(Frame::NullArray),
        ];
        // Depth 4 and 8 elements per array cover nesting without making cases huge.
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop::collection::vec(inner, 0..8).prop_map(Frame::Array)
        })
    }

    /// Bytes that are mostly RESP punctuation and digits, so garbage reaches deep paths.
    fn resp_ish() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            prop::sample::select(b"+-:$*\r\n0123456789".to_vec()),
            any::<u8>(),
        ];
        prop::collection::vec(byte, 0..128)
    }

    proptest! {
        #[test]
        fn encode_then_parse_is_identity(frame in frame(), trailing in prop::collection::vec(any::<u8>(), 0..8)) {
            let mut buf = encoded(&frame);
            let len = buf.len();
            buf.extend_from_slice(&trailing);
            prop_assert_eq!(Frame::parse(&buf), Ok(Some((frame.clone(), len))));
            let kind = match &frame {
                Frame::Error(message) => ReplyKind::Error { kind: first_word(message), message },
                _ => ReplyKind::Value,
            };
            prop_assert_eq!(scan_reply(&buf), Ok(Scan::Reply { kind, len }));
        }

        #[test]
        fn every_strict_prefix_is_incomplete(frame in frame()) {
            let buf = encoded(&frame);
            for split in 0..buf.len() {
                let prefix = &buf[..split];
                prop_assert_eq!(Frame::parse(prefix), Ok(None), "split {}", split);
                match scan_reply(prefix) {
                    Ok(Scan::Incomplete { need }) => {
                        prop_assert!(need > split && need <= buf.len(), "need {} at split {} of {}", need, split, buf.len());
                    }
                    other => prop_assert!(false, "split {}: {:?}", split, other),
                }
            }
        }

        #[test]
        fn pipelined_frames_scan_one_after_another(frames in prop::collection::vec(frame(), 1..6)) {
            let mut buf = Vec::new();
            let mut ends = Vec::new();
            for frame in &frames {
                frame.encode(&mut buf);
                ends.push(buf.len());
            }
            let mut at = 0;
            for (frame, end) in frames.iter().zip(ends) {
                prop_assert_eq!(scan_len(&buf[at..]), end - at);
                prop_assert_eq!(Frame::parse(&buf[at..]), Ok(Some((frame.clone(), end - at))));
                at = end;
            }
        }

        #[test]
        fn garbage_never_panics_and_both_readers_agree(bytes in prop_oneof![resp_ish(), prop::collection::vec(any::<u8>(), 0..128)]) {
            let parsed = Frame::parse(&bytes);
            let scanned = scan_reply(&bytes);
            match (&parsed, &scanned) {
                (Ok(Some((_, consumed))), Ok(Scan::Reply { len, .. })) => {
                    prop_assert_eq!(consumed, len);
                    prop_assert!(*len <= bytes.len());
                }
                (Ok(None), Ok(Scan::Incomplete { need })) => prop_assert!(*need > bytes.len()),
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                _ => prop_assert!(false, "parse {:?} but scan {:?}", parsed, scanned),
            }
            if let Ok(Some((_, used))) = parse_request(&bytes) {
                prop_assert!(used > 0 && used <= bytes.len());
            }
        }

        #[test]
        fn encode_command_parses_back(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..32), 1..8)) {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let mut buf = Vec::new();
            encode_command(&mut buf, &refs);
            prop_assert_eq!(parse_request(&buf), Ok(Some((args.clone(), buf.len()))));
            let as_frame = Frame::Array(args.iter().cloned().map(Frame::Bulk).collect());
            prop_assert_eq!(encoded(&as_frame), buf.clone());
            for split in 0..buf.len() {
                prop_assert_eq!(parse_request(&buf[..split]), Ok(None), "split {}", split);
            }
        }
    }
}

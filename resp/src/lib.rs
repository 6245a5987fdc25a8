//! RESP2 and RESP3 codec: the wire format Crest speaks to Redis-protocol servers.
//!
//! Two readers over the same grammar, for two different users:
//! - [`scan_reply`] is the load engine's hot path. It finds where one reply ends, whether it
//!   is an error or a nil, and whether it is a RESP3 push (never a reply to a request),
//!   without allocating, and tells the caller how many bytes to wait for so a large value is
//!   not rescanned on every read.
//! - [`Frame::parse`] builds an owned tree; the built-in sink and the tests use it.
//!
//! [`parse_request`] reads what clients send (arrays of bulk strings, or telnet-style inline
//! lines), and [`encode_command`] writes it.
//!
//! Every RESP3 type is read: null `_`, boolean `#`, double `,`, big number `(`, blob error
//! `!`, verbatim string `=`, map `%` (two frames per entry), set `~`, attribute `|` and push
//! `>`. An attribute describes the frame after it and is not a frame of its own: it never
//! counts as an element of an aggregate, and at the top level the frame after it is the
//! reply. A push at the top level is reported as [`Scan::Push`]: servers send them out of
//! band (client-side caching invalidations, pub/sub), so the engine never pairs one with a
//! request. Streamed strings and aggregates (`$?`, `*?`, `;`, `.`), which no Redis or
//! Valkey sends, are refused ([`RespError::Streamed`]).
//!
//! A frame that is not complete yet is "read more" (`Ok(None)` / [`Scan::Incomplete`]), never
//! an error; bytes that can never become a valid frame are a [`RespError`]. No input panics.
//! Limits follow Redis: bulk strings up to 512 MB (`proto-max-bulk-len`), inline requests up
//! to 64 KB (`PROTO_INLINE_MAX_SIZE`), aggregates up to `i32::MAX` elements (`processMultibulkBuffer`).
//! A simple-string, error, double or big-number line may be at most [`MAX_LINE_LEN`] long, so a peer that never
//! sends CRLF cannot grow a reader's buffer forever. What a reader may *buffer* in all (an
//! array of `i32::MAX` small elements is legal but 6 GB) is the reader's own cap: the engine
//! bounds it per connection and per shard, and [`bulk_prefix`] lets it stream a large
//! top-level bulk string past without buffering it.

use thiserror::Error;

/// Largest bulk string accepted, in bytes: Redis's default `proto-max-bulk-len` (512 MB).
pub const MAX_BULK_LEN: u64 = 512 * 1024 * 1024;

/// Largest aggregate accepted, in elements (entries, for maps and attributes): Redis
/// rejects multibulk lengths above `INT_MAX`.
pub const MAX_ARRAY_LEN: u64 = i32::MAX as u64;

/// Deepest nesting of aggregates (and attributes) accepted. Real replies nest two or three
/// levels (EXEC of SCAN); the limit keeps a hostile peer from driving the recursive readers
/// off the stack.
pub const MAX_DEPTH: usize = 64;

/// Longest inline request line, in bytes: Redis's `PROTO_INLINE_MAX_SIZE` (64 KB).
pub const MAX_INLINE_LEN: usize = 64 * 1024;

/// Longest simple-string, error, double or big-number line, CRLF excluded: 4 MiB. Real
/// servers send lines of a few hundred bytes (error messages, `+OK`); 4 MiB keeps a 1 MB
/// error message legal.
pub const MAX_LINE_LEN: usize = 4 * 1024 * 1024;

/// Longest header of an integer, blob or aggregate frame between the type byte and CR.
/// `-9223372036854775808` is 20 bytes; a header longer than this without a CR is garbage,
/// and saying so early stops a peer that never sends CRLF from growing our buffer forever.
const MAX_NUMBER_LEN: usize = 20;

/// Smallest encoded frame (`+\r\n`): lets an incomplete aggregate promise a lower bound of
/// three bytes for each element not read yet.
const MIN_FRAME_LEN: usize = 3;

/// A complete RESP2 or RESP3 frame, owned. Used by the built-in server and by tests.
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
    /// The RESP2 nil bulk string, `$-1\r\n`.
    NullBulk,
    /// `*2\r\n...`: any frames, nested.
    Array(Vec<Frame>),
    /// The RESP2 nil array, `*-1\r\n`.
    NullArray,
    /// RESP3 null, `_\r\n` (what a RESP3 `GET` of a missing key answers).
    Null,
    /// RESP3 boolean, `#t\r\n` / `#f\r\n`.
    Boolean(bool),
    /// RESP3 double, `,3.14\r\n`, kept as its text (`inf`, `-inf`, `nan`, `1e5` are legal
    /// forms): exactly what the server sent. No CR or LF, as for `Simple`.
    Double(Vec<u8>),
    /// RESP3 big number, `(3492890328409238509324850943850943825024385\r\n`, as its digits.
    /// No CR or LF, as for `Simple`.
    BigNumber(Vec<u8>),
    /// RESP3 blob error, `!21\r\nSYNTAX invalid syntax\r\n`: an error whose message is
    /// binary-safe.
    BlobError(Vec<u8>),
    /// RESP3 verbatim string, `=15\r\ntxt:Some string\r\n`: a three-byte format (`txt`,
    /// `mkd`) and the text.
    Verbatim {
        /// `txt` or `mkd`.
        format: [u8; 3],
        /// The text after `format:`.
        data: Vec<u8>,
    },
    /// RESP3 map, `%2\r\n` then key, value, key, value.
    Map(Vec<(Frame, Frame)>),
    /// RESP3 set, `~3\r\n` then its members.
    Set(Vec<Frame>),
    /// RESP3 push, `>2\r\n` then its elements: out-of-band data (the first element names
    /// its kind: `invalidate`, `message`...).
    Push(Vec<Frame>),
    /// RESP3 attribute, `|1\r\n` then key-value pairs, and then the frame they describe.
    Attribute {
        /// The attribute's entries.
        attrs: Vec<(Frame, Frame)>,
        /// The frame that follows them.
        value: Box<Frame>,
    },
}

/// Bytes that can never become a valid RESP frame.
///
/// The `Display` texts are written after `ERR Protocol error: ` by the sink, so they read like
/// Redis's own protocol errors.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum RespError {
    /// A frame starts with a byte that is not one of `+ - : $ *` (RESP2) or
    /// `_ # , ( ! = % ~ | >` (RESP3).
    #[error("invalid frame type byte {byte:#04x} ({shown})", byte = .0, shown = char::from(*.0).escape_default())]
    BadType(u8),
    /// A blob or aggregate length is not a decimal integer, or is negative other than a
    /// bulk's or array's `-1`.
    #[error("invalid length '{0}'")]
    BadLength(String),
    /// The payload of an integer frame (`:`) is not a decimal `i64`.
    #[error("invalid integer '{0}'")]
    BadInteger(String),
    /// A boolean (`#`) that is not `t` or `f`, or a null (`_`) with a payload; carries the
    /// type byte and what followed it.
    #[error("invalid '{shown}' frame '{1}'", shown = char::from(*.0).escape_default())]
    BadValue(u8, String),
    /// A verbatim string (`=`) whose payload does not begin with a three-byte format and `:`.
    #[error("verbatim string without a 'fmt:' prefix")]
    BadVerbatim,
    /// A streamed RESP3 string or aggregate (`$?`, `*?`, `;`, `.`): no Redis or Valkey sends
    /// them, and Crest does not read them.
    #[error("streamed RESP3 strings and aggregates are not supported")]
    Streamed,
    /// A CR not followed by LF, or a blob's payload not followed by CRLF.
    #[error("expected CRLF")]
    MissingCrlf,
    /// Aggregates (or attributes) nested deeper than [`MAX_DEPTH`].
    #[error("arrays nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// A blob longer than [`MAX_BULK_LEN`]; carries the announced length.
    #[error("bulk length {0} exceeds the {MAX_BULK_LEN} byte limit")]
    TooLarge(u64),
    /// An aggregate with more than [`MAX_ARRAY_LEN`] elements; carries the announced count.
    #[error("array length {0} exceeds the {MAX_ARRAY_LEN} element limit")]
    TooManyElements(u64),
    /// A line frame with no CR in its first [`MAX_LINE_LEN`] bytes; carries the number of
    /// bytes seen.
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
    /// Any non-error, non-nil reply, including integers and aggregates (even arrays holding
    /// errors or nils).
    Value,
    /// A nil: `$-1` or `*-1` (RESP2), `_` (RESP3): what `GET` answers for a missing key.
    Nil,
    /// A top-level error reply (`-` or a RESP3 blob error `!`).
    Error {
        /// The first word of its message, e.g. `b"ERR"`, `b"WRONGTYPE"`, `b"MOVED"`, which
        /// is what failures are counted by.
        kind: &'a [u8],
        /// The whole message after the `-` (the payload of a `!`), CRLF excluded (`kind` is
        /// its prefix).
        message: &'a [u8],
    },
}

/// Outcome of scanning the front of a read buffer for one top-level frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan<'a> {
    /// A complete reply of `len` bytes (attributes before it included).
    Reply {
        /// Whether the reply is an error or a nil, and the error's kind.
        kind: ReplyKind<'a>,
        /// Bytes the reply occupies at the front of the buffer.
        len: usize,
        /// Nil elements directly inside a top-level array (`MGET`'s missing keys); 0 for
        /// anything else.
        nils: u32,
    },
    /// A complete RESP3 push frame of `len` bytes: not a reply to any request.
    Push {
        /// Bytes the push occupies at the front of the buffer.
        len: usize,
        /// Its first element is `invalidate` (client-side caching).
        invalidate: bool,
    },
    /// Not complete; do not scan again until the buffer holds at least `need` bytes in total.
    ///
    /// `need` is always more than the buffer's length and never more than the frame's full
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

/// Scans one top-level frame at the front of `buf`: a reply, or a RESP3 push.
///
/// Allocates nothing. Handles every RESP2 and RESP3 type, nested, and bulk strings of any
/// size up to [`MAX_BULK_LEN`]. Attributes before the reply are skipped (their bytes count
/// in its `len`).
///
/// # Errors
///
/// A [`RespError`] when the front of `buf` can never become a valid frame: a bad type byte,
/// a malformed length, integer, boolean, null or verbatim string, a missing CRLF, nesting
/// deeper than [`MAX_DEPTH`], a blob or aggregate over its limit, or a streamed type.
pub fn scan_reply(buf: &[u8]) -> Result<Scan<'_>, RespError> {
    // Attributes first: each describes the frame after it (iterated, not recursed, but
    // counted as nesting so both readers agree on how many are allowed).
    let mut at = 0;
    let mut depth = 0;
    while buf.get(at) == Some(&b'|') {
        match attribute_entries(buf, at, depth)? {
            Step::Need(need) => return Ok(Scan::Incomplete { need }),
            Step::Done(end) => at = end,
        }
        depth += 1;
    }
    let mut nils = 0;
    let step = if buf.get(at) == Some(&b'*') {
        scan_array_counting_nils(buf, at, depth, &mut nils)?
    } else {
        scan_at(buf, at, depth)?
    };
    let end = match step {
        Step::Need(need) => return Ok(Scan::Incomplete { need }),
        Step::Done(end) => end,
    };
    // The frame at `at` is complete: it is at least three bytes.
    let kind = match buf[at] {
        b'-' => {
            let message = &buf[at + 1..end - 2];
            ReplyKind::Error {
                kind: first_word(message),
                message,
            }
        }
        b'!' => {
            // Header `!<len>\r\n`; the payload is the last `len` bytes before the CRLF.
            let message = match blob_header(buf, at + 1, b'!') {
                Ok(Some((Some(len), _))) => &buf[end - 2 - len..end - 2],
                _ => &buf[end - 2..end - 2],
            };
            ReplyKind::Error {
                kind: first_word(message),
                message,
            }
        }
        b'_' => ReplyKind::Nil,
        b'$' | b'*' if buf[at + 1] == b'-' => ReplyKind::Nil,
        b'>' => {
            return Ok(Scan::Push {
                len: end,
                invalidate: push_is_invalidate(&buf[at..end]),
            });
        }
        _ => ReplyKind::Value,
    };
    Ok(Scan::Reply {
        kind,
        len: end,
        nils,
    })
}

/// Whether a complete push frame's first element is the string `invalidate`.
fn push_is_invalidate(push: &[u8]) -> bool {
    let Some(first) = push
        .iter()
        .position(|&b| b == b'\n')
        .map(|lf| &push[lf + 1..])
    else {
        return false;
    };
    first.starts_with(b"$10\r\ninvalidate\r\n") || first.starts_with(b"+invalidate\r\n")
}

/// The top-level bulk string at the front of `buf` whose header is complete: (header
/// length, payload length). `None` for anything else (not a bulk, nil, header incomplete
/// or malformed; [`scan_reply`] says which). A reader can skip the payload without
/// buffering it and keep only the header and the final CRLF.
pub fn bulk_prefix(buf: &[u8]) -> Option<(usize, usize)> {
    if buf.first() != Some(&b'$') {
        return None;
    }
    match blob_header(buf, 1, b'$') {
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

/// How many frames an aggregate of type `kind` with `count` entries holds.
fn children(kind: u8, count: usize) -> usize {
    if matches!(kind, b'%' | b'|') {
        count.saturating_mul(2)
    } else {
        count
    }
}

/// Scans `n` frames from `at` at `depth`; nil frames directly among them are added to
/// `nils` when given.
fn scan_children(
    buf: &[u8],
    mut at: usize,
    n: usize,
    depth: usize,
    mut nils: Option<&mut u32>,
) -> Result<Step, RespError> {
    for i in 0..n {
        match scan_at(buf, at, depth)? {
            Step::Done(end) => {
                if let Some(nils) = nils.as_deref_mut()
                    && is_nil(&buf[at..end])
                {
                    *nils = nils.saturating_add(1);
                }
                at = end;
            }
            Step::Need(need) => {
                let rest = (n - i - 1).saturating_mul(MIN_FRAME_LEN);
                return Ok(Step::Need(need.saturating_add(rest)));
            }
        }
    }
    Ok(Step::Done(at))
}

/// Whether a complete frame is a nil (`$-1`, `*-1`, `_`).
fn is_nil(frame: &[u8]) -> bool {
    frame == b"_\r\n" || frame == b"$-1\r\n" || frame == b"*-1\r\n"
}

/// A top-level array, counting its nil elements into `nils`.
fn scan_array_counting_nils(
    buf: &[u8],
    pos: usize,
    depth: usize,
    nils: &mut u32,
) -> Result<Step, RespError> {
    let Some((count, at)) = aggregate_header(buf, pos, depth)? else {
        return Ok(Step::Need(buf.len() + 1));
    };
    scan_children(buf, at, count.unwrap_or(0), depth + 1, Some(nils))
}

/// The entries of the attribute at `pos` (not the frame it describes): where they end.
fn attribute_entries(buf: &[u8], pos: usize, depth: usize) -> Result<Step, RespError> {
    let Some((count, at)) = aggregate_header(buf, pos, depth)? else {
        return Ok(Step::Need(buf.len() + 1));
    };
    scan_children(buf, at, children(b'|', count.unwrap_or(0)), depth + 1, None)
}

fn scan_at(buf: &[u8], pos: usize, depth: usize) -> Result<Step, RespError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(Step::Need(pos + 1));
    };
    match kind {
        b'+' | b'-' | b',' | b'(' => Ok(match line_end(buf, pos + 1)? {
            Some(end) => Step::Done(end),
            None => Step::Need(buf.len() + 1),
        }),
        b'#' | b'_' => Ok(match short_value(buf, pos)? {
            Some((_, end)) => Step::Done(end),
            None => Step::Need(buf.len() + 1),
        }),
        b':' => Ok(match integer(buf, pos + 1)? {
            Some((_, end)) => Step::Done(end),
            None => Step::Need(buf.len() + 1),
        }),
        b'$' | b'!' | b'=' => match blob_header(buf, pos + 1, kind)? {
            None => Ok(Step::Need(buf.len() + 1)),
            Some((None, end)) => Ok(Step::Done(end)),
            Some((Some(len), start)) => {
                let end = start.saturating_add(len);
                let step = bulk_end(buf, end)?;
                if kind == b'=' && matches!(step, Step::Done(_)) {
                    verbatim_format(&buf[start..end])?;
                }
                Ok(step)
            }
        },
        b'*' | b'%' | b'~' | b'>' => {
            let Some((count, at)) = aggregate_header(buf, pos, depth)? else {
                return Ok(Step::Need(buf.len() + 1));
            };
            scan_children(buf, at, children(kind, count.unwrap_or(0)), depth + 1, None)
        }
        b'|' => match attribute_entries(buf, pos, depth)? {
            Step::Need(need) => Ok(Step::Need(need)),
            // The frame the attribute describes, one level deeper.
            Step::Done(end) => scan_at(buf, end, depth + 1),
        },
        b';' | b'.' => Err(RespError::Streamed),
        other => Err(RespError::BadType(other)),
    }
}

/// A boolean (`#t`, `#f`) or null (`_`) at `pos`: its value (true for `t` and for null)
/// and the offset past its CRLF; None while incomplete.
fn short_value(buf: &[u8], pos: usize) -> Result<Option<(bool, usize)>, RespError> {
    let kind = buf[pos];
    match number_line(buf, pos + 1)? {
        NumberLine::Incomplete => Ok(None),
        NumberLine::TooLong(seen) => Err(RespError::BadValue(kind, lossy(seen))),
        NumberLine::Complete(text, end) => match (kind, text) {
            (b'#', b"t") => Ok(Some((true, end))),
            (b'#', b"f") => Ok(Some((false, end))),
            (b'_', b"") => Ok(Some((true, end))),
            _ => Err(RespError::BadValue(kind, lossy(text))),
        },
    }
}

/// Checks a verbatim string's payload: `fmt:` and the text.
fn verbatim_format(payload: &[u8]) -> Result<[u8; 3], RespError> {
    match payload {
        [a, b, c, b':', ..] => Ok([*a, *b, *c]),
        _ => Err(RespError::BadVerbatim),
    }
}

/// Checks the CRLF after a blob payload ending at `end`; the frame ends two bytes later.
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
    /// CR and LF inside `Simple`, `Error`, `Double` and `BigNumber` cannot be represented;
    /// they are written as spaces (as Redis does for error messages) so the output always
    /// stays well-formed.
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
            Frame::NullBulk => out.extend_from_slice(b"$-1\r\n"),
            Frame::Array(items) => {
                encode_array_header(out, items.len());
                for item in items {
                    item.encode(out);
                }
            }
            Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Frame::Null => out.extend_from_slice(b"_\r\n"),
            Frame::Boolean(b) => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Frame::Double(text) => {
                out.push(b',');
                put_line(out, text);
            }
            Frame::BigNumber(text) => {
                out.push(b'(');
                put_line(out, text);
            }
            Frame::BlobError(data) => encode_blob(out, b'!', &[data]),
            Frame::Verbatim { format, data } => encode_blob(out, b'=', &[format, b":", data]),
            Frame::Map(entries) => {
                encode_header(out, b'%', entries.len());
                for (k, v) in entries {
                    k.encode(out);
                    v.encode(out);
                }
            }
            Frame::Set(items) | Frame::Push(items) => {
                let kind = if matches!(self, Frame::Set(_)) {
                    b'~'
                } else {
                    b'>'
                };
                encode_header(out, kind, items.len());
                for item in items {
                    item.encode(out);
                }
            }
            Frame::Attribute { attrs, value } => {
                encode_header(out, b'|', attrs.len());
                for (k, v) in attrs {
                    k.encode(out);
                    v.encode(out);
                }
                value.encode(out);
            }
        }
    }
}

/// Appends a blob frame of type `kind` whose payload is `parts` in order.
fn encode_blob(out: &mut Vec<u8>, kind: u8, parts: &[&[u8]]) {
    out.push(kind);
    put_u64(out, parts.iter().map(|p| p.len() as u64).sum());
    out.extend_from_slice(b"\r\n");
    for p in parts {
        out.extend_from_slice(p);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends an aggregate header `<kind><len>\r\n`.
fn encode_header(out: &mut Vec<u8>, kind: u8, len: usize) {
    out.push(kind);
    put_u64(out, len as u64);
    out.extend_from_slice(b"\r\n");
}

/// Parses `n` frames from `at` at `depth`; None while incomplete.
fn parse_children(
    buf: &[u8],
    mut at: usize,
    n: usize,
    depth: usize,
) -> Result<Option<(Vec<Frame>, usize)>, RespError> {
    // Trust the announced count only as far as the bytes at hand can back it.
    let mut items = Vec::with_capacity(n.min(buf.len().saturating_sub(at) / MIN_FRAME_LEN));
    for _ in 0..n {
        let Some((item, end)) = parse_at(buf, at, depth)? else {
            return Ok(None);
        };
        items.push(item);
        at = end;
    }
    Ok(Some((items, at)))
}

/// Pairs up a map's or attribute's frames: key, value, key, value.
fn pairs(items: Vec<Frame>) -> Vec<(Frame, Frame)> {
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> Result<Option<(Frame, usize)>, RespError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    match kind {
        b'+' | b'-' | b',' | b'(' => {
            let Some(end) = line_end(buf, pos + 1)? else {
                return Ok(None);
            };
            let text = buf[pos + 1..end - 2].to_vec();
            let frame = match kind {
                b'+' => Frame::Simple(text),
                b'-' => Frame::Error(text),
                b',' => Frame::Double(text),
                _ => Frame::BigNumber(text),
            };
            Ok(Some((frame, end)))
        }
        b'#' | b'_' => Ok(short_value(buf, pos)?.map(|(v, end)| {
            let frame = if kind == b'#' {
                Frame::Boolean(v)
            } else {
                Frame::Null
            };
            (frame, end)
        })),
        b':' => Ok(integer(buf, pos + 1)?.map(|(n, end)| (Frame::Integer(n), end))),
        b'$' | b'!' | b'=' => match blob_header(buf, pos + 1, kind)? {
            None => Ok(None),
            Some((None, end)) => Ok(Some((Frame::NullBulk, end))),
            Some((Some(len), start)) => {
                let end = start.saturating_add(len);
                match bulk_end(buf, end)? {
                    Step::Need(_) => Ok(None),
                    Step::Done(frame_end) => {
                        let payload = &buf[start..end];
                        let frame = match kind {
                            b'$' => Frame::Bulk(payload.to_vec()),
                            b'!' => Frame::BlobError(payload.to_vec()),
                            _ => Frame::Verbatim {
                                format: verbatim_format(payload)?,
                                data: payload[4..].to_vec(),
                            },
                        };
                        Ok(Some((frame, frame_end)))
                    }
                }
            }
        },
        b'*' | b'%' | b'~' | b'>' => {
            let Some((count, at)) = aggregate_header(buf, pos, depth)? else {
                return Ok(None);
            };
            let Some(count) = count else {
                return Ok(Some((Frame::NullArray, at)));
            };
            let Some((items, end)) = parse_children(buf, at, children(kind, count), depth + 1)?
            else {
                return Ok(None);
            };
            let frame = match kind {
                b'*' => Frame::Array(items),
                b'%' => Frame::Map(pairs(items)),
                b'~' => Frame::Set(items),
                _ => Frame::Push(items),
            };
            Ok(Some((frame, end)))
        }
        b'|' => {
            let Some((count, at)) = aggregate_header(buf, pos, depth)? else {
                return Ok(None);
            };
            let n = children(kind, count.unwrap_or(0));
            let Some((items, at)) = parse_children(buf, at, n, depth + 1)? else {
                return Ok(None);
            };
            let Some((value, end)) = parse_at(buf, at, depth + 1)? else {
                return Ok(None);
            };
            Ok(Some((
                Frame::Attribute {
                    attrs: pairs(items),
                    value: Box::new(value),
                },
                end,
            )))
        }
        b';' | b'.' => Err(RespError::Streamed),
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
        NumberLine::Complete(b"?", _) => Err(RespError::Streamed),
        NumberLine::Complete(digits, end) => match parse_integer(digits) {
            Some(-1) => Ok(Some((None, end))),
            Some(n) if n >= 0 => Ok(Some((Some(n.unsigned_abs()), end))),
            _ => Err(RespError::BadLength(lossy(digits))),
        },
    }
}

/// Reads the header of a blob of type `kind` (`$`, `!`, `=`): its length (`None` for a
/// bulk's nil) and where its data starts.
fn blob_header(
    buf: &[u8],
    start: usize,
    kind: u8,
) -> Result<Option<(Option<usize>, usize)>, RespError> {
    let Some((len, end)) = length(buf, start)? else {
        return Ok(None);
    };
    match len {
        None if kind == b'$' => Ok(Some((None, end))),
        None => Err(RespError::BadLength("-1".to_owned())),
        Some(len) if len > MAX_BULK_LEN => Err(RespError::TooLarge(len)),
        Some(len) if kind == b'=' && len < 4 => Err(RespError::BadVerbatim),
        // MAX_BULK_LEN fits in usize on every target Crest builds for.
        Some(len) => Ok(Some((
            Some(usize::try_from(len).unwrap_or(usize::MAX)),
            end,
        ))),
    }
}

/// Reads the header of the aggregate (`*`, `%`, `~`, `>`, `|`) whose type byte is at `pos`,
/// at `depth`: its count of entries (`None` for an array's nil) and where its first element
/// starts.
fn aggregate_header(
    buf: &[u8],
    pos: usize,
    depth: usize,
) -> Result<Option<(Option<usize>, usize)>, RespError> {
    let Some((count, end)) = length(buf, pos + 1)? else {
        return Ok(None);
    };
    if depth >= MAX_DEPTH {
        return Err(RespError::TooDeep);
    }
    match count {
        None if buf[pos] == b'*' => Ok(Some((None, end))),
        None => Err(RespError::BadLength("-1".to_owned())),
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
        let Some((len, start)) = blob_header(buf, at + 1, b'$')? else {
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
            Ok(Scan::Reply { len, .. } | Scan::Push { len, .. }) => len,
            other => panic!("expected a complete reply, got {other:?}"),
        }
    }

    /// What `scan_reply` must say of `frame`, encoded in `len` bytes.
    fn expected_scan(frame: &Frame, len: usize) -> Scan<'_> {
        let kind = match frame {
            Frame::Error(message) | Frame::BlobError(message) => ReplyKind::Error {
                kind: first_word(message),
                message,
            },
            Frame::NullBulk | Frame::NullArray | Frame::Null => ReplyKind::Nil,
            Frame::Attribute { value, .. } => {
                return match expected_scan(value, len) {
                    Scan::Reply { kind, nils, .. } => Scan::Reply { kind, len, nils },
                    other => other,
                };
            }
            Frame::Push(items) => {
                let invalidate = matches!(items.first(), Some(Frame::Bulk(b) | Frame::Simple(b)) if b == b"invalidate");
                return Scan::Push { len, invalidate };
            }
            _ => ReplyKind::Value,
        };
        let nils = match frame {
            Frame::Array(items) => items
                .iter()
                .filter(|f| matches!(f, Frame::NullBulk | Frame::NullArray | Frame::Null))
                .count() as u32,
            _ => 0,
        };
        Scan::Reply { kind, len, nils }
    }

    /// Replies captured from `DEBUG PROTOCOL <type>`, `HELLO 3` and RESP3 commands on
    /// redis 7.0.15 and valkey 8.1.8 (the same bytes on both unless named), with the frame
    /// each is.
    fn server_vectors() -> Vec<(&'static [u8], Frame)> {
        let b = |s: &str| Frame::Bulk(s.as_bytes().to_vec());
        let i = Frame::Integer;
        let hello = |server: &str, version: &str, id: i64| {
            Frame::Map(vec![
                (b("server"), b(server)),
                (b("version"), b(version)),
                (b("proto"), i(3)),
                (b("id"), i(id)),
                (b("mode"), b("standalone")),
                (b("role"), b("master")),
                (b("modules"), Frame::Array(vec![])),
            ])
        };
        let dbl = |s: &str| Frame::Double(s.as_bytes().to_vec());
        vec![
            (&b"$11\r\nHello World\r\n"[..], b("Hello World")),
            (b":12345\r\n", i(12345)),
            (b",3.141\r\n", dbl("3.141")),
            (
                b"(1234567999999999999999999999999999999\r\n",
                Frame::BigNumber(b"1234567999999999999999999999999999999".to_vec()),
            ),
            (b"_\r\n", Frame::Null),
            (b"*3\r\n:0\r\n:1\r\n:2\r\n", Frame::Array(vec![i(0), i(1), i(2)])),
            (b"~3\r\n:0\r\n:1\r\n:2\r\n", Frame::Set(vec![i(0), i(1), i(2)])),
            (
                b"%3\r\n:0\r\n#f\r\n:1\r\n#t\r\n:2\r\n#f\r\n",
                Frame::Map(vec![
                    (i(0), Frame::Boolean(false)),
                    (i(1), Frame::Boolean(true)),
                    (i(2), Frame::Boolean(false)),
                ]),
            ),
            (
                b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n$39\r\nSome real reply following the attribute\r\n",
                Frame::Attribute {
                    attrs: vec![(b("key-popularity"), Frame::Array(vec![b("key:123"), i(90)]))],
                    value: Box::new(b("Some real reply following the attribute")),
                },
            ),
            (
                b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n",
                Frame::Push(vec![b("server-cpu-usage"), i(42)]),
            ),
            (
                b"=29\r\ntxt:This is a verbatim\nstring\r\n",
                Frame::Verbatim {
                    format: *b"txt",
                    data: b"This is a verbatim\nstring".to_vec(),
                },
            ),
            (b"#t\r\n", Frame::Boolean(true)),
            (b"#f\r\n", Frame::Boolean(false)),
            // Client-side caching, after a SET of `tk` from another client.
            (
                b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntk\r\n",
                Frame::Push(vec![b("invalidate"), Frame::Array(vec![b("tk")])]),
            ),
            (
                b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
                hello("redis", "7.0.15", 3),
            ),
            (
                b"%7\r\n$6\r\nserver\r\n$6\r\nvalkey\r\n$7\r\nversion\r\n$5\r\n8.1.8\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:2\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
                hello("valkey", "8.1.8", 2),
            ),
            // MGET k missing; HGETALL; SMEMBERS (valkey's order); ZSCORE; ZRANGE WITHSCORES;
            // CONFIG GET; ZINCRBY by 0.1 (redis %.17g, valkey shortest).
            (b"*2\r\n$1\r\nv\r\n_\r\n", Frame::Array(vec![b("v"), Frame::Null])),
            (
                b"%2\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\ng\r\n$1\r\nw\r\n",
                Frame::Map(vec![(b("f"), b("v")), (b("g"), b("w"))]),
            ),
            (b"~2\r\n$1\r\na\r\n$1\r\nb\r\n", Frame::Set(vec![b("a"), b("b")])),
            (b",1.5\r\n", dbl("1.5")),
            (
                b"*2\r\n*2\r\n$1\r\nn\r\n,2\r\n*2\r\n$1\r\nm\r\n,2.5\r\n",
                Frame::Array(vec![
                    Frame::Array(vec![b("n"), dbl("2")]),
                    Frame::Array(vec![b("m"), dbl("2.5")]),
                ]),
            ),
            (
                b"%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n",
                Frame::Map(vec![(b("maxmemory"), b("0"))]),
            ),
            (b",2.1000000000000001\r\n", dbl("2.1000000000000001")),
            (b",2.1\r\n", dbl("2.1")),
            (b"%0\r\n", Frame::Map(vec![])),
            (b"~0\r\n", Frame::Set(vec![])),
            // The spec's blob error (no core command sends one) and special doubles.
            (b"!21\r\nSYNTAX invalid syntax\r\n", Frame::BlobError(b"SYNTAX invalid syntax".to_vec())),
            (b",inf\r\n", dbl("inf")),
            (b",-inf\r\n", dbl("-inf")),
            (b",nan\r\n", dbl("nan")),
            (b",1e5\r\n", dbl("1e5")),
        ]
    }

    #[test]
    fn every_server_vector_scans_and_parses_to_its_frame_and_encodes_back() {
        for (bytes, frame) in server_vectors() {
            let shown = String::from_utf8_lossy(bytes);
            assert_eq!(
                Frame::parse(bytes),
                Ok(Some((frame.clone(), bytes.len()))),
                "{shown}"
            );
            assert_eq!(
                scan_reply(bytes),
                Ok(expected_scan(&frame, bytes.len())),
                "{shown}"
            );
            let mut out = Vec::new();
            frame.encode(&mut out);
            assert_eq!(out, bytes, "{shown}");
        }
    }

    /// Split at every byte: before the last byte both readers say "incomplete" (with a
    /// `need` the scanner can keep), never an error; at the end they say complete.
    #[test]
    fn every_server_vector_split_at_every_offset_is_incomplete_then_complete() {
        for (bytes, frame) in server_vectors() {
            let shown = String::from_utf8_lossy(bytes);
            for split in 0..bytes.len() {
                let prefix = &bytes[..split];
                assert_eq!(Frame::parse(prefix), Ok(None), "{shown} at {split}");
                match scan_reply(prefix) {
                    Ok(Scan::Incomplete { need }) => {
                        assert!(
                            need > split && need <= bytes.len(),
                            "{shown} at {split}: need {need}"
                        )
                    }
                    other => panic!("{shown} at {split}: {other:?}"),
                }
            }
            assert_eq!(Frame::parse(bytes), Ok(Some((frame, bytes.len()))));
        }
    }

    #[test]
    fn resp3_reply_kinds_for_the_engine() {
        // A GET miss in RESP3 is a nil; MGET's missing keys are counted.
        assert_eq!(
            scan_reply(b"_\r\n"),
            Ok(Scan::Reply {
                kind: ReplyKind::Nil,
                len: 3,
                nils: 0
            })
        );
        let mget = b"*4\r\n$1\r\nv\r\n_\r\n$-1\r\n*-1\r\n";
        assert_eq!(
            scan_reply(mget),
            Ok(Scan::Reply {
                kind: ReplyKind::Value,
                len: mget.len(),
                nils: 3
            })
        );
        // Only direct elements: a nil deeper down is part of a value.
        let nested = b"*1\r\n*1\r\n_\r\n";
        assert_eq!(
            scan_reply(nested),
            Ok(Scan::Reply {
                kind: ReplyKind::Value,
                len: nested.len(),
                nils: 0
            })
        );
        // A blob error is an error of its first word.
        let blob = b"!21\r\nSYNTAX invalid syntax\r\n";
        assert_eq!(
            scan_reply(blob),
            Ok(Scan::Reply {
                kind: ReplyKind::Error {
                    kind: b"SYNTAX",
                    message: b"SYNTAX invalid syntax"
                },
                len: blob.len(),
                nils: 0
            })
        );
        // An attribute before a nil or an error: the reply's kind, the attribute's bytes.
        let attr_nil = b"|1\r\n+a\r\n:1\r\n_\r\n";
        assert_eq!(
            scan_reply(attr_nil),
            Ok(Scan::Reply {
                kind: ReplyKind::Nil,
                len: attr_nil.len(),
                nils: 0
            })
        );
        let attr_err = b"|1\r\n+a\r\n:1\r\n-ERR x\r\n";
        assert!(matches!(
            scan_reply(attr_err),
            Ok(Scan::Reply { kind: ReplyKind::Error { kind: b"ERR", .. }, len, .. }) if len == attr_err.len()
        ));
        // Inside an aggregate an attribute is not an element: `*2` holds two values after it.
        let inner = b"*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n:2\r\n";
        assert_eq!(scan_len(inner), inner.len());
        // A push is not a reply; `invalidate` ones are told apart.
        assert_eq!(
            scan_reply(b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntk\r\n"),
            Ok(Scan::Push {
                len: 33,
                invalidate: true
            })
        );
        assert_eq!(
            scan_reply(b">2\r\n$10\r\ninvalidate\r\n_\r\n"),
            Ok(Scan::Push {
                len: 24,
                invalidate: true
            }),
            "a flush-all invalidation carries a null"
        );
        assert_eq!(
            scan_reply(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"),
            Ok(Scan::Push {
                len: 33,
                invalidate: false
            })
        );
        // A push then a reply, as redis sends DEBUG PROTOCOL push: two frames.
        let both = b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n$40\r\nSome real reply following the push reply\r\n";
        let first = scan_len(both);
        assert_eq!(first, 32);
        assert_eq!(scan_len(&both[first..]), both.len() - first);
    }

    #[test]
    fn malformed_resp3_is_an_error_never_a_panic() {
        let cases: [(&[u8], RespError); 14] = [
            (b"#x\r\n", RespError::BadValue(b'#', "x".into())),
            (b"#tt\r\n", RespError::BadValue(b'#', "tt".into())),
            (b"#\r\n", RespError::BadValue(b'#', String::new())),
            (b"_x\r\n", RespError::BadValue(b'_', "x".into())),
            (b"=3\r\ntxt\r\n", RespError::BadVerbatim),
            (b"=5\r\ntxt-a\r\n", RespError::BadVerbatim),
            (b"!-1\r\n", RespError::BadLength("-1".into())),
            (b"%-1\r\n", RespError::BadLength("-1".into())),
            (b"~-1\r\n", RespError::BadLength("-1".into())),
            (b"$?\r\n;4\r\nabcd\r\n;0\r\n", RespError::Streamed),
            (b"*?\r\n:1\r\n.\r\n", RespError::Streamed),
            (b";4\r\nabcd\r\n", RespError::Streamed),
            (
                b"%2147483648\r\n",
                RespError::TooManyElements(MAX_ARRAY_LEN + 1),
            ),
            (b"!536870913\r\n", RespError::TooLarge(MAX_BULK_LEN + 1)),
        ];
        for (input, error) in cases {
            let shown = String::from_utf8_lossy(input);
            assert_eq!(scan_reply(input), Err(error.clone()), "scan {shown}");
            assert_eq!(Frame::parse(input), Err(error), "parse {shown}");
        }
        assert_eq!(
            RespError::Streamed.to_string(),
            "streamed RESP3 strings and aggregates are not supported"
        );
    }

    #[test]
    fn hostile_resp3_nesting_and_counts_stay_errors_or_incomplete() {
        for open in [
            &b"%1\r\n:1\r\n"[..],
            b"~1\r\n",
            b">1\r\n",
            b"|1\r\n:1\r\n:1\r\n",
        ] {
            let nested = |depth: usize| {
                let mut buf = open.repeat(depth);
                buf.extend_from_slice(b":1\r\n");
                buf
            };
            let ok = nested(MAX_DEPTH);
            assert_eq!(scan_len(&ok), ok.len(), "{}", String::from_utf8_lossy(open));
            assert!(matches!(Frame::parse(&ok), Ok(Some((_, n))) if n == ok.len()));
            assert_eq!(scan_reply(&nested(MAX_DEPTH + 1)), Err(RespError::TooDeep));
            assert_eq!(
                Frame::parse(&nested(MAX_DEPTH + 1)),
                Err(RespError::TooDeep)
            );
            assert_eq!(scan_reply(&nested(100_000)), Err(RespError::TooDeep));
            assert_eq!(Frame::parse(&nested(100_000)), Err(RespError::TooDeep));
        }
        // A huge map announced with few bytes: incomplete, no allocation; 2N frames owed.
        let buf = b"%2000000000\r\n:1\r\n";
        assert_eq!(Frame::parse(buf), Ok(None));
        assert_eq!(
            scan_reply(buf),
            Ok(Scan::Incomplete {
                need: buf.len() + 1 + 3 * (4_000_000_000 - 2)
            })
        );
        // An attribute with nothing after it is incomplete, not a reply.
        assert_eq!(
            scan_reply(b"|1\r\n+a\r\n+b\r\n"),
            Ok(Scan::Incomplete { need: 13 })
        );
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
                    len: reply.len(),
                    nils: 0
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
                len: reply.len(),
                nils: 0
            })
        );
    }

    #[test]
    fn nil_bulk_nil_array_and_null_are_nil() {
        for reply in [&b"$-1\r\n"[..], b"*-1\r\n", b"_\r\n"] {
            assert_eq!(
                scan_reply(reply),
                Ok(Scan::Reply {
                    kind: ReplyKind::Nil,
                    len: reply.len(),
                    nils: 0
                })
            );
        }
    }

    #[test]
    fn integer_and_empty_array_are_values() {
        for reply in [&b":-42\r\n"[..], b"*0\r\n", b"$0\r\n\r\n", b"+\r\n"] {
            assert_eq!(
                scan_reply(reply),
                Ok(Scan::Reply {
                    kind: ReplyKind::Value,
                    len: reply.len(),
                    nils: 0
                })
            );
        }
        assert_eq!(Frame::parse(b"$-1\r\n"), Ok(Some((Frame::NullBulk, 5))));
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
                other => panic!("{other:?}"),
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
                ..
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
            Just(Frame::NullBulk),
            Just(Frame::NullArray),
            Just(Frame::Null),
            any::<bool>().prop_map(Frame::Boolean),
            line_text().prop_map(Frame::Double),
            line_text().prop_map(Frame::BigNumber),
            prop::collection::vec(any::<u8>(), 0..32).prop_map(Frame::BlobError),
            (any::<[u8; 3]>(), prop::collection::vec(any::<u8>(), 0..32))
                .prop_map(|(format, data)| Frame::Verbatim { format, data }),
        ];
        // Depth 4 and 8 elements per aggregate cover nesting without making cases huge.
        leaf.prop_recursive(4, 64, 8, |inner| {
            let items = prop::collection::vec(inner.clone(), 0..8);
            let entries = prop::collection::vec((inner.clone(), inner.clone()), 0..4);
            prop_oneof![
                items.clone().prop_map(Frame::Array),
                items.clone().prop_map(Frame::Set),
                items.prop_map(Frame::Push),
                entries.clone().prop_map(Frame::Map),
                (entries, inner).prop_map(|(attrs, value)| Frame::Attribute {
                    attrs,
                    value: Box::new(value)
                }),
            ]
        })
    }

    /// Bytes that are mostly RESP punctuation and digits, so garbage reaches deep paths.
    fn resp_ish() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            prop::sample::select(b"+-:$*_#,(!=%~|>?tf\r\n0123456789".to_vec()),
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
            prop_assert_eq!(scan_reply(&buf), Ok(expected_scan(&frame, len)));
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

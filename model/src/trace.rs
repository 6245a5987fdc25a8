//! A replayed trace's requests as a shard holds them (issue #27): the class's op table
//! ([`TraceOp`]), one checked chunk of a shard's requests ([`Batch`], from the wire's
//! `TraceChunk` in [`crate::convert`]) and each request's encoding ([`Batch::encode`] in
//! RESP, [`Batch::encode_mc`] in memcached's text or meta protocol): keys as recorded,
//! values of the recorded size taken from the shared value buffer (so nothing is
//! allocated per request), a verbatim command's bytes copied.

use crate::target::Protocol;
use crate::workload::{Wire, bulk, digits, push_uint};
use crest_trace::{Op, Verb};

/// Most requests in one chunk.
pub const MAX_BATCH: usize = 1 << 16;
/// Most entries in a class's op table (a MONITOR trace's distinct commands; Redis has
/// about 240).
pub const MAX_OPS: usize = 4096;
/// An op-table entry that names a verbatim command starts with this (`cmd:HSET`).
pub const COMMAND_PREFIX: &str = "cmd:";

/// One entry of a trace class's op table: what its requests are counted under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceOp {
    /// A cache operation (Twitter, cachebench), sent as [`Op::verb`] says.
    Op(Op),
    /// A MONITOR command, sent as written; its name in capitals.
    Command(String),
}

impl TraceOp {
    /// As the wire and the report spell it: `get`, `add`, …, or `cmd:HSET`.
    pub fn spelling(&self) -> String {
        match self {
            TraceOp::Op(op) => op.name().to_string(),
            TraceOp::Command(c) => format!("{COMMAND_PREFIX}{c}"),
        }
    }

    /// Reads [`TraceOp::spelling`]'s form.
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(c) = s.strip_prefix(COMMAND_PREFIX) {
            let ok = !c.is_empty()
                && c.len() <= 64
                && c.bytes()
                    .all(|b| b.is_ascii_graphic() && !b.is_ascii_lowercase());
            return ok.then(|| TraceOp::Command(c.to_string()));
        }
        Op::ALL
            .iter()
            .find(|op| op.name() == s && **op != Op::Command)
            .map(|&op| TraceOp::Op(op))
    }

    /// How its requests are encoded.
    pub fn verb(&self) -> Verb {
        match self {
            TraceOp::Op(op) => op.verb(),
            TraceOp::Command(_) => Verb::Verbatim,
        }
    }
}

/// Up to [`MAX_BATCH`] requests of one shard's part of a trace, in intended order.
/// Built only through the checks of `TryFrom<pb::TraceChunk>` (or [`Batch::push`]): every
/// index and offset below is in range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Its number among the shard's chunks (1, 2, …).
    pub seq: u64,
    /// The shard's part of the trace ends with it.
    pub last: bool,
    /// Intended times, ns on the run's clock, non-decreasing.
    pub at_ns: Vec<u64>,
    /// Index into the class's op table.
    pub op: Vec<u32>,
    /// Where each request's key ends in `keys`.
    pub(crate) key_end: Vec<u32>,
    pub(crate) keys: Vec<u8>,
    /// Bytes of each request's value (0: none).
    pub value_size: Vec<u64>,
    /// Each request's TTL in seconds (0: none).
    pub ttl_s: Vec<u32>,
    /// Where each request's verbatim bytes end in `resp`.
    pub(crate) resp_end: Vec<u32>,
    pub(crate) resp: Vec<u8>,
}

impl Batch {
    /// An empty chunk numbered `seq` (`last`: the shard's part ends with it).
    pub fn new(seq: u64, last: bool) -> Self {
        Self {
            seq,
            last,
            ..Self::default()
        }
    }

    /// Requests in it.
    pub fn len(&self) -> usize {
        self.at_ns.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.at_ns.is_empty()
    }

    fn span(ends: &[u32], i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { ends[i - 1] as usize };
        start..ends[i] as usize
    }

    /// Request `i`'s key (empty: a keyless command).
    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[Self::span(&self.key_end, i)]
    }

    /// Request `i`'s verbatim RESP bytes (empty unless its op is a command).
    pub fn verbatim(&self, i: usize) -> &[u8] {
        &self.resp[Self::span(&self.resp_end, i)]
    }

    /// Bytes it holds (what a window counts).
    pub fn bytes(&self) -> usize {
        self.keys.len() + self.resp.len() + self.len() * 32
    }

    /// Adds a request (the coordinator's side). `verbatim` is the command's RESP bytes
    /// for a MONITOR line, empty otherwise.
    ///
    /// # Panics
    /// Never for a batch below [`MAX_BATCH`] with keys and verbatim bytes under 4 GiB,
    /// which the caller keeps it to.
    pub fn push(
        &mut self,
        at_ns: u64,
        op: u32,
        key: &[u8],
        value_size: u64,
        ttl_s: u32,
        verbatim: &[u8],
    ) {
        self.at_ns.push(at_ns);
        self.op.push(op);
        self.keys.extend_from_slice(key);
        self.key_end
            .push(u32::try_from(self.keys.len()).unwrap_or(u32::MAX));
        self.value_size.push(value_size);
        self.ttl_s.push(ttl_s);
        self.resp.extend_from_slice(verbatim);
        self.resp_end
            .push(u32::try_from(self.resp.len()).unwrap_or(u32::MAX));
    }

    /// Writes request `i` in `protocol` ([`Batch::encode`] or [`Batch::encode_mc`]).
    #[inline]
    pub fn encode_in(
        &self,
        protocol: Protocol,
        i: usize,
        ops: &[TraceOp],
        values: &[u8],
        out: &mut impl Wire,
    ) {
        match protocol {
            Protocol::Resp => self.encode(i, ops, values, out),
            Protocol::McText => self.encode_mc(i, ops, values, false, out),
            Protocol::McMeta => self.encode_mc(i, ops, values, true, out),
        }
    }

    /// Writes request `i` to memcached as the op was recorded (memcached speaks the
    /// traces' own verbs): get, gets, set, add, replace, append, prepend, delete,
    /// incr and decr (by 1) as themselves (`meta`: `mg`, `ms` with `T`, `ME`/`MR`/`MA`/`MP`,
    /// `md`, `ma`); a cas, whose unique the trace does not hold, as a replace (it stores
    /// when the key is there, as a cas with a fresh unique would). A MONITOR command (RESP
    /// only, refused before load) writes nothing.
    pub fn encode_mc(
        &self,
        i: usize,
        ops: &[TraceOp],
        values: &[u8],
        meta: bool,
        out: &mut impl Wire,
    ) {
        let Some(TraceOp::Op(op)) = ops.get(self.op[i] as usize) else {
            return;
        };
        let key = self.key(i);
        let (value, ttl) = (self.value_size[i], self.ttl_s[i]);
        let line = |out: &mut Vec<u8>, words: &[&[u8]]| {
            for (n, w) in words.iter().enumerate() {
                if n > 0 {
                    out.push(b' ');
                }
                out.extend_from_slice(w);
            }
        };
        let mut d = [0u8; 20];
        let mut v = [0u8; 20];
        let b = out.bytes();
        let word: &[u8] = match (op, meta) {
            (Op::Get, false) => return line_end(b, |b| line(b, &[b"get", key])),
            (Op::Gets, false) => return line_end(b, |b| line(b, &[b"gets", key])),
            (Op::Get, true) => return line_end(b, |b| line(b, &[b"mg", key, b"v"])),
            (Op::Gets, true) => return line_end(b, |b| line(b, &[b"mg", key, b"v", b"c"])),
            (Op::Delete, false) => return line_end(b, |b| line(b, &[b"delete", key])),
            (Op::Delete, true) => return line_end(b, |b| line(b, &[b"md", key])),
            (Op::Incr, false) => return line_end(b, |b| line(b, &[b"incr", key, b"1"])),
            (Op::Decr, false) => return line_end(b, |b| line(b, &[b"decr", key, b"1"])),
            (Op::Incr, true) => return line_end(b, |b| line(b, &[b"ma", key])),
            (Op::Decr, true) => return line_end(b, |b| line(b, &[b"ma", key, b"MD"])),
            (Op::Command, _) => return,
            (Op::Set, _) => {
                if meta {
                    b""
                } else {
                    b"set"
                }
            }
            (Op::Add, _) => {
                if meta {
                    b"ME"
                } else {
                    b"add"
                }
            }
            (Op::Replace | Op::Cas, _) => {
                if meta {
                    b"MR"
                } else {
                    b"replace"
                }
            }
            (Op::Append, _) => {
                if meta {
                    b"MA"
                } else {
                    b"append"
                }
            }
            (Op::Prepend, _) => {
                if meta {
                    b"MP"
                } else {
                    b"prepend"
                }
            }
        };
        let len = digits(value, &mut v);
        // An append keeps the item's TTL (memcached ignores the exptime it is sent).
        let ttl = if matches!(op, Op::Append | Op::Prepend) {
            0
        } else {
            ttl
        };
        if meta {
            b.extend_from_slice(b"ms ");
            b.extend_from_slice(key);
            b.push(b' ');
            b.extend_from_slice(len);
            if ttl > 0 {
                b.extend_from_slice(b" T");
                b.extend_from_slice(digits(u64::from(ttl), &mut d));
            }
            if !word.is_empty() {
                b.push(b' ');
                b.extend_from_slice(word);
            }
        } else {
            line(b, &[word, key, b"0", digits(u64::from(ttl), &mut d), len]);
        }
        b.extend_from_slice(b"\r\n");
        value_bytes(out, value, values);
        out.bytes().extend_from_slice(b"\r\n");
    }

    /// Writes request `i` as `ops` says, its value taken from `values` (repeated when
    /// the value is longer than the buffer).
    pub fn encode(&self, i: usize, ops: &[TraceOp], values: &[u8], out: &mut impl Wire) {
        let verb = ops
            .get(self.op[i] as usize)
            .map_or(Verb::Verbatim, TraceOp::verb);
        let key = self.key(i);
        let (value, ttl) = (self.value_size[i], self.ttl_s[i]);
        let (name, argc): (&[u8], u64) = match verb {
            Verb::Verbatim => {
                out.bytes().extend_from_slice(self.verbatim(i));
                return;
            }
            Verb::Get => (b"GET", 2),
            Verb::Incr => (b"INCR", 2),
            Verb::Decr => (b"DECR", 2),
            Verb::Del => (b"DEL", 2),
            Verb::Append => (b"APPEND", 3),
            Verb::Set { nx, xx } => (
                b"SET",
                3 + (if ttl > 0 { 2 } else { 0 }) + u64::from(nx || xx),
            ),
        };
        let b = out.bytes();
        b.push(b'*');
        push_uint(b, argc);
        b.extend_from_slice(b"\r\n");
        bulk(b, name);
        bulk(b, key);
        if argc == 2 {
            return;
        }
        b.push(b'$');
        push_uint(b, value);
        b.extend_from_slice(b"\r\n");
        value_bytes(out, value, values);
        let b = out.bytes();
        b.extend_from_slice(b"\r\n");
        if let Verb::Set { nx, xx } = verb {
            if ttl > 0 {
                bulk(b, b"EX");
                bulk(b, digits(u64::from(ttl), &mut [0; 20]));
            }
            if nx {
                bulk(b, b"NX");
            } else if xx {
                bulk(b, b"XX");
            }
        }
    }
}

/// Ends a memcached line written by `words`.
#[inline]
fn line_end(b: &mut Vec<u8>, words: impl FnOnce(&mut Vec<u8>)) {
    words(b);
    b.extend_from_slice(b"\r\n");
}

/// `len` bytes of value from the shared `values` (repeated when longer; zeros when there
/// are none).
#[inline]
fn value_bytes(out: &mut impl Wire, len: u64, values: &[u8]) {
    if values.is_empty() {
        let b = out.bytes();
        b.resize(b.len() + len as usize, b'0');
        return;
    }
    let mut left = len;
    while left > 0 {
        let n = left.min(values.len() as u64) as usize;
        out.value(values, 0, n);
        left -= n as u64;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ops() -> Vec<TraceOp> {
        [
            "get", "set", "add", "replace", "append", "delete", "incr", "cmd:HSET",
        ]
        .iter()
        .map(|s| TraceOp::parse(s).unwrap())
        .collect()
    }

    fn encoded(b: &Batch, i: usize) -> String {
        let mut out = Vec::new();
        b.encode(i, &ops(), b"xyz", &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_op_is_sent_as_a_cache_client_would_over_resp() {
        let mut b = Batch::default();
        b.push(1, 0, b"k1", 0, 0, b"");
        b.push(2, 1, b"k2", 7, 60, b"");
        b.push(3, 2, b"k3", 2, 0, b"");
        b.push(4, 3, b"k4", 1, 5, b"");
        b.push(5, 4, b"k5", 3, 0, b"");
        b.push(6, 5, b"k6", 0, 0, b"");
        b.push(7, 6, b"k7", 0, 0, b"");
        b.push(8, 7, b"h", 0, 0, b"*2\r\n$4\r\nHGETALL\r\n");
        assert_eq!(encoded(&b, 0), "*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n");
        assert_eq!(
            encoded(&b, 1),
            "*5\r\n$3\r\nSET\r\n$2\r\nk2\r\n$7\r\nxyzxyzx\r\n$2\r\nEX\r\n$2\r\n60\r\n"
        );
        assert_eq!(
            encoded(&b, 2),
            "*4\r\n$3\r\nSET\r\n$2\r\nk3\r\n$2\r\nxy\r\n$2\r\nNX\r\n"
        );
        assert_eq!(
            encoded(&b, 3),
            "*6\r\n$3\r\nSET\r\n$2\r\nk4\r\n$1\r\nx\r\n$2\r\nEX\r\n$1\r\n5\r\n$2\r\nXX\r\n"
        );
        assert_eq!(
            encoded(&b, 4),
            "*3\r\n$6\r\nAPPEND\r\n$2\r\nk5\r\n$3\r\nxyz\r\n"
        );
        assert_eq!(encoded(&b, 5), "*2\r\n$3\r\nDEL\r\n$2\r\nk6\r\n");
        assert_eq!(encoded(&b, 6), "*2\r\n$4\r\nINCR\r\n$2\r\nk7\r\n");
        assert_eq!(encoded(&b, 7), "*2\r\n$4\r\nHGETALL\r\n");
        assert_eq!(b.key(7), b"h");
        let mut out = Vec::new();
        b.encode(4, &ops(), b"", &mut out);
        assert_eq!(out, b"*3\r\n$6\r\nAPPEND\r\n$2\r\nk5\r\n$3\r\n000\r\n");
        assert_eq!(b.len(), 8);
    }

    /// memcached gets the traces' own verbs, text and meta; a cas goes as a replace.
    #[test]
    fn each_op_is_sent_as_memcached_spells_it() {
        let ops: Vec<TraceOp> = [
            "get", "gets", "set", "add", "replace", "cas", "append", "prepend", "delete", "incr",
            "decr",
        ]
        .iter()
        .map(|s| TraceOp::parse(s).unwrap())
        .collect();
        let mut b = Batch::default();
        for (i, (size, ttl)) in [
            (0, 0),
            (0, 0),
            (5, 60),
            (2, 0),
            (1, 9),
            (4, 30),
            (3, 60),
            (1, 0),
            (0, 0),
            (0, 0),
            (0, 0),
        ]
        .iter()
        .enumerate()
        {
            b.push(
                i as u64,
                i as u32,
                format!("k{i}").as_bytes(),
                *size,
                *ttl,
                b"",
            );
        }
        let all = |meta: bool| -> Vec<String> {
            (0..b.len())
                .map(|i| {
                    let mut out = Vec::new();
                    b.encode_in(
                        if meta {
                            Protocol::McMeta
                        } else {
                            Protocol::McText
                        },
                        i,
                        &ops,
                        b"xyz",
                        &mut out,
                    );
                    String::from_utf8(out).unwrap()
                })
                .collect()
        };
        assert_eq!(
            all(false),
            [
                "get k0\r\n",
                "gets k1\r\n",
                "set k2 0 60 5\r\nxyzxy\r\n",
                "add k3 0 0 2\r\nxy\r\n",
                "replace k4 0 9 1\r\nx\r\n",
                "replace k5 0 30 4\r\nxyzx\r\n",
                "append k6 0 0 3\r\nxyz\r\n",
                "prepend k7 0 0 1\r\nx\r\n",
                "delete k8\r\n",
                "incr k9 1\r\n",
                "decr k10 1\r\n",
            ]
        );
        assert_eq!(
            all(true),
            [
                "mg k0 v\r\n",
                "mg k1 v c\r\n",
                "ms k2 5 T60\r\nxyzxy\r\n",
                "ms k3 2 ME\r\nxy\r\n",
                "ms k4 1 T9 MR\r\nx\r\n",
                "ms k5 4 T30 MR\r\nxyzx\r\n",
                "ms k6 3 MA\r\nxyz\r\n",
                "ms k7 1 MP\r\nx\r\n",
                "md k8\r\n",
                "ma k9\r\n",
                "ma k10 MD\r\n",
            ]
        );
    }

    #[test]
    fn every_encoding_is_one_whole_resp_request() {
        let mut b = Batch::default();
        for (i, op) in (0..7u32).enumerate() {
            b.push(
                i as u64,
                op,
                format!("key:{i}").as_bytes(),
                1_000 + i as u64,
                i as u32,
                b"",
            );
        }
        for i in 0..b.len() {
            let mut out = Vec::new();
            b.encode(i, &ops(), &[b'v'; 64], &mut out);
            let (args, n) = crest_resp::parse_request(&out).unwrap().unwrap();
            assert_eq!(n, out.len(), "request {i}");
            assert_eq!(args[1], format!("key:{i}").as_bytes());
        }
    }

    #[test]
    fn op_table_spellings_read_back_and_nonsense_is_refused() {
        for op in ops() {
            assert_eq!(TraceOp::parse(&op.spelling()), Some(op));
        }
        for bad in ["", "command", "GET", "cmd:", "cmd:get", "cmd:A B", "nope"] {
            assert_eq!(TraceOp::parse(bad), None, "{bad}");
        }
    }
}

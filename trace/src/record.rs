//! What a trace holds: timed records of cache operations, and each operation's RESP verb.

/// The largest value a record may ask for; larger ones are skipped.
pub const MAX_VALUE: u64 = 512 << 20;

/// An operation as a trace records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// get (cachebench GET, GET_LEASE).
    Get,
    /// gets.
    Gets,
    /// set (cachebench SET, SET_LEASE).
    Set,
    /// add.
    Add,
    /// replace.
    Replace,
    /// cas.
    Cas,
    /// append.
    Append,
    /// prepend.
    Prepend,
    /// delete (cachebench DELETE).
    Delete,
    /// incr.
    Incr,
    /// decr.
    Decr,
    /// A MONITOR line: the command as written ([`Record::args`]).
    Command,
}

/// What a cache client sends over RESP for an [`Op`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `GET key`.
    Get,
    /// `SET key value [EX ttl]`, with `NX` (only if absent) or `XX` (only if present).
    Set {
        /// `NX`: add.
        nx: bool,
        /// `XX`: replace, cas.
        xx: bool,
    },
    /// `APPEND key value` (append, and prepend: RESP has no prepend).
    Append,
    /// `INCR key`.
    Incr,
    /// `DECR key`.
    Decr,
    /// `DEL key`.
    Del,
    /// The MONITOR line's command, verbatim.
    Verbatim,
}

impl Op {
    /// Every op, in the order above.
    pub const ALL: [Op; 12] = [
        Op::Get,
        Op::Gets,
        Op::Set,
        Op::Add,
        Op::Replace,
        Op::Cas,
        Op::Append,
        Op::Prepend,
        Op::Delete,
        Op::Incr,
        Op::Decr,
        Op::Command,
    ];

    /// As traces write it (lower case), and as the report counts it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Gets => "gets",
            Op::Set => "set",
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Cas => "cas",
            Op::Append => "append",
            Op::Prepend => "prepend",
            Op::Delete => "delete",
            Op::Incr => "incr",
            Op::Decr => "decr",
            Op::Command => "command",
        }
    }

    /// What it becomes over RESP: get/gets → GET; set → SET; add → SET NX; replace and
    /// cas → SET XX (a cas that finds its key replaces it: RESP has no version check);
    /// append and prepend → APPEND; incr/decr → INCR/DECR; delete → DEL.
    pub fn verb(self) -> Verb {
        match self {
            Op::Get | Op::Gets => Verb::Get,
            Op::Set => Verb::Set {
                nx: false,
                xx: false,
            },
            Op::Add => Verb::Set {
                nx: true,
                xx: false,
            },
            Op::Replace | Op::Cas => Verb::Set {
                nx: false,
                xx: true,
            },
            Op::Append | Op::Prepend => Verb::Append,
            Op::Incr => Verb::Incr,
            Op::Decr => Verb::Decr,
            Op::Delete => Verb::Del,
            Op::Command => Verb::Verbatim,
        }
    }
}

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its line in the file (from 1).
    pub line: u64,
    /// When, µs on the trace's own clock as recorded (Twitter: a whole second).
    pub at_us: u64,
    /// The operation.
    pub op: Op,
    /// The key (MONITOR: the command's first argument, when it has one).
    pub key: Vec<u8>,
    /// Bytes of the value a write sends (0 for reads).
    pub value_size: u64,
    /// Seconds to live (0: none).
    pub ttl_s: u64,
    /// Times the request is made (cachebench `op_count`; 1 elsewhere).
    pub repeat: u32,
    /// MONITOR: the command and its arguments as written (empty elsewhere).
    pub args: Vec<Vec<u8>>,
}

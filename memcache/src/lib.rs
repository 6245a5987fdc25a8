//! memcached's text and meta protocols, as Crest speaks them to a memcached server (or a
//! ring of them).
//!
//! - [`reply::scan_reply`] is the engine's hot path, as [`crest_resp::scan_reply`] is for
//!   RESP: it finds where one reply ends and whether it is a value, a miss or an error,
//!   without allocating, and tells the caller how many bytes to wait for so a large value
//!   is not scanned again on every read. It answers in RESP's own terms
//!   ([`crest_resp::Scan`], [`crest_resp::ReplyKind`]) so the engine books a memcached reply
//!   exactly as a RESP one: a miss is a nil, a multi-get's missing keys are its nils, and
//!   `ERROR` / `CLIENT_ERROR` / `SERVER_ERROR` are errors counted by that word.
//!   Unlike RESP, a memcached reply says nothing of its own shape (`END` closes a `get`,
//!   `STORED` a `set`): the caller names what the request expects ([`reply::Expect`]).
//! - [`text`] and [`meta`] encode requests: the text protocol's `get`/`gets`/`gat`/`gats`,
//!   storage commands, `delete`, `incr`/`decr`, `touch`; the meta protocol's `mg`, `ms`,
//!   `md`, `ma` and `mn`.
//! - [`ring::Ring`] places keys on a ring of servers by libmemcached's ketama (weighted,
//!   MD5: the continuum `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` builds, which Last.fm's
//!   libketama and most clients share), so a run spreads keys as a real client fleet does.
//!
//! Bounds: a reply line (status, `VALUE` header, meta header) is at most [`MAX_LINE_LEN`];
//! a value at most [`MAX_VALUE_LEN`] (memcached's `-I` cannot pass 1 GB); a multi-get
//! answers at most the keys it asked for. Past any of these a reply is a [`McError`], never
//! a buffer that grows without end, and no input panics.

pub mod meta;
pub mod reply;
pub mod ring;
pub mod text;

pub use reply::{Expect, MAX_LINE_LEN, MAX_VALUE_LEN, McError, scan_reply};
pub use text::MAX_KEY_LEN;

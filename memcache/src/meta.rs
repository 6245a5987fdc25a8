//! The meta protocol's requests (`mg`, `ms`, `md`, `ma`, `mn`), as memcached's
//! `protocol.txt` gives them. Every reply is a meta reply ([`Expect::Meta`]). A quiet
//! request (`q`) answers only when it has something to say (an `mg` hit, an `ms` that did
//! not store, any error); `mn` after a batch of quiet requests marks its end, so the caller
//! knows every quiet request before it that said nothing succeeded (or missed, for `mg`).
//! An opaque (`O`) comes back in the reply, which is how such a reply is matched to its
//! request.

use crate::reply::Expect;
use crate::text::push_num;

/// Flags every meta request may carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Common {
    /// `q`: no reply unless there is something to say.
    pub quiet: bool,
    /// `O<n>`: echoed in the reply.
    pub opaque: Option<u32>,
}

impl Common {
    fn write(&self, out: &mut Vec<u8>) {
        if self.quiet {
            out.extend_from_slice(b" q");
        }
        if let Some(o) = self.opaque {
            out.extend_from_slice(b" O");
            push_num(out, u64::from(o));
        }
    }
}

/// What an `mg` asks for besides its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Get {
    /// `v`: the value.
    pub value: bool,
    /// `f`: the client flags.
    pub flags: bool,
    /// `c`: the CAS value.
    pub cas: bool,
    /// `T<n>`: touch, a new TTL (as `gat`).
    pub touch: Option<u32>,
}

/// `mg <key> [v] [f] [c] [T<n>] [q] [O<n>]`.
pub fn get(out: &mut Vec<u8>, key: &[u8], what: Get, common: Common) -> Expect {
    out.extend_from_slice(b"mg ");
    out.extend_from_slice(key);
    for (on, flag) in [(what.value, b" v"), (what.flags, b" f"), (what.cas, b" c")] {
        if on {
            out.extend_from_slice(flag);
        }
    }
    if let Some(t) = what.touch {
        out.extend_from_slice(b" T");
        push_num(out, u64::from(t));
    }
    common.write(out);
    out.extend_from_slice(b"\r\n");
    Expect::Meta
}

/// `ms`'s modes (`M<mode>`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// `MS` (the default): set.
    #[default]
    Set,
    /// `ME`: add.
    Add,
    /// `MR`: replace.
    Replace,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
}

/// `ms <key> <len> [T<ttl>] [F<flags>] [M<mode>] [q] [O<n>]` and the value's line; the
/// caller writes the value and `\r\n` after it ([`set`] does it all).
pub fn set_header(
    out: &mut Vec<u8>,
    key: &[u8],
    len: usize,
    ttl: Option<u32>,
    flags: u32,
    mode: Mode,
    common: Common,
) -> Expect {
    out.extend_from_slice(b"ms ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_num(out, len as u64);
    if let Some(t) = ttl {
        out.extend_from_slice(b" T");
        push_num(out, u64::from(t));
    }
    if flags != 0 {
        out.extend_from_slice(b" F");
        push_num(out, u64::from(flags));
    }
    match mode {
        Mode::Set => {}
        Mode::Add => out.extend_from_slice(b" ME"),
        Mode::Replace => out.extend_from_slice(b" MR"),
        Mode::Append => out.extend_from_slice(b" MA"),
        Mode::Prepend => out.extend_from_slice(b" MP"),
    }
    common.write(out);
    out.extend_from_slice(b"\r\n");
    Expect::Meta
}

/// A whole `ms` with its value.
pub fn set(
    out: &mut Vec<u8>,
    key: &[u8],
    value: &[u8],
    ttl: Option<u32>,
    mode: Mode,
    common: Common,
) -> Expect {
    let e = set_header(out, key, value.len(), ttl, 0, mode, common);
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    e
}

/// `md <key> [q] [O<n>]`.
pub fn delete(out: &mut Vec<u8>, key: &[u8], common: Common) -> Expect {
    out.extend_from_slice(b"md ");
    out.extend_from_slice(key);
    common.write(out);
    out.extend_from_slice(b"\r\n");
    Expect::Meta
}

/// `ma <key> [MD] [D<delta>] [q] [O<n>]`: increment (or decrement when `up` is false).
pub fn arith(out: &mut Vec<u8>, key: &[u8], up: bool, delta: u64, common: Common) -> Expect {
    out.extend_from_slice(b"ma ");
    out.extend_from_slice(key);
    if !up {
        out.extend_from_slice(b" MD");
    }
    if delta != 1 {
        out.extend_from_slice(b" D");
        push_num(out, delta);
    }
    common.write(out);
    out.extend_from_slice(b"\r\n");
    Expect::Meta
}

/// `mn`: answered `MN` once every request before it on the connection is answered.
pub fn noop(out: &mut Vec<u8>) -> Expect {
    out.extend_from_slice(b"mn\r\n");
    Expect::Meta
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(f: impl FnOnce(&mut Vec<u8>) -> Expect) -> String {
        let mut out = Vec::new();
        assert_eq!(f(&mut out), Expect::Meta);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn meta_requests_are_written_as_protocol_txt_gives_them() {
        let v = Get {
            value: true,
            ..Get::default()
        };
        assert_eq!(
            written(|o| get(o, b"k", v, Common::default())),
            "mg k v\r\n"
        );
        let all = Get {
            value: true,
            flags: true,
            cas: true,
            touch: Some(30),
        };
        let quiet = Common {
            quiet: true,
            opaque: Some(7),
        };
        assert_eq!(
            written(|o| get(o, b"k", all, quiet)),
            "mg k v f c T30 q O7\r\n"
        );
        assert_eq!(
            written(|o| set(o, b"k", b"hi", Some(60), Mode::Set, Common::default())),
            "ms k 2 T60\r\nhi\r\n"
        );
        assert_eq!(
            written(|o| set(o, b"k", b"", None, Mode::Add, quiet)),
            "ms k 0 ME q O7\r\n\r\n"
        );
        assert_eq!(
            written(|o| set_header(o, b"k", 3, None, 9, Mode::Prepend, Common::default())),
            "ms k 3 F9 MP\r\n"
        );
        assert_eq!(written(|o| delete(o, b"k", Common::default())), "md k\r\n");
        assert_eq!(
            written(|o| arith(o, b"n", true, 1, Common::default())),
            "ma n\r\n"
        );
        assert_eq!(
            written(|o| arith(o, b"n", false, 5, Common::default())),
            "ma n MD D5\r\n"
        );
        assert_eq!(written(noop), "mn\r\n");
    }
}

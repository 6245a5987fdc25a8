//! The text protocol's requests: each writer appends one request to `out` and returns
//! what its reply looks like. Keys are checked by the caller ([`check_key`]): a space or a
//! control character in a key would split the command line.

use crate::reply::Expect;

/// Longest key memcached takes (`KEY_MAX_LENGTH`).
pub const MAX_KEY_LEN: usize = 250;

/// A key memcached takes: 1 to 250 bytes, no space or control character.
///
/// # Errors
/// What is wrong with it, in words.
pub fn check_key(key: &[u8]) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!(
            "a memcached key is 1 to {MAX_KEY_LEN} bytes; this one is {}",
            key.len()
        ));
    }
    match key.iter().find(|b| b.is_ascii_control() || **b == b' ') {
        Some(b) => Err(format!(
            "a memcached key cannot hold a space or a control character (found byte {b:#04x})"
        )),
        None => Ok(()),
    }
}

/// The retrieval commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retrieve {
    /// `get`.
    Get,
    /// `gets` (with each value's CAS unique).
    Gets,
    /// `gat <exptime>`: get and touch.
    Gat(u32),
    /// `gats <exptime>`.
    Gats(u32),
}

/// `get k1 k2 …` (or `gets`, `gat`, `gats`): a multi-get when given several keys.
pub fn retrieve<'k>(
    out: &mut Vec<u8>,
    how: Retrieve,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Expect {
    match how {
        Retrieve::Get => out.extend_from_slice(b"get"),
        Retrieve::Gets => out.extend_from_slice(b"gets"),
        Retrieve::Gat(t) => {
            out.extend_from_slice(b"gat ");
            push_num(out, u64::from(t));
        }
        Retrieve::Gats(t) => {
            out.extend_from_slice(b"gats ");
            push_num(out, u64::from(t));
        }
    }
    let mut n = 0u32;
    for k in keys {
        out.push(b' ');
        out.extend_from_slice(k);
        n += 1;
    }
    out.extend_from_slice(b"\r\n");
    Expect::Values { keys: n }
}

/// The storage commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// `set`.
    Set,
    /// `add`: only if the key is missing.
    Add,
    /// `replace`: only if the key exists.
    Replace,
    /// `append` to the value.
    Append,
    /// `prepend` to the value.
    Prepend,
    /// `cas` with this unique.
    Cas(u64),
}

/// The line of a storage command for a value of `len` bytes: the caller writes the value
/// and then `\r\n` ([`store`] does it all).
pub fn store_header(
    out: &mut Vec<u8>,
    how: Store,
    key: &[u8],
    flags: u32,
    exptime: u32,
    len: usize,
) -> Expect {
    out.extend_from_slice(match how {
        Store::Set => b"set ".as_slice(),
        Store::Add => b"add ",
        Store::Replace => b"replace ",
        Store::Append => b"append ",
        Store::Prepend => b"prepend ",
        Store::Cas(_) => b"cas ",
    });
    out.extend_from_slice(key);
    for n in [u64::from(flags), u64::from(exptime), len as u64] {
        out.push(b' ');
        push_num(out, n);
    }
    if let Store::Cas(unique) = how {
        out.push(b' ');
        push_num(out, unique);
    }
    out.extend_from_slice(b"\r\n");
    Expect::Line
}

/// A whole storage command with its value.
pub fn store(
    out: &mut Vec<u8>,
    how: Store,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
) -> Expect {
    let e = store_header(out, how, key, flags, exptime, value.len());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    e
}

/// `delete <key>`.
pub fn delete(out: &mut Vec<u8>, key: &[u8]) -> Expect {
    out.extend_from_slice(b"delete ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
    Expect::Line
}

/// `incr <key> <delta>` (or `decr` when `up` is false).
pub fn arith(out: &mut Vec<u8>, up: bool, key: &[u8], delta: u64) -> Expect {
    out.extend_from_slice(if up { b"incr " } else { b"decr " });
    out.extend_from_slice(key);
    out.push(b' ');
    push_num(out, delta);
    out.extend_from_slice(b"\r\n");
    Expect::Line
}

/// `touch <key> <exptime>`.
pub fn touch(out: &mut Vec<u8>, key: &[u8], exptime: u32) -> Expect {
    out.extend_from_slice(b"touch ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_num(out, u64::from(exptime));
    out.extend_from_slice(b"\r\n");
    Expect::Line
}

/// Appends `n` in decimal.
pub(crate) fn push_num(out: &mut Vec<u8>, n: u64) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    let mut v = n;
    loop {
        i -= 1;
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&d[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(f: impl FnOnce(&mut Vec<u8>) -> Expect) -> (String, Expect) {
        let mut out = Vec::new();
        let e = f(&mut out);
        (String::from_utf8(out).unwrap(), e)
    }

    #[test]
    fn requests_are_written_as_protocol_txt_gives_them() {
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        assert_eq!(
            written(|o| retrieve(o, Retrieve::Get, keys)),
            ("get a b c\r\n".into(), Expect::Values { keys: 3 })
        );
        assert_eq!(
            written(|o| retrieve(o, Retrieve::Gat(60), [b"k".as_slice()])).0,
            "gat 60 k\r\n"
        );
        assert_eq!(
            written(|o| retrieve(o, Retrieve::Gets, [b"k".as_slice()])).0,
            "gets k\r\n"
        );
        assert_eq!(
            written(|o| store(o, Store::Set, b"k", 5, 0, b"hello")),
            ("set k 5 0 5\r\nhello\r\n".into(), Expect::Line)
        );
        assert_eq!(
            written(|o| store(o, Store::Cas(77), b"k", 0, 30, b"x")).0,
            "cas k 0 30 1 77\r\nx\r\n"
        );
        assert_eq!(
            written(|o| store(o, Store::Add, b"k", 0, 0, b"")).0,
            "add k 0 0 0\r\n\r\n"
        );
        assert_eq!(written(|o| delete(o, b"k")).0, "delete k\r\n");
        assert_eq!(
            written(|o| arith(o, false, b"n", 18_446_744_073_709_551_615)).0,
            "decr n 18446744073709551615\r\n"
        );
        assert_eq!(written(|o| touch(o, b"k", 9)).0, "touch k 9\r\n");
    }

    #[test]
    fn keys_are_checked_as_memcached_takes_them() {
        assert!(check_key(b"crest:1").is_ok());
        assert!(check_key(&[b'k'; 250]).is_ok());
        assert!(
            check_key(&[b'k'; 251])
                .unwrap_err()
                .contains("1 to 250 bytes")
        );
        assert!(check_key(b"").is_err());
        assert!(check_key(b"a b").unwrap_err().contains("space"));
        assert!(check_key(b"a\r\nb").unwrap_err().contains("0x0d"));
    }
}

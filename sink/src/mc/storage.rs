//! What the text and meta protocols share below their commands: a storage command's second
//! half once its data block is in ([`complete`], memcached's `complete_nread_ascii`, with
//! `do_store_item`'s rules in [`store`]), and `incr`/`decr`/`ma`'s arithmetic
//! ([`add_delta`], memcached's `do_add_delta`).

use super::items::{Item, Locked, SLAB_CHUNK_MAX, ntotal, size_ok};
use super::parse::{base64_encode, push_u64, strtoull};
use super::state::{Ctx, Mode, Pending};
use super::stats::Counter;

/// What storing came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Stored,
    Exists,
    NotFound,
    NotStored,
}

/// Runs a storage command whose data block (`data`, CRLF included) has arrived, and
/// answers it.
pub(crate) fn complete(ctx: &mut Ctx<'_>, p: Pending, data: &[u8]) {
    // memcached counts the command once its data is read, stored or not.
    ctx.counts.bump(Counter::CmdSet);
    let Some(value) = data.strip_suffix(b"\r\n") else {
        // An `ms` always hears of it.
        let noreply = p.noreply && p.meta.is_none();
        ctx.reply(noreply, b"CLIENT_ERROR bad data chunk");
        return;
    };
    let (key_binary, set_stale) = p
        .meta
        .as_ref()
        .map_or((false, false), |m| (m.key_binary, m.set_stale));
    let mut item = Item::new(value.to_vec(), p.flags, p.exptime, ctx.now);
    item.key_binary = key_binary;
    let (stored, cas) = store(ctx, &p.key, item, p.mode, p.cas, set_stale);
    let Some(meta) = p.meta else {
        let line: &[u8] = match stored {
            Outcome::Stored => b"STORED",
            Outcome::Exists => b"EXISTS",
            Outcome::NotFound => b"NOT_FOUND",
            Outcome::NotStored => b"NOT_STORED",
        };
        ctx.reply(p.noreply, line);
        return;
    };
    let status: &[u8] = match stored {
        // Only a nominal reply is quiet.
        Outcome::Stored if p.noreply => return,
        Outcome::Stored => b"HD",
        Outcome::Exists => b"EX",
        Outcome::NotFound => b"NF",
        Outcome::NotStored => b"NS",
    };
    ctx.out.extend_from_slice(status);
    for flag in &meta.returns {
        match flag.first() {
            Some(b'O') => {
                ctx.out.push(b' ');
                ctx.out.extend_from_slice(flag);
            }
            Some(b'k') => push_key(ctx.out, &p.key, meta.key_binary),
            Some(b'c') => {
                ctx.out.extend_from_slice(b" c");
                push_u64(ctx.out, cas);
            }
            _ => {}
        }
    }
    ctx.out.extend_from_slice(b"\r\n");
}

/// Appends a meta reply's ` k<key>`, in base64 and followed by ` b` for a binary key.
pub(crate) fn push_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        base64_encode(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// How a request's CAS unique compares with the item's.
#[derive(PartialEq, Eq)]
enum CasCheck {
    /// None given.
    None,
    Match,
    /// Lower, with `I`: stored as stale.
    Stale,
    BadValue,
}

/// memcached's `do_store_item`: stores `item` at `key` as `mode` says, given CAS `cas`
/// (0: none); then the outcome and, when stored, the item's new CAS unique.
pub(crate) fn store(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    mut item: Item,
    mode: Mode,
    cas: u64,
    set_stale: bool,
) -> (Outcome, u64) {
    let now = ctx.now;
    let mut shard = ctx.state.items.lock(key);
    let Some(old) = shard.live(key, now, ctx.counts) else {
        return match mode {
            Mode::Add | Mode::Set => (Outcome::Stored, shard.link(key, item, now, ctx.counts).cas),
            Mode::Cas => {
                ctx.counts.bump(Counter::CasMisses);
                (Outcome::NotFound, 0)
            }
            Mode::Replace | Mode::Append | Mode::Prepend => (Outcome::NotStored, 0),
        };
    };
    let check = if cas == 0 {
        CasCheck::None
    } else if cas == old.cas {
        CasCheck::Match
    } else if set_stale && cas < old.cas {
        CasCheck::Stale
    } else {
        CasCheck::BadValue
    };
    match mode {
        Mode::Add => return (Outcome::NotStored, 0),
        Mode::Cas => match check {
            CasCheck::Match => ctx.counts.bump(Counter::CasHits),
            CasCheck::Stale => {
                // The value is replaced, its TTL and win token kept, marked stale.
                item.exptime = old.exptime;
                item.token_sent = old.token_sent;
                item.stale = true;
                ctx.counts.bump(Counter::CasHits);
            }
            CasCheck::None | CasCheck::BadValue => {
                ctx.counts.bump(Counter::CasBadval);
                return (Outcome::Exists, 0);
            }
        },
        Mode::Append | Mode::Prepend => {
            if !matches!(check, CasCheck::None | CasCheck::Match) {
                return (Outcome::Exists, 0);
            }
            let mut value = Vec::with_capacity(old.value.len() + item.value.len());
            if mode == Mode::Append {
                value.extend_from_slice(&old.value);
                value.extend_from_slice(&item.value);
            } else {
                value.extend_from_slice(&item.value);
                value.extend_from_slice(&old.value);
            }
            // The whole must fit as an item of its own (memcached fails to allocate it).
            if !size_ok(key.len(), old.flags, value.len()) {
                return (Outcome::NotStored, 0);
            }
            item = Item::new(value, old.flags, old.exptime, now);
        }
        Mode::Replace | Mode::Set => {}
    }
    (Outcome::Stored, shard.link(key, item, now, ctx.counts).cas)
}

/// What arithmetic on an item came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delta {
    /// Done: the new number.
    Ok(u64),
    NonNumeric,
    NotFound,
    /// The item's CAS unique is not the one given (`ma C`).
    CasMismatch,
}

/// memcached's `do_add_delta` on the item at `key` in `shard`: adds `delta` (wrapping at
/// 2^64) or takes it away (stopping at 0), counting the hit. The digits are written over
/// the value, padded with spaces, when they fit in its length; else the item is replaced
/// by one of the digits alone (a new link, counted in `total_items`). Either way it gets a
/// new CAS unique.
pub(crate) fn add_delta(
    ctx: &mut Ctx<'_>,
    shard: &mut Locked<'_>,
    key: &[u8],
    incr: bool,
    delta: u64,
    cas: u64,
) -> Delta {
    let now = ctx.now;
    let Some(item) = shard.live(key, now, ctx.counts) else {
        return Delta::NotFound;
    };
    // No empty value, nor one memcached would have chunked.
    if item.value.is_empty() || ntotal(key.len(), item.flags, item.value.len()) > SLAB_CHUNK_MAX {
        return Delta::NonNumeric;
    }
    if cas != 0 && item.cas != cas {
        return Delta::CasMismatch;
    }
    let Some(value) = strtoull(&item.value) else {
        return Delta::NonNumeric;
    };
    let value = if incr {
        value.wrapping_add(delta)
    } else {
        value.saturating_sub(delta)
    };
    ctx.counts.bump(if incr {
        Counter::IncrHits
    } else {
        Counter::DecrHits
    });
    let mut digits = Vec::with_capacity(20);
    push_u64(&mut digits, value);
    if digits.len() <= item.value.len() {
        shard.rewrite(key, &digits);
    } else {
        let fresh = Item::new(digits, item.flags, item.exptime, now);
        shard.link(key, fresh, now, ctx.counts);
    }
    Delta::Ok(value)
}

//! The meta protocol's commands (`mg`, `ms`, `md`, `ma`, `me`; `mn` is the dispatcher's),
//! each as memcached 1.6.18's `proto_text.c` runs it. Flags are checked first, all of them
//! ([`preparse`]: a duplicate or unknown flag refuses the command); the reply then carries
//! the flags that return something in the order the request gave them. `q` drops only the
//! nominal reply (`mg`'s `EN`, `HD` of `ms`, `md`, `ma`); errors are always answered.
//!
//! Flags: `mg` b c f h k l N O q R s t T u v (and P, L, ignored); `ms` b c F I k M O q T;
//! `md` b C I k O q T; `ma` b C D J k M N O q t T v. `mg N`/`R` and `md I`/`ms I` hand out
//! and report win tokens (`W`, `Z`) and staleness (`X`) as memcached does.

use std::borrow::Cow;
use std::time::Instant;

use super::items::{Item, ntotal, size_ok, slab_class};
use super::parse::{
    KEY_MAX_LENGTH as KEY_MAX, Tokens, base64_decode, base64_encode, push_i64, push_u64, strtol,
    strtoul, strtoull,
};
use super::state::{Ctx, MetaSet, Mode, Pending, Step};
use super::stats::Counter;
use super::storage::{Delta, add_delta, push_key};

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format";
const BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format";
const OPAQUE_TOO_LONG: &[u8] = b"CLIENT_ERROR opaque token too long";

/// memcached's `MFLAG_MAX_OPT_LENGTH`: a meta command of more words (its terminal token
/// counted) is refused.
const MAX_TOKENS: usize = 20;

/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: an `O` flag's length, its `O` included.
const MAX_OPAQUE: usize = 32;

/// What a meta command's flags ask (memcached's `struct _meta_flags`).
#[derive(Default)]
struct Flags {
    no_update: bool,
    /// A flag that needs the item before its LRU bump (`h`, `l`, `N`, `R`, `T`).
    locked: bool,
    vivify: bool,
    value: bool,
    set_stale: bool,
    no_reply: bool,
    has_cas: bool,
    new_ttl: bool,
    key_binary: bool,
    mode: Option<u8>,
    exptime: Option<Instant>,
    autoviv: Option<Instant>,
    recache: Option<Instant>,
    client_flags: u32,
    cas: u64,
    delta: Option<u64>,
    initial: u64,
}

/// memcached's `_meta_flag_preparse` over `t`'s words from `start`: the flags and the key
/// (decoded, with `b`), or the error line (`default` where memcached leaves its caller's).
fn preparse<'k>(
    ctx: &Ctx<'_>,
    t: &Tokens<'k>,
    start: usize,
    default: &'static [u8],
) -> Result<(Flags, Cow<'k, [u8]>), &'static [u8]> {
    let mut f = Flags::default();
    let mut key = Cow::Borrowed(t.get(1));
    let mut seen = [false; 127];
    let mut error: Option<&'static [u8]> = None;
    let number = |w: &[u8]| strtol(&w[1..]).map(|e| ctx.deadline(e));
    for w in t.words().iter().skip(start) {
        let o = w[0];
        if o >= 127 || seen[usize::from(o)] {
            return Err(b"CLIENT_ERROR duplicate flag");
        }
        seen[usize::from(o)] = true;
        match o {
            b'b' => match base64_decode(t.get(1)) {
                Some(decoded) => {
                    key = Cow::Owned(decoded);
                    f.key_binary = true;
                }
                None => error = Some(b"CLIENT_ERROR error decoding key"),
            },
            b'N' => {
                f.locked = true;
                f.vivify = true;
                match number(w) {
                    Some(at) => f.autoviv = at,
                    None => error = Some(BAD_TOKEN),
                }
            }
            b'T' => {
                f.locked = true;
                match number(w) {
                    Some(at) => {
                        f.exptime = at;
                        f.new_ttl = true;
                    }
                    None => error = Some(BAD_TOKEN),
                }
            }
            b'R' => {
                f.locked = true;
                match number(w) {
                    Some(at) => f.recache = at,
                    None => error = Some(BAD_TOKEN),
                }
            }
            b'l' | b'h' => f.locked = true,
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' => {}
            b'v' => f.value = true,
            b'u' => f.no_update = true,
            b'q' => f.no_reply = true,
            b'F' => match strtoul(&w[1..]) {
                Some(flags) => f.client_flags = flags,
                None => error = Some(error.unwrap_or(default)),
            },
            b'C' => match strtoull(&w[1..]) {
                Some(cas) => {
                    f.cas = cas;
                    f.has_cas = true;
                }
                None => error = Some(BAD_TOKEN),
            },
            b'M' => match w {
                [_, mode] => f.mode = Some(*mode),
                _ => error = Some(b"CLIENT_ERROR incorrect length for M token"),
            },
            b'J' => match strtoull(&w[1..]) {
                Some(initial) => f.initial = initial,
                None => error = Some(b"CLIENT_ERROR invalid numeric initial value"),
            },
            b'D' => match strtoull(&w[1..]) {
                Some(delta) => f.delta = Some(delta),
                None => error = Some(b"CLIENT_ERROR invalid numeric delta value"),
            },
            b'I' => f.set_stale = true,
            _ => return Err(b"CLIENT_ERROR invalid flag"),
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok((f, key)),
    }
}

/// The checks every meta command but `mn` and `me` starts with: a key (else `ERROR`) of at
/// most 250 bytes, at most [`MAX_TOKENS`] words. `Err`: answered.
fn check(ctx: &mut Ctx<'_>, t: &Tokens<'_>, too_many: &[u8]) -> Result<(), ()> {
    if t.ntokens() < 3 {
        ctx.error();
    } else if t.get(1).len() > KEY_MAX {
        ctx.line(BAD_FORMAT);
    } else if t.ntokens() > MAX_TOKENS {
        ctx.line(too_many);
    } else {
        return Ok(());
    }
    Err(())
}

/// Appends ` O…` for an opaque flag `w` (one of at most [`MAX_OPAQUE`] bytes).
fn opaque(out: &mut Vec<u8>, w: &[u8]) {
    out.push(b' ');
    out.extend_from_slice(w);
}

/// Replaces what a command wrote from `start` with the error line `e`.
fn fail(ctx: &mut Ctx<'_>, start: usize, e: &[u8]) {
    ctx.out.truncate(start);
    ctx.line(e);
}

/// `mg <key> <flags>*`: `VA`/`HD` and the flags asked, or `EN`. Counted as memcached
/// does: a hit in `cmd_get` and `get_hits`, or with `T` in `cmd_touch` and `touch_hits`
/// only; a miss in `cmd_get` and `get_misses`, `T` or not. An item `N` creates is a hit.
pub(crate) fn get(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    if check(ctx, t, b"CLIENT_ERROR options flags are too long").is_err() {
        return;
    }
    let (f, key) = match preparse(ctx, t, 2, BAD_FORMAT) {
        Ok(parsed) => parsed,
        Err(e) => return ctx.line(e),
    };
    let now = ctx.now;
    let state = ctx.state;
    let mut shard = state.items.lock(&key);
    let mut created = false;
    if shard.live(&key, now, ctx.counts).is_none() && f.vivify {
        shard.link(&key, Item::new(Vec::new(), 0, None, now), now, ctx.counts);
        created = true;
    }
    let start = ctx.out.len();
    let flags = &t.words()[2..];
    let Some(item) = shard.get(&key) else {
        ctx.counts.bump(Counter::GetMisses);
        ctx.counts.bump(Counter::CmdGet);
        ctx.out.extend_from_slice(b"EN");
        for w in flags {
            match w[0] {
                b'O' if w.len() > MAX_OPAQUE => return fail(ctx, start, OPAQUE_TOO_LONG),
                b'O' => opaque(ctx.out, w),
                b'k' => push_key(ctx.out, &key, f.key_binary),
                _ => {}
            }
        }
        ctx.out.extend_from_slice(b"\r\n");
        if f.no_reply {
            ctx.out.truncate(start);
        }
        return;
    };
    if !f.locked && !f.no_update {
        item.bump(now);
    }
    let out = &mut *ctx.out;
    if f.value {
        out.extend_from_slice(b"VA ");
        push_u64(out, item.value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    let (mut won, mut ttl_set) = (false, false);
    for w in flags {
        match w[0] {
            b'T' => {
                ttl_set = true;
                item.exptime = f.exptime;
            }
            b'N' if created => {
                item.exptime = f.autoviv;
                won = true;
            }
            b'R' => {
                let soon = matches!((item.exptime, f.recache), (Some(e), Some(r)) if e < r);
                won |= !item.token_sent && !created && soon;
            }
            b's' => {
                out.extend_from_slice(b" s");
                push_u64(out, item.value.len() as u64);
            }
            b't' => {
                out.extend_from_slice(b" t");
                match item.ttl(now) {
                    Some(left) => push_u64(out, left),
                    None => out.extend_from_slice(b"-1"),
                }
            }
            b'c' => {
                out.extend_from_slice(b" c");
                push_u64(out, item.cas);
            }
            b'f' => {
                out.extend_from_slice(b" f");
                push_u64(out, u64::from(item.flags));
            }
            b'l' => {
                out.extend_from_slice(b" l");
                push_u64(out, now.saturating_duration_since(item.time).as_secs());
            }
            b'h' => out.extend_from_slice(if item.fetched { b" h1" } else { b" h0" }),
            b'O' if w.len() > MAX_OPAQUE => return fail(ctx, start, OPAQUE_TOO_LONG),
            b'O' => opaque(out, w),
            b'k' => push_key(out, &key, item.key_binary),
            _ => {}
        }
    }
    if item.token_sent {
        out.extend_from_slice(b" Z");
    }
    if item.stale {
        out.extend_from_slice(b" X");
        won |= !item.token_sent;
    }
    if won {
        out.extend_from_slice(b" W");
        item.token_sent = true;
    }
    out.extend_from_slice(b"\r\n");
    if f.value {
        out.extend_from_slice(&item.value);
        out.extend_from_slice(b"\r\n");
    }
    if f.locked && !f.no_update {
        item.bump(now);
    }
    if ttl_set {
        ctx.counts.bump(Counter::CmdTouch);
        ctx.counts.bump(Counter::TouchHits);
    } else {
        ctx.counts.bump(Counter::GetHits);
        ctx.counts.bump(Counter::CmdGet);
    }
}

/// `ms <key> <datalen> <flags>*`: the line; the data block follows
/// ([`super::storage::complete`]). Once the length is read, a refused `ms` swallows its
/// data block (a flag error, a bad mode, a value too large: this one also drops what the
/// key held, whatever the mode, as memcached does).
pub(crate) fn set(ctx: &mut Ctx<'_>, t: &Tokens<'_>) -> Step {
    if t.ntokens() < 3 {
        ctx.error();
        return Step::Next;
    }
    if t.get(1).len() > KEY_MAX || t.ntokens() == 3 {
        ctx.line(BAD_FORMAT);
        return Step::Next;
    }
    if t.ntokens() > MAX_TOKENS {
        ctx.line(b"CLIENT_ERROR options flags too long");
        return Step::Next;
    }
    let Some(len) = strtol(t.get(2))
        .and_then(|len| usize::try_from(len).ok())
        .filter(|&len| len <= i32::MAX as usize - 2)
    else {
        ctx.line(BAD_FORMAT);
        return Step::Next;
    };
    let need = len + 2;
    let refuse = |ctx: &mut Ctx<'_>, e: &[u8]| {
        ctx.line(e);
        Step::Swallow(need)
    };
    let (f, key) = match preparse(ctx, t, 3, BAD_FORMAT) {
        Ok(parsed) => parsed,
        Err(e) => return refuse(ctx, e),
    };
    let mut returns = Vec::new();
    let mut error = None;
    for w in &t.words()[2..] {
        match w[0] {
            b'O' if w.len() > MAX_OPAQUE => error = Some(OPAQUE_TOO_LONG),
            b'O' | b'k' | b'c' => returns.push(w.to_vec()),
            _ => {}
        }
    }
    let mode = match f.mode {
        None | Some(b'S') => Mode::Set,
        Some(b'E') => Mode::Add,
        Some(b'A') => Mode::Append,
        Some(b'P') => Mode::Prepend,
        Some(b'R') => Mode::Replace,
        Some(_) => return refuse(ctx, b"CLIENT_ERROR invalid mode for ms M token"),
    };
    // A CAS makes a set (or a replace) a cas.
    let mode = match mode {
        Mode::Set | Mode::Replace if f.has_cas => Mode::Cas,
        mode => mode,
    };
    if let Some(e) = error {
        return refuse(ctx, e);
    }
    if !size_ok(key.len(), f.client_flags, len) {
        ctx.counts.bump(Counter::StoreTooLarge);
        let now = ctx.now;
        let mut shard = ctx.state.items.lock(&key);
        if shard.live(&key, now, ctx.counts).is_some() {
            shard.unlink(&key);
        }
        drop(shard);
        return refuse(ctx, b"SERVER_ERROR object too large for cache");
    }
    Step::Read(Pending {
        mode,
        key: key.into_owned(),
        flags: f.client_flags,
        exptime: f.exptime,
        cas: f.cas,
        need,
        noreply: f.no_reply,
        meta: Some(MetaSet {
            returns,
            set_stale: f.set_stale && mode == Mode::Cas,
            key_binary: f.key_binary,
        }),
    })
}

/// `md <key> <flags>*`: `HD`, `NF`, or `EX` (a CAS that is not the item's, counted as a
/// miss). With `I` the item is kept, marked stale, given a new CAS unique (and `T`'s TTL),
/// and counted nowhere.
pub(crate) fn delete(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    if check(ctx, t, b"CLIENT_ERROR options flags too long").is_err() {
        return;
    }
    let (f, key) = match preparse(ctx, t, 2, BAD_FORMAT) {
        Ok(parsed) => parsed,
        Err(_) => return ctx.line(b"CLIENT_ERROR invalid or duplicate flag"),
    };
    let mut returned = Vec::new();
    for w in &t.words()[2..] {
        match w[0] {
            b'O' if w.len() > MAX_OPAQUE => return ctx.line(OPAQUE_TOO_LONG),
            b'O' => opaque(&mut returned, w),
            b'k' => push_key(&mut returned, &key, f.key_binary),
            _ => {}
        }
    }
    let now = ctx.now;
    let state = ctx.state;
    let mut shard = state.items.lock(&key);
    let (status, nominal): (&[u8], bool) = match shard.live(&key, now, ctx.counts) {
        Some(item) if f.has_cas && item.cas != f.cas => {
            ctx.counts.bump(Counter::DeleteMisses);
            (b"EX", false)
        }
        Some(item) if f.set_stale => {
            if f.new_ttl {
                item.exptime = f.exptime;
            }
            item.stale = true;
            item.token_sent = false;
            item.cas = state.items.next_cas();
            (b"HD", true)
        }
        Some(_) => {
            shard.unlink(&key);
            ctx.counts.bump(Counter::DeleteHits);
            (b"HD", true)
        }
        None => {
            ctx.counts.bump(Counter::DeleteMisses);
            (b"NF", false)
        }
    };
    if nominal && f.no_reply {
        return;
    }
    ctx.out.extend_from_slice(status);
    ctx.out.extend_from_slice(&returned);
    ctx.out.extend_from_slice(b"\r\n");
}

/// `ma <key> <flags>*`: `HD` (or `VA` and the number with `v`), `NF`, `EX`, and memcached's
/// counters: `incr_hits`/`decr_hits`, `incr_misses`/`decr_misses`; `N` creates a missing
/// item at `J`'s value, counted nowhere but `total_items`.
pub(crate) fn arith(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    if check(ctx, t, b"CLIENT_ERROR options flags too long").is_err() {
        return;
    }
    let (f, key) = match preparse(ctx, t, 2, BAD_FORMAT) {
        Ok(parsed) => parsed,
        Err(_) => return ctx.line(b"CLIENT_ERROR invalid or duplicate flag"),
    };
    let incr = match f.mode {
        None | Some(b'I' | b'+') => true,
        Some(b'D' | b'-') => false,
        Some(_) => return ctx.line(b"CLIENT_ERROR invalid mode for ma M token"),
    };
    let now = ctx.now;
    let state = ctx.state;
    let mut shard = state.items.lock(&key);
    let start = ctx.out.len();
    let flags = &t.words()[2..];
    let (number, quiet, created) =
        match add_delta(ctx, &mut shard, &key, incr, f.delta.unwrap_or(1), f.cas) {
            Delta::Ok(n) => (n, f.no_reply, false),
            Delta::NonNumeric => {
                return ctx.line(b"CLIENT_ERROR cannot increment or decrement non-numeric value");
            }
            Delta::NotFound if f.vivify => {
                let mut digits = Vec::with_capacity(20);
                push_u64(&mut digits, f.initial);
                shard.link(&key, Item::new(digits, 0, None, now), now, ctx.counts);
                (f.initial, false, true)
            }
            miss @ (Delta::NotFound | Delta::CasMismatch) => {
                if miss == Delta::NotFound {
                    ctx.counts.bump(if incr {
                        Counter::IncrMisses
                    } else {
                        Counter::DecrMisses
                    });
                    ctx.out.extend_from_slice(b"NF");
                } else {
                    ctx.out.extend_from_slice(b"EX");
                }
                for w in flags {
                    match w[0] {
                        b'O' if w.len() > MAX_OPAQUE => return fail(ctx, start, OPAQUE_TOO_LONG),
                        b'O' => opaque(ctx.out, w),
                        b'k' => push_key(ctx.out, &key, f.key_binary),
                        _ => {}
                    }
                }
                ctx.out.extend_from_slice(b"\r\n");
                return;
            }
        };
    let Some(item) = shard.get(&key) else {
        return;
    };
    let mut digits = Vec::with_capacity(20);
    push_u64(&mut digits, number);
    let out = &mut *ctx.out;
    if f.value {
        out.extend_from_slice(b"VA ");
        push_u64(out, digits.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    for w in flags {
        match w[0] {
            b'c' => {
                out.extend_from_slice(b" c");
                push_u64(out, item.cas);
            }
            b't' => {
                out.extend_from_slice(b" t");
                match item.ttl(now) {
                    Some(left) => push_u64(out, left),
                    None => out.extend_from_slice(b"-1"),
                }
            }
            b'T' => item.exptime = f.exptime,
            b'N' if created => item.exptime = f.autoviv,
            b'O' if w.len() > MAX_OPAQUE => return fail(ctx, start, OPAQUE_TOO_LONG),
            b'O' => opaque(out, w),
            b'k' => push_key(out, &key, f.key_binary),
            _ => {}
        }
    }
    if f.value {
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&digits);
    }
    out.extend_from_slice(b"\r\n");
    if quiet {
        out.truncate(start);
    }
}

/// `me <key> [b]`: memcached's debug line for an item, or `EN`; counted in `cmd_meta`.
pub(crate) fn debug(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    if t.ntokens() < 3 || t.get(1).len() > KEY_MAX {
        return ctx.line(BAD_FORMAT);
    }
    let key = if t.ntokens() >= 4 && t.get(2) == b"b" {
        match base64_decode(t.get(1)) {
            Some(key) => Cow::Owned(key),
            None => return ctx.line(BAD_FORMAT),
        }
    } else {
        Cow::Borrowed(t.get(1))
    };
    let now = ctx.now;
    let mut shard = ctx.state.items.lock(&key);
    let out = &mut *ctx.out;
    match shard.live(&key, now, ctx.counts) {
        Some(item) => {
            out.extend_from_slice(b"ME ");
            if item.key_binary {
                base64_encode(&key, out);
            } else {
                out.extend_from_slice(&key);
            }
            out.extend_from_slice(b" exp=");
            match item.ttl(now) {
                Some(left) => push_i64(out, -i64::try_from(left).unwrap_or(i64::MAX)),
                None => out.extend_from_slice(b"-1"),
            }
            out.extend_from_slice(b" la=");
            push_u64(out, now.saturating_duration_since(item.time).as_secs());
            out.extend_from_slice(b" cas=");
            push_u64(out, item.cas);
            out.extend_from_slice(if item.fetched {
                b" fetch=yes"
            } else {
                b" fetch=no"
            });
            let size = ntotal(key.len(), item.flags, item.value.len());
            out.extend_from_slice(b" cls=");
            push_u64(out, slab_class(size) as u64);
            out.extend_from_slice(b" size=");
            push_u64(out, size as u64);
            out.extend_from_slice(b"\r\n");
        }
        None => out.extend_from_slice(b"EN\r\n"),
    }
    ctx.counts.bump(Counter::CmdMeta);
}

#[cfg(test)]
mod tests {
    use crate::mc::session::tests::Harness;
    use crate::mc::stats::Counter;

    #[test]
    fn mg_counts_a_ttl_hit_as_a_touch_and_a_ttl_miss_as_a_get() {
        let mut h = Harness::new();
        assert_eq!(h.text(b"ms a 2 T0 F7\r\nhi\r\n"), "HD\r\n");
        assert_eq!(
            h.text(b"mg a v f s k t O9\r\n"),
            "VA 2 f7 s2 ka t-1 O9\r\nhi\r\n"
        );
        assert_eq!(
            (h.count(Counter::CmdGet), h.count(Counter::GetHits)),
            (1, 1)
        );
        assert_eq!(h.text(b"mg a T30 t\r\n"), "HD t30\r\n");
        assert_eq!(
            (h.count(Counter::CmdTouch), h.count(Counter::TouchHits)),
            (1, 1)
        );
        assert_eq!(h.count(Counter::CmdGet), 1);
        assert_eq!(h.text(b"mg b T30 v k O1\r\n"), "EN kb O1\r\n");
        assert_eq!(
            (h.count(Counter::CmdGet), h.count(Counter::GetMisses)),
            (2, 1)
        );
        assert_eq!(h.count(Counter::TouchMisses), 0);
        // Quiet: a miss says nothing, a hit does.
        assert_eq!(h.text(b"mg b v q\r\nmg a q\r\nmn\r\n"), "HD\r\nMN\r\n");
    }

    #[test]
    fn ms_counts_as_a_set_and_its_modes_store_as_memcached() {
        let mut h = Harness::new();
        assert_eq!(
            h.text(
                b"ms m 1 MR\r\nx\r\nms m 1 MS\r\na\r\nms m 1 MA\r\nb\r\nms m 1 MP\r\nc\r\n\
                  ms m 1 ME q O3\r\nd\r\nmg m v\r\n"
            ),
            "NS\r\nHD\r\nHD\r\nHD\r\nNS O3\r\nVA 3\r\ncab\r\n"
        );
        assert_eq!(h.count(Counter::CmdSet), 5);
        assert_eq!(h.count(Counter::TotalItems), 3);
        assert_eq!(
            h.text(b"ms m 1 MX\r\nx\r\nms m 1 v v\r\nx\r\nms m 1 q\r\nxyz\r\n"),
            "CLIENT_ERROR invalid mode for ms M token\r\nCLIENT_ERROR duplicate flag\r\n\
             CLIENT_ERROR bad data chunk\r\nERROR\r\n"
        );
        assert_eq!(
            h.count(Counter::CmdSet),
            6,
            "a bad data chunk is read, so counted"
        );
        let reply = h.text(b"mg m c\r\n");
        let cas = reply.trim_end().strip_prefix("HD c").unwrap();
        assert_eq!(
            h.text(
                format!("ms m 1 C{cas}\r\ny\r\nms m 1 C{cas}\r\nz\r\nms n 1 C1\r\nx\r\n")
                    .as_bytes()
            ),
            "HD\r\nEX\r\nNF\r\n"
        );
        assert_eq!(
            (
                h.count(Counter::CasHits),
                h.count(Counter::CasBadval),
                h.count(Counter::CasMisses)
            ),
            (1, 1, 1)
        );
    }

    #[test]
    fn ma_counts_as_incr_and_decr() {
        let mut h = Harness::new();
        assert_eq!(
            h.text(
                b"ms n 2\r\n10\r\nma n v\r\nma n MD D20 v\r\nma n q\r\nma z\r\nma z MD q\r\nmn\r\n"
            ),
            "HD\r\nVA 2\r\n11\r\nVA 1\r\n0\r\nNF\r\nNF\r\nMN\r\n"
        );
        assert_eq!(
            (h.count(Counter::IncrHits), h.count(Counter::DecrHits)),
            (2, 1)
        );
        assert_eq!(
            (h.count(Counter::IncrMisses), h.count(Counter::DecrMisses)),
            (1, 1)
        );
        assert_eq!(
            h.text(b"ma v N0 J7 v t\r\nma v v\r\n"),
            "VA 1 t-1\r\n7\r\nVA 1\r\n8\r\n"
        );
        assert_eq!(h.count(Counter::IncrHits), 3, "the created item is no hit");
        assert_eq!(
            h.text(b"ms s 1\r\nx\r\nma s\r\nma n Mx\r\nma n D-1\r\n"),
            "HD\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
             CLIENT_ERROR invalid mode for ma M token\r\nCLIENT_ERROR invalid or duplicate flag\r\n"
        );
    }

    #[test]
    fn md_win_tokens_and_base64_keys() {
        let mut h = Harness::new();
        assert_eq!(
            h.text(b"md a q\r\nmd a O1 k\r\nmn\r\n"),
            "NF\r\nNF O1 ka\r\nMN\r\n"
        );
        assert_eq!(h.count(Counter::DeleteMisses), 2);
        assert_eq!(
            h.text(b"ms a 1\r\nx\r\nmd a I\r\nmg a v\r\nmg a\r\nmd a q\r\nmg a\r\nmn\r\n"),
            "HD\r\nHD\r\nVA 1 X W\r\nx\r\nHD Z X\r\nEN\r\nMN\r\n"
        );
        assert_eq!(h.count(Counter::DeleteHits), 1);
        assert_eq!(h.text(b"mg v N0 v\r\nmg v\r\n"), "VA 0 W\r\n\r\nHD Z\r\n");
        assert_eq!(
            h.text(b"ms YSBrZXk= 1 b k\r\nx\r\nget a key\r\nmg a k\r\nmg YSBrZXk= b k s\r\n"),
            "HD kYSBrZXk= b\r\nEND\r\nEN ka\r\nHD kYSBrZXk= b s1\r\n"
        );
        assert_eq!(
            h.text(b"mg !!!! b\r\n"),
            "CLIENT_ERROR error decoding key\r\n"
        );
    }

    #[test]
    fn me_describes_an_item_as_memcached() {
        let mut h = Harness::new();
        h.text(b"set meitem 0 0 1\r\nx\r\n");
        let line = h.text(b"me meitem\r\n");
        assert!(line.starts_with("ME meitem exp=-1 la=0 cas="), "{line}");
        assert!(line.ends_with(" fetch=no cls=1 size=66\r\n"), "{line}");
        assert_eq!(
            h.text(b"me nope\r\nme\r\n"),
            "EN\r\nCLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(h.count(Counter::CmdMeta), 2);
    }
}

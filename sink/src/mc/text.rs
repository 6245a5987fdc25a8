//! The text protocol's commands, each as memcached 1.6.18's `proto_text.c` runs it:
//! the same checks in the same order, so the same request gets the same error. Word counts
//! are checked by the dispatcher ([`super::cmd`]); `noreply` silences every reply of a
//! command that takes it, errors included, as memcached's `out_string` does.

use super::parse::{
    KEY_MAX_LENGTH, Tokens, after_words, push_u64, strtol, strtoul, strtoull, words,
};
use super::state::{Ctx, Mode, Pending, Retrieval, Step};
use super::stats::{ALL, Counter, rusage};
use super::storage::{Delta, add_delta};

/// The version `version` and `stats` give: the memcached whose behaviour this follows, and
/// that it is the built-in target (so a report never mistakes it for a real memcached).
pub(crate) const VERSION: &str = "1.6.18-crest-sink";

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format";
const BAD_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument";

/// `noreply` as memcached finds it: the last word.
fn noreply(t: &Tokens<'_>) -> bool {
    t.get(t.ntokens().saturating_sub(2)) == b"noreply"
}

/// `get`, `gets`, `gat`, `gats` (`bget` too): checks the line, then leaves its keys to
/// the session ([`retrieve_one`] each, then `END`).
pub(crate) fn retrieve(
    ctx: &mut Ctx<'_>,
    t: &Tokens<'_>,
    line: &[u8],
    cas: bool,
    touch: bool,
) -> Step {
    let mut touch_to = None;
    let mut skip = 0;
    if touch {
        let Some(exptime) = strtol(t.get(1)) else {
            ctx.line(BAD_EXPTIME);
            return Step::Next;
        };
        touch_to = Some(ctx.deadline(exptime));
        skip = 1;
    }
    let keys_at = after_words(line, skip);
    Step::Retrieve(Retrieval {
        cas,
        touch: touch_to,
        keys_at,
        bad_key: words(&line[keys_at..]).any(|k| k.len() > KEY_MAX_LENGTH),
    })
}

/// One key of a retrieval: its `VALUE` block when found (and `emit`), counted per key:
/// `cmd_get` and `get_hits`/`get_misses`, or for `gat`/`gats` `cmd_touch` and
/// `touch_hits`/`touch_misses` only.
pub(crate) fn retrieve_one(ctx: &mut Ctx<'_>, r: &Retrieval, key: &[u8], emit: bool) {
    let now = ctx.now;
    let mut shard = ctx.state.items.lock(key);
    let (hit, miss) = match r.touch {
        Some(_) => (Counter::TouchHits, Counter::TouchMisses),
        None => (Counter::GetHits, Counter::GetMisses),
    };
    ctx.counts.bump(match r.touch {
        Some(_) => Counter::CmdTouch,
        None => Counter::CmdGet,
    });
    let Some(item) = shard.live(key, now, ctx.counts) else {
        ctx.counts.bump(miss);
        return;
    };
    item.bump(now);
    if let Some(exptime) = r.touch {
        item.exptime = exptime;
    }
    ctx.counts.bump(hit);
    if emit {
        let out = &mut *ctx.out;
        out.extend_from_slice(b"VALUE ");
        out.extend_from_slice(key);
        out.push(b' ');
        push_u64(out, u64::from(item.flags));
        out.push(b' ');
        push_u64(out, item.value.len() as u64);
        if r.cas {
            out.push(b' ');
            push_u64(out, item.cas);
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&item.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// `set`, `add`, `replace`, `append`, `prepend`, `cas` (6 or 7 words, `cas` one more):
/// the line; the data block follows ([`super::storage::complete`]). A value too large is
/// refused and its block swallowed; a refused `set` also drops what the key held.
pub(crate) fn update(ctx: &mut Ctx<'_>, t: &Tokens<'_>, mode: Mode) -> Step {
    let noreply = noreply(t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        ctx.reply(noreply, BAD_FORMAT);
        return Step::Next;
    }
    let (Some(flags), Some(exptime), Some(len)) =
        (strtoul(t.get(2)), strtol(t.get(3)), strtol(t.get(4)))
    else {
        ctx.reply(noreply, BAD_FORMAT);
        return Step::Next;
    };
    let exptime = ctx.deadline(exptime);
    let mut cas = 0;
    if mode == Mode::Cas {
        let Some(unique) = strtoull(t.get(5)) else {
            ctx.reply(noreply, BAD_FORMAT);
            return Step::Next;
        };
        cas = unique;
    }
    let Ok(len) = usize::try_from(len) else {
        ctx.reply(noreply, BAD_FORMAT);
        return Step::Next;
    };
    if len > i32::MAX as usize - 2 {
        ctx.reply(noreply, BAD_FORMAT);
        return Step::Next;
    }
    if !super::items::size_ok(key.len(), flags, len) {
        ctx.reply(noreply, b"SERVER_ERROR object too large for cache");
        ctx.counts.bump(Counter::StoreTooLarge);
        if mode == Mode::Set {
            // memcached: "avoid stale data persisting in cache because we failed alloc".
            let now = ctx.now;
            let mut shard = ctx.state.items.lock(key);
            if shard.live(key, now, ctx.counts).is_some() {
                shard.unlink(key);
            }
        }
        return Step::Swallow(len + 2);
    }
    Step::Read(Pending {
        mode,
        key: key.to_vec(),
        flags,
        exptime,
        cas,
        need: len + 2,
        noreply,
        meta: None,
    })
}

/// `incr`/`decr <key> <delta> [noreply]`.
pub(crate) fn arith(ctx: &mut Ctx<'_>, t: &Tokens<'_>, incr: bool) {
    let noreply = noreply(t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        ctx.reply(noreply, BAD_FORMAT);
        return;
    }
    let Some(delta) = strtoull(t.get(2)) else {
        ctx.reply(noreply, b"CLIENT_ERROR invalid numeric delta argument");
        return;
    };
    let mut shard = ctx.state.items.lock(key);
    match add_delta(ctx, &mut shard, key, incr, delta, 0) {
        Delta::Ok(value) => {
            if !noreply {
                push_u64(ctx.out, value);
                ctx.out.extend_from_slice(b"\r\n");
            }
        }
        Delta::NonNumeric => ctx.reply(
            noreply,
            b"CLIENT_ERROR cannot increment or decrement non-numeric value",
        ),
        // memcached writes nothing here ("should never get here": no CAS was given).
        Delta::CasMismatch => {}
        Delta::NotFound => {
            ctx.counts.bump(if incr {
                Counter::IncrMisses
            } else {
                Counter::DecrMisses
            });
            ctx.reply(noreply, b"NOT_FOUND");
        }
    }
}

/// `touch <key> <exptime> [noreply]`: `cmd_touch`, and `touch_hits` or `touch_misses`.
pub(crate) fn touch(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    let noreply = noreply(t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        ctx.reply(noreply, BAD_FORMAT);
        return;
    }
    let Some(exptime) = strtol(t.get(2)) else {
        ctx.reply(noreply, BAD_EXPTIME);
        return;
    };
    let exptime = ctx.deadline(exptime);
    let now = ctx.now;
    let mut shard = ctx.state.items.lock(key);
    ctx.counts.bump(Counter::CmdTouch);
    match shard.live(key, now, ctx.counts) {
        Some(item) => {
            item.bump(now);
            item.exptime = exptime;
            ctx.counts.bump(Counter::TouchHits);
            ctx.reply(noreply, b"TOUCHED");
        }
        None => {
            ctx.counts.bump(Counter::TouchMisses);
            ctx.reply(noreply, b"NOT_FOUND");
        }
    }
}

/// `delete <key> [0] [noreply]` (a hold time other than 0 is refused, as memcached has
/// since 1.4).
pub(crate) fn delete(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    let nt = t.ntokens();
    let mut noreply = false;
    if nt > 3 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = self::noreply(t);
        let valid = (nt == 4 && (hold_is_zero || noreply)) || (nt == 5 && hold_is_zero && noreply);
        if !valid {
            ctx.reply(
                noreply,
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
            );
            return;
        }
    }
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        ctx.reply(noreply, BAD_FORMAT);
        return;
    }
    let now = ctx.now;
    let mut shard = ctx.state.items.lock(key);
    if shard.live(key, now, ctx.counts).is_some() {
        shard.unlink(key);
        ctx.counts.bump(Counter::DeleteHits);
        ctx.reply(noreply, b"DELETED");
    } else {
        ctx.counts.bump(Counter::DeleteMisses);
        ctx.reply(noreply, b"NOT_FOUND");
    }
}

/// `flush_all [delay] [noreply]`: counted in `cmd_flush` even when refused.
pub(crate) fn flush_all(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    let noreply = noreply(t);
    ctx.counts.bump(Counter::CmdFlush);
    let mut delay = 0;
    if t.ntokens() != if noreply { 3 } else { 2 } {
        let Some(d) = strtol(t.get(1)) else {
            ctx.reply(noreply, BAD_EXPTIME);
            return;
        };
        delay = d;
    }
    let at = if delay > 0 { ctx.deadline(delay) } else { None };
    ctx.state.items.flush(at);
    ctx.reply(noreply, b"OK");
}

/// `verbosity <level> [noreply]`: there is no log level to set; `OK`.
pub(crate) fn verbosity(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    let noreply = noreply(t);
    match strtoul(t.get(1)) {
        Some(_) => ctx.reply(noreply, b"OK"),
        None => ctx.reply(noreply, BAD_FORMAT),
    }
}

/// `stats`, `stats reset`, `stats settings`; `stats items|slabs|sizes|conns` answer an
/// empty list, `stats detail` its usage or `OK`; anything else `ERROR`.
pub(crate) fn stats(ctx: &mut Ctx<'_>, t: &Tokens<'_>) {
    // This connection's own counts first.
    ctx.state.stats.flush(ctx.counts);
    if t.ntokens() == 2 {
        general(ctx);
        return;
    }
    match t.get(1) {
        b"reset" => {
            ctx.state.stats.reset();
            ctx.state
                .total_connections
                .store(0, std::sync::atomic::Ordering::Relaxed);
            ctx.line(b"RESET");
        }
        b"settings" => settings(ctx),
        b"detail" => match t.get(2) {
            b"on" | b"off" if t.ntokens() >= 4 => ctx.line(b"OK"),
            b"dump" if t.ntokens() >= 4 => ctx.line(b"END"),
            _ => ctx.line(b"CLIENT_ERROR usage: stats detail on|off|dump"),
        },
        b"items" | b"slabs" | b"sizes" | b"conns" => ctx.line(b"END"),
        _ => ctx.error(),
    }
}

fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// `stats`: memcached's general statistics, in its order, the ones the sink keeps.
fn general(ctx: &mut Ctx<'_>) {
    use std::sync::atomic::Ordering::Relaxed;
    let state = ctx.state;
    let (items, bytes) = state.items.sweep(ctx.now);
    let (user, system) = rusage();
    let uptime = ctx.now.saturating_duration_since(state.started).as_secs();
    let unix = state.started_unix + uptime;
    let cpu = |d: std::time::Duration| format!("{}.{:06}", d.as_secs(), d.subsec_micros());
    let out = &mut *ctx.out;
    stat(out, "pid", std::process::id());
    stat(out, "uptime", uptime);
    stat(out, "time", unix);
    stat(out, "version", VERSION);
    stat(out, "crest_sink", 1);
    stat(out, "pointer_size", 64);
    stat(out, "rusage_user", cpu(user));
    stat(out, "rusage_system", cpu(system));
    stat(
        out,
        "curr_connections",
        state.curr_connections.load(Relaxed),
    );
    stat(
        out,
        "total_connections",
        state.total_connections.load(Relaxed),
    );
    stat(out, "rejected_connections", 0);
    for (counter, name) in ALL {
        if counter != Counter::TotalItems {
            stat(out, name, state.stats.get(counter));
        }
    }
    stat(out, "accepting_conns", 1);
    stat(out, "threads", state.threads);
    stat(out, "bytes", bytes);
    stat(out, "curr_items", items);
    stat(out, "total_items", state.stats.get(Counter::TotalItems));
    stat(out, "evictions", 0);
    out.extend_from_slice(b"END\r\n");
}

/// `stats settings`: the ones that say how this server behaves.
fn settings(ctx: &mut Ctx<'_>) {
    let state = ctx.state;
    let out = &mut *ctx.out;
    stat(out, "maxbytes", 0);
    stat(out, "tcpport", state.port);
    stat(out, "udpport", 0);
    stat(out, "evictions", "off");
    stat(out, "growth_factor", "1.25");
    stat(out, "chunk_size", 48);
    stat(out, "num_threads", state.threads);
    stat(out, "cas_enabled", "yes");
    stat(out, "binding_protocol", "ascii");
    stat(out, "item_size_max", super::items::ITEM_SIZE_MAX);
    stat(out, "slab_chunk_max", super::items::SLAB_CHUNK_MAX);
    stat(out, "flush_enabled", "yes");
    stat(out, "lru_crawler", "no");
    stat(out, "lru_maintainer_thread", "no");
    out.extend_from_slice(b"END\r\n");
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::mc::session::tests::Harness;
    use crate::mc::stats::Counter;

    #[test]
    fn retrievals_count_per_key_and_gat_only_as_touches() {
        let mut h = Harness::new();
        assert_eq!(h.text(b"set a 3 0 2\r\nhi\r\n"), "STORED\r\n");
        assert_eq!(
            h.text(b"get a b a\r\n"),
            "VALUE a 3 2\r\nhi\r\nVALUE a 3 2\r\nhi\r\nEND\r\n"
        );
        assert_eq!(h.count(Counter::CmdGet), 3);
        assert_eq!(h.count(Counter::GetHits), 2);
        assert_eq!(h.count(Counter::GetMisses), 1);
        let reply = h.text(b"gats 100 a b\r\n");
        assert!(reply.starts_with("VALUE a 3 2 ") && reply.ends_with("\r\nhi\r\nEND\r\n"));
        assert_eq!(h.count(Counter::CmdGet), 3, "gat is no get");
        assert_eq!(h.count(Counter::CmdTouch), 2);
        assert_eq!(h.count(Counter::TouchHits), 1);
        assert_eq!(h.count(Counter::TouchMisses), 1);
        assert_eq!(h.text(b"mg a t\r\n"), "HD t100\r\n");
        assert_eq!(
            h.text(b"gat abc a\r\n"),
            "CLIENT_ERROR invalid exptime argument\r\n"
        );
        assert_eq!(h.text(b"gat 10\r\n"), "END\r\n");
    }

    #[test]
    fn exptimes_are_relative_absolute_or_at_once() {
        let mut h = Harness::new();
        h.text(b"set rel 0 2 1\r\nx\r\nset never 0 0 1\r\nx\r\nset neg 0 -1 1\r\nx\r\n");
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        h.text(
            format!(
                "set abs 0 {} 1\r\nx\r\nset past 0 {} 1\r\nx\r\n",
                unix + 60,
                unix - 60
            )
            .as_bytes(),
        );
        assert_eq!(h.text(b"mg neg\r\nmg past\r\n"), "EN\r\nEN\r\n");
        assert_eq!(h.count(Counter::GetExpired), 2);
        let t = h.text(b"mg abs t\r\n");
        assert!(t == "HD t60\r\n" || t == "HD t59\r\n", "{t}");
        h.advance(Duration::from_millis(1999));
        assert_eq!(h.text(b"mg rel t\r\n"), "HD t1\r\n");
        h.advance(Duration::from_millis(1));
        assert_eq!(h.text(b"mg rel\r\nmg never t\r\n"), "EN\r\nHD t-1\r\n");
        // Touched to expire at once, it is gone for the next command.
        assert_eq!(
            h.text(b"touch never -1\r\nget never\r\n"),
            "TOUCHED\r\nEND\r\n"
        );
        assert_eq!(h.count(Counter::GetExpired), 4);
    }

    #[test]
    fn noreply_silences_errors_too() {
        let mut h = Harness::new();
        let replies = h.text(
            b"set n 0 0 2 noreply\r\n10\r\nincr n 5 noreply\r\nincr n x noreply\r\n\
              set k 0 0 1 noreply\r\nxyz\r\ndelete zz noreply\r\nget n\r\n",
        );
        // The bad data chunk's reply is silenced; its tail is a line of its own.
        assert_eq!(replies, "ERROR\r\nVALUE n 0 2\r\n15\r\nEND\r\n");
        assert_eq!(
            h.text(b"delete n 5 noreply\r\ndelete n 5\r\n"),
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
        );
    }

    #[test]
    fn incr_pads_in_place_wraps_and_grows() {
        let mut h = Harness::new();
        assert_eq!(
            h.text(
                b"set n 0 0 2\r\n10\r\ndecr n 5\r\nget n\r\nincr n 100\r\nget n\r\ndecr n 1000\r\n"
            ),
            "STORED\r\n5\r\nVALUE n 0 2\r\n5 \r\nEND\r\n105\r\nVALUE n 0 3\r\n105\r\nEND\r\n0\r\n"
        );
        // 2 links: the set, and the incr that outgrew two digits.
        assert_eq!(h.count(Counter::TotalItems), 2);
        assert_eq!(
            h.text(b"set m 0 0 20\r\n18446744073709551615\r\nincr m 1\r\n"),
            "STORED\r\n0\r\n"
        );
        assert_eq!(
            h.text(b"set x 0 0 3\r\nabc\r\nincr x 1\r\nincr nope 1\r\nincr x -1\r\n"),
            "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
             NOT_FOUND\r\nCLIENT_ERROR invalid numeric delta argument\r\n"
        );
        assert_eq!(h.count(Counter::IncrHits), 2);
        assert_eq!(h.count(Counter::DecrHits), 2);
        assert_eq!(h.count(Counter::IncrMisses), 1);
    }

    #[test]
    fn cas_append_and_a_too_large_set() {
        let mut h = Harness::new();
        let reply = h.text(b"set a 5 0 1\r\nb\r\ngets a\r\n");
        let cas: u64 = reply
            .split("\r\n")
            .nth(1)
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            h.text(
                format!(
                    "cas a 0 0 1 {cas}\r\nc\r\ncas a 0 0 1 {cas}\r\nd\r\ncas z 0 0 1 1\r\nx\r\n"
                )
                .as_bytes()
            ),
            "STORED\r\nEXISTS\r\nNOT_FOUND\r\n"
        );
        assert_eq!(
            (
                h.count(Counter::CasHits),
                h.count(Counter::CasBadval),
                h.count(Counter::CasMisses)
            ),
            (1, 1, 1)
        );
        assert_eq!(
            h.text(b"append a 9 0 1\r\n>\r\nprepend a 9 0 1\r\n<\r\nget a\r\n"),
            "STORED\r\nSTORED\r\nVALUE a 0 3\r\n<c>\r\nEND\r\n"
        );
        let mut big = b"set a 0 0 1048517\r\n".to_vec();
        big.extend(vec![b'v'; 1_048_517]);
        big.extend_from_slice(b"\r\nget a\r\n");
        assert_eq!(
            h.text(&big),
            "SERVER_ERROR object too large for cache\r\nEND\r\n"
        );
        assert_eq!(h.count(Counter::StoreTooLarge), 1);
    }

    #[test]
    fn flush_all_now_and_later() {
        let mut h = Harness::new();
        assert_eq!(
            h.text(b"set a 0 0 1\r\nx\r\nflush_all\r\nget a\r\n"),
            "STORED\r\nOK\r\nEND\r\n"
        );
        assert_eq!(h.count(Counter::GetFlushed), 1);
        assert_eq!(
            h.text(b"set a 0 0 1\r\nx\r\nflush_all 10\r\nmg a\r\n"),
            "STORED\r\nOK\r\nHD\r\n"
        );
        h.advance(Duration::from_secs(10));
        assert_eq!(
            h.text(b"mg a\r\nset a 0 0 1\r\nx\r\nmg a\r\n"),
            "EN\r\nSTORED\r\nHD\r\n"
        );
        assert_eq!(h.count(Counter::GetFlushed), 2);
        assert_eq!(h.count(Counter::CmdFlush), 2);
        assert_eq!(
            h.text(b"flush_all x\r\n"),
            "CLIENT_ERROR invalid exptime argument\r\n"
        );
        assert_eq!(h.count(Counter::CmdFlush), 3);
    }

    #[test]
    fn stats_report_the_counters_and_items() {
        let mut h = Harness::new();
        h.text(b"set a 0 0 1\r\nx\r\nset e 0 1 1\r\nx\r\nget a\r\n");
        h.advance(Duration::from_secs(1));
        let stats = h.text(b"stats\r\n");
        let stat = |name: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
                .unwrap_or_else(|| panic!("no {name} in {stats}"))
                .to_string()
        };
        assert_eq!(stat("cmd_get"), "1");
        assert_eq!(stat("cmd_set"), "2");
        // The expired item is swept, not counted as found.
        assert_eq!(stat("curr_items"), "1");
        assert_eq!(stat("bytes"), "61");
        assert_eq!(stat("total_items"), "2");
        assert_eq!(stat("get_expired"), "0");
        assert_eq!(stat("version"), "1.6.18-crest-sink");
        assert_eq!(stat("total_connections"), "1");
        assert!(stat("rusage_user").contains('.'));
        assert!(stats.ends_with("END\r\n"));
        assert!(
            h.text(b"stats settings\r\n")
                .contains("STAT item_size_max 1048576\r\n")
        );
        assert_eq!(
            h.text(b"stats reset\r\nstats nope\r\n"),
            "RESET\r\nERROR\r\n"
        );
        assert_eq!(h.count(Counter::CmdGet), 0);
    }
}

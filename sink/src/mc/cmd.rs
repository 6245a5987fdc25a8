//! The dispatcher: one line to its command, as memcached 1.6.18's `process_command_ascii`
//! chooses it (a two-letter word starting with `m` is a meta command; the rest by name,
//! case-sensitive, each checking its word count first and answering `ERROR` when it is
//! wrong). A line that is no command answers `ERROR`, unless it ends in an `HTTP/…` word
//! and does not start like one (memcached closes such a connection at once).

use super::parse::tokenize;
use super::state::{Ctx, Mode, Step};
use super::{meta, text};

/// Runs the command `line` (its terminator gone) and says what the connection does next.
pub(crate) fn execute(ctx: &mut Ctx<'_>, line: &[u8]) -> Step {
    let t = tokenize(line);
    let nt = t.ntokens();
    let name = t.get(0);
    if name.len() < 2 {
        ctx.error();
        return Step::Next;
    }
    // memcached's WANT_TOKENS checks: how many words (plus one) the command takes.
    let wants = |ok: bool, ctx: &mut Ctx<'_>| {
        if !ok {
            ctx.error();
        }
        ok
    };
    if let [b'm', letter] = name {
        match letter {
            b'g' => meta::get(ctx, &t),
            b's' => return meta::set(ctx, &t),
            b'd' => meta::delete(ctx, &t),
            b'n' => {
                ctx.line(b"MN");
                return Step::Written;
            }
            b'a' => meta::arith(ctx, &t),
            b'e' => meta::debug(ctx, &t),
            _ => ctx.error(),
        }
        return Step::Next;
    }
    let update = |ctx: &mut Ctx<'_>, mode: Mode| {
        let (low, high) = if mode == Mode::Cas { (7, 8) } else { (6, 7) };
        if wants(nt == low || nt == high, ctx) {
            text::update(ctx, &t, mode)
        } else {
            Step::Next
        }
    };
    match name {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => {
            if wants(nt >= 3, ctx) {
                let cas = matches!(name, b"gets" | b"gats");
                let touch = matches!(name, b"gat" | b"gats");
                return text::retrieve(ctx, &t, line, cas, touch);
            }
        }
        b"set" => return update(ctx, Mode::Set),
        b"add" => return update(ctx, Mode::Add),
        b"replace" => return update(ctx, Mode::Replace),
        b"append" => return update(ctx, Mode::Append),
        b"prepend" => return update(ctx, Mode::Prepend),
        b"cas" => return update(ctx, Mode::Cas),
        b"incr" | b"decr" => {
            if wants(nt == 4 || nt == 5, ctx) {
                text::arith(ctx, &t, name == b"incr");
            }
        }
        b"delete" => {
            if wants((3..=5).contains(&nt), ctx) {
                text::delete(ctx, &t);
            }
        }
        b"touch" => {
            if wants(nt == 4 || nt == 5, ctx) {
                text::touch(ctx, &t);
            }
        }
        b"stats" => text::stats(ctx, &t),
        b"flush_all" => {
            if wants((2..=4).contains(&nt), ctx) {
                text::flush_all(ctx, &t);
            }
        }
        b"version" => ctx.line(format!("VERSION {}", text::VERSION).as_bytes()),
        b"verbosity" => {
            if wants(nt == 3 || nt == 4, ctx) {
                text::verbosity(ctx, &t);
            }
        }
        b"quit" => return Step::Quit,
        b"shutdown" => ctx.line(b"ERROR: shutdown not enabled"),
        // Commands starting with these letters are looked for among memcached's without
        // the HTTP check below.
        [b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't', ..] => ctx.error(),
        _ if t.get(nt.saturating_sub(2)).starts_with(b"HTTP/") => return Step::Drop,
        _ => ctx.error(),
    }
    Step::Next
}

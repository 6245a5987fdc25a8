//! Connection and server commands: PING ECHO HELLO CLIENT SELECT COMMAND DBSIZE FLUSHALL
//! FLUSHDB INFO QUIT. Handshakes clients send are answered harmlessly: `HELLO` switches
//! between RESP2 and RESP3 and ignores `AUTH` and `SETNAME`, only database 0 exists, and
//! `COMMAND` publishes no table.

use crest_resp::{Frame, encode_array_header, encode_bulk, encode_integer, parse_integer};

use super::args::{int_arg, is};
use super::ctx::Ctx;
use super::reply::{NIL, OK, Reply, SYNTAX_ERROR, count, wrong_arity};
use crate::info;

const NOPROTO: &str = "NOPROTO sorry, this protocol version is not supported";
const BAD_PROTOVER: &str = "ERR Protocol version is not an integer or out of range";
const BAD_DB: &str = "ERR DB index is out of range";

/// `PING [message]`.
pub(super) fn ping(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    match args {
        [_] => ctx.out.extend_from_slice(b"+PONG\r\n"),
        [_, message] => encode_bulk(ctx.out, message),
        // Redis's table says "at least one"; PING itself refuses more than two.
        _ => return Err(wrong_arity("ping").into()),
    }
    Ok(())
}

/// `ECHO message`.
pub(super) fn echo(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    encode_bulk(ctx.out, &args[1]);
    Ok(())
}

/// `HELLO [2|3 ...]`: switches the connection to RESP2 or RESP3; its reply is the map Redis
/// 7.0 sends (flattened in RESP2; the dispatcher makes it a map in RESP3).
pub(super) fn hello(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    if let Some(version) = args.get(1) {
        match parse_integer(version) {
            None => return Err(BAD_PROTOVER.into()),
            Some(2) => ctx.conn.resp3 = false,
            Some(3) => ctx.conn.resp3 = true,
            Some(_) => return Err(NOPROTO.into()),
        }
    }
    let text = |s: &str| Frame::Bulk(s.as_bytes().to_vec());
    Frame::Array(vec![
        text("server"),
        text("redis"),
        text("version"),
        text(info::REDIS_VERSION),
        text("proto"),
        Frame::Integer(if ctx.conn.resp3 { 3 } else { 2 }),
        text("id"),
        Frame::Integer(i64::try_from(ctx.conn.id).unwrap_or(i64::MAX)),
        text("mode"),
        text("standalone"),
        text("role"),
        text("master"),
        text("modules"),
        Frame::Array(Vec::new()),
    ])
    .encode(ctx.out);
    Ok(())
}

/// `CLIENT ID` answers; every other subcommand (`SETNAME`, `SETINFO`...) is accepted.
pub(super) fn client(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    if is(&args[1], "ID") {
        encode_integer(ctx.out, i64::try_from(ctx.conn.id).unwrap_or(i64::MAX));
    } else {
        ctx.out.extend_from_slice(OK);
    }
    Ok(())
}

/// `SELECT 0`; any other database is out of range.
pub(super) fn select(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    match int_arg(&args[1])? {
        0 => ctx.out.extend_from_slice(OK),
        _ => return Err(BAD_DB.into()),
    }
    Ok(())
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name...`, `COMMAND DOCS`: an empty table.
pub(super) fn command(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    match args.get(1) {
        Some(sub) if is(sub, "COUNT") => encode_integer(ctx.out, 0),
        Some(sub) if is(sub, "INFO") => {
            // One nil per name asked about, as Redis answers for commands it lacks.
            encode_array_header(ctx.out, args.len() - 2);
            for _ in 2..args.len() {
                ctx.out.extend_from_slice(NIL);
            }
        }
        _ => encode_array_header(ctx.out, 0),
    }
    Ok(())
}

/// `DBSIZE`: live keys. Sweeps expired ones first, so the count is exact.
pub(super) fn dbsize(ctx: &mut Ctx<'_>, _args: &mut [Vec<u8>]) -> Reply {
    let (keys, _) = ctx.sink.store.sweep(&mut ctx.now);
    encode_integer(ctx.out, count(keys));
    Ok(())
}

/// `FLUSHALL [ASYNC|SYNC]` and `FLUSHDB [ASYNC|SYNC]`: both empty the one database.
pub(super) fn flush(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    match args {
        [_] => {}
        [_, mode] if is(mode, "ASYNC") || is(mode, "SYNC") => {}
        _ => return Err(SYNTAX_ERROR.into()),
    }
    for mut shard in ctx.sink.store.all() {
        shard.clear();
    }
    ctx.out.extend_from_slice(OK);
    Ok(())
}

/// `INFO [section...]`.
pub(super) fn info(ctx: &mut Ctx<'_>, args: &mut [Vec<u8>]) -> Reply {
    // INFO must see this connection's own earlier calls; it does not count itself, as in
    // Redis, because the dispatcher counts it after it has run.
    ctx.conn.stats.flush(&ctx.sink.stats);
    let text = info::render(ctx.sink, &args[1..], &mut ctx.now);
    encode_bulk(ctx.out, text.as_bytes());
    Ok(())
}

/// `QUIT`: OK, then the connection closes once its replies are written.
pub(super) fn quit(ctx: &mut Ctx<'_>, _args: &mut [Vec<u8>]) -> Reply {
    ctx.out.extend_from_slice(OK);
    ctx.close = true;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::cmd::reply::NOT_AN_INTEGER;
    use crate::test_support::{Harness, bulk, err, simple};

    #[test]
    fn handshake_commands_are_harmless() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["HELLO", "4"]),
            err("NOPROTO sorry, this protocol version is not supported")
        );
        assert_eq!(h.run(&["HELLO", "x"]), err(BAD_PROTOVER));
        let Frame::Array(fields) = h.run(&["HELLO", "2", "SETNAME", "me"]) else {
            panic!("HELLO 2 replies with an array");
        };
        assert_eq!(
            &fields[..6],
            [
                bulk("server"),
                bulk("redis"),
                bulk("version"),
                bulk("7.0.0"),
                bulk("proto"),
                Frame::Integer(2)
            ]
        );
        assert_eq!(fields[7], Frame::Integer(7), "the connection's id");
        assert_eq!(h.run(&["HELLO"]), h.run(&["HELLO", "2"]));

        assert_eq!(h.run(&["CLIENT", "ID"]), Frame::Integer(7));
        assert_eq!(h.run(&["client", "setname", "me"]), simple("OK"));
        assert_eq!(h.run(&["SELECT", "0"]), simple("OK"));
        assert_eq!(h.run(&["SELECT", "1"]), err(BAD_DB));
        assert_eq!(h.run(&["SELECT", "zero"]), err(NOT_AN_INTEGER));
        assert_eq!(h.run(&["COMMAND"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["COMMAND", "DOCS"]), Frame::Array(vec![]));
        assert_eq!(h.run(&["COMMAND", "COUNT"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["COMMAND", "INFO", "get", "set"]),
            Frame::Array(vec![Frame::NullBulk, Frame::NullBulk])
        );
        assert_eq!(h.run(&["PING", "hi"]), bulk("hi"));
        assert_eq!(h.run(&["ECHO", "hi"]), bulk("hi"));
        assert_eq!(h.counts("ping"), (1, 0, 0));
    }

    #[test]
    fn flush_empties_every_shard() {
        let mut h = Harness::new();
        for i in 0..1000 {
            h.run(&["SET", &format!("key:{i}"), "v"]);
        }
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(1000));
        assert_eq!(h.run(&["FLUSHALL", "ASYNC"]), simple("OK"));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
        assert_eq!(h.run(&["FLUSHDB", "LATER"]), err(SYNTAX_ERROR));
        assert_eq!(h.run(&["FLUSHDB", "SYNC", "x"]), err(SYNTAX_ERROR));
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["FLUSHDB"]), simple("OK"));
        assert_eq!(h.run(&["DBSIZE"]), Frame::Integer(0));
    }
}

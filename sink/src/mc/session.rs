//! One connection's protocol state, without its socket: what it is in the middle of (a
//! command line, a data block to read or to swallow, a multi-get's keys), run over the
//! bytes read so far until it needs more ([`Session::run`]). The connection ([`super::conn`])
//! does the I/O around it; tests feed it bytes directly.
//!
//! Like memcached, a `get` with a key longer than 250 bytes answers only its error, and a
//! line too long (or an HTTP request) closes the connection, both dropping the replies
//! memcached would not have written yet: those after the batch was read, the last
//! retrieval or `mn` (which memcached writes at once), or memcached's yield after every 20
//! commands (21 in a batch's first round: its `reqs_per_event`). memcached reads 16 KiB at
//! a time where the sink reads 64, so in a larger batch the two may drop different
//! replies.
//!
//! Bounds: a command line is at most 2048 bytes without its LF, or a multi-get's, which
//! the connection's input budget bounds; a data block is at most an item
//! ([`super::items::ITEM_SIZE_MAX`]) and is held whole only when it will be stored; a
//! refused one is discarded as it arrives. Replies are handed back for writing each time
//! [`crate::Limits::output_chunk`] of them wait, between commands and between a
//! multi-get's keys, so a client that does not read holds the server back by TCP only.

use super::cmd;
use super::parse::{self, Frame, KEY_MAX_LENGTH};
use super::state::{Ctx, Pending, Retrieval, State, Step};
use super::stats::Counts;
use super::storage;

/// Where a connection is.
#[derive(Debug)]
enum Phase {
    /// Reading a command line.
    Command,
    /// Waiting for a storage command's data block.
    Data(Pending),
    /// Discarding this many more bytes of a refused data block.
    Swallow(usize),
    /// Running a retrieval's keys, `at..end` of the input (the line stays there until the
    /// retrieval is done: it never waits for input).
    Keys {
        r: Retrieval,
        at: usize,
        end: usize,
        now: std::time::Instant,
    },
}

/// Why [`Session::run`] stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Everything read is run (or waits for more): read again.
    More,
    /// Replies have piled up past the output chunk: write them, then run again.
    Flush,
    /// `quit`: write what is there, then close.
    Quit,
    /// Write what is there (the replies memcached would have written; the rest are
    /// dropped), then close (a line too long, an HTTP request).
    Drop,
}

/// memcached's `reqs_per_event`: it writes its replies after this many commands.
const REQS_PER_EVENT: u32 = 20;

/// One connection's protocol state.
#[derive(Debug)]
pub(crate) struct Session {
    phase: Phase,
    /// Bytes of the unfinished line, from its start, known to hold no LF.
    scanned: usize,
    /// Replies before this offset in the output count as written (memcached's).
    written: usize,
    /// Commands until memcached would write its replies.
    budget: u32,
    /// The last run stopped for more input: the next starts a new batch.
    fresh: bool,
}

impl Session {
    pub(crate) fn new() -> Self {
        Session {
            phase: Phase::Command,
            scanned: 0,
            written: 0,
            budget: REQS_PER_EVENT + 1,
            fresh: true,
        }
    }

    /// A command is done: after memcached's budget of them, what is there is written.
    fn done(&mut self, out: &[u8]) {
        self.budget -= 1;
        if self.budget == 0 {
            self.written = out.len();
            self.budget = REQS_PER_EVENT;
        }
    }

    /// Runs what `input[*at..]` holds, moving `at` past what is consumed, appending
    /// replies to `out`. Call again with the same `input` after [`Event::Flush`]; after
    /// [`Event::More`] the caller may drop `input[..*at]` and read more.
    pub(crate) fn run(
        &mut self,
        state: &State,
        counts: &mut Counts,
        out: &mut Vec<u8>,
        input: &[u8],
        at: &mut usize,
    ) -> Event {
        // Whatever was there is written now; a new batch is memcached's new event.
        self.written = out.len();
        if std::mem::take(&mut self.fresh) {
            self.budget = REQS_PER_EVENT + 1;
        }
        loop {
            if !out.is_empty() && out.len() >= state.limits.output_chunk {
                return Event::Flush;
            }
            match std::mem::replace(&mut self.phase, Phase::Command) {
                Phase::Swallow(left) => {
                    let n = left.min(input.len() - *at);
                    *at += n;
                    if n < left {
                        self.phase = Phase::Swallow(left - n);
                        return self.more();
                    }
                    self.done(out);
                }
                Phase::Data(p) => {
                    if input.len() - *at < p.need {
                        self.phase = Phase::Data(p);
                        return self.more();
                    }
                    let data = &input[*at..*at + p.need];
                    *at += p.need;
                    let now = (state.clock)();
                    let mut ctx = Ctx {
                        state,
                        counts,
                        out,
                        now,
                    };
                    storage::complete(&mut ctx, p, data);
                    self.done(out);
                }
                Phase::Keys {
                    r,
                    at: from,
                    end,
                    now,
                } => {
                    let mut ctx = Ctx {
                        state,
                        counts,
                        out,
                        now,
                    };
                    match keys(&mut ctx, &r, &input[..end], from, self.written) {
                        Keys::Paused(next) => {
                            self.phase = Phase::Keys {
                                r,
                                at: next,
                                end,
                                now,
                            }
                        }
                        // memcached writes a retrieval's replies at once.
                        Keys::Ended => {
                            self.written = out.len();
                            self.done(out);
                        }
                        Keys::Failed => self.done(out),
                    }
                }
                Phase::Command => match parse::frame(&input[*at..], self.scanned) {
                    Frame::Partial { scanned } => {
                        self.scanned = scanned;
                        return self.more();
                    }
                    Frame::TooLong => return self.drop(out),
                    Frame::Line { line, used } => {
                        self.scanned = 0;
                        let start = *at;
                        *at += used;
                        let now = (state.clock)();
                        let mut ctx = Ctx {
                            state,
                            counts,
                            out,
                            now,
                        };
                        match cmd::execute(&mut ctx, line) {
                            Step::Next => self.done(out),
                            Step::Written => {
                                self.written = out.len();
                                self.done(out);
                            }
                            Step::Read(p) => self.phase = Phase::Data(p),
                            Step::Swallow(n) => self.phase = Phase::Swallow(n),
                            Step::Retrieve(r) => {
                                self.phase = Phase::Keys {
                                    at: start + r.keys_at,
                                    end: start + line.len(),
                                    r,
                                    now,
                                }
                            }
                            Step::Quit => return Event::Quit,
                            Step::Drop => return self.drop(out),
                        }
                    }
                },
            }
        }
    }
}

impl Session {
    /// Stops for more input.
    fn more(&mut self) -> Event {
        self.fresh = true;
        Event::More
    }

    /// Closes, dropping the replies memcached would not have written yet.
    fn drop(&mut self, out: &mut Vec<u8>) -> Event {
        out.truncate(self.written);
        Event::Drop
    }
}

/// Where a retrieval's keys are.
enum Keys {
    /// Replies piled up; go on from here after writing them.
    Paused(usize),
    /// Done, `END` written.
    Ended,
    /// A key was too long.
    Failed,
}

/// Runs a retrieval's keys in `line[at..]` until replies pile up past the output chunk
/// (then where to go on), or to its end (`END`, or the error of a key too long, which
/// also drops the replies after `written`).
fn keys(ctx: &mut Ctx<'_>, r: &Retrieval, input: &[u8], mut at: usize, written: usize) -> Keys {
    let chunk = ctx.state.limits.output_chunk;
    loop {
        while input.get(at) == Some(&b' ') {
            at += 1;
        }
        if at == input.len() {
            ctx.line(b"END");
            return Keys::Ended;
        }
        let len = input[at..].iter().take_while(|&&b| b != b' ').count();
        let key = &input[at..at + len];
        at += len;
        if key.len() > KEY_MAX_LENGTH {
            ctx.out.truncate(written);
            ctx.line(b"CLIENT_ERROR bad command line format");
            return Keys::Failed;
        }
        super::text::retrieve_one(ctx, r, key, !r.bad_key);
        if !ctx.out.is_empty() && ctx.out.len() >= chunk {
            return Keys::Paused(at);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use crate::mc::stats::Counter;
    use crate::state::Limits;
    use proptest::prelude::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// A session over a state whose clock the test moves, fed bytes by hand.
    pub(crate) struct Harness {
        pub(crate) state: State,
        session: Session,
        pub(crate) counts: Counts,
        input: Vec<u8>,
        clock: Arc<Mutex<Instant>>,
        /// The session ended the connection (`quit`, a line too long, HTTP).
        pub(crate) closed: Option<Event>,
        /// The most replies waited at once.
        pub(crate) peak_out: usize,
        /// The most input was held at once.
        pub(crate) peak_in: usize,
    }

    impl Harness {
        pub(crate) fn new() -> Self {
            Self::with(Limits::default())
        }

        pub(crate) fn with(limits: Limits) -> Self {
            let clock = Arc::new(Mutex::new(Instant::now()));
            let read = Arc::clone(&clock);
            let state = State::new(Box::new(move || *read.lock().unwrap()), limits, 1, 11211);
            Harness {
                state,
                session: Session::new(),
                counts: Counts::default(),
                input: Vec::new(),
                clock,
                closed: None,
                peak_out: 0,
                peak_in: 0,
            }
        }

        pub(crate) fn advance(&self, by: Duration) {
            *self.clock.lock().unwrap() += by;
        }

        /// Feeds `bytes`; returns every reply they brought.
        pub(crate) fn send(&mut self, bytes: &[u8]) -> Vec<u8> {
            assert!(self.closed.is_none(), "the session ended");
            self.input.extend_from_slice(bytes);
            self.peak_in = self.peak_in.max(self.input.len());
            let mut replies = Vec::new();
            let mut out = Vec::new();
            let mut at = 0;
            loop {
                let event = self.session.run(
                    &self.state,
                    &mut self.counts,
                    &mut out,
                    &self.input,
                    &mut at,
                );
                self.peak_out = self.peak_out.max(out.len());
                match event {
                    Event::Flush => replies.append(&mut out),
                    Event::More => {
                        replies.append(&mut out);
                        break;
                    }
                    Event::Quit => {
                        replies.append(&mut out);
                        self.closed = Some(Event::Quit);
                        break;
                    }
                    Event::Drop => {
                        replies.append(&mut out);
                        self.closed = Some(Event::Drop);
                        break;
                    }
                }
            }
            self.input.drain(..at);
            self.state.stats.flush(&mut self.counts);
            replies
        }

        /// Feeds `bytes`; returns the replies as text.
        pub(crate) fn text(&mut self, bytes: &[u8]) -> String {
            String::from_utf8_lossy(&self.send(bytes)).into_owned()
        }

        pub(crate) fn count(&self, c: Counter) -> u64 {
            self.state.stats.get(c)
        }
    }

    #[test]
    fn a_line_too_long_ends_the_session_with_what_memcached_had_written() {
        let mut h = Harness::new();
        // The set's reply is dropped with it, as memcached drops it.
        let mut bytes = b"set a 0 0 1\r\nx\r\n".to_vec();
        bytes.extend(vec![b'z'; 3000]);
        assert_eq!(h.send(&bytes), b"");
        assert_eq!(h.closed, Some(Event::Drop));
        assert!(h.peak_in < 4096);
        // A retrieval's replies memcached writes at once; the set after it is dropped.
        let mut h = Harness::new();
        let mut bytes = b"set a 0 0 1\r\nx\r\nget a\r\nset b 0 0 1\r\ny\r\n".to_vec();
        bytes.extend(vec![b'z'; 3000]);
        assert_eq!(h.text(&bytes), "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
        let mut h = Harness::new();
        assert_eq!(h.text(b"version\r\nGET / HTTP/1.1\r\n"), "");
        assert_eq!(h.closed, Some(Event::Drop));
    }

    /// As measured on memcached 1.6.18: a key too long in a get drops the replies since
    /// memcached's last write (`mn`, a retrieval, or its yield after 21 then 20 commands).
    #[test]
    fn a_key_too_long_drops_what_memcached_had_not_written() {
        let long = "k".repeat(251);
        let mut h = Harness::new();
        let reply = h.text(
            format!("set c 0 0 1\r\nx\r\nmn\r\nset d 0 0 1\r\ny\r\nget c {long}\r\n").as_bytes(),
        );
        assert_eq!(
            reply,
            "STORED\r\nMN\r\nCLIENT_ERROR bad command line format\r\n"
        );
        for (sets, kept) in [(30, 21), (50, 41), (10, 0)] {
            let mut h = Harness::new();
            let mut batch: String = (0..sets)
                .map(|i| format!("set s{i} 0 0 1\r\nx\r\n"))
                .collect();
            batch.push_str(&format!("get s1 {long}\r\n"));
            let reply = h.text(batch.as_bytes());
            let want = "STORED\r\n".repeat(kept) + "CLIENT_ERROR bad command line format\r\n";
            assert_eq!(reply, want, "{sets} sets");
            assert_eq!(h.count(Counter::GetHits), 1, "the key before it still ran");
        }
        // In a batch of its own, nothing is pending.
        let mut h = Harness::new();
        assert_eq!(h.text(b"set a 0 0 1\r\nx\r\n"), "STORED\r\n");
        assert_eq!(
            h.text(format!("get a {long}\r\n").as_bytes()),
            "CLIENT_ERROR bad command line format\r\n"
        );
    }

    #[test]
    fn a_line_arriving_in_pieces_is_taken_once_whole() {
        let mut h = Harness::new();
        assert_eq!(h.send(b"set a 0 0 5"), b"");
        assert_eq!(h.send(b"\r\nhel"), b"");
        assert_eq!(h.text(b"lo\r"), "");
        assert_eq!(
            h.text(b"\nget a\r\n"),
            "STORED\r\nVALUE a 0 5\r\nhello\r\nEND\r\n"
        );
        // 2048 bytes of a line are waited for; one more is refused.
        let mut partial = b"version".to_vec();
        partial.resize(2048, b' ');
        assert_eq!(h.send(&partial), b"");
        assert_eq!(h.text(b"\r\n"), "VERSION 1.6.18-crest-sink\r\n");
        partial.push(b' ');
        assert_eq!(h.send(&partial), b"");
        assert_eq!(h.closed, Some(Event::Drop));
    }

    #[test]
    fn a_huge_announced_value_is_refused_and_swallowed_as_it_arrives() {
        let mut h = Harness::new();
        assert_eq!(
            h.text(b"set big 0 0 200000000\r\n"),
            "SERVER_ERROR object too large for cache\r\n"
        );
        let block = vec![b'x'; 1 << 20];
        for _ in 0..190 {
            assert_eq!(h.send(&block), b"");
        }
        // 200,000,000 + CRLF - 190 MiB are left of the block, then a command.
        let left = 200_000_002 - 190 * (1 << 20);
        let mut tail = vec![b'x'; left];
        tail.extend_from_slice(b"get big\r\n");
        assert_eq!(h.text(&tail), "END\r\n");
        assert!(h.peak_in <= 1 << 20, "held {} bytes", h.peak_in);
        assert_eq!(h.count(Counter::StoreTooLarge), 1);
        assert_eq!(h.count(Counter::CmdSet), 0);
        // An announced length past what memcached reads as a length at all.
        assert_eq!(
            h.text(b"set k 0 0 99999999999999999999\r\n"),
            "CLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(
            h.text(b"ms k 2147483646\r\n"),
            "CLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(
            h.text(b"ms k 2147483645 T0\r\nmn\r\n"),
            "SERVER_ERROR object too large for cache\r\n"
        );
    }

    #[test]
    fn a_value_in_pieces_is_stored_whole_and_a_bad_chunk_refused() {
        let mut h = Harness::new();
        let value = vec![b'v'; 100_000];
        assert_eq!(h.send(b"set k 0 0 100000\r\n"), b"");
        for piece in value.chunks(7000) {
            assert_eq!(h.send(piece), b"");
        }
        assert_eq!(h.text(b"\r\n"), "STORED\r\n");
        assert_eq!(h.send(b"get k\r\n").len(), 100_000 + 25);
        assert_eq!(
            h.text(b"set k 0 0 1\r\nxyz\r\n"),
            "CLIENT_ERROR bad data chunk\r\nERROR\r\n"
        );
        assert_eq!(h.count(Counter::CmdSet), 2);
    }

    #[test]
    fn a_multiget_larger_than_the_output_chunk_is_written_as_it_goes() {
        let mut h = Harness::with(Limits {
            output_chunk: 64 * 1024,
            ..Limits::default()
        });
        let value = vec![b'v'; 1000];
        let mut set = b"set k 0 0 1000\r\n".to_vec();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        assert_eq!(h.text(&set), "STORED\r\n");
        let mut get = b"get".to_vec();
        for _ in 0..10_000 {
            get.extend_from_slice(b" k");
        }
        get.extend_from_slice(b"\r\n");
        let replies = h.send(&get);
        assert_eq!(
            replies.len(),
            10_000 * ("VALUE k 0 1000\r\n".len() + 1002) + 5
        );
        assert!(replies.ends_with(b"END\r\n"));
        assert!(h.peak_out < 64 * 1024 + 1100, "{} bytes waited", h.peak_out);
        assert_eq!(h.count(Counter::GetHits), 10_000);
    }

    #[test]
    fn an_output_chunk_of_zero_writes_each_reply_and_still_ends() {
        let mut h = Harness::with(Limits {
            output_chunk: 0,
            ..Limits::default()
        });
        assert_eq!(
            h.text(b"set a 0 0 1\r\nx\r\nget a b a\r\nmn\r\n"),
            "STORED\r\nVALUE a 0 1\r\nx\r\nVALUE a 0 1\r\nx\r\nEND\r\nMN\r\n"
        );
    }

    #[test]
    fn garbage_gets_errors_not_panics() {
        let mut h = Harness::new();
        assert_eq!(
            h.text(b"\x00\xff\xfe\r\nfoo bar\r\n\x80\x81 \x82\r\n"),
            "ERROR\r\nERROR\r\nERROR\r\n"
        );
        assert_eq!(
            h.text(b"mg k \xff\r\nmg k \x01\r\nms k 1 \xc3\xa9\r\nx\r\n"),
            "CLIENT_ERROR duplicate flag\r\nCLIENT_ERROR invalid flag\r\n\
             CLIENT_ERROR duplicate flag\r\n"
        );
        assert_eq!(h.text(b"mn\r\n"), "MN\r\n");
        assert!(h.closed.is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever arrives, in whatever pieces, nothing panics, the input held stays
        /// within a line, an item and a read, and the replies within a chunk and a value.
        #[test]
        fn no_input_panics_or_grows_the_session(
            pieces in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..64),
                    proptest::collection::vec(
                        prop_oneof![
                            Just(b"set k 0 0 3\r\nabc\r\n".to_vec()),
                            Just(b"get k k k\r\n".to_vec()),
                            Just(b"mg k v c f t s k O1 q\r\n".to_vec()),
                            Just(b"ms k 2 T1 MA\r\nhi\r\n".to_vec()),
                            Just(b"ma k N0 J5 v\r\n".to_vec()),
                            Just(b"incr k 18446744073709551615\r\n".to_vec()),
                            Just(b"gat -1 k\r\n".to_vec()),
                            Just(b"md k I T5 q\r\n".to_vec()),
                            Just(b"flush_all\r\n".to_vec()),
                            Just(b"stats\r\n".to_vec()),
                            Just(b"set k 0 0 99999999\r\n".to_vec()),
                            Just(b"\r\n".to_vec()),
                        ],
                        1..8,
                    ).prop_map(|v| v.concat()),
                ],
                1..40,
            )
        ) {
            let mut h = Harness::with(Limits { output_chunk: 4096, ..Limits::default() });
            for piece in pieces {
                if h.closed.is_some() {
                    break;
                }
                h.send(&piece);
                h.advance(Duration::from_millis(300));
                // A line waits up to 2048 bytes (a multi-get longer), a data block up to
                // its length: here at most a few bytes.
                let line = h.input.iter().skip_while(|&&b| b == b' ').take(3).copied();
                prop_assert!(
                    h.input.len() <= parse::MAX_UNTERMINATED || line.eq(*b"get"),
                    "{} bytes held", h.input.len()
                );
                prop_assert!(h.peak_out <= 4096 + 4096);
            }
        }
    }
}

//! A trace as the coordinator streams it (issue #27): read one record at a time
//! ([`crest_trace::Reader`]), made into its requests ([`crest_trace::clock::expand`]),
//! timed (on the trace's own clock, [`crest_trace::clock::OwnClock`], or re-timed at the
//! fleet profile's k-th arrival), given to the shard its key hashes to
//! ([`crest_trace::clock::shard_of`]) and cut into [`Batch`]es per shard, never further
//! ahead than a [`Window`]: reading stops while any shard holds its whole window of
//! unacknowledged requests, or once the requests read reach past `now + ahead`. Memory on
//! this side is the window (and, for a whole-second trace, the second being gathered),
//! whatever the file's length. Every shard's last chunk says `last`, even an empty one, so
//! each worker knows its part has ended.
//!
//! Pure logic on the clock it is given (`now_ns` on the run's clock); the run's phase
//! calls [`Streamer::pump`] and sends what it returns, and feeds it each
//! acknowledgement ([`Streamer::ack`]).

use crest_model::rng::Rng;
use crest_model::schedule::Schedule;
use crest_model::trace::{Batch, MAX_BATCH, TraceOp};
use crest_trace::clock::{OwnClock, Spread, TooDense, expand, shard_of};
use crest_trace::{Format, Op, Reader, Record, TraceError};
use std::collections::{BTreeMap, VecDeque};
use std::io::BufRead;

pub use crate::trace_plan::{Keys, Spec, Window, cache_ops};

/// The stream a run reads its trace from.
pub type FileStreamer = Streamer<Box<dyn BufRead + Send>>;

/// Opens `spec`'s files and makes the stream over `shards` shards, drawing with `seed`,
/// ending at `until_ns` on the run's clock (u64::MAX: the trace's end).
///
/// # Errors
/// One line naming a file that cannot be opened.
pub fn open(spec: &Spec, shards: u32, seed: u64, until_ns: u64) -> Result<FileStreamer, String> {
    let timing = match &spec.retime {
        Some((profile, arrival)) => Timing::profile(
            Schedule::new(profile.clone(), *arrival, 0.0),
            Rng::new(seed),
        ),
        None => Timing::own(spec.format, spec.speed, spec.spread),
    };
    let mut readers = spec
        .files
        .iter()
        .map(|f| {
            let name = f.display().to_string();
            crest_trace::input::open(f).map(|r| (Reader::new(r, &name, spec.format), name))
        })
        .collect::<Result<VecDeque<_>, _>>()?;
    let Some((first, name)) = readers.pop_front() else {
        return Err("no trace file given".into());
    };
    let mut st = Streamer::new(
        first,
        &name,
        spec.ops.clone(),
        timing,
        shards,
        spec.window,
        spec.keys.clone(),
    )
    .until(until_ns);
    for (r, name) in readers {
        st = st.then(r, &name);
    }
    Ok(st)
}

/// How the requests are timed, and the timed requests waiting to be placed (in order).
#[derive(Debug)]
pub enum Timing {
    /// The trace's own clock (which holds its timed requests itself).
    Own(OwnClock),
    /// The k-th request at the k-th arrival of this fleet-wide schedule (`--rate`,
    /// `--stages`), the order kept; requests past its end are not sent.
    Profile {
        /// The fleet's schedule.
        schedule: Box<Schedule>,
        /// Its draws (Poisson gaps).
        rng: Rng,
        /// Timed requests not yet placed.
        ready: VecDeque<(u64, Record)>,
        /// Requests left out: the profile ended before them.
        past: u64,
    },
}

impl Timing {
    /// The trace's clock, `speed` times as fast, for `format`'s timestamps.
    pub fn own(format: Format, speed: f64, spread: Spread) -> Self {
        Timing::Own(OwnClock::new(speed, spread, format != Format::Monitor))
    }

    /// Re-timed at `schedule`'s arrivals (fleet-wide), drawn with `rng`.
    pub fn profile(schedule: Schedule, rng: Rng) -> Self {
        Timing::Profile {
            schedule: Box::new(schedule),
            rng,
            ready: VecDeque::new(),
            past: 0,
        }
    }

    /// Times one request (in file order).
    fn push(&mut self, rec: Record) -> Result<(), TooDense> {
        match self {
            Timing::Own(c) => c.push(rec)?,
            Timing::Profile {
                schedule,
                rng,
                ready,
                past,
            } => match schedule.next(rng) {
                Some(t) => ready.push_back((t, rec)),
                None => *past += 1,
            },
        }
        Ok(())
    }

    /// The end of the trace: what the clock still holds is timed.
    fn finish(&mut self) {
        if let Timing::Own(c) = self {
            c.finish();
        }
    }

    /// The next timed request.
    fn front(&self) -> Option<&(u64, Record)> {
        match self {
            Timing::Own(c) => c.front(),
            Timing::Profile { ready, .. } => ready.front(),
        }
    }

    fn pop(&mut self) -> Option<(u64, Record)> {
        match self {
            Timing::Own(c) => c.pop(),
            Timing::Profile { ready, .. } => ready.pop_front(),
        }
    }

    /// Drops every request read and not yet placed.
    fn clear(&mut self) {
        match self {
            Timing::Own(c) => c.clear(),
            Timing::Profile { ready, .. } => ready.clear(),
        }
    }

    /// Requests read and not yet placed (timed, or gathered in their second).
    fn held(&self) -> usize {
        match self {
            Timing::Own(c) => c.len(),
            Timing::Profile { ready, .. } => ready.len(),
        }
    }
}

/// Where the stream stands: what was read, made, sent and skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// Records read from the file.
    pub records: u64,
    /// Requests made from them (repeats and copies included).
    pub requests: u64,
    /// Requests handed out in chunks.
    pub sent: u64,
    /// Per entry of the op table, requests handed out.
    pub per_op: Vec<u64>,
    /// The intended time of the last request handed out (ns, run clock).
    pub last_at_ns: u64,
}

/// Why the stream stops before its end.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StreamError {
    /// The file cannot be read as its format (at a line).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A whole second too dense to spread.
    #[error("{file}: {inner}")]
    TooDense {
        /// The file.
        file: String,
        /// The second and its line.
        inner: TooDense,
    },
}

/// One trace streamed to `shards` shards.
pub struct Streamer<R> {
    reader: Reader<R>,
    file: String,
    /// Files read after this one, as one trace (its clock continues through them).
    queued: VecDeque<(String, Reader<R>)>,
    /// The skips of the files read to their end.
    done_skips: Vec<(String, crest_trace::Skips)>,
    /// Requests intended after this (ns, run clock) are not sent: the run's `--duration`.
    until_ns: u64,
    /// Requests left out: intended after `until_ns`.
    past_end: u64,
    /// Per shard: its worker is gone, so what falls to it is dropped (counted in `lost`).
    gone: Vec<bool>,
    /// Requests that fell to a shard whose worker was gone.
    lost: u64,
    amplify: u32,
    key_prefix: Vec<u8>,
    /// Skip keys memcached cannot take ([`Keys::memcached`]).
    memcached: bool,
    timing: Timing,
    shards: u32,
    window: Window,
    /// A cache op's index in the op table (by [`Op`]'s position), and a MONITOR
    /// command's by its name in capitals.
    cache: [Option<u32>; Op::ALL.len()],
    commands: BTreeMap<Vec<u8>, u32>,
    ops: Vec<TraceOp>,
    /// Full chunks waiting for the next pump.
    overflow: Vec<(u32, Batch)>,
    /// Reused per request: a MONITOR command's name in capitals, then its RESP bytes.
    scratch: Vec<u8>,
    /// Per shard: the chunk being filled, requests handed out, requests taken.
    open: Vec<Batch>,
    handed: Vec<u64>,
    taken: Vec<u64>,
    /// Per shard: the last chunk went.
    ended: Vec<bool>,
    read_all: bool,
    /// Where the stream stands.
    pub position: Position,
}

impl<R: BufRead> Streamer<R> {
    /// Streams `reader`'s requests (file `file`) over `shards` shards with op table `ops`
    /// (a MONITOR command not in it is skipped and counted), its keys as `keys` says.
    pub fn new(
        reader: Reader<R>,
        file: &str,
        ops: Vec<TraceOp>,
        timing: Timing,
        shards: u32,
        window: Window,
        keys: Keys,
    ) -> Self {
        let shards = shards.max(1);
        let n = shards as usize;
        Self {
            reader,
            file: file.to_string(),
            queued: VecDeque::new(),
            done_skips: Vec::new(),
            until_ns: u64::MAX,
            past_end: 0,
            gone: vec![false; n],
            lost: 0,
            amplify: keys.amplify.max(1),
            key_prefix: keys.prefix,
            memcached: keys.memcached,
            timing,
            shards,
            window,
            cache: std::array::from_fn(|k| {
                ops.iter()
                    .position(|o| *o == TraceOp::Op(Op::ALL[k]))
                    .map(|i| i as u32)
            }),
            commands: ops
                .iter()
                .enumerate()
                .filter_map(|(i, o)| match o {
                    TraceOp::Command(c) => Some((c.as_bytes().to_vec(), i as u32)),
                    TraceOp::Op(_) => None,
                })
                .collect(),
            overflow: Vec::new(),
            scratch: Vec::new(),
            position: Position {
                per_op: vec![0; ops.len()],
                ..Position::default()
            },
            ops,
            open: (0..n).map(|_| Batch::new(1, false)).collect(),
            handed: vec![0; n],
            taken: vec![0; n],
            ended: vec![false; n],
            read_all: false,
        }
    }

    /// Reads `reader` (file `file`) after the files before it, as the same trace: its
    /// clock goes on (`crest replay a.csv b.csv` is one trace cut in two files).
    #[must_use]
    pub fn then(mut self, reader: Reader<R>, file: &str) -> Self {
        self.queued.push_back((file.to_string(), reader));
        self
    }

    /// Sends nothing intended after `until_ns` on the run's clock (`--duration`): the
    /// stream ends there, and what is left out is counted ([`Streamer::past_end`]).
    #[must_use]
    pub fn until(mut self, until_ns: u64) -> Self {
        self.until_ns = until_ns;
        self
    }

    /// Shard `shard`'s worker is gone: what falls to it from now on is dropped and
    /// counted ([`Streamer::lost`]), and it no longer holds the others back.
    pub fn shard_gone(&mut self, shard: u32) {
        if let Some(g) = self.gone.get_mut(shard as usize) {
            *g = true;
        }
    }

    /// Requests left out because they were intended after the run's end.
    pub fn past_end(&self) -> u64 {
        self.past_end
    }

    /// Requests dropped because their shard's worker was gone.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Shard `shard` has taken `consumed` of its requests in all.
    pub fn ack(&mut self, shard: u32, consumed: u64) {
        if let Some(t) = self.taken.get_mut(shard as usize) {
            *t = (*t).max(consumed);
        }
    }

    /// Whether every shard's last chunk went.
    pub fn finished(&self) -> bool {
        self.ended.iter().all(|&e| e)
    }

    /// Requests handed out per op, by the op table's spelling (`get`, `cmd:HSET`).
    pub fn by_op(&self) -> BTreeMap<String, u64> {
        self.ops
            .iter()
            .zip(&self.position.per_op)
            .filter(|(_, n)| **n > 0)
            .map(|(o, n)| (o.spelling(), *n))
            .collect()
    }

    /// Requests sent later than recorded because an earlier line had a later time.
    pub fn reordered(&self) -> u64 {
        match &self.timing {
            Timing::Own(c) => c.reordered,
            Timing::Profile { .. } => 0,
        }
    }

    /// Requests not sent because the re-timing profile ended before them.
    pub fn past_profile(&self) -> u64 {
        match &self.timing {
            Timing::Profile { past, .. } => *past,
            Timing::Own(_) => 0,
        }
    }

    /// The op table.
    pub fn ops(&self) -> &[TraceOp] {
        &self.ops
    }

    /// Lines skipped so far, by file and reason (files with none left out).
    pub fn skips(&self) -> Vec<(String, crest_trace::Skips)> {
        let mut all = self.done_skips.clone();
        if self.reader.skips.total() > 0 {
            all.push((self.file.clone(), self.reader.skips.clone()));
        }
        all
    }

    /// Requests handed to `shard` and not yet taken.
    fn outstanding(&self, shard: usize) -> u64 {
        (self.handed[shard] + self.open[shard].len() as u64).saturating_sub(self.taken[shard])
    }

    /// Reads on as far as the window allows at `now_ns` and returns the chunks to send
    /// now, as (shard, chunk).
    ///
    /// # Errors
    /// The file stops being readable as its format, or a second is too dense to spread.
    pub fn pump(&mut self, now_ns: u64) -> Result<Vec<(u32, Batch)>, StreamError> {
        let horizon = now_ns.saturating_add(self.window.ahead_ns);
        loop {
            if let Some((t, rec)) = self.timing.front() {
                if *t > self.until_ns {
                    // The run ends before it: this and everything after are left out.
                    self.past_end += self.timing.held() as u64;
                    self.timing.clear();
                    if !self.read_all {
                        self.past_end += self.drain_rest();
                    }
                    break;
                }
                if *t > horizon {
                    break;
                }
                let shard = shard_of(rec, self.shards) as usize;
                if self.gone[shard] {
                    self.lost += 1;
                    self.timing.pop();
                    continue;
                }
                if self.outstanding(shard) >= self.window.per_shard {
                    break;
                }
                if let Some((t, rec)) = self.timing.pop() {
                    self.place(shard, t, &rec);
                }
                continue;
            }
            if self.read_all {
                break;
            }
            self.read_one()?;
        }
        let mut out = std::mem::take(&mut self.overflow);
        let done = self.read_all && self.timing.held() == 0;
        for s in 0..self.shards as usize {
            if self.ended[s] || (self.open[s].is_empty() && !done) {
                continue;
            }
            let seq = self.open[s].seq;
            let mut b = std::mem::replace(&mut self.open[s], Batch::new(seq + 1, false));
            b.last = done;
            self.ended[s] = done;
            self.handed[s] += b.len() as u64;
            out.push((s as u32, b));
        }
        Ok(out)
    }

    /// Counts the requests the files still hold without timing them (the run ends
    /// before them), and notes the end. A line that cannot be read ends the count there.
    fn drain_rest(&mut self) -> u64 {
        let mut n = 0u64;
        loop {
            while let Some(Ok(rec)) = self.reader.next() {
                self.position.records += 1;
                n += u64::from(rec.repeat.max(1)) * u64::from(self.amplify);
            }
            if !self.next_file() {
                break;
            }
        }
        self.read_all = true;
        n
    }

    /// Moves on to the next file, keeping this one's skips; false when there is none.
    fn next_file(&mut self) -> bool {
        let Some((file, reader)) = self.queued.pop_front() else {
            return false;
        };
        let done = std::mem::replace(&mut self.reader, reader);
        let name = std::mem::replace(&mut self.file, file);
        if done.skips.total() > 0 {
            self.done_skips.push((name, done.skips));
        }
        true
    }

    /// Reads one record and times its requests, or notes the end.
    fn read_one(&mut self) -> Result<(), StreamError> {
        let rec = loop {
            match self.reader.next() {
                Some(rec) => break rec,
                None if self.next_file() => {}
                None => {
                    self.read_all = true;
                    self.timing.finish();
                    return Ok(());
                }
            }
        };
        let mut rec = rec?;
        self.position.records += 1;
        if !self.key_prefix.is_empty() && !rec.key.is_empty() {
            let mut k = self.key_prefix.clone();
            k.extend_from_slice(&rec.key);
            if rec.args.get(1).is_some_and(|a| *a == rec.key) {
                rec.args[1] = k.clone();
            }
            rec.key = k;
        }
        let (timing, requests) = (&mut self.timing, &mut self.position.requests);
        let mut dense = None;
        expand(rec, self.amplify, |r| {
            *requests += 1;
            if dense.is_none()
                && let Err(e) = timing.push(r)
            {
                dense = Some(e);
            }
        });
        match dense {
            Some(inner) => Err(StreamError::TooDense {
                file: self.file.clone(),
                inner,
            }),
            None => Ok(()),
        }
    }

    /// Puts one timed request in `shard`'s chunk (handed out whole when full).
    fn place(&mut self, shard: usize, at_ns: u64, rec: &Record) {
        let index = match rec.op {
            Op::Command => rec.args.first().and_then(|a| {
                self.scratch.clear();
                self.scratch.extend(a.iter().map(u8::to_ascii_uppercase));
                self.commands.get(&self.scratch).copied()
            }),
            op => self.cache[op as usize],
        };
        let Some(index) = index else {
            self.reader.skips.add(
                "command not replayed (connection state, blocking or admin)",
                rec.line,
            );
            return;
        };
        if self.memcached && crest_memcache::text::check_key(&rec.key).is_err() {
            self.reader.skips.add(
                "key memcached cannot take (over 250 bytes, a space or a control character)",
                rec.line,
            );
            return;
        }
        // A MONITOR command goes as RESP, encoded into the reused scratch buffer.
        self.scratch.clear();
        if rec.op == Op::Command {
            crest_resp::encode_array_header(&mut self.scratch, rec.args.len());
            for a in &rec.args {
                crest_resp::encode_bulk(&mut self.scratch, a);
            }
        }
        let ttl = u32::try_from(rec.ttl_s).unwrap_or(u32::MAX);
        self.open[shard].push(at_ns, index, &rec.key, rec.value_size, ttl, &self.scratch);
        self.position.sent += 1;
        self.position.last_at_ns = self.position.last_at_ns.max(at_ns);
        self.position.per_op[index as usize] += 1;
        if self.open[shard].len() >= MAX_BATCH {
            // Full: it goes with the next pump's chunks; a new one is started.
            let seq = self.open[shard].seq;
            let full = std::mem::replace(&mut self.open[shard], Batch::new(seq + 1, false));
            self.handed[shard] += full.len() as u64;
            self.overflow.push((shard as u32, full));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crest_model::schedule::{Arrival, Profile};

    const S: u64 = 1_000_000_000;

    fn twitter(lines: &str) -> Reader<&[u8]> {
        Reader::new(lines.as_bytes(), "t.csv", Format::Twitter)
    }

    fn window(ahead_ns: u64, per_shard: u64) -> Window {
        Window {
            ahead_ns,
            per_shard,
        }
    }

    /// Every chunk's requests: (shard, seq, last, [(at, key)]).
    type Seen = Vec<(u32, u64, bool, Vec<(u64, String)>)>;

    fn seen(chunks: Vec<(u32, Batch)>) -> Seen {
        chunks
            .into_iter()
            .map(|(s, b)| {
                let reqs = (0..b.len())
                    .map(|i| (b.at_ns[i], String::from_utf8_lossy(b.key(i)).into_owned()))
                    .collect();
                (s, b.seq, b.last, reqs)
            })
            .collect()
    }

    #[test]
    fn a_trace_goes_out_a_window_ahead_each_key_on_one_shard_and_every_shard_ends() {
        // Seconds 0, 1 and 2 hold 4, 2 and 3 requests; keys a..e.
        let text = "0,a,1,10,1,get,0\n0,b,1,10,1,set,0\n0,c,1,10,1,get,0\n0,a,1,20,1,set,60\n\
                    1,d,1,10,1,get,0\n1,a,1,10,1,delete,0\n\
                    2,e,1,10,1,get,0\n2,b,1,10,1,get,0\n2,a,1,30,1,set,0\n";
        let timing = Timing::own(Format::Twitter, 1.0, Spread::Even);
        let mut st = Streamer::new(
            twitter(text),
            "t.csv",
            cache_ops(),
            timing,
            3,
            window(S / 2, 100),
            Keys::default(),
        );
        // At 0 with half a second ahead: second 0 only (released once second 1 began).
        let first = seen(st.pump(0).unwrap());
        let times: Vec<u64> = first.iter().flat_map(|c| c.3.iter().map(|r| r.0)).collect();
        assert!(times.iter().all(|&t| t <= S / 2), "{first:?}");
        assert_eq!(times.len(), 3, "0, 1/4 and 1/2 s: {first:?}");
        assert!(first.iter().all(|c| !c.2), "not the last yet");
        let mut all = first;
        for now in [S / 2, S, 2 * S, 3 * S] {
            all.extend(seen(st.pump(now).unwrap()));
        }
        assert!(st.finished());
        assert_eq!(st.position.sent, 9);
        assert_eq!(st.by_op()["get"], 5);
        assert_eq!(st.by_op()["set"], 3);
        assert_eq!(st.by_op()["delete"], 1);
        // One key, one shard; a shard's chunks numbered 1, 2, … and its times in order.
        let mut shard_of_key = BTreeMap::new();
        for (s, _, _, reqs) in &all {
            for (_, k) in reqs {
                assert_eq!(*shard_of_key.entry(k.clone()).or_insert(*s), *s, "{k}");
            }
        }
        for s in 0..3 {
            let mine: Vec<_> = all.iter().filter(|c| c.0 == s).collect();
            let seqs: Vec<u64> = mine.iter().map(|c| c.1).collect();
            assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
            assert!(mine.last().unwrap().2, "shard {s} ends");
            let t: Vec<u64> = mine.iter().flat_map(|c| c.3.iter().map(|r| r.0)).collect();
            assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");
        }
        // Key a's requests in file order at their spread times: 3/4 s, 1.5 s, 2 2/3 s.
        let a: Vec<u64> = all
            .iter()
            .flat_map(|c| c.3.iter())
            .filter(|r| r.1 == "a")
            .map(|r| r.0)
            .collect();
        assert_eq!(
            a,
            [0, 3 * S / 4, 3 * S / 2, 2_666_666_667],
            "rounded to the ns"
        );
        assert!(st.pump(9 * S).unwrap().is_empty(), "nothing after the end");
    }

    #[test]
    fn a_shard_that_takes_nothing_holds_the_reading_at_its_window() {
        let mut text = String::new();
        for i in 0..200_000 {
            text.push_str(&format!("{},k{},2,10,1,get,0\n", i / 1000, i % 5000));
        }
        let timing = Timing::own(Format::Twitter, 1.0, Spread::Even);
        let mut st = Streamer::new(
            twitter(&text),
            "t.csv",
            cache_ops(),
            timing,
            4,
            window(u64::MAX / 2, 500),
            Keys {
                prefix: b"p:".to_vec(),
                amplify: 3,
                memcached: false,
            },
        );
        let mut held = [0u64; 4];
        let mut now = 0;
        let mut rounds = 0;
        while !st.finished() {
            for (s, b) in st.pump(now).unwrap() {
                held[s as usize] += b.len() as u64;
                assert!(b.key(0).starts_with(b"p:k"));
            }
            for (s, h) in held.iter().enumerate() {
                assert!(
                    *h - st.taken[s] <= 500,
                    "shard {s} holds {h} - {}",
                    st.taken[s]
                );
            }
            // The shards take what they hold; the reader never holds more than two seconds
            // (1,000 records × 3 copies each) besides: one released, one being gathered.
            assert!(st.timing.held() <= 2 * 3_000 + 3, "{}", st.timing.held());
            for (s, h) in held.iter().enumerate() {
                st.ack(s as u32, *h);
            }
            now += S / 100;
            rounds += 1;
            assert!(rounds < 100_000);
        }
        assert_eq!(held.iter().sum::<u64>(), 600_000);
        assert_eq!(st.position.requests, 600_000);
        assert!(
            rounds > 600_000 / 2_000,
            "the window paced the reading: {rounds} rounds"
        );
    }

    #[test]
    fn a_profile_re_times_the_trace_in_its_order_and_counts_what_it_leaves_out() {
        let mut text = String::new();
        for i in 0..2_000 {
            text.push_str(&format!("{},k{i},2,10,1,get,0\n", i % 7));
        }
        let profile = Profile::constant(1_000.0, S).unwrap();
        let timing = Timing::profile(Schedule::new(profile, Arrival::Uniform, 0.0), Rng::new(1));
        let mut st = Streamer::new(
            twitter(&text),
            "t.csv",
            cache_ops(),
            timing,
            1,
            window(u64::MAX / 2, u64::MAX),
            Keys::default(),
        );
        let chunks = seen(st.pump(0).unwrap());
        let reqs: Vec<_> = chunks.iter().flat_map(|c| c.3.clone()).collect();
        assert_eq!(reqs.len(), 1_000);
        assert_eq!(st.past_profile(), 1_000);
        assert_eq!(
            reqs[10],
            (10 * 1_000_000, "k10".to_string()),
            "the k-th at 1 ms × k"
        );
        assert!(st.finished());
    }

    #[test]
    fn monitor_commands_go_verbatim_and_one_outside_the_table_is_counted() {
        let text = "1700000000.000001 [0 127.0.0.1:1] \"SET\" \"k\" \"v\"\n\
                    1700000000.000501 [0 127.0.0.1:1] \"hset\" \"h\" \"f\" \"x y\"\n\
                    1700000000.001001 [0 127.0.0.1:1] \"FLUSHALL\"\n";
        let reader = Reader::new(text.as_bytes(), "m.txt", Format::Monitor);
        let ops = vec![
            TraceOp::Command("SET".into()),
            TraceOp::Command("HSET".into()),
        ];
        let timing = Timing::own(Format::Monitor, 2.0, Spread::Even);
        let mut st = Streamer::new(
            reader,
            "m.txt",
            ops,
            timing,
            1,
            window(S, 100),
            Keys::default(),
        );
        let chunks = st.pump(0).unwrap();
        let (_, b) = &chunks[0];
        assert_eq!(b.len(), 2);
        assert_eq!(b.at_ns, [0, 250_000], "µs kept, twice as fast");
        assert_eq!(
            b.verbatim(1),
            b"*4\r\n$4\r\nhset\r\n$1\r\nh\r\n$1\r\nf\r\n$3\r\nx y\r\n"
        );
        assert_eq!(
            st.skips()[0].1.by_reason["command not replayed (connection state, blocking or admin)"],
            (1, 3)
        );
        assert_eq!(st.by_op().len(), 2);
    }
}

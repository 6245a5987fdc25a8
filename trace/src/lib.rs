//! Cache traces read as a stream of timed requests, for `crest replay` (issue #27).
//!
//! - [`Format`]: Twitter's cache-trace CSV (`timestamp,key,key_size,value_size,client,op,ttl`,
//!   whole-second timestamps), cachebench's KV CSV (a header names the columns; `key`, `op`
//!   and `size` are required, `op_time`, `op_count`, `ttl` are read when present) and
//!   `redis-cli MONITOR` output (µs timestamps, any command, written verbatim).
//! - [`input::open`]: a file, plain or zstd-compressed (told by its magic number, several
//!   frames in a row read as one stream), read with bounded memory: one line at a time, a
//!   line at most [`MAX_LINE`] bytes.
//! - [`Reader`]: the records of one file in order. A line that cannot be replayed is
//!   counted by reason with the first line number of each ([`Skips`]), never dropped
//!   silently; a file that is not in the named format (no record among its first
//!   [`SNIFF`] lines), an empty file, or a file that cannot be read to its end (a truncated
//!   `.zst`) stops with one [`TraceError`] naming the file, the line and what was expected.
//! - [`Op::verb`]: what a cache client would send for each operation over RESP.
//!
//! Data flow: file → [`input::open`] (decompression) → [`Reader`] (lines → [`Record`]s,
//! skips counted) → the replay (partitioned by key hash, timed, sent; not in this crate).

pub mod clock;
pub mod input;
mod parse;
mod record;

pub use record::{MAX_VALUE, Op, Record, Verb};

use std::collections::BTreeMap;
use std::io::BufRead;

/// The longest line read: longer ones are skipped (`line too long`) without being held.
pub const MAX_LINE: usize = 64 << 20;
/// A file whose first this many lines hold no record is not in the named format.
pub const SNIFF: u64 = 100;

/// A trace's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Twitter's cache-trace CSV.
    Twitter,
    /// cachebench's KV replay CSV.
    Cachebench,
    /// `redis-cli MONITOR` output.
    Monitor,
}

impl Format {
    /// As `--format` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Twitter => "twitter",
            Format::Cachebench => "cachebench",
            Format::Monitor => "monitor",
        }
    }

    /// `--format`'s value.
    ///
    /// # Errors
    /// One line naming the formats there are.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "twitter" => Ok(Format::Twitter),
            "cachebench" => Ok(Format::Cachebench),
            "monitor" => Ok(Format::Monitor),
            _ => Err(format!(
                "--format {s:?}: give twitter (cache-trace CSV), cachebench (KV CSV with a header) or monitor (redis-cli MONITOR output)"
            )),
        }
    }

    /// What a line of it looks like, for error messages.
    pub fn expected(self) -> &'static str {
        match self {
            Format::Twitter => {
                "lines of timestamp,key,key_size,value_size,client_id,operation,ttl (e.g. 0,k1,2,100,7,get,0)"
            }
            Format::Cachebench => {
                "a header naming the columns (key, op and size at least, e.g. op_time,key,key_size,op,op_count,size,cache_hits,ttl), then a row per request"
            }
            Format::Monitor => {
                "redis-cli MONITOR lines: 1700000000.123456 [0 127.0.0.1:6379] \"SET\" \"k\" \"v\""
            }
        }
    }
}

/// Lines that could not be replayed: per reason, how many and the first one's number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skips {
    /// Reason → (lines, first line number).
    pub by_reason: BTreeMap<&'static str, (u64, u64)>,
}

impl Skips {
    /// Counts line `line` under `reason`.
    pub fn add(&mut self, reason: &'static str, line: u64) {
        let e = self.by_reason.entry(reason).or_insert((0, line));
        e.0 += 1;
    }

    /// Lines skipped, every reason.
    pub fn total(&self) -> u64 {
        self.by_reason.values().map(|v| v.0).sum()
    }
}

/// Why a trace cannot be replayed at all: the file, the line and what was expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}:{line}: {why}")]
pub struct TraceError {
    /// The file as named.
    pub file: String,
    /// The line (0: before the first).
    pub line: u64,
    /// What is wrong and what would be right.
    pub why: String,
}

/// The records of one file, in order.
pub struct Reader<R> {
    input: R,
    file: String,
    format: Format,
    line: u64,
    buf: Vec<u8>,
    /// cachebench's columns, from its header.
    columns: Option<parse::Columns>,
    /// Records read so far.
    pub records: u64,
    /// Lines skipped, by reason.
    pub skips: Skips,
    failed: bool,
}

impl<R: BufRead> Reader<R> {
    /// Reads `input` (named `file` in messages) as `format`.
    pub fn new(input: R, file: &str, format: Format) -> Self {
        Self {
            input,
            file: file.to_string(),
            format,
            line: 0,
            buf: Vec::new(),
            columns: None,
            records: 0,
            skips: Skips::default(),
            failed: false,
        }
    }

    fn fail(&mut self, line: u64, why: String) -> Option<Result<Record, TraceError>> {
        self.failed = true;
        Some(Err(TraceError {
            file: self.file.clone(),
            line,
            why,
        }))
    }

    /// The next line into `buf`: Ok(false) at the end; a line over [`MAX_LINE`] is read
    /// past and left empty with `too_long` set.
    fn next_line(&mut self) -> std::io::Result<Option<bool>> {
        self.buf.clear();
        let mut too_long = false;
        loop {
            let chunk = self.input.fill_buf()?;
            if chunk.is_empty() {
                return Ok((!self.buf.is_empty() || too_long).then_some(too_long));
            }
            let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if !too_long {
                if self.buf.len() + take > MAX_LINE {
                    too_long = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(&chunk[..take]);
                }
            }
            self.input.consume(take);
            if done {
                return Ok(Some(too_long));
            }
        }
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let too_long = match self.next_line() {
                Ok(Some(t)) => t,
                Ok(None) if self.line == 0 => {
                    return self.fail(0, "the file is empty".into());
                }
                Ok(None) if self.records == 0 => {
                    let why = format!(
                        "no request can be replayed from this file ({} line(s) skipped: {}); expected {}",
                        self.skips.total(),
                        skip_words(&self.skips),
                        self.format.expected()
                    );
                    return self.fail(self.line, why);
                }
                Ok(None) => return None,
                Err(e) => {
                    let line = self.line + 1;
                    return self.fail(line, format!("cannot be read past here: {e}"));
                }
            };
            self.line += 1;
            let line = self.line;
            if too_long {
                self.skips.add("line too long", line);
                continue;
            }
            let text = trim_eol(&self.buf);
            if text.is_empty() {
                continue;
            }
            let parsed = match self.format {
                Format::Twitter => parse::twitter(text),
                Format::Monitor => parse::monitor(text),
                Format::Cachebench => match &self.columns {
                    Some(c) => parse::cachebench(c, text),
                    None => match parse::Columns::of(text) {
                        Ok(c) => {
                            self.columns = Some(c);
                            continue;
                        }
                        Err(why) => {
                            return self
                                .fail(line, format!("{why}; expected {}", self.format.expected()));
                        }
                    },
                },
            };
            match parsed {
                Ok(mut r) => {
                    r.line = line;
                    self.records += 1;
                    return Some(Ok(r));
                }
                Err(reason) => {
                    self.skips.add(reason, line);
                    if self.records == 0 && line >= SNIFF {
                        let why = format!(
                            "not a {} trace: none of its first {SNIFF} lines is a request ({}); expected {}",
                            self.format.name(),
                            skip_words(&self.skips),
                            self.format.expected()
                        );
                        return self.fail(line, why);
                    }
                }
            }
        }
    }
}

fn trim_eol(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// `3 bad op (first at line 2), 1 bad size (first at line 9)`.
pub fn skip_words(s: &Skips) -> String {
    s.by_reason
        .iter()
        .map(|(r, (n, first))| format!("{n} {r} (first at line {first})"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn read(format: Format, text: &str) -> (Vec<Record>, Skips, Option<TraceError>) {
        let mut r = Reader::new(text.as_bytes(), "t.csv", format);
        let mut out = Vec::new();
        let mut err = None;
        for x in r.by_ref() {
            match x {
                Ok(rec) => out.push(rec),
                Err(e) => err = Some(e),
            }
        }
        (out, r.skips, err)
    }

    #[test]
    fn twitter_lines_become_records_and_bad_ones_are_counted_by_reason() {
        let text = "0,k1,2,100,7,get,0\n0,k2,2,300,7,set,60\r\n1,k3,2,5,7,frobnicate,0\n\n1,k4,2,x,7,set,0\n2,k5,2,10,9,delete,0\n";
        let (recs, skips, err) = read(Format::Twitter, text);
        assert_eq!(err, None);
        assert_eq!(recs.len(), 3);
        assert_eq!(
            (
                recs[1].op,
                recs[1].value_size,
                recs[1].ttl_s,
                recs[1].at_us,
                recs[1].line
            ),
            (Op::Set, 300, 60, 0, 2)
        );
        assert_eq!(recs[2].at_us, 2_000_000);
        assert_eq!(recs[2].line, 6);
        assert_eq!(skips.by_reason["unknown op"], (1, 3));
        assert_eq!(skips.by_reason["bad value size"], (1, 5));
    }

    #[test]
    fn an_empty_file_and_a_file_of_another_format_stop_in_one_line() {
        let (_, _, err) = read(Format::Twitter, "");
        assert_eq!(err.unwrap().to_string(), "t.csv:0: the file is empty");
        let monitor = "1700000000.000001 [0 127.0.0.1:1] \"GET\" \"k\"\n".repeat(150);
        let (recs, _, err) = read(Format::Twitter, &monitor);
        assert!(recs.is_empty());
        let e = err.unwrap().to_string();
        assert!(
            e.starts_with("t.csv:100: not a twitter trace: none of its first 100 lines"),
            "{e}"
        );
        assert!(e.contains("expected lines of timestamp,key"), "{e}");
        let (_, _, err) = read(Format::Cachebench, "a,b,c\n1,2,3\n");
        let e = err.unwrap().to_string();
        assert!(
            e.starts_with("t.csv:1: the header names no key column"),
            "{e}"
        );
    }

    #[test]
    fn cachebench_reads_its_header_and_repeats_op_count() {
        let text = "op_time,key,key_size,op,op_count,size,cache_hits,ttl\n10,a,1,GET,3,0,0,0\n11,b,1,SET,1,250,0,30\n12,c,1,DELETE,1,0,0,0\n13,d,1,GET_LEASE,1,0,0,0\n14,e,1,POP,1,0,0,0\n";
        let (recs, skips, err) = read(Format::Cachebench, text);
        assert_eq!(err, None);
        assert_eq!(recs.len(), 4);
        assert_eq!(
            (recs[0].op, recs[0].repeat, recs[0].at_us),
            (Op::Get, 3, 10_000_000)
        );
        assert_eq!(
            (recs[1].op, recs[1].value_size, recs[1].ttl_s),
            (Op::Set, 250, 30)
        );
        assert_eq!(recs[2].op, Op::Delete);
        assert_eq!(recs[3].op, Op::Get);
        assert_eq!(skips.by_reason["unknown op"], (1, 6));
        // Only key, op and size are needed, in any order.
        let (recs, _, err) = read(Format::Cachebench, "size,op,key\n7,SET,zz\n");
        assert_eq!(err, None);
        assert_eq!(
            (recs[0].key.as_slice(), recs[0].value_size, recs[0].at_us),
            (&b"zz"[..], 7, 0)
        );
    }

    #[test]
    fn monitor_lines_keep_their_command_verbatim_and_their_microseconds() {
        let text = "OK\n1700000000.123456 [0 127.0.0.1:5000] \"SET\" \"k:1\" \"a \\\"b\\\"\\x00\\n\"\n1700000001.000002 [0 unix:/s] \"ping\"\n1700000002.5 [0 1.2.3.4:5] \"GET\" \"unterminated\n";
        let (recs, skips, err) = read(Format::Monitor, text);
        assert_eq!(err, None);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].at_us, 1_700_000_000_123_456);
        assert_eq!(
            recs[0].args,
            vec![b"SET".to_vec(), b"k:1".to_vec(), b"a \"b\"\x00\n".to_vec()]
        );
        assert_eq!(recs[0].key, b"k:1");
        assert_eq!(recs[1].args, vec![b"ping".to_vec()]);
        assert!(recs[1].key.is_empty());
        assert_eq!(skips.by_reason["not a MONITOR line"], (1, 1));
        assert_eq!(skips.by_reason["bad quoting"], (1, 4));
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_without_being_held() {
        let mut text = String::from("0,a,1,1,1,get,0\n");
        text.push_str(&"9".repeat(MAX_LINE + 10));
        text.push_str("\n0,b,1,1,1,get,0\n");
        let (recs, skips, err) = read(Format::Twitter, &text);
        assert_eq!(err, None);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].line, 3);
        assert_eq!(skips.by_reason["line too long"], (1, 2));
    }

    /// A truncated `.zst` stops at the line it reached, naming the file.
    #[test]
    fn a_cut_zstd_file_stops_with_the_line_it_reached() {
        use ruzstd::encoding::{CompressionLevel, compress_to_vec};
        let text: String = (0..50_000)
            .map(|i| format!("{i},k{i},3,10,1,get,0\n"))
            .collect();
        let z = compress_to_vec(text.as_bytes(), CompressionLevel::Fastest);
        let cut = &z[..z.len() * 2 / 3];
        let input = std::io::BufReader::new(input::Zstd::new(cut));
        let mut r = Reader::new(input, "t.zst", Format::Twitter);
        let (mut n, mut err) = (0u64, None);
        for x in r.by_ref() {
            match x {
                Ok(_) => n += 1,
                Err(e) => err = Some(e),
            }
        }
        let e = err.unwrap();
        assert!(n > 1_000 && n < 50_000, "{n}");
        assert_eq!(e.line, n + 1, "{e}");
        assert!(e.to_string().starts_with("t.zst:"), "{e}");
        assert!(e.why.contains("cut short or damaged"), "{e}");
    }

    #[test]
    fn every_op_has_a_resp_verb() {
        assert_eq!(
            Op::Add.verb(),
            Verb::Set {
                nx: true,
                xx: false
            }
        );
        assert_eq!(
            Op::Cas.verb(),
            Verb::Set {
                nx: false,
                xx: true
            }
        );
        assert_eq!(Op::Prepend.verb(), Verb::Append);
        assert_eq!(Op::Gets.verb(), Verb::Get);
        assert_eq!(Op::Delete.verb(), Verb::Del);
    }
}

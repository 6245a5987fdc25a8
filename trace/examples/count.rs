//! Counts a trace's records and skipped lines: `cargo run -p crest-trace --example count --
//! FORMAT FILE` (plain or zstd). What `crest replay` will read, without a server.

use crest_trace::{Format, Reader, input, skip_words};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, format, file] = args.as_slice() else {
        eprintln!("usage: count FORMAT FILE (FORMAT: twitter, cachebench or monitor)");
        return ExitCode::from(2);
    };
    let format = match Format::parse(format) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("count: {e}");
            return ExitCode::from(2);
        }
    };
    let input = match input::open(std::path::Path::new(file)) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("count: {e}");
            return ExitCode::from(2);
        }
    };
    let mut r = Reader::new(input, file, format);
    let mut by_op = std::collections::BTreeMap::new();
    for rec in r.by_ref() {
        match rec {
            Ok(rec) => *by_op.entry(rec.op.name()).or_insert(0u64) += u64::from(rec.repeat),
            Err(e) => {
                eprintln!("count: {e}");
                return ExitCode::from(2);
            }
        }
    }
    println!("{} records {by_op:?}", r.records);
    if r.skips.total() > 0 {
        println!("skipped: {}", skip_words(&r.skips));
    }
    ExitCode::SUCCESS
}

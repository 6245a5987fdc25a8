//! Writing a run's files into `--out`. `timeline.csv` and `latency.hlog` are written as the
//! run goes ([`Live`]: a line per interval, flushed, so a crash leaves a readable prefix);
//! `report.json` and `report.html` at the end, each atomically (a temporary name, then a
//! rename), so a half-written report never passes as whole and no temporary file is left.

use crest_model::hist::Hist;
use crest_report::{Report, TimelinePoint, files};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Files written into `--out`.
pub const FILES: [&str; 4] = ["report.json", "timeline.csv", "latency.hlog", "report.html"];

/// Checks before a run that `dir` is (or can be made) a directory Crest can write in, so a
/// long run does not end in a report that has nowhere to go.
///
/// # Errors
/// One line naming `--out` and what is wrong (a file in the way, no permission...).
pub fn check_writable(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "--out {shown}: is a file; give a directory (it is created if missing)"
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("--out {shown}: cannot create it: {e}"))?;
    let probe = dir.join(".crest-write-check");
    let res = std::fs::write(&probe, b"x");
    let _ = std::fs::remove_file(&probe);
    res.map_err(|e| format!("--out {shown}: cannot write there: {e}"))
}

/// Writes `report.json` and `report.html` into `dir` (`timeline.csv` and `latency.hlog` were
/// written during the run by [`Live`]); when a live write failed (`live_failed`),
/// `timeline.csv` is rewritten whole from the report, so it is complete if the disk has
/// room again; when the server was sampled, too, with the server's columns filled; and
/// when there were outages, with `nodes_out` filled.
/// Returns the path of `report.json`.
///
/// # Errors
/// The first file that cannot be rendered or written, named.
pub fn write_all(report: &Report, dir: &Path, live_failed: bool) -> Result<PathBuf, String> {
    let json = serde_json::to_string_pretty(report).map_err(|e| format!("report.json: {e}"))?;
    // The server's columns come at the end (a boundary's sample can arrive after its
    // row was written): the whole file again, with them.
    if live_failed || report.server.is_some() || !report.outages.is_empty() {
        write_atomic(&dir.join("timeline.csv"), report.timeline_csv().as_bytes())?;
    }
    write_atomic(
        &dir.join("report.html"),
        crest_report::html::run::render(report).as_bytes(),
    )?;
    // Last: a report.json on disk means the rest is there too.
    write_atomic(&dir.join("report.json"), json.as_bytes())?;
    Ok(dir.join("report.json"))
}

/// Reads a saved `report.json` ([`Report::read`]).
///
/// # Errors
/// One line naming the file and what is wrong with it.
pub fn read_report(path: &Path) -> Result<Report, String> {
    Report::read(path).map_err(|e| {
        format!(
            "{}: {e} (give a report.json that crest run --out wrote)",
            path.display()
        )
    })
}

/// Writes what a saved report renders to: `report.html` and `timeline.csv`, as the run
/// wrote them (`latency.hlog` holds per-interval histograms the report does not keep).
///
/// # Errors
/// The first file that cannot be written, named.
pub fn write_rendered(report: &Report, dir: &Path) -> Result<(), String> {
    write_atomic(&dir.join("timeline.csv"), report.timeline_csv().as_bytes())?;
    write_atomic(
        &dir.join("report.html"),
        crest_report::html::run::render(report).as_bytes(),
    )
}

/// Writes to `<name>.tmp` beside `path` (each file its own temporary name) and renames; on
/// failure the temporary file is removed and the error names `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let res = File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_data()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}

/// One file written line by line during the run. The first write error is kept (naming the
/// file) and printed once; the file is then left as it is, a readable prefix.
#[derive(Debug)]
struct LiveFile {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    error: Option<String>,
}

impl LiveFile {
    fn create(path: PathBuf, header: &[u8]) -> Result<Self, String> {
        let f = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut me = Self {
            path,
            out: Some(BufWriter::new(f)),
            error: None,
        };
        me.write(header);
        me.flush();
        match me.error.take() {
            Some(e) => Err(e),
            None => Ok(me),
        }
    }

    fn fail(&mut self, e: &io::Error) {
        let msg = format!("{}: {e}", self.path.display());
        eprintln!("crest: {msg}; stopped writing it, the run goes on");
        self.error = Some(msg);
        self.out = None;
    }

    fn write(&mut self, bytes: &[u8]) {
        if let Some(out) = &mut self.out
            && let Err(e) = out.write_all(bytes)
        {
            self.fail(&e);
        }
    }

    fn flush(&mut self) {
        if let Some(out) = &mut self.out
            && let Err(e) = out.flush()
        {
            self.fail(&e);
        }
    }
}

/// `timeline.csv` and `latency.hlog`, written as the run goes: one row (and one hlog line
/// per histogram) per finalized interval, flushed after each interval.
#[derive(Debug)]
pub struct Live {
    timeline: LiveFile,
    hlog: LiveFile,
    line: String,
    dir: std::path::PathBuf,
}

impl Live {
    /// Creates (truncating) `dir/timeline.csv` and `dir/latency.hlog` with their headers;
    /// `started_at` is the measured start, the hlog's start and base time.
    ///
    /// # Errors
    /// The file that cannot be created or written, named.
    pub fn create(dir: &Path, run_id: &str, started_at: SystemTime) -> Result<Self, String> {
        Ok(Self {
            timeline: LiveFile::create(
                dir.join("timeline.csv"),
                files::TIMELINE_CSV_HEADER.as_bytes(),
            )?,
            hlog: LiveFile::create(
                dir.join("latency.hlog"),
                files::hlog_header(run_id, started_at).as_bytes(),
            )?,
            line: String::new(),
            dir: dir.to_path_buf(),
        })
    }

    /// Appends one timeline row.
    pub fn row(&mut self, p: &TimelinePoint) {
        self.line.clear();
        files::timeline_csv_row(&mut self.line, p, None);
        self.timeline.write(self.line.as_bytes());
    }

    /// Appends one hlog line: the whole run's (`class` None) or one class's latency.
    pub fn hist(&mut self, class: Option<&str>, start_s: f64, length_s: f64, h: &Hist) {
        self.line.clear();
        files::hlog_line(&mut self.line, class, start_s, length_s, h);
        self.hlog.write(self.line.as_bytes());
    }

    /// Flushes both files (once per interval).
    pub fn flush(&mut self) {
        self.timeline.flush();
        self.hlog.flush();
    }

    /// Closes and removes both files, and the folder when that leaves it empty (a run that
    /// never got past its refusals leaves nothing behind).
    pub fn remove(self) {
        for f in [self.timeline, self.hlog] {
            drop(f.out);
            let _ = std::fs::remove_file(&f.path);
        }
        // Fails, and so keeps it, unless it is empty.
        let _ = std::fs::remove_dir(&self.dir);
    }

    /// The write errors so far, each naming its file.
    pub fn errors(&self) -> Vec<String> {
        [&self.timeline.error, &self.hlog.error]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_do_not_collide() {
        let dir = std::env::temp_dir().join(format!("crest-out-{}", std::process::id()));
        check_writable(&dir).unwrap();
        write_atomic(&dir.join("report.json"), b"{}").unwrap();
        write_atomic(&dir.join("report.html"), b"<p>").unwrap();
        assert_eq!(std::fs::read(dir.join("report.json")).unwrap(), b"{}");
        assert_eq!(std::fs::read(dir.join("report.html")).unwrap(), b"<p>");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

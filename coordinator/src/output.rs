//! Writing a report's files into `--out`, each atomically (a temporary name, then a
//! rename), so a half-written report never passes as whole.

use crate::report::{self, Report};
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

/// Files written into `--out`.
pub const FILES: [&str; 4] = ["report.json", "timeline.csv", "latency.hlog", "report.html"];

/// Checks before a run that `dir` can be written, so a long run does not end in a report
/// that has nowhere to go.
///
/// # Errors
/// The I/O error of creating the directory or a probe file in it.
pub fn check_writable(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(".crest-write-check");
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// Writes `report.json`, `timeline.csv`, `latency.hlog` and `report.html` into `dir`;
/// returns the path of `report.json`.
///
/// # Errors
/// The first file that cannot be rendered or written, named.
pub fn write_all(report: &Report, dir: &Path) -> Result<PathBuf, String> {
    let json = serde_json::to_string_pretty(report).map_err(|e| format!("report.json: {e}"))?;
    write_atomic(&dir.join("report.json"), json.as_bytes())?;
    write_atomic(&dir.join("timeline.csv"), report.timeline_csv().as_bytes())?;
    let started =
        humantime::parse_rfc3339(&report.started_at).unwrap_or_else(|_| SystemTime::now());
    let mut hlog = Vec::new();
    report::write_hlog(report, started, &mut hlog).map_err(|e| format!("latency.hlog: {e}"))?;
    write_atomic(&dir.join("latency.hlog"), &hlog)?;
    write_atomic(
        &dir.join("report.html"),
        report::html::render(report).as_bytes(),
    )?;
    Ok(dir.join("report.json"))
}

/// Writes to `<name>.tmp` beside `path` (each file its own temporary name) and renames.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

impl Report {
    /// Whether the report is whole: no worker lost, the books balanced.
    pub fn is_complete(&self) -> bool {
        !self.workers.iter().any(|w| w.lost) && self.checks.problems.is_empty()
    }

    /// The exit code for a run that produced this report: 0 when complete, 3 when a report
    /// was written but is incomplete (a worker was lost, or the books did not balance).
    pub fn exit_code(&self) -> ExitCode {
        if self.is_complete() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(3)
        }
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

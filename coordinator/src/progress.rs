//! Live progress once a second on stderr: a one-line bar redrawn in place on a terminal,
//! plain lines when stderr is piped (logs and CI). Stdout stays free for the summary.

use crest_report::fmt::human_us;
use std::io::Write;

/// One progress sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// Scheduled length.
    pub total_s: f64,
    /// Rate the profile asked for in the last row written (None: closed loop only).
    pub target_rate: Option<f64>,
    /// Non-error replies per second over the rows written since the last line.
    pub achieved_rate: f64,
    /// Latency p99 over the rows written since the last line, µs.
    pub p99_us: f64,
    /// Errors so far.
    pub errors: u64,
    /// Workers still alive.
    pub alive: usize,
    /// Workers in the run.
    pub workers: usize,
}

/// Prints samples.
#[derive(Debug)]
pub struct Progress {
    tty: bool,
    drawn: bool,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Chooses the bar when stderr is a terminal.
    pub fn new() -> Self {
        use std::io::IsTerminal as _;
        let tty = std::io::stderr().is_terminal();
        Self { tty, drawn: false }
    }

    /// Formats one sample as a line.
    pub fn line(s: &Sample) -> String {
        format!(
            "{:>5.1}s/{:.0}s  target {:>11}  achieved {:>9.0}/s  p99 {:>8}  errors {}  workers {}/{}",
            s.elapsed_s,
            s.total_s,
            s.target_rate
                .map_or_else(|| "max".to_string(), |r| format!("{r:.0}/s")),
            s.achieved_rate,
            human_us(s.p99_us),
            s.errors,
            s.alive,
            s.workers
        )
    }

    /// Shows a sample.
    pub fn show(&mut self, s: &Sample) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let width = 24usize;
            let frac = (s.elapsed_s / s.total_s.max(1e-9)).clamp(0.0, 1.0);
            let filled = (frac * width as f64).round() as usize;
            let _ = write!(
                err,
                "\r\x1b[2K[{}{}] {}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                Self::line(s)
            );
            self.drawn = true;
        } else {
            let _ = writeln!(err, "{}", Self::line(s));
        }
        let _ = err.flush();
    }

    /// Ends the bar's line so later output starts clean.
    pub fn finish(&mut self) {
        if self.tty && self.drawn {
            let _ = writeln!(std::io::stderr());
            self.drawn = false;
        }
    }
}

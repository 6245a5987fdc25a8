//! Live progress once a second on stderr: a one-line bar redrawn in place on a terminal,
//! plain lines when stderr is piped (logs and CI). Stdout stays free for the summary.

use crest_report::fmt::human_us;
use std::io::Write;

/// One progress sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// Scheduled length (None: a phase bounded by a request count, with no known end).
    pub total_s: Option<f64>,
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
            "{:>5.1}s{}  target {:>11}  achieved {:>9.0}/s  p99 {:>8}  errors {}  workers {}/{}",
            s.elapsed_s,
            s.total_s.map_or_else(String::new, |t| format!("/{t:.0}s")),
            s.target_rate
                .map_or_else(|| "max".to_string(), |r| format!("{r:.0}/s")),
            s.achieved_rate,
            // Nothing completed and nothing timed out in the window: no latency to show.
            if s.p99_us == 0.0 && s.achieved_rate == 0.0 {
                "–".to_string()
            } else {
                human_us(s.p99_us)
            },
            s.errors,
            s.alive,
            s.workers
        )
    }

    /// Shows a sample.
    pub fn show(&mut self, s: &Sample) {
        let mut err = std::io::stderr().lock();
        if let (true, Some(total_s)) = (self.tty, s.total_s) {
            let width = 24usize;
            let frac = (s.elapsed_s / total_s.max(1e-9)).clamp(0.0, 1.0);
            let filled = (frac * width as f64).round() as usize;
            let _ = write!(
                err,
                "\r\x1b[2K[{}{}] {}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                Self::line(s)
            );
            self.drawn = true;
        } else if self.tty {
            let _ = write!(err, "\r\x1b[2K{}", Self::line(s));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sample {
        Sample {
            elapsed_s: 3.26,
            total_s: Some(10.0),
            target_rate: Some(1000.0),
            achieved_rate: 998.4,
            p99_us: 1530.0,
            errors: 2,
            alive: 3,
            workers: 4,
        }
    }

    /// The line shows elapsed and scheduled time, the asked and achieved rates, p99, the
    /// errors and the live workers, in fixed-width columns.
    #[test]
    fn a_line_shows_every_figure_of_the_sample() {
        assert_eq!(
            Progress::line(&sample()),
            "  3.3s/10s  target      1000/s  achieved       998/s  p99   1.53ms  errors 2  workers 3/4"
        );
    }

    /// A closed loop has no asked rate: its target reads `max`.
    #[test]
    fn a_closed_loop_line_shows_max_as_its_target() {
        let s = Sample {
            target_rate: None,
            ..sample()
        };
        assert!(
            Progress::line(&s).contains("  target         max  achieved"),
            "{}",
            Progress::line(&s)
        );
    }

    /// A phase bounded by a request count (a prefill, `--requests`) has no length to show:
    /// no `/3600s` from its unbounded phase, and no asked rate.
    #[test]
    fn a_count_bounded_phase_shows_no_length() {
        let s = Sample {
            total_s: None,
            target_rate: None,
            ..sample()
        };
        assert!(
            Progress::line(&s).starts_with("  3.3s  target         max  achieved"),
            "{}",
            Progress::line(&s)
        );
    }

    /// A window where nothing completed shows no latency, not `0µs`.
    #[test]
    fn a_window_with_nothing_completed_shows_no_latency() {
        let s = Sample {
            achieved_rate: 0.0,
            p99_us: 0.0,
            ..sample()
        };
        assert!(
            Progress::line(&s).contains("p99        –  "),
            "{}",
            Progress::line(&s)
        );
    }

    /// The p99 is shown in the unit that fits it: µs, ms or s.
    #[test]
    fn the_p99_is_shown_in_the_unit_that_fits() {
        let p99 = |p99_us: f64| Progress::line(&Sample { p99_us, ..sample() });
        assert!(p99(850.0).contains("p99    850µs  "), "{}", p99(850.0));
        assert!(
            p99(2_500_000.0).contains("p99    2.50s  "),
            "{}",
            p99(2_500_000.0)
        );
    }

    /// The columns keep their width as the figures grow, so redrawn lines line up.
    #[test]
    fn lines_keep_their_width_as_figures_grow() {
        let big = Sample {
            elapsed_s: 12.34,
            target_rate: Some(99_999.0),
            achieved_rate: 99_998.0,
            p99_us: 12.0,
            ..sample()
        };
        // The column of `word` in characters (µ is two bytes).
        let col = |line: &str, word: &str| line.find(word).map(|i| line[..i].chars().count());
        let (a, b) = (Progress::line(&sample()), Progress::line(&big));
        for word in ["target", "achieved", "p99", "errors"] {
            assert!(col(&a, word).is_some(), "{a}");
            assert_eq!(col(&a, word), col(&b, word), "{word}:\n{a}\n{b}");
        }
    }

    /// Finishing ends a drawn bar once; a second finish, with no bar drawn, does nothing.
    #[test]
    fn finishing_ends_a_drawn_bar_once() {
        let mut p = Progress {
            tty: true,
            drawn: true,
        };
        p.finish();
        assert!(!p.drawn);
        p.finish();
        assert!(!p.drawn);
    }
}

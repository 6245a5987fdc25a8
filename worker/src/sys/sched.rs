//! How much of its core a thread got: how often the scheduler took the core from it
//! (involuntary context switches, `getrusage(RUSAGE_THREAD)`) and how long it was runnable
//! but waited for the core (`/proc/thread-self/schedstat`, its second field). A shard reads
//! both once per interval: when an interval's schedule lag passes the pacer's bound, they
//! say whether the shard's core was its own (a pacer cannot send on time from a thread that
//! is not running). And how much of its cores the hypervisor took ([`StealMeter`]).

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The scheduler's counts for one thread since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sched {
    /// Involuntary context switches: the core given to another thread while this one could
    /// still run.
    pub preemptions: u64,
    /// Time runnable but waiting for the core, ns (0 where the kernel keeps no schedstat).
    pub queued_ns: u64,
}

impl Sched {
    /// What happened between `earlier` and this reading.
    pub fn since(self, earlier: Sched) -> Sched {
        Sched {
            preemptions: self.preemptions.saturating_sub(earlier.preemptions),
            queued_ns: self.queued_ns.saturating_sub(earlier.queued_ns),
        }
    }
}

/// Reads [`Sched`] for the thread that opened it.
#[derive(Debug, Default)]
pub struct SchedMeter {
    /// `/proc/thread-self/schedstat` as opened by the measured thread (the link resolves
    /// to that thread's own file); None where it cannot be opened.
    schedstat: Option<File>,
}

impl SchedMeter {
    /// A meter for the calling thread: open it on the thread it is to measure.
    pub fn for_this_thread() -> Self {
        Self {
            schedstat: File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// The counts now. Preemptions are the calling thread's (call it on the thread that
    /// opened the meter); the queued time is always the opener's.
    pub fn read(&self) -> Sched {
        Sched {
            preemptions: preemptions(),
            queued_ns: self.schedstat.as_ref().map_or(0, queued_ns),
        }
    }
}

/// Involuntary context switches of the calling thread; 0 when they cannot be read.
fn preemptions() -> u64 {
    // SAFETY: getrusage writes one rusage we own; an all-zero rusage is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD asks for the calling thread's counts into `ru`.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    u64::try_from(ru.ru_nivcsw).unwrap_or(0)
}

/// The second field of a schedstat file (`run_ns queued_ns timeslices`), read from its start
/// (a `pread` at 0 makes the kernel write it afresh); 0 when it cannot be read.
fn queued_ns(f: &File) -> u64 {
    let mut buf = [0u8; 96];
    let Ok(n) = f.read_at(&mut buf, 0) else {
        return 0;
    };
    parse_queued(&buf[..n]).unwrap_or(0)
}

fn parse_queued(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Time the hypervisor ran something else while these cores' virtual CPUs wanted to run
/// (`steal` in `/proc/stat`, per CPU): on a VM a stolen millisecond is late sends no pacer
/// can prevent. Read by the agent once per interval, not by the shards (reading
/// `/proc/stat` takes tens of µs: not in a pacer's loop). Its resolution is the kernel's
/// tick (`USER_HZ`, 10 ms).
#[derive(Debug)]
pub struct StealMeter {
    cores: Vec<usize>,
    /// ns per `USER_HZ` tick.
    tick_ns: u64,
    last: u64,
}

impl StealMeter {
    /// A meter for `cores`, starting now.
    pub fn new(cores: Vec<usize>) -> Self {
        // SAFETY: sysconf reads a constant of the system.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let tick_ns = if hz > 0 {
            1_000_000_000 / hz as u64
        } else {
            10_000_000
        };
        let mut m = Self {
            cores,
            tick_ns,
            last: 0,
        };
        m.last = m.total();
        m
    }

    /// Steal on the cores since the last call (or since `new`), ns; 0 where `/proc/stat`
    /// cannot be read.
    pub fn take(&mut self) -> u64 {
        let now = self.total();
        let d = now.saturating_sub(self.last);
        self.last = now;
        d
    }

    fn total(&self) -> u64 {
        let Ok(text) = std::fs::read_to_string("/proc/stat") else {
            return 0;
        };
        steal_ticks(&text, &self.cores).saturating_mul(self.tick_ns)
    }
}

/// The steal ticks of `cores` in `/proc/stat`'s text (the 8th number of each `cpuN` line).
fn steal_ticks(text: &str, cores: &[usize]) -> u64 {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let cpu: usize = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            if !cores.contains(&cpu) {
                return None;
            }
            f.nth(7)?.parse::<u64>().ok()
        })
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn steal_is_the_eighth_number_of_the_cores_lines() {
        let stat = "cpu  100 0 50 9000 3 0 1 70 0 0\n\
                    cpu0 50 0 25 4500 1 0 1 30 0 0\n\
                    cpu1 50 0 25 4500 2 0 0 40 0 0\n\
                    cpu12 1 0 1 1 1 0 0 5 0 0\n\
                    intr 12345 1 2 3\n";
        assert_eq!(steal_ticks(stat, &[1]), 40);
        assert_eq!(steal_ticks(stat, &[0, 1]), 70);
        assert_eq!(steal_ticks(stat, &[12]), 5);
        assert_eq!(steal_ticks(stat, &[7]), 0, "no such core");
        // The meter reads this machine's file: it moves forward only.
        let mut m = StealMeter::new(vec![0]);
        let a = m.take();
        assert_eq!(a % m.tick_ns, 0, "whole ticks");
    }

    #[test]
    fn the_second_field_is_the_queued_time() {
        assert_eq!(parse_queued(b"1030201 39935 2\n"), Some(39_935));
        assert_eq!(parse_queued(b"1030201\n"), None);
        assert_eq!(parse_queued(b""), None);
        assert_eq!(
            Sched {
                preemptions: 5,
                queued_ns: 10
            }
            .since(Sched {
                preemptions: 7,
                queued_ns: 4
            }),
            Sched {
                preemptions: 0,
                queued_ns: 6
            }
        );
    }

    /// Two spinning threads pinned to one core: each is preempted by the other and waits
    /// for the core for a good part of the time; read again, the meter sees it.
    #[test]
    fn a_thread_sharing_its_core_is_seen_preempted_and_queued() {
        let core = *core_affinity::get_core_ids().unwrap().last().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let hog = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                core_affinity::set_for_current(core);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let (got, spun) = std::thread::spawn(move || {
            assert!(core_affinity::set_for_current(core));
            let meter = SchedMeter::for_this_thread();
            let before = meter.read();
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                std::hint::spin_loop();
            }
            (meter.read().since(before), start.elapsed())
        })
        .join()
        .unwrap();
        stop.store(true, Ordering::Relaxed);
        hog.join().unwrap();
        assert!(got.preemptions >= 1, "{got:?} over {spun:?}");
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            // The hog runs about half of the time (a third at worst, with the test harness).
            assert!(got.queued_ns >= 30_000_000, "{got:?} over {spun:?}");
            assert!(
                got.queued_ns <= spun.as_nanos() as u64,
                "{got:?} over {spun:?}"
            );
        }
    }
}

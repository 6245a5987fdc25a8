//! An epoll instance that owns its descriptor, waits with a nanosecond timeout, and takes
//! interests as an [`Interest`] rather than flag sets; plus the thread's timer slack.
//!
//! The pacer sleeps in [`Epoll::wait`] until the next intended send time, so the wait's
//! precision is the pacer's precision: `epoll_pwait2` (Linux 5.11+) takes a `timespec`,
//! where `epoll_wait` rounds down to whole milliseconds. On older kernels the first wait
//! sees `ENOSYS` and every later one uses `epoll_wait`; the loop then polls out the rest.
//!
//! This is the only file of the engine with `unsafe` code: six blocks, five of them
//! syscalls and one taking ownership of the descriptor `epoll_create1` returns.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_MS: u64 = 1_000_000;

/// What a registered socket wakes the loop for.
///
/// Reads are always of interest (a reply, or the peer going away); writes only while a
/// connect is pending or a send could not finish. Registration is level-triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Readable, or the peer closed or failed.
    Read,
    /// As `Read`, and also writable.
    ReadWrite,
}

impl Interest {
    fn bits(self) -> u32 {
        let read = libc::EPOLLIN | libc::EPOLLRDHUP;
        let bits = match self {
            Interest::Read => read,
            Interest::ReadWrite => read | libc::EPOLLOUT,
        };
        bits as u32
    }
}

/// What one wait reported for one registered socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready(u32);

impl Ready {
    const IN: u32 = libc::EPOLLIN as u32;
    const OUT: u32 = libc::EPOLLOUT as u32;
    const ERR: u32 = libc::EPOLLERR as u32;
    const HUP: u32 = libc::EPOLLHUP as u32;
    const RDHUP: u32 = libc::EPOLLRDHUP as u32;

    /// Data to read, or the peer is gone; either way the next read tells which (data,
    /// EOF or the error).
    #[inline]
    pub fn readable(self) -> bool {
        self.0 & (Self::IN | Self::ERR | Self::HUP | Self::RDHUP) != 0
    }

    /// Room to write.
    #[inline]
    pub fn writable(self) -> bool {
        self.0 & Self::OUT != 0
    }

    /// A pending non-blocking connect has an outcome: writable on success, an error or a
    /// hang-up on failure (`SO_ERROR` then says which).
    #[inline]
    pub fn connect_done(self) -> bool {
        self.0 & (Self::OUT | Self::ERR | Self::HUP) != 0
    }
}

/// Room for the events of one wait, reused across waits so the loop does not allocate.
pub struct Events {
    buf: Vec<libc::epoll_event>,
    len: usize,
}

impl Events {
    /// Room for up to `n` events per wait (at least one).
    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; n.max(1)],
            len: 0,
        }
    }

    /// Events of the last wait, as (token, readiness).
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (u64, Ready)> + '_ {
        // Copies, not references: `epoll_event` is packed on x86-64.
        self.buf[..self.len].iter().map(|e| {
            let (token, bits) = (e.u64, e.events);
            (token, Ready(bits))
        })
    }
}

/// An epoll instance.
pub struct Epoll {
    fd: OwnedFd,
    /// Whether `epoll_pwait2` is available; cleared by the first `ENOSYS`.
    precise: bool,
}

impl Epoll {
    /// A new epoll instance (close-on-exec).
    ///
    /// # Errors
    /// The `epoll_create1` error (descriptor limits).
    pub fn new() -> io::Result<Self> {
        // SAFETY: no pointers are passed; the kernel returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by epoll_create1, is open, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd, precise: true })
    }

    /// Registers `fd` for `interest`; its events carry `token`. Closing `fd` unregisters it.
    ///
    /// # Errors
    /// The `epoll_ctl` error (e.g. `fd` already registered).
    pub fn add(&self, fd: BorrowedFd<'_>, interest: Interest, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, interest, token)
    }

    /// Changes the interest of a registered `fd`.
    ///
    /// # Errors
    /// The `epoll_ctl` error (e.g. `fd` not registered).
    pub fn modify(&self, fd: BorrowedFd<'_>, interest: Interest, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, interest, token)
    }

    fn ctl(
        &self,
        op: libc::c_int,
        fd: BorrowedFd<'_>,
        interest: Interest,
        token: u64,
    ) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest.bits(),
            u64: token,
        };
        // SAFETY: both descriptors are open for the call (one owned, one borrowed), and
        // `ev` is a valid epoll_event that outlives it; the kernel only reads it.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Waits up to `timeout_ns` (0: just poll) for events; returns how many there are in
    /// `events`. An interrupted or failed wait reports none, as does the one wait that
    /// discovers `epoll_pwait2` is missing: callers loop on the clock, not on this count.
    pub fn wait(&mut self, events: &mut Events, timeout_ns: u64) -> usize {
        let max = libc::c_int::try_from(events.buf.len()).unwrap_or(libc::c_int::MAX);
        let ptr = events.buf.as_mut_ptr();
        let n: i64 = if self.precise {
            let ts = libc::timespec {
                tv_sec: libc::time_t::try_from(timeout_ns / NS_PER_S).unwrap_or(libc::time_t::MAX),
                // Below 10⁹, so it fits in any c_long.
                tv_nsec: (timeout_ns % NS_PER_S) as libc::c_long,
            };
            // SAFETY: `ptr` points to `max` writable epoll_events that live in `events`
            // across the call, `ts` outlives it, and a null sigmask means "leave the signal
            // mask alone" (its size argument is then ignored).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    ptr,
                    max,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                // Kernels before 5.11: millisecond epoll_wait from now on, rounded down, so
                // the loop polls until the time comes.
                self.precise = false;
                events.len = 0;
                return 0;
            }
            // c_long: i64 on the 64-bit targets Crest runs on.
            r as i64
        } else {
            let ms = libc::c_int::try_from(timeout_ns / NS_PER_MS).unwrap_or(libc::c_int::MAX);
            // SAFETY: as above: `ptr` points to `max` writable epoll_events in `events`.
            i64::from(unsafe { libc::epoll_wait(self.fd.as_raw_fd(), ptr, max, ms) })
        };
        events.len = usize::try_from(n).unwrap_or(0);
        events.len
    }
}

/// Sets the calling thread's timer slack: how late the kernel may fire its timers to
/// batch wake-ups. The default 50 µs would be most of the pacer's error at high rates.
///
/// # Errors
/// The `prctl` error.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(ns).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes integers only and affects only the calling thread.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// CPU time the calling thread has used, in ns (user + system, `CLOCK_THREAD_CPUTIME_ID`);
/// 0 when the clock cannot be read. A shard reads it once per interval.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; the clock id is a constant.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    #[test]
    fn thread_cpu_time_grows_with_work_not_with_sleep() {
        let t0 = thread_cpu_ns();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let slept = thread_cpu_ns() - t0;
        let t1 = thread_cpu_ns();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let busy = thread_cpu_ns() - t1;
        assert!(t0 > 0);
        assert!(slept < 10_000_000, "sleeping used {slept} ns of CPU");
        assert!(busy > slept, "spinning used {busy} ns, sleeping {slept}");
    }

    #[test]
    fn interests_map_to_the_flags_the_loop_relies_on() {
        let read = Interest::Read.bits();
        assert_eq!(read, (libc::EPOLLIN | libc::EPOLLRDHUP) as u32);
        assert_eq!(Interest::ReadWrite.bits(), read | libc::EPOLLOUT as u32);
        assert!(Ready(libc::EPOLLHUP as u32).readable());
        assert!(Ready(libc::EPOLLERR as u32).connect_done());
        assert!(!Ready(libc::EPOLLIN as u32).writable());
        assert!(!Ready(libc::EPOLLIN as u32).connect_done());
    }

    #[test]
    fn a_wait_with_nothing_ready_sleeps_about_its_timeout() {
        let mut ep = Epoll::new().unwrap();
        let mut events = Events::with_capacity(4);
        let t0 = Instant::now();
        let n = ep.wait(&mut events, 3_000_000);
        let slept = t0.elapsed();
        assert_eq!(n, 0);
        assert_eq!(events.iter().count(), 0);
        // Only the lower bound is firm: a busy machine may wake us late.
        assert!(slept >= Duration::from_micros(2_900), "slept {slept:?}");
        assert_eq!(ep.wait(&mut events, 0), 0);
    }

    #[test]
    fn events_carry_the_token_and_follow_the_interest() {
        let mut ep = Epoll::new().unwrap();
        let mut events = Events::with_capacity(4);
        let (mut a, b) = UnixStream::pair().unwrap();
        ep.add(b.as_fd(), Interest::Read, 7).unwrap();
        assert_eq!(ep.wait(&mut events, 0), 0, "nothing to read yet");
        a.write_all(b"x").unwrap();
        assert_eq!(ep.wait(&mut events, 0), 1);
        let (token, ready) = events.iter().next().unwrap();
        assert_eq!(token, 7);
        assert!(ready.readable() && !ready.writable());
        ep.modify(b.as_fd(), Interest::ReadWrite, 9).unwrap();
        ep.wait(&mut events, 0);
        let (token, ready) = events.iter().next().unwrap();
        assert_eq!(token, 9);
        assert!(ready.readable() && ready.writable());
        assert!(ep.add(b.as_fd(), Interest::Read, 1).is_err(), "added twice");
        drop(a);
        ep.modify(b.as_fd(), Interest::Read, 9).unwrap();
        ep.wait(&mut events, 0);
        assert!(
            events.iter().any(|(_, r)| r.readable()),
            "peer gone reads as readable"
        );
    }

    #[test]
    fn timer_slack_can_be_set() {
        set_timer_slack_ns(1_000).unwrap();
    }
}

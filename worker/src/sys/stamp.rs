//! Receive timestamps from the kernel: with `SO_TIMESTAMPNS` on a socket, every `recvmsg`
//! also says when the kernel received the newest segment it returned (`CLOCK_REALTIME`,
//! ns). A shard that reads replies only when it wakes to send anyway (instead of waking
//! for each reply) still times each reply at its arrival, not at the late read.
//!
//! What the stamp means for a read that returns several replies (pipelined, or replies of
//! several requests that arrived while the shard slept): it is the time of the *newest*
//! segment in the read, so every reply in it is timed at or after its own arrival: an upper
//! bound, never early. Replies of one segment arrived together anyway.
//!
//! The stamp is on the wall clock; [`Clocks`] turns it into the monotonic clock the shard
//! measures with, from one pair of clock readings taken at the read (a wall-clock step
//! between a segment's arrival and its read would shift that one stamp: [`Clocks::mono`]
//! never puts a reply after the read, and the class never before its request's write).

use std::io;
use std::os::fd::AsRawFd;

/// Asks the kernel to stamp what this socket receives (`SO_TIMESTAMPNS`).
pub fn enable(sock: &impl AsRawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` is a valid c_int that outlives the call, and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Room for one `SCM_TIMESTAMPNS` control message (a `timespec`), 8-byte aligned.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// One `recvmsg` into `buf`: the bytes read and, when the kernel stamped them, the wall
/// time (ns since the epoch) it received the newest of them.
pub fn recv(sock: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut control = Control([0; 64]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: `msg` points to one iovec over `buf` (writable, `buf.len()` bytes) and to
    // `control` (writable, its length given); both outlive the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: `msg` was filled by the kernel; CMSG_FIRSTHDR/NXTHDR walk only within
    // `msg_controllen` bytes of `control`, which is still alive.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points inside `control` (see above).
        let h = unsafe { &*cmsg };
        if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPNS {
            // SAFETY: an SCM_TIMESTAMPNS message carries one timespec; the data may be
            // unaligned for it, so it is read unaligned.
            let ts: libc::timespec =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
            stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok((n as usize, stamp))
}

/// The wall clock now, ns since the epoch.
#[inline]
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One reading of both clocks, to turn kernel stamps into the shard's clock.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    /// The shard's clock (ns since its start) at the reading.
    pub mono: u64,
    /// The wall clock at the same moment.
    pub real: u64,
}

impl Clocks {
    /// The shard-clock time of a segment the kernel stamped `stamp` (wall ns), never after
    /// this reading (the class keeps it after its request's write).
    #[inline]
    pub fn mono(&self, stamp: u64) -> u64 {
        self.mono.saturating_sub(self.real.saturating_sub(stamp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// A segment that waited 30 ms in the socket before the read is stamped with its
    /// arrival: 30 ms or more before the read, far less than a second.
    #[test]
    fn a_read_is_stamped_with_the_arrival_not_the_read() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        enable(&c).unwrap();
        let mut buf = [0u8; 64];
        // The first socket in the system to ask for stamps turns them on through a kernel
        // work item (`net_enable_timestamp`), which a busy VM may run after the first
        // segment arrived: that segment is unstamped (timed at the read, as documented).
        // A later one must be stamped.
        let mut tries = 0;
        let (read_at, stamp) = loop {
            s.write_all(b"+OK\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(30));
            let read_at = realtime_ns();
            let (n, stamp) = recv(&c, &mut buf).unwrap();
            assert_eq!(&buf[..n], b"+OK\r\n");
            tries += 1;
            if stamp.is_some() || tries == 10 {
                break (read_at, stamp);
            }
        };
        let age = read_at - stamp.expect("the kernel stamps a socket with SO_TIMESTAMPNS");
        assert!((30_000_000..1_000_000_000).contains(&age), "age {age} ns");
        // Nothing to read: WouldBlock, not a stamp.
        let e = recv(&c, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    /// Without SO_TIMESTAMPNS there is no stamp, and the bytes still come.
    #[test]
    fn an_unstamped_socket_reads_without_a_stamp() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"+OK\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let mut buf = [0u8; 64];
        assert_eq!(recv(&c, &mut buf).unwrap(), (5, None));
    }

    #[test]
    fn stamps_map_to_the_shard_clock_never_after_the_read() {
        let c = Clocks {
            mono: 10_000,
            real: 1_000_000,
        };
        assert_eq!(c.mono(999_000), 9_000, "1 µs before the reading");
        assert_eq!(
            c.mono(1_500_000),
            10_000,
            "a stamp after the reading: the reading"
        );
        assert_eq!(c.mono(0), 0, "older than the shard's clock: its start");
    }
}

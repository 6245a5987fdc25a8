//! The engine's contact with the operating system below what `std` and socket2 offer:
//! an epoll instance with a nanosecond wait, the thread's timer slack, the kernel's receive
//! timestamps, how much of its core a thread got, and short names for errno values. Every
//! `unsafe` block of the engine lives in [`epoll`], [`stamp`], [`sched`] and [`rlimit`] (the
//! open-file limit).

pub mod epoll;
pub mod rlimit;
pub mod sched;
pub mod stamp;

use std::io;

/// A short, stable name for an I/O error. Errors are counted by kind, so the name must not
/// carry free text (an address, a message that varies by libc): the common network errors
/// have short names, any other errno is its symbol and a fixed description, e.g.
/// `EMFILE (too many open files)` (issue #8: `errno_24` said nothing).
pub fn error_kind(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "refused".into(),
        Some(libc::ECONNRESET) => "reset".into(),
        Some(libc::EPIPE) => "broken_pipe".into(),
        Some(libc::ETIMEDOUT) => "timed_out".into(),
        Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => "unreachable".into(),
        Some(code) => errno_name(code),
        None => e.kind().to_string(),
    }
}

/// `EMFILE (too many open files)` for the errnos a load generator meets; `errno 123` for
/// the rest (the number is bounded, so the kinds are too).
fn errno_name(code: i32) -> String {
    let (name, what) = match code {
        libc::EMFILE => ("EMFILE", "too many open files"),
        libc::ENFILE => ("ENFILE", "too many open files in the system"),
        libc::ENOBUFS => ("ENOBUFS", "no buffer space"),
        libc::ENOMEM => ("ENOMEM", "out of memory"),
        libc::EADDRNOTAVAIL => ("EADDRNOTAVAIL", "no free local port or address"),
        libc::EADDRINUSE => ("EADDRINUSE", "address in use"),
        libc::EACCES => ("EACCES", "permission denied"),
        libc::EPERM => ("EPERM", "operation not permitted"),
        libc::ECONNABORTED => ("ECONNABORTED", "connection aborted"),
        libc::ENOTCONN => ("ENOTCONN", "not connected"),
        libc::ENETDOWN => ("ENETDOWN", "network down"),
        libc::EHOSTDOWN => ("EHOSTDOWN", "host down"),
        libc::EBADF => ("EBADF", "bad file descriptor"),
        libc::EINVAL => ("EINVAL", "invalid argument"),
        libc::EAGAIN => ("EAGAIN", "try again"),
        libc::EINPROGRESS => ("EINPROGRESS", "operation in progress"),
        libc::EPROTO => ("EPROTO", "protocol error"),
        _ => return format!("errno {code}"),
    };
    format!("{name} ({what})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_are_short_names_not_messages() {
        let e = |code| io::Error::from_raw_os_error(code);
        assert_eq!(error_kind(&e(libc::ECONNREFUSED)), "refused");
        assert_eq!(error_kind(&e(libc::ECONNRESET)), "reset");
        assert_eq!(error_kind(&e(libc::EPIPE)), "broken_pipe");
        assert_eq!(error_kind(&e(libc::ENETUNREACH)), "unreachable");
        assert_eq!(error_kind(&e(libc::EMFILE)), "EMFILE (too many open files)");
        assert_eq!(error_kind(&e(libc::EBADF)), "EBADF (bad file descriptor)");
        assert_eq!(
            error_kind(&e(libc::EXDEV)),
            format!("errno {}", libc::EXDEV)
        );
        assert_eq!(
            error_kind(&io::Error::from(io::ErrorKind::TimedOut)),
            io::ErrorKind::TimedOut.to_string()
        );
    }
}

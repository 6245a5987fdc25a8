//! The engine's contact with the operating system below what `std` and socket2 offer:
//! an epoll instance with a nanosecond wait, the thread's timer slack, and short names
//! for errno values. Every `unsafe` block of the engine lives in [`epoll`] and [`rlimit`] (the
//! open-file limit).

pub mod epoll;
pub mod rlimit;

use std::io;

/// A short, stable name for an I/O error. Errors are counted by kind, so the name must not
/// carry free text (an address, a message that varies by libc).
pub fn error_kind(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "refused".into(),
        Some(libc::ECONNRESET) => "reset".into(),
        Some(libc::EPIPE) => "broken_pipe".into(),
        Some(libc::ETIMEDOUT) => "timed_out".into(),
        Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => "unreachable".into(),
        Some(code) => format!("errno_{code}"),
        None => e.kind().to_string(),
    }
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
        assert_eq!(
            error_kind(&e(libc::EBADF)),
            format!("errno_{}", libc::EBADF)
        );
        assert_eq!(
            error_kind(&io::Error::from(io::ErrorKind::TimedOut)),
            io::ErrorKind::TimedOut.to_string()
        );
    }
}

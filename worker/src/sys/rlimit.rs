//! The process's open-file limit (`RLIMIT_NOFILE`): every connection is one descriptor,
//! and a run that opens more than the limit allows would fail connects one by one
//! (`EMFILE`) instead of refusing up front.

use std::io;

/// The soft (enforced) and hard (ceiling) open-file limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoFile {
    /// What `open`/`socket` are held to now.
    pub soft: u64,
    /// What an unprivileged process may raise the soft limit to.
    pub hard: u64,
}

/// The current limits.
///
/// # Errors
/// The OS error when `getrlimit` fails.
pub fn nofile() -> io::Result<NoFile> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable `rlimit` on this stack frame for the whole call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(NoFile {
        soft: rl.rlim_cur,
        hard: rl.rlim_max,
    })
}

/// Makes room for `need` descriptors: raises the soft limit toward the hard one when it is
/// lower (never lowers it). Returns the limits in force afterwards; the caller compares.
///
/// # Errors
/// The OS error when the limits cannot be read or set.
pub fn ensure_nofile(need: u64) -> io::Result<NoFile> {
    let now = nofile()?;
    if now.soft >= need || now.soft >= now.hard {
        return Ok(now);
    }
    let rl = libc::rlimit {
        rlim_cur: need.min(now.hard),
        rlim_max: now.hard,
    };
    // SAFETY: `rl` is a valid `rlimit` that lives for the whole call; setrlimit only reads it.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    nofile()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_toward_the_hard_one_and_never_past_it() {
        let before = nofile().unwrap();
        assert!(before.soft <= before.hard);
        let after = ensure_nofile(before.soft + 1).unwrap();
        assert!(after.soft >= before.soft.min(before.hard));
        assert_eq!(after.hard, before.hard);
        let capped = ensure_nofile(u64::MAX).unwrap();
        assert!(capped.soft <= capped.hard);
    }
}

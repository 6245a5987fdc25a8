//! Which cores the shards run on: `--cpus LIST` or every core the process may use
//! (its affinity mask, which honours a container's cpuset), capped by `--threads`.

use core_affinity::CoreId;

/// A bad `--cpus` list or thread count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpusError {
    /// The list does not parse.
    #[error("bad --cpus {0:?}; expected a list like 0-3,6,8-9")]
    Syntax(String),
    /// A listed core is not one this process may run on.
    #[error("--cpus names core {core}, but this process may only use cores {allowed}")]
    NotAllowed {
        /// The core asked for.
        core: usize,
        /// The cores available, as a list.
        allowed: String,
    },
    /// `--threads 0`.
    #[error("--threads must be ≥ 1")]
    ZeroThreads,
}

/// Parses a list like `0-3,6,8-9` into core numbers, in order, without duplicates.
///
/// # Errors
/// [`CpusError::Syntax`] when the text is not such a list.
pub fn parse_list(s: &str) -> Result<Vec<usize>, CpusError> {
    let bad = || CpusError::Syntax(s.to_string());
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: usize = a.parse().map_err(|_| bad())?;
        let b: usize = b.parse().map_err(|_| bad())?;
        if b < a || b - a > 4096 {
            return Err(bad());
        }
        for c in a..=b {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// Cores this process may run on (its affinity mask), in order.
pub fn allowed() -> Vec<usize> {
    let mut v: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    v.sort_unstable();
    if v.is_empty() {
        v.push(0);
    }
    v
}

/// Picks the shard cores: the `--cpus` list (checked against what is allowed) or all
/// allowed cores, then at most `threads` of them.
///
/// # Errors
/// [`CpusError`] on a bad list, a core outside the affinity mask, or zero threads.
pub fn pick(cpus: Option<&str>, threads: Option<usize>) -> Result<Vec<CoreId>, CpusError> {
    let allowed = allowed();
    let mut chosen = match cpus {
        Some(list) => {
            let want = parse_list(list)?;
            if let Some(&core) = want.iter().find(|c| !allowed.contains(c)) {
                return Err(CpusError::NotAllowed {
                    core,
                    allowed: format_list(&allowed),
                });
            }
            want
        }
        None => allowed,
    };
    if let Some(t) = threads {
        if t == 0 {
            return Err(CpusError::ZeroThreads);
        }
        chosen.truncate(t);
    }
    Ok(chosen.into_iter().map(|id| CoreId { id }).collect())
}

/// The allowed cores no shard runs on: where the worker's own threads (its control
/// session: decoding plans and a replay's chunks, shipping intervals) belong, so they never
/// take a shard's core from it. Empty when every allowed core has a shard.
pub fn spare(shards: &[CoreId]) -> Vec<usize> {
    allowed()
        .into_iter()
        .filter(|c| !shards.iter().any(|s| s.id == *c))
        .collect()
}

/// Restricts the calling thread to `cores` (nothing when empty). A shard thread started
/// from it still pins itself to its own core.
///
/// # Errors
/// The system's, when the mask cannot be set.
pub fn confine_current(cores: &[usize]) -> std::io::Result<()> {
    if cores.is_empty() {
        return Ok(());
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it for cores
    // below CPU_SETSIZE (others are skipped), and sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Formats cores as a compact list (`0-3,6`).
pub fn format_list(cores: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cores[i].to_string()
        } else {
            format!("{}-{}", cores[i], cores[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_rejects_garbage() {
        assert_eq!(parse_list("0-3,6, 8-9").unwrap(), vec![0, 1, 2, 3, 6, 8, 9]);
        assert_eq!(parse_list("2").unwrap(), vec![2]);
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("a").is_err());
        assert!(parse_list("").is_err());
        assert_eq!(
            format_list(&[0, 1, 2, 3, 6, 8, 9]),
            "0-3,6,8,9".replace("8,9", "8-9")
        );
    }

    /// The spare cores are the allowed ones without a shard, and a thread confined to
    /// them runs only there.
    #[test]
    fn the_control_threads_go_to_the_cores_without_a_shard() {
        let all = allowed();
        let first = [CoreId { id: all[0] }];
        let spare = spare(&first);
        assert_eq!(spare, all[1..]);
        let every: Vec<CoreId> = all.iter().map(|&id| CoreId { id }).collect();
        assert!(super::spare(&every).is_empty());
        std::thread::spawn(move || {
            confine_current(&[all[0]]).unwrap();
            assert_eq!(allowed(), [all[0]]);
            // Widening again is allowed (a shard started from here pins to its own).
            confine_current(&all).unwrap();
            assert_eq!(allowed(), all);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_cap_and_affinity_check() {
        let all = allowed();
        assert_eq!(pick(None, Some(1)).unwrap().len(), 1);
        assert_eq!(pick(None, None).unwrap().len(), all.len());
        assert!(matches!(
            pick(Some("4000"), None),
            Err(CpusError::NotAllowed { .. })
        ));
        assert_eq!(pick(None, Some(0)), Err(CpusError::ZeroThreads));
    }
}

//! Loopback ports for servers a test starts.
//!
//! A port is handed out from below Linux's ephemeral range (32768–60999, where the kernel
//! picks the source port of every outgoing connection and `bind(:0)`'s port): between the
//! check here and the server's own bind, no connection any test opens can take it. Each
//! test process walks its own stretch of [`FIRST`, [`FIRST`] + [`SPAN`]) from an offset
//! set by its pid, one port at a time (an atomic counter), so tests running side by side
//! in one process never get the same port, and two processes rarely start in one place.
//! A port something already listens on is passed over.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out.
pub const FIRST: u32 = 12_000;
/// How many ports are handed out, in turn, from [`FIRST`] (up to 31999).
pub const SPAN: u32 = 20_000;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A port nobody listens on right now, below the ephemeral range, never handed out twice
/// in a row to this process (it comes round again after [`SPAN`] ports).
pub fn free_port() -> u16 {
    let start = (std::process::id() % 100) * (SPAN / 100);
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start + n) % SPAN;
        // In range by construction: FIRST + SPAN < 65536.
        let port = port as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Every port of the span is taken: the kernel's choice, as a last resort.
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_distinct_across_threads() {
        let mut all: Vec<u16> = std::thread::scope(|s| {
            let hands: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..50).map(|_| free_port()).collect::<Vec<_>>()))
                .collect();
            hands.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert!(
            all.iter().all(|&p| (12_000..32_000).contains(&p)),
            "{all:?}"
        );
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a port was handed out twice");
    }
}

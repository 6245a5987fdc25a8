//! The encoder's hot path allocates nothing per request: a counting global allocator
//! around 10,000 encodes of SET with each value content (fixed, random,
//! compressible), into a buffer that already has room, sees no allocation.

#![allow(clippy::unwrap_used)]

use crest_model::rng::Rng;
use crest_model::shapes::{Content, KeyDist, KeySpace, Ttl, ValueSizes};
use crest_model::workload::{CmdDef, Cursor, Workload};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn encoding_a_request_allocates_nothing_whatever_the_value_content_or_ttl() {
    for content in [Content::Fixed, Content::Random, Content::Compressible(3.0)] {
        let wl = Workload::new(
            vec![
                (CmdDef::parse("SET", 1, Some(60), 1).unwrap(), 1),
                (CmdDef::parse("GET", 1, None, 1).unwrap(), 1),
            ],
            KeySpace::new(100_000, "key:", KeyDist::Uniform).unwrap(),
            ValueSizes::Weighted(vec![(100, 3), (4096, 1)]),
            1,
            false,
            Some(60),
            1,
        )
        .unwrap()
        .with_content(content, 5)
        // A TTL table drawn per SET (0: no EX) costs nothing either.
        .with_ttl(Ttl::Table(vec![(0, 1), (60, 2), (86_400, 1)]))
        .unwrap();
        let mut rng = Rng::new(1);
        let mut cur = Cursor::default();
        let mut out = Vec::with_capacity(64 << 20);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for i in 0..10_000 {
            wl.encode(i % 2, &mut rng, &mut cur, &mut out);
        }
        let after = ALLOCATIONS.load(Ordering::Relaxed);
        assert!(out.len() > 10_000 * 20);
        assert_eq!(after - before, 0, "{content}: allocations while encoding");
    }
}

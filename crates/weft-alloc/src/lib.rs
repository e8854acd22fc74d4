//! The global allocator of weft's binaries (`weft`, the benchmark and profiling examples):
//! mimalloc, entered through `mi_malloc` / `mi_realloc` whenever the layout's alignment is
//! one mimalloc gives every block of that size anyway.
//!
//! Why not `mimalloc::MiMalloc` (the `mimalloc` crate, 0.1.52): it sends every allocation
//! through `mi_malloc_aligned`, whose path in mimalloc v3 (`mi_theap_malloc_zero_aligned_at`)
//! costs several times the plain fast path; a weft step allocates a few small blocks, so on
//! the W2 fan-out workload that entry is ~8% of all instructions (callgrind).
//!
//! The rule for skipping the aligned path is the one `std`'s system allocator uses: the
//! alignment is at most the allocator's minimum alignment (16 bytes on 64-bit targets:
//! `MI_MAX_ALIGN_SIZE`) and at most the size (a block of 8 bytes is only 8-aligned).
//!
//! Transparent huge pages are off: mimalloc is built without its `madvise(MADV_HUGEPAGE)`
//! on new arenas (the crate's `no_thp` feature; the system's THP mode here is `madvise`),
//! and [`disable_transparent_huge_pages`], called first thing in `main` by the same
//! binaries, covers systems whose mode is `always`. With huge pages, every first touch of a
//! 2 MiB region zeroes all of it and keeps it resident: `weft bench chain fanout many`, three
//! alternating runs, peak RSS 23.8–24.2 MiB with huge pages against 16.4–17.2 MiB without,
//! throughput within noise. A
//! server's tail latency is also spared huge-page compaction stalls (why Redis and most
//! databases ask for THP off).

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as ffi;

/// Alignment every mimalloc block of at least this size has (`MI_MAX_ALIGN_SIZE`).
const MIN_ALIGN: usize = 16;

/// weft's global allocator: `#[global_allocator] static A: weft_alloc::Alloc = weft_alloc::Alloc;`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Alloc;

/// Whether `mi_malloc(size)` already returns memory aligned for `layout`.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

// SAFETY: every pointer handed out comes from mimalloc with at least the layout's size and
// alignment (checked by `plain` or asked of the aligned entry points), and is given back
// to mimalloc's `mi_free` / `mi_realloc*`, which accept blocks from either path.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain C calls; a null return is the allocation failure `GlobalAlloc` expects.
        unsafe {
            if plain(layout.align(), layout.size()) {
                ffi::mi_malloc(layout.size()).cast()
            } else {
                ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                ffi::mi_zalloc(layout.size()).cast()
            } else {
                ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract).
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (the caller's contract); the
        // new block keeps the alignment by the same rule as `alloc`.
        unsafe {
            if plain(layout.align(), new_size) {
                ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`; the
/// kernel checks it on every page fault, so memory touched from now on gets 4 KiB pages even
/// where mimalloc asked for huge ones). Returns whether the kernel accepted it; a kernel
/// without the call (or another OS) leaves the process as it was.
pub fn disable_transparent_huge_pages() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and touches no memory of
        // ours.
        #[allow(unsafe_code)]
        let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `n` bytes at `p` with a pattern.
    unsafe fn fill(p: *mut u8, n: usize) {
        for i in 0..n {
            // SAFETY: the caller owns `n` bytes at `p`.
            unsafe { *p.add(i) = (i % 251) as u8 }
        }
    }

    /// Whether the first `n` bytes at `p` still hold the pattern.
    unsafe fn holds(p: *const u8, n: usize) -> bool {
        // SAFETY: the caller owns `n` bytes at `p`.
        (0..n).all(|i| unsafe { *p.add(i) } == (i % 251) as u8)
    }

    /// The flag is set (and reads back) on Linux.
    #[test]
    #[cfg(target_os = "linux")]
    fn huge_pages_can_be_turned_off() {
        assert!(disable_transparent_huge_pages());
        // SAFETY: integer arguments only.
        #[allow(unsafe_code)]
        let now = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(now, 1);
    }

    /// Every size and alignment on either side of the rule comes back aligned and
    /// writable, zeroed when asked, and keeps its contents when it grows or shrinks.
    #[test]
    fn blocks_are_aligned_and_keep_their_contents() {
        let a = Alloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 3, 8, 15, 16, 24, 48, 100, 4096, 70_000] {
                let layout = Layout::from_size_align(size, align).expect("layout");
                for new_size in [size * 3 + 1, size.div_ceil(2)] {
                    // SAFETY: non-zero sizes; every block is freed once, with its layout.
                    unsafe {
                        let z = a.alloc_zeroed(layout);
                        assert!(!z.is_null());
                        assert_eq!(z as usize % align, 0, "zeroed {size} align {align}");
                        assert!((0..size).all(|i| *z.add(i) == 0));
                        a.dealloc(z, layout);

                        let p = a.alloc(layout);
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0, "size {size} align {align}");
                        fill(p, size);
                        let q = a.realloc(p, layout, new_size);
                        assert!(!q.is_null());
                        assert_eq!(q as usize % align, 0, "{size} -> {new_size} align {align}");
                        assert!(holds(q, size.min(new_size)));
                        a.dealloc(q, Layout::from_size_align(new_size, align).expect("layout"));
                    }
                }
            }
        }
    }
}

//! The flowsim binary's allocator: mimalloc, with a small per-thread cache of freed small blocks in front of it.
//!
//! A simulation holds a thousand runs in flight, each with its futures, records and JSON trees, so most heap blocks
//! live long enough to leave the CPU's caches. mimalloc keeps its free lists inside the free blocks and hands a
//! freed block out again only after the rest of its page's free list: allocating reads the block's link (a cache
//! miss when the block was freed a while ago: the largest single cost in a native profile of a simulation) and
//! freeing writes one into it (a store to a line that is often cold). This cache keeps freed blocks' addresses in
//! per-thread stacks, one per size class (16 bytes apart, up to 1 KiB), so that freeing touches no block, the most
//! recently freed (and warmest) block of a class is handed out first, and the block that will be handed out next is
//! prefetched.
//!
//! Every block in a class is a mimalloc block of at least the class's largest size: the cache asks mimalloc for that
//! size, so any block of a class can serve any request of that class. A class keeps at most [`DEPTH`] blocks (at
//! most 17 MiB over all classes, per thread); a free beyond that, a request over 1 KiB or aligned beyond 16 bytes,
//! and everything a thread frees while it exits go to mimalloc. Allocation addresses never reach behaviour or output
//! (the simulation uses ordered maps only), so the allocator changes speed, not results.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

/// Classes 16 bytes apart, up to this size. Classes 128 bytes apart up to 2 KiB (a drive's task is about 1.1 KiB)
/// measured no fewer cache misses.
const SMALL_MAX: usize = 1024;
const CLASSES: usize = SMALL_MAX / 16;
/// Blocks kept per class; a free beyond this goes to mimalloc. 64 kept a run's end (dozens of frees in a burst)
/// from the stacks and left half of the allocator's misses; 2,048 measured the same as 512.
pub const DEPTH: usize = 512;
/// mimalloc's blocks of 16 bytes or more are aligned to 16.
const MAX_ALIGN: usize = 16;

/// mimalloc's option `purge_delay` (`mi_option_purge_delay` in the `mimalloc.h` of mimalloc 3, which libmimalloc-sys
/// 0.1 builds by default but names only for mimalloc 2). A test checks that this is the option and that it still has
/// mimalloc 3's default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The environment variable through which mimalloc reads `purge_delay`; when it is set, its value stands.
pub const PURGE_DELAY_VARIABLE: &str = "MIMALLOC_PURGE_DELAY";

/// Tells mimalloc to keep the memory the process frees instead of giving it back to the OS (`purge_delay` = -1),
/// unless [`PURGE_DELAY_VARIABLE`] is set. Call it once, first thing in `main`.
///
/// By default mimalloc gives freed pages back a second or so after they empty (`madvise(MADV_DONTNEED)`), and the next
/// allocation there faults them in again, zeroed by the kernel. A simulation frees a run's state as the run ends and
/// allocates the next run's at once, so with the default about 4,900 pages fault in again during a 300 k-step run
/// (212 without purging), and where transparent huge pages are on (`madvise`, as on the machines here) each fault
/// zeroes 2 MiB: 5–9 % of a native profile, as system time. Keeping them costs resident memory only up to the peak
/// the process reaches anyway (docs/speed.md, stop 34).
pub fn keep_freed_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if std::env::var_os(PURGE_DELAY_VARIABLE).is_some() {
        return;
    }
    ONCE.call_once(|| {
        // SAFETY: sets one of mimalloc's options, a machine word that mimalloc reads whenever it considers purging.
        // Its setters are not synchronised: the `Once` keeps calls of this function from racing each other, and
        // `main` calls it before starting any thread, so no read of mimalloc's races it either (the same pattern as
        // mimalloc's own lazy initialisation of its options from whichever thread reads one first).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    });
}

/// Gives the bundled SQLite (the ledger's) mimalloc for its memory instead of the C library's `malloc`. Call it in
/// `main`, before any SQLite connection is opened: SQLite takes an allocator only before it starts, and this returns
/// SQLite's error code (`SQLITE_MISUSE`) when it has started already.
///
/// A simulation with the SQLite ledger keeps its database in memory (`:memory:`, tens of MiB of pages that each
/// statement walks). glibc's heap does not get transparent huge pages where they are `madvise`-only, as on the machines
/// here, and mimalloc's arenas do: fewer TLB misses per statement (docs/speed.md, stop 34). Nothing in SQLite's
/// behaviour depends on its allocations' addresses.
pub fn sqlite_on_mimalloc() -> Result<(), i32> {
    use rusqlite::ffi;
    use std::ffi::{c_int, c_void};

    unsafe extern "C" fn malloc(size: c_int) -> *mut c_void {
        // SAFETY: SQLite asks for a positive size; the block is SQLite's until it frees it here.
        unsafe { libmimalloc_sys::mi_malloc(size.max(0) as usize) }
    }
    unsafe extern "C" fn free(block: *mut c_void) {
        // SAFETY: SQLite frees only blocks `malloc` or `realloc` gave it (or null).
        unsafe { libmimalloc_sys::mi_free(block) }
    }
    unsafe extern "C" fn realloc(block: *mut c_void, size: c_int) -> *mut c_void {
        // SAFETY: as for `free`; mimalloc keeps the contents up to the smaller size, as `realloc` does.
        unsafe { libmimalloc_sys::mi_realloc(block, size.max(0) as usize) }
    }
    unsafe extern "C" fn size(block: *mut c_void) -> c_int {
        // SAFETY: a live block of this allocator, or null (mimalloc answers 0 for null).
        unsafe { libmimalloc_sys::mi_usable_size(block) }.min(c_int::MAX as usize) as c_int
    }
    unsafe extern "C" fn roundup(size: c_int) -> c_int {
        // SQLite's own allocator rounds to 8 bytes too (it never asks near `c_int::MAX`; saturating keeps a panic,
        // which cannot unwind out of an `extern "C"` function, out of it anyway).
        size.saturating_add(7) & !7
    }
    unsafe extern "C" fn init(_: *mut c_void) -> c_int {
        ffi::SQLITE_OK
    }
    unsafe extern "C" fn shutdown(_: *mut c_void) {}

    let methods = ffi::sqlite3_mem_methods {
        xMalloc: Some(malloc),
        xFree: Some(free),
        xRealloc: Some(realloc),
        xSize: Some(size),
        xRoundup: Some(roundup),
        xInit: Some(init),
        xShutdown: Some(shutdown),
        pAppData: std::ptr::null_mut(),
    };
    // SAFETY: `SQLITE_CONFIG_MALLOC` takes a pointer to a `sqlite3_mem_methods`, which SQLite copies before it returns;
    // every method is sound for the calls SQLite makes. SQLite refuses it (SQLITE_MISUSE) once it has started.
    let code = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods as *const ffi::sqlite3_mem_methods) };
    if code == ffi::SQLITE_OK { Ok(()) } else { Err(code) }
}

/// The allocator; install it with `#[global_allocator]`.
#[derive(Debug)]
pub struct Allocator;

/// A thread's stacks of cached blocks, one per class.
struct Stacks {
    len: [u32; CLASSES],
    slots: [[*mut u8; DEPTH]; CLASSES],
}

/// A thread's [`Stacks`], allocated from mimalloc at the thread's first small allocation (about 256 KiB: held in the
/// thread-local block itself they would come out of every thread's stack), and given back with every cached block
/// when the thread exits.
struct Cache(Cell<*mut Stacks>);

impl Cache {
    /// This thread's stacks (null if they cannot be allocated). They are this thread's alone: a borrow of them must
    /// end before the next call.
    #[inline(always)]
    fn stacks(&self) -> *mut Stacks {
        let mut stacks = self.0.get();
        if stacks.is_null() {
            // SAFETY: a plain zeroed allocation; all zeros is a valid `Stacks` (empty stacks, null slots).
            stacks = unsafe { libmimalloc_sys::mi_zalloc(std::mem::size_of::<Stacks>()) }.cast();
            self.0.set(stacks);
        }
        stacks
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let stacks = self.0.replace(std::ptr::null_mut());
        if stacks.is_null() {
            return;
        }
        // SAFETY: the thread's stacks, no longer reachable through the cache.
        let held = unsafe { &*stacks };
        for class in 0..CLASSES {
            for &block in &held.slots[class][..held.len[class] as usize] {
                // SAFETY: every cached block came from mimalloc and is owned by the cache alone.
                unsafe { libmimalloc_sys::mi_free(block.cast()) };
            }
        }
        // SAFETY: allocated by `Cache::stacks` with mimalloc.
        unsafe { libmimalloc_sys::mi_free(stacks.cast()) };
    }
}

thread_local! {
    static CACHE: Cache = const { Cache(Cell::new(std::ptr::null_mut())) };
}

/// Runs `f` on this thread's stacks; `None` when the thread has none (it is exiting, or they cannot be allocated).
#[inline(always)]
fn with_stacks<R>(f: impl FnOnce(&mut Stacks) -> R) -> Option<R> {
    CACHE
        .try_with(|cache| {
            // SAFETY: this thread's stacks, borrowed only for `f`, which allocates nothing (no call re-enters here).
            unsafe { cache.stacks().as_mut() }.map(f)
        })
        .ok()
        .flatten()
}

/// The class of a layout the cache serves, or `None`.
#[inline(always)]
fn class_of(layout: &Layout) -> Option<usize> {
    let size = layout.size();
    if size == 0 || size > SMALL_MAX || layout.align() > MAX_ALIGN {
        return None;
    }
    Some((size - 1) / 16)
}

/// The largest size of a class: the size of every block in it.
#[inline(always)]
fn class_size(class: usize) -> usize {
    (class + 1) * 16
}

#[inline(always)]
fn prefetch(block: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no memory.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(block as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = block;
}

// SAFETY: every block handed out is a live mimalloc block of at least the layout's size and alignment, owned by the
// caller alone until it is handed back; a cached block is owned by its thread's cache alone.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(&layout) else {
            // SAFETY: as the caller promised.
            return unsafe { mimalloc::MiMalloc.alloc(layout) };
        };
        let cached = with_stacks(|stacks| {
            let len = stacks.len[class] as usize;
            if len == 0 {
                return None;
            }
            let block = stacks.slots[class][len - 1];
            stacks.len[class] = (len - 1) as u32;
            if len >= 2 {
                prefetch(stacks.slots[class][len - 2]);
            }
            Some(block)
        });
        if let Some(block) = cached.flatten() {
            return block;
        }
        // SAFETY: a non-zero size.
        unsafe { libmimalloc_sys::mi_malloc(class_size(class)).cast() }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(class) = class_of(&layout) else {
            // SAFETY: as the caller promised.
            return unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        };
        let kept = with_stacks(|stacks| {
            let len = stacks.len[class] as usize;
            if len == DEPTH {
                return false;
            }
            stacks.slots[class][len] = ptr;
            stacks.len[class] = (len + 1) as u32;
            true
        });
        if kept != Some(true) {
            // SAFETY: a block from mimalloc, given back by its owner.
            unsafe { libmimalloc_sys::mi_free(ptr.cast()) };
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class_of(&layout) {
            // SAFETY: a non-zero size.
            Some(class) => unsafe { libmimalloc_sys::mi_zalloc(class_size(class)).cast() },
            // SAFETY: as the caller promised.
            None => unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) },
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align(new_size, layout.align()).expect("a valid layout, as promised");
        match (class_of(&layout), class_of(&new_layout)) {
            // The block already holds the whole class.
            (Some(old), Some(new)) if old == new => ptr,
            // SAFETY: a block from mimalloc (any class or none), resized to its new class's largest size.
            (_, Some(new)) => unsafe { libmimalloc_sys::mi_realloc(ptr.cast(), class_size(new)).cast() },
            // SAFETY: as the caller promised; mimalloc's realloc takes any of its blocks.
            (_, None) => unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    fn usable(block: *mut u8) -> usize {
        // SAFETY: a live mimalloc block.
        unsafe { libmimalloc_sys::mi_usable_size(block.cast()) }
    }

    #[test]
    fn keep_freed_memory_turns_off_mimallocs_purging_unless_the_environment_sets_it() {
        let get = |option| {
            // SAFETY: reads one of mimalloc's options.
            unsafe { libmimalloc_sys::mi_option_get(option) }
        };
        if std::env::var_os(PURGE_DELAY_VARIABLE).is_some() {
            keep_freed_memory();
            assert_ne!(get(MI_OPTION_PURGE_DELAY), -1, "the environment's value stands");
            return;
        }
        // The option is mimalloc 3's `purge_delay`: its default (1,000 ms), between `deprecated_eager_commit_delay`
        // (1) and `use_numa_nodes` (0), with `os_tag` (100) and `max_errors` (32) after them. A mimalloc whose
        // options are numbered otherwise fails here rather than having some other option set.
        assert_eq!(
            [-1, 0, 1, 3, 4].map(|offset| get(MI_OPTION_PURGE_DELAY + offset)),
            [1, 1000, 0, 100, 32],
            "mimalloc's options are not numbered as MI_OPTION_PURGE_DELAY assumes"
        );
        keep_freed_memory();
        assert_eq!(get(MI_OPTION_PURGE_DELAY), -1);
    }

    #[test]
    fn sqlite_takes_mimalloc_before_it_starts_and_refuses_it_after() {
        // No other test of this crate uses SQLite, so it has not started in this process (nextest runs each test in
        // a process of its own anyway).
        sqlite_on_mimalloc().expect("SQLite has not started in this test");
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k BLOB PRIMARY KEY, v TEXT); INSERT INTO t VALUES (x'01', 'one');")
            .unwrap();
        let v: String = conn.query_row("SELECT v FROM t", [], |row| row.get(0)).unwrap();
        assert_eq!(v, "one");
        // SAFETY: a block from SQLite's allocator, read for its size and freed through SQLite.
        unsafe {
            let block = rusqlite::ffi::sqlite3_malloc(100);
            assert!(!block.is_null());
            assert!(libmimalloc_sys::mi_is_in_heap_region(block), "SQLite's blocks come from mimalloc");
            assert!(rusqlite::ffi::sqlite3_msize(block) >= 100);
            rusqlite::ffi::sqlite3_free(block);
        }
        assert_eq!(sqlite_on_mimalloc(), Err(rusqlite::ffi::SQLITE_MISUSE), "SQLite has started");
    }

    #[test]
    fn every_small_size_gets_a_block_holding_its_whole_class_and_aligned_to_16() {
        for size in 1..=SMALL_MAX {
            let l = layout(size);
            // SAFETY: a non-zero size; the block is written within its layout and given back with it.
            unsafe {
                let a = Allocator.alloc(l);
                assert!(!a.is_null());
                assert_eq!(a as usize % 16, 0, "size {size}");
                assert!(usable(a) >= class_size(class_of(&l).unwrap()), "size {size}");
                a.write_bytes(0xAB, size);
                Allocator.dealloc(a, l);
            }
        }
    }

    #[test]
    fn classes_cover_every_small_size_once_and_in_order() {
        let mut last = 0;
        for size in 1..=SMALL_MAX {
            let class = class_of(&layout(size)).unwrap();
            assert!(class == last || class == last + 1, "size {size}");
            assert!(size <= class_size(class) && (class == 0 || size > class_size(class - 1)), "size {size}");
            last = class;
        }
        assert_eq!(last, CLASSES - 1);
        assert_eq!(class_of(&layout(SMALL_MAX + 1)), None);
    }

    #[test]
    fn the_last_block_freed_in_a_class_is_the_first_handed_out() {
        let l = layout(40);
        // SAFETY: blocks of `l`, given back with it.
        unsafe {
            let a = Allocator.alloc(l);
            let b = Allocator.alloc(l);
            Allocator.dealloc(a, l);
            Allocator.dealloc(b, l);
            // 33..=48 bytes is the same class as 40.
            let c = Allocator.alloc(layout(48));
            assert_eq!(c, b);
            let d = Allocator.alloc(layout(33));
            assert_eq!(d, a);
            Allocator.dealloc(c, layout(48));
            Allocator.dealloc(d, layout(33));
        }
    }

    #[test]
    fn a_full_class_gives_further_frees_to_mimalloc_and_every_block_stays_distinct() {
        let l = layout(100);
        let count = DEPTH * 3;
        // SAFETY: blocks of `l`, given back with it.
        unsafe {
            let blocks: Vec<*mut u8> = (0..count).map(|_| Allocator.alloc(l)).collect();
            for (i, &b) in blocks.iter().enumerate() {
                b.cast::<u64>().write(i as u64);
            }
            for (i, &b) in blocks.iter().enumerate() {
                assert_eq!(b.cast::<u64>().read(), i as u64);
            }
            blocks.iter().for_each(|&b| Allocator.dealloc(b, l));
            let again: std::collections::BTreeSet<usize> = (0..count).map(|_| Allocator.alloc(l) as usize).collect();
            assert_eq!(again.len(), count);
            again.iter().for_each(|&b| Allocator.dealloc(b as *mut u8, l));
        }
    }

    #[test]
    fn realloc_keeps_the_contents_across_classes_and_the_small_limit() {
        let sizes = [1, 16, 17, 40, 48, 200, 1024, 1025, 1100, 2048, 2049, 5000, 700, 1500, 33, 8, 3000, 12];
        // SAFETY: each block is used within its current layout and given back with it.
        unsafe {
            let mut size = 4;
            let mut block = Allocator.alloc(layout(size));
            block.write_bytes(7, size);
            for &new_size in &sizes {
                block = Allocator.realloc(block, layout(size), new_size);
                assert!(!block.is_null());
                let kept = size.min(new_size);
                assert!((0..kept).all(|i| *block.add(i) == 7), "{size} -> {new_size}");
                block.write_bytes(7, new_size);
                if new_size <= SMALL_MAX {
                    assert!(usable(block) >= class_size(class_of(&layout(new_size)).unwrap()));
                }
                size = new_size;
            }
            Allocator.dealloc(block, layout(size));
        }
    }

    #[test]
    fn zeroed_blocks_are_zero_even_after_dirty_blocks_were_cached() {
        // SAFETY: blocks used within their layouts and given back with them.
        unsafe {
            for size in [8, 64, 500, 1024, 1500, 4096] {
                let dirty = Allocator.alloc(layout(size));
                dirty.write_bytes(0xFF, size);
                Allocator.dealloc(dirty, layout(size));
                let zeroed = Allocator.alloc_zeroed(layout(size));
                assert!((0..size).all(|i| *zeroed.add(i) == 0), "size {size}");
                Allocator.dealloc(zeroed, layout(size));
            }
        }
    }

    #[test]
    fn over_aligned_and_large_requests_go_to_mimalloc_aligned() {
        // SAFETY: blocks of their layouts, given back with them.
        unsafe {
            for (size, align) in [(8, 64), (100, 32), (2049, 8), (1 << 20, 4096)] {
                let l = Layout::from_size_align(size, align).unwrap();
                let b = Allocator.alloc(l);
                assert_eq!(b as usize % align, 0);
                b.write_bytes(1, size);
                Allocator.dealloc(b, l);
            }
        }
    }

    #[test]
    #[allow(clippy::disallowed_methods, reason = "a plain test of the allocator, outside any simulation")]
    fn blocks_freed_on_another_thread_and_threads_that_exit_with_cached_blocks_are_fine() {
        struct Send(*mut u8);
        // SAFETY: the block is owned by whoever holds the wrapper.
        unsafe impl std::marker::Send for Send {}
        let l = layout(72);
        for _ in 0..4 {
            let made: Vec<Send> = std::thread::spawn(move || {
                // SAFETY: blocks of `l`; half are given back here, so this thread exits with a full cache.
                unsafe {
                    let keep: Vec<Send> = (0..2000).map(|_| Send(Allocator.alloc(l))).collect();
                    (0..2000).for_each(|_| Allocator.dealloc(Allocator.alloc(l), l));
                    keep
                }
            })
            .join()
            .unwrap();
            for b in made {
                // SAFETY: a block of `l` made on the other thread, given back here.
                unsafe {
                    b.0.write_bytes(3, 72);
                    Allocator.dealloc(b.0, l);
                }
            }
        }
    }
}

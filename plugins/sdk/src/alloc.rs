//! The component's global allocator: a free list per small size class in front of
//! wasi-libc's `malloc`.
//!
//! A row plugin allocates and frees a few small blocks per row (the strings and lists
//! the host lowers into the component, the values of the output row, decimal digits),
//! and frees them again when the call returns. Through Rust's default allocator each
//! of those is a chain of calls (`__rust_alloc`, `__rdl_alloc`, `malloc`, `dlmalloc`)
//! and a dlmalloc bin search, which in a component is most of a row plugin's own time
//! (see BENCHMARKS.md). Here a block of at most [`MAX_SMALL`] bytes is rounded up to its
//! class (multiples of [`GRAIN`]); a freed block goes on its class's list and the next
//! allocation of the class takes it back, and a class with an empty list carves
//! blocks from a slab of [`SLAB`] bytes. Small blocks are never given back to
//! `malloc`: the memory of the small classes is their peak use, bounded like every
//! other allocation by the host's memory cap. Larger blocks go to `malloc` as before.
//!
//! A component is single-threaded (`wasm32-wasip2` has no threads), which is what
//! makes the unsynchronised state sound; on any other target the SDK does not install
//! this allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// Size classes are multiples of this many bytes, and so aligned to it.
const GRAIN: usize = 16;
/// The largest block served from the size classes.
const MAX_SMALL: usize = 512;
const CLASSES: usize = MAX_SMALL / GRAIN;
/// The memory a class with no free block takes from `malloc` at once.
const SLAB: usize = 64 * 1024;

/// The allocator the SDK installs in a component.
#[derive(Debug)]
pub(crate) struct ClassAlloc {
    state: UnsafeCell<State>,
}

#[derive(Debug)]
struct State {
    /// The head of each class's list of free blocks; a free block's first word is the
    /// next one.
    free: [*mut u8; CLASSES],
    /// The unused rest of the current slab.
    slab: *mut u8,
    slab_left: usize,
}

// SAFETY: a component has a single thread; the allocator is installed only there.
unsafe impl Sync for ClassAlloc {}

impl ClassAlloc {
    /// An allocator with no memory yet.
    pub(crate) const fn new() -> ClassAlloc {
        ClassAlloc {
            state: UnsafeCell::new(State {
                free: [ptr::null_mut(); CLASSES],
                slab: ptr::null_mut(),
                slab_left: 0,
            }),
        }
    }
}

impl Default for ClassAlloc {
    fn default() -> ClassAlloc {
        ClassAlloc::new()
    }
}

/// The class of a layout served from the size classes, if it is one.
fn class(layout: Layout) -> Option<usize> {
    (layout.size() <= MAX_SMALL && layout.align() <= GRAIN)
        .then(|| layout.size().max(1).div_ceil(GRAIN) - 1)
}

// SAFETY: blocks of a class are `(class + 1) * GRAIN` bytes aligned to `GRAIN`, at
// least as large and as aligned as every layout mapped to the class; a block is on at
// most one list, and only while it is not allocated.
unsafe impl GlobalAlloc for ClassAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class(layout) else {
            return unsafe { System.alloc(layout) };
        };
        // SAFETY: single-threaded, and no reference into the state outlives this call.
        let state = unsafe { &mut *self.state.get() };
        let head = state.free[c];
        if !head.is_null() {
            state.free[c] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        let size = (c + 1) * GRAIN;
        if state.slab_left < size {
            // The rest of the old slab (less than one block of this class) is left.
            let slab = unsafe { System.alloc(Layout::from_size_align_unchecked(SLAB, GRAIN)) };
            if slab.is_null() {
                return slab;
            }
            state.slab = slab;
            state.slab_left = SLAB;
        }
        let block = state.slab;
        state.slab = unsafe { block.add(size) };
        state.slab_left -= size;
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(c) = class(layout) else {
            return unsafe { System.dealloc(block, layout) };
        };
        // SAFETY: as in `alloc`.
        let state = unsafe { &mut *self.state.get() };
        unsafe { block.cast::<*mut u8>().write(state.free[c]) };
        state.free[c] = block;
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new)) {
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            (Some(a), Some(b)) if a == b => block,
            _ => {
                let moved = unsafe { self.alloc(new) };
                if !moved.is_null() {
                    unsafe {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).expect("a valid layout")
    }

    #[test]
    fn blocks_are_reused_by_class_and_hold_their_bytes() {
        let a = ClassAlloc::new();
        let l24 = layout(24, 8);
        let l32 = layout(32, 8);
        let big = layout(4096, 8);
        unsafe {
            let p = a.alloc(l24);
            let q = a.alloc(l32);
            assert_ne!(p, q, "two live blocks of one class");
            assert_eq!(p as usize % GRAIN, 0);
            a.dealloc(p, l24);
            // 24 and 32 bytes are one class: the freed block comes back.
            let r = a.alloc(l32);
            assert_eq!(r, p);
            // Grown within its class it stays; beyond, it moves and keeps its bytes.
            r.write_bytes(7, 32);
            assert_eq!(a.realloc(r, l32, 20), r);
            let s = a.realloc(r, l32, 600);
            assert_ne!(s, r);
            assert!((0..32).all(|i| s.add(i).read() == 7));
            a.dealloc(s, layout(600, 8));
            let b = a.alloc(big);
            assert!(!b.is_null());
            a.dealloc(b, big);
            a.dealloc(q, l32);
        }
    }

    #[test]
    fn a_class_past_its_slab_takes_another() {
        let a = ClassAlloc::new();
        let l = layout(MAX_SMALL, 16);
        let blocks: Vec<*mut u8> = (0..(SLAB / MAX_SMALL) * 3)
            .map(|_| unsafe { a.alloc(l) })
            .collect();
        let mut sorted = blocks.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), blocks.len(), "every block distinct");
        for b in blocks {
            unsafe { a.dealloc(b, l) };
        }
    }
}

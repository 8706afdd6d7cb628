//! Descriptor rings: where each thread writes its descriptors, in laps.
//!
//! A ring is an engine region. Its first line is reserved; the rest, its data area of `cap`
//! bytes, holds descriptors back to back. Positions are virtual and only grow: the descriptor at
//! position `v` lies at `off + 64 + v % cap`, and no descriptor straddles the end of the data
//! area (a writer that would pad to the next lap first stores a [`PAD`] word where it stopped).
//! Three positions describe a ring, all volatile (rebuilt empty at every open, when recovery has
//! folded every descriptor of the old epoch into nodes):
//!
//! ```text
//!   tail <= next <= head
//!   [.. tail)       recycled: the slots may be written again
//!   [tail .. next)  folded into node records by a checkpoint round, waiting for the epoch
//!                   grace after which no thread can still read them
//!   [next .. head)  written, not yet folded: first the batch the last round found (all
//!                   finished), then the rest (only the newest may still be active)
//! ```
//!
//! `head` is advanced by the ring's one writer (the handle holding the ring) after each
//! descriptor is written, `next` by the checkpointer as it folds a batch, `tail` by the deferred
//! end of a round. A writer may use the slots up to `tail + cap`. Recovery does not use the
//! positions: it reads every valid descriptor of the epoch whose txid is above the checkpoint
//! txid, wherever it lies (a recycled slot's old contents are at or below it).

use std::sync::atomic::Ordering;

use crate::sync::AtomicU64;

use crate::mem::{CACHE_LINE, PMem};

/// The word a writer leaves where it skipped the end of a lap: no descriptor starts there, the
/// next one starts at the lap's beginning. Its tag is not a descriptor's, so recovery's scan
/// passes over it.
pub(crate) const PAD: u64 = 0x5041_u64 << 48;

/// One descriptor ring. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Ring {
    /// The region's offset.
    pub(crate) off: u64,
    /// Bytes of the data area.
    pub(crate) cap: u64,
    /// After the last descriptor written.
    pub(crate) head: AtomicU64,
    /// Where the batch the next checkpoint round folds starts.
    pub(crate) next: AtomicU64,
    /// Below it, slots may be written again.
    pub(crate) tail: AtomicU64,
}

impl Ring {
    /// An empty ring over the region at `off` of `len` bytes.
    pub(crate) fn new(off: u64, len: u64) -> Ring {
        debug_assert!(len > CACHE_LINE && len.is_multiple_of(CACHE_LINE));
        Ring { off, cap: len - CACHE_LINE, head: AtomicU64::new(0), next: AtomicU64::new(0), tail: AtomicU64::new(0) }
    }

    /// The pool offset of position `v`.
    #[inline]
    pub(crate) fn at(&self, v: u64) -> u64 {
        self.off + CACHE_LINE + v % self.cap
    }

    /// Where a descriptor of `len` bytes written after position `head` would start: `head`, or
    /// the start of the next lap if it would straddle the end. `None` if the ring has no room for
    /// it before its unrecycled slots.
    #[inline]
    pub(crate) fn place(&self, head: u64, len: u64) -> Option<u64> {
        let start = if head % self.cap + len > self.cap { self.next_lap(head) } else { head };
        // Acquire: the slots below the tail were recycled after every reader of them was done.
        let tail = self.tail.load(Ordering::Acquire);
        (start + len - tail <= self.cap).then_some(start)
    }

    /// The position where the lap after the one holding position `v` begins.
    #[inline]
    pub(crate) fn next_lap(&self, v: u64) -> u64 {
        v + (self.cap - v % self.cap)
    }

    /// Whether a descriptor of `len` bytes fits now.
    pub(crate) fn has_room(&self, len: u64) -> bool {
        // Relaxed: only read by whoever takes the ring, under the rings lock.
        self.place(self.head.load(Ordering::Relaxed), len).is_some()
    }

    /// Writes the pad word at `head` if a descriptor placed at `start` skips the end of the lap.
    pub(crate) fn pad<M: PMem>(&self, mem: &M, head: u64, start: u64) {
        if start != head {
            // Relaxed: published with the head (Release) after the descriptor that follows.
            mem.store(self.at(head), PAD, Ordering::Relaxed);
        }
    }

    /// The bytes of descriptors not yet recycled.
    pub(crate) fn used(&self, head: u64) -> u64 {
        // Relaxed: an estimate for the trigger; `place` decides room.
        head - self.tail.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_never_straddle_a_lap_and_never_pass_the_tail() {
        let r = Ring::new(1 << 16, 64 + 1024);
        assert_eq!(r.at(0), (1 << 16) + 64);
        assert_eq!(r.at(1024 + 128), (1 << 16) + 64 + 128);
        // 896 bytes in: a 128-byte descriptor fits, a 192-byte one goes to the next lap, which
        // is not free until the tail moves.
        assert_eq!(r.place(896, 128), Some(896));
        assert_eq!(r.place(896, 192), None);
        r.tail.store(192, Ordering::Relaxed);
        assert_eq!(r.place(896, 192), Some(1024));
        assert_eq!(r.place(1024, 192), Some(1024));
        assert_eq!(r.place(1024, 256), None, "it would reach slots not yet recycled");
    }
}

//! Descriptor rings: where each thread writes its descriptors, in laps.
//!
//! A ring is an engine region. Its first line is reserved; the rest, its data area of `cap`
//! bytes, holds descriptors back to back. Positions are virtual and only grow: the descriptor at
//! position `v` lies at `off + 64 + v % cap`, and no descriptor straddles the end of the data
//! area (a writer that would pad to the next lap first stores a [`PAD`] word where it stopped).
//! Three positions describe a ring, all volatile (rebuilt empty at every open, when recovery has
//! folded every descriptor of the old epoch into nodes), and a fourth, `vouched`, says where the
//! safe points counted its writers up to (see `safe`):
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

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::AllocError;
use crate::mem::{CACHE_LINE, PMem};
use crate::pool::Pool;
use crate::sync::{AtomicU64, Mutex};

/// Region tag of descriptor rings (see `meta` for every tag).
pub(crate) const RING_TAG: u8 = 2;

/// The word a writer leaves where it skipped the end of a lap: no descriptor starts there, the
/// next one starts at the lap's beginning. Its tag is not a descriptor's, so recovery's scan
/// passes over it.
const PAD: u64 = 0x5041_u64 << 48;

/// Empty rings no handle holds that [`Rings::give_back`] keeps, so that a handle made after
/// another was dropped takes one without the pool allocating.
const SPARE_RINGS: usize = 1;

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
    /// The pool offset of the newest descriptor written (0: none yet), published with the head:
    /// the only one of the ring that may be committed and not yet persisted (see `safe`).
    pub(crate) newest: AtomicU64,
    /// The head when this ring's writer last started a round and a safe point (while safe
    /// points are kept): another waits until a sixteenth of the ring was written since.
    pub(crate) fired: AtomicU64,
    /// The bytes of the pool held by the byte values that the transactions of this ring's
    /// descriptors replaced (only grows; written by the ring's writer): with the head, the ring's
    /// share of the pressure on snapshots (see [`Rings::pressure`]).
    pub(crate) retired: AtomicU64,
    /// The ring's pressure when its writer last looked at the snapshots held (see
    /// `Checkpointer::bound_snapshots`).
    pub(crate) bounded: AtomicU64,
    /// Where the last safe point stopped counting the ring's writers: after its last one at or
    /// below that safe point's txid (see `SafePoints::make`).
    pub(crate) vouched: AtomicU64,
}

impl Ring {
    /// An empty ring over the region at `off` of `len` bytes.
    pub(crate) fn new(off: u64, len: u64) -> Ring {
        debug_assert!(len > CACHE_LINE && len.is_multiple_of(CACHE_LINE));
        Ring {
            off,
            cap: len - CACHE_LINE,
            head: AtomicU64::new(0),
            next: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            newest: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            bounded: AtomicU64::new(0),
            vouched: AtomicU64::new(0),
        }
    }

    /// The ring's share of [`Rings::pressure`], with `head` its head.
    pub(crate) fn pressure(&self, head: u64) -> u64 {
        // Relaxed: an estimate for the expiry of snapshots.
        head + self.retired.load(Ordering::Relaxed)
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

    /// The pool offset of the descriptor at position `v` (below the head), with `v` moved past a
    /// writer's pad word there to where the descriptor starts; `None` if that start is not below
    /// `below`. Below the head it always is (a pad is published with the descriptor after it);
    /// a walk bounded by where an earlier one stopped (a checkpoint batch's end) may end just past
    /// a pad, and the descriptor there is not the walk's.
    pub(crate) fn descriptor_at<M: PMem>(&self, mem: &M, v: &mut u64, below: u64) -> Option<u64> {
        // Relaxed: published with the head.
        if mem.load(self.at(*v), Ordering::Relaxed) == PAD {
            *v = self.next_lap(*v);
        }
        (*v < below).then(|| self.at(*v))
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

/// A ring known to the engine, and whether a handle writes to it.
#[derive(Debug)]
struct RingSlot {
    ring: Arc<Ring>,
    /// A handle writes to it.
    taken: bool,
    /// Given up for good: a panic unwound through a transaction of the handle that held it (see
    /// `Handle`'s `unfinished`).
    dead: bool,
    /// Its region was given back to the pool ([`Rings::give_back`]): the entry only keeps the
    /// indices of the others in place, and the next new ring takes it.
    gone: bool,
}

impl RingSlot {
    fn new(ring: Ring) -> RingSlot {
        RingSlot { ring: Arc::new(ring), taken: false, dead: false, gone: false }
    }

    /// No handle holds it and one may take it.
    fn idle(&self) -> bool {
        !self.taken && !self.dead && !self.gone
    }
}

/// The engine's rings, each taken by at most one handle at a time, under a lock that loom sees
/// (it orders their positions between handles).
#[derive(Debug)]
pub(crate) struct Rings {
    slots: Mutex<Slots>,
    /// Bytes of a new ring.
    ring_bytes: u64,
}

#[derive(Debug)]
struct Slots {
    all: Vec<RingSlot>,
    /// A ring given back had been written since the open.
    gone_written: bool,
    /// The pressure of the rings given back (see [`Rings::pressure`]).
    gone_pressure: u64,
}

impl Rings {
    /// The rings `pool` holds, all empty (an open follows a recovery, which folded every
    /// descriptor of the old epoch into records); new ones get `ring_bytes` bytes (rounded up to
    /// whole chunks).
    pub(crate) fn of_pool<M: PMem>(pool: &Pool<M>, ring_bytes: u64) -> Rings {
        let all =
            pool.regions(RING_TAG).into_iter().map(|(off, len)| RingSlot::new(Ring::new(off.get(), len))).collect();
        Rings { slots: Mutex::new(Slots { all, gone_written: false, gone_pressure: 0 }), ring_bytes }
    }

    /// Bytes of a new ring, as configured.
    pub(crate) fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    /// Takes a ring with room for a descriptor of `len` bytes that no handle holds, or a new one
    /// (the pool grows for it, unless that would not leave the room recovery needs): its index,
    /// the ring, and its head as its last writer published it.
    pub(crate) fn take<M: PMem>(&self, pool: &Pool<M>, len: u64) -> Result<(usize, Arc<Ring>, u64), AllocError> {
        let mut slots = self.slots.lock();
        let slots = &mut slots.all;
        let i = match slots.iter().position(|r| r.idle() && r.ring.has_room(len)) {
            Some(i) => i,
            None => {
                let chunk = pool.header().layout.chunk_size;
                let bytes = self.ring_bytes.max(1).div_ceil(chunk) * chunk;
                let off = pool.alloc_region(RING_TAG, bytes)?.get();
                let slot = RingSlot::new(Ring::new(off, bytes));
                match slots.iter().position(|r| r.gone) {
                    Some(i) => {
                        slots[i] = slot;
                        i
                    }
                    None => {
                        slots.push(slot);
                        slots.len() - 1
                    }
                }
            }
        };
        slots[i].taken = true;
        let ring = Arc::clone(&slots[i].ring);
        // Relaxed: the ring's last writer published its head under this lock, held here.
        let head = ring.head.load(Ordering::Relaxed);
        Ok((i, ring, head))
    }

    /// Gives back ring `i`, which the caller took: another handle may resume it once it has room,
    /// unless `dead` (its last descriptor's transaction never returned), then never.
    pub(crate) fn release(&self, i: usize, dead: bool) {
        let slots = &mut self.slots.lock().all;
        slots[i].taken = false;
        slots[i].dead |= dead;
    }

    /// Gives the regions of the rings no handle holds and whose every slot is recycled back to
    /// the pool, all but [`SPARE_RINGS`] of them: rings taken while checkpoint rounds lagged
    /// behind the writers (or by handles since dropped) do not keep their chunks once the rounds
    /// have caught up. Returns how many it gave back. Called by a checkpoint round (one at a
    /// time) after the last round's end ran.
    ///
    /// A ring whose tail has reached its head holds nothing recovery reads: its descriptors are
    /// at or below the checkpoint txid (the tail moves only then, on the disk too while safe
    /// points are kept), as much as slots written over would be. No handle holds it, and none
    /// can take it while the lock is held; a round that read it before sees no slot to fold.
    pub(crate) fn give_back<M: PMem>(&self, pool: &Pool<M>) -> usize {
        let mut slots = self.slots.lock();
        let Slots { all, gone_written, gone_pressure } = &mut *slots;
        let mut spare = SPARE_RINGS;
        let mut given = 0;
        for slot in all.iter_mut().filter(|r| r.idle()) {
            // Acquire (both): the recycling that raised the tail, and the head its last writer
            // published under this lock, come before the region is given back.
            let (tail, head) = (slot.ring.tail.load(Ordering::Acquire), slot.ring.head.load(Ordering::Acquire));
            if tail < head {
                continue;
            }
            if spare > 0 {
                spare -= 1;
                continue;
            }
            pool.free_region(crate::pool::POff::new(slot.ring.off));
            *gone_written |= head > 0;
            *gone_pressure += slot.ring.pressure(head);
            slot.gone = true;
            given += 1;
        }
        given
    }

    /// Calls `f` with every ring, under the table's lock (no handle takes or gives one back
    /// meanwhile; `f` must not either), allocating nothing.
    pub(crate) fn each(&self, mut f: impl FnMut(&Ring)) {
        self.slots.lock().all.iter().filter(|r| !r.gone).for_each(|r| f(&r.ring));
    }

    /// Every ring.
    pub(crate) fn all(&self) -> Vec<Arc<Ring>> {
        self.slots.lock().all.iter().filter(|r| !r.gone).map(|r| Arc::clone(&r.ring)).collect()
    }

    /// The bytes of descriptors written since the open, and of the pool held by the byte values
    /// their transactions replaced, over every ring (as their writers last published them):
    /// only grows. What a scan's snapshot may keep from being recycled or freed is what the
    /// writers add to it while the snapshot is held (see `reclaim::Snapshots`).
    pub(crate) fn pressure(&self) -> u64 {
        let slots = self.slots.lock();
        // Relaxed: an estimate, as in `Ring::pressure`.
        let live: u64 =
            slots.all.iter().filter(|r| !r.gone).map(|r| r.ring.pressure(r.ring.head.load(Ordering::Relaxed))).sum();
        slots.gone_pressure + live
    }

    /// How many rings the pool holds.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().all.iter().filter(|r| !r.gone).count()
    }

    /// Whether any descriptor was written since the open.
    pub(crate) fn written(&self) -> bool {
        let slots = self.slots.lock();
        // Relaxed: called with every handle gone (each published its ring's head when dropped).
        slots.gone_written || slots.all.iter().any(|r| !r.gone && r.ring.head.load(Ordering::Relaxed) > 0)
    }
}

/// Every ring region of `pool`, wherever recovery reads descriptors: (offset, bytes).
pub(crate) fn regions<M: PMem>(pool: &Pool<M>) -> Vec<(u64, u64)> {
    pool.regions(RING_TAG).into_iter().map(|(off, len)| (off.get(), len)).collect()
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

    #[test]
    fn a_walk_that_ends_at_a_pad_does_not_take_the_descriptor_past_it() {
        use crate::mem::SimMem;
        let mem = SimMem::new(1 << 17, 1 << 17);
        let r = Ring::new(1 << 16, 64 + 1024);
        // A 192-byte descriptor written after position 896 goes to the next lap: a pad at 896.
        r.pad(&mem, 896, 1024);
        let mut v = 896;
        assert_eq!(r.descriptor_at(&mem, &mut v, 1024 + 192), Some(r.at(1024)));
        assert_eq!(v, 1024);
        // A walk bounded at the next lap's start (where an earlier walk stopped, past the pad):
        // it ends there, without the descriptor.
        let mut v = 896;
        assert_eq!(r.descriptor_at(&mem, &mut v, 1024), None);
        assert_eq!(v, 1024);
        let mut v = 128;
        assert_eq!(r.descriptor_at(&mem, &mut v, 1024), Some(r.at(128)), "no pad: the descriptor is there");
        assert_eq!(v, 128);
    }
}

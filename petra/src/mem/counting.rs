//! [`Counting`]: a wrapper that counts what goes through the seam.

use std::cell::Cell;
use std::io;
use std::ops::Sub;
use std::sync::atomic::Ordering;

use super::{Durability, GrowError, PMem};

/// Counts of seam operations by one thread.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MemCounts {
    /// Plain stores.
    pub stores: u64,
    /// Compare-and-swap attempts, successful or not.
    pub cas: u64,
    /// Compare-and-swap attempts that failed.
    pub cas_failures: u64,
    /// Fetch-and-add operations.
    pub fetch_adds: u64,
    /// Cache lines flushed.
    pub flushes: u64,
    /// Fences.
    pub fences: u64,
    /// Syncs (`msync` on a page-cache file).
    pub syncs: u64,
}

thread_local! {
    static COUNTS: Cell<MemCounts> = const { Cell::new(MemCounts {
        stores: 0, cas: 0, cas_failures: 0, fetch_adds: 0, flushes: 0, fences: 0, syncs: 0,
    }) };
}

impl MemCounts {
    /// This thread's counts so far.
    pub fn current() -> MemCounts {
        COUNTS.with(Cell::get)
    }

    fn bump(f: impl FnOnce(&mut MemCounts)) {
        COUNTS.with(|c| {
            let mut v = c.get();
            f(&mut v);
            c.set(v);
        });
    }
}

impl Sub for MemCounts {
    type Output = MemCounts;
    fn sub(self, rhs: MemCounts) -> MemCounts {
        MemCounts {
            stores: self.stores - rhs.stores,
            cas: self.cas - rhs.cas,
            cas_failures: self.cas_failures - rhs.cas_failures,
            fetch_adds: self.fetch_adds - rhs.fetch_adds,
            flushes: self.flushes - rhs.flushes,
            fences: self.fences - rhs.fences,
            syncs: self.syncs - rhs.syncs,
        }
    }
}

/// Wraps any [`PMem`] and counts its operations per thread.
///
/// Counts are kept per thread (a thread-local, so counting adds no shared-memory traffic to a
/// benchmark) and summed over every `Counting` memory the thread touches. To count one operation,
/// take [`MemCounts::current`] before and after it on the thread that runs it and subtract.
#[derive(Debug)]
pub struct Counting<M> {
    inner: M,
}

impl<M: PMem> Counting<M> {
    /// Wraps `inner`.
    pub fn new(inner: M) -> Counting<M> {
        Counting { inner }
    }

    /// The wrapped memory.
    pub fn inner(&self) -> &M {
        &self.inner
    }
}

impl<M: PMem> PMem for Counting<M> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn load(&self, off: u64, order: Ordering) -> u64 {
        self.inner.load(off, order)
    }
    fn store(&self, off: u64, val: u64, order: Ordering) {
        MemCounts::bump(|c| c.stores += 1);
        self.inner.store(off, val, order)
    }
    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        let r = self.inner.compare_exchange(off, current, new, success, failure);
        MemCounts::bump(|c| {
            c.cas += 1;
            c.cas_failures += r.is_err() as u64;
        });
        r
    }
    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64 {
        MemCounts::bump(|c| c.fetch_adds += 1);
        self.inner.fetch_add(off, val, order)
    }
    fn prefetch(&self, off: u64) {
        self.inner.prefetch(off)
    }
    fn flush(&self, off: u64) {
        MemCounts::bump(|c| c.flushes += 1);
        self.inner.flush(off)
    }
    fn fence(&self) {
        MemCounts::bump(|c| c.fences += 1);
        self.inner.fence()
    }
    // flush_range, read_bytes and write_bytes keep their provided forms, so that they are counted
    // through `flush` and `store` exactly as any implementation's would be.
    fn grow(&self, new_len: u64) -> Result<(), GrowError> {
        self.inner.grow(new_len)
    }
    fn populate(&self, from: u64, to: u64) {
        self.inner.populate(from, to)
    }
    fn max_len(&self) -> u64 {
        self.inner.max_len()
    }
    fn durability(&self) -> Durability {
        self.inner.durability()
    }

    fn boot(&self) -> u128 {
        self.inner.boot()
    }
    fn sync(&self) -> io::Result<()> {
        MemCounts::bump(|c| c.syncs += 1);
        self.inner.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::SimMem;

    fn flushes_of(off: u64, len: u64) -> u64 {
        let m = Counting::new(SimMem::new(1024, 1024));
        let before = MemCounts::current();
        m.flush_range(off, len);
        (MemCounts::current() - before).flushes
    }

    #[test]
    fn a_range_flushes_every_line_it_touches_and_no_other() {
        assert_eq!(flushes_of(0, 0), 0);
        assert_eq!(flushes_of(0, 1), 1);
        assert_eq!(flushes_of(0, 64), 1);
        assert_eq!(flushes_of(0, 65), 2);
        assert_eq!(flushes_of(60, 8), 2, "straddles the boundary at 64");
        assert_eq!(flushes_of(63, 1), 1);
        assert_eq!(flushes_of(63, 2), 2);
        assert_eq!(flushes_of(8, 120), 2, "[8, 128) touches lines 0 and 1");
        assert_eq!(flushes_of(8, 121), 3);
        assert_eq!(flushes_of(100, 500), (599 / 64 - 100 / 64) + 1);
    }

    #[test]
    fn counts_every_kind_of_operation() {
        let m = Counting::new(SimMem::new(128, 128));
        let before = MemCounts::current();
        m.store(0, 1, Ordering::Relaxed);
        assert!(m.compare_exchange(0, 1, 2, Ordering::AcqRel, Ordering::Acquire).is_ok());
        assert!(m.compare_exchange(0, 1, 3, Ordering::AcqRel, Ordering::Acquire).is_err());
        m.fetch_add(8, 1, Ordering::Relaxed);
        m.flush(0);
        m.fence();
        let d = MemCounts::current() - before;
        assert_eq!(d, MemCounts { stores: 1, cas: 2, cas_failures: 1, fetch_adds: 1, flushes: 1, fences: 1, syncs: 0 });
    }
}

//! The memory seam: the one way in and out of pool memory.
//!
//! Every byte of a pool is read, written, flushed and fenced through [`PMem`], addressed by its
//! **pool offset** (bytes from the start of the pool), never by a raw pointer. The engine and the
//! structures are generic over it and monomorphised, so the production build ([`MmapMem`]) compiles
//! to plain atomics and cache-line flush instructions, while tests run the very same code over the
//! crash simulator ([`SimMem`]) or, for model checking, over loom atomics.
//!
//! # The persistence model
//! A store becomes *visible* to other threads by the atomic orderings passed with it, and *durable*
//! only once the cache line that holds it has been flushed ([`PMem::flush`]) and the flushing thread
//! has issued a fence ([`PMem::fence`]) afterwards. Any line may also reach the media on its own at
//! any time (eviction), but stores to one 64-byte line reach it in program order. Code that needs A
//! durable before B is made durable must flush A's lines and fence before storing B. [`SimMem`]
//! checks code against exactly this model.
//!
//! On a file in the page cache of a disk ([`Durability::PageCache`]) flush and fence order nothing
//! on the disk: the kernel writes each dirty 4 KiB page back whenever it likes, in any order, with
//! its content of that moment, and only [`PMem::sync`] makes everything durable. [`SimMem`] checks
//! code against that model too ([`MediaModel::PageCache`]). On a file in memory (tmpfs, such as
//! `/dev/shm`: [`Durability::Memory`]) there is no disk: flush and fence order what a process that
//! opens the file after a crash reads, exactly as on persistent memory, and a power loss takes
//! everything.
//!
//! Word accesses take 8-byte-aligned offsets; a misaligned or out-of-bounds offset panics (it is a
//! bug in the caller, never undefined behaviour).

use std::io;
use std::sync::atomic::Ordering;

mod counting;
#[cfg(loom)]
mod loom;
mod mmap;
mod sim;

#[cfg(loom)]
pub use self::loom::LoomMem;
pub use counting::{Counting, MemCounts};
pub use mmap::{FlushKind, MmapMem, MmapOptions};
pub(crate) use mmap::{machine_boot, reserve_existing, reserve_space};
pub use sim::{CrashImage, CrashPlan, CrashPoint, CrashState, EventKind, MediaModel, SimMem};

/// Size of a cache line, the unit of flushing and of atomic persistence of ordered stores.
pub const CACHE_LINE: u64 = 64;

/// Size of a word, the unit of atomic access and of failure-atomic persistence.
pub const WORD: u64 = 8;

/// Size of a page of the page cache, the unit the kernel writes back to a file: the crash
/// simulator's page-cache model ([`MediaModel::PageCache`]) writes pages of this size back.
pub const PAGE: u64 = 4096;

/// What a completed flush-and-fence guarantees for this memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// Persistent memory mapped with `MAP_SYNC` (DAX): a flushed and fenced store survives power
    /// loss.
    Dax,
    /// A file in the page cache of a file system on a disk: a flushed and fenced store survives
    /// the death of the process, since the shared mapping outlives it. Surviving power loss needs
    /// `msync`, which [`PMem::sync`] issues.
    PageCache,
    /// A file in memory (tmpfs, such as `/dev/shm`, or ramfs): a flushed and fenced store
    /// survives the death of the process, since the shared mapping outlives it, and nothing
    /// survives power loss or a reboot, which empty the file system. No sync changes that, so
    /// [`PMem::sync`] does nothing.
    Memory,
    /// Flushes and fences are skipped: nothing is durable beyond the process. For benchmarks, to
    /// measure what durability costs; never a default.
    Volatile,
    /// The crash simulator or the model checker: durability as the simulator defines it.
    Simulated,
    /// A private copy of a pool file (opened to read it without writing a byte, or to salvage
    /// it): changes stay in the process and never reach the file.
    Private,
}

impl Durability {
    /// A short lower-case name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Dax => "dax",
            Durability::PageCache => "page-cache",
            Durability::Memory => "memory",
            Durability::Volatile => "volatile",
            Durability::Simulated => "simulated",
            Durability::Private => "private",
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Pool memory, addressed by pool offset. See the [module docs](self) for the model.
///
/// Implementations must be sound for any argument: a bad offset panics. Memory beyond
/// [`len`](PMem::len) is not accessible; [`grow`](PMem::grow) extends it without moving what
/// is already there.
pub trait PMem: Send + Sync {
    /// Bytes accessible now, always a multiple of [`CACHE_LINE`].
    fn len(&self) -> u64;

    /// Whether no byte is accessible.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Atomically loads the word at `off`.
    fn load(&self, off: u64, order: Ordering) -> u64;

    /// Atomically stores `val` into the word at `off`.
    fn store(&self, off: u64, val: u64, order: Ordering);

    /// Atomically replaces the word at `off` with `new` if it equals `current`; returns the
    /// previous value, `Ok` if the exchange happened.
    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;

    /// Atomically adds `val` (wrapping) to the word at `off`; returns the previous value.
    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64;

    /// Starts writing back the cache line that contains byte `off`. Durable only after a later
    /// [`fence`](PMem::fence) by the same thread.
    fn flush(&self, off: u64);

    /// Orders this thread's earlier flushes before its later stores: after it returns, every
    /// line this thread flushed before is durable.
    fn fence(&self);

    /// A hint that the word at `off` is about to be read: starts bringing its line into the
    /// cache. Changes nothing and orders nothing, and an offset outside the memory is ignored;
    /// by default it does nothing.
    fn prefetch(&self, _off: u64) {}

    /// Flushes every cache line that `[off, off + len)` touches, and no other.
    fn flush_range(&self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = off & !(CACHE_LINE - 1);
        let last = (off + len - 1) & !(CACHE_LINE - 1);
        let mut line = first;
        while line <= last {
            self.flush(line);
            line += CACHE_LINE;
        }
    }

    /// Copies `buf.len()` bytes from `off` into `buf`. Not atomic as a whole: the caller must know
    /// that no other thread writes the range meanwhile (a blob before it is published, a header).
    fn read_bytes(&self, off: u64, buf: &mut [u8]) {
        read_bytes_by_words(self, off, buf)
    }

    /// Copies `data` to `off`. Not atomic as a whole, and not durable until flushed and fenced;
    /// the caller must own the range (no concurrent writer). Partial words at either end keep
    /// their other bytes.
    fn write_bytes(&self, off: u64, data: &[u8]) {
        write_bytes_by_words(self, off, data)
    }

    /// Extends the accessible memory to `new_len` bytes (a multiple of the implementation's
    /// growth granule) without moving any existing byte. New bytes read as zero.
    fn grow(&self, new_len: u64) -> Result<(), GrowError>;

    /// Faults bytes `[from, to)` in now, where that spares each page a fault of its own later
    /// (memory-backed files; see `MmapMem`). A hint: it changes no byte, and the default does
    /// nothing.
    fn populate(&self, from: u64, to: u64) {
        let _ = (from, to);
    }

    /// The largest length [`grow`](PMem::grow) can reach.
    fn max_len(&self) -> u64;

    /// What a flush and fence guarantee here.
    fn durability(&self) -> Durability;

    /// The machine boot this memory lives in, as far as it knows (0: unknown). A pool records
    /// the boot it was last in use in: when it is opened again in the same boot, only its process
    /// can have died, never the machine, so every store of the last run is in the memory, links
    /// included; after another boot (a power loss), only what was durable is.
    fn boot(&self) -> u128 {
        0
    }

    /// Makes everything written so far durable against power loss where the medium needs more
    /// than flush and fence (`msync` for [`Durability::PageCache`]); a no-op elsewhere.
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Why memory could not grow.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrowError {
    /// The request exceeds the configured maximum size.
    #[error("cannot grow to {requested} bytes: the maximum is {max} bytes")]
    AboveMaximum {
        /// Bytes asked for.
        requested: u64,
        /// The configured maximum.
        max: u64,
    },
    /// The length is not a multiple of the growth granule.
    #[error("cannot grow to {requested} bytes: not a multiple of {granule}")]
    Unaligned {
        /// Bytes asked for.
        requested: u64,
        /// The granule.
        granule: u64,
    },
    /// The file could not be extended or mapped.
    #[error("cannot grow the pool file: {0}")]
    Io(#[from] io::Error),
}

/// [`PMem::read_bytes`] a word at a time through [`PMem::load`]: the default, and the way for
/// unaligned ranges.
pub(crate) fn read_bytes_by_words<M: PMem + ?Sized>(mem: &M, off: u64, buf: &mut [u8]) {
    // Relaxed (every load): the caller knows no thread writes the range meanwhile, and orders
    // its reading after the word that published it.
    if off.is_multiple_of(WORD) {
        // Whole words straight into place (the common case: a blob after its length word).
        let mut chunks = buf.chunks_exact_mut(WORD as usize);
        let mut at = off;
        for chunk in &mut chunks {
            chunk.copy_from_slice(&mem.load(at, Ordering::Relaxed).to_le_bytes());
            at += WORD;
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let n = tail.len();
            tail.copy_from_slice(&mem.load(at, Ordering::Relaxed).to_le_bytes()[..n]);
        }
        return;
    }
    let mut pos = 0usize;
    while pos < buf.len() {
        let at = off + pos as u64;
        let word_off = at & !(WORD - 1);
        let skip = (at - word_off) as usize;
        let word = mem.load(word_off, Ordering::Relaxed).to_le_bytes();
        let take = (WORD as usize - skip).min(buf.len() - pos);
        buf[pos..pos + take].copy_from_slice(&word[skip..skip + take]);
        pos += take;
    }
}

/// [`PMem::write_bytes`] a word at a time through [`PMem::load`] and [`PMem::store`]: the
/// default, and the way for unaligned ranges.
pub(crate) fn write_bytes_by_words<M: PMem + ?Sized>(mem: &M, off: u64, data: &[u8]) {
    // Relaxed (every load and store): the caller owns the range and publishes it later with an
    // ordering of its own.
    let mut pos = 0usize;
    while pos < data.len() {
        let at = off + pos as u64;
        let word_off = at & !(WORD - 1);
        let skip = (at - word_off) as usize;
        let take = (WORD as usize - skip).min(data.len() - pos);
        let word = if take == WORD as usize {
            u64::from_le_bytes(data[pos..pos + 8].try_into().expect("8 bytes"))
        } else {
            let mut bytes = mem.load(word_off, Ordering::Relaxed).to_le_bytes();
            bytes[skip..skip + take].copy_from_slice(&data[pos..pos + take]);
            u64::from_le_bytes(bytes)
        };
        mem.store(word_off, word, Ordering::Relaxed);
        pos += take;
    }
}

/// Panics unless `off` names a whole aligned word inside `len` bytes.
#[inline]
#[track_caller]
pub(crate) fn check_word(off: u64, len: u64) {
    assert!(
        off.is_multiple_of(WORD) && off.checked_add(WORD).is_some_and(|end| end <= len),
        "pool word access at offset {off:#x} is misaligned or beyond the pool's {len} bytes"
    );
}

/// Shared memory: a pool over `Arc<M>` lets a test keep a handle to the memory (to take crash
/// states from a [`SimMem`], say) while the pool owns its clone.
impl<M: PMem + ?Sized> PMem for std::sync::Arc<M> {
    #[inline]
    fn len(&self) -> u64 {
        (**self).len()
    }
    #[inline]
    fn load(&self, off: u64, order: Ordering) -> u64 {
        (**self).load(off, order)
    }
    #[inline]
    fn store(&self, off: u64, val: u64, order: Ordering) {
        (**self).store(off, val, order)
    }
    #[inline]
    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        (**self).compare_exchange(off, current, new, success, failure)
    }
    #[inline]
    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64 {
        (**self).fetch_add(off, val, order)
    }
    #[inline]
    fn flush(&self, off: u64) {
        (**self).flush(off)
    }
    #[inline]
    fn fence(&self) {
        (**self).fence()
    }
    #[inline]
    fn flush_range(&self, off: u64, len: u64) {
        (**self).flush_range(off, len)
    }
    fn read_bytes(&self, off: u64, buf: &mut [u8]) {
        (**self).read_bytes(off, buf)
    }
    fn prefetch(&self, off: u64) {
        (**self).prefetch(off)
    }
    fn write_bytes(&self, off: u64, data: &[u8]) {
        (**self).write_bytes(off, data)
    }
    fn grow(&self, new_len: u64) -> Result<(), GrowError> {
        (**self).grow(new_len)
    }
    fn populate(&self, from: u64, to: u64) {
        (**self).populate(from, to)
    }
    fn max_len(&self) -> u64 {
        (**self).max_len()
    }
    fn durability(&self) -> Durability {
        (**self).durability()
    }
    fn boot(&self) -> u128 {
        (**self).boot()
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
}

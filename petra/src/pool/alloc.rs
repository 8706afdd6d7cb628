//! The allocator: slabs of fixed size classes, runs of whole chunks, and their rebuild.
//!
//! The pool's data area is cut into chunks. A chunk's use is recorded in the persistent chunk
//! table (see [`header`](super::header)) before the chunk is used, and that is the only
//! allocator state on the media. Everything else is volatile and rebuilt at open:
//!
//! - **Slabs.** A slab chunk holds blocks of one size class of one family: nodes (the blocks that
//!   recovery scans) or blobs (values longer than a word; each starts with its length). A node
//!   slab keeps, after its last block, a [`RECORD_BYTES`] record area for each block (see
//!   [`Pool::record_of`]): the words only checkpoint rounds and recovery read, kept out of the
//!   node so that a walk's nodes are denser. Free
//!   blocks live in magazines of [`MAGAZINE`] offsets: each thread's [`Local`] keeps one per class
//!   and trades whole magazines with a lock-free global depot, so the common allocation and free
//!   are a `Vec` push or pop with no write to shared allocator state and **no flush** (a node
//!   block's allocation zeroes its own record area). A blob starts with a
//!   header word: its length (bits 0..32) and a check of its bytes (bits 32..64, the high half of
//!   their XXH3), which every read verifies.
//! - **Runs.** Contiguous chunks for a large blob or for an engine region (descriptor rings),
//!   found in a volatile free-chunk set or made by growing the file.
//! - **Rebuild.** After open, slab chunks count as full and runs as live, which is always safe:
//!   nothing is handed out twice, at worst nothing is reused. Recovery then passes the set of
//!   live offsets to [`Pool::rebuild`](super::Pool::rebuild), and every block and blob run not in
//!   it becomes free.
//!
//! A chunk taken for a new use is zeroed (or known zero, fresh from growth), and the zeroes are
//! persisted before its table entry, so a scan of a slab chunk never meets bytes of an older use.
//! A freed block keeps its bytes until it is reused; telling a dead node from a live one is the
//! engine's business.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crossbeam_queue::SegQueue;
use parking_lot::Mutex;

use super::header::{ChunkUse, Family, Header, RunKind};
use super::{POff, Pool};
use crate::error::{AllocError, Damage, RebuildError};
use crate::hash::value_hash;
use crate::mem::{CACHE_LINE, GrowError, PMem, WORD};

/// Block sizes of the size classes, in bytes. Multiples of 16, each at most a third larger than the
/// one before (steps of 16 bytes below 64), so above 64 bytes less than a quarter of a block is padding.
pub const CLASS_SIZES: [u32; 28] = [
    16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 2560, 3072, 4096,
    5120, 6144, 8192, 10240, 12288, 16384,
];

/// Bits of a blob's header word that hold its length; the check is in the high 32.
const BLOB_LEN: u64 = u32::MAX as u64;

/// The check a blob's header word keeps of a value of [`value_hash`] `hash` stored at `off` in
/// the pool of [`blob_salt`] `salt`: tied to the bytes, to their place and to the pool, so that a
/// value moved or swapped within the file, or copied from another pool, fails it.
fn blob_check(hash: u64, off: u64, salt: u64) -> u64 {
    // An odd multiplier spreads the offset (a multiple of 8) over the high half kept.
    (hash ^ (off ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 32
}

/// The salt of the pool `uuid`'s blob checks.
pub(super) fn blob_salt(uuid: &[u8; 16]) -> u64 {
    let id = u128::from_le_bytes(*uuid);
    crate::hash::check_words([id as u64, (id >> 64) as u64])
}

/// Bytes of a node block's record area, apart from the block (see [`Pool::record_of`]).
pub const RECORD_BYTES: u64 = 16;

/// Blocks of `class` in a slab chunk of `family` of `chunk_size` bytes: a node slab holds its
/// blocks' record areas after them, from a line boundary ([`records_start`]).
fn blocks_in(family: Family, class: u8, chunk_size: u64) -> u64 {
    let size = CLASS_SIZES[class as usize] as u64;
    match family {
        Family::Node => {
            let mut n = chunk_size / (size + RECORD_BYTES);
            while records_start(n, size) + n * RECORD_BYTES > chunk_size {
                n -= 1;
            }
            n
        }
        Family::Blob => chunk_size / size,
    }
}

/// Where the record areas of a node slab chunk of `n` blocks of `size` bytes start: after the
/// last block, at a line boundary, so that the areas of four blocks in a row share one line.
const fn records_start(n: u64, size: u64) -> u64 {
    (n * size).next_multiple_of(CACHE_LINE)
}

/// For each class, `r = ceil(2^64 / size)`: `(rel * r) >> 64` is `rel / size` for every `rel`
/// below 2^50. With `r * size = 2^64 + e`, `e < size <= 2^14`, the product exceeds
/// `rel / size * 2^64` by `rel * e / size`, which stays below `2^64 / size` while `rel * e < 2^64`:
/// not enough to reach the next multiple. Every offset within a chunk is below 2^30
/// ([`MAX_CHUNK`](super::header::MAX_CHUNK)).
const RECIPROCALS: [u64; CLASSES] = {
    let mut r = [0; CLASSES];
    let mut c = 0;
    while c < CLASSES {
        r[c] = u64::MAX / CLASS_SIZES[c] as u64 + 1;
        c += 1;
    }
    r
};

/// Offsets per magazine: the unit of exchange between a thread and the global depot.
pub const MAGAZINE: usize = 32;

const CLASSES: usize = CLASS_SIZES.len();
const FAMILIES: usize = 2;

/// The largest block a slab serves.
pub const MAX_CLASS_SIZE: u64 = CLASS_SIZES[CLASSES - 1] as u64;

/// The index of the smallest class that holds `size` bytes.
pub fn class_for(size: u64) -> Option<usize> {
    CLASS_SIZES.iter().position(|&c| c as u64 >= size)
}

fn depot_index(family: Family, class: usize) -> usize {
    family as usize * CLASSES + class
}

/// The use `w` names if it is a valid table word for chunk `index` of the pool `uuid`, naming a
/// use this build knows.
pub(crate) fn valid_entry(w: u64, index: u64, uuid: &[u8; 16]) -> Option<ChunkUse> {
    match ChunkUse::decode(w, index, uuid)? {
        ChunkUse::Slab { class, .. } if class as usize >= CLASSES => None,
        u => Some(u),
    }
}

/// Volatile allocator state shared by all threads.
#[derive(Debug)]
pub(crate) struct Allocator {
    /// Which allocator, and which rebuild of it, a cache's blocks come from.
    id: u64,
    generation: u64,
    /// Full magazines of free blocks, per (family, class).
    depots: Vec<SegQueue<Vec<u64>>>,
    /// Single blocks freed by threads without a cache of their own (deferred frees), per
    /// (family, class).
    returns: Vec<SegQueue<u64>>,
    chunks: Mutex<Chunks>,
    /// For each class, where a node slab chunk's record areas start: after its last block.
    records_at: [u64; CLASSES],
    /// Blocks handed out and given back through the allocation calls since this allocator was
    /// attached: a ledger kept apart from the chunk table and the structures, which tests check
    /// against what the structures hold (debug builds only: two shared counters on every call
    /// would be contended).
    #[cfg(debug_assertions)]
    ledger: crossbeam_utils::CachePadded<[std::sync::atomic::AtomicU64; 2]>,
}

/// Blocks (node blocks, and blobs, a run of chunks counting as one) handed out by the pool's
/// allocation calls and given back by its free calls, since it was opened or last rebuilt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Blocks handed out.
    pub taken: u64,
    /// Blocks given back.
    pub returned: u64,
}

impl Ledger {
    /// Blocks handed out and not given back.
    pub fn held(&self) -> u64 {
        self.taken - self.returned
    }
}

/// Chunk bookkeeping, changed only on the rare paths (new chunk, run, growth, rebuild).
#[derive(Debug)]
struct Chunks {
    /// Chunks not in use, each with whether it may hold old bytes.
    free: BTreeMap<u64, Dirty>,
    /// Chunks the file holds.
    in_file: u64,
    /// Node slab chunks in use.
    node: u64,
    /// Whether a new use must leave as many chunks free (in the file or below the maximum) as
    /// node slabs are in use: the room recovery needs to write every node anew before it frees
    /// the old ones. Off only while recovery itself writes them.
    reserve: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dirty {
    /// Fresh from growth: reads as zero.
    Zero,
    /// May hold bytes of an earlier use.
    Maybe,
}

/// What [`Pool::rebuild`](super::Pool::rebuild) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Live slab blocks.
    pub live_blocks: u64,
    /// Slab blocks made free.
    pub free_blocks: u64,
    /// Live blob runs.
    pub live_runs: u64,
    /// Blob runs freed (their chunks returned to the free set).
    pub freed_runs: u64,
    /// Slab chunks with no live block, returned to the free set.
    pub freed_chunks: u64,
}

/// Chunks by use, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    /// Node slab chunks.
    pub node: u64,
    /// Blob slab chunks.
    pub blob: u64,
    /// Chunks in runs (large blobs and regions).
    pub runs: u64,
    /// Chunks in the file but not in use.
    pub free: u64,
}

impl Allocator {
    /// The state right after open: every chunk the table marks free is free, every slab is full.
    /// In a pool just created (`fresh`), free chunks are known to be zero.
    pub(crate) fn attach<M: PMem>(mem: &M, header: &Header, fresh: bool) -> Allocator {
        let in_file = header.layout.chunks_in(mem.len());
        let uses = read_uses(mem, header, in_file);
        let mut free = BTreeMap::new();
        let dirty = if fresh { Dirty::Zero } else { Dirty::Maybe };
        let mut node = 0;
        for (i, u) in uses.iter().enumerate() {
            match u {
                ChunkUse::Free => {
                    free.insert(i as u64, dirty);
                }
                ChunkUse::Slab { family: Family::Node, .. } => node += 1,
                _ => {}
            }
        }
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Allocator {
            // Relaxed: only uniqueness matters.
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            generation: 0,
            depots: (0..FAMILIES * CLASSES).map(|_| SegQueue::new()).collect(),
            returns: (0..FAMILIES * CLASSES).map(|_| SegQueue::new()).collect(),
            chunks: Mutex::new(Chunks { free, in_file, node, reserve: true }),
            records_at: std::array::from_fn(|c| {
                records_start(blocks_in(Family::Node, c as u8, header.layout.chunk_size), CLASS_SIZES[c] as u64)
            }),
            #[cfg(debug_assertions)]
            ledger: Default::default(),
        }
    }
}

/// Reads the table entries of the first `n` chunks and resolves runs: a run head whose tails are
/// not all in place, and a tail without a head, come from a run whose creation never finished,
/// and read as free.
fn read_uses<M: PMem>(mem: &M, header: &Header, n: u64) -> Vec<ChunkUse> {
    let raw: Vec<ChunkUse> = (0..n)
        .map(|i| {
            // Every entry was checked at open (a pool with an invalid one is refused), and the
            // pool writes only valid ones. Relaxed: attaching runs alone.
            ChunkUse::of_entry(mem.load(header.layout.entry_off(i), std::sync::atomic::Ordering::Relaxed))
                .expect("a chunk table entry checked at open")
        })
        .collect();
    let mut uses = vec![ChunkUse::Free; raw.len()];
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            ChunkUse::RunHead { chunks, .. } => {
                let end = i + chunks as usize;
                if end <= raw.len() && raw[i + 1..end].iter().all(|u| *u == ChunkUse::RunTail) {
                    uses[i] = raw[i];
                    for u in &mut uses[i + 1..end] {
                        *u = ChunkUse::RunTail;
                    }
                    i = end;
                    continue;
                }
            }
            ChunkUse::Slab { class, .. } if (class as usize) < CLASSES => uses[i] = raw[i],
            _ => {}
        }
        i += 1;
    }
    uses
}

impl<M: PMem> Pool<M> {
    /// Takes `n` contiguous chunks for `new_use`, zeroed and with their table entries persisted.
    fn take_run(&self, n: u64, new_use: ChunkUse) -> Result<u64, AllocError> {
        self.mark_in_use().map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => AllocError::NoSpace { requested: self.mem.len() },
            _ => AllocError::Grow(format!("cannot mark the pool in use: {e}")),
        })?;
        let layout = self.header.layout;
        let mut chunks = self.alloc.chunks.lock();
        let full = AllocError::PoolFull { requested: n * layout.chunk_size, max: layout.max_len() };
        let node = matches!(new_use, ChunkUse::Slab { family: Family::Node, .. });
        // Free chunks, in the file or below the maximum: growth does not change the count.
        let room = chunks.free.len() as u64 + layout.chunk_capacity - chunks.in_file;
        if chunks.reserve && room.saturating_sub(n) < chunks.node + if node { n } else { 0 } {
            return Err(full);
        }
        // File space this call added, faulted in once the lock is released.
        let mut grown = None;
        let start = loop {
            if let Some(start) = find_run(&chunks.free, n) {
                break start;
            }
            let room = layout.chunk_capacity - chunks.in_file;
            if room == 0 {
                return Err(full);
            }
            // Grow by an eighth of the data area (amortised growth), at least what is needed.
            let want = n.max(chunks.in_file / 8).max(1).min(room);
            match self.grow_chunks(chunks.in_file, want) {
                Ok(()) => {}
                Err(AllocError::PoolFull { .. }) => return Err(full),
                Err(e) => return Err(e),
            }
            for i in chunks.in_file..chunks.in_file + want {
                chunks.free.insert(i, Dirty::Zero);
            }
            let from = grown.map_or(layout.chunk_off(chunks.in_file), |(from, _)| from);
            grown = Some((from, layout.chunk_off(chunks.in_file + want)));
            chunks.in_file += want;
        };
        let mut dirty = false;
        for i in start..start + n {
            dirty |= chunks.free.remove(&i) == Some(Dirty::Maybe);
        }
        if node {
            chunks.node += n;
        }
        drop(chunks);
        if let Some((from, to)) = grown {
            self.mem.populate(from, to);
        }
        let (off, len) = (layout.chunk_off(start), n * layout.chunk_size);
        if dirty {
            for w in (off..off + len).step_by(WORD as usize) {
                self.mem.store(w, 0, std::sync::atomic::Ordering::Relaxed);
            }
            self.mem.flush_range(off, len);
            // Stale entries (a run whose creation never finished reads as free but is still on the
            // media) are cleared under the same fence, so that a partly persisted new use can
            // never combine with them into a run that looks whole.
            // Relaxed: this thread just took these chunks from the free set and alone writes their
            // entries; the fence below orders the writes for the media.
            let mut stale = false;
            for i in start..start + n {
                let free = ChunkUse::Free.encode(i, &self.header.uuid);
                if self.mem.load(layout.entry_off(i), std::sync::atomic::Ordering::Relaxed) != free {
                    self.mem.store(layout.entry_off(i), free, std::sync::atomic::Ordering::Relaxed);
                    stale = true;
                }
            }
            if stale {
                self.mem.flush_range(layout.entry_off(start), layout.entry_off(start + n) - layout.entry_off(start));
            }
            // Fence: the zeroes are durable before the table entry names the new use.
            self.mem.fence();
        }
        self.write_uses(start, n, new_use);
        Ok(start)
    }

    /// Persists the table entries of chunks `[start, start + n)`: `first` for the first, and
    /// [`ChunkUse::RunTail`] (or [`ChunkUse::Free`] if `first` is free) for the others.
    fn write_uses(&self, start: u64, n: u64, first: ChunkUse) {
        let layout = &self.header.layout;
        let rest = if first == ChunkUse::Free { ChunkUse::Free } else { ChunkUse::RunTail };
        for i in start..start + n {
            let u = if i == start { first } else { rest };
            // Relaxed: the table is read by other threads only at open and rebuild, which are
            // ordered after this by the chunk lock or by exclusive access to the pool.
            self.mem.store(layout.entry_off(i), u.encode(i, &self.header.uuid), std::sync::atomic::Ordering::Relaxed);
        }
        self.mem.flush_range(layout.entry_off(start), n * WORD);
        // Fence: the new use is durable before any block of it is handed out (or, when freeing,
        // before the chunks can be taken again).
        self.mem.fence();
    }

    /// Returns the run starting at chunk `start` to the free set, persisting its entries free.
    fn free_run(&self, start: u64, n: u64) {
        // A pool that cannot be marked in use is not changed: the chunks stay in use until the
        // next open's rebuild frees them, which loses nothing.
        if self.mark_in_use().is_err() {
            return;
        }
        self.write_uses(start, n, ChunkUse::Free);
        let mut chunks = self.alloc.chunks.lock();
        for i in start..start + n {
            chunks.free.insert(i, Dirty::Maybe);
        }
    }

    /// The use of the chunk holding `off`, with the chunk's index.
    fn use_of(&self, off: u64) -> Option<(u64, ChunkUse)> {
        let layout = &self.header.layout;
        let i = layout.chunk_of(off)?;
        if i >= layout.chunks_in(self.mem.len()) {
            return None;
        }
        // Relaxed: an entry is written before the chunk's blocks are handed out, and a thread
        // asks about an offset it learned through an ordered word. Its check is not recomputed:
        // every entry was checked at open, and this pool writes only valid ones.
        let w = self.mem.load(layout.entry_off(i), std::sync::atomic::Ordering::Relaxed);
        Some((i, ChunkUse::of_entry(w)?))
    }

    /// Allocates a run of chunks for an engine region (a descriptor ring, say) named by `tag`.
    /// The region is zeroed, persisted, and found again after a restart by
    /// [`regions`](Pool::regions).
    pub fn alloc_region(&self, tag: u8, bytes: u64) -> Result<POff, AllocError> {
        let n = bytes.max(1).div_ceil(self.header.layout.chunk_size);
        let chunks = u32::try_from(n)
            .ok()
            .filter(|&c| c <= 0xFF_FFFF)
            .ok_or(AllocError::TooLarge { requested: bytes, limit: 0xFF_FFFF * self.header.layout.chunk_size })?;
        let start = self.take_run(n, ChunkUse::RunHead { kind: RunKind::Region(tag), chunks })?;
        Ok(POff::new(self.header.layout.chunk_off(start)))
    }

    /// The regions with `tag`, as (offset, length in bytes), in pool order.
    pub fn regions(&self, tag: u8) -> Vec<(POff, u64)> {
        let layout = &self.header.layout;
        read_uses(&self.mem, &self.header, layout.chunks_in(self.mem.len()))
            .iter()
            .enumerate()
            .filter_map(|(i, u)| match *u {
                ChunkUse::RunHead { kind: RunKind::Region(t), chunks } if t == tag => {
                    Some((POff::new(layout.chunk_off(i as u64)), chunks as u64 * layout.chunk_size))
                }
                _ => None,
            })
            .collect()
    }

    /// The length of the region with `tag` that starts at `off`, if there is one.
    pub fn region_at(&self, off: POff, tag: u8) -> Option<u64> {
        match self.use_of(off.get())? {
            (i, ChunkUse::RunHead { kind: RunKind::Region(t), chunks })
                if t == tag && self.header.layout.chunk_off(i) == off.get() =>
            {
                Some(chunks as u64 * self.header.layout.chunk_size)
            }
            _ => None,
        }
    }

    /// The size of the node block that starts at `off`, if one does: `off` is the start of a block
    /// of a node slab chunk, as the chunk table says.
    pub fn node_block(&self, off: POff) -> Option<u64> {
        self.slab_block(off.get(), Family::Node).map(|(_, size)| size)
    }

    /// The offset of the record area of the node block that starts at `node` ([`RECORD_BYTES`],
    /// 16-byte aligned, so in one cache line): a node slab chunk of `n` blocks of `size` bytes
    /// keeps block `b`'s at `n * size` (rounded up to a line) `+ b * RECORD_BYTES` from its
    /// start. The area is zero whenever the block is handed out (see [`alloc`](Pool::alloc)).
    ///
    /// # Panics
    /// If `node` is not a node block's start.
    #[inline]
    pub fn record_of(&self, node: u64) -> u64 {
        match self.use_of(node) {
            Some((i, ChunkUse::Slab { family: Family::Node, class })) => self.record_in(i, class, node),
            other => panic!("record_of({node}): not in a node slab chunk, in {other:?}"),
        }
    }

    /// Asks for the line of [`record_of`](Pool::record_of) `node` to be brought into the cache: a
    /// hint, ignored if `node` is not in a node slab chunk.
    #[inline]
    pub fn prefetch_record(&self, node: u64) {
        if let Some((i, ChunkUse::Slab { family: Family::Node, class })) = self.use_of(node) {
            self.mem.prefetch(self.record_in(i, class, node));
        }
    }

    /// [`record_of`](Pool::record_of) the block at `node` of chunk `i`, a node slab of `class`.
    #[inline]
    fn record_in(&self, i: u64, class: u8, node: u64) -> u64 {
        let base = self.header.layout.chunk_off(i);
        let rel = node - base;
        let b = ((rel as u128 * RECIPROCALS[class as usize] as u128) >> 64) as u64;
        debug_assert_eq!(b, rel / CLASS_SIZES[class as usize] as u64);
        debug_assert!(
            rel.is_multiple_of(CLASS_SIZES[class as usize] as u64)
                && b < blocks_in(Family::Node, class, self.header.layout.chunk_size),
            "record_of({node}): not a block's start"
        );
        base + self.alloc.records_at[class as usize] + b * RECORD_BYTES
    }

    /// The class and size of the block of `family` that starts at `off`, if one does: `off` is the
    /// start of a whole block of a slab chunk of that family, as the chunk table says (the bytes
    /// a chunk has beyond its last whole block, record areas among them, are no block).
    fn slab_block(&self, off: u64, family: Family) -> Option<(u8, u64)> {
        match self.use_of(off)? {
            (i, ChunkUse::Slab { family: f, class }) if f == family => {
                let size = CLASS_SIZES[class as usize] as u64;
                let rel = off - self.header.layout.chunk_off(i);
                (rel.is_multiple_of(size) && rel / size < blocks_in(family, class, self.header.layout.chunk_size))
                    .then_some((class, size))
            }
            _ => None,
        }
    }

    /// Frees a region made by [`alloc_region`](Pool::alloc_region).
    ///
    /// # Panics
    /// If `off` is not the start of a region.
    pub fn free_region(&self, off: POff) {
        match self.use_of(off.get()) {
            Some((i, ChunkUse::RunHead { kind: RunKind::Region(_), chunks }))
                if self.header.layout.chunk_off(i) == off.get() =>
            {
                self.free_run(i, chunks as u64)
            }
            other => panic!("free_region({off}): not the start of a region but {other:?}"),
        }
    }

    /// The length of the blob at `off`, as its header word says.
    pub fn blob_len(&self, off: POff) -> u64 {
        // Acquire: a reader that sees the header sees the bytes written before it.
        self.mem.load(off.get(), std::sync::atomic::Ordering::Acquire) & BLOB_LEN
    }

    /// Copies out the blob at `off`, checked (see [`read_blob_into`](Pool::read_blob_into)).
    pub fn read_blob(&self, off: POff) -> Result<Vec<u8>, Damage> {
        let mut buf = Vec::new();
        self.read_blob_into(off, &mut buf)?;
        Ok(buf)
    }

    /// Copies the blob at `off` into `buf`, replacing its contents, and checks it against its
    /// header: [`Damage`] (with `buf` empty) if no blob fits there (`off` unaligned, or its length
    /// reaching past the pool's end) or its bytes fail their check.
    pub fn read_blob_into(&self, off: POff, buf: &mut Vec<u8>) -> Result<(), Damage> {
        buf.clear();
        let at = off.get();
        let damage = |what: String| Err(Damage { what, at });
        if !at.is_multiple_of(WORD) || at.checked_add(WORD).is_none_or(|end| end > self.mem.len()) {
            return damage("a value offset outside the pool".into());
        }
        // Acquire: as in `blob_len`.
        let header = self.mem.load(at, std::sync::atomic::Ordering::Acquire);
        let len = header & BLOB_LEN;
        if len > self.mem.len() - at - WORD {
            return damage(format!("a value of {len} bytes reaching past the pool's end"));
        }
        // A value longer than the largest block is a run of its own: a damaged length is caught
        // here, before it is copied, and a value of a block costs no table lookup.
        if WORD + len > *CLASS_SIZES.last().expect("classes") as u64 {
            let room = self.blob_run(off).map_or(0, |(_, chunks)| chunks * self.header.layout.chunk_size);
            if WORD + len > room {
                return damage(format!("a value of {len} bytes in {room} bytes of blob chunks"));
            }
        }
        buf.resize(len as usize, 0);
        self.mem.read_bytes(at + WORD, buf);
        if header >> 32 != blob_check(value_hash(buf), at, self.salt) {
            buf.clear();
            return damage(format!("a value of {len} bytes that fails its check"));
        }
        Ok(())
    }

    /// Checks that `off` is the start of a blob in use as the chunk table says (a block of a blob
    /// slab, or a run of its own) whose length fits there, and reads it into `buf`, checked (see
    /// [`read_blob_into`](Pool::read_blob_into)).
    pub fn check_blob(&self, off: POff, buf: &mut Vec<u8>) -> Result<(), Damage> {
        let at = off.get();
        let room = match (self.blob_run(off), self.slab_block(at, Family::Blob)) {
            (Some((_, chunks)), _) => chunks * self.header.layout.chunk_size,
            (None, Some((_, size))) => size,
            (None, None) => {
                let what = match self.use_of(at) {
                    Some((_, ChunkUse::Slab { family: Family::Blob, class })) => {
                        format!("a value offset that starts no block of {} bytes", CLASS_SIZES[class as usize])
                    }
                    other => format!("a value offset in a chunk used as {other:?}"),
                };
                return Err(Damage { what, at });
            }
        };
        // The length before the bytes: a damaged one is refused without copying it.
        let len = self.blob_len(off);
        if WORD + len > room {
            return Err(Damage { what: format!("a value of {len} bytes in a block of {room}"), at });
        }
        self.read_blob_into(off, buf)
    }

    /// The largest blob, in bytes.
    pub fn max_blob_len(&self) -> u64 {
        (0xFF_FFFF * self.header.layout.chunk_size - WORD).min(BLOB_LEN)
    }

    /// Rebuilds the volatile allocator state from the offsets recovery found live: node blocks and
    /// blob starts (as returned by [`Local::alloc`] and [`Local::alloc_blob`]). Every other slab
    /// block becomes free; every blob run not live is freed (its table entries persisted free).
    /// Regions are not affected.
    ///
    /// Refuses, changing nothing, an offset that is not an allocated block's start, or one given
    /// twice.
    pub fn rebuild(&mut self, live: impl IntoIterator<Item = POff>) -> Result<RebuildReport, RebuildError> {
        let layout = self.header.layout;
        let uses = read_uses(&self.mem, &self.header, layout.chunks_in(self.mem.len()));
        // Live bitmap per slab chunk; live flag per blob run.
        let mut slab_live: FxHashMap<u64, Vec<u64>> = FxHashMap::default();
        let mut run_live: FxHashMap<u64, bool> = FxHashMap::default();
        for off in live {
            let off = off.get();
            let not_block = |why: String| RebuildError::NotABlock { off, why };
            let i = layout
                .chunk_of(off)
                .filter(|&i| (i as usize) < uses.len())
                .ok_or_else(|| not_block("outside the pool's chunks".into()))?;
            let rel = off - layout.chunk_off(i);
            match uses[i as usize] {
                ChunkUse::Slab { family, class } => {
                    let size = CLASS_SIZES[class as usize] as u64;
                    let n = blocks_in(family, class, layout.chunk_size);
                    if !rel.is_multiple_of(size) || rel / size >= n {
                        return Err(not_block(format!("inside a block of {size} bytes, or a record area")));
                    }
                    let bits = slab_live.entry(i).or_insert_with(|| vec![0; n.div_ceil(64) as usize]);
                    let (word, bit) = ((rel / size / 64) as usize, rel / size % 64);
                    if bits[word] & (1 << bit) != 0 {
                        return Err(RebuildError::DoubleUse { off });
                    }
                    bits[word] |= 1 << bit;
                }
                ChunkUse::RunHead { kind: RunKind::Blob, .. } if rel == 0 => {
                    if run_live.insert(i, true).is_some() {
                        return Err(RebuildError::DoubleUse { off });
                    }
                }
                other => return Err(not_block(format!("in a chunk used as {other:?}"))),
            }
        }
        // Validated: now change state. Caches filled before this rebuild are stale from now on.
        // `rebuild` holds the pool exclusively: a plain count.
        self.alloc.generation += 1;
        for depot in &self.alloc.depots {
            while depot.pop().is_some() {}
        }
        for returns in &self.alloc.returns {
            while returns.pop().is_some() {}
        }
        let mut report = RebuildReport::default();
        for (i, u) in uses.iter().enumerate() {
            let i = i as u64;
            match *u {
                ChunkUse::Slab { family, class } => {
                    let size = CLASS_SIZES[class as usize] as u64;
                    let n = blocks_in(family, class, layout.chunk_size);
                    let Some(bits) = slab_live.get(&i) else {
                        // Nothing live: the whole chunk goes back to the free set, for any use.
                        report.free_blocks += n;
                        report.freed_chunks += 1;
                        self.free_run(i, 1);
                        if family == Family::Node {
                            self.alloc.chunks.get_mut().node -= 1;
                        }
                        continue;
                    };
                    let bits = Some(bits);
                    let mut mag = Vec::with_capacity(MAGAZINE);
                    for b in 0..n {
                        if bits.is_some_and(|bits| bits[(b / 64) as usize] & (1 << (b % 64)) != 0) {
                            report.live_blocks += 1;
                            continue;
                        }
                        report.free_blocks += 1;
                        mag.push(layout.chunk_off(i) + b * size);
                        if mag.len() == MAGAZINE {
                            self.alloc.depots[depot_index(family, class as usize)].push(std::mem::take(&mut mag));
                        }
                    }
                    if !mag.is_empty() {
                        self.alloc.depots[depot_index(family, class as usize)].push(mag);
                    }
                }
                ChunkUse::RunHead { kind: RunKind::Blob, chunks } => {
                    if run_live.contains_key(&i) {
                        report.live_runs += 1;
                    } else {
                        report.freed_runs += 1;
                        self.free_run(i, chunks as u64);
                    }
                }
                _ => {}
            }
        }
        Ok(report)
    }

    /// Calls `f` with the start of every block of every node slab chunk, live or not (recovery's
    /// scan of the node arena).
    pub fn for_each_node_block(&self, mut f: impl FnMut(POff)) {
        let layout = self.header.layout;
        for (i, u) in read_uses(&self.mem, &self.header, layout.chunks_in(self.mem.len())).iter().enumerate() {
            if let ChunkUse::Slab { family: Family::Node, class } = *u {
                let size = CLASS_SIZES[class as usize] as u64;
                for b in 0..blocks_in(Family::Node, class, layout.chunk_size) {
                    f(POff::new(layout.chunk_off(i as u64) + b * size));
                }
            }
        }
    }

    /// Makes sure the file holds `n` free chunks, growing it by exactly the shortfall (its blocks
    /// reserved, see [`PMem::grow`]): so that work that must not fail half done (recovery's
    /// rewrite) finds its room in the file. On failure nothing has changed.
    pub fn reserve_chunks(&self, n: u64) -> Result<(), AllocError> {
        let layout = self.header.layout;
        let mut chunks = self.alloc.chunks.lock();
        let in_file_free = chunks.free.range(..chunks.in_file).count() as u64;
        let want = n.saturating_sub(in_file_free);
        if want == 0 {
            return Ok(());
        }
        if want > layout.chunk_capacity - chunks.in_file {
            return Err(AllocError::PoolFull { requested: want * layout.chunk_size, max: layout.max_len() });
        }
        self.grow_chunks(chunks.in_file, want)?;
        for i in chunks.in_file..chunks.in_file + want {
            chunks.free.insert(i, Dirty::Zero);
        }
        let from = layout.chunk_off(chunks.in_file);
        chunks.in_file += want;
        drop(chunks);
        self.mem.populate(from, layout.chunk_off(layout.chunks_in(self.mem.len())));
        Ok(())
    }

    /// Grows the file from `in_file` chunks by `want` (their blocks reserved, see
    /// [`PMem::grow`]), with the chunk lock held. The new chunks' table entries are written free,
    /// flushed and fenced first: every chunk in the file has a written entry, and a zero one
    /// inside the file is damage. A growth that fails leaves free entries past the end, which
    /// say what is true.
    fn grow_chunks(&self, in_file: u64, want: u64) -> Result<(), AllocError> {
        let layout = self.header.layout;
        for i in in_file..in_file + want {
            // Relaxed: entries past the file's end are read only at open, and by this thread
            // under the chunk lock; the fence below orders them for the media.
            self.mem.store(
                layout.entry_off(i),
                ChunkUse::Free.encode(i, &self.header.uuid),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        self.mem.flush_range(layout.entry_off(in_file), want * WORD);
        // Fence: the entries are durable before the chunks they describe are in the file.
        self.mem.fence();
        match self.mem.grow(layout.chunk_off(in_file + want)) {
            Ok(()) => Ok(()),
            Err(GrowError::AboveMaximum { .. }) => {
                Err(AllocError::PoolFull { requested: want * layout.chunk_size, max: layout.max_len() })
            }
            Err(GrowError::Io(e)) if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
                Err(AllocError::NoSpace { requested: want * layout.chunk_size })
            }
            Err(e) => Err(AllocError::Grow(e.to_string())),
        }
    }

    /// Chunks that `blocks` node blocks of each size (bytes, count) take, whole slabs.
    pub fn chunks_for_nodes(&self, blocks: impl IntoIterator<Item = (u64, u64)>) -> u64 {
        let mut per_class = [0u64; CLASSES];
        for (bytes, count) in blocks {
            if let Some(class) = class_for(bytes) {
                per_class[class] += count;
            }
        }
        let chunk = self.header.layout.chunk_size;
        per_class
            .iter()
            .enumerate()
            .map(|(class, &count)| count.div_ceil(blocks_in(Family::Node, class as u8, chunk)))
            .sum()
    }

    /// Whether a new use of chunks must leave as many free as node slabs are in use (else it is
    /// refused with [`AllocError::PoolFull`]): on, except while recovery writes the nodes anew
    /// (it uses that room, and frees the old nodes after).
    pub(crate) fn keep_recovery_room(&self, on: bool) {
        self.alloc.chunks.lock().reserve = on;
    }

    /// The ledger of blocks handed out and given back (see [`Ledger`]); `None` in a release
    /// build, which keeps none.
    pub fn ledger(&self) -> Option<Ledger> {
        #[cfg(debug_assertions)]
        {
            // Relaxed: counts read once the threads that moved them are done.
            let [taken, returned] = &*self.alloc.ledger;
            Some(Ledger {
                taken: taken.load(std::sync::atomic::Ordering::Relaxed),
                returned: returned.load(std::sync::atomic::Ordering::Relaxed),
            })
        }
        #[cfg(not(debug_assertions))]
        None
    }

    /// Moves the ledger: a block handed out (0) or given back (1).
    #[inline]
    fn count(&self, _which: usize) {
        // Relaxed: a count, read once the threads that moved it are done.
        #[cfg(debug_assertions)]
        self.alloc.ledger[_which].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Chunks by use.
    pub fn chunk_counts(&self) -> ChunkCounts {
        let layout = &self.header.layout;
        let mut c = ChunkCounts::default();
        for u in read_uses(&self.mem, &self.header, layout.chunks_in(self.mem.len())) {
            match u {
                ChunkUse::Free => c.free += 1,
                ChunkUse::Slab { family: Family::Node, .. } => c.node += 1,
                ChunkUse::Slab { family: Family::Blob, .. } => c.blob += 1,
                ChunkUse::RunHead { .. } | ChunkUse::RunTail => c.runs += 1,
            }
        }
        c
    }
}

/// The first run of `n` consecutive chunk indices in `free`.
fn find_run(free: &BTreeMap<u64, Dirty>, n: u64) -> Option<u64> {
    let (mut start, mut len, mut prev) = (0, 0, None::<u64>);
    for &i in free.keys() {
        if prev.is_some_and(|p| p + 1 == i) {
            len += 1;
        } else {
            (start, len) = (i, 1);
        }
        if len == n {
            return Some(start);
        }
        prev = Some(i);
    }
    None
}

/// A thread's cache of free blocks: one magazine per (family, class). Owned, so that a
/// long-lived per-thread structure can keep one; give it back with
/// [`Pool::release_cache`](super::Pool::release_cache) (or use [`Local`], which does).
/// A cache remembers the allocator (and the rebuild of it) its blocks came from: used with another
/// pool, or after a rebuild, its blocks are dropped rather than handed out twice.
#[derive(Debug, Default)]
pub struct AllocCache {
    mags: Vec<Vec<u64>>,
    /// (allocator id, generation) the blocks belong to; (0, 0) for none yet.
    owner: (u64, u64),
}

impl AllocCache {
    /// An empty cache.
    pub fn new() -> AllocCache {
        AllocCache { mags: vec![Vec::new(); FAMILIES * CLASSES], owner: (0, 0) }
    }
}

impl<M: PMem> Pool<M> {
    /// Makes `cache` this allocator's current one, dropping blocks it holds from another pool or
    /// from before a rebuild (the rebuild already counted them free).
    fn bind(&self, cache: &mut AllocCache) {
        let owner = (self.alloc.id, self.alloc.generation);
        if cache.owner != owner {
            *cache = AllocCache::new();
            cache.owner = owner;
        }
    }

    /// Allocates a node block of at least `size` bytes (at most [`MAX_CLASS_SIZE`]) through
    /// `cache`. Its bytes are whatever its last use left, or zero; its record area is zero,
    /// stored and not flushed (the engine's `Core::retire_node` says why that is enough). No
    /// flush, no fence.
    pub fn alloc(&self, cache: &mut AllocCache, size: u64) -> Result<POff, AllocError> {
        let class = class_for(size).ok_or(AllocError::TooLarge { requested: size, limit: MAX_CLASS_SIZE })?;
        let off = self.alloc_class(cache, Family::Node, class)?;
        let i = self.header.layout.chunk_of(off.get()).expect("a slab block is in a chunk");
        let record = self.record_in(i, class as u8, off.get());
        for w in (0..RECORD_BYTES).step_by(WORD as usize) {
            // Relaxed: the block is unpublished; what publishes it (a link's Release CAS) orders
            // these stores before it.
            self.mem.store(record + w, 0, std::sync::atomic::Ordering::Relaxed);
        }
        self.count(0);
        Ok(off)
    }

    fn alloc_class(&self, cache: &mut AllocCache, family: Family, class: usize) -> Result<POff, AllocError> {
        let idx = depot_index(family, class);
        self.bind(cache);
        if let Some(off) = cache.mags[idx].pop() {
            return Ok(POff::new(off));
        }
        while cache.mags[idx].len() < MAGAZINE {
            match self.alloc.returns[idx].pop() {
                Some(off) => cache.mags[idx].push(off),
                None => break,
            }
        }
        if cache.mags[idx].is_empty() {
            if let Some(mag) = self.alloc.depots[idx].pop() {
                cache.mags[idx] = mag;
            } else {
                let layout = self.header.layout;
                let start = self.take_run(1, ChunkUse::Slab { family, class: class as u8 })?;
                let size = CLASS_SIZES[class] as u64;
                let base = layout.chunk_off(start);
                // Blocks `lo..hi` in reverse, so that pops hand them out in address order.
                let magazine = |lo: u64, hi: u64| (lo..hi).rev().map(|b| base + b * size).collect::<Vec<u64>>();
                // The lowest blocks (1 to MAGAZINE of them) to this cache, whole magazines of the
                // others to the (first-in, first-out) depot in address order; each magazine is
                // built once, so a new slab costs O(blocks).
                let n = blocks_in(family, class as u8, layout.chunk_size);
                let first = n - (n - 1) / MAGAZINE as u64 * MAGAZINE as u64;
                for lo in (first..n).step_by(MAGAZINE) {
                    self.alloc.depots[idx].push(magazine(lo, lo + MAGAZINE as u64));
                }
                cache.mags[idx] = magazine(0, first);
            }
        }
        Ok(POff::new(cache.mags[idx].pop().expect("a refilled magazine is not empty")))
    }

    /// Frees a node block made by [`alloc`](Pool::alloc) into `cache`. The caller guarantees that
    /// no thread can reach it any more.
    ///
    /// # Panics
    /// If `off` is not a node block's start.
    pub fn free(&self, cache: &mut AllocCache, off: POff) {
        let idx = self.block_index(off, Family::Node);
        self.cache_free(cache, idx, off);
        self.count(1);
    }

    /// Puts a free block into `cache`, passing a magazine to the depot when the cache holds two.
    fn cache_free(&self, cache: &mut AllocCache, idx: usize, off: POff) {
        self.bind(cache);
        cache.mags[idx].push(off.get());
        if cache.mags[idx].len() >= 2 * MAGAZINE {
            let full = cache.mags[idx].split_off(MAGAZINE);
            self.alloc.depots[idx].push(full);
        }
    }

    /// Frees a node block from a thread that has no cache at hand (a deferred free run by the
    /// epoch collector, say). The block is reused by the next thread that runs short.
    ///
    /// # Panics
    /// If `off` is not a node block's start.
    pub fn free_shared(&self, off: POff) {
        let idx = self.block_index(off, Family::Node);
        self.alloc.returns[idx].push(off.get());
        self.count(1);
    }

    /// The depot index of the block at `off`, checked against the chunk table.
    fn block_index(&self, off: POff, family: Family) -> usize {
        match self.slab_block(off.get(), family) {
            Some((class, _)) => depot_index(family, class as usize),
            None => panic!("free({off}): not the start of a whole {family:?} block, in {:?}", self.use_of(off.get())),
        }
    }

    /// Writes `data` as a new blob (its header word: length and check; then its bytes) and
    /// flushes its lines, without a fence: the caller's next fence makes it durable, before
    /// whatever publishes it.
    pub fn alloc_blob(&self, cache: &mut AllocCache, data: &[u8]) -> Result<POff, AllocError> {
        let off = self.alloc_blob_unflushed(cache, data, value_hash(data))?;
        self.mem.flush_range(off.get(), WORD + data.len() as u64);
        Ok(off)
    }

    /// Writes `data`, whose [`value_hash`] is `hash`, as a new blob, like
    /// [`alloc_blob`](Pool::alloc_blob), but leaves flushing it to the caller: the thread whose
    /// fence is to make it durable must flush it itself.
    pub(crate) fn alloc_blob_unflushed(
        &self,
        cache: &mut AllocCache,
        data: &[u8],
        hash: u64,
    ) -> Result<POff, AllocError> {
        let total = WORD + data.len() as u64;
        let off = match class_for(total) {
            Some(class) => self.alloc_class(cache, Family::Blob, class)?,
            None => {
                let max = self.max_blob_len();
                if data.len() as u64 > max {
                    return Err(AllocError::TooLarge { requested: data.len() as u64, limit: max });
                }
                let n = total.div_ceil(self.header.layout.chunk_size);
                let start = self.take_run(n, ChunkUse::RunHead { kind: RunKind::Blob, chunks: n as u32 })?;
                POff::new(self.header.layout.chunk_off(start))
            }
        };
        self.count(0);
        self.mem.write_bytes(off.get() + WORD, data);
        // Release: a reader that sees the header (Acquire in `blob_len`) sees the bytes.
        let check = blob_check(hash, off.get(), self.salt);
        self.mem.store(off.get(), data.len() as u64 | check << 32, std::sync::atomic::Ordering::Release);
        Ok(off)
    }

    /// The bytes of the pool that the blob at `off`, one this pool handed out, holds: its run of
    /// whole chunks (a value longer than the largest block class), or its slab block (0 if the
    /// chunk holds neither). One load of the chunk's table entry, and no check that a block
    /// starts at `off` (a writer asks for each value it replaced).
    pub(crate) fn blob_footprint(&self, off: POff) -> u64 {
        match self.use_of(off.get()) {
            Some((_, ChunkUse::Slab { family: Family::Blob, class })) => CLASS_SIZES[class as usize] as u64,
            Some((_, ChunkUse::RunHead { kind: RunKind::Blob, chunks })) => {
                chunks as u64 * self.header.layout.chunk_size
            }
            _ => 0,
        }
    }

    /// If the blob at `off` is a run of whole chunks: its first chunk and the run's length in
    /// chunks.
    fn blob_run(&self, off: POff) -> Option<(u64, u64)> {
        let layout = &self.header.layout;
        let i = layout.chunk_of(off.get())?;
        // A run starts where its first chunk does; a slab block rarely does, and is told apart
        // without loading the chunk's entry.
        if layout.chunk_off(i) != off.get() {
            return None;
        }
        match self.use_of(off.get()) {
            Some((_, ChunkUse::RunHead { kind: RunKind::Blob, chunks })) => Some((i, chunks as u64)),
            _ => None,
        }
    }

    /// Frees a blob made by [`alloc_blob`](Pool::alloc_blob).
    ///
    /// # Panics
    /// If `off` is not a blob's start.
    pub fn free_blob(&self, cache: &mut AllocCache, off: POff) {
        self.count(1);
        match self.blob_run(off) {
            Some((i, chunks)) => self.free_run(i, chunks),
            None => {
                let idx = self.block_index(off, Family::Blob);
                self.cache_free(cache, idx, off);
            }
        }
    }

    /// Returns a cache's blocks to the shared depot.
    pub fn release_cache(&self, cache: &mut AllocCache) {
        self.bind(cache);
        for (idx, mag) in cache.mags.iter_mut().enumerate() {
            if !mag.is_empty() {
                self.alloc.depots[idx].push(std::mem::take(mag));
            }
        }
    }
}

/// A thread's allocation handle borrowing its pool: an [`AllocCache`] that returns its blocks to
/// the shared depot when dropped.
#[derive(Debug)]
pub struct Local<'p, M: PMem> {
    pool: &'p Pool<M>,
    cache: AllocCache,
}

impl<'p, M: PMem> Local<'p, M> {
    pub(crate) fn new(pool: &'p Pool<M>) -> Self {
        Local { pool, cache: AllocCache::new() }
    }

    /// See [`Pool::alloc`].
    pub fn alloc(&mut self, size: u64) -> Result<POff, AllocError> {
        self.pool.alloc(&mut self.cache, size)
    }

    /// See [`Pool::free`].
    pub fn free(&mut self, off: POff) {
        self.pool.free(&mut self.cache, off)
    }

    /// See [`Pool::alloc_blob`].
    pub fn alloc_blob(&mut self, data: &[u8]) -> Result<POff, AllocError> {
        self.pool.alloc_blob(&mut self.cache, data)
    }

    /// See [`Pool::free_blob`].
    pub fn free_blob(&mut self, off: POff) {
        self.pool.free_blob(&mut self.cache, off)
    }
}

impl<M: PMem> Drop for Local<'_, M> {
    fn drop(&mut self) {
        self.pool.release_cache(&mut self.cache);
    }
}

const _: () = assert!(CACHE_LINE.is_multiple_of(16) && MAX_CLASS_SIZE * 4 <= super::header::MIN_CHUNK);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_little_padding() {
        assert_eq!(class_for(0), Some(0));
        assert_eq!(class_for(16), Some(0));
        assert_eq!(class_for(17), Some(1));
        assert_eq!(class_for(MAX_CLASS_SIZE), Some(CLASSES - 1));
        assert_eq!(class_for(MAX_CLASS_SIZE + 1), None);
        for w in CLASS_SIZES.windows(2) {
            assert!(w[0] % 16 == 0 && w[1] > w[0]);
            assert!(w[1] - w[0] <= 16.max(w[0] / 3), "{w:?}");
            if w[0] >= 64 {
                assert!((w[1] - w[0] - 1) * 4 < w[1], "padding of a {}-byte request: {w:?}", w[0] + 1);
            }
        }
    }

    #[test]
    fn a_new_slab_hands_out_each_block_once_in_address_order() {
        use crate::mem::SimMem;
        use crate::pool::PoolConfig;
        let config =
            PoolConfig { initial_size: 1 << 20, max_size: 4 << 20, chunk_size: 64 << 10, ..PoolConfig::default() };
        let pool = Pool::create_in(SimMem::new(0, 4 << 20), &config).unwrap();
        // 48-byte blocks and their 16-byte record areas: 1024 to a chunk, a whole magazine to the
        // cache and 31 to the depot; 64-byte blocks: 819, 19 to the cache and 25 magazines to the
        // depot.
        for (size, blocks, in_cache) in [(48, 1024, MAGAZINE), (64, 819, 19)] {
            let depot = &pool.alloc.depots[depot_index(Family::Node, class_for(size).unwrap())];
            let mut cache = AllocCache::new();
            let mut got = vec![pool.alloc(&mut cache, size).unwrap().get()];
            let magazines = (blocks - in_cache) / MAGAZINE;
            assert_eq!(depot.len(), magazines);
            while got.len() < blocks {
                got.push(pool.alloc(&mut cache, size).unwrap().get());
                // The cache takes a magazine from the depot only once its own is empty.
                let taken = got.len().saturating_sub(in_cache).div_ceil(MAGAZINE);
                assert_eq!(depot.len(), magazines - taken, "{size}-byte blocks, after {}", got.len());
            }
            assert_eq!(got, (0..blocks as u64).map(|b| got[0] + size * b).collect::<Vec<_>>());
            assert!(depot.is_empty());
            // The record areas follow the last block, one per block in the same order, and end
            // within the chunk.
            let records: Vec<u64> = got.iter().map(|&b| pool.record_of(b)).collect();
            let first = got[0] + records_start(blocks as u64, size);
            assert_eq!(records, (0..blocks as u64).map(|b| first + RECORD_BYTES * b).collect::<Vec<_>>());
            assert!(records[blocks - 1] + RECORD_BYTES - got[0] <= 64 << 10);
        }
    }

    #[test]
    fn find_run_finds_the_first_long_enough_run() {
        let free: BTreeMap<u64, Dirty> = [1, 2, 4, 5, 6, 9].into_iter().map(|i| (i, Dirty::Zero)).collect();
        assert_eq!(find_run(&free, 1), Some(1));
        assert_eq!(find_run(&free, 2), Some(1));
        assert_eq!(find_run(&free, 3), Some(4));
        assert_eq!(find_run(&free, 4), None);
    }
}

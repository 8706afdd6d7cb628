//! The node: the four words every structure's nodes start with, and the node's record.
//!
//! ```text
//! +0   key     the key's low word (never changes once the node is published)
//! +8   link    the structure's first link (the list's and the hash map's `next`, the
//!              skiplist's `next[0]`, the MDList's `adopt`): the word a walk reads beside the
//!              key, in the same line
//! +16  info    the packed info word (see `info`): which op last took the node, or FINAL
//! +24  value   the value the node was created with, or the value of its record
//! +32  ...     the key's high word (two-word keys only), then the structure's other words
//! ```
//!
//! and, in the block's record area, apart from the node ([`Pool::record_of`]):
//!
//! ```text
//! +0   norm    its record: 0 (none), or epoch << 32 | structure << 8 | present
//! +8   check   for a record: the check word of key, value and norm (a torn or stale record
//!              fails it)
//! ```
//!
//! A chain's walk (the list's, a hash map bucket's, the skiplist's level 0) reads a node's key and
//! its first link and nothing else until it reaches its target (and the key's high word, for
//! two-word keys), and the MDList's descent reads the key and `adopt` of each node it passes. So
//! the two share the node's first 16 bytes: nodes start 16-byte aligned, so they are always in one
//! cache line.
//!
//! A walk's time goes in loading those lines one after another, so it is faster the more nodes
//! fit in the caches: the words only checkpoint rounds, recovery and a removal's question "does
//! the node hold a record" read (norm and check) live in the record area, which makes a chain
//! node 32 bytes (two to a line) instead of 48.
//!
//! A node of a structure of two-word keys ([`KeyWidth::U128`](crate::key::KeyWidth)) keeps the
//! key's high word at [`KEY_HI`] (+32), before the structure's other words, which move up a word.
//! Nodes of one-word keys have no such word. The key's encoding orders it (see [`key`](crate::key)),
//! so the structures compare `u128`s.
//!
//! Values are never written into a node by a transaction: a transaction's values live in its
//! descriptor. A node's **record** (its value word, and the norm and check words of its record
//! area) is written only by checkpoint rounds (one at a time) and by recovery (alone), and zeroed
//! when its block is handed out (`Pool::alloc`): a valid record (its norm word names the epoch
//! in force and its check word holds) says the key was present with that value when it was
//! written; a zero norm word says nothing.

use std::sync::atomic::Ordering;

use super::info::Info;
use crate::error::AllocError;
use crate::hash::check_words;
use crate::mem::{CACHE_LINE, PMem, WORD};
#[cfg(test)]
use crate::pool::POff;
use crate::pool::{AllocCache, Pool, RECORD_BYTES};

/// Offset of a node's key.
pub(crate) const KEY: u64 = 0;
/// Offset of a node's first link, beside its key.
pub(crate) const LINK: u64 = 8;
/// Offset of a node's info word.
pub(crate) const INFO: u64 = 16;
/// Offset of a node's value.
pub(crate) const VALUE: u64 = 24;
/// Offset of the key's high word in a node of a structure of two-word keys.
pub(crate) const KEY_HI: u64 = VALUE + WORD;
/// Offset of the norm word in a node's record area.
const NORM: u64 = 0;
/// Offset of the check word in a node's record area.
const CHECK: u64 = 8;

/// Bytes of the common header of a node of two-word keys if `wide`: the four words above, and the
/// key's high word. A record's words in the node (key and value) are flushed from the node's
/// start to here; the structure's other words follow.
pub(crate) const fn header_bytes(wide: bool) -> u64 {
    if wide { KEY_HI + WORD } else { KEY_HI }
}

/// The key of `node`, of a structure of two-word keys if `wide`.
#[inline]
pub(crate) fn load_key<M: PMem>(mem: &M, node: u64, wide: bool) -> u128 {
    // Relaxed: a node's key never changes after it was published.
    let lo = mem.load(node + KEY, Ordering::Relaxed) as u128;
    if wide { (mem.load(node + KEY_HI, Ordering::Relaxed) as u128) << 64 | lo } else { lo }
}

/// Writes the key of a new (unpublished) node.
pub(crate) fn store_key<M: PMem>(mem: &M, node: u64, key: u128, wide: bool) {
    debug_assert!(wide || key >> 64 == 0, "a two-word key in a structure of one-word keys");
    // Relaxed: the node is unpublished; the CAS that links it (Release) publishes the key.
    mem.store(node + KEY, key as u64, Ordering::Relaxed);
    if wide {
        mem.store(node + KEY_HI, (key >> 64) as u64, Ordering::Relaxed);
    }
}

/// The norm word of a node normalised in `epoch` for structure `slot`.
fn norm_word(epoch: u64, slot: u8, present: bool) -> u64 {
    (epoch & 0xFFFF_FFFF) << 32 | (slot as u64) << 8 | present as u64
}

/// The check word of a record.
fn norm_check(key: u128, value: u64, norm: u64) -> u64 {
    let hi = (key >> 64) as u64;
    check_words([key as u64, value, norm].into_iter().chain((hi != 0).then_some(hi)))
}

/// Makes the record of `node` (key `key`, of two words if `wide`, in structure `slot`) say
/// `state` in `epoch`: the value, the norm word and its check word for a present key; a zero
/// norm word for an absent one. Returns whether it changed anything (the caller flushes it then).
/// Only checkpoint rounds (one at a time) and recovery (alone) write records.
pub(crate) fn write_record<M: PMem>(
    pool: &Pool<M>,
    node: u64,
    key: u128,
    wide: bool,
    slot: u8,
    epoch: u64,
    state: Option<u64>,
) -> bool {
    debug_assert!(wide || key >> 64 == 0);
    let (mem, rec) = (pool.mem(), pool.record_of(node));
    // Relaxed (the loads): only the caller writes records.
    match state {
        Some(value) => {
            let norm = norm_word(epoch, slot, true);
            let check = norm_check(key, value, norm);
            let same = mem.load(node + VALUE, Ordering::Relaxed) == value
                && mem.load(rec + NORM, Ordering::Relaxed) == norm
                && mem.load(rec + CHECK, Ordering::Relaxed) == check;
            if same {
                return false;
            }
            // Release: a reader that reads this value through an older FINAL word of the node
            // also sees the caches the round filled before (see `protocol::before_of`).
            mem.store(node + VALUE, value, Ordering::Release);
            // Relaxed: published by the caller's CAS of the info word (or recovery's fence).
            mem.store(rec + NORM, norm, Ordering::Relaxed);
            mem.store(rec + CHECK, check, Ordering::Relaxed);
            true
        }
        None if mem.load(rec + NORM, Ordering::Relaxed) == 0 => false,
        None => {
            // Relaxed: as above.
            mem.store(rec + NORM, 0, Ordering::Relaxed);
            true
        }
    }
}

/// Whether the node block at `node` holds a record (its norm word is not 0). Relaxed: the
/// caller says why the record's last write is visible to it.
pub(crate) fn has_record<M: PMem>(pool: &Pool<M>, node: u64) -> bool {
    pool.mem().load(pool.record_of(node) + NORM, Ordering::Relaxed) != 0
}

/// Flushes the records of `nodes` (each a node and whether its keys are two words), which it
/// sorts: each record's words in the node (from its start to [`header_bytes`]) and its record
/// area, every line once. Returns the lines flushed.
///
/// Sorted, the nodes' lines come in order, and so do their record areas' (a record area lies
/// in its node's chunk, in block order), so a line several records share (two 32-byte nodes, or
/// the record areas of four blocks) is the one flushed last in its sequence.
pub(crate) fn flush_records<M: PMem>(pool: &Pool<M>, nodes: &mut [(u64, bool)]) -> u64 {
    nodes.sort_unstable();
    let mem = pool.mem();
    let mut lines = 0;
    let mut flush = |from: u64, len: u64, last: &mut Option<u64>| {
        let mut line = from & !(CACHE_LINE - 1);
        while line < from + len {
            if *last != Some(line) {
                mem.flush(line);
                lines += 1;
                *last = Some(line);
            }
            line += CACHE_LINE;
        }
    };
    let (mut node_line, mut record_line) = (None, None);
    for &(node, wide) in nodes.iter() {
        flush(node, header_bytes(wide), &mut node_line);
        flush(pool.record_of(node), RECORD_BYTES, &mut record_line);
    }
    lines
}

/// A record read back: the structure it is in, its key, and the state it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) slot: u8,
    pub(crate) key: u128,
    pub(crate) state: Option<u64>,
}

/// What a node block holds, as far as records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// No record of `epoch`: none was written there in it (its norm word is 0, or names another
    /// epoch).
    Nothing,
    /// A valid record.
    Record(Record),
    /// A norm word of the epoch whose record does not hold: its structure is not one
    /// (`key: None`), or its check word fails (the key as it reads). Only a crash in the middle
    /// of a checkpoint round's write of the record makes one, and then a descriptor above the
    /// checkpoint txid writes the key; anything else is damage.
    Broken { slot: u8, key: Option<u128> },
}

/// The record of the block at `node` in `epoch`, with `wide_of` saying for a structure slot
/// whether it has two-word keys (`None`: no such structure). Recovery alone reads records this
/// way.
pub(crate) fn read_record<M: PMem>(
    pool: &Pool<M>,
    node: u64,
    epoch: u64,
    wide_of: impl Fn(u8) -> Option<bool>,
) -> Read {
    let (mem, rec) = (pool.mem(), pool.record_of(node));
    // Relaxed (here and below): recovery runs alone.
    let norm = mem.load(rec + NORM, Ordering::Relaxed);
    if norm == 0 || norm >> 32 != epoch & 0xFFFF_FFFF {
        return Read::Nothing;
    }
    let slot = (norm >> 8) as u8;
    let Some(wide) = wide_of(slot) else { return Read::Broken { slot, key: None } };
    let key = load_key(mem, node, wide);
    let value = mem.load(node + VALUE, Ordering::Relaxed);
    if mem.load(rec + CHECK, Ordering::Relaxed) != norm_check(key, value, norm) {
        return Read::Broken { slot, key: Some(key) };
    }
    Read::Record(Record { slot, key, state: (norm & 1 != 0).then_some(value) })
}

/// Writes the common header of a fresh node of recovery's: `key` present with `value`, a FINAL
/// info word, and the record (value, norm word, check word) that the next recovery's arena scan
/// trusts. The caller links it, flushes it and fences.
pub(crate) fn write_normalised<M: PMem>(
    pool: &Pool<M>,
    node: u64,
    key: u128,
    wide: bool,
    value: u64,
    slot: u8,
    epoch: u64,
) {
    let mem = pool.mem();
    store_key(mem, node, key, wide);
    // Relaxed: recovery runs alone; its fence orders the node before the epoch commits.
    mem.store(node + INFO, Info::final_state(node, true, epoch).0, Ordering::Relaxed);
    write_record(pool, node, key, wide, slot, epoch, Some(value));
}

/// Allocates a structure's head sentinel of `bytes` bytes: zeroed, FINAL absent, with `words`
/// stored after that, persisted before the root entry can name it.
pub(crate) fn create_head<M: PMem>(pool: &Pool<M>, bytes: u64, words: &[(u64, u64)]) -> Result<u64, AllocError> {
    let mut cache = AllocCache::new();
    let head = pool.alloc(&mut cache, bytes)?.get();
    pool.release_cache(&mut cache);
    let mem = pool.mem();
    // Relaxed: the head is unpublished; the fence below and the root entry's publish it.
    for w in (0..bytes).step_by(8) {
        mem.store(head + w, 0, Ordering::Relaxed);
    }
    mem.store(head + INFO, Info::final_state(head, false, 0).0, Ordering::Relaxed);
    for &(off, val) in words {
        mem.store(head + off, val, Ordering::Relaxed);
    }
    mem.flush_range(head, bytes);
    // Its record area too (zeroed by `alloc`): a block may hold an older record until then.
    mem.flush_range(pool.record_of(head), RECORD_BYTES);
    // Fence: the head is durable before the root entry names it.
    mem.fence();
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::{Counting, MemCounts, SimMem};
    use crate::pool::PoolConfig;

    /// Pools of 4 MiB at most, in chunks of 64 KiB.
    fn config() -> PoolConfig {
        PoolConfig { initial_size: 1 << 20, max_size: 4 << 20, chunk_size: 64 << 10, ..PoolConfig::default() }
    }

    fn pool() -> Pool<Counting<SimMem>> {
        Pool::create_in(Counting::new(SimMem::new(0, 4 << 20)), &config()).unwrap()
    }

    #[test]
    fn records_that_share_lines_flush_each_line_once() {
        let pool = pool();
        let mut cache = AllocCache::new();
        // Four 32-byte nodes of a new slab, in address order: two lines of nodes, and their four
        // record areas in one line.
        let nodes: Vec<u64> = (0..4).map(|_| pool.alloc(&mut cache, header_bytes(false)).unwrap().get()).collect();
        assert!(nodes.windows(2).all(|w| w[1] == w[0] + 32) && nodes[0].is_multiple_of(CACHE_LINE));
        let mut round =
            vec![(nodes[3], false), (nodes[0], false), (nodes[2], false), (nodes[1], false), (nodes[0], false)];
        let before = MemCounts::current();
        assert_eq!(flush_records(&pool, &mut round), 3);
        assert_eq!((MemCounts::current() - before).flushes, 3);
    }

    #[test]
    fn a_head_made_in_a_block_that_held_a_record_persists_its_record_area_zero() {
        let pool = Pool::create_in(SimMem::new(0, 4 << 20), &config()).unwrap();
        let mut cache = AllocCache::new();
        // A record of key 0 with value 0, durable: what a head's own words would read as.
        let node = pool.alloc(&mut cache, header_bytes(false)).unwrap().get();
        pool.release_cache(&mut cache);
        store_key(pool.mem(), node, 0, false);
        write_record(&pool, node, 0, false, 0, 1, Some(0));
        flush_records(&pool, &mut [(node, false)]);
        pool.mem().fence();
        let rec = pool.record_of(node) as usize;
        assert_ne!(pool.mem().persisted_bytes()[rec..rec + 16], [0; 16]);
        pool.free_shared(POff::new(node));
        let head = create_head(&pool, header_bytes(false), &[]).unwrap();
        assert_eq!(head, node, "the head takes the block given back");
        assert_eq!(pool.mem().persisted_bytes()[rec..rec + 16], [0; 16], "the head's record area is durable");
    }

    #[test]
    fn a_block_is_handed_out_again_with_its_record_area_zero() {
        let pool = pool();
        let mut cache = AllocCache::new();
        let node = pool.alloc(&mut cache, header_bytes(false)).unwrap().get();
        store_key(pool.mem(), node, 7, false);
        write_record(&pool, node, 7, false, 0, 1, Some(9));
        assert!(has_record(&pool, node));
        assert_eq!(
            read_record(&pool, node, 1, |_| Some(false)),
            Read::Record(Record { slot: 0, key: 7, state: Some(9) })
        );
        pool.free(&mut cache, POff::new(node));
        assert_eq!(
            pool.alloc(&mut cache, header_bytes(false)).unwrap().get(),
            node,
            "the cache hands back its last block"
        );
        assert!(!has_record(&pool, node));
        assert_eq!(read_record(&pool, node, 1, |_| Some(false)), Read::Nothing);
    }
}

//! The linked structures, and the one way every structure executes an operation.
//!
//! Every node starts with the same five words, so that the engine and recovery can read any node:
//!
//! ```text
//! +0   key
//! +8   info    the packed info word (see tx::info)
//! +16  value   the value the node was created with, or the value of its record
//! +24  norm    its record: 0 (none), or epoch << 32 | structure << 8 | present, written by
//!              recovery and by checkpoint rounds (see `tx::checkpoint`)
//! +32  check   for a record: a checksum of key, value and norm (torn or stale records fail
//!              it)
//! +40  ...     the structure's links
//! ```
//!
//! A node of a structure of two-word keys ([`KeyWidth::U128`](crate::key::KeyWidth)) keeps the
//! key's high word at [`KEY_HI`] (+48): after the list's and the hash map's `next`, and after the
//! skiplist's level-0 `next` (the skiplist's other words move up by one). Nodes of one-word keys
//! have no such word. The key's encoding orders it (see [`key`](crate::key)), so the structures
//! compare `u128`s.
//!
//! Values are never written into a node by a transaction: a transaction's values live in its
//! descriptor until recovery normalises the node.

pub mod hashmap;
pub mod list;
pub mod mdlist;
pub mod skiplist;

use std::sync::atomic::Ordering;

use crossbeam_epoch::Guard;

use crate::mem::PMem;
use crate::tx::descriptor::{Desc, NO_NODE, StoredOp, TxStatus, check_words};
use crate::tx::info::Info;
use crate::tx::{Handle, OpKind, Step, write_cache};

/// Offset of a node's key.
pub const KEY: u64 = 0;
/// Offset of a node's info word.
pub const INFO: u64 = 8;
/// Offset of a node's value.
pub const VALUE: u64 = 16;
/// Offset of a node's normalisation word.
pub const NORM: u64 = 24;
/// Offset of a node's normalisation checksum.
pub const CHECK: u64 = 32;
/// Offset of a node's first structure-specific word.
pub const LINKS: u64 = 40;
/// Offset of the key's high word in a node of a structure of two-word keys.
pub const KEY_HI: u64 = LINKS + 8;
/// Bit 0 of a `next` word (a chain's, a skiplist level's): its node is being removed (Harris's
/// deletion mark).
pub(crate) const MARK: u64 = 1;

/// splitmix64's finaliser: a well-spread 64-bit hash of a word.
pub(crate) fn mix64(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A well-spread 64-bit hash of a key (bucket choice, tower heights): of both words, and for a
/// one-word key the same as [`mix64`] of it.
pub(crate) fn mix_key(key: u128) -> u64 {
    let (lo, hi) = (key as u64, (key >> 64) as u64);
    if hi == 0 { mix64(lo) } else { mix64(lo ^ mix64(hi)) }
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

/// Hands an unlinked node to the epoch collector, which frees it once no thread can still be
/// reading it.
pub(crate) fn retire<M: PMem + 'static>(h: &Handle<M>, node: u64, guard: &Guard) {
    let deferred = std::sync::Arc::clone(&h.inner.deferred);
    guard.defer(move || deferred.frees.push(node));
}

/// The norm word of a node normalised in `epoch` for structure `slot`.
pub(crate) fn norm_word(epoch: u64, slot: u8, present: bool) -> u64 {
    (epoch & 0xFFFF_FFFF) << 32 | (slot as u64) << 8 | present as u64
}

/// Makes the record of `node` (key `key`, of two words if `wide`, in structure `slot`) say
/// `state` in `epoch`: the value, the norm word and its checksum for a present key; a zero norm
/// word for an absent one. Returns whether it changed anything (the caller flushes it then).
/// Only checkpoint rounds (one at a time) and recovery (alone) write records.
pub(crate) fn write_record<M: PMem>(
    mem: &M,
    node: u64,
    key: u128,
    wide: bool,
    slot: u8,
    epoch: u64,
    state: Option<u64>,
) -> bool {
    debug_assert!(wide || key >> 64 == 0);
    // Relaxed (the loads): only the caller writes records.
    match state {
        Some(value) => {
            let norm = norm_word(epoch, slot, true);
            let check = norm_check(key, value, norm);
            let same = mem.load(node + VALUE, Ordering::Relaxed) == value
                && mem.load(node + NORM, Ordering::Relaxed) == norm
                && mem.load(node + CHECK, Ordering::Relaxed) == check;
            if same {
                return false;
            }
            // Release: a reader that reads this value through an older FINAL word of the node
            // also sees the caches the round filled before (see `tx::before_of`).
            mem.store(node + VALUE, value, Ordering::Release);
            // Relaxed: published by the caller's CAS of the info word (or recovery's fence).
            mem.store(node + NORM, norm, Ordering::Relaxed);
            mem.store(node + CHECK, check, Ordering::Relaxed);
            true
        }
        None if mem.load(node + NORM, Ordering::Relaxed) == 0 => false,
        None => {
            // Relaxed: as above.
            mem.store(node + NORM, 0, Ordering::Relaxed);
            true
        }
    }
}

/// The checksum of a normalised node.
pub(crate) fn norm_check(key: u128, value: u64, norm: u64) -> u64 {
    let hi = (key >> 64) as u64;
    check_words([key as u64, value, norm].into_iter().chain((hi != 0).then_some(hi)))
}

/// Allocates a structure's head sentinel of `bytes` bytes: zeroed, FINAL absent, with `words`
/// stored after that, persisted before the root entry can name it.
pub(crate) fn create_head<M: PMem>(
    pool: &crate::pool::Pool<M>,
    bytes: u64,
    words: &[(u64, u64)],
) -> Result<u64, crate::error::AllocError> {
    let mut cache = crate::pool::AllocCache::new();
    let head = pool.alloc(&mut cache, bytes)?.get();
    pool.release_cache(&mut cache);
    let mem = pool.mem();
    for w in (0..bytes).step_by(8) {
        mem.store(head + w, 0, Ordering::Relaxed);
    }
    mem.store(head + INFO, Info::final_state(head, false, 0).0, Ordering::Relaxed);
    for &(off, val) in words {
        mem.store(head + off, val, Ordering::Relaxed);
    }
    mem.flush_range(head, bytes);
    // Fence: the head is durable before the root entry names it.
    mem.fence();
    Ok(head)
}

/// What a structure provides to the shared executor.
pub(crate) trait LinkedSet<M: PMem + 'static> {
    /// Where a new node for a key would go.
    type Pos;
    /// Whether keys are two words (see [`KEY_HI`]).
    fn wide(&self) -> bool;
    /// Bytes of a node for `key`.
    fn node_bytes(&self, key: u128) -> u64;
    /// Initialises the structure's own words of a new node for `key` (before [`link`]).
    ///
    /// [`link`]: LinkedSet::link
    fn init_links(&self, _mem: &M, _node: u64, _key: u128) {}
    /// Starts loading the first word a search for `key` reads, if that is known without reading
    /// anything (a hash map's bucket): a hint, so that the load overlaps other work.
    fn prefetch(&self, _mem: &M, _key: u128) {}
    /// Finds `key`: the position for a new node, and the node holding the key if there is one.
    fn search(&self, h: &mut Handle<M>, key: u128, guard: &Guard) -> (Self::Pos, Option<u64>);
    /// Links the initialised, unpublished `node` at `pos`; false if `pos` changed meanwhile.
    fn link(&self, h: &mut Handle<M>, pos: &Self::Pos, node: u64, guard: &Guard) -> bool;
    /// Completes the physical removal of a node whose info word is marked.
    fn help_remove(&self, h: &mut Handle<M>, node: u64, guard: &Guard);
    /// Whether nodes left absent are removed (through [`remove_if`]); if not, an absent node
    /// stays, and a later insert of its key takes it over.
    fn removes_nodes(&self) -> bool {
        true
    }
    /// Whether [`collect`](LinkedSet::collect) sees nodes in key order.
    fn ordered(&self) -> bool {
        true
    }
    /// One pass of a scan over the nodes with keys in `lo..=hi`: appends what it saw at each (see
    /// [`tx::scan`](crate::tx)). Every node linked when the pass starts and still linked when it
    /// ends is seen.
    fn collect(&self, h: &mut Handle<M>, lo: u128, hi: u128, guard: &Guard, out: &mut Vec<Seen>);
}

/// What one pass of a scan saw at a node: equal passes see equal values (see
/// [`tx::scan`](crate::tx)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) node: u64,
    pub(crate) key: u128,
    pub(crate) info: u64,
    pub(crate) state: Option<u64>,
}

/// What a scan records at `node` (key `key`): a marked node is absent.
pub(crate) fn seen<M: PMem + 'static>(h: &Handle<M>, node: u64, key: u128, guard: &Guard) -> Seen {
    // Acquire: see the descriptor the info word names.
    let info = Info(h.mem().load(node + INFO, Ordering::Acquire));
    let state = if info.is_marked() { None } else { h.resolve(info, None, guard) };
    Seen { node, key, info: info.0, state }
}

/// One pass over the nodes of a chain (list, bucket or skiplist level 0) with keys in `lo..=hi`,
/// in chain order (marked nodes too, as absent). `start(h, from)` gives the link word to start
/// from for keys from `from` on: the `next` word of a node with a smaller key (or of the head),
/// unmarked when read. Every step reads the `next` word of a node that is unmarked, and therefore
/// linked, at that read: a node with a key in the gap it crosses is not linked at that instant.
/// A marked `next` (its node is being removed) restarts the walk from a fresh position after
/// the last key seen. Keys are two words if `wide`.
pub(crate) fn walk<M: PMem + 'static>(
    h: &mut Handle<M>,
    mut start: impl FnMut(&mut Handle<M>, u128) -> u64,
    (lo, hi): (u128, u128),
    wide: bool,
    guard: &Guard,
    out: &mut Vec<Seen>,
) {
    let mut from = lo;
    let mut link = start(h, from);
    loop {
        // Acquire: a node reached through a link is seen initialised.
        let w = h.mem().load(link, Ordering::Acquire);
        if w & MARK != 0 {
            link = start(h, from);
            continue;
        }
        if w == 0 {
            return;
        }
        let node = w;
        let key = load_key(h.mem(), node, wide);
        if key > hi {
            return;
        }
        if key >= from {
            out.push(seen(h, node, key, guard));
            if key == hi {
                return;
            }
            from = key + 1;
        }
        link = node + LINKS;
    }
}

/// Removes `key`'s node from `set` if its info word still is `info` (a finished op that left the
/// key absent): the mark on the info word makes the removal exclusive of any op taking the node.
pub(crate) fn remove_if<M: PMem + 'static, S: LinkedSet<M>>(
    h: &mut Handle<M>,
    set: &S,
    key: u128,
    info: Info,
    guard: &Guard,
) {
    debug_assert!(set.removes_nodes(), "removals are scheduled only for structures that remove nodes");
    let Some(node) = set.search(h, key, guard).1 else { return };
    // A node with a record stays linked until a checkpoint round has cleared the record (and
    // removes the node itself): a present record must never be left in an unlinked node (see
    // `tx::checkpoint`). Acquire (the info word, read first): a round's record stores come
    // before its CAS of the word, which every later CAS of it (ending in the one that wrote
    // `info`) acquires; so a record written before the node moved on is seen.
    let mem = h.mem();
    if mem.load(node + INFO, Ordering::Acquire) != info.0 || mem.load(node + NORM, Ordering::Relaxed) != 0 {
        return;
    }
    // AcqRel: the mark is a transition of the info word like any other.
    if mem.compare_exchange(node + INFO, info.0, info.marked().0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        set.help_remove(h, node, guard);
    }
}

/// Executes op `i` of descriptor `d` on `set`. See the [`tx`](crate::tx) module docs for the
/// protocol and why it executes each op exactly once.
pub(crate) fn execute_op<M: PMem + 'static, S: LinkedSet<M>>(
    h: &mut Handle<M>,
    set: &S,
    d: u64,
    i: usize,
    op: StoredOp,
    guard: &Guard,
) -> Step {
    let kind = OpKind::from_code(op.kind);
    let me = Info::op(d, i);
    let prev_off = Desc::new(h.mem(), d).prev_off(i);
    loop {
        let active = |h: &Handle<M>| Desc::new(h.mem(), d).state().status == TxStatus::Active;
        if !active(h) {
            return Step::Stop;
        }
        // Acquire, and read before the node: see the exactly-once argument.
        let prev = h.mem().load(prev_off, Ordering::Acquire);
        let (pos, found) = set.search(h, op.key, guard);
        match found {
            Some(node) => {
                // Acquire: see the descriptor the info word names.
                let cur = Info(h.mem().load(node + INFO, Ordering::Acquire));
                if cur.is_marked() {
                    set.help_remove(h, node, guard);
                    continue;
                }
                if !cur.is_final() && cur.desc() == d {
                    if cur.opid() >= i {
                        return Step::Done; // executed already (this op, or a later one of ours)
                    }
                } else if !cur.is_final() {
                    let d2 = cur.desc();
                    if Desc::new(h.mem(), d2).state().status == TxStatus::Active {
                        h.help(d2, cur.opid(), guard);
                        continue;
                    }
                }
                let before = h.resolve(cur, Some(d), guard);
                if !kind.allows(before.is_some()) {
                    return Step::Fail;
                }
                if prev != cur.0 {
                    if !active(h) {
                        return Step::Stop;
                    }
                    // AcqRel: the retargeted prev is seen by any executor that then sees the node
                    // taken.
                    if h.mem().compare_exchange(prev_off, prev, cur.0, Ordering::AcqRel, Ordering::Acquire).is_err() {
                        continue;
                    }
                }
                // AcqRel: publish the descriptor (and prev) with the node; see the old owner's.
                if h.mem().compare_exchange(node + INFO, cur.0, me.0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    // A before-state that comes from an earlier op of this same transaction holds
                    // only if the transaction commits; it is not cached.
                    if cur.is_final() || cur.desc() != d {
                        write_cache(h.mem(), d, i, before, node);
                    }
                    return Step::Done;
                }
            }
            None => {
                if !kind.allows(false) {
                    return Step::Fail;
                }
                if prev != NO_NODE {
                    if !active(h) {
                        return Step::Stop;
                    }
                    // AcqRel: as for retargeting `prev` above.
                    if h.mem().compare_exchange(prev_off, prev, NO_NODE, Ordering::AcqRel, Ordering::Acquire).is_err() {
                        continue;
                    }
                }
                let bytes = set.node_bytes(op.key);
                let node = match h.inner.pool.alloc(&mut h.cache, bytes) {
                    Ok(n) => n.get(),
                    Err(_) => return Step::NoMemory(bytes),
                };
                let mem = h.mem();
                store_key(mem, node, op.key, set.wide());
                // Release: a checkpoint round that reaches the unlinked block through a stale
                // op cache and reads this word sees the key and the op's `prev` set before it.
                mem.store(node + INFO, me.0, Ordering::Release);
                mem.store(node + VALUE, if kind.writes() == Some(true) { op.value } else { 0 }, Ordering::Relaxed);
                mem.store(node + NORM, 0, Ordering::Relaxed);
                mem.store(node + CHECK, 0, Ordering::Relaxed);
                set.init_links(mem, node, op.key);
                if set.link(h, &pos, node, guard) {
                    write_cache(h.mem(), d, i, None, node);
                    return Step::Done;
                }
                // The block was never reachable, but an earlier node in it may be named by a
                // stale op cache (a checkpoint round's hint): marked, it reads as a node that
                // left, not as one naming this op, whose slot may be recycled long before the
                // block is reused. Relaxed: the slot is recycled only after this thread unpins.
                h.mem().store(node + INFO, me.marked().0, Ordering::Relaxed);
                let pool = &h.inner.pool;
                pool.free(&mut h.cache, crate::pool::POff::new(node));
            }
        }
    }
}

//! The multi-dimensional list (MDList) of Zhang and Dechev (ICDCS 2016, the dissertation's
//! reference \[154\]): a key is a vector of [`DIMS`] coordinates, its base-4 digits, most
//! significant first, and a node has one child list per dimension.
//!
//! Why base 4: a search passes, in each dimension, the siblings whose coordinate is below its
//! own, about a third of the base, so it visits about `dims x base / 3` nodes, fewest for a base
//! near 3 (Zhang and Dechev choose the dimension for the key range in the same way). Keys of a
//! million (20 bits) visit about 33 nodes in base 16 (5 dimensions) and about 15 in base 4 (10),
//! and each visit is a cache miss once the list outgrows the cache.
//!
//! A node `c` in `n`'s child list at dimension `d` has the same coordinates as `n` in dimensions
//! `0..d` and a larger one at `d`; following `child[d]` from there walks that list in increasing
//! coordinate `d`. A node reached through dimension `d` uses only its child slots `d..`. The head
//! sentinel stands below every key: all nodes hang off its dimension-0 list, so a search starts
//! there with the head as predecessor and every key (0 and `u64::MAX` included) has a node.
//!
//! Inserting a node between `pred` (at dimension `dp`) and `curr` (which differs from the new key
//! first at dimension `dc >= dp`, where the new key is smaller) pushes `curr` down to the new
//! node's `child[dc]`; when `dp < dc` the new node must also *adopt* `curr`'s children in
//! dimensions `dp..dc`. The new node carries the adoption (`curr`, `dp`, `dc`) from before it is
//! published; whoever passes through it at a dimension in `dp..=dc` first finishes the adoption:
//! each of `curr`'s slots in the range is frozen (bit 0, after which no insert can CAS into it)
//! and its child copied into the new node's empty slot. An inserter also finishes `curr`'s own
//! pending adoption before publishing, so that it never freezes slots `curr` has not filled yet.
//!
//! **Removal.** A node left absent is removed through the removal queue, as a list's is
//! (`remove_if`: its info word is marked, which is never undone, then [`LinkedSet::help_remove`]),
//! and until then a later insert of its key takes it over. A node `n` hangs in a slot of
//! dimension `h` (of its parent, or of its predecessor in the list at `h`), and it is removed in
//! that slot, found again by a fresh search at every attempt (an insert before it may have pushed
//! it into a higher dimension and adopted its lower slots):
//! 1. `n`'s slots `h..` are frozen: its successor in the list at `h`, and its own lists. From then
//!    on no insert after it or below it can succeed, and every helper reads the same children.
//! 2. If its own lists (slots above `h`) are empty, the slot of `h` is swung from `n` to its
//!    successor (Harris's unlink); if it has none, to [`EMPTIED`], not 0: a slot once filled never
//!    holds 0 again, so that an adoption's late copy (a CAS from 0, which assumes the slot goes
//!    from 0 to a child once) cannot link a removed node back. Every reader masks the tag.
//! 3. Otherwise `n` still routes its lists: the slot is swung to a fresh copy of `n` (same key,
//!    absent and marked from the start, base `h`, the frozen children in unfrozen slots). The copy
//!    is removed in turn when a removal empties one of its slots: whoever swings a slot to
//!    [`EMPTIED`] removes the slot's owner if it is marked, and so does an insert whose adoption
//!    took slots away from a marked node. So a node is deleted before the larger keys below it
//!    (increasing keys) and still leaves once they have: only marked nodes with a live node below
//!    them stay, at most one per prefix of a live key.
//!
//! A search passes marked nodes over (the key is absent); an insert of a key whose node is marked
//! replaces that node by its own, with the frozen children, as the copy of 3 does. A CAS of a
//! slot that fails on a frozen slot of a marked node finishes that node's removal before it
//! retries, so no thread waits on a stalled remover: lock-free, except that a copy needs a block.
//! It is allocated before anything is frozen if the node's lists hold a child, so a full pool
//! leaves the node unfrozen, still routing; only a child linked into its empty lists between that
//! read and the freezing makes the removal give up frozen, and then an insert meeting the frozen
//! slot fails for want of memory (`link` returns [`PoolFull`]) and a removal below it gives up
//! too: none retries while pinned. The node stays frozen until a later CAS that meets its slot
//! finishes its removal with a free block, or until the engine closes: `Engine::close` rewrites
//! every structure from its records whenever anything was written (and a removal follows a
//! write), so no frozen slot reaches the strict walk of the next open. A replacing insert whose CAS fails finishes the removal of the node
//! it froze. The thread whose CAS took a node out
//! hands it to the epoch collector (invariant 7 of `docs/design.md`).
//!
//! A node reached through dimension `dp` uses its slots `dp..` only, and is only ever pushed to
//! higher dimensions, so it is allocated with those slots alone: they are kept from the last
//! dimension down, so that the block ends after `child[dp]`. Keys below 2^20 are reached through
//! dimension 22 or higher (all their earlier digits are 0), so their nodes hold 10 slots, not 32.
//! The dimension a node was linked through, its *base*, is the low byte of its `dims` word,
//! written before it is published and never changed.
//!
//! ```text
//! +0               key (the common node header, see `node`)
//! +8               adopt: the node whose children this node is adopting (0: none, or done);
//!                  the header's link word
//! +16..+32         the rest of the common header
//! +32              dims: dp | dc << 8: the node's base dp, and the adoption's last dimension dc
//! +40 + 8 (31-d)   child[d] for d in base..32: node offset | frozen (bit 0) | emptied (bit 1)
//! ```

use std::sync::atomic::Ordering;

use super::info::Info;
use super::node::{INFO, KEY, LINK, VALUE, create_head, header_bytes};
use super::{Ctx, Inspect, LinkedSet, Pause, PoolFull, Seen, checked_node, fault};
use crate::error::{AllocError, Damage};
use crate::mem::PMem;
use crate::pool::Pool;

/// Bits of a key per coordinate: base-4 digits.
const BITS: usize = 2;
/// Dimensions: the base-4 digits of a 64-bit key.
pub(crate) const DIMS: usize = 64 / BITS;
/// Bit 0 of a child slot: frozen, by an adoption or a removal; no CAS changes it any more.
const FROZEN: u64 = 1;
/// Bit 1 of a child slot: no child, after a removal took the last one away. A slot once filled
/// never holds 0 again, so an adoption's late copy (a CAS from 0) can never put a node back.
const EMPTIED: u64 = 2;
/// The tag bits of a child slot (node offsets are 16-byte aligned): every reader masks them.
const TAGS: u64 = FROZEN | EMPTIED;
const ADOPT: u64 = LINK;
const ADOPT_DIMS: u64 = header_bytes(false);
const CHILDREN: u64 = ADOPT_DIMS + 8;
/// Bytes of the head sentinel: every slot.
pub(crate) const HEAD_BYTES: u64 = node_bytes_from(0);

/// Offset of `child[d]` in a node (whose base is `d` or lower).
pub(crate) fn child(d: usize) -> u64 {
    CHILDREN + 8 * (DIMS - 1 - d) as u64
}

/// Bytes of a node of base `base`: its slots `base..DIMS`.
pub(crate) const fn node_bytes_from(base: usize) -> u64 {
    CHILDREN + 8 * (DIMS - base) as u64
}

/// Coordinate `d` of `key`.
fn coord(key: u64, d: usize) -> u64 {
    (key >> (64 - BITS * (d + 1))) & ((1 << BITS) - 1)
}

/// The first dimension at which two different keys differ.
fn first_difference(a: u64, b: u64) -> usize {
    (a ^ b).leading_zeros() as usize / BITS
}

/// The largest key reachable from a node with key `key` reached through dimension `d`: every
/// such key shares the node's coordinates `0..d`.
fn reach_max(key: u64, d: usize) -> u64 {
    if d == 0 { u64::MAX } else { key | (u64::MAX >> (BITS * d)) }
}

/// The base of `node`: the dimension it was linked through (0 for the head).
fn base_of<M: PMem>(mem: &M, node: u64) -> usize {
    // Relaxed: written before the node was published, never changed.
    (mem.load(node + ADOPT_DIMS, Ordering::Relaxed) & 0xFF) as usize
}

/// Whether `node` is being removed (its info word marked, which is never undone).
fn marked<M: PMem>(mem: &M, node: u64) -> bool {
    // Acquire: as every read of an info word.
    Info(mem.load(node + INFO, Ordering::Acquire)).is_marked()
}

/// Where a key is, or would go: the predecessor and the dimension of its slot, the node in that
/// slot (0 for none), and the first dimension at which the key is smaller than that node's
/// ([`DIMS`] when it is that node's key); and the slot's word as read, unfrozen: what a CAS that
/// changes the slot expects (it fails if the slot was frozen).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MdPos {
    pred: u64,
    dp: usize,
    curr: u64,
    dc: usize,
    expect: u64,
}

/// An MDList: its head sentinel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MdList {
    /// The head sentinel (never removed; below every key).
    pub(crate) head: u64,
}

impl MdList {
    /// Allocates and persists an empty MDList's head.
    pub(crate) fn create<M: PMem>(pool: &Pool<M>) -> Result<MdList, AllocError> {
        Ok(MdList { head: create_head(pool, HEAD_BYTES, &[])? })
    }

    /// Finds where `key` is or would go, finishing the adoptions it passes through.
    ///
    /// The key agrees with `curr` in every dimension below `dc` (it agrees with `pred` there, and
    /// so does `curr`, being in `pred`'s list at dimension `dc`), so the search jumps straight to
    /// the first dimension where they differ.
    pub(crate) fn locate<M: PMem>(&self, mem: &M, key: u64) -> MdPos {
        let (mut pred, mut dp, mut dc) = (self.head, 0, 0);
        // Acquire (every child load): a node reached through a slot is seen initialised.
        let mut w = mem.load(self.head + child(0), Ordering::Acquire);
        let mut curr = w & !TAGS;
        while curr != 0 {
            // Relaxed: a node's key never changes after it was published.
            let diff = key ^ mem.load(curr + KEY, Ordering::Relaxed);
            if diff == 0 {
                dc = DIMS;
                break;
            }
            dc = diff.leading_zeros() as usize / BITS;
            if coord(key, dc) < coord(key ^ diff, dc) {
                break;
            }
            pred = curr;
            dp = dc;
            help_adoption(mem, curr, dc);
            w = mem.load(curr + child(dc), Ordering::Acquire);
            curr = w & !TAGS;
        }
        MdPos { pred, dp, curr, dc, expect: w & !FROZEN }
    }

    /// Removes the marked `node` from the list, and then each marked node that this leaves with
    /// an emptied slot (see the [module docs](self)). Returns true once the node is no longer
    /// linked where a search finds it, false if a copy it (or a node whose removal it had to
    /// finish) needed found the pool full: the caller must not retry at once (see `link`).
    fn remove<M: PMem>(&self, cx: &impl Ctx<M>, mut node: u64) -> bool {
        let mem = cx.mem();
        'node: loop {
            // Relaxed: a node's key never changes after it was published.
            let key = mem.load(node + KEY, Ordering::Relaxed);
            loop {
                // Re-located at every attempt: an insert before the node may have pushed it
                // into a higher dimension of the new node (and adopted its lower slots).
                let pos = self.locate(mem, key);
                if pos.dc != DIMS || pos.curr != node {
                    return true;
                }
                let Some((word, copy)) = successor(cx, node, key, pos.dp) else { return false };
                // AcqRel: publishes the successor or the copy in the node's place; and see what
                // the slot holds if it changed.
                match mem.compare_exchange(pos.pred + child(pos.dp), node, word, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        cx.retire(node);
                        // The predecessor lost the last node of one of its lists: if it is being
                        // removed, it may have no child left. (Its remover, if it froze its slots
                        // first, would have made this CAS fail.)
                        if word == EMPTIED && pos.pred != self.head && marked(mem, pos.pred) {
                            node = pos.pred;
                            continue 'node;
                        }
                        return true;
                    }
                    Err(now) => {
                        if copy != 0 {
                            cx.free_unpublished(copy);
                        }
                        // A predecessor whose removal gave up stays frozen: retrying would spin.
                        if !self.help_frozen(cx, pos.pred, now) {
                            return false;
                        }
                    }
                }
            }
        }
    }

    /// After a CAS of a slot of `pred` failed on `now`: if a removal froze it, finishes that
    /// removal, so that a thread that waits for the slot never waits on a stalled remover.
    /// False if that removal gave up (the pool is full), so that the slot stays frozen.
    fn help_frozen<M: PMem>(&self, cx: &impl Ctx<M>, pred: u64, now: u64) -> bool {
        // (A slot frozen by an adoption is left to the search, which goes through the adopter.)
        if now & FROZEN != 0 && pred != self.head && marked(cx.mem(), pred) {
            return self.remove(cx, pred);
        }
        true
    }
}

/// What takes the place of `node` (key `key`, being removed) in the slot of dimension `h` that
/// holds it: its successor in that list if its own lists (its slots above `h`) are empty
/// ([`EMPTIED`] if it has none), else a fresh copy of it, marked as absent too, holding its
/// slots `h..`. Its slots `h..` are frozen first, so that no insert below it or after it is lost,
/// and every helper decides alike for `h`. Returns the word for the slot and the copy (0 for
/// none), or `None` if the pool has no room for the copy.
///
/// The copy is allocated before anything is frozen if the node's own lists hold a child then:
/// if the pool is full, the node is left unfrozen, a routing node that searches pass over and
/// inserts below it still use. Only a child linked into one of its empty lists between that
/// read and the freezing can make it give up with the slots frozen.
fn successor<M: PMem>(cx: &impl Ctx<M>, node: u64, key: u64, h: usize) -> Option<(u64, u64)> {
    let mem = cx.mem();
    // Its own adoption first, as an inserter does before freezing another node's slots.
    finish_adoption(mem, node);
    let bytes = node_bytes_from(h);
    // Acquire: as every read of a slot (only whether it holds a child counts here).
    let routes = (h + 1..DIMS).any(|d| mem.load(node + child(d), Ordering::Acquire) & !TAGS != 0);
    let mut copy = if routes { Some(cx.alloc_node(bytes)?) } else { None };
    let mut slots = [0u64; DIMS];
    for (d, slot) in slots.iter_mut().enumerate().skip(h) {
        *slot = freeze(mem, node + child(d));
    }
    if slots[h + 1..].iter().all(|&c| c == 0) {
        if let Some(c) = copy {
            cx.free_unpublished(c);
        }
        return Some((if slots[h] == 0 { EMPTIED } else { slots[h] }, 0));
    }
    let copy = match copy.take() {
        Some(c) => c,
        None => cx.alloc_node(bytes)?,
    };
    // Relaxed (the key, the value and the slots): the copy is unpublished; the CAS that links it
    // (AcqRel) publishes it. Its record area is zero (see `Pool::alloc`).
    mem.store(copy + KEY, key, Ordering::Relaxed);
    mem.store(copy + VALUE, 0, Ordering::Relaxed);
    for (d, &c) in slots.iter().enumerate().skip(h) {
        mem.store(copy + child(d), c, Ordering::Relaxed);
    }
    mem.store(copy + ADOPT, 0, Ordering::Relaxed);
    mem.store(copy + ADOPT_DIMS, h as u64 | (h as u64) << 8, Ordering::Relaxed);
    // Release: as an executor's new node (see `protocol`), for a round that reaches the block
    // through a stale hint. Absent and marked from the start: the word never changes, so it
    // never repeats; a search passes the copy over as it does any node being removed.
    mem.store(copy + INFO, Info::removed(copy).0, Ordering::Release);
    Some((copy, copy))
}

/// Finishes `node`'s pending adoption if `d` is in its range (before reading `node.child[d]`).
fn help_adoption<M: PMem>(mem: &M, node: u64, d: usize) {
    // Acquire: see the adoption's dimensions, written before the node was published.
    if mem.load(node + ADOPT, Ordering::Acquire) == 0 {
        return;
    }
    let dims = mem.load(node + ADOPT_DIMS, Ordering::Relaxed);
    if (dims & 0xFF) as usize <= d && d <= (dims >> 8) as usize {
        finish_adoption(mem, node);
    }
}

/// Finishes `node`'s pending adoption, if any: freezes each adopted slot of the old node and
/// copies its child into `node`. Idempotent; every helper copies the same frozen values.
fn finish_adoption<M: PMem>(mem: &M, node: u64) {
    // Acquire: as in `help_adoption`.
    let old = mem.load(node + ADOPT, Ordering::Acquire);
    if old == 0 {
        return;
    }
    let dims = mem.load(node + ADOPT_DIMS, Ordering::Relaxed);
    for d in (dims & 0xFF) as usize..(dims >> 8) as usize {
        let c = freeze(mem, old + child(d));
        if c != 0 {
            // AcqRel: publishes the child in its new place. Fails only if a helper copied it
            // already: no insert uses this slot before the adoption is finished, and a removal
            // that takes the child away leaves a successor or EMPTIED, never 0.
            let _ = mem.compare_exchange(node + child(d), 0, c, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
    // AcqRel: the copies are visible to whoever sees the adoption finished.
    let _ = mem.compare_exchange(node + ADOPT, old, 0, Ordering::AcqRel, Ordering::Relaxed);
}

/// Sets the frozen bit of the slot at `at` (if not yet set) and returns the child it holds (0 for
/// none), which no CAS can change from then on.
fn freeze<M: PMem>(mem: &M, at: u64) -> u64 {
    // Acquire: see the child the slot holds.
    let mut w = mem.load(at, Ordering::Acquire);
    while w & FROZEN == 0 {
        // AcqRel: freezing fixes the slot's value for good; see the child it holds.
        match mem.compare_exchange(at, w, w | FROZEN, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => w = now,
        }
    }
    w & !TAGS
}

/// Writes the child slots and adoption words of an unpublished `node` of base `pos.dp` for
/// position `pos`.
fn fill<M: PMem>(mem: &M, node: u64, pos: &MdPos) {
    for d in pos.dp..DIMS {
        let v = if d == pos.dc && pos.curr != 0 { pos.curr } else { 0 };
        mem.store(node + child(d), v, Ordering::Relaxed);
    }
    let adopts = pos.curr != 0 && pos.dp < pos.dc;
    mem.store(node + ADOPT, if adopts { pos.curr } else { 0 }, Ordering::Relaxed);
    mem.store(node + ADOPT_DIMS, pos.dp as u64 | (pos.dc as u64) << 8, Ordering::Relaxed);
}

/// Keys are one word: the engine refuses two-word keys for an MDList before they get here.
impl<M: PMem + 'static> LinkedSet<M> for MdList {
    type Pos = MdPos;

    fn wide(&self) -> bool {
        false
    }

    /// A node linked at `pos` is reached through dimension `pos.dp`.
    fn node_bytes(&self, _key: u128, pos: &MdPos) -> u64 {
        node_bytes_from(pos.dp)
    }

    /// Built in increasing key order, the node of `key` is linked through the first dimension at
    /// which it differs from `prev`: `prev` has the longest common prefix with `key` of every
    /// key built before it, and a search for `key` follows the search for `prev` to the last
    /// node sharing that prefix, whose slot there is empty (see `build`, which checks it).
    fn built_bytes(&self, prev: Option<u128>, key: u128) -> u64 {
        node_bytes_from(prev.map_or(0, |p| first_difference(p as u64, key as u64)))
    }

    fn search(&self, cx: &impl Ctx<M>, key: u128) -> (MdPos, Option<u64>) {
        debug_assert!(key >> 64 == 0, "an MDList key of two words");
        let pos = self.locate(cx.mem(), key as u64);
        // A node being removed is passed over: the key is absent, and a new node for it takes
        // the old one's place (see `link`).
        (pos, (pos.dc == DIMS && !marked(cx.mem(), pos.curr)).then_some(pos.curr))
    }

    /// At a position of the key's own node, which is being removed (`search` found it marked),
    /// the new node replaces it, with its slots: they are frozen and copied, as a removal's copy
    /// does. Elsewhere, the new node goes before `curr`, adopting its slots `dp..dc`.
    fn link(&self, cx: &impl Ctx<M>, pos: &MdPos, node: u64) -> Result<bool, PoolFull> {
        let mem = cx.mem();
        let replaces = pos.dc == DIMS;
        if replaces {
            let old = pos.curr;
            finish_adoption(mem, old);
            // Relaxed: the node is unpublished; the CAS below (Release) publishes it.
            for d in pos.dp..DIMS {
                mem.store(node + child(d), freeze(mem, old + child(d)), Ordering::Relaxed);
            }
            mem.store(node + ADOPT, 0, Ordering::Relaxed);
            mem.store(node + ADOPT_DIMS, pos.dp as u64 | (pos.dp as u64) << 8, Ordering::Relaxed);
        } else {
            fill(mem, node, pos);
            if pos.curr != 0 {
                // `curr`'s own adoption (over dimensions from the same dp) must be complete before
                // this node freezes its slots.
                finish_adoption(mem, pos.curr);
            }
        }
        // Release: the node's words are visible before the slot that reaches it. Fails if the
        // slot changed or was frozen meanwhile.
        if let Err(now) =
            mem.compare_exchange(pos.pred + child(pos.dp), pos.expect, node, Ordering::Release, Ordering::Relaxed)
        {
            if !self.help_frozen(cx, pos.pred, now) {
                return Err(PoolFull);
            }
            // The old node's slots are frozen now, and it may still be linked (the slot changed
            // without it leaving: a node linked before it, or a copy of `pred` holding it): if
            // it is a copy, no remover would finish it.
            if replaces && !self.remove(cx, pos.curr) {
                return Err(PoolFull);
            }
            return Ok(false);
        }
        if replaces {
            cx.retire(pos.curr);
            return Ok(true);
        }
        finish_adoption(mem, node);
        // `curr` gave its slots `dp..dc` to the new node: if it is being removed, the lists it
        // kept may all be empty now, and nothing else would look at it again.
        if pos.curr != 0 && pos.dp < pos.dc && marked(mem, pos.curr) {
            self.remove(cx, pos.curr);
        }
        Ok(true)
    }

    fn help_remove(&self, cx: &impl Ctx<M>, node: u64) {
        // A removal that gave up (a full pool) leaves the node marked and linked: see the module docs.
        self.remove(cx, node);
    }

    fn ordered(&self) -> bool {
        false
    }

    /// A depth-first walk from the head, pruned to the subtrees that can hold keys in `lo..=hi`,
    /// which meets the keys in increasing order. Every node linked when the walk starts and
    /// still linked when it ends is reached: through the old slots of an adoption or a removal,
    /// which keep their children when frozen, or through the adopter or the copy, whose slots
    /// hold the same children.
    ///
    /// A re-pin ([`Ctx::pause`]) lets go of every node the walk holds on its stack: they may be
    /// unlinked and freed from then on. The walk then starts again from the head, for the keys
    /// after the last one it met.
    fn collect(&self, cx: &impl Ctx<M>, lo: u128, hi: u128, out: &mut Vec<Seen>) {
        let Ok(mut from) = u64::try_from(lo) else { return };
        let hi = u64::try_from(hi).unwrap_or(u64::MAX);
        let mut stack: Vec<(u64, usize)> = Vec::new();
        'descent: loop {
            stack.clear();
            // Acquire: as in `locate`.
            let first = cx.mem().load(self.head + child(0), Ordering::Acquire) & !TAGS;
            if first != 0 {
                stack.push((first, 0));
            }
            while let Some((node, d)) = stack.pop() {
                // Relaxed: keys never change after publication.
                let key = cx.mem().load(node + KEY, Ordering::Relaxed);
                if key > hi || reach_max(key, d) < from {
                    continue;
                }
                finish_adoption(cx.mem(), node);
                let met = key >= from;
                if met {
                    out.push(super::seen(cx, node, key as u128));
                    if key == hi {
                        return;
                    }
                    from = key + 1;
                }
                // Pushed from dimension d up, so the children come off the stack in key order.
                for e in d..DIMS {
                    // Acquire: as in `locate`.
                    let c = cx.mem().load(node + child(e), Ordering::Acquire) & !TAGS;
                    if c != 0 {
                        stack.push((c, e));
                    }
                }
                // Only after a key met: a descent passes the nodes above `from` without pausing
                // (a path, at most a few per dimension), so each one meets a key at least.
                if met {
                    match cx.pause() {
                        Pause::Go => {}
                        Pause::Repinned => continue 'descent,
                        Pause::Stop => return,
                    }
                }
            }
            return;
        }
    }

    /// Each node goes after every earlier one, so none adopts.
    fn build(&self, mem: &M, nodes: &[(u64, u128)]) {
        // Relaxed: recovery runs alone, and fences before the new nodes count.
        for d in 0..DIMS {
            mem.store(self.head + child(d), 0, Ordering::Relaxed);
        }
        mem.store(self.head + ADOPT, 0, Ordering::Relaxed);
        for (i, &(node, key)) in nodes.iter().enumerate() {
            let pos = self.locate(mem, key as u64);
            debug_assert!(pos.curr == 0, "keys are built in increasing order");
            // The block was sized by `built_bytes`: slots below its base are not in it.
            let base = i.checked_sub(1).map_or(0, |p| first_difference(nodes[p].1 as u64, key as u64));
            assert_eq!(
                pos.dp, base,
                "the node of key {key:#x} is built through another dimension than it was sized for"
            );
            fill(mem, node, &pos);
            mem.store(pos.pred + child(pos.dp), node, Ordering::Relaxed);
        }
    }

    fn root(&self) -> (u64, u64) {
        (self.head, HEAD_BYTES)
    }

    /// Every node where its coordinates put it: in the list at dimension `d` of a node whose
    /// coordinates it shares below `d` and exceeds at `d` (any, below the head). If `strict`, no
    /// adoption is left pending and no node is reached twice; otherwise a pending adoption is
    /// read as finished (see below), and a node reached twice is walked once.
    fn walk_checked(
        &self,
        cx: &impl Inspect<M>,
        strict: bool,
        visit: &mut dyn FnMut(u64, u128),
    ) -> Result<u64, Damage> {
        let mem = cx.mem();
        let mut seen = std::collections::HashSet::new();
        // (node, its key, the dimension it was reached through); the head stands below every key.
        let mut stack = vec![(self.head, None::<u64>, 0usize)];
        while let Some((node, key, from)) = stack.pop() {
            // Relaxed (every load): the structure is at rest.
            let adopt = mem.load(node + ADOPT, Ordering::Relaxed);
            if strict && adopt != 0 {
                return Err(fault(node + ADOPT, "an adoption left pending".into()));
            }
            // A pending adoption (its inserter died after publishing the node, before it or a
            // helper finished it) is read as finished, as every reader finishes it before it
            // reads an adopted slot: a slot of its range still empty holds what the old node's
            // slot holds, which the adoption would freeze and copy. The old node is reached
            // through `dc`, where the range ends, and its slots below that are not walked there.
            let adopted = (adopt != 0).then(|| {
                let dims = mem.load(node + ADOPT_DIMS, Ordering::Relaxed);
                (adopt, (dims & 0xFF) as usize..(dims >> 8) as usize)
            });
            for d in from..DIMS {
                let mut slot = node + child(d);
                let mut raw = mem.load(slot, Ordering::Relaxed);
                if let Some((old, range)) = &adopted
                    && raw == 0
                    && range.contains(&d)
                {
                    slot = checked_node(cx, node + ADOPT, *old, node_bytes_from(d))? + child(d);
                    raw = mem.load(slot, Ordering::Relaxed) & !FROZEN;
                }
                if strict && raw & FROZEN != 0 {
                    return Err(fault(slot, format!("a frozen slot (word {raw:#x}): a removal left half done")));
                }
                let w = raw & !TAGS;
                if w == 0 {
                    continue;
                }
                // Reached through dimension d, the node must hold the slots d.. (all this walk
                // reads of it) and have been linked through d or below.
                let c = checked_node(cx, slot, w, node_bytes_from(d))?;
                let ck = mem.load(c + KEY, Ordering::Relaxed);
                if base_of(mem, c) > d {
                    return Err(fault(
                        c + ADOPT_DIMS,
                        format!("node {c:#x} of base {} in dimension {d}", base_of(mem, c)),
                    ));
                }
                if let Some(k) = key {
                    let shares = d == 0 || (ck ^ k) >> (64 - BITS * d) == 0;
                    if !shares || coord(ck, d) <= coord(k, d) {
                        return Err(fault(slot, format!("key {ck:#x} in dimension {d} below key {k:#x}")));
                    }
                }
                if !seen.insert(c) {
                    if strict {
                        return Err(fault(slot, format!("node {c:#x} of key {ck:#x} is reached twice")));
                    }
                    continue;
                }
                visit(c, ck as u128);
                stack.push((c, Some(ck), d));
            }
        }
        Ok(seen.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;
    use crate::mem::SimMem;
    use crate::pool::{AllocCache, POff, PoolConfig};

    /// A context over a pool whose allocations can be refused, as a full pool refuses them.
    struct TestCx {
        pool: Pool<SimMem>,
        cache: RefCell<AllocCache>,
        full: Cell<bool>,
        /// Allocations refused: a bound, so that a loop that spins on a full pool fails the test.
        refused: Cell<u32>,
    }

    impl Ctx<SimMem> for TestCx {
        fn mem(&self) -> &SimMem {
            self.pool.mem()
        }
        // Nothing is freed: no block is reused while the test reads it.
        fn retire(&self, _node: u64) {}
        fn resolve(&self, _info: Info) -> Option<u64> {
            unreachable!("these tests read no values")
        }
        fn has_record(&self, node: u64) -> bool {
            crate::structures::node::has_record(&self.pool, node)
        }
        fn alloc_node(&self, bytes: u64) -> Option<u64> {
            if self.full.get() {
                self.refused.set(self.refused.get() + 1);
                assert!(self.refused.get() < 100, "a thread retries on a full pool without end");
                return None;
            }
            Some(self.pool.alloc(&mut self.cache.borrow_mut(), bytes).unwrap().get())
        }
        fn free_unpublished(&self, node: u64) {
            self.pool.free(&mut self.cache.borrow_mut(), POff::new(node));
        }
    }

    fn setup() -> (TestCx, MdList) {
        let config =
            PoolConfig { initial_size: 1 << 20, max_size: 4 << 20, chunk_size: 64 << 10, ..PoolConfig::default() };
        let pool = Pool::create_in(SimMem::new(0, 4 << 20), &config).unwrap();
        let md = MdList::create(&pool).unwrap();
        let cx = TestCx { pool, cache: RefCell::new(AllocCache::new()), full: Cell::new(false), refused: Cell::new(0) };
        (cx, md)
    }

    /// Inserts `key` (present) at the position `pos`, or where a search puts it: the result of
    /// the first link that does not ask for a retry.
    fn insert(cx: &TestCx, md: &MdList, key: u64, stale: Option<MdPos>) -> Result<u64, PoolFull> {
        let mem = cx.mem();
        for _ in 0..100 {
            let pos = stale.unwrap_or_else(|| md.locate(mem, key));
            let node = cx.pool.alloc(&mut cx.cache.borrow_mut(), node_bytes_from(pos.dp)).unwrap().get();
            // Relaxed: the node is unpublished, and the test runs on one thread.
            mem.store(node + KEY, key, Ordering::Relaxed);
            mem.store(node + VALUE, 0, Ordering::Relaxed);
            mem.store(node + INFO, Info::final_state(node, true, 0).0, Ordering::Relaxed);
            match md.link(cx, &pos, node) {
                Ok(true) => return Ok(node),
                Ok(false) if stale.is_some() => return Ok(0),
                Ok(false) => cx.free_unpublished(node),
                Err(full) => {
                    cx.free_unpublished(node);
                    return Err(full);
                }
            }
        }
        panic!("an insert of {key:#x} retries without end");
    }

    fn mark(cx: &TestCx, node: u64) {
        let mem = cx.mem();
        // Relaxed: one thread.
        let info = Info(mem.load(node + INFO, Ordering::Relaxed));
        mem.store(node + INFO, info.marked().0, Ordering::Relaxed);
    }

    fn strict_walk(cx: &TestCx, md: &MdList) -> Result<Vec<u64>, Damage> {
        let mut keys = Vec::new();
        LinkedSet::<SimMem>::walk_checked(md, &cx.pool, true, &mut |_, k| keys.push(k as u64))?;
        keys.sort_unstable();
        Ok(keys)
    }

    #[test]
    fn a_removal_that_finds_the_pool_full_leaves_its_node_unfrozen() {
        let (cx, md) = setup();
        // 0x600 routes 0x610 (its list at dimension 29).
        let n = insert(&cx, &md, 0x600, None).unwrap();
        insert(&cx, &md, 0x610, None).unwrap();
        mark(&cx, n);
        cx.full.set(true);
        assert!(!md.remove(&cx, n), "the removal needs a copy");
        // Nothing frozen: an insert into n's own list (at dimension 30) needs no copy.
        insert(&cx, &md, 0x604, None).unwrap();
        assert_eq!(strict_walk(&cx, &md).unwrap(), [0x600, 0x604, 0x610]);
        cx.full.set(false);
        assert!(md.remove(&cx, n));
        assert_eq!(strict_walk(&cx, &md).unwrap(), [0x600, 0x604, 0x610]);
        assert_ne!(md.locate(cx.mem(), 0x600).curr, n, "a copy took the node's place");
    }

    #[test]
    fn inserts_and_removals_below_a_frozen_node_whose_copy_finds_the_pool_full_return() {
        let (cx, md) = setup();
        let n = insert(&cx, &md, 0x600, None).unwrap();
        let x = insert(&cx, &md, 0x610, None).unwrap();
        // A removal of n froze its slots and then found the pool full (a child linked into its
        // lists between its first read and the freezing).
        mark(&cx, n);
        for d in 0..DIMS {
            freeze(cx.mem(), n + child(d));
        }
        cx.full.set(true);
        assert_eq!(insert(&cx, &md, 0x604, None), Err(PoolFull), "an insert into n's list");
        mark(&cx, x);
        assert!(!md.remove(&cx, x), "a removal of n's child");
        cx.full.set(false);
        // Once a block is free, either finishes both.
        assert!(md.remove(&cx, x));
        assert_eq!(strict_walk(&cx, &md).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn a_replacing_insert_whose_slot_changed_finishes_the_node_it_froze() {
        let (cx, md) = setup();
        // The node of key 1 << 62 hangs in the head's list at dimension 0, and so does key 0's
        // below it; the old position of 1 << 62 is then stale.
        let n = insert(&cx, &md, 1 << 62, None).unwrap();
        mark(&cx, n);
        let stale = md.locate(cx.mem(), 1 << 62);
        assert_eq!((stale.dc, stale.curr), (DIMS, n));
        insert(&cx, &md, 0, None).unwrap();
        assert_eq!(insert(&cx, &md, 1 << 62, Some(stale)), Ok(0), "the slot changed");
        assert_eq!(strict_walk(&cx, &md).unwrap(), [0]);
    }

    #[test]
    fn the_walk_reads_an_adoption_its_inserter_left_pending_as_finished() {
        let (cx, md) = setup();
        let mem = cx.mem();
        // 0x610 hangs in the head's list (dimension 0), and 0x710 in 0x610's list at 27.
        insert(&cx, &md, 0x610, None).unwrap();
        insert(&cx, &md, 0x710, None).unwrap();
        // An insert of 0x600 goes before 0x610 (they differ first at 29), adopting its slots
        // 0..29: its inserter publishes the node and dies before it adopts anything.
        let pos = md.locate(mem, 0x600);
        assert_eq!((pos.dp, pos.dc), (0, 29));
        let node = cx.alloc_node(node_bytes_from(pos.dp)).unwrap();
        // Relaxed: one thread.
        mem.store(node + KEY, 0x600, Ordering::Relaxed);
        mem.store(node + INFO, Info::final_state(node, true, 0).0, Ordering::Relaxed);
        fill(mem, node, &pos);
        mem.store(pos.pred + child(pos.dp), node, Ordering::Relaxed);
        let walk = |strict| {
            let mut keys = Vec::new();
            LinkedSet::<SimMem>::walk_checked(&md, &cx.pool, strict, &mut |_, k| keys.push(k as u64))
                .map(|_| keys.sort_unstable())
                .map(|()| keys)
        };
        assert_eq!(walk(false).unwrap(), [0x600, 0x610, 0x710], "0x710 is reached through the adopting node");
        assert!(walk(true).is_err(), "a strict walk refuses an adoption left pending");
        // Half done (the slot at 27 frozen, not yet copied), then done: the same keys.
        freeze(mem, pos.curr + child(27));
        assert_eq!(walk(false).unwrap(), [0x600, 0x610, 0x710]);
        finish_adoption(mem, node);
        assert_eq!(walk(true).unwrap(), [0x600, 0x610, 0x710]);
    }

    #[test]
    fn coordinates_are_the_base_4_digits_most_significant_first() {
        // 0x1B = 0b01_10_11: digits 1, 2, 3 in the last three dimensions.
        let key = 0x1Bu64 << 58 | 0x1B;
        let digits: Vec<u64> = (0..DIMS).map(|d| coord(key, d)).collect();
        let mut want = vec![0; DIMS];
        want[..3].copy_from_slice(&[1, 2, 3]);
        want[DIMS - 3..].copy_from_slice(&[1, 2, 3]);
        assert_eq!(digits, want);
        // The dimensions `petra/tests/loom.rs` relies on.
        assert_eq!(first_difference(0, 0x610), 26);
        assert_eq!(first_difference(0x610, 0x710), 27);
        assert_eq!(first_difference(0x600, 0x610), 29);
        assert_eq!(first_difference(0x700, 0x710), 29);
        assert_eq!(reach_max(0x1200_0000_0000_0000, 4), 0x12FF_FFFF_FFFF_FFFF);
        assert_eq!(reach_max(5, 0), u64::MAX);
        assert_eq!(reach_max(0xAB, 31), 0xAB);
        assert_eq!(reach_max(0xA8, 30), 0xAF);
    }

    #[test]
    fn a_node_holds_the_slots_of_its_base_and_above_and_ends_after_the_lowest() {
        assert_eq!(child(DIMS - 1), CHILDREN);
        assert_eq!(HEAD_BYTES, CHILDREN + 8 * DIMS as u64);
        for base in 0..DIMS {
            assert_eq!(child(base) + 8, node_bytes_from(base));
        }
        // Keys below 2^20 are reached through dimension 22 or higher: 10 slots, a 120-byte node.
        assert_eq!(first_difference(0, (1 << 20) - 1), 22);
        assert_eq!(node_bytes_from(22), 120);
    }
}

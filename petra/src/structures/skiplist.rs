//! The skiplist: Fraser-style towers over a sorted base chain.
//!
//! Level 0 is a chain exactly like the list's (same `next` word at +8), and is the truth: a key
//! is in the structure once its node is linked there, and every transaction protocol works on
//! level 0 only. The upper levels are an index, linked after level 0 and unlinked before it.
//!
//! ```text
//! +0        key (the common node header, see `node`)
//! +8        next[0]: successor at level 0 | deletion mark (the header's link word)
//! +16..+32  the rest of the common header
//! +32       meta: height (bits 0..8) | links (bits 8..): levels the node is linked at, plus one
//!           while its inserter is still building the tower
//! +40 + 8(l-1)  next[l] for 1 <= l < height
//!
//! In a skiplist of two-word keys the key's high word is at +32 and everything after it moves
//! up a word: meta at +40, next[l] at +48 + 8(l-1).
//! ```
//!
//! A node's height comes from a hash of its key (geometric, p = 1/2, at most [`MAX_HEIGHT`]).
//! Removal marks `next` from the top level down to level 0, then a search unlinks it level by
//! level. A node goes to the epoch collector only when its `links` count reaches zero: unlinked at
//! every level and no inserter still able to link it somewhere. (Retiring it at its level-0
//! unlink, as a list does, would be wrong: an inserter still building the tower could link it at
//! an upper level afterwards, where threads that pinned later could reach it.)

use std::sync::atomic::Ordering;

use super::node::{LINK, create_head, header_bytes, load_key};
use super::{Ctx, Inspect, LinkedSet, MARK, PoolFull, Seen, check_chain, checked_node, fault, mix_key, walk};
use crate::error::{AllocError, Damage};
use crate::mem::PMem;
use crate::pool::Pool;

/// The tallest tower.
pub(crate) const MAX_HEIGHT: usize = 16;
/// One link in a meta word's count of links (bits 8..).
const ONE_LINK: u64 = 1 << 8;

/// Offset of a node's meta word (height and link count), in a skiplist of two-word keys if
/// `wide`.
pub(crate) fn meta_off(wide: bool) -> u64 {
    header_bytes(wide)
}

/// Offset of `next[l]` in a node, in a skiplist of two-word keys if `wide`.
#[inline]
pub(crate) fn next_off(l: usize, wide: bool) -> u64 {
    if l == 0 { LINK } else { meta_off(wide) + 8 * l as u64 }
}

/// Bytes of a node of height `h`, in a skiplist of two-word keys if `wide`.
pub(crate) fn node_bytes_of(h: usize, wide: bool) -> u64 {
    meta_off(wide) + 8 * h as u64
}

/// The height of `key`'s node.
pub(crate) fn height_of(key: u128) -> usize {
    let z = mix_key(key);
    // One bit per level: each level is kept with probability 1/2.
    (1 + z.trailing_ones() as usize).min(MAX_HEIGHT)
}

/// Predecessors and successors at every level.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Towers {
    preds: [u64; MAX_HEIGHT],
    succs: [u64; MAX_HEIGHT],
}

/// A skiplist: its head tower.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkipList {
    /// The head sentinel, of height [`MAX_HEIGHT`].
    pub(crate) head: u64,
    /// Whether keys are two words.
    pub(crate) wide: bool,
}

impl SkipList {
    /// Allocates and persists an empty skiplist's head.
    pub(crate) fn create<M: PMem>(pool: &Pool<M>, wide: bool) -> Result<SkipList, AllocError> {
        let head =
            create_head(pool, node_bytes_of(MAX_HEIGHT, wide), &[(meta_off(wide), MAX_HEIGHT as u64 | ONE_LINK)])?;
        Ok(SkipList { head, wide })
    }

    /// Offset of `next[l]` in this skiplist's nodes.
    #[inline]
    pub(crate) fn next(&self, l: usize) -> u64 {
        next_off(l, self.wide)
    }

    /// Offset of the meta word in this skiplist's nodes.
    pub(crate) fn meta(&self) -> u64 {
        meta_off(self.wide)
    }

    /// Finds `key`: predecessors and successors at every level, and the node holding the key at
    /// level 0. Unlinks every marked node it passes.
    pub(crate) fn find<M: PMem>(&self, cx: &impl Ctx<M>, key: u128) -> (Towers, Option<u64>) {
        let mem = cx.mem();
        let mut t = Towers { preds: [0; MAX_HEIGHT], succs: [0; MAX_HEIGHT] };
        'retry: loop {
            let mut pred = self.head;
            for l in (0..MAX_HEIGHT).rev() {
                // Acquire: nodes reached through links are seen initialised.
                let mut curr = mem.load(pred + self.next(l), Ordering::Acquire) & !MARK;
                loop {
                    if curr == 0 {
                        break;
                    }
                    // Acquire: as for the link that reached `curr`.
                    let succ = mem.load(curr + self.next(l), Ordering::Acquire);
                    if succ & MARK != 0 {
                        // AcqRel: unlinking publishes the new link like any link.
                        if mem
                            .compare_exchange(
                                pred + self.next(l),
                                curr,
                                succ & !MARK,
                                Ordering::AcqRel,
                                Ordering::Acquire,
                            )
                            .is_err()
                        {
                            continue 'retry;
                        }
                        release_link(cx, self, curr);
                        curr = succ & !MARK;
                        continue;
                    }
                    if load_key(mem, curr, self.wide) < key {
                        pred = curr;
                        curr = succ;
                    } else {
                        break;
                    }
                }
                t.preds[l] = pred;
                t.succs[l] = curr;
            }
            let found = t.succs[0];
            let hit = found != 0 && load_key(mem, found, self.wide) == key;
            return (t, hit.then_some(found));
        }
    }
}

/// Drops one of `node`'s links; the last one hands it to the collector.
fn release_link<M: PMem>(cx: &impl Ctx<M>, list: &SkipList, node: u64) {
    // AcqRel: the thread that drops the last link sees every other thread's unlinking.
    let before = cx.mem().fetch_add(node + list.meta(), ONE_LINK.wrapping_neg(), Ordering::AcqRel);
    if (before >> 8) == 1 {
        cx.retire(node);
    }
}

/// Initialises a new node's tower words for `key`: all `next` zero, links = 2 (level 0, about to
/// be linked, and the inserter's building token).
fn init_tower<M: PMem>(list: &SkipList, mem: &M, node: u64, key: u128) {
    let height = height_of(key);
    // Relaxed (here and for the links): the node is unpublished; its link CAS (Release) publishes it.
    mem.store(node + list.meta(), height as u64 | (2 * ONE_LINK), Ordering::Relaxed);
    for l in 0..height {
        mem.store(node + list.next(l), 0, Ordering::Relaxed);
    }
}

impl<M: PMem + 'static> LinkedSet<M> for SkipList {
    type Pos = Towers;

    fn wide(&self) -> bool {
        self.wide
    }

    fn node_bytes(&self, key: u128, _pos: &Towers) -> u64 {
        node_bytes_of(height_of(key), self.wide)
    }

    fn built_bytes(&self, _prev: Option<u128>, key: u128) -> u64 {
        node_bytes_of(height_of(key), self.wide)
    }

    fn init_links(&self, mem: &M, node: u64, key: u128) {
        init_tower(self, mem, node, key);
    }

    fn search(&self, cx: &impl Ctx<M>, key: u128) -> (Towers, Option<u64>) {
        self.find(cx, key)
    }

    fn link(&self, cx: &impl Ctx<M>, pos: &Towers, node: u64) -> Result<bool, PoolFull> {
        let mem = cx.mem();
        // Relaxed: the node is unpublished; the CAS below (Release) publishes it.
        mem.store(node + self.next(0), pos.succs[0], Ordering::Relaxed);
        // Release: the node's words are visible before the link that reaches it.
        if mem
            .compare_exchange(pos.preds[0] + self.next(0), pos.succs[0], node, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return Ok(false);
        }
        // The key is in. Build the index tower, best effort: stop if the node is being removed.
        // Relaxed: key and height never change after publication.
        let key = load_key(mem, node, self.wide);
        let height = (mem.load(node + self.meta(), Ordering::Relaxed) & 0xFF) as usize;
        let mut t = *pos;
        'levels: for l in 1..height {
            loop {
                // Acquire: see a remover's mark together with what it did before.
                let nx = mem.load(node + self.next(l), Ordering::Acquire);
                if nx & MARK != 0 {
                    break 'levels;
                }
                // AcqRel: fails if a remover marked this level meanwhile.
                if mem
                    .compare_exchange(node + self.next(l), nx, t.succs[l], Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    break 'levels;
                }
                // AcqRel: count the link before it exists, so that it is never freed while linked.
                mem.fetch_add(node + self.meta(), ONE_LINK, Ordering::AcqRel);
                if mem
                    .compare_exchange(t.preds[l] + self.next(l), t.succs[l], node, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
                // AcqRel: as for the increment above.
                mem.fetch_add(node + self.meta(), ONE_LINK.wrapping_neg(), Ordering::AcqRel);
                let (fresh, found) = self.find(cx, key);
                if found != Some(node) {
                    break 'levels;
                }
                t = fresh;
            }
        }
        // A remover may have marked levels this thread linked after its search passed them: unlink
        // them now. Best-effort cleanup (Acquire, as for every mark): a mark this load misses is
        // harmless, since the link count keeps the node alive and any later search unlinks it.
        if mem.load(node + self.next(0), Ordering::Acquire) & MARK != 0 {
            let _ = self.find(cx, key);
        }
        release_link(cx, self, node); // the building token
        Ok(true)
    }

    fn help_remove(&self, cx: &impl Ctx<M>, node: u64) {
        let mem = cx.mem();
        // Relaxed: the height never changes after the node was published (with Release).
        let height = (mem.load(node + self.meta(), Ordering::Relaxed) & 0xFF) as usize;
        for l in (0..height).rev() {
            loop {
                // Acquire: as in `link`.
                let next = mem.load(node + self.next(l), Ordering::Acquire);
                if next & MARK != 0 {
                    break;
                }
                // AcqRel: the mark stops inserters from linking this level, and inserts after it.
                if mem
                    .compare_exchange(node + self.next(l), next, next | MARK, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    break;
                }
            }
        }
        let key = load_key(mem, node, self.wide);
        let _ = self.find(cx, key);
    }

    /// Level 0, from the predecessor the towers give.
    fn collect(&self, cx: &impl Ctx<M>, lo: u128, hi: u128, out: &mut Vec<Seen>) {
        walk(cx, |from| self.find(cx, from).0.preds[0] + self.next(0), (lo, hi), self.wide, out);
    }

    /// Every tower whole: each node's link count is its height.
    fn build(&self, mem: &M, nodes: &[(u64, u128)]) {
        let mut last = [self.head; MAX_HEIGHT];
        // Relaxed: recovery runs alone, and fences before the new nodes count.
        for l in 0..MAX_HEIGHT {
            mem.store(self.head + self.next(l), 0, Ordering::Relaxed);
        }
        for &(node, key) in nodes {
            let height = height_of(key);
            mem.store(node + self.meta(), height as u64 | (height as u64) << 8, Ordering::Relaxed);
            for (l, prev) in last.iter_mut().enumerate().take(height) {
                mem.store(node + self.next(l), 0, Ordering::Relaxed);
                mem.store(*prev + self.next(l), node, Ordering::Relaxed);
                *prev = node;
            }
        }
    }

    fn root(&self) -> (u64, u64) {
        (self.head, node_bytes_of(MAX_HEIGHT, self.wide))
    }

    /// Level 0 a chain (what a search reads for a key's node); if `strict`, also every other
    /// level in key order, unmarked, holding only nodes of level 0 tall enough for it, every
    /// tower whole (linked at each level below its height, the height its key's) and its link
    /// count its height (no inserter still building it).
    fn walk_checked(
        &self,
        cx: &impl Inspect<M>,
        strict: bool,
        visit: &mut dyn FnMut(u64, u128),
    ) -> Result<u64, Damage> {
        let mem = cx.mem();
        let shape = (self.wide, node_bytes_of(1, self.wide), strict, false);
        let base = check_chain(cx, self.head + self.next(0), shape, |_| true, visit)?;
        if !strict {
            return Ok(base.len() as u64);
        }
        // Relaxed (every load): the structure is at rest.
        let mut linked: std::collections::HashMap<u64, (usize, usize)> = std::collections::HashMap::new();
        for &node in &base {
            let height = height_of(load_key(mem, node, self.wide));
            checked_node(cx, node, node, node_bytes_of(height, self.wide))?;
            linked.insert(node, (height, 1));
        }
        for l in 1..MAX_HEIGHT {
            let mut last: Option<u128> = None;
            let mut at = self.head + self.next(l);
            let mut w = mem.load(at, Ordering::Relaxed);
            while w != 0 {
                if w & MARK != 0 {
                    return Err(fault(at, format!("level {l}: a marked link to {:#x}", w & !MARK)));
                }
                let Some((height, levels)) = linked.get_mut(&w) else {
                    return Err(fault(at, format!("level {l}: a link to {w:#x}, which is not at level 0")));
                };
                let key = load_key(mem, w, self.wide);
                if *height <= l {
                    return Err(fault(at, format!("level {l}: node {w:#x} of key {key:#x} is not that tall")));
                }
                if last.is_some_and(|k| k >= key) {
                    return Err(fault(at, format!("level {l}: key {key:#x} out of order")));
                }
                *levels += 1;
                last = Some(key);
                at = w + self.next(l);
                w = mem.load(at, Ordering::Relaxed);
            }
        }
        for (&node, &(height, levels)) in &linked {
            let meta = mem.load(node + self.meta(), Ordering::Relaxed);
            if levels != height || meta != height as u64 | (height as u64) << 8 {
                return Err(fault(
                    node + self.meta(),
                    format!("linked at {levels} of {height} levels, meta word {meta:#x} (height | links << 8)"),
                ));
            }
        }
        Ok(base.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heights_are_geometric_with_p_one_half() {
        let mut counts = [0u32; MAX_HEIGHT + 1];
        for k in 0..400_000u128 {
            counts[height_of(k)] += 1;
        }
        assert_eq!(counts[0], 0);
        // About 1/2 at height 1, 1/4 at 2, 1/8 at 3.
        assert!((196_000..204_000).contains(&counts[1]), "{counts:?}");
        assert!((96_000..104_000).contains(&counts[2]), "{counts:?}");
        assert!((47_000..53_000).contains(&counts[3]), "{counts:?}");
    }

    #[test]
    fn the_keys_of_the_loom_model_of_side_by_side_towers_have_two_levels() {
        // petra/tests/loom.rs builds towers of keys 1 and 3 side by side, beside key 11.
        assert_eq!([height_of(1), height_of(3), height_of(11)], [2, 2, 2]);
    }
}

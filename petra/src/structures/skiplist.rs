//! The skiplist: Fraser-style towers over a sorted base chain.
//!
//! Level 0 is a chain exactly like the list's (same `next` word at +40), and is the truth: a key
//! is in the structure once its node is linked there, and every transaction protocol works on
//! level 0 only. The upper levels are an index, linked after level 0 and unlinked before it.
//!
//! ```text
//! +0..+40   the common node header (see structures)
//! +40       next[0]: successor at level 0 | deletion mark
//! +48       meta: height (bits 0..8) | links (bits 8..): levels the node is linked at, plus one
//!           while its inserter is still building the tower
//! +56 + 8(l-1)  next[l] for 1 <= l < height
//!
//! In a skiplist of two-word keys the key's high word is at +48 and everything after it moves
//! up a word: meta at +56, next[l] at +64 + 8(l-1).
//! ```
//!
//! A node's height comes from a hash of its key (geometric, p = 1/2, at most [`MAX_HEIGHT`]).
//! Removal marks `next` from the top level down to level 0, then a search unlinks it level by
//! level. A node goes to the epoch collector only when its `links` count reaches zero: unlinked at
//! every level and no inserter still able to link it somewhere. (Retiring it at its level-0
//! unlink, as a list does, would be wrong: an inserter still building the tower could link it at
//! an upper level afterwards, where threads that pinned later could reach it.)

use std::sync::atomic::Ordering;

use crossbeam_epoch::Guard;

use super::{KEY_HI, LINKS, LinkedSet, MARK, Seen, load_key, mix_key, retire, walk};
use crate::error::AllocError;
use crate::mem::PMem;
use crate::pool::Pool;
use crate::tx::Handle;

/// The tallest tower.
pub const MAX_HEIGHT: usize = 16;
const LINK: u64 = 1 << 8;

/// Offset of a node's meta word (height and link count), in a skiplist of two-word keys if
/// `wide`.
pub fn meta_off(wide: bool) -> u64 {
    if wide { KEY_HI + 8 } else { LINKS + 8 }
}

/// Offset of `next[l]` in a node, in a skiplist of two-word keys if `wide`.
#[inline]
pub fn next_off(l: usize, wide: bool) -> u64 {
    if l == 0 { LINKS } else { meta_off(wide) + 8 * l as u64 }
}

/// Bytes of a node of height `h`, in a skiplist of two-word keys if `wide`.
pub(crate) fn node_bytes_of(h: usize, wide: bool) -> u64 {
    meta_off(wide) + 8 * h as u64
}

/// The height of `key`'s node.
pub fn height_of(key: u128) -> usize {
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
pub struct SkipList {
    /// The head sentinel, of height [`MAX_HEIGHT`].
    pub head: u64,
    /// Whether keys are two words.
    pub wide: bool,
}

impl SkipList {
    /// Allocates and persists an empty skiplist's head.
    pub(crate) fn create<M: PMem>(pool: &Pool<M>, wide: bool) -> Result<SkipList, AllocError> {
        let head =
            super::create_head(pool, node_bytes_of(MAX_HEIGHT, wide), &[(meta_off(wide), MAX_HEIGHT as u64 | LINK)])?;
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
    pub(crate) fn find<M: PMem + 'static>(&self, h: &Handle<M>, key: u128, guard: &Guard) -> (Towers, Option<u64>) {
        let mem = h.mem();
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
                        release_link(h, self, curr, guard);
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
fn release_link<M: PMem + 'static>(h: &Handle<M>, list: &SkipList, node: u64, guard: &Guard) {
    // AcqRel: the thread that drops the last link sees every other thread's unlinking.
    let before = h.mem().fetch_add(node + list.meta(), LINK.wrapping_neg(), Ordering::AcqRel);
    if (before >> 8) == 1 {
        retire(h, node, guard);
    }
}

/// Initialises a new node's tower words for `key`: all `next` zero, links = 2 (level 0, about to
/// be linked, and the inserter's building token).
fn init_tower<M: PMem>(list: &SkipList, mem: &M, node: u64, key: u128) {
    let height = height_of(key);
    // Relaxed (here and for the links): the node is unpublished; its link CAS (Release) publishes it.
    mem.store(node + list.meta(), height as u64 | (2 * LINK), Ordering::Relaxed);
    for l in 0..height {
        mem.store(node + list.next(l), 0, Ordering::Relaxed);
    }
}

impl<M: PMem + 'static> LinkedSet<M> for SkipList {
    type Pos = Towers;

    fn wide(&self) -> bool {
        self.wide
    }

    fn node_bytes(&self, key: u128) -> u64 {
        node_bytes_of(height_of(key), self.wide)
    }

    fn init_links(&self, mem: &M, node: u64, key: u128) {
        init_tower(self, mem, node, key);
    }

    fn search(&self, h: &mut Handle<M>, key: u128, guard: &Guard) -> (Towers, Option<u64>) {
        self.find(h, key, guard)
    }

    fn link(&self, h: &mut Handle<M>, pos: &Towers, node: u64, guard: &Guard) -> bool {
        let mem = h.mem();
        // Relaxed: the node is unpublished; the CAS below (Release) publishes it.
        mem.store(node + self.next(0), pos.succs[0], Ordering::Relaxed);
        // Release: the node's words are visible before the link that reaches it.
        if mem
            .compare_exchange(pos.preds[0] + self.next(0), pos.succs[0], node, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return false;
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
                mem.fetch_add(node + self.meta(), LINK, Ordering::AcqRel);
                if mem
                    .compare_exchange(t.preds[l] + self.next(l), t.succs[l], node, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
                // AcqRel: as for the increment above.
                mem.fetch_add(node + self.meta(), LINK.wrapping_neg(), Ordering::AcqRel);
                let (fresh, found) = self.find(h, key, guard);
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
            let _ = self.find(h, key, guard);
        }
        release_link(h, self, node, guard); // the building token
        true
    }

    fn help_remove(&self, h: &mut Handle<M>, node: u64, guard: &Guard) {
        let mem = h.mem();
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
        let _ = self.find(h, key, guard);
    }

    /// Level 0, from the predecessor the towers give.
    fn collect(&self, h: &mut Handle<M>, lo: u128, hi: u128, guard: &Guard, out: &mut Vec<Seen>) {
        walk(h, |h, from| self.find(h, from, guard).0.preds[0] + self.next(0), (lo, hi), self.wide, guard, out);
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
}

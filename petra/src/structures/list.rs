//! The list set, and the sorted chain it is made of (which the hash map's buckets share).
//!
//! A chain hangs off one link word (a list's head sentinel, a hash map's bucket). A node's `next`
//! word holds the successor's offset with bit 0 as Harris's deletion mark. A node leaves a chain
//! in three steps, each helped by whoever meets it half done: its info word is marked (only while
//! it still names the committed Delete or Remove that made it absent, so a node taken over by a
//! later transaction is never removed), its `next` is marked, and a search unlinks it. The thread
//! whose CAS unlinks it hands it to the epoch collector, which frees it once no thread can still
//! be reading it.
//!
//! ```text
//! +0       key (the common node header, see `node`)
//! +8       next: successor offset | deletion mark (the header's link word)
//! +16..+32 the rest of the common header
//! +32      the key's high word, in a chain of two-word keys
//! ```

use std::sync::atomic::Ordering;

use super::node::{LINK, create_head, header_bytes, load_key};
use super::{Ctx, Inspect, LinkedSet, MARK, PoolFull, Seen, check_chain, walk};
use crate::error::{AllocError, Damage};
use crate::mem::PMem;
use crate::pool::Pool;

/// Offset of a chain node's `next` word.
pub(crate) const NEXT: u64 = LINK;
/// Bytes of a list's head sentinel (whose key is never read, so it has no high word).
const HEAD_BYTES: u64 = header_bytes(false);

/// Bytes of a chain node of one-word keys, or of two if `wide`: the common header alone.
pub(crate) fn node_bytes(wide: bool) -> u64 {
    header_bytes(wide)
}

/// Where a new node would go in a chain: the address of the link word to swing, and the node it
/// holds now (0 for the end).
pub(crate) type ChainPos = (u64, u64);

/// Finds `key` in the chain hanging off the link word at `link` (of two-word keys if `wide`):
/// the position for a new node, and the node holding the key. Unlinks every marked node on its
/// way.
pub(crate) fn chain_search<M: PMem>(cx: &impl Ctx<M>, link: u64, key: u128, wide: bool) -> (ChainPos, Option<u64>) {
    chain_search_after(cx, link, None, key, wide)
}

/// [`chain_search`], starting at the node `after` (of a key below `key`) instead of the chain's
/// start, unless its `next` is marked: the caller is pinned and saw `after` linked since it
/// pinned (a node leaves a chain only once its `next` is marked, and its block is reused only
/// once every thread pinned then has unpinned), so an unmarked `after` is still in the chain and
/// every key up to its own lies before it. A search that must start again starts at `link`.
pub(crate) fn chain_search_after<M: PMem>(
    cx: &impl Ctx<M>,
    link: u64,
    after: Option<u64>,
    key: u128,
    wide: bool,
) -> (ChainPos, Option<u64>) {
    let mem = cx.mem();
    let mut start = after.map(|node| node + NEXT);
    'retry: loop {
        // Acquire (both): a node reached through a link is seen initialised (links are
        // published with Release).
        let (mut pred_link, mut curr) = match start.take() {
            Some(next) => match mem.load(next, Ordering::Acquire) {
                // `after` is leaving the chain: from its start.
                succ if succ & MARK != 0 => continue 'retry,
                succ => (next, succ),
            },
            None => (link, mem.load(link, Ordering::Acquire) & !MARK),
        };
        loop {
            if curr == 0 {
                return ((pred_link, 0), None);
            }
            // Acquire: as for the link that reached `curr`.
            let succ = mem.load(curr + NEXT, Ordering::Acquire);
            if succ & MARK != 0 {
                // AcqRel: unlinking publishes the new link like any link.
                if mem.compare_exchange(pred_link, curr, succ & !MARK, Ordering::AcqRel, Ordering::Acquire).is_err() {
                    continue 'retry;
                }
                cx.retire(curr);
                curr = succ & !MARK;
                continue;
            }
            let k = load_key(mem, curr, wide);
            if k >= key {
                return ((pred_link, curr), (k == key).then_some(curr));
            }
            pred_link = curr + NEXT;
            curr = succ;
        }
    }
}

/// Links the initialised, unpublished `node` at `pos`; false if the position changed.
pub(crate) fn chain_link<M: PMem>(mem: &M, pos: &ChainPos, node: u64) -> bool {
    let (pred_link, succ) = *pos;
    // Relaxed: the node is unpublished; the CAS below (Release) publishes it.
    mem.store(node + NEXT, succ, Ordering::Relaxed);
    // Release: the node's words are visible before the link that reaches it.
    mem.compare_exchange(pred_link, succ, node, Ordering::Release, Ordering::Relaxed).is_ok()
}

/// Marks `node`'s `next` (Harris's logical deletion), if not yet: from then on no insert after
/// the node succeeds, and every search that passes it unlinks it. Returns the marked word.
pub(crate) fn chain_mark<M: PMem>(mem: &M, node: u64) -> u64 {
    loop {
        let next = mem.load(node + NEXT, Ordering::Acquire);
        if next & MARK != 0 {
            return next;
        }
        // AcqRel: marking orders against inserts after the node, which then fail.
        if mem.compare_exchange(node + NEXT, next, next | MARK, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return next | MARK;
        }
    }
}

/// Marks `node`'s `next` and unlinks it from the chain at `link` (of two-word keys if `wide`):
/// through `pred_link` if given (the link word a search just found holding `node`) and it still
/// holds `node` unmarked, else by a search from `link`, which unlinks every marked node on its
/// way, this one included.
pub(crate) fn chain_remove<M: PMem>(cx: &impl Ctx<M>, link: u64, pred_link: Option<u64>, node: u64, wide: bool) {
    let mem = cx.mem();
    let succ = chain_mark(mem, node);
    // AcqRel: unlinking publishes the new link like any link (as in `chain_search`). It fails
    // if the predecessor changed meanwhile or is marked itself (its link then holds the mark).
    if let Some(pred_link) = pred_link
        && mem.compare_exchange(pred_link, node, succ & !MARK, Ordering::AcqRel, Ordering::Acquire).is_ok()
    {
        cx.retire(node);
        return;
    }
    let key = load_key(mem, node, wide);
    let _ = chain_search(cx, link, key, wide);
}

/// Links `nodes` (fresh, with their keys, in key order) into chains hanging off the link words
/// `links`, each on the chain `chain_of(key)` gives, replacing what the links held: recovery's
/// rewrite, alone.
pub(crate) fn build_chains<M: PMem>(mem: &M, links: &[u64], chain_of: impl Fn(u128) -> usize, nodes: &[(u64, u128)]) {
    let mut next = vec![0u64; links.len()];
    // Relaxed: recovery runs alone, and fences before the new nodes count.
    for &(node, key) in nodes.iter().rev() {
        let c = chain_of(key);
        mem.store(node + NEXT, next[c], Ordering::Relaxed);
        next[c] = node;
    }
    for (&link, &first) in links.iter().zip(&next) {
        mem.store(link, first, Ordering::Relaxed);
    }
}

/// A list set: one chain, hanging off a head sentinel node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    /// The head sentinel (never removed; its key is not compared).
    pub(crate) head: u64,
    /// Whether keys are two words.
    pub(crate) wide: bool,
}

impl List {
    /// Allocates and persists an empty list's head.
    pub(crate) fn create<M: PMem>(pool: &Pool<M>, wide: bool) -> Result<List, AllocError> {
        Ok(List { head: create_head(pool, HEAD_BYTES, &[])?, wide })
    }

    /// The link word the chain hangs off.
    pub(crate) fn link(&self) -> u64 {
        self.head + NEXT
    }
}

impl<M: PMem + 'static> LinkedSet<M> for List {
    type Pos = ChainPos;

    fn wide(&self) -> bool {
        self.wide
    }

    fn node_bytes(&self, _key: u128, _pos: &ChainPos) -> u64 {
        node_bytes(self.wide)
    }

    fn built_bytes(&self, _prev: Option<u128>, _key: u128) -> u64 {
        node_bytes(self.wide)
    }

    fn search(&self, cx: &impl Ctx<M>, key: u128) -> (ChainPos, Option<u64>) {
        chain_search(cx, self.link(), key, self.wide)
    }

    /// From `after`: a list's searches are its cost, and a transaction's later op on a larger
    /// key need not walk again the part of the list its earlier op walked.
    fn search_after(&self, cx: &impl Ctx<M>, key: u128, after: u64) -> (ChainPos, Option<u64>) {
        chain_search_after(cx, self.link(), Some(after), key, self.wide)
    }

    fn link(&self, cx: &impl Ctx<M>, pos: &ChainPos, node: u64) -> Result<bool, PoolFull> {
        Ok(chain_link(cx.mem(), pos, node))
    }

    /// Marks the node's `next` and leaves the unlink to the next search that passes it (one for
    /// a larger key, a scan over it) or to the next checkpoint round's [`sweep`]: a search from
    /// the head would walk half the list again, and a list's walks are its cost.
    ///
    /// [`sweep`]: LinkedSet::sweep
    fn help_remove(&self, cx: &impl Ctx<M>, node: u64) {
        chain_mark(cx.mem(), node);
    }

    /// One walk of the whole list, which unlinks every marked node on its way.
    fn sweep(&self, cx: &impl Ctx<M>) {
        let _ = chain_search(cx, List::link(self), u128::MAX, self.wide);
    }

    fn help_remove_at(&self, cx: &impl Ctx<M>, &(pred_link, curr): &ChainPos, node: u64) {
        chain_remove(cx, List::link(self), (curr == node).then_some(pred_link), node, self.wide)
    }

    fn collect(&self, cx: &impl Ctx<M>, lo: u128, hi: u128, out: &mut Vec<Seen>) {
        let wide = self.wide;
        walk(cx, |from| chain_search(cx, self.link(), from, wide).0.0, (lo, hi), wide, out);
    }

    fn build(&self, mem: &M, nodes: &[(u64, u128)]) {
        build_chains(mem, &[self.link()], |_| 0, nodes);
    }

    fn root(&self) -> (u64, u64) {
        (self.head, HEAD_BYTES)
    }

    fn walk_checked(
        &self,
        cx: &impl Inspect<M>,
        strict: bool,
        visit: &mut dyn FnMut(u64, u128),
    ) -> Result<u64, Damage> {
        let shape = (self.wide, node_bytes(self.wide), strict, true);
        Ok(check_chain(cx, self.link(), shape, |_| true, visit)?.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::mem::SimMem;
    use crate::structures::info::Info;
    use crate::structures::node::KEY;

    /// A thread's context over bare memory: it records the nodes it retires.
    struct Cx {
        mem: SimMem,
        retired: RefCell<Vec<u64>>,
    }

    impl Ctx<SimMem> for Cx {
        fn mem(&self) -> &SimMem {
            &self.mem
        }
        fn retire(&self, node: u64) {
            self.retired.borrow_mut().push(node);
        }
        fn resolve(&self, _: Info) -> Option<u64> {
            None
        }
        fn has_record(&self, _: u64) -> bool {
            unreachable!("these tests remove no node by its op")
        }
    }

    /// The link word at 64, then a node per key at 128, 192, ..., chained in order.
    fn chain(keys: &[u64]) -> Cx {
        let mem = SimMem::new(4096, 4096);
        let node = |i: usize| 128 + 64 * i as u64;
        mem.store(LINK, if keys.is_empty() { 0 } else { node(0) }, Ordering::Relaxed);
        for (i, &k) in keys.iter().enumerate() {
            mem.store(node(i) + KEY, k, Ordering::Relaxed);
            let next = if i + 1 < keys.len() { node(i + 1) } else { 0 };
            mem.store(node(i) + NEXT, next, Ordering::Relaxed);
        }
        Cx { mem, retired: RefCell::new(Vec::new()) }
    }

    const LINK: u64 = 64;

    /// The keys the chain holds, marked nodes included, each with its mark.
    fn keys(cx: &Cx) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        let mut curr = cx.mem.load(LINK, Ordering::Relaxed) & !MARK;
        while curr != 0 {
            let next = cx.mem.load(curr + NEXT, Ordering::Relaxed);
            out.push((cx.mem.load(curr + KEY, Ordering::Relaxed), next & MARK != 0));
            curr = next & !MARK;
        }
        out
    }

    /// A search after a node starts there while the node's `next` is unmarked: it finds what a
    /// search from the start finds, and passes no node before it (a marked one there stays
    /// linked). Once the node's `next` is marked, it starts at the chain's start.
    #[test]
    fn a_search_after_a_node_starts_there_unless_the_node_is_leaving() {
        let (n10, n20, n30, n40) = (128, 192, 256, 320);
        for key in [25, 30, 35, 50] {
            let cx = chain(&[10, 20, 30, 40]);
            let from_start = chain_search(&cx, LINK, key, false);
            assert_eq!(chain_search_after(&cx, LINK, Some(n20), key, false), from_start, "key {key}");
        }
        let cx = chain(&[10, 20, 30, 40]);
        chain_mark(&cx.mem, n10);
        assert_eq!(chain_search_after(&cx, LINK, Some(n20), 35, false), ((n30 + NEXT, n40), None));
        assert_eq!(keys(&cx), [(10, true), (20, false), (30, false), (40, false)], "10 was not passed");
        assert!(cx.retired.borrow().is_empty());

        chain_mark(&cx.mem, n20);
        assert_eq!(chain_search_after(&cx, LINK, Some(n20), 35, false), ((n30 + NEXT, n40), None));
        assert_eq!(keys(&cx), [(30, false), (40, false)], "from the start: 10 and 20 unlinked");
        assert_eq!(*cx.retired.borrow(), [n10, n20]);
    }

    /// A removal unlinks through the link its search found when that still holds the node
    /// unmarked, with no second search; when an insert took the link meanwhile, or the
    /// predecessor was marked, it searches again: the insert stays, and every marked node on
    /// the way goes. Each node unlinked is retired once, by the thread whose CAS unlinked it.
    #[test]
    fn a_removal_unlinks_through_the_link_its_search_found_only_while_that_holds_it() {
        let (n10, n20) = (128, 192);
        // Nothing changed since the search: one CAS.
        let cx = chain(&[10, 20, 30]);
        let (pos, found) = chain_search(&cx, LINK, 20, false);
        assert_eq!((pos, found), ((n10 + NEXT, n20), Some(n20)));
        chain_remove(&cx, LINK, Some(pos.0), n20, false);
        assert_eq!(keys(&cx), [(10, false), (30, false)]);
        assert_eq!(*cx.retired.borrow(), [n20]);

        // Key 15 went in before 20 after the search: the link names it now.
        let cx = chain(&[10, 20, 30]);
        let (pos, _) = chain_search(&cx, LINK, 20, false);
        let n15 = 512;
        cx.mem.store(n15 + KEY, 15, Ordering::Relaxed);
        assert!(chain_link(&cx.mem, &pos, n15));
        chain_remove(&cx, LINK, Some(pos.0), n20, false);
        assert_eq!(keys(&cx), [(10, false), (15, false), (30, false)]);
        assert_eq!(*cx.retired.borrow(), [n20]);

        // Key 10 was marked for removal after the search: its link holds the mark.
        let cx = chain(&[10, 20, 30]);
        let (pos, _) = chain_search(&cx, LINK, 20, false);
        cx.mem.store(n10 + NEXT, n20 | MARK, Ordering::Relaxed);
        chain_remove(&cx, LINK, Some(pos.0), n20, false);
        assert_eq!(keys(&cx), [(30, false)]);
        assert_eq!(*cx.retired.borrow(), [n10, n20]);
    }
}

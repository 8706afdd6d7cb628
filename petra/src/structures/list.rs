//! The list set: a sorted Harris list of nodes, one per key.
//!
//! A node's `next` word holds the successor's offset with bit 0 as Harris's deletion mark. A node
//! leaves the list in three steps, each helped by whoever meets it half done: its info word is
//! marked (only while it still names the committed Delete or Remove that made it absent, so a
//! node taken over by a later transaction is never removed), its `next` is marked, and a search
//! unlinks it. The thread whose CAS unlinks it hands it to the epoch collector, which frees it
//! once no thread can still be reading it.
//!
//! ```text
//! +0..+40  the common node header (see structures)
//! +40      next: successor offset | deletion mark
//! ```

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::Guard;

use super::{INFO, KEY, LINKS, LinkedSet};
use crate::error::AllocError;
use crate::mem::PMem;
use crate::pool::{AllocCache, Pool};
use crate::tx::Handle;
use crate::tx::info::Info;

const NEXT: u64 = LINKS;
/// Bytes of a list node.
pub const NODE_BYTES: u64 = LINKS + 8;
const MARK: u64 = 1;

/// A list set: the offset of its head sentinel.
#[derive(Debug, Clone, Copy)]
pub struct List {
    /// The head sentinel (never removed; its key is not compared).
    pub head: u64,
}

impl List {
    /// Allocates and persists an empty list's head.
    pub(crate) fn create<M: PMem>(pool: &Pool<M>) -> Result<List, AllocError> {
        let mut cache = AllocCache::new();
        let head = pool.alloc(&mut cache, NODE_BYTES)?.get();
        pool.release_cache(&mut cache);
        let mem = pool.mem();
        for w in (0..NODE_BYTES).step_by(8) {
            mem.store(head + w, 0, Ordering::Relaxed);
        }
        mem.store(head + INFO, Info::final_state(head, false, 0).0, Ordering::Relaxed);
        mem.flush_range(head, NODE_BYTES);
        // Fence: the head is durable before the root entry names it.
        mem.fence();
        Ok(List { head })
    }

    /// Removes the node of `key` if its info word still is `info` (the committed op that made it
    /// absent).
    pub(crate) fn remove_if<M: PMem + 'static>(&self, h: &mut Handle<M>, key: u64, info: Info, guard: &Guard) {
        let (_, found) = LinkedSet::search(self, h, key, guard);
        let Some(node) = found else { return };
        // AcqRel: the mark is a transition of the info word like any other.
        if h.mem().compare_exchange(node + INFO, info.0, info.marked().0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.help_remove(h, node, guard);
        }
    }

    /// The present keys and their values, in order.
    pub(crate) fn entries<M: PMem + 'static>(&self, h: &Handle<M>, guard: &Guard) -> Vec<(u64, u64)> {
        let mem = h.mem();
        let mut out = Vec::new();
        let mut curr = mem.load(self.head + NEXT, Ordering::Acquire) & !MARK;
        while curr != 0 {
            let cur = Info(mem.load(curr + INFO, Ordering::Acquire));
            if !cur.is_marked()
                && let Some(v) = h.resolve(cur, None, guard)
            {
                out.push((mem.load(curr + KEY, Ordering::Relaxed), v));
            }
            curr = mem.load(curr + NEXT, Ordering::Acquire) & !MARK;
        }
        out
    }

    /// Hands an unlinked node to the collector.
    fn retire<M: PMem + 'static>(h: &Handle<M>, node: u64, guard: &Guard) {
        let deferred = Arc::clone(&h.inner.deferred);
        guard.defer(move || deferred.frees.push(node));
    }
}

impl<M: PMem + 'static> LinkedSet<M> for List {
    /// (predecessor, successor) around the key.
    type Pos = (u64, u64);

    fn node_bytes(&self) -> u64 {
        NODE_BYTES
    }

    fn search(&self, h: &mut Handle<M>, key: u64, guard: &Guard) -> ((u64, u64), Option<u64>) {
        let mem = h.mem();
        'retry: loop {
            let mut pred = self.head;
            // Acquire: a node reached through a link is seen initialised (links are published
            // with Release).
            let mut curr = mem.load(pred + NEXT, Ordering::Acquire) & !MARK;
            loop {
                if curr == 0 {
                    return ((pred, 0), None);
                }
                let succ = mem.load(curr + NEXT, Ordering::Acquire);
                if succ & MARK != 0 {
                    // AcqRel: unlinking publishes the new link like any link.
                    if mem
                        .compare_exchange(pred + NEXT, curr, succ & !MARK, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        continue 'retry;
                    }
                    List::retire(h, curr, guard);
                    curr = succ & !MARK;
                    continue;
                }
                let k = mem.load(curr + KEY, Ordering::Relaxed);
                if k >= key {
                    return ((pred, curr), (k == key).then_some(curr));
                }
                pred = curr;
                curr = succ;
            }
        }
    }

    fn link(&self, h: &mut Handle<M>, pos: &(u64, u64), node: u64, _guard: &Guard) -> bool {
        let (pred, succ) = *pos;
        let mem = h.mem();
        mem.store(node + NEXT, succ, Ordering::Relaxed);
        // Release: the node's words are visible before the link that reaches it.
        mem.compare_exchange(pred + NEXT, succ, node, Ordering::Release, Ordering::Relaxed).is_ok()
    }

    fn help_remove(&self, h: &mut Handle<M>, node: u64, guard: &Guard) {
        let mem = h.mem();
        loop {
            let next = mem.load(node + NEXT, Ordering::Acquire);
            if next & MARK != 0 {
                break;
            }
            // AcqRel: marking orders against inserts after the node, which then fail.
            if mem.compare_exchange(node + NEXT, next, next | MARK, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                break;
            }
        }
        let key = mem.load(node + KEY, Ordering::Relaxed);
        // The search unlinks every marked node on its way, this one included.
        let _ = self.search(h, key, guard);
    }
}

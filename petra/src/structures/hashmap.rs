//! The hash map: a fixed array of buckets, each a sorted chain of nodes (the list's chain).
//!
//! The number of buckets is chosen at creation and never changes (no resizing): choose about as
//! many buckets as keys you expect, and a chain stays a node or two long. Values and the Update
//! op work as in every structure; the map is not ordered (entries come out sorted per bucket,
//! and [`Engine::entries`](crate::Engine::entries) sorts them).
//!
//! The bucket array is an engine region of `buckets` link words, found again through the root
//! entry (its offset and length).

use crossbeam_epoch::Guard;

use super::list::{ChainPos, NODE_BYTES, chain_link, chain_remove, chain_search};
use super::{LinkedSet, Seen, mix64, walk};
use crate::error::AllocError;
use crate::mem::PMem;
use crate::pool::Pool;
use crate::tx::Handle;

/// Region tag of bucket arrays.
pub(crate) const BUCKETS_TAG: u16 = 0x6275;

/// A hash map: its bucket array.
#[derive(Debug, Clone, Copy)]
pub struct HashMap {
    /// Offset of the bucket array.
    pub buckets: u64,
    /// Number of buckets.
    pub n: u64,
}

impl HashMap {
    /// Allocates an empty bucket array (zeroed and persisted by the region allocator).
    pub(crate) fn create<M: PMem>(pool: &Pool<M>, buckets: u64) -> Result<HashMap, AllocError> {
        let n = buckets.max(1);
        let off = pool.alloc_region(BUCKETS_TAG, n * 8)?.get();
        Ok(HashMap { buckets: off, n })
    }

    /// The bucket `key` hashes to.
    pub(crate) fn bucket_of(&self, key: u64) -> u64 {
        mix64(key) % self.n
    }

    /// The link word of `key`'s bucket.
    pub(crate) fn bucket_link(&self, key: u64) -> u64 {
        self.bucket(self.bucket_of(key))
    }

    /// The link word of bucket `i`.
    pub(crate) fn bucket(&self, i: u64) -> u64 {
        self.buckets + 8 * i
    }
}

impl<M: PMem + 'static> LinkedSet<M> for HashMap {
    type Pos = ChainPos;

    fn node_bytes(&self, _key: u64) -> u64 {
        NODE_BYTES
    }

    fn search(&self, h: &mut Handle<M>, key: u64, guard: &Guard) -> (ChainPos, Option<u64>) {
        chain_search(h, self.bucket_link(key), key, guard)
    }

    fn link(&self, h: &mut Handle<M>, pos: &ChainPos, node: u64, _guard: &Guard) -> bool {
        chain_link(h.mem(), pos, node)
    }

    fn help_remove(&self, h: &mut Handle<M>, node: u64, guard: &Guard) {
        // Relaxed: a node's key never changes after it was published.
        let key = h.mem().load(node + super::KEY, std::sync::atomic::Ordering::Relaxed);
        chain_remove(h, self.bucket_link(key), node, guard)
    }

    fn ordered(&self) -> bool {
        false
    }

    /// Every bucket in turn: a range costs a walk of the whole map.
    fn collect(&self, h: &mut Handle<M>, lo: u64, hi: u64, guard: &Guard, out: &mut Vec<Seen>) {
        for i in 0..self.n {
            walk(h, |h, from| chain_search(h, self.bucket(i), from, guard).0.0, lo, hi, guard, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_keys_spread_over_the_buckets() {
        let map = HashMap { buckets: 0, n: 64 };
        let mut counts = [0u32; 64];
        for k in 0..64_000u64 {
            counts[map.bucket_of(k) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }
}

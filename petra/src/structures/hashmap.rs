//! The hash map: a fixed array of buckets, each a sorted chain of nodes (the list's chain).
//!
//! The number of buckets is chosen at creation and never changes (no resizing): choose about as
//! many buckets as keys you expect, and a chain stays a node or two long. Values and the Update
//! op work as in every structure; the map is not ordered (entries come out sorted per bucket,
//! and a scan sorts them).
//!
//! The bucket array is an engine region of `buckets` link words, found again through the root
//! entry (its offset and length).

use std::sync::atomic::Ordering;

use super::list::{ChainPos, build_chains, chain_link, chain_remove, chain_search, node_bytes};
use super::node::load_key;
use super::{Ctx, Inspect, LinkedSet, MARK, PoolFull, Seen, check_chain, mix_key, walk};
use crate::error::{AllocError, Damage};
use crate::mem::PMem;
use crate::pool::Pool;

/// Region tag of bucket arrays (see `meta` for every tag).
pub(crate) const BUCKETS_TAG: u8 = 3;

/// A hash map: its bucket array.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HashMap {
    /// Offset of the bucket array.
    pub(crate) buckets: u64,
    /// Number of buckets.
    pub(crate) n: u64,
    /// Whether keys are two words.
    pub(crate) wide: bool,
}

impl HashMap {
    /// Allocates an empty bucket array (zeroed and persisted by the region allocator).
    pub(crate) fn create<M: PMem>(pool: &Pool<M>, buckets: u64, wide: bool) -> Result<HashMap, AllocError> {
        let n = buckets.max(1);
        let bytes = n.checked_mul(8).ok_or(AllocError::TooLarge { requested: u64::MAX, limit: pool.max_len() })?;
        let off = pool.alloc_region(BUCKETS_TAG, bytes)?.get();
        Ok(HashMap { buckets: off, n, wide })
    }

    /// The hash map a root entry names, if its bucket array is there: a region of bucket arrays
    /// holding `n` link words.
    pub(crate) fn open<M: PMem>(pool: &Pool<M>, buckets: u64, n: u64, wide: bool) -> Result<HashMap, String> {
        let len = pool
            .region_at(crate::pool::POff::new(buckets), BUCKETS_TAG)
            .ok_or_else(|| format!("its bucket array at {buckets:#x} is not there"))?;
        if n == 0 || n.checked_mul(8).is_none_or(|bytes| bytes > len) {
            return Err(format!("{n} buckets do not fit its bucket array of {len} bytes"));
        }
        Ok(HashMap { buckets, n, wide })
    }

    /// The bucket `key` hashes to.
    pub(crate) fn bucket_of(&self, key: u128) -> u64 {
        mix_key(key) % self.n
    }

    /// The link word of `key`'s bucket.
    pub(crate) fn bucket_link(&self, key: u128) -> u64 {
        self.bucket(self.bucket_of(key))
    }

    /// The link word of bucket `i`.
    pub(crate) fn bucket(&self, i: u64) -> u64 {
        self.buckets + 8 * i
    }
}

impl<M: PMem + 'static> LinkedSet<M> for HashMap {
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

    fn prefetch(&self, mem: &M, key: u128) {
        mem.prefetch(self.bucket_link(key))
    }

    fn prefetch_first(&self, mem: &M, key: u128) {
        // Relaxed: a hint; the node is only prefetched, never read here.
        mem.prefetch(mem.load(self.bucket_link(key), Ordering::Relaxed) & !MARK)
    }

    fn search(&self, cx: &impl Ctx<M>, key: u128) -> (ChainPos, Option<u64>) {
        chain_search(cx, self.bucket_link(key), key, self.wide)
    }

    fn link(&self, cx: &impl Ctx<M>, pos: &ChainPos, node: u64) -> Result<bool, PoolFull> {
        Ok(chain_link(cx.mem(), pos, node))
    }

    fn help_remove(&self, cx: &impl Ctx<M>, node: u64) {
        let key = load_key(cx.mem(), node, self.wide);
        chain_remove(cx, self.bucket_link(key), None, node, self.wide)
    }

    fn help_remove_at(&self, cx: &impl Ctx<M>, &(pred_link, curr): &ChainPos, node: u64) {
        let key = load_key(cx.mem(), node, self.wide);
        chain_remove(cx, self.bucket_link(key), (curr == node).then_some(pred_link), node, self.wide)
    }

    fn ordered(&self) -> bool {
        false
    }

    /// Every bucket in turn: a range costs a walk of the whole map.
    fn collect(&self, cx: &impl Ctx<M>, lo: u128, hi: u128, out: &mut Vec<Seen>) {
        let wide = self.wide;
        for i in 0..self.n {
            if !walk(cx, |from| chain_search(cx, self.bucket(i), from, wide).0.0, (lo, hi), wide, out) {
                return;
            }
        }
    }

    fn build(&self, mem: &M, nodes: &[(u64, u128)]) {
        let buckets: Vec<u64> = (0..self.n).map(|i| self.bucket(i)).collect();
        build_chains(mem, &buckets, |key| self.bucket_of(key) as usize, nodes);
    }

    /// The bucket array: a region, not a block.
    fn root(&self) -> (u64, u64) {
        (self.buckets, 8 * self.n)
    }

    /// Every bucket a chain of the keys that hash to it.
    fn walk_checked(
        &self,
        cx: &impl Inspect<M>,
        strict: bool,
        visit: &mut dyn FnMut(u64, u128),
    ) -> Result<u64, Damage> {
        let shape = (self.wide, node_bytes(self.wide), strict, false);
        let mut nodes = 0;
        for i in 0..self.n {
            nodes += check_chain(cx, self.bucket(i), shape, |key| self.bucket_of(key) == i, visit)?.len() as u64;
        }
        Ok(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_keys_spread_over_the_buckets() {
        let map = HashMap { buckets: 0, n: 64, wide: true };
        for high in [0, 1, 0xFFFF_0000] {
            // One-word keys, and two-word keys that differ only in their high word.
            let mut counts = [0u32; 64];
            for k in 0..64_000u128 {
                let key = if high == 0 { k } else { (k + high) << 64 };
                counts[map.bucket_of(key) as usize] += 1;
            }
            assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
        }
    }
}

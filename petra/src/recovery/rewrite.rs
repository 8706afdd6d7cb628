//! Recovery's third phase, the **rewrite**: every structure built anew from fresh, normalised
//! nodes of its present keys, committed by one fenced store of the epoch.
//!
//! Each structure builds itself from its nodes in key order (`LinkedSet::build`). The nodes are
//! written under a fresh attempt number, flushed with their structure's head (or bucket array),
//! and fenced with the txid reservation; only then does the meta region's epoch move to the
//! attempt, which makes the new nodes the truth and every older descriptor and record void. A
//! crash before that leaves the old epoch in force, and with it the old descriptors and records:
//! recovery simply runs again, under the next attempt number, so that nodes of an attempt that
//! never committed are never taken for a baseline.

use crate::error::EngineError;
use crate::mem::PMem;
use crate::meta::{Meta, TXID_BLOCK};
use crate::pool::{AllocCache, POff, Pool, RECORD_BYTES};
use crate::structures::node::write_normalised;
use crate::structures::registry::Structure;
use crate::tx::Values;

/// Writes `present` ((slot, key, value), sorted) as the whole content of `structures` under the
/// attempt after `attempt`, and commits it as the new epoch, with txids reserved above
/// `max_txid`. Returns the new epoch, the blocks now live (nodes, their byte values, heads) and
/// the txid reservation.
pub(super) fn rewrite<M: PMem + 'static>(
    pool: &Pool<M>,
    meta: Meta,
    attempt: u64,
    structures: &[Structure],
    present: &[(u8, u128, u64)],
    max_txid: u64,
) -> Result<(u64, Vec<POff>, u64), EngineError> {
    let mem = pool.mem();
    let new_epoch = attempt + 1;
    meta.begin_attempt(mem, new_epoch);
    let mut cache = AllocCache::new();
    let mut live: Vec<POff> = Vec::new();
    // The room every other use left free for this.
    pool.keep_recovery_room(false);
    for (slot, structure) in structures.iter().enumerate() {
        let slot = slot as u8;
        let from = present.partition_point(|p| p.0 < slot);
        let present = &present[from..from + present[from..].partition_point(|p| p.0 == slot)];
        let wide = structure.wide();
        // (node, key, bytes), in key order.
        let mut nodes = Vec::with_capacity(present.len());
        let mut sizes = Vec::with_capacity(present.len());
        for (i, &(_, key, value)) in present.iter().enumerate() {
            let bytes = structure.built_bytes::<M>(i.checked_sub(1).map(|p| present[p].1), key);
            let node = pool.alloc(&mut cache, bytes)?.get();
            sizes.push(bytes);
            write_normalised(pool, node, key, wide, value, slot, new_epoch);
            nodes.push((node, key));
            live.push(POff::new(node));
            if structure.values == Values::Bytes {
                // The value is a blob, written and flushed before its descriptor was persisted.
                live.push(POff::new(value));
            }
        }
        structure.build(mem, &nodes);
        for (&(node, _), &bytes) in nodes.iter().zip(&sizes) {
            mem.flush_range(node, bytes);
            mem.flush_range(pool.record_of(node), RECORD_BYTES);
        }
        // The head sentinel, or the map's bucket array (a region, not a block).
        let (root, root_bytes) = structure.root::<M>();
        mem.flush_range(root, root_bytes);
    }
    live.extend(heads(structures));
    pool.release_cache(&mut cache);
    // The txids handed out from now on start above everything seen: durable before the commit,
    // since the commit makes the old descriptors (and their txids) unreadable. (The checkpoint
    // txid moves only after the commit: it filters the descriptors a crash before the commit
    // must still read.)
    let reserved = max_txid + 1 + TXID_BLOCK;
    meta.set_txid_reserved(mem, reserved);
    // Fence, and on a page-cache file a sync: every new node and the reservation are durable
    // before the epoch that makes the new nodes the truth (the kernel may write the meta page
    // back before the nodes' pages otherwise).
    mem.fence();
    pool.sync()?;
    meta.commit_epoch(mem, new_epoch);
    // Every writer up to here is in the new nodes' records.
    meta.set_checkpoint_txid(mem, max_txid);
    pool.sync()?;
    Ok((new_epoch, live, reserved))
}

/// The head sentinels of `structures`: blocks, unlike the hash map's bucket array (a region).
pub(super) fn heads(structures: &[Structure]) -> impl Iterator<Item = POff> + '_ {
    structures.iter().filter_map(Structure::head_block).map(POff::new)
}

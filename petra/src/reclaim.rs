//! Reclamation: what leaves the structures waits in the epoch collector until no thread can
//! still be reading it, then comes back here to be freed or removed.
//!
//! Three kinds of item, each handed to `crossbeam-epoch` with `Guard::defer` by the thread that
//! made it unreachable, and queued here once every thread pinned at that moment has unpinned:
//! - **unlinked nodes** (a search's unlink, the skiplist's last link): freed; one that still
//!   holds a record waits first, outside the epoch, until a checkpoint round cleared the record
//!   and fenced (`Core::retire_node`, [`Reclaim::hold_recorded`]);
//! - **replaced byte values** (a committed write replaced a blob): freed, once the replacing
//!   transaction is at or below the safe txid while safe points are kept (see `safe`): until
//!   then a power loss may bring back the state that reads the value, and it must be there;
//! - **removals** (a finished transaction, or a checkpoint round, left a key absent): the node is
//!   removed if its info word still names the op that made it absent (or the round's FINAL
//!   word), and only until the op's descriptor slot may have been recycled (see
//!   `Checkpointer::removal_expiry`): unlinked, or, in a list, marked for the next search past
//!   it or the next round's sweep to unlink (see `LinkedSet::sweep`).
//!
//! Writers drain the queues as they go, a few items and two per op of the transaction about to
//! run ([`Reclaim::free_due`], [`Reclaim::run_removals`]), so that they drain at least as fast as transactions fill them.
//! Deferred functions must not hold the engine (it owns the collector): they hold only this.
//!
//! **Snapshots.** A scan reads the structures as of a txid, its snapshot (see `scan`), and holds
//! it in [`Snapshots`] while it reads, re-pinning as it goes. What a snapshot may still read
//! waits past the epoch while one is held below it: a replaced value whose replacer's txid is
//! above the snapshot, and a removal stamped above it (the stamp is the txid counter read after
//! every transaction the removal depends on had its txid, so that every such txid is below it).
//! Checkpoint rounds wait likewise (`checkpoint`). An item that waits is put back in its queue.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::Guard;
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use rustc_hash::FxHashSet;

use crate::mem::PMem;
use crate::pool::alloc::MAX_CLASS_SIZE;
use crate::pool::{AllocCache, POff, Pool};
use crate::structures::info::Info;
use crate::sync::{AtomicU64, Mutex};
use crate::tx::StructId;

/// A node left absent: the node of `key` in `structure` whose info word is `info` (the op, or
/// the checkpoint round's FINAL word, that left the key absent), at offset `node` if the one that
/// left it knew it (a search finds it by key otherwise). `deleted`: `info` is a committed
/// transaction's Delete or Remove, which a checkpoint round folding it may clear the node's
/// record for (see `structures::remove_if`).
///
/// The offset alone names the node for as long as its info word is `info`, so a removal reads
/// the word there instead of searching: a node block stays a node block of its size class while
/// the engine runs (slab chunks change use only at open), and `info` is on no other block then
/// (an info value never repeats on a node while a thread can hold it, and an op reference is on
/// the one node its op took: see `info`; a removal is dropped as stale from the recycling of its
/// op's slot on). A word that moved on (marked, taken over, the block freed and reused) is not
/// `info`, and the removal does nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AbsentNode {
    pub(crate) structure: StructId,
    pub(crate) key: u128,
    pub(crate) info: Info,
    pub(crate) node: Option<u64>,
    pub(crate) deleted: bool,
}

/// A node to remove once due, if its info word still is the one that left it absent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Removal {
    pub(crate) absent: AbsentNode,
    /// The count of recycled rounds from which the item is stale (`u64::MAX`: never).
    pub(crate) expiry: u64,
    /// The txid counter once every transaction whose effect the removal acts on had its txid:
    /// each of those txids is below it. A snapshot below it waits for the removal.
    pub(crate) stamp: u64,
}

/// The snapshots that scans hold (see `scan` and the [module docs](self)): a few txids at most,
/// one per scanning thread.
///
/// **Expiry.** What a snapshot holds back grows with the writes made while it is held, and a scan
/// whose caller reads slowly holds it for as long as it likes. So a snapshot holds back only so
/// much: its *pressure*, the bytes of descriptors written and of byte values replaced since it
/// was taken (the growth of [`Rings::pressure`](crate::ring::Rings::pressure), recorded at the
/// hold), is what it may keep from being recycled and freed; once that passes the engine's
/// limit, a writer that looks ([`Checkpointer::bound_snapshots`](crate::checkpoint::Checkpointer::bound_snapshots))
/// *expires* it, and with it every snapshot below it (held as long or longer, give or take the
/// writes of the moment between a txid's taking and its hold:
/// [`Reclaim::expire_snapshots`]). That happens in two steps. First the watermark `expired` is
/// raised: a scan looks at it at each pin it takes (the walk's re-pins, each read of a value),
/// and one that finds its snapshot below it stops with
/// [`EngineError::SnapshotExpired`](crate::EngineError::SnapshotExpired), reading nothing more.
/// Then, once every thread pinned when the watermark rose has unpinned (the epoch), `released`
/// follows it, and [`oldest`](Snapshots::oldest) no longer counts those snapshots: what waited
/// for them proceeds. A scan that found its snapshot live after pinning reads, until it unpins,
/// only what nothing released yet (the pin's fence and the watermark's are sequentially
/// consistent: either the scan sees the watermark, or the release waits for its pin).
#[derive(Debug)]
pub(crate) struct Snapshots {
    /// The txids held, one entry per hold, each with the pressure at its hold.
    held: Mutex<Vec<(u64, u64)>>,
    /// The smallest txid held and not released, `u64::MAX` if none: what the queues and the
    /// rounds compare with. (On a line of its own: every writer reads it as it drains the
    /// queues, and only scans write it, twice each.)
    oldest: CachePadded<AtomicU64>,
    /// Snapshots below it are expired: their scans stop at their next pin.
    expired: AtomicU64,
    /// Snapshots below it hold nothing back any more (a grace period after `expired`).
    released: AtomicU64,
    /// Items put back to wait for a snapshot: removals, and replaced values (a unit test's
    /// evidence that the wait happened).
    #[cfg(test)]
    pub(crate) waited: [AtomicU64; 2],
}

impl Default for Snapshots {
    fn default() -> Snapshots {
        Snapshots {
            held: Mutex::new(Vec::new()),
            oldest: CachePadded::new(AtomicU64::new(u64::MAX)),
            expired: AtomicU64::new(0),
            released: AtomicU64::new(0),
            #[cfg(test)]
            waited: Default::default(),
        }
    }
}

impl Snapshots {
    /// Holds the snapshot `txid` until the returned hold is dropped, with `pressure` the rings'
    /// pressure read before (see [`Snapshots`]). The caller is pinned, and took `txid` from the
    /// txid counter while pinned. The hold starts live unless a snapshot taken after its txid
    /// (and held first) was already expired: then it is expired too, and its scan stops at its
    /// first look; nothing it reads was released meanwhile, as its pin came before the raise.
    pub(crate) fn hold(&self, txid: u64, pressure: u64) -> Hold<'_> {
        let mut held = self.held.lock();
        held.push((txid, pressure));
        self.publish_oldest(&held);
        Hold { snapshots: self, txid }
    }

    /// Where to expire, with the rings' pressure `now`: one above the newest snapshot held and not
    /// released whose pressure since its hold passed `limit`, if any.
    pub(crate) fn past(&self, now: u64, limit: u64) -> Option<u64> {
        let held = self.held.lock();
        // Relaxed: under the lock, as every writer of it is.
        let released = self.released.load(Ordering::Relaxed);
        held.iter().filter(|&&(t, p)| t >= released && now.saturating_sub(p) > limit).map(|&(t, _)| t + 1).max()
    }

    /// Stores the oldest snapshot held and not released, under the lock (so the stores are in the
    /// order of the changes to `held`).
    fn publish_oldest(&self, held: &[(u64, u64)]) {
        // Relaxed: read and written under the lock only by the expiry's second step.
        let released = self.released.load(Ordering::Relaxed);
        let oldest = held.iter().map(|&(t, _)| t).filter(|&t| t >= released).min().unwrap_or(u64::MAX);
        // Release: a thread that reads the oldest snapshot, and so waits for it, sees the
        // holder's work before it.
        self.oldest.store(oldest, Ordering::Release);
    }

    /// The oldest snapshot held and not released, `u64::MAX` if none. What a snapshot below `t`
    /// may still read waits while `t > oldest()`.
    pub(crate) fn oldest(&self) -> u64 {
        // Acquire: pairs with the Release stores of `publish_oldest`.
        self.oldest.load(Ordering::Acquire)
    }

    /// The expiry's second step: snapshots below `below` hold nothing back from now on.
    fn release(&self, below: u64) {
        let held = self.held.lock();
        // Relaxed: under the lock, as every reader of it is.
        if self.released.load(Ordering::Relaxed) < below {
            self.released.store(below, Ordering::Relaxed);
        }
        self.publish_oldest(&held);
    }
}

/// A snapshot held (see [`Snapshots::hold`]); dropping it releases it.
#[derive(Debug)]
pub(crate) struct Hold<'s> {
    snapshots: &'s Snapshots,
    txid: u64,
}

impl Hold<'_> {
    /// Whether the snapshot was expired (see [`Snapshots`]). A reader calls it pinned, after
    /// the pin: if it says no, nothing the snapshot reads is released before that pin ends.
    pub(crate) fn expired(&self) -> bool {
        // SeqCst: with the pin's fence before it and the watermark's raise, one total order:
        // either this load sees the raise, or the raise (and the grace period's start after it)
        // comes after the pin, and the release waits for the pin to end.
        self.txid < self.snapshots.expired.load(Ordering::SeqCst)
    }

    /// The snapshot's txid.
    pub(crate) fn txid(&self) -> u64 {
        self.txid
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut held = self.snapshots.held.lock();
        if let Some(i) = held.iter().position(|&(t, _)| t == self.txid) {
            held.swap_remove(i);
        }
        self.snapshots.publish_oldest(&held);
    }
}

/// The queues of what the epoch made due.
#[derive(Debug, Default)]
pub(crate) struct Reclaim {
    removals: SegQueue<Removal>,
    /// Unlinked nodes no thread can reach any more.
    frees: SegQueue<u64>,
    /// Unlinked nodes whose records a checkpoint round is still to clear (see
    /// `Core::retire_node`), as their unlinkers held them: the next round looks at each.
    recorded: SegQueue<u64>,
    /// Those a round looked at and found holding a record. Only a later round can clear it, and
    /// that round knows it did: it looks these up among the records it changed, not all of them
    /// at every round. Only rounds, one at a time, touch it.
    waiting: Mutex<FxHashSet<u64>>,
    /// Byte values replaced by a committed transaction that no thread can read any more, with
    /// the replacer's txid.
    blob_frees: SegQueue<(u64, u64)>,
    /// Those of them whose replacer was above the safe txid when they came due (a queue, not a
    /// locked list: under `Periodic` nearly every replaced value passes through it).
    held: SegQueue<(u64, u64)>,
    /// The bytes of the pool that the values held hold (a value of 20 KB holds a chunk).
    held_bytes: AtomicU64,
    /// The snapshots scans hold.
    pub(crate) snapshots: Snapshots,
    /// Removals run (a unit test's evidence that they ran when it says).
    #[cfg(test)]
    pub(crate) removals_run: AtomicU64,
}

impl Reclaim {
    /// Hands the node `node`, unlinked by this thread, to the epoch: freed once no thread can
    /// still be reading it.
    pub(crate) fn retire_node(self: &Arc<Self>, guard: &Guard, node: u64) {
        let this = Arc::clone(self);
        guard.defer(move || this.frees.push(node));
    }

    /// Keeps the unlinked node `node`, which holds a record still to be cleared, for the
    /// checkpoint rounds ([`Reclaim::retire_recorded`]).
    pub(crate) fn hold_recorded(&self, node: u64) {
        self.recorded.push(node);
    }

    /// Hands the nodes held by [`hold_recorded`](Reclaim::hold_recorded) whose records
    /// `cleared` says were cleared (durably: a checkpoint round calls it after its fence, one
    /// round at a time) to the epoch, and keeps the others. `changed`: the nodes whose records
    /// this round changed. Returns how many it handed over.
    ///
    /// A node held since the last call may have had its record cleared by any round since its
    /// unlinker read it, so it is looked at. One that a call found holding a record can only have
    /// it cleared by a later round, which has the node among the records it changed: only those
    /// are looked up. So each held node costs one look at the round after its hold and one
    /// lookup per record a round changes, not one look per round.
    pub(crate) fn retire_recorded(
        self: &Arc<Self>,
        guard: &Guard,
        changed: impl IntoIterator<Item = u64>,
        cleared: impl Fn(u64) -> bool,
    ) -> usize {
        let mut waiting = self.waiting.lock();
        let mut retired = 0;
        if !waiting.is_empty() {
            // A changed record's line is hot: read it first, and touch the set only for a clear.
            for node in changed {
                if cleared(node) && waiting.remove(&node) {
                    self.retire_node(guard, node);
                    retired += 1;
                }
            }
        }
        // Each node held when this began is looked at once (those held meanwhile wait for the
        // next round, which looks at them whatever it clears).
        for _ in 0..self.recorded.len() {
            let Some(node) = self.recorded.pop() else { break };
            if cleared(node) {
                self.retire_node(guard, node);
                retired += 1;
            } else {
                waiting.insert(node);
            }
        }
        retired
    }

    /// Hands the byte values `blobs`, replaced by a committed transaction, to the epoch.
    ///
    /// Like an unlinked node, a replaced value of a slab block waits in this thread's bag of
    /// deferred work, which the epoch collector takes when it fills (64 items): flushing the bag
    /// at every overwrite cost a tenth of a put's time. A value of whole chunks (longer than the
    /// largest block) has the bag flushed at once, so that a thread that seldom writes does not
    /// hold up to 63 of them (of up to the blob limit each) for as long as it likes.
    ///
    /// Returns the bytes of the pool the values hold (what a snapshot held meanwhile keeps from
    /// the pool: see [`Snapshots`]).
    pub(crate) fn retire_blobs<M: PMem>(
        self: &Arc<Self>,
        pool: &Pool<M>,
        guard: &Guard,
        txid: u64,
        blobs: impl Iterator<Item = u64>,
    ) -> u64 {
        let mut bytes = 0;
        let mut large = false;
        for blob in blobs {
            let footprint = pool.blob_footprint(POff::new(blob));
            bytes += footprint;
            large |= footprint > MAX_CLASS_SIZE;
            let this = Arc::clone(self);
            guard.defer(move || this.blob_frees.push((blob, txid)));
        }
        if large {
            guard.flush();
        }
        bytes
    }

    /// Hands removals to the epoch: they are queued once every thread that could still be
    /// executing on their nodes has unpinned. One deferred function for the lot, and the bag
    /// flushed (it would otherwise wait for 63 more deferred functions of this thread).
    pub(crate) fn defer_removals(self: &Arc<Self>, guard: &Guard, items: Vec<Removal>) {
        let this = Arc::clone(self);
        guard.defer(move || {
            for item in items {
                this.removals.push(item);
            }
        });
        guard.flush();
    }

    /// Expires the snapshots below `below` (see [`Snapshots`]): their scans stop at their next
    /// pin, and once every thread pinned now has unpinned, what waits for them proceeds.
    /// Returns whether the watermark rose (false: an expiry at or above `below` came first).
    pub(crate) fn expire_snapshots(self: &Arc<Self>, guard: &Guard, below: u64) -> bool {
        // SeqCst: see `Hold::expired`.
        let before = self.snapshots.expired.fetch_max(below, Ordering::SeqCst);
        if before >= below {
            return false;
        }
        let this = Arc::clone(self);
        guard.defer(move || this.snapshots.release(below));
        guard.flush();
        true
    }

    /// Queues removals whose grace has already passed (a checkpoint round's end runs deferred),
    /// stamped `stamp`.
    pub(crate) fn push_removals(&self, items: impl IntoIterator<Item = AbsentNode>, stamp: u64) {
        for absent in items {
            self.removals.push(Removal { absent, expiry: u64::MAX, stamp });
        }
    }

    /// Frees up to `n` due nodes and up to `n` due byte values into `cache`; a value whose
    /// replacer is above `safe` (the safe txid) is held until a safe point covers it, and one whose
    /// replacer is above a snapshot held waits for it.
    pub(crate) fn free_due<M: PMem>(&self, pool: &Pool<M>, cache: &mut AllocCache, n: usize, safe: u64) {
        for _ in 0..n {
            let Some(node) = self.frees.pop() else { break };
            pool.free(cache, POff::new(node));
        }
        for _ in 0..n {
            let Some((blob, txid)) = self.blob_frees.pop() else { break };
            // Read after the pop, which comes after the push, which comes after the hold of any
            // snapshot below the replacer that had pinned before the value was retired (see
            // `scan`): read before it, a snapshot held since would be missed.
            if txid > self.snapshots.oldest() {
                // A snapshot below the replacer may read the value. Replacers come due in about
                // their txid order: the next ones wait too.
                // Relaxed: a test's count, read once the threads that moved it are done.
                #[cfg(test)]
                self.snapshots.waited[1].fetch_add(1, Ordering::Relaxed);
                self.blob_frees.push((blob, txid));
                break;
            }
            if txid > safe {
                // Replacers come due in about their txid order: the next ones are not safe either.
                // Relaxed: a size for the trigger of an early safe point.
                self.held_bytes.fetch_add(pool.blob_footprint(POff::new(blob)), Ordering::Relaxed);
                self.held.push((blob, txid));
                break;
            }
            pool.free_blob(cache, POff::new(blob));
        }
    }

    /// A safe point made `safe` the safe txid: the values held for replacers at or below it come
    /// due.
    /// The values held when it starts are each looked at once (and those still held queued
    /// again); safe points are made one at a time, so no two calls interleave.
    pub(crate) fn release_held<M: PMem>(&self, pool: &Pool<M>, safe: u64) {
        for _ in 0..self.held.len() {
            let Some((blob, txid)) = self.held.pop() else { break };
            if txid > safe {
                self.held.push((blob, txid));
                continue;
            }
            // Relaxed: as where it was added.
            self.held_bytes.fetch_sub(pool.blob_footprint(POff::new(blob)), Ordering::Relaxed);
            self.blob_frees.push((blob, txid));
        }
    }

    /// The bytes of the pool held by the values held for a safe point.
    pub(crate) fn held_bytes(&self) -> u64 {
        // Relaxed: an estimate for the trigger.
        self.held_bytes.load(Ordering::Relaxed)
    }

    /// Runs up to `n` due removals with `remove`, dropping stale ones, with `recycled` the count
    /// of recycled rounds read while pinned (the caller stays pinned until the removals are done:
    /// what makes an item that reads as live safe to run holds for every item popped after the
    /// read). A stale removal is dropped: the round that folds its op makes the node FINAL, if
    /// the word is still there, and queues its own removal.
    ///
    /// A removal stamped above a snapshot held waits for it (put back, and the rest with it for
    /// this call).
    pub(crate) fn run_removals(&self, recycled: u64, n: usize, mut remove: impl FnMut(&AbsentNode)) {
        for _ in 0..n {
            let Some(item) = self.removals.pop() else { return };
            if recycled >= item.expiry {
                continue;
            }
            // Read after the pop: as in `free_due`.
            if item.stamp > self.snapshots.oldest() {
                // Relaxed: a test's count, as in `free_due`.
                #[cfg(test)]
                self.snapshots.waited[0].fetch_add(1, Ordering::Relaxed);
                self.removals.push(item);
                return;
            }
            remove(&item.absent);
            // Relaxed: a test's count, as in `free_due`.
            #[cfg(test)]
            self.removals_run.fetch_add(1, Ordering::Relaxed);
        }
    }
}

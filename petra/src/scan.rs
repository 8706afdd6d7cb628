//! Range scans: the keys in a range as of one txid, read in one walk, whatever writers do.
//!
//! A scan pins, takes a txid `s` of its own from the counter that orders transactions (its
//! *snapshot*), holds it ([`Snapshots`]), and walks the range once. At each node it resolves the
//! info word as of `s` ([`Core::resolve_at`]): the state left by every committed transaction with
//! a txid below `s`, and by none above. The result is the state of the range after the prefix of
//! the serial order that ends below `s`: the scan is serializable at `s`, and strictly so, since
//! `s` is taken during the call (a transaction that returned before the call has a smaller txid,
//! one that starts after it a larger one). It never retries and never waits: its work is one walk
//! of the range, plus, at a key written since `s`, a step down the key's `prev` chain per such
//! write. While it walks it re-pins (every millisecond or so, checked every [`CHECK_EVERY`]
//! nodes; every 8 nodes in debug builds), so that a long scan does not hold the epoch back; what
//! the snapshot still needs waits for it instead (below). A chain (list, skiplist, hash map) goes
//! on from a fresh search; the MDList's depth-first descent starts again from the head for the
//! keys after the last one it met (a re-pin lets the nodes on its stack be freed). Callers read
//! byte values after the walk, unpinned, while the snapshot is held.
//!
//! This is **not** the double collect it replaces (two equal walks in a row), which returned only
//! once a walk saw no change, and under a steady writer anywhere in the range never did.
//!
//! # Why the walk reads the state as of `s`
//!
//! 1. **Txids.** A writer takes its txid after it committed, so after every op of it took its
//!    node; a read-only transaction takes its own before it commits, after its ops. The counter
//!    is an acquire-release read-modify-write, so everything a transaction with a txid below
//!    `s` did happens before the scan took `s`: every node it took is at or below the info word
//!    the walk reads there, in the chain of words each op replaced (`prev`). Conversely a
//!    transaction whose op on a node comes after the word the walk read there, or a writer that
//!    the walk finds active, gets a txid above `s` (were it below, its ops would happen before
//!    the read). (A read-only transaction found active may have a txid below `s`: it is looked
//!    past all the same, and changes no state, so the state read is the same.)
//!    Along a node's chain, the txids of committed transactions grow: an op takes a node only
//!    once its holder finished and, if committed, has its txid. So the first op down the chain
//!    from the word read whose transaction committed below `s` is the last write of the key the
//!    snapshot holds; everything above it is looked past (`prev` followed, never the op's cached
//!    before-state, which may be a state a writer above `s` left).
//! 2. **Nodes.** A key present as of `s` has a node that its last writer below `s` took or
//!    linked before `s` was taken, so linked when the walk starts, and it is removed only once
//!    a writer above `s` deleted the key: such a removal is stamped above `s` and waits while
//!    the snapshot is held (`reclaim`). The walk sees every node linked throughout it
//!    ([`LinkedSet::collect`](crate::structures::LinkedSet::collect)), re-pins included: so no
//!    present key is missed. A node linked after the walk started, or met again, or made for a
//!    key that had none, resolves as of `s` like any other: a node made by an op looked past
//!    stands for "no node", the state a removal allowed by the snapshot left (see 4), absent.
//!    A marked node (being removed) reads as absent: its removal ran, so it was allowed.
//! 3. **Checkpoint rounds** cut `prev` chains (caching the before-state) and turn info words
//!    FINAL, which carry the state that a batch of transactions left. A round cuts only a `prev`
//!    that names a transaction of its batch or a FINAL word (`checkpoint`), so a cut leaves a
//!    state the batch (or an older round) left. A batch is stamped with the txid counter read
//!    once it was found, above every txid a state it leaves depends on (its writers, and the
//!    writers an aborted one took nodes from), and a round folds it only if no snapshot below
//!    the stamp is held. So every cut, cache and FINAL word the walk meets stands for a state
//!    below `s`, and the value of a FINAL word met is not rewritten while the snapshot is held
//!    (a round rewrites it only for a writer of its batch above the word, which took the node
//!    after the word was read and so is above `s`).
//! 4. **Holding the snapshot.** Whatever could destroy what the snapshot reads is deferred
//!    through the epoch after its stamp was read: the removal of a node left absent (after the
//!    transaction's txid), a replaced value (after the replacer's txid), a round's fold (after
//!    its batch's stamp). If the stamp is above `s`, reading it happened after `s` was taken
//!    (the counter again), so after the scan pinned; the collector runs the deferred item only
//!    after the scan's first pin ends, by which time the scan holds the snapshot; and the item
//!    then waits for it (removals and values are put back in their queues, a round does
//!    nothing). An item stamped at or below `s` depends only on transactions below `s`, and the
//!    snapshot reads what it leaves. Descriptors are followed only within one pin, from words
//!    read in it, as any reader does; a walk holds no node across a re-pin.
//! 5. **Helping and durability.** A committed, unpersisted descriptor met is persisted before
//!    its txid is compared (its txid is assigned once, by whoever comes first: the comparison
//!    uses the one it got), so every state returned is durable as far as the pool's durability
//!    goes. Recovery and clean opens leave FINAL words whose states hold every txid handed out
//!    before, and txids handed out after an open are larger (they stay below the durable
//!    reservation), so a snapshot never reaches across an open.
//!
//! What the snapshot holds back while a scan runs: removals, replaced values and rounds that
//! came after it. The rings therefore grow under writers while a long scan runs; nothing the
//! scan does not need waits for it.
//!
//! 6. **Bounded.** A caller that reads the entries' values slowly would hold all that back for
//!    as long as it likes. So once the writers have written descriptors and replaced values
//!    past [`EngineConfig::snapshot_limit`](crate::EngineConfig::snapshot_limit) since the
//!    snapshot was taken (its pressure), a writer *expires* it
//!    (`reclaim::Snapshots`): the scan looks at each pin it takes, after taking it (its
//!    re-pins, and each value read), and stops there with an error if its snapshot expired;
//!    what waited for it proceeds only a grace period of the epoch after the expiry, so a step
//!    of the scan that found its snapshot live reads nothing released (a re-pin is followed by
//!    a SeqCst fence, as a pin is). A scan never returns an entry or value that is not its
//!    snapshot's: it returns them all, or an error after a prefix of them.
//!
//! [`Snapshots`]: crate::reclaim::Snapshots

use std::cell::{Cell, RefCell};
use std::ops::{Bound, RangeBounds};
use std::time::{Duration, Instant};

use crossbeam_epoch::Guard;

use crate::key::Key;
use crate::mem::PMem;
use crate::protocol::Core;
use crate::reclaim::Hold;
use crate::structures::info::Info;
use crate::structures::registry::Structure;
use crate::structures::{Ctx, Pause};

/// Nodes walked between two looks at the clock; in debug builds, between two re-pins, so that
/// the tests' scans of a few keys re-pin too.
const CHECK_EVERY: u32 = if cfg!(debug_assertions) { 8 } else { 64 };

/// The shortest time a scan stays pinned before it re-pins: a re-pin costs a fresh search for
/// the walk's position (from the head, in a list), so a pin lasts at least four times as long as
/// the last such search took.
const MIN_PIN: Duration = Duration::from_millis(1);

/// Inclusive bounds of `range`, as key encodings, or `None` if it holds no key.
pub(crate) fn inclusive<K: Key>(range: &impl RangeBounds<K>) -> Option<(u128, u128)> {
    let lo = match range.start_bound() {
        Bound::Included(&k) => k.to_bits(),
        Bound::Excluded(&k) => k.to_bits().checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&k) => k.to_bits(),
        Bound::Excluded(&k) => k.to_bits().checked_sub(1)?,
        Bound::Unbounded => u128::MAX,
    };
    (lo <= hi).then_some((lo, hi))
}

/// The present keys of `structure` in `lo..=hi` with their values, in key order: the state of
/// the range as of the snapshot `txid` (see the [module docs](self)), which the caller took while
/// pinned by `guard` and holds until it no longer reads the values. `guard` is re-pinned as the
/// walk goes. The entries are kept in the walk's own vector (in place: a scan of a large range
/// faults its pages in once).
///
/// `None` if the snapshot was expired (see `reclaim::Snapshots`): the walk looks at each re-pin,
/// and stops there if it was.
pub(crate) fn snapshot<M: PMem + 'static>(
    core: &Core<M>,
    structure: &Structure,
    (lo, hi): (u128, u128),
    hold: &Hold<'_>,
    guard: &mut Guard,
) -> Option<Vec<(u128, u64)>> {
    let pin = Cell::new(Pin::Lasting(Instant::now(), MIN_PIN));
    let cx = AsOf { core, hold, guard: RefCell::new(guard), nodes: Cell::new(0), pin, stopped: Cell::new(false) };
    let mut seen = Vec::new();
    structure.collect(&cx, lo, hi, &mut seen);
    if cx.stopped.get() {
        return None;
    }
    let mut out: Vec<(u128, u64)> = seen.into_iter().filter_map(|seen| seen.state.map(|v| (seen.key, v))).collect();
    if !structure.ordered::<M>() {
        // A structure walked out of key order may also meet a node twice (with one state: the
        // snapshot's), or a key's removed node and its new one (of which at most one is present
        // as of the snapshot).
        out.sort_unstable();
        out.dedup_by_key(|e| e.0);
    }
    Some(out)
}

/// Where a scan's pin stands.
#[derive(Debug, Clone, Copy)]
enum Pin {
    /// Re-pinned at this instant: the next pause measures the search that followed.
    Repinned(Instant),
    /// Pinned, and the walk's position found, since this instant; to last this long.
    Lasting(Instant, Duration),
}

/// The context a scan walks in: the snapshot, and the pin it renews.
struct AsOf<'a, 'g, M: PMem> {
    core: &'a Core<M>,
    hold: &'a Hold<'a>,
    guard: RefCell<&'g mut Guard>,
    /// Nodes walked since the last look at the clock.
    nodes: Cell<u32>,
    pin: Cell<Pin>,
    /// The snapshot was found expired at a re-pin: the walk stopped there.
    stopped: Cell<bool>,
}

impl<M: PMem + 'static> Ctx<M> for AsOf<'_, '_, M> {
    #[inline]
    fn mem(&self) -> &M {
        self.core.mem()
    }

    fn has_record(&self, node: u64) -> bool {
        crate::structures::node::has_record(&self.core.pool, node)
    }

    fn retire(&self, node: u64) {
        self.core.retire_node(&self.guard.borrow(), node);
    }

    fn resolve(&self, info: Info) -> Option<u64> {
        self.core.resolve_at(info, self.hold.txid())
    }

    fn pause(&self) -> Pause {
        if let Pin::Repinned(at) = self.pin.get() {
            // The walk's fresh search since the re-pin: pins last four times as long.
            let now = Instant::now();
            self.pin.set(Pin::Lasting(now, MIN_PIN.max(4 * now.duration_since(at))));
        }
        let n = self.nodes.get() + 1;
        if n < CHECK_EVERY {
            self.nodes.set(n);
            return Pause::Go;
        }
        self.nodes.set(0);
        let now = Instant::now();
        let due = cfg!(debug_assertions)
            || match self.pin.get() {
                Pin::Lasting(at, length) => now.duration_since(at) >= length,
                Pin::Repinned(_) => false,
            };
        if !due {
            return Pause::Go;
        }
        self.guard.borrow_mut().repin();
        #[cfg(test)]
        while crate::protocol::hook::scan_paused() {
            self.guard.borrow_mut().repin();
        }
        // SeqCst: `Guard::repin` stores the new local epoch without the fence `pin` makes
        // after it; this one makes the re-pin a pin as far as the expiry's argument goes (the
        // epoch seen, the local epoch stored, then a fence, as `pin` does).
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // Pinned, then the look (see `reclaim::Snapshots`): live now, nothing the walk reads
        // until the next re-pin is released.
        if self.hold.expired() {
            self.stopped.set(true);
            return Pause::Stop;
        }
        self.pin.set(Pin::Repinned(Instant::now()));
        Pause::Repinned
    }
}

#[cfg(test)]
mod tests;

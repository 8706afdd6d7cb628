//! Checkpoint rounds: fold finished descriptors into node records while transactions run, so
//! that the rings can be recycled and recovery reads only what came after.
//!
//! Every node has a *record*: its value word, and the norm and check words of its block's record
//! area (see [`node`](crate::structures::node)). A valid record (the norm word names the epoch in
//! force and the checksum holds) says the key is present with that value; a zero norm word says
//! nothing. The pool header's *checkpoint txid* `C` promises: every committed writer with a txid
//! at or below `C` is reflected in the records. Recovery therefore reads only the descriptors
//! above `C` (KDMap), and takes a key's state from KDMap if it names the key, else from its
//! record.
//!
//! A round, run by one thread at a time (a try-lock: no thread ever waits for it), and only after
//! the previous round's deferred end ran, **folds** (steps 2 to 4) the batch the previous round
//! **found** (step 1), then finds the next batch:
//!
//! 1. **Batch.** `T0` is read from the txid counter, then each ring is read from where the last
//!    batch ended up to its published head: finished descriptors are taken (committed ones
//!    persisted first, as any reader would), up to the first that is active or has a txid of
//!    `T0` or more. Only a ring's newest descriptor can be active, txids grow along a ring, and a
//!    writer that had no txid when `T0` was read gets a larger one: so the batch holds every
//!    committed writer below `T0`.
//!
//!    The grace between finding a batch and folding it matters. An executor reads that its
//!    transaction is active, then searches, then CASes the node, so it may take a node after
//!    the transaction finished (an aborted one whose op had not run yet); and it caches the
//!    node it took right after its CAS. Every thread pinned when the batch was found has
//!    unpinned before the next round starts (that round waits for this one's deferred end),
//!    and a thread that pins later sees every batch transaction finished and executes none of
//!    them. So when a batch is folded, no op of it takes a node any more, and every node one
//!    took is known: the op's cache names it, or (an op whose before-state came from an earlier
//!    op of its own transaction, which is not cached) the cache of that transaction's first op
//!    on the key does, the same node. An op with neither took no node.
//!
//!    The batch is stamped with the txid counter read once it was found: every txid a state it
//!    leaves depends on is below the stamp (its writers', and those of the writers its aborted
//!    transactions took nodes from, which had their txids before the batch was read). A round
//!    folds its batch only if no scan holds a snapshot below the stamp (see `scan`): a fold
//!    that must wait returns at once, doing nothing.
//! 2. **Keys.** For every node an op of the batch took (a key without a node is absent and has
//!    no record, see below), the key's node is brought up to date under a pin:
//!    - the chain of `prev` words below the node's info word is walked to the last FINAL word:
//!      every op on it whose `prev` names an op of another transaction of the batch, or a FINAL
//!      word, gets its before-state cached (its executor caches it too, right after its CAS; the
//!      round does it for an executor that has not yet), and its `prev` replaced by `CUT`, so
//!      that no reader follows it into a descriptor the round will recycle or to a value it will
//!      rewrite. A `prev` naming a newer transaction's op is left to the round that folds it: a
//!      scan that looks past an op follows its `prev`, not its cache (see `cache_chain`);
//!    - the node's committed state, as a reader outside any transaction resolves it, goes into
//!      the record (nothing is written if the record already says it), and the lines are
//!      flushed; unless the op changed nothing (a read, or an op of an aborted transaction) and
//!      the node moved on to a newer transaction's op, which then leaves the node alone (see
//!      `safe`: a record must only change for a key a batch writer names);
//!    - the info word is CASed from the value read to a FINAL word of that state if it names a
//!      batch descriptor (finished before the fold began, so the state read is final; and such
//!      a word never comes back once the node moved on, so the round gives a node its FINAL
//!      word at most once and FINAL words never repeat), else to itself. A failed CAS means the
//!      node moved on: the round reads it again and rewrites the record. So when the round
//!      leaves a node, its record held the state of the info word at an instant when the word
//!      was still the one read, and everything that changes the node after that instant happens
//!      after the record's stores.
//! 3. **Commit.** One fence makes the records durable (if any changed); then `C = T0 - 1` is
//!    stored, flushed and fenced. While safe points are kept (a page-cache pool, see `safe`),
//!    the batch holds only what the last safe point covers, and the next safe point stores `C`.
//! 4. **Recycle.** Absent nodes given a FINAL word are queued for removal, and the folded
//!    batch's slots are recycled, both deferred through the epoch collector (with the end of the
//!    grace of the batch just found): no thread that could still read a folded descriptor
//!    (through an info word or a `prev` read before the round changed it) is pinned any more
//!    when it happens. While safe points are kept, the slots wait further, until `C` is on the
//!    disk.
//!
//! Why recovery stays exact (for every key, at every instant: its state is KDMap's if a
//! descriptor above `C` writes it, else its one valid present record, or absent if it has none):
//! - A record changes only when the node's state differs from it, which only a writer the
//!   records do not reflect yet can cause: one above `C` (by `C`'s promise), still in its ring.
//!   So a crash in the middle of a round, torn records included, is covered by KDMap.
//! - A present record stays in its node until the round that folds the writer that left the key
//!   absent clears it. A node with a record leaves its structure only by the removal of a
//!   committed Delete or Remove `D` that left it absent (`remove_if`, which writes `D`'s op word
//!   marked): the unlinked block is held, not freed, while its record is valid
//!   (`Core::retire_node`); the round that folds `D` clears the record, flushes it before its
//!   fence, and gives the node REMOVED. A block freed before that fence (unlinked after the
//!   clear) holds a zero norm word in memory, which the round's flush writes back.
//!   Every other removal gives up if the node has a record, and the round clears the record
//!   (and later removes the node) once the node's state is absent. Until `D` is folded it is
//!   above `C`, in KDMap. The CAS of step 2 orders the record's stores before any later change
//!   of the node, so a remover that acts on a later change sees the record.
//! - So a freed block never holds a valid present record that is not covered by KDMap, and a
//!   key has at most one present record outside KDMap: in its linked node.
//!
//! Why readers stay right: a FINAL word means the node's value word, which a round rewrites when
//! a key's value changed. Readers that hold an older FINAL word of the node (read before the
//! node moved on) read a value that was the node's committed state at an instant during their
//! read; executors holding it fail their CAS; a scan reads it only where no writer its snapshot
//! holds came after, and a round that would rewrite the value for a writer above the snapshot
//! waits for it (see `scan`). A reader that
//! resolves an op's before-state through a `prev` that is a FINAL word reads the value and then
//! the op's cache again: the round filled that cache before it rewrote the value (both stores
//! Release, the value read Acquire), so it sees the cache and uses it (see `before_of`).
//! FINAL words carry a generation, one per round, and a round starts only after the previous
//! one's deferred end ran: a thread that stays pinned sees at most two rounds, so a FINAL word it
//! read cannot come back on its node (info words never repeat while a thread can hold them).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_epoch::{Guard, LocalHandle};
use parking_lot::Mutex;

use crate::descriptor::{CUT, Desc, NO_NODE, PersistStatus, TxStatus, UNSET, desc_bytes};
use crate::mem::PMem;
use crate::protocol::{Core, Reader, cached_node, debug_assert_took_from, read_cache, write_cache};
use crate::reclaim::AbsentNode;
use crate::ring::{Ring, Rings};
use crate::structures::info::Info;
use crate::structures::mix64;
use crate::structures::node::{INFO, flush_records, has_record, load_key, write_record};
use crate::tx::{OpKind, StructId};
use crate::wake::Wake;

/// The rounds' shared state.
#[derive(Debug, Default)]
pub(crate) struct Checkpointer {
    /// When a thread's ring holds more than this share of its bytes (in percent) not yet
    /// recycled, that thread runs a round after its transaction (0: only when asked for).
    fill: u8,
    /// Held by the round in progress (only ever taken with `try_lock`), with the batch the last
    /// round found, which the next one folds.
    lock: Mutex<Locked>,
    /// Rounds started.
    started: AtomicU64,
    /// Rounds whose deferred end (removals queued, slots recycled) has run.
    recycled: Arc<AtomicU64>,
    /// What the rounds did so far.
    stats: Mutex<CheckpointStats>,
    /// The wake-up of the engine's rounds' thread, if the rounds that the fill starts run on
    /// it (see [`EngineConfig::background_rounds`](crate::EngineConfig::background_rounds)).
    background: Option<Arc<Wake>>,
    /// The pressure beyond which a scan's snapshot is expired (see
    /// [`EngineConfig::snapshot_limit`](crate::EngineConfig::snapshot_limit) and
    /// [`bound_snapshots`](Checkpointer::bound_snapshots)).
    snapshot_limit: u64,
}

impl Checkpointer {
    /// Rounds that run on their own when a ring is `fill` percent full (0: never), on the
    /// engine's rounds' thread if `background`, else in the writer that finds its ring so; a
    /// snapshot held while more than `snapshot_limit` bytes of descriptors are written and of
    /// byte values replaced is expired.
    pub(crate) fn new(fill: u8, background: bool, snapshot_limit: u64) -> Checkpointer {
        Checkpointer { fill, background: background.then(Arc::default), snapshot_limit, ..Checkpointer::default() }
    }

    /// The wake-up of the rounds' thread, if the engine runs one.
    pub(crate) fn background(&self) -> Option<Arc<Wake>> {
        self.background.clone()
    }

    /// On the rounds' thread, asked by a writer (see [`maybe_round`](Checkpointer::maybe_round)):
    /// a round, and under safe points the safe point the writer would have asked for after it,
    /// with the epoch collector helped along before and after (the round's end, which the next
    /// round waits for, is deferred through it).
    ///
    /// A writer asks only once the last round's end ran, but another round may be running (one
    /// asked for by a caller): the thread tries a few times, a little apart, before it leaves
    /// the round to the next ask.
    pub(crate) fn asked_round<M: PMem + 'static>(&self, core: &Core<M>, rings: &Rings, local: &LocalHandle) {
        for _ in 0..8 {
            self.advance(local);
            if self.round(core, rings, local).is_some() {
                if core.safe.on() {
                    core.safe.relieve(rings.len() as u64 * rings.ring_bytes(), || core.safe.make(core, rings));
                }
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        self.advance(local);
    }

    /// The fill that starts a round on its own.
    pub(crate) fn fill(&self) -> u8 {
        self.fill
    }

    /// What the rounds did so far.
    pub(crate) fn stats(&self) -> CheckpointStats {
        *self.stats.lock()
    }

    /// For a descriptor `d` that has not finished yet: the count of recycled rounds from which a
    /// removal named by one of its op words is stale (dropped, not run). A removal acts only if
    /// its node still holds the word; once `d`'s slot is recycled, a descriptor in the same slot
    /// could put the same word on the same key's node, so it must not run then.
    ///
    /// With `s` the rounds started when this is read: rounds up to `s` found their batches
    /// before, so before `d` finished, and the round that folds `d` (and recycles its slot in
    /// its end) is `s + 2` or later, which starts only after round `s + 1`'s end raised the
    /// recycled count to `s + 1`. A removal runner, pinned, that reads the count below that
    /// pinned before that round started, so the round's deferred end, which recycles the slot,
    /// waits for it to unpin. Dropping a removal is always safe: the round that folds `d` makes
    /// the node FINAL, if the word is still there, and queues its own removal (never stale).
    pub(crate) fn removal_expiry(&self) -> u64 {
        // Acquire: pairs with the Release store of a round after its find.
        self.started.load(Ordering::Acquire) + 1
    }

    /// The rounds whose end has run: a removal of [`removal_expiry`](Self::removal_expiry)
    /// `expiry` is stale once this reaches it. Read by a thread pinned until it has run the
    /// removals it judges by it.
    pub(crate) fn recycled(&self) -> u64 {
        // Acquire: pairs with the Release store of a round's deferred end.
        self.recycled.load(Ordering::Acquire)
    }

    /// Whether a round may start: none is running and the last one's slots were recycled.
    pub(crate) fn ready(&self) -> bool {
        // Acquire (both): pairs with the Release stores of the round and of its deferred end.
        self.recycled.load(Ordering::Acquire) == self.started.load(Ordering::Acquire)
    }
}

/// What a checkpoint round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// Descriptors folded into records (their slots are recycled once no thread can read them).
    pub descriptors: u64,
    /// Keys whose nodes were brought up to date (a key written by several descriptors of the
    /// batch is usually visited once: its node then holds this round's FINAL word).
    pub keys: u64,
    /// Records written or cleared (each flushed).
    pub records: u64,
    /// Cache lines the records' flushes covered, each once: each node's from its start to the end
    /// of its common header (a two-word key's high word included), and its record area's.
    pub lines: u64,
    /// Nodes of absent keys queued for removal.
    pub removals: u64,
    /// The checkpoint txid in force after the round: every committed writer at or below it is in
    /// the records.
    pub txid: u64,
}

impl CheckpointReport {
    /// What this round and the `next` one did together.
    pub(crate) fn then(self, next: CheckpointReport) -> CheckpointReport {
        CheckpointReport {
            descriptors: self.descriptors + next.descriptors,
            keys: self.keys + next.keys,
            records: self.records + next.records,
            lines: self.lines + next.lines,
            removals: self.removals + next.removals,
            txid: next.txid,
        }
    }
}

/// What the checkpoint rounds of an engine did since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Rounds that did anything (folded a batch, found one, or both).
    pub rounds: u64,
    /// Descriptors folded.
    pub descriptors: u64,
    /// Records written or cleared.
    pub records: u64,
    /// Time spent in rounds (by whichever threads ran them).
    pub busy: std::time::Duration,
    /// Descriptor rings whose regions rounds gave back to the pool, once empty and held by no
    /// handle (all but one spare).
    pub rings_given_back: u64,
    /// Times the scans' snapshots held past the limit were expired (see
    /// [`EngineConfig::snapshot_limit`](crate::EngineConfig::snapshot_limit)).
    pub snapshots_expired: u64,
}

/// A batch a round found: in each of its rings, every descriptor from where the rounds have
/// folded (the ring's `next`) up to the end given, all finished, holding every committed writer
/// below `t0`.
#[derive(Debug)]
struct Found {
    t0: u64,
    ends: Vec<(Arc<Ring>, u64)>,
    /// The txid counter read once the batch was found: every txid that a state the batch leaves
    /// depends on (its writers', and those of the writers its ops took nodes from) is below it.
    /// A snapshot below it waits for the fold (see `scan`).
    stamp: u64,
}

/// Keys brought up to date under one pin.
const KEYS_PER_PIN: u64 = 64;

/// Batch descriptors whose nodes are loaded together.
const WINDOW: usize = 16;

/// What the round in progress holds (see [`Checkpointer::lock`]).
#[derive(Debug, Default)]
struct Locked {
    /// The batch the last round found, which the next one folds.
    found: Option<Found>,
    /// [`Round::done`]'s room, kept from round to round.
    done: DoneCache,
}

/// Which nodes the round in progress brought up to date, and how far ([`Done`]). Kept from
/// round to round (cleared), so that its room is allocated once: what it spares is the walk,
/// for every op of a key, past the ops of newer transactions above the batch (see
/// [`checkpoint_key`]), which grows with the rounds' backlog.
#[derive(Debug, Default)]
struct DoneCache {
    /// Node -> its key and how far.
    nodes: HashMap<u64, (u128, Done), BuildHasherDefault<NodeHash>>,
}

/// The hash of a node's offset: splitmix64's finaliser (a round looks a node up for every op of
/// its batch; the default hasher is several times slower, and needs no defence here).
#[derive(Debug, Default)]
struct NodeHash(u64);

impl Hasher for NodeHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, node: u64) {
        self.0 = mix64(self.0 ^ node);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
}

impl DoneCache {
    /// The room it takes at once (about 48 KiB): a round over more nodes makes more, once.
    const ROOM: usize = 1024;

    /// Empties it for the next round, making room first if it has none.
    fn ready(&mut self) {
        if self.nodes.capacity() == 0 {
            self.nodes.reserve(DoneCache::ROOM);
        }
        self.nodes.clear();
    }

    /// How far the round brought `node` (holding `key`), if it did.
    fn get(&self, node: u64, key: u128) -> Option<Done> {
        self.nodes.get(&node).and_then(|&(k, done)| (k == key).then_some(done))
    }

    fn insert(&mut self, node: u64, key: u128, done: Done) {
        self.nodes.insert(node, (key, done));
    }
}

/// A round's state while it goes through its keys.
#[derive(Debug, Default)]
struct Round {
    /// The generation of the FINAL words it writes.
    generation: u64,
    /// Nodes brought up to date.
    nodes: u64,
    /// Nodes whose records changed (and whether their keys are two words): flushed before the
    /// round commits.
    flush: Vec<(u64, bool)>,
    /// Nodes of absent keys to remove once the round's end is due, each with the FINAL word the
    /// round gave it. Queued with the expiry `u64::MAX`: they never go stale (see
    /// [`Checkpointer::removal_expiry`]).
    removals: Vec<AbsentNode>,
    /// Where the batch it folds lies: per ring, the offset of its data area, the area's length,
    /// and the batch's first position and length there.
    spans: Vec<(u64, u64, u64, u64)>,
    /// The nodes (with their keys) it brought up to date, and how far: another op of the batch
    /// on one of them finds nothing left to do (see [`checkpoint_key`]).
    done: DoneCache,
}

/// How far a round brought a node up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    /// Its `prev` chain was cached and cut, from its info word down, as for an op that changed
    /// nothing, and that word names no batch op: an op that takes the node since names none.
    Chain,
    /// That, and its record is its committed state, its info word left naming a newer
    /// transaction's op. (A node the round made FINAL is not remembered: its word says so.)
    Record,
}

impl Round {
    /// Whether the descriptor at `d` is one of the batch's.
    fn holds(&self, d: u64) -> bool {
        self.spans.iter().any(|&(base, cap, start, len)| {
            (base..base + cap).contains(&d) && (d - base + cap - start % cap) % cap < len
        })
    }
}

/// Where a walk down a node's `prev` chain from its info word stopped (see [`chain_below`]).
enum ChainEnd {
    /// At the op sought.
    Op,
    /// At an op whose `prev` was cut.
    Cut,
    /// Elsewhere: at a FINAL word, or at the op that made the node.
    Below,
}

impl Checkpointer {
    /// Runs one round now, on a thread whose epoch participation is `local`: folds the batch the
    /// last round found, then finds the next (see the [module docs](self)). `None`, doing
    /// nothing, if another round is running, the last round's end still waits for a thread to
    /// move on, or a snapshot below the batch's stamp is held. Helps the epoch collector along
    /// before and after it, without waiting for anyone.
    pub(crate) fn run_round<M: PMem + 'static>(
        &self,
        core: &Core<M>,
        rings: &Rings,
        local: &LocalHandle,
    ) -> Option<CheckpointReport> {
        self.advance(local);
        let report = self.round(core, rings, local);
        self.advance(local);
        report
    }

    /// Runs the round that a ring written up to `head` calls for, if any: when it holds more
    /// than [`fill`](Checkpointer::fill) percent not yet recycled and no round is running or
    /// waiting for its end.
    pub(crate) fn maybe_round<M: PMem + 'static>(
        &self,
        core: &Core<M>,
        rings: &Rings,
        local: &LocalHandle,
        ring: &Ring,
        head: u64,
    ) {
        let fill = self.fill as u64;
        if fill == 0 || ring.used(head) * 100 <= ring.cap * fill || !self.ready() {
            return;
        }
        // The rounds' thread, if there is one, unless it lags: a ring past twice the fill (at
        // most 90%) means it was kept off the cores while the writers went on, and the writer
        // runs the round itself, as without the thread, so that the rings do not grow in number
        // for want of a thread's turn.
        let wake = self.background.as_ref().filter(|_| ring.used(head) * 100 <= ring.cap * (2 * fill).min(90));
        #[cfg(test)]
        if self.background.is_some() && wake.is_none() {
            steps::add(steps::Count::TakeOver);
        }
        if !core.safe.on() {
            match wake {
                Some(wake) => wake.ask(),
                None => {
                    self.round(core, rings, local);
                }
            }
            return;
        }
        // While safe points are kept, a round folds only what a safe point covers, and its
        // checkpoint txid and recycling wait for the next ones: the ring's slots come back after
        // a few rounds, each followed by a safe point, which keeps the rings going round at the
        // writers' pace. They are spaced by a sixteenth of the ring written, not run after every
        // transaction until the slots come back. The safe point is the next one, unless the rings
        // have grown beyond the budget (see `SafePoints::relieve`).
        // Relaxed: only the ring's writer reads and writes it.
        if head - ring.fired.load(Ordering::Relaxed) < ring.cap / 16 {
            return;
        }
        ring.fired.store(head, Ordering::Relaxed);
        match wake {
            Some(wake) => wake.ask(),
            None => {
                self.round(core, rings, local);
                core.safe.relieve(rings.len() as u64 * rings.ring_bytes(), || core.safe.make(core, rings));
            }
        }
    }

    /// Expires the snapshots held past the limit, if any (see `reclaim::Snapshots`): called by
    /// the writer of `ring` (written up to `head`) after each transaction, it looks once the
    /// ring's pressure has grown by a sixteenth of the limit (or of the ring, if smaller) since
    /// it last did, and only if a snapshot is held. So a snapshot is expired once its pressure
    /// passes the limit by less than two steps per writer (one on the ring it left, one on the
    /// ring it writes) and what its last transaction added.
    pub(crate) fn bound_snapshots<M: PMem + 'static>(
        &self,
        core: &Core<M>,
        rings: &Rings,
        local: &LocalHandle,
        ring: &Ring,
        head: u64,
    ) {
        let pressure = ring.pressure(head);
        // Relaxed: only the ring's writer reads and writes it (a handle that takes the ring after
        // another does so under the rings' lock).
        if pressure.saturating_sub(ring.bounded.load(Ordering::Relaxed))
            < (self.snapshot_limit.min(ring.cap) / 16).max(1)
        {
            return;
        }
        ring.bounded.store(pressure, Ordering::Relaxed);
        let snapshots = &core.reclaim.snapshots;
        if snapshots.oldest() == u64::MAX {
            return;
        }
        if let Some(below) = snapshots.past(rings.pressure(), self.snapshot_limit)
            && core.reclaim.expire_snapshots(&local.pin(), below)
        {
            self.stats.lock().snapshots_expired += 1;
        }
    }

    /// A few attempts to let the epoch collector run what is due (the end of the last round).
    pub(crate) fn advance(&self, local: &LocalHandle) {
        for _ in 0..4 {
            if self.ready() {
                return;
            }
            local.pin().flush();
        }
    }

    fn round<M: PMem + 'static>(&self, core: &Core<M>, rings: &Rings, local: &LocalHandle) -> Option<CheckpointReport> {
        let ckpt = self;
        let mut locked = ckpt.lock.try_lock()?;
        let Locked { found, done } = &mut *locked;
        if !ckpt.ready() {
            return None;
        }
        // A scan's snapshot below the stamp may still read what the fold would cache, cut and
        // make FINAL: the fold waits until no such snapshot is held (see `scan`), or until they
        // are expired and released (see `reclaim::Snapshots`).
        if found.as_ref().is_some_and(|b| b.stamp > core.reclaim.snapshots.oldest()) {
            return None;
        }
        let started = std::time::Instant::now();
        #[cfg(test)]
        steps::add(steps::Count::Round);
        // The last round's end ran: the rings it emptied, and that no handle holds, go back to
        // the pool (but a spare).
        let given = rings.give_back(&core.pool) as u64;
        if given > 0 {
            ckpt.stats.lock().rings_given_back += given;
        }
        // Relaxed: only the round holding the lock moves it.
        let number = ckpt.started.load(Ordering::Relaxed) + 1;
        done.ready();
        let mut round = Round { generation: core.epoch + number, done: std::mem::take(done), ..Round::default() };
        // 2. and 3.: fold the batch the last round found.
        let batch = found.take();
        let mut report = CheckpointReport::default();
        if let Some(batch) = &batch {
            fold(core, local, batch, &mut round, &mut report);
        }
        *done = std::mem::take(&mut round.done);
        // The unlinked nodes removed with their records (see `Core::retire_node`) whose records
        // a round cleared, this one or an earlier one, each after its fence: they are freed once
        // no thread can still be reading them. Relaxed: only rounds, one at a time, clear them.
        let guard = local.pin();
        let changed = round.flush.iter().map(|&(node, _)| node);
        if core.reclaim.retire_recorded(&guard, changed, |node| !has_record(&core.pool, node)) > 0 {
            guard.flush();
        }
        drop(guard);
        // A list's removals leave their unlinks to the next search past the node: the sweep of
        // the lists that had such removals since the last one bounds how long those nodes stay
        // linked (and hold their blocks) to about a round.
        core.structures.sweep(&Reader { core, guard: &local.pin() });
        report.txid = core.meta.checkpoint_txid(core.mem());
        report.removals = round.removals.len() as u64;
        // 1. Find the next batch, from where the folded one ended.
        *found = find(core, rings);
        if batch.is_none() && found.is_none() {
            return Some(report);
        }
        // Release: `ready` compares it with `recycled`, which the round's end raises to it.
        ckpt.started.store(number, Ordering::Release);

        // 4. The end, once no thread can still read what the round changed or recycles, nor
        // still runs a transaction of the batch it found.
        let guard = local.pin();
        let removals = round.removals;
        let reclaim = Arc::clone(&core.reclaim);
        let safe = Arc::clone(&core.safe);
        let (c, recycle, stamp) = batch.map_or((0, Vec::new(), 0), |b| (b.t0 - 1, b.ends, b.stamp));
        let recycled = Arc::clone(&ckpt.recycled);
        guard.defer(move || {
            reclaim.push_removals(removals, stamp);
            for (ring, end) in recycle {
                safe.recycle(ring, end, c);
            }
            // Release: the next round starts after this one's end.
            recycled.store(number, Ordering::Release);
        });
        guard.flush();
        let mut stats = ckpt.stats.lock();
        stats.rounds += 1;
        stats.descriptors += report.descriptors;
        stats.records += report.records;
        stats.busy += started.elapsed();
        Some(report)
    }
}

/// Step 1: the batch of finished descriptors from where the last batch ended, `None` if there is
/// none.
fn find<M: PMem + 'static>(core: &Core<M>, rings: &Rings) -> Option<Found> {
    // Txids below it were handed out before the rings are read; while safe points are kept, a
    // batch holds only what a safe point covers (see `safe`).
    let t0 = core.safe.batch_bound(core.next_txid());
    let rings = rings.all();
    let mut ends = Vec::new();
    let mut window = Vec::with_capacity(WINDOW);
    for ring in rings {
        // Acquire: the descriptors before the head were written before it was published.
        let head = ring.head.load(Ordering::Acquire);
        // Relaxed: only rounds, one at a time, move it.
        let start = ring.next.load(Ordering::Relaxed);
        let mut v = start;
        while take_window(core, &ring, &mut v, head, t0, &mut window) {}
        if v > start {
            ends.push((ring, v));
        }
    }
    // After every descriptor of the batch was read finished (and every committed one had its
    // txid): see `Found::stamp`.
    let stamp = core.next_txid();
    (!ends.is_empty()).then_some(Found { t0, ends, stamp })
}

/// Steps 2 and 3: brings the key of every op of `batch` up to date, makes the records durable and
/// advances the checkpoint txid; moves each ring's `next` to the batch's end there.
fn fold<M: PMem + 'static>(
    core: &Core<M>,
    local: &LocalHandle,
    batch: &Found,
    round: &mut Round,
    report: &mut CheckpointReport,
) {
    let mem = core.mem();
    // One pin for a few keys: each pin and unpin is a locked instruction.
    let mut guard = local.pin();
    let mut ops = 0u64;
    // The batch descriptors are taken a window at a time: the nodes the window's ops name
    // are loaded at once, not one miss after another.
    let mut window: Vec<u64> = Vec::with_capacity(WINDOW);
    round.spans = batch
        .ends
        .iter()
        .map(|(ring, end)| {
            // Relaxed: only rounds, one at a time, move it.
            let start = ring.next.load(Ordering::Relaxed);
            (ring.at(0), ring.cap, start, end - start)
        })
        .collect();
    for (ring, end) in &batch.ends {
        // Relaxed: only rounds, one at a time, move it.
        let mut v = ring.next.load(Ordering::Relaxed);
        loop {
            // Every descriptor up to the end qualifies (it did when found, and still does).
            let more = take_window(core, ring, &mut v, *end, batch.t0, &mut window);
            for &d in &window {
                let desc = Desc::new(mem, d);
                for i in 0..desc.nops() {
                    if let Some(node) = cached_node(mem, &desc, i) {
                        mem.prefetch(node);
                        core.pool.prefetch_record(node);
                    }
                }
            }
            for &d in &window {
                report.descriptors += 1;
                fold_descriptor(core, round, &mut guard, &mut ops, d);
            }
            if !more {
                break;
            }
        }
        debug_assert_eq!(v, *end, "a found batch is folded whole");
        // Relaxed: only rounds, one at a time, read it.
        ring.next.store(*end, Ordering::Relaxed);
    }
    drop(guard);

    // 3. Commit: the records are durable before the checkpoint txid says so. Their lines are
    // flushed here, back to back, not as each is written: a locked instruction (the next CAS,
    // a pin) waits for the flushes before it, and a flush may evict the line a CAS needs.
    report.lines = flush_records(&core.pool, &mut round.flush);
    report.records = round.flush.len() as u64;
    report.keys = round.nodes;
    if report.records > 0 {
        mem.fence();
    }
    core.safe.folded(core, batch.t0 - 1);
}

/// Fills `window` with the batch's next descriptors in `ring`, from position `v` (moved past
/// them) up to `head`: finished ones (committed ones persisted first, as any reader would),
/// up to the first that is active or has a txid of `t0` or more. Returns whether the batch
/// may go on in this ring after the window.
fn take_window<M: PMem + 'static>(
    core: &Core<M>,
    ring: &Ring,
    v: &mut u64,
    head: u64,
    t0: u64,
    window: &mut Vec<u64>,
) -> bool {
    let mem = core.mem();
    window.clear();
    while *v < head && window.len() < WINDOW {
        let Some(d) = ring.descriptor_at(mem, v, head) else { return false };
        let desc = Desc::new(mem, d);
        let s = desc.state();
        match s.status {
            TxStatus::Active => return false,
            TxStatus::Aborted => {}
            TxStatus::Committed => {
                if s.pstatus != PersistStatus::Persisted {
                    core.persist(d);
                }
                if desc.txid() >= t0 {
                    return false;
                }
            }
        }
        window.push(d);
        *v += desc_bytes(desc.nops(), desc.wide());
    }
    *v < head
}

/// Brings the key of every op of the batch descriptor `d` up to date ([`checkpoint_key`]),
/// pinning again every [`KEYS_PER_PIN`] ops (`ops` counts them over the round). An op that took
/// no node is passed over (see the module docs, step 1).
fn fold_descriptor<M: PMem + 'static>(core: &Core<M>, round: &mut Round, guard: &mut Guard, ops: &mut u64, d: u64) {
    let mem = core.mem();
    let desc = Desc::new(mem, d);
    let committed = desc.state().status == TxStatus::Committed;
    for i in 0..desc.nops() {
        let op = desc.op(i);
        let key = (StructId(op.structure), op.key);
        let same_key = |j: usize| {
            let o = desc.op(j);
            (StructId(o.structure), o.key) == key
        };
        // The node op i took: its own cache's, or that of the first op of `d` on the key.
        let Some(node) = cached_node(mem, &desc, i)
            .or_else(|| (0..i).filter(|&j| same_key(j)).find_map(|j| cached_node(mem, &desc, j)))
        else {
            continue;
        };
        *ops += 1;
        if ops.is_multiple_of(KEYS_PER_PIN) {
            guard.repin();
        }
        let writes = committed && !OpKind::from_code(op.kind).is_read();
        checkpoint_key(Reader { core, guard: &*guard }, round, key, (node, Info::op(d, i)), writes);
    }
}

/// Brings the node of `key` in structure `s` up to date: its `prev` chain cached and cut,
/// its record the node's committed state, and its info word FINAL (of `generation`) if it
/// names a batch descriptor. A changed record goes on `round`'s list to flush. See the
/// [module docs](self).
///
/// `writes`: whether the op changed the key (a write of a committed transaction).
///
/// `(node, op)`: the node the op took and the op's word. If the node's info word is still
/// that op's, it is the key's linked node: a node leaves its structure only after a mark on
/// its info word, and a freed block never gets that op word again (no executor of a batch
/// transaction runs any more, see step 1). Otherwise the node moved on: the cases below say
/// when it is still the key's node, when nothing is to be done, and when (rarely) the key is
/// searched for.
fn checkpoint_key<M: PMem + 'static>(
    cx: Reader<'_, M>,
    round: &mut Round,
    (s, key): (StructId, u128),
    (node, op): (u64, Info),
    writes: bool,
) {
    let core = cx.core;
    let Ok(structure) = core.structures.get(s) else { return };
    let mem = core.mem();
    // Acquire (the check): as any read of an info word.
    let now = Info(mem.load(node + INFO, Ordering::Acquire));
    let same_key = || load_key(mem, node, structure.wide()) == key;
    // The op's own word, or that word marked by the op's removal of a node with a record (the
    // loop below clears the record).
    let node = if now == op || now == op.marked() {
        node
    } else if now.is_marked() || now.is_final() || !same_key() {
        // Marked, or its block freed and holding another key: the node left its structure,
        // removed while absent, so this op's write, if any, was superseded by that absence,
        // whose writer is in this batch (its own op brings the key up to date, and clears the
        // record of a node it removed while the node held one, below) or above the checkpoint
        // txid (recovery reads it); nothing leads to the node any more but from threads pinned
        // since, which the recycling waits for. FINAL: a round made the node FINAL after this
        // op took it (words never repeat on a node), so its record holds the node's state
        // since.
        return;
    } else {
        // Another op of the batch brought the node up to date already: its walk went down from
        // the node's info word through every op of the batch on the node (each took the node
        // before that word was read), so this op's `prev` is cached and cut if it must be, and
        // the record says the node's state since; and the word it left names a newer
        // transaction's op, so no op that took the node since names a batch op. Without this,
        // every op of a hot key would walk the ops of newer transactions above the batch again
        // (their `prev`s are not cut, see `cache_chain`). (A node the round made FINAL returns
        // above.)
        match round.done.get(node, key) {
            Some(Done::Record) => return,
            Some(Done::Chain) if !writes => return,
            _ => {}
        }
        match (chain_below(core, now, op), writes) {
            // The node moved on through ops that each took it from the one below, by a CAS
            // while it was unmarked: it is still the key's linked node.
            (ChainEnd::Op, true) => node,
            // The op changed nothing (a read, or an op of an aborted transaction): its node's
            // record needs nothing from it, but a `prev` on the chain names this op: the
            // chain is cached and cut, or the recycled slot would be followed.
            (ChainEnd::Op, false) => {
                cache_chain(core, round, now, node);
                // Unless the word names a batch op itself: an op that takes the node from it
                // names that op in its `prev`, to be cut, and the op's own visit makes it FINAL.
                if !round.holds(now.desc()) {
                    round.done.insert(node, key, Done::Chain);
                }
                return;
            }
            // A cut hides whether the chain leads to this write: the key is searched for.
            (ChainEnd::Cut, true) => match structure.find_node(&cx, key) {
                Some(node) => node,
                None => return,
            },
            // A round made the node FINAL, or the block was made anew, since the op; or
            // the op changed nothing and no chain from the node leads to it. (A chain that
            // does not lead there may be a block an executor is still making for the key,
            // its word set and its link not yet done: its op has not executed.)
            _ => return,
        }
    };
    round.nodes += 1;
    let wide = structure.wide();
    // Whether a record store was made (by any pass of the loop): its lines get flushed.
    let mut written = false;
    loop {
        // Acquire: see the descriptor the word names.
        let cur = Info(mem.load(node + INFO, Ordering::Acquire));
        if cur == op.marked() {
            // The op's removal marked the node (perhaps after an earlier pass of this loop wrote
            // the record, if `written`).
            clear_removed(core, round, (s, key, wide), node, cur, written);
            return;
        }
        let (state, folded) = if cur.is_marked() || cur.is_final() {
            (if cur.is_marked() { None } else { core.resolve(cur, None) }, false)
        } else {
            cache_chain(core, round, cur, node);
            (core.resolve(cur, None), round.holds(cur.desc()))
        };
        if !folded && !writes {
            // An op that changed nothing, whose node moved on: no FINAL word to give, and the
            // key's writers bring the record up to date through their own ops. A newer state
            // is not written for it: no batch writer of the key may name it for recovery (see
            // `safe`).
            if written {
                round.flush.push((node, wide));
            }
            round.done.insert(node, key, Done::Chain);
            return;
        }
        written |= write_record(&core.pool, node, key, wide, s.0, core.epoch, state);
        // Only a word naming a batch descriptor becomes FINAL (another is left for the round
        // that folds its descriptor): such a word never comes back once the node moved on, so
        // the round gives a node its FINAL word at most once and that word never repeats.
        let next = if folded { Info::final_state(node, state.is_some(), round.generation) } else { cur };
        // AcqRel: the record's stores come before whatever changes the node after this; and
        // see the word's writer.
        if mem.compare_exchange(node + INFO, cur.0, next.0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            if folded && state.is_none() && structure.removes_nodes::<M>() {
                round.removals.push(AbsentNode { structure: s, key, info: next, node: Some(node), deleted: false });
            }
            if written {
                // The key too, when flushed: the checksum covers it, and nothing else ever
                // flushes it (the node may be a block another key's record was in).
                round.flush.push((node, wide));
            }
            if !folded {
                round.done.insert(node, key, Done::Record);
            }
            return;
        }
    }
}

/// The node of `key` (of two words if `wide`) in structure `s` whose info word is `marked`, the
/// word of a batch op (a committed Delete or Remove) with the mark: the op removed the node while
/// it held a record (see `structures::remove_if`). The record is cleared now (the op left the key
/// absent, and no op took the node since) and flushed before this round's fence; until then the
/// op is above the checkpoint txid. The block, held while its record is valid, is freed by a
/// round after the fence, or, if unlinked after the clear, through the epoch: then what it holds
/// next has a zero norm word, which the flush writes back (see `Core::retire_node`). Then
/// REMOVED, so that no word names the op's slot once it is recycled.
///
/// An earlier round may have cleared the record already (folding an op that took the node
/// before this one, while this one's removal marked it) and a round freed the block since: then
/// the block holds a zero norm word, and either another node's word (the CAS fails) or still
/// this one (the CAS changes a free block's word, which nothing reads: a new node's word is
/// stored, not swapped). `written`: the caller stored into the record already.
fn clear_removed<M: PMem + 'static>(
    core: &Core<M>,
    round: &mut Round,
    (s, key, wide): (StructId, u128, bool),
    node: u64,
    marked: Info,
    written: bool,
) {
    let mem = core.mem();
    if write_record(&core.pool, node, key, wide, s.0, core.epoch, None) || written {
        round.flush.push((node, wide));
    }
    // AcqRel: the record's store comes before the word's change, as every round's.
    let _ = mem.compare_exchange(node + INFO, marked.0, Info::removed(node).0, Ordering::AcqRel, Ordering::Acquire);
}

/// Where the `prev` chain below the info word `top` meets the op word `op`, a FINAL word, a
/// creation or a cut, whichever comes first. The chain is safe to walk: every op on it took the
/// node after `op` did, so its descriptor is in the batch being folded or newer, and a batch
/// folded earlier left no `prev` naming its ops uncut on a node that is not marked (a marked
/// node's chain is never walked: no op takes it, and every reader reads it as absent).
fn chain_below<M: PMem + 'static>(core: &Core<M>, top: Info, op: Info) -> ChainEnd {
    let mem = core.mem();
    let mut cur = top;
    loop {
        #[cfg(test)]
        steps::add(steps::Count::Step);
        if cur == op {
            return ChainEnd::Op;
        }
        if cur.is_final() {
            return ChainEnd::Below;
        }
        let desc = Desc::new(mem, cur.desc());
        // Acquire: as every read of `prev`.
        match mem.load(desc.prev_off(cur.opid()), Ordering::Acquire) {
            CUT => return ChainEnd::Cut,
            // UNSET: not on a linked node's chain (see `execute_op`), as NO_NODE.
            NO_NODE | UNSET => return ChainEnd::Below,
            prev => cur = Info(prev),
        }
    }
}

/// Walks the `prev` chain below the info word `top` of `node` down to a FINAL word, the node's
/// creation or an op already cut: caches the before-state of every op whose `prev` names an op
/// of another transaction of `round`'s batch, or a FINAL word (unless cached already), and cuts
/// its `prev`.
///
/// Only those: a batch descriptor's slot is recycled, and a FINAL word's value rewritten, so no
/// reader may follow such a `prev` any more. A `prev` naming a newer transaction's op is left for
/// the round that folds that transaction: a scan's snapshot may look past an op (see `scan`),
/// and the state before it as of the snapshot is then what its `prev` names, not what its cache
/// says (a state that the newer transaction, perhaps above the snapshot, left); while a cut
/// leaves only states of the batch, which every snapshot still held reads as they are.
fn cache_chain<M: PMem + 'static>(core: &Core<M>, round: &Round, top: Info, node: u64) {
    let mem = core.mem();
    let mut cur = top;
    while !cur.is_final() {
        #[cfg(test)]
        steps::add(steps::Count::Step);
        let (x, k) = (cur.desc(), cur.opid());
        let desc = Desc::new(mem, x);
        // Acquire: as every read of `prev`.
        let prev = mem.load(desc.prev_off(k), Ordering::Acquire);
        if prev == CUT || prev == NO_NODE {
            return;
        }
        let p = Info(prev);
        debug_assert_took_from(mem, x, p);
        if p.is_final() || (p.desc() != x && round.holds(p.desc())) {
            if read_cache(mem, &desc, k).is_none() {
                write_cache(mem, x, k, core.resolve(p, Some(x)), node);
            }
            // Release: a reader that reads the cut reads the cache.
            mem.store(desc.prev_off(k), CUT, Ordering::Release);
        }
        // An op's `prev` that names an earlier op of its own transaction is never cached
        // (that state holds only if the transaction commits), nor one that names a newer
        // transaction's op: go on below it.
        cur = p;
    }
}

/// A unit test's counts, of this thread: one array of counters, one per [`steps::Count`].
#[cfg(test)]
pub(crate) mod steps {
    use std::cell::Cell;

    /// What a thread counts.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum Count {
        /// Steps rounds took down `prev` chains.
        Step,
        /// Rounds run.
        Round,
        /// Times a writer, its ring past twice the fill, went to run a round itself instead of
        /// asking the rounds' thread.
        TakeOver,
    }

    thread_local! {
        static COUNTS: [Cell<u64>; 3] = const { [const { Cell::new(0) }; 3] };
    }

    pub(super) fn add(c: Count) {
        COUNTS.with(|a| a[c as usize].set(a[c as usize].get() + 1));
    }

    /// The count of `c` on this thread so far.
    pub(crate) fn of(c: Count) -> u64 {
        COUNTS.with(|a| a[c as usize].get())
    }
}

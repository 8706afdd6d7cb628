//! A thread's access to the engine: its descriptor ring, its allocation cache, its epoch
//! participation; and what it does with them: execute transactions, read single keys, scan
//! ranges, run checkpoint rounds.
//!
//! [`Handle::execute`] checks a transaction whole before anything changes, writes its byte
//! values (blobs) and its descriptor into the handle's ring, runs it ([`protocol`]), and after it
//! finished persists it (if it committed and wrote), hands what it left absent or replaced to the
//! reclamation, and starts the checkpoint round its ring calls for.
//!
//! [`protocol`]: crate::protocol

use std::ops::RangeBounds;
use std::sync::Arc;

use crossbeam_epoch::{Collector, Guard, LocalHandle};

use crate::checkpoint::{CheckpointReport, Checkpointer};
use crate::descriptor::{self, Abort, Desc, StoredOp, TxStatus, desc_bytes};
use crate::error::{AllocError, EngineError, ReadError};
use crate::hash::{op_hash, value_hash};
use crate::key::{Key, KeyWidth};
use crate::mem::{CACHE_LINE, PMem, WORD};
use crate::pool::{AllocCache, POff, Pool};
use crate::protocol::{Core, Executor, Reader};
use crate::reclaim::{AbsentNode, Hold, Removal};
use crate::ring::{Ring, Rings};
use crate::scan;
use crate::structures::registry::Structure;
use crate::tx::{MAX_OPS, Op, OpKind, Outcome, StructId, Transaction, Values};

/// What an engine's handles share: the protocol's core, the epoch collector, the rings and the
/// checkpoint rounds.
#[derive(Debug)]
pub(crate) struct Shared<M: PMem> {
    pub(crate) core: Core<M>,
    pub(crate) collector: Collector,
    pub(crate) rings: Rings,
    pub(crate) checkpointer: Checkpointer,
    /// The engine's background threads: the safe points' syncer under a periodic policy, and
    /// the automatic rounds' thread if the engine runs them on one.
    pub(crate) threads: parking_lot::Mutex<Vec<crate::wake::Worker>>,
    /// The engines and handles that hold it (see [`Shared::leave`]).
    pub(crate) users: std::sync::atomic::AtomicUsize,
}

impl<M: PMem + 'static> Shared<M> {
    /// One more engine or handle holds it. Returns how many did before.
    pub(crate) fn enter(&self) -> usize {
        // Relaxed: a new user is made from one that holds it (an engine), which keeps the count
        // above zero meanwhile.
        self.users.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// An engine or handle let go of it. The last one stops the background threads and waits
    /// for them to end: a thread holds the shared state while it makes a safe point or runs a
    /// round, and the last holder's drop closes the pool (its mapping, file and lock). Without
    /// the wait, a thread caught working would close it after the user's last drop returned,
    /// and an open of the same file just after would find it still locked.
    pub(crate) fn leave(&self) {
        // AcqRel: the last user sees every other user's work done before it stops the threads.
        if self.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            let threads = std::mem::take(&mut *self.threads.lock());
            threads.into_iter().for_each(crate::wake::Worker::stop);
        }
    }

    /// Makes power-safe points until everything committed before the call survives a power
    /// loss (see `safe`), and returns the safe txid.
    pub(crate) fn safe_point(&self) -> std::io::Result<u64> {
        self.core.safe.make_all(&self.core, &self.rings)
    }

    /// Returns once the transaction that `out` says committed survives a power loss, as the
    /// policy wants: under `Immediate`, after the safe point that covers it.
    fn durable(&self, out: &Outcome) -> Result<(), EngineError> {
        let safe = &self.core.safe;
        if let Outcome::Committed { txid: Some(txid), .. } = *out
            && safe.on()
            && safe.policy() == crate::DurabilityPolicy::Immediate
        {
            safe.wait(txid, || safe.make(&self.core, &self.rings))?;
        }
        Ok(())
    }
}

/// A handle gathers the removals its transactions leave and hands them to the epoch (see
/// `Handle::defer_removals`) once it holds this many, or once this many of its transactions
/// have ended since it held none (the one that left the first included): handing each
/// transaction's over cost an allocation and a flush of the epoch bag (a copy of its 64 slots)
/// per transaction. Until then the nodes stay linked and absent, which every reader handles.
const REMOVAL_BATCH: usize = 16;

/// A thread's access to the engine. See [`Engine::handle`](crate::Engine::handle).
pub struct Handle<M: PMem + 'static> {
    shared: Arc<Shared<M>>,
    epoch: LocalHandle,
    /// The descriptor ring this handle writes to (its index among the engine's), taken at its
    /// first descriptor.
    ring: Option<(usize, Arc<Ring>)>,
    /// The ring's head as this handle, its one writer, knows it.
    head: u64,
    cache: AllocCache,
    /// Descriptors this thread is executing, innermost last: the owner's, then those it helps.
    help_stack: Vec<u64>,
    /// The blobs of the transaction being executed, per op: offset and value hash (0: a word
    /// value); kept for reuse.
    blobs: Vec<(u64, u64)>,
    /// The ops of the transaction being executed as its descriptor stores them; kept for reuse.
    stored: Vec<StoredOp>,
    /// A results vector that came back from [`execute_with`](Handle::execute_with), for reuse.
    results: Vec<Option<u64>>,
    /// The nodes the transaction just finished left absent, to remove (kept for reuse).
    removals: Vec<AbsentNode>,
    /// Removals of this handle's transactions not yet handed to the epoch: handed over
    /// [`REMOVAL_BATCH`] at a time, or at the latest by the [`REMOVAL_BATCH`]-th transaction
    /// counting the one that left the first (and at [`checkpoint`](Handle::checkpoint), and
    /// when the handle drops).
    deferred: Vec<Removal>,
    /// This handle's transactions that ended since `deferred` got its first removal, that one
    /// included.
    deferred_age: usize,
    /// A descriptor of this handle's was written and its execution never returned (a panic
    /// unwound through it): it may be committed and not yet persisted, so nothing may follow it
    /// in its ring (recovery checks the values of ring tails only), and the ring is given up.
    unfinished: bool,
}

impl<M: PMem + 'static> std::fmt::Debug for Handle<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("ring", &self.ring.as_ref().map(|r| r.0)).field("head", &self.head).finish()
    }
}

impl<M: PMem + 'static> Drop for Handle<M> {
    fn drop(&mut self) {
        self.defer_removals(&self.epoch.pin());
        self.shared.core.pool.release_cache(&mut self.cache);
        self.release_ring();
        self.shared.leave();
    }
}

/// Reads byte values (blobs) by their words while they cannot be freed: handed out, for the span
/// of a call, by [`Handle::execute_with`], [`Handle::get_with`] and [`Handle::range_with`].
pub struct Blobs<'g, M: PMem> {
    pool: &'g Pool<M>,
    keep: Keep<'g>,
}

/// What keeps the values a [`Blobs`] reads from being freed, borrowed for as long as the reader
/// lives.
enum Keep<'g> {
    /// An epoch pin: nothing retired since it was taken is freed.
    Pin(#[expect(dead_code, reason = "held for its borrow, never read")] &'g Guard),
    /// A scan's snapshot held: no value it reads is freed while it is live, and each read pins
    /// with this handle and looks first whether it is (see `reclaim::Snapshots`).
    Snapshot(&'g Hold<'g>, &'g LocalHandle),
}

impl<M: PMem> std::fmt::Debug for Blobs<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blobs").finish_non_exhaustive()
    }
}

impl<M: PMem> Blobs<'_, M> {
    /// Copies the byte value named by `word` (a result or value of a structure of
    /// [`Values::Bytes`]) into `buf`, replacing its contents, checked: [`ReadError::Damaged`] if
    /// `word` names no value inside the pool, or one whose bytes fail their check;
    /// [`ReadError::Expired`] if this reader is a scan's and its snapshot was expired (see
    /// [`Handle::snapshot_with`]).
    pub fn read_into(&self, word: u64, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        match self.keep {
            Keep::Pin(_) => Ok(self.pool.read_blob_into(POff::new(word), buf)?),
            Keep::Snapshot(hold, epoch) => {
                // Pinned, then the look: a live snapshot's values stay until the pin ends.
                let _pin = epoch.pin();
                if hold.expired() {
                    return Err(ReadError::Expired { txid: hold.txid() });
                }
                Ok(self.pool.read_blob_into(POff::new(word), buf)?)
            }
        }
    }

    /// A hint that the byte value named by `word`, about `len` bytes long (a guess will do), is
    /// read soon: starts loading its lines. Changes nothing; a word outside the pool is ignored.
    pub fn prefetch(&self, word: u64, len: usize) {
        let mem = self.pool.mem();
        // Every line of [word, word + 8 + len), clamped to the pool (the memory ignores the rest).
        let end = word.saturating_add(WORD).saturating_add(len as u64).min(mem.len());
        let mut line = word & !(CACHE_LINE - 1);
        while line < end {
            mem.prefetch(line.max(word));
            line += CACHE_LINE;
        }
    }

    /// The byte value named by `word`, copied out. See [`read_into`](Blobs::read_into).
    pub fn to_vec(&self, word: u64) -> Result<Vec<u8>, ReadError> {
        let mut buf = Vec::new();
        self.read_into(word, &mut buf)?;
        Ok(buf)
    }
}

impl<M: PMem + 'static> Handle<M> {
    /// A handle of the engine `shared`, for the calling thread.
    pub(crate) fn new(shared: &Arc<Shared<M>>) -> Handle<M> {
        shared.enter();
        Handle {
            shared: Arc::clone(shared),
            epoch: shared.collector.register(),
            ring: None,
            head: 0,
            cache: AllocCache::new(),
            help_stack: Vec::new(),
            blobs: Vec::new(),
            stored: Vec::new(),
            results: Vec::new(),
            removals: Vec::new(),
            deferred: Vec::new(),
            deferred_age: 0,
            unfinished: false,
        }
    }

    fn core(&self) -> &Core<M> {
        &self.shared.core
    }

    /// Hands this handle's removals to the epoch and lets the epoch collector advance and run
    /// what came due, as a checkpoint round does before and after it, without a round (a unit
    /// test's step).
    #[cfg(test)]
    pub(crate) fn collect(&mut self) {
        self.defer_removals(&self.epoch.pin());
        for _ in 0..4 {
            self.epoch.pin().flush();
        }
    }

    /// What the values of structure `s` are.
    pub fn values(&self, s: StructId) -> Result<Values, EngineError> {
        Ok(self.core().structures.get(s)?.values)
    }

    /// The width of the keys of structure `s`.
    pub fn keys(&self, s: StructId) -> Result<KeyWidth, EngineError> {
        Ok(self.core().structures.get(s)?.keys())
    }

    /// Gives back the ring this handle holds, if any: another handle resumes it once it has
    /// room, and its descriptors stay where checkpoint rounds and recovery read them. A ring
    /// whose last descriptor's transaction never returned (see `unfinished`) is given up for good.
    fn release_ring(&mut self) {
        if let Some((i, _)) = self.ring.take() {
            let dead = std::mem::take(&mut self.unfinished);
            self.shared.rings.release(i, dead);
        }
    }

    /// Where this handle writes its next descriptor, of `len` bytes: in its ring, or in another
    /// one it takes for it (with room, or a new one: the pool grows for it). Pads the ring's lap
    /// if it must.
    fn place_descriptor(&mut self, len: u64) -> Result<u64, EngineError> {
        let place =
            |h: &Self| h.ring.as_ref().and_then(|(_, r)| r.place(h.head, len).map(|start| (Arc::clone(r), start)));
        let mut placed = place(self);
        if placed.is_none() && self.ring.is_some() {
            // A round's end may be due: let it recycle this ring's slots before taking another.
            self.shared.checkpointer.advance(&self.epoch);
            placed = place(self);
        }
        let (ring, start) = match placed {
            Some(p) => p,
            None => {
                self.release_ring();
                let (i, ring, head) = self.shared.rings.take(&self.shared.core.pool, len)?;
                self.head = head;
                self.ring = Some((i, Arc::clone(&ring)));
                let start = ring.place(self.head, len).expect("a ring is taken only with room");
                (ring, start)
            }
        };
        ring.pad(self.core().mem(), self.head, start);
        self.head = start + len;
        Ok(ring.at(start))
    }

    /// Publishes the descriptor just written at `d` (up to this handle's head) to checkpoint
    /// rounds and safe points.
    fn publish_head(&self, d: u64) {
        if let Some((_, ring)) = &self.ring {
            // Release: a safe point that reads it sees the descriptor.
            ring.newest.store(d, std::sync::atomic::Ordering::Release);
            // Release: a round that reads the head sees the descriptors (and pad) before it.
            ring.head.store(self.head, std::sync::atomic::Ordering::Release);
        }
    }

    /// Executes `tx`: Committed with each op's result, or Aborted with nothing changed.
    ///
    /// The results of ops on a structure of [`Values::Bytes`] are blob words: read them with
    /// [`execute_with`](Handle::execute_with), which keeps them from being freed meanwhile.
    ///
    /// It returns when the transaction is as durable as the engine's
    /// [`DurabilityPolicy`](crate::DurabilityPolicy) says: under `Immediate` on a page-cache
    /// pool, after the sync of a safe point that covers it ([`EngineError::Io`] if that sync
    /// fails: the transaction committed, but may not survive a power loss).
    pub fn execute(&mut self, tx: &Transaction) -> Result<Outcome, EngineError> {
        let guard = self.epoch.pin();
        let out = self.execute_pinned(tx, &guard)?;
        drop(guard);
        self.maybe_checkpoint();
        self.shared.durable(&out)?;
        Ok(out)
    }

    /// Executes `tx`, then calls `f` with the outcome and a reader of the byte values its results
    /// name, while they cannot be freed.
    pub fn execute_with<R>(
        &mut self,
        tx: &Transaction,
        f: impl FnOnce(&Outcome, &Blobs<'_, M>) -> R,
    ) -> Result<R, EngineError> {
        let guard = self.epoch.pin();
        let out = self.execute_pinned(tx, &guard)?;
        let r = f(&out, &Blobs { pool: &self.shared.core.pool, keep: Keep::Pin(&guard) });
        drop(guard);
        self.maybe_checkpoint();
        self.shared.durable(&out)?;
        if let Outcome::Committed { results, .. } = out {
            self.results = results;
        }
        Ok(r)
    }

    /// The state of `key` in structure `s`: its value word if present (on a structure of byte
    /// values, a blob word: read the bytes with [`get_with`](Handle::get_with)). What a
    /// transaction of one Get returns, without building one: a single read answered without a
    /// descriptor, linearised at its read of the key's node, allocating nothing. It writes
    /// nothing, so it leaves the removals that came due and the checkpoint rounds to writers
    /// (and to [`checkpoint`](Handle::checkpoint)).
    pub fn get<K: Key>(&mut self, s: StructId, key: K) -> Result<Option<u64>, EngineError> {
        self.get_with(s, key, |state, _| state)
    }

    /// As [`get`](Handle::get), then `f` with the state and a reader of the byte value it names,
    /// while that cannot be freed.
    pub fn get_with<K: Key, R>(
        &mut self,
        s: StructId,
        key: K,
        f: impl FnOnce(Option<u64>, &Blobs<'_, M>) -> R,
    ) -> Result<R, EngineError> {
        let core = &self.shared.core;
        let structure = core.structures.get(s)?;
        structure.check_key(s, K::WIDTH, key.to_bits())?;
        let guard = self.epoch.pin();
        let state = Reader { core, guard: &guard }.read_state(structure, key.to_bits());
        let r = f(state, &Blobs { pool: &core.pool, keep: Keep::Pin(&guard) });
        drop(guard);
        Ok(r)
    }

    /// Executes `tx` until it is decided: again each time it is aborted to break a helping cycle
    /// (`failed_op: None`, which says nothing about its ops), then `f` with its results and a
    /// reader of the byte values they name, while those cannot be freed. `Ok(Err(i))` if its
    /// strict op `i` failed, run by this thread or by one helping it: never run again then.
    pub fn execute_decided<R>(
        &mut self,
        tx: &Transaction,
        mut f: impl FnMut(&[Option<u64>], &Blobs<'_, M>) -> R,
    ) -> Result<Result<R, usize>, EngineError> {
        loop {
            let decided = self.execute_with(tx, |out, blobs| match out {
                Outcome::Committed { results, .. } => Some(Ok(f(results, blobs))),
                Outcome::Aborted { failed_op: Some(i) } => Some(Err(*i)),
                Outcome::Aborted { failed_op: None } => None,
            })?;
            if let Some(d) = decided {
                return Ok(d);
            }
        }
    }

    /// The present keys of structure `s` in `range`, with their values, in key order: the state
    /// of the range after every transaction with a txid below one taken during the call, and
    /// none above (a strictly serializable snapshot; see
    /// [`snapshot_with`](Handle::snapshot_with)). It returns after one walk of the range,
    /// whatever writers do meanwhile. On the hash map a range walks every bucket. The values of
    /// a structure of [`Values::Bytes`] are blob words: read them with
    /// [`range_with`](Handle::range_with). `K` must be of the structure's key width
    /// ([`EngineError::WrongKey`] otherwise).
    pub fn range<K: Key>(&mut self, s: StructId, range: impl RangeBounds<K>) -> Result<Vec<(K, u64)>, EngineError> {
        self.range_with(s, range, |entries, _| entries)
    }

    /// [`range`](Handle::range), then `f` with the entries and a reader of the byte values they
    /// name, while those cannot be freed.
    pub fn range_with<K: Key, R>(
        &mut self,
        s: StructId,
        range: impl RangeBounds<K>,
        f: impl FnOnce(Vec<(K, u64)>, &Blobs<'_, M>) -> R,
    ) -> Result<R, EngineError> {
        self.snapshot_with(s, range, |_, entries, blobs| f(entries, blobs))
    }

    /// [`range_with`](Handle::range_with), with the txid of the snapshot: `f` gets the txid
    /// `t`, and the entries are the state left by every committed transaction with a txid below
    /// `t` and by none with a larger one. The txid is taken during the call, so every
    /// transaction that returned before the call is below it and every one that starts after
    /// it returns is above it.
    ///
    /// The walk re-pins as it goes, and `f` runs unpinned: what the snapshot reads (the nodes
    /// of keys deleted since, the values replaced since) waits for it, and so do the checkpoint
    /// rounds, while nothing else does. That wait is bounded: once writers have written
    /// descriptors and replaced values past
    /// [`EngineConfig::snapshot_limit`](crate::EngineConfig::snapshot_limit) while it is held,
    /// the snapshot is expired, and the scan stops at its next step: the walk with
    /// [`EngineError::SnapshotExpired`], a read of `f`'s reader with [`ReadError::Expired`].
    /// Everything read before was the snapshot's. Keep `f` short all the same: copy what it
    /// needs.
    pub fn snapshot_with<K: Key, R>(
        &mut self,
        s: StructId,
        range: impl RangeBounds<K>,
        f: impl FnOnce(u64, Vec<(K, u64)>, &Blobs<'_, M>) -> R,
    ) -> Result<R, EngineError> {
        let core = &self.shared.core;
        let structure = core.structures.get(s)?;
        if structure.keys() != K::WIDTH {
            return Err(EngineError::WrongKey { structure: s.0, expected: structure.keys() });
        }
        let mut guard = self.epoch.pin();
        // Read before the txid: what is written after it counts against the snapshot (read
        // after, a wait for the rings' lock would not count).
        let pressure = self.shared.rings.pressure();
        // Taken pinned, and held before the pin ends (see `scan`).
        let txid = core.take_txid();
        let hold = core.reclaim.snapshots.hold(txid, pressure);
        let entries = match scan::inclusive(&range) {
            Some(bounds) => scan::snapshot(core, structure, bounds, &hold, &mut guard),
            None => Some(Vec::new()),
        };
        drop(guard);
        let Some(entries) = entries else {
            return Err(EngineError::SnapshotExpired { txid });
        };
        // In place, as the scan's vector is, and then no larger than the entries need.
        let mut out: Vec<(K, u64)> = entries.into_iter().map(|(k, v)| (K::from_bits(k), v)).collect();
        out.shrink_to_fit();
        Ok(f(txid, out, &Blobs { pool: &core.pool, keep: Keep::Snapshot(&hold, &self.epoch) }))
    }

    /// Folds every transaction that finished before the call into the records, unless another
    /// round is running, and returns what was done: `None` if a round is running, the last
    /// round's end still waits for a thread to move on, or a scan holds a snapshot that the fold
    /// would take from (nothing is done then). Transactions of every thread go on meanwhile.
    ///
    /// A batch is folded by the round after the one that found it (see
    /// [`Engine::checkpoint`](crate::Engine::checkpoint)), so this runs two rounds, the second
    /// once every thread pinned during the first has moved on, which this handle helps along
    /// without waiting for anyone. If that has not happened yet, the batch the first round found
    /// waits for the next round (automatic, or another call), and the report says what the first
    /// round did.
    ///
    /// While the engine keeps power-safe points (see
    /// [`DurabilityPolicy`](crate::DurabilityPolicy)), a round folds only what a safe point
    /// covers and its checkpoint txid is stored by the next one: this makes a safe point before
    /// the rounds and two after them (the second puts the checkpoint txid on the disk, so that
    /// the slots can be recycled), and the report's txid is the one in force after them. A safe
    /// point that fails is kept for [`Engine::sync`](crate::Engine::sync) to report.
    pub fn checkpoint(&mut self) -> Option<CheckpointReport> {
        self.defer_removals(&self.epoch.pin());
        let safe_points = self.shared.core.safe.on();
        if safe_points {
            self.shared.core.safe.keep_error(self.shared.safe_point());
        }
        let first = self.checkpoint_round()?;
        let mut report = match self.checkpoint_round() {
            Some(second) => first.then(second),
            None => first,
        };
        if safe_points {
            for _ in 0..2 {
                self.shared.core.safe.keep_error(self.shared.safe_point());
            }
            report.txid = self.shared.core.meta.checkpoint_txid(self.shared.core.mem());
        }
        Some(report)
    }

    /// Runs one checkpoint round now: folds the batch the last round found, then finds the next.
    /// `None`, doing nothing, if another round is running, the last round's end still waits
    /// for a thread to move on, or a scan holds a snapshot older than the batch (see
    /// [`snapshot_with`](Handle::snapshot_with)). This handle helps the epoch collector along
    /// before and after it, without waiting for anyone.
    pub fn checkpoint_round(&mut self) -> Option<CheckpointReport> {
        let shared = &*self.shared;
        shared.checkpointer.run_round(&shared.core, &shared.rings, &self.epoch)
    }

    /// Starts the automatic round this handle's ring calls for, if any (see
    /// [`EngineConfig::checkpoint_fill`](crate::EngineConfig::checkpoint_fill)).
    fn maybe_checkpoint(&mut self) {
        let shared = &*self.shared;
        let safe = &shared.core.safe;
        if safe.on() {
            safe.relieve(shared.core.reclaim.held_bytes(), || safe.make(&shared.core, &shared.rings));
        }
        let Some((_, ring)) = &self.ring else { return };
        shared.checkpointer.bound_snapshots(&shared.core, &shared.rings, &self.epoch, ring, self.head);
        shared.checkpointer.maybe_round(&shared.core, &shared.rings, &self.epoch, ring, self.head);
    }

    /// Refuses, before anything changes, a transaction the engine cannot run: too many ops, an
    /// unknown structure, a key or value of the wrong kind for its structure, or a byte value
    /// longer than a blob can be. Returns whether an op is on a structure of byte values.
    ///
    /// It also starts each op's first search load (a hash map's bucket), so that the load
    /// overlaps the writing of blobs and of the descriptor.
    fn check(&self, tx: &Transaction) -> Result<bool, EngineError> {
        let core = self.core();
        let n = tx.ops().len();
        if n > MAX_OPS {
            return Err(EngineError::TooManyOps { ops: n, max: MAX_OPS });
        }
        let mut bytes = false;
        for (i, op) in tx.ops().iter().enumerate() {
            let structure = core.structures.get(op.structure)?;
            structure.check_key(op.structure, op.width, op.key)?;
            bytes |= structure.values == Values::Bytes;
            structure.prefetch(core.mem(), op.key);
            if op.kind.writes() != Some(true) {
                continue;
            }
            match (structure.values, tx.bytes_of(i)) {
                (Values::Words, None) => {}
                (Values::Bytes, Some(data)) => {
                    let limit = core.pool.max_blob_len();
                    if data.len() as u64 > limit {
                        return Err(EngineError::Alloc(AllocError::TooLarge { requested: data.len() as u64, limit }));
                    }
                }
                (expected, _) => return Err(EngineError::WrongValue { structure: op.structure.0, expected }),
            }
        }
        Ok(bytes)
    }

    fn execute_pinned(&mut self, tx: &Transaction, guard: &Guard) -> Result<Outcome, EngineError> {
        let ops = tx.ops();
        let n = ops.len();
        if n == 0 {
            return Ok(Outcome::Committed { results: Vec::new(), txid: None });
        }
        let bytes = self.check(tx)?;
        if n == 1 && ops[0].kind.is_read() {
            return self.read_one(&ops[0], guard);
        }
        // Writers, not single reads, run the removals and frees that came due: a read stays
        // free of shared queues.
        self.run_removals(n, guard);
        // Execution order: as added, or stably sorted by (structure, key); `added(pos)` maps an
        // executed position back to the op's place in the transaction.
        let mut order: Option<Vec<usize>> = tx.is_sorted().then(|| {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&i| (ops[i].structure, ops[i].key));
            order
        });
        let added = |pos: usize| order.as_ref().map_or(pos, |o| o[pos]);
        let wide = ops.iter().any(|op| op.key >> 64 != 0);
        let desc_len = desc_bytes(n, wide);
        if self.unfinished {
            self.release_ring();
        }
        // Byte values go to blobs, written now; whoever persists the descriptor flushes them with
        // it, under its fence.
        let mut blobs = std::mem::take(&mut self.blobs);
        blobs.clear();
        if bytes {
            for i in 0..n {
                let Some(data) = tx.bytes_of(i) else {
                    blobs.push((0, 0));
                    continue;
                };
                let hash = value_hash(data);
                match self.shared.core.pool.alloc_blob_unflushed(&mut self.cache, data, hash) {
                    Ok(off) => blobs.push((off.get(), hash)),
                    Err(e) => {
                        free_blobs(&self.shared.core.pool, &mut self.cache, &blobs);
                        self.blobs = blobs;
                        return Err(e.into());
                    }
                }
            }
        }
        // A handle without a ring, or whose ring has no room left, takes one that has room.
        let d = match self.place_descriptor(desc_len) {
            Ok(d) => d,
            Err(e) => {
                free_blobs(&self.shared.core.pool, &mut self.cache, &blobs);
                self.blobs = blobs;
                return Err(e);
            }
        };
        // The ops as stored, in execution order, into the vector the last transaction used.
        let mut stored = std::mem::take(&mut self.stored);
        stored.clear();
        stored.extend((0..n).map(|pos| {
            let i = added(pos);
            let op = &ops[i];
            // The ops with bytes got a blob above.
            let blob = bytes && blobs[i].0 != 0;
            let (value, hash) = if blob { (blobs[i].0, op_hash(blobs[i].1)) } else { (op.value, 0) };
            StoredOp { kind: op.kind as u8, structure: op.structure.0, key: op.key, value, blob, hash }
        }));
        // Each op's first node, now that the word `check` prefetched (a bucket) has had the
        // blobs and the placing of the descriptor to come in: the node's miss overlaps the
        // writing of the descriptor, and the searches after the first start on lines already
        // loaded or on their way, not one miss after another.
        let core = self.core();
        for op in ops {
            if let Ok(structure) = core.structures.get(op.structure) {
                structure.prefetch_first(core.mem(), op.key);
            }
        }
        descriptor::write_new(core.mem(), d, core.epoch as u32, tx.is_read_only(), wide, &stored);
        self.stored = stored;
        self.publish_head(d);
        self.unfinished = true;
        // Before `d` can finish: when its removals go stale.
        let expiry = self.shared.checkpointer.removal_expiry();
        let core = &self.shared.core;
        let cx = Reader { core, guard };
        Executor { cx, cache: &mut self.cache, help_stack: &mut self.help_stack, finger: None }.execute(d);
        let desc = Desc::new(core.mem(), d);
        // Run finished it: committed, or aborted with the reason whoever decided it recorded
        // (this thread or a helper).
        let outcome = match desc.abort_reason() {
            None => {
                debug_assert_eq!(desc.state().status, TxStatus::Committed);
                // The results and the removals are read from the descriptor before it is
                // persisted: they are fixed once it commits, and a flush may evict its lines
                // (clflushopt always, clwb on some CPUs). Nothing is returned before the fence.
                // Into the vector the last `execute_with` gave back, if any: a put allocates
                // nothing then.
                let mut results = std::mem::take(&mut self.results);
                results.clear();
                results.extend((0..n).map(|pos| core.before_state(d, pos)));
                // Into the transaction's order, in place: the result at `pos` belongs at
                // `order[pos]` (`order` is not needed after, so it is the scratch).
                if let Some(order) = order.as_mut() {
                    for pos in 0..n {
                        while order[pos] != pos {
                            let to = order[pos];
                            results.swap(pos, to);
                            order.swap(pos, to);
                        }
                    }
                }
                let mut removals = std::mem::take(&mut self.removals);
                cx.absent_left(d, true, &mut removals);
                #[cfg(test)]
                crate::protocol::hook::before_persist(d);
                let txid = core.persist(d);
                // After the txid: the removals' stamp bounds it.
                cx.stamp_removals(&removals, expiry, Some(txid), &mut self.deferred);
                self.removals = removals;
                if bytes {
                    let held = retire_replaced(core, tx, (txid, &results), guard);
                    // The ring the descriptor went to (placed above, held until the handle's
                    // next descriptor).
                    if let Some((_, ring)) = &self.ring {
                        use std::sync::atomic::Ordering::Relaxed;
                        // Relaxed: only the ring's writer writes it; an estimate for its readers.
                        ring.retired.store(ring.retired.load(Relaxed) + held, Relaxed);
                    }
                }
                Ok(Outcome::Committed { results, txid: Some(txid) })
            }
            Some(why) => {
                let mut removals = std::mem::take(&mut self.removals);
                cx.absent_left(d, false, &mut removals);
                cx.stamp_removals(&removals, expiry, None, &mut self.deferred);
                self.removals = removals;
                free_blobs(&core.pool, &mut self.cache, &blobs);
                match why {
                    Abort::NoMemory(requested) => {
                        Err(EngineError::Alloc(AllocError::PoolFull { requested, max: core.pool.max_len() }))
                    }
                    Abort::FailedOp(pos) => Ok(Outcome::Aborted { failed_op: Some(added(pos)) }),
                    Abort::Cycle => Ok(Outcome::Aborted { failed_op: None }),
                }
            }
        };
        self.blobs = blobs;
        self.unfinished = false;
        if !self.deferred.is_empty() {
            self.deferred_age += 1;
            if self.deferred.len() >= REMOVAL_BATCH || self.deferred_age >= REMOVAL_BATCH {
                self.defer_removals(guard);
            }
        }
        outcome
    }

    /// A single read, answered without a descriptor: linearised at the read of the node's info.
    fn read_one(&mut self, op: &Op, guard: &Guard) -> Result<Outcome, EngineError> {
        let core = self.core();
        let structure: &Structure = core.structures.get(op.structure)?;
        let state = Reader { core, guard }.read_state(structure, op.key);
        Ok(match (op.kind, state) {
            (OpKind::Find, None) => Outcome::Aborted { failed_op: Some(0) },
            _ => Outcome::Committed { results: vec![state], txid: None },
        })
    }

    /// Hands the removals this handle's transactions left (stamped, see
    /// [`Reader::stamp_removals`]) to the epoch, all in one deferred function, and flushes the
    /// epoch bag so that they come due once the threads pinned now have unpinned. Handing them
    /// over later than their transactions ended only makes the grace longer.
    fn defer_removals(&mut self, guard: &Guard) {
        self.deferred_age = 0;
        if !self.deferred.is_empty() {
            let batch = std::mem::replace(&mut self.deferred, Vec::with_capacity(REMOVAL_BATCH));
            self.shared.core.reclaim.defer_removals(guard, batch);
        }
    }

    /// Frees the nodes, and removes the keys, that the epoch made due: a few, and two per op of
    /// the transaction `ops` long about to run, so that the queues drain at least as fast as
    /// transactions fill them. (A removal left in the queue past the recycling of its op's slot
    /// is dropped as stale; the node then waits for the round that folds its op.)
    fn run_removals(&mut self, ops: usize, guard: &Guard) {
        let shared = &*self.shared;
        let core = &shared.core;
        core.reclaim.free_due(&core.pool, &mut self.cache, 16 + 2 * ops, core.safe.safe());
        // Read once, pinned (as the caller stays until the removals are done).
        let recycled = shared.checkpointer.recycled();
        let cx = Reader { core, guard };
        core.reclaim.run_removals(recycled, 8 + 2 * ops, |absent| core.structures.remove_if(&cx, absent));
    }
}

/// Frees the blobs of a transaction that did not commit: no reader ever resolves a value of an op
/// that did not commit, and nothing persists an uncommitted descriptor, so nothing can be reading
/// them.
fn free_blobs<M: PMem>(pool: &Pool<M>, cache: &mut AllocCache, blobs: &[(u64, u64)]) {
    for &(b, _) in blobs.iter().filter(|&&(b, _)| b != 0) {
        pool.free_blob(cache, POff::new(b));
    }
}

/// After a commit (persisted): the byte values its writing ops replaced are unreachable for any
/// reader that starts from now on; they are freed once the readers that may hold them (pinned
/// now) have unpinned. Each value is replaced by exactly one committed op, so each is freed once;
/// recovery never goes back to a value a persisted transaction replaced. Returns the bytes of the
/// pool they hold.
fn retire_replaced<M: PMem + 'static>(
    core: &Core<M>,
    tx: &Transaction,
    (txid, results): (u64, &[Option<u64>]),
    guard: &Guard,
) -> u64 {
    let replaced = tx.ops().iter().zip(results).filter_map(|(op, before)| {
        let blob = (*before)?;
        let bytes = core.structures.get(op.structure).is_ok_and(|s| s.values == Values::Bytes);
        (!op.kind.is_read() && bytes).then_some(blob)
    });
    core.reclaim.retire_blobs(&core.pool, guard, txid, replaced)
}

#[cfg(test)]
mod tests;

//! The protocol: lock-free transactions (LFTT) made durable as PETRA prescribes, in the
//! dissertation's words (chapter 5).
//!
//! A transaction's descriptor (see `descriptor`) lists its operations. [`Executor::run`]
//! executes them in order (LFTT's `ExecuteOps`); each takes its key's node by a CAS of the node's
//! info word ([`Executor::take`], Algorithm 5.3, `UpdateInfo`), after helping any unfinished
//! transaction that holds the node ([`Executor::help`]). The transaction then commits (or aborts
//! when a strict operation fails) and, if it wrote anything, persists **only its descriptor**
//! ([`Core::persist`], Algorithm 5.4, corrected): the txid is assigned once, the descriptor's
//! lines are flushed, and one fence makes it durable. The nodes are never flushed; checkpoint
//! rounds and recovery fold the descriptors into them.
//!
//! # Visibility (Algorithm 5.2, `IsKeyPresent`, with PETRA's rule): [`Core::resolve`]
//! The state of a key is read from its node's info word. A reference to operation `i` of
//! descriptor `D` means, to `D` itself, the state after op `i`. To any other reader it means: if
//! `D` is committed **and persisted** (a reader that meets a committed, unpersisted `D` persists
//! it first), the state `D` left, that of `D`'s last write of the key from op `i` on (the word
//! may have been read before a later op of `D` on the key replaced it); otherwise, or if no op
//! from `i` on writes the key, the state before op `i`. The state before op `i` is the state of
//! the info word op `i` replaced, which the op keeps in its volatile `prev` word (or "no node" if
//! op `i` created the node). Unlike LFTT's strict operations, total operations (Put, Remove, Get)
//! do not imply their before-state, so it is recorded and, once known, cached in the op.
//!
//! # Exactly-once execution
//! Several threads may execute the same operation (the owner and helpers). An executor reads the
//! op's `prev`, then the node's info, checks that the transaction is still active, and only then
//! retargets `prev` (CAS) and takes the node (CAS of info from the value `prev` names). Info
//! values never repeat on a node, and a node held by an active transaction is only taken over by
//! that transaction itself or after it finished, so an op that has executed keeps its `prev`.
//! `prev` starts UNSET, which no info word equals, and an executor that creates the op's node
//! first sets it to "no node": a stale executor's retarget from UNSET then fails.
//! Nodes are physically removed only through the epoch collector, after every thread that could
//! still be executing an operation of the removing transaction's predecessors has unpinned: a
//! late helper can therefore never re-create a node for an operation that already executed.
//!
//! # Txids
//! A txid is handed out by one counter ([`Core::take_txid`]) and assigned to a descriptor once,
//! by CAS from 0 ([`Core::assign_txid`]), so helpers never assign a second one. Read-only
//! transactions take one too (never persisted), so that a writer that later takes one of their
//! nodes gets a larger one; and so does a range scan, as its snapshot: it reads each node as of
//! it ([`Core::resolve_at`], see `scan`). Every txid handed out is below the meta region's
//! durable reservation, raised a block at a time.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::Guard;

use crate::descriptor::{
    Abort, CHECK, CUT, DESC_TAG, Desc, NO_NODE, PersistStatus, State, StoredOp, TXID, TxStatus, UNSET,
};
use crate::mem::{PMem, WORD};
use crate::meta::{Meta, TXID_BLOCK};
use crate::pool::{AllocCache, POff, Pool};
use crate::reclaim::{AbsentNode, Reclaim, Removal};
use crate::safe::{DurabilityPolicy, SafePoints};
use crate::structures::info::Info;
use crate::structures::node::{INFO, VALUE, has_record, store_key};
use crate::structures::registry::{Registry, Structure, on_set};
use crate::structures::{Ctx, LinkedSet};
use crate::sync::AtomicU64;
use crate::tx::{OpKind, StructId};

/// What every thread executing or reading transactions of one engine shares.
pub(crate) struct Core<M: PMem> {
    pub(crate) pool: Pool<M>,
    pub(crate) structures: Registry,
    /// The next txid to hand out.
    next_txid: AtomicU64,
    /// Txids below this are durably reserved (the meta region's reservation).
    txid_reserved: AtomicU64,
    pub(crate) meta: Meta,
    /// Serialises the raising of the txid reservation (its one writer at a time).
    reserving: parking_lot::Mutex<()>,
    /// The committed recovery epoch: descriptors carry it, FINAL states and records too.
    pub(crate) epoch: u64,
    pub(crate) reclaim: Arc<Reclaim>,
    /// The durability policy, and the safe points that keep it on a page-cache memory.
    pub(crate) safe: Arc<SafePoints>,
}

impl<M: PMem> std::fmt::Debug for Core<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("epoch", &self.epoch).field("next_txid", &self.next_txid).finish()
    }
}

/// What executing one op came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The op has taken effect (by this thread or another).
    Done,
    /// A strict op's precondition does not hold: the transaction must abort.
    Fail,
    /// The transaction is no longer active: stop executing it.
    Stop,
    /// The pool is full (this many bytes were refused): the transaction must abort.
    NoMemory(u64),
}

impl<M: PMem + 'static> Core<M> {
    /// The core of an engine over `pool` in `epoch`, with `structures`, handing out txids from
    /// `next_txid` on.
    pub(crate) fn new(
        pool: Pool<M>,
        meta: Meta,
        (epoch, next_txid, txid_reserved): (u64, u64, u64),
        structures: Registry,
        policy: DurabilityPolicy,
    ) -> Core<M> {
        let safe = Arc::new(SafePoints::new(policy, pool.durability(), pool.max_len()));
        Core {
            safe,
            pool,
            structures,
            next_txid: AtomicU64::new(next_txid.max(1)),
            txid_reserved: AtomicU64::new(txid_reserved),
            meta,
            reserving: parking_lot::Mutex::new(()),
            epoch,
            reclaim: Arc::default(),
        }
    }

    #[inline]
    pub(crate) fn mem(&self) -> &M {
        self.pool.mem()
    }

    /// The txid reservation: every txid handed out and used is below it, durably (raised
    /// before a txid it covers is used, see [`take_txid`](Core::take_txid)).
    pub(crate) fn txid_reserved(&self) -> u64 {
        // Acquire: the meta region's reservation was stored before it was published.
        self.txid_reserved.load(Ordering::Acquire)
    }

    /// The next txid to be handed out: every txid handed out so far is below it.
    pub(crate) fn next_txid(&self) -> u64 {
        // Acquire: txids below it were handed out before what the caller reads next.
        self.next_txid.load(Ordering::Acquire)
    }

    /// The state that info word `cur` stands for, seen from transaction `me` (or from outside
    /// any transaction): `Some(value)` if present. Helps persist committed, unpersisted
    /// descriptors it meets. Algorithm 5.2 with PETRA's rule (see the [module docs](self)).
    pub(crate) fn resolve(&self, mut cur: Info, me: Option<u64>) -> Option<u64> {
        let mem = self.mem();
        loop {
            if cur.is_final() {
                return final_value(mem, cur);
            }
            let (d2, j) = (cur.desc(), cur.opid());
            let desc2 = Desc::new(mem, d2);
            let s = desc2.state();
            let op2 = desc2.op(j);
            // The op whose write the word stands for, if d2's writes count for `me`. Its own
            // transaction sees op j's own write. Any other reader sees a committed d2's last
            // write of the key: the word may have been read while d2 was still active, before a
            // later op of d2 on the same key replaced it, and op j's write alone is a state
            // inside d2 that no serial order shows.
            let writer = match s.status {
                TxStatus::Committed => {
                    if s.pstatus != PersistStatus::Persisted {
                        self.persist(d2);
                    }
                    if me == Some(d2) { Some(op2) } else { desc2.last_write_of_key(j, op2) }
                }
                TxStatus::Aborted => None,
                TxStatus::Active => (me == Some(d2)).then_some(op2),
            };
            if let Some(w) = writer
                && let Some(present) = OpKind::from_code(w.kind).writes()
            {
                return present.then_some(w.value);
            }
            // The state before op j of d2.
            match before_of(mem, &desc2, j) {
                Before::Known(state) => return state,
                Before::Of(prev) => {
                    debug_assert_took_from(mem, d2, prev);
                    cur = prev
                }
            }
        }
    }

    /// The state that info word `cur` stands for as of txid `s`, which the caller took while
    /// pinned and holds as a snapshot: the state left by every committed transaction with a txid
    /// below `s`, and by none above it (see `scan` for why the words met say that much). Helps
    /// persist committed, unpersisted descriptors it meets, as [`resolve`](Core::resolve) does.
    ///
    /// A transaction is in the snapshot if it committed with a txid below `s`: then the word
    /// stands for its last write of the key from the op on, or for the state before the op if
    /// none writes, which only writers below it (of smaller txids) decided, so that the op's
    /// cached before-state holds. Any other transaction (active, aborted, or committed above `s`)
    /// is looked past: the state before its op as of `s`, which its cache may not say (the cache
    /// holds the state the op found, perhaps left by a writer above `s`), so the op's `prev`
    /// is followed instead, down to a writer in the snapshot, a FINAL word, a node's creation or a
    /// cut.
    pub(crate) fn resolve_at(&self, mut cur: Info, s: u64) -> Option<u64> {
        let mem = self.mem();
        loop {
            if cur.is_final() {
                return final_value(mem, cur);
            }
            let (d, i) = (cur.desc(), cur.opid());
            let desc = Desc::new(mem, d);
            // A committed transaction's txid: `persist` assigns it if it has none yet (and
            // persists it, as any reader of it would), else returns it.
            let seen = desc.state().status == TxStatus::Committed && self.persist(d) < s;
            let before = if seen {
                let op = desc.op(i);
                if let Some(w) = desc.last_write_of_key(i, op)
                    && let Some(present) = OpKind::from_code(w.kind).writes()
                {
                    return present.then_some(w.value);
                }
                before_of(mem, &desc, i)
            } else {
                before_at(mem, &desc, i)
            };
            match before {
                Before::Known(state) => return state,
                Before::Of(prev) => {
                    debug_assert_took_from(mem, d, prev);
                    cur = prev
                }
            }
        }
    }

    /// The before-state of op `i` of `d`, which has executed: its result.
    pub(crate) fn before_state(&self, d: u64, i: usize) -> Option<u64> {
        match before_of(self.mem(), &Desc::new(self.mem(), d), i) {
            Before::Known(state) => state,
            Before::Of(prev) => self.resolve(prev, Some(d)),
        }
    }

    /// The txid of `d`, assigned now if it has none (once: a helper that loses the race uses the
    /// winner's).
    pub(crate) fn assign_txid(&self, d: u64) -> u64 {
        let mem = self.mem();
        // Acquire: a txid seen is one another thread assigned and published.
        let cur = mem.load(d + TXID, Ordering::Acquire);
        if cur != 0 {
            return cur;
        }
        let t = self.take_txid();
        // AcqRel: the txid is assigned once; a helper that loses uses the winner's.
        match mem.compare_exchange(d + TXID, 0, t, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => t,
            Err(winner) => winner,
        }
    }

    /// Hands out the next txid (durably reserved first if the reservation is reached): for a
    /// descriptor ([`assign_txid`](Core::assign_txid)) or a scan's snapshot (see `scan`).
    pub(crate) fn take_txid(&self) -> u64 {
        // AcqRel on the counter: txids are handed out in a total order that matches the order of
        // the transactions that depend on each other (see `persist`); and a thread that takes a
        // txid sees everything done before a smaller one was taken (a scan relies on it).
        let t = self.next_txid.fetch_add(1, Ordering::AcqRel);
        if t >= self.txid_reserved.load(Ordering::Acquire) {
            self.reserve_txids(t);
        }
        t
    }

    /// Test: hands out the txid at the reservation without raising it, as a thread between
    /// the two steps of [`take_txid`](Core::take_txid) leaves the counters.
    #[cfg(test)]
    pub(crate) fn hand_out_the_reserved_txid(&self) {
        let reserved = self.txid_reserved();
        // Relaxed: a test, on a quiet engine.
        self.next_txid.store(reserved + 1, Ordering::Relaxed);
    }

    /// Durably raises the txid reservation above `t` before `t` is used, so that no txid handed
    /// out (read-only ones are never persisted) is handed out again after a restart. Once per
    /// [`TXID_BLOCK`] txids.
    #[cold]
    fn reserve_txids(&self, t: u64) {
        let _one = self.reserving.lock();
        // Acquire: a reservation another thread made while this one waited covers `t`.
        if t < self.txid_reserved.load(Ordering::Acquire) {
            return;
        }
        let reserved = t + TXID_BLOCK;
        self.meta.reserve_txids(self.mem(), reserved);
        // Release: the reservation is durable before a thread that reads it uses a txid under it.
        self.txid_reserved.store(reserved, Ordering::Release);
    }

    /// Hands `node`, which this thread just unlinked (pinned in `guard`), to the epoch collector
    /// to be freed; or, if it still holds a record, to the checkpoint rounds. Such a node was
    /// removed by a committed Delete or Remove (see `structures::remove_if`), or while a round's
    /// record for a state it was about to replace was in it; a round clears the record. A block
    /// must not be used again while its record can still reach the media valid (a freed block
    /// never holds a valid present record that KDMap does not cover, see `checkpoint`), so a
    /// round frees it after the fence that follows the clear ([`Reclaim::hold_recorded`]).
    ///
    /// A record seen cleared here was cleared by a round while pinned, and the block is freed
    /// only after that round unpinned, perhaps before its fence: what the block holds next (a
    /// new node's record area, zeroed by `Pool::alloc`, or the cleared one) is what the round's
    /// flush writes back before its checkpoint txid passes the op, which KDMap covers until then.
    pub(crate) fn retire_node(&self, guard: &Guard, node: u64) {
        // Relaxed: the record's stores came before the round's CAS of the info word, which the
        // removal's mark (and the unlink after it) acquired.
        if has_record(&self.pool, node) {
            self.reclaim.hold_recorded(node);
        } else {
            self.reclaim.retire_node(guard, node);
        }
    }

    /// Persists a committed descriptor (Algorithm 5.4): assign its txid once, flush its
    /// persisted lines, one fence, then mark it persisted. A writing transaction commits straight
    /// into InProgress (the dissertation's claim, Maybe to InProgress, folded into the commit), so
    /// every thread that finds it so persists it; all but the first do redundant but harmless
    /// flushes and fence. Returns its txid.
    pub(crate) fn persist(&self, d: u64) -> u64 {
        let desc = Desc::new(self.mem(), d);
        let in_progress = State { status: TxStatus::Committed, pstatus: PersistStatus::InProgress };
        if desc.state() != in_progress {
            return desc.txid();
        }
        let txid = self.assign_txid(d);
        let mem = self.mem();
        // Relaxed: every thread computes the same checksum; the fence below orders it for the
        // media and the state CAS for other threads.
        mem.store(d + CHECK, desc.checksum(txid), Ordering::Relaxed);
        if desc.has_blobs() {
            // This thread's fence covers only the lines this thread flushed: every thread that
            // persists the descriptor flushes its blobs too (written before it was published).
            // Blobs first: their offsets are read from the descriptor's lines before a flush
            // may evict those.
            for i in 0..desc.nops() {
                let op = desc.op(i);
                if op.blob {
                    let len = self.pool.blob_len(POff::new(op.value));
                    mem.flush_range(op.value, WORD + len);
                }
            }
        }
        mem.flush_range(d, desc.persisted_bytes());
        // Fence: the descriptor, the redo log of the transaction, and its blobs are durable
        // before the transaction becomes visible (pstatus Persisted).
        mem.fence();
        let persisted = State { status: TxStatus::Committed, pstatus: PersistStatus::Persisted };
        let _ = desc.cas_state(in_progress, persisted);
        txid
    }
}

/// A thread reading the engine's structures, pinned in the epoch: the context every structure's
/// code runs in.
pub(crate) struct Reader<'a, M: PMem> {
    pub(crate) core: &'a Core<M>,
    pub(crate) guard: &'a Guard,
}

impl<M: PMem> Clone for Reader<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: PMem> Copy for Reader<'_, M> {}

impl<M: PMem + 'static> Ctx<M> for Reader<'_, M> {
    #[inline]
    fn mem(&self) -> &M {
        self.core.mem()
    }

    fn has_record(&self, node: u64) -> bool {
        has_record(&self.core.pool, node)
    }

    fn retire(&self, node: u64) {
        self.core.retire_node(self.guard, node);
    }

    fn resolve(&self, info: Info) -> Option<u64> {
        self.core.resolve(info, None)
    }

    /// Through a cache of its own, given back at once: the copies it serves are rare (see
    /// `mdlist`), and a reader holds no cache.
    fn alloc_node(&self, bytes: u64) -> Option<u64> {
        let pool = &self.core.pool;
        let mut cache = AllocCache::new();
        let node = pool.alloc(&mut cache, bytes).ok().map(POff::get);
        pool.release_cache(&mut cache);
        node
    }

    fn free_unpublished(&self, node: u64) {
        let pool = &self.core.pool;
        let mut cache = AllocCache::new();
        pool.free(&mut cache, POff::new(node));
        pool.release_cache(&mut cache);
    }
}

impl<M: PMem + 'static> Reader<'_, M> {
    /// The state of `key` in `structure` as a reader outside any transaction sees it: a single
    /// read, linearised at its read of the node's info word.
    pub(crate) fn read_state(&self, structure: &Structure, key: u128) -> Option<u64> {
        match structure.find_node(self, key) {
            None => None,
            Some(node) => self.node_state(node),
        }
    }

    /// The state of a node as a reader outside any transaction sees it.
    pub(crate) fn node_state(&self, node: u64) -> Option<u64> {
        // Acquire: see the descriptor the info word names.
        let cur = Info(self.mem().load(node + INFO, Ordering::Acquire));
        if cur.is_marked() {
            return None;
        }
        self.core.resolve(cur, None)
    }

    /// After the transaction `d` finished: the nodes it left absent (deleted or removed keys,
    /// nodes made for reads or removals of absent keys, nodes made by an aborted transaction),
    /// into `out`, each with the op word that left it so, for [`stamp_removals`]. Read before
    /// a committed `d` is persisted: a flush may evict its lines.
    ///
    /// [`stamp_removals`]: Reader::stamp_removals
    pub(crate) fn absent_left(&self, d: u64, committed: bool, out: &mut Vec<AbsentNode>) {
        let mem = self.mem();
        let desc = Desc::new(mem, d);
        out.clear();
        for i in 0..desc.nops() {
            let op = desc.op(i);
            let absent_before = read_cache(mem, &desc, i) == Some(None);
            let absent_after = match OpKind::from_code(op.kind).writes() {
                _ if !committed => absent_before,
                Some(present) => !present,
                None => absent_before,
            };
            let structure = StructId(op.structure);
            if !absent_after || !self.core.structures.get(structure).is_ok_and(|s| s.removes_nodes::<M>()) {
                continue;
            }
            // The node is the op's cached one: the node the op took or made. None is cached for
            // an op whose before-state an earlier op of the transaction left, nor yet by a helper
            // whose CAS took the node but who has not written the cache: found by key then.
            let node = cached_node(mem, &desc, i);
            // A committed Delete or Remove removes its node, with a record or not, if its op
            // cached it (see `remove_if`). Any other op leaves a node with a record until a round
            // clears the record and removes the node itself: no removal to run then. Relaxed: a
            // record written before this transaction took the node is seen (its CAS acquired the
            // round's), and none is written while the node is absent.
            let deleted = committed && OpKind::from_code(op.kind).writes() == Some(false);
            if deleted || node.is_none_or(|n| !has_record(&self.core.pool, n)) {
                out.push(AbsentNode { structure, key: op.key, info: Info::op(d, i), node, deleted });
            }
        }
    }

    /// Stamps the removals of `items` ([`absent_left`](Reader::absent_left) of a finished
    /// transaction, committed ones persisted: their txid assigned) into `out`, for the epoch to
    /// queue once every thread that could still be executing on them has unpinned, stale from
    /// `expiry` recycled rounds on. A removal happens only if the node's info word still names
    /// the op by then, and only once no snapshot below its stamp is held: a txid above the
    /// transaction's and above that of every writer it took a node from (see `reclaim`; and
    /// `scan`, for why a snapshot's pin then keeps the removal waiting until the snapshot is
    /// held). For a committed transaction, `txid`, its own: the writers it took nodes from are
    /// below it, so the stamp is `txid + 1`. For an aborted one (`None`), the txid counter read
    /// now, after those writers had theirs.
    pub(crate) fn stamp_removals(&self, items: &[AbsentNode], expiry: u64, txid: Option<u64>, out: &mut Vec<Removal>) {
        if items.is_empty() {
            return;
        }
        let stamp = txid.map_or_else(|| self.core.next_txid(), |t| t + 1);
        out.extend(items.iter().map(|&absent| Removal { absent, expiry, stamp }));
    }
}

/// A thread executing transactions: a [`Reader`], its allocation cache, and its help stack.
pub(crate) struct Executor<'a, M: PMem> {
    pub(crate) cx: Reader<'a, M>,
    pub(crate) cache: &'a mut AllocCache,
    /// Descriptors this thread is executing, innermost last: the owner's, then those it helps.
    pub(crate) help_stack: &'a mut Vec<u64>,
    /// The node of the last op this executor executed: where the next op's search may start
    /// (see [`LinkedSet::search_after`]).
    pub(crate) finger: Option<Finger>,
}

/// A node an executor found linked (or linked itself) while pinned, with its structure and key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finger {
    structure: u8,
    key: u128,
    node: u64,
}

impl<M: PMem + 'static> Executor<'_, M> {
    fn mem(&self) -> &M {
        self.cx.core.mem()
    }

    /// Runs its owner's transaction `d` from its first op to its end (commit or abort), with `d`
    /// on the help stack while it runs.
    pub(crate) fn execute(&mut self, d: u64) {
        self.framed(d, |x| x.run(d, 0));
    }

    /// Calls `f` with `d` pushed on the help stack, and pops it when `f` returns or unwinds. A
    /// panic that a caller catches (`catch_unwind` around an execute) thus leaves no entry
    /// behind, which would make this thread take a later transaction written at the same offset
    /// for one it is helping, and abort it as a helping cycle.
    fn framed(&mut self, d: u64, f: impl FnOnce(&mut Self)) {
        /// Pops its descriptor off the help stack when dropped.
        struct Frame<'e, 'a, M: PMem>(&'e mut Executor<'a, M>, u64);
        impl<M: PMem> Drop for Frame<'_, '_, M> {
            fn drop(&mut self) {
                let top = self.0.help_stack.pop();
                debug_assert_eq!(top, Some(self.1), "frames are popped innermost first");
            }
        }
        self.help_stack.push(d);
        let frame = Frame(self, d);
        f(&mut *frame.0);
    }

    /// Runs ops `from..` of `d` until it is no longer active, then finishes it (commit or abort):
    /// LFTT's `ExecuteOps`. An abort records why in `d`'s state word, where its owner reads it
    /// whoever decided it ([`Desc::abort_reason`]).
    fn run(&mut self, d: u64, from: usize) {
        let n = Desc::new(self.mem(), d).nops();
        for i in from..n {
            if Desc::new(self.mem(), d).state().status != TxStatus::Active {
                break;
            }
            match self.execute_op(d, i) {
                Step::Done => {
                    #[cfg(test)]
                    hook::after_op(d, i);
                }
                Step::Fail => {
                    Desc::new(self.mem(), d).abort(Abort::FailedOp(i));
                    break;
                }
                Step::NoMemory(bytes) => {
                    Desc::new(self.mem(), d).abort(Abort::NoMemory(bytes));
                    break;
                }
                Step::Stop => break,
            }
        }
        let desc = Desc::new(self.mem(), d);
        if desc.state().status == TxStatus::Active {
            if desc.read_only() {
                // A read-only transaction persists nothing, but takes its place in the serial
                // order before it commits, so that a writer that later takes one of its nodes
                // (after it finished) gets a larger txid.
                self.cx.core.assign_txid(d);
                let done = State { status: TxStatus::Committed, pstatus: PersistStatus::Persisted };
                let _ = desc.cas_state(State::ACTIVE, done);
            } else {
                // Straight to InProgress: whoever commits it persists it next (the owner, or a
                // helper after `run`), so a separate claim would be one more locked instruction.
                let done = State { status: TxStatus::Committed, pstatus: PersistStatus::InProgress };
                let _ = desc.cas_state(State::ACTIVE, done);
            }
        }
    }

    /// Helps the active transaction `d2`, met at its op `opid`: executes its remaining ops. A
    /// transaction already on this thread's help stack means a helping cycle: it is aborted.
    fn help(&mut self, d2: u64, opid: usize) {
        if self.help_stack.contains(&d2) {
            Desc::new(self.mem(), d2).abort(Abort::Cycle);
            return;
        }
        self.framed(d2, |x| x.run(d2, opid + 1));
        let s = Desc::new(self.mem(), d2).state();
        if s.status == TxStatus::Committed && s.pstatus != PersistStatus::Persisted {
            self.cx.core.persist(d2);
        }
    }

    /// Executes op `i` of `d` on its structure.
    fn execute_op(&mut self, d: u64, i: usize) -> Step {
        let op = Desc::new(self.mem(), d).op(i);
        let core = self.cx.core;
        let structure = core.structures.get(StructId(op.structure)).expect("checked at execute");
        on_set!(&structure.set, set => self.take(set, d, i, op))
    }

    /// Executes op `i` of descriptor `d` on `set` (Algorithm 5.3, `UpdateInfo`, with the node's
    /// creation for a key that has none): helps whoever holds the key's node, checks the op's
    /// precondition, and takes the node by a CAS of its info word. See the [module docs](self)
    /// for why each op is executed exactly once.
    fn take<S: LinkedSet<M>>(&mut self, set: &S, d: u64, i: usize, op: StoredOp) -> Step {
        let kind = OpKind::from_code(op.kind);
        let me = Info::op(d, i);
        let prev_off = Desc::new(self.mem(), d).prev_off(i);
        // The node this op found or linked: where this executor's next search may start.
        let finger = |node| Some(Finger { structure: op.structure, key: op.key, node });
        loop {
            let active = |x: &Self| Desc::new(x.mem(), d).state().status == TxStatus::Active;
            if !active(self) {
                return Step::Stop;
            }
            // Acquire, and read before the node: see the exactly-once argument.
            let prev = self.mem().load(prev_off, Ordering::Acquire);
            let (pos, found) = match self.finger {
                Some(f) if f.structure == op.structure && f.key < op.key => set.search_after(&self.cx, op.key, f.node),
                _ => set.search(&self.cx, op.key),
            };
            match found {
                Some(node) => {
                    self.finger = finger(node);
                    // Acquire: see the descriptor the info word names.
                    let cur = Info(self.mem().load(node + INFO, Ordering::Acquire));
                    if cur.is_marked() {
                        set.help_remove_at(&self.cx, &pos, node);
                        continue;
                    }
                    if !cur.is_final() && cur.desc() == d {
                        if cur.opid() >= i {
                            return Step::Done; // executed already (this op, or a later one of ours)
                        }
                    } else if !cur.is_final() {
                        let d2 = cur.desc();
                        if Desc::new(self.mem(), d2).state().status == TxStatus::Active {
                            self.help(d2, cur.opid());
                            continue;
                        }
                    }
                    let before = self.cx.core.resolve(cur, Some(d));
                    if !kind.allows(before.is_some()) {
                        return Step::Fail;
                    }
                    if prev != cur.0 {
                        if !active(self) {
                            return Step::Stop;
                        }
                        // AcqRel: the retargeted prev is seen by any executor that then sees the
                        // node taken.
                        if self
                            .mem()
                            .compare_exchange(prev_off, prev, cur.0, Ordering::AcqRel, Ordering::Acquire)
                            .is_err()
                        {
                            continue;
                        }
                    }
                    // AcqRel: publish the descriptor (and prev) with the node; see the old owner's.
                    if self
                        .mem()
                        .compare_exchange(node + INFO, cur.0, me.0, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        // A before-state that comes from an earlier op of this same transaction
                        // holds only if the transaction commits; it is not cached.
                        if cur.is_final() || cur.desc() != d {
                            write_cache(self.mem(), d, i, before, node);
                        }
                        if kind.writes() == Some(false) {
                            // Whether the node holds a record decides how it is removed, after
                            // the commit (see `structures::remove_if`): its line is on the way.
                            self.cx.core.pool.prefetch_record(node);
                        }
                        return Step::Done;
                    }
                }
                None => {
                    if !kind.allows(false) {
                        return Step::Fail;
                    }
                    if prev != NO_NODE {
                        if !active(self) {
                            return Step::Stop;
                        }
                        // AcqRel: as for retargeting `prev` above.
                        if self
                            .mem()
                            .compare_exchange(prev_off, prev, NO_NODE, Ordering::AcqRel, Ordering::Acquire)
                            .is_err()
                        {
                            continue;
                        }
                    }
                    let bytes = set.node_bytes(op.key, &pos);
                    let pool = &self.cx.core.pool;
                    let node = match pool.alloc(self.cache, bytes) {
                        Ok(n) => n.get(),
                        Err(_) => return Step::NoMemory(bytes),
                    };
                    let mem = pool.mem();
                    store_key(mem, node, op.key, set.wide());
                    // Release: a checkpoint round that reaches the unlinked block through a stale
                    // op cache and reads this word sees the key and the op's `prev` set before it.
                    mem.store(node + INFO, me.0, Ordering::Release);
                    mem.store(node + VALUE, if kind.writes() == Some(true) { op.value } else { 0 }, Ordering::Relaxed);
                    set.init_links(mem, node, op.key);
                    let linked = set.link(&self.cx, &pos, node);
                    if linked == Ok(true) {
                        write_cache(mem, d, i, None, node);
                        self.finger = finger(node);
                        return Step::Done;
                    }
                    // The block was never reachable, but an earlier node in it may be named by a
                    // stale op cache (a checkpoint round's hint): marked, it reads as a node that
                    // left, not as one naming this op, whose slot may be recycled long before the
                    // block is reused. Relaxed: the slot is recycled only after this thread unpins.
                    mem.store(node + INFO, me.marked().0, Ordering::Relaxed);
                    pool.free(self.cache, POff::new(node));
                    // The slot stays frozen until a block is free (see `LinkedSet::link`):
                    // retrying would take this block again and spin, pinned.
                    if linked.is_err() {
                        return Step::NoMemory(bytes);
                    }
                }
            }
        }
    }
}

/// Checks, in debug builds, that an op of `d` took its node from `prev`, an op of a descriptor
/// that is still there: one of `d` itself, or of a finished transaction (a node is taken from
/// another transaction only once it finished), whose descriptor has that op. A reference into a
/// recycled slot would usually fail it.
#[inline]
pub(crate) fn debug_assert_took_from<M: PMem>(mem: &M, d: u64, prev: Info) {
    if cfg!(debug_assertions) && !prev.is_final() && prev.desc() != d {
        let other = Desc::new(mem, prev.desc());
        let header = other.header();
        assert!(
            header >> 48 == DESC_TAG && prev.opid() < other.nops() && other.state().status != TxStatus::Active,
            "an op of {d:#x} names {prev:?}, which is no finished descriptor's op (header {header:#x})"
        );
    }
}

/// The state a FINAL word stands for: absent, or present with its node's value.
fn final_value<M: PMem>(mem: &M, w: Info) -> Option<u64> {
    // Acquire: the value was written before the FINAL word was published; and a value a
    // checkpoint round wrote since (see `before_of`) comes with the caches it filled first.
    w.final_present().then(|| mem.load(w.final_node() + VALUE, Ordering::Acquire))
}

/// The state before an executed op, as far as the op itself tells it.
enum Before {
    /// Known: absent, or present with this value.
    Known(Option<u64>),
    /// The state the op's `prev`, a reference to another op, stands for.
    Of(Info),
}

/// The state before op `i` of `desc`, which has executed: its cache, or what its `prev` names.
///
/// A `prev` that is a FINAL word names a node's value, which a checkpoint round may rewrite (see
/// `checkpoint`); a round fills the cache of every op whose `prev` leads to that value before it
/// rewrites it, so a value read here that the round wrote comes with a cache that says what the
/// value was: the cache is read again after the value, and wins.
fn before_of<M: PMem>(mem: &M, desc: &Desc<'_, M>, i: usize) -> Before {
    loop {
        if let Some(cached) = read_cache(mem, desc, i) {
            return Before::Known(cached);
        }
        // Acquire: pairs with the executor's AcqRel retarget of `prev`, and with a round's
        // Release store of CUT (after it filled the cache).
        let prev = mem.load(desc.prev_off(i), Ordering::Acquire);
        debug_assert_ne!(prev, UNSET, "an op is named by a node only after it set prev");
        match prev {
            NO_NODE => return Before::Known(None),
            // The cache is filled: read it again.
            CUT => continue,
            p if Info(p).is_final() => {
                let value = final_value(mem, Info(p));
                return Before::Known(read_cache(mem, desc, i).unwrap_or(value));
            }
            p => return Before::Of(Info(p)),
        }
    }
}

/// The state before op `i` of `desc`, which has executed, for a reader that looks past `desc`
/// (see [`Core::resolve_at`]): what `prev` names, not the cache, which may hold a state that a
/// writer the reader looks past too left. A cut `prev` leaves only the cache, which a checkpoint
/// round filled from a descriptor of its batch or a FINAL word before it cut; a FINAL word's
/// state is the cache's if there is one (the cache says what the value was, as in
/// [`before_of`]).
fn before_at<M: PMem>(mem: &M, desc: &Desc<'_, M>, i: usize) -> Before {
    loop {
        // Acquire: as in `before_of`.
        let prev = mem.load(desc.prev_off(i), Ordering::Acquire);
        debug_assert_ne!(prev, UNSET, "an op is named by a node only after it set prev");
        match prev {
            NO_NODE => return Before::Known(None),
            CUT => {
                if let Some(cached) = read_cache(mem, desc, i) {
                    return Before::Known(cached);
                }
            }
            p if Info(p).is_final() => {
                let value = final_value(mem, Info(p));
                return Before::Known(read_cache(mem, desc, i).unwrap_or(value));
            }
            p => return Before::Of(Info(p)),
        }
    }
}

/// Op `i`'s cached before-state, if recorded.
pub(crate) fn read_cache<M: PMem>(mem: &M, desc: &Desc<'_, M>, i: usize) -> Option<Option<u64>> {
    let at = desc.cache_off(i);
    // Acquire: pairs with the Release in `write_cache`, so the value word is seen.
    let flags = mem.load(at, Ordering::Acquire);
    if flags & 1 == 0 {
        return None;
    }
    Some((flags & 2 != 0).then(|| mem.load(at + 8, Ordering::Relaxed)))
}

/// The node op `i` took or created, if its before-state was cached (see [`write_cache`]).
pub(crate) fn cached_node<M: PMem>(mem: &M, desc: &Desc<'_, M>, i: usize) -> Option<u64> {
    // Relaxed: a hint, checked against the node's info word before it is used.
    let flags = mem.load(desc.cache_off(i), Ordering::Relaxed);
    (flags & 1 != 0).then_some(flags & !0xF)
}

/// Records op `i`'s before-state. Only the executor whose CAS took the node calls this, and a
/// checkpoint round for an op on a node's chain; every value they could write is the same (the
/// before-state is fixed once the op executed). Never called for a before-state that an earlier
/// op of the same transaction produced: that one holds only if the transaction commits, and
/// readers of an aborted one must look past it.
///
/// The flags word also names `node`, the node the op took or created (nodes are 16-byte
/// aligned): a checkpoint round finds the node there instead of searching for it.
pub(crate) fn write_cache<M: PMem>(mem: &M, d: u64, i: usize, before: Option<u64>, node: u64) {
    debug_assert!(node.is_multiple_of(16) && node != 0);
    let desc = Desc::new(mem, d);
    let at = desc.cache_off(i);
    mem.store(at + 8, before.unwrap_or(0), Ordering::Relaxed);
    // Release: publish the value word with the flags.
    mem.store(at, node | 1 | (before.is_some() as u64) << 1, Ordering::Release);
}

/// A unit test's hooks, on the executing thread. Into [`Executor::run`]: called after each op that
/// took effect with the descriptor and the op's position, it lets a test stop a transaction
/// there (and, on the same thread, run another handle's transaction that helps it) or panic in
/// the middle of one. The hook is taken out while it runs, so the ops it causes do not call it;
/// a hook it sets meanwhile is called for them instead, and stays in its place if still set when
/// it returns. Likewise before a commit is persisted (`Handle::execute`), and where a scan
/// re-pins (`scan`).
#[cfg(test)]
pub(crate) mod hook {
    use std::cell::RefCell;

    type AfterOp = Box<dyn FnMut(u64, usize)>;
    type BeforePersist = Box<dyn FnMut(u64)>;
    type ScanPaused = Box<dyn FnMut() -> bool>;

    thread_local! {
        static AFTER_OP: RefCell<Option<AfterOp>> = const { RefCell::new(None) };
        static BEFORE_PERSIST: RefCell<Option<BeforePersist>> = const { RefCell::new(None) };
        static SCAN_PAUSED: RefCell<Option<ScanPaused>> = const { RefCell::new(None) };
    }

    /// Calls `f` with the descriptor of each transaction this thread's handles commit from now
    /// on, just before it is persisted (its removals read, its txid not yet assigned), until
    /// [`clear`].
    pub(crate) fn set_before_persist(f: impl FnMut(u64) + 'static) {
        BEFORE_PERSIST.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    /// Calls `f` each time a scan on this thread re-pins, until [`clear`]: while it returns
    /// true, the scan re-pins again and calls it again; then the walk goes on.
    pub(crate) fn set_scan_paused(f: impl FnMut() -> bool + 'static) {
        SCAN_PAUSED.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    pub(crate) fn before_persist(d: u64) {
        let Some(mut f) = BEFORE_PERSIST.with(|h| h.borrow_mut().take()) else { return };
        f(d);
        BEFORE_PERSIST.with(|h| {
            h.borrow_mut().get_or_insert(f);
        });
    }

    pub(crate) fn scan_paused() -> bool {
        let Some(mut f) = SCAN_PAUSED.with(|h| h.borrow_mut().take()) else { return false };
        let again = f();
        SCAN_PAUSED.with(|h| {
            h.borrow_mut().get_or_insert(f);
        });
        again
    }

    /// Calls `f` after each op this thread executes from now on, until [`clear`].
    pub(crate) fn set_after_op(f: impl FnMut(u64, usize) + 'static) {
        AFTER_OP.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    /// Removes this thread's hooks.
    pub(crate) fn clear() {
        AFTER_OP.with(|h| h.borrow_mut().take());
        BEFORE_PERSIST.with(|h| h.borrow_mut().take());
        SCAN_PAUSED.with(|h| h.borrow_mut().take());
    }

    pub(super) fn after_op(d: u64, i: usize) {
        let Some(mut f) = AFTER_OP.with(|h| h.borrow_mut().take()) else { return };
        f(d, i);
        AFTER_OP.with(|h| {
            let mut h = h.borrow_mut();
            if h.is_none() {
                *h = Some(f);
            }
        });
    }
}

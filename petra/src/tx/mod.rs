//! Transactions: the LFTT engine made durable as PETRA prescribes.
//!
//! A transaction is a static list of operations ([`Transaction`]). [`Handle::execute`] writes its
//! descriptor into the calling thread's descriptor ring and runs the operations in order; each
//! takes its key's node by a CAS of the node's [info word](info), after helping any unfinished
//! transaction that holds the node. The transaction then commits (or aborts when a strict
//! operation fails) and, if it wrote anything, persists **only its descriptor**: the txid is
//! assigned once, the descriptor's lines are flushed, and one fence makes it durable
//! ([`persist`](Handle::persist), Algorithm 5.4 of the dissertation, corrected). The nodes are
//! never flushed; recovery rebuilds them from the descriptors.
//!
//! # Visibility (Algorithm 5.2 with PETRA's rule)
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

pub mod checkpoint;
pub use checkpoint::{CheckpointReport, CheckpointStats};
pub mod descriptor;
pub mod info;
mod ring;

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use crossbeam_epoch::{Collector, Guard, LocalHandle};
use crossbeam_queue::SegQueue;
use parking_lot::Mutex;

use crate::error::{AllocError, EngineError};
use crate::key::{Key, KeyWidth};
use crate::mem::PMem;
use crate::pool::{AllocCache, Pool, RootEntry};
use crate::structures::hashmap::HashMap;
use crate::structures::list::List;
use crate::structures::mdlist::MdList;
use crate::structures::skiplist::SkipList;
use crate::structures::{LinkedSet, NORM};
use crate::sync::AtomicU64;
use descriptor::{
    CHECK, CUT, Desc, MAX_OPS, NO_NODE, PersistStatus, State, StoredOp, TXID, TxStatus, UNSET, desc_bytes,
};
use info::Info;
use ring::Ring;

/// The kinds of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpKind {
    /// Strict: add a key that must be absent.
    Insert = 1,
    /// Strict: remove a key that must be present.
    Delete = 2,
    /// Strict: read a key that must be present.
    Find = 3,
    /// Strict: replace the value of a key that must be present.
    Update = 4,
    /// Total: insert or replace.
    Put = 5,
    /// Total: remove if present.
    Remove = 6,
    /// Total: read, present or not.
    Get = 7,
}

impl OpKind {
    /// Every kind, in the order of their codes (1 to 7).
    pub const ALL: [OpKind; 7] =
        [OpKind::Insert, OpKind::Delete, OpKind::Find, OpKind::Update, OpKind::Put, OpKind::Remove, OpKind::Get];

    /// The kind with code `c` (its discriminant, 1 to 7).
    ///
    /// # Panics
    /// On any other code: descriptors are checksummed, so a bad code is a bug.
    pub fn from_code(c: u8) -> OpKind {
        match c {
            1..=7 => OpKind::ALL[c as usize - 1],
            _ => panic!("invalid op kind {c}"),
        }
    }

    /// Whether the op's key must be in this presence state for the transaction not to abort.
    pub(crate) fn allows(self, present: bool) -> bool {
        match self {
            OpKind::Insert => !present,
            OpKind::Delete | OpKind::Find | OpKind::Update => present,
            OpKind::Put | OpKind::Remove | OpKind::Get => true,
        }
    }

    /// The presence the op leaves, if it writes: `Some(true)` present with the op's value,
    /// `Some(false)` absent, `None` unchanged.
    pub fn writes(self) -> Option<bool> {
        match self {
            OpKind::Insert | OpKind::Update | OpKind::Put => Some(true),
            OpKind::Delete | OpKind::Remove => Some(false),
            OpKind::Find | OpKind::Get => None,
        }
    }

    /// Whether the op only reads.
    pub fn is_read(self) -> bool {
        self.writes().is_none()
    }
}

/// A structure of the engine, by its slot in the pool's root table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StructId(pub u8);

/// One operation of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// On which structure.
    pub structure: StructId,
    /// The key's encoding ([`Key::to_bits`]).
    pub key: u128,
    /// The width of the key's type: it must be the structure's.
    pub width: KeyWidth,
    /// The value written by Insert, Update and Put (ignored otherwise).
    pub value: u64,
}

impl Op {
    /// An op on `key` of structure `s`.
    pub fn new<K: Key>(kind: OpKind, s: StructId, key: K, value: u64) -> Op {
        Op { kind, structure: s, key: key.to_bits(), width: K::WIDTH, value }
    }
}

/// A static transaction: its operations, in order.
#[derive(Debug, Clone, Default)]
pub struct Transaction {
    ops: Vec<Op>,
    /// Per op: the range of `data` holding its byte value, for the `*_bytes` ops.
    spans: Vec<Option<(usize, usize)>>,
    /// The byte values, back to back.
    data: Vec<u8>,
    sort: bool,
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Transaction {
        Transaction::default()
    }

    fn push<K: Key>(&mut self, kind: OpKind, s: StructId, key: K, value: u64) -> &mut Self {
        self.op(Op::new(kind, s, key, value))
    }

    fn push_bytes<K: Key>(&mut self, kind: OpKind, s: StructId, key: K, bytes: &[u8]) -> &mut Self {
        self.op_bytes(Op::new(kind, s, key, 0), bytes)
    }

    /// Adds a strict insert.
    pub fn insert<K: Key>(&mut self, s: StructId, key: K, value: u64) -> &mut Self {
        self.push(OpKind::Insert, s, key, value)
    }
    /// Adds a strict delete.
    pub fn delete<K: Key>(&mut self, s: StructId, key: K) -> &mut Self {
        self.push(OpKind::Delete, s, key, 0)
    }
    /// Adds a strict find.
    pub fn find<K: Key>(&mut self, s: StructId, key: K) -> &mut Self {
        self.push(OpKind::Find, s, key, 0)
    }
    /// Adds a strict update.
    pub fn update<K: Key>(&mut self, s: StructId, key: K, value: u64) -> &mut Self {
        self.push(OpKind::Update, s, key, value)
    }
    /// Adds a put (insert or replace).
    pub fn put<K: Key>(&mut self, s: StructId, key: K, value: u64) -> &mut Self {
        self.push(OpKind::Put, s, key, value)
    }
    /// Adds a remove (if present).
    pub fn remove<K: Key>(&mut self, s: StructId, key: K) -> &mut Self {
        self.push(OpKind::Remove, s, key, 0)
    }
    /// Adds a get.
    pub fn get<K: Key>(&mut self, s: StructId, key: K) -> &mut Self {
        self.push(OpKind::Get, s, key, 0)
    }
    /// Adds a strict insert of a byte value (into a structure of [`Values::Bytes`]).
    pub fn insert_bytes<K: Key>(&mut self, s: StructId, key: K, value: &[u8]) -> &mut Self {
        self.push_bytes(OpKind::Insert, s, key, value)
    }
    /// Adds a strict update to a byte value (of a structure of [`Values::Bytes`]).
    pub fn update_bytes<K: Key>(&mut self, s: StructId, key: K, value: &[u8]) -> &mut Self {
        self.push_bytes(OpKind::Update, s, key, value)
    }
    /// Adds a put of a byte value (into a structure of [`Values::Bytes`]).
    pub fn put_bytes<K: Key>(&mut self, s: StructId, key: K, value: &[u8]) -> &mut Self {
        self.push_bytes(OpKind::Put, s, key, value)
    }
    /// Adds `op`, with a word value.
    pub fn op(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self.spans.push(None);
        self
    }

    /// Adds `op` (an Insert, Update or Put) with the byte value `bytes` instead of its word.
    pub fn op_bytes(&mut self, op: Op, bytes: &[u8]) -> &mut Self {
        debug_assert!(op.kind.writes() == Some(true), "only Insert, Update and Put write a value");
        self.spans.push(Some((self.data.len(), bytes.len())));
        self.data.extend_from_slice(bytes);
        self.ops.push(Op { value: 0, ..op });
        self
    }

    /// The byte value of op `i`, if it was added with one.
    pub fn bytes_of(&self, i: usize) -> Option<&[u8]> {
        let (start, len) = self.spans.get(i).copied().flatten()?;
        Some(&self.data[start..start + len])
    }

    /// Executes the ops sorted by (structure, key), stably, so that ops on one key keep their
    /// order: transactions that take nodes in one global order cannot form helping cycles.
    /// Results are still reported in the order the ops were added.
    pub fn sorted(&mut self, sort: bool) -> &mut Self {
        self.sort = sort;
        self
    }

    /// Removes every op (keeping the allocation and the sort setting), to build the next
    /// transaction in the same value.
    pub fn clear(&mut self) -> &mut Self {
        self.ops.clear();
        self.spans.clear();
        self.data.clear();
        self
    }

    /// Whether the ops execute sorted (see [`sorted`](Transaction::sorted)).
    pub fn is_sorted(&self) -> bool {
        self.sort
    }

    /// The ops, in the order they were added.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Whether no op writes.
    pub fn is_read_only(&self) -> bool {
        self.ops.iter().all(|o| o.kind.is_read())
    }
}

/// What a transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every op took effect, atomically.
    Committed {
        /// Per op, in the order added: the key's value just before the op (`None`: absent). For a
        /// Get or Find that is what it read; for Put, Update, Remove and Delete what they replaced.
        results: Vec<Option<u64>>,
        /// The transaction's place in the serial order, if it has one: updating and multi-op
        /// transactions do; a single read answered without a descriptor does not.
        txid: Option<u64>,
    },
    /// No op took effect: the strict op at this index (in the order added) failed, or the
    /// transaction was aborted to break a helping cycle (`None`).
    Aborted {
        /// The failed op.
        failed_op: Option<usize>,
    },
}

impl Outcome {
    /// Whether the transaction committed.
    pub fn is_committed(&self) -> bool {
        matches!(self, Outcome::Committed { .. })
    }
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Bytes of a descriptor ring (rounded up to whole chunks). A thread writes its descriptors
    /// into one ring, in laps; checkpoint rounds recycle them. A thread whose ring has no room
    /// for its next descriptor (rounds have not caught up) takes another ring, growing the pool,
    /// up to its maximum size ([`AllocError::PoolFull`] then).
    pub ring_bytes: u64,
    /// When a thread's ring holds more than this share of its bytes (in percent) not yet
    /// recycled, that thread runs a checkpoint round ([`Handle::checkpoint`]) after its
    /// transaction, unless another round is running. 0: rounds run only when asked for.
    pub checkpoint_fill: u8,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { ring_bytes: 64 << 20, checkpoint_fill: 25 }
    }
}

impl EngineConfig {
    /// The default settings with rings of `ring_bytes` bytes.
    pub fn rings(ring_bytes: u64) -> EngineConfig {
        EngineConfig { ring_bytes, ..EngineConfig::default() }
    }

    /// The same settings with automatic checkpoint rounds at `percent` of a ring (0: only when
    /// asked for).
    pub fn checkpoint_fill(self, percent: u8) -> EngineConfig {
        EngineConfig { checkpoint_fill: percent.min(100), ..self }
    }
}

/// Region tags of the engine.
pub(crate) const RING_TAG: u16 = 0x7278;
pub(crate) const META_TAG: u16 = 0x6D65;
/// Root table kinds.
pub(crate) const KIND_LIST: u32 = 1;
pub(crate) const KIND_HASH_MAP: u32 = 2;
pub(crate) const KIND_SKIPLIST: u32 = 3;
pub(crate) const KIND_MDLIST: u32 = 4;

/// Meta region words.
pub(crate) const META_MAGIC: u64 = 0x5045_5452_414D_4554; // "PETRAMET"
pub(crate) const META_EPOCH: u64 = 8;
pub(crate) const META_ATTEMPT: u64 = 16;
/// Meta word: every txid handed out is below it (read-only transactions' txids are never
/// persisted, so recovery starts the counter here, keeping txids increasing across restarts).
pub(crate) const META_TXID_RESERVED: u64 = 24;
/// Meta word: the epoch in which [`Engine::close`] left every committed transaction in normalised
/// nodes (no ring holds a descriptor of it), or 0. An open that finds it equal to the epoch, in a
/// pool closed cleanly, skips recovery; every open clears it before any transaction runs.
pub(crate) const META_CLEAN: u64 = 32;
/// Txids reserved durably at a time: one flush and fence per this many transactions.
pub(crate) const TXID_BLOCK: u64 = 1 << 20;

/// A ring known to the engine, and whether a handle writes to it.
#[derive(Debug)]
struct RingSlot {
    ring: Arc<Ring>,
    /// A handle writes to it.
    taken: bool,
    /// Given up for good: a panic unwound through a transaction of the handle that held it (see
    /// [`Handle`]'s `unfinished`).
    dead: bool,
}

/// Runs `$body` with `$set` bound to the structure behind a [`Structure`], whatever its kind:
/// the one place that names every kind for the shared executor.
macro_rules! on_set {
    ($structure:expr, $set:ident => $body:expr) => {
        match $structure {
            Set::List($set) => $body,
            Set::HashMap($set) => $body,
            Set::SkipList($set) => $body,
            Set::MdList($set) => $body,
        }
    };
}

mod scan;

/// A kind of structure, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StructureKind {
    /// The list set (Harris-style, sorted).
    List,
    /// The hash map: a fixed array of `buckets` sorted chains (choose about the number of keys
    /// expected; it does not resize). Ranges walk every bucket.
    HashMap {
        /// Number of buckets.
        buckets: u64,
    },
    /// The skiplist (Fraser-style towers, sorted).
    SkipList,
    /// The multi-dimensional list (sorted; deleted keys keep their nodes until the next open).
    MdList,
}

/// What a structure is made for: its kind, key width and values.
pub type Shape = (StructureKind, KeyWidth, Values);

/// What a structure's value words are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Values {
    /// The value is the word itself (`u64`).
    Words,
    /// The value is a byte string, stored as a blob in the pool; the word is the blob's offset.
    /// Written with the `*_bytes` ops of a [`Transaction`], read with [`Handle::execute_with`]
    /// and [`Handle::range_with`].
    Bytes,
}

/// Root table flag: the structure's values are blobs.
const FLAG_BYTES: u32 = 1;
/// Root table flag: the structure's keys are two words ([`KeyWidth::U128`]).
const FLAG_WIDE_KEYS: u32 = 2;

/// The linked set behind a structure, whatever its kind.
#[derive(Debug, Clone)]
pub(crate) enum Set {
    List(List),
    HashMap(HashMap),
    SkipList(SkipList),
    MdList(MdList),
}

impl Set {
    /// Whether its keys are two words (each set keeps this for its own searches).
    pub(crate) fn wide(&self) -> bool {
        match self {
            Set::List(l) => l.wide,
            Set::HashMap(m) => m.wide,
            Set::SkipList(l) => l.wide,
            Set::MdList(_) => false,
        }
    }
}

/// A structure known to the engine: its set (which knows its key width) and what its values
/// are.
#[derive(Debug, Clone)]
pub(crate) struct Structure {
    pub(crate) set: Set,
    pub(crate) values: Values,
}

impl Structure {
    /// Its kind, with its parameters.
    pub(crate) fn kind(&self) -> StructureKind {
        match &self.set {
            Set::List(_) => StructureKind::List,
            Set::HashMap(m) => StructureKind::HashMap { buckets: m.n },
            Set::SkipList(_) => StructureKind::SkipList,
            Set::MdList(_) => StructureKind::MdList,
        }
    }

    /// The width of its keys.
    pub(crate) fn keys(&self) -> KeyWidth {
        if self.set.wide() { KeyWidth::U128 } else { KeyWidth::U64 }
    }

    /// The root table entry that names the structure.
    pub(crate) fn root_entry(&self) -> RootEntry {
        let (kind, params) = match &self.set {
            Set::List(l) => (KIND_LIST, [l.head, 0]),
            Set::HashMap(m) => (KIND_HASH_MAP, [m.buckets, m.n]),
            Set::SkipList(l) => (KIND_SKIPLIST, [l.head, 0]),
            Set::MdList(l) => (KIND_MDLIST, [l.head, 0]),
        };
        let bytes = if self.values == Values::Bytes { FLAG_BYTES } else { 0 };
        let wide = if self.set.wide() { FLAG_WIDE_KEYS } else { 0 };
        RootEntry { kind, flags: bytes | wide, params: [params[0], params[1], 0, 0, 0, 0] }
    }

    /// The structure a root table entry names, if its kind and flags are known.
    pub(crate) fn from_root_entry(entry: &RootEntry) -> Option<Structure> {
        let [a, b, ..] = entry.params;
        if entry.flags & !(FLAG_BYTES | FLAG_WIDE_KEYS) != 0 {
            return None;
        }
        let wide = entry.flags & FLAG_WIDE_KEYS != 0;
        let set = match entry.kind {
            KIND_LIST => Set::List(List { head: a, wide }),
            KIND_HASH_MAP => Set::HashMap(HashMap { buckets: a, n: b, wide }),
            KIND_SKIPLIST => Set::SkipList(SkipList { head: a, wide }),
            KIND_MDLIST if !wide => Set::MdList(MdList { head: a }),
            _ => return None,
        };
        let values = if entry.flags & FLAG_BYTES != 0 { Values::Bytes } else { Values::Words };
        Some(Structure { set, values })
    }

    /// Bytes of a node for `key`.
    pub(crate) fn node_bytes<M: PMem + 'static>(&self, key: u128) -> u64 {
        on_set!(&self.set, set => LinkedSet::<M>::node_bytes(set, key))
    }

    /// The node holding `key`, if any.
    pub(crate) fn find_node<M: PMem + 'static>(&self, h: &mut Handle<M>, key: u128, guard: &Guard) -> Option<u64> {
        on_set!(&self.set, set => LinkedSet::search(set, h, key, guard).1)
    }

    /// Whether the structure removes nodes left absent (see [`LinkedSet::removes_nodes`]).
    pub(crate) fn removes_nodes<M: PMem + 'static>(&self) -> bool {
        on_set!(&self.set, set => LinkedSet::<M>::removes_nodes(set))
    }

    /// Removes `key`'s node if its info word still is `info` (a finished op that left it absent).
    pub(crate) fn remove_if<M: PMem + 'static>(&self, h: &mut Handle<M>, key: u128, info: Info, guard: &Guard) {
        on_set!(&self.set, set => crate::structures::remove_if(h, set, key, info, guard))
    }
}

pub(crate) struct Inner<M: PMem> {
    pub(crate) pool: Pool<M>,
    pub(crate) collector: Collector,
    next_txid: AtomicU64,
    /// Txids below this are durably reserved (the meta word `META_TXID_RESERVED`).
    txid_reserved: AtomicU64,
    /// The engine's meta region.
    meta: u64,
    /// The committed recovery epoch: descriptors carry it, FINAL states and normalised nodes too.
    pub(crate) epoch: u64,
    /// The rings, under a lock that loom sees (it orders their positions between handles).
    rings: crate::sync::Mutex<Vec<RingSlot>>,
    /// The checkpoint rounds' state.
    pub(crate) checkpointer: checkpoint::Checkpointer,
    /// The structures by root slot: set once when created (or recovered), then only read, so
    /// that looking one up is a plain load, not a shared lock's read-modify-write.
    pub(crate) structures: Vec<OnceLock<Structure>>,
    /// Serialises the creation of structures.
    create_lock: Mutex<()>,
    config: EngineConfig,
    /// What the epoch collector hands back; shared with its deferred functions, which must not
    /// hold the engine itself (the engine owns the collector).
    pub(crate) deferred: Arc<Deferred>,
}

/// Work that became due when the epoch passed.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    /// Nodes whose Delete or Remove committed, ready to be removed: (structure, key, the info
    /// word that made them absent, the count of recycled rounds from which the item is stale;
    /// see [`Checkpointer::removal_expiry`](checkpoint::Checkpointer::removal_expiry)).
    pub(crate) removals: SegQueue<(StructId, u128, Info, u64)>,
    /// Unlinked nodes no thread can reach any more, ready to be freed.
    pub(crate) frees: SegQueue<u64>,
    /// Blobs replaced by a committed transaction that no thread can read any more.
    pub(crate) blob_frees: SegQueue<u64>,
}

impl<M: PMem> std::fmt::Debug for Inner<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("epoch", &self.epoch).field("next_txid", &self.next_txid).finish()
    }
}

/// The engine over one pool: its structures, rings and txid counter. Cheap to clone.
#[derive(Debug)]
pub struct Engine<M: PMem + 'static> {
    pub(crate) inner: Arc<Inner<M>>,
}

impl<M: PMem + 'static> Clone for Engine<M> {
    fn clone(&self) -> Self {
        Engine { inner: Arc::clone(&self.inner) }
    }
}

impl<M: PMem + 'static> Engine<M> {
    /// Sets up the engine in a new pool (one without an engine).
    pub fn create(pool: Pool<M>, config: EngineConfig) -> Result<Engine<M>, EngineError> {
        // A meta region without its magic is an interrupted create: it is taken over.
        let meta = match pool.regions(META_TAG).first() {
            Some(&(off, _)) if pool.mem().load(off.get(), Ordering::Acquire) == META_MAGIC => {
                return Err(EngineError::Corrupt("the pool already holds an engine".into()));
            }
            Some(&(off, _)) => off.get(),
            None => pool.alloc_region(META_TAG, 64)?.get(),
        };
        let mem = pool.mem();
        mem.store(meta + META_EPOCH, 1, Ordering::Relaxed);
        mem.store(meta + META_ATTEMPT, 1, Ordering::Relaxed);
        mem.store(meta + META_TXID_RESERVED, 1 + TXID_BLOCK, Ordering::Relaxed);
        mem.flush(meta);
        // Fence: the meta words are durable before the magic says the engine exists.
        mem.fence();
        mem.store(meta, META_MAGIC, Ordering::Relaxed);
        mem.flush(meta);
        // Fence: the engine exists before anything refers to it.
        mem.fence();
        Ok(Engine::assemble(pool, config, meta, 1, 1, Vec::new()))
    }

    /// Opens the engine of a pool made by [`Engine::create`], recovering it: every transaction
    /// that was acknowledged is there, and no effect of one that was not.
    pub fn open(
        pool: Pool<M>,
        config: EngineConfig,
    ) -> Result<(Engine<M>, crate::recovery::RecoveryReport), EngineError> {
        crate::recovery::recover(pool, config)
    }

    pub(crate) fn assemble(
        pool: Pool<M>,
        config: EngineConfig,
        meta: u64,
        epoch: u64,
        next_txid: u64,
        structures: Vec<Option<Structure>>,
    ) -> Engine<M> {
        let rings = pool
            .regions(RING_TAG)
            .into_iter()
            .map(|(off, len)| RingSlot { ring: Arc::new(Ring::new(off.get(), len)), taken: false, dead: false })
            .collect();
        let slots: Vec<OnceLock<Structure>> = (0..crate::pool::header::ROOT_ENTRIES).map(|_| OnceLock::new()).collect();
        for (slot, s) in structures.into_iter().enumerate() {
            if let Some(s) = s {
                let _ = slots[slot].set(s);
            }
        }
        // Relaxed: the engine is assembled before any thread can use it.
        let txid_reserved = pool.mem().load(meta + META_TXID_RESERVED, Ordering::Relaxed);
        Engine {
            inner: Arc::new(Inner {
                pool,
                collector: Collector::new(),
                next_txid: AtomicU64::new(next_txid.max(1)),
                txid_reserved: AtomicU64::new(txid_reserved),
                meta,
                epoch,
                rings: crate::sync::Mutex::new(rings),
                checkpointer: checkpoint::Checkpointer::default(),
                structures: slots,
                create_lock: Mutex::new(()),
                config,
                deferred: Arc::default(),
            }),
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<M> {
        &self.inner.pool
    }

    /// Closes the engine and its pool cleanly, so that the next [`open`](Engine::open) skips
    /// recovery: if any transaction ran since the pool was opened, its descriptors are first
    /// folded into normalised nodes (recovery's rewrite, run here: the rings are left empty),
    /// then everything is synced, the engine marked clean in its meta region and the pool closed
    /// ([`Pool::close`]). A crash at any point of it leaves a pool that recovers as usual.
    /// [`EngineError::InUse`] while a clone or a [`Handle`] of it lives (nothing is closed).
    pub fn close(self) -> Result<(), EngineError> {
        // With no clone or handle left, none can appear: every one is made from another.
        if Arc::strong_count(&self.inner) > 1 {
            return Err(EngineError::InUse);
        }
        // Relaxed: every handle is gone (and published its ring's head when it was dropped).
        let written = self.inner.rings.lock().iter().any(|r| r.ring.head.load(Ordering::Relaxed) > 0);
        let engine = if written { self.rewrite()? } else { self };
        let inner = Arc::try_unwrap(engine.inner).map_err(|_| EngineError::InUse)?;
        let mem = inner.pool.mem();
        // Relaxed: the engine is alone here; the fence below orders the mark.
        mem.store(inner.meta + META_CLEAN, inner.epoch, Ordering::Relaxed);
        mem.flush(inner.meta + META_CLEAN);
        // Fence: the clean mark reaches the media after the nodes it vouches for (synced by the
        // rewrite, or unchanged since the open) and before the pool's own clean mark.
        mem.fence();
        inner.pool.close()?;
        Ok(())
    }

    /// Checkpoints now (see [`Handle::checkpoint`]), on a handle of its own: folds the
    /// descriptors of the transactions finished before the call into the node records, so that
    /// recovery reads only what comes after, and recycles their ring slots once no thread can
    /// read them. That takes two rounds, the second once every thread pinned during the first
    /// has moved on; if none has yet, the next round folds them. `None` if a round is running or
    /// the last one's end is still waiting. Rounds also run on their own as rings fill
    /// ([`EngineConfig::checkpoint_fill`]).
    pub fn checkpoint(&self) -> Result<Option<CheckpointReport>, EngineError> {
        Ok(self.handle()?.checkpoint())
    }

    /// What the checkpoint rounds did since the engine was opened.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.inner.checkpointer.stats()
    }

    /// The descriptor rings the pool holds (each [`EngineConfig::ring_bytes`] long).
    pub fn rings(&self) -> usize {
        self.inner.rings.lock().len()
    }

    /// With every handle gone, folds every committed transaction into new normalised nodes
    /// (recovery's rewrite, run here) and returns the engine over the same pool, its rings empty.
    fn rewrite(self) -> Result<Engine<M>, EngineError> {
        let inner = Arc::try_unwrap(self.inner).map_err(|_| EngineError::InUse)?;
        // An open engine never has its clean word set (it is cleared at open), so this is the
        // full rewrite.
        Ok(crate::recovery::recover(inner.pool, inner.config)?.0)
    }

    /// Gives the pool back, to close it (or, in tests, to drop it as a crash would). Fails,
    /// returning the engine, while a clone or a [`Handle`] of it lives. A pool closed without
    /// [`Engine::close`] recovers at its next open.
    pub fn into_pool(self) -> Result<Pool<M>, Engine<M>> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Ok(inner.pool),
            Err(inner) => Err(Engine { inner }),
        }
    }

    /// A handle for the calling thread: its descriptor ring, allocation cache and epoch
    /// participation. Keep one per thread.
    pub fn handle(&self) -> Result<Handle<M>, EngineError> {
        Ok(Handle {
            inner: Arc::clone(&self.inner),
            epoch: self.inner.collector.register(),
            ring: None,
            head: 0,
            unfinished: false,
            cache: AllocCache::new(),
            help_stack: Vec::new(),
            blobs: Vec::new(),
            results: Vec::new(),
        })
    }

    /// Creates a new, empty structure of `kind` whose keys are of width `keys` and whose values
    /// are `values`, and returns its id. The multi-dimensional list takes one-word keys only.
    pub fn create_structure(
        &self,
        kind: StructureKind,
        keys: KeyWidth,
        values: Values,
    ) -> Result<StructId, EngineError> {
        let wide = keys == KeyWidth::U128;
        if wide && kind == StructureKind::MdList {
            return Err(EngineError::KeyWidthUnsupported { kind, keys });
        }
        let _creating = self.inner.create_lock.lock();
        let pool = &self.inner.pool;
        let set = match kind {
            StructureKind::List => Set::List(List::create(pool, wide)?),
            StructureKind::HashMap { buckets } => Set::HashMap(HashMap::create(pool, buckets, wide)?),
            StructureKind::SkipList => Set::SkipList(SkipList::create(pool, wide)?),
            StructureKind::MdList => Set::MdList(MdList::create(pool)?),
        };
        let structure = Structure { set, values };
        let slot = pool.add_root(structure.root_entry()).ok_or(EngineError::TooManyStructures)?;
        self.inner.structures[slot]
            .set(structure)
            .map_err(|_| EngineError::Corrupt(format!("root slot {slot} taken twice")))?;
        Ok(StructId(slot as u8))
    }

    /// Creates a new, empty list set of `u64` keys and word values and returns its id.
    pub fn create_list(&self) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::List, KeyWidth::U64, Values::Words)
    }

    /// Creates a new, empty skiplist of `u64` keys and word values and returns its id.
    pub fn create_skiplist(&self) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::SkipList, KeyWidth::U64, Values::Words)
    }

    /// Creates a new, empty multi-dimensional list of `u64` keys and word values and returns its id.
    pub fn create_mdlist(&self) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::MdList, KeyWidth::U64, Values::Words)
    }

    /// Creates a new, empty hash map of `u64` keys and word values with `buckets` buckets and
    /// returns its id.
    pub fn create_hash_map(&self, buckets: u64) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::HashMap { buckets }, KeyWidth::U64, Values::Words)
    }

    /// What the values of structure `s` are.
    pub fn values(&self, s: StructId) -> Result<Values, EngineError> {
        Ok(self.inner.structure(s)?.values)
    }

    /// The kind of structure `s`, with its parameters.
    pub fn kind(&self, s: StructId) -> Result<StructureKind, EngineError> {
        Ok(self.inner.structure(s)?.kind())
    }

    /// The structures a pool's root table names, read without opening the engine (nothing is
    /// written): for a caller that must refuse a pool of another shape untouched. `None` for a
    /// root entry this build does not know.
    pub fn structures_in(pool: &Pool<M>) -> Vec<(StructId, Option<Shape>)> {
        pool.roots()
            .into_iter()
            .map(|(slot, entry)| {
                let s = Structure::from_root_entry(&entry).map(|s| (s.kind(), s.keys(), s.values));
                (StructId(slot as u8), s)
            })
            .collect()
    }

    /// The structures, by id.
    pub fn structures(&self) -> Vec<StructId> {
        let s = &self.inner.structures;
        (0..s.len()).filter(|&i| s[i].get().is_some()).map(|i| StructId(i as u8)).collect()
    }

    /// The width of the keys of structure `s`.
    pub fn keys(&self, s: StructId) -> Result<KeyWidth, EngineError> {
        Ok(self.inner.structure(s)?.keys())
    }

    /// The present keys of a structure with their values, in key order: a snapshot (see
    /// [`Handle::range`]).
    pub fn entries<K: Key>(&self, s: StructId) -> Result<Vec<(K, u64)>, EngineError> {
        self.handle()?.range(s, ..)
    }

    /// Txids handed out so far (the next one minus one): for checkers that bound when a read
    /// happened.
    pub fn txid_watermark(&self) -> u64 {
        self.inner.next_txid.load(Ordering::Acquire) - 1
    }
}

impl<M: PMem> Inner<M> {
    pub(crate) fn structure(&self, s: StructId) -> Result<Structure, EngineError> {
        self.structures.get(s.0 as usize).and_then(OnceLock::get).cloned().ok_or(EngineError::UnknownStructure(s.0))
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

/// A thread's access to the engine. See [`Engine::handle`].
pub struct Handle<M: PMem + 'static> {
    pub(crate) inner: Arc<Inner<M>>,
    pub(crate) epoch: LocalHandle,
    /// The descriptor ring this handle writes to (its index among the engine's), taken at its
    /// first descriptor.
    ring: Option<(usize, Arc<Ring>)>,
    /// The ring's head as this handle, its one writer, knows it.
    head: u64,
    pub(crate) cache: AllocCache,
    /// Descriptors this thread is executing, innermost last: the owner's, then those it helps.
    help_stack: Vec<u64>,
    /// The blobs of the transaction being executed, per op (0: a word value); kept for reuse.
    blobs: Vec<u64>,
    /// A results vector that came back from [`execute_with`](Handle::execute_with), for reuse.
    results: Vec<Option<u64>>,
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
        self.inner.pool.release_cache(&mut self.cache);
        self.release_ring();
    }
}

impl<M: PMem + 'static> Handle<M> {
    pub(crate) fn mem(&self) -> &M {
        self.inner.pool.mem()
    }

    /// What the values of structure `s` are.
    pub fn values(&self, s: StructId) -> Result<Values, EngineError> {
        Ok(self.inner.structure(s)?.values)
    }

    /// The width of the keys of structure `s`.
    pub fn keys(&self, s: StructId) -> Result<KeyWidth, EngineError> {
        Ok(self.inner.structure(s)?.keys())
    }

    /// Gives back the ring this handle holds, if any: another handle resumes it once it has
    /// room, and its descriptors stay where checkpoint rounds and recovery read them. A ring
    /// whose last descriptor's transaction never returned (see `unfinished`) is given up for good.
    fn release_ring(&mut self) {
        if let Some((i, _)) = self.ring.take() {
            let dead = std::mem::take(&mut self.unfinished);
            let mut rings = self.inner.rings.lock();
            rings[i].taken = false;
            rings[i].dead |= dead;
        }
    }

    /// Takes, in place of the ring it holds, a ring with room for a descriptor of `desc_len`
    /// bytes that no handle holds, or a new one (the pool grows for it).
    fn take_ring(&mut self, desc_len: u64) -> Result<(), EngineError> {
        self.release_ring();
        let inner = Arc::clone(&self.inner);
        let mut rings = inner.rings.lock();
        let i = match rings.iter().position(|r| !r.taken && !r.dead && r.ring.has_room(desc_len)) {
            Some(i) => i,
            None => {
                // The pool refuses it if it would not leave the room recovery needs.
                let layout = inner.pool.header().layout;
                let len = inner.config.ring_bytes.max(1).div_ceil(layout.chunk_size) * layout.chunk_size;
                let off = inner.pool.alloc_region(RING_TAG, len)?.get();
                rings.push(RingSlot { ring: Arc::new(Ring::new(off, len)), taken: false, dead: false });
                rings.len() - 1
            }
        };
        rings[i].taken = true;
        let ring = Arc::clone(&rings[i].ring);
        // Relaxed: the ring's last writer published its head under the rings lock, held here.
        self.head = ring.head.load(Ordering::Relaxed);
        self.ring = Some((i, ring));
        Ok(())
    }

    /// Where this handle writes its next descriptor, of `len` bytes: in its ring, or in another
    /// one it takes for it. Pads the ring's lap if it must.
    fn place_descriptor(&mut self, len: u64) -> Result<u64, EngineError> {
        let place =
            |h: &Self| h.ring.as_ref().and_then(|(_, r)| r.place(h.head, len).map(|start| (Arc::clone(r), start)));
        let mut placed = place(self);
        if placed.is_none() && self.ring.is_some() {
            // A round's end may be due: let it recycle this ring's slots before taking another.
            self.advance_epoch();
            placed = place(self);
        }
        let (ring, start) = match placed {
            Some(p) => p,
            None => {
                self.take_ring(len)?;
                let ring = Arc::clone(&self.ring.as_ref().expect("just taken").1);
                let start = ring.place(self.head, len).expect("a ring is taken only with room");
                (ring, start)
            }
        };
        ring.pad(self.mem(), self.head, start);
        self.head = start + len;
        Ok(ring.at(start))
    }

    /// Publishes the descriptor just written (up to this handle's head) to checkpoint rounds.
    fn publish_head(&self) {
        if let Some((_, ring)) = &self.ring {
            // Release: a round that reads the head sees the descriptors (and pad) before it.
            ring.head.store(self.head, Ordering::Release);
        }
    }

    /// Executes `tx`: Committed with each op's result, or Aborted with nothing changed.
    ///
    /// The results of ops on a structure of [`Values::Bytes`] are blob words: read them with
    /// [`execute_with`](Handle::execute_with), which keeps them from being freed meanwhile.
    pub fn execute(&mut self, tx: &Transaction) -> Result<Outcome, EngineError> {
        let guard = self.epoch.pin();
        let out = self.execute_pinned(tx, &guard);
        drop(guard);
        self.maybe_checkpoint();
        out
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
        let r = f(&out, &Blobs { pool: &self.inner.pool, _guard: &guard });
        drop(guard);
        if let Outcome::Committed { results, .. } = out {
            self.results = results;
        }
        self.maybe_checkpoint();
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
        let structure = self.inner.structure(s)?;
        check_key(&structure, s, K::WIDTH, key.to_bits())?;
        let guard = self.epoch.pin();
        let state = self.read_state(&structure, key.to_bits(), &guard);
        let r = f(state, &Blobs { pool: &self.inner.pool, _guard: &guard });
        drop(guard);
        Ok(r)
    }

    /// Executes `tx` until it is decided: again each time it is aborted to break a helping cycle
    /// (which says nothing about its ops), then `f` with its results and a reader of the byte
    /// values they name, while those cannot be freed. `Ok(Err(i))` if its strict op `i` failed.
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

    /// Refuses, before anything changes, a transaction the engine cannot run: too many ops, an
    /// unknown structure, a key or value of the wrong kind for its structure, or a byte value
    /// longer than a blob can be. Returns whether an op is on a structure of byte values.
    ///
    /// It also starts each op's first search load (a hash map's bucket), so that the load
    /// overlaps the writing of blobs and of the descriptor.
    fn check(&self, tx: &Transaction) -> Result<bool, EngineError> {
        let n = tx.ops.len();
        if n > MAX_OPS {
            return Err(EngineError::TooManyOps { ops: n, max: MAX_OPS });
        }
        let mut bytes = false;
        for (op, span) in tx.ops.iter().zip(&tx.spans) {
            let structure = self.inner.structure(op.structure)?;
            check_key(&structure, op.structure, op.width, op.key)?;
            bytes |= structure.values == Values::Bytes;
            on_set!(&structure.set, set => set.prefetch(self.mem(), op.key));
            if op.kind.writes() != Some(true) {
                continue;
            }
            match (structure.values, span) {
                (Values::Words, None) => {}
                (Values::Bytes, Some((_, len))) => {
                    let limit = self.inner.pool.max_blob_len();
                    if *len as u64 > limit {
                        return Err(EngineError::Alloc(AllocError::TooLarge { requested: *len as u64, limit }));
                    }
                }
                (expected, _) => return Err(EngineError::WrongValue { structure: op.structure.0, expected }),
            }
        }
        Ok(bytes)
    }

    fn execute_pinned(&mut self, tx: &Transaction, guard: &Guard) -> Result<Outcome, EngineError> {
        let n = tx.ops.len();
        if n == 0 {
            return Ok(Outcome::Committed { results: Vec::new(), txid: None });
        }
        let bytes = self.check(tx)?;
        if n == 1 && tx.ops[0].kind.is_read() {
            return self.read_one(&tx.ops[0], guard);
        }
        // Writers, not single reads, run the removals and frees that came due: a read stays
        // free of shared queues.
        self.run_removals(n, guard);
        // Execution order: as added, or stably sorted by (structure, key); `added(pos)` maps an
        // executed position back to the op's place in the transaction.
        let mut order: Option<Vec<usize>> = tx.sort.then(|| {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&i| (tx.ops[i].structure, tx.ops[i].key));
            order
        });
        let added = |pos: usize| order.as_ref().map_or(pos, |o| o[pos]);
        let wide = tx.ops.iter().any(|op| op.key >> 64 != 0);
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
                    blobs.push(0);
                    continue;
                };
                match self.inner.pool.alloc_blob_unflushed(&mut self.cache, data) {
                    Ok(off) => blobs.push(off.get()),
                    Err(e) => {
                        self.free_blobs(&blobs);
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
                self.free_blobs(&blobs);
                self.blobs = blobs;
                return Err(e);
            }
        };
        let stored = (0..n).map(|pos| {
            let i = added(pos);
            let op = &tx.ops[i];
            let (blob, hash) = match tx.bytes_of(i) {
                Some(data) => (true, descriptor::bytes_hash(data)),
                None => (false, 0),
            };
            let value = if blob { blobs[i] } else { op.value };
            StoredOp { kind: op.kind as u8, structure: op.structure.0, key: op.key, value, blob, hash }
        });
        descriptor::write_new(self.mem(), d, self.inner.epoch as u32, tx.is_read_only(), wide, stored);
        self.publish_head();
        self.unfinished = true;
        // Before `d` can finish: when its removals go stale.
        let expiry = self.inner.checkpointer.removal_expiry();
        self.help_stack.push(d);
        let failed = self.run(d, 0, guard);
        self.help_stack.pop();
        let desc = Desc::new(self.mem(), d);
        let state = desc.state();
        let outcome = match state.status {
            TxStatus::Committed => {
                // The results and the removals are read from the descriptor before it is
                // persisted: they are fixed once it commits, and a flush may evict its lines
                // (clflushopt always, clwb on some CPUs). Nothing is returned before the fence.
                // Into the vector the last `execute_with` gave back, if any: a put allocates
                // nothing then.
                let mut results = std::mem::take(&mut self.results);
                results.clear();
                results.extend((0..n).map(|pos| self.before_state(d, pos, guard)));
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
                self.schedule_removals(d, true, expiry, guard);
                let txid = self.persist(d);
                if bytes {
                    self.retire_replaced(tx, &results, guard);
                }
                Ok(Outcome::Committed { results, txid: Some(txid) })
            }
            _ if let Some(requested) = desc.aborted_for_memory() => {
                self.schedule_removals(d, false, expiry, guard);
                self.free_blobs(&blobs);
                Err(EngineError::Alloc(AllocError::PoolFull { requested, max: self.inner.pool.max_len() }))
            }
            _ => {
                self.schedule_removals(d, false, expiry, guard);
                self.free_blobs(&blobs);
                Ok(Outcome::Aborted { failed_op: failed.map(added) })
            }
        };
        self.blobs = blobs;
        self.unfinished = false;
        outcome
    }

    /// Frees the blobs of a transaction that did not commit: no reader ever resolves a value of
    /// an op that did not commit, and nothing persists an uncommitted descriptor, so nothing can
    /// be reading them.
    fn free_blobs(&mut self, blobs: &[u64]) {
        for &b in blobs.iter().filter(|&&b| b != 0) {
            self.inner.pool.free_blob(&mut self.cache, crate::pool::POff::new(b));
        }
    }

    /// After a commit (persisted): the byte values its writing ops replaced are unreachable for
    /// any reader that starts from now on; they are freed once the readers that may hold them
    /// (pinned now) have unpinned. Each value is replaced by exactly one committed op, so each is
    /// freed once; recovery never goes back to a value a persisted transaction replaced.
    ///
    /// Like an unlinked node, a replaced value of a slab block waits in this thread's bag of
    /// deferred work, which the epoch collector takes when it fills (64 items): flushing the bag
    /// at every overwrite cost a tenth of a put's time. A value of whole chunks (longer than the
    /// largest block) has the bag flushed at once, so that a thread that seldom writes does not
    /// hold up to 63 of them (of up to the blob limit each) for as long as it likes.
    fn retire_replaced(&self, tx: &Transaction, results: &[Option<u64>], guard: &Guard) {
        let mut large = false;
        for (op, before) in tx.ops.iter().zip(results) {
            let Some(blob) = *before else { continue };
            if op.kind.is_read() || !self.inner.structure(op.structure).is_ok_and(|s| s.values == Values::Bytes) {
                continue;
            }
            large |= self.inner.pool.is_blob_run(crate::pool::POff::new(blob));
            let deferred = Arc::clone(&self.inner.deferred);
            guard.defer(move || deferred.blob_frees.push(blob));
        }
        if large {
            guard.flush();
        }
    }

    /// A single read, answered without a descriptor: linearised at the read of the node's info.
    fn read_one(&mut self, op: &Op, guard: &Guard) -> Result<Outcome, EngineError> {
        let structure = self.inner.structure(op.structure)?;
        let state = self.read_state(&structure, op.key, guard);
        Ok(match (op.kind, state) {
            (OpKind::Find, None) => Outcome::Aborted { failed_op: Some(0) },
            _ => Outcome::Committed { results: vec![state], txid: None },
        })
    }

    /// The state of `key` in `structure` as a reader outside any transaction sees it.
    fn read_state(&mut self, structure: &Structure, key: u128, guard: &Guard) -> Option<u64> {
        match structure.find_node(self, key, guard) {
            None => None,
            Some(node) => self.node_state(node, guard),
        }
    }

    /// The state of a node as a reader outside any transaction sees it.
    pub(crate) fn node_state(&mut self, node: u64, guard: &Guard) -> Option<u64> {
        let cur = Info(self.mem().load(node + crate::structures::INFO, Ordering::Acquire));
        if cur.is_marked() {
            return None;
        }
        self.resolve(cur, None, guard)
    }

    /// Runs ops `from..` of `d` until it is no longer active, then finishes it (commit or abort).
    /// Returns the index of a strict op that failed, if this thread saw one fail.
    fn run(&mut self, d: u64, from: usize, guard: &Guard) -> Option<usize> {
        let n = Desc::new(self.mem(), d).nops();
        let mut failed = None;
        for i in from..n {
            if Desc::new(self.mem(), d).state().status != TxStatus::Active {
                break;
            }
            match self.execute_op(d, i, guard) {
                Step::Done => {}
                Step::Fail => {
                    failed = Some(i);
                    Desc::new(self.mem(), d).abort(None);
                    break;
                }
                Step::NoMemory(bytes) => {
                    Desc::new(self.mem(), d).abort(Some(bytes));
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
                self.assign_txid(d);
                let done = State { status: TxStatus::Committed, pstatus: PersistStatus::Persisted };
                let _ = desc.cas_state(State::ACTIVE, done);
            } else {
                // Straight to InProgress: whoever commits it persists it next (the owner, or a
                // helper after `run`), so a separate claim would be one more locked instruction.
                let done = State { status: TxStatus::Committed, pstatus: PersistStatus::InProgress };
                let _ = desc.cas_state(State::ACTIVE, done);
            }
        }
        failed
    }

    fn assign_txid(&self, d: u64) -> u64 {
        let mem = self.mem();
        // Acquire: a txid seen is one another thread assigned and published.
        let cur = mem.load(d + TXID, Ordering::Acquire);
        if cur != 0 {
            return cur;
        }
        // AcqRel on the counter: txids are handed out in a total order that matches the order of
        // the transactions that depend on each other (see `persist`).
        let t = self.inner.next_txid.fetch_add(1, Ordering::AcqRel);
        if t >= self.inner.txid_reserved.load(Ordering::Acquire) {
            self.reserve_txids(t);
        }
        // AcqRel: the txid is assigned once; a helper that loses uses the winner's.
        match mem.compare_exchange(d + TXID, 0, t, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => t,
            Err(winner) => winner,
        }
    }

    /// Durably raises the txid reservation above `t` before `t` is used, so that no txid handed
    /// out (read-only ones are never persisted) is handed out again after a restart. Once per
    /// [`TXID_BLOCK`] txids.
    #[cold]
    fn reserve_txids(&self, t: u64) {
        let mem = self.mem();
        let at = self.inner.meta + META_TXID_RESERVED;
        let want = t + TXID_BLOCK;
        // Acquire: as for the CAS below.
        let mut cur = mem.load(at, Ordering::Acquire);
        while cur < want {
            // AcqRel: the reservation only grows.
            match mem.compare_exchange(at, cur, want, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        mem.flush(at);
        // Fence: the reservation is durable before a txid under it is used.
        mem.fence();
        self.inner.txid_reserved.fetch_max(mem.load(at, Ordering::Acquire), Ordering::AcqRel);
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
                    let len = self.inner.pool.blob_len(crate::pool::POff::new(op.value));
                    mem.flush_range(op.value, crate::mem::WORD + len);
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

    /// Helps the active transaction `d2`, met at its op `opid`: executes its remaining ops. A
    /// transaction already on this thread's help stack means a helping cycle: it is aborted.
    pub(crate) fn help(&mut self, d2: u64, opid: usize, guard: &Guard) {
        if self.help_stack.contains(&d2) {
            Desc::new(self.mem(), d2).abort(None);
            return;
        }
        self.help_stack.push(d2);
        self.run(d2, opid + 1, guard);
        self.help_stack.pop();
        let s = Desc::new(self.mem(), d2).state();
        if s.status == TxStatus::Committed && s.pstatus != PersistStatus::Persisted {
            self.persist(d2);
        }
    }

    /// Executes op `i` of `d`. See the [module docs](self).
    fn execute_op(&mut self, d: u64, i: usize, guard: &Guard) -> Step {
        let op = Desc::new(self.mem(), d).op(i);
        let structure = self.inner.structure(StructId(op.structure)).expect("checked at execute");
        on_set!(&structure.set, set => crate::structures::execute_op(self, set, d, i, op, guard))
    }

    /// The state that info word `cur` stands for, seen from transaction `me` (or from outside
    /// any transaction): `Some(value)` if present. Helps persist committed, unpersisted
    /// descriptors it meets.
    pub(crate) fn resolve(&self, mut cur: Info, me: Option<u64>, _guard: &Guard) -> Option<u64> {
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

    /// The before-state of op `i` of `d`, which has executed.
    fn before_state(&self, d: u64, i: usize, guard: &Guard) -> Option<u64> {
        match before_of(self.mem(), &Desc::new(self.mem(), d), i) {
            Before::Known(state) => state,
            Before::Of(prev) => self.resolve(prev, Some(d), guard),
        }
    }

    /// After the transaction finished: queue the nodes it left absent (deleted or removed keys,
    /// nodes made for reads or removals of absent keys, nodes made by an aborted transaction) for
    /// removal once every thread that could still be executing on them has unpinned. The removal
    /// happens only if the node's info word still names this op by then.
    fn schedule_removals(&self, d: u64, committed: bool, expiry: u64, guard: &Guard) {
        let desc = Desc::new(self.mem(), d);
        let mut any = false;
        for i in 0..desc.nops() {
            let op = desc.op(i);
            let absent_before = read_cache(self.mem(), &desc, i) == Some(None);
            let absent_after = match OpKind::from_code(op.kind).writes() {
                _ if !committed => absent_before,
                Some(present) => !present,
                None => absent_before,
            };
            // A node with a record stays until a checkpoint round clears it and removes the node
            // itself (`remove_if` would give up): no removal to run then. Relaxed: a record
            // written before this transaction took the node is seen (its CAS acquired the
            // round's), and none is written while the node is absent.
            let recorded =
                || cached_node(self.mem(), &desc, i).is_some_and(|n| self.mem().load(n + NORM, Ordering::Relaxed) != 0);
            if absent_after
                && self.inner.structure(StructId(op.structure)).is_ok_and(|s| s.removes_nodes::<M>())
                && !recorded()
            {
                any = true;
                let deferred = Arc::clone(&self.inner.deferred);
                let item = (StructId(op.structure), op.key, Info::op(d, i), expiry);
                guard.defer(move || deferred.removals.push(item));
            }
        }
        if any {
            guard.flush();
        }
    }

    /// Frees the nodes, and removes the keys, that the epoch made due: a few, and two per op of
    /// the transaction `ops` long about to run, so that the queues drain at least as fast as
    /// transactions fill them. (A removal left in the queue past the recycling of its op's slot
    /// is dropped as stale, see [`Checkpointer::removal_expiry`]; the node then waits for the
    /// round that folds its op.)
    ///
    /// [`Checkpointer::removal_expiry`]: checkpoint::Checkpointer::removal_expiry
    fn run_removals(&mut self, ops: usize, guard: &Guard) {
        for _ in 0..16 + 2 * ops {
            let Some(node) = self.inner.deferred.frees.pop() else { break };
            self.inner.pool.free(&mut self.cache, crate::pool::POff::new(node));
        }
        for _ in 0..16 + 2 * ops {
            let Some(blob) = self.inner.deferred.blob_frees.pop() else { break };
            self.inner.pool.free_blob(&mut self.cache, crate::pool::POff::new(blob));
        }
        // Read once, pinned (as the caller stays until the removals are done): what makes an
        // item that reads as live safe to run holds for every item popped after the read.
        let recycled = self.inner.checkpointer.recycled();
        for _ in 0..8 + 2 * ops {
            let Some((s, key, info, expiry)) = self.inner.deferred.removals.pop() else { return };
            if recycled >= expiry {
                continue;
            }
            if let Ok(structure) = self.inner.structure(s) {
                structure.remove_if(self, key, info, guard);
            }
        }
    }
}

/// Reads byte values (blobs) by their words while they cannot be freed: handed out, for the span
/// of a call, by [`Handle::execute_with`] and [`Handle::range_with`].
pub struct Blobs<'g, M: PMem> {
    pool: &'g Pool<M>,
    _guard: &'g Guard,
}

impl<M: PMem> std::fmt::Debug for Blobs<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blobs").finish_non_exhaustive()
    }
}

impl<M: PMem> Blobs<'_, M> {
    /// Copies the byte value named by `word` (a result or value of a structure of
    /// [`Values::Bytes`]) into `buf`, replacing its contents.
    ///
    /// # Panics
    /// If `word` does not name a blob inside the pool (a word of a structure of word values).
    pub fn read_into(&self, word: u64, buf: &mut Vec<u8>) {
        assert!(self.pool.read_blob_into(crate::pool::POff::new(word), buf), "{word:#x} does not name a blob");
    }

    /// A hint that the byte value named by `word`, about `len` bytes long (a guess will do), is
    /// read soon: starts loading its lines. Changes nothing; a word outside the pool is ignored.
    pub fn prefetch(&self, word: u64, len: usize) {
        use crate::mem::CACHE_LINE;
        let mem = self.pool.mem();
        // Every line of [word, word + 8 + len), clamped to the pool (the memory ignores the rest).
        let end = word.saturating_add(crate::mem::WORD).saturating_add(len as u64).min(mem.len());
        let mut line = word & !(CACHE_LINE - 1);
        while line < end {
            mem.prefetch(line.max(word));
            line += CACHE_LINE;
        }
    }

    /// The byte value named by `word`, copied out. See [`read_into`](Blobs::read_into).
    pub fn to_vec(&self, word: u64) -> Vec<u8> {
        let mut buf = Vec::new();
        self.read_into(word, &mut buf);
        buf
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
            header >> 48 == descriptor::DESC_TAG
                && prev.opid() < other.nops()
                && other.state().status != TxStatus::Active,
            "an op of {d:#x} names {prev:?}, which is no finished descriptor's op (header {header:#x})"
        );
    }
}

/// The state a FINAL word stands for: absent, or present with its node's value.
fn final_value<M: PMem>(mem: &M, w: Info) -> Option<u64> {
    // Acquire: the value was written before the FINAL word was published; and a value a
    // checkpoint round wrote since (see `before_of`) comes with the caches it filled first.
    w.final_present().then(|| mem.load(w.final_node() + crate::structures::VALUE, Ordering::Acquire))
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
/// [`checkpoint`]); a round fills the cache of every op whose `prev` leads to that value before it
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

/// Refuses a key of the wrong width for `structure` (number `s`).
fn check_key(structure: &Structure, s: StructId, width: KeyWidth, key: u128) -> Result<(), EngineError> {
    let keys = structure.keys();
    if width != keys || (width == KeyWidth::U64 && key > u64::MAX as u128) {
        return Err(EngineError::WrongKey { structure: s.0, expected: keys });
    }
    Ok(())
}

/// Op `i`'s cached before-state, if recorded.
fn read_cache<M: PMem>(mem: &M, desc: &Desc<'_, M>, i: usize) -> Option<Option<u64>> {
    let at = desc.cache_off(i);
    // Acquire: pairs with the Release in `write_cache`, so the value word is seen.
    let flags = mem.load(at, Ordering::Acquire);
    if flags & 1 == 0 {
        return None;
    }
    Some((flags & 2 != 0).then(|| mem.load(at + 8, Ordering::Relaxed)))
}

/// The node op `i` took or created, if its before-state was cached (see [`write_cache`]).
fn cached_node<M: PMem>(mem: &M, desc: &Desc<'_, M>, i: usize) -> Option<u64> {
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

impl From<AllocError> for EngineError {
    fn from(e: AllocError) -> Self {
        EngineError::Alloc(e)
    }
}

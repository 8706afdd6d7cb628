//! The transaction vocabulary: what a caller says to the engine.
//!
//! A [`Transaction`] is a static list of [`Op`]s, each of an [`OpKind`] on a key of one of the
//! engine's structures ([`StructId`]); executing it gives an [`Outcome`]. A structure is created
//! as a [`StructureKind`] for keys of one width and values of one kind ([`Values`]). Nothing here
//! touches memory: this module names things, the engine does them.

use crate::key::{Key, KeyWidth};

/// The most operations in one transaction (a node's info word names an op by 6 bits).
pub const MAX_OPS: usize = 64;

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

    /// The kind with code `c`, if there is one.
    pub(crate) fn try_from_code(c: u8) -> Option<OpKind> {
        (1..=7).contains(&c).then(|| OpKind::ALL[c as usize - 1])
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
    /// No op took effect.
    Aborted {
        /// `Some(i)`: the strict op at index `i` (in the order added) found its key in the wrong
        /// state (an Insert's present, a Delete's, Find's or Update's absent), whichever thread
        /// ran it, this transaction's own or one helping it; running it again can succeed only
        /// once the key changed. `None`: it was aborted to break a helping cycle with another
        /// transaction, which says nothing about its ops; running it again may commit
        /// ([`Handle::execute_decided`](crate::Handle::execute_decided) does).
        failed_op: Option<usize>,
    },
}

impl Outcome {
    /// Whether the transaction committed.
    pub fn is_committed(&self) -> bool {
        matches!(self, Outcome::Committed { .. })
    }
}

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
    /// The multi-dimensional list (sorted).
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
    /// Written with the `*_bytes` ops of a [`Transaction`], read with
    /// [`Handle::execute_with`](crate::Handle::execute_with) and
    /// [`Handle::range_with`](crate::Handle::range_with).
    Bytes,
}

//! The battery of structures every engine test runs on: one of each kind, so that every transaction test
//! also crosses structures, and two of two-word keys (one of them of byte values), so that every
//! test also covers wide keys and blobs.
//!
//! The tests speak in one-word keys and word values. On a structure of two-word keys,
//! [`execute`], [`range`] and [`entries`] write each
//! key `k` as [`wide_key`]`(k)` (`k` in the high word, a hash of it in the low
//! one) and map the keys read back. On a structure of byte values they write each word `v` as the
//! bytes [`encode`]`(v)` (8 to 300 bytes, so blobs of several size classes and
//! lines) and read them back, checking that every byte read is the one written.

use std::ops::{Bound, RangeBounds};

use petra::mem::PMem;
use petra::{
    Blobs, DurabilityPolicy, Engine, EngineConfig, EngineError, Handle, KeyWidth, Op, OpKind, Outcome, ReadError,
    StructId, StructureKind, Transaction, Values,
};
use rand::Rng;

/// A kind of structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The list set.
    List,
    /// The hash map, with 16 buckets: short chains, and collisions on small key ranges.
    HashMap,
    /// The skiplist.
    SkipList,
    /// The multi-dimensional list.
    MdList,
    /// The skiplist with two-word keys and byte values (blobs).
    SkipListWide,
    /// The hash map (16 buckets) with two-word keys.
    HashMapWide,
}

/// Every kind.
pub const ALL: [Kind; 6] =
    [Kind::List, Kind::HashMap, Kind::SkipList, Kind::MdList, Kind::SkipListWide, Kind::HashMapWide];

/// The durability policies the kill loops' rounds take in turn (the real loop's,
/// `tests/engine_kill.rs`, and its simulation's, `tests/engine_kill_sim.rs`). `Periodic`'s
/// interval is short, so that its syncer makes safe points (and the rounds wait for them) while
/// the process is killed.
pub const KILL_LOOP_POLICIES: [DurabilityPolicy; 3] = [
    DurabilityPolicy::Process,
    DurabilityPolicy::Periodic(std::time::Duration::from_millis(5)),
    DurabilityPolicy::Immediate,
];

/// The kill loops run a checkpoint round after this many transactions.
pub const KILL_LOOP_ROUND_EVERY: u64 = 5;

/// The kill loops' engine under `policy`: rings of one chunk, which a loop goes round after
/// about 500 transactions.
pub fn kill_loop_engine(policy: DurabilityPolicy) -> EngineConfig {
    EngineConfig::rings(64 << 10).durability(policy)
}

/// A transaction of the kill loops: 1 to 4 ops of any kind, each on any structure, keys below
/// 64 (so that transactions meet on keys), values below a million.
pub fn kill_loop_ops(rng: &mut impl Rng) -> Vec<Op> {
    (0..rng.random_range(1..=4))
        .map(|_| {
            Op::new(
                OpKind::from_code(rng.random_range(1..=7)),
                IDS[rng.random_range(0..IDS.len())],
                rng.random_range(0..64u64),
                rng.random_range(1..1_000_000),
            )
        })
        .collect()
}

/// The transaction of `ops`, in their order.
pub fn transaction(ops: &[Op]) -> Transaction {
    let mut tx = Transaction::new();
    for op in ops {
        tx.op(*op);
    }
    tx
}

/// Blocks the allocator holds besides the nodes and blobs of present keys: the head sentinels
/// of the list, the skiplists and the MDList (the hash map's buckets are a region).
pub const HEADS: u64 = 4;

impl Kind {
    /// The engine's structure kind, key width and values.
    pub fn spec(self) -> (StructureKind, KeyWidth, Values) {
        let hash = StructureKind::HashMap { buckets: 16 };
        match self {
            Kind::List => (StructureKind::List, KeyWidth::U64, Values::Words),
            Kind::HashMap => (hash, KeyWidth::U64, Values::Words),
            Kind::SkipList => (StructureKind::SkipList, KeyWidth::U64, Values::Words),
            Kind::MdList => (StructureKind::MdList, KeyWidth::U64, Values::Words),
            Kind::SkipListWide => (StructureKind::SkipList, KeyWidth::U128, Values::Bytes),
            Kind::HashMapWide => (hash, KeyWidth::U128, Values::Words),
        }
    }
}

/// Creates a structure of `kind`.
pub fn create<M: PMem + 'static>(engine: &Engine<M>, kind: Kind) -> StructId {
    let (k, w, v) = kind.spec();
    engine.create_structure(k, w, v).expect("a structure is created")
}

/// The ids [`create_all`] returns in a new engine.
pub const IDS: [StructId; ALL.len()] = [StructId(0), StructId(1), StructId(2), StructId(3), StructId(4), StructId(5)];

/// One structure of each kind, in the order of [`ALL`].
pub fn create_all<M: PMem + 'static>(engine: &Engine<M>) -> Vec<StructId> {
    ALL.iter().map(|&k| create(engine, k)).collect()
}

/// The bit of a word value that asks for a large byte value (see [`encode`]).
pub const LARGE: u64 = 1 << 62;

/// Whether the byte value of the word `v` is longer than the largest slab block, so that it
/// takes a run of chunks of its own.
pub fn is_large(v: u64) -> bool {
    v & LARGE != 0
}

/// The byte value that stands for the word `v`: `v`'s little-endian bytes, repeated (with the
/// byte count mixed in) to a length of 8 to 300 bytes that depends on `v`; with the bit
/// [`LARGE`] set, to a length between one and two and a half times the largest slab block
/// ([`MAX_CLASS_SIZE`](petra::pool::alloc::MAX_CLASS_SIZE)), so a run of chunks.
pub fn encode(v: u64) -> Vec<u8> {
    let spread = (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
    let len = if is_large(v) {
        let block = petra::pool::alloc::MAX_CLASS_SIZE as usize;
        block + spread % (block * 3 / 2)
    } else {
        8 + spread % 293
    };
    (0..len).map(|i| v.to_le_bytes()[i % 8] ^ (i / 8) as u8).collect()
}

/// The word a byte value stands for.
///
/// # Panics
/// If the bytes are not exactly [`encode`] of a word: a blob read back wrong.
pub fn decode(b: &[u8]) -> u64 {
    assert!(b.len() >= 8, "a byte value of {} bytes", b.len());
    let v = u64::from_le_bytes(b[..8].try_into().unwrap());
    assert!(encode(v) == b, "the byte value of {v} was read back wrong: {b:02x?}");
    v
}

/// The value a state's `word` stands for: the word, or on a structure of byte values
/// (`bytes`) the word its blob holds.
fn value_of<M: PMem>(bytes: bool, blobs: &Blobs<'_, M>, word: u64) -> u64 {
    if bytes { decode(&blobs.to_vec(word).expect("a test's value reads back whole")) } else { word }
}

/// The two-word key that stands for the one-word key `k`: `k` in the high word (so the order
/// is `k`'s), and a hash of `k` in the low word (so both words matter). `wide_key(0)` has a
/// high word of zero: a key of a two-word structure that a one-word descriptor carries.
pub fn wide_key(k: u64) -> u128 {
    let lo = (k ^ 0x5EED).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    (k as u128) << 64 | lo as u128
}

/// The one-word key a two-word key read back stands for.
///
/// # Panics
/// If `bits` is not [`wide_key`] of a key: a key read back wrong.
pub fn narrow_key(bits: u128) -> u64 {
    let k = (bits >> 64) as u64;
    assert_eq!(wide_key(k), bits, "the two-word key of {k} was read back wrong");
    k
}

/// Executes the word-valued `tx` of one-word keys, writing the keys of ops on structures of
/// two-word keys as [`wide_key`]s and the values of ops on structures of byte values as
/// [`encode`]d bytes, and reading their results back as words.
pub fn execute<M: PMem + 'static>(h: &mut Handle<M>, tx: &Transaction) -> Result<Outcome, EngineError> {
    let bytes: Vec<bool> = tx.ops().iter().map(|op| h.values(op.structure).is_ok_and(|v| v == Values::Bytes)).collect();
    let wide: Vec<bool> = tx.ops().iter().map(|op| h.keys(op.structure).is_ok_and(|w| w == KeyWidth::U128)).collect();
    if !bytes.contains(&true) && !wide.contains(&true) {
        return h.execute(tx);
    }
    let mut t = Transaction::new();
    for ((op, &b), &w) in tx.ops().iter().zip(&bytes).zip(&wide) {
        let key = u64::try_from(op.key).expect("the tests speak in one-word keys");
        let op = if w { Op::new(op.kind, op.structure, wide_key(key), op.value) } else { *op };
        match op.kind.writes() {
            Some(true) if b => t.op_bytes(op, &encode(op.value)),
            _ => t.op(op),
        };
    }
    t.sorted(tx.is_sorted());
    h.execute_with(&t, |out, blobs| match out {
        Outcome::Committed { results, txid } => Outcome::Committed {
            results: results.iter().zip(&bytes).map(|(r, &b)| r.map(|w| value_of(b, blobs, w))).collect(),
            txid: *txid,
        },
        aborted => aborted.clone(),
    })
}

/// [`Handle::get_with`] of one-word key `k` (as its [`wide_key`] on a structure of two-word
/// keys), with a byte value read back as a word.
pub fn get<M: PMem + 'static>(h: &mut Handle<M>, s: StructId, k: u64) -> Result<Option<u64>, EngineError> {
    let bytes = h.values(s)? == Values::Bytes;
    let value = move |state: Option<u64>, blobs: &Blobs<'_, M>| state.map(|w| value_of(bytes, blobs, w));
    if h.keys(s)? == KeyWidth::U64 { h.get_with(s, k, value) } else { h.get_with(s, wide_key(k), value) }
}

/// [`Handle::range`] over one-word keys, with two-word keys mapped back and byte values read
/// back as words.
pub fn range<M: PMem + 'static>(
    h: &mut Handle<M>,
    s: StructId,
    r: impl RangeBounds<u64>,
) -> Result<Vec<(u64, u64)>, EngineError> {
    let bytes = h.values(s)? == Values::Bytes;
    range_with(h, s, r, |entries, blobs| entries.into_iter().map(|(k, w)| (k, value_of(bytes, blobs, w))).collect())
}

/// [`Handle::range_with`] over one-word keys, with two-word keys mapped back (values as the
/// engine gives them: words, or blob words).
pub fn range_with<M: PMem + 'static, R>(
    h: &mut Handle<M>,
    s: StructId,
    r: impl RangeBounds<u64>,
    f: impl FnOnce(Vec<(u64, u64)>, &Blobs<'_, M>) -> R,
) -> Result<R, EngineError> {
    snapshot_with(h, s, r, |_, entries, blobs| f(entries, blobs))
}

/// [`Handle::snapshot_with`] over one-word keys, with two-word keys mapped back and byte values
/// read back as words: the snapshot's txid and its entries. A snapshot expired while its values
/// are read gives [`EngineError::SnapshotExpired`], as one expired during the walk does.
///
/// # Panics
/// If a byte value reads back damaged or wrong.
pub fn snapshot<M: PMem + 'static>(
    h: &mut Handle<M>,
    s: StructId,
    r: impl RangeBounds<u64>,
) -> Result<(u64, Vec<(u64, u64)>), EngineError> {
    let bytes = h.values(s)? == Values::Bytes;
    snapshot_with(h, s, r, |txid, entries, blobs| {
        let read = |w| match blobs.to_vec(w) {
            Err(ReadError::Expired { txid }) => Err(EngineError::SnapshotExpired { txid }),
            got => Ok(decode(&got.expect("a test's value reads back whole"))),
        };
        let entries = entries.into_iter().map(|(k, w)| Ok((k, if bytes { read(w)? } else { w })));
        Ok((txid, entries.collect::<Result<_, EngineError>>()?))
    })?
}

/// [`Handle::snapshot_with`] over one-word keys, with two-word keys mapped back (values as the
/// engine gives them: words, or blob words).
pub fn snapshot_with<M: PMem + 'static, R>(
    h: &mut Handle<M>,
    s: StructId,
    r: impl RangeBounds<u64>,
    f: impl FnOnce(u64, Vec<(u64, u64)>, &Blobs<'_, M>) -> R,
) -> Result<R, EngineError> {
    if h.keys(s)? == KeyWidth::U64 {
        return h.snapshot_with(s, r, f);
    }
    // The two-word keys of one-word key k run from k << 64 to k << 64 | u64::MAX.
    let first = |k: &u64| (*k as u128) << 64;
    let last = |k: &u64| first(k) | u64::MAX as u128;
    let lo = match r.start_bound() {
        Bound::Included(k) => Bound::Included(first(k)),
        Bound::Excluded(k) => Bound::Excluded(last(k)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let hi = match r.end_bound() {
        Bound::Included(k) => Bound::Included(last(k)),
        Bound::Excluded(k) => Bound::Excluded(first(k)),
        Bound::Unbounded => Bound::Unbounded,
    };
    h.snapshot_with(s, (lo, hi), |txid, entries: Vec<(u128, u64)>, blobs| {
        f(txid, entries.into_iter().map(|(k, w)| (narrow_key(k), w)).collect(), blobs)
    })
}

/// [`Engine::entries`], with byte values read back as words.
pub fn entries<M: PMem + 'static>(engine: &Engine<M>, s: StructId) -> Result<Vec<(u64, u64)>, EngineError> {
    range(&mut engine.handle()?, s, ..)
}

/// The slab blocks a recovered engine must hold live, no more (a leak) and no fewer: a node
/// per present key, a blob per present key of a structure of byte values whose value fits a
/// slab block (all but the [`LARGE`] ones), and the [`HEADS`].
pub fn live_blocks<M: PMem + 'static>(engine: &Engine<M>, present_keys: u64) -> u64 {
    present_keys + byte_values(engine).filter(|&v| !is_large(v)).count() as u64 + HEADS
}

/// The blob runs a recovered engine must hold live: one per present [`LARGE`] byte value.
pub fn live_runs<M: PMem + 'static>(engine: &Engine<M>) -> u64 {
    byte_values(engine).filter(|&v| is_large(v)).count() as u64
}

/// The words of the present values of every structure of byte values.
fn byte_values<M: PMem + 'static>(engine: &Engine<M>) -> impl Iterator<Item = u64> {
    engine
        .structures()
        .into_iter()
        .filter(|&s| engine.values(s).is_ok_and(|v| v == Values::Bytes))
        .flat_map(|s| entries(engine, s).expect("a scan"))
        .map(|(_, v)| v)
}

//! The key-value store: byte keys and values over one engine structure. See the [crate docs](crate).

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use parking_lot::{Mutex, MutexGuard};
use petra::MAX_OPS;
use petra::mem::{Durability, MmapMem, PMem};
use petra::pool::Pool;
use petra::{
    CheckpointReport, DurabilityPolicy, Engine, Handle, KeyWidth, StructId, StructureKind, Transaction, Values,
};

pub use crate::config::{Config, CreateMode, Order};
use crate::error::{KvError, Result};
use crate::format::{self, Format};
use crate::layout::{self, Bucket, BucketEdit, Placement, Slot, is_bucket, short_key, within};

/// The longest key, in bytes.
pub const MAX_KEY_LEN: usize = 64 << 10;
/// The longest value, in bytes.
pub const MAX_VALUE_LEN: usize = 64 << 20;

/// The store's pool format.
const FORMAT: Format = Format { name: "petra-kv store", magic: u64::from_be_bytes(*b"PETRAKV1"), version: 1 };
/// Locks serialising writers of buckets (long keys) that hash to the same stripe.
const STRIPES: usize = 64;

/// A key-value store. Share it between threads by reference; each thread works through its own
/// [`Session`].
#[derive(Debug)]
pub struct Store<M: PMem + 'static = MmapMem> {
    engine: Engine<M>,
    data: StructId,
    order: Order,
    placement: Placement,
    stripes: Box<[Mutex<()>]>,
}

impl Store<MmapMem> {
    /// Opens or creates the store `config` names. Opening recovers the store after a crash:
    /// every acknowledged write is there, and nothing of any other.
    pub fn open(config: &Config) -> Result<Store> {
        format::open_file(
            config,
            |pool| Store::open_as(pool, Some(config.order), config.durability),
            |pool| Store::create_with(pool, config.order, config.durability),
        )
    }

    /// Closes the file cleanly: what was written since the open is folded into the nodes, the file
    /// synced (`msync`) and marked, and the next open skips recovery. A store dropped without
    /// closing loses nothing a crash would not lose.
    pub fn close(self) -> Result<()> {
        Ok(self.engine.close()?)
    }
}

impl<M: PMem + 'static> Store<M> {
    /// Runs a checkpoint round now ([`Engine::checkpoint`]): what was written is folded into the
    /// store's nodes, so that a recovery reads only what comes after and the descriptors' room
    /// is reused. Sessions go on meanwhile. Rounds also run on their own as the store is written;
    /// `None` if one is running.
    pub fn checkpoint(&self) -> Result<Option<CheckpointReport>> {
        Ok(self.engine.checkpoint()?)
    }

    /// Makes everything written so far survive a power loss, and returns once it does (a
    /// power-safe point, see [`DurabilityPolicy`]; under `Process`, a sync that holds only until
    /// the next write; on a file in memory, such as `/dev/shm`'s, which a power loss takes whole,
    /// nothing). Also reports a background safe point that failed since the last call.
    pub fn sync(&self) -> Result<()> {
        Ok(self.engine.sync()?)
    }

    /// The error of a background safe point that failed since the last call or `sync`, if any
    /// (taken; see [`Engine::safe_point_failure`](petra::Engine::safe_point_failure)): no write
    /// reports it, so a long-running user should look here now and then.
    pub fn safe_point_failure(&self) -> Option<std::io::Error> {
        self.engine.safe_point_failure()
    }

    /// The durability policy in force.
    pub fn durability(&self) -> DurabilityPolicy {
        self.engine.durability()
    }

    /// Makes a store of `order` in a new pool, under the default durability policy.
    pub fn create_in(pool: Pool<M>, order: Order) -> Result<Store<M>> {
        Store::create_with(pool, order, DurabilityPolicy::default())
    }

    /// Makes a store of `order` in a new pool, under the durability policy `durability`.
    pub fn create_with(pool: Pool<M>, order: Order, durability: DurabilityPolicy) -> Result<Store<M>> {
        let kind = match order {
            Order::Sorted => StructureKind::SkipList,
            Order::Unsorted { buckets } => StructureKind::HashMap { buckets },
        };
        let (engine, ids) = format::create(pool, &FORMAT, &[(kind, KeyWidth::U128, Values::Bytes)], durability)?;
        Ok(Store::assemble(engine, ids[0], order))
    }

    /// Opens the store in `pool`, recovering it, under the default durability policy. A pool
    /// whose structures are not a store's is refused before recovery, untouched.
    pub fn open_in(pool: Pool<M>) -> Result<Store<M>> {
        Store::open_as(pool, None, DurabilityPolicy::default())
    }

    /// As [`open_in`](Store::open_in), under the durability policy `durability`.
    pub fn open_with(pool: Pool<M>, durability: DurabilityPolicy) -> Result<Store<M>> {
        Store::open_as(pool, None, durability)
    }

    /// As [`open_in`](Store::open_in), refusing (before recovery, the pool untouched) a store of
    /// another order than `asked`, if given.
    fn open_as(pool: Pool<M>, asked: Option<Order>, durability: DurabilityPolicy) -> Result<Store<M>> {
        let (engine, order, ()) = format::open(
            pool,
            (&FORMAT, durability),
            |shapes| {
                let found = match *shapes {
                    [(StructureKind::SkipList, KeyWidth::U128, Values::Bytes)] => Order::Sorted,
                    [(StructureKind::HashMap { buckets }, KeyWidth::U128, Values::Bytes)] => {
                        Order::Unsorted { buckets }
                    }
                    _ => return Err(format::Rejected::NotOurs("its structures are not a store's")),
                };
                match asked {
                    Some(asked) if asked.name() != found.name() => {
                        Err(format::Rejected::Other(KvError::WrongOrder { found: found.name(), asked: asked.name() }))
                    }
                    _ => Ok(found),
                }
            },
            |contents| check_keys(contents, StructId(1)),
        )?;
        Ok(Store::assemble(engine, StructId(1), order))
    }

    fn assemble(engine: Engine<M>, data: StructId, order: Order) -> Store<M> {
        let stripes = (0..STRIPES).map(|_| Mutex::new(())).collect();
        Store { engine, data, order, placement: order.placement(), stripes }
    }

    /// A session for the calling thread (keep one per thread).
    pub fn session(&self) -> Result<Session<'_, M>> {
        Ok(Session {
            store: self,
            h: self.engine.handle()?,
            tx: Transaction::new(),
            buf: Vec::new(),
            key: Vec::new(),
            slots: Vec::new(),
        })
    }

    /// The store's order.
    pub fn order(&self) -> Order {
        self.order
    }

    /// What a flush and a fence guarantee on the store's memory (persistent memory, the page
    /// cache...): with [`durability`](Store::durability), what survives what.
    pub fn medium(&self) -> Durability {
        self.engine.pool().durability()
    }

    /// Whether power-safe points are kept ([`Engine::keeps_safe_points`]): only on a file on a
    /// disk, under a policy other than `Process`.
    pub fn keeps_safe_points(&self) -> bool {
        self.engine.keeps_safe_points()
    }

    /// The engine underneath (for tools and tests).
    pub fn engine(&self) -> &Engine<M> {
        &self.engine
    }

    /// Gives the engine back (to close its pool, or in tests to crash it).
    pub fn into_engine(self) -> Engine<M> {
        self.engine
    }

    fn stripe(&self, bucket: u128) -> usize {
        let h = (bucket ^ (bucket >> 64)) as u64;
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % STRIPES
    }
}

/// Puts and removes applied together, atomically: after a crash, all of them or none. A key
/// given twice keeps its last change.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    changes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.changes.insert(key.to_vec(), Some(value.to_vec()));
        self
    }

    /// Removes `key` (if present).
    pub fn remove(&mut self, key: &[u8]) -> &mut Self {
        self.changes.insert(key.to_vec(), None);
        self
    }

    /// Changes in the batch.
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// Whether the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// A thread's access to a [`Store`]: every read and write goes through one.
#[derive(Debug)]
pub struct Session<'s, M: PMem + 'static = MmapMem> {
    store: &'s Store<M>,
    h: Handle<M>,
    tx: Transaction,
    buf: Vec<u8>,
    key: Vec<u8>,
    /// The slots of the keys being written, kept for reuse.
    slots: Vec<Slot>,
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(KvError::KeyTooLong { len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}

/// Every engine key of the store's structure `data` must be one its layout makes (see
/// [`layout`](crate::layout)): a short key (length byte at most 15, zeroes past its length) or a
/// bucket (low byte 16). Another one is damage, refused at open: read as a key it would panic or
/// answer wrongly. (A bucket's blob is checked when it is read.)
fn check_keys(contents: &petra::Contents<'_>, data: StructId) -> Result<()> {
    for (bits, word) in contents.entries::<u128>(data) {
        if !layout::is_bucket(bits) && !layout::is_short_key(bits) {
            return Err(KvError::Damaged(petra::error::Damage {
                what: format!(
                    "engine entry {bits:#x} of structure {}: a key that is neither a short key nor a bucket",
                    data.0
                ),
                at: word,
            }));
        }
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(KvError::ValueTooLong { len: value.len(), max: MAX_VALUE_LEN });
    }
    Ok(())
}

/// The engine bounds that hold every key within `lo`..`hi`.
fn engine_bounds(p: Placement, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> (u128, u128) {
    let lo = match lo {
        Bound::Included(k) | Bound::Excluded(k) => p.lower_bound(k),
        Bound::Unbounded => 0,
    };
    let hi = match hi {
        Bound::Included(k) | Bound::Excluded(k) => p.upper_bound(k),
        Bound::Unbounded => u128::MAX,
    };
    (lo, hi)
}

impl<'s, M: PMem + 'static> Session<'s, M> {
    /// The store.
    pub fn store(&self) -> &'s Store<M> {
        self.store
    }

    /// Sets `key` to `value`; durable when it returns.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.apply(&[(key, Some(value))]).map(drop)
    }

    /// Removes `key`; returns whether it was present. Durable when it returns.
    pub fn remove(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.apply(&[(key, None)])? == 1)
    }

    /// Applies `batch` atomically. A batch changes at most 64 entries of the engine: its short
    /// keys (up to 15 bytes) one each, its long keys one per bucket ([`KvError::BatchTooLarge`]).
    pub fn write(&mut self, batch: &Batch) -> Result<()> {
        let changes: Vec<(&[u8], Option<&[u8]>)> =
            batch.changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
        self.apply(&changes).map(drop)
    }

    /// Calls `f` with the value of `key`, borrowed; `None` if absent.
    pub fn get_with<R>(&mut self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        check_key(key)?;
        let slot = self.store.placement.slot(key);
        let (data, bits, buf) = (self.store.data, slot.bits(), &mut self.buf);
        let read = self
            .h
            .get_with(data, bits, |state, blobs| state.map(|w| blobs.read_into(w, buf).map(|()| w)).transpose())?;
        let Some(word) = read.map_err(|e| format::of_read(data, bits, e))? else {
            return Ok(None);
        };
        Ok(match slot {
            Slot::Own(_) => Some(f(&self.buf)),
            Slot::Bucket(_) => bucket(&self.buf, self.store.placement, (data, bits, word))?.get(key).map(f),
        })
    }

    /// The value of `key`, copied; `None` if absent.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, <[u8]>::to_vec)
    }

    /// Whether `key` is present.
    pub fn exists(&mut self, key: &[u8]) -> Result<bool> {
        // A short key's presence needs no value copied.
        check_key(key)?;
        match self.store.placement.slot(key) {
            Slot::Own(bits) => Ok(self.h.get(self.store.data, bits)?.is_some()),
            Slot::Bucket(_) => Ok(self.get_with(key, |_| ())?.is_some()),
        }
    }

    /// Calls `f` with each entry whose key lies within `lo`..`hi`, until it breaks; in key order
    /// in a sorted store, in no particular order in an unsorted one. The entries are one instant's
    /// (a snapshot). `f` runs while the engine keeps the values from being freed: keep it short.
    /// A scan whose `f` is so slow that writers meanwhile fill the engine's
    /// [`snapshot_limit`](petra::EngineConfig::snapshot_limit) (an eighth of the store's
    /// maximum size, of descriptors written and values replaced while it is held) stops with [`KvError::Engine`] holding
    /// [`EngineError::SnapshotExpired`](petra::EngineError::SnapshotExpired): the entries `f`
    /// had were the snapshot's; scan again (in a sorted store, from above the last key `f`
    /// had, if a later instant's entries will do).
    pub fn scan(
        &mut self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        self.walk(lo, hi, true, |k, v| f(k, v.expect("values asked for")))
    }

    /// The number of keys within `lo`..`hi`.
    pub fn count(&mut self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<usize> {
        let mut n = 0;
        self.walk(lo, hi, false, |_, _| {
            n += 1;
            ControlFlow::Continue(())
        })?;
        Ok(n)
    }

    /// The entries within `lo`..`hi`, copied, as an iterator (order as for [`scan`](Session::scan)).
    pub fn iter(&mut self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<std::vec::IntoIter<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.scan(lo, hi, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })?;
        Ok(out.into_iter())
    }

    /// Every entry (pmemkv's `get_all`).
    pub fn get_all(&mut self, f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>) -> Result<()> {
        self.scan(Bound::Unbounded, Bound::Unbounded, f)
    }

    /// The entries with keys greater than `key` (pmemkv's `get_above`).
    pub fn get_above(&mut self, key: &[u8], f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>) -> Result<()> {
        self.scan(Bound::Excluded(key), Bound::Unbounded, f)
    }

    /// The entries with keys less than `key` (pmemkv's `get_below`).
    pub fn get_below(&mut self, key: &[u8], f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>) -> Result<()> {
        self.scan(Bound::Unbounded, Bound::Excluded(key), f)
    }

    /// The entries with keys strictly between `lo` and `hi` (pmemkv's `get_between`).
    pub fn get_between(&mut self, lo: &[u8], hi: &[u8], f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>) -> Result<()> {
        self.scan(Bound::Excluded(lo), Bound::Excluded(hi), f)
    }

    /// The number of keys (pmemkv's `count_all`).
    pub fn count_all(&mut self) -> Result<usize> {
        self.count(Bound::Unbounded, Bound::Unbounded)
    }

    /// The number of keys greater than `key`.
    pub fn count_above(&mut self, key: &[u8]) -> Result<usize> {
        self.count(Bound::Excluded(key), Bound::Unbounded)
    }

    /// The number of keys less than `key`.
    pub fn count_below(&mut self, key: &[u8]) -> Result<usize> {
        self.count(Bound::Unbounded, Bound::Excluded(key))
    }

    /// The number of keys strictly between `lo` and `hi`.
    pub fn count_between(&mut self, lo: &[u8], hi: &[u8]) -> Result<usize> {
        self.count(Bound::Excluded(lo), Bound::Excluded(hi))
    }

    /// Runs the total ops in `self.tx`, then `f` with their results while the byte values they
    /// name cannot be freed.
    fn run<R>(&mut self, f: impl FnMut(&[Option<u64>], &petra::Blobs<'_, M>) -> R) -> Result<R> {
        format::run_total(&mut self.h, &self.tx, f)
    }

    /// Walks the engine entries that can hold keys within `lo`..`hi`, calling `f` with each key
    /// within them and (if `values`) its value.
    fn walk(
        &mut self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        values: bool,
        mut f: impl FnMut(&[u8], Option<&[u8]>) -> ControlFlow<()>,
    ) -> Result<()> {
        for b in [lo, hi] {
            if let Bound::Included(k) | Bound::Excluded(k) = b {
                check_key(k)?;
            }
        }
        let (elo, ehi) = engine_bounds(self.store.placement, lo, hi);
        if elo > ehi {
            return Ok(());
        }
        let (key, buf) = (&mut self.key, &mut self.buf);
        let (data, placement) = (self.store.data, self.store.placement);
        let walked = self.h.range_with::<u128, _>(data, elo..=ehi, |entries, blobs| {
            for (bits, word) in entries {
                let read = |buf: &mut Vec<u8>| blobs.read_into(word, buf).map_err(|e| format::of_read(data, bits, e));
                if is_bucket(bits) {
                    read(buf)?;
                    for (k, v) in bucket(buf, placement, (data, bits, word))?.entries() {
                        if within(k, lo, hi) && f(k, Some(v)).is_break() {
                            return Ok(());
                        }
                    }
                } else {
                    short_key(bits, key);
                    if !within(key, lo, hi) {
                        continue;
                    }
                    let value = if values {
                        read(buf)?;
                        Some(&buf[..])
                    } else {
                        None
                    };
                    if f(key, value).is_break() {
                        return Ok(());
                    }
                }
            }
            Ok::<(), petra::ReadError>(())
        })?;
        Ok(walked?)
    }

    /// Applies `changes` (distinct keys) in one transaction. Returns how many removes found
    /// their key. Every check runs before anything changes.
    fn apply(&mut self, changes: &[(&[u8], Option<&[u8]>)]) -> Result<usize> {
        for (k, v) in changes {
            check_key(k)?;
            if let Some(v) = v {
                check_value(v)?;
            }
        }
        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        slots.extend(changes.iter().map(|(k, _)| self.store.placement.slot(k)));
        let removed = self.apply_at(changes, &slots);
        self.slots = slots;
        removed
    }

    /// [`apply`](Session::apply), with the keys' slots.
    fn apply_at(&mut self, changes: &[(&[u8], Option<&[u8]>)], slots: &[Slot]) -> Result<usize> {
        let (store, data) = (self.store, self.store.data);
        let mut buckets: Vec<u128> =
            slots.iter().filter_map(|s| if let Slot::Bucket(b) = s { Some(*b) } else { None }).collect();
        buckets.sort_unstable();
        buckets.dedup();
        let entries = slots.iter().filter(|s| matches!(s, Slot::Own(_))).count() + buckets.len();
        if entries > MAX_OPS {
            return Err(KvError::BatchTooLarge { entries, max: MAX_OPS });
        }
        // Long keys: read, edit and write back their buckets under the buckets' stripe locks
        // (in stripe order), so that two writers of one bucket do not lose each other's entry.
        let mut stripes: Vec<usize> = buckets.iter().map(|&b| store.stripe(b)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _locks: Vec<MutexGuard<'_, ()>> = stripes.iter().map(|&s| store.stripes[s].lock()).collect();
        let mut removed = 0;
        let mut edits = self.read_buckets(&buckets)?;
        for ((k, v), slot) in changes.iter().zip(slots) {
            if let Slot::Bucket(b) = slot {
                let i = buckets.binary_search(b).expect("every bucket was read");
                removed += (edits[i].set(k, *v) && v.is_none()) as usize;
            }
        }
        let max = store.engine.pool().max_blob_len();
        let mut blobs = Vec::with_capacity(edits.len());
        for e in &edits {
            let len = e.encoded_len() as u64;
            if len > max {
                return Err(KvError::BucketTooLarge { len, max });
            }
            let mut blob = Vec::new();
            if !e.is_empty() {
                e.encode(&mut blob);
            }
            blobs.push(blob);
        }
        self.tx.clear();
        for ((_, v), slot) in changes.iter().zip(slots) {
            if let Slot::Own(bits) = *slot {
                match v {
                    Some(v) => self.tx.put_bytes(data, bits, v),
                    None => self.tx.remove(data, bits),
                };
            }
        }
        for (&b, blob) in buckets.iter().zip(&blobs) {
            if blob.is_empty() {
                self.tx.remove(data, b)
            } else {
                self.tx.put_bytes(data, b, blob)
            };
        }
        // Short removes: the engine's result says whether the key was there (their ops come
        // first, in the order of `changes`).
        let own = || changes.iter().zip(slots).filter(|(_, s)| matches!(s, Slot::Own(_)));
        removed +=
            self.run(|results, _| own().zip(results).filter(|(((_, v), _), r)| v.is_none() && r.is_some()).count())?;
        Ok(removed)
    }

    /// The current contents of `buckets`, for editing (callers hold their stripe locks).
    fn read_buckets(&mut self, buckets: &[u128]) -> Result<Vec<BucketEdit>> {
        if buckets.is_empty() {
            return Ok(Vec::new());
        }
        self.tx.clear();
        for &b in buckets {
            self.tx.get(self.store.data, b);
        }
        let mut buf = std::mem::take(&mut self.buf);
        let (data, placement) = (self.store.data, self.store.placement);
        let edits = self.run(|results, blobs| {
            results
                .iter()
                .zip(buckets)
                .map(|(r, &bits)| match r {
                    Some(word) => {
                        blobs.read_into(*word, &mut buf).map_err(|e| format::of_read(data, bits, e))?;
                        Ok(BucketEdit::of(&bucket(&buf, placement, (data, bits, *word))?))
                    }
                    None => Ok(BucketEdit::default()),
                })
                .collect::<Result<Vec<_>, petra::ReadError>>()
        });
        self.buf = buf;
        Ok(edits??)
    }
}

/// The bucket in `bytes`, the value (word `word`) of engine entry `bits` of structure `data`:
/// damage if it does not parse, or holds a key of another slot.
fn bucket(
    bytes: &[u8],
    placement: Placement,
    (data, bits, word): (StructId, u128, u64),
) -> Result<Bucket<'_>, petra::error::Damage> {
    Bucket::new(bytes).and_then(|b| b.of_slot(placement, bits)).map_err(|why| {
        format::of_entry(
            data,
            bits,
            petra::error::Damage { what: format!("a bucket that does not hold: {why}"), at: word },
        )
    })
}

//! The metric store and its sessions: the pool's structures, the catalog of schemas and sets it
//! keeps in memory, and storing samples. The reads are in `query.rs`, retention in
//! `retention.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use petra::mem::{MmapMem, PMem};
use petra::pool::Pool;
use petra::{
    CheckpointReport, Contents, DurabilityPolicy, Engine, Handle, KeyWidth, StructId, StructureKind, Transaction,
    Values,
};

use super::codec;
use super::schema::{Sample, Schema, SetId, SetInfo};
use crate::config::Config;
use crate::error::{KvError, Result};
use crate::format::{self, Format};

const FORMAT: Format = Format { name: "petra-kv metric store", magic: u64::from_be_bytes(*b"PETRAMS1"), version: 1 };
/// The structures after the meta list (see the [module docs](super)): the catalog, each set's
/// latest timestamp, the history.
pub(super) const CATALOG: StructId = StructId(1);
const LATEST: StructId = StructId(2);
pub(super) const HISTORY: StructId = StructId(3);

/// What storing a sample did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// It is the set's new latest sample.
    New,
    /// The set already has this generation or a newer one: nothing changed.
    Duplicate,
}

/// What the store keeps in memory of a set: its record, its schema and its latest sample.
#[derive(Debug)]
pub(super) struct SetEntry {
    pub(super) id: SetId,
    pub(super) info: SetInfo,
    pub(super) schema: Arc<Schema>,
    /// The latest sample's (timestamp, generation); writers of the set hold this lock.
    /// Shared with the entry that replaces this one when the set's record changes.
    pub(super) latest: Arc<Mutex<Option<(u64, u64)>>>,
    /// Whether the schema has array metrics (see [`codec::decode_into`]).
    pub(super) arrays: bool,
    /// The bytes of a sample's blob ([`codec::sample_len`], summed over the schema's metrics
    /// once: every read checks a blob against it).
    pub(super) sample_len: usize,
}

impl SetEntry {
    fn new(id: SetId, info: SetInfo, schema: Arc<Schema>, latest: Arc<Mutex<Option<(u64, u64)>>>) -> SetEntry {
        let arrays = schema.metrics.iter().any(|m| m.array.is_some());
        let sample_len = codec::sample_len(&schema);
        SetEntry { id, info, schema, latest, arrays, sample_len }
    }
}

/// The schemas and sets of a store: read at open, added to since.
#[derive(Debug, Default)]
pub(super) struct Catalog {
    /// The schemas, by name.
    pub(super) schemas: BTreeMap<String, Arc<Schema>>,
    /// The sets, by id.
    pub(super) sets: Vec<Arc<SetEntry>>,
    /// The sets' ids, by instance name.
    pub(super) by_name: BTreeMap<String, SetId>,
}

/// A metric store. Share it between threads by reference; each thread works through its own
/// [`MetricSession`].
#[derive(Debug)]
pub struct MetricStore<M: PMem + 'static = MmapMem> {
    engine: Engine<M>,
    catalog: RwLock<Catalog>,
    /// Serialises catalog writes (ids are handed out under it).
    pub(super) catalog_write: Mutex<()>,
}

impl MetricStore<MmapMem> {
    /// Opens or creates the metric store `config` names (its `order` is not used).
    pub fn open(config: &Config) -> Result<MetricStore> {
        format::open_file(
            config,
            |pool| MetricStore::open_with(pool, config.durability),
            |pool| MetricStore::create_with(pool, config.durability),
        )
    }

    /// Closes the file cleanly: what was stored since the open is folded into the nodes, the file
    /// synced (`msync`) and marked, and the next open skips recovery.
    pub fn close(self) -> Result<()> {
        Ok(self.engine.close()?)
    }

    /// The pool file.
    pub fn path(&self) -> Option<&Path> {
        self.engine.pool().path()
    }
}

impl<M: PMem + 'static> MetricStore<M> {
    /// Runs a checkpoint round now ([`Engine::checkpoint`]): what was stored is folded into the
    /// store's nodes, so that a recovery reads only what comes after and the descriptors' room
    /// is reused. Sessions go on meanwhile. Rounds also run on their own as samples are stored;
    /// `None` if one is running.
    pub fn checkpoint(&self) -> Result<Option<CheckpointReport>> {
        Ok(self.engine.checkpoint()?)
    }

    /// Makes every sample stored so far survive a power loss, and returns once it does (a
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

    /// Power-safe points made since the open.
    pub fn safe_points(&self) -> u64 {
        self.engine.safe_points()
    }

    /// When the last power-safe point completed, if one did since the open.
    pub fn last_safe_point(&self) -> Option<std::time::Instant> {
        self.engine.last_safe_point()
    }

    /// What a flush and a fence guarantee on the store's memory (persistent memory, the page
    /// cache...): with [`durability`](MetricStore::durability), what survives what.
    pub fn medium(&self) -> petra::mem::Durability {
        self.engine.pool().durability()
    }

    /// Whether power-safe points are kept ([`petra::Engine::keeps_safe_points`]): only on a file
    /// on a disk, under a policy other than `Process`.
    pub fn keeps_safe_points(&self) -> bool {
        self.engine.keeps_safe_points()
    }

    /// Makes an empty metric store in a new pool, under the default durability policy.
    pub fn create_in(pool: Pool<M>) -> Result<MetricStore<M>> {
        MetricStore::create_with(pool, DurabilityPolicy::default())
    }

    /// Makes an empty metric store in a new pool, under the durability policy `durability`.
    pub fn create_with(pool: Pool<M>, durability: DurabilityPolicy) -> Result<MetricStore<M>> {
        let shapes = [
            (StructureKind::SkipList, KeyWidth::U64, Values::Bytes),
            (StructureKind::HashMap { buckets: 1024 }, KeyWidth::U64, Values::Words),
            (StructureKind::SkipList, KeyWidth::U128, Values::Bytes),
        ];
        let (engine, _) = format::create(pool, &FORMAT, &shapes, durability)?;
        Ok(MetricStore { engine, catalog: RwLock::default(), catalog_write: Mutex::new(()) })
    }

    /// Opens the metric store in `pool`, recovering it, and reads its catalog. A catalog that
    /// does not hold together is refused before recovery writes anything.
    pub fn open_in(pool: Pool<M>) -> Result<MetricStore<M>> {
        MetricStore::open_with(pool, DurabilityPolicy::default())
    }

    /// As [`open_in`](MetricStore::open_in), under the durability policy `durability`.
    pub fn open_with(pool: Pool<M>, durability: DurabilityPolicy) -> Result<MetricStore<M>> {
        let (engine, (), catalog) = format::open(
            pool,
            (&FORMAT, durability),
            |shapes| match shapes {
                [
                    (StructureKind::SkipList, KeyWidth::U64, Values::Bytes),
                    (StructureKind::HashMap { .. }, KeyWidth::U64, Values::Words),
                    (StructureKind::SkipList, KeyWidth::U128, Values::Bytes),
                ] => Ok(()),
                _ => Err(format::Rejected::NotOurs("its structures are not a metric store's")),
            },
            read_catalog,
        )?;
        Ok(MetricStore { engine, catalog: RwLock::new(catalog), catalog_write: Mutex::new(()) })
    }

    /// A session for the calling thread (keep one per thread).
    pub fn session(&self) -> Result<MetricSession<'_, M>> {
        Ok(MetricSession {
            store: self,
            h: self.engine.handle()?,
            tx: Transaction::new(),
            words: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// Adds `schema`; one of the same name must be identical ([`KvError::SchemaConflict`]).
    pub fn add_schema(&self, schema: &Schema) -> Result<()> {
        let _w = self.catalog_write.lock();
        if let Some(old) = self.catalog.read().schemas.get(&schema.name) {
            return if **old == *schema { Ok(()) } else { Err(KvError::SchemaConflict(schema.name.clone())) };
        }
        let mut names: Vec<&str> = schema.metrics.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) || schema.metrics.iter().any(|m| m.array == Some(0)) {
            return Err(KvError::BadSchema(format!(
                "schema {} repeats a metric name or has an empty array",
                schema.name
            )));
        }
        let id = self.catalog.read().schemas.len() as u64;
        self.write_record(codec::schema_key(id), &codec::schema_record(schema), false)?;
        self.catalog.write().schemas.insert(schema.name.clone(), Arc::new(schema.clone()));
        Ok(())
    }

    /// Adds the set `info` (its schema must exist) and returns its id. A set of the same
    /// instance name keeps its id: its record (producer, component, job, interval) is replaced if
    /// it differs, so a daemon can declare its sets at every start; a different schema is
    /// refused ([`KvError::SetConflict`]).
    pub fn add_set(&self, info: &SetInfo) -> Result<SetId> {
        let _w = self.catalog_write.lock();
        let (id, old) = {
            let catalog = self.catalog.read();
            match catalog.by_name.get(&info.instance) {
                Some(&id) => (id, Some(Arc::clone(&catalog.sets[id.0 as usize]))),
                None => (SetId(catalog.sets.len() as u32), None),
            }
        };
        if let Some(old) = &old {
            if old.info.schema != info.schema {
                return Err(KvError::SetConflict(info.instance.clone()));
            }
            if old.info == *info {
                return Ok(id);
            }
        }
        let schema = self.catalog.read().schemas.get(&info.schema).cloned();
        let schema = schema.ok_or_else(|| KvError::UnknownSchema(info.schema.clone()))?;
        self.write_record(codec::set_key(id), &codec::set_record(info), old.is_some())?;
        let latest = old.map_or_else(|| Arc::new(Mutex::new(None)), |o| Arc::clone(&o.latest));
        let entry = Arc::new(SetEntry::new(id, info.clone(), schema, latest));
        let mut catalog = self.catalog.write();
        match catalog.sets.get_mut(id.0 as usize) {
            Some(slot) => *slot = entry,
            None => {
                catalog.by_name.insert(info.instance.clone(), id);
                catalog.sets.push(entry);
            }
        }
        Ok(id)
    }

    /// Writes a catalog record: a new one (the key must be free), or a replacement.
    pub(super) fn write_record(&self, key: u64, bytes: &[u8], replace: bool) -> Result<()> {
        let mut tx = Transaction::new();
        if replace {
            tx.put_bytes(CATALOG, key, bytes)
        } else {
            tx.insert_bytes(CATALOG, key, bytes)
        };
        if self.engine.handle()?.execute_decided(&tx, |_, _| ())?.is_err() {
            return Err(KvError::Engine(petra::EngineError::Corrupt(format!("catalog key {key:#x} taken twice"))));
        }
        Ok(())
    }

    /// The catalog, to read.
    pub(super) fn read_catalog(&self) -> RwLockReadGuard<'_, Catalog> {
        self.catalog.read()
    }

    /// Set `set`'s entry.
    pub(super) fn entry(&self, set: SetId) -> Result<Arc<SetEntry>> {
        self.catalog.read().sets.get(set.0 as usize).cloned().ok_or(KvError::UnknownSet(set.0))
    }

    /// The engine underneath (for tools and tests).
    pub fn engine(&self) -> &Engine<M> {
        &self.engine
    }

    /// Gives the engine back (to close its pool, or in tests to crash it).
    pub fn into_engine(self) -> Engine<M> {
        self.engine
    }
}

/// The catalog's records, with each set's latest sample's timestamp and generation, from what
/// recovery found: a record that does not read or parse, a set naming no schema, a missing latest
/// sample or set ids with a gap refuse the store.
fn read_catalog(contents: &Contents<'_>) -> Result<Catalog> {
    let corrupt = |what: String| KvError::Engine(petra::EngineError::Corrupt(what));
    let mut records: Vec<(u64, Vec<u8>)> = Vec::new();
    for (key, word) in contents.entries::<u64>(CATALOG) {
        let mut bytes = Vec::new();
        contents.read_into(word, &mut bytes).map_err(|d| format::of_entry(CATALOG, key as u128, d))?;
        records.push((key, bytes));
    }
    let mut catalog = Catalog::default();
    for (key, bytes) in &records {
        if codec::is_schema_key(*key) {
            let schema = codec::read_schema(bytes).map_err(|e| corrupt(format!("schema record {key:#x}: {e}")))?;
            catalog.schemas.insert(schema.name.clone(), Arc::new(schema));
        }
    }
    let mut buf = Vec::new();
    for (key, bytes) in &records {
        let Some(id) = codec::set_of_key(*key) else { continue };
        let info = codec::read_set(bytes).map_err(|e| corrupt(format!("set record {key:#x}: {e}")))?;
        let schema = catalog
            .schemas
            .get(&info.schema)
            .cloned()
            .ok_or_else(|| corrupt(format!("set {} names no schema", info.instance)))?;
        let latest = match contents.get(LATEST, id.0 as u64) {
            Some(ts) => {
                let key = codec::history_key(id, ts);
                let word = contents
                    .get(HISTORY, key)
                    .ok_or_else(|| corrupt(format!("set {}'s latest sample is missing", info.instance)))?;
                contents.read_into(word, &mut buf).map_err(|d| format::of_entry(HISTORY, key, d))?;
                let len = codec::sample_len(&schema);
                codec::check_len(&buf, len).map_err(|d| format::of_entry(HISTORY, key, d.at(word)))?;
                Some((ts, codec::generation(&buf)))
            }
            None => None,
        };
        if catalog.sets.len() != id.0 as usize {
            return Err(corrupt(format!("set ids are not dense at {}", id.0)));
        }
        catalog.by_name.insert(info.instance.clone(), id);
        catalog.sets.push(Arc::new(SetEntry::new(id, info, schema, Arc::new(Mutex::new(latest)))));
    }
    Ok(catalog)
}

/// Reads the blob of set `set`'s sample at `ts`, which must be `len` bytes long (its schema's
/// sample): damage if it is not.
pub(super) fn read_sample<M: PMem + 'static>(
    h: &mut Handle<M>,
    (set, ts): (SetId, u64),
    len: usize,
    buf: &mut Vec<u8>,
) -> Result<bool> {
    let key = codec::history_key(set, ts);
    let read =
        h.get_with(HISTORY, key, |state, blobs| state.map(|w| blobs.read_into(w, buf).map(|()| w)).transpose())?;
    let Some(word) = read.map_err(|e| format::of_read(HISTORY, key, e))? else {
        return Ok(false);
    };
    codec::check_len(buf, len).map_err(|d| format::of_entry(HISTORY, key, d.at(word)))?;
    Ok(true)
}

/// A thread's access to a [`MetricStore`].
#[derive(Debug)]
pub struct MetricSession<'s, M: PMem + 'static = MmapMem> {
    pub(super) store: &'s MetricStore<M>,
    pub(super) h: Handle<M>,
    pub(super) tx: Transaction,
    /// The blob of the sample being stored, kept for reuse.
    words: Vec<u8>,
    /// The blob of the sample read last, kept for reuse.
    pub(super) buf: Vec<u8>,
}

impl<'s, M: PMem + 'static> MetricSession<'s, M> {
    /// Stores `sample` as set `set`'s latest, and in its history, in one transaction: durable
    /// when it returns. A generation the set already has (or an older one) changes nothing
    /// ([`Stored::Duplicate`]); values that do not fit the schema, and a newer generation that is
    /// not later in time, are refused ([`KvError::BadSample`]).
    pub fn store_sample(&mut self, set: SetId, sample: &Sample) -> Result<Stored> {
        let entry = self.store.entry(set)?;
        entry
            .schema
            .check(&sample.values)
            .map_err(|why| KvError::BadSample { set: entry.info.instance.clone(), why })?;
        let mut latest = entry.latest.lock();
        if let Some((ts, generation)) = *latest {
            if sample.generation <= generation {
                return Ok(Stored::Duplicate);
            }
            if sample.timestamp <= ts {
                let why = format!(
                    "generation {} at {} ns is not later than the latest sample's {ts} ns",
                    sample.generation, sample.timestamp
                );
                return Err(KvError::BadSample { set: entry.info.instance.clone(), why });
            }
        }
        codec::encode(sample, latest.map(|(ts, _)| ts), &mut self.words);
        debug_assert_eq!(self.words.len(), entry.sample_len);
        self.tx.clear().put(LATEST, set.0 as u64, sample.timestamp).insert_bytes(
            HISTORY,
            codec::history_key(set, sample.timestamp),
            &self.words,
        );
        // The history key is new (timestamps increase under the set's lock): the Insert fails only
        // on a history this store did not write.
        if self.h.execute_decided(&self.tx, |_, _| ())?.is_err() {
            let why = format!("a sample at {} ns is already in the history", sample.timestamp);
            return Err(KvError::BadSample { set: entry.info.instance.clone(), why });
        }
        *latest = Some((sample.timestamp, sample.generation));
        Ok(Stored::New)
    }
}

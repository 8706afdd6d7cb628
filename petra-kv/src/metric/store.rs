//! The metric store and its sessions: the pool's structures, the catalog of schemas and sets it
//! keeps in memory, and storing samples.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use petra::mem::{MmapMem, PMem};
use petra::pool::Pool;
use petra::{CheckpointReport, Engine, Handle, KeyWidth, StructId, StructureKind, Transaction, Values};
use serde::{Deserialize, Serialize};

use super::codec;
use super::schema::{Metric, Sample, Schema, SetId, SetInfo};
use crate::config::Config;
use crate::error::{KvError, Result};
use crate::format::{self, Format};

const FORMAT: Format = Format { name: "petra-kv metric store", magic: u64::from_be_bytes(*b"PETRAMS1"), version: 1 };
const CATALOG: StructId = StructId(1);
const LATEST: StructId = StructId(2);
const HISTORY: StructId = StructId(3);
/// Removals per transaction when trimming history.
const TRIM_BATCH: usize = 64;

/// What storing a sample did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// It is the set's new latest sample.
    New,
    /// The set already has this generation or a newer one: nothing changed.
    Duplicate,
}

/// Statistics of one data metric over a window of samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowStats {
    /// The metric.
    pub metric: String,
    /// Samples in the window.
    pub samples: usize,
    /// Least value.
    pub min: f64,
    /// Greatest value.
    pub max: f64,
    /// Mean value.
    pub avg: f64,
    /// Change per second from the first sample of the window to the last (`None` with fewer than
    /// two samples or no time between them).
    pub rate: Option<f64>,
}

/// What the store keeps in memory of a set: its record, its schema and its latest sample.
#[derive(Debug)]
struct SetEntry {
    id: SetId,
    info: SetInfo,
    schema: Arc<Schema>,
    /// The latest sample's (timestamp, generation); writers of the set hold this lock.
    /// Shared with the entry that replaces this one when the set's record changes.
    latest: Arc<Mutex<Option<(u64, u64)>>>,
    /// Whether the schema has array metrics (see [`codec::decode_into`]).
    arrays: bool,
}

impl SetEntry {
    fn new(id: SetId, info: SetInfo, schema: Arc<Schema>, latest: Arc<Mutex<Option<(u64, u64)>>>) -> SetEntry {
        let arrays = schema.metrics.iter().any(|m| m.array.is_some());
        SetEntry { id, info, schema, latest, arrays }
    }
}

#[derive(Debug, Default)]
struct Catalog {
    schemas: BTreeMap<String, Arc<Schema>>,
    sets: Vec<Arc<SetEntry>>,
    by_name: BTreeMap<String, SetId>,
}

/// A metric store. Share it between threads by reference; each thread works through its own
/// [`MetricSession`].
#[derive(Debug)]
pub struct MetricStore<M: PMem + 'static = MmapMem> {
    engine: Engine<M>,
    catalog: RwLock<Catalog>,
    /// Serialises catalog writes (ids are handed out under it).
    catalog_write: Mutex<()>,
}

impl MetricStore<MmapMem> {
    /// Opens or creates the metric store `config` names (its `order` is not used).
    pub fn open(config: &Config) -> Result<MetricStore> {
        format::open_file(config, MetricStore::open_in, MetricStore::create_in)
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

    /// Makes an empty metric store in a new pool.
    pub fn create_in(pool: Pool<M>) -> Result<MetricStore<M>> {
        let shapes = [
            (StructureKind::SkipList, KeyWidth::U64, Values::Bytes),
            (StructureKind::HashMap { buckets: 1024 }, KeyWidth::U64, Values::Words),
            (StructureKind::SkipList, KeyWidth::U128, Values::Bytes),
        ];
        let (engine, _) = format::create(pool, &FORMAT, &shapes)?;
        Ok(MetricStore { engine, catalog: RwLock::default(), catalog_write: Mutex::new(()) })
    }

    /// Opens the metric store in `pool`, recovering it, and reads its catalog.
    pub fn open_in(pool: Pool<M>) -> Result<MetricStore<M>> {
        let (engine, ()) = format::open(pool, &FORMAT, |shapes| match shapes {
            [
                (StructureKind::SkipList, KeyWidth::U64, Values::Bytes),
                (StructureKind::HashMap { .. }, KeyWidth::U64, Values::Words),
                (StructureKind::SkipList, KeyWidth::U128, Values::Bytes),
            ] => Ok(()),
            _ => Err("its structures are not a metric store's"),
        })?;
        let store = MetricStore { engine, catalog: RwLock::default(), catalog_write: Mutex::new(()) };
        store.load_catalog()?;
        Ok(store)
    }

    fn load_catalog(&self) -> Result<()> {
        let mut h = self.engine.handle()?;
        let records: Vec<(u64, Vec<u8>)> = h.range_with(CATALOG, .., |entries: Vec<(u64, u64)>, blobs| {
            entries.into_iter().map(|(k, w)| (k, blobs.to_vec(w))).collect()
        })?;
        let corrupt = |what: String| KvError::Engine(petra::EngineError::Corrupt(what));
        let mut catalog = Catalog::default();
        for (key, bytes) in &records {
            if codec::is_schema_key(*key) {
                let schema = codec::read_schema(bytes).map_err(|e| corrupt(format!("schema record: {e}")))?;
                catalog.schemas.insert(schema.name.clone(), Arc::new(schema));
            }
        }
        let latest: BTreeMap<u64, u64> = h.range(LATEST, ..)?.into_iter().collect();
        let mut buf = Vec::new();
        for (key, bytes) in &records {
            let Some(id) = codec::set_of_key(*key) else { continue };
            let info = codec::read_set(bytes).map_err(|e| corrupt(format!("set record: {e}")))?;
            let schema = catalog
                .schemas
                .get(&info.schema)
                .cloned()
                .ok_or_else(|| corrupt(format!("set {} names no schema", info.instance)))?;
            let latest = match latest.get(&(id.0 as u64)) {
                Some(&ts) => {
                    if !read_sample(&mut h, id, ts, &mut buf)? {
                        return Err(corrupt(format!("set {}'s latest sample is missing", info.instance)));
                    }
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
        *self.catalog.write() = catalog;
        Ok(())
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
    fn write_record(&self, key: u64, bytes: &[u8], replace: bool) -> Result<()> {
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

    /// The set named `instance`.
    pub fn set_id(&self, instance: &str) -> Option<SetId> {
        self.catalog.read().by_name.get(instance).copied()
    }

    /// Every set, by id.
    pub fn sets(&self) -> Vec<(SetId, SetInfo)> {
        self.catalog.read().sets.iter().map(|e| (e.id, e.info.clone())).collect()
    }

    /// The sets of component `id`.
    pub fn sets_by_component(&self, id: u64) -> Vec<SetId> {
        self.catalog.read().sets.iter().filter(|e| e.info.component_id == id).map(|e| e.id).collect()
    }

    /// The sets of job `id`.
    pub fn sets_by_job(&self, id: u64) -> Vec<SetId> {
        self.catalog.read().sets.iter().filter(|e| e.info.job_id == id).map(|e| e.id).collect()
    }

    /// The schema named `name`.
    pub fn schema(&self, name: &str) -> Option<Schema> {
        self.catalog.read().schemas.get(name).map(|s| (**s).clone())
    }

    /// Sets whose producer stopped: a declared interval, and no sample for more than `missed`
    /// intervals before `now` (ns since the epoch). A set that never had a sample is not listed.
    pub fn stale_sets(&self, now: u64, missed: u64) -> Vec<SetId> {
        let catalog = self.catalog.read();
        catalog
            .sets
            .iter()
            .filter(|e| {
                let interval = e.info.interval_ns;
                interval > 0
                    && e.latest.lock().is_some_and(|(ts, _)| now.saturating_sub(ts) > interval.saturating_mul(missed))
            })
            .map(|e| e.id)
            .collect()
    }

    fn entry(&self, set: SetId) -> Result<Arc<SetEntry>> {
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

/// Reads the blob of set `set`'s sample at `ts`.
fn read_sample<M: PMem + 'static>(h: &mut Handle<M>, set: SetId, ts: u64, buf: &mut Vec<u8>) -> Result<bool> {
    format::read_into(h, HISTORY, codec::history_key(set, ts), buf)
}

/// A thread's access to a [`MetricStore`].
#[derive(Debug)]
pub struct MetricSession<'s, M: PMem + 'static = MmapMem> {
    store: &'s MetricStore<M>,
    h: Handle<M>,
    tx: Transaction,
    words: Vec<u8>,
    /// The blob of the sample read last, kept for reuse.
    buf: Vec<u8>,
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
        debug_assert_eq!(self.words.len(), codec::sample_len(&entry.schema));
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

    /// The set's latest sample.
    pub fn latest(&mut self, set: SetId) -> Result<Option<Sample>> {
        let entry = self.store.entry(set)?;
        let Some((ts, _)) = *entry.latest.lock() else { return Ok(None) };
        self.sample_at(&entry, ts)
    }

    /// The sample before the latest one (if the history still has it).
    pub fn previous(&mut self, set: SetId) -> Result<Option<Sample>> {
        let entry = self.store.entry(set)?;
        let Some((ts, _)) = *entry.latest.lock() else { return Ok(None) };
        if !read_sample(&mut self.h, set, ts, &mut self.buf)? {
            return Ok(None);
        }
        match codec::previous_timestamp(&self.buf) {
            Some(previous) => self.sample_at(&entry, previous),
            None => Ok(None),
        }
    }

    fn sample_at(&mut self, entry: &SetEntry, ts: u64) -> Result<Option<Sample>> {
        Ok(read_sample(&mut self.h, entry.id, ts, &mut self.buf)?.then(|| codec::decode(&entry.schema, &self.buf)))
    }

    /// The set's samples with timestamps in `from..=to`, oldest first, until `f` breaks.
    pub fn scan(&mut self, set: SetId, from: u64, to: u64, mut f: impl FnMut(Sample) -> ControlFlow<()>) -> Result<()> {
        self.scan_blobs(set, from, to, |entry, bytes| f(codec::decode(&entry.schema, bytes)))
    }

    /// The set's samples with timestamps in `from..=to`, oldest first.
    pub fn range(&mut self, set: SetId, from: u64, to: u64) -> Result<Vec<Sample>> {
        let mut out = Vec::new();
        self.range_into(set, from, to, &mut out)?;
        Ok(out)
    }

    /// As [`range`](Self::range), into `out` (replacing what it held), reusing the samples it
    /// holds and their values' allocations: once `out` has grown, a query allocates only a few
    /// buffers of its own, not a `Vec` per sample. (A fresh `Vec` per query of 1 000 samples of
    /// 144 metrics allocates and frees 4.6 MB; glibc gives the top of its heap back to the
    /// system after each, and the next query faults it in again, which costs several times
    /// what the store's own work does.)
    pub fn range_into(&mut self, set: SetId, from: u64, to: u64, out: &mut Vec<Sample>) -> Result<()> {
        let mut n = 0;
        let result = self.scan_blobs(set, from, to, |entry, bytes| {
            match out.get_mut(n) {
                Some(sample) => codec::decode_into(&entry.schema, bytes, sample, entry.arrays),
                None => out.push(codec::decode(&entry.schema, bytes)),
            }
            n += 1;
            ControlFlow::Continue(())
        });
        out.truncate(n);
        result
    }

    /// `f` on the set's entry and the blob of each of its samples with timestamps in
    /// `from..=to`, oldest first, until it breaks. The blob is read into the session's buffer.
    fn scan_blobs(
        &mut self,
        set: SetId,
        from: u64,
        to: u64,
        mut f: impl FnMut(&SetEntry, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        let entry = self.store.entry(set)?;
        let sample_bytes = codec::sample_len(&entry.schema);
        let buf = &mut self.buf;
        self.h.range_with(
            HISTORY,
            codec::history_key(set, from)..=codec::history_key(set, to),
            |entries: Vec<(u128, u64)>, blobs| {
                for (i, &(_, w)) in entries.iter().enumerate() {
                    // The next sample's blob loads while this one is decoded.
                    if let Some(&(_, next)) = entries.get(i + 1) {
                        blobs.prefetch(next, sample_bytes);
                    }
                    blobs.read_into(w, buf);
                    if f(&entry, buf).is_break() {
                        return;
                    }
                }
            },
        )?;
        Ok(())
    }

    /// Minimum, maximum, mean and rate of change of each scalar data metric over the samples in
    /// `from..=to`; empty if there are none.
    pub fn window(&mut self, set: SetId, from: u64, to: u64) -> Result<Vec<WindowStats>> {
        let entry = self.store.entry(set)?;
        let metrics: Vec<(usize, &Metric)> =
            entry.schema.metrics.iter().enumerate().filter(|(_, m)| !m.meta && m.array.is_none()).collect();
        let mut stats: Vec<WindowStats> = metrics
            .iter()
            .map(|(_, m)| WindowStats {
                metric: m.name.clone(),
                samples: 0,
                min: f64::INFINITY,
                max: f64::NEG_INFINITY,
                avg: 0.0,
                rate: None,
            })
            .collect();
        // (timestamp, values) of the window's first and last samples.
        type Point = (u64, Vec<f64>);
        let (mut first, mut last): (Option<Point>, Option<Point>) = (None, None);
        self.scan(set, from, to, |s| {
            let xs: Vec<f64> = metrics.iter().map(|(i, _)| s.values[*i].as_f64().expect("a scalar")).collect();
            for (st, &x) in stats.iter_mut().zip(&xs) {
                st.samples += 1;
                st.min = st.min.min(x);
                st.max = st.max.max(x);
                st.avg += x;
            }
            if first.is_none() {
                first = Some((s.timestamp, xs.clone()));
            }
            last = Some((s.timestamp, xs));
            ControlFlow::Continue(())
        })?;
        let Some(((t0, x0), (t1, x1))) = first.zip(last) else { return Ok(Vec::new()) };
        for (i, st) in stats.iter_mut().enumerate() {
            st.avg /= st.samples as f64;
            st.rate = (t1 > t0).then(|| (x1[i] - x0[i]) / ((t1 - t0) as f64 / 1e9));
        }
        Ok(stats)
    }

    /// Removes the set's samples older than `before` (ns) and, if `keep` is given, all but the
    /// newest `keep`; the latest sample always stays. Returns how many were removed.
    pub fn trim(&mut self, set: SetId, before: u64, keep: Option<usize>) -> Result<usize> {
        let entry = self.store.entry(set)?;
        // Hold the set: no sample arrives while the history is cut.
        let latest = entry.latest.lock();
        let Some((latest_ts, _)) = *latest else { return Ok(0) };
        let older: Vec<u128> = self
            .h
            .range(HISTORY, codec::history_key(set, 0)..codec::history_key(set, latest_ts))?
            .into_iter()
            .map(|(k, _): (u128, u64)| k)
            .collect();
        // `older` excludes the latest: keeping `keep` in all keeps `keep - 1` of these.
        let by_count = keep.map_or(0, |k| older.len().saturating_sub(k.saturating_sub(1)));
        let by_age = older.iter().take_while(|&&k| codec::history_timestamp(k) < before).count();
        let doomed = &older[..by_count.max(by_age)];
        for chunk in doomed.chunks(TRIM_BATCH) {
            self.tx.clear();
            for &k in chunk {
                self.tx.remove(HISTORY, k);
            }
            format::run_total(&mut self.h, &self.tx, |_, _| ())?;
        }
        Ok(doomed.len())
    }
}

//! `petra-bench kv`: pmemkv_bench's workloads on a key-value store behind one trait
//! ([`KvTarget`]): the petra-kv [`Store`], sorted or unsorted, and redb as a baseline.
//!
//! Keys are `key_size` bytes as pmemkv_bench makes them: the key number big-endian in the first 8
//! bytes (so the key order is the number order), `'0'` padding after; values are slices of one
//! random buffer. Each workload runs on the store the previous ones left, as in pmemkv_bench, on
//! `threads` threads, each with its own session; a workload's operations are shared out between
//! them (the sequential ones by disjoint key ranges) and its time is the wall time of all.
//!
//! - `fillseq`, `fillrandom`, `overwrite`: puts, in key order or at random keys.
//! - `txfillrandom`: random puts in atomic batches of `tx_size` (one transaction each).
//! - `readseq`: each thread scans from the first key; `readrandom`, `readmissing` (keys above the
//!   range): gets.
//! - `deleteseq`, `deleterandom`: removes.
//! - `readrandomwriterandom`: every thread gets (`readwritepercent` percent of its operations) or
//!   puts, at random keys.
//! - `readwhilewriting`: one thread puts at random keys for as long as the others read at random
//!   keys; only the reads are counted (with one thread, that thread reads while nothing writes).

use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use petra::pool::Mapping;
use petra_kv::{Batch, Config, CreateMode, Order, Session, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redb::{ReadableDatabase, ReadableTable};

use crate::cli::{progress_bar, scratch, wrote};
use crate::report::KvRow;

/// The workloads, by pmemkv_bench's names.
pub const WORKLOADS: [&str; 11] = [
    "fillseq",
    "fillrandom",
    "overwrite",
    "txfillrandom",
    "readseq",
    "readrandom",
    "readmissing",
    "deleteseq",
    "deleterandom",
    "readrandomwriterandom",
    "readwhilewriting",
];

/// A key-value store a benchmark drives: shared by the threads, each through its own session.
pub trait KvTarget: Sync {
    /// A thread's access.
    type Session<'a>: KvSession
    where
        Self: 'a;

    /// A session for the calling thread.
    fn session(&self) -> Result<Self::Session<'_>, String>;

    /// Closes the store, making everything durable its durability promises.
    fn close(self) -> Result<(), String>;
}

/// What a scan calls with each entry; it breaks to stop the scan.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// One thread's operations on a [`KvTarget`].
pub trait KvSession {
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String>;
    /// Sets key `i` to `values[i]` for every `i`, atomically.
    /// The keys are `keys` cut into `values.len()` slices of equal length.
    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<(), String>;
    /// The length of `key`'s value, if present (read through a borrow where the store allows it).
    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>, String>;
    /// Removes `key`; whether it was present.
    fn remove(&mut self, key: &[u8]) -> Result<bool, String>;
    /// Calls `f` with the entries in key order (the store's order) from the first, until it breaks.
    fn scan(&mut self, f: &mut Visit<'_>) -> Result<(), String>;
}

/// The stores `petra-bench kv` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// A petra-kv store of this order.
    Petra(Order),
    /// redb, each put or batch one write transaction committed with this durability.
    Redb(RedbDurability),
}

/// redb's commit durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedbDurability {
    /// Commits are not persisted (`Durability::None`).
    None,
    /// Commits are persisted when they return (`Durability::Immediate`: fsync).
    Immediate,
}

impl RedbDurability {
    /// redb's setting.
    pub fn redb(self) -> redb::Durability {
        match self {
            RedbDurability::None => redb::Durability::None,
            RedbDurability::Immediate => redb::Durability::Immediate,
        }
    }
}

impl Engine {
    /// Parses an engine name: `sorted`, `unsorted` (a hash map of `buckets` buckets), `redb-none`
    /// or `redb-immediate`.
    pub fn parse(name: &str, buckets: u64) -> Result<Engine, String> {
        Ok(match name {
            "sorted" => Engine::Petra(Order::Sorted),
            "unsorted" => Engine::Petra(Order::Unsorted { buckets: buckets.max(1) }),
            "redb-none" => Engine::Redb(RedbDurability::None),
            "redb-immediate" => Engine::Redb(RedbDurability::Immediate),
            other => {
                return Err(format!("unknown engine {other:?}: use sorted, unsorted, redb-none or redb-immediate"));
            }
        })
    }

    /// The engine's name, as parsed.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Petra(Order::Sorted) => "sorted",
            Engine::Petra(Order::Unsorted { .. }) => "unsorted",
            Engine::Redb(RedbDurability::None) => "redb-none",
            Engine::Redb(RedbDurability::Immediate) => "redb-immediate",
        }
    }
}

/// One run's settings.
#[derive(Debug, Clone)]
pub struct KvCase {
    /// Keys written by the fill workloads, and the key range.
    pub num: u64,
    /// Operations of the read workloads.
    pub reads: u64,
    /// Threads running each workload.
    pub threads: usize,
    /// Bytes per key (at least 8).
    pub key_size: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// Share of reads in `readrandomwriterandom`, percent.
    pub read_write_percent: u32,
    /// Puts per batch in `txfillrandom`.
    pub tx_size: usize,
    /// The store.
    pub engine: Engine,
    /// Seed of the random keys and values.
    pub seed: u64,
    /// Record each operation's latency (for percentiles).
    pub histogram: bool,
    /// Skip flushes and fences (petra-kv only: what durability costs; nothing is durable).
    pub volatile: bool,
}

/// One workload's result.
#[derive(Debug, Clone)]
pub struct KvResult {
    /// The workload's name.
    pub name: String,
    /// Operations done (counted ones: the reads of `readwhilewriting`).
    pub ops: u64,
    /// Seconds taken.
    pub secs: f64,
    /// Bytes of keys and values moved by the counted operations.
    pub bytes: u64,
    /// Of the reads and removes, how many found their key.
    pub found: u64,
    /// Per-operation latencies in microseconds, sorted (empty without `histogram`).
    pub latencies: Vec<f64>,
}

impl KvResult {
    /// Microseconds per operation (wall time over operations, as pmemkv_bench prints it).
    pub fn micros_per_op(&self) -> f64 {
        self.secs * 1e6 / self.ops.max(1) as f64
    }

    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }

    /// MB/s of keys and values.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }

    /// The `p`th percentile latency (microseconds), if recorded.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let n = self.latencies.len();
        (n > 0).then(|| self.latencies[((n as f64 * p / 100.0) as usize).min(n - 1)])
    }
}

/// pmemkv_bench's (db_bench's) key: the number big-endian in the first 8 bytes, `'0'` after.
fn key(buf: &mut Vec<u8>, size: usize, n: u64) {
    buf.clear();
    buf.extend_from_slice(&n.to_be_bytes());
    buf.resize(size, b'0');
}

/// Checks a case and its workloads before anything is created.
pub fn check(case: &KvCase, workloads: &[String]) -> Result<(), String> {
    if case.key_size < 8 {
        return Err(format!("key size {} is below 8 bytes", case.key_size));
    }
    if let Some(w) = workloads.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
        return Err(format!("unknown benchmark {w:?}: use {}", WORKLOADS.join(", ")));
    }
    if case.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if case.read_write_percent > 100 {
        return Err(format!("--readwritepercent {} is above 100", case.read_write_percent));
    }
    if case.tx_size == 0 || case.tx_size > 64 {
        return Err(format!("--tx_size {} is outside 1 to 64 (a batch's engine entries)", case.tx_size));
    }
    if case.volatile && matches!(case.engine, Engine::Redb(_)) {
        return Err("--volatile is petra-kv's mode: for redb, use redb-none".into());
    }
    Ok(())
}

/// Runs `workloads` in order on a new store at `path` (which must not exist), of `(size, max)`
/// bytes (size 0: [`START_BYTES`](crate::START_BYTES)), handing each result to `done` as it finishes.
pub fn run_case(
    case: &KvCase,
    workloads: &[String],
    path: &Path,
    (size, max_size): (u64, u64),
    done: impl FnMut(&KvResult),
) -> Result<Vec<KvResult>, String> {
    check(case, workloads)?;
    match case.engine {
        Engine::Petra(order) => {
            let mapping = Mapping { volatile: case.volatile, ..Mapping::default() };
            let size = if size == 0 { crate::START_BYTES } else { size };
            let max_size = max_size.max(size);
            let config = Config { create: CreateMode::Create, order, size, max_size, mapping, ..Config::new(path) };
            run_on(Store::open(&config).map_err(|e| e.to_string())?, case, workloads, done)
        }
        Engine::Redb(durability) => run_on(Redb::create(path, durability)?, case, workloads, done),
    }
}

/// Runs `workloads` in order on `target`, handing each result to `done` as it finishes, then
/// closes it.
pub fn run_on<T: KvTarget>(
    target: T,
    case: &KvCase,
    workloads: &[String],
    mut done: impl FnMut(&KvResult),
) -> Result<Vec<KvResult>, String> {
    let mut rng = StdRng::seed_from_u64(case.seed);
    let values: Vec<u8> = (0..case.value_size + 4096).map(|_| rng.random()).collect();
    let mut results = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        let r = workload(&target, case, w, &values, case.seed.wrapping_add(1 + i as u64 * 1000))?;
        done(&r);
        results.push(r);
    }
    target.close()?;
    Ok(results)
}

/// What one thread did.
#[derive(Default)]
struct Tally {
    ops: u64,
    found: u64,
    bytes: u64,
    latencies: Vec<f64>,
}

/// Runs workload `name` on `threads` threads and merges what they did.
fn workload<T: KvTarget>(target: &T, case: &KvCase, name: &str, values: &[u8], seed: u64) -> Result<KvResult, String> {
    let threads = case.threads;
    // readwhilewriting on more than one thread: thread 0 writes while the others read.
    let writer = name == "readwhilewriting" && threads > 1;
    let readers_left = AtomicUsize::new(threads - writer as usize);
    let start = Instant::now();
    let tallies: Vec<Result<Tally, String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let readers_left = &readers_left;
                scope.spawn(move || {
                    let rng = StdRng::seed_from_u64(seed + t as u64);
                    let s = target.session();
                    if writer && t == 0 {
                        let mut w = Worker { case, values, rng, part: 0, parts: 1 };
                        return s.and_then(|mut s| w.write_while(&mut s, readers_left)).map(|()| Tally::default());
                    }
                    // The readers share the operations out: thread 0 is the writer, if any.
                    let (part, parts) = (t - writer as usize, threads - writer as usize);
                    let mut w = Worker { case, values, rng, part, parts };
                    let out = s.and_then(|mut s| w.run(&mut s, name));
                    // Relaxed: a count to stop by, publishing nothing.
                    readers_left.fetch_sub(1, Ordering::Relaxed);
                    out
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err(format!("{name}: a thread panicked")))).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut all = Tally::default();
    for t in tallies {
        let t = t.map_err(|e| format!("{name}: {e}"))?;
        all.ops += t.ops;
        all.found += t.found;
        all.bytes += t.bytes;
        all.latencies.extend(t.latencies);
    }
    all.latencies.sort_by(f64::total_cmp);
    Ok(KvResult { name: name.into(), ops: all.ops, secs, bytes: all.bytes, found: all.found, latencies: all.latencies })
}

/// One thread of a workload.
struct Worker<'a> {
    case: &'a KvCase,
    values: &'a [u8],
    rng: StdRng,
    /// This thread's part of the operations, of `parts`.
    part: usize,
    parts: usize,
}

impl Worker<'_> {
    /// This thread's share of `total` operations: `[from, to)`.
    fn share(&self, total: u64) -> (u64, u64) {
        let (part, parts) = (self.part as u64, self.parts as u64);
        (total * part / parts, total * (part + 1) / parts)
    }

    fn value(&mut self) -> &[u8] {
        let at = self.rng.random_range(0..4096);
        &self.values[at..at + self.case.value_size]
    }

    fn random_key(&mut self, k: &mut Vec<u8>) {
        let n = self.rng.random_range(0..self.case.num.max(1));
        key(k, self.case.key_size, n);
    }

    fn run<S: KvSession>(&mut self, s: &mut S, name: &str) -> Result<Tally, String> {
        let (ks, vs) = (self.case.key_size as u64, self.case.value_size as u64);
        let mut tally = Tally::default();
        if name == "readseq" {
            let (from, to) = self.share(self.case.reads);
            let mut n = 0;
            let want = to - from;
            if want > 0 {
                s.scan(&mut |k, v| {
                    n += 1;
                    tally.found += 1;
                    tally.bytes += (k.len() + v.len()) as u64;
                    if n >= want { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
                })?;
            }
            tally.ops = n;
            return Ok(tally);
        }
        let total = match name {
            "readrandom" | "readmissing" | "readwhilewriting" => self.case.reads,
            _ => self.case.num,
        };
        let (from, to) = self.share(total);
        let mut k = Vec::with_capacity(self.case.key_size);
        // A batch's keys back to back, and its values: kept for reuse.
        let (mut batch_keys, mut batch_values) = (Vec::new(), Vec::with_capacity(self.case.tx_size));
        let mut i = from;
        while i < to {
            let t = self.case.histogram.then(Instant::now);
            let mut done = 1;
            match name {
                "fillseq" => {
                    key(&mut k, self.case.key_size, i);
                    s.put(&k, self.value())?;
                    tally.bytes += ks + vs;
                }
                "fillrandom" | "overwrite" => {
                    self.random_key(&mut k);
                    s.put(&k, self.value())?;
                    tally.bytes += ks + vs;
                }
                "txfillrandom" => {
                    done = (to - i).min(self.case.tx_size as u64);
                    batch_keys.clear();
                    batch_values.clear();
                    for _ in 0..done {
                        self.random_key(&mut k);
                        batch_keys.extend_from_slice(&k);
                        let at = self.rng.random_range(0..4096);
                        batch_values.push(&self.values[at..at + self.case.value_size]);
                    }
                    s.put_all(&batch_keys, &batch_values)?;
                    tally.bytes += done * (ks + vs);
                }
                "readrandom" | "readwhilewriting" => {
                    self.random_key(&mut k);
                    self.read(s, &k, &mut tally)?;
                }
                "readmissing" => {
                    let n = self.case.num + self.rng.random_range(0..self.case.num.max(1));
                    key(&mut k, self.case.key_size, n);
                    self.read(s, &k, &mut tally)?;
                }
                "deleteseq" => {
                    key(&mut k, self.case.key_size, i);
                    tally.found += s.remove(&k)? as u64;
                    tally.bytes += ks;
                }
                "deleterandom" => {
                    self.random_key(&mut k);
                    tally.found += s.remove(&k)? as u64;
                    tally.bytes += ks;
                }
                "readrandomwriterandom" => {
                    self.random_key(&mut k);
                    if self.rng.random_range(0..100) < self.case.read_write_percent {
                        self.read(s, &k, &mut tally)?;
                    } else {
                        s.put(&k, self.value())?;
                        tally.bytes += ks + vs;
                    }
                }
                other => return Err(format!("unknown benchmark {other:?}")),
            }
            if let Some(t) = t {
                tally.latencies.push(t.elapsed().as_secs_f64() * 1e6);
            }
            tally.ops += done;
            i += done;
        }
        Ok(tally)
    }

    fn read<S: KvSession>(&mut self, s: &mut S, k: &[u8], tally: &mut Tally) -> Result<(), String> {
        tally.bytes += k.len() as u64;
        if let Some(len) = s.get_len(k)? {
            tally.found += 1;
            tally.bytes += len as u64;
        }
        Ok(())
    }

    /// `readwhilewriting`'s writer: random puts until the readers are done.
    fn write_while<S: KvSession>(&mut self, s: &mut S, readers_left: &AtomicUsize) -> Result<(), String> {
        let mut k = Vec::with_capacity(self.case.key_size);
        // Relaxed: a count to stop by, guarding no data.
        while readers_left.load(Ordering::Relaxed) > 0 {
            self.random_key(&mut k);
            s.put(&k, self.value())?;
        }
        Ok(())
    }
}

impl KvTarget for Store {
    type Session<'a> = Session<'a>;

    fn session(&self) -> Result<Session<'_>, String> {
        Store::session(self).map_err(|e| e.to_string())
    }

    fn close(self) -> Result<(), String> {
        Store::close(self).map_err(|e| e.to_string())
    }
}

impl KvSession for Session<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        Session::put(self, key, value).map_err(|e| e.to_string())
    }

    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<(), String> {
        let mut batch = Batch::new();
        for (k, v) in keys.chunks(keys.len() / values.len().max(1)).zip(values) {
            batch.put(k, v);
        }
        self.write(&batch).map_err(|e| e.to_string())
    }

    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>, String> {
        self.get_with(key, |v| v.len()).map_err(|e| e.to_string())
    }

    fn remove(&mut self, key: &[u8]) -> Result<bool, String> {
        Session::remove(self, key).map_err(|e| e.to_string())
    }

    fn scan(&mut self, f: &mut Visit<'_>) -> Result<(), String> {
        Session::scan(self, Bound::Unbounded, Bound::Unbounded, f).map_err(|e| e.to_string())
    }
}

/// redb's table of the benchmark.
const TABLE: redb::TableDefinition<'static, &[u8], &[u8]> = redb::TableDefinition::new("kv");

/// A redb database whose write transactions commit with one durability: the baseline's access
/// to it, for `kv` and `metrics`.
#[derive(Debug)]
pub(crate) struct RedbDb {
    db: redb::Database,
    durability: redb::Durability,
}

/// A redb error as the benchmarks report it.
pub(crate) fn redb_err(e: impl std::fmt::Display) -> String {
    format!("redb: {e}")
}

impl RedbDb {
    /// Creates a database at `path`.
    pub(crate) fn create(path: &Path, durability: RedbDurability) -> Result<RedbDb, String> {
        Ok(RedbDb { db: redb::Database::create(path).map_err(redb_err)?, durability: durability.redb() })
    }

    /// `f` in one write transaction, committed with the database's durability.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&redb::WriteTransaction) -> Result<R, String>) -> Result<R, String> {
        let mut tx = self.db.begin_write().map_err(redb_err)?;
        tx.set_durability(self.durability).map_err(redb_err)?;
        let r = f(&tx)?;
        tx.commit().map_err(redb_err)?;
        Ok(r)
    }

    /// `f` in one read transaction.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<R, String>) -> Result<R, String> {
        f(&self.db.begin_read().map_err(redb_err)?)
    }

    /// A last durable commit: what `None` commits left in memory reaches the file.
    pub(crate) fn close(self) -> Result<(), String> {
        RedbDb { durability: redb::Durability::Immediate, ..self }.write(|_| Ok(()))
    }
}

/// redb as a [`KvTarget`]: each put, remove or batch one write transaction (redb runs one at a
/// time), each get and scan one read transaction.
#[derive(Debug)]
pub struct Redb {
    db: RedbDb,
}

impl Redb {
    /// Creates a database at `path` with its table.
    pub fn create(path: &Path, durability: RedbDurability) -> Result<Redb, String> {
        let db = RedbDb::create(path, durability)?;
        db.write(|t| t.open_table(TABLE).map(drop).map_err(redb_err))?;
        Ok(Redb { db })
    }

    fn write<R>(
        &self,
        f: impl FnOnce(&mut redb::Table<'_, &'static [u8], &'static [u8]>) -> Result<R, String>,
    ) -> Result<R, String> {
        self.db.write(|tx| f(&mut tx.open_table(TABLE).map_err(redb_err)?))
    }

    fn read<R>(
        &self,
        f: impl FnOnce(redb::ReadOnlyTable<&'static [u8], &'static [u8]>) -> Result<R, String>,
    ) -> Result<R, String> {
        self.db.read(|tx| f(tx.open_table(TABLE).map_err(redb_err)?))
    }
}

impl KvTarget for Redb {
    type Session<'a> = &'a Redb;

    fn session(&self) -> Result<&Redb, String> {
        Ok(self)
    }

    fn close(self) -> Result<(), String> {
        self.db.close()
    }
}

impl KvSession for &Redb {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.write(|t| t.insert(key, value).map(drop).map_err(redb_err))
    }

    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<(), String> {
        self.write(|t| {
            for (k, v) in keys.chunks(keys.len() / values.len().max(1)).zip(values) {
                t.insert(k, *v).map_err(redb_err)?;
            }
            Ok(())
        })
    }

    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>, String> {
        self.read(|t| Ok(t.get(key).map_err(redb_err)?.map(|v| v.value().len())))
    }

    fn remove(&mut self, key: &[u8]) -> Result<bool, String> {
        self.write(|t| Ok(t.remove(key).map_err(redb_err)?.is_some()))
    }

    fn scan(&mut self, f: &mut Visit<'_>) -> Result<(), String> {
        self.read(|t| {
            for entry in t.iter().map_err(redb_err)? {
                let (k, v) = entry.map_err(redb_err)?;
                if f(k.value(), v.value()).is_break() {
                    break;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    /// A store in a `BTreeMap` that counts what the workloads ask of it.
    #[derive(Default)]
    struct Model {
        map: Mutex<BTreeMap<Vec<u8>, usize>>,
        /// Key number -> puts of it.
        puts: Mutex<BTreeMap<u64, u64>>,
        /// Sizes of the batches.
        batches: Mutex<Vec<usize>>,
        /// Key numbers read.
        gets: Mutex<Vec<u64>>,
        removes: Mutex<u64>,
    }

    fn number(key: &[u8]) -> u64 {
        u64::from_be_bytes(key[..8].try_into().unwrap())
    }

    impl KvTarget for Model {
        type Session<'a> = &'a Model;

        fn session(&self) -> Result<&Model, String> {
            Ok(self)
        }

        fn close(self) -> Result<(), String> {
            Ok(())
        }
    }

    impl KvSession for &Model {
        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
            self.map.lock().unwrap().insert(key.to_vec(), value.len());
            *self.puts.lock().unwrap().entry(number(key)).or_default() += 1;
            Ok(())
        }

        fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<(), String> {
            self.batches.lock().unwrap().push(values.len());
            for (k, v) in keys.chunks(keys.len() / values.len()).zip(values) {
                self.put(k, v)?;
            }
            Ok(())
        }

        fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>, String> {
            self.gets.lock().unwrap().push(number(key));
            Ok(self.map.lock().unwrap().get(key).copied())
        }

        fn remove(&mut self, key: &[u8]) -> Result<bool, String> {
            *self.removes.lock().unwrap() += 1;
            Ok(self.map.lock().unwrap().remove(key).is_some())
        }

        fn scan(&mut self, f: &mut Visit<'_>) -> Result<(), String> {
            let value = [0u8; 128];
            for (k, &len) in self.map.lock().unwrap().iter() {
                if f(k, &value[..len]).is_break() {
                    break;
                }
            }
            Ok(())
        }
    }

    fn case(num: u64, threads: usize) -> KvCase {
        KvCase {
            num,
            reads: num,
            threads,
            key_size: 16,
            value_size: 100,
            read_write_percent: 70,
            tx_size: 8,
            engine: Engine::Petra(Order::Sorted),
            seed: 7,
            histogram: true,
            volatile: false,
        }
    }

    fn run_model(case: &KvCase, workloads: &[&str]) -> (Model, Vec<KvResult>) {
        let model = Model::default();
        let workloads: Vec<String> = workloads.iter().map(|w| w.to_string()).collect();
        check(case, &workloads).unwrap();
        let values: Vec<u8> = vec![1; case.value_size + 4096];
        let results = workloads.iter().map(|w| workload(&model, case, w, &values, case.seed).unwrap()).collect();
        (model, results)
    }

    #[test]
    fn fillseq_puts_every_key_once_over_the_threads_and_reads_find_them_all() {
        let c = case(10_000, 3);
        let (model, r) = run_model(&c, &["fillseq", "readseq", "readrandom", "readmissing"]);
        let puts = model.puts.lock().unwrap();
        assert_eq!(puts.len(), 10_000);
        assert!(puts.iter().all(|(&k, &n)| k < 10_000 && n == 1));
        let counted: Vec<(&str, u64, u64)> = r.iter().map(|r| (r.name.as_str(), r.ops, r.found)).collect();
        assert_eq!(
            counted,
            [
                ("fillseq", 10_000, 0),
                ("readseq", 10_000, 10_000),
                ("readrandom", 10_000, 10_000),
                ("readmissing", 10_000, 0)
            ]
        );
        // Missing keys are above the range; per-op latencies were kept for every timed op.
        let gets = model.gets.lock().unwrap();
        assert!(gets[..10_000].iter().all(|&k| k < 10_000) && gets[10_000..].iter().all(|&k| k >= 10_000));
        assert_eq!(r[2].latencies.len(), 10_000);
    }

    #[test]
    fn random_keys_are_uniform_over_the_range() {
        let c = case(100_000, 2);
        let (model, _) = run_model(&c, &["fillrandom"]);
        let mut deciles = [0u64; 10];
        for (&k, &n) in model.puts.lock().unwrap().iter() {
            assert!(k < 100_000);
            deciles[(k / 10_000) as usize] += n;
        }
        assert_eq!(deciles.iter().sum::<u64>(), 100_000);
        assert!(deciles.iter().all(|&d| (9_500..=10_500).contains(&d)), "{deciles:?}");
    }

    #[test]
    fn readrandomwriterandom_reads_its_share() {
        let c = case(20_000, 2);
        let (model, r) = run_model(&c, &["readrandomwriterandom"]);
        let gets = model.gets.lock().unwrap().len() as f64;
        let puts = model.puts.lock().unwrap().values().sum::<u64>() as f64;
        assert_eq!(gets + puts, 20_000.0);
        assert!((gets / 20_000.0 - 0.70).abs() < 0.02, "{gets} reads of 20 000");
        assert_eq!(r[0].ops, 20_000);
    }

    #[test]
    fn txfillrandom_writes_batches_of_tx_size() {
        let c = case(1_000, 2);
        let (model, r) = run_model(&c, &["txfillrandom"]);
        let batches = model.batches.lock().unwrap();
        // Each thread's 500 puts: 62 batches of 8 and one of 4.
        assert_eq!(batches.iter().sum::<usize>(), 1_000);
        assert_eq!(batches.iter().filter(|&&b| b == 8).count(), 124);
        assert_eq!(batches.iter().filter(|&&b| b == 4).count(), 2);
        assert_eq!((r[0].ops, r[0].latencies.len()), (1_000, 126));
    }

    #[test]
    fn readwhilewriting_counts_the_readers_reads_only() {
        let c = case(5_000, 3);
        let (model, r) = run_model(&c, &["fillseq", "readwhilewriting"]);
        assert_eq!(r[1].ops, 5_000);
        assert_eq!(model.gets.lock().unwrap().len(), 5_000);
        // The writer overwrote keys of the range only.
        assert!(model.puts.lock().unwrap().keys().all(|&k| k < 5_000));
    }

    #[test]
    fn deletes_remove_what_the_fill_put() {
        let c = case(2_000, 2);
        let (model, r) = run_model(&c, &["fillseq", "deleteseq", "deleterandom"]);
        assert_eq!((r[1].found, r[2].found), (2_000, 0));
        assert_eq!(*model.removes.lock().unwrap(), 4_000);
        assert!(model.map.lock().unwrap().is_empty());
    }
}

/// pmemkv_bench's workloads on the key-value store (petra-kv) or on redb, run in the order
/// given on one store per engine. Prints pmemkv_bench's CSV columns after the engine and
/// thread count: benchmark, micros/op (wall time over operations), ops/sec, MB/s (keys and
/// values moved), found (reads and removes that found their key), and with --histogram the
/// 50th, 99th and 99.9th percentile latencies in microseconds.
#[derive(Debug, clap::Args)]
pub struct KvArgs {
    /// Workloads, comma-separated: fillseq, fillrandom, overwrite, txfillrandom, readseq,
    /// readrandom, readmissing, deleteseq, deleterandom, readrandomwriterandom, readwhilewriting.
    #[arg(long, value_delimiter = ',', default_values_t = ["fillrandom".to_string(), "readrandom".to_string()])]
    benchmarks: Vec<String>,
    /// Keys of the fill workloads, and the key range.
    #[arg(long, default_value_t = 1_000_000)]
    num: u64,
    /// Operations of the read workloads (default: --num).
    #[arg(long)]
    reads: Option<u64>,
    /// Threads running each workload, each with its own session; the operations are shared out.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Bytes per key (at least 8).
    #[arg(long = "key_size", default_value_t = 8)]
    key_size: usize,
    /// Bytes per value.
    #[arg(long = "value_size", default_value_t = 100)]
    value_size: usize,
    /// Share of reads in readrandomwriterandom, percent.
    #[arg(long = "readwritepercent", default_value_t = 90)]
    readwritepercent: u32,
    /// Puts per atomic batch in txfillrandom (1 to 64).
    #[arg(long = "tx_size", default_value_t = 8)]
    tx_size: usize,
    /// Stores, comma-separated, each run on its own file: sorted (petra-kv on the skiplist),
    /// unsorted (petra-kv on a hash map of --num buckets), redb-none and redb-immediate (redb
    /// with its commit durability none and immediate: the baseline).
    #[arg(long, value_delimiter = ',', default_values_t = ["sorted".to_string()])]
    engine: Vec<String>,
    /// The file to create, for one engine (default: a new file in /dev/shm or the temporary
    /// directory, removed afterwards). It must not exist.
    #[arg(long)]
    db: Option<PathBuf>,
    /// As pmemkv_bench's: the size of the petra-kv pool file to create, GiB, its pages faulted in
    /// before the workloads (on tmpfs or DAX). 0: start at 64 MiB and grow as the workloads need.
    #[arg(long = "db_size_in_gb", default_value_t = 0)]
    db_size_in_gb: u64,
    /// The most a petra-kv pool file may grow to, GiB (at least --db_size_in_gb).
    #[arg(long = "db_max_size_in_gb", default_value_t = 8)]
    db_max_size_in_gb: u64,
    /// Record per-operation latencies and print percentiles.
    #[arg(long)]
    histogram: bool,
    /// petra-kv without flushes and fences: what durability costs (nothing is durable).
    #[arg(long)]
    volatile: bool,
    /// Seed of the random keys and values.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the results to this directory: kv.csv and kv.json, a row per workload run.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs `petra-bench kv`.
pub fn run(args: KvArgs) -> Result<(), String> {
    let engines: Vec<Engine> = args.engine.iter().map(|e| Engine::parse(e, args.num)).collect::<Result<_, _>>()?;
    if args.db.is_some() && engines.len() > 1 {
        return Err("--db names one file: give one engine".into());
    }
    let cases: Vec<KvCase> = engines
        .iter()
        .map(|&engine| KvCase {
            num: args.num,
            reads: args.reads.unwrap_or(args.num),
            threads: args.threads,
            key_size: args.key_size,
            value_size: args.value_size,
            read_write_percent: args.readwritepercent,
            tx_size: args.tx_size,
            engine,
            seed: args.seed,
            histogram: args.histogram,
            volatile: args.volatile,
        })
        .collect();
    for case in &cases {
        check(case, &args.benchmarks)?;
    }
    let tmp = if args.db.is_none() { Some(scratch()?) } else { None };
    println!(
        "{} keys of {} bytes, {}-byte values, {} thread{}{}, files in {}",
        args.num,
        args.key_size,
        args.value_size,
        args.threads,
        if args.threads == 1 { "" } else { "s" },
        if args.volatile { ", petra-kv volatile (flushes and fences off)" } else { "" },
        args.db.as_ref().and_then(|p| p.parent()).or(tmp.as_ref().map(|t| t.path())).unwrap_or(".".as_ref()).display()
    );
    println!("engine,threads,benchmark,micros/op,ops/sec,MB/s,found,p50,p99,p99.9");
    let progress = progress_bar(cases.len() * args.benchmarks.len(), "workloads");
    let mut rows = Vec::new();
    for case in &cases {
        let name = case.engine.name();
        let path = args.db.clone().unwrap_or_else(|| tmp.as_ref().expect("made above").path().join(name));
        let sizes = (args.db_size_in_gb << 30, args.db_max_size_in_gb << 30);
        run_case(case, &args.benchmarks, &path, sizes, |r| {
            let row = KvRow::new(name, args.threads, r);
            progress.suspend(|| println!("{}", row.line()));
            progress.inc(1);
            rows.push(row);
        })?;
    }
    progress.finish_and_clear();
    if let Some(out) = &args.out {
        wrote(crate::report::write_rows(out, "kv", &rows)?);
    }
    Ok(())
}

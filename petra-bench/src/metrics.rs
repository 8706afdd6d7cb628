//! `petra-bench metrics`: the metric store's ingest and queries on a set of `metrics` u64 data
//! metrics (144 by default: the size of the Cray set the dissertation samples), one thread; and
//! the same records in redb (a latest table and a history table, one write transaction per
//! sample), the baseline.

use std::path::Path;
use std::time::Instant;

use petra_kv::{Config, CreateMode, Metric, MetricSession, MetricStore, Sample, Scalar, Schema, SetId, SetInfo, Value};

use crate::kv::{RedbDb, RedbDurability, redb_err};

/// One run's settings.
#[derive(Debug, Clone)]
pub struct MetricsCase {
    /// Metrics in the set.
    pub metrics: usize,
    /// Samples stored.
    pub samples: u64,
    /// Latest-value reads timed.
    pub reads: u64,
    /// Range queries of `range_len` samples timed.
    pub ranges: u64,
    /// Samples per range query.
    pub range_len: u64,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct MetricsResult {
    /// Samples stored per second (each durable when stored).
    pub ingest_per_sec: f64,
    /// Mean latest-sample read, microseconds (decoded values included).
    pub latest_micros: f64,
    /// Mean range query, microseconds.
    pub range_micros: f64,
    /// The pool file's size after the run, bytes.
    pub file_bytes: u64,
}

const SEC: u64 = 1_000_000_000;

/// Where the samples go: the metric store, or redb with the same records (the baseline a daemon
/// might pick instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsEngine {
    /// The petra-kv metric store: one transaction per sample (latest and history), durable.
    Petra,
    /// redb: one write transaction per sample into a latest table and a history table, with
    /// this commit durability.
    Redb(RedbDurability),
}

impl MetricsEngine {
    /// Parses `petra`, `redb-none` or `redb-immediate`.
    pub fn parse(name: &str) -> Result<MetricsEngine, String> {
        match name {
            "petra" => Ok(MetricsEngine::Petra),
            "redb-none" => Ok(MetricsEngine::Redb(RedbDurability::None)),
            "redb-immediate" => Ok(MetricsEngine::Redb(RedbDurability::Immediate)),
            other => Err(format!("unknown engine {other:?}: use petra, redb-none or redb-immediate")),
        }
    }

    /// The name [`parse`](MetricsEngine::parse) takes.
    pub fn name(self) -> &'static str {
        match self {
            MetricsEngine::Petra => "petra",
            MetricsEngine::Redb(RedbDurability::None) => "redb-none",
            MetricsEngine::Redb(RedbDurability::Immediate) => "redb-immediate",
        }
    }
}

/// What the timed loops need of a store holding one set.
trait MetricTarget {
    /// Stores `sample`, durably as the engine's mode has it.
    fn store(&mut self, sample: &Sample) -> Result<(), String>;
    /// The latest sample's generation, its values decoded.
    fn latest(&mut self) -> Result<Option<u64>, String>;
    /// The samples stamped `from..=to`, decoded: how many.
    fn range(&mut self, from: u64, to: u64) -> Result<usize, String>;
}

/// Runs the case on a new store of `engine` at `path`.
pub fn run_on(engine: MetricsEngine, case: &MetricsCase, path: &Path, max_size: u64) -> Result<MetricsResult, String> {
    if case.range_len > case.samples {
        return Err(format!("ranges of {} samples need at least that many samples", case.range_len));
    }
    match engine {
        MetricsEngine::Petra => {
            let e = |e: petra_kv::KvError| e.to_string();
            let config = Config { create: CreateMode::Create, size: 64 << 20, max_size, ..Config::new(path) };
            let store = MetricStore::open(&config).map_err(e)?;
            let schema = Schema {
                name: "cray".into(),
                metrics: (0..case.metrics).map(|i| Metric::data(&format!("m{i}"), Scalar::U64)).collect(),
            };
            store.add_schema(&schema).map_err(e)?;
            let info = SetInfo {
                instance: "nid00001/cray".into(),
                schema: "cray".into(),
                producer: "nid00001".into(),
                component_id: 1,
                job_id: 0,
                interval_ns: SEC,
            };
            let set = store.add_set(&info).map_err(e)?;
            let mut target = PetraTarget { session: store.session().map_err(e)?, set };
            let mut result = measure(&mut target, case)?;
            drop(target);
            result.file_bytes = store.engine().pool().len();
            store.close().map_err(e)?;
            Ok(result)
        }
        MetricsEngine::Redb(durability) => {
            let mut target = RedbTarget { db: RedbDb::create(path, durability)?, buf: Vec::new() };
            let mut result = measure(&mut target, case)?;
            target.db.close()?;
            result.file_bytes = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
            Ok(result)
        }
    }
}

/// The timed loops: ingest, latest reads, range queries (`file_bytes` left 0).
fn measure(target: &mut impl MetricTarget, case: &MetricsCase) -> Result<MetricsResult, String> {
    let mut sample = Sample { timestamp: 0, duration: 1000, generation: 0, consistent: true, values: Vec::new() };
    let start = Instant::now();
    for g in 1..=case.samples {
        sample.timestamp = g * SEC;
        sample.generation = g;
        sample.values.clear();
        sample.values.extend((0..case.metrics as u64).map(|i| Value::U(g * 1000 + i)));
        target.store(&sample)?;
    }
    let ingest_per_sec = case.samples as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut check = 0;
    for _ in 0..case.reads {
        check += target.latest()?.unwrap_or(0);
    }
    let latest_micros = start.elapsed().as_secs_f64() * 1e6 / case.reads.max(1) as f64;
    if check != case.reads * case.samples {
        return Err("a latest read did not return the last sample".into());
    }
    let start = Instant::now();
    let span = case.samples - case.range_len + 1;
    for r in 0..case.ranges {
        let from = 1 + (r * 7919) % span;
        let got = target.range(from * SEC, (from + case.range_len - 1) * SEC)?;
        if got as u64 != case.range_len {
            return Err(format!("a range query returned {got} samples"));
        }
    }
    let range_micros = start.elapsed().as_secs_f64() * 1e6 / case.ranges.max(1) as f64;
    Ok(MetricsResult { ingest_per_sec, latest_micros, range_micros, file_bytes: 0 })
}

struct PetraTarget<'s> {
    session: MetricSession<'s>,
    set: SetId,
}

impl MetricTarget for PetraTarget<'_> {
    fn store(&mut self, sample: &Sample) -> Result<(), String> {
        self.session.store_sample(self.set, sample).map(drop).map_err(|e| e.to_string())
    }

    fn latest(&mut self) -> Result<Option<u64>, String> {
        Ok(self.session.latest(self.set).map_err(|e| e.to_string())?.map(|s| s.generation))
    }

    fn range(&mut self, from: u64, to: u64) -> Result<usize, String> {
        Ok(self.session.range(self.set, from, to).map_err(|e| e.to_string())?.len())
    }
}

/// redb's tables: the latest sample of the set, and its history by timestamp.
const LATEST: redb::TableDefinition<'static, u64, &[u8]> = redb::TableDefinition::new("latest");
const HISTORY: redb::TableDefinition<'static, u64, &[u8]> = redb::TableDefinition::new("history");

/// The sample as redb stores it: timestamp, duration, generation, consistent, then the u64 values.
fn encode(sample: &Sample, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    for w in [sample.timestamp, sample.duration, sample.generation, sample.consistent as u64] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for v in &sample.values {
        let Value::U(x) = v else { return Err("the benchmark's metrics are u64".into()) };
        out.extend_from_slice(&x.to_le_bytes());
    }
    Ok(())
}

/// Decodes what [`encode`] wrote.
fn decode(bytes: &[u8]) -> Sample {
    let word = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    Sample {
        timestamp: word(0),
        duration: word(1),
        generation: word(2),
        consistent: word(3) != 0,
        values: (4..bytes.len() / 8).map(|i| Value::U(word(i))).collect(),
    }
}

struct RedbTarget {
    db: RedbDb,
    buf: Vec<u8>,
}

impl MetricTarget for RedbTarget {
    fn store(&mut self, sample: &Sample) -> Result<(), String> {
        encode(sample, &mut self.buf)?;
        self.db.write(|tx| {
            let mut latest = tx.open_table(LATEST).map_err(redb_err)?;
            latest.insert(0, self.buf.as_slice()).map_err(redb_err)?;
            let mut history = tx.open_table(HISTORY).map_err(redb_err)?;
            history.insert(sample.timestamp, self.buf.as_slice()).map_err(redb_err)?;
            Ok(())
        })
    }

    fn latest(&mut self) -> Result<Option<u64>, String> {
        self.db.read(|tx| {
            let table = tx.open_table(LATEST).map_err(redb_err)?;
            Ok(table.get(0).map_err(redb_err)?.map(|v| decode(v.value()).generation))
        })
    }

    fn range(&mut self, from: u64, to: u64) -> Result<usize, String> {
        self.db.read(|tx| {
            let table = tx.open_table(HISTORY).map_err(redb_err)?;
            let mut n = 0;
            for entry in table.range(from..=to).map_err(redb_err)? {
                let (_, v) = entry.map_err(redb_err)?;
                n += !decode(v.value()).values.is_empty() as usize;
            }
            Ok(n)
        })
    }
}

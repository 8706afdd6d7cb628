//! `petra-bench metrics`: the metric store's ingest and queries on `sets` sets of `metrics` u64
//! data metrics each (144 by default: the size of the Cray set the dissertation samples), stored
//! by `threads` threads as an aggregator stores the sets of many producers; and the same records
//! in redb (a latest table and a history table, one write transaction per sample), the baseline.

use std::path::Path;
use std::time::Instant;

use petra_kv::{
    Config, CreateMode, KvError, Metric, MetricSession, MetricStore, Sample, Scalar, Schema, SetId, SetInfo, Value,
};

use crate::cli::scratch;
use crate::kv::{RedbDb, RedbDurability, redb_err};

/// One run's settings.
#[derive(Debug, Clone)]
pub struct MetricsCase {
    /// Metrics in each set.
    pub metrics: usize,
    /// Sets, each with its own producer.
    pub sets: usize,
    /// Threads storing samples; each stores the samples of every `threads`-th set.
    pub threads: usize,
    /// Samples stored into each set.
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
    /// Samples stored per second, over all sets and threads (each durable when stored).
    pub ingest_per_sec: f64,
    /// Mean latest-sample read of one set, microseconds (decoded values included).
    pub latest_micros: f64,
    /// Mean range query on one set, microseconds: the samples decoded and collected into a new
    /// `Vec`.
    pub range_micros: f64,
    /// The same, into one `Vec` reused across the queries (its samples' allocations too).
    pub reused_micros: f64,
    /// Mean scan of the same ranges, microseconds: each sample decoded, visited and dropped.
    pub scan_micros: f64,
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

/// A store holding the sets, shared by the threads that store into it.
trait MetricTarget: Sync {
    /// One thread's access.
    type Session<'a>: MetricSessionOf
    where
        Self: 'a;
    /// A session for one thread.
    fn session(&self) -> Result<Self::Session<'_>, String>;
}

/// What the timed loops need of one thread's access to the sets (numbered from 0).
trait MetricSessionOf {
    /// Stores `sample` into set `set`, durably as the engine's mode has it.
    fn store(&mut self, set: usize, sample: &Sample) -> Result<(), String>;
    /// The latest sample's generation in set `set`, its values decoded.
    fn latest(&mut self, set: usize) -> Result<Option<u64>, String>;
    /// The samples of set `set` stamped `from..=to`, decoded and collected: how many.
    fn range(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String>;
    /// The same, collected into a `Vec` the session keeps and reuses: how many.
    fn range_reused(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String>;
    /// The same samples decoded and visited one at a time: how many.
    fn scan(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String>;
}

/// Runs the case on a new store of `engine` at `path`.
pub fn run_on(engine: MetricsEngine, case: &MetricsCase, path: &Path, max_size: u64) -> Result<MetricsResult, String> {
    if case.range_len > case.samples {
        return Err(format!("ranges of {} samples need at least that many samples", case.range_len));
    }
    if case.sets == 0 || case.threads == 0 {
        return Err("a run needs at least one set and one thread".into());
    }
    match engine {
        MetricsEngine::Petra => {
            let e = |e: KvError| e.to_string();
            let config = Config { create: CreateMode::Create, size: crate::START_BYTES, max_size, ..Config::new(path) };
            let store = MetricStore::open(&config).map_err(e)?;
            let schema = Schema {
                name: "cray".into(),
                metrics: (0..case.metrics).map(|i| Metric::data(&format!("m{i}"), Scalar::U64)).collect(),
            };
            store.add_schema(&schema).map_err(e)?;
            let sets = (0..case.sets)
                .map(|i| {
                    let producer = format!("nid{:05}", i + 1);
                    store.add_set(&SetInfo {
                        instance: format!("{producer}/cray"),
                        schema: "cray".into(),
                        producer,
                        component_id: i as u64 + 1,
                        job_id: 0,
                        interval_ns: SEC,
                    })
                })
                .collect::<Result<Vec<SetId>, KvError>>()
                .map_err(e)?;
            let target = PetraTarget { store, sets };
            let mut result = measure(&target, case)?;
            result.file_bytes = target.store.engine().pool().len();
            target.store.close().map_err(e)?;
            Ok(result)
        }
        MetricsEngine::Redb(durability) => {
            let target = RedbDb::create(path, durability)?;
            let mut result = measure(&target, case)?;
            target.close()?;
            result.file_bytes = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
            Ok(result)
        }
    }
}

/// The timed loops: ingest by every thread, then a check that every set holds all its samples,
/// then latest reads, range queries and scans on set 0 (`file_bytes` left 0).
fn measure<T: MetricTarget>(target: &T, case: &MetricsCase) -> Result<MetricsResult, String> {
    let start = Instant::now();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..case.threads)
            .map(|t| {
                scope.spawn(move || -> Result<(), String> {
                    let mut session = target.session()?;
                    let mine: Vec<usize> = (t..case.sets).step_by(case.threads).collect();
                    let mut sample =
                        Sample { timestamp: 0, duration: 1000, generation: 0, consistent: true, values: Vec::new() };
                    // Each sampling interval, a sample of every set this thread stores.
                    for g in 1..=case.samples {
                        sample.timestamp = g * SEC;
                        sample.generation = g;
                        for &set in &mine {
                            sample.values.clear();
                            sample.values.extend((0..case.metrics as u64).map(|i| Value::U(g * 1000 + i + set as u64)));
                            session.store(set, &sample)?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| t.join().map_err(|_| "a storing thread panicked".to_string())?)
    })?;
    let ingest_per_sec = (case.samples * case.sets as u64) as f64 / start.elapsed().as_secs_f64();
    let mut session = target.session()?;
    for set in 0..case.sets {
        let latest = session.latest(set)?;
        let stored = session.scan(set, 0, u64::MAX)?;
        if latest != Some(case.samples) || stored as u64 != case.samples {
            return Err(format!("set {set} holds {stored} samples, the latest {latest:?}, of {}", case.samples));
        }
    }
    let start = Instant::now();
    let mut check = 0;
    for _ in 0..case.reads {
        check += session.latest(0)?.unwrap_or(0);
    }
    let latest_micros = start.elapsed().as_secs_f64() * 1e6 / case.reads.max(1) as f64;
    if check != case.reads * case.samples {
        return Err("a latest read did not return the last sample".into());
    }
    let span = case.samples - case.range_len + 1;
    let ranges = |query: &mut dyn FnMut(u64, u64) -> Result<usize, String>| -> Result<f64, String> {
        let start = Instant::now();
        for r in 0..case.ranges {
            let from = 1 + (r * 7919) % span;
            let got = query(from * SEC, (from + case.range_len - 1) * SEC)?;
            if got as u64 != case.range_len {
                return Err(format!("a range query returned {got} samples"));
            }
        }
        Ok(start.elapsed().as_secs_f64() * 1e6 / case.ranges.max(1) as f64)
    };
    let range_micros = ranges(&mut |from, to| session.range(0, from, to))?;
    let reused_micros = ranges(&mut |from, to| session.range_reused(0, from, to))?;
    let scan_micros = ranges(&mut |from, to| session.scan(0, from, to))?;
    Ok(MetricsResult { ingest_per_sec, latest_micros, range_micros, reused_micros, scan_micros, file_bytes: 0 })
}

struct PetraTarget {
    store: MetricStore,
    sets: Vec<SetId>,
}

impl MetricTarget for PetraTarget {
    type Session<'a> = PetraSession<'a>;

    fn session(&self) -> Result<PetraSession<'_>, String> {
        Ok(PetraSession {
            session: self.store.session().map_err(|e| e.to_string())?,
            sets: &self.sets,
            out: Vec::new(),
        })
    }
}

struct PetraSession<'s> {
    session: MetricSession<'s>,
    sets: &'s [SetId],
    /// Reused by `range_reused`.
    out: Vec<Sample>,
}

impl MetricSessionOf for PetraSession<'_> {
    fn store(&mut self, set: usize, sample: &Sample) -> Result<(), String> {
        self.session.store_sample(self.sets[set], sample).map(drop).map_err(|e| e.to_string())
    }

    fn latest(&mut self, set: usize) -> Result<Option<u64>, String> {
        Ok(self.session.latest(self.sets[set]).map_err(|e| e.to_string())?.map(|s| s.generation))
    }

    fn range(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String> {
        Ok(self.session.range(self.sets[set], from, to).map_err(|e| e.to_string())?.len())
    }

    fn range_reused(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String> {
        self.session.range_into(self.sets[set], from, to, &mut self.out).map_err(|e| e.to_string())?;
        Ok(self.out.len())
    }

    fn scan(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String> {
        let mut n = 0;
        self.session
            .scan(self.sets[set], from, to, |s| {
                std::hint::black_box(s);
                n += 1;
                std::ops::ControlFlow::Continue(())
            })
            .map_err(|e| e.to_string())?;
        Ok(n)
    }
}

/// redb's tables: the latest sample of each set, and each set's history by timestamp.
const LATEST: redb::TableDefinition<'static, u64, &[u8]> = redb::TableDefinition::new("latest");
const HISTORY: redb::TableDefinition<'static, (u64, u64), &[u8]> = redb::TableDefinition::new("history");

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
    let mut sample = Sample { timestamp: 0, duration: 0, generation: 0, consistent: false, values: Vec::new() };
    decode_into(bytes, &mut sample);
    sample
}

/// Decodes what [`encode`] wrote into `sample`, reusing its values' allocation.
fn decode_into(bytes: &[u8], sample: &mut Sample) {
    let word = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    sample.timestamp = word(0);
    sample.duration = word(1);
    sample.generation = word(2);
    sample.consistent = word(3) != 0;
    sample.values.clear();
    sample.values.extend((4..bytes.len() / 8).map(|i| Value::U(word(i))));
}

impl MetricTarget for RedbDb {
    type Session<'a> = RedbSession<'a>;

    fn session(&self) -> Result<RedbSession<'_>, String> {
        Ok(RedbSession { db: self, buf: Vec::new(), out: Vec::new() })
    }
}

struct RedbSession<'d> {
    db: &'d RedbDb,
    buf: Vec<u8>,
    /// Reused by `range_reused`.
    out: Vec<Sample>,
}

impl MetricSessionOf for RedbSession<'_> {
    fn store(&mut self, set: usize, sample: &Sample) -> Result<(), String> {
        encode(sample, &mut self.buf)?;
        self.db.write(|tx| {
            let mut latest = tx.open_table(LATEST).map_err(redb_err)?;
            latest.insert(set as u64, self.buf.as_slice()).map_err(redb_err)?;
            let mut history = tx.open_table(HISTORY).map_err(redb_err)?;
            history.insert((set as u64, sample.timestamp), self.buf.as_slice()).map_err(redb_err)?;
            Ok(())
        })
    }

    fn latest(&mut self, set: usize) -> Result<Option<u64>, String> {
        self.db.read(|tx| {
            let table = tx.open_table(LATEST).map_err(redb_err)?;
            Ok(table.get(set as u64).map_err(redb_err)?.map(|v| decode(v.value()).generation))
        })
    }

    fn range(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String> {
        let mut samples = Vec::new();
        visit(self.db, set, from, to, |bytes| samples.push(decode(bytes)))?;
        Ok(samples.len())
    }

    fn range_reused(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String> {
        let out = &mut self.out;
        let mut n = 0;
        let visited = visit(self.db, set, from, to, |bytes| {
            match out.get_mut(n) {
                Some(sample) => decode_into(bytes, sample),
                None => out.push(decode(bytes)),
            }
            n += 1;
        });
        out.truncate(n);
        visited.map(|()| n)
    }

    fn scan(&mut self, set: usize, from: u64, to: u64) -> Result<usize, String> {
        let mut n = 0;
        visit(self.db, set, from, to, |bytes| {
            std::hint::black_box(decode(bytes));
            n += 1;
        })?;
        Ok(n)
    }
}

/// `f` on the encoded bytes of each sample of set `set` stamped `from..=to` in `db`, in one read
/// transaction.
fn visit(db: &RedbDb, set: usize, from: u64, to: u64, mut f: impl FnMut(&[u8])) -> Result<(), String> {
    db.read(|tx| {
        let table = tx.open_table(HISTORY).map_err(redb_err)?;
        for entry in table.range((set as u64, from)..=(set as u64, to)).map_err(redb_err)? {
            let (_, v) = entry.map_err(redb_err)?;
            f(v.value());
        }
        Ok(())
    })
}

/// The metric store: durable ingest of samples of one set of u64 metrics, then latest-value
/// reads and range queries, one thread.
#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    /// Metrics in each set (u64 data metrics).
    #[arg(long, default_value_t = 144)]
    metrics: usize,
    /// Sets, one per producer.
    #[arg(long, default_value_t = 1)]
    sets: usize,
    /// Threads storing samples, each the samples of every THREADS-th set (at most --sets).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Samples stored into each set.
    #[arg(long, default_value_t = 200_000)]
    samples: u64,
    /// Latest-value reads timed.
    #[arg(long, default_value_t = 100_000)]
    reads: u64,
    /// Range queries timed.
    #[arg(long, default_value_t = 1_000)]
    ranges: u64,
    /// Samples per range query.
    #[arg(long, default_value_t = 1_000)]
    range_len: u64,
    /// Engines, comma-separated, each on its own file: petra (the metric store), redb-none and
    /// redb-immediate (the same records in redb, one write transaction per sample, with its
    /// commit durability none or immediate: the baseline).
    #[arg(long, value_delimiter = ',', default_values_t = ["petra".to_string(), "redb-none".to_string(), "redb-immediate".to_string()])]
    engine: Vec<String>,
}

/// Runs `petra-bench metrics`.
pub fn run(args: MetricsArgs) -> Result<(), String> {
    let engines: Vec<MetricsEngine> = args.engine.iter().map(|e| MetricsEngine::parse(e)).collect::<Result<_, _>>()?;
    if args.threads > args.sets {
        return Err(format!("{} threads for {} sets: a thread stores whole sets", args.threads, args.sets));
    }
    let case = MetricsCase {
        metrics: args.metrics,
        sets: args.sets,
        threads: args.threads,
        samples: args.samples,
        reads: args.reads,
        ranges: args.ranges,
        range_len: args.range_len,
    };
    let tmp = scratch()?;
    println!(
        "{} set(s) of {} u64 metrics, {} samples each, {} thread(s), files in {}",
        args.sets,
        args.metrics,
        args.samples,
        args.threads,
        tmp.path().display()
    );
    println!(
        "{:<15} {:>12} {:>12} {:>16} {:>16} {:>16} {:>10}",
        "engine",
        "samples/s",
        "latest us",
        format!("range {} us", args.range_len),
        "reused Vec us",
        format!("scan {} us", args.range_len),
        "file MiB"
    );
    for engine in engines {
        let path = tmp.path().join(format!("{}.db", engine.name()));
        let r = run_on(engine, &case, &path, 64 << 30)?;
        let _ = std::fs::remove_file(&path);
        println!(
            "{:<15} {:>12.0} {:>12.2} {:>16.1} {:>16.1} {:>16.1} {:>10.1}",
            engine.name(),
            r.ingest_per_sec,
            r.latest_micros,
            r.range_micros,
            r.reused_micros,
            r.scan_micros,
            r.file_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

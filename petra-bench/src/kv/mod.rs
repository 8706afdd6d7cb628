//! `petra-bench kv`: pmemkv_bench's workloads on a key-value store behind one trait
//! (`KvTarget`, in `target.rs`): the petra-kv [`Store`], sorted or unsorted, and redb as a
//! baseline.
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
//! - `seqwhilewriting`: the same, the others scanning from the first key as `readseq`'s threads
//!   do; only the keys scanned are counted (not one of pmemkv_bench's).

mod report;
mod store;
mod workloads;

use std::fmt;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use petra::pool::Mapping;
use petra_kv::{Config, CreateMode, DurabilityPolicy, Order, Store};

use self::report::KvRow;
use self::workloads::{Benchmark, run_on};
use crate::baselines::redb::{RedbDurability, RedbKv};
use crate::cli::{Policy, one_of, progress_bar, scratch_in, spell, wrote};
use crate::error::{BenchError, Result};

/// pmemkv_bench's workloads on the key-value store (petra-kv) or on redb, run in the order
/// given on one store per engine. Prints pmemkv_bench's CSV columns after the engine and
/// thread count: benchmark, micros/op (wall time over operations), ops/sec, MB/s (keys and
/// values moved), found (reads and removes that found their key), and with --histogram the
/// 50th, 99th and 99.9th percentile latencies in microseconds.
#[derive(Debug, clap::Args)]
pub struct KvArgs {
    /// Workloads, comma-separated: fillseq, fillrandom, overwrite, txfillrandom, readseq,
    /// readrandom, readmissing, deleteseq, deleterandom, readrandomwriterandom, readwhilewriting,
    /// seqwhilewriting.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [Benchmark::FillRandom, Benchmark::ReadRandom],
        value_parser = one_of::<Benchmark>("benchmark")
    )]
    benchmarks: Vec<Benchmark>,
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
    #[arg(long, value_delimiter = ',', default_values_t = [KvEngine::Sorted], value_parser = one_of::<KvEngine>("engine"))]
    engine: Vec<KvEngine>,
    /// petra-kv's durability policies, comma-separated, each run on its own file beside the
    /// others: process, periodic (a power-safe point every second) and immediate (a write
    /// returns once it survives power loss). Default: the stores' own (periodic); with the flag
    /// each row's engine names its policy (sorted/immediate). Safe points are kept on a file on a
    /// disk only (`--dir`): in `/dev/shm` every policy runs as process, and the run says so.
    #[arg(long, value_delimiter = ',', value_parser = one_of::<Policy>("policy"))]
    durability: Option<Vec<Policy>>,
    /// The file to create, for one engine (default: a new file in /dev/shm or the temporary
    /// directory, removed afterwards). It must not exist.
    #[arg(long, conflicts_with = "dir")]
    db: Option<PathBuf>,
    /// The directory for the files (new ones, removed afterwards; default: /dev/shm or the
    /// temporary directory): the disk to measure.
    #[arg(long)]
    dir: Option<PathBuf>,
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

/// Runs `petra-bench kv`: the workloads in order on a new store of each engine, a CSV row per
/// workload on stdout, and with `--out` the files.
pub fn run(args: KvArgs) -> Result<()> {
    let engines = &args.engine;
    if args.db.is_some() && engines.len() > 1 {
        return Err(BenchError::InvalidArgument("--db names one file: give one engine".into()));
    }
    let policies: Vec<Option<Policy>> = match &args.durability {
        Some(list) => list.iter().copied().map(Some).collect(),
        None => vec![None],
    };
    if args.db.is_some() && policies.len() > 1 {
        return Err(BenchError::InvalidArgument("--db names one file: give one durability policy".into()));
    }
    let cases: Vec<KvCase> = engines
        .iter()
        .flat_map(|&engine| {
            // redb has its own durability, named by its engine.
            let of_engine = if engine.is_petra() { policies.clone() } else { vec![None] };
            of_engine.into_iter().map(move |policy| (engine, policy))
        })
        .map(|(engine, durability)| KvCase {
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
            durability,
        })
        .collect();
    for case in &cases {
        check(case)?;
    }
    let tmp = if args.db.is_none() { Some(scratch_in(args.dir.as_deref())?) } else { None };
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
        let name = case.name();
        let path =
            args.db.clone().unwrap_or_else(|| tmp.as_ref().expect("made above").path().join(name.replace('/', "-")));
        let sizes = (args.db_size_in_gb << 30, args.db_max_size_in_gb << 30);
        run_case(case, &args.benchmarks, &path, sizes, |r| {
            let row = KvRow::new(&name, args.threads, r);
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

/// The stores `petra-bench kv` knows, by their `--engine` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum KvEngine {
    /// petra-kv on the skiplist.
    Sorted,
    /// petra-kv on a hash map of as many buckets as keys in the range.
    Unsorted,
    /// redb, each put or batch one write transaction committed with `Durability::None`.
    RedbNone,
    /// redb, each put or batch one write transaction committed with `Durability::Immediate`.
    RedbImmediate,
}

impl KvEngine {
    /// Whether it is petra-kv (which takes `--durability` and `--volatile`).
    pub(crate) fn is_petra(self) -> bool {
        matches!(self, KvEngine::Sorted | KvEngine::Unsorted)
    }
}

/// Its name in reports and on the command line.
impl fmt::Display for KvEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        spell(self, f)
    }
}

/// One run's settings.
#[derive(Debug, Clone)]
pub(crate) struct KvCase {
    /// Keys written by the fill workloads, and the key range.
    pub(crate) num: u64,
    /// Operations of the read workloads.
    pub(crate) reads: u64,
    /// Threads running each workload.
    pub(crate) threads: usize,
    /// Bytes per key (at least 8).
    pub(crate) key_size: usize,
    /// Bytes per value.
    pub(crate) value_size: usize,
    /// Share of reads in `readrandomwriterandom`, percent.
    pub(crate) read_write_percent: u32,
    /// Puts per batch in `txfillrandom`.
    pub(crate) tx_size: usize,
    /// The store.
    pub(crate) engine: KvEngine,
    /// Seed of the random keys and values.
    pub(crate) seed: u64,
    /// Record each operation's latency (for percentiles).
    pub(crate) histogram: bool,
    /// Skip flushes and fences (petra-kv only: what durability costs; nothing is durable).
    pub(crate) volatile: bool,
    /// petra-kv's durability policy (`None`: the store's default).
    pub(crate) durability: Option<Policy>,
}

impl KvCase {
    /// The engine's name in the rows: with its policy, if one was chosen.
    pub(crate) fn name(&self) -> String {
        match self.durability {
            Some(policy) => format!("{}/{policy}", self.engine),
            None => self.engine.to_string(),
        }
    }
}

/// One workload's result.
#[derive(Debug, Clone)]
pub(crate) struct KvResult {
    /// The workload's name.
    pub(crate) name: String,
    /// Operations done (counted ones: the reads of `readwhilewriting`).
    pub(crate) ops: u64,
    /// Seconds taken.
    pub(crate) secs: f64,
    /// Bytes of keys and values moved by the counted operations.
    pub(crate) bytes: u64,
    /// Of the reads and removes, how many found their key.
    pub(crate) found: u64,
    /// Per-operation latencies in microseconds, sorted (empty without `histogram`).
    pub(crate) latencies: Vec<f64>,
}

impl KvResult {
    /// Microseconds per operation (wall time over operations, as pmemkv_bench prints it).
    pub(crate) fn micros_per_op(&self) -> f64 {
        self.secs * 1e6 / self.ops.max(1) as f64
    }

    /// Operations per second.
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }

    /// MB/s of keys and values.
    pub(crate) fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }

    /// The `p`th percentile latency (microseconds), if recorded.
    pub(crate) fn percentile(&self, p: f64) -> Option<f64> {
        let n = self.latencies.len();
        (n > 0).then(|| self.latencies[((n as f64 * p / 100.0) as usize).min(n - 1)])
    }
}

/// Checks a case before anything is created.
pub(crate) fn check(case: &KvCase) -> Result<()> {
    if case.key_size < 8 {
        return Err(BenchError::InvalidArgument(format!("key size {} is below 8 bytes", case.key_size)));
    }
    if case.threads == 0 {
        return Err(BenchError::InvalidArgument("--threads must be at least 1".into()));
    }
    if case.read_write_percent > 100 {
        return Err(BenchError::InvalidArgument(format!(
            "--readwritepercent {} is above 100",
            case.read_write_percent
        )));
    }
    if case.tx_size == 0 || case.tx_size > 64 {
        return Err(BenchError::InvalidArgument(format!(
            "--tx_size {} is outside 1 to 64 (a batch's engine entries)",
            case.tx_size
        )));
    }
    if case.volatile && !case.engine.is_petra() {
        return Err(BenchError::InvalidArgument("--volatile is petra-kv's mode: for redb, use redb-none".into()));
    }
    Ok(())
}

/// Runs `workloads` in order on a new store at `path` (which must not exist), of `(size, max)`
/// bytes (size 0: [`START_BYTES`](crate::pool::START_BYTES)), handing each result to `done` as it finishes.
pub(crate) fn run_case(
    case: &KvCase,
    workloads: &[Benchmark],
    path: &Path,
    (size, max_size): (u64, u64),
    done: impl FnMut(&KvResult),
) -> Result<Vec<KvResult>> {
    check(case)?;
    let order = match case.engine {
        KvEngine::Sorted => Order::Sorted,
        KvEngine::Unsorted => Order::Unsorted { buckets: case.num.max(1) },
        KvEngine::RedbNone => return run_on(RedbKv::create(path, RedbDurability::None)?, case, workloads, done),
        KvEngine::RedbImmediate => {
            return run_on(RedbKv::create(path, RedbDurability::Immediate)?, case, workloads, done);
        }
    };
    let mapping = Mapping { volatile: case.volatile, ..Mapping::default() };
    let size = if size == 0 { crate::pool::START_BYTES } else { size };
    let max_size = max_size.max(size);
    let durability = case.durability.map_or_else(DurabilityPolicy::default, Policy::policy);
    let config = Config { create: CreateMode::Create, order, size, max_size, mapping, durability, ..Config::new(path) };
    let store = Store::open(&config)?;
    crate::cli::note_safe_points(store.engine());
    run_on(store, case, workloads, done)
}

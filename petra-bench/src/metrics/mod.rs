//! `petra-bench metrics`: the metric store's ingest and queries on `sets` sets of `metrics` u64
//! data metrics each (144 by default: the size of the Cray set the dissertation samples), stored
//! by `threads` threads as an aggregator stores the sets of many producers; and the same records
//! in redb (a latest table and a history table, one write transaction per sample), the baseline.

mod store;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::ValueEnum;
use petra_kv::{DurabilityPolicy, Sample, Value};

use self::store::PetraTarget;
use crate::baselines::redb::{RedbDb, RedbDurability};
use crate::cli::{Policy, one_of, scratch_in, spell};
use crate::error::{BenchError, Result};
use crate::targets::metric::{MetricSessionOf, MetricTarget};

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
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [MetricsEngine::Petra, MetricsEngine::RedbNone, MetricsEngine::RedbImmediate],
        value_parser = one_of::<MetricsEngine>("engine")
    )]
    engine: Vec<MetricsEngine>,
    /// The metric store's durability policies, comma-separated, each run on its own file beside
    /// the others: process, periodic (a power-safe point every second) and immediate (a sample
    /// returns once it survives power loss). Default: the store's own (periodic); with the flag
    /// each row's engine names its policy (petra/immediate). Safe points are kept on a file on a
    /// disk only (`--dir`): in `/dev/shm` every policy runs as process, and the run says so.
    #[arg(long, value_delimiter = ',', value_parser = one_of::<Policy>("policy"))]
    durability: Option<Vec<Policy>>,
    /// The directory for the files (new ones, removed afterwards; default: /dev/shm or the
    /// temporary directory): the disk to measure.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs `petra-bench metrics`: the same samples and queries on a new store of each engine, a row
/// each on stdout.
pub fn run(args: MetricsArgs) -> Result<()> {
    if args.threads > args.sets {
        return Err(BenchError::InvalidArgument(format!(
            "{} threads for {} sets: a thread stores whole sets",
            args.threads, args.sets
        )));
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
    let tmp = scratch_in(args.dir.as_deref())?;
    println!(
        "{} set(s) of {} u64 metrics, {} samples each, {} thread(s), files in {}",
        args.sets,
        args.metrics,
        args.samples,
        args.threads,
        tmp.path().display()
    );
    println!(
        "{:<18} {:>12} {:>12} {:>16} {:>16} {:>16} {:>10}",
        "engine",
        "samples/s",
        "latest us",
        format!("range {} us", args.range_len),
        "reused Vec us",
        format!("scan {} us", args.range_len),
        "file MiB"
    );
    let policies: Vec<Option<Policy>> = match &args.durability {
        Some(list) => list.iter().copied().map(Some).collect(),
        None => vec![None],
    };
    let runs = args.engine.iter().flat_map(|&engine| {
        // redb has its own durability, named by its engine.
        let of_engine = if engine == MetricsEngine::Petra { policies.clone() } else { vec![None] };
        of_engine.into_iter().map(move |policy| (engine, policy))
    });
    for (engine, policy) in runs {
        let name = match policy {
            Some(policy) => format!("{engine}/{policy}"),
            None => engine.to_string(),
        };
        let path = tmp.path().join(format!("{}.db", name.replace('/', "-")));
        let r = run_on(engine, policy, &case, &path, 64 << 30)?;
        let _ = std::fs::remove_file(&path);
        println!(
            "{:<18} {:>12.0} {:>12.2} {:>16.1} {:>16.1} {:>16.1} {:>10.1}",
            name,
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

/// One run's settings.
#[derive(Debug, Clone)]
pub(crate) struct MetricsCase {
    /// Metrics in each set.
    pub(crate) metrics: usize,
    /// Sets, each with its own producer.
    pub(crate) sets: usize,
    /// Threads storing samples; each stores the samples of every `threads`-th set.
    pub(crate) threads: usize,
    /// Samples stored into each set.
    pub(crate) samples: u64,
    /// Latest-value reads timed.
    pub(crate) reads: u64,
    /// Range queries of `range_len` samples timed.
    pub(crate) ranges: u64,
    /// Samples per range query.
    pub(crate) range_len: u64,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub(crate) struct MetricsResult {
    /// Samples stored per second, over all sets and threads (each durable when stored).
    pub(crate) ingest_per_sec: f64,
    /// Mean latest-sample read of one set, microseconds (decoded values included).
    pub(crate) latest_micros: f64,
    /// Mean range query on one set, microseconds: the samples decoded and collected into a new
    /// `Vec`.
    pub(crate) range_micros: f64,
    /// The same, into one `Vec` reused across the queries (its samples' allocations too).
    pub(crate) reused_micros: f64,
    /// Mean scan of the same ranges, microseconds: each sample decoded, visited and dropped.
    pub(crate) scan_micros: f64,
    /// The pool file's size after the run, bytes.
    pub(crate) file_bytes: u64,
}

const SEC: u64 = 1_000_000_000;

/// Where the samples go: the metric store, or redb with the same records (the baseline a daemon
/// might pick instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum MetricsEngine {
    /// The petra-kv metric store: one transaction per sample (latest and history), durable.
    Petra,
    /// redb: one write transaction per sample into a latest table and a history table,
    /// committed with `Durability::None`.
    RedbNone,
    /// redb, the same, committed with `Durability::Immediate`.
    RedbImmediate,
}

/// Its name in reports and on the command line.
impl fmt::Display for MetricsEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        spell(self, f)
    }
}

/// Runs the case on a new store of `engine` at `path` (the metric store with `policy`, or its
/// default).
pub(crate) fn run_on(
    engine: MetricsEngine,
    policy: Option<Policy>,
    case: &MetricsCase,
    path: &Path,
    max_size: u64,
) -> Result<MetricsResult> {
    if case.range_len > case.samples {
        return Err(BenchError::InvalidArgument(format!(
            "ranges of {} samples need at least that many samples",
            case.range_len
        )));
    }
    if case.sets == 0 || case.threads == 0 {
        return Err(BenchError::InvalidArgument("a run needs at least one set and one thread".into()));
    }
    let durability = match engine {
        MetricsEngine::Petra => {
            let durability = policy.map_or_else(DurabilityPolicy::default, Policy::policy);
            let target = PetraTarget::create(path, case, max_size, durability)?;
            let mut result = measure(&target, case)?;
            result.file_bytes = target.file_bytes();
            target.close()?;
            return Ok(result);
        }
        MetricsEngine::RedbNone => RedbDurability::None,
        MetricsEngine::RedbImmediate => RedbDurability::Immediate,
    };
    let target = RedbDb::create(path, durability)?;
    let mut result = measure(&target, case)?;
    target.close()?;
    result.file_bytes = std::fs::metadata(path)?.len();
    Ok(result)
}

/// The timed loops: ingest by every thread, then a check that every set holds all its samples,
/// then latest reads, range queries and scans on set 0 (`file_bytes` left 0).
fn measure<T: MetricTarget>(target: &T, case: &MetricsCase) -> Result<MetricsResult> {
    let start = Instant::now();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..case.threads)
            .map(|t| {
                scope.spawn(move || -> Result<()> {
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
        threads.into_iter().try_for_each(|t| t.join().map_err(|_| BenchError::Panicked("a storing thread"))?)
    })?;
    let ingest_per_sec = (case.samples * case.sets as u64) as f64 / start.elapsed().as_secs_f64();
    let mut session = target.session()?;
    for set in 0..case.sets {
        let latest = session.latest(set)?;
        let stored = session.scan(set, 0, u64::MAX)?;
        if latest != Some(case.samples) || stored as u64 != case.samples {
            return Err(BenchError::Check(format!(
                "set {set} holds {stored} samples, the latest {latest:?}, of {}",
                case.samples
            )));
        }
    }
    let start = Instant::now();
    let mut check = 0;
    for _ in 0..case.reads {
        check += session.latest(0)?.unwrap_or(0);
    }
    let latest_micros = start.elapsed().as_secs_f64() * 1e6 / case.reads.max(1) as f64;
    if check != case.reads * case.samples {
        return Err(BenchError::Check("a latest read did not return the last sample".into()));
    }
    let span = case.samples - case.range_len + 1;
    let ranges = |query: &mut dyn FnMut(u64, u64) -> Result<usize>| -> Result<f64> {
        let start = Instant::now();
        for r in 0..case.ranges {
            let from = 1 + (r * 7919) % span;
            let got = query(from * SEC, (from + case.range_len - 1) * SEC)?;
            if got as u64 != case.range_len {
                return Err(BenchError::Check(format!("a range query returned {got} samples")));
            }
        }
        Ok(start.elapsed().as_secs_f64() * 1e6 / case.ranges.max(1) as f64)
    };
    let range_micros = ranges(&mut |from, to| session.range(0, from, to))?;
    let reused_micros = ranges(&mut |from, to| session.range_reused(0, from, to))?;
    let scan_micros = ranges(&mut |from, to| session.scan(0, from, to))?;
    Ok(MetricsResult { ingest_per_sec, latest_micros, range_micros, reused_micros, scan_micros, file_bytes: 0 })
}

//! `petra-bench steady`: a long run on a fixed working set (a hash map, or with `--structure` one
//! of PETRA's other structures) while the engine's own checkpoint rounds fold and recycle the
//! descriptors (online: no thread stops for them). Every interval it records the throughput, the
//! rounds run and the time they took, and the pool file's size; at the end, the time to open the
//! pool after a crash (recovery) and after a clean close.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use petra::mem::MmapMem;
use petra::{CheckpointStats, Engine, EngineConfig, KeyWidth, StructId, Transaction, Values};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Serialize, Serializer};

use crate::cli::{Policy, one_of, progress_bar, scratch_in, wrote};
use crate::error::{BenchError, Result};
use crate::micro::Structure;

/// A long run on a fixed working set (a hash map by default, or the structure --structure
/// names) while the engine's checkpoint rounds fold and recycle the descriptors: throughput,
/// rounds, their time and the pool file's size per interval; then the time to open after a
/// crash and after a clean close.
#[derive(Debug, clap::Args)]
pub struct SteadyArgs {
    /// The structure of the working set: hashmap (of --keys buckets), mdlist, skiplist or list
    /// (a sorted list: its prefill of half the keys takes time in the square of --keys; give it
    /// a few thousand).
    #[arg(long, default_value_t = Structure::HashMap, value_parser = one_of::<Structure>("structure"))]
    structure: Structure,
    /// Keys of the working set (half put before the run).
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Ops per transaction (puts 50%, removes 25%, gets 25%, uniform keys).
    #[arg(long = "tx-size", default_value_t = 4)]
    tx_size: usize,
    /// Seconds between the rows (samples of the counters).
    #[arg(long, default_value_t = 10.0)]
    interval: f64,
    /// Intervals to run (60 at 10 s: ten minutes).
    #[arg(long, default_value_t = 6)]
    intervals: usize,
    /// Bytes of a descriptor ring (a checkpoint round runs when a thread's ring is a quarter full).
    #[arg(long = "ring-bytes", default_value_t = 64 << 20)]
    ring_bytes: u64,
    /// The durability policy: process, periodic (a power-safe point every second: the rings also
    /// keep what was written since the last one) or immediate. Safe points are kept on a file on
    /// a disk only (`--dir`): in `/dev/shm` every policy runs as process, and the run says so.
    #[arg(long, default_value_t = Policy::Periodic, value_parser = one_of::<Policy>("policy"))]
    durability: Policy,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The directory for the pool file (a new one, removed afterwards; default: /dev/shm or the
    /// temporary directory): the disk to measure.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write the rows to this directory: steady.csv and steady.json.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs `petra-bench steady`: a row per interval on stdout, then the times to open and close,
/// and with `--out` the files.
pub fn run(args: SteadyArgs) -> Result<()> {
    if !(args.interval > 0.0 && args.interval.is_finite()) {
        return Err(BenchError::InvalidArgument(format!(
            "interval {} s: give a positive number of seconds",
            args.interval
        )));
    }
    let case = SteadyCase {
        structure: args.structure,
        keys: args.keys,
        threads: args.threads,
        interval: std::time::Duration::from_secs_f64(args.interval),
        intervals: args.intervals,
        tx_size: args.tx_size,
        ring_bytes: args.ring_bytes,
        durability: args.durability,
        seed: args.seed,
    };
    let tmp = scratch_in(args.dir.as_deref())?;
    println!(
        "{} of {} keys, {} thread{}, {} ops per transaction, rings of {} MiB, durability {}, a row every {} s, pool in {}",
        described(args.structure),
        args.keys,
        args.threads,
        if args.threads == 1 { "" } else { "s" },
        args.tx_size,
        args.ring_bytes >> 20,
        args.durability,
        args.interval,
        tmp.path().display()
    );
    println!(
        "{:>8} {:>9} {:>12} {:>7} {:>12} {:>9} {:>10} {:>10} {:>6}",
        "interval", "at s", "tx/s", "rounds", "descriptors", "rounds s", "file MiB", "nodes MiB", "rings"
    );
    let progress = progress_bar(args.intervals, "intervals");
    let (rows, end) = run_case(&case, &tmp.path().join("steady.pool"), |r| {
        progress.suspend(|| {
            println!(
                "{:>8} {:>9.1} {:>12.0} {:>7} {:>12} {:>9.3} {:>10.1} {:>10.1} {:>6}",
                r.interval,
                r.at_secs,
                r.tx_per_sec,
                r.rounds,
                r.descriptors,
                r.round_secs,
                r.file_bytes as f64 / (1 << 20) as f64,
                r.node_bytes as f64 / (1 << 20) as f64,
                r.rings
            )
        });
        progress.inc(1);
    })?;
    progress.finish_and_clear();
    let total = rows.last().map_or(0.0, |r| r.at_secs);
    let busy: f64 = rows.iter().map(|r| r.round_secs).sum();
    let thread_secs = total * args.threads as f64;
    println!(
        "rounds took {busy:.2} s of the threads' {thread_secs:.1} s ({:.2}%)",
        100.0 * busy / thread_secs.max(1e-9)
    );
    println!(
        "open after a crash {:.3} s ({} descriptors read, {} keys), clean close {:.3} s, open after it {:.3} s",
        end.open_after_crash_secs, end.descriptors_read, end.present_keys, end.close_secs, end.open_after_close_secs
    );
    if let Some(out) = &args.out {
        wrote(crate::report::write_rows(out, "steady", &rows)?);
        wrote(crate::report::write_rows(out, "steady-end", std::slice::from_ref(&end))?);
    }
    Ok(())
}

/// The structure as the header line names it: `hash map`, `MDList`, `skiplist` or `list`.
fn described(structure: Structure) -> &'static str {
    match structure {
        Structure::HashMap => "hash map",
        Structure::MdList => "MDList",
        Structure::SkipList => "skiplist",
        Structure::List => "list",
    }
}

/// Writes a structure into the rows' files as the command line spells it (`mdlist`).
fn spelled<S: Serializer>(structure: &Structure, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(structure)
}

/// One run's settings.
#[derive(Debug, Clone)]
pub(crate) struct SteadyCase {
    /// The structure of the working set (a hash map gets as many buckets as keys).
    pub(crate) structure: Structure,
    /// Keys of the working set; half are put before the run.
    pub(crate) keys: u64,
    /// Threads running transactions.
    pub(crate) threads: usize,
    /// Length of an interval between samples of the counters.
    pub(crate) interval: Duration,
    /// Intervals run.
    pub(crate) intervals: usize,
    /// Ops per transaction: each a put (50%), a remove (25%) or a get (25%) of a uniform key.
    pub(crate) tx_size: usize,
    /// Bytes of a descriptor ring; a round starts when a thread's ring is a quarter full.
    pub(crate) ring_bytes: u64,
    /// The durability policy.
    pub(crate) durability: Policy,
    /// Seed of the keys and ops.
    pub(crate) seed: u64,
}

/// One interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SteadyRow {
    /// The structure run on, as `--structure` spells it.
    #[serde(serialize_with = "spelled")]
    pub(crate) structure: Structure,
    /// The interval's index, from 0.
    pub(crate) interval: usize,
    /// Seconds since the run started, at the interval's end.
    pub(crate) at_secs: f64,
    /// Committed transactions per second during the interval.
    pub(crate) tx_per_sec: f64,
    /// Checkpoint rounds run during the interval.
    pub(crate) rounds: u64,
    /// Descriptors they folded.
    pub(crate) descriptors: u64,
    /// Seconds the threads spent in them (each round runs on the thread whose ring called for
    /// it, between two of its transactions).
    pub(crate) round_secs: f64,
    /// The pool file's size at the interval's end, bytes.
    pub(crate) file_bytes: u64,
    /// The bytes of the pool's chunks that hold nodes (node slabs) at the interval's end: what
    /// the structure's nodes take, removed nodes given back.
    pub(crate) node_bytes: u64,
    /// Descriptor rings in the pool at the interval's end.
    pub(crate) rings: u64,
}

/// How long the pool took to open at the end of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SteadyEnd {
    /// After the run was left as a crash leaves it (recovery).
    pub(crate) open_after_crash_secs: f64,
    /// Descriptors that recovery read (those written since the last round's batch).
    pub(crate) descriptors_read: u64,
    /// The clean close after that.
    pub(crate) close_secs: f64,
    /// The open after the clean close (no recovery).
    pub(crate) open_after_close_secs: f64,
    /// Keys present at the end.
    pub(crate) present_keys: u64,
}

/// Runs the case on a new pool at `path`, calling `row` after each interval.
pub(crate) fn run_case(
    case: &SteadyCase,
    path: &Path,
    mut row: impl FnMut(&SteadyRow),
) -> Result<(Vec<SteadyRow>, SteadyEnd)> {
    if case.keys == 0 || case.threads == 0 || case.tx_size == 0 || case.tx_size > 64 {
        return Err(BenchError::InvalidArgument("--keys and --threads must be at least 1, --tx-size 1 to 64".into()));
    }
    let config = EngineConfig::rings(case.ring_bytes).durability(case.durability.policy());
    let engine = Engine::create(crate::pool::create_pool(path, false)?, config.clone())?;
    crate::cli::note_safe_points(&engine);
    let s = engine.create_structure(case.structure.kind(case.keys), KeyWidth::U64, Values::Words)?;
    crate::pool::put_in_batches(&engine, s, (0..case.keys).step_by(2).map(|k| (k, k)))?;
    let committed = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let rows = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..case.threads)
            .map(|t| {
                let (engine, committed, stop) = (&engine, &committed, &stop);
                let seed = case.seed.wrapping_mul(1_000_003).wrapping_add(t as u64);
                scope.spawn(move || worker(engine, s, case, seed, committed, stop))
            })
            .collect();
        let rows = sample(case, path, &engine, &committed, &mut row);
        // Relaxed: a stop flag; the joins publish what the workers did.
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap_or_else(|_| Err(BenchError::Panicked("a thread")))?;
        }
        rows
    })?;
    // Left as a crash leaves it: the next open recovers.
    let pool = engine.into_pool().map_err(|_| BenchError::Check("a handle outlived the run".into()))?;
    drop(pool);
    let t = Instant::now();
    let (engine, report) = Engine::open(crate::pool::open_pool(path)?, config.clone())?;
    let open_after_crash_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    engine.close()?;
    let close_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let (engine, clean) = Engine::open(crate::pool::open_pool(path)?, config)?;
    let open_after_close_secs = t.elapsed().as_secs_f64();
    if !clean.clean {
        return Err(BenchError::Check("the open after a clean close recovered".into()));
    }
    engine.close()?;
    let end = SteadyEnd {
        open_after_crash_secs,
        descriptors_read: report.descriptors,
        close_secs,
        open_after_close_secs,
        present_keys: report.present_keys,
    };
    Ok((rows, end))
}

/// The main thread's part: a row per interval, from the counters' differences.
fn sample(
    case: &SteadyCase,
    path: &Path,
    engine: &Engine<MmapMem>,
    committed: &AtomicU64,
    row: &mut impl FnMut(&SteadyRow),
) -> Result<Vec<SteadyRow>> {
    let start = Instant::now();
    let mut rows = Vec::with_capacity(case.intervals);
    // Relaxed: counters read for a report.
    let (mut last_committed, mut last_stats, mut last_at) =
        (committed.load(Ordering::Relaxed), engine.checkpoint_stats(), Duration::ZERO);
    for interval in 0..case.intervals {
        std::thread::sleep((case.interval * (interval as u32 + 1)).saturating_sub(start.elapsed()));
        let at = start.elapsed();
        let (now_committed, stats) = (committed.load(Ordering::Relaxed), engine.checkpoint_stats());
        let CheckpointStats { rounds, descriptors, busy, .. } = stats;
        let r = SteadyRow {
            structure: case.structure,
            interval,
            at_secs: at.as_secs_f64(),
            tx_per_sec: (now_committed - last_committed) as f64 / (at - last_at).as_secs_f64(),
            rounds: rounds - last_stats.rounds,
            descriptors: descriptors - last_stats.descriptors,
            round_secs: (busy - last_stats.busy).as_secs_f64(),
            file_bytes: std::fs::metadata(path)?.len(),
            node_bytes: engine.pool().chunk_counts().node * engine.pool().header().layout.chunk_size,
            rings: engine.rings() as u64,
        };
        row(&r);
        rows.push(r);
        (last_committed, last_stats, last_at) = (now_committed, stats, at);
    }
    Ok(rows)
}

/// One thread: transactions until told to stop, counted in `committed` every 256.
fn worker(
    engine: &Engine<MmapMem>,
    s: StructId,
    case: &SteadyCase,
    seed: u64,
    committed: &AtomicU64,
    stop: &AtomicBool,
) -> Result<()> {
    let mut h = engine.handle()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tx = Transaction::new();
    tx.sorted(true);
    // Relaxed: a stop flag.
    while !stop.load(Ordering::Relaxed) {
        let mut n = 0;
        for _ in 0..256 {
            tx.clear();
            for _ in 0..case.tx_size {
                let key = rng.random_range(0..case.keys);
                match rng.random_range(0..4) {
                    0 | 1 => tx.put(s, key, rng.random()),
                    2 => tx.remove(s, key),
                    _ => tx.get(s, key),
                };
            }
            n += h.execute(&tx)?.is_committed() as u64;
        }
        // Relaxed: a counter read for a report.
        committed.fetch_add(n, Ordering::Relaxed);
    }
    Ok(())
}

//! `petra-bench micro`: the dissertation's micro-benchmarks on PETRA's structures.
//!
//! Each configuration runs on a fresh pool file: the structure is prefilled (by default as the
//! C++ harness does it, [`Prefill::Harness`]), then every thread runs its share of transactions
//! drawn from the workload, with strict op semantics (a failed Insert, Delete or Find aborts its
//! transaction, as in the paper and the C++ harness). Nothing caps the threads at the cores: a
//! run of more threads than cores shows what lock-free progress is worth beside the locks.
//!
//! What is timed: the threads' transactions, and the checkpoint rounds that their rings' fill
//! starts on their threads (with a 64 MiB ring and the default fill of 25%, a short run may
//! start none, and a round on a page-cache pool folds only what a safe point covers). Not
//! timed: the prefill, and the folding of its descriptors into the records, done after it by
//! checkpoints whenever rounds are on ([`TxMap::settle`]); the C++ harness has no such work.
//!
//! Reported per configuration:
//! - **tx/s**: committed transactions per second of wall time;
//! - **ops/s**: operations of committed transactions per second (tx/s times the size);
//! - **abort %**: aborted transactions over all transactions run;
//! - **flushes/tx** and **fences/tx**: per committed or aborted transaction, counted.

mod report;
mod structures;

use std::fmt;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Instant;

use clap::ValueEnum;
use crossbeam_skiplist::SkipMap;
use petra::mem::MemCounts;
use rand::SeedableRng;
use rand::rngs::{SmallRng, StdRng};

use self::structures::run_petra;
use crate::baselines::boosted::Boosted;
use crate::baselines::locks::LockMap;
use crate::baselines::skipmap::SkipMapBound;
use crate::baselines::sorted_list::SortedList;
use crate::cli::{one_of, progress_bar, scratch, spell, wrote};
use crate::error::{BenchError, Result};
use crate::workload::{GenOp, Mix, Prefill, Workload};

use crate::targets::tx::{TxMap, TxWorker};

/// The dissertation's micro-benchmarks: transactions of strict inserts, deletes, updates and
/// finds on a structure, durable and volatile in one run.
///
/// tx/s counts committed transactions per second; ops/s counts their operations; abort % is
/// the share of transactions aborted because a strict op failed (or to break a helping
/// cycle); flushes/tx and fences/tx are counted over every transaction run.
#[derive(Debug, clap::Args)]
pub struct MicroArgs {
    /// The structure: list (defaults: key range 10K, mixes 40/40/20 and 10/10/80), skiplist or
    /// mdlist (key range 1M, the same mixes) or hashmap (key range 1M, mixes 40/30/10/20 and 10/10/5/75,
    /// insert/delete/update/find).
    #[arg(long, default_value_t = Structure::List, value_parser = one_of::<Structure>("structure"))]
    pub(crate) structure: Structure,
    /// Thread counts to run, comma-separated; any number, above the cores too.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    pub(crate) threads: Vec<usize>,
    /// Transaction sizes to run, comma-separated (1 to 16).
    #[arg(long = "tx-size", value_delimiter = ',', default_values_t = [1usize, 4])]
    pub(crate) tx_sizes: Vec<usize>,
    /// Keys are uniform in [0, key-range) (default: the structure's).
    #[arg(long)]
    pub(crate) key_range: Option<u64>,
    /// Operation mixes in percent, insert/delete/find or insert/delete/update/find (default: the
    /// structure's, from the dissertation).
    #[arg(long, value_delimiter = ',')]
    pub(crate) mix: Vec<String>,
    /// Transactions per thread.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) txs: u64,
    /// What the structure holds before timing: harness (as the C++ harness: KEY_RANGE one-insert
    /// transactions of uniform keys, leaving about 63% of the keys present) or a share of the key
    /// range from 0 to 1 (puts until that many keys are present).
    #[arg(long, default_value = "harness")]
    pub(crate) prefill: Prefill,
    /// What to run on, comma-separated: durable and volatile (PETRA with and without flushes
    /// and fences), locks (the lock-based structure of the same kind, volatile: the transaction
    /// takes its keys' striped locks in order and keeps an undo log, the dissertation's
    /// abstract-locking baseline, over a sorted linked list for the list, crossbeam-skiplist for
    /// the skiplist and the MDList, a lock-striped hash map for the hash map) and skipmap
    /// (crossbeam-skiplist, each op on its own with no transaction: an upper bound, neither
    /// atomic nor isolated). The baselines hold word values under one-word keys.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [Mode::Durable, Mode::Volatile, Mode::Locks, Mode::SkipMap],
        value_parser = one_of::<Mode>("mode")
    )]
    pub(crate) modes: Vec<Mode>,
    /// Directory for the pool files (default: /dev/shm if it exists, else the temporary directory).
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// Seed of the workloads.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Value size in bytes: 0 for word values (the dissertation's), otherwise byte values (blobs)
    /// of this size.
    #[arg(long, default_value_t = 0)]
    pub(crate) value_size: usize,
    /// Key width in bytes: 8 (u64 keys, the dissertation's) or 16 (two-word keys: each key k
    /// written as k in both words). Not for the mdlist, whose keys are one word.
    #[arg(long, default_value_t = 8)]
    pub(crate) key_bytes: usize,
    /// Checkpoint rounds start when a thread's descriptor ring (64 MiB) is this full, percent;
    /// 0 turns them off (what bounding the pool and recovery costs).
    #[arg(long = "checkpoint-fill", default_value_t = 25)]
    pub(crate) checkpoint_fill: u8,
    /// Also write the results to this directory: micro.csv, micro.json, and SVG plots of tx/s
    /// against threads (micro-threads.svg) and against transaction size (micro-txsize.svg)
    /// when more than one of each was run.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

/// Runs `petra-bench micro`: every configuration the arguments name, a row each on stdout, and
/// with `--out` the files.
pub fn run(args: MicroArgs) -> Result<()> {
    let mut modes = args.modes.clone();
    if args.value_size > 0 || args.key_bytes != 8 {
        // The baselines hold word values under one-word keys only.
        modes.retain(|m| matches!(m, Mode::Durable | Mode::Volatile));
    }
    let structure = args.structure;
    let (default_range, default_mixes): (u64, &[&str]) = match structure {
        Structure::List => (10_000, &["40/40/20", "10/10/80"]),
        Structure::HashMap => (1_000_000, &["40/30/10/20", "10/10/5/75"]),
        Structure::SkipList | Structure::MdList => (1_000_000, &["40/40/20", "10/10/80"]),
    };
    let key_range = args.key_range.unwrap_or(default_range);
    let mix_names: Vec<String> =
        if args.mix.is_empty() { default_mixes.iter().map(|m| m.to_string()).collect() } else { args.mix.clone() };
    let mixes: Vec<Mix> = mix_names.iter().map(|m| Mix::parse(m)).collect::<Result<_, _>>()?;
    if let Some(&bad) = args.tx_sizes.iter().find(|&&s| s == 0 || s > 16) {
        return Err(BenchError::InvalidArgument(format!("transaction size {bad} is outside 1 to 16")));
    }
    if args.threads.contains(&0) {
        return Err(BenchError::InvalidArgument("thread counts must be at least 1".into()));
    }
    let tmp = match &args.dir {
        Some(_) => None,
        None => Some(scratch()?),
    };
    let dir = args.dir.clone().unwrap_or_else(|| tmp.as_ref().expect("made above").path().to_path_buf());
    let wide_keys = match args.key_bytes {
        8 => false,
        16 if structure != Structure::MdList => true,
        16 => return Err(BenchError::InvalidArgument("the mdlist's keys are one word: --key-bytes 8".into())),
        n => return Err(BenchError::InvalidArgument(format!("key width {n} bytes: use 8 or 16"))),
    };
    let values = match args.value_size {
        0 => "word values".to_string(),
        n => format!("{n}-byte values"),
    };
    let prefill = match args.prefill {
        Prefill::Harness => {
            format!("prefill harness (about {:.1}% present)", 100.0 * args.prefill.expected_share(key_range))
        }
        Prefill::Share(s) => format!("prefill {:.0}%", s * 100.0),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{}, {}-byte keys, {values}, key range {}, {} transactions per thread, {prefill}, {cores} cores, pool files in {}",
        structure,
        args.key_bytes,
        key_range,
        args.txs,
        dir.display()
    );
    print_header();
    let runs = mixes.len() * args.tx_sizes.len() * args.threads.len() * modes.len();
    let progress = progress_bar(runs, "runs");
    let mut all = Vec::new();
    for mix in &mixes {
        for &tx_size in &args.tx_sizes {
            for &threads in &args.threads {
                let mut volatile_tps = None;
                let mut rows = Vec::new();
                for &mode in &modes {
                    let case = MicroCase {
                        structure,
                        mode,
                        threads,
                        workload: Workload { key_range, mix: *mix, tx_size },
                        txs_per_thread: args.txs,
                        prefill: args.prefill,
                        seed: args.seed,
                        value_size: args.value_size,
                        wide_keys,
                        checkpoint_fill: args.checkpoint_fill,
                        pin: false,
                    };
                    let r = run_case(case, &dir)?;
                    progress.inc(1);
                    if mode == Mode::Volatile {
                        volatile_tps = Some(r.tx_per_sec());
                    }
                    rows.push(r);
                }
                for r in rows {
                    progress.suspend(|| print_row(&r, volatile_tps));
                    all.push(report::MicroRow::from(&r));
                }
            }
        }
    }
    progress.finish_and_clear();
    if let Some(out) = &args.out {
        wrote(report::write_all(out, &all)?);
    }
    Ok(())
}

/// Prints the head of the table of [`print_row`].
pub(crate) fn print_header() {
    println!(
        "{:<12} {:>8} {:>7} {:>7} {:>12} {:>12} {:>8} {:>10} {:>9} {:>12}",
        "mix", "mode", "threads", "tx size", "tx/s", "ops/s", "abort %", "flushes/tx", "fences/tx", "vs volatile"
    );
}

/// Prints the row of `r`, with its committed transactions per second over `volatile_tps`
/// (PETRA volatile's in the same configuration) where there is one.
pub(crate) fn print_row(r: &MicroResult, volatile_tps: Option<f64>) {
    let ratio = match (r.case.mode, volatile_tps) {
        (Mode::Volatile, _) | (_, None) => String::from("-"),
        (_, Some(v)) => format!("{:.2}", r.tx_per_sec() / v),
    };
    println!(
        "{:<12} {:>8} {:>7} {:>7} {:>12.0} {:>12.0} {:>8.1} {:>10.2} {:>9.2} {:>12}",
        r.case.workload.mix.to_string(),
        r.case.mode,
        r.case.threads,
        r.case.workload.tx_size,
        r.tx_per_sec(),
        r.ops_per_sec(),
        r.abort_pct(),
        r.flushes_per_tx(),
        r.fences_per_tx(),
        ratio
    );
}

/// What a run runs on: PETRA durable or volatile, or a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub(crate) enum Mode {
    /// PETRA, flushes and fences as the pool's durability requires.
    Durable,
    /// PETRA with flushes and fences off: the cost of durability is the difference.
    Volatile,
    /// The lock-based structure of the same kind, volatile: abstract locking with an undo log
    /// ([`LockMap`] for the hash map, [`Boosted`] over a [`SortedList`] for the list and over
    /// crossbeam-skiplist for the skiplist and the MDList).
    Locks,
    /// crossbeam-skiplist without transactions ([`crate::baselines::skipmap::SkipMapBound`]).
    SkipMap,
}

/// Its name in reports and on the command line.
impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        spell(self, f)
    }
}

/// Which of PETRA's structures a configuration runs on; the run sizes it (a hash map gets as many
/// buckets as keys in the range) when it makes the engine's [`petra::StructureKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub(crate) enum Structure {
    /// The list set.
    List,
    /// The hash map, with as many buckets as keys in the range.
    HashMap,
    /// The skiplist.
    SkipList,
    /// The multi-dimensional list.
    MdList,
}

impl Structure {
    /// The engine's kind of this structure over `keys` keys (a hash map gets as many buckets).
    pub(crate) fn kind(self, keys: u64) -> petra::StructureKind {
        match self {
            Structure::List => petra::StructureKind::List,
            Structure::HashMap => petra::StructureKind::HashMap { buckets: keys },
            Structure::SkipList => petra::StructureKind::SkipList,
            Structure::MdList => petra::StructureKind::MdList,
        }
    }
}

/// Its name in reports and on the command line.
impl fmt::Display for Structure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        spell(self, f)
    }
}

/// One configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MicroCase {
    /// The structure.
    pub(crate) structure: Structure,
    /// Durable or volatile.
    pub(crate) mode: Mode,
    /// Worker threads.
    pub(crate) threads: usize,
    /// The workload (key range, mix, transaction size).
    pub(crate) workload: Workload,
    /// Transactions per thread.
    pub(crate) txs_per_thread: u64,
    /// What the structure holds before timing starts.
    pub(crate) prefill: Prefill,
    /// Seed of the workload.
    pub(crate) seed: u64,
    /// 0: word values; otherwise byte values of this many bytes (blobs).
    pub(crate) value_size: usize,
    /// Two-word keys: key `k` of the workload is `k << 64 | k`.
    pub(crate) wide_keys: bool,
    /// The engine's [`petra::EngineConfig::checkpoint_fill`]: 0 turns checkpoint rounds off (the
    /// rings then hold every descriptor of the run, the prefill's too: it is not settled).
    pub(crate) checkpoint_fill: u8,
    /// Pin worker thread `t` to CPU `t + 1` where there is one, as the C++ harness does (its
    /// `sched_setaffinity` for a CPU that does not exist fails, and that thread runs unpinned).
    pub(crate) pin: bool,
}

/// What a configuration measured.
#[derive(Debug, Clone)]
pub(crate) struct MicroResult {
    /// The configuration.
    pub(crate) case: MicroCase,
    /// Keys present after the prefill.
    pub(crate) prefilled: u64,
    /// Committed transactions.
    pub(crate) committed: u64,
    /// Aborted transactions.
    pub(crate) aborted: u64,
    /// Wall seconds of the timed part.
    pub(crate) secs: f64,
    /// Flushes over all transactions.
    pub(crate) flushes: u64,
    /// Fences over all transactions.
    pub(crate) fences: u64,
}

impl MicroResult {
    /// Committed transactions per second.
    pub(crate) fn tx_per_sec(&self) -> f64 {
        self.committed as f64 / self.secs
    }
    /// Transactions run (committed and aborted) per second: what the C++ harness's time gives,
    /// THREADS * TEST_SIZE over its wall time.
    pub(crate) fn run_per_sec(&self) -> f64 {
        (self.committed + self.aborted) as f64 / self.secs
    }
    /// Operations of committed transactions per second.
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.tx_per_sec() * self.case.workload.tx_size as f64
    }
    /// Aborted share of all transactions, in percent.
    pub(crate) fn abort_pct(&self) -> f64 {
        100.0 * self.aborted as f64 / (self.committed + self.aborted).max(1) as f64
    }
    /// Flushes per transaction run.
    pub(crate) fn flushes_per_tx(&self) -> f64 {
        self.flushes as f64 / (self.committed + self.aborted).max(1) as f64
    }
    /// Fences per transaction run.
    pub(crate) fn fences_per_tx(&self) -> f64 {
        self.fences as f64 / (self.committed + self.aborted).max(1) as f64
    }
}

/// Runs one configuration on a fresh structure in a pool file under `dir`, or on a fresh
/// baseline map.
pub(crate) fn run_case(case: MicroCase, dir: &std::path::Path) -> Result<MicroResult> {
    match case.mode {
        Mode::Durable | Mode::Volatile => run_petra(case, dir),
        Mode::Locks => match case.structure {
            Structure::HashMap => measure(case, &LockMap::default()),
            Structure::List => measure(case, &Boosted::<SortedList>::default()),
            Structure::SkipList | Structure::MdList => measure(case, &Boosted::<SkipMap<u64, u64>>::default()),
        },
        Mode::SkipMap => measure(case, &SkipMapBound::default()),
    }
}

/// Prefills `map` over `[0, key_range)` as `prefill` says, on the calling thread, drawing from
/// `seed`; how many keys are present after it.
pub(crate) fn prefill<T: TxMap>(map: &T, key_range: u64, prefill: Prefill, seed: u64) -> Result<u64> {
    use rand::Rng;
    let mut worker = map.worker()?;
    let mut rng = StdRng::seed_from_u64(seed ^ 0xF111);
    let mut inserted = 0;
    match prefill {
        Prefill::Harness => {
            // The harness's loop: KEY_RANGE transactions of one strict Insert, of a uniform key;
            // one of a key already present fails.
            let mut op = [GenOp { kind: petra::OpKind::Insert, key: 0, value: 0 }];
            for _ in 0..key_range {
                op[0].key = rng.random_range(0..key_range);
                op[0].value = rng.random();
                inserted += u64::from(worker.run(&op)?);
            }
        }
        Prefill::Share(share) => {
            let target = (key_range as f64 * share) as u64;
            let mut keys = Vec::with_capacity(16);
            while inserted < target {
                keys.clear();
                keys.extend((0..16.min(target - inserted)).map(|_| rng.random_range(0..key_range)));
                inserted += worker.put_all(&keys)?;
            }
        }
    }
    Ok(inserted)
}

/// Prefills `map` ([`prefill`]) and settles it ([`TxMap::settle`]), then runs every thread's
/// share of transactions on it and times them. Every map draws the same keys and the same
/// transactions (the same seeds); flushes and fences are counted on PETRA's counting seam (none
/// elsewhere).
fn measure<T: TxMap>(case: MicroCase, map: &T) -> Result<MicroResult> {
    let w = case.workload;
    let prefilled = prefill(map, w.key_range, case.prefill, case.seed)?;
    map.settle()?;
    let barrier = Barrier::new(case.threads + 1);
    let (elapsed, per_thread) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..case.threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(u64, u64, MemCounts)> {
                    if case.pin {
                        // False (nothing done) when the CPU does not exist, as in the harness.
                        core_affinity::set_for_current(core_affinity::CoreId { id: t + 1 });
                    }
                    let worker = map.worker();
                    // Every thread reaches the barrier, even one whose worker failed: the timer
                    // waits for them all.
                    barrier.wait();
                    let mut worker = worker?;
                    // A small fast generator in the timed loop (xoshiro, as the harness's
                    // mt19937 is): drawing three numbers per op from ChaCha took a few percent
                    // of a run's time, which measured the generator rather than the map.
                    let mut rng = SmallRng::seed_from_u64(case.seed.wrapping_mul(1000) + t as u64);
                    let mut ops: Vec<GenOp> = Vec::with_capacity(w.tx_size);
                    let (mut committed, mut aborted) = (0, 0);
                    let before = MemCounts::current();
                    for _ in 0..case.txs_per_thread {
                        w.next_tx(&mut rng, &mut ops);
                        if worker.run(&ops)? {
                            committed += 1;
                        } else {
                            aborted += 1;
                        }
                    }
                    Ok((committed, aborted, MemCounts::current() - before))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = workers.into_iter().map(|h| h.join().expect("worker panicked")).collect();
        (start.elapsed(), results)
    });
    let mut r =
        MicroResult { case, prefilled, committed: 0, aborted: 0, secs: elapsed.as_secs_f64(), flushes: 0, fences: 0 };
    for p in per_thread {
        let (c, a, counts) = p?;
        r.committed += c;
        r.aborted += a;
        r.flushes += counts.flushes;
        r.fences += counts.fences;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of `[0, key_range)` that a Find finds in `map`.
    pub(crate) fn present<T: TxMap>(map: &T, key_range: u64) -> u64 {
        let mut w = map.worker().unwrap();
        (0..key_range).filter(|&key| w.run(&[GenOp { kind: petra::OpKind::Find, key, value: 0 }]).unwrap()).count()
            as u64
    }

    #[test]
    fn the_harness_prefill_leaves_one_minus_one_over_e_of_the_keys_in_every_baseline() {
        // 10 000 one-insert transactions of uniform keys in a range of 10 000: 6 321.4 keys present
        // in expectation, with a standard deviation of about 31. The seed fixes the count; every
        // baseline draws the same keys, so holds the same count, and holds what it reports.
        let range = 10_000;
        let counts = [
            (prefill(&LockMap::default(), range, Prefill::Harness, 1).unwrap(), {
                let m = LockMap::default();
                prefill(&m, range, Prefill::Harness, 1).unwrap();
                present(&m, range)
            }),
            (prefill(&Boosted::<SortedList>::default(), range, Prefill::Harness, 1).unwrap(), {
                let m = Boosted::<SortedList>::default();
                prefill(&m, range, Prefill::Harness, 1).unwrap();
                present(&m, range)
            }),
            (prefill(&Boosted::<SkipMap<u64, u64>>::default(), range, Prefill::Harness, 1).unwrap(), {
                let m = Boosted::<SkipMap<u64, u64>>::default();
                prefill(&m, range, Prefill::Harness, 1).unwrap();
                present(&m, range)
            }),
        ];
        let (reported, found) = counts[0];
        assert!(counts.iter().all(|&c| c == (reported, found)), "{counts:?}");
        assert_eq!(reported, found);
        let expected = Prefill::Harness.expected_share(range) * range as f64;
        assert!((reported as f64 - expected).abs() < 100.0, "{reported} present, {expected:.1} expected");
        // Another seed draws other keys: the count moves, within the same bound.
        let other = prefill(&LockMap::default(), range, Prefill::Harness, 2).unwrap();
        assert_ne!(other, reported);
        assert!((other as f64 - expected).abs() < 100.0, "{other} present, {expected:.1} expected");
    }

    #[test]
    fn a_share_prefill_fills_exactly_that_share() {
        let m = Boosted::<SortedList>::default();
        assert_eq!(prefill(&m, 1000, Prefill::Share(0.5), 3).unwrap(), 500);
        assert_eq!(present(&m, 1000), 500);
    }
}

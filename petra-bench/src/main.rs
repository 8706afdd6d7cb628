//! `petra-bench`: see `petra-bench --help`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use petra_bench::micro::{MicroCase, Mode, StructureKind, run};
use petra_bench::report::{KvRow, TatpRow};
use petra_bench::workload::{Mix, Workload};

/// Benchmarks of PETRA, the persistent transactional lock-free structures.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The dissertation's micro-benchmarks: transactions of strict inserts, deletes, updates and
    /// finds on a structure, durable and volatile in one run.
    ///
    /// tx/s counts committed transactions per second; ops/s counts their operations; abort % is
    /// the share of transactions aborted because a strict op failed (or to break a helping
    /// cycle); flushes/tx and fences/tx are counted over every transaction run.
    Micro(MicroArgs),
    /// pmemkv_bench's workloads on the key-value store (petra-kv) or on redb, run in the order
    /// given on one store per engine. Prints pmemkv_bench's CSV columns after the engine and
    /// thread count: benchmark, micros/op (wall time over operations), ops/sec, MB/s (keys and
    /// values moved), found (reads and removes that found their key), and with --histogram the
    /// 50th, 99th and 99.9th percentile latencies in microseconds.
    Kv(KvArgs),
    /// The metric store: durable ingest of samples of one set of u64 metrics, then latest-value
    /// reads and range queries, one thread.
    Metrics(MetricsArgs),
    /// TATP (the Telecom Application Transaction Processing benchmark) on PETRA's hash maps:
    /// populates the four tables, runs the seven-transaction mix (or UPDATE_LOCATION alone) and
    /// prints throughput and each type's success rate beside the specification's.
    Tatp(TatpArgs),
    /// What closing and opening cost: fills a pool, opens it after a crash (full recovery),
    /// overwrites some keys, closes it cleanly (their descriptors folded into the nodes) and
    /// opens it again (recovery skipped).
    Reopen(ReopenArgs),
    /// A long run on a fixed working set (a hash map) while the engine's checkpoint rounds fold
    /// and recycle the descriptors: throughput, rounds, their time and the pool file's size per
    /// interval; then the time to open after a crash and after a clean close.
    Steady(SteadyArgs),
    /// The C++ LFTT/PETRA harness's argument form, for results side by side with it:
    /// `lftt SET_TYPE THREADS TEST_SIZE TX_SIZE KEY_RANGE INSERT% DELETE% [UPDATE%]`. SET_TYPE 0
    /// runs PETRA (durable), 2 the abstract-locking baseline (the harness's boosting); 1 (its
    /// STM) is not built. TEST_SIZE is transactions per thread; keys are uniform in the range;
    /// nothing is prefilled, as in the harness. Prints the `micro` row.
    Lftt(LfttArgs),
}

#[derive(Debug, clap::Args)]
struct LfttArgs {
    /// 0: PETRA, 2: locks.
    set_type: u32,
    /// Threads.
    threads: usize,
    /// Transactions per thread.
    test_size: u64,
    /// Operations per transaction (1 to 16).
    tx_size: usize,
    /// Keys are uniform in [0, KEY_RANGE).
    key_range: u64,
    /// Inserts, percent.
    insert: u32,
    /// Deletes, percent.
    delete: u32,
    /// Updates, percent (maps); finds take the rest.
    update: Option<u32>,
    /// The structure (the harness's sets are lists).
    #[arg(long, default_value = "list")]
    structure: String,
}

#[derive(Debug, clap::Args)]
struct TatpArgs {
    /// Subscribers (the specification's scale; at least 100 000 for a conforming run).
    #[arg(long, default_value_t = 100_000)]
    subscribers: u64,
    /// Thread counts to run, comma-separated (each run on a fresh population).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    threads: Vec<usize>,
    /// Transactions per thread.
    #[arg(long, default_value_t = 200_000)]
    txs: u64,
    /// full (the seven types) or update-location.
    #[arg(long, default_value = "full")]
    mix: String,
    /// Modes to run: durable, volatile.
    #[arg(long, value_delimiter = ',', default_values_t = ["durable".to_string(), "volatile".to_string()])]
    modes: Vec<String>,
    /// Seed of the population and the transactions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the results to this directory: tatp.csv and tatp.json, a row per transaction
    /// type of each run.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct SteadyArgs {
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
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the rows to this directory: steady.csv and steady.json.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ReopenArgs {
    /// Keys in the pool.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Keys overwritten between the two opens (what the clean close folds into the nodes).
    #[arg(long, default_value_t = 100_000)]
    updates: u64,
    /// hashmap (of --keys buckets) or skiplist.
    #[arg(long, value_delimiter = ',', default_values_t = ["hashmap".to_string(), "skiplist".to_string()])]
    structure: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct KvArgs {
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

#[derive(Debug, clap::Args)]
struct MetricsArgs {
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

#[derive(Debug, clap::Args)]
struct MicroArgs {
    /// The structure: list (defaults: key range 10K, mixes 40/40/20 and 10/10/80), skiplist or
    /// mdlist (key range 1M, the same mixes) or hashmap (key range 1M, mixes 40/30/10/20 and 10/10/5/75,
    /// insert/delete/update/find).
    #[arg(long, default_value = "list")]
    structure: String,
    /// Thread counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    threads: Vec<usize>,
    /// Transaction sizes to run, comma-separated (1 to 16).
    #[arg(long = "tx-size", value_delimiter = ',', default_values_t = [1usize, 4])]
    tx_sizes: Vec<usize>,
    /// Keys are uniform in [0, key-range) (default: the structure's).
    #[arg(long)]
    key_range: Option<u64>,
    /// Operation mixes in percent, insert/delete/find or insert/delete/update/find (default: the
    /// structure's, from the dissertation).
    #[arg(long, value_delimiter = ',')]
    mix: Vec<String>,
    /// Transactions per thread.
    #[arg(long, default_value_t = 100_000)]
    txs: u64,
    /// Share of the key range inserted before timing.
    #[arg(long, default_value_t = 0.5)]
    prefill: f64,
    /// What to run on, comma-separated: durable and volatile (PETRA with and without flushes
    /// and fences), locks (a volatile map under 1 024 striped locks taken in order, with an undo
    /// log: the dissertation's abstract-locking baseline) and skipmap (crossbeam-skiplist, each op
    /// on its own with no transaction: an upper bound, neither atomic nor isolated). The
    /// baselines are the same whatever the structure, with word values and one-word keys.
    #[arg(long, value_delimiter = ',', default_values_t = ["durable".to_string(), "volatile".to_string(), "locks".to_string(), "skipmap".to_string()])]
    modes: Vec<String>,
    /// Directory for the pool files (default: /dev/shm if it exists, else the temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seed of the workloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Value size in bytes: 0 for word values (the dissertation's), otherwise byte values (blobs)
    /// of this size.
    #[arg(long, default_value_t = 0)]
    value_size: usize,
    /// Key width in bytes: 8 (u64 keys, the dissertation's) or 16 (two-word keys: each key k
    /// written as k in both words). Not for the mdlist, whose keys are one word.
    #[arg(long, default_value_t = 8)]
    key_bytes: usize,
    /// Checkpoint rounds start when a thread's descriptor ring (64 MiB) is this full, percent;
    /// 0 turns them off (what bounding the pool and recovery costs).
    #[arg(long = "checkpoint-fill", default_value_t = 25)]
    checkpoint_fill: u8,
    /// Also write the results to this directory: micro.csv, micro.json, and SVG plots of tx/s
    /// against threads (micro-threads.svg) and against transaction size (micro-txsize.svg)
    /// when more than one of each was run.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    // With no subcommand, the default suite: `micro` with its defaults.
    let command = cli.command.or_else(|| Cli::parse_from(["petra-bench", "micro"]).command).expect("micro parses");
    let result = match command {
        Command::Micro(args) => micro(args),
        Command::Kv(args) => kv(args),
        Command::Metrics(args) => metrics(args),
        Command::Tatp(args) => tatp(args),
        Command::Reopen(args) => reopen(args),
        Command::Steady(args) => steady(args),
        Command::Lftt(args) => lftt(args),
    };
    if let Err(e) = result {
        eprintln!("petra-bench: {e}");
        std::process::exit(2);
    }
}

fn micro(args: MicroArgs) -> Result<(), String> {
    let mut modes: Vec<Mode> = args.modes.iter().map(|m| Mode::parse(m)).collect::<Result<_, _>>()?;
    if args.value_size > 0 || args.key_bytes != 8 {
        // The baselines hold word values under one-word keys only.
        modes.retain(|m| matches!(m, Mode::Durable | Mode::Volatile));
    }
    let structure = StructureKind::parse(&args.structure)?;
    let (default_range, default_mixes): (u64, &[&str]) = match structure {
        StructureKind::List => (10_000, &["40/40/20", "10/10/80"]),
        StructureKind::HashMap => (1_000_000, &["40/30/10/20", "10/10/5/75"]),
        StructureKind::SkipList | StructureKind::MdList => (1_000_000, &["40/40/20", "10/10/80"]),
    };
    let key_range = args.key_range.unwrap_or(default_range);
    let mix_names: Vec<String> =
        if args.mix.is_empty() { default_mixes.iter().map(|m| m.to_string()).collect() } else { args.mix.clone() };
    let mixes: Vec<Mix> = mix_names.iter().map(|m| Mix::parse(m)).collect::<Result<_, _>>()?;
    if let Some(&bad) = args.tx_sizes.iter().find(|&&s| s == 0 || s > 16) {
        return Err(format!("transaction size {bad} is outside 1 to 16"));
    }
    if args.threads.contains(&0) {
        return Err("thread counts must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&args.prefill) {
        return Err(format!("prefill {} is outside 0 to 1", args.prefill));
    }
    let tmp = match &args.dir {
        Some(_) => None,
        None => Some(scratch()?),
    };
    let dir = args.dir.clone().unwrap_or_else(|| tmp.as_ref().expect("made above").path().to_path_buf());
    let wide_keys = match args.key_bytes {
        8 => false,
        16 if structure != StructureKind::MdList => true,
        16 => return Err("the mdlist's keys are one word: --key-bytes 8".into()),
        n => return Err(format!("key width {n} bytes: use 8 or 16")),
    };
    let values = match args.value_size {
        0 => "word values".to_string(),
        n => format!("{n}-byte values"),
    };
    println!(
        "{}, {}-byte keys, {values}, key range {}, {} transactions per thread, prefill {:.0}%, pool files in {}",
        structure.name(),
        args.key_bytes,
        key_range,
        args.txs,
        args.prefill * 100.0,
        dir.display()
    );
    println!(
        "{:<12} {:>8} {:>7} {:>7} {:>12} {:>12} {:>8} {:>10} {:>9} {:>12}",
        "mix", "mode", "threads", "tx size", "tx/s", "ops/s", "abort %", "flushes/tx", "fences/tx", "vs volatile"
    );
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
                    };
                    let r = run(case, &dir)?;
                    progress.inc(1);
                    if mode == Mode::Volatile {
                        volatile_tps = Some(r.tx_per_sec());
                    }
                    rows.push(r);
                }
                for r in rows {
                    let ratio = match (r.case.mode, volatile_tps) {
                        (Mode::Volatile, _) | (_, None) => String::from("-"),
                        (_, Some(v)) => format!("{:.2}", r.tx_per_sec() / v),
                    };
                    progress.suspend(|| {
                        println!(
                            "{:<12} {:>8} {:>7} {:>7} {:>12.0} {:>12.0} {:>8.1} {:>10.2} {:>9.2} {:>12}",
                            mix.to_string(),
                            r.case.mode.name(),
                            threads,
                            tx_size,
                            r.tx_per_sec(),
                            r.ops_per_sec(),
                            r.abort_pct(),
                            r.flushes_per_tx(),
                            r.fences_per_tx(),
                            ratio
                        )
                    });
                    all.push(petra_bench::report::MicroRow::from(&r));
                }
            }
        }
    }
    progress.finish_and_clear();
    if let Some(out) = &args.out {
        wrote(petra_bench::report::write_all(out, &all)?);
    }
    Ok(())
}

fn kv(args: KvArgs) -> Result<(), String> {
    use petra_bench::kv::{Engine, KvCase};
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
        petra_bench::kv::check(case, &args.benchmarks)?;
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
        petra_bench::kv::run(case, &args.benchmarks, &path, sizes, |r| {
            let row = KvRow::new(name, args.threads, r);
            progress.suspend(|| println!("{}", row.line()));
            progress.inc(1);
            rows.push(row);
        })?;
    }
    progress.finish_and_clear();
    if let Some(out) = &args.out {
        wrote(petra_bench::report::write_rows(out, "kv", &rows)?);
    }
    Ok(())
}

fn lftt(args: LfttArgs) -> Result<(), String> {
    let mode = match args.set_type {
        0 => "durable",
        2 => "locks",
        1 => return Err("set type 1 (an STM list) is not built: use 0 (PETRA) or 2 (locks)".into()),
        n => return Err(format!("set type {n}: use 0 (PETRA) or 2 (locks)")),
    };
    let mix = Mix::new(args.insert, args.delete, args.update.unwrap_or(0))?;
    micro(MicroArgs {
        structure: args.structure,
        threads: vec![args.threads],
        tx_sizes: vec![args.tx_size],
        key_range: Some(args.key_range),
        mix: vec![mix.to_string()],
        txs: args.test_size,
        prefill: 0.0,
        modes: vec![mode.to_string()],
        dir: None,
        seed: 1,
        value_size: 0,
        key_bytes: 8,
        checkpoint_fill: 25,
        out: None,
    })
}

fn tatp(args: TatpArgs) -> Result<(), String> {
    use petra_bench::tatp::{Mix, TatpCase, run_case};
    let mix = Mix::parse(&args.mix)?;
    let modes: Vec<bool> = args
        .modes
        .iter()
        .map(|m| match m.as_str() {
            "durable" => Ok(false),
            "volatile" => Ok(true),
            other => Err(format!("unknown mode {other:?}: use durable or volatile")),
        })
        .collect::<Result<_, _>>()?;
    if args.subscribers == 0 || args.threads.contains(&0) {
        return Err("--subscribers and --threads must be at least 1".into());
    }
    let tmp = scratch()?;
    println!(
        "TATP, {} subscribers, {} mix, {} transactions per thread, pool files in {}",
        args.subscribers,
        args.mix,
        args.txs,
        tmp.path().display()
    );
    let progress = progress_bar(args.threads.len() * modes.len(), "runs");
    let mut rows = Vec::new();
    for &threads in &args.threads {
        for &volatile in &modes {
            let case = TatpCase {
                subscribers: args.subscribers,
                threads,
                txs_per_thread: args.txs,
                mix,
                seed: args.seed,
                volatile,
            };
            let mode = if volatile { "volatile" } else { "durable" };
            let path = tmp.path().join(format!("tatp-{threads}-{mode}.pool"));
            let r = run_case(&case, &path)?;
            let _ = std::fs::remove_file(&path);
            progress.inc(1);
            let run_rows = TatpRow::of(&case, &r);
            progress.suspend(|| {
                println!(
                    "\n{mode}, {threads} thread{}: {:.0} tx/s; populated in {:.2} s (rows: subscriber {}, access_info {}, special_facility {}, call_forwarding {})",
                    if threads == 1 { "" } else { "s" },
                    r.tx_per_sec,
                    r.populate_secs,
                    r.rows[0],
                    r.rows[1],
                    r.rows[2],
                    r.rows[3]
                );
                println!(
                    "{:<24} {:>10} {:>10} {:>12} {:>12}",
                    "transaction", "run", "success %", "specified %", "implied %"
                );
                for t in &run_rows {
                    println!(
                        "{:<24} {:>10} {:>10.2} {:>12.2} {:>12.2}",
                        t.transaction, t.run, t.success_pct, t.specified_pct, t.implied_pct
                    );
                }
            });
            rows.extend(run_rows);
        }
    }
    progress.finish_and_clear();
    if let Some(out) = &args.out {
        wrote(petra_bench::report::write_rows(out, "tatp", &rows)?);
    }
    Ok(())
}

fn reopen(args: ReopenArgs) -> Result<(), String> {
    use petra_bench::reopen::{ReopenCase, run};
    let cases: Vec<ReopenCase> = args
        .structure
        .iter()
        .map(|s| {
            let structure = match s.as_str() {
                "hashmap" => petra::StructureKind::HashMap { buckets: args.keys.max(1) },
                "skiplist" => petra::StructureKind::SkipList,
                other => return Err(format!("unknown structure {other:?}: use hashmap or skiplist")),
            };
            Ok(ReopenCase { structure, keys: args.keys, updates: args.updates })
        })
        .collect::<Result<_, _>>()?;
    let tmp = scratch()?;
    println!(
        "{} keys, {} overwritten before the clean close, pool files in {}",
        args.keys,
        args.updates,
        tmp.path().display()
    );
    println!(
        "{:<10} {:>9} {:>15} {:>12} {:>12} {:>15} {:>10}",
        "structure", "fill s", "open, crash s", "descriptors", "close s", "open, clean s", "file MiB"
    );
    for (case, name) in cases.iter().zip(&args.structure) {
        let path = tmp.path().join(format!("{name}.pool"));
        let r = run(case, &path)?;
        let _ = std::fs::remove_file(&path);
        let descriptors = r.after_crash.report.as_ref().map_or(0, |r| r.descriptors);
        println!(
            "{name:<10} {:>9.2} {:>15.3} {descriptors:>12} {:>12.3} {:>15.3} {:>10.1}",
            r.fill_secs,
            r.after_crash.secs,
            r.close.secs,
            r.after_close.secs,
            r.file_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

fn steady(args: SteadyArgs) -> Result<(), String> {
    use petra_bench::steady::{SteadyCase, run};
    if !(args.interval > 0.0 && args.interval.is_finite()) {
        return Err(format!("interval {} s: give a positive number of seconds", args.interval));
    }
    let case = SteadyCase {
        keys: args.keys,
        threads: args.threads,
        interval: std::time::Duration::from_secs_f64(args.interval),
        intervals: args.intervals,
        tx_size: args.tx_size,
        ring_bytes: args.ring_bytes,
        seed: args.seed,
    };
    let tmp = scratch()?;
    println!(
        "hash map of {} keys, {} thread{}, {} ops per transaction, rings of {} MiB, a row every {} s, pool in {}",
        args.keys,
        args.threads,
        if args.threads == 1 { "" } else { "s" },
        args.tx_size,
        args.ring_bytes >> 20,
        args.interval,
        tmp.path().display()
    );
    println!(
        "{:>8} {:>9} {:>12} {:>7} {:>12} {:>9} {:>10} {:>6}",
        "interval", "at s", "tx/s", "rounds", "descriptors", "rounds s", "file MiB", "rings"
    );
    let progress = progress_bar(args.intervals, "intervals");
    let (rows, end) = run(&case, &tmp.path().join("steady.pool"), |r| {
        progress.suspend(|| {
            println!(
                "{:>8} {:>9.1} {:>12.0} {:>7} {:>12} {:>9.3} {:>10.1} {:>6}",
                r.interval,
                r.at_secs,
                r.tx_per_sec,
                r.rounds,
                r.descriptors,
                r.round_secs,
                r.file_bytes as f64 / (1 << 20) as f64,
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
        wrote(petra_bench::report::write_rows(out, "steady", &rows)?);
        wrote(petra_bench::report::write_rows(out, "steady-end", std::slice::from_ref(&end))?);
    }
    Ok(())
}

fn metrics(args: MetricsArgs) -> Result<(), String> {
    use petra_bench::metrics::{MetricsCase, MetricsEngine, run_on};
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

/// Says on stderr which files a run wrote (stdout keeps the results alone).
fn wrote(files: Vec<std::path::PathBuf>) {
    for file in files {
        eprintln!("wrote {}", file.display());
    }
}

/// A progress bar of `len` steps on stderr, drawn only when stderr is a terminal.
fn progress_bar(len: usize, unit: &str) -> indicatif::ProgressBar {
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit}, {{elapsed}} ({{eta}} left)");
    indicatif::ProgressBar::new(len as u64)
        .with_style(indicatif::ProgressStyle::with_template(&template).expect("a valid template"))
}

/// A scratch directory under /dev/shm where it exists, else the temporary directory.
fn scratch() -> Result<tempfile::TempDir, String> {
    petra_recovery::try_scratch_dir().map_err(|e| format!("cannot make a scratch directory: {e}"))
}

//! `petra-bench`: see `petra-bench --help`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use petra_bench::micro::{MicroCase, Mode, StructureKind, run};
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
    /// Modes to run: durable, volatile.
    #[arg(long, value_delimiter = ',', default_values_t = ["durable".to_string(), "volatile".to_string()])]
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
}

fn main() {
    let cli = Cli::parse();
    // With no subcommand, the default suite: `micro` with its defaults.
    let command = cli.command.or_else(|| Cli::parse_from(["petra-bench", "micro"]).command).expect("micro parses");
    let result = match command {
        Command::Micro(args) => micro(args),
    };
    if let Err(e) = result {
        eprintln!("petra-bench: {e}");
        std::process::exit(2);
    }
}

fn micro(args: MicroArgs) -> Result<(), String> {
    let modes: Vec<Mode> = args
        .modes
        .iter()
        .map(|m| match m.as_str() {
            "durable" => Ok(Mode::Durable),
            "volatile" => Ok(Mode::Volatile),
            other => Err(format!("unknown mode {other:?}: use durable or volatile")),
        })
        .collect::<Result<_, _>>()?;
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
                    };
                    let r = run(case, &dir)?;
                    if mode == Mode::Volatile {
                        volatile_tps = Some(r.tx_per_sec());
                    }
                    rows.push(r);
                }
                for r in rows {
                    let ratio = match (r.case.mode, volatile_tps) {
                        (Mode::Durable, Some(v)) => format!("{:.2}", r.tx_per_sec() / v),
                        _ => String::from("-"),
                    };
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
                    );
                }
            }
        }
    }
    Ok(())
}

/// A scratch directory under /dev/shm where it exists, else the temporary directory.
fn scratch() -> Result<tempfile::TempDir, String> {
    let mut b = tempfile::Builder::new();
    b.prefix("petra-bench-");
    let shm = std::path::Path::new("/dev/shm");
    let made = if shm.is_dir() { b.tempdir_in(shm) } else { b.tempdir() };
    made.map_err(|e| format!("cannot make a scratch directory: {e}"))
}

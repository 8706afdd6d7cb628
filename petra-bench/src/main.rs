//! `petra-bench`: see `petra-bench --help`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use petra_bench::micro::{MicroCase, Mode, run_list};
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
    /// The dissertation's micro-benchmarks: transactions of strict inserts, deletes and finds on
    /// the list set, durable and volatile in one run.
    ///
    /// tx/s counts committed transactions per second; ops/s counts their operations; abort % is
    /// the share of transactions aborted because a strict op failed (or to break a helping
    /// cycle); flushes/tx and fences/tx are counted over every transaction run.
    Micro(MicroArgs),
}

#[derive(Debug, clap::Args)]
struct MicroArgs {
    /// Thread counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    threads: Vec<usize>,
    /// Transaction sizes to run, comma-separated (1 to 16).
    #[arg(long = "tx-size", value_delimiter = ',', default_values_t = [1usize, 4])]
    tx_sizes: Vec<usize>,
    /// Keys are uniform in [0, key-range).
    #[arg(long, default_value_t = 10_000)]
    key_range: u64,
    /// Operation mix, insert/delete/find in percent (the dissertation's lists: 40/40/20 and 10/10/80).
    #[arg(long, value_delimiter = ',', default_values_t = ["40/40/20".to_string(), "10/10/80".to_string()])]
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
    let mixes: Vec<Mix> = args.mix.iter().map(|m| Mix::parse(m)).collect::<Result<_, _>>()?;
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
    println!(
        "list set, key range {}, {} transactions per thread, prefill {:.0}%, pool files in {}",
        args.key_range,
        args.txs,
        args.prefill * 100.0,
        dir.display()
    );
    println!(
        "{:<9} {:>8} {:>7} {:>7} {:>12} {:>12} {:>8} {:>10} {:>9} {:>12}",
        "mix", "mode", "threads", "tx size", "tx/s", "ops/s", "abort %", "flushes/tx", "fences/tx", "vs volatile"
    );
    for mix in &mixes {
        for &tx_size in &args.tx_sizes {
            for &threads in &args.threads {
                let mut volatile_tps = None;
                let mut rows = Vec::new();
                for &mode in &modes {
                    let case = MicroCase {
                        mode,
                        threads,
                        workload: Workload { key_range: args.key_range, mix: *mix, tx_size },
                        txs_per_thread: args.txs,
                        prefill: args.prefill,
                        seed: args.seed,
                    };
                    let r = run_list(case, &dir)?;
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
                        "{:<9} {:>8} {:>7} {:>7} {:>12.0} {:>12.0} {:>8.1} {:>10.2} {:>9.2} {:>12}",
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

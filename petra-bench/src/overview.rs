//! `petra-bench overview`, the main job (`petra-bench` with no subcommand): each of PETRA's
//! structures, durable and volatile, beside a lock-based structure of the same kind doing the
//! same strict transactions, in a couple of minutes.
//!
//! The configurations are `micro`'s (the dissertation's key ranges and mixes, the C++ harness's
//! prefill) on the list, the skiplist, the MDList and the hash map; the lock-based structure is
//! `micro`'s `locks` mode for each: a sorted linked list, crossbeam-skiplist (also beside the
//! MDList, as the ordered map of that kind), a lock-striped hash map, each under the
//! transaction's striped key locks taken in order, with an undo log.

use std::time::Instant;

use crate::cli::{progress_bar, scratch};
use crate::error::{BenchError, Result};
use crate::micro::{self, MicroCase, MicroResult, Mode, Structure};
use crate::workload::{Mix, Prefill, Workload};

/// Each structure, durable and volatile, beside a lock-based structure of its kind: the main
/// job, what `petra-bench` runs with no subcommand.
#[derive(Debug, clap::Args)]
pub struct OverviewArgs {
    /// Transactions per thread in each run.
    #[arg(long, default_value_t = 20_000)]
    txs: u64,
    /// Thread counts, comma-separated (default: 1 and the number of cores).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Operations per transaction (1 to 16).
    #[arg(long = "tx-size", default_value_t = 4)]
    tx_size: usize,
    /// Seed of the workloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The structures in the order shown, with their key range, their two mixes (write-heavy, then
/// read-mostly) and what their lock-based baseline is.
const STRUCTURES: [(Structure, u64, [&str; 2], &str); 4] = [
    (Structure::List, 10_000, ["40/40/20", "10/10/80"], "sorted linked list"),
    (Structure::SkipList, 1_000_000, ["40/40/20", "10/10/80"], "crossbeam-skiplist"),
    (Structure::MdList, 1_000_000, ["40/40/20", "10/10/80"], "crossbeam-skiplist (ordered map)"),
    (Structure::HashMap, 1_000_000, ["40/30/10/20", "10/10/5/75"], "lock-striped hash map"),
];

/// Runs the main job: a row per structure, mix and thread count, on stdout.
pub fn run(args: OverviewArgs) -> Result<()> {
    let started = Instant::now();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = args.threads.clone();
    if threads.is_empty() {
        threads = vec![1, cores];
        threads.dedup();
    }
    if threads.contains(&0) {
        return Err(BenchError::InvalidArgument("thread counts must be at least 1".into()));
    }
    if args.tx_size == 0 || args.tx_size > 16 {
        return Err(BenchError::InvalidArgument(format!("transaction size {} is outside 1 to 16", args.tx_size)));
    }
    let tmp = scratch()?;
    println!(
        "PETRA's structures beside lock-based ones of the same kind: {}-op strict transactions, {} per thread, \
         prefilled as the C++ harness (63% of the keys), {cores} cores",
        args.tx_size, args.txs
    );
    println!(
        "tx/s: committed transactions per second; durable survives a crash (flush and fence), volatile and \
         locks do not; durable/locks above 1: PETRA, durable, outruns the volatile lock-based structure"
    );
    println!(
        "{:<9} {:<12} {:>7} {:>12} {:>13} {:>10} {:>13} {:>7}  lock-based structure (key locks, undo log)",
        "structure", "mix", "threads", "durable tx/s", "volatile tx/s", "locks tx/s", "durable/locks", "abort %"
    );
    let progress = progress_bar(STRUCTURES.len() * 2 * threads.len() * 3, "runs");
    for (structure, key_range, mixes, baseline) in STRUCTURES {
        for mix in mixes {
            let mix = Mix::parse(mix)?;
            for &t in &threads {
                let run = |mode| -> Result<MicroResult> {
                    let case = MicroCase {
                        structure,
                        mode,
                        threads: t,
                        workload: Workload { key_range, mix, tx_size: args.tx_size },
                        txs_per_thread: args.txs,
                        prefill: Prefill::Harness,
                        seed: args.seed,
                        value_size: 0,
                        wide_keys: false,
                        checkpoint_fill: 25,
                        pin: false,
                    };
                    let r = micro::run_case(case, tmp.path());
                    progress.inc(1);
                    r
                };
                let (durable, volatile, locks) = (run(Mode::Durable)?, run(Mode::Volatile)?, run(Mode::Locks)?);
                progress.suspend(|| {
                    println!(
                        "{:<9} {:<12} {:>7} {:>12.0} {:>13.0} {:>10.0} {:>13.2} {:>7.1}  {baseline}",
                        structure.to_string(),
                        mix.to_string(),
                        t,
                        durable.tx_per_sec(),
                        volatile.tx_per_sec(),
                        locks.tx_per_sec(),
                        durable.tx_per_sec() / locks.tx_per_sec(),
                        durable.abort_pct(),
                    )
                });
            }
        }
    }
    progress.finish_and_clear();
    println!("took {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

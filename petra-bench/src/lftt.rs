//! `petra-bench lftt`: the C++ PETRA harness's argument form and work (`bench/main.cc` of
//! PETRA-Non-Pmem, which drives `trans`, `transRomulus` and `transOneFile`), run as a `micro`
//! configuration, for a row beside the C++ one.

use crate::cli::{one_of, scratch};
use crate::error::{BenchError, Result};
use crate::micro::{self, MicroCase, Mode, Structure};
use crate::workload::{Mix, Prefill, Workload};

/// The C++ PETRA harness's arguments and work:
/// `lftt SET_TYPE THREADS TEST_SIZE TX_SIZE KEY_RANGE INSERT% DELETE% [UPDATE%]`.
///
/// SET_TYPE as the harness numbers it: 0 the list, 1 the skiplist, 2 the MDList, 3 the hash
/// map (UPDATE% for the map only; finds take the rest). The work is the harness's: the
/// structure is prefilled with KEY_RANGE transactions of one Insert of a uniform key on one
/// thread (about 63% of the keys present), then THREADS threads each run TEST_SIZE transactions
/// of TX_SIZE ops, each op's kind drawn from the mix and its key uniform in the range, with
/// strict semantics, thread `t` pinned to CPU `t + 1` if there is one (as the harness pins); the
/// time runs from the threads' start (past their set-up) to the last one's end. Prints the
/// `micro` row and a last line with what the harness's time gives: every transaction run,
/// committed or aborted, per second.
#[derive(Debug, clap::Args)]
pub struct LfttArgs {
    /// 0: list, 1: skiplist, 2: MDList, 3: hash map.
    set_type: u32,
    /// Threads.
    threads: usize,
    /// Transactions per thread.
    test_size: u64,
    /// Operations per transaction (1 to 16).
    tx_size: usize,
    /// Keys are uniform in a range of KEY_RANGE keys.
    key_range: u64,
    /// Inserts, percent.
    insert: u32,
    /// Deletes, percent.
    delete: u32,
    /// Updates, percent (the map only); finds take the rest.
    update: Option<u32>,
    /// What runs the work: durable (PETRA, the harness's `trans`), volatile (PETRA without
    /// flushes and fences), locks (the lock-based structure of the same kind, see `micro`).
    #[arg(long, default_value_t = Mode::Durable, value_parser = one_of::<Mode>("mode"))]
    mode: Mode,
    /// Seed of the prefill and of the threads' transactions (the harness seeds from the clock).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Runs `petra-bench lftt`: the harness's arguments as one `micro` configuration.
pub fn run(args: LfttArgs) -> Result<()> {
    let structure = match args.set_type {
        0 => Structure::List,
        1 => Structure::SkipList,
        2 => Structure::MdList,
        3 => Structure::HashMap,
        n => {
            return Err(BenchError::InvalidArgument(format!(
                "set type {n}: use 0 (list), 1 (skiplist), 2 (MDList) or 3 (hash map)"
            )));
        }
    };
    if args.update.is_some_and(|u| u > 0) && structure != Structure::HashMap {
        return Err(BenchError::InvalidArgument("UPDATE% is for the map (set type 3): the sets have no update".into()));
    }
    if args.tx_size == 0 || args.tx_size > 16 {
        return Err(BenchError::InvalidArgument(format!("transaction size {} is outside 1 to 16", args.tx_size)));
    }
    if args.threads == 0 || args.key_range == 0 {
        return Err(BenchError::InvalidArgument("THREADS and KEY_RANGE must be at least 1".into()));
    }
    let mix = Mix::new(args.insert, args.delete, args.update.unwrap_or(0))?;
    let case = MicroCase {
        structure,
        mode: args.mode,
        threads: args.threads,
        workload: Workload { key_range: args.key_range, mix, tx_size: args.tx_size },
        txs_per_thread: args.test_size,
        prefill: Prefill::Harness,
        seed: args.seed,
        value_size: 0,
        wide_keys: false,
        checkpoint_fill: 25,
        pin: true,
    };
    let tmp = scratch()?;
    let r = micro::run_case(case, tmp.path())?;
    println!(
        "{structure}, key range {}, {} transactions per thread, prefill harness: {} keys present",
        args.key_range, args.test_size, r.prefilled
    );
    micro::print_header();
    micro::print_row(&r, None);
    println!(
        "{} transactions run in {:.6} s (committed {}, aborted {}): {:.0} transactions per second",
        r.committed + r.aborted,
        r.secs,
        r.committed,
        r.aborted,
        r.run_per_sec()
    );
    Ok(())
}

//! `petra-bench lftt`: the C++ LFTT/PETRA harness's argument form, run as a `micro`
//! configuration.

use crate::cli::one_of;
use crate::error::{BenchError, Result};
use crate::micro::{self, MicroArgs, Mode, Structure};
use crate::workload::Mix;

/// The C++ LFTT/PETRA harness's argument form, for results side by side with it:
/// `lftt SET_TYPE THREADS TEST_SIZE TX_SIZE KEY_RANGE INSERT% DELETE% [UPDATE%]`. SET_TYPE 0
/// runs PETRA (durable), 2 the abstract-locking baseline (the harness's boosting); 1 (its
/// STM) is not built. TEST_SIZE is transactions per thread; keys are uniform in the range;
/// nothing is prefilled, as in the harness. Prints the `micro` row.
#[derive(Debug, clap::Args)]
pub struct LfttArgs {
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
    #[arg(long, default_value_t = Structure::List, value_parser = one_of::<Structure>("structure"))]
    structure: Structure,
}

/// Runs `petra-bench lftt`: the harness's arguments as one `micro` configuration.
pub fn run(args: LfttArgs) -> Result<()> {
    let mode = match args.set_type {
        0 => Mode::Durable,
        2 => Mode::Locks,
        1 => {
            return Err(BenchError::InvalidArgument(
                "set type 1 (an STM list) is not built: use 0 (PETRA) or 2 (locks)".into(),
            ));
        }
        n => return Err(BenchError::InvalidArgument(format!("set type {n}: use 0 (PETRA) or 2 (locks)"))),
    };
    let mix = Mix::new(args.insert, args.delete, args.update.unwrap_or(0))?;
    micro::run(MicroArgs {
        structure: args.structure,
        threads: vec![args.threads],
        tx_sizes: vec![args.tx_size],
        key_range: Some(args.key_range),
        mix: vec![mix.to_string()],
        txs: args.test_size,
        prefill: 0.0,
        modes: vec![mode],
        dir: None,
        seed: 1,
        value_size: 0,
        key_bytes: 8,
        checkpoint_fill: 25,
        out: None,
    })
}

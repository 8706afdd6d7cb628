//! `petra-salvage DAMAGED NEW`: copies what is intact of a damaged store (or metric store) into a
//! new file, listing everything it passed over. The damaged file is never written.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use petra_kv::{Config, CreateMode};

/// Copies what is intact of a damaged PETRA store into a new file, and lists what it passed over.
#[derive(Debug, Parser)]
#[command(name = "petra-salvage", version)]
struct Args {
    /// The damaged store file (read, never written).
    damaged: PathBuf,
    /// The new file (must not exist).
    new: PathBuf,
    /// Bytes the new file may grow to.
    #[arg(long, default_value_t = 16 << 30)]
    max_size: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let to = Config { create: CreateMode::Create, max_size: args.max_size, ..Config::new(&args.new) };
    match petra_kv::salvage(&args.damaged, &to) {
        Ok(report) => {
            for d in &report.dropped {
                println!("passed over: {d}");
            }
            println!(
                "{}: {} keys kept, {} pieces of damage passed over",
                args.new.display(),
                report.kept,
                report.dropped.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("petra-salvage: {e}");
            ExitCode::FAILURE
        }
    }
}

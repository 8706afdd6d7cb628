//! `petra-bench`: see `petra-bench --help`.

use clap::{Parser, Subcommand};
use petra_bench::{fsync, kv, lftt, metrics, micro, overview, reopen, steady, tatp};

/// A thread-caching allocator, as the C++ harness links tcmalloc. The engine's epoch collector
/// allocates bags and queue blocks on one thread and frees them on another; glibc's malloc then
/// takes the other thread's arena lock, and two threads on two cores wait on each other's
/// (thousands of futex calls in a 2-thread `lftt` run, a handful with this allocator).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Benchmarks of PETRA, the persistent transactional lock-free structures.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands; each module documents its own and owns its arguments.
#[derive(Debug, Subcommand)]
enum Command {
    Overview(overview::OverviewArgs),
    Micro(micro::MicroArgs),
    Kv(kv::KvArgs),
    Metrics(metrics::MetricsArgs),
    Tatp(tatp::TatpArgs),
    Reopen(reopen::ReopenArgs),
    Steady(steady::SteadyArgs),
    Lftt(lftt::LfttArgs),
    Fsync(fsync::FsyncArgs),
}

fn main() {
    let cli = Cli::parse();
    // With no subcommand, the main job: `overview` with its defaults.
    let command =
        cli.command.or_else(|| Cli::parse_from(["petra-bench", "overview"]).command).expect("overview parses");
    let result = match command {
        Command::Overview(args) => overview::run(args),
        Command::Micro(args) => micro::run(args),
        Command::Kv(args) => kv::run(args),
        Command::Metrics(args) => metrics::run(args),
        Command::Tatp(args) => tatp::run(args),
        Command::Reopen(args) => reopen::run(args),
        Command::Steady(args) => steady::run(args),
        Command::Lftt(args) => lftt::run(args),
        Command::Fsync(args) => fsync::run(args),
    };
    if let Err(e) = result {
        eprintln!("petra-bench: {e}");
        std::process::exit(2);
    }
}

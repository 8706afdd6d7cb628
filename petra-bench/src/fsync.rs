//! `petra-bench fsync`: the disk's own limit for durable commits, to set beside `kv` and
//! `metrics` with `--durability immediate`: the latency of `fdatasync` after a 4 KiB write into a
//! file whose blocks are already allocated (what a commit that syncs its pages pays at least),
//! and the commits per second one thread could make at that pace.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cli::scratch_in;
use crate::error::{BenchError, Result};

/// The disk's own limit for durable commits: the latency of fdatasync after a 4 KiB write into
/// an allocated file, in the directory given (the disk to measure)
#[derive(Debug, clap::Args)]
pub struct FsyncArgs {
    /// The directory for the file (a new one, removed afterwards; default: /dev/shm or the
    /// temporary directory): the disk to measure.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Writes, each followed by fdatasync.
    #[arg(long, default_value_t = 1_000)]
    writes: usize,
}

/// The file's size: the writes go round it a page at a time.
const SPAN: u64 = 1 << 20;
const PAGE: usize = 4096;

/// Runs `petra-bench fsync`: one line on stdout.
pub fn run(args: FsyncArgs) -> Result<()> {
    if args.writes == 0 {
        return Err(BenchError::InvalidArgument("--writes must be at least 1".into()));
    }
    let tmp = scratch_in(args.dir.as_deref())?;
    let path = tmp.path().join("fsync.dat");
    let mut file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    // Allocated and on the disk before the first timed write: a sync then writes data, not the
    // file's size or its block map.
    file.write_all(&vec![0u8; SPAN as usize])?;
    file.sync_all()?;
    let mut page = [0u8; PAGE];
    let mut latencies = Vec::with_capacity(args.writes);
    for i in 0..args.writes {
        page.fill(i as u8);
        let at = (i as u64 * PAGE as u64) % SPAN;
        let start = Instant::now();
        file.write_all_at(&page, at)?;
        file.sync_data()?;
        latencies.push(start.elapsed());
    }
    latencies.sort_unstable();
    let at = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];
    let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "fdatasync after a 4 KiB write in {}: {} writes, median {:.0} us, p99 {:.0} us, mean {:.0} us: {:.0} syncs/s on one thread",
        tmp.path().parent().unwrap_or(tmp.path()).display(),
        args.writes,
        us(at(50)),
        us(at(99)),
        us(mean),
        1.0 / mean.as_secs_f64()
    );
    Ok(())
}

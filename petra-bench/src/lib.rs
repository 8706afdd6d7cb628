//! Benchmarks of PETRA: the library of the `petra-bench` command.
//!
//! Each subcommand has a module that owns its arguments and its `run`:
//!
//! - [`overview`], the main job (no subcommand): each structure, durable and volatile, beside a
//!   lock-based structure of its kind doing the same transactions.
//! - [`micro`]: the dissertation's micro-benchmarks on the list, the hash map, the skiplist and
//!   the MDList, durable and volatile in one run, with throughput, abort rate and flushes and
//!   fences per transaction, beside the baselines: abstract locking with an undo log over a
//!   structure of the same kind, and crossbeam-skiplist without transactions; any thread count.
//! - [`kv`]: pmemkv_bench's workloads on the key-value store and on redb, one or more threads.
//! - [`metrics`]: the metric store's ingest, latest-value reads and range queries.
//! - [`tatp`]: TATP on PETRA's hash maps.
//! - [`reopen`]: what a clean close, and an open after it or after a crash, cost.
//! - [`fsync`]: the disk's own limit for durable commits (fdatasync after a 4 KiB write).
//! - [`steady`]: a long run on a fixed working set while checkpoint rounds keep the pool flat.
//! - [`lftt`]: the C++ PETRA harness's argument form and work (its prefill, ranges, mixes),
//!   run as a `micro` configuration, for rows beside the C++ ones
//!   (`petra-bench/scripts/side-by-side.sh` runs both).
//!
//! Their runs fail with one error, [`error::BenchError`]. Inside the crate they share
//! `baselines` (the competitors, one adapter a file: the lock-based structures, crossbeam-skiplist
//! and redb), `workload` (the generators `micro` draws from), `pool` (PETRA's pool files), `targets` (the
//! traits each benchmark drives, below both the benchmarks and the baselines), `report` (rows
//! as CSV and JSON) and `cli` (the progress bar, the scratch directory and
//! the parser of the enumerated flags).
//!
//! The criterion benches at the workspace root measure the persistence primitives
//! (`benches/persist.rs`) and single-key lookups and ranges against crossbeam-skiplist
//! (`benches/lookup.rs`).

mod baselines;
mod cli;
pub mod error;
pub mod fsync;
pub mod kv;
pub mod lftt;
pub mod metrics;
pub mod micro;
pub mod overview;
mod pool;
pub mod reopen;
mod report;
pub mod steady;
mod targets;
pub mod tatp;
mod workload;

//! Benchmarks of PETRA.
//!
//! - [`micro`]: the dissertation's micro-benchmarks on the list, the hash map, the skiplist and the MDList,
//!   durable and volatile in one run, with throughput, abort rate and flushes and fences per
//!   transaction, beside the baselines (`baselines`): abstract locking with an undo log, and
//!   crossbeam-skiplist without transactions.
//! - [`workload`]: the generators they draw from.
//! - [`kv`]: pmemkv_bench's workloads on the key-value store and on redb, one or more threads.
//! - [`metrics`]: the metric store's ingest, latest-value reads and range queries.
//! - [`tatp`]: TATP on PETRA's hash maps.
//! - [`reopen`]: what a clean close, and an open after it or after a crash, cost.
//! - [`steady`]: a long run on a fixed working set while checkpoint rounds keep the pool flat.
//! - [`lftt`]: the C++ LFTT/PETRA harness's argument form, run as a `micro` configuration.
//!
//! Each of these modules owns its subcommand's arguments and its `run`; [`cli`] holds what they
//! share on the command line.
//!
//! The criterion benches at the workspace root measure the persistence primitives
//! (`benches/persist.rs`) and single-key lookups and ranges against crossbeam-skiplist
//! (`benches/lookup.rs`).

pub mod baselines;
pub mod cli;
pub mod error;
pub mod kv;
pub mod lftt;
pub mod metrics;
pub mod micro;
pub mod pool;
pub mod reopen;
pub mod report;
pub mod steady;
pub mod tatp;
pub mod workload;

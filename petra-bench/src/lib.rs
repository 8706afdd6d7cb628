//! Benchmarks of PETRA.
//!
//! - [`micro`]: the dissertation's micro-benchmarks on the list, the hash map, the skiplist and the MDList,
//!   durable and volatile in one run, with throughput, abort rate and flushes and fences per
//!   transaction.
//! - [`workload`]: the generators they draw from.
//! - [`kv`]: pmemkv_bench's workloads on the key-value store (one thread).
//! - [`metrics`]: the metric store's ingest, latest-value reads and range queries.
//!
//! TATP is not built yet. The lock-based transactional map baseline is not built yet either; the
//! volatile mode is the baseline in `micro` today. The criterion benches at the workspace root
//! measure the persistence primitives (`benches/persist.rs`) and single-key lookups and ranges
//! against crossbeam-skiplist (`benches/lookup.rs`).

pub mod kv;
pub mod metrics;
pub mod micro;
pub mod tatp;
pub mod workload;

//! Benchmarks of PETRA.
//!
//! - [`micro`]: the dissertation's micro-benchmarks on the list, the hash map, the skiplist and the MDList,
//!   durable and volatile in one run, with throughput, abort rate and flushes and fences per
//!   transaction.
//! - [`workload`]: the generators they draw from.
//!
//! The key-value workloads (pmemkv_bench style) and TATP are not built yet: they need the
//! key-value store. The lock-based transactional map baseline is not built yet either; the
//! volatile mode is the baseline in `micro` today. The criterion benches at the workspace root
//! measure the persistence primitives (`benches/persist.rs`) and single-key lookups and ranges
//! against crossbeam-skiplist (`benches/lookup.rs`).

pub mod micro;
pub mod workload;

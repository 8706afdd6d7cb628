//! Benchmarks of PETRA.
//!
//! - [`micro`]: the dissertation's micro-benchmarks on the list, the hash map, the skiplist and the MDList,
//!   durable and volatile in one run, with throughput, abort rate and flushes and fences per
//!   transaction.
//! - [`workload`]: the generators they draw from.
//!
//! The key-value workloads (pmemkv_bench style) and TATP are not built yet: they need the
//! key-value store. The baselines (a lock-based transactional map, crossbeam-skiplist) are not
//! built yet either; the volatile mode is the one baseline today. The persistence primitives are measured by the
//! criterion bench `benches/persist.rs` at the workspace root.

pub mod micro;
pub mod workload;

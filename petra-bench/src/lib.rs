//! Benchmarks of PETRA.
//!
//! - [`micro`]: the dissertation's micro-benchmarks (today: the list set), durable and volatile in
//!   one run, with throughput, abort rate and flushes and fences per transaction.
//! - [`workload`]: the generators they draw from.
//!
//! The key-value workloads (pmemkv_bench style) and TATP are not built yet: they need the hash
//! map, the skiplist and the key-value store. The persistence primitives are measured by the
//! criterion bench `benches/persist.rs` at the workspace root.

pub mod micro;
pub mod workload;

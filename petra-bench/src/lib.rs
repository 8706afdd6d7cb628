//! Benchmarks of PETRA.
//!
//! Nothing is built here yet: the micro-benchmarks, the key-value workloads and TATP all need the
//! transaction engine. The persistence primitives are measured by the criterion bench
//! `benches/persist.rs` at the workspace root.

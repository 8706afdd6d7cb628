//! What each benchmark drives, one trait per kind of work, below both the benchmarks and their
//! implementations (PETRA's beside each benchmark, the baselines in `baselines`):
//! - [`tx`]: transactions of strict ops on a set, for `micro` and `lftt`;
//! - [`kv`]: byte keys and values, for `kv`;
//! - [`metric`]: metric samples, for `metrics`.

pub(crate) mod kv;
pub(crate) mod metric;
pub(crate) mod tx;

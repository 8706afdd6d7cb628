//! The competitors PETRA is measured against, each an adapter to the trait of the benchmark that
//! drives it:
//!
//! - [`locks`]: the dissertation's abstract-locking baseline of `micro`, a volatile map under
//!   striped locks with an undo log;
//! - [`skipmap`]: crossbeam-skiplist under `micro`, each op on its own with no transaction (an
//!   upper bound, neither atomic nor isolated);
//! - [`redb`]: redb under `kv` and `metrics`, each write a transaction committed with the
//!   durability asked for.

pub(crate) mod locks;
pub(crate) mod redb;
pub(crate) mod skipmap;

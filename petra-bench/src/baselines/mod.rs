//! The competitors PETRA is measured against, each an adapter to the trait of the benchmark that
//! drives it:
//!
//! - [`locks`]: the lock-based baseline of `micro` for the hash map, a volatile lock-striped hash
//!   map with an undo log (the dissertation's abstract-locking baseline);
//! - [`boosted`]: the same abstract locking with an undo log over an ordered base set, the
//!   lock-based baseline of `micro` for the list ([`sorted_list`], a sorted linked list under a
//!   reader-writer lock) and for the skiplist and the MDList (crossbeam-skiplist);
//! - [`skipmap`]: crossbeam-skiplist under `micro`, each op on its own with no transaction (an
//!   upper bound, neither atomic nor isolated);
//! - [`redb`]: redb under `kv` and `metrics`, each write a transaction committed with the
//!   durability asked for.

pub(crate) mod boosted;
pub(crate) mod locks;
pub(crate) mod redb;
pub(crate) mod skipmap;
pub(crate) mod sorted_list;

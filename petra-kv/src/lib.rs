//! A key-value store (pmemkv-style) for monitoring daemons and other embedded users, on the PETRA
//! engine.
//!
//! ```
//! use std::ops::ControlFlow;
//! use petra_kv::{Batch, Config, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(&Config::new(dir.path().join("kv.pool")))?;
//! let mut s = store.session()?;
//! s.put(b"node12/meminfo/MemFree", b"1024")?;
//! s.write(Batch::new().put(b"a", b"1").put(b"b", b"2").remove(b"node12/meminfo/MemFree"))?;
//! assert_eq!(s.get(b"a")?.as_deref(), Some(&b"1"[..]));
//! let mut above = Vec::new();
//! s.get_above(b"a", |k, v| {
//!     above.push((k.to_vec(), v.to_vec()));
//!     ControlFlow::Continue(())
//! })?;
//! assert_eq!(above, [(b"b".to_vec(), b"2".to_vec())]);
//! drop(s);
//! store.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The store
//! A [`Store`] keeps byte keys (up to [`MAX_KEY_LEN`] bytes) and byte values (up to
//! [`MAX_VALUE_LEN`]) in one pool file, on the engine's skiplist ([`Order::Sorted`]: scans in
//! key order) or hash map ([`Order::Unsorted`]), fixed at creation. Each thread works through its
//! own [`Session`]: put, get (borrowing with [`Session::get_with`], copying with
//! [`Session::get`]), remove, exists, count and scans over all keys or those above, below or
//! between bounds (callbacks that can stop early, or iterators), and atomic [`Batch`]es.
//! Oversize keys and values, and batches larger than one transaction, are refused before
//! anything changes.
//!
//! # Consistency and durability
//! Every write is one engine transaction: atomic, strictly serializable with every other, and
//! durable when the call returns, to the degree the pool's [`Store::durability`] states (power
//! loss on persistent memory with DAX; on a file on a disk, process death, and power loss from
//! the safe point that covers the write on, as the [`DurabilityPolicy`] sets them; process death
//! only on a file in memory such as `/dev/shm`'s, which a power loss takes whole). Reads and scans
//! take no lock and see one instant's state. Opening recovers after a crash: every acknowledged
//! write is there, and nothing of a write that was not acknowledged, all of a batch or none of it.
//!
//! # How keys are kept
//! A key of up to 15 bytes is one engine key; longer keys share engine entries (buckets) whose
//! value lists their entries (see `layout.rs`). Writers of a bucket serialise on one of 64 striped
//! locks, so writes of long keys are blocking where short keys' are lock-free; reads are lock-free
//! for all keys. In a sorted store long keys that share their first 15 bytes share a bucket and
//! cost in proportion to their number; in an unsorted store buckets are by hash.
//!
//! # Limits today
//! An unsorted store does not resize its hash map. A store's file grows up to its maximum size
//! ([`KvError::Full`]) with what it holds; the engine's checkpoint rounds recycle the room its
//! writes' descriptors take, as they go.

// Internals are `pub(crate)` at most: what is `pub` is the API.

mod config;
pub mod error;
mod format;
mod layout;
pub mod metric;
mod salvage;
pub mod store;

pub use error::{KvError, Result};
pub use metric::{
    Metric, MetricSession, MetricStore, Sample, Scalar, Schema, SetId, SetInfo, Stored, Value, WindowAcc, WindowStats,
};
pub use petra::{DurabilityPolicy, SalvageReport};
pub use salvage::salvage;
pub use store::{Batch, Config, CreateMode, MAX_KEY_LEN, MAX_VALUE_LEN, Order, Session, Store};

// The README's examples, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;

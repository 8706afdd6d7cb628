//! PETRA: persistent transactional lock-free linked data structures.
//!
//! PETRA (Izadpanah, 2020, chapter 5) makes lock-free transactional data structures (LFTT)
//! durable on persistent memory by persisting only each transaction's descriptor, which doubles as
//! a redo log; the structures themselves are persisted lazily and repaired at recovery.
//!
//! ```
//! use petra::mem::SimMem;
//! use petra::pool::{Pool, PoolConfig};
//! use petra::{Engine, EngineConfig, KeyWidth, Outcome, ShortKey, StructureKind, Transaction, Values};
//!
//! let config = PoolConfig { initial_size: 1 << 20, max_size: 64 << 20, chunk_size: 64 << 10, ..PoolConfig::default() };
//! let pool = Pool::create_in(SimMem::new(0, 64 << 20), &config)?; // or Pool::create(path, ..)
//! let engine = Engine::create(pool, EngineConfig::rings(1 << 20))?;
//! let (set1, set2) = (engine.create_list()?, engine.create_list()?);
//! let mut h = engine.handle()?;
//! h.execute(Transaction::new().insert(set1, 7u64, 70))?;
//! // Move key 7 from set1 to set2, atomically.
//! let moved = h.execute(Transaction::new().delete(set1, 7u64).insert(set2, 7u64, 70))?;
//! assert!(moved.is_committed());
//! // A strict op that fails aborts the whole transaction: nothing changes.
//! let out = h.execute(Transaction::new().put(set1, 1u64, 10).delete(set1, 7u64))?;
//! assert_eq!(out, Outcome::Aborted { failed_op: Some(1) });
//! assert_eq!(engine.entries::<u64>(set1)?, vec![]);
//! assert_eq!(engine.entries::<u64>(set2)?, vec![(7, 70)]);
//!
//! // Keys of two words: byte strings of up to 15 bytes, in byte-string order.
//! let names = engine.create_structure(StructureKind::SkipList, KeyWidth::U128, Values::Words)?;
//! let key = |s: &str| ShortKey::new(s.as_bytes()).unwrap();
//! h.execute(Transaction::new().put(names, key("node12/meminfo"), 1).put(names, key("node2/vmstat"), 2))?;
//! let above: Vec<(ShortKey, u64)> = h.range(names, key("node12/meminfo")..)?;
//! assert_eq!(above.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>(), [&b"node12/meminfo"[..], b"node2/vmstat"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Consistency
//! Transactions are strictly serializable: the order of their txids is a serial order that
//! reproduces every result (checked by replay in the tests). A single read with no descriptor is
//! linearizable. A range scan ([`Handle::range`]) takes a txid of its own and returns the state
//! after exactly the transactions below it (strictly serializable too); it returns after one walk
//! of the range, whatever writers do meanwhile ([`Handle::snapshot_with`] gives the txid). What
//! its snapshot holds back (descriptors the rounds may not fold, replaced values that may not be
//! freed) is bounded ([`EngineConfig::snapshot_limit`]): a caller that reads the entries so
//! slowly that writers pass the limit gets [`EngineError::SnapshotExpired`] after a prefix of
//! them, never an entry of another state.
//!
//! # Durability
//! A committed updating transaction has its descriptor flushed and fenced before
//! [`Handle::execute`] returns. What that guarantees depends on where the pool lives
//! ([`pool::Pool::durability`]) and on the engine's [`DurabilityPolicy`]:
//! - persistent memory mapped with DAX: durable across power loss, whatever the policy;
//! - a file on a disk (page cache): durable across the death of the process; across power loss
//!   from the power-safe point that covers it on (each a sync that the protocol keeps safe: the
//!   page cache writes pages back in any order): at once under [`DurabilityPolicy::Immediate`],
//!   within an interval under [`DurabilityPolicy::Periodic`] (the default), at [`Engine::sync`]
//!   or [`Engine::close`] only under [`DurabilityPolicy::Process`];
//! - a file in memory (tmpfs, such as `/dev/shm`): durable across the death of the process,
//!   whatever the policy; a power loss or a reboot takes the file whole, so no safe points are
//!   kept;
//! - volatile (benchmarks only): nothing is durable.
//!
//! # Recovery
//! [`Engine::open`] recovers at every open but one after [`Engine::close`]: it rebuilds each
//! structure from the node records and the persisted descriptors above the checkpoint txid,
//! trusting no link, then rebuilds the allocator from what is live ([`RecoveryReport`]).
//!
//! # Checkpoints
//! Checkpoint rounds fold finished descriptors into node records while transactions run, and
//! recycle their ring slots: a thread runs one when its descriptor ring is a quarter full
//! ([`EngineConfig::checkpoint_fill`]), or on demand ([`Engine::checkpoint`]). No transaction
//! waits for a round. So a steady workload keeps the pool, its rings and the next recovery's
//! reading bounded.
//!
//! # Limits today
//! Keys are of one word (`u64`, byte arrays of up to 8 bytes) or two (`u128`, byte arrays of up
//! to 16 bytes, byte strings of up to 15: [`ShortKey`]), fixed per structure ([`key`]); values
//! are a word or, in a structure created with [`Values::Bytes`], a byte string. The structures
//! are the list, the hash map, the skiplist and the multi-dimensional list (whose keys are one
//! word).
//!
//! # Inside
//! The crate's modules, each with one job, in layers: a module uses only those below it.
//!
//! | layer | modules | job |
//! |---|---|---|
//! | engine | `engine` | [`Engine`]: create, open, close, handles, creating structures |
//! | handle | `handle`, `scan`, `checkpoint` | [`Handle`]: rings, execute, get, range scans; checkpoint rounds |
//! | recovery | `recovery` | KDMap, baseline, rewrite, clean open |
//! | protocol | `protocol` | Algorithms 5.1 to 5.4: executing ops, taking nodes, helping, resolving, txids, persisting |
//! | formats and queues | `descriptor`, `ring`, `meta`, `reclaim` | the descriptor layout, the rings, the meta region, what waits in the epoch and for scans' snapshots |
//! | structures | `structures` | the node and its record, the info word, the four structures, the registry |
//! | pool | [`pool`] | the file: header, root table, chunks, allocator |
//! | memory | [`mem`] | the seam: load, store, CAS, flush, fence on pool offsets |
//! | vocabulary | `tx`, [`key`], [`error`], `hash`, `sync` | what callers say, keys, errors, the format's hashes, loom's shim |

mod checkpoint;
mod descriptor;
mod engine;
pub mod error;
mod handle;
mod hash;
pub mod key;
pub mod mem;
mod meta;
pub mod pool;
mod protocol;
mod reclaim;
mod recovery;
mod ring;
mod safe;
mod scan;
mod structures;
mod sync;
mod tx;
mod wake;

pub use checkpoint::{CheckpointReport, CheckpointStats};
pub use engine::{Engine, EngineConfig, SalvageReport};
pub use error::{Damage, EngineError, Error, ReadError, Result};
pub use handle::{Blobs, Handle};
pub use key::{Key, KeyWidth, ShortKey};
pub use recovery::{Contents, RecoveryReport, Refused};
pub use safe::DurabilityPolicy;
pub use tx::{MAX_OPS, Op, OpKind, Outcome, Shape, StructId, StructureKind, Transaction, Values};

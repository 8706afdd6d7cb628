//! PETRA: persistent transactional lock-free linked data structures.
//!
//! PETRA (Izadpanah, 2020, chapter 5) makes lock-free transactional data structures (LFTT)
//! durable on persistent memory by persisting only each transaction's descriptor, which doubles as
//! a redo log; the structures themselves are persisted lazily and repaired at recovery.
//!
//! # What exists today
//! - [`mem`]: the memory seam every pool byte goes through, with the production mapping
//!   ([`mem::MmapMem`]), a counting wrapper ([`mem::Counting`]) and the crash simulator
//!   ([`mem::SimMem`]).
//! - [`pool`]: the pool file: header and root table, chunk table, slab and blob allocation,
//!   growth inside a reserved address range, and the rebuild of allocator state at recovery.
//!
//! The transaction engine and the structures (list, skiplist, multi-dimensional list, hash map)
//! are not built yet.
//!
//! # Durability
//! What a completed flush and fence guarantee depends on where the pool lives, and the pool says
//! which guarantee is in force ([`pool::Pool::durability`]):
//! - persistent memory mapped with DAX: durable across power loss;
//! - a normal file or `/dev/shm` (page cache): durable across the death of the process; across
//!   power loss only after [`pool::Pool::sync`] or [`pool::Pool::close`] (`msync`);
//! - volatile (benchmarks only): nothing is durable.
//!
//! # Recovery
//! Allocator state is volatile: after open every slab counts as full (safe, never reuses), until
//! recovery passes the set of live blocks to [`pool::Pool::rebuild`].

pub mod error;
pub mod mem;
pub mod pool;
pub mod recovery;
pub mod structures;
pub mod tx;

pub use error::{EngineError, Error, Result};
pub use tx::{Engine, EngineConfig, Handle, Op, OpKind, Outcome, StructId, Transaction};

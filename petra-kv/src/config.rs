//! What a store's file is and how it is opened: the configuration a [`Store`](crate::Store) and a
//! [`MetricStore`](crate::MetricStore) open with, and the order a store keeps its keys in.

use std::path::PathBuf;

use petra::DurabilityPolicy;
use petra::pool::Mapping;

use crate::layout::Placement;

/// How a store orders its keys. Fixed at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// On the skiplist: scans return keys in byte-string order.
    Sorted,
    /// On the hash map, of `buckets` buckets (it does not resize: choose about the number of keys
    /// expected). Scans walk every bucket and return keys in no particular order.
    Unsorted {
        /// Buckets of the hash map.
        buckets: u64,
    },
}

impl Order {
    /// What the order is called in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Order::Sorted => "sorted",
            Order::Unsorted { .. } => "unsorted",
        }
    }

    /// How a store of this order places its keys.
    pub(crate) fn placement(self) -> Placement {
        match self {
            Order::Sorted => Placement::Sorted,
            Order::Unsorted { .. } => Placement::Hashed,
        }
    }
}

/// Whether opening may create the file, or must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Open an existing store; fail if there is none.
    Open,
    /// Create a new store; fail if the file exists.
    Create,
    /// Open the store if the file exists, else create it.
    OpenOrCreate,
}

/// Where a store lives and how it is made.
#[derive(Debug, Clone)]
pub struct Config {
    /// The pool file.
    pub path: PathBuf,
    /// Bytes the file starts with (creation only).
    pub size: u64,
    /// Bytes the file may grow to (creation only); beyond it writes fail with
    /// [`KvError::Full`](crate::KvError::Full).
    pub max_size: u64,
    /// Whether to create the file.
    pub create: CreateMode,
    /// The order of a new store; an existing store must have it
    /// ([`KvError::WrongOrder`](crate::KvError::WrongOrder)).
    pub order: Order,
    /// How the file is mapped.
    pub mapping: Mapping,
    /// When a write survives a power loss (see [`DurabilityPolicy`]): by default a power-safe
    /// point every second.
    pub durability: DurabilityPolicy,
}

impl Config {
    /// A sorted store at `path`, opened or created, starting at 16 MiB and growing up to 16 GiB.
    pub fn new(path: impl Into<PathBuf>) -> Config {
        Config {
            path: path.into(),
            size: 16 << 20,
            max_size: 16 << 30,
            create: CreateMode::OpenOrCreate,
            order: Order::Sorted,
            mapping: Mapping::default(),
            durability: DurabilityPolicy::default(),
        }
    }
}

//! [`POff`]: a position in a pool, in bytes from its start.
//!
//! Links inside a pool are always offsets, never pointers, so a pool opens at any address.
//! Offset 0 is the header, which nothing links to, so 0 doubles as null.

use std::fmt;

/// A pool offset. [`POff::NULL`] (0) means "no block".
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct POff(u64);

impl POff {
    /// No block.
    pub const NULL: POff = POff(0);

    /// The offset `raw` bytes from the pool's start.
    pub const fn new(raw: u64) -> POff {
        POff(raw)
    }

    /// Bytes from the pool's start.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Whether this is [`POff::NULL`].
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The offset `bytes` further on.
    pub const fn add(self, bytes: u64) -> POff {
        POff(self.0 + bytes)
    }
}

impl fmt::Debug for POff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "POff({:#x})", self.0)
    }
}

impl fmt::Display for POff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

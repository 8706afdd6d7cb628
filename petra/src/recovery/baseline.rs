//! Recovery's second phase, the **baseline**: the records of the node arena, for the keys KDMap
//! does not name.
//!
//! Every block of every node slab chunk is read, trusting no link: a block whose record is valid
//! in the committed epoch (see `structures::node`) was written by the last recovery or a
//! checkpoint round, and gives its key's state as of then. A key no transaction wrote above the
//! checkpoint txid keeps that state; so does a key whose last writer was not persisted (its op is
//! ignored, and the state before it is the one before any op above the checkpoint txid).

use std::collections::BTreeMap;

use crate::mem::PMem;
use crate::pool::Pool;
use crate::structures::node::{Record, read_record};
use crate::structures::registry::Structure;

/// Calls `f(node, record)` for every block of `pool`'s node arena that holds a valid record of
/// `epoch` for one of `structures`.
pub(super) fn scan<M: PMem>(
    pool: &Pool<M>,
    structures: &BTreeMap<u8, Structure>,
    epoch: u64,
    mut f: impl FnMut(u64, Record),
) {
    let mem = pool.mem();
    let wide_of = |slot: u8| structures.get(&slot).map(Structure::wide);
    pool.for_each_node_block(|node| {
        if let Some(record) = read_record(mem, node.get(), epoch, wide_of) {
            f(node.get(), record);
        }
    });
}

//! Recovery's second phase, the **baseline**: the records of the node arena, for the keys KDMap
//! does not name.
//!
//! Every block of every node slab chunk is read, trusting no link: a block whose record is valid
//! in the committed epoch (see `structures::node`) was written by the last recovery or a
//! checkpoint round, and gives its key's state as of then. A key no transaction wrote above the
//! checkpoint txid keeps that state; so does a key whose last writer was not persisted (its op is
//! ignored, and the state before it is the one before any op above the checkpoint txid).

use crate::mem::PMem;
use crate::pool::Pool;
use crate::structures::node::{Read, read_record};
use crate::structures::registry::Structure;

/// Calls `f(node, read)` for every block of `pool`'s node arena that holds a record of `epoch`,
/// valid or broken (see [`Read`]), for `structures` (by slot).
pub(super) fn scan<M: PMem>(pool: &Pool<M>, structures: &[Structure], epoch: u64, mut f: impl FnMut(u64, Read)) {
    let wide_of = |slot: u8| structures.get(slot as usize).map(Structure::wide);
    pool.for_each_node_block(|node| match read_record(pool, node.get(), epoch, wide_of) {
        Read::Nothing => {}
        read => f(node.get(), read),
    });
}

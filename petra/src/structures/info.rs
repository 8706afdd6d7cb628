//! The packed node info word: which transaction last touched a node, or the node's final state.
//!
//! One atomic word per node replaces LFTT's separately allocated `NodeInfo`, so an operation
//! allocates nothing to take a node.
//!
//! ```text
//! bit 0 = 0: a reference to operation `opid` of the descriptor at `desc`
//!   bit  1      MARK: set on an op reference in a block never linked (an executor's node
//!               whose link failed, freed at once: see `protocol`), and by the removal of a
//!               node that holds a record, by the committed Delete or Remove that left it
//!               absent, until the checkpoint round that folds that op clears the record and
//!               writes REMOVED (see `structures::remove_if`); any other removal writes REMOVED,
//!               below. It reads as absent
//!   bits 2..8   opid (0..64)
//!   bits 8..64  desc >> 6 (descriptors are 64-byte aligned)
//! bit 0 = 1: FINAL, a state no descriptor is needed to read (written by recovery and by
//!            checkpoint rounds)
//!   bit  1      MARK: the node is being removed from the structure; set only in REMOVED, the
//!               FINAL absent word of generation 0 that a removal writes (see the table)
//!   bit  2      present
//!   bits 3..47  node >> 4: the node's own offset, so that the word is unique to its node
//!   bits 47..64 generation: the recovery epoch that wrote it, or the epoch plus the number of
//!               the checkpoint round that did (wrapping)
//! ```
//!
//! State table of one node's info word (transitions by CAS only):
//!
//! | from                   | to                         | by                                    |
//! |------------------------|----------------------------|---------------------------------------|
//! | (new node)             | op(D, i)                   | the op that created the node          |
//! | (new MDList copy)      | REMOVED: FINAL absent +    | the removal that made the copy, before|
//! |                        |   MARK, generation 0; no   |   publishing it (see `mdlist`): marked|
//! |                        |   CAS changes it afterwards|   nodes are passed over, never taken  |
//! | op(D, i) or FINAL      | op(D', j), D' active       | an executor of D' op j                |
//! | op(D, i), D finished,  | REMOVED                    | removal of a node left absent: by a   |
//! |   left the key absent  |                            | committed Delete or Remove, or by an  |
//! |                        |                            | op that made the node for an absent   |
//! |                        |                            | key (a read, or an aborted write)     |
//! | op(D, i), D a committed| op(D, i) + MARK            | removal of a node with a record       |
//! |   Delete or Remove     |                            |                                       |
//! | op(D, i) + MARK        | REMOVED                    | the checkpoint round that folds D,    |
//! |                        |                            |   after clearing the record           |
//! | FINAL absent           | REMOVED                    | removal after a checkpoint round      |
//! | anything               | FINAL                      | recovery (single-threaded)            |
//! | op(D, i), D finished   | FINAL                      | a checkpoint round (one at a time)    |
//!
//! An info value never repeats on a node while a thread can hold it: op references are unique
//! while their descriptor lives (a checkpoint round recycles it only after every thread that
//! could hold one has unpinned), and FINAL words carry the node and a generation, which changes
//! with every round (a thread that stays pinned sees at most two). Executors rely on this (a CAS
//! from an old value can never succeed once the word has moved on).

use std::fmt;

const FINAL: u64 = 1;
const MARK: u64 = 1 << 1;
const PRESENT: u64 = 1 << 2;
/// The bits of a generation a FINAL word keeps (17): generations compare modulo this.
const GENERATION_MASK: u64 = 0x1_FFFF;

/// A node info word. See the [module docs](self).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Info(pub(crate) u64);

impl Info {
    /// Operation `opid` of the descriptor at offset `desc` (64-byte aligned).
    #[inline]
    pub(crate) fn op(desc: u64, opid: usize) -> Info {
        debug_assert!(desc.is_multiple_of(64) && desc != 0 && opid < 64);
        Info((desc >> 6) << 8 | (opid as u64) << 2)
    }

    /// A final state of the node at `node`, written in `generation` (see the module docs).
    #[inline]
    pub(crate) fn final_state(node: u64, present: bool, generation: u64) -> Info {
        debug_assert!(node.is_multiple_of(16) && node < 1 << 48);
        Info(FINAL | (present as u64) << 2 | (node >> 4) << 3 | (generation & GENERATION_MASK) << 47)
    }

    /// The word of the node at `node` once its removal began: FINAL absent, naming the node, of
    /// generation 0, marked. A removal writes it (and an MDList copy starts with it), so a node
    /// that stays linked while marked (a list leaves its unlink to a later search) names no
    /// descriptor, whose slot may be recycled and whose ring given back meanwhile. The removal of
    /// a node with a record writes its op's word marked instead, which only the round that folds
    /// the op moves, to this word, before the op's slot is recycled (see
    /// `structures::remove_if`); no CAS moves this word, so that it is the same word every time
    /// does not matter.
    #[inline]
    pub(crate) fn removed(node: u64) -> Info {
        Info::final_state(node, false, 0).marked()
    }

    /// Whether this is a FINAL state.
    #[inline]
    pub(crate) fn is_final(self) -> bool {
        self.0 & FINAL != 0
    }

    /// For a FINAL state: whether the key is present.
    #[inline]
    pub(crate) fn final_present(self) -> bool {
        self.0 & PRESENT != 0
    }

    /// For a FINAL state: the node it belongs to.
    #[inline]
    pub(crate) fn final_node(self) -> u64 {
        ((self.0 >> 3) & ((1 << 44) - 1)) << 4
    }

    /// For a FINAL state: the generation that wrote it (17 bits).
    #[cfg(test)]
    fn final_generation(self) -> u64 {
        self.0 >> 47
    }

    /// For an op reference: the descriptor's offset.
    #[inline]
    pub(crate) fn desc(self) -> u64 {
        debug_assert!(!self.is_final());
        (self.0 >> 8) << 6
    }

    /// For an op reference: the operation's index.
    #[inline]
    pub(crate) fn opid(self) -> usize {
        debug_assert!(!self.is_final());
        ((self.0 >> 2) & 0x3F) as usize
    }

    /// Whether the node is being removed.
    #[inline]
    pub(crate) fn is_marked(self) -> bool {
        self.0 & MARK != 0
    }

    /// The same word with the removal mark set.
    #[inline]
    pub(crate) fn marked(self) -> Info {
        Info(self.0 | MARK)
    }
}

impl fmt::Debug for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = if self.is_marked() { "+MARK" } else { "" };
        if self.is_final() {
            write!(
                f,
                "FINAL({}, node {:#x}){mark}",
                if self.final_present() { "present" } else { "absent" },
                self.final_node()
            )
        } else {
            write!(f, "op({:#x}, {}){mark}", self.desc(), self.opid())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let i = Info::op(0x1234_5678_9AC0, 63);
        assert_eq!((i.desc(), i.opid(), i.is_final(), i.is_marked()), (0x1234_5678_9AC0, 63, false, false));
        let m = i.marked();
        assert_eq!((m.desc(), m.opid(), m.is_marked()), (0x1234_5678_9AC0, 63, true));
        let f = Info::final_state(0xABC_DEF0, true, 5);
        assert_eq!((f.is_final(), f.final_present(), f.final_node(), f.is_marked()), (true, true, 0xABC_DEF0, false));
        let r = Info::removed(0xABC_DEF0);
        assert_eq!((r.is_final(), r.final_present(), r.final_node(), r.is_marked()), (true, false, 0xABC_DEF0, true));
        assert_eq!((f.final_generation(), Info::final_state(0x10, false, 0x2_0003).final_generation()), (5, 3));
        assert_ne!(Info::final_state(0x10, true, 1), Info::final_state(0x20, true, 1), "unique per node");
        assert_ne!(Info::final_state(0x10, true, 1), Info::final_state(0x10, true, 2), "and per epoch");
        assert_ne!(Info::op(64, 0).0, 0, "no reference is zero");
    }
}

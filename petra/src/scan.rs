//! Range scans: a consistent snapshot of the keys in a range, without a descriptor.
//!
//! A scan walks the range twice (a *collect*) while pinned in the epoch, recording for every node
//! it passes the node, its key, its info word and the state that word resolves to. If both
//! collects saw the same, the result is the state of the range at every instant between the end of
//! the first collect and the start of the second: the scan is linearizable. Otherwise it collects
//! again and compares with the previous collect.
//!
//! Why equal collects mean a snapshot:
//! - A node seen twice with the same info word was not taken in between (info values never repeat
//!   on a node), and the same resolved state means its transaction's status did not change the
//!   key's state in between (statuses only move from active to committed or aborted).
//! - A key not seen in either collect had no linked node in between: every step of a walk reads
//!   the `next` word of a node that is linked at that instant (see
//!   `structures::walk`), so no node with a key in the gap is linked when either collect
//!   crosses it. A node linked after the first crossing stays linked until the second, because
//!   nodes leave a chain only by a removal that was scheduled through the epoch collector: one
//!   scheduled after the scan pinned cannot run until the scan unpins, and one scheduled before
//!   concerns a node linked before the scan began.
//!
//! So a scan never blocks a writer and never returns a state that did not exist; it retries while
//! writers keep changing the range under it (it is obstruction-free, not lock-free). It re-pins
//! every few attempts so that a long-contended scan does not hold back reclamation.

use std::ops::{Bound, RangeBounds};

use crossbeam_epoch::Guard;

use crate::key::Key;
use crate::mem::PMem;
use crate::protocol::{Core, Reader};
use crate::structures::registry::Structure;

/// Collects compared under one pin before the scan unpins and starts over.
const ATTEMPTS_PER_PIN: usize = 8;

/// Inclusive bounds of `range`, as key encodings, or `None` if it holds no key.
pub(crate) fn inclusive<K: Key>(range: &impl RangeBounds<K>) -> Option<(u128, u128)> {
    let lo = match range.start_bound() {
        Bound::Included(&k) => k.to_bits(),
        Bound::Excluded(&k) => k.to_bits().checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&k) => k.to_bits(),
        Bound::Excluded(&k) => k.to_bits().checked_sub(1)?,
        Bound::Unbounded => u128::MAX,
    };
    (lo <= hi).then_some((lo, hi))
}

/// The present keys of `structure` in `lo..=hi` with their values, in key order, into `out`: the
/// state of the range at one instant during the call (see the [module docs](self)). `guard` is
/// the caller's pin, re-pinned every few attempts; the values stay readable until it unpins.
pub(crate) fn snapshot<M: PMem + 'static>(
    core: &Core<M>,
    structure: &Structure,
    (lo, hi): (u128, u128),
    guard: &mut Guard,
    out: &mut Vec<(u128, u64)>,
) {
    let (mut prev, mut next) = (Vec::new(), Vec::new());
    let ordered = structure.ordered::<M>();
    loop {
        prev.clear();
        structure.collect(&Reader { core, guard: &*guard }, lo, hi, &mut prev);
        for _ in 0..ATTEMPTS_PER_PIN {
            next.clear();
            structure.collect(&Reader { core, guard: &*guard }, lo, hi, &mut next);
            if next == prev {
                out.extend(next.iter().filter_map(|seen| seen.state.map(|v| (seen.key, v))));
                if !ordered {
                    // A structure walked out of key order may also meet a node twice.
                    out.sort_unstable();
                    out.dedup_by_key(|e| e.0);
                }
                return;
            }
            std::mem::swap(&mut prev, &mut next);
        }
        guard.repin();
    }
}

#[cfg(test)]
mod tests {
    use super::inclusive;

    #[test]
    fn bounds_become_inclusive() {
        assert_eq!(inclusive::<u64>(&(..)), Some((0, u128::MAX)));
        assert_eq!(inclusive(&(3u64..7)), Some((3, 6)));
        assert_eq!(inclusive(&(3u64..=7)), Some((3, 7)));
        assert_eq!(inclusive(&(..0u64)), None);
        assert_eq!(inclusive(&(5u64..5)), None);
        let (from, to) = (7u64, 3);
        assert_eq!(inclusive(&(from..to)), None);
        let above = (std::ops::Bound::Excluded(u128::MAX), std::ops::Bound::Unbounded);
        assert_eq!(inclusive(&above), None);
        // Above the largest one-word key: nothing of one word is, but the bounds say so.
        let above = (std::ops::Bound::Excluded(u64::MAX), std::ops::Bound::Unbounded);
        assert_eq!(inclusive(&above), Some((1 << 64, u128::MAX)));
        let above = (std::ops::Bound::Excluded(4u64), std::ops::Bound::Unbounded);
        assert_eq!(inclusive(&above), Some((5, u128::MAX)));
    }
}

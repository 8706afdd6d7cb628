//! Recovery's first phase, **KDMap**: for each (structure, key), the last write of it by a
//! persisted descriptor above the checkpoint txid.
//!
//! Every valid descriptor of the committed epoch in every ring is read (tag, epoch and check
//! word agree, a txid above the checkpoint txid was assigned: checkpoint rounds folded those at
//! or below it into node records). A descriptor whose persist did not complete fails its check
//! word or has no txid, and is ignored with its whole transaction.
//!
//! A descriptor whose words all reached the media may still have a byte value whose lines did
//! not (its fence never completed): then it was never visible, and no later transaction touched
//! its keys (one would have persisted it first), so it is ignored whole. Only the last valid
//! descriptor of a ring can be such a one (nothing is written after a descriptor in its ring
//! before that one is persisted or aborted, and a handle a panic unwound through gives its ring
//! up), so only those descriptors' values are read. A value that fails its hash under a later
//! writer of its key (a later transaction, or a later op of its own) was replaced, freed and
//! reused: that is expected, and the descriptor's other ops stand.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::descriptor::{Desc, Found, blob_matches, persisted_at};
use crate::error::Damage;
use crate::mem::PMem;
use crate::pool::Pool;
use crate::ring;
use crate::tx::OpKind;

/// What KDMap found: the state each key written above the checkpoint txid was left in, and the
/// descriptors read.
#[derive(Debug, Default)]
pub(super) struct KdMap {
    /// (structure, key) -> the last writer's state: present with its value, or absent.
    pub(super) states: FxHashMap<(u8, u128), Option<u64>>,
    /// Valid persisted descriptors read.
    pub(super) descriptors: u64,
    /// The largest txid among them (0 if none).
    pub(super) max_txid: u64,
}

/// The last writing op of a key: its place in the serial order and what it left.
#[derive(Debug, Clone, Copy)]
struct Writer {
    txid: u64,
    /// The op's index in its descriptor (a later op of one transaction wins).
    i: u8,
    present: bool,
    /// Whether `value` is a blob, of hash `hash` ([`blob_matches`]).
    blob: bool,
    value: u64,
    hash: u64,
}

/// Reads every ring of `pool` for the descriptors of `epoch` above `checkpoint` and at or below
/// `upto` (after a power loss, the last safe point: a claim's txid or the safe txid; else
/// `u64::MAX`), whose ops must
/// name one of the pool's `structures` (one that does not is listed in `damage` and passed
/// over). If the pool is `whole` (closed cleanly, or last used in this boot: every store the
/// process made is in it), a descriptor marked persisted that fails its check, or a ring's last
/// descriptor whose byte value fails its hash, is damage too; otherwise the protocol can leave
/// either (a later lap's words over a recycled slot, a value whose lines did not all reach the
/// media), and they are passed over. So is, if `whole`, a descriptor whose txid is not below
/// `reserved`, the meta region's txid reservation (raised before the txids it covers are handed
/// out; after a power loss the page holding it may be older than a ring's).
///
/// `claim`: `(prev, writers)` of a safe point's claim of `upto` (see `safe`): `None` unless KDMap
/// found `writers` valid descriptors above `prev` and each byte value above `prev` that it
/// applies matches its hash (the caller reads again at an earlier safe txid then).
pub(super) fn read<M: PMem>(
    pool: &Pool<M>,
    (epoch, checkpoint, upto, reserved): (u64, u64, u64, u64),
    claim: Option<(u64, u64)>,
    structures: usize,
    whole: bool,
    damage: &mut Vec<Damage>,
) -> Option<KdMap> {
    let mem = pool.mem();
    // The valid descriptors above the checkpoint txid: (offset, txid); and the txid of the last
    // valid descriptor written to each ring, the largest (a ring is written in order, in laps,
    // and txids grow along it).
    let mut valid: Vec<(u64, u64)> = Vec::new();
    let mut ring_tails: FxHashSet<u64> = FxHashSet::default();
    let mut max_txid = 0;
    let mut ops = 0;
    // Valid descriptors above the claim's previous safe txid.
    let mut claimed = 0;
    for (ring, len) in ring::regions(pool) {
        let end = ring + len;
        let mut pos = ring + 64;
        let mut tail = None;
        while pos + 64 <= end {
            let (txid, bytes) = match persisted_at(mem, pos, end, epoch as u32, checkpoint) {
                Found::Persisted { txid, bytes } if txid > upto => {
                    pos += bytes;
                    continue;
                }
                Found::Persisted { txid, bytes } => (txid, bytes),
                Found::Damaged { bytes } if whole => {
                    damage.push(Damage { what: "a persisted descriptor that fails its check".into(), at: pos });
                    pos += bytes;
                    continue;
                }
                Found::Damaged { .. } | Found::Nothing => {
                    pos += 64;
                    continue;
                }
            };
            if whole && txid >= reserved {
                let what = format!("a descriptor of txid {txid}, not below the txid reservation {reserved}");
                damage.push(Damage { what, at: pos });
                pos += bytes;
                continue;
            }
            let d = Desc::new(mem, pos);
            if let Some(op) = (0..d.nops()).map(|i| d.op(i)).find(|op| op.structure as usize >= structures) {
                let what = format!("a descriptor names structure {}, which the pool does not have", op.structure);
                damage.push(Damage { what, at: pos });
                pos += bytes;
                continue;
            }
            max_txid = max_txid.max(txid);
            claimed += u64::from(claim.is_some_and(|(prev, _)| txid > prev));
            ops += d.nops();
            valid.push((pos, txid));
            tail = tail.max(Some(txid));
            pos += bytes;
        }
        ring_tails.extend(tail);
    }
    // The last writer of each key over every valid descriptor ((txid, op index), a later op of
    // one transaction winning); the torn descriptors are ring tails with a blob op that is its
    // key's last writer and fails its hash; KDMap is the last writer over the others, which is
    // the same map when none is torn (the common case: one pass).
    let last_writers = |skip: &FxHashSet<u64>| {
        let mut last: FxHashMap<(u8, u128), Writer> = FxHashMap::default();
        last.reserve(ops.min(1 << 21));
        for &(off, txid) in valid.iter().filter(|(_, txid)| !skip.contains(txid)) {
            let d = Desc::new(mem, off);
            for i in 0..d.nops() {
                let op = d.op(i);
                let Some(present) = OpKind::from_code(op.kind).writes() else { continue };
                let w = Writer { txid, i: i as u8, present, blob: op.blob, value: op.value, hash: op.hash };
                let e = last.entry((op.structure, op.key)).or_insert(w);
                if (txid, i as u8) >= (e.txid, e.i) {
                    *e = w;
                }
            }
        }
        last
    };
    let mut last = last_writers(&FxHashSet::default());
    if let Some((prev, writers)) = claim {
        let whole_values = || last.values().all(|w| !w.blob || w.txid <= prev || blob_matches(pool, w.value, w.hash));
        if claimed != writers || !whole_values() {
            return None;
        }
    }
    let mut torn: FxHashSet<u64> = FxHashSet::default();
    for (&(slot, key), w) in &last {
        if w.blob && ring_tails.contains(&w.txid) && !blob_matches(pool, w.value, w.hash) {
            if whole {
                let what = format!("the value of key {key:#x} of structure {slot}, written by txid {}", w.txid);
                damage.push(Damage { what: format!("{what}, fails its hash"), at: w.value });
            } else {
                torn.insert(w.txid);
            }
        }
    }
    if !torn.is_empty() {
        last = last_writers(&torn);
    }
    let states = last.into_iter().map(|(k, w)| (k, w.present.then_some(w.value))).collect();
    Some(KdMap { states, descriptors: valid.len() as u64, max_txid })
}

//! Transaction descriptors: their layout in a thread's descriptor ring, and their state word.
//!
//! A descriptor is written once by its owner, in its ring, before any other thread can learn its
//! offset (which it does through a node's info word, published with Release). Its layout, all
//! words little-endian, 64-byte aligned:
//!
//! ```text
//! +0   header   tag 0x5458 << 48 | ring epoch << 16 | flags << 8 | nops      (immutable)
//! +8   state    status (bits 0..2) | pstatus (bits 2..4)                      (CAS)
//! +16  txid     0 until persisting assigns it, once, by CAS                    (CAS)
//! +24  check    checksum of header, txid and the persisted ops                 (store)
//! +32  ops      nops x 24 bytes: kind | structure << 8 | blob << 16 | blob hash << 24,
//!               key, value; or, with the wide flag, nops x 32 bytes: the same three words
//!               and the key's high word                                     (immutable)
//! then nops x 24 bytes of volatile per-op words, never flushed:
//!      prev     the info word the op replaced (NO_NODE for a node it created; UNSET before;
//!               CUT once a checkpoint round cached its before-state, see `tx::checkpoint`)
//!      cache    VALID | present << 1 | the node the op took or created (16-byte aligned),
//!               once the op's before-state is known
//!      cvalue   the before-state's value
//! ```
//!
//! Persisting flushes only `[+0, +32 + 24 * nops)` (`+32 + 32 * nops` when wide): `ceil((32 + 24
//! n) / 64)` lines, one line for a single-op transaction of either width. A descriptor is wide
//! when one of its keys has a high word that is not zero (a key of a [`KeyWidth::U128`]
//! structure), so transactions on one-word keys never pay for the wider ones.
//!
//! [`KeyWidth::U128`]: crate::key::KeyWidth::U128
//!
//! State word table:
//!
//! | status    | pstatus    | meaning                                                  |
//! |-----------|------------|----------------------------------------------------------|
//! | Active    | Maybe      | executing; its ops are visible only to itself            |
//! | Committed | InProgress | finished, being persisted: not visible until persisted,   |
//! |           |            | and every thread that meets it persists it               |
//! | Committed | Persisted  | durable (or read-only: nothing to persist) and visible    |
//! | Aborted   | Persisted  | finished; never visible, nothing persisted                |
//!
//! An aborted state word also says why, for the owner to report: the thread that decides the
//! abort (the owner or a helper) says it in the same CAS, so it is the reason of the abort that
//! happened, whoever ran the op.
//!
//! | bits          | the transaction was aborted because                                   |
//! |---------------|-----------------------------------------------------------------------|
//! | 4 and 5 clear | a helping cycle was broken (its ops say nothing: it may be run again) |
//! | 5; 8..16      | the strict op at this position (in execution order) failed            |
//! | 4; 16..64     | the pool was full: the size of the allocation refused (an error)      |
//!
//! The reason is volatile in effect: an aborted descriptor is never flushed, and what reaches the
//! media by eviction is never read for it. Recovery reads only bits 0..4 of the state word (to
//! tell Committed and Persisted from the rest, `persisted_at`), and the check word does not cover
//! the state word, so the reason changes neither what recovery finds nor what it checks.

use std::sync::atomic::Ordering;

use crate::hash::{check_words, op_hash, value_hash};
use crate::mem::{CACHE_LINE, PMem, WORD};
use crate::pool::{POff, Pool};
use crate::tx::{MAX_OPS, OpKind};

/// The tag in a descriptor header's top 16 bits.
pub(crate) const DESC_TAG: u64 = 0x5458;
/// Header flag: the transaction only reads.
const FLAG_READ_ONLY: u64 = 1;
/// Header flag: some op's value is a blob (see [`StoredOp::blob`]).
const FLAG_BLOBS: u64 = 2;
/// Header flag: ops are 32 bytes, the fourth word the key's high word.
const FLAG_WIDE: u64 = 4;
/// Bit of an op's first word: its value is a blob, which persisting flushes with the descriptor.
const OP_BLOB: u64 = 1 << 16;
/// Bit of an op's first word: no later op of the descriptor writes its key (so a committed
/// transaction left, at a node naming this op, this op's write, or the state before it if it
/// reads), set when the descriptor is written; a reader then need not scan the later ops.
/// Absent (a one-op descriptor, which has no later op), the reader scans.
const OP_LAST: u64 = 1 << 17;
/// Where an op's first word keeps the blob's [`op_hash`], by which recovery tells a torn blob.
const OP_HASH_SHIFT: u32 = 24;

pub(crate) const HEADER: u64 = 0;
pub(crate) const STATE: u64 = 8;
pub(crate) const TXID: u64 = 16;
pub(crate) const CHECK: u64 = 24;
pub(crate) const OPS: u64 = 32;
/// Bytes of an op, of a wide descriptor's op, and of an op's volatile words.
pub(crate) const OP_BYTES: u64 = 24;
pub(crate) const WIDE_OP_BYTES: u64 = 32;
const VOLATILE_BYTES: u64 = 24;

/// `prev` of an op that created its node: the key had no node before.
pub(crate) const NO_NODE: u64 = 0;
/// `prev` of an op no executor has executed yet. No info word has this value (an op reference
/// has a descriptor offset at bit 8 and up, a FINAL word has bit 0 set), and it differs from
/// [`NO_NODE`], so that an executor that creates the op's node always changes `prev`, and an
/// executor that read `prev` before that can no longer retarget it (see `execute_op`).
pub(crate) const UNSET: u64 = 2;
/// `prev` of an op whose before-state a checkpoint round cached and whose chain below it the
/// round cut off (the descriptors it named may be recycled): read the cache. No info word has
/// this value, and it differs from [`NO_NODE`] and [`UNSET`]. An executor never retargets from
/// it: an op is cut only once it has executed, and an executed op is never retargeted.
pub(crate) const CUT: u64 = 4;

/// Transaction status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxStatus {
    /// Executing.
    Active = 0,
    /// Finished successfully.
    Committed = 1,
    /// Finished unsuccessfully.
    Aborted = 2,
}

/// Persistence status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PersistStatus {
    /// Not persisted, nobody persisting: an active transaction's.
    Maybe = 0,
    /// Being persisted.
    InProgress = 1,
    /// Persisted (or nothing to persist).
    Persisted = 2,
}

/// Bit of an aborted state word: the pool was full; bits 16.. hold the bytes refused.
const ABORT_NO_MEMORY: u64 = 1 << 4;
/// Bit of an aborted state word: a strict op failed; bits 8..16 hold its position.
const ABORT_FAILED_OP: u64 = 1 << 5;

/// Why a transaction was aborted, as its state word records it (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abort {
    /// To break a helping cycle: nothing is known of its ops.
    Cycle,
    /// The strict op at this position (in execution order) failed.
    FailedOp(usize),
    /// The pool was full: an allocation of this many bytes was refused.
    NoMemory(u64),
}

impl Abort {
    /// The bits of an aborted state word above the status that say why.
    fn encode(self) -> u64 {
        match self {
            Abort::Cycle => 0,
            Abort::FailedOp(i) => {
                debug_assert!(i < MAX_OPS);
                ABORT_FAILED_OP | (i as u64 & 0xFF) << 8
            }
            Abort::NoMemory(bytes) => ABORT_NO_MEMORY | bytes.min(u64::MAX >> 16) << 16,
        }
    }

    fn decode(w: u64) -> Abort {
        if w & ABORT_NO_MEMORY != 0 {
            Abort::NoMemory(w >> 16)
        } else if w & ABORT_FAILED_OP != 0 {
            Abort::FailedOp((w >> 8 & 0xFF) as usize)
        } else {
            Abort::Cycle
        }
    }
}

/// A state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) status: TxStatus,
    pub(crate) pstatus: PersistStatus,
}

impl State {
    pub(crate) fn encode(self) -> u64 {
        self.status as u64 | (self.pstatus as u64) << 2
    }

    pub(crate) fn decode(w: u64) -> State {
        let w = w & 0xF;
        let status = match w & 3 {
            0 => TxStatus::Active,
            1 => TxStatus::Committed,
            _ => TxStatus::Aborted,
        };
        let pstatus = match (w >> 2) & 3 {
            0 => PersistStatus::Maybe,
            1 => PersistStatus::InProgress,
            _ => PersistStatus::Persisted,
        };
        State { status, pstatus }
    }

    pub(crate) const ACTIVE: State = State { status: TxStatus::Active, pstatus: PersistStatus::Maybe };
}

/// Whether a descriptor with header `header` has 32-byte ops.
fn is_wide(header: u64) -> bool {
    (header >> 8) & FLAG_WIDE != 0
}

fn op_bytes(wide: bool) -> u64 {
    if wide { WIDE_OP_BYTES } else { OP_BYTES }
}

/// Bytes a descriptor of `nops` operations occupies in its ring (`wide`: of 32-byte ops).
pub(crate) fn desc_bytes(nops: usize, wide: bool) -> u64 {
    (OPS + (op_bytes(wide) + VOLATILE_BYTES) * nops as u64).next_multiple_of(CACHE_LINE)
}

/// Bytes of a descriptor that are persisted.
pub(crate) fn persisted_bytes(nops: usize, wide: bool) -> u64 {
    OPS + op_bytes(wide) * nops as u64
}

/// An operation as stored in a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredOp {
    /// The kind's code.
    pub(crate) kind: u8,
    /// The structure's root slot.
    pub(crate) structure: u8,
    /// The key's encoding.
    pub(crate) key: u128,
    /// The value (for the kinds that write one).
    pub(crate) value: u64,
    /// Whether `value` is the offset of a blob the op wrote (its length word, then its bytes):
    /// whoever persists the descriptor flushes the blob's lines before the same fence.
    pub(crate) blob: bool,
    /// The blob's [`op_hash`] (40 bits), if `blob`.
    pub(crate) hash: u64,
}

/// Read access to one descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Desc<'m, M: PMem> {
    mem: &'m M,
    off: u64,
}

impl<'m, M: PMem> Desc<'m, M> {
    pub(crate) fn new(mem: &'m M, off: u64) -> Self {
        Desc { mem, off }
    }

    pub(crate) fn header(&self) -> u64 {
        self.mem.load(self.off + HEADER, Ordering::Relaxed)
    }

    pub(crate) fn nops(&self) -> usize {
        (self.header() & 0xFF) as usize
    }

    pub(crate) fn read_only(&self) -> bool {
        (self.header() >> 8) & FLAG_READ_ONLY != 0
    }

    /// Whether some op's value is a blob.
    pub(crate) fn has_blobs(&self) -> bool {
        (self.header() >> 8) & FLAG_BLOBS != 0
    }

    /// Whether the ops are 32 bytes (some key has a high word).
    pub(crate) fn wide(&self) -> bool {
        is_wide(self.header())
    }

    /// Bytes of the persisted part.
    pub(crate) fn persisted_bytes(&self) -> u64 {
        persisted_bytes(self.nops(), self.wide())
    }

    /// Offset of op `i` in a descriptor whose header is `header`.
    fn op_base(&self, header: u64, i: usize) -> u64 {
        self.off + OPS + op_bytes(is_wide(header)) * i as u64
    }

    pub(crate) fn state(&self) -> State {
        // Acquire: a thread that sees a final status sees what the finishing thread did before.
        State::decode(self.mem.load(self.off + STATE, Ordering::Acquire))
    }

    pub(crate) fn cas_state(&self, from: State, to: State) -> Result<(), State> {
        // AcqRel: publish this thread's work (Release) and see the previous writer's (Acquire).
        self.mem
            .compare_exchange(self.off + STATE, from.encode(), to.encode(), Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(State::decode)
    }

    /// Aborts the transaction if it is still active, recording `why` for the owner to report.
    /// The first abort decides, and only its reason is recorded.
    pub(crate) fn abort(&self, why: Abort) {
        let to = State { status: TxStatus::Aborted, pstatus: PersistStatus::Persisted }.encode() | why.encode();
        // AcqRel: as for `cas_state`.
        let _ = self.mem.compare_exchange(
            self.off + STATE,
            State::ACTIVE.encode(),
            to,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Why the transaction was aborted; `None` if it was not (yet).
    pub(crate) fn abort_reason(&self) -> Option<Abort> {
        // Acquire: as for `state`.
        let w = self.mem.load(self.off + STATE, Ordering::Acquire);
        (State::decode(w).status == TxStatus::Aborted).then(|| Abort::decode(w))
    }

    pub(crate) fn op(&self, i: usize) -> StoredOp {
        let header = self.header();
        let base = self.op_base(header, i);
        let w0 = self.mem.load(base, Ordering::Relaxed);
        let lo = self.mem.load(base + 8, Ordering::Relaxed) as u128;
        let hi = if is_wide(header) { self.mem.load(base + 24, Ordering::Relaxed) as u128 } else { 0 };
        StoredOp {
            kind: w0 as u8,
            structure: (w0 >> 8) as u8,
            key: hi << 64 | lo,
            value: self.mem.load(base + 16, Ordering::Relaxed),
            blob: w0 & OP_BLOB != 0,
            hash: w0 >> OP_HASH_SHIFT,
        }
    }

    /// The last op from op `i` (which is `op`) on that writes `op`'s key in `op`'s structure:
    /// what a committed transaction left at a node whose info word names op `i`. `None` if no
    /// op from `i` on writes the key (the node then holds the state before op `i`).
    pub(crate) fn last_write_of_key(&self, i: usize, op: StoredOp) -> Option<StoredOp> {
        let writes = |o: &StoredOp| !OpKind::from_code(o.kind).is_read();
        let header = self.header();
        // Relaxed: written before the descriptor was published, like the rest of the op.
        if self.mem.load(self.op_base(header, i), Ordering::Relaxed) & OP_LAST != 0 {
            return writes(&op).then_some(op);
        }
        (i + 1..self.nops())
            .rev()
            .map(|k| self.op(k))
            .chain(std::iter::once(op))
            .find(|o| o.structure == op.structure && o.key == op.key && writes(o))
    }

    fn volatile(&self, i: usize) -> u64 {
        let header = self.header();
        self.op_base(header, (header & 0xFF) as usize) + VOLATILE_BYTES * i as u64
    }

    /// Offset of op `i`'s `prev` word.
    pub(crate) fn prev_off(&self, i: usize) -> u64 {
        self.volatile(i)
    }

    /// Offset of op `i`'s cached before-state (flags word, then value word).
    pub(crate) fn cache_off(&self, i: usize) -> u64 {
        self.volatile(i) + 8
    }

    pub(crate) fn txid(&self) -> u64 {
        // Acquire: pairs with the AcqRel CAS that assigned it.
        self.mem.load(self.off + TXID, Ordering::Acquire)
    }

    /// The checksum over the persisted part, with `txid` in place.
    pub(crate) fn checksum(&self, txid: u64) -> u64 {
        let ops = (self.off + OPS..self.off + self.persisted_bytes()).step_by(WORD as usize);
        // Relaxed: the ops never change once published, and the caller saw the descriptor
        // through an Acquire (its state, or an info word naming it), or is recovery, alone.
        check_words([self.header(), txid].into_iter().chain(ops.map(|w| self.mem.load(w, Ordering::Relaxed))))
    }
}

/// Whether the blob at `off` holds a byte value of op hash `hash` ([`op_hash`]): false for one
/// that is torn (its lines had not all reached the media, so it fails its own check) or that
/// does not fit in the pool.
pub(crate) fn blob_matches<M: PMem>(pool: &Pool<M>, off: u64, hash: u64) -> bool {
    let mut buf = Vec::new();
    pool.read_blob_into(POff::new(off), &mut buf).is_ok() && op_hash(value_hash(&buf)) == hash
}

/// Writes a new descriptor at `off` (owned by the caller, not yet published) of `ops`, of 32-byte
/// ops if `wide`. The state word is left Active/Maybe, txid and checksum 0, each `prev` UNSET
/// and each cache empty.
///
/// The slot held other bytes before (a recycled descriptor's, or the middle of one), and recovery
/// reads every line of a ring, wherever a process stopped: the header, whose tag and epoch make
/// recovery read the words after it, is stored last, after the state word says Active. Stored
/// first, it would stand, for as long as the next store takes, over a stale word where the state
/// goes that may read as committed and persisted, and recovery would take the unchecked slot for
/// a damaged descriptor. Before the header, the slot's old header is at or below the checkpoint
/// txid (the slot was recycled), or the line holds no descriptor's start.
///
/// Each op whose key no later op writes gets [`OP_LAST`], found by looking at the later ops
/// (transactions are short and their keys mostly distinct). A one-op transaction needs none: its
/// op has no later op to look at.
pub(crate) fn write_new<M: PMem>(mem: &M, off: u64, epoch: u32, read_only: bool, wide: bool, ops: &[StoredOp]) {
    let n = ops.len();
    debug_assert!(n <= MAX_OPS);
    let mut flags = if read_only { FLAG_READ_ONLY } else { 0 };
    if wide {
        flags |= FLAG_WIDE;
    }
    let stride = op_bytes(wide);
    // Relaxed (and below): the descriptor is unpublished; the ring head's Release store and the
    // info CAS publish it. The state first: see above.
    mem.store(off + STATE, State::ACTIVE.encode(), Ordering::Relaxed);
    mem.store(off + TXID, 0, Ordering::Relaxed);
    mem.store(off + CHECK, 0, Ordering::Relaxed);
    for (i, op) in ops.iter().enumerate() {
        let base = off + OPS + stride * i as u64;
        let blob = if op.blob { OP_BLOB | op.hash << OP_HASH_SHIFT } else { 0 };
        if op.blob {
            flags |= FLAG_BLOBS;
        }
        let written_later = || {
            ops[i + 1..]
                .iter()
                .any(|o| o.structure == op.structure && o.key == op.key && !OpKind::from_code(o.kind).is_read())
        };
        let last = if n > 1 && !written_later() { OP_LAST } else { 0 };
        debug_assert!(wide || op.key >> 64 == 0, "a two-word key in a descriptor of one-word ops");
        mem.store(base, op.kind as u64 | (op.structure as u64) << 8 | blob | last, Ordering::Relaxed);
        mem.store(base + 8, op.key as u64, Ordering::Relaxed);
        mem.store(base + 16, op.value, Ordering::Relaxed);
        if wide {
            mem.store(base + 24, (op.key >> 64) as u64, Ordering::Relaxed);
        }
    }
    let vol = off + OPS + stride * n as u64;
    for i in 0..n as u64 {
        mem.store(vol + VOLATILE_BYTES * i, UNSET, Ordering::Relaxed);
        mem.store(vol + VOLATILE_BYTES * i + 8, 0, Ordering::Relaxed);
        mem.store(vol + VOLATILE_BYTES * i + 16, 0, Ordering::Relaxed);
    }
    // Release: not for another thread (none reads the descriptor before it is published), but so
    // that no store above is moved after it: the order in which they reach memory is what a
    // killed process leaves, and the line's order is what reaches persistent memory.
    mem.store(off + HEADER, DESC_TAG << 48 | (epoch as u64) << 16 | flags << 8 | n as u64, Ordering::Release);
}

/// What recovery finds at a 64-byte-aligned position of a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No persisted descriptor above the checkpoint txid: none at all, one that never finished
    /// persisting (or aborted, or only read), or one the records already hold.
    Nothing,
    /// A valid persisted descriptor (tag, epoch and check word agree, a txid above the
    /// checkpoint txid, it writes): its txid and the bytes it occupies.
    Persisted { txid: u64, bytes: u64 },
    /// A descriptor that says it is persisted (committed, and marked so after its fence) but
    /// whose check word fails: only damage makes one.
    Damaged { bytes: u64 },
}

/// What is at `off`, a position of a ring ending at `end`, for recovery in epoch `epoch` above
/// `checkpoint` (see [`Found`]). A descriptor at or below the checkpoint txid is in the node
/// records already (and its slot may have been written again), so it is passed over unchecked.
pub(crate) fn persisted_at<M: PMem>(mem: &M, off: u64, end: u64, epoch: u32, checkpoint: u64) -> Found {
    let d = Desc::new(mem, off);
    let header = d.header();
    if header >> 48 != DESC_TAG || (header >> 16) as u32 != epoch {
        return Found::Nothing;
    }
    let n = d.nops();
    let bytes = desc_bytes(n, d.wide());
    if n == 0 || n > MAX_OPS || off + bytes > end {
        return Found::Nothing;
    }
    let txid = d.txid();
    if txid <= checkpoint && txid != 0 {
        return Found::Nothing;
    }
    // A check word that holds vouches for the ops; their kinds are checked all the same, so that
    // nothing read from the file can make a reader panic. Relaxed: recovery runs alone.
    let whole = txid != 0
        && mem.load(off + CHECK, Ordering::Relaxed) == d.checksum(txid)
        && (0..n).all(|i| OpKind::try_from_code(d.op(i).kind).is_some());
    // The whole word, not its status bits: the persisting CAS stores exactly this value (a
    // reason goes only with an abort), and a line that is no descriptor's start (a key or value
    // in an older descriptor's ops that happens to look like a header) rarely holds it after
    // its header word, so such a line is far less often taken for damage.
    // Relaxed: recovery runs alone.
    let persisted = mem.load(off + STATE, Ordering::Relaxed)
        == State { status: TxStatus::Committed, pstatus: PersistStatus::Persisted }.encode();
    match (whole, d.read_only()) {
        (true, false) => Found::Persisted { txid, bytes },
        (true, true) => Found::Nothing,
        // Persisted is stored after the fence that made the check word durable, in its line.
        (false, read_only) if persisted && !read_only => Found::Damaged { bytes },
        (false, _) => Found::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for wide in [false, true] {
            assert_eq!(persisted_bytes(1, wide).div_ceil(64), 1, "a one-op descriptor persists one line");
            assert_eq!(desc_bytes(1, wide), 128);
            assert!(desc_bytes(MAX_OPS, wide) >= persisted_bytes(MAX_OPS, wide) + 24 * MAX_OPS as u64);
        }
        assert_eq!(persisted_bytes(16, false).div_ceil(64), 7);
        assert_eq!(persisted_bytes(16, true).div_ceil(64), 9);
    }

    #[test]
    fn ops_whose_key_no_later_op_writes_are_marked_and_answer_like_the_scan() {
        use crate::mem::SimMem;
        let mem = SimMem::new(1 << 16, 1 << 16);
        let op = |kind: OpKind, structure: u8, key: u128| StoredOp {
            kind: kind as u8,
            structure,
            key,
            value: key as u64 + 100,
            blob: false,
            hash: 0,
        };
        for wide in [false, true] {
            let k = |x: u128| if wide { x << 64 | x } else { x };
            let ops = [
                op(OpKind::Put, 1, k(1)),
                op(OpKind::Get, 1, k(1)),
                op(OpKind::Put, 1, k(2)),
                op(OpKind::Put, 2, k(1)),
                op(OpKind::Remove, 1, k(1)),
                op(OpKind::Get, 1, k(3)),
                op(OpKind::Get, 1, k(2)),
            ];
            write_new(&mem, 4096, 1, false, wide, &ops);
            let desc = Desc::new(&mem, 4096);
            let marked: Vec<bool> = (0..ops.len())
                .map(|i| mem.load(desc.op_base(desc.header(), i), Ordering::Relaxed) & OP_LAST != 0)
                .collect();
            assert_eq!(marked, [false, false, true, true, true, true, true]);
            for (i, o) in ops.iter().enumerate() {
                assert_eq!(desc.op(i), *o, "the mark leaves the op as written");
                let scan = ops[i..]
                    .iter()
                    .rev()
                    .find(|x| x.structure == o.structure && x.key == o.key && !OpKind::from_code(x.kind).is_read());
                assert_eq!(desc.last_write_of_key(i, *o), scan.copied(), "op {i}");
            }
        }
    }

    #[test]
    fn only_the_exact_persisted_state_word_makes_a_failing_check_damage() {
        use crate::mem::SimMem;
        let mem = SimMem::new(1 << 16, 1 << 16);
        let persisted = State { status: TxStatus::Committed, pstatus: PersistStatus::Persisted }.encode();
        // A line that looks like a one-op descriptor's header (a key in an older descriptor's
        // ops, say), a value after it whose status bits read as persisted, txid 0.
        mem.store(4096, DESC_TAG << 48 | 1 << 16 | 1, Ordering::Relaxed);
        mem.store(4096 + STATE, 0x74000 | persisted, Ordering::Relaxed);
        assert_eq!(State::decode(mem.load(4096 + STATE, Ordering::Relaxed)), State::decode(persisted));
        assert_eq!(persisted_at(&mem, 4096, 1 << 16, 1, 0), Found::Nothing);
        // The state word a persisting thread stores, with a check that fails: damage.
        mem.store(4096 + STATE, persisted, Ordering::Relaxed);
        mem.store(4096 + TXID, 9, Ordering::Relaxed);
        assert_eq!(persisted_at(&mem, 4096, 1 << 16, 1, 0), Found::Damaged { bytes: 128 });
    }

    #[test]
    fn a_descriptor_written_over_stale_words_is_never_found_damaged_halfway() {
        use crate::mem::{CrashPlan, SimMem};
        // The slot held the middle of an older, longer descriptor: at the new state word's place
        // an op's value whose low bits read as committed and persisted, zeros after it.
        // Or it held a whole older descriptor, persisted, its txid (5) at the checkpoint txid.
        let committed = State { status: TxStatus::Committed, pstatus: PersistStatus::Persisted }.encode();
        let ops = |wide: bool, n: usize| -> Vec<StoredOp> {
            (0..n)
                .map(|i| StoredOp {
                    kind: OpKind::Put as u8,
                    structure: 1,
                    key: if wide { 1 << 64 | i as u128 } else { i as u128 },
                    value: 7 + i as u64,
                    blob: false,
                    hash: 0,
                })
                .collect()
        };
        for (stale, checkpoint) in [("words", 0), ("descriptor", 5)] {
            for wide in [false, true] {
                for n in [1, 3] {
                    let mem = SimMem::new(1 << 16, 1 << 16);
                    if stale == "words" {
                        mem.store(4096, 0x0203, Ordering::Relaxed);
                        mem.store(4096 + STATE, committed, Ordering::Relaxed);
                    } else {
                        write_new(&mem, 4096, 1, false, !wide, &ops(!wide, 5 - n));
                        let old = Desc::new(&mem, 4096);
                        mem.store(4096 + TXID, 5, Ordering::Relaxed);
                        mem.store(4096 + CHECK, old.checksum(5), Ordering::Relaxed);
                        mem.store(4096 + STATE, committed, Ordering::Relaxed);
                        assert_eq!(
                            persisted_at(&mem, 4096, 1 << 16, 1, 4),
                            Found::Persisted { txid: 5, bytes: desc_bytes(5 - n, !wide) }
                        );
                    }
                    // A process killed before any store of the new descriptor, or after any one
                    // of them, leaves one of these images.
                    mem.set_plan(CrashPlan { store_probability: 1.0, ..CrashPlan::none() });
                    write_new(&mem, 4096, 1, false, wide, &ops(wide, n));
                    let mut images = 0;
                    for st in mem.take_crash_states().into_iter().chain([mem.crash_now()]) {
                        let image = st.every_store().to_mem(1 << 16);
                        let found = persisted_at(&image, 4096, 1 << 16, 1, checkpoint);
                        assert_eq!(found, Found::Nothing, "over stale {stale}, {n} ops, {}", st.point);
                        images += 1;
                    }
                    assert!(images > 4 * n, "an image after each store");
                }
            }
        }
    }

    #[test]
    fn abort_reasons_round_trip_and_leave_the_status_as_recovery_reads_it() {
        use crate::mem::SimMem;
        let mem = SimMem::new(1 << 16, 1 << 16);
        let aborted = State { status: TxStatus::Aborted, pstatus: PersistStatus::Persisted };
        let reasons = [Abort::Cycle, Abort::FailedOp(0), Abort::FailedOp(MAX_OPS - 1), Abort::NoMemory(1 << 40)];
        for why in reasons {
            let op = StoredOp { kind: OpKind::Put as u8, structure: 0, key: 1, value: 2, blob: false, hash: 0 };
            write_new(&mem, 4096, 1, false, false, &[op]);
            let desc = Desc::new(&mem, 4096);
            assert_eq!(desc.abort_reason(), None, "an active transaction has no reason");
            desc.abort(why);
            assert_eq!((desc.state(), desc.abort_reason()), (aborted, Some(why)));
            desc.abort(Abort::Cycle);
            assert_eq!(desc.abort_reason(), Some(why), "the first abort decides");
            assert_eq!(persisted_at(&mem, 4096, 1 << 16, 1, 0), Found::Nothing);
        }
    }

    #[test]
    fn state_round_trips() {
        for status in [TxStatus::Active, TxStatus::Committed, TxStatus::Aborted] {
            for pstatus in [PersistStatus::Maybe, PersistStatus::InProgress, PersistStatus::Persisted] {
                let s = State { status, pstatus };
                assert_eq!(State::decode(s.encode()), s);
            }
        }
    }
}

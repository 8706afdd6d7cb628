//! Recovery's check of itself: the state recovery computed from the records and descriptors must
//! be the state the pool's own structures hold, read without trusting a word.
//!
//! Where the structures can be trusted to be whole, each is walked from its head (every link
//! checked to reach a node block, keys in order: see `LinkedSet::walk_checked`) and every node's
//! key read as a reader outside any transaction would read it: from a FINAL word, or through the
//! descriptor its info word names, checked (a descriptor of the epoch, in a ring, with valid ops)
//! and counted only if it is durable as recovery counts it (a txid and a check word that holds).
//! The two must agree key for key; a key on which they differ is damage, in one or the other.
//!
//! The structures are whole after a clean close (everything was synced, and the links are what
//! the next run uses: the walk is strict) and after the death of the process alone (the memory
//! kept every store; the walk takes links as a dying writer may have left them). After a power
//! loss they are not (lines never flushed are lost), and only the checks of records, descriptors
//! and values stand.

use crate::descriptor::{CHECK, CUT, DESC_TAG, Desc, NO_NODE, PersistStatus, TxStatus, UNSET, desc_bytes};
use crate::error::Damage;
use crate::mem::{CACHE_LINE, PMem};
use crate::pool::Pool;
use crate::ring;
use crate::structures::info::Info;
use crate::structures::node::{INFO, VALUE};
use crate::structures::registry::Structure;
use crate::tx::{MAX_OPS, OpKind};

/// The longest chain of ops a read follows from a node's info word (each op names the one whose
/// word it replaced): more means a cycle, which only damage makes.
const CHAIN_LIMIT: usize = 1 << 16;

/// Checks that `structures` hold exactly `present` ((slot, key, value), sorted), walking each
/// (strictly if `strict`). The descriptors an info word names must be of `epoch`.
pub(super) fn structures_agree<M: PMem + 'static>(
    pool: &Pool<M>,
    structures: &[Structure],
    epoch: u64,
    present: &[(u8, u128, u64)],
    strict: bool,
) -> Result<(), Damage> {
    let reader = Reader { pool, rings: ring::regions(pool), epoch };
    for (slot, structure) in structures.iter().enumerate() {
        let slot = slot as u8;
        // (key, value, node) of the present keys the structure holds.
        let mut live: Vec<(u128, u64, u64)> = Vec::new();
        let mut failed: Option<Damage> = None;
        structure
            .walk_checked(pool, strict, &mut |node, key| {
                if failed.is_some() {
                    return;
                }
                match reader.node_state(node) {
                    Ok(Some(value)) => live.push((key, value, node)),
                    Ok(None) => {}
                    Err(d) => failed = Some(d),
                }
            })
            .map_err(|Damage { what, at }| Damage { what: format!("structure {slot}: {what}"), at })?;
        if let Some(d) = failed {
            return Err(d);
        }
        if !structure.ordered::<M>() {
            live.sort_unstable_by_key(|e| e.0);
        }
        let from = present.partition_point(|p| p.0 < slot);
        let recovered = &present[from..from + present[from..].partition_point(|p| p.0 == slot)];
        if let Some(d) = first_difference(slot, &live, recovered) {
            return Err(d);
        }
    }
    Ok(())
}

/// The first key on which the structure (`live`: key, value, node) and recovery (`recovered`)
/// differ, as damage.
fn first_difference(slot: u8, live: &[(u128, u64, u64)], recovered: &[(u8, u128, u64)]) -> Option<Damage> {
    let (mut i, mut j) = (0, 0);
    loop {
        let l = live.get(i);
        let r = recovered.get(j);
        let (key, in_structure, in_records, at) = match (l, r) {
            (None, None) => return None,
            (Some(&(k, v, n)), Some(&(_, rk, rv))) if k == rk => {
                if v == rv {
                    (i, j) = (i + 1, j + 1);
                    continue;
                }
                (k, Some(v), Some(rv), n)
            }
            (Some(&(k, v, n)), Some(&(_, rk, _))) if k < rk => (k, Some(v), None, n),
            (Some(&(k, v, n)), None) => (k, Some(v), None, n),
            (_, Some(&(_, rk, rv))) => (rk, None, Some(rv), 0),
        };
        let show = |s: Option<u64>| s.map_or("absent".to_string(), |v| format!("{v:#x}"));
        return Some(Damage {
            what: format!(
                "structure {slot}, key {key:#x}: the structure holds {}, the records and descriptors say {}",
                show(in_structure),
                show(in_records)
            ),
            at,
        });
    }
}

/// Reads states as a reader outside any transaction does, checking every word it follows.
struct Reader<'p, M: PMem> {
    pool: &'p Pool<M>,
    /// The descriptor rings: (offset, bytes).
    rings: Vec<(u64, u64)>,
    epoch: u64,
}

impl<M: PMem> Reader<'_, M> {
    fn mem(&self) -> &M {
        self.pool.mem()
    }

    /// The state of `node` (linked, checked): `Some(value)` if present.
    fn node_state(&self, node: u64) -> Result<Option<u64>, Damage> {
        // Relaxed (every load): recovery runs alone.
        let info = Info(self.mem().load(node + INFO, std::sync::atomic::Ordering::Relaxed));
        if info.is_marked() {
            self.check_marked(info, node)?;
            return Ok(None);
        }
        self.resolve(info, node + INFO)
    }

    /// Checks the marked info word `info` of `node`, which says the node is being removed, and so
    /// absent: a mark read off a damaged word would pass a key over, and with it the damage that
    /// took the key's record. A marked word is FINAL absent, naming `node` itself (what most
    /// removals write); or an op reference into a descriptor slot of a ring: a committed Delete
    /// or Remove that removed the node while it held a record, until the round that folds it
    /// writes REMOVED (or, in a pool written before removals wrote REMOVED, the removal of a
    /// finished op's node, cut short). The slot's descriptor is not read: in an older pool the
    /// slot may have been recycled while the removal was under way.
    fn check_marked(&self, info: Info, node: u64) -> Result<(), Damage> {
        let at = node + INFO;
        if info.is_final() {
            if info.final_present() || info.final_node() != node {
                return Err(Damage {
                    what: format!("a marked FINAL word of node {node:#x} that is not its absence"),
                    at,
                });
            }
            return Ok(());
        }
        match self.slot(info.desc()) {
            Some(_) => Ok(()),
            None => Err(Damage {
                what: format!(
                    "a marked info word names a descriptor at {:#x}, which is no slot of a ring",
                    info.desc()
                ),
                at,
            }),
        }
    }

    /// The state the info word `cur`, read at `at`, stands for (Algorithm 5.2, as
    /// `protocol::Core::resolve` reads it for a reader outside any transaction, but counting a
    /// committed descriptor only if it is durable, as recovery does).
    fn resolve(&self, mut cur: Info, mut at: u64) -> Result<Option<u64>, Damage> {
        // Relaxed (every load): recovery runs alone.
        let mem = self.mem();
        let damage = |what: String, at: u64| Damage { what, at };
        for _ in 0..CHAIN_LIMIT {
            if cur.is_final() {
                let node = cur.final_node();
                if self.pool.node_block(crate::pool::POff::new(node)).is_none() {
                    return Err(damage(format!("a FINAL word names {node:#x}, which is no node block"), at));
                }
                let value = mem.load(node + VALUE, std::sync::atomic::Ordering::Relaxed);
                return Ok(cur.final_present().then_some(value));
            }
            let (d, j) = (cur.desc(), cur.opid());
            let desc = self.descriptor(d, j).map_err(|what| damage(what, at))?;
            let op = desc.op(j);
            let state = desc.state();
            let writer = match state.status {
                TxStatus::Committed if self.durable(&desc, d) => desc.last_write_of_key(j, op),
                // Persisted is stored after the fence that made the check word durable.
                TxStatus::Committed if state.pstatus == PersistStatus::Persisted && !desc.read_only() => {
                    return Err(damage(format!("the persisted descriptor at {d:#x} fails its check"), at));
                }
                _ => None,
            };
            if let Some(w) = writer
                && let Some(present) = OpKind::from_code(w.kind).writes()
            {
                return Ok(present.then_some(w.value));
            }
            // The state before op j: its cache, or what its `prev` names.
            let cache = desc.cache_off(j);
            let flags = mem.load(cache, std::sync::atomic::Ordering::Relaxed);
            if flags & 1 != 0 {
                return Ok((flags & 2 != 0).then(|| mem.load(cache + 8, std::sync::atomic::Ordering::Relaxed)));
            }
            at = desc.prev_off(j);
            match mem.load(at, std::sync::atomic::Ordering::Relaxed) {
                NO_NODE => return Ok(None),
                UNSET | CUT => return Err(damage("an op named by a node with no before-state".into(), at)),
                prev => cur = Info(prev),
            }
        }
        Err(damage("a chain of ops that does not end".into(), at))
    }

    /// The descriptor at `d` that an info word names as having op `j`, checked: a descriptor of
    /// the epoch where one can be, in a ring, with op `j` and valid ops. Why not otherwise.
    fn descriptor(&self, d: u64, j: usize) -> Result<Desc<'_, M>, String> {
        let Some((ring, len)) = self.slot(d) else {
            return Err(format!("an info word names a descriptor at {d:#x}, which is no slot of a ring"));
        };
        let desc = Desc::new(self.mem(), d);
        let header = desc.header();
        let nops = desc.nops();
        let bad = |why: &str| Err(format!("the descriptor at {d:#x} an info word names {why}"));
        if header >> 48 == DESC_TAG && (header >> 16) as u32 == self.epoch as u32 {
            if nops == 0 || nops > MAX_OPS || j >= nops || d + desc_bytes(nops, desc.wide()) > ring + len {
                return bad("has no such op");
            }
            if (0..nops).any(|i| OpKind::try_from_code(desc.op(i).kind).is_none()) {
                return bad("has an op of no kind");
            }
            return Ok(desc);
        }
        bad("is none")
    }

    /// The ring (offset, bytes) of which `d` is a slot, where a descriptor can start: a line of
    /// the ring after its first.
    fn slot(&self, d: u64) -> Option<(u64, u64)> {
        self.rings
            .iter()
            .copied()
            .find(|&(r, len)| d >= r + CACHE_LINE && d < r + len && (d - r).is_multiple_of(CACHE_LINE))
    }

    /// Whether recovery counts the committed descriptor at `d`: it writes, has a txid, and its
    /// check word holds.
    fn durable(&self, desc: &Desc<'_, M>, d: u64) -> bool {
        // Relaxed: recovery runs alone.
        let txid = desc.txid();
        txid != 0
            && !desc.read_only()
            && self.mem().load(d + CHECK, std::sync::atomic::Ordering::Relaxed) == desc.checksum(txid)
    }
}

//! Recovery: rebuild every structure from the persisted descriptors and the node records,
//! without trusting a single link, and hand the engine what it found.
//!
//! Recovery runs at every open but one after [`Engine::close`](crate::Engine::close) (which runs
//! recovery's rewrite itself). It first reads and checks, writing nothing, so that a pool it
//! refuses is left byte for byte as it was:
//!
//! 1. **The meta region and the roots**: the engine's words and structures, each checked (see
//!    `meta`, `structures::registry`).
//! 2. **KDMap** ([`kdmap`]): the last write of each key by a persisted descriptor above the
//!    checkpoint txid.
//! 3. **Baseline** ([`baseline`]): the valid records of the node arena, for the keys KDMap does
//!    not name. The state of a key is KDMap's if it has one, else its record's, else absent. Two
//!    records of one key, or a record of a structure the pool does not have, are damage. So is a
//!    record of the epoch that fails its check, unless KDMap names its key (the death of the
//!    process in the middle of a checkpoint round's write of it makes those) — where that can be
//!    told: after a clean close, or in the boot the pool was last in use in. After a power loss
//!    a round's torn record may also sit beside a key line that never reached the media, so its
//!    key cannot be read, and such a record is passed over (KDMap holds its key's state).
//! 4. **Agreement** ([`verify`]): where the structures are whole (a clean close, or the death of
//!    the process alone: the pool was last in use in this boot; but not the death of a recovery
//!    before its commit, which was rebuilding them), they must hold exactly the state found; and
//!    every byte value of a present key must pass its check.
//!
//! Then it writes: the pool is marked in use, and
//!
//! 5. **Rewrite** ([`rewrite`]): every structure built anew from fresh normalised nodes of its
//!    present keys, committed by advancing the epoch in the meta region;
//! 6. **Allocator**: rebuilt from the new nodes, their byte values and the heads; everything
//!    else (the old nodes among it) is free.
//!
//! After a clean close the open skips 2, 5 and the rewrite's work: it checks (1, 3, 4) and
//! rebuilds the allocator from the records (**clean open**). Recovery is structure-agnostic: the
//! registry says what each root entry is, and each structure builds and walks itself. It
//! returns what it found ([`Recovered`]); the engine assembles itself from that.

mod baseline;
mod kdmap;
mod rewrite;
mod verify;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Damage, EngineError};
use crate::key::Key;
use crate::mem::PMem;
use crate::meta::{Meta, MetaState};
use crate::pool::{POff, Pool, RebuildReport};
use crate::structures::node::Read;
use crate::structures::registry::{self, Structure};
use crate::tx::{StructId, Values};
use rewrite::heads;

/// What recovery found and did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Valid persisted descriptors read.
    pub descriptors: u64,
    /// Keys named by a writing op of a valid descriptor.
    pub kdmap_keys: u64,
    /// Normalised nodes of the last recovery found by the arena scan.
    pub baseline_keys: u64,
    /// Keys present after recovery, over all structures.
    pub present_keys: u64,
    /// The epoch now in force.
    pub epoch: u64,
    /// The largest txid seen (the next transaction gets a larger one).
    pub max_txid: u64,
    /// What the allocator rebuild found.
    pub allocator: RebuildReport,
    /// After a power loss (the pool was last in use in another boot) of a pool that kept safe
    /// points: the safe txid it was brought back to (every descriptor above it was passed over).
    pub safe_point: Option<u64>,
    /// Whether the open skipped recovery: the pool was closed by
    /// [`Engine::close`](crate::Engine::close), so its normalised nodes held every committed
    /// transaction and no descriptor was read.
    pub clean: bool,
}

/// What recovery hands the engine: the pool, recovered, and what the engine is made of.
#[derive(Debug)]
pub(crate) struct Recovered<M: PMem> {
    pub(crate) pool: Pool<M>,
    pub(crate) meta: Meta,
    /// The epoch in force.
    pub(crate) epoch: u64,
    /// The largest txid handed out before (the next one is above it).
    pub(crate) max_txid: u64,
    /// Every txid below it is durably reserved.
    pub(crate) txid_reserved: u64,
    /// The structures, by root slot.
    pub(crate) structures: Vec<Structure>,
    pub(crate) report: RecoveryReport,
}

impl<M: PMem> Recovered<M> {
    /// A new engine's state: no structure, epoch 1, no txid handed out.
    pub(crate) fn empty(pool: Pool<M>, meta: Meta) -> Recovered<M> {
        Recovered {
            pool,
            meta,
            epoch: 1,
            max_txid: 0,
            txid_reserved: 1 + crate::meta::TXID_BLOCK,
            structures: Vec::new(),
            report: RecoveryReport::default(),
        }
    }
}

/// What the reading steps found: the state of every key, and what the rewrite needs.
struct Found {
    /// The present keys, (slot, key, value), sorted.
    present: Vec<(u8, u128, u64)>,
    /// The node blocks holding valid records.
    records: Vec<POff>,
    /// The largest txid seen.
    max_txid: u64,
}

/// What a pool holds, as recovery found it before writing anything: for a caller's check of
/// the contents (see [`Engine::open_checked`](crate::Engine::open_checked)).
pub struct Contents<'a> {
    present: &'a [(u8, u128, u64)],
    read: &'a ReadValue<'a>,
}

/// Reads a byte value by its word, checked.
type ReadValue<'a> = dyn Fn(u64, &mut Vec<u8>) -> Result<(), Damage> + 'a;

impl std::fmt::Debug for Contents<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contents").field("present", &self.present.len()).finish_non_exhaustive()
    }
}

impl Contents<'_> {
    /// The value word of `key` in structure `s`, if present.
    pub fn get<K: Key>(&self, s: StructId, key: K) -> Option<u64> {
        let at = (s.0, key.to_bits());
        self.present.binary_search_by(|p| (p.0, p.1).cmp(&at)).ok().map(|i| self.present[i].2)
    }

    /// The keys present in structure `s` and their value words, in key order.
    pub fn entries<K: Key>(&self, s: StructId) -> impl Iterator<Item = (K, u64)> + '_ {
        let from = self.present.partition_point(|p| p.0 < s.0);
        let to = self.present.partition_point(|p| p.0 <= s.0);
        self.present[from..to].iter().map(|&(_, key, value)| (K::from_bits(key), value))
    }

    /// Copies the byte value named by `word` (a value word of a structure of byte values) into
    /// `buf`, checked as every read is ([`Blobs::read_into`](crate::Blobs::read_into)).
    pub fn read_into(&self, word: u64, buf: &mut Vec<u8>) -> Result<(), Damage> {
        (self.read)(word, buf)
    }
}

/// Why recovery (and so [`Engine::open_checked`](crate::Engine::open_checked)) refused a pool,
/// leaving it as it was.
#[derive(Debug)]
pub enum Refused<E> {
    /// The engine's reasons.
    Engine(EngineError),
    /// The caller's check of the contents.
    Check(E),
}

impl<E> From<EngineError> for Refused<E> {
    fn from(e: EngineError) -> Self {
        Refused::Engine(e)
    }
}

impl<E> From<Damage> for Refused<E> {
    fn from(d: Damage) -> Self {
        Refused::Engine(d.into())
    }
}

/// Recovers the engine in `pool`, once `check` accepts what it holds. See the
/// [module docs](self).
pub(crate) fn recover<M: PMem + 'static, T, E>(
    mut pool: Pool<M>,
    check: impl FnOnce(&Contents<'_>) -> Result<T, E>,
) -> Result<(Recovered<M>, T), Refused<E>> {
    // 1. to 4.: read and check, writing nothing.
    let (meta, state) = Meta::find(&pool)?;
    let structures = registry::read(&pool, state.structures)?;
    let clean = pool.was_clean() && state.clean == state.epoch;
    let mut report = RecoveryReport { clean, epoch: state.epoch, ..RecoveryReport::default() };
    let whole = clean || pool.same_boot();
    // A recovery that died before its commit (its attempt is past the epoch) was rebuilding the
    // structures in place: their heads link some of its new nodes and not the rest. The memory
    // holds every store, but the structures say nothing until this recovery rebuilds them.
    let walkable = whole && state.attempt == state.epoch;
    let mut damage = Vec::new();
    let mut found = read(&pool, &structures, &state, (clean, whole), &mut report, &mut damage);
    check_values(&pool, &structures, &mut found.present, &mut damage);
    if let Some(d) = damage.into_iter().next() {
        return Err(d.into());
    }
    if walkable {
        verify::structures_agree(&pool, &structures, state.epoch, &found.present, clean)?;
    }
    let read = |word, buf: &mut Vec<u8>| pool.read_blob_into(POff::new(word), buf);
    let accepted = check(&Contents { present: &found.present, read: &read }).map_err(Refused::Check)?;

    // Whether the free chunks may not hold the rewrite (see below). Otherwise the file space the
    // rewrite needs is reserved first: on a full file system the open is refused
    // (`AllocError::NoSpace`) with the file as it was.
    let counts = pool.chunk_counts();
    let room = pool.header().layout.chunks_in(pool.max_len()).saturating_sub(counts.node + counts.blob + counts.runs);
    let tight = !clean && room < counts.node;
    // `present` is in (structure, key) order: the key before each of a structure's.
    let nodes = found.present.iter().enumerate().map(|(i, &(slot, key, _))| {
        let prev = i.checked_sub(1).map(|p| found.present[p]).filter(|p| p.0 == slot).map(|p| p.1);
        (structures[slot as usize].built_bytes::<M>(prev, key), 1)
    });
    let need = if clean { 0 } else { pool.chunks_for_nodes(nodes) };
    if !clean && !tight {
        pool.reserve_chunks(need).map_err(EngineError::from)?;
    }
    // Accepted: from here on, recovery writes.
    pool.mark_in_use().map_err(EngineError::from)?;
    #[cfg(test)]
    dies::here();
    report.present_keys = found.present.len() as u64;
    report.max_txid = found.max_txid;
    if clean {
        meta.clear_clean(pool.mem());
        let live = found.records.iter().copied().chain(values(&structures, &found.present)).chain(heads(&structures));
        report.allocator = rebuild_allocator(&mut pool, live.collect())?;
        let Found { max_txid, .. } = found;
        let txid_reserved = state.txid_reserved;
        return Ok((
            Recovered { pool, meta, epoch: state.epoch, max_txid, txid_reserved, structures, report },
            accepted,
        ));
    }
    // Every use of chunks keeps free as many as node slabs are in use, the room the rewrite
    // needs; but a recovery that died after taking chunks for its rewrite, or after its commit
    // and before its last rebuild freed the old nodes' chunks, left them in use, and the room can
    // fall short. Then, before anything else is written, every block recovery does not read is
    // freed (nodes made since the last recovery, a dead attempt's nodes, byte values no longer
    // present), which also lets the rewrite use the free blocks of chunks a head or a baseline
    // node keeps in use. Only the table entries of chunks left wholly free reach the media, and
    // nothing in them is read by this recovery or a later attempt (the same descriptors and
    // baseline give the same present keys), so a crash after this loses nothing. With room
    // enough, the rewrite takes fresh chunks.
    if tight {
        let read = found.records.iter().copied().chain(values(&structures, &found.present)).chain(heads(&structures));
        rebuild_allocator(&mut pool, read.collect())?;
        // The file space of the chunks the rewrite may take, as far as the pool's maximum
        // allows (its blocks partly free now may hold some of the nodes): a full file system
        // refuses the open here, before the rewrite writes its first node.
        let counts = pool.chunk_counts();
        let room =
            pool.header().layout.chunks_in(pool.max_len()).saturating_sub(counts.node + counts.blob + counts.runs);
        pool.reserve_chunks(need.min(room)).map_err(EngineError::from)?;
    }
    // 5. Rewrite.
    let (epoch, live, txid_reserved) =
        rewrite::rewrite(&pool, meta, state.attempt, &structures, &found.present, found.max_txid)?;
    // 6. Everything not live is free.
    report.allocator = rebuild_allocator(&mut pool, live)?;
    // The rewrite made the last run's descriptors void: from now on a process death in this
    // boot leaves everything recoverable (see `Pool::claim_boot`).
    pool.claim_boot().map_err(EngineError::from)?;
    pool.keep_recovery_room(true);
    report.epoch = epoch;
    Ok((Recovered { pool, meta, epoch, max_txid: found.max_txid, txid_reserved, structures, report }, accepted))
}

/// Steps 2 and 3: the state of every key, from KDMap (unless `clean`: no descriptor is left)
/// and the records, with the damage they show listed in `damage` and passed over (`whole`: the
/// pool's memory is as its last run left it, so a record's key reads as written).
fn read<M: PMem>(
    pool: &Pool<M>,
    structures: &[Structure],
    state: &MetaState,
    (clean, whole): (bool, bool),
    report: &mut RecoveryReport,
    damage: &mut Vec<Damage>,
) -> Found {
    // Every txid handed out before the crash is below the reservation; persisted ones too.
    // Writers at or below the checkpoint txid are in the node records.
    let mut max_txid = state.checkpoint.max(state.txid_reserved.saturating_sub(1));
    let mut states: FxHashMap<(u8, u128), Option<u64>> = FxHashMap::default();
    if !clean {
        // After a power loss, a pool that kept safe points goes back to the last one: what came
        // after it may have reached the disk in part, in any order (see `safe`). The last one is
        // its claim if everything the claim counts is found whole, else the point before it (the
        // claim's `prev`, or the safe txid, whichever is later: each was completed by an earlier
        // sync). Safe points were kept if the safe txid says so, or the claim's words do (a new
        // engine's safe txid is 0, the state it was created in; a claim cut short by the power
        // loss fails its check but is not zeros, which only an open without safe points leaves).
        let ours = state.claim.filter(|c| !whole && c.epoch == state.epoch);
        let claim = ours.filter(|c| c.txid > state.safe);
        let kept = !whole && (state.safe != 0 || state.claim_words);
        let before = state.safe.max(ours.map_or(0, |c| c.prev));
        let read_upto = |upto: u64, claim: Option<(u64, u64)>, damage: &mut Vec<Damage>| {
            let at = (state.epoch, state.checkpoint, upto, state.txid_reserved);
            kdmap::read(pool, at, claim, structures.len(), whole, damage)
        };
        // The damage a read finds is kept only from the read that is used.
        let mut claim_damage = Vec::new();
        let vouched = claim.and_then(|c| {
            let kdmap = read_upto(c.txid, Some((c.prev, c.writers)), &mut claim_damage)?;
            Some((kdmap, c.txid))
        });
        let kdmap = match vouched {
            Some((kdmap, txid)) => {
                report.safe_point = Some(txid);
                damage.append(&mut claim_damage);
                kdmap
            }
            None => {
                report.safe_point = kept.then_some(before);
                // Without a claim to check, the read always gives a map.
                read_upto(if kept { before } else { u64::MAX }, None, damage).expect("no claim to refuse")
            }
        };
        max_txid = max_txid.max(kdmap.max_txid);
        report.descriptors = kdmap.descriptors;
        report.kdmap_keys = kdmap.states.len() as u64;
        states = kdmap.states;
    }
    let in_kdmap = |key: &(u8, u128), states: &FxHashMap<(u8, u128), Option<u64>>| !clean && states.contains_key(key);
    let mut records = Vec::new();
    let mut seen: FxHashSet<(u8, u128)> = FxHashSet::default();
    baseline::scan(pool, structures, state.epoch, |node, read| match read {
        Read::Record(r) => {
            report.baseline_keys += 1;
            let key = (r.slot, r.key);
            if !seen.insert(key) && !in_kdmap(&key, &states) {
                let what = format!("a second record of key {:#x} of structure {}", r.key, r.slot);
                damage.push(Damage { what, at: node });
                return;
            }
            records.push(POff::new(node));
            states.entry(key).or_insert(r.state);
        }
        Read::Broken { slot, key: None } => {
            damage
                .push(Damage { what: format!("a record of structure {slot}, which the pool does not have"), at: node });
        }
        Read::Broken { slot, key: Some(key) } => {
            if whole && !in_kdmap(&(slot, key), &states) {
                let what = format!("a record of key {key:#x} of structure {slot} that fails its check");
                damage.push(Damage { what, at: node });
            }
        }
        Read::Nothing => {}
    });
    // The present keys, by structure and in key order.
    let mut present: Vec<(u8, u128, u64)> =
        states.into_iter().filter_map(|((slot, key), v)| v.map(|v| (slot, key, v))).collect();
    present.sort_unstable();
    Found { present, records, max_txid }
}

/// The byte values of `present` keys (of structures of byte values).
fn values<'a>(structures: &'a [Structure], present: &'a [(u8, u128, u64)]) -> impl Iterator<Item = POff> + 'a {
    present.iter().filter(|p| structures[p.0 as usize].values == Values::Bytes).map(|p| POff::new(p.2))
}

/// Every byte value of a present key must be a blob in use that passes its check: the keys whose
/// value does not are listed in `damage` and taken out of `present`.
fn check_values<M: PMem>(
    pool: &Pool<M>,
    structures: &[Structure],
    present: &mut Vec<(u8, u128, u64)>,
    damage: &mut Vec<Damage>,
) {
    let mut buf = Vec::new();
    present.retain(|&(slot, key, value)| {
        if structures[slot as usize].values != Values::Bytes {
            return true;
        }
        let checked = pool.check_blob(POff::new(value), &mut buf);
        if let Err(d) = &checked {
            damage
                .push(Damage { what: format!("the value of key {key:#x} of structure {slot}: {}", d.what), at: d.at });
        }
        checked.is_ok()
    });
}

/// What a salvage found in a damaged pool: its structures, every key it could read whole, and
/// everything it had to pass over.
#[derive(Debug)]
pub(crate) struct Salvaged {
    pub(crate) structures: Vec<Structure>,
    /// (slot, key, value word), sorted.
    pub(crate) present: Vec<(u8, u128, u64)>,
    pub(crate) dropped: Vec<Damage>,
}

/// Reads what is intact of the engine in `pool` as recovery would, but passing over damage
/// instead of refusing it (each item listed), and writing nothing. The engine's meta region and
/// root table must be readable: without them there is nothing to read by.
pub(crate) fn salvage<M: PMem + 'static>(pool: &Pool<M>) -> Result<Salvaged, EngineError> {
    let (_, state) = Meta::find(pool)?;
    let structures = registry::read(pool, state.structures)?;
    let clean = pool.was_clean() && state.clean == state.epoch;
    let whole = clean || pool.same_boot();
    let mut dropped = Vec::new();
    let mut report = RecoveryReport::default();
    let mut found = read(pool, &structures, &state, (clean, whole), &mut report, &mut dropped);
    check_values(pool, &structures, &mut found.present, &mut dropped);
    Ok(Salvaged { structures, present: found.present, dropped })
}

/// Rebuilds the allocator with `live` the only blocks in use ([`Pool::rebuild`]).
fn rebuild_allocator<M: PMem>(pool: &mut Pool<M>, live: Vec<POff>) -> Result<RebuildReport, EngineError> {
    pool.rebuild(live).map_err(|e| EngineError::Corrupt(format!("allocator rebuild: {e}")))
}

/// A unit test's death of the process in the middle of a recovery: set on a thread, its next
/// recovery panics once it has marked the pool in use, as a process killed there would stop.
#[cfg(test)]
pub(crate) mod dies {
    use std::cell::Cell;

    thread_local! {
        static AFTER_MARK: Cell<bool> = const { Cell::new(false) };
    }

    /// The next recovery on this thread dies once it has marked the pool in use.
    pub(crate) fn after_mark() {
        AFTER_MARK.with(|d| d.set(true));
    }

    pub(super) fn here() {
        if AFTER_MARK.with(|d| d.replace(false)) {
            panic!("the process dies in the middle of a recovery");
        }
    }
}

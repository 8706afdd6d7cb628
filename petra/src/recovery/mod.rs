//! Recovery: rebuild every structure from the persisted descriptors and the node records,
//! without trusting a single link, and hand the engine what it found.
//!
//! Recovery runs at every open but one after [`Engine::close`](crate::Engine::close) (which runs
//! recovery's rewrite itself). Its phases, in order:
//!
//! 1. **KDMap** ([`kdmap`]): the last write of each key by a persisted descriptor above the
//!    checkpoint txid.
//! 2. **Baseline** ([`baseline`]): the valid records of the node arena, for the keys KDMap does
//!    not name. The state of a key is KDMap's if it has one, else its record's, else absent.
//! 3. **Rewrite** ([`rewrite`]): every structure built anew from fresh normalised nodes of its
//!    present keys, committed by advancing the epoch in the meta region.
//! 4. **Allocator**: rebuilt from the new nodes, their byte values and the heads; everything
//!    else (the old nodes among it) is free.
//!
//! After a clean close the open only rebuilds the allocator from the records (**clean open**,
//! [`reopen_clean`]). Recovery is structure-agnostic: the registry says what each root entry is,
//! and each structure builds itself. It returns what it found ([`Recovered`]); the engine
//! assembles itself from that.

mod baseline;
mod kdmap;
mod rewrite;

use std::collections::BTreeMap;

use crate::error::EngineError;
use crate::mem::PMem;
use crate::meta::Meta;
use crate::pool::{POff, Pool, RebuildReport};
use crate::structures::registry::Structure;
use crate::tx::Values;
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
    /// The structures, by root slot.
    pub(crate) structures: BTreeMap<u8, Structure>,
    pub(crate) report: RecoveryReport,
}

impl<M: PMem> Recovered<M> {
    /// A new engine's state: no structure, epoch 1, no txid handed out.
    pub(crate) fn empty(pool: Pool<M>, meta: Meta) -> Recovered<M> {
        Recovered { pool, meta, epoch: 1, max_txid: 0, structures: BTreeMap::new(), report: RecoveryReport::default() }
    }
}

/// Recovers the engine in `pool`. See the [module docs](self).
pub(crate) fn recover<M: PMem + 'static>(mut pool: Pool<M>) -> Result<Recovered<M>, EngineError> {
    let meta = Meta::find(&pool)?;
    let mem = pool.mem();
    let epoch = meta.epoch(mem);
    let attempt = meta.attempt(mem);
    let mut structures: BTreeMap<u8, Structure> = BTreeMap::new();
    for (slot, entry) in pool.roots() {
        let s = Structure::from_root_entry(&entry).ok_or_else(|| {
            EngineError::Corrupt(format!("root slot {slot} holds an unknown structure kind {}", entry.kind))
        })?;
        structures.insert(slot as u8, s);
    }
    // Every txid handed out before the crash is below the reservation; persisted ones too.
    // Writers at or below the checkpoint txid are in the node records.
    let checkpoint = pool.checkpoint_txid();
    let max_txid = checkpoint.max(meta.txid_reserved(mem).saturating_sub(1));
    if pool.was_clean() && meta.clean(mem) == epoch {
        return reopen_clean(pool, meta, epoch, max_txid, structures);
    }
    let mut report = RecoveryReport::default();

    // 1. KDMap.
    let kdmap = kdmap::read(&pool, epoch, checkpoint);
    let max_txid = max_txid.max(kdmap.max_txid);
    report.descriptors = kdmap.descriptors;
    report.kdmap_keys = kdmap.states.len() as u64;

    // 2. Baseline, for the keys KDMap does not name.
    let mut state = kdmap.states;
    // When the free chunks may not hold the rewrite (see below): the blocks recovery reads.
    let counts = pool.chunk_counts();
    let room = pool.header().layout.chunks_in(pool.max_len()).saturating_sub(counts.node + counts.blob + counts.runs);
    let tight = room < counts.node;
    let mut read: Vec<POff> = Vec::new();
    baseline::scan(&pool, &structures, epoch, |node, record| {
        report.baseline_keys += 1;
        if tight {
            read.push(POff::new(node));
        }
        state.entry((record.slot, record.key)).or_insert(record.state);
    });
    // The present keys, by structure and in key order.
    let mut present: Vec<(u8, u128, u64)> =
        state.into_iter().filter_map(|((slot, key), v)| v.map(|v| (slot, key, v))).collect();
    present.sort_unstable();
    // Every use of chunks keeps free as many as node slabs are in use, the room the rewrite
    // needs; but a recovery that died after taking chunks for its rewrite, or after its commit
    // and before its last rebuild freed the old nodes' chunks, left them in use, and the room can
    // fall short. Then, before anything is written, every block recovery does not read is freed
    // (nodes made since the last recovery, a dead attempt's nodes, byte values no longer
    // present), which also lets the rewrite use the free blocks of chunks a head or a baseline
    // node keeps in use. Only the table entries of chunks left wholly free reach the media, and
    // nothing in them is read by this recovery or a later attempt (the same descriptors and
    // baseline give the same present keys), so a crash after this loses nothing. With room
    // enough, the rewrite takes fresh chunks.
    if tight {
        for &(slot, _, value) in &present {
            if structures[&slot].values == Values::Bytes {
                read.push(POff::new(value));
            }
        }
        read.extend(heads(&structures));
        rebuild_allocator(&mut pool, read)?;
    }

    // 3. Rewrite.
    let (new_epoch, live, present_keys) = rewrite::rewrite(&pool, meta, attempt, &structures, &present, max_txid)?;
    report.present_keys = present_keys;

    // 4. Everything not live is free.
    report.allocator = rebuild_allocator(&mut pool, live)?;
    pool.keep_recovery_room(true);
    report.epoch = new_epoch;
    report.max_txid = max_txid;
    Ok(Recovered { pool, meta, epoch: new_epoch, max_txid, structures, report })
}

/// The clean open, of a pool that [`Engine::close`](crate::Engine::close) closed: the structures
/// are as the last rewrite linked them (normalised, flushed and synced before the clean marks),
/// and no ring holds a descriptor of the epoch, so nothing is read or rewritten. The allocator is
/// rebuilt from the records, their byte values and the heads, and the engine's clean mark
/// cleared before any transaction can run.
fn reopen_clean<M: PMem + 'static>(
    mut pool: Pool<M>,
    meta: Meta,
    epoch: u64,
    max_txid: u64,
    structures: BTreeMap<u8, Structure>,
) -> Result<Recovered<M>, EngineError> {
    let mut report = RecoveryReport { clean: true, epoch, max_txid, ..RecoveryReport::default() };
    let mut live: Vec<POff> = Vec::new();
    baseline::scan(&pool, &structures, epoch, |node, record| {
        report.baseline_keys += 1;
        live.push(POff::new(node));
        if let Some(value) = record.state {
            report.present_keys += 1;
            if structures[&record.slot].values == Values::Bytes {
                live.push(POff::new(value));
            }
        }
    });
    live.extend(heads(&structures));
    meta.clear_clean(pool.mem());
    report.allocator = rebuild_allocator(&mut pool, live)?;
    Ok(Recovered { pool, meta, epoch, max_txid, structures, report })
}

/// Rebuilds the allocator with `live` the only blocks in use ([`Pool::rebuild`]).
fn rebuild_allocator<M: PMem>(pool: &mut Pool<M>, live: Vec<POff>) -> Result<RebuildReport, EngineError> {
    pool.rebuild(live).map_err(|e| EngineError::Corrupt(format!("allocator rebuild: {e}")))
}

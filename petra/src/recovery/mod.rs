//! Recovery: rebuild every structure from the persisted descriptors and the last normalised
//! nodes, as DESIGN section 6 lays out, without trusting a single link.
//!
//! Recovery runs at every open but one after [`Engine::close`] (which runs recovery's rewrite
//! itself). After a clean close the open only rebuilds the allocator from the normalised nodes
//! (see `reopen_clean`). Otherwise recovery reads:
//!
//! 1. **KDMap.** Every valid descriptor of the committed epoch in every ring (tag, epoch and
//!    checksum agree, a txid above the checkpoint txid was assigned: checkpoint rounds folded
//!    those at or below it into node records): for each (structure, key), the latest writing op
//!    by txid. A descriptor whose persist did not complete fails its checksum or has no txid, and is
//!    ignored with its whole transaction; so is one whose lines all reached the media while a
//!    byte value it wrote did not (the value fails the hash its op carries, and its op is the
//!    last writer of its key). Only the last valid descriptor of a ring can be torn that way, so
//!    only those descriptors' values are read. A value that fails its hash under a later writer
//!    was replaced, freed and reused, which voids nothing.
//! 2. **Baseline.** Every block of every node slab chunk: a node whose norm word carries the
//!    committed epoch and whose checksum holds has a record, written by the last recovery or a
//!    checkpoint round, and gives its key's state as of then. A key no transaction touched since keeps that state; a key whose
//!    last toucher was not persisted too (its op is ignored, and the state before it is the one
//!    before any op since the last recovery).
//!
//! The state of a key is KDMap's if it has one, else the baseline's, else absent. Recovery then
//! builds each structure anew from fresh nodes (normalised: FINAL info, value, norm word and
//! checksum), flushes them, fences, and commits by advancing the epoch in the engine's meta
//! region. Only then is the allocator rebuilt from the new nodes, freeing the old ones. A crash
//! during recovery leaves the old epoch in force, and with it the old descriptors and nodes:
//! recovery simply runs again. Each attempt writes its nodes under a fresh attempt number, so
//! nodes of an attempt that never committed are never taken for a baseline.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::EngineError;
use crate::mem::PMem;
use crate::pool::{AllocCache, POff, Pool, RebuildReport};
use crate::structures::list::{self, NEXT};
use crate::structures::mdlist;
use crate::structures::skiplist::{MAX_HEIGHT, SkipList, height_of, node_bytes_of};
use crate::structures::{CHECK, INFO, NORM, VALUE, load_key, norm_check, store_key, write_record};
use crate::tx::descriptor::{Desc, blob_matches, persisted_at};
use crate::tx::info::Info;
use crate::tx::{
    Engine, EngineConfig, META_ATTEMPT, META_CLEAN, META_EPOCH, META_MAGIC, META_TAG, META_TXID_RESERVED, OpKind,
    RING_TAG, Set, Structure, TXID_BLOCK, Values,
};

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
    /// Whether the open skipped recovery: the pool was closed by [`Engine::close`], so its
    /// normalised nodes held every committed transaction and no descriptor was read.
    pub clean: bool,
}

pub(crate) fn recover<M: PMem + 'static>(
    mut pool: Pool<M>,
    config: EngineConfig,
) -> Result<(Engine<M>, RecoveryReport), EngineError> {
    let mut report = RecoveryReport::default();
    let metas = pool.regions(META_TAG);
    let [(meta, _)] = metas[..] else {
        return Err(match metas.len() {
            0 => EngineError::NoEngine,
            n => EngineError::Corrupt(format!("{n} engine meta regions, expected 1")),
        });
    };
    let meta = meta.get();
    let mem = pool.mem();
    // Acquire (here and below): recovery runs alone, so any ordering would do.
    if mem.load(meta, Ordering::Acquire) != META_MAGIC {
        return Err(EngineError::NoEngine);
    }
    let epoch = mem.load(meta + META_EPOCH, Ordering::Acquire);
    let attempt = mem.load(meta + META_ATTEMPT, Ordering::Acquire);

    // The structures.
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
    let mut max_txid = checkpoint.max(mem.load(meta + META_TXID_RESERVED, Ordering::Acquire).saturating_sub(1));
    if pool.was_clean() && mem.load(meta + META_CLEAN, Ordering::Acquire) == epoch {
        return reopen_clean(pool, config, meta, epoch, max_txid, structures);
    }

    // 1. KDMap: (structure, key) -> (txid, state). The valid descriptors above the checkpoint
    // txid: (offset, txid); and the txid of the last valid descriptor written to each ring, the
    // largest (a ring is written in order, in laps, and txids grow along it).
    let mut valid: Vec<(u64, u64)> = Vec::new();
    let mut ring_tails: FxHashSet<u64> = FxHashSet::default();
    let mut ops = 0;
    for (ring, len) in pool.regions(RING_TAG) {
        let end = ring.get() + len;
        let mut pos = ring.get() + 64;
        let mut tail = None;
        while pos + 64 <= end {
            let Some((txid, bytes)) = persisted_at(mem, pos, end, epoch as u32, checkpoint) else {
                pos += 64;
                continue;
            };
            max_txid = max_txid.max(txid);
            ops += Desc::new(mem, pos).nops();
            valid.push((pos, txid));
            tail = tail.max(Some(txid));
            pos += bytes;
        }
        ring_tails.extend(tail);
    }
    report.descriptors = valid.len() as u64;
    // A descriptor whose words all reached the media may still have a blob whose lines did not
    // (its fence never completed): then it was never visible, and no later transaction touched
    // its keys (one would have persisted it first), so it is ignored whole. Only the last valid
    // descriptor of a ring can be such a one (docs/design.md, "The engine", point 11: nothing is
    // written after a descriptor in its ring before that one is persisted or aborted, and a
    // handle a panic unwound through gives its ring up). A blob that fails its hash under a
    // later writer of its key (a later transaction, or a later op of its own) was replaced,
    // freed and reused: that is expected, and the descriptor's other ops stand.
    // So: the last writer of each key over every valid descriptor ((txid, op index), a later op
    // of one transaction winning); the torn descriptors are ring tails with a blob op that is
    // its key's last writer and fails its hash; KDMap is the last writer over the others, which
    // is the same map when none is torn (the common case: one pass).
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
    let torn: FxHashSet<u64> = last
        .values()
        .filter(|w| w.blob && ring_tails.contains(&w.txid) && !blob_matches(&pool, w.value, w.hash))
        .map(|w| w.txid)
        .collect();
    if !torn.is_empty() {
        last = last_writers(&torn);
    }
    report.kdmap_keys = last.len() as u64;

    // 2. Baseline from the arena, for the keys KDMap does not name.
    let mut state: FxHashMap<(u8, u128), Option<u64>> =
        last.into_iter().map(|(k, w)| (k, w.present.then_some(w.value))).collect();
    // When the free chunks may not hold the rewrite (see below): the blocks recovery reads.
    let counts = pool.chunk_counts();
    let room = pool.header().layout.chunks_in(pool.max_len()).saturating_sub(counts.node + counts.blob + counts.runs);
    let tight = room < counts.node;
    let mut read: Vec<POff> = Vec::new();
    scan_baseline(&pool, &structures, epoch, |node, slot, key, value| {
        report.baseline_keys += 1;
        if tight {
            read.push(POff::new(node));
        }
        state.entry((slot, key)).or_insert(value);
    });
    // The present keys, by structure and in key order.
    let mut present: Vec<(u8, u128, u64)> =
        state.into_iter().filter_map(|((slot, key), v)| v.map(|v| (slot, key, v))).collect();
    present.sort_unstable();
    // Every use of chunks keeps free as many as node slabs are in use, the room this rewrite
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
    let mem = pool.mem();

    // 3. Build every structure anew under a fresh attempt number.
    let new_epoch = attempt + 1;
    mem.store(meta + META_ATTEMPT, new_epoch, Ordering::Relaxed);
    mem.flush(meta + META_ATTEMPT);
    // Fence: the attempt number is used once, even if this attempt dies.
    mem.fence();
    let mut cache = AllocCache::new();
    let mut live: Vec<POff> = Vec::new();
    // The room every other use left free for this.
    pool.keep_recovery_room(false);
    for (&slot, structure) in &structures {
        let from = present.partition_point(|p| p.0 < slot);
        let present = &present[from..from + present[from..].partition_point(|p| p.0 == slot)];
        report.present_keys += present.len() as u64;
        let bytes = |key| structure.node_bytes::<M>(key);
        let wide = structure.set.wide();
        // (node, key), in key order.
        let mut nodes = Vec::with_capacity(present.len());
        for &(_, key, value) in present {
            let node = pool.alloc(&mut cache, bytes(key))?.get();
            write_normalised(mem, node, key, wide, value, slot, new_epoch);
            nodes.push((node, key));
            live.push(POff::new(node));
            if structure.values == Values::Bytes {
                // The value is a blob, written and flushed before its descriptor was persisted.
                live.push(POff::new(value));
            }
        }
        match &structure.set {
            Set::List(l) => link_chains(mem, &[l.link()], |_| 0, &nodes),
            Set::HashMap(m) => {
                let buckets: Vec<u64> = (0..m.n).map(|i| m.bucket(i)).collect();
                link_chains(mem, &buckets, |key| m.bucket_of(key) as usize, &nodes);
            }
            Set::SkipList(l) => link_skiplist(mem, l, &nodes),
            Set::MdList(l) => mdlist::build(mem, l, &nodes),
        }
        for &(node, key) in &nodes {
            mem.flush_range(node, bytes(key));
        }
        // The head sentinel, or the map's bucket array (a region, not a block).
        let (root, root_bytes) = root_of(&structure.set);
        mem.flush_range(root, root_bytes);
    }
    live.extend(heads(&structures));
    pool.release_cache(&mut cache);
    // The txids handed out from now on start above everything seen: durable before the commit,
    // since the commit makes the old descriptors (and their txids) unreadable. (The checkpoint
    // txid moves only after the commit: it filters the descriptors a crash before the commit
    // must still read.)
    mem.store(meta + META_TXID_RESERVED, max_txid + 1 + TXID_BLOCK, Ordering::Relaxed);
    mem.flush(meta + META_TXID_RESERVED);
    // Fence: every new node and the reservation are durable before the epoch that makes the new
    // nodes the truth.
    mem.fence();
    // A clean mark of an earlier epoch is void from here on (it is in the epoch's line, so it
    // reaches the media no later than the epoch).
    mem.store(meta + META_CLEAN, 0, Ordering::Relaxed);
    mem.store(meta + META_EPOCH, new_epoch, Ordering::Relaxed);
    mem.flush(meta + META_EPOCH);
    // Fence: recovery is committed.
    mem.fence();
    // Every writer up to here is in the new nodes' records.
    pool.set_checkpoint_txid(max_txid);
    pool.sync()?;

    // 4. Everything not live is free.
    report.allocator = rebuild_allocator(&mut pool, live)?;
    pool.keep_recovery_room(true);
    report.epoch = new_epoch;
    report.max_txid = max_txid;
    Ok((engine_of(pool, config, meta, new_epoch, max_txid, &structures), report))
}

/// The last writing op of a key in KDMap's pass: its place in the serial order and what it left.
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

/// Calls `f(node, slot, key, state)` for every node of the arena normalised in `epoch` (its norm
/// word names the epoch and a known structure, and its checksum holds): the state its key had at
/// that recovery.
fn scan_baseline<M: PMem>(
    pool: &Pool<M>,
    structures: &BTreeMap<u8, Structure>,
    epoch: u64,
    mut f: impl FnMut(u64, u8, u128, Option<u64>),
) {
    let mem = pool.mem();
    pool.for_each_node_block(|node| {
        let node = node.get();
        // Relaxed (here and below): recovery runs alone.
        let norm = mem.load(node + NORM, Ordering::Relaxed);
        if norm == 0 || norm >> 32 != epoch & 0xFFFF_FFFF {
            return;
        }
        let slot = (norm >> 8) as u8;
        let Some(structure) = structures.get(&slot) else { return };
        let key = load_key(mem, node, structure.set.wide());
        let value = mem.load(node + VALUE, Ordering::Relaxed);
        if mem.load(node + CHECK, Ordering::Relaxed) != norm_check(key, value, norm) {
            return;
        }
        f(node, slot, key, (norm & 1 != 0).then_some(value));
    });
}

/// The head sentinel of a structure and its bytes, or the hash map's bucket array (a region).
fn root_of(set: &Set) -> (u64, u64) {
    match set {
        Set::List(l) => (l.head, list::NODE_BYTES),
        Set::HashMap(m) => (m.buckets, 8 * m.n),
        Set::SkipList(l) => (l.head, node_bytes_of(MAX_HEIGHT, l.wide)),
        Set::MdList(l) => (l.head, mdlist::NODE_BYTES),
    }
}

/// Opens a pool that [`Engine::close`] closed cleanly: the structures are as the last rewrite
/// linked them (normalised, flushed and synced before the clean marks), and no ring holds a
/// descriptor of the epoch, so nothing is read or rewritten. The allocator is rebuilt from the
/// normalised nodes, their blobs and the heads, and the engine's clean mark cleared before any
/// transaction can run.
fn reopen_clean<M: PMem + 'static>(
    mut pool: Pool<M>,
    config: EngineConfig,
    meta: u64,
    epoch: u64,
    max_txid: u64,
    structures: BTreeMap<u8, Structure>,
) -> Result<(Engine<M>, RecoveryReport), EngineError> {
    let mut report = RecoveryReport { clean: true, epoch, max_txid, ..RecoveryReport::default() };
    let mut live: Vec<POff> = Vec::new();
    scan_baseline(&pool, &structures, epoch, |node, slot, _, value| {
        report.baseline_keys += 1;
        live.push(POff::new(node));
        if let Some(value) = value {
            report.present_keys += 1;
            if structures[&slot].values == Values::Bytes {
                live.push(POff::new(value));
            }
        }
    });
    live.extend(heads(&structures));
    let mem = pool.mem();
    // Relaxed: the open runs alone; the fence below orders it.
    mem.store(meta + META_CLEAN, 0, Ordering::Relaxed);
    mem.flush(meta + META_CLEAN);
    // Fence: the mark is void before any transaction can write a descriptor of this epoch.
    mem.fence();
    report.allocator = rebuild_allocator(&mut pool, live)?;
    Ok((engine_of(pool, config, meta, epoch, max_txid, &structures), report))
}

/// The head sentinels of `structures`: blocks, unlike the hash map's bucket array (a region).
fn heads(structures: &BTreeMap<u8, Structure>) -> impl Iterator<Item = POff> + '_ {
    structures.values().filter(|s| !matches!(s.set, Set::HashMap(_))).map(|s| POff::new(root_of(&s.set).0))
}

/// Rebuilds the allocator with `live` the only blocks in use ([`Pool::rebuild`]).
fn rebuild_allocator<M: PMem>(pool: &mut Pool<M>, live: Vec<POff>) -> Result<RebuildReport, EngineError> {
    pool.rebuild(live).map_err(|e| EngineError::Corrupt(format!("allocator rebuild: {e}")))
}

/// The engine over a recovered or cleanly reopened pool: `structures` by slot, in `epoch`, its
/// txids above `max_txid`.
fn engine_of<M: PMem + 'static>(
    pool: Pool<M>,
    config: EngineConfig,
    meta: u64,
    epoch: u64,
    max_txid: u64,
    structures: &BTreeMap<u8, Structure>,
) -> Engine<M> {
    let by_slot =
        (0..=structures.keys().max().copied().unwrap_or(0)).map(|slot| structures.get(&slot).cloned()).collect();
    Engine::assemble(pool, config, meta, epoch, max_txid + 1, by_slot)
}

/// Links `nodes` (normalised, with their keys, in key order) into chains hanging off the link
/// words `links`, each on the chain `chain_of(key)` gives.
fn link_chains<M: PMem>(mem: &M, links: &[u64], chain_of: impl Fn(u128) -> usize, nodes: &[(u64, u128)]) {
    let mut next = vec![0u64; links.len()];
    for &(node, key) in nodes.iter().rev() {
        let c = chain_of(key);
        mem.store(node + NEXT, next[c], Ordering::Relaxed);
        next[c] = node;
    }
    for (&link, &first) in links.iter().zip(&next) {
        mem.store(link, first, Ordering::Relaxed);
    }
}

/// Links `nodes` (normalised, with their keys, in key order) into `list`: every tower whole, each
/// node's link count its height.
fn link_skiplist<M: PMem>(mem: &M, list: &SkipList, nodes: &[(u64, u128)]) {
    let mut last = [list.head; MAX_HEIGHT];
    for l in 0..MAX_HEIGHT {
        mem.store(list.head + list.next(l), 0, Ordering::Relaxed);
    }
    for &(node, key) in nodes {
        let height = height_of(key);
        mem.store(node + list.meta(), height as u64 | (height as u64) << 8, Ordering::Relaxed);
        for (l, prev) in last.iter_mut().enumerate().take(height) {
            mem.store(node + list.next(l), 0, Ordering::Relaxed);
            mem.store(*prev + list.next(l), node, Ordering::Relaxed);
            *prev = node;
        }
    }
}

/// Writes the common header of a node normalised by recovery: present, FINAL info, and the
/// record (value, norm word, checksum) that the next recovery's arena scan trusts.
fn write_normalised<M: PMem>(mem: &M, node: u64, key: u128, wide: bool, value: u64, slot: u8, epoch: u64) {
    store_key(mem, node, key, wide);
    mem.store(node + INFO, Info::final_state(node, true, epoch).0, Ordering::Relaxed);
    write_record(mem, node, key, wide, slot, epoch, Some(value));
}

//! The structure registry: which structure is in which root slot, how the pool's root table
//! encodes it, and the one place that names every kind.
//!
//! A structure's root entry (see [`RootEntry`]) is written once, when the structure is created,
//! and read at every open:
//!
//! | kind      | code | `params[0]`               | `params[1]`      |
//! |-----------|------|---------------------------|------------------|
//! | list      | 1    | head sentinel             | 0                |
//! | hash map  | 2    | bucket array (a region)   | number of buckets|
//! | skiplist  | 3    | head sentinel             | 0                |
//! | MDList    | 4    | head sentinel             | 0                |
//!
//! Flags: bit 0, values are byte strings (blobs); bit 1, keys are two words. The other
//! parameters and flags are zero.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::hashmap::HashMap;
use super::list::List;
use super::mdlist::MdList;
use super::skiplist::SkipList;
use super::{Ctx, Inspect, LinkedSet, Seen};
use crate::error::{Damage, EngineError};
use crate::key::KeyWidth;
use crate::mem::PMem;
use crate::meta::Meta;
use crate::pool::header::{ROOT_ENTRIES, ROOT_ENTRY_SIZE, ROOT_TABLE_OFF};
use crate::pool::{Pool, RootEntry};
use crate::reclaim::AbsentNode;
use crate::tx::{StructId, StructureKind, Values};

/// Root table kinds.
const KIND_LIST: u32 = 1;
const KIND_HASH_MAP: u32 = 2;
const KIND_SKIPLIST: u32 = 3;
const KIND_MDLIST: u32 = 4;
/// Root table flag: the structure's values are blobs.
const FLAG_BYTES: u32 = 1;
/// Root table flag: the structure's keys are two words ([`KeyWidth::U128`]).
const FLAG_WIDE_KEYS: u32 = 2;

/// Runs `$body` with `$set` bound to the structure behind a [`Set`], whatever its kind: the one
/// place that names every kind for code that works on any.
macro_rules! on_set {
    ($set_expr:expr, $set:ident => $body:expr) => {
        match $set_expr {
            $crate::structures::registry::Set::List($set) => $body,
            $crate::structures::registry::Set::HashMap($set) => $body,
            $crate::structures::registry::Set::SkipList($set) => $body,
            $crate::structures::registry::Set::MdList($set) => $body,
        }
    };
}
pub(crate) use on_set;

/// The linked set behind a structure, whatever its kind.
#[derive(Debug, Clone)]
pub(crate) enum Set {
    List(List),
    HashMap(HashMap),
    SkipList(SkipList),
    MdList(MdList),
}

/// A structure known to the engine: its set (which knows its key width) and what its values
/// are.
#[derive(Debug, Clone)]
pub(crate) struct Structure {
    pub(crate) set: Set,
    pub(crate) values: Values,
}

impl Structure {
    /// Makes a new, empty structure in `pool` (its head or buckets persisted), not yet named by
    /// any root entry.
    fn create<M: PMem>(
        pool: &Pool<M>,
        kind: StructureKind,
        keys: KeyWidth,
        values: Values,
    ) -> Result<Structure, EngineError> {
        let wide = keys == KeyWidth::U128;
        if wide && kind == StructureKind::MdList {
            return Err(EngineError::KeyWidthUnsupported { kind, keys });
        }
        let set = match kind {
            StructureKind::List => Set::List(List::create(pool, wide)?),
            StructureKind::HashMap { buckets } => Set::HashMap(HashMap::create(pool, buckets, wide)?),
            StructureKind::SkipList => Set::SkipList(SkipList::create(pool, wide)?),
            StructureKind::MdList => Set::MdList(MdList::create(pool)?),
        };
        Ok(Structure { set, values })
    }

    /// Its kind, with its parameters.
    pub(crate) fn kind(&self) -> StructureKind {
        match &self.set {
            Set::List(_) => StructureKind::List,
            Set::HashMap(m) => StructureKind::HashMap { buckets: m.n },
            Set::SkipList(_) => StructureKind::SkipList,
            Set::MdList(_) => StructureKind::MdList,
        }
    }

    /// Whether its keys are two words (each set keeps this for its own searches).
    pub(crate) fn wide(&self) -> bool {
        match &self.set {
            Set::List(l) => l.wide,
            Set::HashMap(m) => m.wide,
            Set::SkipList(l) => l.wide,
            Set::MdList(_) => false,
        }
    }

    /// The width of its keys.
    pub(crate) fn keys(&self) -> KeyWidth {
        if self.wide() { KeyWidth::U128 } else { KeyWidth::U64 }
    }

    /// What it is made for.
    pub(crate) fn shape(&self) -> (StructureKind, KeyWidth, Values) {
        (self.kind(), self.keys(), self.values)
    }

    /// Refuses a key of the wrong width for this structure (number `s`).
    pub(crate) fn check_key(&self, s: StructId, width: KeyWidth, key: u128) -> Result<(), EngineError> {
        let keys = self.keys();
        if width != keys || (width == KeyWidth::U64 && key > u64::MAX as u128) {
            return Err(EngineError::WrongKey { structure: s.0, expected: keys });
        }
        Ok(())
    }

    /// The root table entry that names the structure.
    fn root_entry(&self) -> RootEntry {
        let (kind, params) = match &self.set {
            Set::List(l) => (KIND_LIST, [l.head, 0]),
            Set::HashMap(m) => (KIND_HASH_MAP, [m.buckets, m.n]),
            Set::SkipList(l) => (KIND_SKIPLIST, [l.head, 0]),
            Set::MdList(l) => (KIND_MDLIST, [l.head, 0]),
        };
        let bytes = if self.values == Values::Bytes { FLAG_BYTES } else { 0 };
        let wide = if self.wide() { FLAG_WIDE_KEYS } else { 0 };
        RootEntry { kind, flags: bytes | wide, params: [params[0], params[1], 0, 0, 0, 0] }
    }

    /// The structure a root table entry names, checked against `pool`: a known kind with known
    /// flags, and a head sentinel (a node block of its size) or a bucket array (a region that
    /// holds its buckets) where the entry says. Why not otherwise.
    pub(crate) fn from_root_entry<M: PMem + 'static>(pool: &Pool<M>, entry: &RootEntry) -> Result<Structure, String> {
        let [a, b, ..] = entry.params;
        if entry.flags & !(FLAG_BYTES | FLAG_WIDE_KEYS) != 0 {
            return Err(format!("unknown flags {:#x}", entry.flags));
        }
        if entry.params[2..] != [0; 4] {
            return Err("parameters that no structure has".into());
        }
        let wide = entry.flags & FLAG_WIDE_KEYS != 0;
        let set = match entry.kind {
            KIND_LIST if b == 0 => Set::List(List { head: a, wide }),
            KIND_HASH_MAP => Set::HashMap(HashMap::open(pool, a, b, wide)?),
            KIND_SKIPLIST if b == 0 => Set::SkipList(SkipList { head: a, wide }),
            KIND_MDLIST if b == 0 && !wide => Set::MdList(MdList { head: a }),
            kind => return Err(format!("unknown kind {kind} (flags {:#x}, parameters {a:#x}, {b:#x})", entry.flags)),
        };
        let values = if entry.flags & FLAG_BYTES != 0 { Values::Bytes } else { Values::Words };
        let structure = Structure { set, values };
        if let Some(head) = structure.head_block() {
            let need = structure.root::<M>().1;
            match pool.node_block(crate::pool::POff::new(head)) {
                Some(size) if size >= need => {}
                _ => return Err(format!("its head at {head:#x} is not a node block of {need} bytes")),
            }
        }
        Ok(structure)
    }

    /// Bytes of the node of `key` that recovery's rebuild links right after the node of `prev`
    /// (see [`LinkedSet::built_bytes`]).
    pub(crate) fn built_bytes<M: PMem + 'static>(&self, prev: Option<u128>, key: u128) -> u64 {
        on_set!(&self.set, set => LinkedSet::<M>::built_bytes(set, prev, key))
    }

    /// Starts loading the first word a search for `key` reads, if known (see
    /// [`LinkedSet::prefetch`]).
    pub(crate) fn prefetch<M: PMem + 'static>(&self, mem: &M, key: u128) {
        on_set!(&self.set, set => set.prefetch(mem, key))
    }

    /// Starts loading the first node a search for `key` reads, if known (see
    /// [`LinkedSet::prefetch_first`]).
    pub(crate) fn prefetch_first<M: PMem + 'static>(&self, mem: &M, key: u128) {
        on_set!(&self.set, set => set.prefetch_first(mem, key))
    }

    /// The node holding `key`, if any.
    pub(crate) fn find_node<M: PMem + 'static>(&self, cx: &impl Ctx<M>, key: u128) -> Option<u64> {
        on_set!(&self.set, set => set.search(cx, key).1)
    }

    /// Whether the structure removes nodes left absent (see [`LinkedSet::removes_nodes`]).
    pub(crate) fn removes_nodes<M: PMem + 'static>(&self) -> bool {
        on_set!(&self.set, set => LinkedSet::<M>::removes_nodes(set))
    }

    /// Whether [`collect`](Structure::collect) sees nodes in key order.
    pub(crate) fn ordered<M: PMem + 'static>(&self) -> bool {
        on_set!(&self.set, set => LinkedSet::<M>::ordered(set))
    }

    /// One pass of a scan over the nodes with keys in `lo..=hi` (see [`LinkedSet::collect`]).
    pub(crate) fn collect<M: PMem + 'static>(&self, cx: &impl Ctx<M>, lo: u128, hi: u128, out: &mut Vec<Seen>) {
        on_set!(&self.set, set => set.collect(cx, lo, hi, out))
    }

    /// Links `nodes` as the whole structure (see [`LinkedSet::build`]).
    pub(crate) fn build<M: PMem + 'static>(&self, mem: &M, nodes: &[(u64, u128)]) {
        on_set!(&self.set, set => set.build(mem, nodes))
    }

    /// Walks the structure at rest, checked (see [`LinkedSet::walk_checked`]).
    pub(crate) fn walk_checked<M: PMem + 'static>(
        &self,
        cx: &impl Inspect<M>,
        strict: bool,
        visit: &mut dyn FnMut(u64, u128),
    ) -> Result<u64, Damage> {
        on_set!(&self.set, set => set.walk_checked(cx, strict, visit))
    }

    /// The head sentinel, or the hash map's bucket region, and its bytes.
    pub(crate) fn root<M: PMem + 'static>(&self) -> (u64, u64) {
        on_set!(&self.set, set => LinkedSet::<M>::root(set))
    }

    /// The head sentinel, a block of the node arena (the hash map has none: its bucket array is
    /// a region).
    pub(crate) fn head_block(&self) -> Option<u64> {
        match &self.set {
            Set::HashMap(_) => None,
            Set::List(l) => Some(l.head),
            Set::SkipList(l) => Some(l.head),
            Set::MdList(l) => Some(l.head),
        }
    }
}

/// The engine's structures by root slot: each set once, when it is created (or recovered), then
/// only read, so that looking one up is a plain load, not a shared lock's read-modify-write.
/// Structures take slots in order: slots `0..n` hold them, `n` as the meta region says.
#[derive(Debug)]
pub(crate) struct Registry {
    slots: Vec<OnceLock<Structure>>,
    /// Per slot: a removal left a node marked and linked since the last sweep (see
    /// [`LinkedSet::sweep`]).
    unswept: Vec<AtomicBool>,
    /// Serialises the creation of structures, and counts them.
    creating: Mutex<usize>,
}

impl Registry {
    /// A registry of `structures`, the slots `0..n` in order.
    pub(crate) fn new(structures: Vec<Structure>) -> Registry {
        let slots: Vec<OnceLock<Structure>> = (0..ROOT_ENTRIES).map(|_| OnceLock::new()).collect();
        let n = structures.len();
        for (slot, s) in structures.into_iter().enumerate() {
            let _ = slots[slot].set(s);
        }
        Registry {
            slots,
            unswept: (0..ROOT_ENTRIES).map(|_| AtomicBool::new(false)).collect(),
            creating: Mutex::new(n),
        }
    }

    /// Removes the node `absent` names from its structure if its info word still is the one
    /// that left it absent (see [`remove_if`](super::remove_if)), and notes a node left marked
    /// for the next sweep.
    pub(crate) fn remove_if<M: PMem + 'static>(&self, cx: &impl Ctx<M>, absent: &AbsentNode) {
        let Ok(structure) = self.get(absent.structure) else { return };
        let unswept = &self.unswept[absent.structure.0 as usize];
        // Relaxed (the load): stored only if not yet, so that removals on many threads share
        // the line until the sweep takes the note.
        if on_set!(&structure.set, set => super::remove_if(cx, set, absent)) && !unswept.load(Ordering::Relaxed) {
            // Release: the mark comes before the note; the sweep that takes the note sees it.
            unswept.store(true, Ordering::Release);
        }
    }

    /// Sweeps the structures whose removals left nodes marked and linked since the last sweep
    /// (see [`LinkedSet::sweep`]).
    pub(crate) fn sweep<M: PMem + 'static>(&self, cx: &impl Ctx<M>) {
        for (slot, unswept) in self.slots.iter().zip(&self.unswept) {
            // Acquire: see the marks noted before; one noted after this swap is swept next time.
            if let Some(structure) = slot.get()
                && unswept.swap(false, Ordering::Acquire)
            {
                on_set!(&structure.set, set => set.sweep(cx));
            }
        }
    }

    /// Structure `s`.
    #[inline]
    pub(crate) fn get(&self, s: StructId) -> Result<&Structure, EngineError> {
        self.slots.get(s.0 as usize).and_then(OnceLock::get).ok_or(EngineError::UnknownStructure(s.0))
    }

    /// The structures, by id.
    pub(crate) fn ids(&self) -> Vec<StructId> {
        (0..self.slots.len()).filter(|&i| self.slots[i].get().is_some()).map(|i| StructId(i as u8)).collect()
    }

    /// Creates a new, empty structure in `pool`, names it in the next root slot, counts it in
    /// the meta region (after its entry is durable: an entry past the count is one whose
    /// creation never returned, and the next creation writes over it), and returns its id.
    pub(crate) fn create<M: PMem + 'static>(
        &self,
        pool: &Pool<M>,
        meta: Meta,
        kind: StructureKind,
        keys: KeyWidth,
        values: Values,
    ) -> Result<StructId, EngineError> {
        let mut n = self.creating.lock();
        if *n == ROOT_ENTRIES {
            return Err(EngineError::TooManyStructures);
        }
        let structure = Structure::create(pool, kind, keys, values)?;
        pool.set_root(*n, structure.root_entry())?;
        // On a page-cache pool the kernel may write the count's page back before the entry's
        // (and the heads' and chunk entries'): they are on the disk first.
        pool.sync()?;
        meta.set_structures(pool.mem(), *n as u64 + 1);
        let slot = *n;
        self.slots[slot].set(structure).map_err(|_| EngineError::Corrupt(format!("root slot {slot} taken twice")))?;
        *n += 1;
        Ok(StructId(slot as u8))
    }
}

/// The `n` structures of `pool`'s root table, each checked (see
/// [`Structure::from_root_entry`]), no two with one head or bucket array: [`Damage`] names the
/// first entry that is not whole or not right. Reads only.
pub(crate) fn read<M: PMem + 'static>(pool: &Pool<M>, n: u64) -> Result<Vec<Structure>, Damage> {
    let at = |slot: u64| ROOT_TABLE_OFF + slot * ROOT_ENTRY_SIZE;
    if n > ROOT_ENTRIES as u64 {
        return Err(Damage {
            what: format!("the engine counts {n} structures, the root table holds {ROOT_ENTRIES}"),
            at: ROOT_TABLE_OFF,
        });
    }
    let structures = (0..n)
        .map(|slot| {
            let entry = pool.root(slot as usize).ok_or_else(|| Damage {
                what: format!("the root entry of structure {slot} fails its checksum"),
                at: at(slot),
            })?;
            Structure::from_root_entry(pool, &entry)
                .map_err(|why| Damage { what: format!("the root entry of structure {slot}: {why}"), at: at(slot) })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Each structure owns its head node or its bucket array: two entries naming one (an entry
    // copied over another) would build two structures on one.
    let mut homes: rustc_hash::FxHashMap<u64, u64> = rustc_hash::FxHashMap::default();
    for (slot, s) in (0..).zip(&structures) {
        let home = match &s.set {
            Set::HashMap(m) => m.buckets,
            _ => s.head_block().expect("a linked structure has a head"),
        };
        if let Some(first) = homes.insert(home, slot) {
            return Err(Damage {
                what: format!("the root entries of structures {first} and {slot} name one head at {home:#x}"),
                at: at(slot),
            });
        }
    }
    Ok(structures)
}

//! Support shared by the workspace's cross-crate tests (`tests/`) and criterion benches
//! (`benches/`).

use std::path::PathBuf;

/// A fresh directory for pool files, removed when dropped: under `/dev/shm` where it exists (the
/// usual stand-in for persistent memory), else under the system temporary directory.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = PathBuf::from("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("petra-");
    if shm.is_dir()
        && let Ok(dir) = builder.tempdir_in(&shm)
    {
        return dir;
    }
    builder.tempdir().expect("cannot create a temporary directory")
}

/// The sequential model every transactional structure is checked against.
pub mod model {
    use std::collections::BTreeMap;

    use petra::{Op, OpKind, Outcome, StructId};

    /// Maps of keys to values, one per structure.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Model {
        /// The state of each structure.
        pub maps: BTreeMap<StructId, BTreeMap<u64, u64>>,
    }

    impl Model {
        /// Applies `ops` as one transaction: all of them, or (when a strict op fails) none.
        /// Returns what the engine must have answered.
        pub fn apply(&mut self, ops: &[Op]) -> Outcome {
            let mut next = self.clone();
            let mut results = Vec::with_capacity(ops.len());
            for (i, op) in ops.iter().enumerate() {
                let map = next.maps.entry(op.structure).or_default();
                let before = map.get(&op.key).copied();
                let ok = match op.kind {
                    OpKind::Insert => before.is_none(),
                    OpKind::Delete | OpKind::Find | OpKind::Update => before.is_some(),
                    OpKind::Put | OpKind::Remove | OpKind::Get => true,
                };
                if !ok {
                    return Outcome::Aborted { failed_op: Some(i) };
                }
                match op.kind {
                    OpKind::Insert | OpKind::Update | OpKind::Put => {
                        map.insert(op.key, op.value);
                    }
                    OpKind::Delete | OpKind::Remove => {
                        map.remove(&op.key);
                    }
                    OpKind::Find | OpKind::Get => {}
                }
                results.push(before);
            }
            *self = next;
            Outcome::Committed { results, txid: None }
        }

        /// The present entries of structure `s`, in key order.
        pub fn entries(&self, s: StructId) -> Vec<(u64, u64)> {
            self.maps.get(&s).map(|m| m.iter().map(|(&k, &v)| (k, v)).collect()).unwrap_or_default()
        }
    }

    /// Whether two outcomes agree, ignoring txids.
    pub fn same_outcome(a: &Outcome, b: &Outcome) -> bool {
        match (a, b) {
            (Outcome::Committed { results: x, .. }, Outcome::Committed { results: y, .. }) => x == y,
            (Outcome::Aborted { failed_op: x }, Outcome::Aborted { failed_op: y }) => x == y,
            _ => false,
        }
    }
}

/// The structures every engine test runs on: one of each kind, so that every transaction test
/// also crosses structures.
pub mod kinds {
    use petra::mem::PMem;
    use petra::{Engine, StructId};

    /// A kind of structure.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        /// The list set.
        List,
        /// The hash map, with 16 buckets: short chains, and collisions on small key ranges.
        HashMap,
        /// The skiplist.
        SkipList,
        /// The multi-dimensional list.
        MdList,
    }

    /// Every kind.
    pub const ALL: [Kind; 4] = [Kind::List, Kind::HashMap, Kind::SkipList, Kind::MdList];

    /// Blocks the allocator holds besides the nodes of present keys: the head sentinels of the
    /// list, the skiplist and the MDList (the hash map's buckets are a region).
    pub const HEADS: u64 = 3;

    impl Kind {
        /// Whether the kind removes the nodes of absent keys while open (the MDList keeps them
        /// until the next recovery).
        pub fn removes_nodes(self) -> bool {
            self != Kind::MdList
        }
    }

    /// Creates a structure of `kind`.
    pub fn create<M: PMem + 'static>(engine: &Engine<M>, kind: Kind) -> StructId {
        match kind {
            Kind::List => engine.create_list(),
            Kind::HashMap => engine.create_hash_map(16),
            Kind::SkipList => engine.create_skiplist(),
            Kind::MdList => engine.create_mdlist(),
        }
        .expect("a structure is created")
    }

    /// The ids [`create_all`] returns in a new engine.
    pub const IDS: [StructId; ALL.len()] = [StructId(0), StructId(1), StructId(2), StructId(3)];

    /// One structure of each kind, in the order of [`ALL`].
    pub fn create_all<M: PMem + 'static>(engine: &Engine<M>) -> Vec<StructId> {
        ALL.iter().map(|&k| create(engine, k)).collect()
    }
}

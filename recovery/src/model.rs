//! The sequential model every transactional structure is checked against.

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
            let key = u64::try_from(op.key).expect("the tests speak in one-word keys");
            let map = next.maps.entry(op.structure).or_default();
            let before = map.get(&key).copied();
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
                    map.insert(key, op.value);
                }
                OpKind::Delete | OpKind::Remove => {
                    map.remove(&key);
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

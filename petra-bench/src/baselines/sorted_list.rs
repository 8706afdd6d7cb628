//! A sorted linked list under one reader-writer lock, [`SortedList`]: the base set of the
//! lock-based list baseline of `petra-bench micro` ([`super::boosted::Boosted`] takes the
//! transactions' key locks above it).
//!
//! Nodes live in an arena (a `Vec`, slots of removed nodes reused) and link by index, in the
//! order they were inserted, so a walk chases links through memory as a list of allocated nodes
//! does. Finds walk under the read lock, side by side; inserts, removes and replaces walk and
//! relink under the write lock.

use parking_lot::RwLock;

use super::boosted::BaseSet;

/// The end of the list (no node).
const NIL: u32 = u32::MAX;

/// A sorted linked list of `u64` keys and values under one reader-writer lock. See the
/// [module docs](self).
#[derive(Debug)]
pub(crate) struct SortedList {
    inner: RwLock<Arena>,
}

#[derive(Debug)]
struct Arena {
    nodes: Vec<Node>,
    /// Slots of removed nodes, reused by the next inserts.
    free: Vec<u32>,
    /// The first node, or [`NIL`].
    head: u32,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    key: u64,
    value: u64,
    /// The next node, or [`NIL`].
    next: u32,
}

impl Default for SortedList {
    fn default() -> Self {
        SortedList { inner: RwLock::new(Arena { nodes: Vec::new(), free: Vec::new(), head: NIL }) }
    }
}

impl Arena {
    /// The last node with a key below `key` (or [`NIL`]) and the node after it (or [`NIL`]).
    fn locate(&self, key: u64) -> (u32, u32) {
        let (mut pred, mut curr) = (NIL, self.head);
        while curr != NIL {
            let node = &self.nodes[curr as usize];
            if node.key >= key {
                break;
            }
            pred = curr;
            curr = node.next;
        }
        (pred, curr)
    }

    /// The node holding `key`, if any.
    fn find(&self, key: u64) -> Option<u32> {
        let (_, curr) = self.locate(key);
        (curr != NIL && self.nodes[curr as usize].key == key).then_some(curr)
    }

    fn link_after(&mut self, pred: u32, node: u32) {
        match pred {
            NIL => self.head = node,
            p => self.nodes[p as usize].next = node,
        }
    }
}

impl BaseSet for SortedList {
    fn insert(&self, key: u64, value: u64) -> bool {
        let mut a = self.inner.write();
        let (pred, curr) = a.locate(key);
        if curr != NIL && a.nodes[curr as usize].key == key {
            return false;
        }
        let node = Node { key, value, next: curr };
        let slot = match a.free.pop() {
            Some(slot) => {
                a.nodes[slot as usize] = node;
                slot
            }
            None => {
                a.nodes.push(node);
                u32::try_from(a.nodes.len() - 1).expect("fewer than 2^32 - 1 nodes")
            }
        };
        a.link_after(pred, slot);
        true
    }

    fn remove(&self, key: u64) -> Option<u64> {
        let mut a = self.inner.write();
        let (pred, curr) = a.locate(key);
        if curr == NIL || a.nodes[curr as usize].key != key {
            return None;
        }
        let Node { value, next, .. } = a.nodes[curr as usize];
        a.link_after(pred, next);
        a.free.push(curr);
        Some(value)
    }

    fn get(&self, key: u64) -> Option<u64> {
        let a = self.inner.read();
        a.find(key).map(|n| a.nodes[n as usize].value)
    }

    fn replace(&self, key: u64, value: u64) -> Option<u64> {
        let mut a = self.inner.write();
        let n = a.find(key)?;
        Some(std::mem::replace(&mut a.nodes[n as usize].value, value))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn the_list_keeps_its_keys_sorted_and_matches_a_model() {
        let list = SortedList::default();
        let mut model = BTreeMap::new();
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..20_000 {
            let (key, value) = (rng.random_range(0..200), rng.random());
            match rng.random_range(0..4) {
                0 => {
                    assert_eq!(list.insert(key, value), !model.contains_key(&key) && model.insert(key, value).is_none())
                }
                1 => assert_eq!(list.remove(key), model.remove(&key)),
                2 => assert_eq!(list.replace(key, value), model.get_mut(&key).map(|v| std::mem::replace(v, value))),
                _ => assert_eq!(list.get(key), model.get(&key).copied()),
            }
        }
        let a = list.inner.read();
        let mut walked = Vec::new();
        let mut n = a.head;
        while n != NIL {
            walked.push((a.nodes[n as usize].key, a.nodes[n as usize].value));
            n = a.nodes[n as usize].next;
        }
        assert_eq!(walked, model.into_iter().collect::<Vec<_>>());
        // Removed nodes' slots are reused: the arena holds no more nodes than keys ever present at once.
        assert!(a.nodes.len() <= 200, "{} slots", a.nodes.len());
    }
}

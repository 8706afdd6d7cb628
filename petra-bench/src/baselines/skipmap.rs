//! crossbeam-skiplist as a baseline of `petra-bench micro`, [`SkipMapBound`], with no
//! transaction at all: each op runs on its own, a failed strict op ends the "transaction" with the
//! earlier ones left in place. An upper bound, not a competitor: it is neither atomic nor
//! isolated.

use crossbeam_skiplist::SkipMap;
use petra::OpKind;

use crate::error::Result;
use crate::targets::tx::{TxMap, TxWorker};
use crate::workload::GenOp;

/// crossbeam-skiplist without transactions. See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct SkipMapBound {
    map: SkipMap<u64, u64>,
}

impl TxMap for SkipMapBound {
    type Worker<'a> = &'a SkipMapBound;

    fn worker(&self) -> Result<&SkipMapBound> {
        Ok(self)
    }
}

impl TxWorker for &SkipMapBound {
    fn put_all(&mut self, keys: &[u64]) -> Result<u64> {
        Ok(keys
            .iter()
            .filter(|&&k| {
                let absent = !self.map.contains_key(&k);
                self.map.insert(k, 0);
                absent
            })
            .count() as u64)
    }

    fn run(&mut self, ops: &[GenOp]) -> Result<bool> {
        Ok(ops.iter().all(|op| match op.kind {
            OpKind::Insert => {
                !self.map.contains_key(&op.key) && {
                    self.map.insert(op.key, op.value);
                    true
                }
            }
            OpKind::Delete => self.map.remove(&op.key).is_some(),
            OpKind::Update => {
                self.map.contains_key(&op.key) && {
                    self.map.insert(op.key, op.value);
                    true
                }
            }
            OpKind::Find => self.map.get(&op.key).is_some(),
            other => unreachable!("the micro-benchmark draws no {other:?}"),
        }))
    }
}

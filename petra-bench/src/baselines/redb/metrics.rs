//! redb as a [`MetricTarget`] of `petra-bench metrics`: the same records as the metric store's,
//! in a latest table and a history table, one write transaction per sample.

use petra_kv::{Sample, Value};

use super::RedbDb;
use crate::error::{BenchError, Result};
use crate::targets::metric::{MetricSessionOf, MetricTarget};

/// redb's tables: the latest sample of each set, and each set's history by timestamp.
const LATEST: redb::TableDefinition<'static, u64, &[u8]> = redb::TableDefinition::new("latest");
const HISTORY: redb::TableDefinition<'static, (u64, u64), &[u8]> = redb::TableDefinition::new("history");

/// The sample as redb stores it: timestamp, duration, generation, consistent, then the u64 values.
fn encode(sample: &Sample, out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    for w in [sample.timestamp, sample.duration, sample.generation, sample.consistent as u64] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for v in &sample.values {
        let Value::U(x) = v else { return Err(BenchError::Check("the benchmark's metrics are u64".into())) };
        out.extend_from_slice(&x.to_le_bytes());
    }
    Ok(())
}

/// Decodes what [`encode`] wrote.
fn decode(bytes: &[u8]) -> Sample {
    let mut sample = Sample { timestamp: 0, duration: 0, generation: 0, consistent: false, values: Vec::new() };
    decode_into(bytes, &mut sample);
    sample
}

/// Decodes what [`encode`] wrote into `sample`, reusing its values' allocation.
fn decode_into(bytes: &[u8], sample: &mut Sample) {
    let word = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    sample.timestamp = word(0);
    sample.duration = word(1);
    sample.generation = word(2);
    sample.consistent = word(3) != 0;
    sample.values.clear();
    sample.values.extend((4..bytes.len() / 8).map(|i| Value::U(word(i))));
}

impl MetricTarget for RedbDb {
    type Session<'a> = RedbSession<'a>;

    fn session(&self) -> Result<RedbSession<'_>> {
        Ok(RedbSession { db: self, buf: Vec::new(), out: Vec::new() })
    }
}

/// One thread's access to the records: its encoding buffer, and the samples `range_reused` fills.
pub(crate) struct RedbSession<'d> {
    db: &'d RedbDb,
    buf: Vec<u8>,
    /// Reused by `range_reused`.
    out: Vec<Sample>,
}

impl MetricSessionOf for RedbSession<'_> {
    fn store(&mut self, set: usize, sample: &Sample) -> Result<()> {
        encode(sample, &mut self.buf)?;
        self.db.write(|tx| {
            let mut latest = tx.open_table(LATEST)?;
            latest.insert(set as u64, self.buf.as_slice())?;
            let mut history = tx.open_table(HISTORY)?;
            history.insert((set as u64, sample.timestamp), self.buf.as_slice())?;
            Ok(())
        })
    }

    fn latest(&mut self, set: usize) -> Result<Option<u64>> {
        self.db.read(|tx| {
            let table = tx.open_table(LATEST)?;
            Ok(table.get(set as u64)?.map(|v| decode(v.value()).generation))
        })
    }

    fn range(&mut self, set: usize, from: u64, to: u64) -> Result<usize> {
        let mut samples = Vec::new();
        visit(self.db, set, from, to, |bytes| samples.push(decode(bytes)))?;
        Ok(samples.len())
    }

    fn range_reused(&mut self, set: usize, from: u64, to: u64) -> Result<usize> {
        let out = &mut self.out;
        let mut n = 0;
        let visited = visit(self.db, set, from, to, |bytes| {
            match out.get_mut(n) {
                Some(sample) => decode_into(bytes, sample),
                None => out.push(decode(bytes)),
            }
            n += 1;
        });
        out.truncate(n);
        visited.map(|()| n)
    }

    fn scan(&mut self, set: usize, from: u64, to: u64) -> Result<usize> {
        let mut n = 0;
        visit(self.db, set, from, to, |bytes| {
            std::hint::black_box(decode(bytes));
            n += 1;
        })?;
        Ok(n)
    }
}

/// `f` on the encoded bytes of each sample of set `set` stamped `from..=to` in `db`, in one read
/// transaction.
fn visit(db: &RedbDb, set: usize, from: u64, to: u64, mut f: impl FnMut(&[u8])) -> Result<()> {
    db.read(|tx| {
        let table = tx.open_table(HISTORY)?;
        for entry in table.range((set as u64, from)..=(set as u64, to))? {
            let (_, v) = entry?;
            f(v.value());
        }
        Ok(())
    })
}

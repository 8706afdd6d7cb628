//! Retention: cutting the old samples off a set's history.

use petra::mem::PMem;

use super::codec;
use super::schema::SetId;
use super::store::{HISTORY, MetricSession};
use crate::error::Result;
use crate::format;

/// Removals per transaction when trimming history.
const TRIM_BATCH: usize = 64;

impl<'s, M: PMem + 'static> MetricSession<'s, M> {
    /// Removes the set's samples older than `before` (ns) and, if `keep` is given, all but the
    /// newest `keep`; the latest sample always stays. Returns how many were removed.
    pub fn trim(&mut self, set: SetId, before: u64, keep: Option<usize>) -> Result<usize> {
        let entry = self.store.entry(set)?;
        // Hold the set: no sample arrives while the history is cut.
        let latest = entry.latest.lock();
        let Some((latest_ts, _)) = *latest else { return Ok(0) };
        let older: Vec<u128> = self
            .h
            .range(HISTORY, codec::history_key(set, 0)..codec::history_key(set, latest_ts))?
            .into_iter()
            .map(|(k, _): (u128, u64)| k)
            .collect();
        // `older` excludes the latest: keeping `keep` in all keeps `keep - 1` of these.
        let by_count = keep.map_or(0, |k| older.len().saturating_sub(k.saturating_sub(1)));
        let by_age = older.iter().take_while(|&&k| codec::history_timestamp(k) < before).count();
        let doomed = &older[..by_count.max(by_age)];
        for chunk in doomed.chunks(TRIM_BATCH) {
            self.tx.clear();
            for &k in chunk {
                self.tx.remove(HISTORY, k);
            }
            format::run_total(&mut self.h, &self.tx, |_, _| ())?;
        }
        Ok(doomed.len())
    }
}

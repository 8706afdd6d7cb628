//! Reading a metric store: its sets and schemas (by name, component and job, and the sets whose
//! producer stopped), and a set's samples (the latest, the one before, those of a span of time,
//! and statistics over a window of them).

use std::ops::ControlFlow;

use petra::mem::PMem;
use serde::{Deserialize, Serialize};

use super::codec;
use super::schema::{Metric, Sample, Schema, SetId, SetInfo};
use super::store::{HISTORY, MetricSession, MetricStore, SetEntry, read_sample};
use crate::error::Result;

/// Statistics of one data metric over a window of samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowStats {
    /// The metric.
    pub metric: String,
    /// Samples in the window.
    pub samples: usize,
    /// Least value.
    pub min: f64,
    /// Greatest value.
    pub max: f64,
    /// Mean value.
    pub avg: f64,
    /// Change per second from the first sample of the window to the last (`None` with fewer than
    /// two samples or no time between them).
    pub rate: Option<f64>,
}

/// [`WindowStats`] of one metric, taken a sample at a time, in time order.
#[derive(Debug, Clone)]
pub struct WindowAcc {
    stats: WindowStats,
    /// (timestamp, value) of the first sample and of the last.
    ends: Option<((u64, f64), (u64, f64))>,
}

impl WindowAcc {
    /// No sample yet of `metric`.
    pub fn new(metric: String) -> WindowAcc {
        let stats =
            WindowStats { metric, samples: 0, min: f64::INFINITY, max: f64::NEG_INFINITY, avg: 0.0, rate: None };
        WindowAcc { stats, ends: None }
    }

    /// Takes the value `x` of the sample at `timestamp`, later than every one taken before.
    pub fn add(&mut self, timestamp: u64, x: f64) {
        let st = &mut self.stats;
        st.samples += 1;
        st.min = st.min.min(x);
        st.max = st.max.max(x);
        st.avg += x;
        let first = self.ends.map_or((timestamp, x), |(first, _)| first);
        self.ends = Some((first, (timestamp, x)));
    }

    /// The statistics of the samples taken; `None` if there were none.
    pub fn finish(self) -> Option<WindowStats> {
        let ((t0, x0), (t1, x1)) = self.ends?;
        let mut st = self.stats;
        st.avg /= st.samples as f64;
        st.rate = (t1 > t0).then(|| (x1 - x0) / ((t1 - t0) as f64 / 1e9));
        Some(st)
    }
}

impl<M: PMem + 'static> MetricStore<M> {
    /// The set named `instance`.
    pub fn set_id(&self, instance: &str) -> Option<SetId> {
        self.read_catalog().by_name.get(instance).copied()
    }

    /// Every set, by id.
    pub fn sets(&self) -> Vec<(SetId, SetInfo)> {
        self.read_catalog().sets.iter().map(|e| (e.id, e.info.clone())).collect()
    }

    /// The sets of component `id`.
    pub fn sets_by_component(&self, id: u64) -> Vec<SetId> {
        self.read_catalog().sets.iter().filter(|e| e.info.component_id == id).map(|e| e.id).collect()
    }

    /// The sets of job `id`.
    pub fn sets_by_job(&self, id: u64) -> Vec<SetId> {
        self.read_catalog().sets.iter().filter(|e| e.info.job_id == id).map(|e| e.id).collect()
    }

    /// The schema named `name`.
    pub fn schema(&self, name: &str) -> Option<Schema> {
        self.read_catalog().schemas.get(name).map(|s| (**s).clone())
    }

    /// Sets whose producer stopped: a declared interval, and no sample for more than `missed`
    /// intervals before `now` (ns since the epoch). A set that never had a sample is not listed.
    pub fn stale_sets(&self, now: u64, missed: u64) -> Vec<SetId> {
        let catalog = self.read_catalog();
        catalog
            .sets
            .iter()
            .filter(|e| {
                let interval = e.info.interval_ns;
                interval > 0
                    && e.latest.lock().is_some_and(|(ts, _)| now.saturating_sub(ts) > interval.saturating_mul(missed))
            })
            .map(|e| e.id)
            .collect()
    }
}

impl<'s, M: PMem + 'static> MetricSession<'s, M> {
    /// The set's latest sample.
    pub fn latest(&mut self, set: SetId) -> Result<Option<Sample>> {
        let entry = self.store.entry(set)?;
        let Some((ts, _)) = *entry.latest.lock() else { return Ok(None) };
        self.sample_at(&entry, ts)
    }

    /// The sample before the latest one (if the history still has it).
    pub fn previous(&mut self, set: SetId) -> Result<Option<Sample>> {
        let entry = self.store.entry(set)?;
        let Some((ts, _)) = *entry.latest.lock() else { return Ok(None) };
        if !read_sample(&mut self.h, (set, ts), entry.sample_len, &mut self.buf)? {
            return Ok(None);
        }
        match codec::previous_timestamp(&self.buf) {
            Some(previous) => self.sample_at(&entry, previous),
            None => Ok(None),
        }
    }

    /// The sample of `entry`'s set at `ts`, if the history has it.
    fn sample_at(&mut self, entry: &SetEntry, ts: u64) -> Result<Option<Sample>> {
        let len = entry.sample_len;
        Ok(read_sample(&mut self.h, (entry.id, ts), len, &mut self.buf)?
            .then(|| codec::decode(&entry.schema, &self.buf)))
    }

    /// The set's samples with timestamps in `from..=to`, oldest first, until `f` breaks.
    pub fn scan(&mut self, set: SetId, from: u64, to: u64, mut f: impl FnMut(Sample) -> ControlFlow<()>) -> Result<()> {
        self.scan_blobs(set, from, to, |entry, bytes| f(codec::decode(&entry.schema, bytes)))
    }

    /// The set's samples with timestamps in `from..=to`, oldest first.
    pub fn range(&mut self, set: SetId, from: u64, to: u64) -> Result<Vec<Sample>> {
        let mut out = Vec::new();
        self.range_into(set, from, to, &mut out)?;
        Ok(out)
    }

    /// As [`range`](Self::range), into `out` (replacing what it held), reusing the samples it
    /// holds and their values' allocations: once `out` has grown, a query allocates only a few
    /// buffers of its own, not a `Vec` per sample. (A fresh `Vec` per query of 1 000 samples of
    /// 144 metrics allocates and frees 4.6 MB; glibc gives the top of its heap back to the
    /// system after each, and the next query faults it in again, which costs several times
    /// what the store's own work does.)
    pub fn range_into(&mut self, set: SetId, from: u64, to: u64, out: &mut Vec<Sample>) -> Result<()> {
        let mut n = 0;
        let result = self.scan_blobs(set, from, to, |entry, bytes| {
            match out.get_mut(n) {
                Some(sample) => codec::decode_into(&entry.schema, bytes, sample, entry.arrays),
                None => out.push(codec::decode(&entry.schema, bytes)),
            }
            n += 1;
            ControlFlow::Continue(())
        });
        out.truncate(n);
        result
    }

    /// `f` on the set's entry and the blob of each of its samples with timestamps in
    /// `from..=to`, oldest first, until it breaks. The blob is read into the session's buffer.
    fn scan_blobs(
        &mut self,
        set: SetId,
        from: u64,
        to: u64,
        mut f: impl FnMut(&SetEntry, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        let entry = self.store.entry(set)?;
        let sample_bytes = entry.sample_len;
        let buf = &mut self.buf;
        let walked = self.h.range_with(
            HISTORY,
            codec::history_key(set, from)..=codec::history_key(set, to),
            |entries: Vec<(u128, u64)>, blobs| {
                for (i, &(k, w)) in entries.iter().enumerate() {
                    // The next sample's blob loads while this one is decoded.
                    if let Some(&(_, next)) = entries.get(i + 1) {
                        blobs.prefetch(next, sample_bytes);
                    }
                    blobs.read_into(w, buf).map_err(|e| crate::format::of_read(HISTORY, k, e))?;
                    codec::check_len(buf, sample_bytes).map_err(|d| crate::format::of_entry(HISTORY, k, d.at(w)))?;
                    if f(&entry, buf).is_break() {
                        return Ok(());
                    }
                }
                Ok::<(), petra::ReadError>(())
            },
        )?;
        Ok(walked?)
    }

    /// Minimum, maximum, mean and rate of change of each scalar data metric over the samples in
    /// `from..=to`; empty if there are none.
    pub fn window(&mut self, set: SetId, from: u64, to: u64) -> Result<Vec<WindowStats>> {
        let entry = self.store.entry(set)?;
        let metrics: Vec<(usize, &Metric)> =
            entry.schema.metrics.iter().enumerate().filter(|(_, m)| !m.meta && m.array.is_none()).collect();
        let mut accs: Vec<WindowAcc> = metrics.iter().map(|(_, m)| WindowAcc::new(m.name.clone())).collect();
        self.scan(set, from, to, |s| {
            for ((i, _), acc) in metrics.iter().zip(&mut accs) {
                acc.add(s.timestamp, s.values[*i].as_f64().expect("a scalar"));
            }
            ControlFlow::Continue(())
        })?;
        // Every metric is in every sample: all have samples, or none has.
        Ok(accs.into_iter().filter_map(WindowAcc::finish).collect())
    }
}

//! Sets that follow the machine: a set's schema has versions, and history is kept across them.
//!
//! A metric store's set has one schema for life (LDMS's sets are fixed too). When a sampler's
//! file starts reporting other metrics (a disk added, a kernel that adds a field), the daemon
//! declares the next **schema version** of the sampler (`diskstats`, `diskstats.v2`,
//! `diskstats.v3`...: the same metrics are always the same version) and stores into the set of
//! that version (`node7/diskstats`, `node7/diskstats.v2`...). What the daemon serves and lists is
//! the **logical set** `node7/diskstats`: the sets of all its versions, whose samples are
//! disjoint in time and whose generations carry on from one to the next. A disk removed and
//! plugged in again goes back to the version it had.

use petra::mem::PMem;
use petra_kv::{MetricSession, MetricStore, Sample, Schema, SetId, SetInfo};

use crate::MonError;

/// `name`'s version `v`: `name` itself for version 1, else `name.v<v>`.
pub fn versioned(name: &str, v: u32) -> String {
    if v <= 1 { name.to_owned() } else { format!("{name}.v{v}") }
}

/// A versioned name's base and version: `("node7/diskstats", 3)` for `node7/diskstats.v3`.
pub fn version_of(name: &str) -> (&str, u32) {
    if let Some((base, v)) = name.rsplit_once(".v")
        && !v.is_empty()
        && !v.starts_with('0')
        && v.bytes().all(|b| b.is_ascii_digit())
        && let Ok(v) = v.parse::<u32>()
        && v >= 2
    {
        return (base, v);
    }
    (name, 1)
}

/// One version of a logical set: its set in the store, its record and its schema.
#[derive(Debug, Clone)]
pub struct Version {
    /// Its set.
    pub id: SetId,
    /// Its version number.
    pub version: u32,
    /// Its set's record.
    pub info: SetInfo,
    /// Its schema.
    pub schema: Schema,
}

/// A logical set: the sets of every schema version of one sampler of one producer.
#[derive(Debug, Clone)]
pub struct LogicalSet {
    /// Its name, `<producer>/<sampler>`.
    pub name: String,
    /// The sampler (the schema's name without its version).
    pub sampler: String,
    /// Its versions, by version number.
    pub versions: Vec<Version>,
}

impl LogicalSet {
    /// The latest sample of any version, with the version it is of.
    pub fn latest<M: PMem + 'static>(
        &self,
        session: &mut MetricSession<'_, M>,
    ) -> Result<Option<(&Version, Sample)>, MonError> {
        let mut best: Option<(&Version, Sample)> = None;
        for v in &self.versions {
            if let Some(s) = session.latest(v.id)?
                && best.as_ref().is_none_or(|(_, b)| s.timestamp > b.timestamp)
            {
                best = Some((v, s));
            }
        }
        Ok(best)
    }

    /// The samples of every version in `from..=to`, oldest first, each with its version.
    pub fn range<M: PMem + 'static>(
        &self,
        session: &mut MetricSession<'_, M>,
        from: u64,
        to: u64,
    ) -> Result<Vec<(&Version, Sample)>, MonError> {
        let mut out = Vec::new();
        for v in &self.versions {
            out.extend(session.range(v.id, from, to)?.into_iter().map(|s| (v, s)));
        }
        if self.versions.len() > 1 {
            out.sort_by_key(|(_, s)| s.timestamp);
        }
        Ok(out)
    }

    /// The last `n` samples of every version up to `to`, oldest first.
    pub fn last<M: PMem + 'static>(
        &self,
        session: &mut MetricSession<'_, M>,
        to: u64,
        n: usize,
    ) -> Result<Vec<(&Version, Sample)>, MonError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        // Look back as far as n intervals, then twice as far, until n are found or the look
        // goes back to the epoch.
        let interval = self.versions.iter().map(|v| v.info.interval_ns).max().unwrap_or(0).max(1_000_000);
        let mut span = interval.saturating_mul(n as u64 + 1);
        loop {
            let from = to.saturating_sub(span);
            let mut got = self.range(session, from, to)?;
            if got.len() >= n || from == 0 {
                let cut = got.len().saturating_sub(n);
                got.drain(..cut);
                return Ok(got);
            }
            span = span.saturating_mul(2);
        }
    }
}

/// The store's sets, gathered into logical sets (in the order of their first set's id).
pub fn logical_sets<M: PMem + 'static>(store: &MetricStore<M>) -> Result<Vec<LogicalSet>, MonError> {
    let mut out: Vec<LogicalSet> = Vec::new();
    for (id, info) in store.sets() {
        let schema = store.schema(&info.schema).ok_or_else(|| MonError::NoSchema(info.schema.clone()))?;
        let (base, version) = version_of(&info.instance);
        let sampler = version_of(&info.schema).0.to_owned();
        let v = Version { id, version, info: info.clone(), schema };
        match out.iter_mut().find(|l| l.name == base) {
            Some(l) => l.versions.push(v),
            None => out.push(LogicalSet { name: base.to_owned(), sampler, versions: vec![v] }),
        }
    }
    for l in &mut out {
        l.versions.sort_by_key(|v| v.version);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_names_read_back() {
        assert_eq!(versioned("node7/diskstats", 1), "node7/diskstats");
        assert_eq!(versioned("diskstats", 3), "diskstats.v3");
        assert_eq!(version_of("node7/diskstats.v3"), ("node7/diskstats", 3));
        assert_eq!(version_of("node7/diskstats"), ("node7/diskstats", 1));
        for odd in ["a.v", "a.v1", "a.v02", "a.vx", "host.v2x/stat"] {
            assert_eq!(version_of(odd), (odd, 1), "{odd}");
        }
    }
}

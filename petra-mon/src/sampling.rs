//! The sampling step: read each sampler's file, find (or declare) the schema version of what it
//! reports, and store one sample in that version's set.
//!
//! Every schema begins with `component_id` (meta) and `job_id` (data), as LDMS's samplers' do:
//! each sample says which component and job it was taken for, so a job that starts, or a
//! restart with another `--component-id`, is recorded from that sample on and never rewrites
//! what came before. A file that is missing or does not parse is skipped for the round, with an
//! [`Event::Skipped`]: nothing is stored for it, and the daemon goes on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use petra::mem::PMem;
use petra_kv::{KvError, Metric, MetricSession, MetricStore, Sample, Scalar, Schema, SetId, SetInfo, Stored, Value};

use crate::MonError;
use crate::proc::{self, Reading, SAMPLERS};
use crate::sets::{self, versioned};

/// Who is sampling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    /// The producer's name (the host name by default): sets are `<name>/<sampler>`.
    pub name: String,
    /// The component id.
    pub component_id: u64,
    /// The job id (0: none).
    pub job_id: u64,
    /// The sampling interval, nanoseconds.
    pub interval_ns: u64,
}

/// One sampler: the file it reads, its logical set and the schema version in use.
#[derive(Debug)]
pub struct Sampler {
    /// Its name (one of [`SAMPLERS`]).
    pub name: String,
    /// Its logical set, `<producer>/<sampler>`.
    pub set: String,
    path: PathBuf,
    /// The version in use: its set, its number and its schema's metric names, and where each
    /// lies in the reading it was made from (a reading in the same order needs no lookup).
    current: Option<Current>,
    /// The generation of the next sample (carries on across versions).
    pub next_generation: u64,
    /// Why the last round skipped this sampler, if it did.
    pub failing: Option<String>,
}

#[derive(Debug)]
struct Current {
    id: SetId,
    version: u32,
    schema: Schema,
}

/// What a round did for one sampler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A sample was stored (durably, as the store's policy says): its set, version and generation, and how long reading and
    /// storing it took.
    Stored {
        /// The logical set.
        set: String,
        /// The schema version.
        version: u32,
        /// The sample's generation.
        generation: u64,
        /// Reading plus storing, nanoseconds.
        duration_ns: u64,
    },
    /// The file reported other metrics than the version in use: this version is used from now.
    NewVersion {
        /// The logical set.
        set: String,
        /// The version now in use.
        version: u32,
        /// Whether it was declared just now (else it existed).
        declared: bool,
        /// Metrics it has that the version before lacked.
        added: Vec<String>,
        /// Metrics the version before had that it lacks.
        removed: Vec<String>,
    },
    /// The file was missing or unparseable: nothing stored this round.
    Skipped {
        /// The logical set.
        set: String,
        /// Why.
        why: String,
    },
    /// The clock went back (or did not move): nothing stored this round.
    ClockBack {
        /// The logical set.
        set: String,
    },
}

/// The samplers of `names` for `producer`, each carrying on from its logical set's latest
/// generation. Reads no file (a file missing now may appear later) and declares nothing: each
/// version is declared when its first sample is taken.
pub fn setup<M: PMem + 'static>(
    store: &MetricStore<M>,
    session: &mut MetricSession<'_, M>,
    proc_root: &Path,
    names: &[String],
    producer: &Producer,
) -> Result<Vec<Sampler>, MonError> {
    check_samplers(names)?;
    let logical = sets::logical_sets(store)?;
    let mut out = Vec::new();
    for name in names {
        let set = format!("{}/{name}", producer.name);
        let mut next_generation = 1;
        if let Some(l) = logical.iter().find(|l| l.name == set) {
            for v in &l.versions {
                if let Some(s) = session.latest(v.id)? {
                    next_generation = next_generation.max(s.generation + 1);
                }
            }
        }
        out.push(Sampler {
            name: name.clone(),
            set,
            path: proc_root.join(name),
            current: None,
            next_generation,
            failing: None,
        });
    }
    Ok(out)
}

/// Refuses a name that is no sampler's, or a repeated one.
pub fn check_samplers(names: &[String]) -> Result<(), MonError> {
    for (i, name) in names.iter().enumerate() {
        if !SAMPLERS.contains(&name.as_str()) || names[..i].contains(name) {
            return Err(MonError::UnknownSampler(name.clone()));
        }
    }
    Ok(())
}

/// Nanoseconds since the Unix epoch now (0 for a clock set before it): the time of samples.
pub fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The schema of a reading: component and job ids first, then the reading's metrics.
fn schema_of(name: String, reading: &Reading) -> Schema {
    let mut metrics = vec![Metric::meta("component_id", Scalar::U64), Metric::data("job_id", Scalar::U64)];
    metrics.extend(reading.iter().map(|(m, s, _)| Metric::data(m, *s)));
    Schema { name, metrics }
}

/// Whether `schema` has exactly the metrics of `wanted` (in any order).
fn same_metrics(schema: &Schema, wanted: &Schema) -> bool {
    if schema.metrics.len() != wanted.metrics.len() {
        return false;
    }
    let mut a: Vec<&Metric> = schema.metrics.iter().collect();
    let mut b: Vec<&Metric> = wanted.metrics.iter().collect();
    a.sort_by(|x, y| x.name.cmp(&y.name));
    b.sort_by(|x, y| x.name.cmp(&y.name));
    a == b
}

impl Sampler {
    /// Forgets the version in use, so that the next round declares its set's record again (with
    /// a producer's new fields).
    pub fn redeclare(&mut self) {
        self.current = None;
    }

    /// The version `reading` belongs to: the one in use, an existing one with its metrics, or a
    /// new one. Declares the set (with `producer`'s record) when it changes.
    fn version_for<M: PMem + 'static>(
        &mut self,
        store: &MetricStore<M>,
        reading: &Reading,
        producer: &Producer,
    ) -> Result<Option<Event>, MonError> {
        let wanted = schema_of(self.name.clone(), reading);
        if let Some(c) = &self.current
            && same_metrics(&c.schema, &wanted)
        {
            return Ok(None);
        }
        // An existing version with these metrics, or the next number.
        let mut version = None;
        let mut top = 0;
        for v in 1.. {
            let Some(schema) = store.schema(&versioned(&self.name, v)) else { break };
            top = v;
            if version.is_none() && same_metrics(&schema, &wanted) {
                version = Some((v, schema));
            }
        }
        let (declared, (v, schema)) = match version {
            Some(found) => (false, found),
            None => {
                let v = top + 1;
                let schema = Schema { name: versioned(&self.name, v), ..wanted };
                store.add_schema(&schema)?;
                (true, (v, schema))
            }
        };
        let info = SetInfo {
            instance: versioned(&self.set, v),
            schema: schema.name.clone(),
            producer: producer.name.clone(),
            component_id: producer.component_id,
            job_id: producer.job_id,
            interval_ns: producer.interval_ns,
        };
        let id = store.add_set(&info)?;
        // The version before: the one in use, or at start the newest there was, if this one is
        // new (the file changed while the daemon was down).
        let before = match &self.current {
            Some(c) => Some((c.version, c.schema.clone())),
            None if declared && top > 0 => store.schema(&versioned(&self.name, top)).map(|s| (top, s)),
            None => None,
        };
        let names = |s: &Schema| s.metrics.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
        let event = before.filter(|(b, _)| *b != v).map(|(_, old)| {
            let (old, new) = (names(&old), names(&schema));
            Event::NewVersion {
                set: self.set.clone(),
                version: v,
                declared,
                added: new.iter().filter(|m| !old.contains(m)).cloned().collect(),
                removed: old.iter().filter(|m| !new.contains(m)).cloned().collect(),
            }
        });
        self.current = Some(Current { id, version: v, schema });
        Ok(event)
    }
}

/// Reads every sampler's file and stores one sample per sampler; `events` hears what happened,
/// each [`Event::Stored`] once the sample is durable (as the store's policy says).
pub fn sample_once<M: PMem + 'static>(
    store: &MetricStore<M>,
    session: &mut MetricSession<'_, M>,
    samplers: &mut [Sampler],
    producer: &Producer,
    mut events: impl FnMut(&Sampler, Event),
) -> Result<(), MonError> {
    for s in samplers.iter_mut() {
        let start = Instant::now();
        let reading = match std::fs::read_to_string(&s.path) {
            Ok(text) => proc::parse(&s.name, &text).map_err(|e| format!("{} does not parse: {e}", s.path.display())),
            Err(e) => Err(format!("cannot read {}: {e}", s.path.display())),
        };
        let reading = match reading {
            Ok(r) => r,
            Err(why) => {
                s.failing = Some(why.clone());
                let set = s.set.clone();
                events(s, Event::Skipped { set, why });
                continue;
            }
        };
        s.failing = None;
        if let Some(e) = s.version_for(store, &reading, producer)? {
            events(s, e);
        }
        let c = s.current.as_ref().expect("a version is in use");
        let mut values = Vec::with_capacity(c.schema.metrics.len());
        values.push(Value::U(producer.component_id));
        values.push(Value::U(producer.job_id));
        let in_order = reading.len() + 2 == c.schema.metrics.len()
            && c.schema.metrics[2..].iter().zip(&reading).all(|(m, r)| m.name == r.0);
        if in_order {
            values.extend(reading.into_iter().map(|r| r.2));
        } else {
            let mut by_name: HashMap<String, Value> = reading.into_iter().map(|(n, _, v)| (n, v)).collect();
            values.extend(c.schema.metrics[2..].iter().map(|m| by_name.remove(&m.name).expect("same metrics")));
        }
        let (id, version) = (c.id, c.version);
        let sample = Sample {
            timestamp: now_ns(),
            duration: start.elapsed().as_nanos() as u64,
            generation: s.next_generation,
            consistent: true,
            values,
        };
        match session.store_sample(id, &sample) {
            Ok(Stored::New) => {
                let e = Event::Stored {
                    set: s.set.clone(),
                    version,
                    generation: s.next_generation,
                    duration_ns: start.elapsed().as_nanos() as u64,
                };
                events(s, e);
            }
            Ok(Stored::Duplicate) => {}
            Err(KvError::BadSample { .. }) if session.latest(id)?.is_some_and(|l| sample.timestamp <= l.timestamp) => {
                let set = s.set.clone();
                events(s, Event::ClockBack { set });
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        s.next_generation += 1;
    }
    Ok(())
}

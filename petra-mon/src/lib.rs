//! The sampler daemon's library: samplers of `/proc` in the spirit of LDMS's (meminfo, vmstat,
//! loadavg, stat, diskstats), the sampling step that stores one sample per set in a
//! [`MetricStore`], and the OpenMetrics text of the latest values.
//!
//! Each sampler's schema is taken from its file's first reading (the metrics this kernel
//! reports); later readings are matched by name (a metric that disappeared reads 0). A set is
//! named `<producer>/<sampler>`; its generations carry on from the store's latest after a
//! restart, so a daemon killed at any moment starts again where its last acknowledged sample left
//! off.

pub mod families;
pub mod listing;
pub mod proc;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use petra::mem::PMem;
use petra_kv::{KvError, Metric, MetricSession, MetricStore, Sample, Scalar, Schema, SetId, SetInfo, Stored, Value};

/// The samplers, by name.
pub const SAMPLERS: [&str; 5] = ["meminfo", "vmstat", "loadavg", "stat", "diskstats"];

/// A metric read from a file: its name, type and value.
pub type Reading = Vec<(String, Scalar, Value)>;

/// Parses the text of `/proc/<sampler>`.
pub fn parse(sampler: &str, text: &str) -> Reading {
    let u = |name: String, v: u64| (name, Scalar::U64, Value::U(v));
    let mut out = Vec::new();
    match sampler {
        // "MemTotal:       24684092 kB"
        "meminfo" => {
            for line in text.lines() {
                let mut f = line.split_whitespace();
                if let (Some(name), Some(Ok(v))) = (f.next(), f.next().map(str::parse)) {
                    out.push(u(name.trim_end_matches(':').to_owned(), v));
                }
            }
        }
        // "nr_free_pages 2266393"
        "vmstat" => {
            for line in text.lines() {
                let mut f = line.split_whitespace();
                if let (Some(name), Some(Ok(v))) = (f.next(), f.next().map(str::parse)) {
                    out.push(u(name.to_owned(), v));
                }
            }
        }
        // "0.43 0.90 1.00 1/78 25705"
        "loadavg" => {
            let f: Vec<&str> = text.split_whitespace().collect();
            for (i, name) in ["load1", "load5", "load15"].iter().enumerate() {
                if let Some(Ok(x)) = f.get(i).map(|s| s.parse::<f64>()) {
                    out.push((name.to_string(), Scalar::F64, Value::F(x)));
                }
            }
            if let Some((run, total)) = f.get(3).and_then(|s| s.split_once('/')) {
                out.extend(run.parse().ok().map(|v| u("runnable".into(), v)));
                out.extend(total.parse().ok().map(|v| u("scheduling_entities".into(), v)));
            }
            out.extend(f.get(4).and_then(|s| s.parse().ok()).map(|v| u("last_pid".into(), v)));
        }
        // "cpu0 1986107 0 266564 ...", "ctxt 51353744", "intr 26993796 0 0 ..."
        "stat" => {
            const CPU: [&str; 10] =
                ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice"];
            for line in text.lines() {
                let mut f = line.split_whitespace();
                let Some(name) = f.next() else { continue };
                if name.starts_with("cpu") {
                    for (field, v) in CPU.iter().zip(f) {
                        out.extend(v.parse().ok().map(|v| u(format!("{name}.{field}"), v)));
                    }
                } else if let Some(Ok(v)) = f.next().map(str::parse) {
                    out.push(u(name.to_owned(), v));
                }
            }
        }
        // "   8       0 sda 1234 ..." (loop and ram devices left out)
        "diskstats" => {
            const DISK: [&str; 11] = [
                "reads_completed",
                "reads_merged",
                "sectors_read",
                "read_ms",
                "writes_completed",
                "writes_merged",
                "sectors_written",
                "write_ms",
                "ios_in_progress",
                "io_ms",
                "weighted_io_ms",
            ];
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                let Some(dev) = f.get(2) else { continue };
                if dev.starts_with("loop") || dev.starts_with("ram") {
                    continue;
                }
                for (field, v) in DISK.iter().zip(&f[3..]) {
                    out.extend(v.parse().ok().map(|v| u(format!("{dev}.{field}"), v)));
                }
            }
        }
        _ => {}
    }
    out
}

/// One sampler: the file it reads, its set and the next generation to store.
#[derive(Debug)]
pub struct Sampler {
    /// Its name (one of [`SAMPLERS`]).
    pub name: String,
    path: PathBuf,
    schema: Schema,
    /// Its set.
    pub set: SetId,
    /// The generation of the next sample.
    pub next_generation: u64,
}

/// Who is sampling.
#[derive(Debug, Clone)]
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

/// Errors of the daemon.
#[derive(Debug, thiserror::Error)]
pub enum MonError {
    /// An unknown sampler name.
    #[error("unknown sampler {0:?}: use {list}", list = SAMPLERS.join(", "))]
    UnknownSampler(String),
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No set of this name.
    #[error("no set named {0}")]
    NoSet(String),
    /// A set names a schema the store does not have.
    #[error("a set names the missing schema {0:?}")]
    NoSchema(String),
    /// The store refused.
    #[error(transparent)]
    Store(#[from] KvError),
}

fn read(path: &Path) -> Result<String, MonError> {
    std::fs::read_to_string(path).map_err(|source| MonError::Read { path: path.to_owned(), source })
}

/// Declares the schemas and sets of `names` (reading each file once for its metrics) and returns
/// the samplers, each carrying on from its set's latest generation.
pub fn setup<M: PMem + 'static>(
    store: &MetricStore<M>,
    session: &mut MetricSession<'_, M>,
    proc_root: &Path,
    names: &[String],
    producer: &Producer,
) -> Result<Vec<Sampler>, MonError> {
    let mut out = Vec::new();
    for name in names {
        if !SAMPLERS.contains(&name.as_str()) {
            return Err(MonError::UnknownSampler(name.clone()));
        }
        let path = proc_root.join(name);
        let instance = format!("{}/{name}", producer.name);
        // A set declared before keeps its schema (metrics are matched by name).
        let schema = match store.set_id(&instance).and_then(|_| store.schema(name)) {
            Some(schema) => schema,
            None => {
                let metrics = parse(name, &read(&path)?).into_iter().map(|(m, s, _)| Metric::data(&m, s)).collect();
                let schema = Schema { name: name.clone(), metrics };
                store.add_schema(&schema)?;
                schema
            }
        };
        let info = SetInfo {
            instance,
            schema: name.clone(),
            producer: producer.name.clone(),
            component_id: producer.component_id,
            job_id: producer.job_id,
            interval_ns: producer.interval_ns,
        };
        let set = store.add_set(&info)?;
        let next_generation = session.latest(set)?.map_or(1, |s| s.generation + 1);
        out.push(Sampler { name: name.clone(), path, schema, set, next_generation });
    }
    Ok(out)
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Reads every sampler's file and stores one sample per set; `ack(set, generation)` is called
/// after each sample is durable.
pub fn sample_once<M: PMem + 'static>(
    session: &mut MetricSession<'_, M>,
    samplers: &mut [Sampler],
    mut ack: impl FnMut(&Sampler, u64),
) -> Result<(), MonError> {
    for s in samplers.iter_mut() {
        let start = Instant::now();
        let reading = parse(&s.name, &read(&s.path)?);
        let values = s
            .schema
            .metrics
            .iter()
            .map(|m| {
                // A metric this reading lacks reads 0 of its type.
                let found = reading.iter().find(|(n, _, _)| *n == m.name).map(|r| r.2.clone());
                found.unwrap_or(if m.scalar == Scalar::F64 { Value::F(0.0) } else { Value::U(0) })
            })
            .collect();
        let sample = Sample {
            timestamp: now_ns(),
            duration: start.elapsed().as_nanos() as u64,
            generation: s.next_generation,
            consistent: true,
            values,
        };
        match session.store_sample(s.set, &sample) {
            Ok(Stored::New) => ack(s, s.next_generation),
            Ok(Stored::Duplicate) => {}
            Err(KvError::BadSample { .. }) if sample.timestamp <= latest_ts(session, s.set)? => {
                // The clock went back (or did not move): skip this round rather than stop.
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        s.next_generation += 1;
    }
    Ok(())
}

fn latest_ts<M: PMem + 'static>(session: &mut MetricSession<'_, M>, set: SetId) -> Result<u64, MonError> {
    Ok(session.latest(set)?.map_or(0, |s| s.timestamp))
}

/// A metric name as OpenMetrics allows it: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn metric_name(sampler: &str, metric: &str) -> String {
    let raw = format!("petra_{sampler}_{metric}");
    raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect()
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The latest sample of every set as an OpenMetrics text exposition (gauges, with the set's
/// instance, producer and component id as labels and the sample's timestamp in seconds).
pub fn openmetrics<M: PMem + 'static>(
    store: &MetricStore<M>,
    session: &mut MetricSession<'_, M>,
) -> Result<String, MonError> {
    let mut families: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for (id, info) in store.sets() {
        let (Some(schema), Some(sample)) = (store.schema(&info.schema), session.latest(id)?) else { continue };
        let labels = format!(
            "instance=\"{}\",producer=\"{}\",component_id=\"{}\"",
            label(&info.instance),
            label(&info.producer),
            info.component_id
        );
        let ts = sample.timestamp as f64 / 1e9;
        for (m, v) in schema.metrics.iter().zip(&sample.values) {
            let Some(x) = v.as_f64() else { continue };
            let line = format!("{}{{{labels}}} {x} {ts:.3}", metric_name(&info.schema, &m.name));
            families.entry(metric_name(&info.schema, &m.name)).or_default().push(line);
        }
    }
    let mut out = String::new();
    for (name, lines) in families {
        let _ = writeln!(out, "# TYPE {name} gauge");
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    out.push_str("# EOF\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse_into_named_metrics() {
        let m =
            parse("meminfo", "MemTotal:       24684092 kB\nMemFree:        23957912 kB\nHugePages_Total:       0\n");
        assert_eq!(
            m.iter().map(|r| (r.0.as_str(), r.2.clone())).collect::<Vec<_>>(),
            [("MemTotal", Value::U(24684092)), ("MemFree", Value::U(23957912)), ("HugePages_Total", Value::U(0))]
        );
        let l = parse("loadavg", "0.43 0.90 1.00 1/78 25705\n");
        assert_eq!(l.len(), 6);
        assert_eq!(l[1], ("load5".into(), Scalar::F64, Value::F(0.9)));
        assert_eq!(l[4], ("scheduling_entities".into(), Scalar::U64, Value::U(78)));
        let s = parse("stat", "cpu  3 0 5 9 2 0 3 3 0 0\ncpu0 1 0 2 4 1 0 1 1 0 0\nintr 2699 0 0\nctxt 513\n");
        assert_eq!(s.len(), 22);
        assert!(s.contains(&("cpu0.idle".into(), Scalar::U64, Value::U(4))));
        assert!(s.contains(&("intr".into(), Scalar::U64, Value::U(2699))));
        let d = parse(
            "diskstats",
            "   7  0 loop0 1 2 3 4 5 6 7 8 9 10 11\n 259 0 nvme0n1 1 2 3 4 5 6 7 8 0 10 11 0 0 0 0\n",
        );
        assert_eq!(d.len(), 11);
        assert_eq!(d[6], ("nvme0n1.sectors_written".into(), Scalar::U64, Value::U(7)));
        assert_eq!(metric_name("stat", "cpu0.user"), "petra_stat_cpu0_user");
        assert_eq!(metric_name("meminfo", "Active(anon)"), "petra_meminfo_Active_anon_");
    }
}

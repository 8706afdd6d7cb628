//! What `petra-ls` shows: a listing of logical sets (metadata, versions, latest sample, the last
//! samples, window statistics) made from a store, as JSON (what `petra-ls --json` prints and what
//! `petra-mon` serves at `/ls` for a store it holds) or as tables with headed columns. The tables
//! are drawn from the listing alone, so a listing fetched from a running daemon prints exactly as
//! one read from the file. Times are RFC 3339, in UTC.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use petra::mem::PMem;
use petra_kv::{Metric, MetricSession, MetricStore, Sample, SetInfo, Value, WindowAcc, WindowStats};
use serde::{Deserialize, Serialize};

use crate::MonError;
use crate::sets::{self, LogicalSet, Version};

const SEC: u64 = 1_000_000_000;

/// Which sets, and what of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Only this logical set (`<producer>/<sampler>`); all sets if `None`.
    pub set: Option<String>,
    /// The last this many samples.
    pub history: Option<usize>,
    /// Window statistics over the last this many seconds before the latest sample.
    pub window: Option<u64>,
}

impl Query {
    /// The query of a URL's query string (`set=..&history=..&window=..`, percent-encoded).
    pub fn from_url_query(query: &str) -> Result<Query, String> {
        let mut q = Query::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "set" => q.set = Some(v.to_string()),
                "history" => {
                    q.history = Some(v.parse().map_err(|_| format!("history takes a number of samples, not {v:?}"))?)
                }
                "window" => {
                    q.window = Some(v.parse().map_err(|_| format!("window takes a number of seconds, not {v:?}"))?)
                }
                other => return Err(format!("unknown parameter {other:?}: use set, history or window")),
            }
        }
        Ok(q)
    }

    /// The query string [`from_url_query`](Query::from_url_query) reads.
    pub fn to_url_query(&self) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        if let Some(set) = &self.set {
            s.append_pair("set", set);
        }
        if let Some(n) = self.history {
            s.append_pair("history", &n.to_string());
        }
        if let Some(secs) = self.window {
            s.append_pair("window", &secs.to_string());
        }
        s.finish()
    }
}

/// One schema version of a listed set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionListing {
    /// Its number (1, 2, ...).
    pub version: u32,
    /// Its set in the store.
    pub instance: String,
    /// Its schema.
    pub schema: String,
    /// Its metrics, in order.
    pub metrics: Vec<Metric>,
}

/// One logical set as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetListing {
    /// Its name, `<producer>/<sampler>`.
    pub name: String,
    /// The record of its newest version's set (producer, component, job and interval as last
    /// declared; each sample holds its own component and job ids).
    #[serde(flatten)]
    pub info: SetInfo,
    /// Its schema versions, oldest first.
    pub versions: Vec<VersionListing>,
    /// The latest sample, if any.
    pub latest: Option<ListedSample>,
    /// The samples asked for, oldest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<ListedSample>>,
    /// The window statistics asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Vec<WindowStats>>,
}

/// A sample as listed: its values by metric name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedSample {
    /// When it was taken, RFC 3339.
    pub time: String,
    /// When it was taken, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// How long taking it took, nanoseconds.
    pub duration_ns: u64,
    /// Its data generation.
    pub generation: u64,
    /// The schema version it is of.
    pub version: u32,
    /// Whether it was read in one consistent pass.
    pub consistent: bool,
    /// Its values, by metric name.
    pub values: BTreeMap<String, Value>,
}

/// A time in nanoseconds since the epoch as RFC 3339, UTC, to the nanosecond.
pub fn rfc3339(ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

impl ListedSample {
    fn new(v: &Version, s: Sample) -> ListedSample {
        ListedSample {
            time: rfc3339(s.timestamp),
            timestamp_ns: s.timestamp,
            duration_ns: s.duration,
            generation: s.generation,
            version: v.version,
            consistent: s.consistent,
            values: v.schema.metrics.iter().map(|m| m.name.clone()).zip(s.values).collect(),
        }
    }
}

/// The listing `query` asks for.
pub fn listing<M: PMem + 'static>(
    store: &MetricStore<M>,
    session: &mut MetricSession<'_, M>,
    query: &Query,
) -> Result<Vec<SetListing>, MonError> {
    let mut all = sets::logical_sets(store)?;
    if let Some(name) = &query.set {
        all.retain(|l| l.name == *name);
        if all.is_empty() {
            return Err(MonError::NoSet(name.clone()));
        }
    }
    all.iter().map(|l| list_one(l, session, query)).collect()
}

fn list_one<M: PMem + 'static>(
    set: &LogicalSet,
    session: &mut MetricSession<'_, M>,
    query: &Query,
) -> Result<SetListing, MonError> {
    let latest = set.latest(session)?;
    let latest_ts = latest.as_ref().map_or(0, |(_, s)| s.timestamp);
    let history = match query.history {
        Some(n) => Some(set.last(session, latest_ts, n)?.into_iter().map(|(v, s)| ListedSample::new(v, s)).collect()),
        None => None,
    };
    let window = match query.window {
        Some(secs) => {
            let samples = set.range(session, latest_ts.saturating_sub(secs.saturating_mul(SEC)), latest_ts)?;
            Some(window(&samples))
        }
        None => None,
    };
    let newest = set.versions.last().expect("a logical set has a version");
    Ok(SetListing {
        name: set.name.clone(),
        info: newest.info.clone(),
        versions: set
            .versions
            .iter()
            .map(|v| VersionListing {
                version: v.version,
                instance: v.info.instance.clone(),
                schema: v.schema.name.clone(),
                metrics: v.schema.metrics.clone(),
            })
            .collect(),
        latest: latest.map(|(v, s)| ListedSample::new(v, s)),
        history,
        window,
    })
}

/// Minimum, maximum, mean and rate per second of each scalar data metric over `samples` (of
/// any versions: a metric counts in the samples that have it), in the newest version's order
/// and then in the order the other versions appear.
fn window(samples: &[(&Version, Sample)]) -> Vec<WindowStats> {
    // The versions the samples have (a few): the newest sample's first, then the others as they
    // appear; each with the accumulator of each of its metrics (a scalar data metric's; `None`
    // for the others).
    let mut versions: Vec<(&Version, Vec<Option<usize>>)> = Vec::new();
    for (v, _) in samples.last().into_iter().chain(samples) {
        if !versions.iter().any(|(seen, _)| std::ptr::eq(*seen, *v)) {
            versions.push((v, Vec::new()));
        }
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut accs: Vec<WindowAcc> = Vec::new();
    for (v, slots) in &mut versions {
        *slots = v
            .schema
            .metrics
            .iter()
            .map(|m| {
                (!m.meta && m.array.is_none()).then(|| {
                    *index.entry(m.name.as_str()).or_insert_with(|| {
                        accs.push(WindowAcc::new(m.name.clone()));
                        accs.len() - 1
                    })
                })
            })
            .collect();
    }
    for (v, s) in samples {
        let slots = &versions.iter().find(|(seen, _)| std::ptr::eq(*seen, *v)).expect("a version seen").1;
        for (slot, val) in slots.iter().zip(&s.values) {
            if let (Some(i), Some(x)) = (slot, val.as_f64()) {
                accs[*i].add(s.timestamp, x);
            }
        }
    }
    accs.into_iter().filter_map(WindowAcc::finish).collect()
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::U(x) => x.to_string(),
        Value::S(x) => x.to_string(),
        Value::F(x) => x.to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(fmt_value).collect::<Vec<_>>().join(", ")),
    }
}

/// Rows under a header, each column as wide as its widest cell, numbers to the right.
fn columns(out: &mut String, indent: &str, header: &[String], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| rows.iter().map(|r| r.get(i).map_or(0, String::len)).max().unwrap_or(0).max(header[i].len()))
        .collect();
    let numeric = |s: &str| s.parse::<f64>().is_ok() || s == "-";
    for (r, row) in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)).enumerate() {
        let mut line = String::from(indent);
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let w = widths[i];
            if r > 0 && numeric(cell) {
                let _ = write!(line, "{cell:>w$}");
            } else if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The listing as tables: the sets under a header; with `values`, each set's latest values;
/// then each set's history and window statistics where the listing has them.
pub fn table(sets: &[SetListing], values: bool) -> String {
    let mut out = String::new();
    let id = |s: &ListedSample, name: &str, fallback: u64| s.values.get(name).map_or(fallback.to_string(), fmt_value);
    let rows: Vec<Vec<String>> = sets
        .iter()
        .map(|set| {
            let l = set.latest.as_ref();
            vec![
                set.name.clone(),
                set.versions.last().map_or_else(String::new, |v| v.schema.clone()),
                set.info.producer.clone(),
                l.map_or(set.info.component_id.to_string(), |s| id(s, "component_id", set.info.component_id)),
                l.map_or(set.info.job_id.to_string(), |s| id(s, "job_id", set.info.job_id)),
                set.versions.last().map_or(0, |v| v.metrics.len()).to_string(),
                l.map_or("-".into(), |s| s.generation.to_string()),
                l.map_or("no sample".into(), |s| {
                    format!("{}{}", s.time, if s.consistent { "" } else { " (inconsistent)" })
                }),
            ]
        })
        .collect();
    let header = strings(&["SET", "SCHEMA", "PRODUCER", "COMPONENT", "JOB", "METRICS", "GENERATION", "LATEST"]);
    columns(&mut out, "", &header, &rows);
    for set in sets {
        let metrics = set.versions.last().map_or(&[][..], |v| &v.metrics[..]);
        let missing = Value::Array(Vec::new());
        let value = |s: &ListedSample, m: &Metric| fmt_value(s.values.get(&m.name).unwrap_or(&missing));
        if let Some(x) = set.latest.as_ref().filter(|_| values) {
            let _ = writeln!(out, "\n{}: latest sample, generation {} at {}", set.name, x.generation, x.time);
            let rows: Vec<Vec<String>> = metrics
                .iter()
                .map(|m| vec![if m.meta { "meta" } else { "data" }.into(), m.name.clone(), value(x, m)])
                .collect();
            columns(&mut out, "  ", &strings(&["KIND", "METRIC", "VALUE"]), &rows);
        }
        if let Some(h) = &set.history {
            let _ = writeln!(out, "\n{}: the last {} samples", set.name, h.len());
            let mut header = strings(&["TIME", "GENERATION", "VERSION"]);
            header.extend(metrics.iter().map(|m| m.name.clone()));
            let rows: Vec<Vec<String>> = h
                .iter()
                .map(|x| {
                    let mut row = vec![x.time.clone(), x.generation.to_string(), x.version.to_string()];
                    row.extend(metrics.iter().map(|m| x.values.get(&m.name).map_or("-".into(), fmt_value)));
                    row
                })
                .collect();
            columns(&mut out, "  ", &header, &rows);
        }
        if let Some(w) = &set.window {
            let _ = writeln!(out, "\n{}: window statistics", set.name);
            let rows: Vec<Vec<String>> = w
                .iter()
                .map(|st| {
                    vec![
                        st.metric.clone(),
                        st.samples.to_string(),
                        st.min.to_string(),
                        st.max.to_string(),
                        format!("{:.3}", st.avg),
                        st.rate.map_or("-".into(), |r| format!("{r:.3}")),
                    ]
                })
                .collect();
            columns(&mut out, "  ", &strings(&["METRIC", "SAMPLES", "MIN", "MAX", "AVG", "RATE/S"]), &rows);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_survive_the_url() {
        let q = Query { set: Some("node 7/a&b=c%".into()), history: Some(60), window: None };
        assert_eq!(Query::from_url_query(&q.to_url_query()), Ok(q));
        assert_eq!(Query::from_url_query(""), Ok(Query::default()));
        assert!(Query::from_url_query("history=soon").unwrap_err().contains("number of samples"));
        assert!(Query::from_url_query("window=soon").unwrap_err().contains("number of seconds"));
        assert!(Query::from_url_query("limit=3").unwrap_err().contains("unknown parameter"));
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(1_700_000_000_123_456_789), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
    }

    #[test]
    fn columns_have_headers_and_line_up() {
        let mut out = String::new();
        columns(&mut out, "", &strings(&["NAME", "N"]), &[strings(&["a", "10"]), strings(&["bbbbbb", "2"])]);
        assert_eq!(out, "NAME    N\na       10\nbbbbbb   2\n");
    }
}

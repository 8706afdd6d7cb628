//! What `petra-ls` shows: a listing of sets (metadata, latest sample, history, window statistics)
//! made from a store, as JSON (what `petra-ls --json` prints and what `petra-mon` serves at
//! `/ls` for a store it holds) or as a table. The table is drawn from the listing alone, so a
//! listing fetched from a running daemon prints exactly as one read from the file.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use petra::mem::PMem;
use petra_kv::{Metric, MetricSession, MetricStore, Sample, SetId, SetInfo, Value, WindowStats};
use serde::{Deserialize, Serialize};

use crate::MonError;

const SEC: u64 = 1_000_000_000;

/// Which sets, and what of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Only this set (`<producer>/<sampler>`); all sets if `None`.
    pub set: Option<String>,
    /// The samples of the last this many seconds before the latest.
    pub history: Option<u64>,
    /// Window statistics over the last this many seconds before the latest.
    pub window: Option<u64>,
}

impl Query {
    /// The query of a URL's query string (`set=..&history=..&window=..`, percent-encoded).
    pub fn from_url_query(query: &str) -> Result<Query, String> {
        let mut q = Query::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let secs = || v.parse::<u64>().map_err(|_| format!("{k} takes a number of seconds, not {v:?}"));
            match &*k {
                "set" => q.set = Some(v.to_string()),
                "history" => q.history = Some(secs()?),
                "window" => q.window = Some(secs()?),
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
        for (name, secs) in [("history", self.history), ("window", self.window)] {
            if let Some(secs) = secs {
                s.append_pair(name, &secs.to_string());
            }
        }
        s.finish()
    }
}

/// One set as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetListing {
    /// The set's record (its fields at the listing's top level).
    #[serde(flatten)]
    pub info: SetInfo,
    /// The schema's metrics, in order.
    pub metrics: Vec<Metric>,
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
    /// When it was taken, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// How long taking it took, nanoseconds.
    pub duration_ns: u64,
    /// Its data generation.
    pub generation: u64,
    /// Whether it was read in one consistent pass.
    pub consistent: bool,
    /// Its values, by metric name.
    pub values: BTreeMap<String, Value>,
}

impl ListedSample {
    fn new(metrics: &[Metric], s: Sample) -> ListedSample {
        ListedSample {
            timestamp_ns: s.timestamp,
            duration_ns: s.duration,
            generation: s.generation,
            consistent: s.consistent,
            values: metrics.iter().map(|m| m.name.clone()).zip(s.values).collect(),
        }
    }
}

/// The listing `query` asks for.
pub fn listing<M: PMem + 'static>(
    store: &MetricStore<M>,
    session: &mut MetricSession<'_, M>,
    query: &Query,
) -> Result<Vec<SetListing>, MonError> {
    let sets: Vec<(SetId, SetInfo)> = match &query.set {
        Some(name) => {
            let id = store.set_id(name).ok_or_else(|| MonError::NoSet(name.clone()))?;
            store.sets().into_iter().filter(|(i, _)| *i == id).collect()
        }
        None => store.sets(),
    };
    let mut out = Vec::with_capacity(sets.len());
    for (id, info) in sets {
        let metrics = store.schema(&info.schema).ok_or_else(|| MonError::NoSchema(info.schema.clone()))?.metrics;
        let latest = session.latest(id)?;
        let latest_ts = latest.as_ref().map_or(0, |s| s.timestamp);
        let since = |secs: u64| latest_ts.saturating_sub(secs.saturating_mul(SEC));
        let history = match query.history {
            Some(secs) => Some(
                session
                    .range(id, since(secs), latest_ts)?
                    .into_iter()
                    .map(|s| ListedSample::new(&metrics, s))
                    .collect(),
            ),
            None => None,
        };
        let window = query.window.map(|secs| session.window(id, since(secs), latest_ts)).transpose()?;
        let latest = latest.map(|s| ListedSample::new(&metrics, s));
        out.push(SetListing { info, metrics, latest, history, window });
    }
    Ok(out)
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::U(x) => x.to_string(),
        Value::S(x) => x.to_string(),
        Value::F(x) => x.to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(fmt_value).collect::<Vec<_>>().join(", ")),
    }
}

/// The listing as a table: a line per set; with `values`, the latest values one per line; then
/// the history and the window statistics where the listing has them.
pub fn table(sets: &[SetListing], values: bool) -> String {
    let mut out = String::new();
    let missing = Value::Array(Vec::new());
    let value = |s: &ListedSample, m: &Metric| fmt_value(s.values.get(&m.name).unwrap_or(&missing));
    for set in sets {
        let info = &set.info;
        let when = set.latest.as_ref().map_or("no sample".to_string(), |x| {
            format!(
                "generation {} at {}.{:09} s{}",
                x.generation,
                x.timestamp_ns / SEC,
                x.timestamp_ns % SEC,
                if x.consistent { "" } else { " (inconsistent)" }
            )
        });
        let _ = writeln!(
            out,
            "{}: schema {}, producer {}, component {}, job {}, {} metrics, {when}",
            info.instance,
            info.schema,
            info.producer,
            info.component_id,
            info.job_id,
            set.metrics.len()
        );
        if let Some(x) = set.latest.as_ref().filter(|_| values) {
            for m in &set.metrics {
                let _ = writeln!(out, "  {:<6} {:<32} {}", if m.meta { "meta" } else { "data" }, m.name, value(x, m));
            }
        }
        if let Some(h) = &set.history {
            let _ = writeln!(out, "  {:>20} {:>12}  values", "timestamp (ns)", "generation");
            for x in h {
                let vals: Vec<String> = set.metrics.iter().map(|m| value(x, m)).collect();
                let _ = writeln!(out, "  {:>20} {:>12}  {}", x.timestamp_ns, x.generation, vals.join(" "));
            }
        }
        if let Some(w) = &set.window {
            let _ = writeln!(
                out,
                "  {:<32} {:>8} {:>16} {:>16} {:>16} {:>14}",
                "metric", "samples", "min", "max", "avg", "rate/s"
            );
            for st in w {
                let rate = st.rate.map_or("-".into(), |r| format!("{r:.3}"));
                let _ = writeln!(
                    out,
                    "  {:<32} {:>8} {:>16} {:>16} {:>16.3} {:>14}",
                    st.metric, st.samples, st.min, st.max, st.avg, rate
                );
            }
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
        assert!(Query::from_url_query("history=soon").unwrap_err().contains("number of seconds"));
        assert!(Query::from_url_query("limit=3").unwrap_err().contains("unknown parameter"));
    }
}

//! The `/metrics` page: the latest sample of every logical set, and the daemon's own metrics,
//! encoded by `prometheus-client` in the OpenMetrics text format or, for a scraper that does not
//! ask for OpenMetrics, in Prometheus's classic text format (0.0.4).
//!
//! Families are named as [`families`](crate::families) says; every series carries the set's
//! `producer` label (the label `instance` is the scraper's own). Samples carry no timestamp:
//! Prometheus stamps them at the scrape, so a stopped daemon's series go stale at once. A set
//! whose latest sample is older than three sampling intervals (at least two seconds) is left
//! out, as node_exporter leaves out a collector that failed: its series go stale too.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::sampling::now_ns;

use parking_lot::Mutex;
use petra::mem::PMem;
use petra_kv::{MetricSession, MetricStore};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit as PcUnit};

use crate::MonError;
use crate::families::{self, Family, Kind, Names, Unit};
use crate::sets;

/// The exposition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
    /// Prometheus's text format 0.0.4.
    Classic,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics if it names it at least as
    /// preferred as anything else it names, else the classic one.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else { return Format::Classic };
        let (mut om, mut other) = (None::<f32>, 0f32);
        for part in accept.split(',') {
            let mut params = part.split(';').map(str::trim);
            let media = params.next().unwrap_or("").to_ascii_lowercase();
            let q = params.find_map(|p| p.strip_prefix("q=").and_then(|q| q.parse::<f32>().ok())).unwrap_or(1.0);
            if media == "application/openmetrics-text" {
                om = Some(om.map_or(q, |o| o.max(q)));
            } else {
                other = other.max(q);
            }
        }
        match om {
            Some(q) if q > 0.0 && q >= other => Format::OpenMetrics,
            _ => Format::Classic,
        }
    }

    /// The `Content-Type` of a page in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// What the daemon counts about itself, for `petra_mon_*`. Every access is Relaxed: they are
/// counters and times for display; nothing is published through them.
#[derive(Debug, Default)]
pub struct Stats {
    /// When the daemon started, ns since the epoch.
    pub started_ns: AtomicU64,
    /// Sampling rounds run.
    pub rounds: AtomicU64,
    /// Time spent sampling (reading files and storing), ns.
    pub sampling_ns: AtomicU64,
    /// When the last sample was stored (it survives the death of the process; a power loss, once
    /// a safe point covers it), ns since the epoch.
    pub last_write_ns: AtomicU64,
    /// Scrapes answered.
    pub scrapes: AtomicU64,
    /// Time spent answering scrapes, ns.
    pub scrape_ns: AtomicU64,
    /// The previous scrape's duration, ns.
    pub last_scrape_ns: AtomicU64,
    /// Samples removed by retention.
    pub trimmed: AtomicU64,
    /// Background power-safe points that failed (each logged).
    pub safe_point_failures: AtomicU64,
    /// Per logical set.
    pub sets: Mutex<BTreeMap<String, SetStats>>,
    /// The remote-write sender's, if there is one.
    pub remote: Mutex<Option<RemoteStats>>,
}

/// What the daemon counts about one logical set.
#[derive(Debug, Default, Clone)]
pub struct SetStats {
    /// Samples stored.
    pub stored: u64,
    /// Rounds skipped (file missing or unparseable).
    pub skipped: u64,
    /// The last sample's reading and storing time, ns.
    pub last_duration_ns: u64,
    /// The schema version in use.
    pub version: u32,
    /// Why the set was skipped last, while it is (logged once, not every round).
    pub failing: Option<String>,
}

/// What the remote-write sender counts.
#[derive(Debug, Default, Clone)]
pub struct RemoteStats {
    /// The receiver's URL.
    pub url: String,
    /// Samples (series values) the receiver accepted.
    pub sent: u64,
    /// Samples the receiver refused for good (4xx), and so were not sent again.
    pub rejected: u64,
    /// Requests that failed and were tried again.
    pub retries: u64,
    /// Requests sent.
    pub requests: u64,
    /// The oldest stored sample not yet sent, ns since the epoch (0: none).
    pub oldest_unsent_ns: u64,
}

/// How the daemon names and labels what it exposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    /// The prefix of the families of `/proc` (`node`).
    pub prefix: String,
    /// How meminfo's fields are spelled.
    pub names: Names,
}

impl Default for Naming {
    fn default() -> Self {
        Naming { prefix: "node".into(), names: Names::NodeExporter }
    }
}

/// One family with its samples: label pairs and value.
#[derive(Debug, Clone)]
struct Exposed {
    family: Family,
    /// A `petra_mon_` family (no prefix of its own).
    own: bool,
    samples: Vec<(Vec<(String, String)>, f64)>,
}

/// A page's families, by name: the collector `prometheus-client` encodes.
#[derive(Debug, Default)]
struct Page {
    families: BTreeMap<String, Exposed>,
    prefix: String,
}

impl Page {
    fn add(&mut self, family: Family, own: bool, labels: Vec<(String, String)>, value: f64) {
        let name = if own { family.name("") } else { family.name(&self.prefix) };
        self.families
            .entry(name)
            .or_insert_with(|| Exposed { family, own, samples: Vec::new() })
            .samples
            .push((labels, value));
    }

    fn own(&mut self, stem: &str, unit: Option<Unit>, kind: Kind, help: &str, labels: Vec<(String, String)>, v: f64) {
        let family = Family { stem: format!("petra_mon_{stem}"), unit, kind, help: help.into() };
        self.add(family, true, labels, v);
    }
}

impl Collector for Page {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for e in self.families.values() {
            let stem = if e.own || self.prefix.is_empty() {
                e.family.stem.clone()
            } else {
                format!("{}_{}", self.prefix, e.family.stem)
            };
            let unit = e.family.unit.map(|u| match u {
                Unit::Bytes => PcUnit::Bytes,
                Unit::Seconds => PcUnit::Seconds,
            });
            let kind = match e.family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Untyped => MetricType::Unknown,
            };
            let mut family = encoder.encode_descriptor(&stem, &e.family.help, unit.as_ref(), kind)?;
            for (labels, value) in &e.samples {
                let mut m = family.encode_family(labels)?;
                match e.family.kind {
                    Kind::Counter => m.encode_counter::<NoLabelSet, _, f64>(value, None)?,
                    Kind::Gauge | Kind::Untyped => m.encode_gauge(value)?,
                }
            }
        }
        Ok(())
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The `/metrics` page of `store` in `format`: the latest sample of every logical set, and,
/// given `stats`, the daemon's own metrics.
pub fn page<M: PMem + 'static>(
    store: &MetricStore<M>,
    session: &mut MetricSession<'_, M>,
    naming: &Naming,
    stats: Option<&Stats>,
    format: Format,
) -> Result<String, MonError> {
    let now = now_ns();
    let mut page = Page { prefix: naming.prefix.clone(), ..Page::default() };
    for set in sets::logical_sets(store)? {
        let Some((version, sample)) = set.latest(session)? else { continue };
        let stale_after = version.info.interval_ns.saturating_mul(3).max(2_000_000_000);
        if version.info.interval_ns > 0 && now.saturating_sub(sample.timestamp) > stale_after {
            continue;
        }
        let producer = version.info.producer.as_str();
        let mut job = None;
        let mut component = None;
        for (m, v) in version.schema.metrics.iter().zip(&sample.values) {
            match m.name.as_str() {
                "job_id" => job = v.as_f64(),
                "component_id" => component = v.as_f64(),
                _ => {}
            }
            let (Some(series), Some(x)) = (families::describe(&set.sampler, &m.name, naming.names), v.as_f64()) else {
                continue;
            };
            let mut l = Vec::with_capacity(series.labels.len() + 1);
            l.extend(series.labels.into_iter().map(|(k, v)| (k.to_owned(), v)));
            l.push(("producer".to_owned(), producer.to_owned()));
            page.add(series.family, false, l, series.scale.apply(x));
        }
        let id = |x: Option<f64>| x.map_or_else(|| "".to_owned(), |x| format!("{x}"));
        let info = [
            ("set", set.name.as_str()),
            ("producer", producer),
            ("schema", version.info.schema.as_str()),
            ("component_id", &id(component.or(Some(version.info.component_id as f64)))),
            ("job_id", &id(job.or(Some(version.info.job_id as f64)))),
        ];
        page.own(
            "set_info",
            None,
            Kind::Gauge,
            "The sets served, with their schema version, component and job.",
            labels(&info),
            1.0,
        );
        page.own(
            "set_last_sample_timestamp",
            Some(Unit::Seconds),
            Kind::Gauge,
            "When the set's latest sample was taken, Unix time.",
            labels(&[("set", &set.name)]),
            secs(sample.timestamp),
        );
    }
    if let Some(stats) = stats {
        own_metrics(&mut page, store, stats, now);
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(page));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).map_err(|_| MonError::Encode)?;
    Ok(match format {
        Format::OpenMetrics => text,
        Format::Classic => classic(&text),
    })
}

fn own_metrics<M: PMem + 'static>(page: &mut Page, store: &MetricStore<M>, stats: &Stats, now: u64) {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let pool = store.engine().pool();
    let chunk = pool.header().layout.chunk_size;
    let free = pool.max_len().saturating_sub(pool.len()) + pool.chunk_counts().free * chunk;
    let g = Kind::Gauge;
    let c = Kind::Counter;
    let (s, b) = (Some(Unit::Seconds), Some(Unit::Bytes));
    let none = Vec::new;
    page.own("build_info", None, g, "The daemon's version.", labels(&[("version", env!("CARGO_PKG_VERSION"))]), 1.0);
    page.own("start_time", s, g, "When the daemon started, Unix time.", none(), secs(load(&stats.started_ns)));
    page.own("rounds", None, c, "Sampling rounds run.", none(), load(&stats.rounds) as f64);
    page.own(
        "sampling",
        s,
        c,
        "Seconds spent reading files and storing samples.",
        none(),
        secs(load(&stats.sampling_ns)),
    );
    page.own("scrapes", None, c, "Scrapes of this page answered before this one.", none(), load(&stats.scrapes) as f64);
    page.own("scrape", s, c, "Seconds spent answering scrapes before this one.", none(), secs(load(&stats.scrape_ns)));
    page.own(
        "last_scrape_duration",
        s,
        g,
        "How long the scrape before this one took.",
        none(),
        secs(load(&stats.last_scrape_ns)),
    );
    let last = load(&stats.last_write_ns);
    if last > 0 {
        let help = "Seconds since the last sample was stored (it survives the death of the process).";
        page.own("last_write_age", s, g, help, none(), secs(now.saturating_sub(last)));
    }
    if let Some(at) = store.last_safe_point() {
        let help = "Seconds since the last power-safe point: what was stored before it survives a power loss.";
        page.own("last_safe_point_age", s, g, help, none(), at.elapsed().as_secs_f64());
    }
    let made = store.safe_points() as f64;
    page.own("safe_points", None, c, "Power-safe points the store made since the daemon started.", none(), made);
    let failed = load(&stats.safe_point_failures) as f64;
    let help =
        "Power-safe points that failed (each logged): until one succeeds, samples since the last are not power-safe.";
    page.own("safe_point_failures", None, c, help, none(), failed);
    page.own("store_file", b, g, "Bytes the store's file takes now.", none(), pool.len() as f64);
    page.own("store_max", b, g, "Bytes the store's file may grow to.", none(), pool.max_len() as f64);
    page.own("store_free", b, g, "Bytes the store can still take: room to grow and free chunks.", none(), free as f64);
    let rounds = store.engine().checkpoint_stats().rounds;
    page.own("checkpoint_rounds", None, c, "Checkpoint rounds the store ran.", none(), rounds as f64);
    page.own("trimmed_samples", None, c, "Samples retention removed.", none(), load(&stats.trimmed) as f64);
    for (set, st) in stats.sets.lock().iter() {
        let l = || labels(&[("set", set)]);
        page.own("samples_stored", None, c, "Samples stored, by set.", l(), st.stored as f64);
        page.own(
            "samples_skipped",
            None,
            c,
            "Rounds a set was skipped: its file missing or unparseable.",
            l(),
            st.skipped as f64,
        );
        page.own(
            "sample_duration",
            s,
            g,
            "How long reading and storing the set's last sample took.",
            l(),
            secs(st.last_duration_ns),
        );
        page.own("schema_version", None, g, "The set's schema version in use.", l(), st.version as f64);
    }
    if let Some(r) = stats.remote.lock().as_ref() {
        let l = || labels(&[("url", &r.url)]);
        page.own("remote_write_samples", None, c, "Samples the receiver accepted.", l(), r.sent as f64);
        page.own(
            "remote_write_rejected_samples",
            None,
            c,
            "Samples the receiver refused for good.",
            l(),
            r.rejected as f64,
        );
        page.own("remote_write_requests", None, c, "Requests sent to the receiver.", l(), r.requests as f64);
        page.own("remote_write_retries", None, c, "Requests that failed and were tried again.", l(), r.retries as f64);
        let lag = if r.oldest_unsent_ns == 0 { 0.0 } else { secs(now.saturating_sub(r.oldest_unsent_ns)) };
        page.own("remote_write_lag", s, g, "Age of the oldest stored sample not yet sent.", l(), lag);
    }
}

/// Records one scrape that took `took`.
pub fn count_scrape(stats: &Stats, took: Duration) {
    let ns = took.as_nanos() as u64;
    stats.scrapes.fetch_add(1, Ordering::Relaxed);
    stats.scrape_ns.fetch_add(ns, Ordering::Relaxed);
    stats.last_scrape_ns.store(ns, Ordering::Relaxed);
}

/// An OpenMetrics page from `prometheus-client` in the classic text format: a counter family's
/// HELP and TYPE name its samples (`_total`), `unknown` is `untyped`, and the UNIT lines and the
/// EOF go (the classic format has neither). Help texts here need no escaping in either format,
/// and labels are escaped alike in both.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "unknown" => (name.to_owned(), "untyped"),
                k => (name.to_owned(), k),
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_header_chooses_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Classic);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Classic);
        assert_eq!(Format::negotiate(Some("text/plain;version=0.0.4")), Format::Classic);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0.2, text/plain")), Format::Classic);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0")), Format::Classic);
    }

    #[test]
    fn the_classic_page_names_counters_by_their_samples() {
        let om = "# HELP node_cpu_seconds Seconds the CPUs spent in each mode.\n# TYPE node_cpu_seconds counter\n\
                  # UNIT node_cpu_seconds seconds\nnode_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 1.5\n\
                  # HELP node_vmstat_pgfault The field pgfault of /proc/vmstat.\n# TYPE node_vmstat_pgfault unknown\n\
                  node_vmstat_pgfault 7\n# EOF\n";
        assert_eq!(
            classic(om),
            "# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n# TYPE node_cpu_seconds_total counter\n\
             node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 1.5\n\
             # HELP node_vmstat_pgfault The field pgfault of /proc/vmstat.\n# TYPE node_vmstat_pgfault untyped\n\
             node_vmstat_pgfault 7\n"
        );
    }
}

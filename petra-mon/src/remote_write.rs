//! Remote write: the daemon pushes what it stores to a Prometheus remote-write receiver
//! (Prometheus with `--web.enable-remote-write-receiver`, Mimir, Thanos Receive,
//! VictoriaMetrics), as protocol 1.0 says: a POST of a snappy-compressed (block format)
//! protobuf `WriteRequest`, each series its labels (`__name__` among them, sorted by name) and
//! its samples (value, milliseconds since the epoch) in time order.
//!
//! # Nothing lost, nothing twice
//! The store is the buffer. The sender's position, each set's newest sample the receiver has,
//! is a cursor kept durably in the store ([`MetricStore::set_cursor`]), under the name
//! `remote_write <url>`. A batch is every stored sample after the position up to a time (so that
//! a series shared by two schema versions is sent in time order); before it is sent, its end is
//! written into the cursor as *pending*, and once the receiver has it the position moves to that
//! end. After a crash, a pending batch is sent again exactly as it was: the receiver either
//! lacks it and takes it, or has it already and refuses it (Prometheus refuses samples older
//! than a series' newest, all of the request or none), and either way holds it once. A receiver
//! that is down or failing (5xx, 429, no answer) gets the same batch again after a pause that
//! doubles from 100 ms up to `max_backoff`, indefinitely: every attempt is logged, and nothing is
//! dropped. A receiver that refuses a batch for good (another 4xx) has the refusal logged and
//! counted, and the sender goes on after it, as the protocol asks.
//!
//! The messages are written out here (`prost`'s derive, so no `protoc` at build time) after
//! Prometheus's `prompb/remote.proto` and `prompb/types.proto`: only the fields this sender
//! sets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::sampling::now_ns;

use petra::mem::PMem;
use petra_kv::{MetricStore, Sample, SetId};
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::MonError;
use crate::expose::{Naming, RemoteStats, Stats};
use crate::families;
use crate::sets::{self, Version};

/// `prometheus.WriteRequest` (remote.proto): field 1, the series.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// The series.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries` (types.proto): labels (1) and samples (2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Sorted by name; `__name__` is the metric's name.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// In time order.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<PromSample>,
}

/// `prometheus.Label` (types.proto).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Label {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample` (types.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromSample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// How the sender runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The receiver's URL (`http://host:9090/api/v1/write`).
    pub url: String,
    /// Labels added to every series (`instance` and `job`, say), besides the set's `producer`.
    pub labels: BTreeMap<String, String>,
    /// A new cursor starts with samples this old at most.
    pub backfill: Duration,
    /// Stored samples (set readings) per request at most.
    pub max_rows: usize,
    /// How often to look for new samples.
    pub interval: Duration,
    /// The longest pause between attempts.
    pub max_backoff: Duration,
    /// How long one request may take.
    pub timeout: Duration,
}

impl Settings {
    /// Defaults for `url`.
    pub fn new(url: &str) -> Settings {
        Settings {
            url: url.to_owned(),
            labels: BTreeMap::new(),
            backfill: Duration::from_secs(3600),
            max_rows: 500,
            interval: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
        }
    }

    /// The name of this receiver's cursor in the store.
    pub fn cursor_name(&self) -> String {
        format!("remote_write {}", self.url)
    }
}

/// The sender's durable position.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// Samples before this time (ns) were never to be sent (the cursor's start).
    pub since: u64,
    /// Each set's newest sample the receiver has (ns), by set name.
    pub acked: BTreeMap<String, u64>,
    /// The ends of a batch sent and not yet known to have arrived.
    pub pending: Option<BTreeMap<String, u64>>,
}

impl Position {
    /// The position in `store` of the sender of `settings`, a new one if there is none.
    pub fn load<M: PMem + 'static>(store: &MetricStore<M>, settings: &Settings) -> Result<Position, MonError> {
        match store.cursor(&settings.cursor_name())? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| MonError::Config(format!("the cursor of {} is not readable: {e}", settings.url))),
            None => {
                let now = now_ns();
                Ok(Position { since: now.saturating_sub(settings.backfill.as_nanos() as u64), ..Position::default() })
            }
        }
    }

    /// Writes the position into the store, durably.
    pub fn save<M: PMem + 'static>(&self, store: &MetricStore<M>, settings: &Settings) -> Result<(), MonError> {
        let bytes = serde_json::to_vec(self).expect("a position is JSON");
        Ok(store.set_cursor(&settings.cursor_name(), &bytes)?)
    }

    /// Samples of `set` after this time (ns) are unsent.
    fn after(&self, set: &str) -> u64 {
        self.acked.get(set).copied().unwrap_or_else(|| self.since.saturating_sub(1))
    }
}

/// A batch: the request and where it leaves each set.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The request.
    pub request: WriteRequest,
    /// Each set's newest sample in it (ns).
    pub ends: BTreeMap<String, u64>,
    /// Values (series samples) in it.
    pub values: usize,
    /// The oldest sample in it (ns).
    pub oldest: u64,
}

/// The next batch after `position`: exactly its pending one if it has one, else the oldest
/// unsent samples of every set up to a time that keeps it within `max_rows` readings. `None` if
/// nothing is unsent.
pub fn next_batch<M: PMem + 'static>(
    store: &MetricStore<M>,
    naming: &Naming,
    settings: &Settings,
    position: &Position,
) -> Result<Option<Batch>, MonError> {
    let mut session = store.session()?;
    let logical = sets::logical_sets(store)?;
    let versions: Vec<(&str, &Version)> =
        logical.iter().flat_map(|l| l.versions.iter().map(move |v| (l.sampler.as_str(), v))).collect();
    // Each set's unsent samples: up to its pending end, or its first max_rows.
    let mut rows: Vec<(&str, &Version, Sample)> = Vec::new();
    for &(sampler, v) in &versions {
        let set = v.info.instance.as_str();
        let from = position.after(set).saturating_add(1);
        let (to, limit) = match &position.pending {
            Some(p) => match p.get(set) {
                Some(&end) => (end, usize::MAX),
                None => continue,
            },
            None => (u64::MAX, settings.max_rows),
        };
        let mut n = 0;
        session.scan(v.id, from, to, |s| {
            rows.push((sampler, v, s));
            n += 1;
            if n >= limit { std::ops::ControlFlow::Break(()) } else { std::ops::ControlFlow::Continue(()) }
        })?;
    }
    if rows.is_empty() {
        return Ok(None);
    }
    rows.sort_by_key(|r| r.2.timestamp);
    if position.pending.is_none() && rows.len() > settings.max_rows {
        // Up to the time of the max_rows-th reading: every set's readings until then were
        // scanned (each set scanned max_rows of its own).
        let horizon = rows[settings.max_rows - 1].2.timestamp;
        rows.retain(|r| r.2.timestamp <= horizon);
    }
    let mut series: BTreeMap<Vec<Label>, Vec<PromSample>> = BTreeMap::new();
    let mut ends = BTreeMap::new();
    let mut values = 0;
    let oldest = rows[0].2.timestamp;
    for (sampler, v, s) in &rows {
        ends.insert(v.info.instance.clone(), s.timestamp);
        let ms = (s.timestamp / 1_000_000) as i64;
        for (m, value) in v.schema.metrics.iter().zip(&s.values) {
            let (Some(d), Some(x)) = (families::describe(sampler, &m.name, naming.names), value.as_f64()) else {
                continue;
            };
            let mut labels: Vec<Label> = Vec::with_capacity(d.labels.len() + settings.labels.len() + 2);
            labels.push(Label { name: "__name__".into(), value: d.family.sample_name(&naming.prefix) });
            labels.push(Label { name: "producer".into(), value: v.info.producer.clone() });
            labels.extend(d.labels.into_iter().map(|(k, v)| Label { name: k.into(), value: v }));
            for (k, val) in &settings.labels {
                if !labels.iter().any(|l| l.name == *k) {
                    labels.push(Label { name: k.clone(), value: val.clone() });
                }
            }
            labels.sort_by(|a, b| a.name.cmp(&b.name));
            let samples = series.entry(labels).or_default();
            // Two readings in one millisecond would be one sample with two values: keep the first.
            if samples.last().is_some_and(|p| p.timestamp >= ms) {
                continue;
            }
            samples.push(PromSample { value: d.scale.apply(x), timestamp: ms });
            values += 1;
        }
    }
    let timeseries = series.into_iter().map(|(labels, samples)| TimeSeries { labels, samples }).collect();
    Ok(Some(Batch { request: WriteRequest { timeseries }, ends, values, oldest }))
}

/// What a receiver said to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It has the samples.
    Accepted,
    /// It refused them for good (4xx but 429): do not send them again.
    Refused(String),
    /// It could not take them now (5xx, 429, no answer): send them again later.
    Failed(String),
}

/// Sends `request` to the receiver once.
pub fn send(agent: &ureq::Agent, settings: &Settings, request: &WriteRequest) -> Outcome {
    let body = snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .expect("a request of less than 4 GiB compresses");
    let response = agent
        .post(&settings.url)
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .header("User-Agent", concat!("petra-mon/", env!("CARGO_PKG_VERSION")))
        .send(&body[..]);
    let mut response = match response {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Outcome::Accepted;
    }
    let text = response.body_mut().with_config().limit(4096).read_to_string().unwrap_or_default();
    let why = format!("{status}: {}", text.trim());
    if (400..500).contains(&status) && status != 429 { Outcome::Refused(why) } else { Outcome::Failed(why) }
}

/// An agent for the receiver: statuses as values, the settings' timeout.
pub fn agent(settings: &Settings) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(settings.timeout)).build().into()
}

/// Sleeps `d`, in short steps, unless `stop` is set; whether it slept it all.
fn pause(d: Duration, stop: &AtomicBool) -> bool {
    let end = Instant::now() + d;
    // Relaxed: a flag; nothing is published through it.
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
    false
}

/// Pushes the store to the receiver until `stop`, then sends what is left for at most `drain`
/// (nothing is lost if that fails: the next start sends it).
pub fn run<M: PMem + 'static>(
    store: &MetricStore<M>,
    naming: &Naming,
    settings: &Settings,
    stats: &Stats,
    stop: &AtomicBool,
    drain: Duration,
) -> Result<(), MonError> {
    let agent = agent(settings);
    let mut position = Position::load(store, settings)?;
    let mut resent = position.pending.is_some();
    if resent {
        tracing::info!(url = %settings.url, "resending the batch that was in flight when the daemon stopped");
    }
    *stats.remote.lock() = Some(RemoteStats { url: settings.url.clone(), ..RemoteStats::default() });
    let update = |f: &mut dyn FnMut(&mut RemoteStats)| {
        if let Some(r) = stats.remote.lock().as_mut() {
            f(r)
        }
    };
    let never = AtomicBool::new(false);
    let mut deadline: Option<Instant> = None;
    loop {
        if deadline.is_none() && stop.load(Ordering::Relaxed) {
            deadline = Some(Instant::now() + drain);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(());
        }
        let Some(batch) = next_batch(store, naming, settings, &position)? else {
            update(&mut |r| r.oldest_unsent_ns = 0);
            if deadline.is_some() {
                return Ok(());
            }
            pause(settings.interval, stop);
            continue;
        };
        update(&mut |r| r.oldest_unsent_ns = batch.oldest);
        if position.pending.is_none() {
            position.pending = Some(batch.ends.clone());
            position.save(store, settings)?;
        }
        let mut backoff = Duration::from_millis(100);
        let mut failures = 0u32;
        loop {
            update(&mut |r| r.requests += 1);
            match send(&agent, settings, &batch.request) {
                Outcome::Accepted => {
                    if failures > 0 {
                        tracing::info!(url = %settings.url, failures, "the receiver took the batch again");
                    }
                    update(&mut |r| r.sent += batch.values as u64);
                    break;
                }
                Outcome::Refused(why) => {
                    if resent {
                        tracing::info!(url = %settings.url, %why, samples = batch.values,
                            "the receiver refused the batch sent before the restart: it has it already");
                    } else {
                        tracing::error!(url = %settings.url, %why, samples = batch.values,
                            "the receiver refused a batch for good; going on after it");
                        update(&mut |r| r.rejected += batch.values as u64);
                    }
                    break;
                }
                Outcome::Failed(why) => {
                    failures += 1;
                    update(&mut |r| r.retries += 1);
                    tracing::warn!(url = %settings.url, %why, attempt = failures, retry_in = ?backoff,
                        samples = batch.values, "remote write failed; the samples stay in the store");
                    // While draining, one try only: the next start sends the rest.
                    let stopping = if deadline.is_some() { &never } else { stop };
                    if deadline.is_some() || !pause(backoff, stopping) {
                        return Ok(());
                    }
                    backoff = (backoff * 2).min(settings.max_backoff);
                }
            }
        }
        resent = false;
        for (set, end) in batch.ends {
            position.acked.insert(set, end);
        }
        position.pending = None;
        position.save(store, settings)?;
    }
}

/// The set ids whose samples up to a time the receiver has: what retention may remove, by set.
pub fn sent_up_to<M: PMem + 'static>(
    store: &MetricStore<M>,
    settings: &Settings,
) -> Result<BTreeMap<SetId, u64>, MonError> {
    let position = Position::load(store, settings)?;
    Ok(store.sets().into_iter().map(|(id, info)| (id, position.after(&info.instance))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_the_protocols_bytes() {
        let r = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label { name: "__name__".into(), value: "up".into() }],
                samples: vec![PromSample { value: 1.0, timestamp: 5 }],
            }],
        };
        // Field 1 (series), in it field 1 (a label: 1 name, 2 value) and field 2 (a sample: 1 a
        // double, 2 a varint).
        let bytes = r.encode_to_vec();
        assert_eq!(
            bytes,
            [
                0x0a, 0x1d, 0x0a, 0x0e, 0x0a, 0x08, b'_', b'_', b'n', b'a', b'm', b'e', b'_', b'_', 0x12, 0x02, b'u',
                b'p', 0x12, 0x0b, 0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x10, 0x05
            ]
        );
        assert_eq!(WriteRequest::decode(&bytes[..]).unwrap(), r);
    }

    #[test]
    fn a_position_reads_back() {
        let mut p = Position { since: 7, ..Position::default() };
        assert_eq!(p.after("a"), 6);
        p.acked.insert("a".into(), 10);
        p.pending = Some([("a".to_string(), 20)].into());
        let back: Position = serde_json::from_slice(&serde_json::to_vec(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.after("a"), 10);
    }
}

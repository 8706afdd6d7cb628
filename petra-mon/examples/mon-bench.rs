//! Measurements of petra-mon (docs/petra-mon.md gives the commands and the results):
//!
//! - `scrape --producers P --samplers LIST`: the time to make the /metrics page of a store of
//!   P producers' sets of this machine's /proc, in both formats;
//! - `fill --minutes M --interval-ms I --store FILE`: a store of one producer's five sets holding M
//!   minutes of samples every I ms, ending now (this machine's /proc, read at every step);
//! - `push --store FILE --url URL`: the remote-write sender catching up from a new cursor: every
//!   sample of the store sent to the receiver, timed.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use clap::Parser;
use petra_kv::{Config, Metric, MetricStore, Sample, Scalar, Schema, SetInfo, Value};
use petra_mon::expose::{self, Format, Naming, Stats};
use petra_mon::{SAMPLERS, now_ns, proc, remote_write};

#[derive(Debug, Parser)]
enum Bench {
    /// Time the /metrics page.
    Scrape {
        #[arg(long, default_value_t = 1)]
        producers: usize,
        #[arg(long, value_delimiter = ',', default_values_t = SAMPLERS.map(String::from))]
        samplers: Vec<String>,
        #[arg(long, default_value_t = 200)]
        iterations: usize,
    },
    /// Make a store of past samples.
    Fill {
        #[arg(long)]
        store: PathBuf,
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
    },
    /// Push a store to a remote-write receiver, timed.
    Push {
        #[arg(long)]
        store: PathBuf,
        #[arg(long)]
        url: String,
    },
}

fn read(sampler: &str) -> proc::Reading {
    proc::parse(sampler, &std::fs::read_to_string(format!("/proc/{sampler}")).unwrap()).unwrap()
}

/// Declares `<producer>/<sampler>` with the schema of this machine's reading, as the daemon does.
fn declare(store: &MetricStore, producer: &str, sampler: &str, interval_ns: u64) -> (petra_kv::SetId, Schema) {
    let mut metrics = vec![Metric::meta("component_id", Scalar::U64), Metric::data("job_id", Scalar::U64)];
    metrics.extend(read(sampler).into_iter().map(|(n, s, _)| Metric::data(&n, s)));
    let schema = Schema { name: sampler.to_owned(), metrics };
    store.add_schema(&schema).unwrap();
    let info = SetInfo {
        instance: format!("{producer}/{sampler}"),
        schema: sampler.to_owned(),
        producer: producer.to_owned(),
        component_id: 1,
        job_id: 0,
        interval_ns,
    };
    (store.add_set(&info).unwrap(), schema)
}

fn sample(schema: &Schema, sampler: &str, timestamp: u64, generation: u64) -> Sample {
    let mut values = vec![Value::U(1), Value::U(0)];
    let reading = read(sampler);
    assert_eq!(reading.len() + 2, schema.metrics.len(), "{sampler} changed its metrics meanwhile");
    values.extend(reading.into_iter().map(|r| r.2));
    Sample { timestamp, duration: 0, generation, consistent: true, values }
}

fn main() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    match Bench::parse() {
        Bench::Scrape { producers, samplers, iterations } => {
            let store = MetricStore::open(&Config::new(dir.path().join("s.pool"))).unwrap();
            let mut s = store.session().unwrap();
            for p in 0..producers {
                for name in &samplers {
                    let (id, schema) = declare(&store, &format!("node{p}"), name, 10_000_000_000);
                    s.store_sample(id, &sample(&schema, name, now_ns(), 1)).unwrap();
                }
            }
            let naming = Naming::default();
            let stats = Stats::default();
            for format in [Format::Classic, Format::OpenMetrics] {
                let page = expose::page(&store, &mut s, &naming, Some(&stats), format).unwrap();
                let series = page.lines().filter(|l| !l.starts_with('#')).count();
                let mut times: Vec<Duration> = (0..iterations)
                    .map(|_| {
                        let t = Instant::now();
                        std::hint::black_box(expose::page(&store, &mut s, &naming, Some(&stats), format).unwrap());
                        t.elapsed()
                    })
                    .collect();
                times.sort();
                println!(
                    "{format:?}: {} sets, {series} series, {} bytes: median {:?}, p90 {:?} per page",
                    producers * samplers.len(),
                    page.len(),
                    times[iterations / 2],
                    times[iterations * 9 / 10]
                );
            }
            drop(s);
            store.close().unwrap();
        }
        Bench::Fill { store: path, minutes, interval_ms } => {
            let store = MetricStore::open(&Config { max_size: 8 << 30, ..Config::new(&path) }).unwrap();
            let mut s = store.session().unwrap();
            let interval = interval_ms * 1_000_000;
            let sets: Vec<_> = SAMPLERS.iter().map(|name| (name, declare(&store, "node0", name, interval))).collect();
            let rounds = minutes * 60_000 / interval_ms;
            let start = now_ns() - rounds * interval;
            let t = Instant::now();
            for r in 0..rounds {
                for (name, (id, schema)) in &sets {
                    s.store_sample(*id, &sample(schema, name, start + r * interval, r + 1)).unwrap();
                }
            }
            println!("{rounds} rounds of {} sets stored in {:?}", sets.len(), t.elapsed());
            drop(s);
            store.close().unwrap();
        }
        Bench::Push { store: path, url } => {
            let store = MetricStore::open(&Config::new(&path)).unwrap();
            let mut settings = remote_write::Settings::new(&url);
            settings.labels.insert("job".into(), "petra-mon".into());
            settings.labels.insert("instance".into(), "node0".into());
            let stats = Stats::default();
            let stop = AtomicBool::new(true);
            let t = Instant::now();
            remote_write::run(&store, &Naming::default(), &settings, &stats, &stop, Duration::from_secs(3600)).unwrap();
            let took = t.elapsed();
            let r = stats.remote.lock().clone().unwrap();
            println!(
                "{} samples in {} requests ({} retries) in {took:?}: {:.0} samples/s",
                r.sent,
                r.requests,
                r.retries,
                r.sent as f64 / took.as_secs_f64()
            );
            store.close().unwrap();
        }
    }
}

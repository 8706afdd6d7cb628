//! `petra-ls`: lists the sets of a metric store with their metadata and latest values, prints a
//! set's history and window statistics, as a table or JSON. See `petra-ls --help`.

use std::path::PathBuf;

use clap::Parser;
use petra_kv::{Config, CreateMode, MetricStore, Sample, SetId, SetInfo, Value};
use serde_json::json;

/// Lists the metric sets of a PETRA metric store (in the spirit of ldms_ls): every set with its
/// schema, producer, component, job and latest sample; with --set, one set's latest values, its
/// history (--history) or window statistics (--window).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The metric store's pool file.
    store: PathBuf,
    /// Only this set (`<producer>/<sampler>`).
    #[arg(long)]
    set: Option<String>,
    /// Print the set's samples from the last SECONDS (with --set).
    #[arg(long, value_name = "SECONDS")]
    history: Option<u64>,
    /// Print minimum, maximum, mean and rate per data metric over the last SECONDS (with --set).
    #[arg(long, value_name = "SECONDS")]
    window: Option<u64>,
    /// Print the metric values of the latest sample (with --set, or for every set).
    #[arg(long, short)]
    verbose: bool,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("petra-ls: {e}");
        std::process::exit(1);
    }
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::U(x) => x.to_string(),
        Value::S(x) => x.to_string(),
        Value::F(x) => x.to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(fmt_value).collect::<Vec<_>>().join(", ")),
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if (args.history.is_some() || args.window.is_some()) && args.set.is_none() {
        return Err("--history and --window need --set".into());
    }
    let store = MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(&args.store) })?;
    {
        let mut s = store.session()?;
        let sets: Vec<(SetId, SetInfo)> = match &args.set {
            Some(name) => {
                let id = store.set_id(name).ok_or_else(|| format!("no set named {name}"))?;
                store.sets().into_iter().filter(|(i, _)| *i == id).collect()
            }
            None => store.sets(),
        };
        let mut out = Vec::new();
        for (id, info) in &sets {
            let schema = store.schema(&info.schema).ok_or("a set names a missing schema")?;
            let latest = s.latest(*id)?;
            let names: Vec<&str> = schema.metrics.iter().map(|m| m.name.as_str()).collect();
            let latest_ts = latest.as_ref().map_or(0, |x| x.timestamp);
            let history: Option<Vec<Sample>> = args
                .history
                .map(|secs| s.range(*id, latest_ts.saturating_sub(secs * 1_000_000_000), latest_ts))
                .transpose()?;
            let window = args
                .window
                .map(|secs| s.window(*id, latest_ts.saturating_sub(secs * 1_000_000_000), latest_ts))
                .transpose()?;
            if args.json {
                let values = |x: &Sample| -> serde_json::Value {
                    names
                        .iter()
                        .zip(&x.values)
                        .map(|(n, v)| (n.to_string(), serde_json::to_value(v).unwrap()))
                        .collect()
                };
                let mut set = json!({
                    "instance": info.instance, "schema": info.schema, "producer": info.producer,
                    "component_id": info.component_id, "job_id": info.job_id, "interval_ns": info.interval_ns,
                    "latest": latest.as_ref().map(|x| json!({
                        "timestamp_ns": x.timestamp, "duration_ns": x.duration, "generation": x.generation,
                        "consistent": x.consistent, "values": values(x),
                    })),
                });
                if let Some(h) = &history {
                    set["history"] = h
                        .iter()
                        .map(|x| json!({"timestamp_ns": x.timestamp, "generation": x.generation, "values": values(x)}))
                        .collect();
                }
                if let Some(w) = &window {
                    set["window"] = serde_json::to_value(w)?;
                }
                out.push(set);
                continue;
            }
            let when = latest.as_ref().map_or("no sample".to_string(), |x| {
                format!(
                    "generation {} at {}.{:09} s{}",
                    x.generation,
                    x.timestamp / 1_000_000_000,
                    x.timestamp % 1_000_000_000,
                    if x.consistent { "" } else { " (inconsistent)" }
                )
            });
            println!(
                "{}: schema {}, producer {}, component {}, job {}, {} metrics, {when}",
                info.instance,
                info.schema,
                info.producer,
                info.component_id,
                info.job_id,
                names.len()
            );
            if let Some(x) = latest.as_ref().filter(|_| args.verbose || args.set.is_some()) {
                for (m, v) in schema.metrics.iter().zip(&x.values) {
                    println!("  {:<6} {:<32} {}", if m.meta { "meta" } else { "data" }, m.name, fmt_value(v));
                }
            }
            if let Some(h) = &history {
                println!("  {:>20} {:>12}  values", "timestamp (ns)", "generation");
                for x in h {
                    let vals: Vec<String> = x.values.iter().map(fmt_value).collect();
                    println!("  {:>20} {:>12}  {}", x.timestamp, x.generation, vals.join(" "));
                }
            }
            if let Some(w) = &window {
                println!(
                    "  {:<32} {:>8} {:>16} {:>16} {:>16} {:>14}",
                    "metric", "samples", "min", "max", "avg", "rate/s"
                );
                for st in w {
                    let rate = st.rate.map_or("-".into(), |r| format!("{r:.3}"));
                    println!(
                        "  {:<32} {:>8} {:>16} {:>16} {:>16.3} {:>14}",
                        st.metric, st.samples, st.min, st.max, st.avg, rate
                    );
                }
            }
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
    }
    store.close()?;
    Ok(())
}

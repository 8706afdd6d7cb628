//! `petra-mon`: samples this machine's `/proc` into a metric store at an interval and serves the
//! latest values as OpenMetrics text over HTTP. See `petra-mon --help`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use petra_kv::{Config, MetricStore};
use petra_mon::listing::{Query, listing};
use petra_mon::{MonError, Producer, SAMPLERS};

/// Samples /proc (meminfo, vmstat, loadavg, stat, diskstats) into a PETRA metric store, durably:
/// after a crash or SIGKILL it starts again where its last stored sample left off. SIGTERM or
/// SIGINT stop it cleanly (the store is closed and marked clean). With --listen it serves the
/// latest values at /metrics in the OpenMetrics text format, for Prometheus to scrape, and
/// petra-ls's listings at /ls (`petra-ls --from ADDR`), since the store's file is its alone.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The metric store's pool file (created if missing).
    #[arg(long, default_value = "petra-mon.pool")]
    store: PathBuf,
    /// Sampling interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Samplers, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = SAMPLERS.map(String::from))]
    samplers: Vec<String>,
    /// Producer name (default: the host name): sets are named `<producer>/<sampler>`.
    #[arg(long)]
    producer: Option<String>,
    /// Component id of this machine.
    #[arg(long, default_value_t = 0)]
    component_id: u64,
    /// Job id (0: none).
    #[arg(long, default_value_t = 0)]
    job_id: u64,
    /// Keep at most this many samples per set (older ones are removed every 100 rounds).
    #[arg(long)]
    keep: Option<usize>,
    /// Stop after this many rounds (default: run until SIGTERM or SIGINT).
    #[arg(long)]
    count: Option<u64>,
    /// Serve OpenMetrics at http://ADDR/metrics (for example 127.0.0.1:9464), and listings at
    /// http://ADDR/ls for `petra-ls --from ADDR`.
    #[arg(long)]
    listen: Option<String>,
    /// Where /proc is (for tests).
    #[arg(long, default_value = "/proc", hide = true)]
    proc_root: PathBuf,
    /// Print a line for each sample stored.
    #[arg(long)]
    verbose: bool,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("petra-mon: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), BoxError> {
    if args.interval_ms == 0 {
        return Err("the interval must be at least 1 ms".into());
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    let producer = Producer {
        name: args.producer.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname").map_or("localhost".into(), |h| h.trim().to_owned())
        }),
        component_id: args.component_id,
        job_id: args.job_id,
        interval_ns: args.interval_ms * 1_000_000,
    };
    // The store's checkpoint rounds run on their own as its rings fill, beside sampling and
    // scrapes: with retention (--keep) the file stays flat.
    let store = MetricStore::open(&Config { size: 16 << 20, max_size: 64 << 30, ..Config::new(&args.store) })?;
    let server = match &args.listen {
        Some(addr) => Some(tiny_http::Server::http(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?),
        None => None,
    };
    std::thread::scope(|scope| -> Result<(), BoxError> {
        if let Some(server) = &server {
            let (store, stop) = (&store, &stop);
            scope.spawn(move || serve(server, store, stop));
        }
        let result = sample_loop(&args, &store, &producer, &stop);
        // Stop the server too, whatever the loop's outcome.
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    Ok(store.close()?)
}

type BoxError = Box<dyn std::error::Error>;

fn sample_loop(args: &Args, store: &MetricStore, producer: &Producer, stop: &AtomicBool) -> Result<(), BoxError> {
    let mut samplers = petra_mon::setup(store, &mut store.session()?, &args.proc_root, &args.samplers, producer)?;
    let interval = Duration::from_millis(args.interval_ms);
    let mut next = Instant::now();
    let mut rounds = 0u64;
    // Relaxed: a flag set by a signal handler; nothing else is published through it.
    while !stop.load(Ordering::Relaxed) && args.count.is_none_or(|c| rounds < c) {
        rounds += 1;
        let mut session = store.session()?;
        petra_mon::sample_once(&mut session, &mut samplers, |s, g| {
            if args.verbose {
                println!("stored {} generation {g}", s.name);
            }
        })?;
        if let Some(keep) = args.keep
            && rounds.is_multiple_of(100)
        {
            for s in &samplers {
                session.trim(s.set, 0, Some(keep))?;
            }
        }
        next += interval;
        // Sleep in short steps so a signal is seen promptly.
        while !stop.load(Ordering::Relaxed) && Instant::now() < next && args.count.is_none_or(|c| rounds < c) {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
        }
    }
    Ok(())
}

/// Answers /metrics (OpenMetrics text of the latest values) and /ls (petra-ls's listing, JSON,
/// for the query in the URL) until `stop`.
fn serve(server: &tiny_http::Server, store: &MetricStore, stop: &AtomicBool) {
    let header = |value: &str| tiny_http::Header::from_bytes(&b"Content-Type"[..], value).expect("a valid header");
    let openmetrics = header("application/openmetrics-text; version=1.0.0; charset=utf-8");
    let json = header("application/json");
    let failed = |e: BoxError| (500, e.to_string());
    while !stop.load(Ordering::Relaxed) {
        let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(100)) else { continue };
        let (path, query) = request.url().split_once('?').unwrap_or((request.url(), ""));
        let page = match path {
            "/metrics" => store
                .session()
                .map_err(BoxError::from)
                .and_then(|mut session| Ok(petra_mon::openmetrics(store, &mut session)?))
                .map(|text| (text, openmetrics.clone()))
                .map_err(failed),
            "/ls" => ls_page(store, query).map(|text| (text, json.clone())),
            _ => Err((404, "petra-mon serves /metrics and /ls\n".to_string())),
        };
        let response = match page {
            Ok((text, content_type)) => tiny_http::Response::from_string(text).with_header(content_type),
            Err((status, text)) => tiny_http::Response::from_string(text).with_status_code(status),
        };
        let _ = request.respond(response);
    }
}

/// The listing a URL query asks for, as JSON; or the status and message of a bad query (400), an
/// unknown set (404) or the daemon's failure (500).
fn ls_page(store: &MetricStore, query: &str) -> Result<String, (u16, String)> {
    let query = Query::from_url_query(query).map_err(|e| (400, e))?;
    let sets =
        store.session().map_err(BoxError::from).and_then(|mut s| Ok(listing(store, &mut s, &query)?)).map_err(|e| {
            let unknown = matches!(e.downcast_ref::<MonError>(), Some(MonError::NoSet(_)));
            (if unknown { 404 } else { 500 }, e.to_string())
        })?;
    Ok(serde_json::to_string(&sets).expect("a listing is JSON"))
}

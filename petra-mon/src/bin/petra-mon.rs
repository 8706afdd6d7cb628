//! `petra-mon`: samples this machine's `/proc` into a metric store at an interval and serves the
//! latest values as OpenMetrics text over HTTP. See `petra-mon --help`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use clap::Parser;
use petra_kv::{Config, MetricStore};
use petra_mon::{Producer, SAMPLERS};

/// Samples /proc (meminfo, vmstat, loadavg, stat, diskstats) into a PETRA metric store, durably:
/// after a crash or SIGKILL it starts again where its last stored sample left off. SIGTERM or
/// SIGINT stop it cleanly (the store is closed and marked clean). With --listen it serves the
/// latest values at /metrics in the OpenMetrics text format, for Prometheus to scrape.
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
    /// Fold what was stored into the store's nodes every this many rounds (0: never), so that the
    /// file stops growing with the samples stored before: a quiescent checkpoint, during which
    /// sampling and scrapes wait (about 0.5 s per million stored values).
    #[arg(long, default_value_t = 3600)]
    checkpoint_every: u64,
    /// Stop after this many rounds (default: run until SIGTERM or SIGINT).
    #[arg(long)]
    count: Option<u64>,
    /// Serve OpenMetrics at http://ADDR/metrics (for example 127.0.0.1:9464).
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

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
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
    let store = MetricStore::open(&Config { size: 16 << 20, max_size: 64 << 30, ..Config::new(&args.store) })?;
    // Taken for writing only by a checkpoint, which needs the store alone; sampling and scrapes
    // open their sessions under the read lock.
    let store = RwLock::new(Some(store));
    let server = match &args.listen {
        Some(addr) => Some(tiny_http::Server::http(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?),
        None => None,
    };
    std::thread::scope(|scope| -> Result<(), Box<dyn std::error::Error>> {
        if let Some(server) = &server {
            let (store, stop) = (&store, &stop);
            scope.spawn(move || serve(server, store, stop));
        }
        let result = sample_loop(&args, &store, &producer, &stop);
        // Stop the server too, whatever the loop's outcome.
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    if let Some(store) = store.into_inner().map_err(|_| "a thread panicked holding the store")? {
        store.close()?;
    }
    Ok(())
}

/// The store, while no checkpoint has lost it.
fn current(store: &Option<MetricStore>) -> Result<&MetricStore, &'static str> {
    store.as_ref().ok_or("the store was lost in a failed checkpoint")
}

fn sample_loop(
    args: &Args,
    store: &RwLock<Option<MetricStore>>,
    producer: &Producer,
    stop: &AtomicBool,
) -> Result<(), Box<dyn std::error::Error>> {
    let read = || store.read().map_err(|_| "a thread panicked holding the store");
    let mut samplers = {
        let guard = read()?;
        let store = current(&guard)?;
        petra_mon::setup(store, &mut store.session()?, &args.proc_root, &args.samplers, producer)?
    };
    let interval = Duration::from_millis(args.interval_ms);
    let mut next = Instant::now();
    let mut rounds = 0u64;
    // Relaxed: a flag set by a signal handler; nothing else is published through it.
    while !stop.load(Ordering::Relaxed) && args.count.is_none_or(|c| rounds < c) {
        {
            let guard = read()?;
            let mut session = current(&guard)?.session()?;
            petra_mon::sample_once(&mut session, &mut samplers, |s, g| {
                if args.verbose {
                    println!("stored {} generation {g}", s.name);
                }
            })?;
            rounds += 1;
            if let Some(keep) = args.keep
                && rounds.is_multiple_of(100)
            {
                for s in &samplers {
                    session.trim(s.set, 0, Some(keep))?;
                }
            }
        }
        if args.checkpoint_every > 0 && rounds.is_multiple_of(args.checkpoint_every) {
            let mut guard = store.write().map_err(|_| "a thread panicked holding the store")?;
            let taken = guard.take().ok_or("the store was lost in a failed checkpoint")?;
            *guard = Some(taken.checkpoint()?);
            if args.verbose {
                println!("checkpoint after {rounds} rounds");
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

fn serve(server: &tiny_http::Server, store: &RwLock<Option<MetricStore>>, stop: &AtomicBool) {
    let header = tiny_http::Header::from_bytes(
        &b"Content-Type"[..],
        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
    )
    .expect("a valid header");
    while !stop.load(Ordering::Relaxed) {
        let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(100)) else { continue };
        let response = if request.url() == "/metrics" {
            let page = match store.read() {
                Ok(guard) => match current(&guard) {
                    Ok(store) => store
                        .session()
                        .map_err(|e| e.to_string())
                        .and_then(|mut s| petra_mon::openmetrics(store, &mut s).map_err(|e| e.to_string())),
                    Err(e) => Err(e.to_string()),
                },
                Err(_) => Err("a thread panicked holding the store".to_string()),
            };
            match page {
                Ok(text) => tiny_http::Response::from_string(text).with_header(header.clone()),
                Err(e) => tiny_http::Response::from_string(e).with_status_code(500),
            }
        } else {
            tiny_http::Response::from_string("petra-mon serves /metrics\n").with_status_code(404)
        };
        let _ = request.respond(response);
    }
}

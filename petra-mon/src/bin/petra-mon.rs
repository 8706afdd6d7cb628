//! `petra-mon`: samples this machine's `/proc` into a metric store at an interval, serves the
//! latest values to Prometheus and pushes the store to a remote-write receiver. See
//! `petra-mon --help` and `docs/petra-mon.md`.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use parking_lot::{Mutex, RwLock};
use petra_kv::{Config, MetricStore};
use petra_mon::config::{FileConfig, Flags, Settings};
use petra_mon::expose::{self, Format, Naming, Stats};
use petra_mon::families::Names;
use petra_mon::listing::{Query, listing};
use petra_mon::{Event, MonError, now_ns, remote_write, sets};

/// Samples /proc into a PETRA metric store, serves it to Prometheus and pushes it by remote write.
///
/// Samples /proc (meminfo, vmstat, loadavg, stat, diskstats) into a PETRA metric store, durably:
/// after a crash or SIGKILL it starts again where its last stored sample left off, after a power
/// loss where its last power-safe point did (--sync-every). Serves the
/// latest values at /metrics (Prometheus's text format, or OpenMetrics when asked) and listings
/// at /ls (`petra-ls`); pushes the store to a Prometheus remote-write receiver if given one.
/// SIGTERM or SIGINT stop it cleanly; SIGHUP reopens the log file and reloads the configuration
/// file. Every flag can also be set in the configuration file (flags win).
#[derive(Debug, Parser)]
#[command(name = "petra-mon", version, args_override_self = true)]
struct Args {
    /// The configuration file (TOML; keys as the long flags, with underscores).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The metric store's pool file, created if missing [default: petra-mon.pool in
    /// $STATE_DIRECTORY, else $XDG_STATE_HOME/petra-mon, else ~/.local/state/petra-mon, which
    /// is created if missing].
    #[arg(long, value_name = "FILE")]
    store: Option<PathBuf>,
    /// Serve /metrics and /ls at ADDR: HOST:PORT, :PORT (every IPv4 interface; [::]:PORT for
    /// IPv6 too) or off [default: :9464].
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Sampling interval in milliseconds [default: 1000].
    #[arg(long, value_name = "MS")]
    interval_ms: Option<u64>,
    /// Make the samples stored so far survive a power loss this often (1s, 250ms; at least
    /// 1ms); 0 or immediate: each sample, before it counts as stored; off: never while running
    /// (a sample survives the death of the process, not of the machine) [default: 1s]. On
    /// persistent memory (DAX) every sample survives a power loss whatever this says.
    #[arg(long, value_name = "DURATION")]
    sync_every: Option<String>,
    /// Samplers, comma-separated [default: all of meminfo,vmstat,loadavg,stat,diskstats].
    #[arg(long, value_delimiter = ',')]
    samplers: Option<Vec<String>>,
    /// Producer name: sets are named `<producer>/<sampler>` [default: the host name].
    #[arg(long)]
    producer: Option<String>,
    /// Component id of this machine, stored with every sample [default: 0].
    #[arg(long)]
    component_id: Option<u64>,
    /// Job id, stored with every sample (0: none) [default: 0].
    #[arg(long)]
    job_id: Option<u64>,
    /// Remove samples older than this (7d, 36h, 90min; off) [default: 7d].
    #[arg(long, value_name = "AGE")]
    retention: Option<String>,
    /// Keep at most this many samples per set.
    #[arg(long, value_name = "N")]
    keep: Option<usize>,
    /// The most a new store's file may grow to (4GiB, 512MiB); the oldest samples go when it
    /// is 90% full [default: 4GiB].
    #[arg(long, value_name = "SIZE")]
    max_size: Option<String>,
    /// The prefix of the /proc families [default: node, as node_exporter's].
    #[arg(long)]
    prefix: Option<String>,
    /// How meminfo's fields are spelled in names [default: node-exporter].
    #[arg(long, value_enum)]
    names: Option<Names>,
    /// Push the store to this Prometheus remote-write receiver
    /// (http://HOST:9090/api/v1/write).
    #[arg(long, value_name = "URL")]
    remote_write_url: Option<String>,
    /// A label for every series pushed, NAME=VALUE (repeatable) [default: instance=<producer>,
    /// job=petra-mon].
    #[arg(long, value_name = "NAME=VALUE")]
    remote_write_label: Vec<String>,
    /// Log to this file instead of standard error (SIGHUP reopens it).
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Log level: error, warn, info, debug or trace [default: info].
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Stop after this many rounds (default: run until SIGTERM or SIGINT).
    #[arg(long)]
    count: Option<u64>,
    /// Where /proc is (for tests).
    #[arg(long, default_value = "/proc", hide = true)]
    proc_root: PathBuf,
    /// Print a line on standard output for each sample stored (for tests).
    #[arg(long, hide = true)]
    verbose: bool,
}

impl Args {
    fn flags(&self) -> Flags {
        Flags {
            store: self.store.clone(),
            listen: self.listen.clone(),
            interval_ms: self.interval_ms,
            sync_every: self.sync_every.clone(),
            samplers: self.samplers.clone(),
            producer: self.producer.clone(),
            component_id: self.component_id,
            job_id: self.job_id,
            retention: self.retention.clone(),
            keep: self.keep,
            max_size: self.max_size.clone(),
            prefix: self.prefix.clone(),
            names: self.names,
            remote_write_url: self.remote_write_url.clone(),
            remote_write_labels: self.remote_write_label.clone(),
            log_file: self.log_file.clone(),
            log_level: self.log_level.clone(),
        }
    }

    fn settings(&self) -> Result<Settings, MonError> {
        let file = match &self.config {
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        Settings::resolve(&self.flags(), &file)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let args = Args::parse();
    let settings = match args.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("petra-mon: {e}");
            std::process::exit(2);
        }
    };
    let log = match LogFile::init(&settings) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("petra-mon: cannot open the log file: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args, settings, &log) {
        tracing::error!("{e}");
        eprintln!("petra-mon: {e}");
        std::process::exit(1);
    }
}

/// Where the log goes: standard error, or a file SIGHUP reopens (after logrotate moved it).
#[derive(Debug, Clone)]
struct LogFile {
    file: Arc<Mutex<Option<(PathBuf, File)>>>,
}

struct LogWriter(Arc<Mutex<Option<(PathBuf, File)>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.lock().as_mut() {
            Some((_, f)) => f.write(buf),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.0.lock().as_mut() {
            Some((_, f)) => f.flush(),
            None => std::io::stderr().flush(),
        }
    }
}

fn append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().create(true).append(true).open(path)
}

impl LogFile {
    fn init(settings: &Settings) -> std::io::Result<LogFile> {
        let file = match &settings.log_file {
            Some(p) => Some((p.clone(), append(p)?)),
            None => None,
        };
        let log = LogFile { file: Arc::new(Mutex::new(file)) };
        let to_file = settings.log_file.is_some();
        let writer = Arc::clone(&log.file);
        tracing_subscriber::fmt()
            .with_max_level(settings.log_level)
            .with_ansi(false)
            .with_target(false)
            .with_writer(move || LogWriter(Arc::clone(&writer)))
            .init();
        if to_file {
            tracing::debug!("logging to the file");
        }
        Ok(log)
    }

    /// Opens the file again (by its name), so that a rotated log starts anew.
    fn reopen(&self) {
        let mut f = self.file.lock();
        if let Some((path, file)) = f.as_mut() {
            match append(path) {
                Ok(new) => *file = new,
                Err(e) => {
                    drop(f);
                    tracing::error!(error = %e, "cannot reopen the log file; logging on to the old one");
                }
            }
        }
    }
}

/// What the threads share.
struct Shared<'a> {
    store: &'a MetricStore,
    stats: Stats,
    naming: RwLock<Naming>,
    /// Set to stop every thread; Relaxed wherever read or set: a flag, nothing is published
    /// through it (the threads are joined).
    stop: Arc<AtomicBool>,
}

fn run(args: &Args, settings: Settings, log: &LogFile) -> Result<(), BoxError> {
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;
    // Everything that can fail before the store exists fails first: nothing is left behind.
    let server = match &settings.listen {
        Some(addr) => Some(tiny_http::Server::http(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?),
        None => None,
    };
    let address = server.as_ref().map(|s| s.server_addr().to_string());
    if settings.store_in_state_dir
        && let Some(dir) = settings.store.parent()
        && !dir.exists()
    {
        // The state directory (no store given): private, as XDG's base directories are.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create the state directory {}: {e}", dir.display()))?;
    }
    let created = !settings.store.exists();
    let config = Config {
        size: 16 << 20,
        max_size: settings.max_size,
        durability: settings.durability,
        ..Config::new(&settings.store)
    };
    let store =
        MetricStore::open(&config).map_err(|e| format!("cannot open the store {}: {e}", settings.store.display()))?;
    let result =
        serve_and_sample(args, &settings, &store, server.as_ref(), address.as_deref(), created, &stop, &hup, log);
    if let Err(e) = &result
        && created
        && store.sets().is_empty()
    {
        // A start that failed before any set was declared leaves no file behind.
        let path = settings.store.clone();
        let _ = store.close();
        let _ = std::fs::remove_file(&path);
        return Err(format!("{e} (the new store {} was removed)", path.display()).into());
    }
    let closed = store.close();
    result?;
    closed?;
    tracing::info!("petra-mon stopped: the store is closed cleanly");
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn serve_and_sample(
    args: &Args,
    settings: &Settings,
    store: &MetricStore,
    server: Option<&tiny_http::Server>,
    address: Option<&str>,
    created: bool,
    stop: &Arc<AtomicBool>,
    hup: &AtomicBool,
    log: &LogFile,
) -> Result<(), BoxError> {
    let shared =
        Shared { store, stats: Stats::default(), naming: RwLock::new(settings.naming.clone()), stop: Arc::clone(stop) };
    shared.stats.started_ns.store(now_ns(), Ordering::Relaxed);
    let mut samplers =
        petra_mon::setup(store, &mut store.session()?, &args.proc_root, &settings.samplers, &settings.producer)?;
    let pool = store.engine().pool();
    let policy = store.durability();
    let versions: Vec<String> = sets::logical_sets(store)?
        .iter()
        .map(|l| format!("{} v{}", l.name, l.versions.last().map_or(1, |v| v.version)))
        .collect();
    tracing::info!(
        address = address.unwrap_or("off"),
        store = %settings.store.display(),
        durability = %store.medium(),
        policy = policy.to_string().as_str(),
        guarantee = policy.guarantee(store.medium()).as_str(),
        max_size = pool.max_len(),
        interval = ?settings.interval,
        retention = %settings.retention.map_or("off".into(), |r| humantime::format_duration(r).to_string()),
        samplers = %settings.samplers.join(","),
        schemas = %if versions.is_empty() { "none yet".into() } else { versions.join(", ") },
        producer = %settings.producer.name,
        component_id = settings.producer.component_id,
        job_id = settings.producer.job_id,
        remote_write = settings.remote_write.as_ref().map_or("off", |r| r.url.as_str()),
        "petra-mon started"
    );
    if policy != petra::DurabilityPolicy::Process && !store.keeps_safe_points() {
        tracing::warn!(
            durability = %store.medium(),
            "--sync-every changes nothing here: no safe points are kept on this store's memory"
        );
    }
    if !created && pool.max_len().abs_diff(settings.max_size) > 64 << 20 {
        tracing::info!(
            max_size = pool.max_len(),
            "the store keeps the maximum size it was created with, not the --max-size given"
        );
    }
    std::thread::scope(|scope| -> Result<(), BoxError> {
        if let Some(server) = server {
            for _ in 0..4 {
                let shared = &shared;
                scope.spawn(move || serve(server, shared));
            }
        }
        let sender = settings.remote_write.as_ref().map(|rw| {
            let shared = &shared;
            scope.spawn(move || {
                let naming = shared.naming.read().clone();
                remote_write::run(shared.store, &naming, rw, &shared.stats, &shared.stop, Duration::from_secs(5))
            })
        });
        let result = sample_loop(args, settings.clone(), &shared, &mut samplers, hup, log);
        // Stop the server and the sender too, whatever the loop's outcome.
        stop.store(true, Ordering::Relaxed);
        if let Some(sender) = sender {
            match sender.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "the remote-write sender stopped"),
                Err(_) => tracing::error!("the remote-write sender panicked"),
            }
        }
        let rounds = shared.stats.rounds.load(Ordering::Relaxed);
        let safe_points = store.safe_points();
        let reason = if result.is_ok() { "asked to" } else { "an error" };
        tracing::info!(rounds, safe_points, reason, "petra-mon stopping");
        result
    })
}

fn sample_loop(
    args: &Args,
    mut settings: Settings,
    shared: &Shared<'_>,
    samplers: &mut Vec<petra_mon::Sampler>,
    hup: &AtomicBool,
    log: &LogFile,
) -> Result<(), BoxError> {
    let store = shared.store;
    let mut next = Instant::now();
    let mut rounds = 0u64;
    let mut retention = Retention::default();
    // Relaxed: flags set by signal handlers; nothing else is published through them.
    while !shared.stop.load(Ordering::Relaxed) && args.count.is_none_or(|c| rounds < c) {
        if hup.swap(false, Ordering::Relaxed) {
            log.reopen();
            reload(args, &mut settings, shared, samplers);
        }
        rounds += 1;
        let start = Instant::now();
        let mut session = store.session()?;
        petra_mon::sample_once(store, &mut session, samplers, &settings.producer, |sampler, event| {
            on_event(shared, sampler, event, args.verbose)
        })?;
        shared.stats.rounds.fetch_add(1, Ordering::Relaxed);
        shared.stats.sampling_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        drop(session);
        retention.run(store, &settings, shared)?;
        if let Some(e) = store.safe_point_failure() {
            shared.stats.safe_point_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "a power-safe point failed: samples stored since the last one would not survive a power loss");
        }
        next += settings.interval;
        let now = Instant::now();
        if next < now {
            // Behind (a slow round, a stopped machine): start again from now, skip the rest.
            next = now;
        }
        // Sleep in short steps so a signal is seen promptly.
        while !shared.stop.load(Ordering::Relaxed)
            && !hup.load(Ordering::Relaxed)
            && Instant::now() < next
            && args.count.is_none_or(|c| rounds < c)
        {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
        }
    }
    Ok(())
}

fn on_event(shared: &Shared<'_>, sampler: &petra_mon::Sampler, event: Event, verbose: bool) {
    let mut sets = shared.stats.sets.lock();
    let st = sets.entry(sampler.set.clone()).or_default();
    match event {
        Event::Stored { set, version, generation, duration_ns } => {
            if st.stored == 0 {
                tracing::info!(%set, version, "sampling");
            }
            if st.failing.take().is_some() {
                tracing::info!(%set, "sampled again");
            }
            st.stored += 1;
            st.last_duration_ns = duration_ns;
            st.version = version;
            shared.stats.last_write_ns.store(now_ns(), Ordering::Relaxed);
            if verbose {
                println!("stored {} generation {generation}", sampler.name);
            }
        }
        Event::NewVersion { set, version, declared, added, removed } => {
            st.version = version;
            tracing::info!(%set, version, declared, added = %added.join(","), removed = %removed.join(","),
                "the file reports other metrics: a new schema version, history kept");
        }
        Event::Skipped { set, why } => {
            // Once per cause: a file missing for an hour is one warning, not 3 600.
            if st.failing.as_deref() != Some(why.as_str()) {
                tracing::warn!(%set, %why, "skipped: nothing stored for this set this round");
                st.failing = Some(why);
            }
            st.skipped += 1;
        }
        Event::ClockBack { set } => {
            tracing::warn!(%set, "the clock went back: the round skipped this set");
        }
    }
}

/// Reads the configuration file again and applies what can change while running.
fn reload(args: &Args, settings: &mut Settings, shared: &Shared<'_>, samplers: &mut Vec<petra_mon::Sampler>) {
    let new = match args.settings() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: the configuration is not valid; keeping the one in force");
            return;
        }
    };
    let mut changed = Vec::new();
    let mut needs_restart = Vec::new();
    if new.store != settings.store {
        needs_restart.push("store");
    }
    if new.listen != settings.listen {
        needs_restart.push("listen");
    }
    if new.max_size != settings.max_size {
        needs_restart.push("max_size");
    }
    if new.durability != settings.durability {
        needs_restart.push("sync_every");
    }
    if new.remote_write != settings.remote_write {
        needs_restart.push("remote_write");
    }
    if new.log_level != settings.log_level || new.log_file != settings.log_file {
        needs_restart.push("log");
    }
    if new.producer != settings.producer {
        changed.push("producer");
        for s in samplers.iter_mut() {
            s.redeclare();
        }
    }
    if new.samplers != settings.samplers || new.producer.name != settings.producer.name {
        match petra_mon::setup(
            shared.store,
            &mut match shared.store.session() {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: cannot open a session");
                    return;
                }
            },
            &args.proc_root,
            &new.samplers,
            &new.producer,
        ) {
            Ok(s) => {
                *samplers = s;
                changed.push("samplers");
            }
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: the new samplers are not valid; keeping the ones in force");
                return;
            }
        }
    }
    if new.interval != settings.interval {
        changed.push("interval");
    }
    if new.retention != settings.retention || new.keep != settings.keep {
        changed.push("retention");
    }
    if new.naming != settings.naming {
        changed.push("naming");
        *shared.naming.write() = new.naming.clone();
    }
    let kept = Settings {
        store: settings.store.clone(),
        store_in_state_dir: settings.store_in_state_dir,
        listen: settings.listen.clone(),
        max_size: settings.max_size,
        durability: settings.durability,
        remote_write: settings.remote_write.clone(),
        log_file: settings.log_file.clone(),
        log_level: settings.log_level,
        ..new
    };
    *settings = kept;
    tracing::info!(
        changed = %changed.join(","),
        needs_restart = %needs_restart.join(","),
        job_id = settings.producer.job_id,
        component_id = settings.producer.component_id,
        interval = ?settings.interval,
        "SIGHUP: configuration reloaded"
    );
}

/// Retention, once a minute: samples older than the retention go (those the remote-write
/// receiver has, if there is one), and the oldest tenth of every set when the store's file is
/// 90% of its maximum and grew since the last cut.
#[derive(Debug, Default)]
struct Retention {
    last: Option<Instant>,
    len_at_cut: u64,
}

impl Retention {
    fn run(&mut self, store: &MetricStore, settings: &Settings, shared: &Shared<'_>) -> Result<(), BoxError> {
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
            return Ok(());
        }
        self.last = Some(Instant::now());
        let now = now_ns();
        let sent = match &settings.remote_write {
            Some(rw) => Some(remote_write::sent_up_to(store, rw)?),
            None => None,
        };
        let pool = store.engine().pool();
        let full = pool.len() * 10 >= pool.max_len() * 9 && pool.len() > self.len_at_cut;
        let mut session = store.session()?;
        let mut removed = 0;
        for (id, info) in store.sets() {
            let mut before = settings.retention.map_or(0, |r| now.saturating_sub(r.as_nanos() as u64));
            if let Some(sent) = &sent {
                // Unsent samples stay, unless the store is full.
                before = before.min(sent.get(&id).map_or(0, |t| t.saturating_add(1)));
            }
            // Nothing to cut by age unless the oldest sample is older (trimming lists the set's
            // history: not every minute for nothing).
            let mut old = false;
            if before > 0 {
                session.scan(id, 0, before - 1, |_| {
                    old = true;
                    std::ops::ControlFlow::Break(())
                })?;
            }
            let mut keep = settings.keep;
            if full {
                let mut n = 0usize;
                session.scan(id, 0, u64::MAX, |_| {
                    n += 1;
                    std::ops::ControlFlow::Continue(())
                })?;
                keep = Some(keep.unwrap_or(usize::MAX).min(n - n / 10));
            }
            if !old && keep.is_none() {
                continue;
            }
            let cut = session.trim(id, if old { before } else { 0 }, keep)?;
            if cut > 0 {
                tracing::debug!(set = %info.instance, samples = cut, "retention removed samples");
            }
            removed += cut;
        }
        if full {
            self.len_at_cut = pool.len();
            tracing::warn!(
                file = pool.len(),
                max = pool.max_len(),
                removed,
                "the store is 90% full: the oldest tenth of every set was removed"
            );
        }
        shared.stats.trimmed.fetch_add(removed as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Answers /metrics (the classic text or OpenMetrics, by the Accept header) and /ls (petra-ls's
/// listing, JSON, for the query in the URL) until `stop`. Several of these run at once, so a
/// long listing does not hold a scrape back.
fn serve(server: &tiny_http::Server, shared: &Shared<'_>) {
    let header = |value: &str| tiny_http::Header::from_bytes(&b"Content-Type"[..], value).expect("a valid header");
    while !shared.stop.load(Ordering::Relaxed) {
        let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(100)) else { continue };
        let (path, query) = request.url().split_once('?').unwrap_or((request.url(), ""));
        let start = Instant::now();
        let page = match path {
            "/metrics" => {
                let accept = request.headers().iter().find(|h| h.field.equiv("Accept")).map(|h| h.value.as_str());
                let format = Format::negotiate(accept);
                let naming = shared.naming.read().clone();
                let page = shared
                    .store
                    .session()
                    .map_err(MonError::from)
                    .and_then(|mut s| expose::page(shared.store, &mut s, &naming, Some(&shared.stats), format));
                expose::count_scrape(&shared.stats, start.elapsed());
                page.map(|text| (text, header(format.content_type()))).map_err(|e| (500, e.to_string()))
            }
            "/ls" => ls_page(shared.store, query).map(|text| (text, header("application/json"))),
            "/" => Ok((
                "petra-mon: /metrics for Prometheus, /ls for petra-ls\n".to_owned(),
                header("text/plain; charset=utf-8"),
            )),
            _ => Err((404, "petra-mon serves /metrics and /ls\n".to_string())),
        };
        let response = match page {
            Ok((text, content_type)) => tiny_http::Response::from_string(text).with_header(content_type),
            Err((status, text)) => tiny_http::Response::from_string(text).with_status_code(status),
        };
        if let Err(e) = request.respond(response) {
            tracing::debug!(error = %e, "a client went away before its answer");
        }
    }
}

/// The listing a URL query asks for, as JSON; or the status and message of a bad query (400), an
/// unknown set (404) or the daemon's failure (500).
fn ls_page(store: &MetricStore, query: &str) -> Result<String, (u16, String)> {
    let query = Query::from_url_query(query).map_err(|e| (400, e))?;
    let sets =
        store.session().map_err(MonError::from).and_then(|mut s| listing(store, &mut s, &query)).map_err(|e| {
            let unknown = matches!(e, MonError::NoSet(_));
            (if unknown { 404 } else { 500 }, e.to_string())
        })?;
    Ok(serde_json::to_string(&sets).expect("a listing is JSON"))
}

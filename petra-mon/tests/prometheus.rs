//! petra-mon beside the real thing: promtool checks both exposition formats of its page on this
//! machine's /proc; a Prometheus server scrapes it on loopback (up, a rate equal to the store's,
//! series that go stale when it stops); and a Prometheus server receives its remote writes while
//! petra-mon is SIGKILLed and Prometheus stopped and started again, after which Prometheus holds
//! every sample the store holds, once.
//!
//! They need Debian's `prometheus` package (`prometheus` and `promtool` on the PATH, or named by
//! `PROMETHEUS` and `PROMTOOL`). Without it a test says why and passes, unless
//! `PETRA_REQUIRE_PROMETHEUS=1` (as CI sets it) makes that a failure.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Daemon, PROMETHEUS_ACCEPT, body, fake_proc, http_get, mon, replace};
use petra_kv::{Config, CreateMode, MetricStore};
use petra_mon::expose::Naming;
use petra_mon::{families, sets};

/// The binary `name` (or the one the environment variable `var` names), if it is there.
fn tool(var: &str, name: &str) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(var) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// The binary, or `None` after saying why the test does not run (a failure where CI requires
/// Prometheus).
fn need(var: &str, name: &str) -> Option<PathBuf> {
    let found = tool(var, name);
    if found.is_none() {
        let why = format!("{name} is not installed (apt-get install prometheus), or set {var}");
        assert!(std::env::var("PETRA_REQUIRE_PROMETHEUS").as_deref() != Ok("1"), "{why}");
        eprintln!("skipped: {why}");
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn get_json(url: &str) -> serde_json::Value {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let text = agent.get(url).call().unwrap().body_mut().with_config().limit(u64::MAX).read_to_string().unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A Prometheus server on loopback with a scratch TSDB.
struct Prometheus {
    bin: PathBuf,
    child: Option<Child>,
    port: u16,
    config: PathBuf,
    data: PathBuf,
}

impl Prometheus {
    fn start(bin: PathBuf, dir: &Path, config: &str) -> Prometheus {
        let path = dir.join("prometheus.yml");
        std::fs::write(&path, config).unwrap();
        let mut p = Prometheus { bin, child: None, port: free_port(), config: path, data: dir.join("tsdb") };
        p.restart();
        p
    }

    /// Starts it (again, on the same port and TSDB) and waits until it is ready.
    fn restart(&mut self) {
        let child = Command::new(&self.bin)
            .arg(format!("--config.file={}", self.config.display()))
            .arg(format!("--storage.tsdb.path={}", self.data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--web.enable-remote-write-receiver")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(60);
        while !http_ok(&format!("127.0.0.1:{}", self.port), "/-/ready") {
            assert!(Instant::now() < end, "Prometheus did not get ready");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, and waits for it to exit (it writes its head out).
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: `kill` on the child's pid, which has not been waited for, so it names our child.
            assert_eq!(unsafe { libc::kill(c.id() as i32, libc::SIGTERM) }, 0);
            c.wait().unwrap();
        }
    }

    fn query(&self, q: &str) -> serde_json::Value {
        let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        let j =
            get_json(&format!("http://127.0.0.1:{}/api/v1/query?query={q}&time={}", self.port, now_ms() as f64 / 1e3));
        assert_eq!(j["status"], "success", "{j}");
        j["data"]["result"].clone()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn http_ok(addr: &str, path: &str) -> bool {
    std::net::TcpStream::connect(addr).is_ok()
        && http_get(addr, path, &[]).lines().next().is_some_and(|l| l.contains(" 200 "))
}

/// Runs `promtool` with `args` on `input`: its exit code and what it said.
fn promtool(bin: &Path, args: &[&str], input: &str) -> (i32, String) {
    use std::io::Write;
    let mut c = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn promtool_accepts_both_formats_of_the_page() {
    let Some(promtool_bin) = need("PROMTOOL", "promtool") else { return };
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    for names in ["node-exporter", "snake-case"] {
        // This machine's own /proc.
        let mut c = Command::new(env!("CARGO_BIN_EXE_petra-mon"));
        c.args(["--store", p.join(format!("{names}.pool")).to_str().unwrap(), "--interval-ms", "50", "--names", names]);
        let d = Daemon::start(c);
        d.wait_for_log("sampling set=", Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(300));
        let classic = http_get(&d.addr, "/metrics", &[]);
        let om = http_get(&d.addr, "/metrics", &[("Accept", PROMETHEUS_ACCEPT)]);
        assert!(d.stop().success());

        // The classic format: promtool's lint. The only notes allowed are on meminfo's fields
        // spelled as node_exporter spells them (its own page gets the same), and none at all
        // in snake case.
        let (code, said) = promtool(&promtool_bin, &["check", "metrics"], body(&classic));
        let camel = |l: &str| {
            l.starts_with("node_memory_")
                && l.ends_with(" metric names should be written in 'snake_case' not 'camelCase'")
        };
        let other: Vec<&str> = said.lines().filter(|l| names == "snake-case" || !camel(l)).collect();
        assert!(other.is_empty(), "promtool check metrics ({names}), exit {code}:\n{said}");
        if names == "snake-case" {
            assert_eq!(code, 0, "{said}");
        } else {
            assert!(said.lines().count() > 5, "the camelCase names are node_exporter's: {said}");
        }

        // OpenMetrics: promtool 2.42's `check metrics` reads only the classic format (it takes
        // `unknown` for an error and a counter's samples for another family), so the page goes
        // through Prometheus's own OpenMetrics parser, which promtool's backfill uses; it wants
        // a timestamp on every sample, so the test adds one.
        let stamped: String = body(&om)
            .lines()
            .map(|l| if l.starts_with('#') { format!("{l}\n") } else { format!("{l} {}\n", now_ms() / 1000) })
            .collect();
        let file = p.join(format!("{names}.om"));
        std::fs::write(&file, &stamped).unwrap();
        let blocks = p.join(format!("{names}.blocks"));
        let out = Command::new(&promtool_bin)
            .args(["tsdb", "create-blocks-from", "openmetrics", file.to_str().unwrap(), blocks.to_str().unwrap()])
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success() && !said.contains("error"),
            "promtool tsdb create-blocks-from openmetrics: {said}"
        );
        let series = stamped.lines().filter(|l| !l.starts_with('#')).count();
        assert!(said.contains(&format!(" {series} ")), "every series made it into the block: {said}");
    }
}

/// Rewrites the fake /proc/stat every 20 ms, its counters growing at fixed rates from `t0`:
/// 10 000 context switches and 100 ticks (one second) of cpu0 user time per second.
fn counting(dir: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let ms = t0.elapsed().as_millis() as u64;
            let stat = format!(
                "cpu  {u} 0 5 9 2 0 3 3 0 0\ncpu0 {u} 0 2 4 1 0 1 1 0 0\nintr 2699 0 0\nctxt {c}\n",
                u = 1000 + ms / 10,
                c = 513 + ms * 10
            );
            replace(&dir, "stat", &stat);
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

#[test]
fn prometheus_scrapes_it_and_its_rates_are_the_stores() {
    let Some(bin) = need("PROMETHEUS", "prometheus") else { return };
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = counting(p.to_owned(), Arc::clone(&stop));
    let d = Daemon::start(mon(p, &["--interval-ms", "100"]));
    let config = format!(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n  - job_name: petra\n    static_configs:\n      - targets: ['{}']\n",
        d.addr
    );
    let prom = Prometheus::start(bin, p, &config);
    // Scrapes over the whole window the rates take (and a little more).
    let end = Instant::now() + Duration::from_secs(40);
    loop {
        let n = prom.query("count_over_time(up{job=\"petra\"}[7s])");
        if n[0]["value"][1].as_str().is_some_and(|n| n.parse::<u32>().unwrap() >= 14) {
            break;
        }
        assert!(Instant::now() < end, "Prometheus scraped too little: {n}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let up = prom.query("up{job=\"petra\"}");
    assert_eq!(up[0]["value"][1], "1", "{up}");
    let rate = |q: &str| -> f64 { prom.query(q)[0]["value"][1].as_str().unwrap().parse().unwrap() };
    let prom_ctxt = rate("rate(node_context_switches_total{job=\"petra\"}[6s])");
    let prom_user = rate("rate(node_cpu_seconds_total{job=\"petra\",cpu=\"0\",mode=\"user\"}[6s])");
    // Every value Prometheus scraped is one the store holds.
    let scraped = prom.query("node_context_switches_total{job=\"petra\"}[8s]");
    let scraped: Vec<f64> =
        scraped[0]["values"].as_array().unwrap().iter().map(|v| v[1].as_str().unwrap().parse().unwrap()).collect();
    assert!(scraped.len() >= 10, "{scraped:?}");
    let listed: serde_json::Value = {
        let out = Command::new(env!("CARGO_BIN_EXE_petra-ls"))
            .args(["--from", &d.addr, "--json", "--set", "node7/stat", "--history", "1000", "--window", "6"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let stored: Vec<f64> =
        listed[0]["history"].as_array().unwrap().iter().map(|s| s["values"]["ctxt"].as_f64().unwrap()).collect();
    for v in &scraped {
        assert!(stored.contains(v), "Prometheus scraped {v}, which the store does not hold");
    }
    let window = listed[0]["window"].as_array().unwrap();
    let store_rate = |m: &str| window.iter().find(|w| w["metric"] == m).unwrap()["rate"].as_f64().unwrap();
    // The store's rate over its last 6 s against Prometheus's over its last 6 s of scrapes: the
    // same counters, read at different moments (a scrape sees a sample up to 100 ms old).
    let close = |a: f64, b: f64| (a - b).abs() <= 0.04 * b.abs();
    assert!(
        close(prom_ctxt, store_rate("ctxt")),
        "ctxt: Prometheus {prom_ctxt}/s, the store {}/s; scraped {}",
        store_rate("ctxt"),
        prom.query("node_context_switches_total{job=\"petra\"}[8s]")
    );
    assert!(close(prom_ctxt, 10_000.0), "{prom_ctxt}");
    assert!(
        close(prom_user * 100.0, store_rate("cpu0.user")),
        "cpu0 user: {prom_user} s/s, the store {} ticks/s",
        store_rate("cpu0.user")
    );

    // The daemon stops: its series go stale at the next scrape, as node_exporter's do.
    assert!(d.stop().success());
    std::thread::sleep(Duration::from_secs(2));
    let up = prom.query("up{job=\"petra\"}");
    assert_eq!(up[0]["value"][1], "0", "{up}");
    let gone = prom.query("node_context_switches_total{job=\"petra\"}");
    assert_eq!(gone.as_array().unwrap().len(), 0, "the series outlived the daemon: {gone}");
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

/// Series by their sorted labels (`__name__` among them): each one's (millisecond, value)
/// points, oldest first.
type Series = BTreeMap<Vec<(String, String)>, Vec<(u64, f64)>>;

/// Every (series, millisecond, value) the store holds, as remote write sends it.
fn stored_series(path: &Path, labels: &[(&str, &str)]) -> Series {
    let store = MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(path) }).unwrap();
    let naming = Naming::default();
    let mut out: Series = BTreeMap::new();
    {
        let mut s = store.session().unwrap();
        for set in sets::logical_sets(&store).unwrap() {
            for (v, sample) in set.range(&mut s, 0, u64::MAX).unwrap() {
                for (m, x) in v.schema.metrics.iter().zip(&sample.values) {
                    let Some(d) = families::describe(&set.sampler, &m.name, naming.names) else { continue };
                    let mut l: Vec<(String, String)> =
                        labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                    l.push(("__name__".into(), d.family.sample_name(&naming.prefix)));
                    l.push(("producer".into(), v.info.producer.clone()));
                    l.extend(d.labels.iter().map(|(k, v)| (k.to_string(), v.clone())));
                    l.sort();
                    out.entry(l).or_default().push((sample.timestamp / 1_000_000, d.scale.apply(x.as_f64().unwrap())));
                }
            }
        }
    }
    store.close().unwrap();
    out
}

#[test]
fn remote_write_delivers_every_stored_sample_once_across_kills_and_a_receiver_restart() {
    let Some(bin) = need("PROMETHEUS", "prometheus") else { return };
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = counting(p.to_owned(), Arc::clone(&stop));
    let mut prom = Prometheus::start(bin, p, "global:\n  scrape_interval: 10s\n");
    let url = format!("http://127.0.0.1:{}/api/v1/write", prom.port);
    let start = || Daemon::start_at(mon(p, &["--interval-ms", "50", "--remote-write-url", &url]), "off");
    let count = |prom: &Prometheus| -> usize {
        prom.query("{producer=\"node7\"}[1h]")
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["values"].as_array().unwrap().len())
            .sum()
    };
    let mut d = start();
    let end = Instant::now() + Duration::from_secs(30);
    while count(&prom) == 0 {
        assert!(Instant::now() < end, "nothing arrived: {:#?}", d.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGKILLs at moments that fall anywhere in the sender's loop.
    for pause in [230, 410, 170] {
        std::thread::sleep(Duration::from_millis(pause));
        d.child.kill().unwrap();
        d.child.wait().unwrap();
        d = start();
    }
    // The receiver goes away for a while, and comes back.
    std::thread::sleep(Duration::from_millis(300));
    prom.stop();
    d.wait_for_log("remote write failed; the samples stay in the store", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1500));
    prom.restart();
    d.wait_for_log("the receiver took the batch again", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    // A clean stop sends what is left.
    assert!(d.stop().success());
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    let want = stored_series(&p.join("m.pool"), &[("instance", "node7"), ("job", "petra-mon")]);
    let have = received(&prom);
    let samples: usize = want.values().map(Vec::len).sum();
    assert!(samples > 1000, "{samples}");
    assert_eq!(have.len(), want.len(), "series");
    for (series, points) in &want {
        assert_eq!(have.get(series), Some(points), "{series:?}");
    }
}

/// Prometheus's series of `{producer="node7"}`, as `stored_series` gives the store's.
fn received(prom: &Prometheus) -> Series {
    let mut have = BTreeMap::new();
    for s in prom.query("{producer=\"node7\"}[1h]").as_array().unwrap() {
        let mut l: Vec<(String, String)> =
            s["metric"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect();
        l.sort();
        let points: Vec<(u64, f64)> = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| ((v[0].as_f64().unwrap() * 1000.0).round() as u64, v[1].as_str().unwrap().parse().unwrap()))
            .collect();
        have.insert(l, points);
    }
    have
}

#[test]
fn a_batch_the_receiver_took_just_before_a_crash_is_not_duplicated_by_the_resend() {
    let Some(bin) = need("PROMETHEUS", "prometheus") else { return };
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    let prom = Prometheus::start(bin, p, "global:\n  scrape_interval: 10s\n");
    let path = p.join("m.pool");
    let producer = petra_mon::Producer { name: "node7".into(), component_id: 7, job_id: 1, interval_ns: 1_000_000 };
    let names: Vec<String> = petra_mon::SAMPLERS.iter().map(|s| s.to_string()).collect();
    let store = MetricStore::open(&Config::new(&path)).unwrap();
    let mut settings = petra_mon::remote_write::Settings::new(&format!("http://127.0.0.1:{}/api/v1/write", prom.port));
    settings.labels.insert("instance".into(), "node7".into());
    settings.labels.insert("job".into(), "petra-mon".into());
    settings.max_rows = 20;
    {
        let mut s = store.session().unwrap();
        let mut samplers = petra_mon::setup(&store, &mut s, p, &names, &producer).unwrap();
        for _ in 0..12 {
            std::thread::sleep(Duration::from_millis(2));
            petra_mon::sample_once(&store, &mut s, &mut samplers, &producer, |_, _| {}).unwrap();
        }
    }
    // The sender's first steps: the batch is pending, the receiver takes it, and the process
    // dies before it moves its position.
    let naming = Naming::default();
    let mut position = petra_mon::remote_write::Position::load(&store, &settings).unwrap();
    let batch = petra_mon::remote_write::next_batch(&store, &naming, &settings, &position).unwrap().unwrap();
    position.pending = Some(batch.ends.clone());
    position.save(&store, &settings).unwrap();
    let agent = petra_mon::remote_write::agent(&settings);
    assert_eq!(
        petra_mon::remote_write::send(&agent, &settings, &batch.request),
        petra_mon::remote_write::Outcome::Accepted
    );
    let first = received(&prom).values().map(Vec::len).sum::<usize>();
    assert_eq!(first, batch.values);
    // Sent again as it was, the receiver refuses it whole: it has every sample of it.
    let again = petra_mon::remote_write::send(&agent, &settings, &batch.request);
    assert!(matches!(&again, petra_mon::remote_write::Outcome::Refused(why) if why.starts_with("400")), "{again:?}");
    // The restarted sender resends the pending batch, goes on after it, and drains the rest.
    let stats = petra_mon::expose::Stats::default();
    let stop = AtomicBool::new(true);
    petra_mon::remote_write::run(&store, &naming, &settings, &stats, &stop, Duration::from_secs(10)).unwrap();
    let position = petra_mon::remote_write::Position::load(&store, &settings).unwrap();
    assert!(position.pending.is_none());
    store.close().unwrap();
    let want = stored_series(&path, &[("instance", "node7"), ("job", "petra-mon")]);
    let have = received(&prom);
    assert!(want.values().map(Vec::len).sum::<usize>() > batch.values, "more than one batch");
    assert_eq!(have, want);
}

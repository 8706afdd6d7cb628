//! petra-mon and petra-ls used as an operator would: a counted run listed by petra-ls; both
//! exposition formats; a clean stop on SIGTERM; schemas that follow the machine; a missing or
//! unparseable /proc file; job changes recorded from when they happen; start-up failures that
//! leave nothing behind; SIGHUP; a long listing that does not hold a scrape back; petra-ls on a
//! read-only file; and a kill loop on the sampling loop (restarted after every SIGKILL, it loses
//! no acknowledged sample and stores none twice).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Daemon, PROMETHEUS_ACCEPT, body, fake_proc, http_get, ls, mon, replace};
use petra_kv::{Config, CreateMode, MetricStore};
use petra_mon::{Event, Producer, SAMPLERS};
use petra_recovery::kill::{KillLoop, ack, child_arg};

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn a_counted_run_is_listed_by_petra_ls_as_tables_and_as_json() {
    let dir = petra_recovery::scratch_dir();
    fake_proc(dir.path());
    let out = mon(dir.path(), &["--count", "3", "--interval-ms", "5", "--verbose"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.lines().filter(|l| l.starts_with("stored ")).count(), 3 * SAMPLERS.len(), "{said}");
    // A second run carries the generations on.
    assert!(mon(dir.path(), &["--count", "1", "--interval-ms", "5"]).status().unwrap().success());

    let table = ls(dir.path(), &[]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 1 + SAMPLERS.len(), "{table}");
    assert!(lines[0].starts_with("SET ") && lines[0].contains("GENERATION") && lines[0].ends_with("LATEST"), "{table}");
    let meminfo: Vec<&str> =
        lines.iter().find(|l| l.starts_with("node7/meminfo ")).unwrap().split_whitespace().collect();
    // set, schema, producer, component, job, metrics (3 and the two ids), generation, time
    assert_eq!(&meminfo[..7], ["node7/meminfo", "meminfo", "node7", "7", "42", "5", "4"], "{table}");
    assert!(meminfo[7].ends_with('Z') && meminfo[7].contains('T'), "RFC 3339: {table}");

    let one = ls(dir.path(), &["--set", "node7/loadavg", "--history", "3", "--window", "3600"]);
    assert!(one.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["data", "load5", "0.9"]), "{one}");
    let history: Vec<&str> =
        one.lines().skip_while(|l| !l.contains("the last 3 samples")).skip(1).take_while(|l| !l.is_empty()).collect();
    assert_eq!(history.len(), 4, "a header and 3 samples: {one}");
    assert!(history[0].trim_start().starts_with("TIME") && history[0].contains("job_id"), "{one}");
    assert!(one.contains("METRIC") && one.contains("RATE/S"), "{one}");

    let j = json(&ls(dir.path(), &["--json", "--set", "node7/stat", "--history", "10"]));
    let set = &j[0];
    assert_eq!(set["name"], "node7/stat");
    assert_eq!(set["latest"]["generation"], 4);
    assert_eq!(set["latest"]["values"]["cpu0.idle"], 4);
    assert_eq!(set["latest"]["values"]["job_id"], 42);
    assert_eq!(set["history"].as_array().unwrap().len(), 4, "all 4 of the 10 asked for");
    let j = json(&ls(dir.path(), &["--json", "--set", "node7/stat", "--history", "2"]));
    let gens: Vec<u64> =
        j[0]["history"].as_array().unwrap().iter().map(|s| s["generation"].as_u64().unwrap()).collect();
    assert_eq!(gens, [3, 4], "--history 2 gives the last 2");

    // Bad use: a clear message, a failure status.
    let out = Command::new(env!("CARGO_BIN_EXE_petra-ls"))
        .arg(dir.path().join("m.pool"))
        .args(["--set", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no set named nope"));
    let out = mon(dir.path(), &["--samplers", "meminfo,cpuinfo", "--count", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("sampler \"cpuinfo\""), "{err}");
}

#[test]
fn petra_ls_says_its_own_name_and_asks_the_local_daemon_without_a_store() {
    for flag in ["-V", "--version"] {
        let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).arg(flag).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), concat!("petra-ls ", env!("CARGO_PKG_VERSION")));
    }
    let help = Command::new(env!("CARGO_BIN_EXE_petra-ls")).arg("-h").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.starts_with("Lists the metric sets of a PETRA metric store, as ldms_ls lists"), "{help}");
    assert!(
        help.contains("Usage: petra-ls") && help.contains("--from") && !help.contains("petra-mon, a sampler"),
        "{help}"
    );
    let mon_v = Command::new(env!("CARGO_BIN_EXE_petra-mon")).arg("-V").output().unwrap();
    assert!(String::from_utf8_lossy(&mon_v.stdout).starts_with("petra-mon "));
    // No store, no daemon at 127.0.0.1:9464 (none runs in the tests): it says what it tried.
    if std::net::TcpStream::connect("127.0.0.1:9464").is_err() {
        let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("local petra-mon") && err.contains("--from"), "{err}");
    }
}

#[test]
fn both_formats_are_served_by_the_accept_header_and_sigterm_stops_cleanly() {
    let dir = petra_recovery::scratch_dir();
    fake_proc(dir.path());
    let d = Daemon::start(mon(dir.path(), &["--interval-ms", "10"]));
    d.wait_for_log("sampling set=node7/diskstats", Duration::from_secs(10));
    let classic = http_get(&d.addr, "/metrics", &[]);
    assert!(classic.contains("Content-Type: text/plain; version=0.0.4"), "{classic}");
    let c = body(&classic);
    assert!(c.contains("# TYPE node_cpu_seconds_total counter\n"), "{c}");
    assert!(c.contains("node_cpu_seconds_total{cpu=\"0\",mode=\"idle\",producer=\"node7\"} 0.04\n"), "{c}");
    assert!(c.contains("node_memory_Active_anon_bytes{producer=\"node7\"} 84124672"), "{c}");
    assert!(c.contains("node_disk_read_bytes_total{device=\"nvme0n1\",producer=\"node7\"} 1536"), "{c}");
    assert!(c.contains("# TYPE node_vmstat_pgfault untyped\n"), "{c}");
    assert!(!c.contains("loop0") && !c.contains("# EOF") && !c.contains("# UNIT"), "{c}");
    assert!(c.contains("petra_mon_set_info{set=\"node7/stat\",producer=\"node7\",schema=\"stat\",component_id=\"7\",job_id=\"42\"} 1"), "{c}");
    assert!(c.contains("petra_mon_samples_stored_total{set=\"node7/meminfo\"}"), "{c}");
    // Every family has HELP; no sample has a timestamp.
    for line in c.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap();
        assert!(c.contains(&format!("# HELP {name} ")), "{name} has no HELP");
    }
    assert!(c.lines().filter(|l| !l.starts_with('#')).all(|l| l.split(' ').count() == 2), "{c}");

    let om = http_get(&d.addr, "/metrics", &[("Accept", PROMETHEUS_ACCEPT)]);
    assert!(om.contains("application/openmetrics-text; version=1.0.0"), "{om}");
    let o = body(&om);
    assert!(o.contains("# TYPE node_cpu_seconds counter\n# UNIT node_cpu_seconds seconds\n"), "{o}");
    assert!(o.contains("# TYPE node_vmstat_pgfault unknown\n"), "{o}");
    assert!(o.trim_end().ends_with("# EOF"), "{o}");

    let status = d.stop();
    assert!(status.success(), "{status}");
    let pool = petra::pool::Pool::open(dir.path().join("m.pool"), &Default::default()).unwrap();
    assert!(pool.was_clean(), "SIGTERM did not close the store cleanly");
}

#[test]
fn petra_ls_reads_a_store_the_running_daemon_holds_through_it() {
    let dir = petra_recovery::scratch_dir();
    fake_proc(dir.path());
    let d = Daemon::start(mon(dir.path(), &["--interval-ms", "10"]));
    d.wait_for_log("sampling set=node7/diskstats", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(100));
    let ls_from = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).args(["--from", &d.addr]).args(extra).output().unwrap();
        (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    // The file itself is the daemon's: petra-ls says so and where to ask instead.
    let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).arg(dir.path().join("m.pool")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("held by a running petra-mon") && err.contains("--from ADDR"),
        "{err}"
    );
    let (ok, table, err) = ls_from(&[]);
    assert!(ok, "{err}");
    assert_eq!(table.lines().count(), 1 + SAMPLERS.len(), "{table}");
    let (ok, text, err) = ls_from(&["--json", "--set", "node7/stat", "--history", "1000", "--window", "3600"]);
    assert!(ok, "{err}");
    let live = json(&text);
    let history = live[0]["history"].as_array().unwrap().clone();
    assert!(history.len() >= 3, "{text}");
    assert_eq!(live[0]["latest"], history[history.len() - 1], "{text}");
    let (ok, _, err) = ls_from(&["--set", "nope"]);
    assert!(!ok && err.contains("answered 404") && err.contains("no set named nope"), "{err}");
    let page = http_get(&d.addr, "/ls?history=soon", &[]);
    assert!(page.starts_with("HTTP/1.0 400") && page.contains("number of samples"), "{page}");
    assert!(d.stop().success());
    // What the daemon listed is what the file holds.
    let stored = json(&ls(dir.path(), &["--json", "--set", "node7/stat", "--history", "100000"]));
    let all = stored[0]["history"].as_array().unwrap();
    assert_eq!(&all[..history.len()], &history[..]);
}

#[test]
fn schemas_follow_the_machine_and_history_is_kept_across_versions() {
    let dir = petra_recovery::scratch_dir();
    fake_proc(dir.path());
    let p = dir.path();
    assert!(mon(p, &["--count", "2", "--interval-ms", "5", "--samplers", "diskstats"]).status().unwrap().success());
    // A disk is added: a new version.
    let two = " 259 0 nvme0n1 1 2 3 4 5 6 7 8 0 10 11 0 0 0 0\n 8 0 sda 9 9 9 9 9 9 9 9 0 9 9\n";
    replace(p, "diskstats", two);
    let out = mon(p, &["--count", "2", "--interval-ms", "5", "--samplers", "diskstats"]).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && log.contains("new schema version") && log.contains("version=2"), "{log}");
    assert!(log.contains("added=sda.reads_completed,"), "{log}");
    // And removed again: back to version 1, which exists.
    replace(p, "diskstats", " 259 0 nvme0n1 2 2 3 4 5 6 7 8 0 10 11 0 0 0 0\n");
    assert!(mon(p, &["--count", "1", "--interval-ms", "5", "--samplers", "diskstats"]).status().unwrap().success());

    let j = json(&ls(p, &["--json", "--set", "node7/diskstats", "--history", "100"]));
    let versions: Vec<(u64, &str)> = j[0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_u64().unwrap(), v["schema"].as_str().unwrap()))
        .collect();
    assert_eq!(versions, [(1, "diskstats"), (2, "diskstats.v2")]);
    let h = j[0]["history"].as_array().unwrap();
    let seen: Vec<(u64, u64)> =
        h.iter().map(|s| (s["generation"].as_u64().unwrap(), s["version"].as_u64().unwrap())).collect();
    assert_eq!(seen, [(1, 1), (2, 1), (3, 2), (4, 2), (5, 1)], "one history, generations on across versions");
    assert_eq!(h[2]["values"]["sda.reads_completed"], 9);
    assert_eq!(h[4]["values"]["nvme0n1.reads_completed"], 2);
    assert!(h[4]["values"].get("sda.reads_completed").is_none());
}

#[test]
fn a_missing_or_unparseable_file_is_logged_and_skipped_and_the_daemon_goes_on() {
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    std::fs::remove_file(p.join("vmstat")).unwrap();
    replace(p, "loadavg", "0.43 0.90\n");
    let out = mon(p, &["--count", "3", "--interval-ms", "5"]).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("WARN") && log.contains("set=node7/vmstat") && log.contains("cannot read"), "{log}");
    assert!(log.contains("set=node7/loadavg") && log.contains("does not parse: line 1: 2 fields, not 5"), "{log}");
    // Warned once each, not every round.
    assert_eq!(log.matches("set=node7/vmstat why=").count(), 1, "{log}");
    let j = json(&ls(p, &["--json"]));
    let names: Vec<&str> = j.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["node7/meminfo", "node7/stat", "node7/diskstats"], "nothing stored for the two");
    // The file comes back: it is sampled from then on.
    fake_proc(p);
    assert!(mon(p, &["--count", "1", "--interval-ms", "5"]).status().unwrap().success());
    assert_eq!(json(&ls(p, &["--json"])).as_array().unwrap().len(), 5);
    // A file that goes away while the daemon runs, and comes back: one warning, then a note.
    let d = Daemon::start(mon(p, &["--interval-ms", "10"]));
    d.wait_for_log("sampling set=node7/diskstats", Duration::from_secs(10));
    std::fs::remove_file(p.join("diskstats")).unwrap();
    d.wait_for_log("set=node7/diskstats why=", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    fake_proc(p);
    d.wait_for_log("sampled again set=node7/diskstats", Duration::from_secs(10));
    assert_eq!(d.log_lines("set=node7/diskstats why=").len(), 1, "warned once: {:#?}", d.log_lines("diskstats"));
    assert!(d.stop().success());
}

#[test]
fn job_and_component_changes_are_recorded_from_when_they_happen() {
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    assert!(mon(p, &["--count", "2", "--interval-ms", "5", "--samplers", "loadavg"]).status().unwrap().success());
    let out = mon(
        p,
        &["--count", "2", "--interval-ms", "5", "--samplers", "loadavg", "--job-id", "77", "--component-id", "8"],
    )
    .output()
    .unwrap();
    assert!(out.status.success());
    let j = json(&ls(p, &["--json", "--set", "node7/loadavg", "--history", "10"]));
    let ids: Vec<(u64, u64)> = j[0]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["values"]["job_id"].as_u64().unwrap(), s["values"]["component_id"].as_u64().unwrap()))
        .collect();
    assert_eq!(ids, [(42, 7), (42, 7), (77, 8), (77, 8)], "nothing rewritten backwards");
}

#[test]
fn a_start_that_fails_leaves_no_store_behind() {
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = mon(p, &["--count", "1", "--listen", &addr]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(!p.join("m.pool").exists(), "a failed start created the store");
    for bad in [
        &["--samplers", "meminfo,nope"][..],
        &["--interval-ms", "0"],
        &["--max-size", "12 parsecs"],
        &["--listen", "localhost"],
    ] {
        let out = mon(p, &[&["--count", "1"], bad].concat()).output().unwrap();
        assert!(!out.status.success(), "{bad:?}");
        assert!(!p.join("m.pool").exists(), "{bad:?} created the store");
    }
    // `:PORT` is every interface's PORT.
    let d = Daemon::start_at(mon(p, &["--interval-ms", "50"]), ":0");
    assert!(d.addr.starts_with("0.0.0.0:"), "{}", d.addr);
    let port = d.addr.rsplit(':').next().unwrap();
    assert!(http_get(&format!("127.0.0.1:{port}"), "/metrics", &[]).starts_with("HTTP/1.0 200"));
    assert!(d.stop().success());
}

#[test]
fn sighup_reloads_the_configuration_and_reopens_the_log() {
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    let config = p.join("petra-mon.toml");
    std::fs::write(&config, "job_id = 5\nsamplers = [\"loadavg\"]\n").unwrap();
    let log = p.join("petra-mon.log");
    let mut c = Command::new(env!("CARGO_BIN_EXE_petra-mon"));
    c.args(["--config", config.to_str().unwrap(), "--store", p.join("m.pool").to_str().unwrap()]);
    c.args(["--proc-root", p.to_str().unwrap(), "--producer", "node7", "--interval-ms", "10", "--listen", "off"]);
    c.args(["--log-file", log.to_str().unwrap()]);
    let mut child = c.spawn().unwrap();
    let wait_for = |file: &Path, what: &str| {
        let end = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(file).unwrap_or_default().contains(what) {
            assert!(Instant::now() < end, "no {what:?} in {}", file.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(&log, "sampling set=node7/loadavg");
    // logrotate moves the file away, the configuration changes, then SIGHUP.
    std::fs::rename(&log, p.join("petra-mon.log.1")).unwrap();
    std::fs::write(&config, "job_id = 6\nsamplers = [\"loadavg\"]\n").unwrap();
    // SAFETY: `kill` on the child's pid, which has not been waited for, so it names our child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
    wait_for(&log, "SIGHUP: configuration reloaded");
    assert!(std::fs::read_to_string(&log).unwrap().contains("job_id=6"));
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert!(child.wait().unwrap().success());
    assert!(std::fs::read_to_string(&log).unwrap().contains("petra-mon stopped"));
    assert!(std::fs::read_to_string(p.join("petra-mon.log.1")).unwrap().contains("petra-mon started"));
    let j = json(&ls(p, &["--json", "--set", "node7/loadavg", "--history", "100000"]));
    let jobs: Vec<u64> =
        j[0]["history"].as_array().unwrap().iter().map(|s| s["values"]["job_id"].as_u64().unwrap()).collect();
    let first6 = jobs.iter().position(|&j| j == 6).expect("samples after the reload");
    assert!(first6 > 0 && jobs[..first6].iter().all(|&j| j == 5) && jobs[first6..].iter().all(|&j| j == 6), "{jobs:?}");
}

#[test]
fn a_long_listing_does_not_hold_a_scrape_back() {
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    // A wide set with a long history, stored straight into the store beforehand.
    {
        let store = MetricStore::open(&Config::new(p.join("m.pool"))).unwrap();
        let mut s = store.session().unwrap();
        let wide: String = (0..200).map(|i| format!("field_{i} {i}\n")).collect();
        replace(p, "vmstat", &wide);
        let producer = Producer { name: "big".into(), component_id: 1, job_id: 0, interval_ns: 1_000_000 };
        let mut samplers = petra_mon::setup(&store, &mut s, p, &["vmstat".into()], &producer).unwrap();
        for _ in 0..4000 {
            petra_mon::sample_once(&store, &mut s, &mut samplers, &producer, |_, _| {}).unwrap();
        }
        drop(s);
        store.close().unwrap();
    }
    let d = Daemon::start(mon(p, &["--interval-ms", "100"]));
    let addr = d.addr.clone();
    let listing = std::thread::spawn(move || {
        let start = Instant::now();
        let page = http_get(&addr, "/ls?set=big/vmstat&history=4000", &[]);
        (start.elapsed(), page.len())
    });
    std::thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    let scrape = http_get(&d.addr, "/metrics", &[]);
    let scrape_took = start.elapsed();
    let (listing_took, listing_len) = listing.join().unwrap();
    assert!(scrape.starts_with("HTTP/1.0 200") && listing_len > 10 << 20, "{listing_len}");
    assert!(
        scrape_took < listing_took,
        "the scrape took {scrape_took:?}, the {listing_len}-byte listing {listing_took:?}"
    );
    assert!(d.stop().success());
}

#[test]
fn petra_ls_reads_a_read_only_store_file_without_writing_a_byte() {
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    // A store whose daemon was killed: opening it needs recovery.
    let mut d = Daemon::start(mon(p, &["--interval-ms", "5"]));
    d.wait_for_log("sampling set=node7/diskstats", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(100));
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let pool = p.join("m.pool");
    let before = std::fs::read(&pool).unwrap();
    let mut perms = std::fs::metadata(&pool).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&pool, perms).unwrap();
    let table = ls(p, &[]);
    assert_eq!(table.lines().count(), 1 + SAMPLERS.len(), "{table}");
    let j = json(&ls(p, &["--json", "--set", "node7/stat", "--history", "3"]));
    assert_eq!(j[0]["history"].as_array().unwrap().len(), 3);
    assert!(std::fs::read(&pool).unwrap() == before, "petra-ls changed the file");
    // And the store still opens as the daemon's, recovering now.
    let mut perms = std::fs::metadata(&pool).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&pool, perms).unwrap();
    let store = MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(&pool) }).unwrap();
    assert_eq!(store.sets().len(), SAMPLERS.len());
    store.close().unwrap();
}

/// Every acknowledged generation is stored once, consecutive from 1 across a logical set's
/// versions; returns the newest generation of each logical set.
fn check(path: &Path, acked: &BTreeMap<String, u64>) -> Result<BTreeMap<String, u64>, String> {
    let store =
        MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(path) }).map_err(|e| e.to_string())?;
    let mut top = BTreeMap::new();
    {
        let mut s = store.session().unwrap();
        for set in petra_mon::sets::logical_sets(&store).unwrap() {
            let gens: Vec<u64> = set.range(&mut s, 0, u64::MAX).unwrap().iter().map(|(_, x)| x.generation).collect();
            let last = gens.last().copied().unwrap_or(0);
            let want = acked.get(&set.name).copied().unwrap_or(0);
            if gens != (1..=last).collect::<Vec<_>>() || last < want || last > want + 1 {
                return Err(format!("{}: generations {:?}, acknowledged up to {want}", set.name, gens));
            }
            top.insert(set.name.clone(), last);
        }
    }
    store.close().map_err(|e| e.to_string())?;
    Ok(top)
}

#[test]
fn killed_and_restarted_the_sampler_loses_and_repeats_nothing() {
    if let Some(arg) = child_arg() {
        let dir = Path::new(&arg);
        let store = MetricStore::open(&Config::new(dir.join("m.pool"))).unwrap();
        assert_eq!(store.medium(), petra::mem::Durability::PageCache, "a file on a disk keeps safe points");
        let mut s = store.session().unwrap();
        let producer = Producer { name: "node7".into(), component_id: 7, job_id: 0, interval_ns: 1_000_000 };
        let names: Vec<String> = SAMPLERS.iter().map(|s| s.to_string()).collect();
        let mut samplers = petra_mon::setup(&store, &mut s, dir, &names, &producer).unwrap();
        ack("R");
        loop {
            petra_mon::sample_once(&store, &mut s, &mut samplers, &producer, |_, e| {
                if let Event::Stored { set, generation, .. } = e {
                    ack(format!("{set} {generation}"))
                }
            })
            .unwrap();
        }
    }
    // On the disk, under the default policy's safe points (a store in memory, in `/dev/shm`,
    // keeps none): each kill finds rounds held back to what the last one covers.
    let dir = petra_recovery::disk_dir(env!("CARGO_TARGET_TMPDIR"));
    fake_proc(dir.path());
    let arg = dir.path().to_str().unwrap().to_owned();
    let mut acked = BTreeMap::new();
    let report = KillLoop::new("killed_and_restarted_the_sampler_loses_and_repeats_nothing", 10).run(
        |_| arg.clone(),
        |arg, out| {
            for a in out.acks.iter().filter(|a| *a != "R") {
                let (set, g) = a.split_once(' ').unwrap();
                acked.insert(set.to_owned(), g.parse::<u64>().unwrap());
            }
            acked = check(&Path::new(arg).join("m.pool"), &acked)?;
            Ok(())
        },
    );
    eprintln!("{} rounds, {} kills, {} acks", report.rounds, report.kills, report.acks);
    report.assert_ok(5);
    assert_eq!(acked.len(), SAMPLERS.len());
}

#[test]
fn retention_removes_samples_older_than_it() {
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    assert!(mon(p, &["--count", "5", "--interval-ms", "5", "--samplers", "loadavg"]).status().unwrap().success());
    let count = || {
        json(&ls(p, &["--json", "--set", "node7/loadavg", "--history", "100"]))[0]["history"].as_array().unwrap().len()
    };
    assert_eq!(count(), 5, "the default retention (7 days) keeps them");
    std::thread::sleep(Duration::from_millis(300));
    let out = mon(p, &["--count", "1", "--interval-ms", "5", "--samplers", "loadavg", "--retention", "200ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count(), 1, "only the sample of the last 200 ms stays");
}

/// The daemon on `dir`'s fake /proc with no `--store`, its state directory given only by
/// `env` (every other variable that names one removed).
fn mon_in_state_dir(dir: &Path, env: &[(&str, &Path)], extra: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_petra-mon"));
    c.args(["--proc-root", dir.to_str().unwrap(), "--producer", "node7", "--listen", "off"]);
    c.args(["--count", "1", "--interval-ms", "5"]).args(extra);
    for var in ["STATE_DIRECTORY", "XDG_STATE_HOME", "HOME"] {
        c.env_remove(var);
    }
    c.envs(env.iter().copied());
    c.output().unwrap()
}

#[test]
fn the_default_store_is_in_the_state_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = petra_recovery::scratch_dir();
    let p = dir.path();
    fake_proc(p);
    // systemd's StateDirectory= first, then XDG's state home, then the home's; each created.
    let state = p.join("state/petra-mon");
    let xdg = p.join("xdg");
    let home = p.join("home");
    let cases = [
        (&[("STATE_DIRECTORY", &*state), ("XDG_STATE_HOME", &*xdg), ("HOME", &*home)][..], state.clone()),
        (&[("XDG_STATE_HOME", &*xdg), ("HOME", &*home)], xdg.join("petra-mon")),
        (&[("HOME", &*home)], home.join(".local/state/petra-mon")),
    ];
    for (env, want) in cases {
        let out = mon_in_state_dir(p, env, &[]);
        let log = String::from_utf8_lossy(&out.stderr);
        let pool = want.join("petra-mon.pool");
        assert!(out.status.success(), "{env:?}: {log}");
        assert!(pool.is_file(), "{env:?}: no {}", pool.display());
        assert!(log.contains(&format!("store={} ", pool.display())), "{log}");
        let mode = std::fs::metadata(&want).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", want.display());
        std::fs::remove_file(&pool).unwrap();
    }
    // --store wins, and the state directory is left alone.
    std::fs::remove_dir_all(&state).unwrap();
    let out = mon_in_state_dir(p, &[("STATE_DIRECTORY", &state)], &["--store", p.join("m.pool").to_str().unwrap()]);
    assert!(out.status.success() && p.join("m.pool").is_file() && !state.exists());
    // With no directory to go by, a clear refusal.
    let out = mon_in_state_dir(p, &[], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no state directory") && err.contains("--store"), "{err}");
}

/// The `key=value` field of a log line (a quoted value without its quotes).
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let rest = line.split(&format!(" {key}=")).nth(1).unwrap_or_else(|| panic!("no {key} in {line}"));
    match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap(),
        None => rest.split(' ').next().unwrap(),
    }
}

#[test]
fn sync_every_sets_the_guarantee_the_start_line_names() {
    // On the disk: a store in memory (`/dev/shm`) keeps no safe points, whatever the setting (the
    // end of this test).
    let dir = petra_recovery::disk_dir(env!("CARGO_TARGET_TMPDIR"));
    let p = dir.path();
    fake_proc(p);
    let cases = [
        ("250ms", "periodic 250ms", "power loss loses at most the last 250ms"),
        ("immediate", "immediate", "every acknowledged write survives power loss (synced)"),
        ("0", "immediate", "every acknowledged write survives power loss (synced)"),
        ("off", "process", "not power loss (no safe points)"),
    ];
    for (given, policy, guarantee) in cases {
        let out = mon(p, &["--count", "2", "--interval-ms", "5", "--sync-every", given]).output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{given}: {log}");
        let start = log.lines().find(|l| l.contains("petra-mon started")).unwrap();
        assert_eq!(field(start, "durability"), "page-cache", "{start}");
        assert!(!log.contains("--sync-every changes nothing"), "{log}");
        assert_eq!(field(start, "policy"), policy, "{start}");
        assert!(field(start, "guarantee").contains(guarantee), "{start}");
        let stopping = log.lines().find(|l| l.contains("petra-mon stopping")).unwrap();
        let made: u64 = field(stopping, "safe_points").parse().unwrap();
        match policy {
            // Each of the 2 × 5 samples waited for a safe point of its own (one writer: none shared).
            "immediate" => assert!(made >= 10, "{stopping}"),
            "process" => assert_eq!(made, 0, "{stopping}"),
            _ => {}
        }
        assert!(log.contains("petra-mon stopped: the store is closed cleanly"), "{log}");
    }
    // The default, and the configuration file's key (a flag still wins).
    let out = mon(p, &["--count", "1", "--interval-ms", "5"]).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("policy=\"periodic 1s\"") && log.contains("at most the last 1s"), "{log}");
    let config = p.join("petra-mon.toml");
    std::fs::write(&config, "sync_every = \"immediate\"\n").unwrap();
    let out = mon(p, &["--count", "1", "--interval-ms", "5", "--config", config.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("policy=\"immediate\""));
    let with_flag = ["--count", "1", "--interval-ms", "5", "--config", config.to_str().unwrap(), "--sync-every", "off"];
    let out = mon(p, &with_flag).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("policy=\"process\""));

    // A bad value: refused before anything is created, saying what it takes.
    std::fs::remove_file(p.join("m.pool")).unwrap();
    let out = mon(p, &["--count", "1", "--sync-every", "soon"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--sync-every \"soon\""), "{err}");
    assert!(err.contains("immediate") && err.contains("off"), "{err}");
    std::fs::write(&config, "sync_every = \"sometimes\"\n").unwrap();
    let out = mon(p, &["--count", "1", "--config", config.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("\"sometimes\""));
    assert!(!p.join("m.pool").exists(), "a refused start created the store");

    // A store in memory (the scratch directory is in `/dev/shm`): a power loss takes it whole, so
    // no setting keeps safe points, and the start line says so.
    let shm = petra_recovery::scratch_dir();
    fake_proc(shm.path());
    let out = mon(shm.path(), &["--count", "2", "--interval-ms", "5", "--sync-every", "immediate"]).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let start = log.lines().find(|l| l.contains("petra-mon started")).unwrap();
    assert_eq!(field(start, "durability"), "memory", "{start}");
    assert_eq!(field(start, "policy"), "immediate", "{start}");
    assert!(field(start, "guarantee").contains("nothing survives power loss or a reboot"), "{start}");
    assert!(log.contains("--sync-every changes nothing here"), "{log}");
    let stopping = log.lines().find(|l| l.contains("petra-mon stopping")).unwrap();
    assert_eq!(field(stopping, "safe_points"), "0", "{stopping}");
}

/// The value of the sample `name` (no labels: `name{} 1.0`) on a classic page, if there is one.
fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix("{} ")?.parse().ok())
}

#[test]
fn the_page_says_how_long_ago_the_last_safe_point_was() {
    // On the disk: a store in memory (`/dev/shm`) keeps no safe points.
    let dir = petra_recovery::disk_dir(env!("CARGO_TARGET_TMPDIR"));
    let p = dir.path();
    fake_proc(p);
    let d = Daemon::start(mon(p, &["--interval-ms", "10", "--sync-every", "100ms"]));
    let end = Instant::now() + Duration::from_secs(20);
    let page = loop {
        let page = body(&http_get(&d.addr, "/metrics", &[])).to_owned();
        if sample(&page, "petra_mon_safe_points_total").is_some_and(|n| n >= 2.0) {
            break page;
        }
        assert!(Instant::now() < end, "no safe points: {page}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(page.contains("# TYPE petra_mon_safe_points_total counter\n"), "{page}");
    assert_eq!(sample(&page, "petra_mon_safe_point_failures_total"), Some(0.0), "{page}");
    assert!(page.contains("# HELP petra_mon_last_safe_point_age_seconds "), "{page}");
    assert!(page.contains("# TYPE petra_mon_last_safe_point_age_seconds gauge\n"), "{page}");
    let age = sample(&page, "petra_mon_last_safe_point_age_seconds").expect("an age after a safe point");
    // A safe point every 100 ms: a few of them old at most, on a loaded machine.
    assert!((0.0..5.0).contains(&age), "{age}");
    let om = body(&http_get(&d.addr, "/metrics", &[("Accept", PROMETHEUS_ACCEPT)])).to_owned();
    assert!(om.contains("# UNIT petra_mon_last_safe_point_age_seconds seconds\n"), "{om}");
    assert!(om.contains("# TYPE petra_mon_safe_points counter\n"), "{om}");
    assert!(d.stop().success());

    // No safe points: no age (rather than a made-up one), and a count of 0.
    let d = Daemon::start(mon(p, &["--interval-ms", "10", "--sync-every", "off"]));
    d.wait_for_log("sampling set=node7/diskstats", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let page = body(&http_get(&d.addr, "/metrics", &[])).to_owned();
    assert_eq!(sample(&page, "petra_mon_safe_points_total"), Some(0.0), "{page}");
    assert!(!page.contains("petra_mon_last_safe_point_age_seconds"), "{page}");
    assert!(sample(&page, "petra_mon_last_write_age_seconds").is_some(), "{page}");
    assert!(d.stop().success());
}

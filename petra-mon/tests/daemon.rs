//! petra-mon and petra-ls used as a user would: a counted run on a fake /proc, then the query
//! tool's table and JSON; a clean stop on SIGTERM; the OpenMetrics endpoint; and a kill loop on
//! the sampling loop (restarted after every SIGKILL, it loses no acknowledged sample and stores
//! none twice).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use petra_kv::{Config, CreateMode, MetricStore};
use petra_mon::{Producer, SAMPLERS};
use petra_recovery::kill::{KillLoop, ack, child_arg};

fn fake_proc(dir: &Path) {
    let files = [
        ("meminfo", "MemTotal:       24684092 kB\nMemFree:        23957912 kB\nActive(anon):     82153 kB\n"),
        ("vmstat", "nr_free_pages 2266393\npgfault 1234\n"),
        ("loadavg", "0.43 0.90 1.00 1/78 25705\n"),
        ("stat", "cpu  3 0 5 9 2 0 3 3 0 0\ncpu0 1 0 2 4 1 0 1 1 0 0\nintr 2699 0 0\nctxt 513\n"),
        ("diskstats", "   7 0 loop0 1 2 3 4 5 6 7 8 9 10 11\n 259 0 nvme0n1 1 2 3 4 5 6 7 8 0 10 11 0 0 0 0\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn mon(dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_petra-mon"));
    c.args(["--store", dir.join("m.pool").to_str().unwrap(), "--proc-root", dir.to_str().unwrap()]);
    c.args(["--producer", "node7", "--component-id", "7", "--job-id", "42"]).args(extra);
    c
}

fn ls(dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).arg(dir.join("m.pool")).args(extra).output().unwrap();
    assert!(out.status.success(), "petra-ls {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The response to a GET of `path` from the daemon at `addr`, status line and headers included.
fn http_get(addr: &str, path: &str) -> String {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).unwrap();
    let mut page = String::new();
    c.read_to_string(&mut page).unwrap();
    page
}

/// Starts the daemon sampling every 10 ms and serving on a free local port; returns it and the
/// address once it has stored three rounds, so its endpoint is bound (before its first round);
/// the rest of its output is drained meanwhile.
fn serving(dir: &Path) -> (std::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut child =
        mon(dir, &["--interval-ms", "10", "--verbose", "--listen", &addr]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.by_ref().take(3 * SAMPLERS.len()).count(), 3 * SAMPLERS.len());
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr)
}

#[test]
fn a_counted_run_is_listed_by_petra_ls_as_a_table_and_as_json() {
    let dir = petra_recovery::scratch_dir();
    fake_proc(dir.path());
    let out = mon(dir.path(), &["--count", "3", "--interval-ms", "5", "--verbose"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.lines().filter(|l| l.starts_with("stored ")).count(), 3 * SAMPLERS.len(), "{said}");
    // A second run carries the generations on.
    assert!(mon(dir.path(), &["--count", "1", "--interval-ms", "5"]).status().unwrap().success());

    let table = ls(dir.path(), &[]);
    assert_eq!(table.lines().count(), 5, "{table}");
    assert!(
        table
            .contains("node7/meminfo: schema meminfo, producer node7, component 7, job 42, 3 metrics, generation 4 at"),
        "{table}"
    );
    let one = ls(dir.path(), &["--set", "node7/loadavg", "--history", "3600", "--window", "3600"]);
    assert!(one.contains("data   load5                            0.9"), "{one}");
    assert_eq!(one.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count(), 4, "{one}");
    assert!(one.contains("load1"), "{one}");

    let json: serde_json::Value =
        serde_json::from_str(&ls(dir.path(), &["--json", "--set", "node7/stat", "--history", "3600"])).unwrap();
    let set = &json[0];
    assert_eq!(set["instance"], "node7/stat");
    assert_eq!(set["latest"]["generation"], 4);
    assert_eq!(set["latest"]["values"]["cpu0.idle"], 4);
    assert_eq!(set["history"].as_array().unwrap().len(), 4);

    // Bad use: a clear message, a failure status.
    let out = Command::new(env!("CARGO_BIN_EXE_petra-ls"))
        .arg(dir.path().join("m.pool"))
        .args(["--set", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no set named nope"));
    let out = mon(dir.path(), &["--samplers", "meminfo,cpuinfo", "--count", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("unknown sampler \"cpuinfo\""), "{err}");
}

#[test]
fn sigterm_stops_the_daemon_cleanly_and_it_serves_openmetrics_meanwhile() {
    let dir = petra_recovery::scratch_dir();
    fake_proc(dir.path());
    let (mut child, addr) = serving(dir.path());
    // The endpoint: the latest values, as gauges, ending with # EOF.
    let page = http_get(&addr, "/metrics");
    assert!(page.contains("application/openmetrics-text"), "{page}");
    assert!(page.contains("# TYPE petra_meminfo_MemFree gauge"), "{page}");
    assert!(
        page.contains(
            "petra_meminfo_Active_anon_{instance=\"node7/meminfo\",producer=\"node7\",component_id=\"7\"} 82153 "
        ),
        "{page}"
    );
    assert!(page.trim_end().ends_with("# EOF"), "{page}");

    // SAFETY: `kill` on the child's pid, which has not been waited for, so it names our child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let pool = petra::pool::Pool::open(dir.path().join("m.pool"), &Default::default()).unwrap();
    assert!(pool.was_clean(), "SIGTERM did not close the store cleanly");
}

#[test]
fn petra_ls_reads_a_store_the_running_daemon_holds_through_it() {
    let dir = petra_recovery::scratch_dir();
    fake_proc(dir.path());
    let (mut child, addr) = serving(dir.path());
    let ls_from = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).args(["--from", &addr]).args(extra).output().unwrap();
        (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    // The file itself is the daemon's: petra-ls says so and where to ask instead.
    let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).arg(dir.path().join("m.pool")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("open elsewhere") && err.contains("--from ADDR"), "{err}");
    // Through the daemon: the table and the JSON listing.
    let (ok, table, err) = ls_from(&[]);
    assert!(ok, "{err}");
    assert_eq!(table.lines().count(), SAMPLERS.len(), "{table}");
    assert!(table.contains("node7/meminfo: schema meminfo, producer node7, component 7, job 42, 3 metrics"), "{table}");
    let (ok, text, err) = ls_from(&["--json", "--set", "node7/stat", "--history", "3600", "--window", "3600"]);
    assert!(ok, "{err}");
    let live: serde_json::Value = serde_json::from_str(&text).unwrap();
    let history = live[0]["history"].as_array().unwrap().clone();
    assert!(history.len() >= 3, "{text}");
    assert_eq!(live[0]["latest"], history[history.len() - 1], "{text}");
    assert_eq!(live[0]["window"].as_array().unwrap().len(), live[0]["metrics"].as_array().unwrap().len());
    // Mistakes come back as the daemon's message.
    let (ok, _, err) = ls_from(&["--set", "nope"]);
    assert!(!ok && err.contains("answered 404") && err.contains("no set named nope"), "{err}");
    let page = http_get(&addr, "/ls?history=soon");
    assert!(page.starts_with("HTTP/1.0 400") && page.contains("number of seconds"), "{page}");

    // SAFETY: `kill` on the child's pid, which has not been waited for, so it names our child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert!(child.wait().unwrap().success());
    // What the daemon listed is what the file holds: its history is a prefix of the file's.
    let stored: serde_json::Value =
        serde_json::from_str(&ls(dir.path(), &["--json", "--set", "node7/stat", "--history", "3600"])).unwrap();
    let all = stored[0]["history"].as_array().unwrap();
    assert_eq!(&all[..history.len()], &history[..]);
    assert_eq!(stored[0]["metrics"], live[0]["metrics"]);
}

/// Every acknowledged generation is stored once, consecutive from 1, and the latest sample is the
/// history's last; returns the newest generation of each set.
fn check(path: &Path, acked: &BTreeMap<String, u64>) -> Result<BTreeMap<String, u64>, String> {
    let store =
        MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(path) }).map_err(|e| e.to_string())?;
    let mut top = BTreeMap::new();
    {
        let mut s = store.session().unwrap();
        for (id, info) in store.sets() {
            let gens: Vec<u64> = s.range(id, 0, u64::MAX).unwrap().iter().map(|x| x.generation).collect();
            let last = gens.last().copied().unwrap_or(0);
            let want = acked.get(&info.instance).copied().unwrap_or(0);
            if gens != (1..=last).collect::<Vec<_>>() || last < want || last > want + 1 {
                return Err(format!("{}: generations {:?}, acknowledged up to {want}", info.instance, gens));
            }
            if s.latest(id).unwrap().map(|x| x.generation) != gens.last().copied() {
                return Err(format!("{}: latest is not the history's last", info.instance));
            }
            top.insert(info.instance.clone(), last);
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
        let mut s = store.session().unwrap();
        let producer = Producer { name: "node7".into(), component_id: 7, job_id: 0, interval_ns: 1_000_000 };
        let names: Vec<String> = SAMPLERS.iter().map(|s| s.to_string()).collect();
        let mut samplers = petra_mon::setup(&store, &mut s, dir, &names, &producer).unwrap();
        ack("R");
        loop {
            petra_mon::sample_once(&mut s, &mut samplers, |sm, g| ack(format!("node7/{} {g}", sm.name))).unwrap();
        }
    }
    let dir = petra_recovery::scratch_dir();
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

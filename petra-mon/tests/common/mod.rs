//! What the daemon's tests share: a fake /proc, the daemon started as an operator starts it
//! (its log read for the address it serves at), and plain HTTP.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A /proc of five files: two CPUs, one disk (and a loop device left out), each written in one
/// step: a daemon that runs while they are written again never reads one half written.
pub(crate) fn fake_proc(dir: &Path) {
    let files = [
        ("meminfo", "MemTotal:       24684092 kB\nMemFree:        23957912 kB\nActive(anon):     82153 kB\n"),
        ("vmstat", "nr_free_pages 2266393\npgfault 1234\n"),
        ("loadavg", "0.43 0.90 1.00 1/78 25705\n"),
        ("stat", "cpu  3 0 5 9 2 0 3 3 0 0\ncpu0 1 0 2 4 1 0 1 1 0 0\nintr 2699 0 0\nctxt 513\n"),
        ("diskstats", "   7 0 loop0 1 2 3 4 5 6 7 8 9 10 11\n 259 0 nvme0n1 1 2 3 4 5 6 7 8 0 10 11 0 0 0 0\n"),
    ];
    for (name, text) in files {
        replace(dir, name, text);
    }
}

/// Writes `text` as `dir/name` in one step (a rename), as the kernel's files change: a reader
/// never sees half of it.
pub(crate) fn replace(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.new"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, dir.join(name)).unwrap();
}

/// The daemon on `dir`'s fake /proc and store `dir/m.pool`, as producer node7 (component 7,
/// job 42), not serving unless `extra` says where.
pub(crate) fn mon(dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_petra-mon"));
    c.args(["--store", dir.join("m.pool").to_str().unwrap(), "--proc-root", dir.to_str().unwrap()]);
    c.args(["--producer", "node7", "--component-id", "7", "--job-id", "42", "--listen", "off"]).args(extra);
    c
}

/// `petra-ls` on `dir/m.pool`; its standard output (it must succeed).
pub(crate) fn ls(dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_petra-ls")).arg(dir.join("m.pool")).args(extra).output().unwrap();
    assert!(out.status.success(), "petra-ls {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The line the log reader adds when the daemon's standard error closes.
const CLOSED: &str = "<standard error closed>";

/// A running daemon: its process, the address it serves at, and its log so far.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) addr: String,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `command` (given `--listen 127.0.0.1:0` here) and waits for its start line.
    pub(crate) fn start(command: Command) -> Daemon {
        Daemon::start_at(command, "127.0.0.1:0")
    }

    /// Starts `command` listening at `listen` and waits for its start line.
    pub(crate) fn start_at(mut command: Command, listen: &str) -> Daemon {
        command.args(["--listen", listen]).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
            sink.lock().unwrap().push(CLOSED.into());
        });
        let mut d = Daemon { child, addr: String::new(), log };
        let line = d.wait_for_log("petra-mon started", Duration::from_secs(30));
        let addr = line.split("address=\"").nth(1).and_then(|s| s.split('"').next()).unwrap();
        d.addr = addr.to_owned();
        d
    }

    /// The first log line containing `what`, waiting up to `limit` for it.
    pub(crate) fn wait_for_log(&self, what: &str, limit: Duration) -> String {
        let end = Instant::now() + limit;
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            if Instant::now() > end || self.log.lock().unwrap().iter().any(|l| l == CLOSED) {
                panic!("no log line with {what:?} in {limit:?}: {:#?}", self.log.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lines of the log containing `what`.
    pub(crate) fn log_lines(&self, what: &str) -> Vec<String> {
        self.log.lock().unwrap().iter().filter(|l| l.contains(what)).cloned().collect()
    }

    /// Sends `signal` to the daemon.
    pub(crate) fn signal(&self, signal: i32) {
        // SAFETY: `kill` on the child's pid, which has not been waited for, so it names our child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    /// SIGTERM, and the exit status.
    pub(crate) fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.child.wait().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The response to a GET of `path` from `addr` with these headers, status line and headers
/// included.
pub(crate) fn http_get(addr: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).unwrap();
    let mut page = String::new();
    c.read_to_string(&mut page).unwrap();
    page
}

/// The body of a response.
pub(crate) fn body(page: &str) -> &str {
    page.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// The Accept header Prometheus 2.42 sends.
pub(crate) const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

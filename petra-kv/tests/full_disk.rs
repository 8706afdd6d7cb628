//! A store on a filesystem that fills up: writes are refused with an error a user can recognise,
//! nothing acknowledged is lost, reads and removes go on, and once room is freed the store opens
//! with everything and takes writes again. Reopening while the filesystem is still full opens
//! intact or refuses with an error, the file untouched. A store copied sparsely onto a
//! filesystem that is then filled gets an error too, never a SIGBUS from a hole.
//!
//! The filesystem is a 48 MiB tmpfs the test mounts, so it runs only as root (it says so and
//! returns otherwise, or if the mount is not allowed). The store may grow to 256 MiB: the
//! filesystem, not the store's maximum, is what runs out. Every phase that touches the store
//! runs in a child process, so that a signal (a write to a page the filesystem has no room for
//! raises SIGBUS) is reported as a failure of the phase rather than ending the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use petra_kv::{Config, CreateMode, Order, Store};
use petra_recovery::child::{ChildRun, ChildTest, Exit, child_arg, report, variant, verdict};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const TEST: &str = "a_store_on_a_full_filesystem_keeps_what_it_acknowledged_and_recovers_when_room_is_freed";
const SPARSE_TEST: &str = "a_sparse_copy_of_a_store_on_a_full_filesystem_gets_an_error_not_a_signal";
/// Entries a sparse copy's writer tries to put: more than its holes hold.
const SPARSE_PUTS: usize = 4096;
const FS_MIB: u64 = 48;
/// A file taking room on the filesystem before the store fills the rest; deleted to free room.
const FILLER_MIB: usize = 8;
const STORE_MAX: u64 = 256 << 20;
/// How long one phase may take.
const TIMEOUT: Duration = Duration::from_secs(120);
const SEED: u64 = 0xF0_11D1;
/// Acknowledged keys with `i % REMOVE_EVERY == 0` are removed once the store is full.
const REMOVE_EVERY: usize = 7;

/// The `i`-th put of the fill: a 15-byte key (its own engine entry) or, one time in five, a
/// 28-byte one (in a bucket), and a value of about 1 KiB.
fn entry(i: usize) -> (Vec<u8>, Vec<u8>) {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let r: u64 = rng.random();
    let key = if i % 5 == 4 { format!("{i:06x}/long/{r:016x}") } else { format!("{i:06x}{:09x}", r >> 28) };
    let mut value = vec![0u8; rng.random_range(768..1280)];
    rng.fill(&mut value[..]);
    (key.into_bytes(), value)
}

/// What the store must hold.
#[derive(Debug, Clone, Copy)]
struct Model {
    /// Puts acknowledged: entries `0..acked`.
    acked: usize,
    /// Whether put `acked` was in flight when the writer died (it may or may not be there).
    in_flight: bool,
    /// Whether the keys of every [`REMOVE_EVERY`]-th put were removed: `None` if not known (the
    /// writer died among the removes, or some failed).
    removed: Option<bool>,
}

impl Model {
    fn encode(&self) -> String {
        let removed = self.removed.map_or("maybe".to_owned(), |r| r.to_string());
        format!("{} {} {removed}", self.acked, self.in_flight)
    }

    fn decode(s: &str) -> Model {
        let f: Vec<&str> = s.split(' ').collect();
        let removed = if f[2] == "maybe" { None } else { Some(f[2].parse().unwrap()) };
        Model { acked: f[0].parse().unwrap(), in_flight: f[1].parse().unwrap(), removed }
    }

    /// Whether entry `i` must be present (`Some(true)`), absent (`Some(false)`), or may be
    /// either (`None`: the put in flight, or a remove not known to have happened).
    fn present(&self, i: usize) -> Option<bool> {
        if i < self.acked {
            if i.is_multiple_of(REMOVE_EVERY) { self.removed.map(|r| !r) } else { Some(true) }
        } else if i == self.acked && self.in_flight {
            None
        } else {
            Some(false)
        }
    }
}

fn config(path: &Path, create: CreateMode) -> Config {
    Config { create, order: Order::Sorted, size: 2 << 20, max_size: STORE_MAX, ..Config::new(path) }
}

/// Every difference between the store and `model`, over the entries `0..=model.acked + 1`, by
/// single reads and by the count.
fn differences(store: &Store, model: &Model) -> Vec<String> {
    let mut s = match store.session() {
        Ok(s) => s,
        Err(e) => return vec![format!("no session: {e}")],
    };
    let mut out = Vec::new();
    let mut present = 0;
    for i in 0..=model.acked + 1 {
        let (key, value) = entry(i);
        let got = match s.get(&key) {
            Ok(got) => got,
            Err(e) => {
                out.push(format!("get of put {i}: error {e}"));
                continue;
            }
        };
        present += got.is_some() as usize;
        match (model.present(i), got) {
            (Some(false), None) | (None, None) => {}
            (Some(true) | None, Some(v)) if v == value => {}
            (Some(true), None) => out.push(format!("put {i}: absent, want its value")),
            (Some(false), Some(_)) => out.push(format!("put {i}: present, want absent")),
            (_, Some(v)) => out.push(format!("put {i}: a value of {} bytes, want its {} bytes", v.len(), value.len())),
        }
    }
    match s.count_all() {
        Ok(n) if n == present => {}
        Ok(n) => out.push(format!("count {n}, but {present} of the puts were found")),
        Err(e) => out.push(format!("count: error {e}")),
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The child's phases. Each reports lines the parent reads (see `run_phase`).

/// Creates the store and puts entries until a put fails (`acked <i>` after each), then reports
/// the error (`error <variant>\t<message>`), whether the failed put left its key absent, whether
/// every acknowledged key reads back, the removes of every 7th key, the reads after them, and
/// how closing went.
fn fill(path: &Path) {
    let store = Store::open(&config(path, CreateMode::Create)).unwrap();
    let mut s = store.session().unwrap();
    let mut i = 0;
    let error = loop {
        let (key, value) = entry(i);
        match s.put(&key, &value) {
            Ok(()) => report(format!("acked {i}")),
            Err(e) => break e,
        }
        i += 1;
        assert!(i < 1 << 20, "a million puts of 1 KiB fit on a {FS_MIB} MiB filesystem");
    };
    report(format!("error {}\t{error}", variant(&error)));
    let (key, _) = entry(i);
    report(format!("failed put left its key {}", if s.get(&key).unwrap().is_some() { "present" } else { "absent" }));
    drop(s);
    let mut model = Model { acked: i, in_flight: false, removed: Some(false) };
    report(format!("read {}", verdict(&differences(&store, &model))));
    let mut s = store.session().unwrap();
    let mut failed = Vec::new();
    for j in (0..i).step_by(REMOVE_EVERY) {
        match s.remove(&entry(j).0) {
            Ok(true) => {}
            Ok(false) => failed.push(format!("put {j}'s key was not there to remove")),
            Err(e) => failed.push(format!("remove of put {j}: {e}")),
        }
    }
    drop(s);
    if failed.is_empty() {
        report("removed all");
        model.removed = Some(true);
    } else {
        report(format!("removes failed in {} places: {}", failed.len(), failed[..failed.len().min(3)].join("; ")));
    }
    report(format!("reread {}", verdict(&differences(&store, &model))));
    match store.close() {
        Ok(()) => report("closed"),
        Err(e) => report(format!("close failed: {e}")),
    }
}

/// Opens the store: `refused <error>`, or `opened` and how its content compares with the model
/// (then, if `write`, whether a new put succeeds and reads back); closes it.
fn reopen(path: &Path, model: &Model, write: bool) {
    let store = match Store::open(&config(path, CreateMode::Open)) {
        Ok(store) => store,
        Err(e) => {
            report(format!("refused {} [{}]", e, variant(&e)));
            return;
        }
    };
    report("opened");
    report(verdict(&differences(&store, model)));
    if write {
        let mut s = store.session().unwrap();
        let key = b"after-room-freed";
        let outcome = match s.put(key, &[7u8; 1024]) {
            Ok(()) if s.get(key).unwrap().as_deref() == Some(&[7u8; 1024][..]) => "put ok".to_owned(),
            Ok(()) => "put acknowledged but not read back".to_owned(),
            Err(e) => format!("put failed: {e}"),
        };
        report(outcome);
    }
    match store.close() {
        Ok(()) => report("closed"),
        Err(e) => report(format!("close failed: {e}")),
    }
}

/// Opens the store (`refused <error>`, or `opened`) and puts entries from `from` on until one is
/// refused (`acked <i>` after each, then `error <variant>\t<message>`) or [`SPARSE_PUTS`] are
/// in; closes.
fn sparse_write(path: &Path, from: usize) {
    let store = match Store::open(&config(path, CreateMode::Open)) {
        Ok(store) => store,
        Err(e) => {
            report(format!("refused {e} [{}]", variant(&e)));
            return;
        }
    };
    report("opened");
    let mut s = store.session().unwrap();
    for i in from..from + SPARSE_PUTS {
        let (key, value) = entry(i);
        match s.put(&key, &value) {
            Ok(()) => report(format!("acked {i}")),
            Err(e) => {
                report(format!("error {}\t{e}", variant(&e)));
                break;
            }
        }
    }
    drop(s);
    match store.close() {
        Ok(()) => report("closed"),
        Err(e) => report(format!("close failed: {e}")),
    }
}

fn child(arg: &str) {
    let mut fields = arg.split('\t');
    let (phase, path) = (fields.next().unwrap(), PathBuf::from(fields.next().unwrap()));
    match phase {
        "fill" => fill(&path),
        "reopen-full" => reopen(&path, &Model::decode(fields.next().unwrap()), false),
        "reopen-freed" => reopen(&path, &Model::decode(fields.next().unwrap()), true),
        "sparse-write" => sparse_write(&path, Model::decode(fields.next().unwrap()).acked),
        _ => panic!("no phase {phase}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The parent.

/// A tmpfs mounted on a temporary directory, unmounted when dropped (also when a check fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("no directory to mount on: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        match Command::new("umount").arg(self.dir.path()).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!("umount {}: {}", self.dir.path().display(), String::from_utf8_lossy(&out.stderr)),
            Err(e) => eprintln!("umount {}: {e}", self.dir.path().display()),
        }
    }
}

/// Runs `phase` in a child; its reports, or (as a failure) how it died.
fn run_phase(test: &ChildTest, phase: &str, path: &Path, model: Option<&Model>) -> (ChildRun, Vec<String>) {
    let mut arg = format!("{phase}\t{}", path.display());
    if let Some(m) = model {
        arg = format!("{arg}\t{}", m.encode());
    }
    let run = test.run(&arg).unwrap_or_else(|e| panic!("cannot run the {phase} child: {e}"));
    let reports = run.reports().into_iter().map(str::to_owned).collect();
    (run, reports)
}

/// How a child that did not end normally ended, for a failure.
fn died(phase: &str, run: &ChildRun, reports: &[String]) -> Option<String> {
    (run.exit != Exit::Code(0)).then(|| {
        let last: Vec<&str> = reports.iter().rev().take(3).rev().map(String::as_str).collect();
        format!("{phase}: {} (its last reports: [{}])", run.describe_failure(), last.join("; "))
    })
}

fn find<'a>(reports: &'a [String], prefix: &str) -> Option<&'a str> {
    reports.iter().find_map(|r| r.strip_prefix(prefix))
}

#[test]
fn a_store_on_a_full_filesystem_keeps_what_it_acknowledged_and_recovers_when_room_is_freed() {
    if let Some(arg) = child_arg() {
        child(&arg);
        return;
    }
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting the small tmpfs this test fills needs root");
        return;
    }
    let fs = match Tmpfs::mount(FS_MIB) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: cannot mount a {FS_MIB} MiB tmpfs: {why}");
            return;
        }
    };
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![0xA5u8; FILLER_MIB << 20]).unwrap();
    let path = fs.path().join("kv.pool");
    let test = ChildTest::new(TEST, TIMEOUT);
    let mut failures = Vec::new();

    // Fill until a put is refused.
    let (run, reports) = run_phase(&test, "fill", &path, None);
    let acked = reports.iter().filter(|r| r.starts_with("acked ")).count();
    failures.extend(died("fill", &run, &reports));
    let refused = find(&reports, "error ");
    let removed = if reports.iter().any(|r| r == "removed all") {
        Some(true)
    } else if refused.is_none() {
        Some(false)
    } else {
        None
    };
    // A put was in flight if the child died before one was refused.
    let model = Model { acked, in_flight: refused.is_none(), removed };
    eprintln!("fill: {acked} puts of about 1 KiB acknowledged; {}", run.exit);
    match refused {
        Some(e) => {
            let (variant, message) = e.split_once('\t').unwrap();
            eprintln!("fill: the refused put's error: {variant}: {message}");
            let lower = message.to_lowercase();
            if !(lower.contains("full") || lower.contains("space")) {
                failures.push(format!(
                    "fill: the error does not say the store or filesystem is full: {variant}: {message}"
                ));
            }
        }
        None => failures.push("fill: no put was refused".into()),
    }
    if let Some(left) = find(&reports, "failed put left its key ")
        && left != "absent"
    {
        failures.push(format!("fill: the refused put left its key {left}"));
    }
    for (prefix, phase) in [("read ", "reads after the refusal"), ("reread ", "reads after the removes")] {
        if let Some(v) = find(&reports, prefix)
            && v != "equal"
        {
            failures.push(format!("fill: {phase}: {v}"));
        }
    }
    if let Some(r) = find(&reports, "removes failed") {
        failures.push(format!("fill: removes on the full store failed{r}"));
    }
    if let Some(e) = find(&reports, "close failed: ") {
        eprintln!("fill: closing the full store failed: {e}");
    }

    // Reopen while the filesystem is still full: intact, or refused with the file untouched.
    let before = std::fs::read(&path).unwrap();
    let (run, reports) = run_phase(&test, "reopen-full", &path, Some(&model));
    failures.extend(died("reopen on the full filesystem", &run, &reports));
    if run.exit == Exit::Code(0) {
        match reports.first().map(String::as_str) {
            Some(r) if r.starts_with("refused ") => {
                eprintln!("reopen on the full filesystem: {r}");
                if std::fs::read(&path).unwrap() != before {
                    failures.push(format!("reopen on the full filesystem: {r}, but the file changed"));
                }
            }
            Some("opened") => {
                let v = reports.get(1).map_or("no verdict", String::as_str);
                eprintln!("reopen on the full filesystem: opened, content {v}");
                if v != "equal" {
                    failures.push(format!("reopen on the full filesystem: opened, content {v}"));
                }
            }
            _ => failures.push(format!("reopen on the full filesystem: reported {reports:?}")),
        }
    }

    // Free room, reopen: everything is there, and writes are taken again.
    std::fs::remove_file(&filler).unwrap();
    let (run, reports) = run_phase(&test, "reopen-freed", &path, Some(&model));
    failures.extend(died("reopen after freeing room", &run, &reports));
    if run.exit == Exit::Code(0) {
        let expect = ["opened", "equal", "put ok", "closed"];
        if reports != expect {
            failures.push(format!("reopen after freeing room: reported {reports:?}, want {expect:?}"));
        }
    }
    eprintln!("reopen after freeing room: {}", run.exit);
    drop(fs);
    assert!(failures.is_empty(), "the store on a full filesystem failed:\n  {}", failures.join("\n  "));
}

/// A store copied sparsely (its zero pages left as holes, as `cp --sparse=always` or a restore
/// makes them) onto a filesystem that is then filled: writing into it gets an error (the open
/// refused, or a put), never a SIGBUS from a store into a hole; once room is freed it opens with
/// everything acknowledged and takes writes again.
#[test]
fn a_sparse_copy_of_a_store_on_a_full_filesystem_gets_an_error_not_a_signal() {
    if let Some(arg) = child_arg() {
        child(&arg);
        return;
    }
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting the small tmpfs this test fills needs root");
        return;
    }
    let fs = match Tmpfs::mount(FS_MIB) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: cannot mount a {FS_MIB} MiB tmpfs: {why}");
            return;
        }
    };
    // A store of 100 entries in a file of 16 MiB, most of it free chunks.
    let original = fs.path().join("original.pool");
    let store = Store::open(&Config { size: 16 << 20, ..config(&original, CreateMode::Create) }).unwrap();
    let mut s = store.session().unwrap();
    for i in 0..100 {
        let (key, value) = entry(i);
        s.put(&key, &value).unwrap();
    }
    drop(s);
    store.close().unwrap();
    let bytes = std::fs::read(&original).unwrap();
    std::fs::remove_file(&original).unwrap();
    let path = fs.path().join("kv.pool");
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::create_new(&path).unwrap();
        file.set_len(bytes.len() as u64).unwrap();
        for (i, page) in bytes.chunks(4096).enumerate() {
            if page.iter().any(|&b| b != 0) {
                file.write_all_at(page, i as u64 * 4096).unwrap();
            }
        }
    }
    use std::os::unix::fs::MetadataExt;
    let blocks = std::fs::metadata(&path).unwrap().blocks() * 512;
    assert!(blocks < bytes.len() as u64 / 2, "the copy is sparse: {blocks} bytes of blocks for {}", bytes.len());
    // Fill the filesystem to the last byte.
    let filler = fs.path().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let mib = vec![0xA5u8; 1 << 20];
        while f.write_all(&mib).is_ok() {}
        let page = vec![0xA5u8; 4096];
        while f.write_all(&page).is_ok() {}
    }
    let test = ChildTest::new(SPARSE_TEST, TIMEOUT);
    let mut failures = Vec::new();
    let before = std::fs::read(&path).unwrap();
    let (run, reports) =
        run_phase(&test, "sparse-write", &path, Some(&Model { acked: 100, in_flight: false, removed: None }));
    failures.extend(died("writing the sparse copy on the full filesystem", &run, &reports));
    let acked = reports.iter().filter(|r| r.starts_with("acked ")).count();
    eprintln!("sparse copy on the full filesystem: {acked} puts acknowledged; {}", run.exit);
    let error = match reports.first().map(String::as_str) {
        Some(r) if r.starts_with("refused ") => {
            if std::fs::read(&path).unwrap() != before {
                failures.push(format!("the sparse copy was refused ({r}), but the file changed"));
            }
            Some(r.to_owned())
        }
        Some("opened") => find(&reports, "error ").map(str::to_owned),
        _ => None,
    };
    match error {
        Some(e) => {
            eprintln!("sparse copy on the full filesystem: {e}");
            let lower = e.to_lowercase();
            if !(lower.contains("full") || lower.contains("space")) {
                failures.push(format!("the error does not say the filesystem is full: {e}"));
            }
        }
        None if run.exit == Exit::Code(0) => {
            failures.push(format!("no error on a full filesystem: reported {:?}", &reports[..reports.len().min(3)]))
        }
        None => {}
    }
    // Free room: everything acknowledged is there, and writes are taken again.
    std::fs::remove_file(&filler).unwrap();
    if run.exit == Exit::Code(0) {
        let model = Model { acked: 100 + acked, in_flight: false, removed: Some(false) };
        let (run, reports) = run_phase(&test, "reopen-freed", &path, Some(&model));
        failures.extend(died("reopen after freeing room", &run, &reports));
        let expect = ["opened", "equal", "put ok", "closed"];
        if run.exit == Exit::Code(0) && reports != expect {
            failures.push(format!("reopen after freeing room: reported {reports:?}, want {expect:?}"));
        }
    }
    drop(fs);
    assert!(failures.is_empty(), "the sparse copy on a full filesystem failed:\n  {}", failures.join("\n  "));
}

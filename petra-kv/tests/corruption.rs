//! The corruption battery: store files damaged in the ways files get damaged (cut short,
//! lengthened with garbage, bytes flipped in the header and in the body, pages zeroed, lines
//! swapped, the header replaced by another store's or by an older copy's) are opened with the
//! normal API in a child process. Every case must end in one of two ways:
//!
//! - opened, with every key's value the one acknowledged (removed keys absent), by single reads
//!   and by a full scan; for the metric store, every set's record and samples;
//! - refused with an error, the file left byte for byte as it was.
//!
//! A panic, a signal, a hang, or content that differs without an error fails the case. Damage
//! that lands where the store keeps nothing may open intact: that is one of the two good ends.
//! A file the damage left as it was (and the undamaged control) must open intact.
//!
//! The stores: a sorted and an unsorted [`Store`] of a few thousand keys (short keys, keys
//! longer than 15 bytes, which share buckets, values from empty to several KiB, overwrites,
//! removes and batches) and a [`MetricStore`] of a few sets and a few hundred samples (integers,
//! floats, arrays, one set's record replaced, one history trimmed). Each is written with
//! checkpoint rounds along the way, so that both the folded node records and the descriptors
//! written after them matter, then damaged in two states: **closed** ([`Store::close`]) and
//! **unclosed** (the file as a killed process leaves it: complete, not marked clean). The files
//! have the layout a [`Config`] gives (1 MiB chunks: a store of this size takes 20 to 40 of them,
//! one slab per size class in use, the descriptor ring, the blobs).
//!
//! Each damage kind runs `PETRA_CORRUPTION_CASES` seeded instances per store and state (2 by
//! default, sized for CI); `PETRA_CORRUPTION_ONLY=<text>` runs only the cases whose id contains
//! the text (to replay one: ids read `sorted/unclosed/zero-page#1`). The seeds are fixed: the same cases run every time. The files are
//! not byte-for-byte the same from run to run (a pool's uuid and creation time differ), the
//! damage's offsets are.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::{Bound, Range};
use std::path::Path;
use std::time::{Duration, Instant};

use petra_kv::{
    Batch, Config, CreateMode, Metric, MetricStore, Order, Sample, Scalar, Schema, SetId, SetInfo, Store, Stored, Value,
};
use petra_recovery::child::{ChildTest, Exit, child_arg, report, variant, verdict};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How long opening and reading a damaged store may take before the case counts as a hang.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Seeded instances of each damage kind per store and state.
const CASES_ENV: &str = "PETRA_CORRUPTION_CASES";
const DEFAULT_CASES: u64 = 2;
/// Only the cases whose id contains this text.
const ONLY_ENV: &str = "PETRA_CORRUPTION_ONLY";
/// The seed of the stores' content (the damage's seeds are derived from the case).
const CONTENT_SEED: u64 = 0x0C02_20B7;
const PAGE: usize = 4096;
const LINE: usize = 64;
/// The pool header's fields this battery reads (see `petra/src/pool/header.rs`).
const CHUNK_SIZE_AT: usize = 16;
const DATA_OFF_AT: usize = 40;
const ROOT_TABLE_AT: usize = 1024;
const ROOT_ENTRY: usize = 64;
const ROOT_ENTRIES: usize = 48;
/// The header bytes a flip aims at: its fixed fields, the shutdown word and half the boot id of the
/// state line's first copy (the seeds were drawn with this bound).
const HEADER_FIELDS: usize = 144;
const SEC: u64 = 1_000_000_000;

// ---------------------------------------------------------------------------------------------
// The stores and what they must hold.

/// A kind of store under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sorted,
    Unsorted,
    Metric,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sorted => "sorted",
            Kind::Unsorted => "unsorted",
            Kind::Metric => "metric",
        }
    }

    fn parse(s: &str) -> Kind {
        [Kind::Sorted, Kind::Unsorted, Kind::Metric].into_iter().find(|k| k.name() == s).expect("a kind of store")
    }

    /// Another kind, whose files donate headers to this kind's.
    fn other(self) -> Kind {
        match self {
            Kind::Sorted => Kind::Unsorted,
            Kind::Unsorted => Kind::Metric,
            Kind::Metric => Kind::Sorted,
        }
    }

    fn order(self) -> Order {
        match self {
            Kind::Unsorted => Order::Unsorted { buckets: 4096 },
            Kind::Sorted | Kind::Metric => Order::Sorted,
        }
    }

    /// The configuration the stores of this battery are made and opened with: a maximum size small
    /// enough for a chunk table of one page, large enough for the stores' few tens of MiB; the
    /// default durability policy (safe points, so that rounds fold only what a safe point covers
    /// and the unclosed files hold what a kill leaves under it: the files are on the disk, where
    /// the engine keeps them). Under safe points a state line read as another boot brings an
    /// unclosed pool back to its last safe point: a damaged boot id
    /// (`unsorted/unclosed/flip-header#4` with `PETRA_CORRUPTION_CASES=12`) must be covered by the
    /// line's other copy, not read so.
    fn config(self, path: &Path, create: CreateMode) -> Config {
        Config { create, order: self.order(), size: 2 << 20, max_size: 64 << 20, ..Config::new(path) }
    }
}

/// How big a store's workload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// The stores under test.
    Full,
    /// The stores whose headers are copied into them.
    Small,
}

/// A step of a key-value workload.
#[derive(Debug)]
enum Step {
    Put(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Checkpoint,
    /// Keep a copy of the header and chunk table as they are now.
    SaveHeader,
}

/// What a key-value store must hold: every present key's value, and the keys that were written
/// and then removed (which must stay absent).
#[derive(Debug, Default)]
struct StoreModel {
    present: BTreeMap<Vec<u8>, Vec<u8>>,
    removed: BTreeSet<Vec<u8>>,
}

impl StoreModel {
    fn apply(&mut self, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.removed.remove(key);
                self.present.insert(key.to_vec(), v.to_vec());
            }
            None => {
                if self.present.remove(key).is_some() {
                    self.removed.insert(key.to_vec());
                }
            }
        }
    }
}

/// Key `i` of a workload: short keys of up to 15 bytes (own engine entries), and longer ones
/// under 15-byte heads shared by a few keys each (buckets), some of them a few hundred bytes
/// long.
fn key(i: usize) -> Vec<u8> {
    let head = i % 251;
    match i % 8 {
        0..=2 => format!("k{i}").into_bytes(),
        3 => format!("short-key-{i:05}").into_bytes(), // exactly 15 bytes
        4..=6 => format!("node{head:03}/meminfo/{i:05}").into_bytes(), // 15-byte head, 21 bytes
        _ => format!("node{head:03}/vmstat/{i}/{}", "tail".repeat(i % 60)).into_bytes(),
    }
}

fn is_long(key: &[u8]) -> bool {
    key.len() > 15
}

/// A value for `key`: mostly short, some of a few hundred bytes, a few of several KiB (up to
/// 8 KiB for a short key, 3 KiB for a long one, so that a bucket stays within a slab block
/// rather than taking a chunk of its own); some empty.
fn value(key: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let large = if is_long(key) { 2048..3072 } else { 2048..8192 };
    let len = match rng.random_range(0..100) {
        0..=4 => 0,
        5..=69 => rng.random_range(1..64),
        70..=94 => rng.random_range(64..1024),
        _ => rng.random_range(large),
    };
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// The workload of a key-value store and what the store holds after it: every key put once, then
/// overwrites, removes, puts of removed keys and small batches, with checkpoint rounds every 700
/// steps and two copies of the header taken along the way (each followed by more writes and a
/// checkpoint).
fn store_workload(seed: u64, scale: Scale) -> (Vec<Step>, StoreModel) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let keys = match scale {
        Scale::Full => 3000,
        Scale::Small => 300,
    };
    let mut model = StoreModel::default();
    let mut steps = Vec::new();
    let mut order: Vec<usize> = (0..keys).collect();
    for i in (1..keys).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    for &i in &order {
        let v = value(&key(i), &mut rng);
        model.apply(&key(i), Some(&v));
        steps.push(Step::Put(key(i), v));
    }
    for _ in 0..keys / 2 {
        let k = key(rng.random_range(0..keys));
        match rng.random_range(0..100) {
            0..=54 => {
                let v = value(&k, &mut rng);
                model.apply(&k, Some(&v));
                steps.push(Step::Put(k, v));
            }
            55..=89 => {
                model.apply(&k, None);
                steps.push(Step::Remove(k));
            }
            _ => {
                let mut changes = BTreeMap::new();
                for _ in 0..rng.random_range(2..=6) {
                    let k = key(rng.random_range(0..keys));
                    let v = rng.random_bool(0.7).then(|| value(&k, &mut rng));
                    changes.insert(k, v);
                }
                for (k, v) in &changes {
                    model.apply(k, v.as_deref());
                }
                steps.push(Step::Batch(changes.into_iter().collect()));
            }
        }
    }
    let n = steps.len();
    let mut all = Vec::with_capacity(n + n / 700 + 2);
    for (i, step) in steps.into_iter().enumerate() {
        if i > 0 && i % 700 == 0 {
            all.push(Step::Checkpoint);
        }
        if i == n * 3 / 10 || i == n * 13 / 20 {
            all.push(Step::SaveHeader);
        }
        all.push(step);
    }
    (all, model)
}

/// A step of a metric workload.
#[derive(Debug)]
enum MetricStep {
    Schema(Schema),
    Set(SetInfo),
    /// A sample of the set of this id, and what storing it does (a re-send of the latest sample
    /// is a duplicate).
    Sample(u32, Sample, Stored),
    Trim {
        set: u32,
        before: u64,
        keep: Option<usize>,
    },
    Checkpoint,
    SaveHeader,
}

/// What a metric store must hold: its schemas, and each set's record and samples, by id.
#[derive(Debug, Default)]
struct MetricModel {
    schemas: Vec<Schema>,
    sets: Vec<SetInfo>,
    samples: Vec<Vec<Sample>>,
}

fn meminfo() -> Schema {
    Schema {
        name: "meminfo".into(),
        metrics: vec![
            Metric::meta("component_id", Scalar::U64),
            Metric::data("MemFree", Scalar::U64),
            Metric::data("Delta", Scalar::S32),
            Metric::data("Load", Scalar::F64),
            Metric::data("Ratio", Scalar::F32),
            Metric { name: "PerCpu".into(), scalar: Scalar::U8, array: Some(8), meta: false },
        ],
    }
}

fn procstat() -> Schema {
    Schema {
        name: "procstat".into(),
        metrics: vec![
            Metric::meta("cores", Scalar::U16),
            Metric { name: "user".into(), scalar: Scalar::S64, array: Some(16), meta: false },
            Metric { name: "idle".into(), scalar: Scalar::F64, array: Some(16), meta: false },
            Metric::data("ctxt", Scalar::U32),
        ],
    }
}

fn set_info(instance: &str, schema: &str, component: u64, job: u64) -> SetInfo {
    SetInfo {
        instance: instance.into(),
        schema: schema.into(),
        producer: format!("node{component}"),
        component_id: component,
        job_id: job,
        interval_ns: SEC,
    }
}

fn metric_values(schema: &str, component: u64, rng: &mut ChaCha8Rng) -> Vec<Value> {
    let float = |rng: &mut ChaCha8Rng| rng.random_range(-1e9..1e9f64);
    match schema {
        "meminfo" => vec![
            Value::U(component),
            Value::U(rng.random()),
            Value::S(rng.random::<i32>().into()),
            Value::F(float(rng)),
            Value::F(f64::from(rng.random::<f32>())),
            Value::Array((0..8).map(|_| Value::U(rng.random::<u8>().into())).collect()),
        ],
        _ => vec![
            Value::U(16),
            Value::Array((0..16).map(|_| Value::S(rng.random())).collect()),
            Value::Array((0..16).map(|_| Value::F(float(rng))).collect()),
            Value::U(rng.random::<u32>().into()),
        ],
    }
}

/// The workload of a metric store and what the store holds after it: two schemas, five sets,
/// samples in turn with gaps, re-sends of the latest sample (duplicates, not stored again), one
/// set's record replaced, two histories trimmed, checkpoint rounds every 120 steps and two
/// copies of the header taken along the way.
fn metric_workload(seed: u64, scale: Scale) -> (Vec<MetricStep>, MetricModel) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let samples = match scale {
        Scale::Full => 400,
        Scale::Small => 60,
    };
    let mut model = MetricModel::default();
    let mut steps = Vec::new();
    for schema in [meminfo(), procstat()] {
        model.schemas.push(schema.clone());
        steps.push(MetricStep::Schema(schema));
    }
    let sets = [
        set_info("node0/meminfo", "meminfo", 0, 7),
        set_info("node1/meminfo", "meminfo", 1, 7),
        set_info("node2/meminfo", "meminfo", 2, 0),
        set_info("node0/procstat", "procstat", 0, 7),
        set_info("node1/procstat", "procstat", 1, 8),
    ];
    for info in sets {
        model.sets.push(info.clone());
        model.samples.push(Vec::new());
        steps.push(MetricStep::Set(info));
    }
    let mut generation = [0u64; 5];
    let mut sample_steps = Vec::new();
    for i in 0..samples {
        if i == samples / 2 {
            // The set's producer starts a new job: its record is replaced, its id kept.
            let info = set_info("node1/meminfo", "meminfo", 1, 9);
            model.sets[1] = info.clone();
            sample_steps.push(MetricStep::Set(info));
        }
        if i == samples * 3 / 4 {
            sample_steps.push(trim(&mut model, 0, 0, Some(25)));
            let cut = model.samples[3].get(model.samples[3].len() / 3).map_or(0, |s| s.timestamp);
            sample_steps.push(trim(&mut model, 3, cut, None));
        }
        let set = rng.random_range(0..5usize);
        if rng.random_bool(0.05)
            && let Some(last) = model.samples[set].last()
        {
            sample_steps.push(MetricStep::Sample(set as u32, last.clone(), Stored::Duplicate));
            continue;
        }
        generation[set] += rng.random_range(1..=3);
        let g = generation[set];
        let sample = Sample {
            timestamp: 1_700_000_000 * SEC + g * SEC + rng.random_range(0..SEC / 2),
            duration: rng.random_range(0..1_000_000),
            generation: g,
            consistent: rng.random_bool(0.9),
            values: metric_values(&model.sets[set].schema, model.sets[set].component_id, &mut rng),
        };
        model.samples[set].push(sample.clone());
        sample_steps.push(MetricStep::Sample(set as u32, sample, Stored::New));
    }
    let n = sample_steps.len();
    for (i, step) in sample_steps.into_iter().enumerate() {
        if i > 0 && i % 120 == 0 {
            steps.push(MetricStep::Checkpoint);
        }
        if i == n * 3 / 10 || i == n * 13 / 20 {
            steps.push(MetricStep::SaveHeader);
        }
        steps.push(step);
    }
    (steps, model)
}

/// A trim of set `set` as [`petra_kv::MetricSession::trim`] does it, applied to the model.
fn trim(model: &mut MetricModel, set: usize, before: u64, keep: Option<usize>) -> MetricStep {
    let history = &mut model.samples[set];
    let older = history.len().saturating_sub(1);
    let by_count = keep.map_or(0, |k| older.saturating_sub(k.saturating_sub(1)));
    let by_age = history[..older].iter().take_while(|s| s.timestamp < before).count();
    history.drain(..by_count.max(by_age));
    MetricStep::Trim { set: set as u32, before, keep }
}

// ---------------------------------------------------------------------------------------------
// Writing the stores.

/// A store's file, in both states, and copies of its header and chunk table taken as it was
/// written.
#[derive(Debug)]
struct Images {
    kind: Kind,
    closed: Vec<u8>,
    unclosed: Vec<u8>,
    /// Bytes `[0, data_off)`, each copy taken before more writes and a checkpoint round.
    older: Vec<Vec<u8>>,
}

impl Images {
    fn state(&self, state: State) -> &[u8] {
        match state {
            State::Closed => &self.closed,
            State::Unclosed => &self.unclosed,
        }
    }
}

/// The header page and chunk table of the file at `path`, as they are now.
fn header_and_table(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).unwrap();
    let mut bytes = vec![0u8; PAGE];
    file.read_exact(&mut bytes).unwrap();
    bytes.resize(data_off(&bytes), 0);
    file.read_exact(&mut bytes[PAGE..]).unwrap();
    bytes
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn data_off(header: &[u8]) -> usize {
    u64_at(header, DATA_OFF_AT) as usize
}

fn chunk_size(header: &[u8]) -> usize {
    u64_at(header, CHUNK_SIZE_AT) as usize
}

/// Writes a store of `kind` at `path` with the workload of `seed`. The unclosed image is the file
/// as it is after the last write, the store still open (what a kill at that moment leaves: only
/// the background syncer may still store, the safe and checkpoint txids of a safe point, which a
/// kill may interrupt too); the closed one is the file after [`Store::close`].
fn write_store(kind: Kind, seed: u64, scale: Scale, path: &Path) -> Images {
    let config = kind.config(path, CreateMode::Create);
    let mut older = Vec::new();
    let unclosed;
    if kind == Kind::Metric {
        let (steps, _) = metric_workload(seed, scale);
        let store = MetricStore::open(&config).unwrap();
        assert_eq!(store.medium(), petra::mem::Durability::PageCache, "a file on a disk keeps safe points");
        let mut s = store.session().unwrap();
        for step in steps {
            match step {
                MetricStep::Schema(schema) => store.add_schema(&schema).unwrap(),
                MetricStep::Set(info) => drop(store.add_set(&info).unwrap()),
                MetricStep::Sample(set, sample, stored) => {
                    assert_eq!(s.store_sample(SetId(set), &sample).unwrap(), stored)
                }
                MetricStep::Trim { set, before, keep } => drop(s.trim(SetId(set), before, keep).unwrap()),
                MetricStep::Checkpoint => drop(store.checkpoint().unwrap()),
                MetricStep::SaveHeader => older.push(header_and_table(path)),
            }
        }
        drop(s);
        unclosed = std::fs::read(path).unwrap();
        store.close().unwrap();
    } else {
        let (steps, _) = store_workload(seed, scale);
        let store = Store::open(&config).unwrap();
        assert_eq!(store.medium(), petra::mem::Durability::PageCache, "a file on a disk keeps safe points");
        let mut s = store.session().unwrap();
        for step in steps {
            match step {
                Step::Put(k, v) => s.put(&k, &v).unwrap(),
                Step::Remove(k) => drop(s.remove(&k).unwrap()),
                Step::Batch(changes) => {
                    let mut batch = Batch::new();
                    for (k, v) in &changes {
                        match v {
                            Some(v) => batch.put(k, v),
                            None => batch.remove(k),
                        };
                    }
                    s.write(&batch).unwrap();
                }
                Step::Checkpoint => drop(store.checkpoint().unwrap()),
                Step::SaveHeader => older.push(header_and_table(path)),
            }
        }
        drop(s);
        unclosed = std::fs::read(path).unwrap();
        store.close().unwrap();
    }
    let closed = std::fs::read(path).unwrap();
    assert_eq!(older.len(), 2, "two copies of the header were taken");
    Images { kind, closed, unclosed, older }
}

// ---------------------------------------------------------------------------------------------
// The child: open, read everything, compare.

/// Opens the store of `kind` at `path` and reports what it found: `refused <error>`, or `opened`
/// and then `equal` or `differs <differences>`. The store is dropped, not closed.
fn child(arg: &str) {
    let (kind, path) = arg.split_once('\t').expect("a kind and a path");
    let (kind, path) = (Kind::parse(kind), Path::new(path));
    let config = kind.config(path, CreateMode::Open);
    if kind == Kind::Metric {
        match MetricStore::open(&config) {
            Err(e) => report(format!("refused {e} [{}]", variant(&e))),
            Ok(store) => {
                report("opened");
                let (_, model) = metric_workload(CONTENT_SEED, Scale::Full);
                report(verdict(&check_metric(&store, &model)));
            }
        }
    } else {
        match Store::open(&config) {
            Err(e) => report(format!("refused {e} [{}]", variant(&e))),
            Ok(store) => {
                report("opened");
                let (_, model) = store_workload(CONTENT_SEED, Scale::Full);
                report(verdict(&check_store(&store, &model)));
            }
        }
    }
}

fn show_key(k: &[u8]) -> String {
    let s = String::from_utf8_lossy(k);
    if s.len() > 40 { format!("{}..({} bytes)", &s[..40], k.len()) } else { s.into_owned() }
}

/// How value `got` differs from `want` (`None`: absent).
fn value_diff(got: Option<&[u8]>, want: Option<&[u8]>) -> String {
    match (got, want) {
        (None, None) => "absent as it should be".into(),
        (None, Some(w)) => format!("absent, want {} bytes", w.len()),
        (Some(g), None) => format!("{} bytes, want absent", g.len()),
        (Some(g), Some(w)) if g.len() != w.len() => format!("{} bytes, want {}", g.len(), w.len()),
        (Some(g), Some(w)) => {
            let differing: Vec<usize> = (0..g.len()).filter(|&i| g[i] != w[i]).collect();
            match differing.first() {
                None => "equal".into(),
                Some(&i) => format!(
                    "{} of its {} bytes differ, the first at {i}: {:#04x}, want {:#04x}",
                    differing.len(),
                    g.len(),
                    g[i],
                    w[i]
                ),
            }
        }
    }
}

/// Every difference between the store and the model: by single reads of every key written
/// (present ones and removed ones), by a full scan, and by the count.
fn check_store(store: &Store, model: &StoreModel) -> Vec<String> {
    let mut out = Vec::new();
    let mut s = match store.session() {
        Ok(s) => s,
        Err(e) => return vec![format!("no session: {e}")],
    };
    for (k, v) in &model.present {
        match s.get(k) {
            Ok(got) if got.as_deref() == Some(v.as_slice()) => {}
            Ok(got) => out.push(format!("get {}: {}", show_key(k), value_diff(got.as_deref(), Some(v)))),
            Err(e) => out.push(format!("get {}: error {e}", show_key(k))),
        }
    }
    for k in &model.removed {
        match s.get(k) {
            Ok(None) => {}
            Ok(got) => out.push(format!("get {} (removed): {}", show_key(k), value_diff(got.as_deref(), None))),
            Err(e) => out.push(format!("get {} (removed): error {e}", show_key(k))),
        }
    }
    match s.iter(Bound::Unbounded, Bound::Unbounded) {
        Err(e) => out.push(format!("scan: error {e}")),
        Ok(scan) => {
            let scan: Vec<(Vec<u8>, Vec<u8>)> = scan.collect();
            if store.order() == Order::Sorted && scan.windows(2).any(|w| w[0].0 >= w[1].0) {
                out.push("scan: keys out of order or repeated".into());
            }
            let mut got: Vec<(Vec<u8>, Vec<u8>)> = scan;
            got.sort();
            let want: Vec<(Vec<u8>, Vec<u8>)> = model.present.clone().into_iter().collect();
            if got != want {
                let first = got.iter().zip(&want).position(|(g, w)| g != w).unwrap_or(got.len().min(want.len()));
                let what = match (got.get(first), want.get(first)) {
                    (Some((gk, gv)), Some((wk, wv))) if gk == wk => {
                        format!("{}: {}", show_key(gk), value_diff(Some(gv), Some(wv)))
                    }
                    (g, w) => {
                        let key = |e: Option<&(Vec<u8>, Vec<u8>)>| e.map_or("the end".into(), |(k, _)| show_key(k));
                        format!("key {}, want {}", key(g), key(w))
                    }
                };
                out.push(format!("scan: {} entries, want {}; entry {first}: {what}", got.len(), want.len()));
            }
        }
    }
    match s.count_all() {
        Ok(n) if n == model.present.len() => {}
        Ok(n) => out.push(format!("count: {n}, want {}", model.present.len())),
        Err(e) => out.push(format!("count: error {e}")),
    }
    out
}

/// Every difference between the metric store and the model: its sets' records, its schemas, each
/// set's samples and latest sample.
fn check_metric(store: &MetricStore, model: &MetricModel) -> Vec<String> {
    let mut out = Vec::new();
    let want_sets: Vec<(SetId, SetInfo)> =
        model.sets.iter().enumerate().map(|(i, s)| (SetId(i as u32), s.clone())).collect();
    let got_sets = store.sets();
    if got_sets != want_sets {
        out.push(format!("sets: {got_sets:?}, want {want_sets:?}"));
    }
    for schema in &model.schemas {
        if store.schema(&schema.name).as_ref() != Some(schema) {
            out.push(format!("schema {}: {:?}", schema.name, store.schema(&schema.name)));
        }
    }
    let mut s = match store.session() {
        Ok(s) => s,
        Err(e) => return vec![format!("no session: {e}")],
    };
    for (i, want) in model.samples.iter().enumerate() {
        let (id, name) = (SetId(i as u32), &model.sets[i].instance);
        match s.range(id, 0, u64::MAX) {
            Err(e) => out.push(format!("{name}: range: error {e}")),
            Ok(got) if got == *want => {}
            Ok(got) => {
                let first = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(got.len().min(want.len()));
                let what = match (got.get(first), want.get(first)) {
                    (Some(g), Some(w)) => sample_diff(g, w, &model.schemas, &model.sets[i].schema),
                    (None, Some(w)) => format!("missing, want generation {} at {}", w.generation, w.timestamp),
                    (Some(g), None) => format!("generation {} at {}, want none", g.generation, g.timestamp),
                    (None, None) => unreachable!("the histories differ"),
                };
                out.push(format!("{name}: {} samples, want {}; sample {first}: {what}", got.len(), want.len()));
            }
        }
        match s.latest(id) {
            Err(e) => out.push(format!("{name}: latest: error {e}")),
            Ok(got) if got.as_ref() == want.last() => {}
            Ok(got) => out.push(format!(
                "{name}: latest is generation {:?}, want {:?}",
                got.map(|x| x.generation),
                want.last().map(|x| x.generation)
            )),
        }
    }
    out
}

/// How sample `got` differs from `want`, of the schema named `schema`.
fn sample_diff(got: &Sample, want: &Sample, schemas: &[Schema], schema: &str) -> String {
    if (got.timestamp, got.generation) != (want.timestamp, want.generation) {
        return format!(
            "generation {} at {}, want generation {} at {}",
            got.generation, got.timestamp, want.generation, want.timestamp
        );
    }
    let at = format!("generation {} at {}", want.generation, want.timestamp);
    if (got.duration, got.consistent) != (want.duration, want.consistent) {
        return format!("{at}: duration and consistent flag differ");
    }
    let metrics = &schemas.iter().find(|s| s.name == schema).expect("the set's schema").metrics;
    match got.values.iter().zip(&want.values).position(|(g, w)| g != w) {
        Some(m) => format!("{at}: metric {} is {:?}, want {:?}", metrics[m].name, got.values[m], want.values[m]),
        None => format!("{at}: {} values, want {}", got.values.len(), want.values.len()),
    }
}

// ---------------------------------------------------------------------------------------------
// Damage.

/// Whether the store was closed before the damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Unclosed,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Unclosed => "unclosed",
        }
    }
}

/// A kind of damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// None: the control, which must open intact.
    Intact,
    /// Cut to a random length.
    Truncate,
    /// Cut to a chunk boundary (a length a pool can have).
    TruncateToChunk,
    /// Random bytes appended, not a whole number of chunks.
    Append,
    /// Whole chunks of random bytes appended (a length a pool can have).
    AppendChunks,
    /// 1 to 4 bytes of the header page flipped (half of them in its fields and root entries in
    /// use).
    FlipHeader,
    /// 1 to 4 bytes after the header page flipped (half of them bytes that were not zero).
    FlipBody,
    /// A 4 KiB page after the header that was not all zero, zeroed.
    ZeroPage,
    /// Two 64-byte lines of different content exchanged.
    SwapLines,
    /// Another store's header page copied over this one's.
    ForeignHeader,
    /// Another store's header page and chunk table copied over this one's.
    ForeignHeaderTable,
    /// This store's header page as it was earlier (before more writes and a checkpoint).
    OlderHeader,
    /// This store's header page and chunk table as they were earlier.
    OlderHeaderTable,
}

const DAMAGES: [Damage; 13] = [
    Damage::Intact,
    Damage::Truncate,
    Damage::TruncateToChunk,
    Damage::Append,
    Damage::AppendChunks,
    Damage::FlipHeader,
    Damage::FlipBody,
    Damage::ZeroPage,
    Damage::SwapLines,
    Damage::ForeignHeader,
    Damage::ForeignHeaderTable,
    Damage::OlderHeader,
    Damage::OlderHeaderTable,
];

impl Damage {
    fn name(self) -> &'static str {
        match self {
            Damage::Intact => "intact",
            Damage::Truncate => "truncate",
            Damage::TruncateToChunk => "truncate-to-chunk",
            Damage::Append => "append",
            Damage::AppendChunks => "append-chunks",
            Damage::FlipHeader => "flip-header",
            Damage::FlipBody => "flip-body",
            Damage::ZeroPage => "zero-page",
            Damage::SwapLines => "swap-lines",
            Damage::ForeignHeader => "foreign-header",
            Damage::ForeignHeaderTable => "foreign-header+table",
            Damage::OlderHeader => "older-header",
            Damage::OlderHeaderTable => "older-header+table",
        }
    }
}

/// What a damage may copy in: other stores' files, and this store's older headers.
struct Donors<'a> {
    /// Other stores' files (same layout), named.
    others: Vec<(String, &'a [u8])>,
    older: &'a [Vec<u8>],
}

/// Damages `bytes` as `damage` says, with the random choices of `rng` (the `instance`-th case of
/// the kind picks the donor); returns what it did.
fn apply_damage(
    damage: Damage,
    bytes: &mut Vec<u8>,
    instance: u64,
    rng: &mut ChaCha8Rng,
    donors: &Donors<'_>,
) -> String {
    let len = bytes.len();
    let (chunk, first_chunk) = (chunk_size(bytes), data_off(bytes));
    let chunks = (len - first_chunk) / chunk;
    match damage {
        Damage::Intact => "none".into(),
        Damage::Truncate => {
            let to = rng.random_range(0..len);
            bytes.truncate(to);
            format!("cut to {to} of {len} bytes")
        }
        Damage::TruncateToChunk => {
            let k = rng.random_range(0..chunks);
            bytes.truncate(first_chunk + k * chunk);
            format!("cut to {k} of {chunks} chunks ({} of {len} bytes)", bytes.len())
        }
        Damage::Append => {
            let mut n = rng.random_range(1..2 * chunk);
            if n % chunk == 0 {
                n += 1;
            }
            append_random(bytes, n, rng);
            format!("{n} random bytes appended to {len}")
        }
        Damage::AppendChunks => {
            let k = rng.random_range(1..=2);
            append_random(bytes, k * chunk, rng);
            format!("{k} chunks of random bytes appended to {chunks}")
        }
        Damage::FlipHeader => {
            let fields = header_fields(bytes);
            let flips = (0..rng.random_range(1..=4))
                .map(|_| {
                    if rng.random_bool(0.5) {
                        fields[rng.random_range(0..fields.len())]
                    } else {
                        rng.random_range(0..PAGE)
                    }
                })
                .collect::<Vec<_>>();
            flip(bytes, &flips, rng)
        }
        Damage::FlipBody => {
            let flips = (0..rng.random_range(1..=4))
                .map(|_| {
                    if rng.random_bool(0.5) {
                        pick(rng, PAGE..len, |o| bytes[o] != 0)
                    } else {
                        rng.random_range(PAGE..len)
                    }
                })
                .collect::<Vec<_>>();
            flip(bytes, &flips, rng)
        }
        Damage::ZeroPage => {
            let page = pick(rng, 1..len / PAGE, |p| bytes[p * PAGE..(p + 1) * PAGE].iter().any(|&b| b != 0));
            bytes[page * PAGE..(page + 1) * PAGE].fill(0);
            format!("page at {:#x} ({}) zeroed", page * PAGE, region(bytes, page * PAGE))
        }
        Damage::SwapLines => {
            let lines = len / LINE;
            let a = pick(rng, 0..lines, |a| bytes[a * LINE..(a + 1) * LINE].iter().any(|&b| b != 0));
            let b = pick(rng, 0..lines, |b| bytes[b * LINE..(b + 1) * LINE] != bytes[a * LINE..(a + 1) * LINE]);
            let (lo, hi) = (a.min(b), a.max(b));
            if lo != hi {
                let (head, tail) = bytes.split_at_mut(hi * LINE);
                head[lo * LINE..(lo + 1) * LINE].swap_with_slice(&mut tail[..LINE]);
            }
            format!(
                "lines at {:#x} ({}) and {:#x} ({}) swapped",
                a * LINE,
                region(bytes, a * LINE),
                b * LINE,
                region(bytes, b * LINE)
            )
        }
        Damage::ForeignHeader | Damage::ForeignHeaderTable => {
            let (name, donor) = &donors.others[instance as usize % donors.others.len()];
            let end = if damage == Damage::ForeignHeader { PAGE } else { data_off(donor).min(len) };
            bytes[..end].copy_from_slice(&donor[..end]);
            format!("bytes [0, {end:#x}) of {name}")
        }
        Damage::OlderHeader | Damage::OlderHeaderTable => {
            let which = rng.random_range(0..donors.older.len());
            let older = &donors.older[which];
            let end = if damage == Damage::OlderHeader { PAGE } else { older.len().min(len) };
            bytes[..end].copy_from_slice(&older[..end]);
            format!("bytes [0, {end:#x}) as they were at copy {which} of {}", donors.older.len())
        }
    }
}

fn append_random(bytes: &mut Vec<u8>, n: usize, rng: &mut ChaCha8Rng) {
    let start = bytes.len();
    bytes.resize(start + n, 0);
    rng.fill(&mut bytes[start..]);
}

/// Flips the bytes at `offsets`, each by a random nonzero mask.
fn flip(bytes: &mut [u8], offsets: &[usize], rng: &mut ChaCha8Rng) -> String {
    let mut what = String::from("flipped");
    let masks: Vec<u8> = offsets.iter().map(|_| rng.random_range(1..=255u8)).collect();
    for (&o, mask) in offsets.iter().zip(&masks) {
        let _ = write!(what, " {o:#x}^{mask:02x} ({})", region(bytes, o));
    }
    for (&o, mask) in offsets.iter().zip(&masks) {
        bytes[o] ^= mask;
    }
    what
}

/// A random index of `range` that `wanted` holds for, if one is found in 256 draws; else any.
fn pick(rng: &mut ChaCha8Rng, range: Range<usize>, wanted: impl Fn(usize) -> bool) -> usize {
    for _ in 0..256 {
        let i = rng.random_range(range.clone());
        if wanted(i) {
            return i;
        }
    }
    rng.random_range(range)
}

/// The offsets of the header page that hold something: its fixed fields and the root entries in
/// use.
fn header_fields(bytes: &[u8]) -> Vec<usize> {
    let mut offsets: Vec<usize> = (0..HEADER_FIELDS).collect();
    for slot in 0..ROOT_ENTRIES {
        let at = ROOT_TABLE_AT + slot * ROOT_ENTRY;
        if bytes[at..at + 4] != [0; 4] {
            offsets.extend(at..at + ROOT_ENTRY);
        }
    }
    offsets
}

// ---------------------------------------------------------------------------------------------
// The battery.

/// One case's end.
#[derive(Debug)]
struct CaseResult {
    id: String,
    what: String,
    /// `opened intact`, `refused ...`, or why the case failed.
    outcome: String,
    failed: bool,
    elapsed: Duration,
}

/// What the child did, judged: `Ok` with the outcome for the two good ends, `Err` with why not.
fn judge(
    run: &petra_recovery::child::ChildRun,
    damaged: &[u8],
    pristine: &[u8],
    after: &[u8],
) -> Result<String, String> {
    let reports = run.reports();
    if run.exit != Exit::Code(0) {
        let said =
            if reports.is_empty() { String::new() } else { format!(" after reporting [{}]", reports.join("; ")) };
        return Err(format!("{}{said}", run.describe_failure()));
    }
    match reports.as_slice() {
        [refused] if refused.starts_with("refused ") => {
            let error = &refused["refused ".len()..];
            if after != damaged {
                return Err(format!("refused ({error}) but the file changed: {}", compare(damaged, after)));
            }
            if damaged == pristine {
                return Err(format!("refused a file that the damage left as it was: {error}"));
            }
            Ok(format!("refused untouched: {error}"))
        }
        ["opened", "equal"] => Ok("opened intact".into()),
        ["opened", differs] => Err(format!("opened with content not the acknowledged: {differs}")),
        _ => Err(format!("the child reported [{}]", reports.join("; "))),
    }
}

/// How `after` differs from `before` (a store file).
fn compare(before: &[u8], after: &[u8]) -> String {
    let first = before.iter().zip(after).position(|(a, b)| a != b);
    let differing = before.iter().zip(after).filter(|(a, b)| a != b).count();
    let mut what = format!("{differing} bytes differ");
    if let Some(first) = first {
        let _ = write!(what, ", the first at {first:#x} ({})", region(before, first));
    }
    if before.len() != after.len() {
        let _ = write!(what, "; its length went from {} to {}", before.len(), after.len());
    }
    what
}

/// What byte `off` of the store file `bytes` is (see `petra/src/pool/header.rs`).
fn region(bytes: &[u8], off: usize) -> String {
    match off {
        0..128 => "the header's fixed fields".into(),
        128..136 => "the shutdown word (state line, first copy)".into(),
        136..152 => "the boot id (state line, first copy)".into(),
        152..160 => "the state line's first check word".into(),
        192..200 => "the shutdown word (state line, second copy)".into(),
        200..216 => "the boot id (state line, second copy)".into(),
        216..224 => "the state line's second check word".into(),
        160..ROOT_TABLE_AT => "reserved header bytes".into(),
        ROOT_TABLE_AT..PAGE => format!("root entry {}", (off - ROOT_TABLE_AT) / ROOT_ENTRY),
        _ if bytes.len() < PAGE => "past the header".into(),
        _ if off < data_off(bytes) => format!("the chunk table, chunk {}'s entry", (off - PAGE) / 8),
        _ => format!("chunk {}", (off - data_off(bytes)) / chunk_size(bytes).max(1)),
    }
}

fn cases_per_damage() -> u64 {
    match std::env::var(CASES_ENV) {
        Ok(n) => n.parse().unwrap_or_else(|_| panic!("{CASES_ENV}={n} is not a number")),
        Err(_) => DEFAULT_CASES,
    }
}

/// The seed of a case.
fn case_seed(kind: Kind, state: State, damage: Damage, instance: u64) -> u64 {
    let kind = kind as u64;
    let state = state as u64;
    let damage = DAMAGES.iter().position(|&d| d == damage).unwrap() as u64;
    0xDA_3A6E_0000_0000 ^ (kind << 40) ^ (state << 36) ^ (damage << 28) ^ instance
}

/// Runs the battery on stores of `kind`, the test `test_name` re-executed for each case.
fn battery(kind: Kind, test_name: &str) {
    if let Some(arg) = child_arg() {
        child(&arg);
        return;
    }
    let start = Instant::now();
    // On the disk: a file in memory (`/dev/shm`) keeps no safe points (see `Kind::config`).
    let dir = petra_recovery::disk_dir(env!("CARGO_TARGET_TMPDIR"));
    let target = write_store(kind, CONTENT_SEED, Scale::Full, &dir.path().join("target.pool"));
    // Donors of headers: a smaller store of the same kind, and one of another kind.
    let sibling = write_store(kind, CONTENT_SEED + 1, Scale::Small, &dir.path().join("sibling.pool"));
    let other = write_store(kind.other(), CONTENT_SEED + 2, Scale::Small, &dir.path().join("other.pool"));
    let built = start.elapsed();
    let cases = cases_per_damage();
    let only = std::env::var(ONLY_ENV).ok();
    let test = ChildTest::new(test_name, TIMEOUT);
    let path = dir.path().join("case.pool");
    let arg = format!("{}\t{}", kind.name(), path.display());
    let mut results = Vec::new();
    for state in [State::Closed, State::Unclosed] {
        let pristine = target.state(state);
        let other_state = if state == State::Closed { State::Unclosed } else { State::Closed };
        let donors = Donors {
            others: vec![
                (format!("a smaller {} store, {}", kind.name(), state.name()), sibling.state(state)),
                (format!("a {} store, {}", other.kind.name(), state.name()), other.state(state)),
                (format!("a smaller {} store, {}", kind.name(), other_state.name()), sibling.state(other_state)),
            ],
            older: &target.older,
        };
        for damage_kind in DAMAGES {
            let instances = if damage_kind == Damage::Intact { 1 } else { cases };
            for instance in 0..instances {
                let seed = case_seed(kind, state, damage_kind, instance);
                let id = format!("{}/{}/{}#{instance} (seed {seed:#x})", kind.name(), state.name(), damage_kind.name());
                if only.as_deref().is_some_and(|o| !id.contains(o)) {
                    continue;
                }
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let mut damaged = pristine.to_vec();
                let what = apply_damage(damage_kind, &mut damaged, instance, &mut rng, &donors);
                std::fs::write(&path, &damaged).unwrap();
                let run = test.run(&arg).unwrap_or_else(|e| panic!("{id}: cannot run the child: {e}"));
                let after = std::fs::read(&path).unwrap();
                std::fs::remove_file(&path).unwrap();
                let judged = judge(&run, &damaged, pristine, &after);
                let failed = judged.is_err();
                let outcome = judged.unwrap_or_else(|e| e);
                eprintln!("{id} [{what}]: {outcome} ({:.2?})", run.elapsed);
                results.push(CaseResult { id, what, outcome, failed, elapsed: run.elapsed });
            }
        }
    }
    let failed: Vec<&CaseResult> = results.iter().filter(|r| r.failed).collect();
    let opened = results.iter().filter(|r| !r.failed && r.outcome == "opened intact").count();
    let slowest = results.iter().map(|r| r.elapsed).max().unwrap_or_default();
    eprintln!(
        "{} {} cases in {:.1?} (stores written in {built:.1?}, slowest case {slowest:.2?}): {} opened intact, {} refused untouched, {} failed",
        results.len(),
        kind.name(),
        start.elapsed(),
        opened,
        results.len() - opened - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        // By state and damage kind first (`closed/flip-body: 2`), then each case.
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &failed {
            let state_and_damage = r.id.split('#').next().unwrap().split_once('/').unwrap().1;
            *by_kind.entry(state_and_damage).or_default() += 1;
        }
        let by_kind: Vec<String> = by_kind.into_iter().map(|(k, n)| format!("{k}: {n}")).collect();
        let list: Vec<String> = failed.iter().map(|r| format!("  {} [{}]: {}", r.id, r.what, r.outcome)).collect();
        panic!(
            "{} of {} cases on the {} store neither opened intact nor were refused untouched ({}):\n{}",
            failed.len(),
            results.len(),
            kind.name(),
            by_kind.join(", "),
            list.join("\n")
        );
    }
}

#[test]
fn a_damaged_sorted_store_opens_intact_or_is_refused_untouched() {
    battery(Kind::Sorted, "a_damaged_sorted_store_opens_intact_or_is_refused_untouched");
}

#[test]
fn a_damaged_unsorted_store_opens_intact_or_is_refused_untouched() {
    battery(Kind::Unsorted, "a_damaged_unsorted_store_opens_intact_or_is_refused_untouched");
}

#[test]
fn a_damaged_metric_store_opens_intact_or_is_refused_untouched() {
    battery(Kind::Metric, "a_damaged_metric_store_opens_intact_or_is_refused_untouched");
}

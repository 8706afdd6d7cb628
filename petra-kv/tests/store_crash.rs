//! Crash images of a store under batches of puts and removes of short and long keys: after
//! recovery the store holds every acknowledged batch and, of the one in flight, all or nothing.
//!
//! Power loss on a file in the page cache too (the simulator's `MediaModel::PageCache`, pages
//! written back in any order since the last sync), with long values among the short: under
//! `Periodic` every batch acknowledged before the last `Store::sync` that completed is there,
//! under `Immediate` every batch acknowledged, and the store is the one some instant between
//! that bound and the crash had. Under `Process` the same workload must fail somewhere: the
//! checks can tell.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use petra::DurabilityPolicy;
use petra::mem::{CrashImage, CrashPlan, MediaModel, SimMem};
use petra::pool::{Pool, PoolConfig};
use petra_kv::{Batch, Order, Store};
use petra_recovery::crash::{CrashTest, Report};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_LEN: u64 = 16 << 20;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Changes = Vec<(Vec<u8>, Option<Vec<u8>>)>;
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// An acknowledged batch: simulator events when it started and when it returned.
#[derive(Debug, Clone)]
struct Acked {
    start: u64,
    end: u64,
    changes: Changes,
}

fn setup(order: Order) -> SimMem {
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let config =
        PoolConfig { initial_size: 512 << 10, max_size: MAX_LEN, chunk_size: 64 << 10, ..PoolConfig::default() };
    let store = Store::create_in(Pool::create_in(Arc::clone(&mem), &config).unwrap(), order).unwrap();
    store.session().unwrap().put(b"base", b"0").unwrap();
    store.into_engine().into_pool().unwrap().close().unwrap();
    Arc::into_inner(mem).unwrap()
}

/// Keys: short ones, and long ones of which some share their first 15 bytes.
fn random_key(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..4) {
        0 => vec![b'a' + rng.random_range(0..4u8)],
        1 => format!("long-key-head-1/{}", rng.random_range(0..4)).into_bytes(),
        2 => format!("long-key-head-2/{}", rng.random_range(0..2)).into_bytes(),
        _ => b"base".to_vec(),
    }
}

/// Up to four changes, 70% of them puts. With `long`, a third of the values are several KiB of
/// random bytes (spanning pages), and one in ten over a chunk (64 KiB); else all under 40 bytes.
fn random_batch(rng: &mut StdRng, long: bool) -> Changes {
    let mut changes = BTreeMap::new();
    for _ in 0..rng.random_range(1..=4) {
        let value = rng.random_bool(0.7).then(|| match long.then(|| rng.random_range(0..10)) {
            Some(6..=8) => random_bytes(rng, 1 << 10..16 << 10),
            Some(9) => random_bytes(rng, 64 << 10..80 << 10),
            _ => vec![rng.random::<u8>(); rng.random_range(0..40)],
        });
        changes.insert(random_key(rng), value);
    }
    changes.into_iter().collect()
}

fn random_bytes(rng: &mut StdRng, len: std::ops::Range<usize>) -> Vec<u8> {
    let mut v = vec![0; rng.random_range(len)];
    rng.fill(&mut v[..]);
    v
}

fn batch_of(changes: &Changes) -> Batch {
    let mut b = Batch::new();
    for (k, v) in changes {
        match v {
            Some(v) => b.put(k, v),
            None => b.remove(k),
        };
    }
    b
}

fn workload(mem: Arc<SimMem>, batches: usize, seed: u64) -> Vec<Acked> {
    let store = Store::open_in(Pool::open_in(Arc::clone(&mem)).unwrap()).unwrap();
    let mut s = store.session().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut acked = Vec::new();
    for _ in 0..batches {
        let changes = random_batch(&mut rng, false);
        let b = batch_of(&changes);
        let start = mem.events();
        s.write(&b).unwrap();
        acked.push(Acked { start, end: mem.events(), changes });
    }
    acked
}

fn apply(m: &mut Model, changes: &Changes) {
    for (k, v) in changes {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
}

/// The store's entries, in key order.
fn contents<M: petra::mem::PMem>(store: &Store<M>) -> Result<Entries, petra_kv::KvError> {
    let mut got: Entries = store.session()?.iter(Bound::Unbounded, Bound::Unbounded)?.collect();
    got.sort();
    Ok(got)
}

/// The store `setup` leaves.
fn base() -> Model {
    Model::from([(b"base".to_vec(), b"0".to_vec())])
}

fn check(acked: &[Acked], crash: u64, mem: SimMem) -> Result<(), String> {
    let store = Store::open_in(Pool::open_in(mem).map_err(|e| format!("open: {e}"))?).map_err(|e| format!("{e}"))?;
    let got = contents(&store).map_err(|e| format!("read: {e}"))?;
    let mut m = base();
    for a in acked.iter().filter(|a| a.end <= crash) {
        apply(&mut m, &a.changes);
    }
    let without: Vec<_> = m.clone().into_iter().collect();
    if got == without {
        return Ok(());
    }
    if let Some(a) = acked.iter().find(|a| a.start <= crash && a.end > crash) {
        apply(&mut m, &a.changes);
        if got == m.into_iter().collect::<Vec<_>>() {
            return Ok(());
        }
    }
    Err(format!("recovered {got:?}, expected {without:?} or that plus the batch in flight"))
}

fn crash_run(order: Order, seed: u64, batches: usize) -> Report {
    let test = CrashTest {
        plan: CrashPlan::all(0.02, seed),
        exhaustive_bound: 16,
        samples: 6,
        max_points: 200,
        ..CrashTest::new(seed)
    };
    test.run(
        || setup(order),
        |mem| workload(mem, batches, seed),
        |acked, image, mem| check(acked, image.point.event, mem),
    )
}

#[test]
fn batches_are_all_or_nothing_in_every_crash_image() {
    let mut total = Report::default();
    for (seed, order) in [(1, Order::Sorted), (2, Order::Unsorted { buckets: 8 })] {
        total.merge(crash_run(order, seed, 30));
    }
    eprintln!("{} crash points, {} images", total.points, total.images);
    total.assert_ok();
    assert!(total.images >= 2_000, "only {} crash images", total.images);
}

/// `Periodic`'s background syncer waits an hour, so that the workload's own `Store::sync` calls
/// are the safe points, the same on every run.
const PERIODIC: DurabilityPolicy = DurabilityPolicy::Periodic(Duration::from_secs(3600));

/// A power-loss run: `batches` random batches with long values, on one thread (so the states
/// are sequential, and the history and every image the same on every run), a `Store::sync`
/// after every `sync_every` of them, under `policy`.
#[derive(Debug, Clone, Copy)]
struct PowerRun {
    order: Order,
    seed: u64,
    batches: usize,
    sync_every: usize,
    policy: DurabilityPolicy,
}

/// What a power-loss workload did: its batches as they ran, and its syncs (simulator events
/// before each began and when it returned).
#[derive(Debug, Clone, Default)]
struct Record {
    batches: Vec<Acked>,
    syncs: Vec<(u64, u64)>,
}

/// Opens the store (recovering: that syncs) under the run's policy and writes its batches,
/// syncing as it says; leaves the store as a power loss would.
fn power_workload(mem: Arc<SimMem>, run: PowerRun) -> Record {
    let store = Store::open_with(Pool::open_in(Arc::clone(&mem)).unwrap(), run.policy).unwrap();
    assert_eq!(store.medium(), petra::mem::Durability::PageCache);
    let mut s = store.session().unwrap();
    let mut rng = StdRng::seed_from_u64(run.seed);
    let mut record = Record::default();
    for i in 1..=run.batches {
        let changes = random_batch(&mut rng, true);
        let b = batch_of(&changes);
        let start = mem.events();
        s.write(&b).unwrap();
        record.batches.push(Acked { start, end: mem.events(), changes });
        if i % run.sync_every == 0 {
            let begin = mem.events();
            store.sync().unwrap();
            record.syncs.push((begin, mem.events()));
        }
    }
    record
}

/// What differs between two states: keys, and values by length (long ones would flood a message).
fn differences(got: &Model, want: &Model) -> String {
    let show = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    let mut out = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            None => out.push(format!("{} missing", show(k))),
            Some(g) if g != v => out.push(format!("{} holds {} bytes, not these {}", show(k), g.len(), v.len())),
            Some(_) => {}
        }
    }
    out.extend(got.keys().filter(|k| !want.contains_key(*k)).map(|k| format!("{} extra", show(k))));
    out.join(", ")
}

/// Recovers the image's store and checks it: the state after `k` of the batches, in order, for
/// a `k` from those acknowledged before the bound (under `Immediate` the crash, else the start
/// of the last sync that completed before it) to those started before the crash.
fn power_check(record: &Record, policy: DurabilityPolicy, image: &CrashImage, mem: SimMem) -> Result<(), String> {
    let crash = image.point.event;
    let bound = match policy {
        DurabilityPolicy::Immediate => crash,
        _ => record.syncs.iter().filter(|&&(_, end)| end <= crash).map(|&(begin, _)| begin).max().unwrap_or(0),
    };
    let least = record.batches.iter().filter(|b| b.end <= bound).count();
    let most = record.batches.iter().filter(|b| b.start <= crash).count();
    let pool = Pool::open_in(mem).map_err(|e| format!("refused: the pool does not open: {e}"))?;
    let store = Store::open_with(pool, policy).map_err(|e| format!("refused: the store does not open: {e}"))?;
    let got: Model = contents(&store).map_err(|e| format!("refused: the store reads: {e}"))?.into_iter().collect();
    let mut states = vec![base()];
    for b in &record.batches[..most] {
        let mut next = states.last().expect("the base").clone();
        apply(&mut next, &b.changes);
        states.push(next);
    }
    if states[least..].contains(&got) {
        return Ok(());
    }
    if let Some(k) = states[..least].iter().rposition(|s| *s == got) {
        return Err(format!(
            "lost: the state after {k} batches, but {least} were acknowledged before event {bound} (crash before \
             event {crash}): {}",
            differences(&got, &states[least])
        ));
    }
    Err(format!(
        "not a state: none after {least} to {most} batches (crash before event {crash}); against {least}: {}",
        differences(&got, &states[least])
    ))
}

/// The run's crash images: before every fence and sync, `points` of them spread over the run,
/// `samples` images each besides the two extremes, each checked with `power_check`.
fn power_run(run: PowerRun, points: usize, samples: usize) -> (Report, Record) {
    let plan = CrashPlan { every_flush: false, ..CrashPlan::all(0.0, run.seed).with_syncs() };
    let test = CrashTest {
        model: MediaModel::PageCache,
        plan,
        exhaustive_bound: 0,
        samples,
        max_points: points,
        ..CrashTest::new(run.seed)
    };
    let mut kept = None;
    let report = test.run(
        || setup(run.order),
        |mem| {
            let record = power_workload(mem, run);
            kept = Some(record.clone());
            record
        },
        |record, image, mem| power_check(record, run.policy, image, mem),
    );
    (report, kept.expect("the workload ran"))
}

/// The power-loss runs of a test: a sorted and an unsorted store, each under `policy`.
fn power_runs(policy: DurabilityPolicy, sync_every: usize) -> (Report, Vec<Record>) {
    let mut total = Report::default();
    let mut records = Vec::new();
    for (seed, order) in [(11, Order::Sorted), (12, Order::Unsorted { buckets: 8 })] {
        let run = PowerRun { order, seed, batches: 60, sync_every, policy };
        let (report, record) = power_run(run, 40, 6);
        eprintln!(
            "{order:?} under {policy}: {} points, {} images, {} failing",
            report.points,
            report.images,
            report.failures.len()
        );
        total.merge(report);
        records.push(record);
    }
    (total, records)
}

/// The workload wrote what the runs are about: values over a page and over a chunk, and (where
/// it syncs) several syncs.
fn assert_covered(records: &[Record], syncs: usize) {
    for r in records {
        let longest = |over: usize| {
            r.batches
                .iter()
                .flat_map(|b| &b.changes)
                .filter(|(_, v)| v.as_ref().is_some_and(|v| v.len() > over))
                .count()
        };
        assert!(longest(4 << 10) >= 5 && longest(64 << 10) >= 1, "too few long values");
        assert!(r.syncs.len() >= syncs, "{} syncs", r.syncs.len());
    }
}

/// `Periodic`, with the workload's syncs as the only safe points: every image, at every crash
/// point, recovers to the state after some number of batches from those acknowledged before the
/// last safe point that completed to those started before the crash.
#[test]
fn power_loss_keeps_every_batch_acknowledged_before_the_last_safe_point() {
    let (report, records) = power_runs(PERIODIC, 10);
    assert_covered(&records, 6);
    assert!(report.images >= 600, "only {} images", report.images);
    report.assert_ok();
}

/// `Immediate`: a batch returns after the safe point that covers it, so every image holds every
/// batch acknowledged before the crash, and of the one in flight all or nothing.
#[test]
fn power_loss_keeps_every_acknowledged_batch_under_immediate() {
    let (report, records) = power_runs(DurabilityPolicy::Immediate, usize::MAX);
    assert_covered(&records, 0);
    assert!(report.images >= 600, "only {} images", report.images);
    report.assert_ok();
}

/// The checks above have teeth: the same workload and syncs under `Process`, which keeps no
/// safe points (a sync holds only until the next write: freed values are reused and descriptors
/// written back without what they need), must give images that fail them.
#[test]
fn without_safe_points_power_loss_loses_synced_batches() {
    let (report, records) = power_runs(DurabilityPolicy::Process, 10);
    assert_covered(&records, 6);
    let of = |label: &str| report.failures.iter().filter(|f| f.message.starts_with(label)).count();
    let (refused, lost, other, panicked) = (of("refused"), of("lost"), of("not a state"), of("recovery panicked"));
    eprintln!(
        "process: {} images, {refused} refused, {lost} lost, {other} not a state, {panicked} panicked",
        report.images
    );
    for label in ["refused", "lost", "not a state", "recovery panicked"] {
        if let Some(f) = report.failures.iter().find(|f| f.message.starts_with(label)) {
            eprintln!("first {label}: {f}");
        }
    }
    assert!(!report.failures.is_empty(), "no image of {} failed without safe points", report.images);
    // Every failure is the check's verdict, none a panic of recovery.
    assert_eq!(refused + lost + other, report.failures.len(), "{:?}", report.failures.first());
}

/// A batch of one session of a concurrent run: its changes to the session's own keys, and the
/// shared key it puts its tag in.
#[derive(Debug, Clone)]
struct SessionBatch {
    start: u64,
    end: u64,
    changes: Changes,
    shared: Vec<u8>,
    tag: Vec<u8>,
}

/// Sessions of the concurrent crash test; each writes its own keys ([`own_key`]) and one of the
/// shared keys in every batch.
const SESSIONS: usize = 3;
const SHARED: [&[u8]; 2] = [b"shared/0", b"shared/1"];

/// Key `i` of session `t`: short ones, and long ones (over 15 bytes) whose first 15 bytes every
/// session's share, so that in a sorted store the sessions' long keys are entries of one bucket
/// that they edit concurrently.
fn own_key(t: usize, i: u32) -> Vec<u8> {
    if i < 3 { format!("s{t}/{i}").into_bytes() } else { format!("long-key-shared/s{t}/{i}").into_bytes() }
}

/// The session whose own key `k` is, if any.
fn owner(k: &[u8]) -> Option<usize> {
    (0..SESSIONS).find(|&t| (0..6).any(|i| own_key(t, i) == k))
}

/// `SESSIONS` sessions on threads of their own, `batches` batches each: one to four changes to
/// the session's own keys, short and long (one value in eight several KiB long), and a put of
/// the batch's tag (session and index) to one of the shared keys, which the sessions race for.
fn concurrent_workload(mem: Arc<SimMem>, batches: usize, seed: u64) -> Vec<Vec<SessionBatch>> {
    let store = Store::open_in(Pool::open_in(Arc::clone(&mem)).unwrap()).unwrap();
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..SESSIONS)
            .map(|t| {
                let (store, mem) = (&store, &mem);
                sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    let mut rng = StdRng::seed_from_u64(seed * 10 + t as u64);
                    let mut done = Vec::new();
                    for i in 0..batches {
                        let mut changes = BTreeMap::new();
                        for _ in 0..rng.random_range(1..=4) {
                            let key = own_key(t, rng.random_range(0..6));
                            let value = rng.random_bool(0.75).then(|| {
                                if rng.random_bool(0.125) {
                                    random_bytes(&mut rng, 1 << 10..12 << 10)
                                } else {
                                    random_bytes(&mut rng, 0..40)
                                }
                            });
                            changes.insert(key, value);
                        }
                        let changes: Changes = changes.into_iter().collect();
                        let shared = SHARED[rng.random_range(0..SHARED.len())].to_vec();
                        let tag = format!("{t}.{i}").into_bytes();
                        let mut b = batch_of(&changes);
                        b.put(&shared, &tag);
                        let start = mem.events();
                        s.write(&b).unwrap();
                        done.push(SessionBatch { start, end: mem.events(), changes, shared, tag });
                    }
                    done
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Recovers the image's store and checks it against the sessions' batches: for each session,
/// its own keys hold the state after every batch it had acknowledged before the crash, and of
/// the one it had in flight all or nothing; each shared key holds the tag of a batch so kept (or
/// nothing if none wrote it), and of no batch that a kept one writing it started after.
fn concurrent_check(sessions: &[Vec<SessionBatch>], crash: u64, mem: SimMem) -> Result<(), String> {
    let store = Store::open_in(Pool::open_in(mem).map_err(|e| format!("open: {e}"))?).map_err(|e| format!("{e}"))?;
    let got: Model = contents(&store).map_err(|e| format!("read: {e}"))?.into_iter().collect();
    if got.get(&b"base"[..]) != Some(&b"0".to_vec()) {
        return Err("the key written before the run is lost".into());
    }
    let ours = |k: &[u8]| k == b"base" || SHARED.contains(&k) || owner(k).is_some();
    if let Some(k) = got.keys().find(|k| !ours(k)) {
        return Err(format!("a key no batch wrote: {}", String::from_utf8_lossy(k)));
    }
    // Per session, how many of its batches may have been kept: those acknowledged, and the one
    // in flight if its changes are there (all of them: else the session's keys match neither).
    // Both when the one in flight changed nothing of the session's own keys.
    let mut options: Vec<Vec<usize>> = Vec::new();
    for (t, batches) in sessions.iter().enumerate() {
        let own: Model = got.iter().filter(|(k, _)| owner(k) == Some(t)).map(|(k, v)| (k.clone(), v.clone())).collect();
        let done = batches.iter().take_while(|b| b.end <= crash).count();
        let mut m = Model::new();
        for b in &batches[..done] {
            apply(&mut m, &b.changes);
        }
        let in_flight = batches.get(done).filter(|b| b.start <= crash);
        let mut with = m.clone();
        if let Some(b) = in_flight {
            apply(&mut with, &b.changes);
        }
        let mut uptos = Vec::new();
        if own == m {
            uptos.push(done);
        }
        if in_flight.is_some() && own == with {
            uptos.push(done + 1);
        }
        if uptos.is_empty() {
            return Err(format!(
                "session {t}: {done} batches acknowledged{}, but its keys hold neither that state nor that plus the \
                 one in flight: {}",
                if in_flight.is_some() { " and one in flight" } else { "" },
                differences(&own, &m)
            ));
        }
        options.push(uptos);
    }
    // Every combination of the sessions' options, until one explains the shared keys.
    let combos: usize = options.iter().map(Vec::len).product();
    let mut first_error = None;
    for mut c in 0..combos {
        let mut kept: Vec<&SessionBatch> = Vec::new();
        for (batches, uptos) in sessions.iter().zip(&options) {
            kept.extend(&batches[..uptos[c % uptos.len()]]);
            c /= uptos.len();
        }
        match shared_explained(&got, &kept) {
            Ok(()) => return Ok(()),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    Err(first_error.expect("at least one combination"))
}

/// Whether each shared key holds the tag of a batch of `kept` (or nothing if none wrote it),
/// and of no batch that a kept one writing it started after.
fn shared_explained(got: &Model, kept: &[&SessionBatch]) -> Result<(), String> {
    for key in SHARED {
        let writers: Vec<&&SessionBatch> = kept.iter().filter(|b| b.shared == key).collect();
        let name = String::from_utf8_lossy(key);
        let Some(tag) = got.get(key) else {
            if writers.is_empty() {
                continue;
            }
            return Err(format!("{name} is absent, but {} kept batches wrote it", writers.len()));
        };
        let Some(b) = writers.iter().find(|b| &b.tag == tag) else {
            return Err(format!(
                "{name} holds {}, the tag of no batch kept (a batch torn: its session's keys lack it)",
                String::from_utf8_lossy(tag)
            ));
        };
        if let Some(later) = writers.iter().find(|w| w.start > b.end) {
            return Err(format!(
                "{name} holds {}, but {} wrote it after that returned",
                String::from_utf8_lossy(tag),
                String::from_utf8_lossy(&later.tag)
            ));
        }
    }
    Ok(())
}

#[test]
fn concurrent_sessions_keep_every_acknowledged_batch_whole_in_every_crash_image() {
    let mut total = Report::default();
    for (seed, order) in [(51, Order::Sorted), (52, Order::Unsorted { buckets: 8 })] {
        let test = CrashTest {
            plan: CrashPlan::all(0.01, seed),
            exhaustive_bound: 16,
            samples: 6,
            max_points: 100,
            busiest: 16,
            ..CrashTest::new(seed)
        };
        total.merge(test.run(
            || setup(order),
            |mem| concurrent_workload(mem, 12, seed),
            |sessions, image, mem| concurrent_check(sessions, image.point.event, mem),
        ));
    }
    eprintln!("{} crash points, {} images", total.points, total.images);
    total.assert_ok();
    assert!(total.images >= 1_000, "only {} crash images", total.images);
}

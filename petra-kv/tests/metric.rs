//! The metric store: schemas and sets, ingest with idempotent re-sends, bad samples refused with
//! nothing changed, queries (latest, previous, range, window), retention, stale producers, the
//! catalog and latest samples across reopenings, a kill loop on a real pool file under each
//! durability policy, and power loss on a file in the page cache (the simulator's
//! `MediaModel::PageCache`) under each policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use petra::DurabilityPolicy;
use petra::mem::{CrashImage, CrashPlan, MediaModel, SimMem};
use petra::pool::{Pool, PoolConfig};
use petra_kv::{
    Config, CreateMode, KvError, Metric, MetricSession, MetricStore, Sample, Scalar, Schema, SetId, SetInfo, Stored,
    Value,
};
use petra_recovery::crash::{CrashTest, Report};
use petra_recovery::kill::{KillLoop, ack, child_arg};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEC: u64 = 1_000_000_000;

fn schema() -> Schema {
    Schema {
        name: "meminfo".into(),
        metrics: vec![
            Metric::meta("component_id", Scalar::U64),
            Metric::data("MemFree", Scalar::U64),
            Metric::data("Delta", Scalar::S32),
            Metric::data("Load", Scalar::F64),
            Metric { name: "PerCpu".into(), scalar: Scalar::U8, array: Some(3), meta: false },
        ],
    }
}

fn set_info(instance: &str, component: u64, job: u64) -> SetInfo {
    SetInfo {
        instance: instance.into(),
        schema: "meminfo".into(),
        producer: "node1".into(),
        component_id: component,
        job_id: job,
        interval_ns: SEC,
    }
}

fn sample(generation: u64, timestamp: u64, free: u64) -> Sample {
    Sample {
        timestamp,
        duration: 1_000,
        generation,
        consistent: generation.is_multiple_of(2),
        values: vec![
            Value::U(7),
            Value::U(free),
            Value::S(-(generation as i64)),
            Value::F(generation as f64 / 4.0),
            Value::Array(vec![Value::U(1), Value::U(2), Value::U(generation % 256)]),
        ],
    }
}

fn sim_store() -> (Arc<SimMem>, MetricStore<Arc<SimMem>>) {
    let mem = Arc::new(SimMem::new(0, 64 << 20));
    let config =
        PoolConfig { initial_size: 1 << 20, max_size: 64 << 20, chunk_size: 64 << 10, ..PoolConfig::default() };
    let store = MetricStore::create_in(Pool::create_in(Arc::clone(&mem), &config).unwrap()).unwrap();
    (mem, store)
}

fn history(s: &mut MetricSession<'_, Arc<SimMem>>, set: SetId) -> Vec<Sample> {
    s.range(set, 0, u64::MAX).unwrap()
}

#[test]
fn samples_are_stored_once_queried_and_kept_across_reopening() {
    let (mem, store) = sim_store();
    store.add_schema(&schema()).unwrap();
    store.add_schema(&schema()).unwrap(); // the same again: accepted
    let mut other = schema();
    other.metrics.pop();
    assert!(matches!(store.add_schema(&other), Err(KvError::SchemaConflict(_))));
    let a = store.add_set(&set_info("node1/meminfo", 1, 100)).unwrap();
    let b = store.add_set(&set_info("node2/meminfo", 2, 100)).unwrap();
    assert_eq!(store.add_set(&set_info("node1/meminfo", 1, 100)).unwrap(), a);
    // A new job (or producer, component, interval) replaces the record; a new schema is refused.
    assert_eq!(store.add_set(&set_info("node1/meminfo", 1, 101)).unwrap(), a);
    assert_eq!(store.sets_by_job(101), [a]);
    assert_eq!(store.add_set(&set_info("node1/meminfo", 1, 100)).unwrap(), a);
    let mut other_schema = set_info("node1/meminfo", 1, 100);
    other_schema.schema = "vmstat".into();
    assert!(matches!(store.add_set(&other_schema), Err(KvError::SetConflict(_))));
    let mut unknown = set_info("node3/vmstat", 3, 0);
    unknown.schema = "vmstat".into();
    assert!(matches!(store.add_set(&unknown), Err(KvError::UnknownSchema(_))));
    assert_eq!(store.sets_by_component(2), [b]);
    assert_eq!(store.sets_by_job(100), [a, b]);

    let mut s = store.session().unwrap();
    assert_eq!(s.latest(a).unwrap(), None);
    for g in 1..=10u64 {
        assert_eq!(s.store_sample(a, &sample(g, g * SEC, 1000 + 10 * g)).unwrap(), Stored::New);
        // A re-send of the same generation, or an older one, is a no-op.
        assert_eq!(s.store_sample(a, &sample(g, g * SEC, 1000 + 10 * g)).unwrap(), Stored::Duplicate);
        assert_eq!(s.store_sample(a, &sample(g / 2, g * SEC, 0)).unwrap(), Stored::Duplicate);
    }
    s.store_sample(b, &sample(1, 5 * SEC, 1)).unwrap();
    // Bad samples: refused, nothing changed.
    let before = history(&mut s, a);
    let mut bad = sample(11, 11 * SEC, 1);
    bad.values.pop();
    let mut wrong_type = sample(11, 11 * SEC, 1);
    wrong_type.values[1] = Value::S(5);
    let mut out_of_range = sample(11, 11 * SEC, 1);
    out_of_range.values[2] = Value::S(i64::from(i32::MAX) + 1);
    let mut short_array = sample(11, 11 * SEC, 1);
    short_array.values[4] = Value::Array(vec![Value::U(1)]);
    let not_later = sample(11, 10 * SEC, 1);
    for bad in [bad, wrong_type, out_of_range, short_array, not_later] {
        assert!(matches!(s.store_sample(a, &bad), Err(KvError::BadSample { .. })), "{bad:?}");
    }
    assert!(matches!(s.store_sample(SetId(9), &sample(1, 1, 1)), Err(KvError::UnknownSet(9))));
    assert_eq!(history(&mut s, a), before);

    // Queries.
    assert_eq!(s.latest(a).unwrap(), Some(sample(10, 10 * SEC, 1100)));
    assert_eq!(s.previous(a).unwrap(), Some(sample(9, 9 * SEC, 1090)));
    assert_eq!(s.previous(b).unwrap(), None);
    let mid: Vec<u64> = s.range(a, 3 * SEC, 5 * SEC).unwrap().iter().map(|x| x.generation).collect();
    assert_eq!(mid, [3, 4, 5]);
    // One buffer reused across queries that return more, fewer, none, then another set's.
    let mut reused = Vec::new();
    for (set, from, to) in [(a, 3, 5), (a, 1, 10), (a, 9, 9), (a, 11, 20), (a, 2, 7), (b, 0, 20)] {
        s.range_into(set, from * SEC, to * SEC, &mut reused).unwrap();
        assert_eq!(reused, s.range(set, from * SEC, to * SEC).unwrap(), "{set:?} {from}..={to}");
    }
    assert_eq!(reused, [sample(1, 5 * SEC, 1)]);
    let w = s.window(a, 2 * SEC, 6 * SEC).unwrap();
    let names: Vec<&str> = w.iter().map(|x| x.metric.as_str()).collect();
    assert_eq!(names, ["MemFree", "Delta", "Load"], "meta and array metrics have no window statistics");
    assert_eq!((w[0].samples, w[0].min, w[0].max, w[0].avg), (5, 1020.0, 1060.0, 1040.0));
    assert_eq!(w[0].rate, Some(10.0), "10 per second");
    assert_eq!((w[1].min, w[1].max, w[1].rate), (-6.0, -2.0, Some(-1.0)));
    assert!(s.window(a, 20 * SEC, 30 * SEC).unwrap().is_empty());
    // Stale: a is fresh at 11 s; both are stale at 20 s with 3 intervals allowed.
    assert_eq!(store.stale_sets(11 * SEC, 3), [b]);
    assert_eq!(store.stale_sets(20 * SEC, 3), [a, b]);
    drop(s);

    // Reopen as after a crash: catalog, history and the latest samples are all there, and
    // re-sends are still recognised.
    drop(store.into_engine().into_pool().unwrap());
    let store = MetricStore::open_in(Pool::open_in(Arc::clone(&mem)).unwrap()).unwrap();
    assert_eq!(store.set_id("node2/meminfo"), Some(b));
    assert_eq!(store.sets_by_job(100), [a, b], "the replaced record was kept");
    assert_eq!(store.schema("meminfo"), Some(schema()));
    let mut s = store.session().unwrap();
    assert_eq!(history(&mut s, a), before);
    assert_eq!(s.store_sample(a, &sample(10, 10 * SEC, 1100)).unwrap(), Stored::Duplicate);
    assert_eq!(s.store_sample(a, &sample(11, 11 * SEC, 1110)).unwrap(), Stored::New);

    // Retention: by age, then by count; the latest always stays.
    assert_eq!(s.trim(a, 4 * SEC, None).unwrap(), 3);
    assert_eq!(history(&mut s, a).first().map(|x| x.generation), Some(4));
    assert_eq!(s.trim(a, 0, Some(2)).unwrap(), 6);
    let left: Vec<u64> = history(&mut s, a).iter().map(|x| x.generation).collect();
    assert_eq!(left, [10, 11]);
    assert_eq!(s.trim(a, u64::MAX, Some(0)).unwrap(), 1);
    assert_eq!(history(&mut s, a).len(), 1);
    assert_eq!(s.previous(a).unwrap(), None, "the previous sample was trimmed");
    assert_eq!(s.latest(a).unwrap().map(|x| x.generation), Some(11));
}

#[test]
fn a_range_into_a_reused_vec_equals_the_range_for_scalar_and_array_schemas() {
    // Samples of a schema of scalars only are decoded into a reused sample in one extend, those
    // of one with an array in place; the buffer goes from one schema to the other both ways.
    let (_mem, store) = sim_store();
    store.add_schema(&schema()).unwrap();
    let scalars = vec![Metric::data("load", Scalar::F64), Metric::meta("procs", Scalar::U64)];
    store.add_schema(&Schema { name: "load".into(), metrics: scalars }).unwrap();
    let a = store.add_set(&set_info("node1/meminfo", 1, 100)).unwrap();
    let c = store.add_set(&SetInfo { schema: "load".into(), ..set_info("node1/load", 1, 100) }).unwrap();
    let mut s = store.session().unwrap();
    for g in 1..=5 {
        s.store_sample(a, &sample(g, g * SEC, 1000 + g)).unwrap();
    }
    let loads: Vec<Sample> = (1..=3u64)
        .map(|g| Sample {
            timestamp: g * SEC,
            duration: 500,
            generation: g,
            consistent: g != 2,
            values: vec![Value::F(g as f64 / 4.0), Value::U(g * 3)],
        })
        .collect();
    for load in &loads {
        s.store_sample(c, load).unwrap();
    }
    let mut reused = Vec::new();
    for (set, from, to) in [(c, 0, 20), (a, 1, 10), (c, 2, 3), (a, 2, 2), (c, 0, 20)] {
        s.range_into(set, from * SEC, to * SEC, &mut reused).unwrap();
        assert_eq!(reused, s.range(set, from * SEC, to * SEC).unwrap(), "{set:?} {from}..={to}");
    }
    assert_eq!(reused, loads);
    s.range_into(a, 0, 20 * SEC, &mut reused).unwrap();
    assert_eq!(reused, (1..=5).map(|g| sample(g, g * SEC, 1000 + g)).collect::<Vec<_>>());
}

/// Reopened under `policy`: every acknowledged sample is in the history once, the history's
/// generations and timestamps increase, the latest sample is the last in the history, and at
/// most one sample per set that was not acknowledged (the one in flight) is there.
fn check_sets(
    path: &str,
    policy: DurabilityPolicy,
    acked: &BTreeMap<String, u64>,
) -> Result<BTreeMap<String, u64>, String> {
    let config = Config { create: CreateMode::Open, durability: policy, ..Config::new(path) };
    let store = MetricStore::open(&config).map_err(|e| format!("reopen: {e}"))?;
    let mut last = BTreeMap::new();
    {
        let mut s = store.session().unwrap();
        for (id, info) in store.sets() {
            let h = s.range(id, 0, u64::MAX).unwrap();
            let gens: Vec<u64> = h.iter().map(|x| x.generation).collect();
            if gens.windows(2).any(|w| w[0] >= w[1]) || h.windows(2).any(|w| w[0].timestamp >= w[1].timestamp) {
                return Err(format!("{}: generations {gens:?} do not increase", info.instance));
            }
            let top = gens.last().copied().unwrap_or(0);
            let want = acked.get(&info.instance).copied().unwrap_or(0);
            // Generations are consecutive from 1: all acknowledged ones present, at most one more.
            if gens != (1..=top).collect::<Vec<_>>() || top < want || top > want + 1 {
                return Err(format!("{}: generations 1..={top} expected 1..={want} (+1)", info.instance));
            }
            if s.latest(id).unwrap().as_ref() != h.last() {
                return Err(format!("{}: the latest sample is not the history's last", info.instance));
            }
            last.insert(info.instance.clone(), top);
        }
    }
    store.close().map_err(|e| e.to_string())?;
    Ok(last)
}

/// The policies the kill rounds take in turn. `Periodic`'s interval is short, so that its
/// background syncer makes safe points while the child is killed.
const KILL_POLICIES: [DurabilityPolicy; 3] =
    [DurabilityPolicy::Process, DurabilityPolicy::Periodic(Duration::from_millis(5)), DurabilityPolicy::Immediate];

/// The pool path and the round's policy, from a kill round's argument (`path#round`).
fn kill_round(arg: &str) -> (&str, DurabilityPolicy) {
    let (path, round) = arg.rsplit_once('#').unwrap();
    (path, KILL_POLICIES[round.parse::<usize>().unwrap() % KILL_POLICIES.len()])
}

/// The child: open the store under its round's policy (acknowledged as "R policy"), carry on
/// each set from its latest generation, re-sending the latest first (which must be a duplicate),
/// acknowledging each sample stored ("set gen").
fn child(arg: &str) {
    let (path, policy) = kill_round(arg);
    let store =
        MetricStore::open(&Config { create: CreateMode::Open, durability: policy, ..Config::new(path) }).unwrap();
    assert_eq!(store.durability(), policy);
    assert_eq!(store.medium(), petra::mem::Durability::PageCache, "a file on a disk keeps safe points");
    store.add_schema(&schema()).unwrap();
    let sets: Vec<SetId> =
        (0..2).map(|i| store.add_set(&set_info(&format!("node{i}/meminfo"), i, 0)).unwrap()).collect();
    let mut s = store.session().unwrap();
    let mut next: Vec<u64> = sets.iter().map(|&id| s.latest(id).unwrap().map_or(1, |x| x.generation + 1)).collect();
    for (i, &id) in sets.iter().enumerate() {
        if next[i] > 1 {
            let again = sample(next[i] - 1, (next[i] - 1) * SEC, 0);
            assert_eq!(s.store_sample(id, &again).unwrap(), Stored::Duplicate);
        }
    }
    ack(format!("R {policy}"));
    loop {
        for (i, &id) in sets.iter().enumerate() {
            let g = next[i];
            assert_eq!(s.store_sample(id, &sample(g, g * SEC, g)).unwrap(), Stored::New);
            ack(format!("node{i}/meminfo {g}"));
            next[i] += 1;
        }
    }
}

#[test]
fn kill_loop_loses_no_acknowledged_sample_and_duplicates_none() {
    if let Some(arg) = child_arg() {
        child(&arg);
        return;
    }
    // On the disk: a file in memory (`/dev/shm`) keeps no safe points, for Periodic or Immediate.
    let dir = petra_recovery::disk_dir(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.path().join("metrics.pool").to_str().unwrap().to_owned();
    let config = Config { create: CreateMode::Create, size: 4 << 20, max_size: 1 << 30, ..Config::new(&path) };
    MetricStore::open(&config).unwrap().close().unwrap();
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    // Per policy: rounds, and samples acknowledged in them.
    let mut by_policy = [(0usize, 0usize); KILL_POLICIES.len()];
    let report = KillLoop::new("kill_loop_loses_no_acknowledged_sample_and_duplicates_none", 12).run(
        |round| format!("{path}#{round}"),
        |arg, out| {
            let (path, policy) = kill_round(arg);
            if out.acks.first() != Some(&format!("R {policy}")) {
                return Err(format!("the child did not run under {policy}: {:?}", out.acks.first()));
            }
            for a in &out.acks[1..] {
                let (set, g) = a.split_once(' ').unwrap();
                acked.insert(set.to_owned(), g.parse().unwrap());
            }
            let last = check_sets(path, policy, &acked)?;
            // The next child carries on from what is there (an unacknowledged sample that made it
            // is kept, and acknowledged by being there).
            acked = last;
            let counts = &mut by_policy[KILL_POLICIES.iter().position(|&p| p == policy).expect("one of them")];
            counts.0 += 1;
            counts.1 += out.acks.len() - 1;
            Ok(())
        },
    );
    eprintln!("{} rounds, {} kills, {} acks", report.rounds, report.kills, report.acks);
    report.assert_ok(6);
    assert!(acked.values().all(|&g| g > 10), "too few samples stored: {acked:?}");
    for (policy, (rounds, samples)) in KILL_POLICIES.iter().zip(by_policy) {
        eprintln!("{policy}: {rounds} rounds, {samples} samples acknowledged");
        assert!(rounds >= 4 && samples >= 20, "{policy}: {rounds} rounds, {samples} samples acknowledged");
    }
}

/// Stores `rounds` rounds of `per_round` samples with retention of the last `keep` (the engine's
/// own checkpoint rounds run as the rings fill) under `durability`; returns the file's length
/// after each round.
fn steady_ingest(
    path: &std::path::Path,
    durability: DurabilityPolicy,
    (rounds, per_round, keep): (u64, u64, usize),
) -> Vec<u64> {
    let config =
        Config { create: CreateMode::Create, size: 1 << 20, max_size: 1 << 30, durability, ..Config::new(path) };
    let store = MetricStore::open(&config).unwrap();
    assert_eq!(store.medium(), petra::mem::Durability::PageCache, "a file on a disk keeps safe points");
    store.add_schema(&schema()).unwrap();
    let set = store.add_set(&set_info("node1/meminfo", 1, 100)).unwrap();
    let mut lens = Vec::new();
    let mut g = 0;
    for _ in 0..rounds {
        let mut s = store.session().unwrap();
        for _ in 0..per_round {
            g += 1;
            assert_eq!(s.store_sample(set, &sample(g, g * SEC, g)).unwrap(), Stored::New);
        }
        s.trim(set, 0, Some(keep)).unwrap();
        drop(s);
        // A checkpoint and a safe point after every round of samples, as the store's own
        // threads make them, but at fixed points of the run: a loaded machine can keep those
        // threads off the cores for longer than the run takes to fill a ring, and the rings then
        // grow meanwhile (up to the budget for safe points, and until the writers run the rounds
        // themselves, see `Checkpointer::maybe_round`). 3000 samples take less than the fill that
        // asks for a round: the rounds are these.
        store.checkpoint().unwrap();
        store.sync().unwrap();
        lens.push(std::fs::metadata(path).unwrap().len());
    }
    // Nothing was lost on the way: the last `keep` samples, the latest the last stored.
    let mut s = store.session().unwrap();
    let kept = s.range(set, 0, u64::MAX).unwrap();
    assert_eq!(kept.len(), keep);
    assert_eq!(kept.last().unwrap(), &sample(g, g * SEC, g));
    assert_eq!(s.latest(set).unwrap().unwrap(), sample(g, g * SEC, g));
    drop(s);
    store.close().unwrap();
    lens
}

#[test]
fn the_file_stays_flat_under_steady_ingest_with_retention() {
    // 36 000 samples (each two ops' descriptor, a history node and a blob), 500 kept: without
    // checkpoint rounds the descriptors alone would take 4.6 MiB of rings.
    // Under Periodic the rings keep the descriptors written since the last safe point, so they go
    // round only as safe points come: here one after every 3000 samples (`steady_ingest` makes
    // it; the syncer's own interval, an hour, never comes). Without them the rings would grow,
    // up to the engine's budget (a sixteenth of the maximum size), and the file with them. On the
    // disk: a file in memory (`/dev/shm`) keeps no safe points.
    let dir = petra_recovery::disk_dir(env!("CARGO_TARGET_TMPDIR"));
    for (i, policy) in
        [DurabilityPolicy::Process, DurabilityPolicy::Periodic(Duration::from_secs(3600))].into_iter().enumerate()
    {
        let lens = steady_ingest(&dir.path().join(format!("steady{i}.pool")), policy, (12, 3000, 500));
        // After the first rounds have sized the file, it no longer grows.
        assert!(lens[2..].iter().all(|&l| l == lens[2]), "{policy}: {lens:?}");
    }
}

#[test]
fn a_checkpoint_asked_for_folds_the_samples_and_a_crash_after_it_loses_none() {
    let dir = petra_recovery::scratch_dir();
    let path = dir.path().join("asked.pool");
    let config = Config { create: CreateMode::Create, size: 1 << 20, max_size: 1 << 30, ..Config::new(&path) };
    let store = MetricStore::open(&config).unwrap();
    store.add_schema(&schema()).unwrap();
    let set = store.add_set(&set_info("node1/meminfo", 1, 100)).unwrap();
    let mut s = store.session().unwrap();
    for g in 1..=50 {
        assert_eq!(s.store_sample(set, &sample(g, g * SEC, g)).unwrap(), Stored::New);
    }
    drop(s);
    let report = store.checkpoint().unwrap().expect("no round is running");
    assert!(report.descriptors >= 50, "{report:?}");
    // Dropped as a crash leaves it: the next open recovers from the records alone.
    drop(store);
    let store = MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(&path) }).unwrap();
    let mut s = store.session().unwrap();
    assert_eq!(s.range(set, 0, u64::MAX).unwrap().len(), 50);
    assert_eq!(s.latest(set).unwrap().unwrap(), sample(50, 50 * SEC, 50));
}

#[test]
fn cursors_keep_their_values_across_a_crash_and_a_reopening() {
    let (mem, store) = sim_store();
    assert_eq!(store.cursor("remote_write a").unwrap(), None);
    store.set_cursor("remote_write a", b"first").unwrap();
    store.set_cursor("remote_write b", b"").unwrap();
    store.set_cursor("remote_write a", b"second").unwrap();
    let too_long = vec![0u8; 64 << 10];
    assert!(matches!(store.set_cursor("c", &too_long), Err(KvError::ValueTooLong { .. })));
    // A crash that loses every unflushed store: each cursor is there, as last set.
    let image = mem.persisted_bytes();
    drop(store);
    let store = MetricStore::open_in(Pool::open_in(SimMem::from_bytes(&image, 64 << 20)).unwrap()).unwrap();
    assert_eq!(store.cursor("remote_write a").unwrap().as_deref(), Some(&b"second"[..]));
    assert_eq!(store.cursor("remote_write b").unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(store.cursor("c").unwrap(), None);
    // Cursors are no sets or schemas.
    assert!(store.sets().is_empty());
}

/// A catalog that does not hold together (here, a set record that does not parse, written as a
/// well-formed value so that every check of the pool passes) refuses the store before recovery
/// writes anything: closed cleanly or not, the file is byte for byte as it was.
#[test]
fn a_catalog_that_does_not_hold_together_is_refused_with_the_file_untouched() {
    let dir = petra_recovery::scratch_dir();
    for closed in [true, false] {
        let path = dir.path().join(format!("bad-catalog-{closed}.pool"));
        let config = Config { create: CreateMode::Create, ..Config::new(&path) };
        let store = MetricStore::open(&config).unwrap();
        store.add_schema(&schema()).unwrap();
        let set = store.add_set(&set_info("node1/meminfo", 1, 0)).unwrap();
        store.session().unwrap().store_sample(set, &sample(1, SEC, 5)).unwrap();
        store.close().unwrap();
        // Set 1's record, through the engine under the store: not JSON.
        let pool = Pool::open(&path, &petra::pool::Mapping::default()).unwrap();
        let (engine, _) = petra::Engine::open(pool, petra::EngineConfig::rings(1 << 20)).unwrap();
        let mut tx = petra::Transaction::new();
        tx.put_bytes(petra::StructId(1), 2u64 << 56 | 1, b"not a set record");
        assert!(engine.handle().unwrap().execute(&tx).unwrap().is_committed());
        if closed {
            engine.close().unwrap();
        } else {
            drop(engine);
        }
        let before = std::fs::read(&path).unwrap();
        let opened = MetricStore::open(&Config { create: CreateMode::Open, ..Config::new(&path) });
        match opened {
            Err(KvError::Engine(petra::EngineError::Corrupt(what))) => assert!(what.contains("set record"), "{what}"),
            other => panic!("closed {closed}: {other:?}"),
        }
        assert!(std::fs::read(&path).unwrap() == before, "closed {closed}: the refused store's file was written");
    }
}

/// The power-loss runs' memory: room for the samples and the values they replace.
const POWER_MAX_LEN: u64 = 16 << 20;

/// A schema whose samples are several KiB (an array of 640 words), so that one spans pages.
fn wide_schema() -> Schema {
    Schema {
        name: "percpu".into(),
        metrics: vec![
            Metric::meta("component_id", Scalar::U64),
            Metric { name: "ticks".into(), scalar: Scalar::U64, array: Some(640), meta: false },
        ],
    }
}

/// The sets of the power-loss runs: two of small samples, one of wide ones.
const POWER_SETS: [&str; 3] = ["node0/meminfo", "node1/meminfo", "node0/percpu"];

/// A metric store with the schemas and sets of the power-loss runs, cleanly closed.
fn power_setup() -> SimMem {
    let mem = Arc::new(SimMem::new(0, POWER_MAX_LEN));
    let config =
        PoolConfig { initial_size: 1 << 20, max_size: POWER_MAX_LEN, chunk_size: 64 << 10, ..PoolConfig::default() };
    let store = MetricStore::create_in(Pool::create_in(Arc::clone(&mem), &config).unwrap()).unwrap();
    store.add_schema(&schema()).unwrap();
    store.add_schema(&wide_schema()).unwrap();
    for (i, name) in POWER_SETS.iter().enumerate() {
        let (_, schema) = name.split_once('/').unwrap();
        store.add_set(&SetInfo { schema: schema.into(), ..set_info(name, i as u64, 0) }).unwrap();
    }
    store.into_engine().into_pool().unwrap().close().unwrap();
    Arc::into_inner(mem).unwrap()
}

/// `Periodic`'s background syncer waits an hour, so that the workload's own `MetricStore::sync`
/// calls are the safe points, the same on every run.
const PERIODIC: DurabilityPolicy = DurabilityPolicy::Periodic(Duration::from_secs(3600));

/// A stored sample: simulator events when its store began and returned, its set (an index into
/// `POWER_SETS`) and the sample.
#[derive(Debug, Clone)]
struct StoredSample {
    start: u64,
    end: u64,
    set: usize,
    sample: Sample,
}

/// What a power-loss workload did: its samples in the order stored, and its syncs (events before
/// each began and when it returned).
#[derive(Debug, Clone, Default)]
struct PowerRecord {
    samples: Vec<StoredSample>,
    syncs: Vec<(u64, u64)>,
}

/// Opens the store (recovering: that syncs) under `policy` and stores `samples` samples, each of
/// a set drawn at random, one thread, syncing after every `sync_every`; leaves the store as a
/// power loss would.
fn power_workload(mem: Arc<SimMem>, seed: u64, samples: u64, sync_every: u64, policy: DurabilityPolicy) -> PowerRecord {
    power_workload_on(mem, seed, samples, sync_every, policy, 0)
}

/// [`power_workload`] on the memory's model, whatever it is; with `resend_every` > 0, after every
/// that many samples the last sample of a set is stored again, which must be a duplicate and
/// change nothing.
fn power_workload_on(
    mem: Arc<SimMem>,
    seed: u64,
    samples: u64,
    sync_every: u64,
    policy: DurabilityPolicy,
    resend_every: u64,
) -> PowerRecord {
    let store = MetricStore::open_with(Pool::open_in(Arc::clone(&mem)).unwrap(), policy).unwrap();
    let medium = match mem.model() {
        MediaModel::PageCache => petra::mem::Durability::PageCache,
        MediaModel::PersistentMemory => petra::mem::Durability::Simulated,
    };
    assert_eq!(store.medium(), medium);
    let ids: Vec<SetId> = POWER_SETS.iter().map(|n| store.set_id(n).expect("made by the setup")).collect();
    let mut s = store.session().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next = [1u64; POWER_SETS.len()];
    let mut record = PowerRecord::default();
    for i in 1..=samples {
        let set = rng.random_range(0..POWER_SETS.len());
        let g = next[set];
        next[set] += 1;
        let sample = if POWER_SETS[set].ends_with("percpu") {
            let ticks = (0..640).map(|_| Value::U(rng.random())).collect();
            Sample {
                timestamp: g * SEC,
                duration: 10,
                generation: g,
                consistent: true,
                values: vec![Value::U(0), Value::Array(ticks)],
            }
        } else {
            sample(g, g * SEC, rng.random_range(0..1 << 40))
        };
        let start = mem.events();
        assert_eq!(s.store_sample(ids[set], &sample).unwrap(), Stored::New);
        record.samples.push(StoredSample { start, end: mem.events(), set, sample });
        if resend_every > 0 && i % resend_every == 0 {
            let again = &record.samples[rng.random_range(0..record.samples.len())];
            let latest = record.samples.iter().rfind(|x| x.set == again.set).expect("that one at least");
            assert_eq!(s.store_sample(ids[latest.set], &latest.sample).unwrap(), Stored::Duplicate);
        }
        if i % sync_every == 0 {
            let begin = mem.events();
            store.sync().unwrap();
            record.syncs.push((begin, mem.events()));
        }
    }
    record
}

/// Recovers the image's store and checks each set's history: the samples stored of it among the
/// first `k` of the workload, for one `k` from those acknowledged before the bound (under
/// `Immediate` the crash, else the start of the last sync that completed before it) to those
/// started before the crash. So each set's recovered samples are a prefix of those stored, none
/// twice, at least those acknowledged before the bound; and the latest is the history's last.
fn power_check(record: &PowerRecord, policy: DurabilityPolicy, image: &CrashImage, mem: SimMem) -> Result<(), String> {
    let crash = image.point.event;
    let bound = match policy {
        DurabilityPolicy::Immediate => crash,
        _ => record.syncs.iter().filter(|&&(_, end)| end <= crash).map(|&(begin, _)| begin).max().unwrap_or(0),
    };
    let least = record.samples.iter().filter(|x| x.end <= bound).count();
    let most = record.samples.iter().filter(|x| x.start <= crash).count();
    let pool = Pool::open_in(mem).map_err(|e| format!("refused: the pool does not open: {e}"))?;
    let store = MetricStore::open_with(pool, policy).map_err(|e| format!("refused: the store does not open: {e}"))?;
    let mut s = store.session().map_err(|e| format!("refused: {e}"))?;
    let mut got = Vec::new();
    for name in POWER_SETS {
        let id = store.set_id(name).ok_or_else(|| format!("refused: the set {name} is gone"))?;
        let h = s.range(id, 0, u64::MAX).map_err(|e| format!("refused: {name} reads: {e}"))?;
        let latest = s.latest(id).map_err(|e| format!("refused: {name} reads: {e}"))?;
        if latest.as_ref() != h.last() {
            return Err(format!("not a state: {name}'s latest sample is not its history's last"));
        }
        got.push(h);
    }
    // The histories after the first `k` samples stored.
    let after = |k: usize| -> Vec<Vec<Sample>> {
        (0..POWER_SETS.len())
            .map(|set| record.samples[..k].iter().filter(|x| x.set == set).map(|x| x.sample.clone()).collect())
            .collect()
    };
    if (least..=most).any(|k| after(k) == got) {
        return Ok(());
    }
    let gens = |h: &[Sample]| h.iter().map(|x| x.generation).collect::<Vec<_>>();
    let (acked, started) = (after(least), after(most));
    let mut why = Vec::new();
    for (set, name) in POWER_SETS.iter().enumerate() {
        let (g, a, m) = (&got[set], &acked[set], &started[set]);
        let prefix = g.len() <= m.len() && m[..g.len()] == g[..];
        if !prefix {
            why.push(format!("{name}: generations {:?} not a prefix of those stored {:?}", gens(g), gens(m)));
        } else if g.len() < a.len() {
            why.push(format!("{name}: {} samples, {} acknowledged before event {bound}", g.len(), a.len()));
        }
    }
    let label = if why.iter().any(|w| w.contains("acknowledged")) { "lost" } else { "not a state" };
    if why.is_empty() {
        why.push("each set a prefix, but of no one instant".into());
    }
    Err(format!("{label}: crash before event {crash}, {least} to {most} samples: {}", why.join("; ")))
}

/// A power-loss run's crash images: before every fence and sync, 40 points spread over it, 6
/// images each besides the two extremes, each checked with `power_check`.
fn power_run(seed: u64, sync_every: u64, policy: DurabilityPolicy) -> (Report, PowerRecord) {
    let plan = CrashPlan { every_flush: false, ..CrashPlan::all(0.0, seed).with_syncs() };
    let test = CrashTest {
        model: MediaModel::PageCache,
        plan,
        exhaustive_bound: 0,
        samples: 6,
        max_points: 40,
        ..CrashTest::new(seed)
    };
    let mut kept = None;
    let report = test.run(
        power_setup,
        |mem| {
            let record = power_workload(mem, seed, 90, sync_every, policy);
            kept = Some(record.clone());
            record
        },
        |record, image, mem| power_check(record, policy, image, mem),
    );
    eprintln!("{policy}: {} points, {} images, {} failing", report.points, report.images, report.failures.len());
    (report, kept.expect("the workload ran"))
}

/// The workload stored what the runs are about: wide samples among the small ones, every set
/// several times, and (where it syncs) several syncs.
fn assert_power_covered(record: &PowerRecord, syncs: usize) {
    for (set, name) in POWER_SETS.iter().enumerate() {
        let n = record.samples.iter().filter(|x| x.set == set).count();
        assert!(n >= 15, "{n} samples of {name}");
    }
    assert!(record.syncs.len() >= syncs, "{} syncs", record.syncs.len());
}

/// `Periodic`, with the workload's syncs as the only safe points: every image keeps, of each
/// set, a prefix of its samples holding every one acknowledged before the last safe point that
/// completed, the sets all at one instant of the run.
#[test]
fn power_loss_keeps_every_sample_acknowledged_before_the_last_safe_point() {
    let (report, record) = power_run(21, 10, PERIODIC);
    assert_power_covered(&record, 8);
    assert!(report.images >= 300, "only {} images", report.images);
    report.assert_ok();
}

/// `Immediate`: a sample is stored once the safe point that covers it completed, so every image
/// keeps every sample acknowledged before the crash.
#[test]
fn power_loss_keeps_every_acknowledged_sample_under_immediate() {
    let (report, record) = power_run(22, u64::MAX, DurabilityPolicy::Immediate);
    assert_power_covered(&record, 0);
    assert!(report.images >= 300, "only {} images", report.images);
    report.assert_ok();
}

/// The checks above have teeth: the same workload and syncs under `Process`, which keeps no
/// safe points, must give images that fail them.
#[test]
fn without_safe_points_power_loss_loses_synced_samples() {
    let (report, record) = power_run(21, 10, DurabilityPolicy::Process);
    assert_power_covered(&record, 8);
    let of = |label: &str| report.failures.iter().filter(|f| f.message.starts_with(label)).count();
    let (refused, lost, other) = (of("refused"), of("lost"), of("not a state"));
    eprintln!("process: {} images, {refused} refused, {lost} lost, {other} not a state", report.images);
    for label in ["refused", "lost", "not a state"] {
        if let Some(f) = report.failures.iter().find(|f| f.message.starts_with(label)) {
            eprintln!("first {label}: {f}");
        }
    }
    assert!(!report.failures.is_empty(), "no image of {} failed without safe points", report.images);
    // Every failure is the check's verdict, none a panic of recovery.
    assert_eq!(refused + lost + other, report.failures.len(), "{:?}", report.failures.first());
}

/// Persistent memory (flush and fence make a line durable, any line may reach the media before):
/// with no safe points at all (`Process`), every image at every flush, fence and a share of
/// stores, and at the crash points with the most lines pending, keeps of each set every sample
/// acknowledged before the crash, each once (re-sends of a set's latest sample among them), none
/// torn, the sets all at one instant of the run.
#[test]
fn crash_images_on_persistent_memory_keep_every_acknowledged_sample_once() {
    let mut total = Report::default();
    for seed in [31, 32] {
        let test = CrashTest {
            plan: CrashPlan::all(0.01, seed),
            exhaustive_bound: 16,
            samples: 6,
            max_points: 100,
            busiest: 16,
            ..CrashTest::new(seed)
        };
        let mut kept = None;
        let report = test.run(
            power_setup,
            |mem| {
                let record = power_workload_on(mem, seed, 45, u64::MAX, DurabilityPolicy::Process, 4);
                kept = Some(record.clone());
                record
            },
            // Bound at the crash: what `Immediate` promises of the page cache, persistent memory
            // gives under any policy.
            |record, image, mem| power_check(record, DurabilityPolicy::Immediate, image, mem),
        );
        let record = kept.expect("the workload ran");
        for (set, name) in POWER_SETS.iter().enumerate() {
            let n = record.samples.iter().filter(|x| x.set == set).count();
            assert!(n >= 8, "{n} samples of {name}");
        }
        eprintln!("seed {seed}: {} points, {} images, {} failing", report.points, report.images, report.failures.len());
        total.merge(report);
    }
    assert!(total.images >= 1_000, "only {} images", total.images);
    total.assert_ok();
}

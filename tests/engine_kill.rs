//! The kill loop on a real pool file: a child process runs random transactions on one structure
//! of each kind, with a checkpoint round every few (its rings, of one chunk, are reused in laps),
//! and is killed with SIGKILL at a random moment; the parent reopens the pool (recovering it) and
//! checks that it holds every transaction the child acknowledged, plus possibly the one in flight,
//! all or nothing. The next child carries on from what the parent found.
//!
//! Each round runs under one durability policy, in turn (`Process`, `Periodic` with a background
//! syncer making a safe point every 5 ms while the child is killed, `Immediate`), and the parent
//! reopens under the same: a kill takes no acknowledged transaction back under any of them. The
//! pool is in the scratch directory, in `/dev/shm` where the engine keeps no safe points: every
//! open treats it as a file on a disk (`AsPageCache`) for them to run.

use std::path::Path;

use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{DurabilityPolicy, Engine, Op, OpKind, Outcome, StructId};
use petra_recovery::battery::kill_loop_engine as engine_config;
use petra_recovery::battery::{KILL_LOOP_POLICIES as POLICIES, KILL_LOOP_ROUND_EVERY as ROUND_EVERY};
use petra_recovery::kill::{KillLoop, ack, child_arg};
use petra_recovery::model::Model;
use petra_recovery::{AsPageCache, scratch_dir};
use rand::SeedableRng;
use rand::rngs::StdRng;

const LISTS: [StructId; petra_recovery::battery::ALL.len()] = petra_recovery::battery::IDS;

/// The round a child's or check's argument (`path#round`) names, and its policy.
fn round_of(arg: &str) -> (&str, usize, DurabilityPolicy) {
    let (path, round) = arg.split_once('#').unwrap();
    let round: usize = round.parse().unwrap();
    (path, round, POLICIES[round % POLICIES.len()])
}

fn encode(ops: &[Op]) -> String {
    ops.iter()
        .map(|o| format!("{}:{}:{}:{}", o.kind as u8, o.structure.0, o.key, o.value))
        .collect::<Vec<_>>()
        .join(",")
}

fn decode(s: &str) -> Vec<Op> {
    s.split(',')
        .map(|o| {
            let f: Vec<u64> = o.split(':').map(|x| x.parse().unwrap()).collect();
            Op::new(OpKind::from_code(f[0] as u8), StructId(f[1] as u8), f[2], f[3])
        })
        .collect()
}

/// The child: recover under its round's policy (acknowledged as "R policy"), then run
/// transactions until killed, announcing each before it starts ("B ops") and acknowledging each
/// that commits ("C").
fn child(arg: &str) {
    let (path, round, policy) = round_of(arg);
    let pool = Pool::open(path, &Mapping::default()).expect("the child opens the pool").map_mem(AsPageCache);
    let (engine, _) = Engine::open(pool, engine_config(policy)).expect("recovery");
    assert_eq!(engine.durability(), policy);
    assert_eq!(engine.pool().durability(), petra::mem::Durability::PageCache, "safe points are kept");
    let mut h = engine.handle().unwrap();
    let mut rng = StdRng::seed_from_u64(round as u64);
    ack(format!("R {policy}"));
    for i in 1.. {
        if i % ROUND_EVERY == 0 {
            h.checkpoint();
        }
        let ops = petra_recovery::battery::kill_loop_ops(&mut rng);
        let tx = petra_recovery::battery::transaction(&ops);
        ack(format!("B {}", encode(&ops)));
        match petra_recovery::battery::execute(&mut h, &tx) {
            Ok(out) if out.is_committed() => ack("C"),
            Ok(_) => ack("A"),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Copies the pool a check refused into the system's temporary directory (the scratch directory
/// is removed when the test ends), so that a rare failure leaves the file to read: a recovery
/// that refuses a pool writes nothing to it, so the copy is what the child left. Returns
/// `message` with where the copy is.
fn keep_failed_pool(path: &Path, round: usize, message: String) -> String {
    let copy = std::env::temp_dir().join(format!("petra-engine-kill-{}-round-{round}.pool", std::process::id()));
    match std::fs::copy(path, &copy) {
        Ok(_) => format!("{message} (the pool is kept at {})", copy.display()),
        Err(e) => format!("{message} (the pool could not be kept: {e})"),
    }
}

/// Checks the pool, recovered under `policy` (the child's), against `base` plus the child's
/// acknowledged transactions; on success, `base` becomes the recovered state.
fn check(path: &Path, policy: DurabilityPolicy, acks: &[String], base: &mut Model) -> Result<(), String> {
    if acks.first() != Some(&format!("R {policy}")) {
        return Err(format!("the child did not run under {policy}: {:?}", acks.first()));
    }
    let pool = Pool::open(path, &Mapping::default()).map_err(|e| format!("reopen: {e}"))?.map_mem(AsPageCache);
    let (engine, report) = Engine::open(pool, engine_config(policy)).map_err(|e| format!("recovery: {e}"))?;
    let got: Vec<Vec<(u64, u64)>> =
        LISTS.iter().map(|&s| petra_recovery::battery::entries(&engine, s).unwrap()).collect();
    let mut done = base.clone();
    let mut in_flight: Option<Vec<Op>> = None;
    for a in acks {
        match a.as_str() {
            r if r.starts_with("R ") => {}
            "C" => {
                let ops = in_flight.take().ok_or("a commit without a transaction")?;
                if !done.apply(&ops).is_committed() {
                    return Err(format!("{ops:?} committed in the child, but not in the replay"));
                }
            }
            "A" => in_flight = None,
            b => in_flight = Some(decode(b.strip_prefix("B ").ok_or_else(|| format!("bad ack {b:?}"))?)),
        }
    }
    let entries = |m: &Model| LISTS.iter().map(|&s| m.entries(s)).collect::<Vec<_>>();
    let mut with_last = done.clone();
    let candidates = match &in_flight {
        Some(ops) if matches!(with_last.apply(ops), Outcome::Committed { .. }) => vec![done, with_last],
        _ => vec![done],
    };
    let diff = |m: &Model| -> String {
        let want = entries(m);
        let mut out = String::new();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let only_got: Vec<_> = g.iter().filter(|e| !w.contains(e)).collect();
            let only_want: Vec<_> = w.iter().filter(|e| !g.contains(e)).collect();
            if !only_got.is_empty() || !only_want.is_empty() {
                out += &format!(
                    " structure {i}: recovered but not acknowledged {only_got:?}, acknowledged but not recovered {only_want:?};"
                );
            }
        }
        out
    };
    let explain = candidates.iter().map(diff).collect::<Vec<_>>().join(" | or with the one in flight:");
    match candidates.into_iter().find(|m| entries(m) == got) {
        Some(m) => {
            *base = m;
            let live = report.allocator.live_blocks;
            if live != petra_recovery::battery::live_blocks(&engine, report.present_keys) {
                return Err(format!("{live} live blocks for {} keys and the heads: a leak", report.present_keys));
            }
            Ok(())
        }
        None => Err(format!("recovered neither the acknowledged state nor it plus the one in flight:{explain}")),
    }
}

#[test]
fn transactions_survive_sigkill() {
    if let Some(arg) = child_arg() {
        child(&arg);
        return;
    }
    let dir = scratch_dir();
    let path = dir.path().join("list.pool");
    let config = PoolConfig { initial_size: 4 << 20, max_size: 1 << 30, chunk_size: 64 << 10, ..PoolConfig::default() };
    let engine = Engine::create(
        Pool::create(&path, &config).unwrap().map_mem(AsPageCache),
        engine_config(DurabilityPolicy::default()),
    )
    .unwrap();
    assert_eq!(petra_recovery::battery::create_all(&engine), LISTS);
    engine.into_pool().unwrap().close().unwrap();
    let mut base = Model::default();
    // Per policy: rounds, and commits acknowledged in them.
    let mut by_policy = [(0usize, 0usize); POLICIES.len()];
    let report = KillLoop::new("transactions_survive_sigkill", 50).run(
        |round| format!("{}#{round}", path.display()),
        |arg, out| {
            let (_, round, policy) = round_of(arg);
            check(&path, policy, &out.acks, &mut base).map_err(|e| keep_failed_pool(&path, round, e))?;
            let counts = &mut by_policy[round % POLICIES.len()];
            counts.0 += 1;
            counts.1 += out.acks.iter().filter(|a| *a == "C").count();
            Ok(())
        },
    );
    report.assert_ok(50);
    assert!(report.acks > 500, "the children acknowledged only {} steps", report.acks);
    eprintln!("{} kills, {} acknowledgements, final keys {}", report.kills, report.acks, base.entries(LISTS[0]).len());
    for (policy, (rounds, commits)) in POLICIES.iter().zip(by_policy) {
        eprintln!("{policy}: {rounds} rounds, {commits} commits acknowledged");
        assert!(rounds >= 16 && commits >= 50, "{policy}: {rounds} rounds, {commits} commits acknowledged");
    }
}

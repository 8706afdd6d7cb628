//! Process kills, simulated: the kill loop's workload (`engine_kill.rs`) on a [`SimMem`], with
//! the pool as a killed process leaves it taken before sampled stores, each recovered and
//! checked. Where the kill loop needs a real kill to land in a window a few stores wide, which
//! happens in about one run of a thousand, this test looks at the pool before thousands of
//! stores and finds the same faults in seconds. A round under `Process` or `Immediate` is
//! deterministic given the pool it starts from; a `Periodic` round's syncer runs on a thread of
//! its own, so its images, and the kill the next round starts from, vary from run to run.
//!
//! A process kill loses nothing the process stored, and the machine keeps running: an image is
//! the working memory at that instant, in the same boot (recovery may then check the structures
//! against the records, which it cannot after a power loss). Each round opens the image the last
//! round chose as its kill (after a recovery of it, as the kill loop's parent checks it), under
//! the next durability policy in turn, runs a random number of transactions with a checkpoint
//! round every few, and checks every image taken: recovery accepts it and holds the transactions
//! acknowledged before it, plus possibly the one in flight.
//!
//! `PETRA_KILL_SIM_ROUNDS` and `PETRA_KILL_SIM_SEED` run it longer or elsewhere.

use std::sync::Arc;

use petra::mem::{CrashPlan, CrashState, MediaModel, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{DurabilityPolicy, Engine, Op, Outcome, StructId};
use petra_recovery::battery::kill_loop_engine as engine_config;
use petra_recovery::battery::{KILL_LOOP_POLICIES as POLICIES, KILL_LOOP_ROUND_EVERY as ROUND_EVERY};
use petra_recovery::model::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const LISTS: [StructId; petra_recovery::battery::ALL.len()] = petra_recovery::battery::IDS;
const MAX_LEN: u64 = 64 << 20;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The state of every structure.
type Entries = Vec<Vec<(u64, u64)>>;

fn model_entries(m: &Model) -> Entries {
    LISTS.iter().map(|&s| m.entries(s)).collect()
}

/// The kill's image of `st` (every store made, the boot of `running`), recovered under `policy`:
/// the engine and what it holds, or recovery's error.
fn recover(running: &SimMem, st: &CrashState, policy: DurabilityPolicy) -> Result<(Arc<SimMem>, Entries), String> {
    let mem = Arc::new(st.every_store().to_mem(MAX_LEN).in_boot_of(running));
    let pool = Pool::open_in(Arc::clone(&mem)).map_err(|e| format!("reopen: {e}"))?;
    let (engine, _) = Engine::open(pool, engine_config(policy)).map_err(|e| format!("recovery: {e}"))?;
    let got = LISTS.iter().map(|&s| petra_recovery::battery::entries(&engine, s).unwrap()).collect();
    drop(engine);
    Ok((mem, got))
}

/// What a check needs of a kill: the state acknowledged before it and the transaction in flight.
struct Kill {
    state: CrashState,
    base: Model,
    in_flight: Option<Vec<Op>>,
}

impl Kill {
    /// The models recovery may hold: the acknowledged state, or it with the one in flight.
    fn candidates(&self) -> Vec<Model> {
        let mut with = self.base.clone();
        match &self.in_flight {
            Some(ops) if matches!(with.apply(ops), Outcome::Committed { .. }) => vec![self.base.clone(), with],
            _ => vec![self.base.clone()],
        }
    }

    /// Recovers the kill's image and returns the model it holds and the memory recovered.
    fn check(&self, running: &SimMem, policy: DurabilityPolicy, at: &str) -> (Model, Arc<SimMem>) {
        let (mem, got) = recover(running, &self.state, policy).unwrap_or_else(|e| panic!("{at}: {e}"));
        match self.candidates().into_iter().find(|m| model_entries(m) == got) {
            Some(m) => (m, mem),
            None => panic!("{at}: recovered {got:?}, acknowledged {:?}", model_entries(&self.base)),
        }
    }
}

#[test]
fn transactions_survive_simulated_kills() {
    // At least one round under each policy.
    let rounds = env("PETRA_KILL_SIM_ROUNDS", 12).max(POLICIES.len() as u64);
    let seed = env("PETRA_KILL_SIM_SEED", 2);
    let config =
        PoolConfig { initial_size: 4 << 20, max_size: MAX_LEN, chunk_size: 64 << 10, mapping: Mapping::default() };
    let first = Arc::new(SimMem::new(0, MAX_LEN).with_model(MediaModel::PageCache));
    let engine =
        Engine::create(Pool::create_in(Arc::clone(&first), &config).unwrap(), engine_config(POLICIES[0])).unwrap();
    assert_eq!(petra_recovery::battery::create_all(&engine), LISTS);
    engine.into_pool().unwrap().close().unwrap();
    let boot = Arc::into_inner(first).unwrap();
    let mut bytes = boot.working_bytes();
    let mut base = Model::default();
    // Which image is the kill: drawn apart from the workload, so that a round's transactions
    // depend on the seed and the round alone.
    let mut pick = StdRng::seed_from_u64(seed ^ 0x5EED);
    // Per policy: images checked, commits acknowledged.
    let mut by_policy = [(0u64, 0u64); POLICIES.len()];
    for round in 0..rounds {
        let policy = POLICIES[round as usize % POLICIES.len()];
        let mem = Arc::new(SimMem::from_bytes(&bytes, MAX_LEN).with_model(MediaModel::PageCache).in_boot_of(&boot));
        let (engine, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), engine_config(policy)).unwrap();
        let mut h = engine.handle().unwrap();
        mem.set_plan(CrashPlan { store_probability: 0.01, seed: seed * 1000 + round, ..CrashPlan::none() });
        let mut rng = StdRng::seed_from_u64(seed * 1000 + round);
        let txs = rng.random_range(1..=1500);
        // The kill the next round starts from: one of the images checked, drawn uniformly.
        let mut kill: Option<Kill> = None;
        let mut seen = 0u64;
        let mut check_all = |base: &Model, in_flight: Option<&[Op]>, i: u64| {
            for state in mem.take_crash_states() {
                let k = Kill { state, base: base.clone(), in_flight: in_flight.map(<[Op]>::to_vec) };
                let at = format!("seed {seed}, round {round} ({policy}), transaction {i}, {}", k.state.point);
                k.check(&mem, policy, &at);
                seen += 1;
                if pick.random_range(0..seen) == 0 {
                    kill = Some(k);
                }
            }
        };
        for i in 1..=txs {
            if i % ROUND_EVERY == 0 {
                h.checkpoint();
                check_all(&base, None, i);
            }
            let ops = petra_recovery::battery::kill_loop_ops(&mut rng);
            let tx = petra_recovery::battery::transaction(&ops);
            let out = petra_recovery::battery::execute(&mut h, &tx).unwrap();
            check_all(&base, Some(&ops), i);
            if out.is_committed() {
                assert!(base.apply(&ops).is_committed(), "committed in the engine, not in the model: {ops:?}");
                by_policy[round as usize % POLICIES.len()].1 += 1;
            }
        }
        mem.set_plan(CrashPlan::none());
        drop(h);
        drop(engine);
        by_policy[round as usize % POLICIES.len()].0 += seen;
        // The next round starts from the kill's image as its recovery left it (the kill loop's
        // parent checks it so), or from where this one stopped if no image was taken.
        bytes = match kill {
            Some(k) => {
                let (m, recovered) = k.check(&mem, policy, &format!("seed {seed}, round {round}: the kill"));
                base = m;
                recovered.working_bytes()
            }
            None => mem.working_bytes(),
        };
    }
    for (policy, (images, commits)) in POLICIES.iter().zip(by_policy) {
        eprintln!("{policy}: {images} kills checked, {commits} commits");
        assert!(images >= 500 && commits >= 300, "{policy}: only {images} kills checked, {commits} commits");
    }
}

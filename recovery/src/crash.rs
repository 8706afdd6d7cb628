//! Simulated power failures: crash images of a workload, each recovered and checked.
//!
//! [`CrashTest::run`] gives the workload a [`SimMem`] (shared through an `Arc`, so the workload's
//! pool can own a clone) that captures crash states at the points the test's [`CrashPlan`]
//! selects. After the workload returns, every captured state yields its images (all of them when
//! there are at most [`exhaustive_bound`](CrashTest::exhaustive_bound), else a seeded sample), and
//! each image, as fresh memory, goes to the caller's check together with the workload's record of
//! what it acknowledged and when (compare acknowledgement event counts with
//! [`CrashPoint::event`]). Checks run on all cores.
//!
//! With [`kills`](CrashTest::kills), each crash point is a process kill instead: one image, every
//! store made, in the workload's boot.
//!
//! The memory models persistent memory unless the test says otherwise
//! ([`model`](CrashTest::model)): under [`MediaModel::PageCache`] the workload's memory is a file
//! in the page cache, images are power losses between syncs, and each names the last sync before
//! it ([`CrashImage::last_sync`]); [`power`](crate::power) checks engine histories so.
//!
//! A failure names its seed, crash point and the prefix chosen per line; with a deterministic
//! workload [`CrashTest::replay`] rebuilds that exact image. If the environment variable
//! `PETRA_CRASH_DUMP` names a directory, failing images are also written there as pool files.
//! `PETRA_CRASH_ALL_POINTS=1` checks every crash point of every test, where a test checks only
//! some of them by default ([`max_points`](CrashTest::max_points)).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use petra::mem::{CrashImage, CrashPlan, CrashPoint, CrashState, MediaModel, SimMem};

/// Set, every crash point a test's plan captures is checked, whatever its
/// [`max_points`](CrashTest::max_points) (which keeps the test suite's share of a CI run).
pub const ALL_POINTS_ENV: &str = "PETRA_CRASH_ALL_POINTS";

/// A crash test's settings.
#[derive(Debug, Clone)]
pub struct CrashTest {
    /// Seed of the store sampling and of the image sampling.
    pub seed: u64,
    /// What the workload's memory models: the memory `setup` makes is switched to it before the
    /// workload runs ([`SimMem::with_model`]).
    pub model: MediaModel,
    /// Crash points.
    pub plan: CrashPlan,
    /// Enumerate all images of a point when there are at most this many.
    pub exhaustive_bound: u64,
    /// Otherwise, check this many random images (plus the two extremes).
    pub samples: usize,
    /// Check at most this many crash points, spread evenly over the run (0: all; and all when
    /// `PETRA_CRASH_ALL_POINTS` is set).
    pub max_points: usize,
    /// Besides those, check the this many crash points of the run with the most pending lines
    /// or pages (where the most stores may or may not have reached the media), if not already
    /// among them.
    pub busiest: usize,
    /// The largest the memory of an image may grow to during recovery.
    pub max_len: u64,
    /// Each crash point is a process kill, not a power loss: its one image keeps every store
    /// made, in the workload's boot, so that recovery checks the structures against the records
    /// as it does after a real kill. `model`, `exhaustive_bound` and `samples` change nothing
    /// then.
    pub kills: bool,
}

impl CrashTest {
    /// Crash points before every fence and flush and before 5% of stores; up to 64 images a point
    /// exhaustively, else 16 samples.
    pub fn new(seed: u64) -> CrashTest {
        CrashTest {
            seed,
            model: MediaModel::PersistentMemory,
            plan: CrashPlan::all(0.05, seed),
            exhaustive_bound: 64,
            samples: 16,
            max_points: 0,
            busiest: 0,
            max_len: 1 << 30,
            kills: false,
        }
    }
}

/// One image whose check failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The test's seed.
    pub seed: u64,
    /// Where the crash was.
    pub point: CrashPoint,
    /// The event number of the last sync before the crash.
    pub last_sync: Option<u64>,
    /// Stores kept per pending line or page, in order.
    pub choice: Vec<u32>,
    /// What the check said.
    pub message: String,
    /// Where the image was written, if `PETRA_CRASH_DUMP` was set.
    pub dump: Option<PathBuf>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {} crash {}", self.seed, self.point)?;
        if let Some(sync) = self.last_sync {
            write!(f, " after the sync at event {sync}")?;
        }
        // A point with many pending lines has a long choice: the first ones say enough to read
        // the message (the failure keeps them all, for `replay`).
        if self.choice.len() > 24 {
            write!(f, " choice {:?} and {} more: {}", &self.choice[..24], self.choice.len() - 24, self.message)?;
        } else {
            write!(f, " choice {:?}: {}", self.choice, self.message)?;
        }
        if let Some(d) = &self.dump {
            write!(f, " (image in {})", d.display())?;
        }
        Ok(())
    }
}

/// What a crash test found.
#[derive(Debug, Default)]
pub struct Report {
    /// Crash points whose images were checked.
    pub points: usize,
    /// Images checked.
    pub images: u64,
    /// Images whose check failed.
    pub failures: Vec<Failure>,
}

impl Report {
    /// Panics, listing the first failures, unless every image passed; panics also if no image
    /// was checked, since a crash test that checked nothing proves nothing.
    #[track_caller]
    pub fn assert_ok(&self) {
        assert!(self.images > 0, "the crash test checked no image");
        if !self.failures.is_empty() {
            let list: Vec<String> = self.failures.iter().take(10).map(|f| format!("  {f}")).collect();
            panic!(
                "{} of {} crash images failed (first {} listed):\n{}",
                self.failures.len(),
                self.images,
                list.len(),
                list.join("\n")
            );
        }
    }

    /// Adds another report's counts and failures to this one.
    pub fn merge(&mut self, other: Report) {
        self.points += other.points;
        self.images += other.images;
        self.failures.extend(other.failures);
    }
}

impl CrashTest {
    /// Runs `workload` on memory made by `setup` with crash capture on, then checks every image:
    /// `check(record, image, memory)` gets what the workload returned, the image (its crash point
    /// and choice) and the image as fresh memory to recover from.
    pub fn run<T, W, C>(&self, setup: impl FnOnce() -> SimMem, workload: W, check: C) -> Report
    where
        W: FnOnce(Arc<SimMem>) -> T,
        T: Sync,
        C: Fn(&T, &CrashImage, SimMem) -> Result<(), String> + Sync,
    {
        let (record, states, mem) = self.capture(setup, workload);
        let states = self.select(states);
        self.check_states(&record, &states, &mem, &check)
    }

    /// Runs the workload with capture on; returns its record, the crash states and its memory.
    fn capture<T, W>(&self, setup: impl FnOnce() -> SimMem, workload: W) -> (T, Vec<CrashState>, Arc<SimMem>)
    where
        W: FnOnce(Arc<SimMem>) -> T,
    {
        let mem = Arc::new(setup().with_model(self.model));
        mem.set_plan(self.plan.clone());
        let record = workload(Arc::clone(&mem));
        let mut states = mem.take_crash_states();
        // The state after the last event is a crash point too.
        states.push(mem.crash_now());
        (record, states, mem)
    }

    fn select(&self, states: Vec<CrashState>) -> Vec<CrashState> {
        if self.max_points == 0 || states.len() <= self.max_points || std::env::var_os(ALL_POINTS_ENV).is_some() {
            return states;
        }
        let step = states.len() as f64 / self.max_points as f64;
        let mut picked: Vec<usize> = (0..self.max_points).map(|i| (i as f64 * step) as usize).collect();
        let mut busiest: Vec<usize> = (0..states.len()).filter(|i| picked.binary_search(i).is_err()).collect();
        // Most pending first; the earlier of equals, so that the choice is the same on every run.
        busiest.sort_by_key(|&i| (std::cmp::Reverse(states[i].pending()), i));
        picked.extend(busiest.into_iter().take(self.busiest));
        picked.sort_unstable();
        picked.into_iter().map(|i| states[i].clone()).collect()
    }

    fn check_states<T: Sync, C>(&self, record: &T, states: &[CrashState], ran: &SimMem, check: &C) -> Report
    where
        C: Fn(&T, &CrashImage, SimMem) -> Result<(), String> + Sync,
    {
        let jobs: Vec<(usize, Vec<u32>)> = states
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                let images = if self.kills {
                    // The choice of `every_store`, built into its image by the worker below.
                    vec![s.counts()]
                } else {
                    s.images(self.exhaustive_bound, self.samples, self.seed)
                };
                images.into_iter().map(move |c| (i, c))
            })
            .collect();
        let next = AtomicUsize::new(0);
        let checked = AtomicU64::new(0);
        let failures = Mutex::new(Vec::new());
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    loop {
                        // Relaxed: a work counter; the scope's join publishes the results.
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        let Some((i, choice)) = jobs.get(j) else { break };
                        let image = states[*i].image(choice);
                        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            let mem = image.to_mem(self.max_len);
                            check(record, &image, if self.kills { mem.in_boot_of(ran) } else { mem })
                        }))
                        .unwrap_or_else(|p| Err(format!("recovery panicked: {}", panic_message(&p))));
                        checked.fetch_add(1, Ordering::Relaxed);
                        if let Err(message) = outcome {
                            let dump = dump_image(self.seed, &image, j);
                            failures.lock().expect("no panic while holding it").push(Failure {
                                seed: self.seed,
                                point: image.point,
                                last_sync: image.last_sync,
                                choice: image.choice.clone(),
                                message,
                                dump,
                            });
                        }
                    }
                });
            }
        });
        let mut failures = failures.into_inner().expect("workers finished");
        failures.sort_by_key(|f| (f.point.event, f.choice.clone()));
        Report { points: states.len(), images: checked.into_inner(), failures }
    }

    /// Re-runs a deterministic workload with the same settings and rebuilds the image of a
    /// failure: the crash state at `point` with `choice` applied. `None` if the run has no such
    /// point (the workload was not deterministic).
    pub fn replay<T, W>(
        &self,
        setup: impl FnOnce() -> SimMem,
        workload: W,
        point: CrashPoint,
        choice: &[u32],
    ) -> Option<(T, CrashImage)>
    where
        W: FnOnce(Arc<SimMem>) -> T,
    {
        let (record, states, _) = self.capture(setup, workload);
        let state = states.into_iter().find(|s| s.point == point)?;
        (state.pending() == choice.len()).then(|| (record, state.image(choice)))
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

fn dump_image(seed: u64, image: &CrashImage, n: usize) -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("PETRA_CRASH_DUMP")?);
    let path = dir.join(format!("crash-s{seed}-e{}-{n}.pool", image.point.event));
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(&path, image.to_bytes()).ok()?;
    Some(path)
}

//! Real process kills: a child runs a workload on a pool file and is killed with SIGKILL at a
//! random moment; the parent then reopens the file and checks it.
//!
//! The child is the test binary itself, re-executed to run only the calling test, with the
//! environment variable [`CHILD_ENV`] set to the round's argument. The test starts with
//! [`child_arg`]: in the child it returns the argument, and the test runs the workload instead of
//! the loop. The child reports progress with [`ack`], one line on standard output per
//! acknowledged item, which the parent collects from the pipe (the kernel keeps what was written
//! even after the kill) and hands to the check.
//!
//! ```no_run
//! # fn workload(_: &str) {}
//! # fn check(_: &str, _: &[String]) -> Result<(), String> { Ok(()) }
//! #[test]
//! fn survives_kills() {
//!     if let Some(arg) = petra_recovery::kill::child_arg() {
//!         workload(&arg); // loops, calling petra_recovery::kill::ack(..) after each durable step
//!         return;
//!     }
//!     let dir = std::env::temp_dir();
//!     let report = petra_recovery::kill::KillLoop::new("survives_kills", 20)
//!         .run(|_round| dir.join("pool").display().to_string(), |arg, out| check(arg, &out.acks));
//!     report.assert_ok(20);
//! }
//! ```

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The environment variable that makes a re-executed test binary a child.
pub const CHILD_ENV: &str = "PETRA_KILL_CHILD";

const ACK_PREFIX: &str = "PETRA-ACK ";

/// In a child of a [`KillLoop`], the round's argument; `None` in an ordinary test run.
pub fn child_arg() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// Called by the child after something is durable: reports `item` to the parent.
pub fn ack(item: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    // The write reaches the pipe (the kernel) before this returns, so the parent sees it even if
    // the child is killed on the next instruction.
    let _ = writeln!(out, "{ACK_PREFIX}{item}");
    let _ = out.flush();
}

/// What a killed child left.
#[derive(Debug, Clone)]
pub struct ChildOutput {
    /// What it acknowledged, in order, without the prefix.
    pub acks: Vec<String>,
    /// Whether it was killed (false: it exited on its own first).
    pub killed: bool,
    /// How long it ran.
    pub ran_for: Duration,
}

/// A series of kill rounds.
#[derive(Debug, Clone)]
pub struct KillLoop {
    /// The exact name of the test that runs the loop (as libtest names it, module path included).
    pub test_name: String,
    /// Rounds to run.
    pub rounds: usize,
    /// Seed of the kill delays.
    pub seed: u64,
    /// Kill after a delay drawn uniformly from this range (after the child's first ack, so that
    /// the delay counts work, not process start-up).
    pub delay: std::ops::Range<Duration>,
    /// Give up on a child that acknowledges nothing for this long.
    pub start_timeout: Duration,
}

/// What a kill loop found.
#[derive(Debug, Default)]
pub struct KillReport {
    /// Rounds run.
    pub rounds: usize,
    /// Rounds that ended with a SIGKILL.
    pub kills: usize,
    /// Acknowledgements checked over all rounds.
    pub acks: usize,
    /// Rounds whose check failed: (round, argument, message).
    pub failures: Vec<(usize, String, String)>,
}

impl KillReport {
    /// Panics unless every round passed and at least `min_kills` children were killed.
    #[track_caller]
    pub fn assert_ok(&self, min_kills: usize) {
        if !self.failures.is_empty() {
            let list: Vec<String> =
                self.failures.iter().take(10).map(|(r, a, m)| format!("  round {r} ({a}): {m}")).collect();
            panic!("{} of {} kill rounds failed:\n{}", self.failures.len(), self.rounds, list.join("\n"));
        }
        assert!(self.kills >= min_kills, "only {} of {} rounds ended in a kill", self.kills, self.rounds);
    }
}

impl KillLoop {
    /// `rounds` rounds of the test `test_name`, killed 1 to 50 ms into their work.
    pub fn new(test_name: &str, rounds: usize) -> KillLoop {
        KillLoop {
            test_name: test_name.to_owned(),
            rounds,
            seed: 0x5EED,
            delay: Duration::from_millis(1)..Duration::from_millis(50),
            start_timeout: Duration::from_secs(30),
        }
    }

    /// Runs the rounds: `prepare(round)` returns the child's argument (a pool path, say, after
    /// making the pool), then the child runs and is killed, then `check(arg, output)` inspects
    /// what is left. Stops early after 10 failures.
    pub fn run(
        &self,
        mut prepare: impl FnMut(usize) -> String,
        mut check: impl FnMut(&str, &ChildOutput) -> Result<(), String>,
    ) -> KillReport {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut report = KillReport::default();
        for round in 0..self.rounds {
            let arg = prepare(round);
            let delay = if self.delay.is_empty() { self.delay.start } else { rng.random_range(self.delay.clone()) };
            let output = match self.run_child(&exe, &arg, delay) {
                Ok(o) => o,
                Err(e) => {
                    report.failures.push((round, arg, e));
                    break;
                }
            };
            report.rounds += 1;
            report.kills += output.killed as usize;
            report.acks += output.acks.len();
            if let Err(m) = check(&arg, &output) {
                report.failures.push((round, arg, m));
                if report.failures.len() >= 10 {
                    break;
                }
            }
        }
        report
    }

    fn run_child(&self, exe: &std::path::Path, arg: &str, delay: Duration) -> Result<ChildOutput, String> {
        let start = Instant::now();
        let mut child = Command::new(exe)
            .args([self.test_name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the child: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest writes "test name ... " with no line end before it runs the test,
                // so the child's first ack shares that line: an ack is what follows the prefix,
                // wherever on its line it starts.
                if let Some(at) = line.find(ACK_PREFIX)
                    && tx.send(line[at + ACK_PREFIX.len()..].to_owned()).is_err()
                {
                    break;
                }
            }
        });
        let mut acks = Vec::new();
        // Wait for the first ack, then for the delay, then kill.
        match rx.recv_timeout(self.start_timeout) {
            Ok(first) => acks.push(first),
            Err(RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the child acknowledged nothing within {:?}", self.start_timeout));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().map_err(|e| e.to_string())?;
                return Err(format!(
                    "the child ended before its first acknowledgement ({status}); its stderr is above"
                ));
            }
        }
        std::thread::sleep(delay);
        // SIGKILL: `Child::kill` sends it on Unix (and fails only if the child was reaped).
        child.kill().map_err(|e| format!("cannot kill the child: {e}"))?;
        let status = child.wait().map_err(|e| e.to_string())?;
        reader.join().map_err(|_| "the reader thread panicked".to_owned())?;
        acks.extend(rx.try_iter());
        // Killed only if the signal ended it: a child that exited on its own, even just before
        // the kill, did not die by it, and one that failed is reported.
        let killed = status.signal() == Some(libc::SIGKILL);
        if !killed && !status.success() {
            return Err(format!("the child failed on its own ({status}); its stderr is above"));
        }
        Ok(ChildOutput { acks, killed, ran_for: start.elapsed() })
    }
}

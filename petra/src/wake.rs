//! The engine's background threads (the safe points' syncer, the checkpoint rounds' thread) and
//! what wakes them: a [`Wake`] asked by writers, and a [`Worker`] that runs a thread over it
//! until the engine stops it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// What wakes a background thread before its interval is up: work asked for ([`ask`]), or the
/// end of its run ([`stop`]).
///
/// [`ask`]: Wake::ask
/// [`stop`]: Wake::stop
#[derive(Debug, Default)]
pub(crate) struct Wake {
    /// Work was asked for since the thread last woke. Writers read it without the lock, so that
    /// only the one that sets it takes the lock to wake the thread.
    asked: AtomicBool,
    /// The thread's run: it runs while this is the number it started with.
    run: Mutex<u64>,
    woken: Condvar,
}

impl Wake {
    /// The run a thread starting now belongs to.
    pub(crate) fn run(&self) -> u64 {
        *self.run.lock()
    }

    /// Asks the thread for its work soon (see [`wait`](Wake::wait)); asks before it wakes are
    /// one.
    pub(crate) fn ask(&self) {
        // Relaxed: a hint; the writer that sets the flag wakes the thread.
        if self.asked.load(Ordering::Relaxed) {
            return;
        }
        // AcqRel: one writer sets it; the thread's read in `wait` takes it.
        if !self.asked.swap(true, Ordering::AcqRel) {
            // Under the lock: the thread either has not yet looked at the flag (it will see it)
            // or waits (and is woken).
            let _run = self.run.lock();
            self.woken.notify_all();
        }
    }

    /// Ends run `run` (its thread returns from [`wait`](Wake::wait) with `false`).
    pub(crate) fn stop(&self, run: u64) {
        let mut current = self.run.lock();
        if *current == run {
            *current += 1;
        }
        self.woken.notify_all();
    }

    /// Waits until `every` has passed (never, if `None`), or work was asked for and `gap` has:
    /// `true`, the ask taken; or `false` once run `run` has ended. Called as the last piece of
    /// work ends, so asked-for work is spaced by `gap` at least.
    pub(crate) fn wait(&self, run: u64, every: Option<Duration>, gap: Duration) -> bool {
        let now = Instant::now();
        let deadline = every.map(|every| now + every);
        let soonest = now + gap;
        let mut current = self.run.lock();
        while *current == run {
            let now = Instant::now();
            // Acquire: pairs with the swap of `ask`.
            let asked = self.asked.load(Ordering::Acquire);
            if deadline.is_some_and(|d| now >= d) || (asked && now >= soonest) {
                // Release: as in `ask` (an ask after it wakes the thread again).
                self.asked.store(false, Ordering::Release);
                return true;
            }
            match if asked { Some(soonest) } else { deadline } {
                Some(until) => {
                    self.woken.wait_until(&mut current, until);
                }
                None => self.woken.wait(&mut current),
            }
        }
        false
    }
}

/// A background thread of the engine, run over a [`Wake`] until [`stop`](Worker::stop) (or
/// until it is dropped, which ends its run without waiting for it).
#[derive(Debug)]
pub(crate) struct Worker {
    wake: Arc<Wake>,
    run: u64,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread `name`, which runs `body` with the run it belongs to (to pass to
    /// [`Wake::wait`]).
    pub(crate) fn spawn(name: &str, wake: Arc<Wake>, body: impl FnOnce(&Wake, u64) + Send + 'static) -> Worker {
        let run = wake.run();
        let woken = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&woken, run))
            .unwrap_or_else(|e| panic!("a thread for {name}: {e}"));
        Worker { wake, run, thread: Some(thread) }
    }

    /// Stops the thread and waits for it to end (unless this is that thread).
    pub(crate) fn stop(mut self) {
        self.wake.stop(self.run);
        if let Some(t) = self.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.wake.stop(self.run);
    }
}
